// Test-only: stop a ledger operation in the middle of its critical section.
//
// The crash points are calls placed in the real code paths of
// libshm/src/ledger/ledger.cpp and libshm/src/ledger/internal.hpp (detail::ledger_crash_point):
// with no hook installed each costs one predictable branch on a relaxed load.
// A test helper installs a hook that stops (prints a line, sleeps until it is
// killed -9) at the point it wants, with the ledger's robust mutex held and a
// multi-word mutation half done; the test then checks that the next locker
// repairs. Not installed: only the shm_testing target (tests) sees
// libshm/testing/.
#pragma once

#include <cstdint>

namespace shm::test_hooks {

enum class LedgerCrashPoint : std::uint8_t {
  ReserveAfterTicketPublished,  // reserve(): ticket live, no counter updated
  ReserveMidCounters,           // reserve(): global and partition charged, category and pool not
  CommitMidCounters,            // commit(): ticket committed, global moved, the rest not
  ReleaseAfterTicketFreed,      // release() (and reclaim): ticket free, counters still charged
  ReplaceMidTicket,   // replace(): journal written, ticket moved to the new pool, bytes not changed
  AdmitMidBuckets,    // admit(): journal written, first bucket debited, the rest not
  SetBurstMidBucket,  // the kind's set("bucket.<label>.burst"): level clamped, burst not yet stored
  OrphanEmptiedBeforeClose,  // release(): the last ticket of an orphaned pool freed, pool still
                             // open
  OfferBeforePublish,        // offer(): target written, `offered` not yet set
  HandOverMidOwner,          // accept() (and a departing owner's hand-over): journal written, owner
                             // slot changed, owner generation and offer not
  SetRateMidSettle,  // the kind's set("bucket.<label>.rate"): journal written, tokens settled,
                     // fraction and refill time not
};

// Called at every crash point of every ledger in this process, with the
// ledger's mutex held. A hook that returns lets the operation go on.
using LedgerCrashHook = void (*)(LedgerCrashPoint point);

// Installs `hook` for the whole process (nullptr removes it). Install it
// before the operations it should see start, from the thread that runs them
// or before that thread starts.
void set_ledger_crash_hook(LedgerCrashHook hook) noexcept;

}  // namespace shm::test_hooks
