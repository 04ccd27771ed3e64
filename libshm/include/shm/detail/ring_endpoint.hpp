// State shared by RingProducer and RingConsumer: the segment they keep mapped,
// their attachment, and the validated geometry of the ring.
#pragma once

#include "shm/segment.hpp"
#include "shm/spsc_ring.hpp"

#include <atomic>
#include <cstdint>
#include <string>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace shm::detail {

inline void cpu_relax() noexcept {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

[[nodiscard]] std::string too_large_message(std::size_t n, std::uint64_t max_payload);

// Debug-only guard: two threads using one SPSC endpoint at once is a bug.
class EndpointGuard {
 public:
#ifndef NDEBUG
  void enter() noexcept;
  void leave() noexcept { busy_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> busy_{false};
#else
  void enter() noexcept {}
  void leave() noexcept {}
#endif
};

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

}  // namespace shm::detail
