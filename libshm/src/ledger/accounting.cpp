// The Ledger handle's accounting: reserve, commit, release, replace (bytes
// against pools, categories and partitions) and admit (token buckets).
#include "internal.hpp"

#include "format/format.hpp"

#include <cassert>
#include <cstdlib>
#include <utility>

namespace shm {

using namespace ledger;
using namespace ledger::internal;
using CrashPoint = test_hooks::LedgerCrashPoint;

namespace {

Rejection make_rejection(LedgerScope scope, std::string_view a, std::string_view b,
                         std::int64_t used, std::int64_t requested, std::int64_t limit) {
  Rejection r;
  r.scope = scope;
  r.used = used;
  r.requested = requested;
  r.limit = limit;
  std::size_t n = 0;
  auto put = [&](std::string_view s) {
    for (char ch : s)
      if (n < r.label_bytes.size() - 1) r.label_bytes[n++] = ch;
  };
  put(a);
  if (!b.empty()) {
    put("/");
    put(b);
  }
  r.label_size = static_cast<std::uint8_t>(n);
  return r;
}

// Counts a refusal at its scope (and on the refusing account, when there is one).
void count_rejection(LedgerControl& c, LedgerScope scope,
                     std::atomic<std::uint64_t>* account) noexcept {
  bump(c.stats.rejections[static_cast<std::size_t>(scope)]);
  if (account != nullptr) bump(*account);
}

// A live ticket of this handle's, or why not (counted as a refused release).
Result<void> check_ticket(const View& v, std::string_view op, Ticket tk, Owner self) {
  LedgerControl& c = *v.control;
  const TicketSlot& t = v.tickets[tk.index];
  const std::uint32_t state = ld(t.state);
  const std::uint32_t gen = ld(t.generation);
  if (state == kTicketFree || gen != tk.generation) {
    bump(c.stats.refused_releases);
    if (state == kTicketFree && gen == tk.generation)
      return fail(Errc::InvalidArgument,
                  shm::detail::format("{}: ticket {}#{} was already released", op, tk.index,
                                      tk.generation));
    return fail(Errc::InvalidArgument,
                shm::detail::format(
                    "{}: ticket {}#{} is stale: its slot was reused and is now generation {} ({})",
                    op, tk.index, tk.generation, gen, state == kTicketFree ? "free" : "live"));
  }
  const Owner owner{ld(t.owner_slot), ld(t.owner_generation)};
  if (owner != self) {
    bump(c.stats.refused_releases);
    return fail(
        Errc::PermissionDenied,
        shm::detail::format(
            "{}: ticket {}#{} belongs to attachment slot {} generation {}; this handle is "
            "slot {} generation {}",
            op, tk.index, tk.generation, owner.slot, owner.generation, self.slot, self.generation));
  }
  return {};
}

// Room left in an account, or Corrupt when its counters are impossible.
Result<std::int64_t> room(const Account& a, std::string_view path, std::string_view what) {
  const std::int64_t used = ld(a.used), limit = ld(a.limit);
  if (used < 0 || used > limit) [[unlikely]]
    return corrupt(path, shm::detail::format("{} account: used {} is outside [0, limit {}]", what,
                                             used, limit));
  return limit - used;
}

// The pool account that `category` is charged to in `pool`.
Result<PoolAccount*> pool_account(const View& v, Pool& p, std::uint32_t category,
                                  std::string_view path) {
  const int a = find_account(p, category);
  if (a == -1) [[unlikely]]
    return fail(Errc::InvalidArgument,
                shm::detail::format("pool '{}' has no account for category '{}'",
                                    read_label(p.label), read_label(v.categories[category].label)));
  if (a < 0) [[unlikely]]
    return corrupt(path,
                   shm::detail::format("pool '{}' has {} accounts (limit {})", read_label(p.label),
                                       ld(p.account_count), kPoolAccounts));
  return &p.accounts[a];
}

// A live ticket owned by `self` under this handle's generation (the hot check;
// check_ticket() explains a failure).
[[nodiscard]] inline bool owned_live(const TicketSlot& t, Ticket tk, Owner self) noexcept {
  return ld(t.state) != kTicketFree && ld(t.generation) == tk.generation &&
         ld(t.owner_slot) == self.slot && ld(t.owner_generation) == self.generation;
}

[[gnu::cold]] std::unexpected<Error> ticket_range_error(std::string_view op, Ticket tk,
                                                        const View& v) {
  return fail(Errc::InvalidArgument,
              shm::detail::format("{}: ticket index {} is outside the table of {}", op, tk.index,
                                  v.params.max_tickets));
}

// The prologue that commit, release, offer, withdraw and accept share, in
// this order so each reports the first thing wrong the same way: the ticket
// is this ledger's and inside its table, then `check()` (the call's own
// argument checks, before any lock), then the mutex is taken (repairing after
// a dead holder). With `owned`, the ticket must also be live and held by
// `self` (check_ticket() explains a refusal). Then `body(held, slot)` runs
// under the lock; the lock is released when it returns.
enum class Ownership : std::uint8_t { Any, Owned };

template <class Check, class Body>
[[nodiscard]] inline Result<void> with_ticket(const View& v, const std::string& path,
                                              std::string_view op, Ticket ticket, Owner self,
                                              Ownership need, Check&& check, Body&& body) {
  if (ticket.ledger != v.incarnation) [[unlikely]]
    return foreign(v, path, op, ticket);
  if (ticket.index >= v.params.max_tickets) [[unlikely]]
    return ticket_range_error(op, ticket, v);
  if (auto ok = check(); !ok) [[unlikely]]
    return ok;
  if (auto ok = lock(v, path); !ok) [[unlikely]]
    return ok;
  Held held(*v.control);
  TicketSlot& t = v.tickets[ticket.index];
  if (need == Ownership::Owned && !owned_live(t, ticket, self)) [[unlikely]]
    return check_ticket(v, op, ticket, self);
  return body(held, t);
}

template <class Body>
[[nodiscard]] inline Result<void> with_ticket(const View& v, const std::string& path,
                                              std::string_view op, Ticket ticket, Owner self,
                                              Ownership need, Body&& body) {
  return with_ticket(
      v, path, op, ticket, self, need, [] { return Result<void>{}; }, std::forward<Body>(body));
}

[[gnu::cold]] std::unexpected<Error> reserve_argument_error(const View& v, PoolId pool,
                                                            CategoryId cat, std::int64_t bytes) {
  if (bytes < 0)
    return fail(Errc::InvalidArgument, shm::detail::format("reserve: bytes {} is negative", bytes));
  if (pool.index >= v.params.max_pools)
    return fail(Errc::InvalidArgument,
                shm::detail::format("reserve: pool index {} is outside the table of {}", pool.index,
                                    v.params.max_pools));
  return fail(Errc::InvalidArgument,
              shm::detail::format("reserve: category {} is outside the table of {}", cat.index,
                                  v.params.max_categories));
}

// Why (pool, category) cannot be charged: a stale pool, an undefined category,
// no pool account for it, or damage. Caller holds the mutex.
[[gnu::cold]] std::unexpected<Error> reserve_lookup_error(const View& v, PoolId pool_id,
                                                          CategoryId category,
                                                          std::string_view path) {
  const LedgerControl& c = *v.control;
  auto pool = open_pool_at(v, pool_id, "reserve");
  if (!pool) return std::unexpected(std::move(pool.error()));
  const std::uint32_t cc = ld(c.lock.category_count);
  if (cc > v.params.max_categories)
    return corrupt(path, shm::detail::format("category count {} exceeds the table of {}", cc,
                                             v.params.max_categories));
  if (category.index >= cc)
    return fail(
        Errc::InvalidArgument,
        shm::detail::format("reserve: category {} is not defined ({} are)", category.index, cc));
  const std::uint32_t part = ld(v.categories[category.index].partition);
  if (part >= kPartitions)
    return corrupt(path, shm::detail::format("category {} has partition {}", category.index, part));
  auto pa = pool_account(v, **pool, category.index, path);
  if (!pa) return std::unexpected(std::move(pa.error()));
  return corrupt(path, "reserve: inconsistent lookup");  // not reached: the fast path accepted it
}

// The first dimension that refuses `bytes` (counted), or damage. Caller holds the mutex.
[[gnu::cold]] Result<LedgerReservation> reserve_refused(const View& v, Pool& p, Category& cat,
                                                        PoolAccount& pa, std::uint32_t part,
                                                        std::int64_t bytes, std::string_view path) {
  // A refusal changes statistics only: no write section.
  LedgerControl& c = *v.control;
  const std::uint32_t top = ld(c.lock.free_top);
  if (top > v.params.max_tickets)
    return corrupt(path, shm::detail::format("free stack holds {} entries, the table has {}", top,
                                             v.params.max_tickets));
  if (top == 0) {
    count_rejection(c, LedgerScope::Tickets, nullptr);
    return LedgerReservation(std::unexpect,
                             make_rejection(LedgerScope::Tickets, "tickets", {},
                                            static_cast<std::int64_t>(ld(c.lock.live_tickets)), 1,
                                            v.params.max_tickets));
  }
  const std::uint32_t ticket_limit = ld(p.ticket_limit);
  if (ticket_limit != 0 && ld(p.tickets) >= ticket_limit) {
    count_rejection(c, LedgerScope::Tickets, &p.rejections);
    return LedgerReservation(
        std::unexpect, make_rejection(LedgerScope::Tickets, read_label(p.label), "tickets",
                                      static_cast<std::int64_t>(ld(p.tickets)), 1, ticket_limit));
  }
  Account* const dims[] = {&c.global, &c.partitions[part], &cat.account, &pa.account};
  constexpr LedgerScope kScopesInOrder[] = {LedgerScope::Global, LedgerScope::Partition,
                                            LedgerScope::Category, LedgerScope::Pool};
  for (std::size_t d = 0; d < 4; ++d) {
    auto left = room(*dims[d], path, to_string(kScopesInOrder[d]));
    if (!left) return std::unexpected(std::move(left.error()));
    if (bytes <= *left) continue;
    count_rejection(c, kScopesInOrder[d], &dims[d]->rejections);
    if (kScopesInOrder[d] == LedgerScope::Pool) bump(p.rejections);
    const std::string a = d == 0   ? std::string("global")
                          : d == 1 ? std::string(to_string(static_cast<Partition>(part)))
                          : d == 2 ? read_label(cat.label)
                                   : read_label(p.label);
    const std::string b = d == 3 ? read_label(pa.label) : std::string();
    return LedgerReservation(
        std::unexpect,
        make_rejection(kScopesInOrder[d], a, b, ld(dims[d]->used), bytes, ld(dims[d]->limit)));
  }
  return corrupt(path, "reserve: inconsistent refusal");  // not reached: the fast path refused
}

// Why a live, owned ticket cannot be released: damage (Corrupt, with detail).
[[gnu::cold]] Result<void> release_damage(const View& v, std::uint32_t index,
                                          std::string_view path) {
  auto ch = resolve(v, index, path);
  if (!ch) return std::unexpected(std::move(ch.error()));
  return check_uncharge(v, *ch, path);
}

[[gnu::cold]] std::unexpected<Error> admit_argument_error(std::span<const Constraint> constraints,
                                                          std::int64_t now_ms) {
  if (now_ms < 0)
    return fail(Errc::InvalidArgument,
                shm::detail::format("admit: time {} ms is negative", now_ms));
  auto co = token_bucket::coalesce(constraints);
  return fail(Errc::InvalidArgument,
              co ? std::string("admit: malformed constraints") : "admit: " + co.error().message);
}

[[gnu::cold]] Result<LedgerAdmission> admit_refused(LedgerControl& c, Bucket& b, std::int64_t burst,
                                                    std::int64_t available, std::int64_t cost) {
  count_rejection(c, LedgerScope::Bucket, &b.rejections);
  return LedgerAdmission(std::unexpect, make_rejection(LedgerScope::Bucket, read_label(b.label), {},
                                                       burst - available, cost, burst));
}

}  // namespace

// ---------------------------------------------------------------- accounting

Result<LedgerReservation> Ledger::reserve(PoolId pool_id, CategoryId category, std::int64_t bytes) {
  assert(view_.control != nullptr && "use of an empty Ledger handle");
  const View& v = view_;
  if (pool_id.ledger != v.incarnation) [[unlikely]]
    return foreign(v, segment_.path(), "reserve", pool_id);
  if (bytes < 0 || pool_id.index >= v.params.max_pools || category.index >= v.params.max_categories)
      [[unlikely]]
    return reserve_argument_error(v, pool_id, category, bytes);
  const std::string& path = segment_.path();
  if (auto ok = lock(v, path); !ok) [[unlikely]]
    return std::unexpected(std::move(ok.error()));
  LedgerControl& c = *v.control;
  Held held(c);

  // Everything the reservation touches, each index checked before use.
  Pool& p = v.pools[pool_id.index];
  const std::uint32_t cc = ld(c.lock.category_count);
  if (ld(p.state) != kPoolOpen || ld(p.generation) != pool_id.generation || category.index >= cc)
      [[unlikely]]
    return reserve_lookup_error(v, pool_id, category, path);
  Category& cat = v.categories[category.index];
  const std::uint32_t part = ld(cat.partition);
  const int ai = find_account(p, category.index);
  if (part >= kPartitions || ai < 0) [[unlikely]]
    return reserve_lookup_error(v, pool_id, category, path);
  PoolAccount& pa = p.accounts[ai];
  const std::uint32_t top = ld(c.lock.free_top);
  if (top == 0 || top > v.params.max_tickets) [[unlikely]]
    return reserve_refused(v, p, cat, pa, part, bytes, path);
  const std::uint32_t ticket_limit = ld(p.ticket_limit);
  if (ticket_limit != 0 && ld(p.tickets) >= ticket_limit) [[unlikely]]
    return reserve_refused(v, p, cat, pa, part, bytes, path);
  Account* const dims[] = {&c.global, &c.partitions[part], &cat.account, &pa.account};
  for (const Account* a : dims) {
    const std::int64_t used = ld(a->used), limit = ld(a->limit);
    // used outside [0, limit] is damage; bytes > limit - used is a refusal.
    if (used < 0 || used > limit || bytes > limit - used) [[unlikely]]
      return reserve_refused(v, p, cat, pa, part, bytes, path);
  }
  const std::uint32_t index = ld(v.free_stack[top - 1]);
  if (index >= v.params.max_tickets || ld(v.tickets[index].state) != kTicketFree) [[unlikely]]
    return corrupt(path, shm::detail::format(
                             "free stack top {} names ticket {}, which is out of range or live",
                             top - 1, index));

  held.write();
  st(c.lock.free_top, top - 1);
  TicketSlot& t = v.tickets[index];
  const std::uint32_t gen = ld(t.generation) + 1;
  st(t.generation, gen);
  st(t.owner_slot, owner_.slot);
  st(t.owner_generation, owner_.generation);
  st(t.pool, pool_id.index);
  st(t.pool_generation, pool_id.generation);
  st(t.category, category.index);
  st(t.bytes, bytes);
  st(t.offered, 0u);  // the slot's previous ticket may have been offered
  // [ledger.T] release: crash order — every field above is in memory before the ticket
  // is live; a repairer (after the mutex's EOWNERDEAD acquire) sees a whole ticket or none.
  t.state.store(kTicketReserved, std::memory_order_release);
  detail::ledger_crash_point(CrashPoint::ReserveAfterTicketPublished);
  charge(*dims[0], bytes, true);
  charge(*dims[1], bytes, true);
  detail::ledger_crash_point(CrashPoint::ReserveMidCounters);
  charge(*dims[2], bytes, true);
  charge(*dims[3], bytes, true);
  bump(p.tickets);
  bump(c.lock.live_tickets);
  bump(c.stats.reserves);
  return LedgerReservation(Ticket{index, gen, v.incarnation});
}

Result<void> Ledger::commit(Ticket ticket) {
  assert(view_.control != nullptr && "use of an empty Ledger handle");
  const View& v = view_;
  const std::string& path = segment_.path();
  return with_ticket(
      v, path, "commit", ticket, owner_, Ownership::Owned,
      [&](Held& held, TicketSlot& t) -> Result<void> {
        if (ld(t.state) == kTicketCommitted) [[unlikely]]
          return fail(Errc::InvalidArgument,
                      shm::detail::format("commit: ticket {}#{} is already committed", ticket.index,
                                          ticket.generation));
        Charge ch;
        if (!resolve_fast(v, ticket.index, ch)) [[unlikely]]
          return std::unexpected(resolve(v, ticket.index, path).error());
        Account* const dims[] = {ch.global, ch.partition, ch.category, ch.pool_account};
        for (const Account* a : dims)
          if (ld(a->reserved) < ch.bytes) [[unlikely]]
            return corrupt(
                path, shm::detail::format("commit of {} bytes: an account has only {} reserved",
                                          ch.bytes, ld(a->reserved)));
        held.write();
        // [ledger.T] release (crash order, as in reserve): the state is the source of truth.
        t.state.store(kTicketCommitted, std::memory_order_release);
        st(dims[0]->reserved, ld(dims[0]->reserved) - ch.bytes);
        detail::ledger_crash_point(CrashPoint::CommitMidCounters);
        for (std::size_t d = 1; d < std::size(dims); ++d)
          st(dims[d]->reserved, ld(dims[d]->reserved) - ch.bytes);
        bump(v.control->stats.commits);
        return {};
      });
}

Result<void> Ledger::release(Ticket ticket) {
  assert(view_.control != nullptr && "use of an empty Ledger handle");
  const View& v = view_;
  const std::string& path = segment_.path();
  return with_ticket(v, path, "release", ticket, owner_, Ownership::Owned,
                     [&](Held& held, TicketSlot&) -> Result<void> {
                       Charge ch;
                       if (!resolve_fast(v, ticket.index, ch) || !can_uncharge(v, ch)) [[unlikely]]
                         return release_damage(v, ticket.index, path);
                       held.write();
                       free_ticket(v, ticket.index, ch);
                       bump(v.control->stats.releases);
                       return {};
                     });
}

Result<LedgerReplacement> Ledger::replace(Ticket ticket, PoolId pool_id, std::int64_t bytes) {
  assert(view_.control != nullptr && "use of an empty Ledger handle");
  const View& v = view_;
  if (ticket.ledger != v.incarnation) [[unlikely]]
    return foreign(v, segment_.path(), "replace", ticket);
  if (pool_id.ledger != v.incarnation) [[unlikely]]
    return foreign(v, segment_.path(), "replace", pool_id);
  if (bytes < 0)
    return fail(Errc::InvalidArgument, shm::detail::format("replace: bytes {} is negative", bytes));
  if (ticket.index >= v.params.max_tickets)
    return fail(Errc::InvalidArgument,
                shm::detail::format("replace: ticket index {} is outside the table of {}",
                                    ticket.index, v.params.max_tickets));
  if (pool_id.index >= v.params.max_pools)
    return fail(Errc::InvalidArgument,
                shm::detail::format("replace: pool index {} is outside the table of {}",
                                    pool_id.index, v.params.max_pools));
  const std::string& path = segment_.path();
  if (auto ok = lock(v, path); !ok) return std::unexpected(ok.error());
  LedgerControl& c = *v.control;
  Held held(c);
  if (auto ok = check_ticket(v, "replace", ticket, owner_); !ok) return std::unexpected(ok.error());
  auto old = resolve(v, ticket.index, path);
  if (!old) return std::unexpected(old.error());
  auto pool = open_pool_at(v, pool_id, "replace");
  if (!pool) return std::unexpected(pool.error());
  Pool& np = **pool;
  TicketSlot& t = v.tickets[ticket.index];
  const std::uint32_t cat_index = ld(t.category);
  auto npa = pool_account(v, np, cat_index, path);
  if (!npa) return std::unexpected(npa.error());
  Account* const new_account = &(*npa)->account;
  const bool same_account = new_account == old->pool_account;
  const bool same_pool = &np == old->pool;
  if (auto ok = check_uncharge(v, *old, path); !ok) return std::unexpected(ok.error());

  // Checks, in scope order. Shared dimensions move by the difference; a new
  // pool account takes the whole amount.
  const std::int64_t delta = bytes - old->bytes;  // both in [0, INT64_MAX]: no overflow
  const std::uint32_t ticket_limit = ld(np.ticket_limit);
  if (!same_pool && ticket_limit != 0 && ld(np.tickets) >= ticket_limit) {
    count_rejection(c, LedgerScope::Tickets, &np.rejections);
    return LedgerReplacement(
        std::unexpect, make_rejection(LedgerScope::Tickets, read_label(np.label), "tickets",
                                      static_cast<std::int64_t>(ld(np.tickets)), 1, ticket_limit));
  }
  Account* const shared[] = {old->global, old->partition, old->category};
  constexpr LedgerScope kSharedScopes[] = {LedgerScope::Global, LedgerScope::Partition,
                                           LedgerScope::Category};
  const Category& cat = v.categories[cat_index];
  for (std::size_t d = 0; d < 3; ++d) {
    auto left = room(*shared[d], path, to_string(kSharedScopes[d]));
    if (!left) return std::unexpected(left.error());
    if (delta > *left) {
      count_rejection(c, kSharedScopes[d], &shared[d]->rejections);
      const std::string a =
          d == 0   ? std::string("global")
          : d == 1 ? std::string(to_string(ld(cat.partition) == 1 ? Partition::Control
                                                                  : Partition::Ordinary))
                   : read_label(cat.label);
      return LedgerReplacement(std::unexpect,
                               make_rejection(kSharedScopes[d], a, {}, ld(shared[d]->used), delta,
                                              ld(shared[d]->limit)));
    }
  }
  auto left = room(*new_account, path, "pool");
  if (!left) return std::unexpected(left.error());
  const std::int64_t need = same_account ? delta : bytes;
  if (need > *left) {
    count_rejection(c, LedgerScope::Pool, &new_account->rejections);
    bump(np.rejections);
    return LedgerReplacement(
        std::unexpect,
        make_rejection(LedgerScope::Pool, read_label(np.label), read_label((*npa)->label),
                       ld(new_account->used), need, ld(new_account->limit)));
  }

  held.write();
  Journal& j = c.journal;
  st(j.ticket, ticket.index);
  st(j.ticket_image.pool, ld(t.pool));
  st(j.ticket_image.pool_generation, ld(t.pool_generation));
  st(j.ticket_image.bytes, old->bytes);
  st(j.op, JournalOp::Replace);
  // [ledger.J1] release fence: crash order — the journal (images, then op) is in
  // memory before the ticket changes; read by repair() after EOWNERDEAD.
  std::atomic_thread_fence(std::memory_order_release);
  st(t.pool, pool_id.index);
  st(t.pool_generation, pool_id.generation);
  detail::ledger_crash_point(CrashPoint::ReplaceMidTicket);
  st(t.bytes, bytes);
  // [ledger.J2] release: crash order — the ticket's new fields are in memory before
  // the journal is retired.
  j.op.store(static_cast<std::uint32_t>(JournalOp::None), std::memory_order_release);
  for (Account* a : shared) {
    st(a->used, ld(a->used) + delta);
    if (old->reserved) st(a->reserved, ld(a->reserved) + delta);
  }
  uncharge(*old->pool_account, old->bytes, old->reserved);
  charge(*new_account, bytes, old->reserved);
  st(old->pool->tickets, ld(old->pool->tickets) - 1);
  bump(np.tickets);
  if (!same_pool) close_if_orphan_emptied(c, *old->pool);
  bump(c.stats.replaces);
  return LedgerReplacement();
}

// ---------------------------------------------------------------- hand-off

Result<void> Ledger::offer(Ticket ticket, Owner to) {
  assert(view_.control != nullptr && "use of an empty Ledger handle");
  const View& v = view_;
  const auto arguments = [&]() -> Result<void> {
    if (to == owner_)
      return fail(Errc::InvalidArgument,
                  shm::detail::format("offer: ticket {}#{} would be offered to its own owner "
                                      "(slot {} generation {})",
                                      ticket.index, ticket.generation, to.slot, to.generation));
    if (to.slot >= kMaxAttachments)
      return fail(Errc::InvalidArgument,
                  shm::detail::format("offer: slot {} is outside the attachment table of {}",
                                      to.slot, kMaxAttachments));
    return {};
  };
  return with_ticket(
      v, segment_.path(), "offer", ticket, owner_, Ownership::Owned, arguments,
      [&](Held& held, TicketSlot& t) -> Result<void> {
        const AttachmentSlot& hs = segment_.header().slots[to.slot];
        // [seg.A'] acquire: pairs with attach()'s release [seg.A].
        const std::uint32_t state = hs.state.load(std::memory_order_acquire);
        const std::uint32_t generation = hs.generation.load(std::memory_order_acquire);
        if (state != static_cast<std::uint32_t>(SlotState::Attached) || generation != to.generation)
          return fail(
              Errc::InvalidArgument,
              shm::detail::format(
                  "offer: attachment slot {} generation {} is not attached (the "
                  "slot is {} at generation {})",
                  to.slot, to.generation,
                  state == static_cast<std::uint32_t>(SlotState::Attached) ? "attached" : "free",
                  generation));
        held.write();
        st(t.offered, 0u);  // an earlier offer ends before the target changes
        st(t.offer_slot, to.slot);
        st(t.offer_generation, to.generation);
        detail::ledger_crash_point(CrashPoint::OfferBeforePublish);
        // [ledger.O] release: crash order — the target is in memory before the offer is
        // live; a repairer (after the mutex's EOWNERDEAD acquire) sees a whole offer or none.
        t.offered.store(1u, std::memory_order_release);
        bump(v.control->stats.offers);
        return {};
      });
}

Result<void> Ledger::withdraw(Ticket ticket) {
  assert(view_.control != nullptr && "use of an empty Ledger handle");
  return with_ticket(view_, segment_.path(), "withdraw", ticket, owner_, Ownership::Owned,
                     [](Held& held, TicketSlot& t) -> Result<void> {
                       if (ld(t.offered) != 0) {
                         held.write();
                         st(t.offered, 0u);
                       }
                       return {};
                     });
}

Result<void> Ledger::accept(Ticket ticket) {
  assert(view_.control != nullptr && "use of an empty Ledger handle");
  const View& v = view_;
  const std::string& path = segment_.path();
  return with_ticket(
      v, path, "accept", ticket, owner_, Ownership::Any,
      [&](Held& held, TicketSlot& t) -> Result<void> {
        if (ld(t.state) == kTicketFree || ld(t.generation) != ticket.generation)
          return check_ticket(v, "accept", ticket, owner_);  // stale or released
        const Owner owner{ld(t.owner_slot), ld(t.owner_generation)};
        if (owner == owner_) return {};  // accepted before, or handed over when the sender left
        const bool offered = ld(t.offered) != 0;
        const Owner target{ld(t.offer_slot), ld(t.offer_generation)};
        if (!offered || target != owner_) {
          bump(v.control->stats.refused_releases);
          return fail(Errc::PermissionDenied,
                      shm::detail::format(
                          "accept: ticket {}#{} belongs to attachment slot {} generation {} and "
                          "is {}; this handle is slot {} generation {}",
                          ticket.index, ticket.generation, owner.slot, owner.generation,
                          offered ? shm::detail::format("offered to slot {} generation {}",
                                                        target.slot, target.generation)
                                  : std::string("not offered"),
                          owner_.slot, owner_.generation));
        }
        auto ch = resolve(v, ticket.index, path);  // a ticket that cannot be charged is not taken
        if (!ch) return std::unexpected(std::move(ch.error()));
        held.write();
        hand_over(v, ticket.index, owner_);
        return {};
      });
}

// ---------------------------------------------------------------- rate admission

Result<LedgerAdmission> Ledger::admit(std::span<const Constraint> constraints,
                                      std::int64_t now_ms) {
  assert(view_.control != nullptr && "use of an empty Ledger handle");
  const View& v = view_;
  token_bucket::Term terms[kMaxConstraints];  // scratch: deliberately not initialised
  const int count = token_bucket::coalesce_into(constraints, terms);
  if (count < 0 || now_ms < 0) [[unlikely]]
    return admit_argument_error(constraints, now_ms);
  const auto n = static_cast<std::size_t>(count);
  if (n == 0) return LedgerAdmission();
  for (std::size_t k = 0; k < n; ++k)
    if (terms[k].bucket >= v.params.max_buckets) [[unlikely]]
      return fail(Errc::InvalidArgument,
                  shm::detail::format("admit: bucket {} is outside the table of {}",
                                      terms[k].bucket, v.params.max_buckets));
  const std::string& path = segment_.path();
  if (auto ok = lock(v, path); !ok) [[unlikely]]
    return std::unexpected(std::move(ok.error()));
  LedgerControl& c = *v.control;
  Held held(c);
  const std::uint32_t bc = ld(c.lock.bucket_count);
  if (bc > v.params.max_buckets) [[unlikely]]
    return corrupt(path, shm::detail::format("bucket count {} exceeds the table of {}", bc,
                                             v.params.max_buckets));
  token_bucket::Level before[kMaxConstraints];  // scratch, as above
  token_bucket::Level after[kMaxConstraints];
  for (std::size_t k = 0; k < n; ++k) {
    const std::uint32_t bi = terms[k].bucket;
    if (bi >= bc) [[unlikely]]
      return fail(Errc::InvalidArgument,
                  shm::detail::format("admit: bucket {} is not defined ({} are)", bi, bc));
    Bucket& b = v.buckets[bi];
    const std::int64_t rate = ld(b.rate), burst = ld(b.burst);
    const std::uint32_t started = ld(b.started);
    before[k] = token_bucket::Level{ld(b.tokens), ld(b.frac), started != 0, ld(b.last_ms)};
    if (rate < 0 || burst < 0 || before[k].tokens < 0 ||
        before[k].frac >= token_bucket::kUnitsPerToken || started > 1) [[unlikely]]
      return corrupt(path, shm::detail::format(
                               "bucket {}: rate {} burst {} tokens {} fraction {} is impossible",
                               bi, rate, burst, before[k].tokens, before[k].frac));
    after[k] = token_bucket::refill(before[k], rate, burst, now_ms);
    if (terms[k].cost > after[k].tokens) [[unlikely]]
      return admit_refused(c, b, burst, after[k].tokens, terms[k].cost);
    after[k].tokens -= terms[k].cost;
  }
  held.write();
  Journal& j = c.journal;
  for (std::size_t k = 0; k < n; ++k) {
    BucketImage& img = j.buckets[k];
    st(img.index, terms[k].bucket);
    st(img.tokens, before[k].tokens);
    st(img.frac, before[k].frac);
    st(img.started, before[k].started ? 1u : 0u);
    st(img.last_ms, before[k].last_ms);
  }
  st(j.count, n);
  st(j.op, JournalOp::Admit);
  // [ledger.J1] release fence: crash order, as in replace().
  std::atomic_thread_fence(std::memory_order_release);
  for (std::size_t k = 0; k < n; ++k) {
    Bucket& b = v.buckets[terms[k].bucket];
    st(b.tokens, after[k].tokens);
    st(b.frac, after[k].frac);
    st(b.started, 1u);
    st(b.last_ms, after[k].last_ms);
    if (k == 0) detail::ledger_crash_point(CrashPoint::AdmitMidBuckets);
  }
  // [ledger.J2] release: crash order, as in replace().
  j.op.store(static_cast<std::uint32_t>(JournalOp::None), std::memory_order_release);
  for (std::size_t k = 0; k < n; ++k) bump(v.buckets[terms[k].bucket].admits);
  bump(c.stats.admits);
  return LedgerAdmission();
}

}  // namespace shm
