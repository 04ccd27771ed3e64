// Test-only: stop an egress operation in the middle of its critical section.
//
// The crash points are calls placed in the real code paths of
// libshm/src/egress/core.cpp (detail::egress_crash_point): with no hook
// installed each costs one predictable branch on a relaxed load. A test helper
// installs a hook that stops (prints a line, sleeps until it is killed -9) at
// the point it wants, with the egress mutex held and an operation half done;
// the test then checks that the next locker finds the state before or after
// that operation. Not installed: only the shm_testing target sees it.
#pragma once

#include <cstdint>

namespace shm::test_hooks {

enum class EgressCrashPoint : std::uint8_t {
  EnqueueAfterRecord,   // enqueue(): record pending, next_sequence not advanced
  ClaimMidRecord,       // claim(): attempt incremented, still pending
  FailMidRecord,        // fail(): backoff and due stored, still in flight
  AckMidPrune,          // ack(): watermark stored, first record removed, the rest not
  RetryDueMidSchedule,  // retry_due(): first parked record scheduled, the rest not
  ReconnectMidReplay,   // reconnect(): generation stored, first record replayed, the rest not
};

using EgressCrashHook = void (*)(EgressCrashPoint point);

// Installs `hook` for the whole process (nullptr removes it), before the
// operations it should see start.
void set_egress_crash_hook(EgressCrashHook hook) noexcept;

}  // namespace shm::test_hooks
