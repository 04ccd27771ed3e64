// State shared by RingProducer and RingConsumer: the segment they keep mapped,
// their attachment, and the validated geometry of the ring.
#pragma once

#include "shm/segment/segment.hpp"
#include "shm/spsc/layout.hpp"

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

// Called by EndpointGuard::Scope when it finds its endpoint busy: prints
// "libshm: <what> is used by two threads at once" and aborts. Always defined
// in the library.
[[noreturn]] void endpoint_used_concurrently(const char* what) noexcept;

// Guard of an endpoint (ring or channel handle): two threads using one
// endpoint at once is a bug (readerwriterqueue's ReentrantGuard). The member,
// the check and the symbols are the same in every build: nothing here depends
// on NDEBUG, so a library built with NDEBUG and an application built without
// it agree on the handle layout and on every inline function. The check is
// one relaxed load and two relaxed stores (plain moves on x86) to a byte that
// only the endpoint's current thread writes: it catches a thread that enters
// while another one is inside (blocked in a wait included), not two entries
// in the same few instructions.
class EndpointGuard {
 public:
  EndpointGuard() = default;
  EndpointGuard(EndpointGuard&&) noexcept {}
  EndpointGuard& operator=(EndpointGuard&&) noexcept { return *this; }

  class Scope {
   public:
    explicit Scope(EndpointGuard& g, const char* what = "an endpoint") noexcept : guard_(g) {
      // relaxed: the flag only ever meets another thread when the handle is
      // misused; a handle handed over correctly carries happens-before with it.
      if (guard_.busy_.load(std::memory_order_relaxed)) [[unlikely]]
        endpoint_used_concurrently(what);
      guard_.busy_.store(true, std::memory_order_relaxed);
    }
    ~Scope() { guard_.busy_.store(false, std::memory_order_relaxed); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    EndpointGuard& guard_;
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
