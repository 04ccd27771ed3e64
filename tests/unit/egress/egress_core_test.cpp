// EgressCore in one process: the backoff formula, the dead-letter list and
// the journal's repair (undo and redo) without a crash.
#include "common/text.hpp"
#include "shm/egress/core.hpp"

#include <gtest/gtest.h>

#include <random>

#include <cstring>

namespace shm {
namespace {

using namespace egress;

using test::bytes;

TEST(EgressCoreTest, BackoffDoublesFromTheBaseAndStopsAtTheCeiling) {
  EXPECT_EQ(backoff(100, 1000, 1), 100u);
  EXPECT_EQ(backoff(100, 1000, 2), 200u);
  EXPECT_EQ(backoff(100, 1000, 4), 800u);
  EXPECT_EQ(backoff(100, 1000, 5), 1000u);
  EXPECT_EQ(backoff(100, 1000, 200), 1000u);  // no overflow
  EXPECT_EQ(backoff(~std::uint64_t{0} / 2, ~std::uint64_t{0}, 3), ~std::uint64_t{0});
}

// The formula against 128-bit arithmetic for random bases, ceilings and
// attempts, and at every exact boundary base == ceiling >> shift (where the
// saturation test must not fire: base << shift still fits under the ceiling;
// a '>=' there was a mutant the suite missed).
__extension__ typedef unsigned __int128 Wide;  // GCC's 128-bit integer (-Wpedantic)

TEST(EgressCoreTest, BackoffMatchesTheFormulaForRandomBasesAndCeilings) {
  const auto reference = [](std::uint64_t base, std::uint64_t ceiling, std::uint32_t attempt) {
    if (base == 0) return std::uint64_t{0};
    const std::uint32_t shift = attempt == 0 ? 0 : attempt - 1;
    if (shift >= 64) return ceiling;
    const Wide v = static_cast<Wide>(base) << shift;
    return v > ceiling ? ceiling : static_cast<std::uint64_t>(v);
  };
  std::mt19937_64 rng(20261207);
  for (int i = 0; i < 100'000; ++i) {
    const std::uint64_t ceiling = rng() >> (rng() % 64);
    const std::uint64_t draw = ceiling == ~std::uint64_t{0} ? rng() : rng() % (ceiling + 1);
    const std::uint64_t base = draw >> (rng() % 64);
    const auto attempt = static_cast<std::uint32_t>(rng() % 70);
    ASSERT_EQ(backoff(base, ceiling, attempt), reference(base, ceiling, attempt))
        << "base " << base << " ceiling " << ceiling << " attempt " << attempt;
  }
  for (std::uint32_t shift = 0; shift < 64; ++shift)
    for (const std::uint64_t ceiling : {~std::uint64_t{0}, std::uint64_t{1000}, std::uint64_t{1023},
                                        std::uint64_t{1} << 40 | 12345}) {
      const std::uint64_t base = ceiling >> shift;  // base << shift <= ceiling, exactly at the edge
      ASSERT_EQ(backoff(base, ceiling, shift + 1), reference(base, ceiling, shift + 1))
          << "base " << base << " ceiling " << ceiling << " shift " << shift;
    }
}

TEST(EgressCoreTest, RejectsParametersThatCannotMakeAnEgress) {
  auto r = LocalEgress::create(ParamBlock{8, 8, 9, 1, 1, 1});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::InvalidArgument);
  EXPECT_NE(r.error().message.find("inflight_limit 9"), std::string::npos);
  auto big = LocalEgress::create(ParamBlock{8, 8, 2, 1, 1, 1});
  ASSERT_TRUE(big);
  auto too = big->core().enqueue(bytes("123456789"), 0);
  ASSERT_FALSE(too);
  EXPECT_EQ(too.error().code, Errc::TooLarge);
}

TEST(EgressCoreTest, ExhaustedRecordsStayInTheDeadLetterListUntilTaken) {
  auto e = LocalEgress::create(ParamBlock{4, 8, 2, 0, 10, 100});
  ASSERT_TRUE(e);
  EgressCore& c = e->core();
  ASSERT_EQ(c.enqueue(bytes("x"), 0)->sequence, 0u);
  ASSERT_EQ(c.claim(1).status, ClaimStatus::Claimed);
  const FailOutcome f = c.fail(1, 0, 5);
  EXPECT_EQ(f.status, FailStatus::Exhausted);
  EXPECT_TRUE(f.record.exhausted);
  EXPECT_EQ(c.project(false).terminal, 1u);
  EXPECT_EQ(c.retry_now(1, 0).status, RetryStatus::UnknownSequence);  // never rescheduled
  EXPECT_EQ(c.reconnect(2).replayed, 0u);                             // nor replayed
  EXPECT_EQ(c.project(false).terminal, 1u);
  std::vector<std::byte> payload;
  auto dead = c.pop_dead_letter(&payload);
  ASSERT_TRUE(dead);
  EXPECT_EQ(dead->sequence, 0u);
  EXPECT_EQ(payload.size(), 1u);
  EXPECT_FALSE(c.project(false).retry.has_value());
  EXPECT_EQ(c.project(false).terminal, 0u);
  EXPECT_TRUE(c.check().empty());
}

TEST(EgressCoreTest, RepairWithNoOpenJournalKeepsTheStateAndMovesEveryReader) {
  auto e = LocalEgress::create(ParamBlock{8, 8, 4, 2, 10, 100});
  ASSERT_TRUE(e);
  EgressCore& c = e->core();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(c.enqueue(bytes("p"), 0));
  ASSERT_EQ(c.claim(1).status, ClaimStatus::Claimed);
  ASSERT_EQ(c.claim(1).status, ClaimStatus::Claimed);
  ASSERT_EQ(c.fail(1, 1, 0).status, FailStatus::Retrying);
  Projection before = c.project(true);
  EXPECT_TRUE(c.repair().empty());
  Projection after = c.project(true);
  EXPECT_EQ(after.records, before.records);
  for (std::size_t i = 0; i < kReaders; ++i)
    EXPECT_EQ(after.reader_versions[i], before.reader_versions[i] + 1);
}

// Every enum of the egress names itself through shm::to_string, as the
// other structures' enums do (issue 37: one shape).
TEST(EgressCoreTest, EveryStatusIsNamedByShmToString) {
  EXPECT_EQ(shm::to_string(egress::EnqueueStatus::Full), "full");
  EXPECT_EQ(shm::to_string(egress::ClaimStatus::Claimed), "claimed");
  EXPECT_EQ(shm::to_string(egress::AckStatus::Refused), "refused");
  EXPECT_EQ(shm::to_string(egress::FailStatus::Exhausted), "exhausted");
  EXPECT_EQ(shm::to_string(egress::RetryStatus::Scheduled), "scheduled");
  EXPECT_EQ(shm::to_string(egress::ReconnectStatus::Advanced), "advanced");
  EXPECT_EQ(shm::to_string(Errc::Faulted), "Faulted");  // the others' overloads still found
}

}  // namespace
}  // namespace shm
