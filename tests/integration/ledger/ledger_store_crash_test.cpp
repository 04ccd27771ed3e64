// Every multi-step ledger operation killed at every store it makes to the
// mapping (N = 1 ... all, a counting hook: common/store_crash.hpp), with its
// ticket at the first, a middle and the last index of the ticket table.
// Tickets belong to the attachment that reserved them, so the operation runs
// in a child that first, unarmed, makes the ticket it needs (its prelude),
// then arms the countdown for the operation itself. After each kill the next
// locker repairs, and the accounts must be exactly those before or after the
// operation (each computed by a child running the same prelude, and the
// operation, without a kill), never faulted, the invariant check clean.
// The child is dead in every case, and the tickets of a dead owner are
// released (by the repair when it died holding the lock, by a reclaim
// otherwise), so for an operation on the child's own ticket the two states
// coincide once its tickets are reclaimed: what is checked then is that no
// kill leaves a charge behind, and that the tickets the parent holds at the
// first, middle or last indexes are untouched. admit's bucket levels (no
// owner) show before and after apart.
#include "common/store_crash.hpp"
#include "common/temp_root.hpp"
#include "shm/ledger/ledger.hpp"
#include "shm/segment/segment.hpp"
#include "shm/testing/store_crash.hpp"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <array>
#include <functional>
#include <optional>
#include <string>
#include <tuple>

