// The ledger across real processes: random load under a sampling checker,
// kill -9 inside the critical section, and reclaim of a killed holder.
#include "shm/ledger/ledger.hpp"
#include "common/scale.hpp"
#include "common/subprocess.hpp"
#include "common/temp_root.hpp"
#include "common/text.hpp"
#include "shm/segment/kind.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace shm {
namespace {

using namespace std::chrono_literals;

using test::contains;

test::Subprocess worker(std::vector<std::string> args) {
  args.insert(args.begin(), test::helper_path("ledger_worker"));
  return test::Subprocess(std::move(args));
}

// The attachment slot left behind by a killed process.
std::optional<SlotInfo> dead_slot(const Segment& seg) {
  for (const SlotInfo& s : seg.slots())
    if (s.liveness == Liveness::Dead) return s;
  return std::nullopt;
}

class LedgerProcessTest : public ::testing::Test {
 protected:
  test::TempRoot root_;
};

TEST_F(LedgerProcessTest, FourProcessesAtRandomNeverPushAnAccountOverItsLimitAndEndAtZero) {
  LedgerConfig cfg;
  cfg.params = {20'000, 4'000, 256, 8, 16, 4};
  cfg.categories = {{"a", 9'000, Partition::Ordinary},
                    {"b", 6'000, Partition::Ordinary},
                    {"c", 5'000, Partition::Control}};
  cfg.buckets = {{"api", 2'000, 50}};
  auto l = Ledger::create("budget", cfg);
  ASSERT_TRUE(l) << l.error().what();
  auto shared = l->open_pool({"shared", {{"all", 12'000, {}}}, 0});
  ASSERT_TRUE(shared) << shared.error().what();

  const auto millis = static_cast<long>(std::max<std::uint64_t>(test::scaled(3'000), 500));
  test::Subprocess checker(
      {test::helper_path("ledger_checker"), "budget", std::to_string(millis + 300)});
  std::vector<test::Subprocess> workers;
  for (int i = 1; i <= 4; ++i)
    workers.push_back(worker({"random", "budget", std::to_string(millis), std::to_string(i)}));

  std::uint64_t reserves = 0, rejections = 0;
  for (auto& w : workers) {
    const int rc = w.wait(std::chrono::milliseconds(millis) + 60s);
    ASSERT_EQ(rc, 0) << w.output();
    ASSERT_TRUE(contains(w.output(), "done ops=")) << w.output();
    unsigned long long ops = 0, r = 0, j = 0;
    ASSERT_EQ(std::sscanf(w.output().c_str(), "done ops=%llu reserves=%llu rejections=%llu", &ops,
                          &r, &j),
              3)
        << w.output();
    reserves += r;
    rejections += j;
  }
  // Exit 0 also means at least one snapshot was verified against the tickets.
  ASSERT_EQ(checker.wait(60s), 0) << checker.output();
  unsigned long long samples = 0, verified = 0, skipped = 0, violations = 1;
  ASSERT_EQ(std::sscanf(checker.output().c_str(),
                        "samples %llu verified %llu skipped %llu violations %llu", &samples,
                        &verified, &skipped, &violations),
            4)
      << checker.output();
  EXPECT_EQ(violations, 0u) << checker.output();
  RecordProperty("checker", checker.output());
  RecordProperty("reserves", static_cast<int>(reserves));
  RecordProperty("rejections", static_cast<int>(rejections));
  EXPECT_GT(samples, 0u);
  EXPECT_GT(verified, 0u) << checker.output();
  EXPECT_GT(reserves, 100u);
  EXPECT_GT(rejections, 0u) << "limits were never reached: the test did not test them";

  auto s = l->snapshot();
  ASSERT_TRUE(s) << s.error().what();
  EXPECT_EQ(s->global.used, 0);
  EXPECT_EQ(s->global.tickets, 0u);
  EXPECT_EQ(s->partitions[0].used + s->partitions[1].used, 0);
  for (const CategoryState& c : s->categories) EXPECT_EQ(c.account.used, 0) << c.account.label;
  EXPECT_EQ(s->live_tickets, 0u);
  ASSERT_EQ(s->pools.size(), 1u);  // the workers closed their own pools
  EXPECT_EQ(s->pools[0].accounts[0].used, 0);
  auto lines = l->verify();
  ASSERT_TRUE(lines);
  EXPECT_TRUE(lines->empty()) << (*lines)[0];
}

// A crash-point fixture: pools "crash" and "other", buckets 0 and 1, as
// test_ledger_worker crash expects.
LedgerConfig crash_config() {
  LedgerConfig cfg;
  cfg.params = {10'000, 1'000, 32, 4, 4, 4};
  cfg.categories = {{"a", 5'000, Partition::Ordinary}};
  cfg.buckets = {{"api", 10, 5}, {"ip", 1'000, 100}};
  return cfg;
}

// Starts test_ledger_worker crash at `point` and kills it -9 while it holds
// the ledger mutex with a mutation half done.
void kill_inside(const std::string& name, const std::string& point) {
  auto helper = worker({"crash", name, point});
  ASSERT_TRUE(helper.wait_for_line("inside", 20s)) << helper.output();
  helper.kill(SIGKILL);
  ASSERT_EQ(helper.wait(20s), 128 + SIGKILL) << helper.output();
}

// A checker that can take no consistent snapshot has verified nothing: it
// must say so and fail, not report its samples as verified.
TEST_F(LedgerProcessTest, CheckerFailsWhenNoSnapshotCouldBeVerified) {
  auto l = Ledger::create("stalled", crash_config());
  ASSERT_TRUE(l) << l.error().what();
  ASSERT_TRUE(l->open_pool({"crash", {{"all", 5'000, {}}}, 0}));
  ASSERT_TRUE(l->open_pool({"other", {{"all", 5'000, {}}}, 0}));
  // A holder killed inside the lock leaves the seqlock odd until the next
  // locker repairs: no snapshot can be had meanwhile.
  ASSERT_NO_FATAL_FAILURE(kill_inside("stalled", "reserve-published"));
  ASSERT_EQ(ledger::read_snapshot(l->view()).version % 2, 1u);

  test::Subprocess stalled({test::helper_path("ledger_checker"), "stalled", "1000"});
  EXPECT_EQ(stalled.wait(60s), 1) << stalled.output();
  const std::string out = stalled.output();
  unsigned long long samples = 0, verified = 1, skipped = 0, violations = 1;
  ASSERT_EQ(std::sscanf(out.c_str(), "samples %llu verified %llu skipped %llu violations %llu",
                        &samples, &verified, &skipped, &violations),
            4)
      << out;
  EXPECT_GE(samples, 16u) << out;
  EXPECT_EQ(verified, 0u) << out;
  EXPECT_GT(skipped, 0u) << out;
  EXPECT_EQ(violations, 0u) << out;
  EXPECT_TRUE(contains(out, fmt::format("skipped: 0 busy, {} in progress", skipped))) << out;
  EXPECT_TRUE(contains(out, "skip: a ledger mutation has been in progress")) << out;
  EXPECT_TRUE(contains(out, "error: no snapshot could be verified")) << out;

  // Once the next locker has repaired, the same checker verifies and passes.
  auto s = l->snapshot();
  ASSERT_TRUE(s) << s.error().what();
  EXPECT_EQ(s->stats.repairs, 1u);
  test::Subprocess repaired({test::helper_path("ledger_checker"), "stalled", "300"});
  EXPECT_EQ(repaired.wait(60s), 0) << repaired.output();
  EXPECT_TRUE(contains(repaired.output(), "skipped 0 violations 0")) << repaired.output();
}

// ---------------------------------------------------------------- kill -9 inside the lock

struct LedgerCrashCase {
  const char* point;
  std::int64_t used_after_repair;  // global bytes once the test reserved its second ticket
  std::int64_t reserved_after_repair;
  std::int64_t dead_owner_bytes;  // what reclaim then releases
};

class LedgerCrashTest : public ::testing::TestWithParam<LedgerCrashCase> {
 protected:
  test::TempRoot root_;
};

TEST_P(LedgerCrashTest, ProcessKilledInsideTheCriticalSectionLeavesALedgerTheNextLockerRepairs) {
  const LedgerCrashCase& c = GetParam();
  LedgerConfig cfg;
  cfg.params = {10'000, 1'000, 32, 4, 4, 4};
  cfg.categories = {{"a", 5'000, Partition::Ordinary}};
  cfg.buckets = {{"api", 10, 5}, {"ip", 1'000, 100}};
  auto l = Ledger::create("crashy", cfg);
  ASSERT_TRUE(l) << l.error().what();
  auto crash = l->open_pool({"crash", {{"all", 5'000, {}}}, 0});
  auto other = l->open_pool({"other", {{"all", 5'000, {}}}, 0});
  ASSERT_TRUE(crash && other);
  auto mine = l->reserve(*crash, CategoryId{0}, 10);
  ASSERT_TRUE(mine && mine->has_value());
  const auto before = l->snapshot();
  ASSERT_TRUE(before);

  auto helper = worker({"crash", "crashy", c.point});
  ASSERT_TRUE(helper.wait_for_line("inside", 20s)) << helper.output();
  helper.kill(SIGKILL);  // kill -9 while it holds the ledger mutex
  EXPECT_EQ(helper.wait(20s), 128 + SIGKILL);

  // An observer (read-only, no lock) sees the interrupted mutation.
  auto any = Segment::open_any("crashy", {});
  ASSERT_TRUE(any) << any.error().what();
  const KindDescriptor* kind = find_kind(kLedgerKind);
  ASSERT_NE(kind, nullptr);
  const std::vector<std::string> during = kind->verify(*any);
  ASSERT_EQ(during.size(), 1u);
  EXPECT_TRUE(contains(during[0], "in progress")) << during[0];

  // The next locker repairs and goes on.
  auto next = l->reserve(*crash, CategoryId{0}, 20);
  ASSERT_TRUE(next) << next.error().what();
  ASSERT_TRUE(next->has_value()) << next->error().describe();
  auto s = l->snapshot();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->stats.repairs, 1u);
  EXPECT_EQ(s->global.used, c.used_after_repair);
  EXPECT_EQ(s->global.reserved, c.reserved_after_repair);
  EXPECT_EQ(s->version % 2, 0u);
  if (std::string(c.point) == "replace") {
    EXPECT_EQ(s->pools[1].accounts[0].used, 0);  // the transfer to "other" never happened
    EXPECT_EQ(s->pools[0].accounts[0].used, c.used_after_repair);
  }
  if (std::string(c.point) == "admit") {
    for (std::size_t b = 0; b < 2; ++b) {  // the journal undid the half-applied admission
      EXPECT_EQ(s->buckets[b].level.tokens, before->buckets[b].level.tokens) << b;
      EXPECT_EQ(s->buckets[b].level.started, before->buckets[b].level.started) << b;
    }
  }
  if (std::string(c.point) == "release-orphan") {
    // Killed after freeing the orphaned pool's last ticket, before closing
    // it: repair finishes the close.
    ASSERT_EQ(s->pools.size(), 2u);
    for (const PoolState& p : s->pools) EXPECT_NE(p.label, "orph");
  }
  if (std::string(c.point) == "set-rate") {
    // Killed with the settled level half stored: the journal restores the
    // level the helper's admission left (3 of 5 tokens), and the old rate stays.
    EXPECT_EQ(s->buckets[0].level.tokens, 3);
    EXPECT_EQ(s->buckets[0].level.frac, 0u);
    EXPECT_EQ(s->buckets[0].rate_per_sec, 10);
  }
  if (std::string(c.point) == "set-burst") {
    // Killed between lowering the level and storing the new burst: the level
    // is already within the new burst, and so within the old one.
    EXPECT_EQ(s->buckets[0].level.tokens, 2);
    EXPECT_LE(s->buckets[0].level.tokens, s->buckets[0].burst);
  }
  // Consistent, except for the dead helper's tickets awaiting reclaim.
  auto lines = l->verify();
  ASSERT_TRUE(lines);
  if (c.dead_owner_bytes > 0 || std::string(c.point) == "reserve-published") {
    ASSERT_EQ(lines->size(), 1u) << (*lines)[0];
    EXPECT_TRUE(contains((*lines)[0], "which is dead: pending reclaim")) << (*lines)[0];
  } else {
    EXPECT_TRUE(lines->empty()) << (*lines)[0];
  }

  auto dead = dead_slot(*any);
  ASSERT_TRUE(dead);
  auto reclaim_result = kind->reclaim(*any, *dead);
  ASSERT_TRUE(reclaim_result) << reclaim_result.error().what();
  const std::vector<std::string>& reclaimed = *reclaim_result;
  ASSERT_EQ(reclaimed.size(), 1u);
  EXPECT_TRUE(contains(reclaimed[0], fmt::format("({} bytes)", c.dead_owner_bytes)))
      << reclaimed[0];
  auto freed = reclaim_slot(*any, dead->index);
  ASSERT_TRUE(freed && *freed);
  s = l->snapshot();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->global.used, 30);
  auto after = l->verify();
  ASSERT_TRUE(after);
  EXPECT_TRUE(after->empty()) << (*after)[0];
}

INSTANTIATE_TEST_SUITE_P(CrashPoints, LedgerCrashTest,
                         ::testing::Values(LedgerCrashCase{"reserve-published", 107, 107, 77},
                                           LedgerCrashCase{"reserve-counters", 107, 107, 77},
                                           LedgerCrashCase{"commit", 85, 30, 55},
                                           LedgerCrashCase{"release", 30, 30, 0},
                                           LedgerCrashCase{"replace", 85, 85, 55},
                                           LedgerCrashCase{"admit", 30, 30, 0},
                                           LedgerCrashCase{"set-burst", 30, 30, 0},
                                           LedgerCrashCase{"set-rate", 30, 30, 0},
                                           LedgerCrashCase{"release-orphan", 30, 30, 0}),
                         [](const ::testing::TestParamInfo<LedgerCrashCase>& param) {
                           std::string n = param.param.point;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// ---------------------------------------------------------------- repair that finds damage

// What a test writes into the mapping while the killed holder's lock waits
// for repair, and the line repair then reports.
struct Damage {
  const char* name;
  void (*write)(const ledger::View& v, Ticket mine);
  const char* report;
};
void PrintTo(const Damage& d, std::ostream* os) {
  *os << d.name;
}

void damage_ticket_state(const ledger::View& v, Ticket mine) {
  v.tickets[mine.index].state.store(7, std::memory_order_relaxed);
}
void damage_journal_op(const ledger::View& v, Ticket) {
  v.control->journal.op.store(9, std::memory_order_relaxed);
}
void damage_journal_ticket(const ledger::View& v, Ticket) {
  v.control->journal.ticket.store(999, std::memory_order_relaxed);
  v.control->journal.op.store(static_cast<std::uint32_t>(ledger::JournalOp::Replace),
                              std::memory_order_relaxed);
}
void damage_journal_bucket(const ledger::View& v, Ticket) {
  v.control->journal.count.store(1, std::memory_order_relaxed);
  v.control->journal.buckets[0].index.store(3, std::memory_order_relaxed);
  v.control->journal.op.store(static_cast<std::uint32_t>(ledger::JournalOp::Admit),
                              std::memory_order_relaxed);
}
void damage_category_count(const ledger::View& v, Ticket) {
  v.control->lock.category_count.store(99, std::memory_order_relaxed);
}
void damage_pool_state(const ledger::View& v, Ticket) {
  v.pools[1].state.store(5, std::memory_order_relaxed);  // "other", which holds no ticket
}

class LedgerDamageTest : public ::testing::TestWithParam<Damage> {
 protected:
  test::TempRoot root_;
};

// A holder killed mid-reserve leaves derived counters that disagree with the
// tickets; repair would recompute them, but damage the tickets cannot explain
// makes it stop: it reports the damage, faults the ledger and stores nothing,
// and every later operation fails Faulted instead of trusting the tables.
TEST_P(LedgerDamageTest, RepairThatFindsDamageFaultsTheLedgerAndEveryLaterOperationSaysSo) {
  const Damage& d = GetParam();
  auto l = Ledger::create("damaged", crash_config());
  ASSERT_TRUE(l) << l.error().what();
  auto crash = l->open_pool({"crash", {{"all", 5'000, {}}}, 0});
  auto other = l->open_pool({"other", {{"all", 5'000, {}}}, 0});
  ASSERT_TRUE(crash && other);
  auto mine = l->reserve(*crash, CategoryId{0}, 10);
  ASSERT_TRUE(mine && mine->has_value());
  ASSERT_NO_FATAL_FAILURE(kill_inside("damaged", "reserve-counters"));
  const ledger::View& v = l->view();
  d.write(v, **mine);
  const LedgerSnapshot before = ledger::read_snapshot(v);
  ASSERT_EQ(before.version % 2, 1u);
  ASSERT_EQ(before.global.used, 10 + 77);  // the dead holder charged global, not the category
  ASSERT_EQ(before.global.tickets, 2u);

  // The next locker repairs, finds the damage and says what it is.
  auto first = l->reserve(*crash, CategoryId{0}, 20);
  ASSERT_FALSE(first) << "repair accepted " << d.name;
  EXPECT_EQ(first.error().code, Errc::Corrupt) << first.error().what();
  EXPECT_TRUE(contains(first.error().message,
                       "a holder of the ledger lock died and repair found damage; the ledger is "
                       "now faulted: "))
      << first.error().what();
  EXPECT_TRUE(contains(first.error().message, d.report)) << first.error().what();

  // Faulted, repaired once, the write section closed, and the derived
  // counters left as the dead holder left them (nothing recomputed from
  // tables that cannot be trusted).
  const LedgerSnapshot after = ledger::read_snapshot(v);
  EXPECT_TRUE(after.faulted);
  EXPECT_EQ(after.stats.repairs, 1u);
  EXPECT_EQ(after.version % 2, 0u);
  EXPECT_EQ(after.global, before.global);
  EXPECT_EQ(after.partitions, before.partitions);
  EXPECT_EQ(after.live_tickets, before.live_tickets);
  EXPECT_EQ(after.stats.reserves, before.stats.reserves);

  // Every operation that locks now fails Faulted, naming the cure.
  const std::string faulted = "the ledger is faulted (a repair found damage";
  auto expect_faulted = [&](const auto& r, const char* op) {
    ASSERT_FALSE(r) << op << " succeeded on a faulted ledger";
    EXPECT_EQ(r.error().code, Errc::Faulted) << op << ": " << r.error().what();
    EXPECT_TRUE(contains(r.error().message, faulted)) << op << ": " << r.error().what();
    EXPECT_TRUE(contains(r.error().message, "re-create it")) << op << ": " << r.error().what();
  };
  expect_faulted(l->reserve(*crash, CategoryId{0}, 20), "reserve");
  expect_faulted(l->commit(**mine), "commit");
  expect_faulted(l->release(**mine), "release");
  expect_faulted(l->replace(**mine, *other, 5), "replace");
  expect_faulted(l->admit(std::vector<Constraint>{{BucketId{0}, 1}}, 0), "admit");
  expect_faulted(l->open_pool({"late", {{"all", 5, {}}}, 0}), "open_pool");
  expect_faulted(l->close_pool(*other), "close_pool");
  expect_faulted(l->define_category({"late", 5, Partition::Ordinary}), "define_category");
  expect_faulted(l->define_bucket({"late", 1, 1}), "define_bucket");
  expect_faulted(l->release_all(), "release_all");
  expect_faulted(l->snapshot(), "snapshot");
  expect_faulted(l->tickets(), "tickets");
  expect_faulted(l->verify(), "verify");
  expect_faulted(Ledger::open("damaged"), "open");  // its sweep of earlier slot holders locks

  // The observers see it without the lock; the sidecar's reclaim refuses it.
  auto any = Segment::open_any("damaged", {});
  ASSERT_TRUE(any) << any.error().what();
  const KindDescriptor* kind = find_kind(kLedgerKind);
  ASSERT_NE(kind, nullptr);
  const std::vector<std::string> lines = kind->verify(*any);
  ASSERT_FALSE(lines.empty());
  EXPECT_TRUE(std::any_of(lines.begin(), lines.end(), [](const std::string& line) {
    return contains(line, "the ledger is faulted: a repair found damage");
  })) << lines[0];
  auto dead = dead_slot(*any);
  ASSERT_TRUE(dead);
  auto refused = kind->reclaim(*any, *dead);
  ASSERT_FALSE(refused) << "reclaim of a faulted ledger succeeded";
  EXPECT_EQ(refused.error().code, Errc::Faulted) << refused.error().what();
  EXPECT_TRUE(contains(refused.error().message, faulted)) << refused.error().what();
  auto via_programs = reclaim_dead_attacher(*any, *kind, *dead);
  ASSERT_FALSE(via_programs);
  EXPECT_EQ(via_programs.error().code, Errc::Faulted) << via_programs.error().what();
  EXPECT_TRUE(contains(via_programs.error().message, "ledger reclaim of slot"))
      << via_programs.error().what();
  EXPECT_EQ(any->liveness(dead->index), Liveness::Dead) << "kept for a retry";
  EXPECT_EQ(ledger::read_snapshot(v).global, before.global);
}

INSTANTIATE_TEST_SUITE_P(
    Damages, LedgerDamageTest,
    ::testing::Values(
        Damage{"ticket_state", damage_ticket_state, "has state 7"},
        Damage{"journal_op", damage_journal_op, "journal: unknown operation 9"},
        Damage{"journal_ticket", damage_journal_ticket,
               "journal: replaced ticket 999 is outside the table of 32"},
        Damage{"journal_bucket", damage_journal_bucket, "journal: bucket 3 is not defined (2 are)"},
        Damage{"category_count", damage_category_count, "category count 99 exceeds the table of 4"},
        Damage{"pool_state", damage_pool_state, "pool 1 has state 5"}),
    [](const ::testing::TestParamInfo<Damage>& param) { return std::string(param.param.name); });

// A repairer that unlocks without marking the mutex consistent (a bug, or a
// process killed between the two) leaves it unrecoverable: every operation
// then fails Faulted, and none touches the tables.
TEST_F(LedgerProcessTest, UnrecoverableMutexFailsEveryOperationFaultedAndChangesNothing) {
  auto l = Ledger::create("wedged", crash_config());
  ASSERT_TRUE(l) << l.error().what();
  auto crash = l->open_pool({"crash", {{"all", 5'000, {}}}, 0});
  ASSERT_TRUE(crash);
  ASSERT_TRUE(l->open_pool({"other", {{"all", 5'000, {}}}, 0}));
  auto mine = l->reserve(*crash, CategoryId{0}, 10);
  ASSERT_TRUE(mine && mine->has_value());
  ASSERT_NO_FATAL_FAILURE(kill_inside("wedged", "reserve-counters"));
  const ledger::View& v = l->view();
  ASSERT_EQ(v.control->lock.mutex.lock(), detail::LockResult::OwnerDied);
  v.control->lock.mutex.unlock();  // without mark_consistent(): ENOTRECOVERABLE from now on
  const LedgerSnapshot before = ledger::read_snapshot(v);

  const std::string what =
      "the ledger mutex is not recoverable (a repairer unlocked it without marking it "
      "consistent)";
  auto expect_faulted = [&](const auto& r, const char* op) {
    ASSERT_FALSE(r) << op << " succeeded on an unrecoverable mutex";
    EXPECT_EQ(r.error().code, Errc::Faulted) << op << ": " << r.error().what();
    EXPECT_TRUE(contains(r.error().message, what)) << op << ": " << r.error().what();
  };
  expect_faulted(l->reserve(*crash, CategoryId{0}, 20), "reserve");
  expect_faulted(l->release(**mine), "release");
  expect_faulted(l->admit(std::vector<Constraint>{{BucketId{0}, 1}}, 0), "admit");
  expect_faulted(l->define_category({"late", 5, Partition::Ordinary}), "define_category");
  expect_faulted(l->snapshot(), "snapshot");
  expect_faulted(l->verify(), "verify");
  expect_faulted(Ledger::open("wedged"), "open");

  // Nothing was repaired or changed: the interrupted mutation is still there.
  const LedgerSnapshot after = ledger::read_snapshot(v);
  EXPECT_EQ(after.version, before.version);
  EXPECT_EQ(after.version % 2, 1u);
  EXPECT_EQ(after.stats, before.stats);
  EXPECT_EQ(after.stats.repairs, 0u);
  EXPECT_EQ(after.global, before.global);
  EXPECT_EQ(after.live_tickets, before.live_tickets);
  EXPECT_FALSE(after.faulted);
}

// ---------------------------------------------------------------- reclaim

TEST_F(LedgerProcessTest, ReclaimReleasesExactlyTheChargesOfAKilledHolder) {
  LedgerConfig cfg;
  cfg.params = {100'000, 0, 64, 4, 4, 0};
  cfg.categories = {{"a", 100'000, Partition::Ordinary}};
  auto l = Ledger::create("held", cfg);
  ASSERT_TRUE(l) << l.error().what();
  auto p = l->open_pool({"p", {{"all", 100'000, {}}}, 0});
  ASSERT_TRUE(p);
  ASSERT_TRUE(l->reserve(*p, CategoryId{0}, 100)->has_value());
  ASSERT_TRUE(l->reserve(*p, CategoryId{0}, 50)->has_value());

  auto a = worker({"hold", "held", "p", "5", "40"});
  auto b = worker({"hold", "held", "p", "3", "70"});
  ASSERT_TRUE(a.wait_for_line("ready", 20s)) << a.output();
  ASSERT_TRUE(b.wait_for_line("ready", 20s)) << b.output();
  unsigned count = 0, slot = 0, generation = 0;
  long long total = 0;
  ASSERT_EQ(
      std::sscanf(a.output().c_str(), "held %u %lld %u %u", &count, &total, &slot, &generation), 4);
  EXPECT_EQ(l->snapshot()->global.used, 150 + 200 + 210);

  a.kill(SIGKILL);
  ASSERT_EQ(a.wait(20s), 128 + SIGKILL);
  auto seg = Segment::open_any("held", {});
  ASSERT_TRUE(seg);
  const KindDescriptor* kind = find_kind(kLedgerKind);
  const std::vector<std::string> pending = kind->verify(*seg);
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_TRUE(contains(
      pending[0], fmt::format("5 tickets (200 bytes) belong to attachment slot {} generation {}, "
                              "which is dead",
                              slot, generation)))
      << pending[0];

  auto dead = dead_slot(*seg);
  ASSERT_TRUE(dead);
  ASSERT_EQ(dead->index, slot);
  ASSERT_EQ(dead->generation, generation);
  auto reclaimed = kind->reclaim(*seg, *dead);
  ASSERT_TRUE(reclaimed) << reclaimed.error().what();
  const std::vector<std::string>& lines = *reclaimed;
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(contains(lines[0], "released 5 tickets (200 bytes)")) << lines[0];

  auto s = l->snapshot();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->global.used, 150 + 210);  // exactly A's charges went
  EXPECT_EQ(s->live_tickets, 2u + 3u);
  EXPECT_EQ(s->stats.reclaimed_tickets, 5u);
  auto tickets = l->tickets();
  ASSERT_TRUE(tickets);
  for (const TicketInfo& t : *tickets) EXPECT_NE(t.owner, (Owner{slot, generation}));
  // A second reclaim of the same owner finds nothing.
  auto again = kind->reclaim(*seg, *dead);
  ASSERT_TRUE(again) << again.error().what();
  EXPECT_TRUE(contains(again->at(0), "released 0 tickets"));
  EXPECT_TRUE(kind->verify(*seg).empty());

  b.kill(SIGKILL);
  ASSERT_EQ(b.wait(20s), 128 + SIGKILL);
  ASSERT_TRUE(*reclaim_slot(*seg, dead->index));  // A's slot is free now; B's is the dead one
  auto dead_b = dead_slot(*seg);
  ASSERT_TRUE(dead_b);
  auto of_b = kind->reclaim(*seg, *dead_b);
  ASSERT_TRUE(of_b) << of_b.error().what();
  EXPECT_TRUE(contains(of_b->at(0), "released 3 tickets (210 bytes)"));
  EXPECT_EQ(l->snapshot()->global.used, 150);
}

// Ledger::reclaim from another handle: a killed holder's tickets and its own
// (now empty) pool go, nothing of anyone else's.
TEST_F(LedgerProcessTest, ReclaimFromAnotherHandleReleasesADeadOwnersTicketsAndClosesItsPools) {
  LedgerConfig cfg;
  cfg.params = {100'000, 0, 64, 4, 4, 0};
  cfg.categories = {{"a", 100'000, Partition::Ordinary}};
  auto l = Ledger::create("reclaimed", cfg);
  ASSERT_TRUE(l) << l.error().what();
  auto p = l->open_pool({"p", {{"all", 100'000, {}}}, 0});
  ASSERT_TRUE(p);
  ASSERT_TRUE(l->reserve(*p, CategoryId{0}, 100)->has_value());

  auto a = worker({"hold", "reclaimed", "+own", "4", "25"});
  auto b = worker({"hold", "reclaimed", "p", "2", "30"});
  ASSERT_TRUE(a.wait_for_line("ready", 20s)) << a.output();
  ASSERT_TRUE(b.wait_for_line("ready", 20s)) << b.output();
  unsigned count = 0, slot = 0, generation = 0;
  long long total = 0;
  ASSERT_EQ(
      std::sscanf(a.output().c_str(), "held %u %lld %u %u", &count, &total, &slot, &generation), 4);
  const Owner dead{slot, generation};
  // Refused while the owner lives.
  auto early = l->reclaim(dead);
  ASSERT_FALSE(early);
  EXPECT_EQ(early.error().code, Errc::InvalidArgument);
  EXPECT_EQ(l->snapshot()->live_tickets, 1u + 4u + 2u);

  a.kill(SIGKILL);
  ASSERT_EQ(a.wait(20s), 128 + SIGKILL);
  auto report = l->reclaim(dead);
  ASSERT_TRUE(report) << report.error().what();
  EXPECT_EQ(report->tickets, 4u);
  EXPECT_EQ(report->bytes, 100);
  EXPECT_EQ(report->pools_closed, 1u);  // "own", empty once its tickets went
  auto s = l->snapshot();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->global.used, 100 + 60);  // exactly the dead owner's charges went
  EXPECT_EQ(s->live_tickets, 1u + 2u);
  EXPECT_EQ(s->stats.reclaimed_tickets, 4u);
  ASSERT_EQ(s->pools.size(), 1u);
  EXPECT_EQ(s->pools[0].label, "p");
  auto tickets = l->tickets();
  ASSERT_TRUE(tickets);
  for (const TicketInfo& t : *tickets) EXPECT_NE(t.owner, dead);
  // The label of the closed pool can be opened again.
  EXPECT_TRUE(l->open_pool({"own", {{"all", 10, {}}}, 0}));
  // A second reclaim of the same owner finds nothing.
  auto again = l->reclaim(dead);
  ASSERT_TRUE(again) << again.error().what();
  EXPECT_EQ(again->tickets, 0u);
  EXPECT_EQ(again->pools_closed, 0u);
  auto lines = l->verify();
  ASSERT_TRUE(lines);
  EXPECT_TRUE(lines->empty()) << (*lines)[0];
}

// The next process to attach to a dead holder's slot sweeps whatever that
// holder still owned, when nobody reclaimed it (no sidecar; the slot record
// was freed by hand).
TEST_F(LedgerProcessTest, NextAttacherOfADeadHoldersSlotSweepsItsTicketsAndPools) {
  LedgerConfig cfg;
  cfg.params = {100'000, 0, 64, 4, 4, 0};
  cfg.categories = {{"a", 100'000, Partition::Ordinary}};
  auto l = Ledger::create("swept", cfg);
  ASSERT_TRUE(l) << l.error().what();
  auto p = l->open_pool({"p", {{"all", 100'000, {}}}, 0});
  ASSERT_TRUE(p);
  ASSERT_TRUE(l->reserve(*p, CategoryId{0}, 100)->has_value());
  auto a = worker({"hold", "swept", "+own", "3", "40"});
  auto b = worker({"hold", "swept", "p", "2", "30"});
  ASSERT_TRUE(a.wait_for_line("ready", 20s)) << a.output();
  ASSERT_TRUE(b.wait_for_line("ready", 20s)) << b.output();
  unsigned count = 0, slot = 0, generation = 0;
  long long total = 0;
  ASSERT_EQ(
      std::sscanf(a.output().c_str(), "held %u %lld %u %u", &count, &total, &slot, &generation), 4);
  a.kill(SIGKILL);
  ASSERT_EQ(a.wait(20s), 128 + SIGKILL);
  auto seg = Segment::open_any("swept", {});
  ASSERT_TRUE(seg);
  ASSERT_TRUE(*reclaim_slot(*seg, slot));  // the slot record only: its tickets stay charged
  EXPECT_EQ(l->snapshot()->global.used, 100 + 120 + 60);
  auto pending = l->verify();
  ASSERT_TRUE(pending);
  ASSERT_FALSE(pending->empty());
  EXPECT_TRUE(contains((*pending)[0], "no longer attached: pending reclaim")) << (*pending)[0];

  auto next = Ledger::open("swept");  // takes the freed slot under a new generation
  ASSERT_TRUE(next) << next.error().what();
  ASSERT_EQ(next->owner().slot, slot);
  ASSERT_GT(next->owner().generation, generation);
  auto s = l->snapshot();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->global.used, 100 + 60);  // the predecessor's 120 bytes went, B's stayed
  EXPECT_EQ(s->live_tickets, 1u + 2u);
  EXPECT_EQ(s->stats.reclaimed_tickets, 3u);
  ASSERT_EQ(s->pools.size(), 1u);  // its empty pool closed
  EXPECT_EQ(s->pools[0].label, "p");
  auto lines = l->verify();
  ASSERT_TRUE(lines);
  EXPECT_TRUE(lines->empty()) << (*lines)[0];
}

// ---------------------------------------------------------------- orphaned pools

// A pool whose owner left while another process held a ticket in it is
// orphaned; it closes when that ticket goes, and its label is free again.
TEST_F(LedgerProcessTest, PoolWhoseOwnerLeftClosesWithItsLastTicketAndVerifyReportsIt) {
  LedgerConfig cfg;
  cfg.params = {100'000, 0, 64, 4, 8, 0};
  cfg.categories = {{"a", 100'000, Partition::Ordinary}};
  auto l = Ledger::create("orphans", cfg);
  ASSERT_TRUE(l) << l.error().what();

  // 1. The owner exits normally.
  auto owner = worker({"own-pool", "orphans", "conn"});
  ASSERT_TRUE(owner.wait_for_line("ready", 20s)) << owner.output();
  auto conn = l->pool("conn");
  ASSERT_TRUE(conn) << conn.error().what();
  auto t = l->reserve(*conn, CategoryId{0}, 70);
  ASSERT_TRUE(t && t->has_value());
  ASSERT_EQ(owner.wait(30s), 0) << owner.output();
  auto s = l->snapshot();
  ASSERT_TRUE(s);
  ASSERT_EQ(s->pools.size(), 1u);
  EXPECT_TRUE(s->pools[0].orphaned);
  auto lines = l->verify();
  ASSERT_TRUE(lines);
  ASSERT_EQ(lines->size(), 1u);
  EXPECT_TRUE(contains((*lines)[0],
                       "pool 'conn' (0#1) is orphaned: its owner left; it closes when "
                       "its last 1 tickets are released"))
      << (*lines)[0];
  ASSERT_TRUE(l->release(**t));
  s = l->snapshot();
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->pools.empty()) << "the orphaned pool stayed open after its last ticket";
  auto reopened = l->open_pool({"conn", {{"all", 10, {}}}, 0});
  EXPECT_TRUE(reopened) << reopened.error().what();
  lines = l->verify();
  ASSERT_TRUE(lines);
  EXPECT_TRUE(lines->empty()) << (*lines)[0];

  // 2. The owner is killed: verify names the pool of a dead owner; the
  //    owner's reclaim orphans it (another owner's ticket is in it).
  auto held = worker({"hold", "orphans", "+sess", "2", "10"});
  ASSERT_TRUE(held.wait_for_line("ready", 20s)) << held.output();
  auto sess = l->pool("sess");
  ASSERT_TRUE(sess);
  auto mine = l->reserve(*sess, CategoryId{0}, 5);
  ASSERT_TRUE(mine && mine->has_value());
  held.kill(SIGKILL);
  ASSERT_EQ(held.wait(20s), 128 + SIGKILL);
  auto seg = Segment::open_any("orphans", {});
  ASSERT_TRUE(seg);
  const KindDescriptor* kind = find_kind(kLedgerKind);
  const std::vector<std::string> pending = kind->verify(*seg);  // what shmctl verify prints
  ASSERT_EQ(pending.size(), 2u) << pending[0];
  EXPECT_TRUE(contains(pending[1], "pool 'sess' (1#1) is orphaned: its owner, attachment slot"))
      << pending[1];
  EXPECT_TRUE(contains(pending[1], "is dead; pending reclaim (3 tickets in it)")) << pending[1];
  auto dead = dead_slot(*seg);
  ASSERT_TRUE(dead);
  auto reclaimed = kind->reclaim(*seg, *dead);
  ASSERT_TRUE(reclaimed) << reclaimed.error().what();
  EXPECT_TRUE(
      contains(reclaimed->at(0), "released 2 tickets (20 bytes), closed 0 pools, orphaned 1"))
      << reclaimed->at(0);
  const std::vector<std::string> orphan = kind->verify(*seg);
  ASSERT_EQ(orphan.size(), 1u);
  EXPECT_TRUE(contains(orphan[0], "pool 'sess' (1#1) is orphaned: its owner left")) << orphan[0];
  ASSERT_TRUE(l->release(**mine));
  s = l->snapshot();
  ASSERT_TRUE(s);
  ASSERT_EQ(s->pools.size(), 1u);
  EXPECT_EQ(s->pools[0].label, "conn");
  EXPECT_TRUE(kind->verify(*seg).empty());
}

// ---------------------------------------------------------------- ownership hand-off

// kill -9 of either side at each step of a hand-off. After repair and the
// reclaim of the dead process, the ticket has exactly one owner (or, when
// the hand-off never completed and its owner died, is released once).
struct HandOffCase {
  const char* side;   // "give": the helper sends to this test; "take": the helper receives
  const char* point;  // where the helper is killed
  const char* after;  // who owns the ticket after reclaim: "me", "released"
  std::uint64_t handed_over, offers_voided;
};
void PrintTo(const HandOffCase& c, std::ostream* os) {
  *os << c.side << "/" << c.point;
}

class LedgerHandOffTest : public ::testing::TestWithParam<HandOffCase> {
 protected:
  test::TempRoot root_;
};

Ticket parse_ticket(const std::string& out) {
  const std::size_t at = out.find("ticket ");
  unsigned index = 0, generation = 0;
  unsigned long long ledger = 0;
  if (at == std::string::npos ||
      std::sscanf(out.c_str() + at, "ticket %u %u %llu", &index, &generation, &ledger) != 3)
    throw std::runtime_error("no ticket line in: " + out);
  return Ticket{index, generation, ledger};
}

// The live entries of `t` in the table: at most one, with its owner.
std::vector<TicketInfo> entries(const Ledger& l, Ticket t) {
  std::vector<TicketInfo> out;
  auto all = l.tickets();
  if (!all) throw std::runtime_error(all.error().what());
  for (const TicketInfo& i : *all)
    if (i.ticket == t) out.push_back(i);
  return out;
}

TEST_P(LedgerHandOffTest, KilledMidHandOffLeavesExactlyOneOwner) {
  const HandOffCase& c = GetParam();
  LedgerConfig cfg;
  cfg.params = {10'000, 0, 16, 2, 4, 0};
  cfg.categories = {{"a", 10'000, Partition::Ordinary}};
  auto l = Ledger::create("handoff", cfg);
  ASSERT_TRUE(l) << l.error().what();
  auto xfer = l->open_pool({"xfer", {{"all", 10'000, {}}}, 0});
  ASSERT_TRUE(xfer);
  const Owner me = l->owner();
  const bool give = std::string(c.side) == "give";
  const std::string point = c.point;
  const bool inside = point.ends_with("-inside");

  Ticket t{};
  Owner helper_owner{};
  std::optional<test::Subprocess> helper;
  if (give) {
    helper.emplace(
        worker({"give", "handoff", std::to_string(me.slot), std::to_string(me.generation), point}));
    ASSERT_TRUE(helper->wait_for_line(inside ? "inside" : "offered", 20s)) << helper->output();
    t = parse_ticket(helper->output());
  } else {
    helper.emplace(worker({"take", "handoff", point}));
    ASSERT_TRUE(helper->wait_for_text("\n", 20s)) << helper->output();
    ASSERT_EQ(std::sscanf(helper->output().c_str(), "owner %u %u", &helper_owner.slot,
                          &helper_owner.generation),
              2)
        << helper->output();
    auto r = l->reserve(*xfer, CategoryId{0}, 33);
    ASSERT_TRUE(r && r->has_value());
    t = **r;
    ASSERT_TRUE(l->offer(t, helper_owner));
    ASSERT_TRUE(helper->wait_for_line(inside ? "inside" : "accepted", 20s)) << helper->output();
  }
  helper->kill(SIGKILL);
  ASSERT_EQ(helper->wait(20s), 128 + SIGKILL);

  // The next locker repairs (when the helper died inside); one owner either way.
  std::vector<TicketInfo> e = entries(*l, t);
  ASSERT_EQ(e.size(), 1u);
  if (point == "offer-inside") {  // the offer never became visible
    EXPECT_FALSE(e[0].offered);
    EXPECT_NE(e[0].owner, me);
    auto refused = l->accept(t);
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, Errc::PermissionDenied) << refused.error().what();
    EXPECT_TRUE(contains(refused.error().message, "is not offered")) << refused.error().what();
  } else if (point == "offered" || point == "leave-inside") {  // pending, to me
    EXPECT_TRUE(e[0].offered);
    EXPECT_EQ(e[0].offered_to, me);
    EXPECT_NE(e[0].owner, me);
  } else if (point == "accept-inside") {  // the accept was undone: still mine, offered
    EXPECT_EQ(e[0].owner, me);
    EXPECT_TRUE(e[0].offered);
    EXPECT_EQ(e[0].offered_to, helper_owner);
  } else {  // accepted
    EXPECT_EQ(e[0].owner, helper_owner);
    EXPECT_FALSE(e[0].offered);
  }

  // Reclaim every dead attachment (the sidecar's job).
  auto seg = Segment::open_any("handoff", {});
  ASSERT_TRUE(seg);
  const KindDescriptor* kind = find_kind(kLedgerKind);
  std::uint64_t handed = 0, voided = 0;
  for (const SlotInfo& s : seg->slots()) {
    if (s.liveness != Liveness::Dead) continue;
    auto r = l->reclaim(Owner{static_cast<std::uint32_t>(s.index), s.generation});
    ASSERT_TRUE(r) << r.error().what();
    handed += r->handed_over;
    voided += r->offers_voided;
    ASSERT_TRUE(*reclaim_slot(*seg, s.index));
  }
  EXPECT_EQ(handed, c.handed_over);
  EXPECT_EQ(voided, c.offers_voided);
  e = entries(*l, t);
  if (std::string(c.after) == "me") {
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].owner, me);
    EXPECT_FALSE(e[0].offered);
    EXPECT_TRUE(l->accept(t)) << "accept of a ticket already handed over is a no-op";
    ASSERT_TRUE(l->release(t));
  } else {
    EXPECT_TRUE(e.empty());
    auto gone = l->release(t);
    ASSERT_FALSE(gone);
    EXPECT_TRUE(contains(gone.error().message, "was already released")) << gone.error().what();
  }
  auto s = l->snapshot();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->live_tickets, 0u);
  EXPECT_EQ(s->global.used, 0);
  EXPECT_EQ(s->stats.repairs, inside ? 1u : 0u);
  EXPECT_TRUE(kind->verify(*seg).empty()) << kind->verify(*seg)[0];
}

INSTANTIATE_TEST_SUITE_P(Steps, LedgerHandOffTest,
                         ::testing::Values(HandOffCase{"give", "offer-inside", "released", 0, 0},
                                           HandOffCase{"give", "offered", "me", 1, 0},
                                           HandOffCase{"give", "leave-inside", "me", 1, 0},
                                           HandOffCase{"take", "accept-inside", "me", 0, 1},
                                           HandOffCase{"take", "accepted", "released", 0, 0}),
                         [](const ::testing::TestParamInfo<HandOffCase>& param) {
                           std::string n = std::string(param.param.side) + "_" + param.param.point;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace shm
