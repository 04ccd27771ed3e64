// The wake-up table of docs/egress.md, one test per row: a party parked with a
// 10 s timeout must return within test::kWakeBound of the change that
// unblocks it, whichever operation made the change.
#include "common/temp_root.hpp"
#include "common/text.hpp"
#include "common/wake_probe.hpp"
#include "shm/egress/egress.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

namespace shm::egress_wake_test {
namespace {

using namespace std::chrono_literals;
using egress::ClaimStatus;
using test::bytes;

EgressParams params(std::uint32_t capacity, std::uint32_t window, std::uint32_t budget,
                    std::chrono::nanoseconds base = 10s) {
  EgressParams p;
  p.max_payloads = capacity;
  p.slot_bytes = 16;
  p.inflight_limit = window;
  p.retry_budget = budget;
  p.retry_base = base;
  p.retry_ceiling = 10s;
  return p;
}

class EgressWakeTest : public ::testing::Test {
 protected:
  void SetUp() override {}
  // Creates the egress, attaches the transport and a producer handle.
  void make(const EgressParams& p) {
    auto e = Egress::create("wake", p);
    ASSERT_TRUE(e) << e.error().what();
    producer_.emplace(std::move(*e));
    auto t = EgressTransport::open("wake");
    ASSERT_TRUE(t) << t.error().what();
    transport_.emplace(std::move(*t));
  }
  void enqueue(int n) {
    for (int i = 0; i < n; ++i) {
      auto r = producer_->try_enqueue(bytes("p"));
      ASSERT_TRUE(r && r->status == egress::EnqueueStatus::Enqueued);
    }
  }
  std::uint64_t claim_now() {
    std::vector<std::byte> buf;
    auto r = transport_->try_claim(buf);
    EXPECT_TRUE(r && r->status == ClaimStatus::Claimed);
    return r && r->status == ClaimStatus::Claimed ? r->envelope.sequence : ~0ull;
  }
  // Parks the transport in claim(10 s); `change` must wake it.
  test::WakeProbe claimer_woken_by(const std::function<void()>& change,
                                   std::optional<egress::ClaimOutcome>* got = nullptr) {
    return test::probe_wake(
        [&] {
          std::vector<std::byte> buf;
          auto r = transport_->claim(buf, 10s);
          ASSERT_TRUE(r) << r.error().what();
          if (got != nullptr) *got = *r;
        },
        [&] { return producer_->wake_counters().claim_waiters != 0; }, change);
  }
  test::WakeProbe producer_woken_by(const std::function<void()>& change) {
    return test::probe_wake(
        [&] {
          auto r = producer_->enqueue(bytes("late"), 10s);
          ASSERT_TRUE(r) << r.error().what();
          EXPECT_EQ(r->status, egress::EnqueueStatus::Enqueued);
        },
        [&] { return producer_->wake_counters().space_waiters != 0; }, change);
  }

  test::TempRoot root_;
  std::optional<Egress> producer_;
  std::optional<EgressTransport> transport_;
};

TEST_F(EgressWakeTest, ClaimerWakesOnEnqueue) {
  make(params(8, 4, 2));
  std::optional<egress::ClaimOutcome> got;
  test::expect_woken(claimer_woken_by([&] { enqueue(1); }, &got));
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, ClaimStatus::Claimed);
}

TEST_F(EgressWakeTest, ClaimerWakesWhenAnAckReopensTheWindow) {
  make(params(8, 1, 2));
  enqueue(2);
  const std::uint64_t first = claim_now();
  std::optional<egress::ClaimOutcome> got;
  test::expect_woken(claimer_woken_by([&] { ASSERT_TRUE(transport_->ack(first)); }, &got));
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, ClaimStatus::Claimed);
  EXPECT_EQ(got->envelope.sequence, first + 1);
}

