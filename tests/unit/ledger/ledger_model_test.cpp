// 10,000 fixed-seed random operations against an in-memory reference model,
// with every counter compared after each step.
//
// The model is deliberately naive: it keeps live tickets in a map and derives
// every account's counters by summing them, and it keeps bucket levels as one
// integer count of thousandths of a token. It shares no code with the ledger
// beyond the public types.
#include "common/temp_root.hpp"
#include "shm/ledger/ledger.hpp"
#include "unit/ledger/ledger_numbers.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace shm {
namespace {

using test::kMax;
constexpr int kSteps = 10'000;
using test::i128;

struct ModelAccount {
  std::string label;
  std::int64_t limit = 0;
  std::uint64_t rejections = 0;
};

struct ModelPool {
  std::string label;
  PoolId id;
  bool open = false;
  std::uint32_t ticket_limit = 0;
  std::uint64_t rejections = 0;
  std::vector<ModelAccount> accounts;
  std::vector<std::uint64_t> masks;
};

struct ModelTicket {
  int owner = 0;  // which handle
  std::size_t pool = 0;
  std::uint32_t category = 0;
  std::int64_t bytes = 0;
  bool committed = false;
};

struct ModelBucket {
  std::string label;
  std::int64_t rate = 0, burst = 0;
  i128 units = 0;  // thousandths of a token
  bool started = false;
  std::int64_t last_ms = 0;
  std::uint64_t admits = 0, rejections = 0;
};

struct Expect {
  enum Kind { Ok, Rejected, Error } kind = Ok;
  LedgerScope scope{};
  std::string label;
  std::int64_t used = 0, requested = 0, limit = 0;
  Errc code{};
};

Expect ok() {
  return {};
}
Expect error(Errc code) {
  Expect e;
  e.kind = Expect::Error;
  e.code = code;
  return e;
}
Expect rejected(LedgerScope s, std::string label, std::int64_t used, std::int64_t requested,
                std::int64_t limit) {
  Expect e;
  e.kind = Expect::Rejected;
  e.scope = s;
  e.label = std::move(label);
  e.used = used;
  e.requested = requested;
  e.limit = limit;
  return e;
}

class LedgerModel {
 public:
  std::int64_t global_limit = 0, control_reserve = 0;
  std::uint32_t max_tickets = 0, max_pools = 0, max_categories = 0, max_buckets = 0;
  ModelAccount global{"global", 0, 0};
  ModelAccount partitions[2];
  std::vector<ModelAccount> categories;
  std::vector<int> category_partition;
  std::vector<ModelPool> pools;
  std::map<std::pair<std::uint32_t, std::uint32_t>, ModelTicket> live;  // (index, generation)
  std::vector<ModelBucket> buckets;
  LedgerStats stats;
  std::uint64_t incarnation = 0;  // the segment's: every handle it issued carries it

  struct Sums {
    std::int64_t used = 0, reserved = 0;
    std::uint64_t tickets = 0;
  };
  template <class Pred>
  Sums sum(Pred pred) const {
    Sums s;
    for (const auto& [key, t] : live)
      if (pred(t)) {
        s.used += t.bytes;
        if (!t.committed) s.reserved += t.bytes;
        ++s.tickets;
      }
    return s;
  }
  Sums global_sum() const {
    return sum([](const ModelTicket&) { return true; });
  }
  Sums partition_sum(int p) const {
    return sum([&](const ModelTicket& t) { return category_partition[t.category] == p; });
  }
  Sums category_sum(std::uint32_t c) const {
    return sum([&](const ModelTicket& t) { return t.category == c; });
  }
  int account_of(std::size_t pool, std::uint32_t category) const {
    for (std::size_t a = 0; a < pools[pool].masks.size(); ++a)
      if ((pools[pool].masks[a] >> category) & 1u) return static_cast<int>(a);
    return -1;
  }
  Sums pool_account_sum(std::size_t pool, int account) const {
    return sum([&](const ModelTicket& t) {
      return t.pool == pool && account_of(pool, t.category) == account;
    });
  }
  std::uint64_t pool_tickets(std::size_t pool) const {
    return sum([&](const ModelTicket& t) { return t.pool == pool; }).tickets;
  }
  ModelAccount& partition_account(std::uint32_t category) {
    return partitions[category_partition[category]];
  }

