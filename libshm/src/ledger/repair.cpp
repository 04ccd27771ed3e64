// The ticket table is the source of truth: recomputation of derived counters
// (repair after EOWNERDEAD, verify), the undo journal, and the lock slow path.
#include "internal.hpp"

#include "format/format.hpp"

#include <chrono>
#include <map>
#include <thread>
#include <utility>

namespace shm::ledger {

using namespace internal;

namespace {

constexpr std::size_t kMaxProblems = 32;

void note(std::vector<std::string>& out, std::string line) {
  if (out.size() < kMaxProblems) {
    out.push_back(std::move(line));
  } else if (out.size() == kMaxProblems) {
    out.push_back("(further problems not listed)");
  }
}

std::string join(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) {
    if (!s.empty()) s += "; ";
    s += l;
  }
  return s;
}

bool add_checked(Sum& s, std::int64_t bytes, bool reserved) {
  std::int64_t used = 0, res = s.reserved;
  if (__builtin_add_overflow(s.used, bytes, &used)) return false;
  if (reserved && __builtin_add_overflow(s.reserved, bytes, &res)) return false;
  s.used = used;
  s.reserved = res;
  ++s.tickets;
  return true;
}

void compare_account(const Account& a, const Sum& sum, std::string_view what,
                     std::vector<std::string>& out) {
  const std::int64_t used = ld(a.used), reserved = ld(a.reserved), limit = ld(a.limit);
  const std::uint64_t tickets = ld(a.tickets);
  if (used != sum.used)
    note(out, shm::detail::format("{}: used is {}, its tickets sum to {}", what, used, sum.used));
  if (reserved != sum.reserved)
    note(out, shm::detail::format("{}: reserved is {}, its tickets sum to {}", what, reserved,
                                  sum.reserved));
  if (tickets != sum.tickets)
    note(out, shm::detail::format("{}: ticket count is {}, the table holds {}", what, tickets,
                                  sum.tickets));
  if (limit < 0) note(out, shm::detail::format("{}: limit {} is negative", what, limit));
  if (sum.used > limit)
    note(out, shm::detail::format("{}: tickets hold {} bytes, over the limit {}", what, sum.used,
                                  limit));
}

void store_sum(Account& a, const Sum& s) noexcept {
  st(a.used, s.used);
  st(a.reserved, s.reserved);
  st(a.tickets, s.tickets);
}

}  // namespace

