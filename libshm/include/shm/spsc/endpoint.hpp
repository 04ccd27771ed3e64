// State shared by RingProducer and RingConsumer: the segment they keep mapped,
// their attachment, and the validated geometry of the ring.
#pragma once

#include "shm/platform/endpoint_guard.hpp"
#include "shm/segment/segment.hpp"
#include "shm/spsc/layout.hpp"

#include <atomic>
#include <cassert>
#include <cstdint>
#include <string>

namespace shm::detail {

[[nodiscard]] std::string too_large_message(std::size_t n, std::uint64_t max_payload);

class RingEndpoint {
 public:
  [[nodiscard]] const Segment& segment() const noexcept { return segment_; }
  [[nodiscard]] const Attachment& attachment() const noexcept { return attachment_; }
  [[nodiscard]] std::uint64_t capacity() const noexcept { return capacity_; }
  [[nodiscard]] std::uint64_t max_payload() const noexcept { return max_payload_; }
  // Refreshes this endpoint's heartbeat in the attachment table (no syscall).
  void heartbeat() noexcept { attachment_.heartbeat(); }

 protected:
  RingEndpoint() = default;
  RingEndpoint(RingEndpoint&&) noexcept = default;
  // Detaches before the old mapping goes away (the attachment writes into it);
  // a defaulted move assignment would unmap first, in member order.
  RingEndpoint& operator=(RingEndpoint&& other) noexcept;
  ~RingEndpoint() = default;
  [[nodiscard]] static Result<void> bind(RingEndpoint& e, Segment segment, const RoleSpec& role);

  [[nodiscard]] std::byte* at(std::uint64_t pos) const noexcept { return buffer_ + (pos & mask_); }

  Segment segment_;
  Attachment attachment_;
  ring::RingControl* control_ = nullptr;
  std::byte* buffer_ = nullptr;
  std::uint64_t capacity_ = 0;
  std::uint64_t mask_ = 0;
  std::uint64_t max_payload_ = 0;
  EndpointGuard guard_;
};

inline RingEndpoint& RingEndpoint::operator=(RingEndpoint&& other) noexcept {
  if (this != &other) {
    attachment_.detach();
    attachment_ = std::move(other.attachment_);
    segment_ = std::move(other.segment_);
    control_ = other.control_;
    buffer_ = other.buffer_;
    capacity_ = other.capacity_;
    mask_ = other.mask_;
    max_payload_ = other.max_payload_;
    guard_ = std::move(other.guard_);
  }
  return *this;
}

}  // namespace shm::detail