  std::optional<std::size_t> pool_index(PoolId id) const {
    for (std::size_t i = 0; i < pools.size(); ++i)
      if (pools[i].open && pools[i].id == id) return i;
    return std::nullopt;
  }

  // ---- reserve
  Expect reserve(int /*owner*/, PoolId id, std::uint32_t category, std::int64_t bytes) {
    if (id.ledger != incarnation) return error(Errc::ForeignHandle);
    if (bytes < 0 || id.index >= max_pools || category >= max_categories)
      return error(Errc::InvalidArgument);
    const auto pi = pool_index(id);
    if (!pi) return error(Errc::InvalidArgument);
    if (category >= categories.size()) return error(Errc::InvalidArgument);
    const int acct = account_of(*pi, category);
    if (acct < 0) return error(Errc::InvalidArgument);
    ModelPool& p = pools[*pi];
    if (live.size() >= max_tickets) {
      ++stats.rejections[0];
      return rejected(LedgerScope::Tickets, "tickets", static_cast<std::int64_t>(live.size()), 1,
                      max_tickets);
    }
    const std::uint64_t pt = pool_tickets(*pi);
    if (p.ticket_limit != 0 && pt >= p.ticket_limit) {
      ++stats.rejections[0];
      ++p.rejections;
      return rejected(LedgerScope::Tickets, p.label + "/tickets", static_cast<std::int64_t>(pt), 1,
                      p.ticket_limit);
    }
    struct Dim {
      LedgerScope scope;
      ModelAccount* account;
      std::string label;
      std::int64_t used;
    };
    const int part = category_partition[category];
    const Dim dims[] = {
        {LedgerScope::Global, &global, "global", global_sum().used},
        {LedgerScope::Partition, &partitions[part], part == 0 ? "ordinary" : "control",
         partition_sum(part).used},
        {LedgerScope::Category, &categories[category], categories[category].label,
         category_sum(category).used},
        {LedgerScope::Pool, &p.accounts[acct], p.label + "/" + p.accounts[acct].label,
         pool_account_sum(*pi, acct).used},
    };
    for (const Dim& d : dims) {
      if (bytes > d.account->limit - d.used) {
        ++stats.rejections[static_cast<std::size_t>(d.scope)];
        ++d.account->rejections;
        if (d.scope == LedgerScope::Pool) ++p.rejections;
        return rejected(d.scope, d.label, d.used, bytes, d.account->limit);
      }
    }
    ++stats.reserves;
    return ok();
  }
  void record_reservation(Ticket t, int owner, PoolId id, std::uint32_t category,
                          std::int64_t bytes) {
    live[{t.index, t.generation}] = ModelTicket{owner, *pool_index(id), category, bytes, false};
  }

  // ---- ticket checks shared by commit / release / replace
  Expect check_ticket(int owner, Ticket t) {
    if (t.ledger != incarnation) return error(Errc::ForeignHandle);
    if (t.index >= max_tickets) return error(Errc::InvalidArgument);
    auto it = live.find({t.index, t.generation});
    if (it == live.end()) {
      ++stats.refused_releases;
      return error(Errc::InvalidArgument);
    }
    if (it->second.owner != owner) {
      ++stats.refused_releases;
      return error(Errc::PermissionDenied);
    }
    return ok();
  }

  Expect commit(int owner, Ticket t) {
    Expect e = check_ticket(owner, t);
    if (e.kind != Expect::Ok) return e;
    ModelTicket& mt = live[{t.index, t.generation}];
    if (mt.committed) return error(Errc::InvalidArgument);
    mt.committed = true;
    ++stats.commits;
    return ok();
  }