namespace internal {

Result<void> lock_slow(const View& v, std::string_view path, detail::LockResult r) {
  LedgerControl& c = *v.control;
  switch (r) {
    case detail::LockResult::Acquired:
      break;
    case detail::LockResult::OwnerDied: {
      const std::vector<std::string> damage = repair(v);
      c.lock.mutex.mark_consistent();
      if (!damage.empty()) {
        c.lock.mutex.unlock();
        return fail(Errc::Corrupt,
                    shm::detail::format("{}: a holder of the ledger lock died and repair found "
                                        "damage; the ledger is now faulted: {}",
                                        path, join(damage)));
      }
      break;
    }
    case detail::LockResult::Unrecoverable:
      return fail(Errc::Faulted,
                  shm::detail::format("{}: the ledger mutex is not recoverable (a repairer "
                                      "unlocked it without marking it consistent)",
                                      path));
    case detail::LockResult::DeadOwnerUnregistered:
      return detail::fail_dead_owner(path, "ledger", c.lock.mutex);
    case detail::LockResult::Failed:
    case detail::LockResult::Busy:      // try_lock only
    case detail::LockResult::TimedOut:  // lock_until only
      return fail(Errc::Corrupt, shm::detail::format("{}: the ledger mutex word is damaged "
                                                     "(pthread_mutex_lock failed)",
                                                     path));
  }
  if (ld(c.lock.faulted) != 0) {
    c.lock.mutex.unlock();
    return fail(Errc::Faulted,
                shm::detail::format("{}: the ledger is faulted (a repair found damage that "
                                    "tickets cannot explain; `shmctl verify` lists it); "
                                    "re-create it",
                                    path));
  }
  return {};
}

Result<Charge> resolve(const View& v, std::uint32_t index, std::string_view path) {
  const TicketSlot& t = v.tickets[index];
  LedgerControl& c = *v.control;
  auto corrupt = [&](std::string what) {
    return fail(Errc::Corrupt, shm::detail::format("{}: ticket {}: {}", path, index, what));
  };
  const std::uint32_t state = ld(t.state);
  if (state != static_cast<std::uint32_t>(TicketState::Reserved) &&
      state != static_cast<std::uint32_t>(TicketState::Committed))
    return corrupt(shm::detail::format("state {} is not reserved (1) or committed (2)", state));
  const std::uint32_t cc = ld(c.lock.category_count);
  const std::uint32_t cat = ld(t.category);
  if (cc > v.params.max_categories || cat >= cc)
    return corrupt(shm::detail::format("category {} is outside the {} defined (table of {})", cat,
                                       cc, v.params.max_categories));
  Category& category = v.categories[cat];
  const std::uint32_t part = ld(category.partition);
  if (part >= kPartitions)
    return corrupt(shm::detail::format("category {} has partition {}", cat, part));
  const std::uint32_t pool = ld(t.pool);
  if (pool >= v.params.max_pools)
    return corrupt(
        shm::detail::format("pool {} is outside the table of {}", pool, v.params.max_pools));
  Pool& p = v.pools[pool];
  if (ld(p.state) != static_cast<std::uint32_t>(PoolStatus::Open) ||
      ld(p.generation) != ld(t.pool_generation))
    return corrupt(
        shm::detail::format("pool {} generation {} is not open (pool state {}, generation {})",
                            pool, ld(t.pool_generation), ld(p.state), ld(p.generation)));
  const int a = find_account(p, cat);
  if (a < 0)
    return corrupt(shm::detail::format("pool {} has no account for category {}", pool, cat));
  const std::int64_t bytes = ld(t.bytes);
  if (bytes < 0) return corrupt(shm::detail::format("bytes {} is negative", bytes));
  return Charge{&c.global,
                &c.partitions[part],
                &category.account,
                &p.accounts[a].account,
                &p,
                bytes,
                state == static_cast<std::uint32_t>(TicketState::Reserved)};
}

Result<void> check_uncharge(const View& v, const Charge& ch, std::string_view path) {
  const Account* accounts[] = {ch.global, ch.partition, ch.category, ch.pool_account};
  for (const Account* a : accounts) {
    if (ld(a->used) < ch.bytes || ld(a->tickets) < 1 || (ch.reserved && ld(a->reserved) < ch.bytes))
      return fail(Errc::Corrupt, shm::detail::format(
                                     "{}: releasing {} bytes would drive an account negative "
                                     "(used {}, reserved {}, tickets {})",
                                     path, ch.bytes, ld(a->used), ld(a->reserved), ld(a->tickets)));
  }
  const LedgerControl& c = *v.control;
  if (ld(ch.pool->tickets) < 1 || ld(c.lock.live_tickets) < 1 ||
      ld(c.lock.free_top) >= v.params.max_tickets)
    return fail(
        Errc::Corrupt,
        shm::detail::format("{}: ticket counts are damaged (pool {}, live {}, free {} of {})", path,
                            ld(ch.pool->tickets), ld(c.lock.live_tickets), ld(c.lock.free_top),
                            v.params.max_tickets));
  return {};
}

Tally tally(const View& v) {
  Tally t;
  const ParamBlock& P = v.params;
  const LedgerControl& c = *v.control;
  t.categories.assign(P.max_categories, Sum{});
  t.pool_accounts.assign(std::size_t{P.max_pools} * kPoolAccounts, Sum{});
  t.pool_tickets.assign(P.max_pools, 0);
  std::uint32_t cc = ld(c.lock.category_count);
  if (cc > P.max_categories) {
    note(t.problems,
         shm::detail::format("category count {} exceeds the table of {}", cc, P.max_categories));
    cc = P.max_categories;
  }
  for (std::uint32_t i = 0; i < cc; ++i)
    if (ld(v.categories[i].partition) >= kPartitions)
      note(t.problems,
           shm::detail::format("category {} has partition {}", i, ld(v.categories[i].partition)));
  for (std::uint32_t i = 0; i < P.max_pools; ++i) {
    const Pool& p = v.pools[i];
    const std::uint32_t s = ld(p.state);
    if (s == static_cast<std::uint32_t>(PoolStatus::Free)) continue;
    if (s != static_cast<std::uint32_t>(PoolStatus::Open)) {
      note(t.problems, shm::detail::format("pool {} has state {}", i, s));
      continue;
    }
    ++t.open_pools;
    const std::uint32_t n = ld(p.account_count);
    if (n < 1 || n > kPoolAccounts) {
      note(t.problems,
           shm::detail::format("pool {} has {} accounts (1 to {} allowed)", i, n, kPoolAccounts));
      continue;
    }
    std::uint64_t seen = 0;
    for (std::uint32_t a = 0; a < n; ++a) {
      const std::uint64_t mask = ld(p.accounts[a].categories);
      if ((seen & mask) != 0)
        note(t.problems, shm::detail::format(
                             "pool {}: account {} covers categories another account covers", i, a));
      seen |= mask;
    }
  }
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::size_t> owner_index;
  for (std::uint32_t i = 0; i < P.max_tickets; ++i) {
    const TicketSlot& tk = v.tickets[i];
    const std::uint32_t s = ld(tk.state);
    if (s == static_cast<std::uint32_t>(TicketState::Free)) {
      t.free.push_back(i);
      continue;
    }
    if (s != static_cast<std::uint32_t>(TicketState::Reserved) &&
        s != static_cast<std::uint32_t>(TicketState::Committed)) {
      note(t.problems, shm::detail::format("ticket {} has state {}", i, s));
      continue;
    }
    const bool reserved = s == static_cast<std::uint32_t>(TicketState::Reserved);
    const std::uint32_t cat = ld(tk.category), pool = ld(tk.pool), owner = ld(tk.owner_slot);
    const std::int64_t bytes = ld(tk.bytes);
    if (cat >= cc) {
      note(t.problems,
           shm::detail::format("ticket {}: category {} is not defined ({} are)", i, cat, cc));
      continue;
    }
    if (pool >= P.max_pools ||
        ld(v.pools[pool].state) != static_cast<std::uint32_t>(PoolStatus::Open) ||
        ld(v.pools[pool].generation) != ld(tk.pool_generation)) {
      note(t.problems, shm::detail::format("ticket {}: pool {} generation {} is not open", i, pool,
                                           ld(tk.pool_generation)));
      continue;
    }
    const int a = find_account(v.pools[pool], cat);
    if (a < 0) {
      note(t.problems,
           shm::detail::format("ticket {}: pool {} has no account for category {}", i, pool, cat));
      continue;
    }
    if (bytes < 0) {
      note(t.problems, shm::detail::format("ticket {}: bytes {} is negative", i, bytes));
      continue;
    }
    if (owner >= kMaxAttachments) {
      note(t.problems, shm::detail::format(
                           "ticket {}: owner slot {} is outside the attachment table", i, owner));
      continue;
    }
    const std::uint32_t part = ld(v.categories[cat].partition);
    if (part >= kPartitions) continue;  // noted above
    if (!add_checked(t.global, bytes, reserved) ||
        !add_checked(t.partitions[part], bytes, reserved) ||
        !add_checked(t.categories[cat], bytes, reserved) ||
        !add_checked(
            t.pool_accounts[std::size_t{pool} * kPoolAccounts + static_cast<std::size_t>(a)], bytes,
            reserved)) {
      note(t.problems,
           shm::detail::format("ticket {}: {} bytes overflow the sum of its accounts", i, bytes));
      continue;
    }
    ++t.pool_tickets[pool];
    ++t.live;
    const auto key = std::make_pair(owner, ld(tk.owner_generation));
    auto [it, inserted] = owner_index.try_emplace(key, t.owners.size());
    if (inserted) t.owners.push_back(OwnerSum{Owner{key.first, key.second}, 0, 0});
    OwnerSum& o = t.owners[it->second];
    ++o.tickets;
    if (__builtin_add_overflow(o.bytes, bytes, &o.bytes)) o.bytes = INT64_MAX;
  }
  return t;
}

void compare(const View& v, const Tally& t, std::vector<std::string>& out) {
  const ParamBlock& P = v.params;
  const LedgerControl& c = *v.control;
  if (ld(c.lock.faulted) != 0) note(out, "the ledger is faulted: a repair found damage");
  if (ld(c.global.limit) != P.global_limit)
    note(out, shm::detail::format("global limit is {}, the parameters say {}", ld(c.global.limit),
                                  P.global_limit));
  if (ld(c.partitions[0].limit) != P.global_limit - P.control_reserve)
    note(out, shm::detail::format(
                  "ordinary partition limit is {}, expected global {} - control reserve {}",
                  ld(c.partitions[0].limit), P.global_limit, P.control_reserve));
  if (ld(c.partitions[1].limit) != P.global_limit)
    note(out, shm::detail::format("control partition limit is {}, expected global {}",
                                  ld(c.partitions[1].limit), P.global_limit));
  compare_account(c.global, t.global, "global", out);
  compare_account(c.partitions[0], t.partitions[0], "partition 'ordinary'", out);
  compare_account(c.partitions[1], t.partitions[1], "partition 'control'", out);
  const std::uint32_t cc = std::min(ld(c.lock.category_count), P.max_categories);
  for (std::uint32_t i = 0; i < cc; ++i)
    compare_account(v.categories[i].account, t.categories[i],
                    shm::detail::format("category '{}'", read_label(v.categories[i].label)), out);
  for (std::uint32_t i = 0; i < P.max_pools; ++i) {
    const Pool& p = v.pools[i];
    if (ld(p.state) != static_cast<std::uint32_t>(PoolStatus::Open)) continue;
    const std::string name = read_label(p.label);
    if (ld(p.tickets) != t.pool_tickets[i])
      note(out, shm::detail::format("pool '{}': ticket count is {}, the table holds {}", name,
                                    ld(p.tickets), t.pool_tickets[i]));
    const std::uint32_t limit = ld(p.ticket_limit);
    if (limit != 0 && t.pool_tickets[i] > limit)
      note(out, shm::detail::format("pool '{}': {} live tickets, over its limit {}", name,
                                    t.pool_tickets[i], limit));
    const std::uint32_t n = std::min(ld(p.account_count), kPoolAccounts);
    for (std::uint32_t a = 0; a < n; ++a)
      compare_account(p.accounts[a].account, t.pool_accounts[std::size_t{i} * kPoolAccounts + a],
                      shm::detail::format("pool '{}/{}'", name, read_label(p.accounts[a].label)),
                      out);
  }
  if (ld(c.lock.live_tickets) != t.live)
    note(out, shm::detail::format("live ticket count is {}, the table holds {}",
                                  ld(c.lock.live_tickets), t.live));
  if (ld(c.lock.open_pools) != t.open_pools)
    note(out, shm::detail::format("open pool count is {}, the table holds {}",
                                  ld(c.lock.open_pools), t.open_pools));
  const std::uint32_t top = ld(c.lock.free_top);
  if (top != t.free.size()) {
    note(out, shm::detail::format("free stack holds {} entries, the table has {} free tickets", top,
                                  t.free.size()));
  } else {
    std::vector<bool> seen(P.max_tickets, false);
    for (std::uint32_t k = 0; k < top; ++k) {
      const std::uint32_t idx = ld(v.free_stack[k]);
      if (idx >= P.max_tickets || seen[idx] ||
          ld(v.tickets[idx].state) != static_cast<std::uint32_t>(TicketState::Free)) {
        note(out, shm::detail::format(
                      "free stack entry {} ({}) is out of range, repeated or not free", k, idx));
        break;
      }
      seen[idx] = true;
    }
  }
  if (const std::uint32_t op = ld(c.journal.op); op != static_cast<std::uint32_t>(JournalOp::None))
    note(out, shm::detail::format("the undo journal holds an unfinished operation ({})", op));
  const std::uint32_t bc = ld(c.lock.bucket_count);
  if (bc > P.max_buckets)
    note(out, shm::detail::format("bucket count {} exceeds the table of {}", bc, P.max_buckets));
  for (std::uint32_t i = 0; i < std::min(bc, P.max_buckets); ++i) {
    const Bucket& b = v.buckets[i];
    const std::int64_t rate = ld(b.rate), burst = ld(b.burst), tokens = ld(b.tokens);
    if (rate < 0 || burst < 0 || tokens < 0 || tokens > burst ||
        ld(b.frac) >= static_cast<std::uint64_t>(token_bucket::kUnitsPerToken) || ld(b.started) > 1)
      note(out,
           shm::detail::format("bucket '{}': rate {} burst {} tokens {} fraction {} is impossible",
                               read_label(b.label), rate, burst, tokens, ld(b.frac)));
  }
}

void store_derived(const View& v, const Tally& t) noexcept {
  const ParamBlock& P = v.params;
  LedgerControl& c = *v.control;
  store_sum(c.global, t.global);
  for (std::uint32_t p = 0; p < kPartitions; ++p) store_sum(c.partitions[p], t.partitions[p]);
  for (std::uint32_t i = 0; i < P.max_categories; ++i)
    store_sum(v.categories[i].account, t.categories[i]);
  for (std::uint32_t i = 0; i < P.max_pools; ++i) {
    st(v.pools[i].tickets, t.pool_tickets[i]);
    for (std::uint32_t a = 0; a < kPoolAccounts; ++a)
      store_sum(v.pools[i].accounts[a].account,
                t.pool_accounts[std::size_t{i} * kPoolAccounts + a]);
  }
  // Lowest free index on top: reservations fill the table from the front.
  const std::size_t n = t.free.size();
  for (std::size_t k = 0; k < n; ++k) st(v.free_stack[k], t.free[n - 1 - k]);
  st(c.lock.free_top, n);
  st(c.lock.live_tickets, t.live);
  st(c.lock.open_pools, t.open_pools);
}

std::vector<std::string> repair(const View& v) {
  LedgerControl& c = *v.control;
  std::vector<std::string> damage;
  begin_write(c);
  Journal& j = c.journal;
  const std::uint32_t op = ld(j.op);
  if (op == static_cast<std::uint32_t>(JournalOp::Replace)) {
    const std::uint32_t idx = ld(j.ticket);
    if (idx < v.params.max_tickets) {
      TicketSlot& t = v.tickets[idx];
      st(t.pool, ld(j.ticket_image.pool));
      st(t.pool_generation, ld(j.ticket_image.pool_generation));
      st(t.bytes, ld(j.ticket_image.bytes));
    } else {
      note(damage, shm::detail::format("journal: replaced ticket {} is outside the table of {}",
                                       idx, v.params.max_tickets));
    }
  } else if (op == static_cast<std::uint32_t>(JournalOp::HandOver)) {
    const std::uint32_t idx = ld(j.ticket);
    if (idx < v.params.max_tickets) {
      TicketSlot& t = v.tickets[idx];
      const TicketImage& img = j.ticket_image;
      st(t.owner_slot, ld(img.owner_slot));
      st(t.owner_generation, ld(img.owner_generation));
      st(t.offer_slot, ld(img.offer_slot));
      st(t.offer_generation, ld(img.offer_generation));
      st(t.offered, ld(img.offered));
    } else {
      note(damage, shm::detail::format("journal: handed-over ticket {} is outside the table of {}",
                                       idx, v.params.max_tickets));
    }
  } else if (op == static_cast<std::uint32_t>(JournalOp::Admit)) {
    const std::uint32_t n = ld(j.count);
    const std::uint32_t bc = ld(c.lock.bucket_count);
    if (n > kMaxConstraints || bc > v.params.max_buckets) {
      note(damage,
           shm::detail::format("journal: {} bucket images (limit {}), {} buckets (table {})", n,
                               kMaxConstraints, bc, v.params.max_buckets));
    } else {
      for (std::uint32_t k = 0; k < n; ++k) {
        const BucketImage& img = j.buckets[k];
        const std::uint32_t bi = ld(img.index);
        if (bi >= bc) {
          note(damage, shm::detail::format("journal: bucket {} is not defined ({} are)", bi, bc));
          continue;
        }
        Bucket& b = v.buckets[bi];
        st(b.tokens, ld(img.tokens));
        st(b.frac, ld(img.frac));
        st(b.started, ld(img.started));
        st(b.last_ms, ld(img.last_ms));
      }
    }
  } else if (op != static_cast<std::uint32_t>(JournalOp::None)) {
    note(damage, shm::detail::format("journal: unknown operation {}", op));
  }
  // The journal is applied (or damaged): retire it before recomputing.
  st(j.op, JournalOp::None);
  Tally t = tally(v);
  for (auto& p : t.problems) note(damage, std::move(p));
  if (damage.empty()) {
    // A holder killed between freeing the last ticket of an orphaned pool and
    // closing it: finish the close.
    for (std::uint32_t i = 0; i < v.params.max_pools; ++i) {
      Pool& p = v.pools[i];
      if (ld(p.state) == kPoolOpen && ld(p.owner_slot) == kOrphanedPool && t.pool_tickets[i] == 0) {
        // [ledger.P2] release: pairs with the acquire [ledger.P'] of unlocked readers.
        p.state.store(static_cast<std::uint32_t>(PoolStatus::Free), std::memory_order_release);
        --t.open_pools;
      }
    }
    store_derived(v, t);
  } else {
    st(c.lock.faulted, 1u);
  }
  bump(c.stats.repairs);
  end_write(c);
  return damage;
}

void hand_over(const View& v, std::uint32_t index, Owner to) noexcept {
  LedgerControl& c = *v.control;
  TicketSlot& t = v.tickets[index];
  Journal& j = c.journal;
  TicketImage& img = j.ticket_image;
  st(j.ticket, index);
  st(img.owner_slot, ld(t.owner_slot));
  st(img.owner_generation, ld(t.owner_generation));
  st(img.offer_slot, ld(t.offer_slot));
  st(img.offer_generation, ld(t.offer_generation));
  st(img.offered, ld(t.offered));
  st(j.op, JournalOp::HandOver);
  // [ledger.J1] release fence: crash order, as in replace().
  std::atomic_thread_fence(std::memory_order_release);
  st(t.owner_slot, to.slot);
  detail::ledger_crash_point(test_hooks::LedgerCrashPoint::HandOverMidOwner);
  st(t.owner_generation, to.generation);
  st(t.offered, 0u);
  // [ledger.J2] release: crash order, as in replace().
  j.op.store(static_cast<std::uint32_t>(JournalOp::None), std::memory_order_release);
  bump(c.stats.handovers);
}

Result<ReclaimReport> release_owned(const View& v, const Segment& segment, Owner owner, Match match,
                                    Departure departure, bool count_as_reclaim) {
  const bool leaving = departure == Departure::Leave;
  // Offer targets must be live attachments; liveness needs the kernel (a lock
  // probe per slot), so it is read before the lock, and the slot's generation
  // and state are checked again under it.
  const std::vector<SlotInfo> slots = leaving ? segment.slots() : std::vector<SlotInfo>{};
  const std::string& path = segment.path();
  if (auto ok = lock(v, path); !ok) return std::unexpected(ok.error());
  LedgerControl& c = *v.control;
  Held held(c);
  auto matches = [&](std::uint32_t slot, std::uint32_t generation) {
    return slot == owner.slot && (match == Match::Exact ? generation == owner.generation
                                                        : generation != owner.generation);
  };
  auto live_attachment = [&](Owner o) {
    if (o.slot >= kMaxAttachments || matches(o.slot, o.generation)) return false;
    const AttachmentSlot& hs = segment.header().slots[o.slot];
    // [seg.A'] acquire: pairs with attach()'s release [seg.A].
    if (hs.state.load(std::memory_order_acquire) !=
            static_cast<std::uint32_t>(SlotState::Attached) ||
        hs.generation.load(std::memory_order_acquire) != o.generation)
      return false;
    for (const SlotInfo& s : slots)
      if (s.index == o.slot && s.generation == o.generation)
        return s.state == SlotState::Attached && s.liveness == Liveness::Alive;
    return false;
  };
  ReclaimReport report;
  for (std::uint32_t i = 0; i < v.params.max_tickets; ++i) {
    TicketSlot& t = v.tickets[i];
    if (ld(t.state) == static_cast<std::uint32_t>(TicketState::Free)) continue;
    if (!matches(ld(t.owner_slot), ld(t.owner_generation))) {
      // An offer to the leaving attachment is void: the owner keeps its ticket.
      if (leaving && ld(t.offered) != 0 && matches(ld(t.offer_slot), ld(t.offer_generation))) {
        held.write();
        st(t.offered, 0u);
        ++report.offers_voided;
      }
      continue;
    }
    auto ch = resolve(v, i, path);
    if (!ch) return std::unexpected(ch.error());
    if (leaving && ld(t.offered) != 0) {
      const Owner to{ld(t.offer_slot), ld(t.offer_generation)};
      if (live_attachment(to)) {  // in flight to a live receiver: it becomes the owner
        held.write();
        hand_over(v, i, to);
        ++report.handed_over;
        continue;
      }
    }
    if (auto ok = check_uncharge(v, *ch, path); !ok) return std::unexpected(ok.error());
    held.write();
    free_ticket(v, i, *ch);
    ++report.tickets;
    if (__builtin_add_overflow(report.bytes, ch->bytes, &report.bytes)) report.bytes = INT64_MAX;
  }
  bump(c.stats.releases, report.tickets);
  if (count_as_reclaim) bump(c.stats.reclaimed_tickets, report.tickets);
  // The owner leaves: its empty pools close; a pool where other owners still
  // hold tickets is orphaned, and closes with its last ticket (free_ticket).
  for (std::uint32_t i = 0; leaving && i < v.params.max_pools; ++i) {
    Pool& p = v.pools[i];
    if (ld(p.state) != static_cast<std::uint32_t>(PoolStatus::Open) ||
        !matches(ld(p.owner_slot), ld(p.owner_generation)))
      continue;
    held.write();
    if (ld(p.tickets) == 0) {
      close_pool_held(c, p);
      ++report.pools_closed;
    } else {
      st(p.owner_slot, kOrphanedPool);
      ++report.pools_orphaned;
    }
  }
  return report;
}

}  // namespace internal

