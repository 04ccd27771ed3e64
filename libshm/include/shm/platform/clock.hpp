#pragma once

#include <cstdint>

namespace shm {

// CLOCK_MONOTONIC in nanoseconds: heartbeats, timeouts, attach times.
[[nodiscard]] std::uint64_t monotonic_ns() noexcept;
// CLOCK_MONOTONIC_COARSE in nanoseconds: the monotonic clock as of the
// kernel's last tick (1-4 ms of resolution, never ahead of monotonic_ns()).
// For times only shown, where monotonic_ns() would be a hot path's largest
// cost: on a VM whose clocksource is kvm-clock, monotonic_ns() costs 50-70
// ns, this 8.
[[nodiscard]] std::uint64_t coarse_monotonic_ns() noexcept;
// CLOCK_REALTIME in nanoseconds since the epoch: creation times shown to people.
[[nodiscard]] std::uint64_t realtime_ns() noexcept;

}  // namespace shm