namespace shm::ledger_store_crash_test {
namespace {

constexpr const char* kName = "ledger-store-crash";
constexpr std::uint32_t kTickets = 8;
constexpr CategoryId kMsg{0}, kCtl{1};
constexpr std::array<std::uint32_t, 3> kBefore{0, 3, 7};  // tickets the parent holds first

LedgerConfig config() {
  LedgerConfig c;
  c.params.global_limit = 10'000;
  c.params.control_reserve = 1'000;
  c.params.max_tickets = kTickets;
  c.params.max_categories = 4;
  c.params.max_pools = 4;
  c.params.max_buckets = 4;
  c.categories = {{"msg", 8'000, Partition::Ordinary}, {"ctl", 2'000, Partition::Control}};
  c.buckets = {{"a", 10, 5}, {"b", 100, 50}, {"c", 1000, 500}};
  return c;
}

PoolSpec pool_spec(std::string label) {
  return PoolSpec{std::move(label), {{"all", 9'000, {kMsg, kCtl}}}, 0};
}

// The accounts, tickets and bucket levels: everything but owners, statistics
// and the seqlock version (a repair moves those).
struct Accounts {
  AccountState global;
  std::array<AccountState, ledger::kPartitions> partitions;
  std::vector<CategoryState> categories;
  std::vector<std::tuple<std::string, std::uint64_t, std::vector<AccountState>>> pools;
  std::vector<std::tuple<std::int64_t, std::uint32_t, std::int64_t>> buckets;
  std::uint64_t live_tickets = 0;
  friend bool operator==(const Accounts&, const Accounts&) = default;
};
Accounts accounts(const LedgerSnapshot& s) {
  Accounts a{s.global, s.partitions, s.categories, {}, {}, s.live_tickets};
  for (const PoolState& p : s.pools) a.pools.emplace_back(p.label, p.tickets, p.accounts);
  for (const BucketState& b : s.buckets)
    a.buckets.emplace_back(b.level.tokens, b.level.frac, b.level.last_ms);
  return a;
}
std::string show(const Accounts& a) {
  std::string out = "global used " + std::to_string(a.global.used) + " reserved " +
                    std::to_string(a.global.reserved) + ", tickets " +
                    std::to_string(a.live_tickets) + ", buckets";
  for (const auto& [tokens, frac, last] : a.buckets) out += " " + std::to_string(tokens);
  return out;
}

// What the child does: the prelude (unarmed) makes the ticket, the operation
// (armed) is the change under test. Both get the child's own handle.
struct Case {
  const char* name;
  std::function<std::optional<Ticket>(Ledger&)> prelude;
  std::function<bool(Ledger&, std::optional<Ticket>)> op;
};

std::optional<Ticket> reserve(Ledger& l, CategoryId category, std::int64_t bytes) {
  auto pool = l.pool("main");
  if (!pool) return std::nullopt;
  auto r = l.reserve(*pool, category, bytes);
  if (!r || !r->has_value()) return std::nullopt;
  return **r;
}

const Case kCases[] = {
    {"reserve", [](Ledger&) { return std::optional<Ticket>{}; },
     [](Ledger& l, std::optional<Ticket>) { return reserve(l, kMsg, 300).has_value(); }},
    {"commit", [](Ledger& l) { return reserve(l, kMsg, 300); },
     [](Ledger& l, std::optional<Ticket> t) { return t && l.commit(*t).has_value(); }},
    {"release_reserved", [](Ledger& l) { return reserve(l, kCtl, 200); },
     [](Ledger& l, std::optional<Ticket> t) { return t && l.release(*t).has_value(); }},
    {"release_committed",
     [](Ledger& l) -> std::optional<Ticket> {
       auto t = reserve(l, kMsg, 300);
       if (!t || !l.commit(*t)) return std::nullopt;
       return t;
     },
     [](Ledger& l, std::optional<Ticket> t) { return t && l.release(*t).has_value(); }},
    {"replace", [](Ledger& l) { return reserve(l, kMsg, 300); },
     [](Ledger& l, std::optional<Ticket> t) {
       auto other = l.pool("other");
       if (!t || !other) return false;
       auto r = l.replace(*t, *other, 700);
       return r && r->has_value();
     }},
    {"admit", [](Ledger&) { return std::optional<Ticket>{}; },
     [](Ledger& l, std::optional<Ticket>) {
       const std::array<Constraint, 3> c{{{BucketId{0}, 2}, {BucketId{1}, 20}, {BucketId{2}, 200}}};
       auto r = l.admit(c, 1'000);
       return r && r->has_value();
     }},
};

// Runs the prelude and, if asked, the operation in a child without a kill;
// false when the child failed.
bool in_child(const Case& c, bool with_op) {
  const pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) {
    auto l = Ledger::open(kName);
    if (!l) ::_exit(2);
    const std::optional<Ticket> t = c.prelude(*l);
    ::_exit(!with_op || c.op(*l, t) ? 0 : 3);
  }
  int status = 0;
  return ::waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

class LedgerStoreCrashTest : public ::testing::TestWithParam<std::tuple<int, std::size_t>> {
 protected:
  test::TempRoot root_;
};

TEST_P(LedgerStoreCrashTest, KilledAtEveryStoreLeavesTheAccountsBeforeOrAfter) {
  const Case& c = kCases[std::get<0>(GetParam())];
  const std::uint32_t held = kBefore[std::get<1>(GetParam())];
  std::optional<Ledger> parent;
  auto fresh = [&] {
    parent.reset();
    (void)Segment::unlink(kName);
    auto l = Ledger::create(kName, config());
    ASSERT_TRUE(l) << l.error().what();
    parent.emplace(std::move(*l));
    ASSERT_TRUE(parent->open_pool(pool_spec("main")));
    ASSERT_TRUE(parent->open_pool(pool_spec("other")));
    // A first admit starts the buckets' clocks (a bucket starts full).
    const std::array<Constraint, 3> start{{{BucketId{0}, 1}, {BucketId{1}, 1}, {BucketId{2}, 1}}};
    ASSERT_TRUE(parent->admit(start, 900));
    for (std::uint32_t i = 0; i < held; ++i) ASSERT_TRUE(reserve(*parent, kMsg, 10));
  };
  auto raw = [&] {
    auto s = parent->snapshot();  // under the lock: the next locker, it repairs
    EXPECT_TRUE(s) << s.error().what();
    return s ? accounts(*s) : Accounts{};
  };
  // The child is dead after every run. A repair releases what the holder
  // that died inside held; the clean runs' children died outside the lock,
  // so their tickets wait for a reclaim. Reclaiming every dead owner's
  // tickets first compares like with like.
  auto state = [&] {
    (void)raw();
    auto tickets = parent->tickets();
    EXPECT_TRUE(tickets) << tickets.error().what();
    std::vector<Owner> dead;
    for (const TicketInfo& t : tickets ? *tickets : std::vector<TicketInfo>{})
      if (!(t.owner == parent->owner()) &&
          std::find(dead.begin(), dead.end(), t.owner) == dead.end())
        dead.push_back(t.owner);
    for (const Owner& o : dead) {
      auto r = parent->reclaim(o);
      EXPECT_TRUE(r) << r.error().what();
    }
    return raw();
  };

  fresh();
  ASSERT_TRUE(in_child(c, false)) << c.name << ": the prelude";
  const Accounts raw_before = raw();
  const Accounts before = state();
  fresh();
  ASSERT_TRUE(in_child(c, true)) << c.name << ": the operation without a kill";
  ASSERT_NE(raw(), raw_before) << c.name << ": the operation changed nothing";
  const Accounts after = state();

  std::uint64_t back = 0, forward = 0;
  const test::StoreCrashRun run = test::kill_at_every_store(
      fresh,
      [&] {
        // The prelude unarmed, then the countdown again for the operation.
        const std::uint64_t n = test_hooks::store_crash_remaining();
        test_hooks::arm_store_crash(0);
        auto l = Ledger::open(kName);
        if (!l) return false;
        const std::optional<Ticket> t = c.prelude(*l);
        test_hooks::arm_store_crash(n);
        return c.op(*l, t);
      },
      [&](std::uint64_t n) {
        const Accounts now = state();
        back += now == before;
        forward += now == after;
        EXPECT_TRUE(now == before || now == after)
            << c.name << " killed at store " << n << "\n  repaired: " << show(now)
            << "\n  before:   " << show(before) << "\n  after:    " << show(after);
        auto problems = parent->verify();
        ASSERT_TRUE(problems) << problems.error().what();
        EXPECT_TRUE(problems->empty())
            << c.name << " killed at store " << n << ": " << problems->front();
      });
  ASSERT_TRUE(run.error.empty()) << c.name << ": " << run.error;
  EXPECT_GE(run.kills, 3u) << c.name << ": the hook killed almost nothing";
  EXPECT_EQ(run.kills, run.stores);
  EXPECT_GT(back + forward, 0u);
  std::printf("%s held=%u: %llu stores, %llu rolled back, %llu rolled forward\n", c.name, held,
              static_cast<unsigned long long>(run.stores), static_cast<unsigned long long>(back),
              static_cast<unsigned long long>(forward));
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<int, std::size_t>>& info) {
  return test::position_name(kCases[std::get<0>(info.param)].name, std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    EveryOperation, LedgerStoreCrashTest,
    ::testing::Combine(::testing::Range(0, static_cast<int>(std::size(kCases))),
                       ::testing::Values(std::size_t{0}, std::size_t{1}, std::size_t{2})),
    case_name);

}  // namespace
}  // namespace shm::ledger_store_crash_test