  Expect release(int owner, Ticket t) {
    Expect e = check_ticket(owner, t);
    if (e.kind != Expect::Ok) return e;
    live.erase({t.index, t.generation});
    ++stats.releases;
    return ok();
  }

  Expect replace(int owner, Ticket t, PoolId id, std::int64_t bytes) {
    if (t.ledger != incarnation || id.ledger != incarnation) return error(Errc::ForeignHandle);
    if (bytes < 0 || t.index >= max_tickets || id.index >= max_pools)
      return error(Errc::InvalidArgument);
    Expect e = check_ticket(owner, t);
    if (e.kind != Expect::Ok) return e;
    const auto pi = pool_index(id);
    if (!pi) return error(Errc::InvalidArgument);
    ModelTicket& mt = live[{t.index, t.generation}];
    const int acct = account_of(*pi, mt.category);
    if (acct < 0) return error(Errc::InvalidArgument);
    ModelPool& np = pools[*pi];
    const std::int64_t delta = bytes - mt.bytes;
    const bool same_pool = *pi == mt.pool;
    const std::uint64_t pt = pool_tickets(*pi);
    if (!same_pool && np.ticket_limit != 0 && pt >= np.ticket_limit) {
      ++stats.rejections[0];
      ++np.rejections;
      return rejected(LedgerScope::Tickets, np.label + "/tickets", static_cast<std::int64_t>(pt), 1,
                      np.ticket_limit);
    }
    const int part = category_partition[mt.category];
    struct Dim {
      LedgerScope scope;
      ModelAccount* account;
      std::string label;
      std::int64_t used;
    };
    const Dim dims[] = {
        {LedgerScope::Global, &global, "global", global_sum().used},
        {LedgerScope::Partition, &partitions[part], part == 0 ? "ordinary" : "control",
         partition_sum(part).used},
        {LedgerScope::Category, &categories[mt.category], categories[mt.category].label,
         category_sum(mt.category).used},
    };
    for (const Dim& d : dims) {
      if (delta > d.account->limit - d.used) {
        ++stats.rejections[static_cast<std::size_t>(d.scope)];
        ++d.account->rejections;
        return rejected(d.scope, d.label, d.used, delta, d.account->limit);
      }
    }
    const std::int64_t used = pool_account_sum(*pi, acct).used;
    const std::int64_t need = same_pool ? delta : bytes;
    if (need > np.accounts[acct].limit - used) {
      ++stats.rejections[static_cast<std::size_t>(LedgerScope::Pool)];
      ++np.accounts[acct].rejections;
      ++np.rejections;
      return rejected(LedgerScope::Pool, np.label + "/" + np.accounts[acct].label, used, need,
                      np.accounts[acct].limit);
    }
    mt.pool = *pi;
    mt.bytes = bytes;
    ++stats.replaces;
    return ok();
  }

