#include "shm/ledger/token_bucket.hpp"
#include "unit/ledger/ledger_numbers.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

namespace shm {
namespace {

using test::i128;
using test::kMax;

TEST(TokenBucketTest, StartsFullAndTakesExactlyBurst) {
  auto b = TokenBucket::make(10, 5);
  ASSERT_TRUE(b);
  EXPECT_TRUE(*b->try_take(5, 0));
  EXPECT_FALSE(*b->try_take(1, 0));
  EXPECT_EQ(b->available(0), 0);
}

TEST(TokenBucketTest, FractionalRefillIsKeptAcrossCalls) {
  // 1 token/s, refilled (a zero-cost take stores the refill) every 300 ms: a
  // refill that dropped the fraction would never mint a token.
  auto b = TokenBucket::make(1, 2);  // burst 2: the bucket never saturates here
  ASSERT_TRUE(*b->try_take(2, 0));
  int granted = 0;
  for (std::int64_t t = 300; t <= 3000; t += 300) {
    ASSERT_TRUE(*b->try_take(0, t));
    auto r = b->try_take(1, t);
    ASSERT_TRUE(r);
    if (*r) ++granted;
  }
  EXPECT_EQ(granted, 3);  // at 1200, 2100 and 3000 ms
  EXPECT_EQ(b->level().frac, 0u);
}

TEST(TokenBucketTest, ReachingBurstDropsTheFractionBeyondIt) {
  token_bucket::Level l{0, 0, true, 0};
  l = token_bucket::refill(l, 1, 1, 1300);  // 1.3 tokens of refill into a 1-token bucket
  EXPECT_EQ(l.tokens, 1);
  EXPECT_EQ(l.frac, 0u);
}

TEST(TokenBucketTest, RefillKeepsSubTokenUnitsExactly) {
  token_bucket::Level l{0, 0, true, 0};
  l = token_bucket::refill(l, 3, 100, 333);  // 3/s * 333 ms = 999 units
  EXPECT_EQ(l.tokens, 0);
  EXPECT_EQ(l.frac, 999u);
  l = token_bucket::refill(l, 3, 100, 334);  // +3 units
  EXPECT_EQ(l.tokens, 1);
  EXPECT_EQ(l.frac, 2u);
}

TEST(TokenBucketTest, TimeRegressionMintsNothingAndKeepsTheRefillPoint) {
  auto b = TokenBucket::make(1000, 10);
  ASSERT_TRUE(*b->try_take(10, 1000));
  EXPECT_FALSE(*b->try_take(1, 500));  // regression: nothing minted
  EXPECT_EQ(b->level().last_ms, 1000);
  EXPECT_FALSE(*b->try_take(1, 1000));
  EXPECT_TRUE(*b->try_take(1, 1001));  // 1 ms at 1000/s = 1 token, counted from 1000
  EXPECT_FALSE(*b->try_take(1, 1001));
}

TEST(TokenBucketTest, HugeElapsedTimesRateSaturatesAtBurst) {
  auto b = TokenBucket::make(kMax, kMax);
  ASSERT_TRUE(*b->try_take(kMax, 0));
  EXPECT_EQ(b->available(kMax), kMax);  // kMax * kMax units: no overflow, saturates
  ASSERT_TRUE(*b->try_take(kMax, kMax));
  EXPECT_EQ(b->level().frac, 0u);
}

TEST(TokenBucketTest, RefillAgreesOnBothSidesOfThe64BitProductBoundary) {
  const std::int64_t rate = (std::int64_t{1} << 62) + 7;
  for (std::int64_t elapsed : {1, 2, 3}) {  // rate * elapsed: below, then above 2^63
    const token_bucket::Level start{0, 999, true, 100};
    const token_bucket::Level l = token_bucket::refill(start, rate, kMax, 100 + elapsed);
    const i128 units = static_cast<i128>(rate) * elapsed + 999;
    const i128 whole = units / 1000;
    if (whole >= kMax) {
      EXPECT_EQ(l.tokens, kMax) << elapsed;
      EXPECT_EQ(l.frac, 0u) << elapsed;
    } else {
      EXPECT_EQ(l.tokens, static_cast<std::int64_t>(whole)) << elapsed;
      EXPECT_EQ(l.frac, static_cast<std::uint32_t>(units % 1000)) << elapsed;
    }
  }
}

TEST(TokenBucketTest, RateZeroNeverRefills) {
  auto b = TokenBucket::make(0, 3);
  ASSERT_TRUE(*b->try_take(3, 0));
  EXPECT_FALSE(*b->try_take(1, kMax));
}

TEST(TokenBucketTest, BurstZeroAdmitsOnlyZeroCost) {
  auto b = TokenBucket::make(1000, 0);
  EXPECT_FALSE(*b->try_take(1, 0));
  EXPECT_FALSE(*b->try_take(1, 1'000'000));
  EXPECT_TRUE(*b->try_take(0, 1'000'001));
}

TEST(TokenBucketTest, RefusedTakeChangesNothingNotEvenTheRefill) {
  auto b = TokenBucket::make(1, 10);
  ASSERT_TRUE(*b->try_take(10, 0));
  const token_bucket::Level before = b->level();
  EXPECT_FALSE(*b->try_take(5, 2000));  // 2 tokens available: refused
  EXPECT_EQ(b->level().tokens, before.tokens);
  EXPECT_EQ(b->level().last_ms, before.last_ms);
  EXPECT_TRUE(*b->try_take(2, 2000));
}

TEST(TokenBucketTest, NegativeArgumentsAreRejectedWithTheValue) {
  auto bad = TokenBucket::make(-1, 5);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, Errc::InvalidArgument);
  EXPECT_NE(bad.error().message.find("rate -1"), std::string::npos);
  auto bad2 = TokenBucket::make(1, -5);
  ASSERT_FALSE(bad2);
  EXPECT_NE(bad2.error().message.find("burst -5"), std::string::npos);
  auto b = TokenBucket::make(1, 5);
  auto r = b->try_take(-2, 0);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::InvalidArgument);
  EXPECT_NE(r.error().message.find("-2"), std::string::npos);
  auto t = b->try_take(1, -7);
  ASSERT_FALSE(t);
  EXPECT_NE(t.error().message.find("-7"), std::string::npos);
}