namespace {

void check_owners(const Tally& t, std::span<const SlotInfo> slots, std::vector<std::string>& out) {
  if (slots.empty()) return;
  for (const OwnerSum& o : t.owners) {
    std::string_view why = "no longer attached";
    for (const SlotInfo& s : slots) {
      if (s.index != o.owner.slot) continue;
      if (s.generation == o.owner.generation && s.state == SlotState::Attached) {
        why = s.liveness == Liveness::Alive ? std::string_view() : std::string_view("dead");
      }
    }
    if (!why.empty())
      note(out, shm::detail::format(
                    "{} tickets ({} bytes) belong to attachment slot {} generation {}, which is "
                    "{}: pending reclaim",
                    o.tickets, o.bytes, o.owner.slot, o.owner.generation, why));
  }
}

}  // namespace

// Orphaned pools: open with no owner (kOrphanedPool), or owned by an
// attachment that is gone or dead (orphaned until its reclaim runs).
void check_pools(const View& v, const Tally& t, std::span<const SlotInfo> slots,
                 std::vector<std::string>& out) {
  for (std::uint32_t i = 0; i < v.params.max_pools; ++i) {
    const Pool& p = v.pools[i];
    if (ld(p.state) != kPoolOpen) continue;
    const std::uint32_t slot = ld(p.owner_slot), generation = ld(p.owner_generation);
    const std::uint64_t held = t.pool_tickets[i];
    if (slot == kOrphanedPool) {
      note(out, held == 0 ? shm::detail::format("pool '{}' ({}#{}) is orphaned and holds no "
                                                "tickets, yet it is still open",
                                                read_label(p.label), i, ld(p.generation))
                          : shm::detail::format("pool '{}' ({}#{}) is orphaned: its owner left; "
                                                "it closes when its last {} tickets are released",
                                                read_label(p.label), i, ld(p.generation), held));
      continue;
    }
    if (slots.empty()) continue;
    std::string_view why = "no longer attached";
    for (const SlotInfo& s : slots)
      if (s.index == slot && s.generation == generation && s.state == SlotState::Attached)
        why = s.liveness == Liveness::Alive ? std::string_view() : std::string_view("dead");
    if (!why.empty())
      note(out, shm::detail::format("pool '{}' ({}#{}) is orphaned: its owner, attachment slot {} "
                                    "generation {}, is {}; pending reclaim ({} tickets in it)",
                                    read_label(p.label), i, ld(p.generation), slot, generation, why,
                                    held));
  }
}

