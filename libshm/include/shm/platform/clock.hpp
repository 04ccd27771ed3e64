#pragma once

#include <cstdint>

namespace shm {

// CLOCK_MONOTONIC in nanoseconds: heartbeats, timeouts, attach times.
[[nodiscard]] std::uint64_t monotonic_ns() noexcept;
// CLOCK_REALTIME in nanoseconds since the epoch: creation times shown to people.
[[nodiscard]] std::uint64_t realtime_ns() noexcept;

}  // namespace shm
