/// @file
/// Clocks in nanoseconds, and shm::forever, the timeout that never expires.
#pragma once

#include <chrono>
#include <cstdint>

namespace shm {

/// CLOCK_MONOTONIC in nanoseconds: heartbeats, timeouts, attach times.
[[nodiscard]] std::uint64_t monotonic_ns() noexcept;
/// CLOCK_MONOTONIC_COARSE in nanoseconds: the monotonic clock as of the
/// kernel's last tick (1-4 ms of resolution, never ahead of monotonic_ns()).
/// For times only shown, where monotonic_ns() would be a hot path's largest
/// cost: on a VM whose clocksource is kvm-clock, monotonic_ns() costs 50-70
/// ns, this 8.
[[nodiscard]] std::uint64_t coarse_monotonic_ns() noexcept;
/// CLOCK_REALTIME in nanoseconds since the epoch: creation times shown to people.
[[nodiscard]] std::uint64_t realtime_ns() noexcept;

/// The timeout of a blocking call that waits until its condition holds (or the
/// peer dies, or the structure faults): `ring.push(bytes, shm::forever)`.
/// Every blocking call takes its timeout explicitly; none waits forever by
/// default, and any timeout too long for the clock counts as forever.
inline constexpr std::chrono::nanoseconds forever = std::chrono::nanoseconds::max();

namespace detail {
/// now + timeout, saturated at the clock's end: `now() + forever` would
/// overflow (undefined, and in practice a deadline in the past, so "forever"
/// timed out at once).
[[nodiscard]] inline std::chrono::steady_clock::time_point deadline_after(
    std::chrono::nanoseconds timeout) noexcept {
  using clock = std::chrono::steady_clock;
  const clock::time_point now = clock::now();
  if (timeout <= std::chrono::nanoseconds::zero()) return now;
  if (timeout >= clock::time_point::max() - now) return clock::time_point::max();
  return now + std::chrono::duration_cast<clock::duration>(timeout);
}
}  // namespace detail

}  // namespace shm