TEST(TokenBucketTest, CoalesceSumsDuplicatesInFirstAppearanceOrder) {
  const std::vector<Constraint> cs = {{{2}, 1}, {{0}, 4}, {{2}, 3}, {{1}, 0}, {{0}, 1}};
  auto co = token_bucket::coalesce(cs);
  ASSERT_TRUE(co);
  ASSERT_EQ(co->size, 3u);
  EXPECT_EQ(co->items[0].bucket.index, 2u);
  EXPECT_EQ(co->items[0].cost, 4);
  EXPECT_EQ(co->items[1].bucket.index, 0u);
  EXPECT_EQ(co->items[1].cost, 5);
  EXPECT_EQ(co->items[2].bucket.index, 1u);
  EXPECT_EQ(co->items[2].cost, 0);
}

TEST(TokenBucketTest, CoalesceRefusesOverflowNegativeCostAndTooManyTerms) {
  const std::vector<Constraint> overflow = {{{1}, kMax}, {{1}, 1}};
  auto o = token_bucket::coalesce(overflow);
  ASSERT_FALSE(o);
  EXPECT_EQ(o.error().code, Errc::InvalidArgument);
  EXPECT_NE(o.error().message.find("overflow"), std::string::npos);

  const std::vector<Constraint> negative = {{{0}, 1}, {{3}, -1}};
  auto n = token_bucket::coalesce(negative);
  ASSERT_FALSE(n);
  EXPECT_NE(n.error().message.find("cost -1 is negative"), std::string::npos);

  std::vector<Constraint> many(kMaxConstraints + 1, Constraint{{0}, 1});
  auto m = token_bucket::coalesce(many);
  ASSERT_FALSE(m);
  EXPECT_NE(m.error().message.find("17 constraints"), std::string::npos);
  many.pop_back();
  auto ok = token_bucket::coalesce(many);  // 16 terms on one bucket: fine
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->size, 1u);
  EXPECT_EQ(ok->items[0].cost, 16);
}

}  // namespace
}  // namespace shm