  // ---- admit
  void refill(ModelBucket& b, std::int64_t now) const {
    if (!b.started) {
      b.started = true;
      b.last_ms = now;
      return;
    }
    if (now <= b.last_ms) return;
    const i128 cap = static_cast<i128>(b.burst) * 1000;
    b.units += static_cast<i128>(b.rate) * (now - b.last_ms);
    if (b.units >= cap) b.units = cap;
    b.last_ms = now;
  }
  Expect admit(const std::vector<Constraint>& cs, std::int64_t now) {
    if (now < 0 || cs.size() > kMaxConstraints) return error(Errc::InvalidArgument);
    std::vector<std::pair<std::uint32_t, std::int64_t>> merged;
    for (const Constraint& c : cs) {
      if (c.cost < 0) return error(Errc::InvalidArgument);
      auto it = std::find_if(merged.begin(), merged.end(),
                             [&](auto& m) { return m.first == c.bucket.index; });
      if (it == merged.end()) {
        merged.emplace_back(c.bucket.index, c.cost);
      } else {
        if (c.cost > kMax - it->second) return error(Errc::InvalidArgument);
        it->second += c.cost;
      }
    }
    if (merged.empty()) return ok();
    for (auto& [b, cost] : merged)
      if (b >= max_buckets || b >= buckets.size()) return error(Errc::InvalidArgument);
    std::vector<ModelBucket> next;
    for (auto& [b, cost] : merged) {
      ModelBucket copy = buckets[b];
      refill(copy, now);
      const std::int64_t whole = static_cast<std::int64_t>(copy.units / 1000);
      if (cost > whole) {
        ++buckets[b].rejections;
        ++stats.rejections[static_cast<std::size_t>(LedgerScope::Bucket)];
        return rejected(LedgerScope::Bucket, copy.label, copy.burst - whole, cost, copy.burst);
      }
      copy.units -= static_cast<i128>(cost) * 1000;
      next.push_back(copy);
    }
    for (std::size_t k = 0; k < merged.size(); ++k) {
      next[k].admits = buckets[merged[k].first].admits + 1;
      buckets[merged[k].first] = next[k];
    }
    ++stats.admits;
    return ok();
  }
};

void expect_account(const AccountState& got, const ModelAccount& m, const LedgerModel::Sums& s,
                    const std::string& where) {
  EXPECT_EQ(got.label, m.label) << where;
  EXPECT_EQ(got.limit, m.limit) << where;
  EXPECT_EQ(got.used, s.used) << where << " used";
  EXPECT_EQ(got.reserved, s.reserved) << where << " reserved";
  EXPECT_EQ(got.tickets, s.tickets) << where << " tickets";
  EXPECT_EQ(got.rejections, m.rejections) << where << " rejections";
}

void compare(const LedgerSnapshot& s, const LedgerModel& m, int step) {
  const std::string at = "step " + std::to_string(step) + ": ";
  expect_account(s.global, m.global, m.global_sum(), at + "global");
  for (int p = 0; p < 2; ++p)
    expect_account(s.partitions[p], m.partitions[p], m.partition_sum(p), at + "partition");
  ASSERT_EQ(s.categories.size(), m.categories.size()) << at;
  for (std::uint32_t c = 0; c < m.categories.size(); ++c)
    expect_account(s.categories[c].account, m.categories[c], m.category_sum(c),
                   at + "category " + m.categories[c].label);
  std::size_t open = 0;
  for (std::size_t i = 0; i < m.pools.size(); ++i) {
    const ModelPool& mp = m.pools[i];
    if (!mp.open) continue;
    ++open;
    auto it = std::find_if(s.pools.begin(), s.pools.end(),
                           [&](const PoolState& p) { return p.id == mp.id; });
    ASSERT_NE(it, s.pools.end()) << at << "pool " << mp.label << " missing";
    EXPECT_EQ(it->label, mp.label) << at;
    EXPECT_EQ(it->tickets, m.pool_tickets(i)) << at << "pool " << mp.label << " tickets";
    EXPECT_EQ(it->rejections, mp.rejections) << at << "pool " << mp.label << " rejections";
    ASSERT_EQ(it->accounts.size(), mp.accounts.size()) << at;
    for (std::size_t a = 0; a < mp.accounts.size(); ++a)
      expect_account(it->accounts[a], mp.accounts[a], m.pool_account_sum(i, static_cast<int>(a)),
                     at + "pool " + mp.label + "/" + mp.accounts[a].label);
  }
  EXPECT_EQ(s.pools.size(), open) << at;
  EXPECT_EQ(s.live_tickets, m.live.size()) << at;
  ASSERT_EQ(s.buckets.size(), m.buckets.size()) << at;
  for (std::size_t b = 0; b < m.buckets.size(); ++b) {
    const ModelBucket& mb = m.buckets[b];
    const BucketState& got = s.buckets[b];
    EXPECT_EQ(got.level.tokens, static_cast<std::int64_t>(mb.units / 1000))
        << at << "bucket " << mb.label;
    EXPECT_EQ(got.level.frac, static_cast<std::uint32_t>(mb.units % 1000))
        << at << "bucket " << mb.label;
    EXPECT_EQ(got.level.started, mb.started) << at << "bucket " << mb.label;
    if (mb.started) {
      EXPECT_EQ(got.level.last_ms, mb.last_ms) << at << "bucket " << mb.label;
    }
    EXPECT_EQ(got.admits, mb.admits) << at << "bucket " << mb.label;
    EXPECT_EQ(got.rejections, mb.rejections) << at << "bucket " << mb.label;
  }
  EXPECT_EQ(s.stats, m.stats) << at << "operation counters";
  EXPECT_EQ(s.version % 2, 0u) << at;
}

template <class V>
void check_value(const Result<std::expected<V, Rejection>>& got, const Expect& want, int step,
                 const char* op) {
  const std::string at = "step " + std::to_string(step) + " " + op;
  if (want.kind == Expect::Error) {
    ASSERT_FALSE(got) << at << ": expected error " << to_string(want.code);
    EXPECT_EQ(got.error().code, want.code) << at << ": " << got.error().what();
    return;
  }
  ASSERT_TRUE(got) << at << ": " << got.error().what();
  if (want.kind == Expect::Ok) {
    ASSERT_TRUE(got->has_value()) << at << ": unexpected rejection " << got->error().describe();
    return;
  }
  ASSERT_FALSE(got->has_value()) << at << ": expected a rejection by " << want.label;
  const Rejection& r = got->error();
  EXPECT_EQ(r.scope, want.scope) << at << ": " << r.describe();
  EXPECT_EQ(r.label(), want.label) << at << ": " << r.describe();
  EXPECT_EQ(r.used, want.used) << at << ": " << r.describe();
  EXPECT_EQ(r.requested, want.requested) << at << ": " << r.describe();
  EXPECT_EQ(r.limit, want.limit) << at << ": " << r.describe();
}

void check_plain(const Result<void>& got, const Expect& want, int step, const char* op) {
  const std::string at = "step " + std::to_string(step) + " " + op;
  if (want.kind == Expect::Error) {
    ASSERT_FALSE(got) << at << ": expected error " << to_string(want.code);
    EXPECT_EQ(got.error().code, want.code) << at << ": " << got.error().what();
  } else {
    ASSERT_TRUE(got) << at << ": " << got.error().what();
  }
}

TEST(LedgerModelTest, TenThousandRandomOperationsMatchTheReferenceModelAfterEveryStep) {
  test::TempRoot root;
  LedgerConfig cfg;
  cfg.params = {10'000, 2'000, 48, 8, 8, 4};
  cfg.categories = {{"msg", 6'000, Partition::Ordinary},
                    {"sub", 2'500, Partition::Ordinary},
                    {"sess", 3'000, Partition::Ordinary},
                    {"ctl", 2'500, Partition::Control}};
  cfg.buckets = {{"api", 7, 20}, {"ip", 1000, 50}, {"slow", 1, 3}, {"off", 0, 0}};
  auto created = Ledger::create("model", cfg);
  ASSERT_TRUE(created) << created.error().what();
  auto second = Ledger::open("model");
  ASSERT_TRUE(second) << second.error().what();
  Ledger* handles[2] = {&*created, &*second};

  LedgerModel m;
  m.global_limit = cfg.params.global_limit;
  m.control_reserve = cfg.params.control_reserve;
  m.max_tickets = cfg.params.max_tickets;
  m.max_categories = cfg.params.max_categories;
  m.max_pools = cfg.params.max_pools;
  m.max_buckets = cfg.params.max_buckets;
  m.incarnation = created->segment().header().incarnation;
  m.global = {"global", m.global_limit, 0};
  m.partitions[0] = {"ordinary", m.global_limit - m.control_reserve, 0};
  m.partitions[1] = {"control", m.global_limit, 0};
  for (const auto& c : cfg.categories) {
    m.categories.push_back({c.label, c.limit, 0});
    m.category_partition.push_back(c.partition == Partition::Control ? 1 : 0);
  }
  for (const auto& b : cfg.buckets) {
    ModelBucket mb;
    mb.label = b.label;
    mb.rate = b.rate_per_sec;
    mb.burst = b.burst;
    mb.units = static_cast<i128>(b.burst) * 1000;
    m.buckets.push_back(mb);
  }

  // Pool shapes: a shared aggregate account, split accounts, a capped pool.
  const std::vector<PoolSpec> shapes = {
      {"p0", {{"all", 4'000, {}}}, 0},
      {"p1",
       {{"data", 2'000, {CategoryId{0}, CategoryId{1}}},
        {"meta", 1'500, {CategoryId{2}, CategoryId{3}}}},
       0},
      {"p2", {{"data", 5'000, {CategoryId{0}}}, {"ctl", 800, {CategoryId{3}}}}, 6},
  };
  auto open_shape = [&](std::size_t shape, int owner) {
    auto id = handles[owner]->open_pool(shapes[shape]);
    ASSERT_TRUE(id) << id.error().what();
    ModelPool mp;
    mp.label = shapes[shape].label;
    mp.id = *id;
    mp.open = true;
    mp.ticket_limit = shapes[shape].max_tickets;
    for (const auto& a : shapes[shape].accounts) {
      mp.accounts.push_back({a.label, a.limit, 0});
      std::uint64_t mask = 0;
      for (CategoryId c : a.categories) mask |= std::uint64_t{1} << c.index;
      mp.masks.push_back(a.categories.empty() ? ~std::uint64_t{0} : mask);
    }
    m.pools[shape] = mp;
  };
  m.pools.resize(shapes.size());
  for (std::size_t i = 0; i < shapes.size(); ++i) open_shape(i, 0);

  std::mt19937_64 rng(0x5eed'1ed9e7ull);
  auto pick = [&](std::uint64_t n) { return static_cast<std::size_t>(rng() % n); };
  auto random_bytes = [&]() -> std::int64_t {
    switch (pick(20)) {
      case 0:
        return 0;
      case 1:
        return -static_cast<std::int64_t>(pick(5)) - 1;
      case 2:
        return kMax;
      case 3:
        return static_cast<std::int64_t>(1'000 + pick(3'000));
      default:
        return static_cast<std::int64_t>(pick(700));
    }
  };
  std::vector<std::pair<Ticket, int>> released;  // stale handles to retry
  std::int64_t now = 1'000;
  std::uint64_t rejections = 0, errors = 0;

  for (int step = 0; step < kSteps; ++step) {
    const int owner = static_cast<int>(pick(2));
    Ledger& l = *handles[owner];
    const std::size_t op = pick(100);
    // Now and then a handle of another ledger (another incarnation): ForeignHandle.
    auto foreign = [&](auto handle) {
      if (pick(40) == 0) handle.ledger = m.incarnation ^ (std::uint64_t{1} << pick(64));
      return handle;
    };
    auto any_ticket = [&]() -> std::pair<Ticket, int> {
      if (!released.empty() && pick(8) == 0) return released[pick(released.size())];
      if (m.live.empty())
        return {foreign(Ticket{static_cast<std::uint32_t>(pick(60)), 1, m.incarnation}), 0};
      auto it = m.live.begin();
      std::advance(it, static_cast<std::ptrdiff_t>(pick(m.live.size())));
      return {foreign(Ticket{it->first.first, it->first.second, m.incarnation}), it->second.owner};
    };
    auto any_pool = [&]() -> PoolId {
      if (pick(25) == 0)
        return PoolId{static_cast<std::uint32_t>(pick(10)), static_cast<std::uint32_t>(pick(3)),
                      m.incarnation};
      return foreign(m.pools[pick(m.pools.size())].id);
    };
    if (op < 45) {  // reserve
      const PoolId pid = any_pool();
      const auto cat = static_cast<std::uint32_t>(pick(30) == 0 ? 4 + pick(6) : pick(4));
      const std::int64_t bytes = random_bytes();
      const Expect want = m.reserve(owner, pid, cat, bytes);
      auto got = l.reserve(pid, CategoryId{cat}, bytes);
      check_value(got, want, step, "reserve");
      if (want.kind == Expect::Ok) m.record_reservation(**got, owner, pid, cat, bytes);
      rejections += want.kind == Expect::Rejected;
      errors += want.kind == Expect::Error;
    } else if (op < 55) {  // commit
      auto [t, holder] = any_ticket();
      const int who = pick(5) == 0 ? 1 - holder : holder;
      const Expect want = m.commit(who, t);
      check_plain(handles[who]->commit(t), want, step, "commit");
    } else if (op < 78) {  // release
      auto [t, holder] = any_ticket();
      const int who = pick(6) == 0 ? 1 - holder : holder;
      const Expect want = m.release(who, t);
      check_plain(handles[who]->release(t), want, step, "release");
      if (want.kind == Expect::Ok) released.emplace_back(t, holder);
    } else if (op < 88) {  // replace
      auto [t, holder] = any_ticket();
      const int who = pick(8) == 0 ? 1 - holder : holder;
      const PoolId pid = any_pool();
      const std::int64_t bytes = random_bytes();
      const Expect want = m.replace(who, t, pid, bytes);
      check_value(handles[who]->replace(t, pid, bytes), want, step, "replace");
      rejections += want.kind == Expect::Rejected;
    } else if (op < 98) {  // admit
      now += static_cast<std::int64_t>(pick(400));
      std::int64_t at = now;
      if (pick(10) == 0) at = now - static_cast<std::int64_t>(pick(800));  // a regression
      if (pick(200) == 0) at = -1;
      std::vector<Constraint> cs;
      const std::size_t n = pick(50) == 0 ? 17 : 1 + pick(5);
      for (std::size_t k = 0; k < n; ++k)
        cs.push_back({BucketId{static_cast<std::uint32_t>(pick(60) == 0 ? 4 + pick(2) : pick(4))},
                      pick(40) == 0 ? -1 : static_cast<std::int64_t>(pick(6))});
      const Expect want = m.admit(cs, at);
      check_value(l.admit(cs, at), want, step, "admit");
      rejections += want.kind == Expect::Rejected;
    } else {  // close and reopen a pool (refused while it holds tickets)
      const std::size_t shape = pick(m.pools.size());
      const std::uint64_t held = m.pool_tickets(shape);
      auto closed = l.close_pool(m.pools[shape].id);
      if (held != 0) {
        ASSERT_FALSE(closed) << "step " << step << ": closed a pool holding " << held << " tickets";
        EXPECT_EQ(closed.error().code, Errc::InvalidArgument);
      } else {
        ASSERT_TRUE(closed) << "step " << step << ": " << closed.error().what();
        m.pools[shape].open = false;
        open_shape(shape, owner);
      }
    }
    if (::testing::Test::HasFatalFailure()) return;
    auto snapshot = l.snapshot();
    ASSERT_TRUE(snapshot) << snapshot.error().what();
    compare(*snapshot, m, step);
    if (::testing::Test::HasFailure()) return;
  }
  // The run exercised every kind of outcome.
  EXPECT_GT(rejections, 500u);
  EXPECT_GT(errors, 100u);
  EXPECT_GT(m.stats.releases, 1'000u);
  EXPECT_GT(m.stats.replaces, 100u);
  EXPECT_GT(m.stats.admits, 100u);
  auto lines = handles[0]->verify();
  ASSERT_TRUE(lines);
  EXPECT_TRUE(lines->empty()) << (*lines)[0];
}

}  // namespace
}  // namespace shm