// The audit's defect: a failure that exhausts its record reopens a full window
// (the record leaves the window for the dead-letter list), and a pending
// record waits; the claimer slept until its timeout.
TEST_F(EgressWakeTest, ClaimerWakesWhenAnExhaustingFailureReopensTheWindow) {
  make(params(8, 1, 0));
  enqueue(2);
  const std::uint64_t first = claim_now();
  std::optional<egress::ClaimOutcome> got;
  test::expect_woken(claimer_woken_by(
      [&] {
        auto f = transport_->fail(first);
        ASSERT_TRUE(f);
        EXPECT_EQ(f->status, egress::FailStatus::Exhausted);
      },
      &got));
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, ClaimStatus::Claimed);
  EXPECT_EQ(got->envelope.sequence, first + 1);
}

TEST_F(EgressWakeTest, ClaimerWakesWhenARetryingFailureReopensTheWindow) {
  make(params(8, 1, 3));
  enqueue(2);
  const std::uint64_t first = claim_now();
  std::optional<egress::ClaimOutcome> got;
  test::expect_woken(claimer_woken_by([&] { ASSERT_TRUE(transport_->fail(first)); }, &got));
  ASSERT_TRUE(got);
  EXPECT_EQ(got->envelope.sequence, first + 1);
}

TEST_F(EgressWakeTest, ClaimerWakesWhenRetryNowSchedulesAParkedRecord) {
  make(params(8, 4, 3));
  enqueue(1);
  const std::uint64_t first = claim_now();
  ASSERT_TRUE(transport_->fail(first));  // parked for 10 s
  std::optional<egress::ClaimOutcome> got;
  test::expect_woken(claimer_woken_by([&] { ASSERT_TRUE(transport_->retry_now(first)); }, &got));
  ASSERT_TRUE(got);
  EXPECT_EQ(got->envelope.sequence, first);
}

// Nothing claimable before or after, but the earliest due time moved from
// "none" to 40 ms: the claimer must wake to shorten its sleep and claim the
// record when it is due.
TEST_F(EgressWakeTest, ClaimerWakesWhenAFailureParksARecordEarlier) {
  make(params(8, 4, 3, 40ms));
  enqueue(1);
  const std::uint64_t first = claim_now();
  std::optional<egress::ClaimOutcome> got;
  const test::WakeProbe p = claimer_woken_by([&] { ASSERT_TRUE(transport_->fail(first)); }, &got);
  EXPECT_FALSE(p.returned_early);
  EXPECT_GE(p.latency.count(), 0);
  EXPECT_LE(p.latency, 40ms + test::kWakeBound) << "claimed " << p.latency.count() << " ms after";
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, ClaimStatus::Claimed);
  EXPECT_EQ(got->envelope.sequence, first);
}

TEST_F(EgressWakeTest, ClaimerWakesWhenFenced) {
  make(params(8, 4, 3));
  std::optional<egress::ClaimOutcome> got;
  const std::uint64_t g = transport_->generation();
  test::expect_woken(claimer_woken_by([&] { ASSERT_TRUE(producer_->reconnect(g + 1)); }, &got));
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, ClaimStatus::StaleGeneration);
}

TEST_F(EgressWakeTest, ProducerWakesWhenAnAckFreesThePool) {
  make(params(2, 2, 3));
  enqueue(2);
  const std::uint64_t first = claim_now();
  test::expect_woken(producer_woken_by([&] { ASSERT_TRUE(transport_->ack(first)); }));
}

TEST_F(EgressWakeTest, ProducerWakesWhenADeadLetterIsTaken) {
  make(params(2, 2, 0));
  enqueue(2);
  const std::uint64_t first = claim_now();
  ASSERT_EQ(transport_->fail(first)->status, egress::FailStatus::Exhausted);
  test::expect_woken(producer_woken_by([&] {
    auto taken = producer_->pop_dead_letter(nullptr);
    ASSERT_TRUE(taken && taken->has_value());
  }));
}

}  // namespace
}  // namespace shm::egress_wake_test
