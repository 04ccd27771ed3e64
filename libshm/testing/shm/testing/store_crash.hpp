// Test-only: kill this process at the Nth store to shared memory.
//
// The egress, relay and ledger write every field of their mapping through one
// helper each (`st` in their internal.hpp); that helper calls
// detail::store_crash_tick() before the store. With the countdown armed at N,
// the Nth tick raises SIGKILL, so stores 1 .. N-1 happened and store N did
// not: a test that arms N = 1, 2, ... in forked children until one completes
// kills an operation at every store it makes, without naming the points by
// hand. Disarmed (the default), a tick is one relaxed load and a branch.
// Not installed: only the shm_testing target (tests) sees libshm/testing/.
#pragma once

#include <cstdint>

namespace shm::test_hooks {

// The next `n`th store (n >= 1) kills the process; 0 disarms.
void arm_store_crash(std::uint64_t n) noexcept;
// Stores still allowed before the kill (0: disarmed).
[[nodiscard]] std::uint64_t store_crash_remaining() noexcept;

}  // namespace shm::test_hooks
