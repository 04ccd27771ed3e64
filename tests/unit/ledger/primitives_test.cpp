// The specification's smaller primitives: checked arithmetic, one parent
// ticket with bounded slot leases, and per-key token buckets whose idle keys
// are reclaimed only when every bucket is full.
#include "common/temp_root.hpp"
#include "common/text.hpp"
#include "shm/ledger/checked.hpp"
#include "shm/ledger/keyed_buckets.hpp"
#include "shm/ledger/ledger.hpp"
#include "shm/ledger/slot_leases.hpp"
#include "unit/ledger/ledger_numbers.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace shm {
namespace {

using test::kMax;

using test::contains;

using test::expect_error;

// ---------------------------------------------------------------- checked arithmetic

TEST(CheckedArithmeticTest, RefusesNegativesAndOverflowBeforeComputing) {
  EXPECT_EQ(*ledger::checked_add(2, 3), 5);
  EXPECT_EQ(*ledger::checked_add(kMax - 1, 1), kMax);
  EXPECT_EQ(*ledger::checked_mul(0, kMax), 0);
  EXPECT_EQ(*ledger::checked_mul(kMax / 2, 2), kMax - 1);
  expect_error(ledger::checked_add(kMax, 1), Errc::TooLarge, "the sum exceeds");
  expect_error(ledger::checked_add(-1, 5), Errc::InvalidArgument, "must not be negative");
  expect_error(ledger::checked_add(5, -1), Errc::InvalidArgument, "must not be negative");
  // -1 * -1 would be a valid 1: refused because an operand is negative.
  expect_error(ledger::checked_mul(-1, -1), Errc::InvalidArgument, "checked_mul(-1, -1)");
  expect_error(ledger::checked_mul(kMax / 2 + 1, 2), Errc::TooLarge, "the product exceeds");
  expect_error(ledger::checked_mul(std::int64_t{1} << 32, std::int64_t{1} << 31), Errc::TooLarge,
               "the product exceeds");
  // CostV1 of a message: topic + payload + 96.
  EXPECT_EQ(*ledger::checked_sum({5, 100, 96}), 201);
  expect_error(ledger::checked_sum({5, -100, 96}), Errc::InvalidArgument, "term 1 is -100");
  expect_error(ledger::checked_sum({kMax - 96, 96, 1}), Errc::TooLarge, "adding term 2 (1)");
  EXPECT_EQ(*ledger::checked_sum(std::span<const std::int64_t>{}), 0);
}

// ---------------------------------------------------------------- slot leases

class SlotLeasesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LedgerConfig c;
    c.params = {10'000, 0, 8, 2, 2, 0};
    c.categories = {{"infra", 5'000, Partition::Ordinary}};
    auto l = Ledger::create("infra", c);
    ASSERT_TRUE(l) << l.error().what();
    ledger_.emplace(std::move(*l));
    auto p = ledger_->open_pool({"server", {{"all", 5'000, {}}}, 0});
    ASSERT_TRUE(p);
    pool_ = *p;
  }
  LedgerSnapshot snap() { return *ledger_->snapshot(); }

  test::TempRoot root_;
  std::optional<Ledger> ledger_;
  PoolId pool_;
};

TEST_F(SlotLeasesTest, OneParentTicketPaysForEverySlotAndLeasesChargeNothingMore) {
  auto made = SlotLeases::make(*ledger_, pool_, CategoryId{0}, 4, 256);
  ASSERT_TRUE(made) << made.error().what();
  ASSERT_TRUE(made->has_value());
  SlotLeases& leases = **made;
  LedgerSnapshot s = snap();
  EXPECT_EQ(s.global.used, 4 * 256);
  EXPECT_EQ(s.global.reserved, 0);  // committed
  EXPECT_EQ(s.live_tickets, 1u);

  std::vector<SlotLease> held;
  for (int i = 0; i < 4; ++i) {
    auto l = leases.acquire();
    ASSERT_TRUE(l);
    EXPECT_EQ(l->slot, static_cast<std::uint32_t>(i));  // lowest free slot first
    held.push_back(*l);
  }
  EXPECT_FALSE(leases.acquire()) << "bounded: a fifth lease of four slots";
  s = snap();
  EXPECT_EQ(s.global.used, 4 * 256);  // leasing charged nothing again
  EXPECT_EQ(s.live_tickets, 1u);
  EXPECT_EQ(s.stats.reserves, 1u);

  ASSERT_TRUE(leases.release(held[2]));
  expect_error(leases.release(held[2]), Errc::InvalidArgument, "stale or already released");
  auto again = leases.acquire();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->slot, 2u);
  EXPECT_NE(again->generation, held[2].generation);
  expect_error(leases.release(held[2]), Errc::InvalidArgument, "stale");  // the old lease
  expect_error(leases.close(), Errc::InvalidArgument, "4 of 4 slots are still leased");
  for (const SlotLease& l : {held[0], held[1], *again, held[3]}) ASSERT_TRUE(leases.release(l));
  ASSERT_TRUE(leases.close());
  EXPECT_EQ(snap().global.used, 0);
}

TEST_F(SlotLeasesTest, ParentIsRefusedByTheBudgetOrByCheckedArithmetic) {
  auto over = SlotLeases::make(*ledger_, pool_, CategoryId{0}, 21, 256);  // 5376 > 5000
  ASSERT_TRUE(over);
  ASSERT_FALSE(over->has_value());
  EXPECT_EQ(over->error().scope, LedgerScope::Category);
  EXPECT_EQ(over->error().requested, 21 * 256);
  expect_error(SlotLeases::make(*ledger_, pool_, CategoryId{0}, 2, kMax), Errc::TooLarge,
               "slot leases of 2 x");
  expect_error(SlotLeases::make(*ledger_, pool_, CategoryId{0}, 2, -1), Errc::InvalidArgument,
               "must not be negative");
  expect_error(SlotLeases::make(*ledger_, pool_, CategoryId{0}, 0, 8), Errc::InvalidArgument,
               "0 slots");
  EXPECT_EQ(snap().live_tickets, 0u);
}

TEST_F(SlotLeasesTest, LeaseOfAnotherSetIsRefusedAndDestroyingTheSetReleasesTheParent) {
  auto a = SlotLeases::make(*ledger_, pool_, CategoryId{0}, 2, 10);
  auto b = SlotLeases::make(*ledger_, pool_, CategoryId{0}, 2, 10);
  ASSERT_TRUE(a && a->has_value() && b && b->has_value());
  auto la = (*a)->acquire();
  ASSERT_TRUE(la);
  expect_error((*b)->release(*la), Errc::InvalidArgument, "not by this set");
  EXPECT_EQ(snap().global.used, 40);
  { SlotLeases moved = std::move(**a); }  // destroyed with a lease out: the parent goes
  EXPECT_EQ(snap().global.used, 20);
  EXPECT_EQ(snap().live_tickets, 1u);
}

// ---------------------------------------------------------------- keyed buckets

TEST(KeyedBucketsTest, IdleKeyIsReclaimedOnlyWhenEveryBucketIsFullAndNoReferenceIsLive) {
  // Per peer: connects (1/s, burst 2) and bytes (1000/s, burst 100).
  auto made = KeyedBuckets::make({{1, 2}, {1000, 100}}, 4);
  ASSERT_TRUE(made) << made.error().what();
  KeyedBuckets& t = *made;
  const std::int64_t c1[] = {1, 100};
  ASSERT_EQ(*t.admit("10.0.0.1", c1, 1'000), AdmitStatus::Admitted);
  EXPECT_TRUE(t.contains("10.0.0.1"));
  // 200 ms later the byte bucket is full again, the connect bucket is not
  // (one token a second): not idle, whatever time has passed since the last use.
  EXPECT_EQ(*t.available("10.0.0.1", 1, 1'200), 100);
  EXPECT_FALSE(t.idle("10.0.0.1", 1'200));
  EXPECT_EQ(t.reclaim_idle(1'200), 0u);
  // A live reference keeps it even when full.
  ASSERT_TRUE(t.retain("10.0.0.1"));
  EXPECT_FALSE(t.idle("10.0.0.1", 5'000));
  EXPECT_EQ(t.reclaim_idle(5'000), 0u);
  ASSERT_TRUE(t.release("10.0.0.1"));
  expect_error(t.release("10.0.0.1"), Errc::InvalidArgument, "holds no reference");
  // Both buckets full (connects refilled after 1 s), no reference: reclaimed.
  EXPECT_TRUE(t.idle("10.0.0.1", 2'000));
  EXPECT_EQ(t.reclaim_idle(2'000), 1u);
  EXPECT_FALSE(t.contains("10.0.0.1"));
  expect_error(t.retain("10.0.0.1"), Errc::NotFound, "no key '10.0.0.1'");
}

TEST(KeyedBucketsTest, RefusalChangesNothingAndAFullTableReclaimsOnlyIdleKeys) {
  auto made = KeyedBuckets::make({{1, 3}, {0, 5}}, 2);  // bucket 1 never refills
  ASSERT_TRUE(made);
  KeyedBuckets& t = *made;
  const std::int64_t take[] = {1, 0};
  const std::int64_t drain[] = {0, 1};
  ASSERT_EQ(*t.admit("a", take, 100), AdmitStatus::Admitted);
  ASSERT_EQ(*t.admit("b", drain, 100), AdmitStatus::Admitted);
  const std::int64_t too_much[] = {1, 5};  // bucket 0 has 3 (refilled), bucket 1 has 4
  EXPECT_EQ(*t.admit("b", too_much, 5'000), AdmitStatus::Refused);
  EXPECT_EQ(*t.available("b", 0, 5'000), 3);  // nothing was debited
  EXPECT_EQ(*t.available("b", 1, 5'000), 4);
  // Full table: "a" is idle at 5 s (its bucket refilled) and makes room; "b"
  // never is (its rate-0 bucket stays below burst).
  ASSERT_EQ(*t.admit("c", take, 5'000), AdmitStatus::Admitted);
  EXPECT_FALSE(t.contains("a"));
  EXPECT_TRUE(t.contains("b"));
  ASSERT_TRUE(t.retain("c"));
  EXPECT_EQ(*t.admit("d", take, 99'000), AdmitStatus::TableFull);
  EXPECT_FALSE(t.contains("d"));
  EXPECT_EQ(t.size(), 2u);
  const std::int64_t wrong[] = {1};
  expect_error(t.admit("b", wrong, 1), Errc::InvalidArgument, "1 costs for 2 buckets");
  const std::int64_t negative[] = {-1, 0};
  expect_error(t.admit("b", negative, 1), Errc::InvalidArgument, "is negative");
  expect_error(KeyedBuckets::make({}, 4), Errc::InvalidArgument, "0 buckets per key");
  expect_error(KeyedBuckets::make({{1, 1}}, 0), Errc::InvalidArgument, "max_keys is 0");
}

TEST(KeyedBucketsTest, ReclaimScansABoundedNumberOfKeysPerCall) {
  auto made = KeyedBuckets::make({{1000, 1}}, 100);
  ASSERT_TRUE(made);
  KeyedBuckets& t = *made;
  const std::int64_t one[] = {1};
  for (int i = 0; i < 100; ++i)
    ASSERT_EQ(*t.admit("k" + std::to_string(i), one, 0), AdmitStatus::Admitted);
  EXPECT_EQ(t.reclaim_idle(10, 32), 32u);  // every key is idle at 10 ms; 32 per call
  EXPECT_EQ(t.size(), 68u);
  EXPECT_EQ(t.reclaim_idle(10, 100), 68u);
  EXPECT_EQ(t.size(), 0u);
}

}  // namespace
}  // namespace shm
