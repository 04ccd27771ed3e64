// State shared by RingProducer and RingConsumer: the segment they keep mapped,
// their attachment, and the validated geometry of the ring.
#pragma once

#include "shm/segment.hpp"
#include "shm/spsc_ring.hpp"

#include <atomic>
#include <cassert>
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

// Debug-only guard: two threads using one SPSC endpoint at once is a bug
// (readerwriterqueue's ReentrantGuard). The member exists in every build so
// the handle layout does not depend on NDEBUG (a library built with NDEBUG
// and an application built without it must agree); only the check is
// compiled out.
class EndpointGuard {
 public:
  EndpointGuard() = default;
  EndpointGuard(EndpointGuard&&) noexcept {}
  EndpointGuard& operator=(EndpointGuard&&) noexcept { return *this; }

  class Scope {
   public:
    explicit Scope([[maybe_unused]] EndpointGuard& g) noexcept
#ifndef NDEBUG
        : guard_(g) {
      const bool was_busy = guard_.busy_.exchange(true, std::memory_order_acquire);
      assert(!was_busy && "an SPSC endpoint is used by two threads at once");
      (void)was_busy;
    }
    ~Scope() { guard_.busy_.store(false, std::memory_order_release); }

   private:
    EndpointGuard& guard_;
#else
    {
    }
#endif
   public:
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
  };

 private:
  std::atomic<bool> busy_{false};
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
