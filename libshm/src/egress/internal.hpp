// Private helpers shared by the egress sources (core.cpp, egress.cpp, kind.cpp).
#pragma once

#include "platform/store_crash.hpp"
#include "shm/egress/core.hpp"
#include "shm/testing/egress_crash.hpp"  // EgressCrashPoint (libshm/testing, not installed)

#include <atomic>
#include <cstdint>
#include <string_view>
#include <utility>

namespace shm::detail {

// The test-only crash hook; null unless a test installed one. Defined in core.cpp.
extern std::atomic<test_hooks::EgressCrashHook> egress_crash_hook;

inline void egress_crash_point(test_hooks::EgressCrashPoint point) noexcept {
  // relaxed: the hook is installed before the operations it watches start.
  if (const auto hook = egress_crash_hook.load(std::memory_order_relaxed)) [[unlikely]] {
    // A SIGKILL lands between instructions: keep the compiler from moving
    // stores across the crash point.
    std::atomic_signal_fence(std::memory_order_seq_cst);
    hook(point);
  }
}

}  // namespace shm::detail

namespace shm::egress::internal {

// Shared fields are written only by the holder of the egress mutex (relaxed:
// the mutex orders them between holders) and read by unlocked observers
// framed by the seqlock ([egress.V1]/[egress.V2] below, [egress.V1']/[egress.V2']
// in read_projection()).
template <class T>
[[nodiscard]] inline T ld(const std::atomic<T>& a) noexcept {
  return a.load(std::memory_order_relaxed);  // under the mutex, or seqlock-framed (see above)
}
template <class T, class U>
inline void st(std::atomic<T>& a, U v) noexcept {
  ::shm::detail::store_crash_tick();  // test-only kill at the Nth store (platform/store_crash.hpp)
  a.store(static_cast<T>(v), std::memory_order_relaxed);  // under the mutex (see above)
}

inline void begin_write(Control& c) noexcept {
  st(c.lock.version, ld(c.lock.version) | 1u);
  // [egress.V1] release fence: the odd version is visible before any data store
  // below; pairs with the reader's acquire fence [egress.V1'].
  std::atomic_thread_fence(std::memory_order_release);
}
inline void end_write(Control& c) noexcept {
  // [egress.V2] release: every data store above is visible before the even
  // version; pairs with the reader's acquire load [egress.V2'].
  c.lock.version.store(ld(c.lock.version) + 1, std::memory_order_release);
}

// A consistent projection read without the lock (seqlock retries, bounded):
// nullopt when writers kept it busy throughout.
[[nodiscard]] std::optional<Projection> read_projection(const State& s, bool with_records);

// Under the lock: counts a dead transport; returns (generation, records in flight).
[[nodiscard]] Result<std::pair<std::uint64_t, std::uint64_t>> record_transport_death(
    const State& s, std::string_view path);

}  // namespace shm::egress::internal