std::vector<std::string> internal::verify_tables(const View& v, std::span<const SlotInfo> slots) {
  Tally t = tally(v);
  std::vector<std::string> out = std::move(t.problems);
  compare(v, t, out);
  check_owners(t, slots, out);
  check_pools(v, t, slots, out);
  return out;
}

std::vector<std::string> verify_unlocked(const View& v, std::span<const SlotInfo> slots) {
  using namespace std::chrono;
  const LedgerControl& c = *v.control;
  const auto start = steady_clock::now();
  constexpr int kAttempts = 200;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    // [ledger.V2'] acquire: pairs with end_write's release [ledger.V2].
    const std::uint64_t v1 = c.lock.version.load(std::memory_order_acquire);
    if ((v1 & 1u) != 0) {
      std::this_thread::sleep_for(milliseconds(1));
      continue;
    }
    std::vector<std::string> out = verify_tables(v, slots);
    // [ledger.V1'] acquire fence: orders the data loads above before the re-check;
    // pairs with begin_write's release fence [ledger.V1].
    std::atomic_thread_fence(std::memory_order_acquire);
    // relaxed: ordered by the fence just above.
    if (c.lock.version.load(std::memory_order_relaxed) == v1) return out;
    if (attempt % 8 == 7) std::this_thread::sleep_for(microseconds(200));
  }
  const auto ms = duration_cast<milliseconds>(steady_clock::now() - start).count();
  // [ledger.V2'] acquire, as above.
  const std::uint64_t now = c.lock.version.load(std::memory_order_acquire);
  if ((now & 1u) != 0)
    return {shm::detail::format(
        "a ledger mutation has been in progress for at least {} ms (version {} is odd): "
        "its holder may have died inside the lock; the next locker repairs it",
        ms, now)};
  return {shm::detail::format(
      "no stable snapshot in {} attempts over {} ms: writers are too busy; retry", kAttempts, ms)};
}

}  // namespace shm::ledger
