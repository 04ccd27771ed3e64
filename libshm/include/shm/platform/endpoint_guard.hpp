/// @file
/// The guard of an endpoint (ring, channel or any handle that one thread at a
/// time may use): catches a second thread entering while another is inside.
#pragma once

#include <atomic>
#include <cstdint>

namespace shm::detail {

/// Called by the guard's scopes when they find their endpoint busy: prints
/// "libshm: <what> is used by two threads at once (or called again from inside
/// one of its own callbacks)" and aborts. Always defined in the library.
[[noreturn]] void endpoint_used_concurrently(const char* what) noexcept;

/// Guard of an endpoint (ring or channel handle): two threads using one
/// endpoint at once is a bug (readerwriterqueue's ReentrantGuard). The member,
/// the checks and the symbols are the same in every build: nothing here
/// depends on NDEBUG, so a library built with NDEBUG and an application built
/// without it agree on the handle layout and on every inline function.
///
/// One word: the identity of the thread that last entered (its thread
/// pointer, never 0 and 8-byte aligned) with bit 0 set while a Scope is inside.
///   Scope (a call that may wait or call back: a blocking wait, a drain):
///     aborts if bit 0 is set, sets it on entry and clears it on exit.
///   enter_short / leave_short (a call that does neither: try_push, try_pop):
///     no store when the calling thread is the one that entered last; it
///     aborts if a Scope is inside, takes the endpoint over (one store) when
///     another thread used it before, and on leaving aborts if another thread
///     took it over meanwhile.
/// So a thread entering while another waits or drains is caught at once (a
/// callback calling its own endpoint too), and two threads in short calls at
/// once are caught when the first one leaves. The checks are relaxed loads and
/// stores (plain moves on x86) of a word only misuse makes two threads write:
/// they catch overlapping calls, not two entries in the same few instructions.
/// Why a short call makes no store: a store per message waits in the store
/// buffer behind the ring's record line (bench/RESULTS.md, "Stores per
/// message").
class EndpointGuard {
 public:
  EndpointGuard() = default;
  EndpointGuard(EndpointGuard&&) noexcept {}
  EndpointGuard& operator=(EndpointGuard&&) noexcept { return *this; }

  class Scope {
   public:
    explicit Scope(EndpointGuard& g, const char* what = "an endpoint") noexcept : guard_(g) {
      // relaxed: the word only ever meets another thread when the handle is
      // misused; a handle handed over correctly carries happens-before with it.
      if ((guard_.state_.load(std::memory_order_relaxed) & kInside) != 0) [[unlikely]]
        endpoint_used_concurrently(what);
      guard_.state_.store(self() | kInside, std::memory_order_relaxed);
    }
    ~Scope() { guard_.state_.store(self(), std::memory_order_relaxed); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    EndpointGuard& guard_;
  };

  /// A short call: `const auto me = guard.enter_short(what);` on entry and
  /// `guard.leave_short(me, what);` before each normal return. No object and
  /// nothing to restore: a path that leaves without leave_short() (an
  /// exception) only skips a check.
  [[nodiscard, gnu::always_inline]] std::uintptr_t enter_short(const char* what) noexcept {
    const std::uintptr_t me = self();
    if (state_.load(std::memory_order_relaxed) != me) [[unlikely]]
      take_over(what);
    return me;
  }
  [[gnu::always_inline]] void leave_short(std::uintptr_t me, const char* what) const noexcept {
    if (state_.load(std::memory_order_relaxed) != me) [[unlikely]]
      endpoint_used_concurrently(what);
  }

 private:
  static constexpr std::uintptr_t kInside = 1;
  /// The calling thread's identity: its thread pointer (one register read).
  [[nodiscard]] static std::uintptr_t self() noexcept {
    return reinterpret_cast<std::uintptr_t>(__builtin_thread_pointer());
  }
  [[gnu::noinline, gnu::cold]] void take_over(const char* what) noexcept {
    if ((state_.load(std::memory_order_relaxed) & kInside) != 0) endpoint_used_concurrently(what);
    state_.store(self(), std::memory_order_relaxed);
  }

  std::atomic<std::uintptr_t> state_{0};
};

}  // namespace shm::detail
