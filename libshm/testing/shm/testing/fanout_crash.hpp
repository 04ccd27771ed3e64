// Test-only: stop a PriorityFanout submit between its two steps.
//
// The crash point is a call placed in the real submit paths of
// libshm/include/shm/fanout/priority_fanout.hpp (PriorityFanout::submit, try
// and blocking): with no hook installed it costs one predictable branch on a
// relaxed load. A test helper installs a hook that stops (prints a line,
// sleeps until it is killed -9) at the point it wants; the test then checks
// what the fanout's reclaim and its drainers make of what was left. Not
// installed: only the shm_testing target (tests) sees libshm/testing/.
#pragma once

#include <cstdint>

namespace shm::test_hooks {

enum class FanoutCrashPoint : std::uint8_t {
  SubmitAfterRingCommit,  // submit(): the item is published in its ring, the bitmap bit not set
};

// Called at every crash point of every fanout handle in this process. A hook
// that returns lets the operation go on.
using FanoutCrashHook = void (*)(FanoutCrashPoint point);

// Installs `hook` for the whole process (nullptr removes it). Install it
// before the operations it should see start.
void set_fanout_crash_hook(FanoutCrashHook hook) noexcept;

}  // namespace shm::test_hooks
