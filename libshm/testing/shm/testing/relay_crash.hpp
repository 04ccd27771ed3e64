// Test-only: stop a relay operation in the middle of its critical section.
//
// The crash points are calls placed in the real code paths of
// libshm/src/relay/ (detail::relay_crash_point): with no hook installed each
// costs one predictable branch on a relaxed load. A test helper installs a
// hook that stops (prints a line, sleeps until it is killed -9) at the point
// it wants, with the relay's robust mutex held and an update half done; the
// test then checks that the next locker repairs (never a torn value, the
// derived state rebuilt). Not installed: only the shm_testing target (tests)
// sees libshm/testing/.
#pragma once

#include <cstdint>

namespace shm::test_hooks {

enum class RelayCrashPoint : std::uint8_t {
  MergeIntentFilling,  // write(): intent half written, not yet valid (the entry must keep the old
                       // value)
  MergeIntentValid,    // write(): intent valid, entry not touched yet (repair rolls forward)
  MergeMidValue,       // write(): half of the new value copied into the entry (torn without repair)
  MergeApplied,        // write(): entry updated, intent still valid
  AppendFilled,        // write(): a free entry filled, not published
  AppendPublished,     // write(): entry Pending, not linked, indexed or counted
  DropOldestFreed,     // write() with DropOldest: the oldest entry freed, links and counters not
  TakeMidEntries,      // take(): the first entry InHand, the rest and the counters not
  CommitMidEntries,    // commit(): the first taken entry freed, the rest and the counters not
};
inline constexpr int kRelayCrashPoints = 9;

// Called at every crash point of every relay in this process, with the
// relay's mutex held. A hook that returns lets the operation go on.
using RelayCrashHook = void (*)(RelayCrashPoint point);
void set_relay_crash_hook(RelayCrashHook hook) noexcept;

}  // namespace shm::test_hooks
