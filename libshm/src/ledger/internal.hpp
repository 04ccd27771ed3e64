// Private helpers shared by the ledger's sources (ledger.cpp, accounting.cpp,
// repair.cpp, view.cpp, kind.cpp).
#pragma once

#include "platform/store_crash.hpp"
#include "shm/ledger/ledger.hpp"
#include "shm/testing/ledger_crash.hpp"  // LedgerCrashPoint (libshm/testing, not installed)

#include "format/format.hpp"

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shm::detail {

// The test-only crash hook (shm/testing/ledger_crash.hpp); null unless a test
// installed one. Defined in ledger.cpp.
extern std::atomic<test_hooks::LedgerCrashHook> ledger_crash_hook;

// A crash point in a real ledger code path. With no hook installed the cost is
// one relaxed load and a never-taken branch; ledger operations are multi-word
// updates under a process-shared mutex, so that is lost in the noise.
inline void ledger_crash_point(test_hooks::LedgerCrashPoint point) noexcept {
  // relaxed: the hook is installed before the operations it watches start.
  if (const auto hook = ledger_crash_hook.load(std::memory_order_relaxed)) [[unlikely]]
    hook(point);
}

}  // namespace shm::detail

namespace shm::ledger::internal {

// Shared fields are touched in two ways:
//  - by the holder of the ledger mutex, with relaxed loads and stores: the
//    mutex's lock (acquire) / unlock (release) orders them between holders, so
//    no read-modify-write instruction is needed;
//  - by unlocked readers (shmctl, metrics, verify), with relaxed loads framed by
//    the seqlock `version` ([ledger.V1]/[ledger.V2] in begin_write/end_write,
//    [ledger.V1']/[ledger.V2'] in verify_unlocked) or acquire loads of a publishing word.
template <class T>
[[nodiscard]] inline T ld(const std::atomic<T>& a) noexcept {
  return a.load(std::memory_order_relaxed);  // under the mutex, or seqlock-framed (see above)
}
template <class T, class U>
inline void st(std::atomic<T>& a, U v) noexcept {
  ::shm::detail::store_crash_tick();  // test-only kill at the Nth store (platform/store_crash.hpp)
  a.store(static_cast<T>(v), std::memory_order_relaxed);  // under the mutex (see above)
}
inline void bump(std::atomic<std::uint64_t>& a, std::uint64_t by = 1) noexcept {
  st(a, ld(a) + by);
}

inline void begin_write(LedgerControl& c) noexcept {
  // Odd while mutating. From an odd value (a holder died inside) it stays odd.
  st(c.lock.version, ld(c.lock.version) | 1u);
  // [ledger.V1] release fence: the odd version is visible before any data store below;
  // pairs with the reader's acquire fence [ledger.V1'] in verify_unlocked().
  std::atomic_thread_fence(std::memory_order_release);
}
inline void end_write(LedgerControl& c) noexcept {
  // [ledger.V2] release: every data store above is visible before the even version;
  // pairs with the reader's acquire load [ledger.V2'] in verify_unlocked().
  c.lock.version.store(ld(c.lock.version) + 1, std::memory_order_release);
}

// Holds the (already locked) ledger mutex; ends a write section if one was
// begun, then unlocks.
class Held {
 public:
  explicit Held(LedgerControl& c) noexcept : c_(c) {}
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;
  ~Held() {
    if (writing_) end_write(c_);
    c_.lock.mutex.unlock();
  }
  void write() noexcept {
    if (!writing_) {
      begin_write(c_);
      writing_ = true;
    }
  }

