// The ledger across real processes: random load under a sampling checker,
// kill -9 inside the critical section, and reclaim of a killed holder.
#include "shm/ledger.hpp"
#include "common/scale.hpp"
#include "common/subprocess.hpp"
#include "common/temp_root.hpp"
#include "shm/kind.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <string>
#include <vector>

namespace shm {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

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

struct CrashCase {
  const char* point;
  std::int64_t used_after_repair;  // global bytes once the test reserved its second ticket
  std::int64_t reserved_after_repair;
  std::int64_t dead_owner_bytes;  // what reclaim then releases
};

class LedgerCrashTest : public ::testing::TestWithParam<CrashCase> {
 protected:
  test::TempRoot root_;
};

TEST_P(LedgerCrashTest, ProcessKilledInsideTheCriticalSectionLeavesALedgerTheNextLockerRepairs) {
  const CrashCase& c = GetParam();
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
  const std::vector<std::string> reclaimed = kind->reclaim(*any, *dead);
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
                         ::testing::Values(CrashCase{"reserve-published", 107, 107, 77},
                                           CrashCase{"reserve-counters", 107, 107, 77},
                                           CrashCase{"commit", 85, 30, 55},
                                           CrashCase{"release", 30, 30, 0},
                                           CrashCase{"replace", 85, 85, 55},
                                           CrashCase{"admit", 30, 30, 0}),
                         [](const ::testing::TestParamInfo<CrashCase>& param) {
                           std::string n = param.param.point;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

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
  const std::vector<std::string> lines = kind->reclaim(*seg, *dead);
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
  EXPECT_TRUE(contains(kind->reclaim(*seg, *dead)[0], "released 0 tickets"));
  EXPECT_TRUE(kind->verify(*seg).empty());

  b.kill(SIGKILL);
  ASSERT_EQ(b.wait(20s), 128 + SIGKILL);
  ASSERT_TRUE(*reclaim_slot(*seg, dead->index));  // A's slot is free now; B's is the dead one
  auto dead_b = dead_slot(*seg);
  ASSERT_TRUE(dead_b);
  EXPECT_TRUE(contains(kind->reclaim(*seg, *dead_b)[0], "released 3 tickets (210 bytes)"));
  EXPECT_EQ(l->snapshot()->global.used, 150);
}

}  // namespace
}  // namespace shm
