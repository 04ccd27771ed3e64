// shm::forever is a timeout every blocking call honours: the call parks until
// its condition holds. `steady_clock::now() + nanoseconds::max()` overflows
// (undefined; in practice a deadline in the past), so before the calls
// saturated their deadline (detail::deadline_after) "forever" timed out at
// once: each test parks a call with shm::forever, checks it is still parked,
// then makes the change that satisfies it and expects it woken with the data.
#include "common/temp_root.hpp"
#include "common/wake_probe.hpp"
#include "shm/channel/consumer.hpp"
#include "shm/channel/producer.hpp"
#include "shm/egress/egress.hpp"
#include "shm/fanout/priority_fanout.hpp"
#include "shm/mpmc/mpmc_ring.hpp"
#include "shm/platform/clock.hpp"
#include "shm/relay/relay.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <vector>

namespace shm::forever_test {
namespace {

using namespace std::chrono_literals;

const std::vector<std::byte> kPayload(16, std::byte{0x5A});

class ForeverTest : public ::testing::Test {
 protected:
  test::TempRoot root_;
  std::atomic<bool> started_{false};
  // The party announces itself just before its call; the probe's settle
  // time (30 ms) then lets a call that returns at once show as not parked.
  bool parked() const { return started_.load(); }
};

TEST_F(ForeverTest, DeadlineAfterSaturatesInsteadOfOverflowing) {
  const auto now = std::chrono::steady_clock::now();
  EXPECT_EQ(detail::deadline_after(forever), std::chrono::steady_clock::time_point::max());
  // Any timeout past the clock's end is forever too.
  EXPECT_EQ(detail::deadline_after(forever - 1h), std::chrono::steady_clock::time_point::max());
  const auto past = detail::deadline_after(-5s);
  EXPECT_LE(past, std::chrono::steady_clock::now());
  const auto second = detail::deadline_after(1s);
  EXPECT_GE(second, now + 1s);
  EXPECT_LE(second, std::chrono::steady_clock::now() + 1s);
}

TEST_F(ForeverTest, SpscPopWaitsForARecord) {
  auto p = RingProducer::create("spsc", RingParams{4096});
  ASSERT_TRUE(p) << p.error().what();
  auto c = RingConsumer::open("spsc");
  ASSERT_TRUE(c) << c.error().what();
  std::vector<std::byte> out(64);
  Result<std::optional<std::size_t>> got = std::optional<std::size_t>{};
  test::expect_woken(test::probe_wake(
      [&] {
        started_ = true;
        got = c->pop(out, forever);
      },
      [&] { return parked(); }, [&] { ASSERT_TRUE(p->try_push(kPayload).value_or(false)); }));
  ASSERT_TRUE(got && *got) << "forever timed out";
  EXPECT_EQ(**got, kPayload.size());
}

TEST_F(ForeverTest, MpmcPopWaitsForAPayload) {
  auto ring = MpmcRing::create("mpmc", MpmcParams{64, 32});
  ASSERT_TRUE(ring) << ring.error().what();
  auto other = MpmcRing::open("mpmc");
  ASSERT_TRUE(other) << other.error().what();
  std::vector<std::byte> out(32);
  Result<std::optional<std::size_t>> got = std::optional<std::size_t>{};
  test::expect_woken(test::probe_wake(
      [&] {
        started_ = true;
        got = ring->pop(out, forever);
      },
      [&] { return parked(); }, [&] { ASSERT_TRUE(other->try_push(kPayload).value_or(false)); }));
  ASSERT_TRUE(got && *got) << "forever timed out";
}

TEST_F(ForeverTest, ChannelReceiveWaitsForAPayload) {
  auto params = ChannelParams::for_payload(64, 8);
  ASSERT_TRUE(params);
  auto p = ChannelProducer::create("channel", *params);
  ASSERT_TRUE(p) << p.error().what();
  auto c = ChannelConsumer::open("channel");
  ASSERT_TRUE(c) << c.error().what();
  ReceiveStatus status = ReceiveStatus::Empty;
  test::expect_woken(test::probe_wake(
      [&] {
        started_ = true;
        auto r = c->receive(forever);
        if (r) status = r->status;
      },
      [&] { return parked(); }, [&] { ASSERT_TRUE(p->try_send(kPayload)); }));
  EXPECT_EQ(status, ReceiveStatus::Received) << "forever timed out";
}

TEST_F(ForeverTest, FanoutDrainWaitsForASubmission) {
  auto f = PriorityFanout::create("fanout", FanoutParams{4, 64, 48});
  ASSERT_TRUE(f) << f.error().what();
  auto other = PriorityFanout::open("fanout", FanoutParams{});
  ASSERT_TRUE(other) << other.error().what();
  std::vector<std::byte> out(48);
  bool drained = false;
  test::expect_woken(test::probe_wake(
      [&] {
        started_ = true;
        auto r = f->pop_highest(out, forever);
        drained = r && r->has_value();
      },
      [&] { return parked(); },
      [&] { ASSERT_TRUE(other->submit(2, kPayload, 0ns).value_or(false)); }));
  EXPECT_TRUE(drained) << "forever timed out";
}

TEST_F(ForeverTest, EgressClaimWaitsForARecord) {
  auto e = Egress::create("egress",
                          EgressParams{.max_payloads = 16, .slot_bytes = 32, .inflight_limit = 8});
  ASSERT_TRUE(e) << e.error().what();
  auto t = EgressTransport::open("egress");
  ASSERT_TRUE(t) << t.error().what();
  std::vector<std::byte> out;
  egress::ClaimStatus status = egress::ClaimStatus::Empty;
  test::expect_woken(test::probe_wake(
      [&] {
        started_ = true;
        auto r = t->claim(out, forever);
        if (r) status = r->status;
      },
      [&] { return parked(); }, [&] { ASSERT_TRUE(e->try_enqueue(kPayload)); }));
  EXPECT_EQ(status, egress::ClaimStatus::Claimed) << "forever timed out";
}

TEST_F(ForeverTest, RelayWaitAndABlockedWriteWaitForever) {
  RelayConfig cfg;
  cfg.policy = policy::kRawFifo;
  cfg.max_entries = 4;
  cfg.value_bytes = 8;
  cfg.backpressure = Backpressure{Dimension::Count, 2, 1, Overflow::Block};
  auto w = RelayWriter::create("relay", cfg);
  ASSERT_TRUE(w) << w.error().what();
  auto r = RelayReader::open("relay");
  ASSERT_TRUE(r) << r.error().what();
  bool pending = false;
  test::expect_woken(test::probe_wake(
      [&] {
        started_ = true;
        auto got = r->wait(forever);
        pending = got && *got;
      },
      [&] { return parked(); }, [&] { ASSERT_TRUE(w->try_write(u64_value(1))); }));
  EXPECT_TRUE(pending) << "forever timed out";

  ASSERT_EQ(w->try_write(u64_value(2))->status, WriteStatus::Appended);  // at high water
  EXPECT_EQ(w->try_write(u64_value(3))->status, WriteStatus::TimedOut) << "try_write parked";
  started_ = false;
  WriteStatus outcome = WriteStatus::TimedOut;
  test::expect_woken(test::probe_wake(
      [&] {
        started_ = true;
        auto got = w->write(u64_value(3), forever);
        if (got) outcome = got->status;
      },
      [&] { return parked(); },
      [&] {
        ASSERT_TRUE(r->take(2));
        ASSERT_TRUE(r->commit());
      }));
  EXPECT_EQ(outcome, WriteStatus::Appended);
}

}  // namespace
}  // namespace shm::forever_test