 private:
  LedgerControl& c_;
  bool writing_ = false;
};

// Locks the ledger mutex. If its holder died inside, repairs (journal, derived
// counters) and marks it consistent. Fails (mutex released) when the ledger is
// faulted or the mutex unusable. On success the caller owns the mutex.
[[nodiscard]] Result<void> lock_slow(const View& v, std::string_view path, detail::LockResult r);
[[nodiscard]] inline Result<void> lock(const View& v, std::string_view path) {
  LedgerControl& c = *v.control;
  const detail::LockResult r = c.lock.mutex.lock();
  if (r == detail::LockResult::Acquired && ld(c.lock.faulted) == 0) [[likely]]
    return {};
  return lock_slow(v, path, r);
}

// Labels.
[[nodiscard]] Result<void> validate_label(std::string_view what, std::string_view label);
void write_label(Label& label, std::string_view text) noexcept;
[[nodiscard]] bool label_equals(const Label& label, std::string_view text) noexcept;

// The pool account charged for `category`: its index, -1 when none covers it,
// -2 when the pool's account count is damaged.
[[nodiscard]] inline int find_account(const Pool& pool, std::uint32_t category) noexcept {
  const std::uint32_t n = ld(pool.account_count);
  if (n > kPoolAccounts) return -2;
  const std::uint64_t bit = std::uint64_t{1} << category;
  for (std::uint32_t i = 0; i < n; ++i)
    if ((ld(pool.accounts[i].categories) & bit) != 0) return static_cast<int>(i);
  return -1;
}

// The accounts a live ticket is charged to, checked against the tables.
struct Charge {
  Account* global = nullptr;
  Account* partition = nullptr;
  Account* category = nullptr;
  Account* pool_account = nullptr;
  Pool* pool = nullptr;
  std::int64_t bytes = 0;
  bool reserved = false;  // state Reserved (else Committed)
};
// Resolves ticket `index` (which must be live) to its accounts; Corrupt when
// a field points outside the tables or at a closed pool.
[[nodiscard]] Result<Charge> resolve(const View& v, std::uint32_t index, std::string_view path);
// Corrupt when removing the charge would drive a counter negative.
[[nodiscard]] Result<void> check_uncharge(const View& v, const Charge& c, std::string_view path);
inline void charge(Account& a, std::int64_t bytes, bool reserved) noexcept {
  st(a.used, ld(a.used) + bytes);
  if (reserved) st(a.reserved, ld(a.reserved) + bytes);
  bump(a.tickets);
}
inline void uncharge(Account& a, std::int64_t bytes, bool reserved) noexcept {
  st(a.used, ld(a.used) - bytes);
  if (reserved) st(a.reserved, ld(a.reserved) - bytes);
  st(a.tickets, ld(a.tickets) - 1);
}

// Allocation-free forms of resolve() / check_uncharge() for the hot paths:
// false means damaged, and the caller then asks the Result form for the message.
[[nodiscard]] inline bool resolve_fast(const View& v, std::uint32_t index, Charge& out) noexcept {
  const TicketSlot& t = v.tickets[index];
  LedgerControl& c = *v.control;
  const std::uint32_t state = ld(t.state);
  if (state != static_cast<std::uint32_t>(TicketState::Reserved) &&
      state != static_cast<std::uint32_t>(TicketState::Committed))
    return false;
  const std::uint32_t cc = ld(c.lock.category_count);
  const std::uint32_t cat = ld(t.category);
  if (cc > v.params.max_categories || cat >= cc) return false;
  Category& category = v.categories[cat];
  const std::uint32_t part = ld(category.partition);
  const std::uint32_t pool = ld(t.pool);
  if (part >= kPartitions || pool >= v.params.max_pools) return false;
  Pool& p = v.pools[pool];
  if (ld(p.state) != static_cast<std::uint32_t>(PoolStatus::Open) ||
      ld(p.generation) != ld(t.pool_generation))
    return false;
  const int a = find_account(p, cat);
  const std::int64_t bytes = ld(t.bytes);
  if (a < 0 || bytes < 0) return false;
  out.global = &c.global;
  out.partition = &c.partitions[part];
  out.category = &category.account;
  out.pool_account = &p.accounts[a].account;
  out.pool = &p;
  out.bytes = bytes;
  out.reserved = state == static_cast<std::uint32_t>(TicketState::Reserved);
  return true;
}
[[nodiscard]] inline bool can_uncharge(const View& v, const Charge& ch) noexcept {
  const Account* accounts[] = {ch.global, ch.partition, ch.category, ch.pool_account};
  for (const Account* a : accounts)
    if (ld(a->used) < ch.bytes || ld(a->tickets) < 1 || (ch.reserved && ld(a->reserved) < ch.bytes))
      return false;
  const LedgerControl& c = *v.control;
  return ld(ch.pool->tickets) >= 1 && ld(c.lock.live_tickets) >= 1 &&
         ld(c.lock.free_top) < v.params.max_tickets;
}

// Closes an open pool. Caller holds the mutex inside a write section.
inline void close_pool_held(LedgerControl& c, Pool& p) noexcept {
  // [ledger.P2] release: pairs with the acquire [ledger.P'] of unlocked readers.
  p.state.store(static_cast<std::uint32_t>(PoolStatus::Free), std::memory_order_release);
  st(c.lock.open_pools, ld(c.lock.open_pools) - 1);
}
// An orphaned pool closes with its last ticket: called after a ticket left `p`.
inline void close_if_orphan_emptied(LedgerControl& c, Pool& p) noexcept {
  if (ld(p.tickets) != 0 || ld(p.owner_slot) != kOrphanedPool) [[likely]]
    return;
  detail::ledger_crash_point(test_hooks::LedgerCrashPoint::OrphanEmptiedBeforeClose);
  close_pool_held(c, p);
}

// Frees a resolved live ticket: state first (crash order), then counters, then
// the free stack, then (the last ticket of an orphaned pool) the pool. Caller
// holds the mutex inside a write section.
inline void free_ticket(const View& v, std::uint32_t index, const Charge& ch) noexcept {
  LedgerControl& c = *v.control;
  // [ledger.F] release: crash order — the ticket is free before any counter moves, so
  // a holder killed below leaves counters that repair() recomputes from tickets.
  v.tickets[index].state.store(static_cast<std::uint32_t>(TicketState::Free),
                               std::memory_order_release);
  detail::ledger_crash_point(test_hooks::LedgerCrashPoint::ReleaseAfterTicketFreed);
  uncharge(*ch.global, ch.bytes, ch.reserved);
  uncharge(*ch.partition, ch.bytes, ch.reserved);
  uncharge(*ch.category, ch.bytes, ch.reserved);
  uncharge(*ch.pool_account, ch.bytes, ch.reserved);
  st(ch.pool->tickets, ld(ch.pool->tickets) - 1);
  st(c.lock.live_tickets, ld(c.lock.live_tickets) - 1);
  const std::uint32_t top = ld(c.lock.free_top);
  st(v.free_stack[top], index);
  st(c.lock.free_top, top + 1);
  close_if_orphan_emptied(c, *ch.pool);
}

// Recomputation of derived state from the tickets.
struct Sum {
  std::int64_t used = 0;
  std::int64_t reserved = 0;
  std::uint64_t tickets = 0;
};
struct OwnerSum {
  Owner owner;
  std::uint64_t tickets = 0;
  std::int64_t bytes = 0;
};
struct Tally {
  Sum global;
  Sum partitions[kPartitions];
  std::vector<Sum> categories;     // max_categories
  std::vector<Sum> pool_accounts;  // max_pools * kPoolAccounts
  std::vector<std::uint64_t> pool_tickets;
  std::uint64_t live = 0;
  std::uint64_t open_pools = 0;
  std::vector<std::uint32_t> free;  // ascending
  std::vector<OwnerSum> owners;
  std::vector<std::string> problems;  // tickets or tables that cannot be trusted
};
[[nodiscard]] Tally tally(const View& v);
// Compares stored derived counters (and other invariants) with a tally.
void compare(const View& v, const Tally& t, std::vector<std::string>& out);
// Tally + compare + owners of live tickets that are gone (caller holds the
// mutex, or frames the call with the seqlock).
[[nodiscard]] std::vector<std::string> verify_tables(const View& v,
                                                     std::span<const SlotInfo> slots);
// Under the mutex after EOWNERDEAD: restores the journal, recomputes every
// derived counter. Returns the damage found (then the ledger is faulted).
[[nodiscard]] std::vector<std::string> repair(const View& v);
// Writes the tally's sums into the derived counters and rebuilds the free stack.
void store_derived(const View& v, const Tally& t) noexcept;

// Moves ticket `index` to owner `to` and clears its offer, through the undo
// journal (op HandOver): a holder killed inside leaves the old owner and offer,
// restored by repair. Caller holds the mutex inside a write section.
void hand_over(const View& v, std::uint32_t index, Owner to) noexcept;

// Releases every live ticket whose owner matches. Exact: owner (slot,
// generation); Predecessors: same slot, any other generation (earlier holders
// of a slot we now hold). Takes the lock.
//   Keep:  the owner stays (release_all): every owned ticket is released.
//   Leave: the owner is gone or going (detach, reclaim, the sweep of a slot):
//          a ticket it offered to a live attachment is handed over to that
//          attachment instead of released; offers made to it are void; its
//          pools close, or are orphaned while other owners hold tickets there.
// `segment` tells which offer targets are live attachments.
enum class Match : std::uint8_t { Exact, Predecessors };
enum class Departure : std::uint8_t { Keep, Leave };
[[nodiscard]] Result<ReclaimReport> release_owned(const View& v, const Segment& segment,
                                                  Owner owner, Match match, Departure departure,
                                                  bool count_as_reclaim);

inline constexpr auto kPoolOpen = static_cast<std::uint32_t>(PoolStatus::Open);
inline constexpr auto kTicketFree = static_cast<std::uint32_t>(TicketState::Free);
inline constexpr auto kTicketReserved = static_cast<std::uint32_t>(TicketState::Reserved);
inline constexpr auto kTicketCommitted = static_cast<std::uint32_t>(TicketState::Committed);

// Corrupt: "<path>: <what>".
[[nodiscard]] std::unexpected<Error> corrupt(std::string_view path, std::string what);
// A caller-supplied pool handle that names an open pool, or why not.
[[nodiscard]] inline Result<Pool*> open_pool_at(const View& v, PoolId id, std::string_view op) {
  Pool& p = v.pools[id.index];
  if (ld(p.state) != kPoolOpen || ld(p.generation) != id.generation) [[unlikely]]
    return fail(
        Errc::InvalidArgument,
        shm::detail::format("{}: pool {}#{} is not open (closed, or reopened as generation {})", op,
                            id.index, id.generation, ld(p.generation)));
  return &p;
}

// ForeignHandle: a pool or ticket handle stamped with another segment
// incarnation (another ledger, or an earlier ledger of the same name).
[[nodiscard]] std::unexpected<Error> foreign_handle(const View& v, std::string_view path,
                                                    std::string_view op, std::string_view what,
                                                    std::uint32_t index, std::uint32_t generation,
                                                    std::uint64_t ledger);
[[nodiscard]] inline std::unexpected<Error> foreign(const View& v, std::string_view path,
                                                    std::string_view op, Ticket t) {
  return foreign_handle(v, path, op, "ticket", t.index, t.generation, t.ledger);
}
[[nodiscard]] inline std::unexpected<Error> foreign(const View& v, std::string_view path,
                                                    std::string_view op, PoolId p) {
  return foreign_handle(v, path, op, "pool", p.index, p.generation, p.ledger);
}

// Points a view at a data area laid out for `params` (no checks: callers
// validated the block and the size).
[[nodiscard]] View view_over(const ParamBlock& params, std::byte* data) noexcept;

}  // namespace shm::ledger::internal
