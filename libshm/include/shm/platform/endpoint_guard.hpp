// The guard of an endpoint (ring, channel or any handle that one thread at a
// time may use): catches a second thread entering while another is inside.
#pragma once

#include <atomic>

namespace shm::detail {

// Called by EndpointGuard::Scope when it finds its endpoint busy: prints
// "libshm: <what> is used by two threads at once (or called again from inside
// one of its own callbacks)" and aborts. Always defined in the library.
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

}  // namespace shm::detail
