// Channel across real processes: a producer process killed with SIGKILL at
// each fault point of admission and rotation, a consumer killed while holding
// a lease and replaced, a stream between two helper processes, and the
// zero-allocation proof (its own executable with a counting operator new).
#include "common/scale.hpp"
#include "common/subprocess.hpp"
#include "common/temp_root.hpp"
#include "helpers/channel/channel_payload.hpp"
#include "shm/channel/consumer.hpp"
#include "shm/segment/kind.hpp"
#include "shm/testing/channel.hpp"

#include <gtest/gtest.h>

#include <future>
#include <string>
#include <thread>

namespace shm {
namespace {

using namespace std::chrono_literals;

constexpr std::size_t kFaultMaxLen = 40;  // as in channel_producer_step.cpp

class ChannelProcessTest : public ::testing::Test {
 protected:
  test::TempRoot root_;
};

// What a consumer saw: payloads (checked) until a terminal outcome.
struct ChannelDrained {
  std::uint64_t received = 0;
  bool intact = true;
  bool ended = false;
  std::optional<Error> error;
};

ChannelDrained drain(ChannelConsumer& c, std::size_t max_len) {
  ChannelDrained d;
  for (;;) {
    auto r = c.receive(30s);  // bounds a hang; a dead producer is noticed long before
    if (!r) {
      d.error = r.error();
      return d;
    }
    if (r->status == ReceiveStatus::End) {
      d.ended = true;
      return d;
    }
    if (r->status == ReceiveStatus::Empty) return d;  // timed out: the caller fails
    const std::uint64_t seq = r->lease.sequence();
    if (seq != d.received ||
        !test::check_channel_payload(r->lease.bytes(), seq, test::channel_length(seq, max_len)))
      d.intact = false;
    ++d.received;
  }
}

TEST_F(ChannelProcessTest, PayloadsStreamBetweenTwoProcessesAcrossRotations) {
  ASSERT_TRUE(create_channel(
      "xs", {.pages = 4, .page_bytes = 2048, .descriptors_per_page = 32, .ring_cells = 64}));
  const std::uint64_t n = test::scaled(20'000);
  test::Subprocess consumer({test::helper_path("channel_consumer_proc"), "xs", "300"});
  ASSERT_TRUE(consumer.wait_for_line("ready", 10s)) << consumer.output();
  test::Subprocess producer(
      {test::helper_path("channel_producer_step"), "xs", "stream", std::to_string(n), "300"});
  EXPECT_EQ(producer.wait(120s), 0) << producer.output();
  EXPECT_EQ(consumer.wait(120s), 0) << consumer.output();
  EXPECT_NE(consumer.output().find("result received=" + std::to_string(n) +
                                   " next=" + std::to_string(n) + " status=end"),
            std::string::npos)
      << consumer.output();
}

struct FaultCase {
  const char* point;
  std::uint64_t committed;  // payloads sent and committed before the fault point
};

class ChannelProducerKilledTest : public ChannelProcessTest,
                                  public ::testing::WithParamInterface<FaultCase> {};

// The producer is SIGKILLed at a fault point while the consumer (a thread of
// this process, parked in receive()) waits: it must get every committed
// payload intact, then ProducerDied, never a hang or a partial payload.
TEST_P(ChannelProducerKilledTest, ConsumerGetsEveryCommittedPayloadThenProducerDied) {
  const FaultCase fc = GetParam();
  // P = 4, 4 cells per page: 8 committed payloads fill epochs 0 and 1, so the
  // next payload needs a rotation (to slot 2, which is free).
  ASSERT_TRUE(create_channel(
      "kf", {.pages = 4, .page_bytes = 1024, .descriptors_per_page = 4, .ring_cells = 32}));
  auto c = ChannelConsumer::open("kf");
  ASSERT_TRUE(c) << c.error().what();
  test::Subprocess producer({test::helper_path("channel_producer_step"), "kf", "fault", fc.point,
                             std::to_string(fc.committed)});
  ASSERT_TRUE(producer.wait_for_line(std::string("at ") + fc.point, 20s)) << producer.output();
  auto drained = std::async(std::launch::async, [&c] { return drain(*c, kFaultMaxLen); });
  // Give the consumer time to drain and park (not needed for correctness:
  // a consumer that arrives after the kill must see the same outcome).
  std::this_thread::sleep_for(50ms);
  producer.kill(SIGKILL);
  EXPECT_EQ(producer.wait(10s), 128 + SIGKILL);
  ASSERT_EQ(drained.wait_for(60s), std::future_status::ready) << "the consumer hung";
  const ChannelDrained d = drained.get();
  EXPECT_TRUE(d.intact) << "a payload was out of order or damaged";
  EXPECT_EQ(d.received, fc.committed);
  ASSERT_TRUE(d.error.has_value()) << "expected ProducerDied, got end=" << d.ended;
  EXPECT_EQ(d.error->code, Errc::ProducerDied) << d.error->what();
  EXPECT_NE(d.error->message.find("producer died without finish()"), std::string::npos)
      << d.error->message;
  EXPECT_EQ(c->fault(), ChannelFault::ProducerDied);
  if (std::string(fc.point) == "page-before-ring") {
    EXPECT_NE(d.error->message.find("1 payload(s) published to the page"), std::string::npos)
        << d.error->message;
  }
}

// The faulted end of a stream whose producer was killed (ADR-0010, "Clean
// or faulted end-of-stream releases the final epoch"): once the consumer has
// drained and reported ProducerDied, every epoch is released (nothing live:
// released_epoch = active_epoch + 1, as after a clean end), the channel is
// FAULTED(producer died) as detected by the consumer at its position, the
// consumer stays where the last described payload left it and repeats the
// error, and verify finds nothing but the fault.
TEST_P(ChannelProducerKilledTest, FaultedEndReleasesTheFinalEpochAndFreezesTheConsumer) {
  const FaultCase fc = GetParam();
  constexpr std::uint32_t kCells = 4;
  ASSERT_TRUE(create_channel(
      "fe", {.pages = 4, .page_bytes = 1024, .descriptors_per_page = kCells, .ring_cells = 32}));
  test::Subprocess producer({test::helper_path("channel_producer_step"), "fe", "fault", fc.point,
                             std::to_string(fc.committed)});
  ASSERT_TRUE(producer.wait_for_line(std::string("at ") + fc.point, 20s)) << producer.output();
  producer.kill(SIGKILL);
  EXPECT_EQ(producer.wait(10s), 128 + SIGKILL);
  auto c = ChannelConsumer::open("fe");
  ASSERT_TRUE(c) << c.error().what();
  const ChannelDrained d = drain(*c, kFaultMaxLen);
  ASSERT_TRUE(d.error.has_value()) << "expected ProducerDied, got end=" << d.ended;
  ASSERT_EQ(d.error->code, Errc::ProducerDied) << d.error->what();
  EXPECT_EQ(d.received, fc.committed);

  const channel::View v = detail::ChannelTesting::view(*c);
  const std::uint64_t active = v.control->producer.active_epoch.load();
  const std::uint64_t last_epoch = fc.committed == 0 ? 0 : (fc.committed - 1) / kCells;
  // after-rebind, and a reservation that needed a fresh page, stopped in an
  // epoch no descriptor ever named.
  const std::string point = fc.point;
  const bool rotated =
      point == "after-rebind" || (point == "reserve-commit" && fc.committed % kCells == 0);
  EXPECT_EQ(active, rotated ? last_epoch + 1 : last_epoch) << "where the producer stopped";
  EXPECT_EQ(v.control->release.released_epoch.load(), active + 1)
      << "the final epoch (and any epoch rotated to but never described) is released";
  EXPECT_EQ(v.control->consumer.head.load(), fc.committed);
  EXPECT_EQ(v.control->consumer.head.load(), v.control->producer.tail.load())
      << "everything described was consumed";

  EXPECT_EQ(c->state(), ChannelState::Faulted);
  EXPECT_EQ(c->fault(), ChannelFault::ProducerDied);
  EXPECT_EQ(v.control->terminal.fault_role.load(), channel::kConsumerRole.id);
  EXPECT_EQ(v.control->terminal.fault_epoch.load(), last_epoch);
  EXPECT_EQ(v.control->terminal.fault_sequence.load(), fc.committed);
  EXPECT_EQ(c->current_epoch(), last_epoch);
  EXPECT_EQ(c->next_sequence(), fc.committed);
  EXPECT_EQ(c->committed_in_epoch(), fc.committed - last_epoch * kCells);
  EXPECT_FALSE(c->lease_held());
  for (int i = 0; i < 2; ++i) {
    auto again = c->try_receive();
    ASSERT_FALSE(again);
    EXPECT_EQ(again.error().code, Errc::ProducerDied) << "the terminal error is repeated";
  }
  auto observer = open_channel("fe");
  ASSERT_TRUE(observer) << observer.error().what();
  const std::vector<std::string> bad = kChannelDescriptor.verify(*observer);
  ASSERT_EQ(bad.size(), 1u) << "only the fault: " << ::testing::PrintToString(bad);
  EXPECT_NE(bad[0].find("producer died"), std::string::npos) << bad[0];
}

std::string fault_case_name(const ::testing::TestParamInfo<FaultCase>& param) {
  std::string s = param.param.point;
  for (char& ch : s)
    if (ch == '-') ch = '_';
  return s + "_after_" + std::to_string(param.param.committed);
}

INSTANTIATE_TEST_SUITE_P(FaultPoints, ChannelProducerKilledTest,
                         ::testing::Values(FaultCase{"before-quota", 8}, FaultCase{"after-seal", 8},
                                           FaultCase{"after-rebind", 8},
                                           FaultCase{"reserve-commit", 8},
                                           FaultCase{"reserve-commit", 5},
                                           FaultCase{"page-before-ring", 7}),
                         fault_case_name);

TEST_F(ChannelProcessTest, ConsumerArrivingAfterTheProducerWasKilledDrainsThenReportsIt) {
  ASSERT_TRUE(create_channel(
      "late", {.pages = 4, .page_bytes = 1024, .descriptors_per_page = 4, .ring_cells = 32}));
  test::Subprocess producer(
      {test::helper_path("channel_producer_step"), "late", "fault", "after-seal", "8"});
  ASSERT_TRUE(producer.wait_for_line("at after-seal", 20s)) << producer.output();
  producer.kill(SIGKILL);
  EXPECT_EQ(producer.wait(10s), 128 + SIGKILL);
  auto c = ChannelConsumer::open("late");
  ASSERT_TRUE(c) << c.error().what();
  const ChannelDrained d = drain(*c, kFaultMaxLen);
  EXPECT_TRUE(d.intact);
  EXPECT_EQ(d.received, 8u);
  ASSERT_TRUE(d.error.has_value());
  EXPECT_EQ(d.error->code, Errc::ProducerDied);
}

TEST_F(ChannelProcessTest, ProducerProcessThatExitsWithoutFinishIsReported) {
  ASSERT_TRUE(create_channel(
      "dt", {.pages = 2, .page_bytes = 1024, .descriptors_per_page = 4, .ring_cells = 16}));
  test::Subprocess producer(
      {test::helper_path("channel_producer_step"), "dt", "fault", "detach", "3"});
  EXPECT_EQ(producer.wait(20s), 0) << producer.output();
  auto c = ChannelConsumer::open("dt");
  ASSERT_TRUE(c) << c.error().what();
  const ChannelDrained d = drain(*c, kFaultMaxLen);
  EXPECT_EQ(d.received, 3u);
  ASSERT_TRUE(d.error.has_value());
  EXPECT_EQ(d.error->code, Errc::ProducerDied);
  EXPECT_NE(d.error->message.find("detached without finish()"), std::string::npos)
      << d.error->message;
}

TEST_F(ChannelProcessTest, ProducerProcessThatFinishesEndsTheStreamCleanly) {
  ASSERT_TRUE(create_channel(
      "fin", {.pages = 2, .page_bytes = 1024, .descriptors_per_page = 4, .ring_cells = 16}));
  test::Subprocess producer(
      {test::helper_path("channel_producer_step"), "fin", "fault", "finish", "6"});
  EXPECT_EQ(producer.wait(20s), 0) << producer.output();
  auto c = ChannelConsumer::open("fin");
  ASSERT_TRUE(c) << c.error().what();
  const ChannelDrained d = drain(*c, kFaultMaxLen);
  EXPECT_TRUE(d.intact);
  EXPECT_EQ(d.received, 6u);
  EXPECT_TRUE(d.ended);
  EXPECT_FALSE(d.error.has_value()) << d.error->what();
}

TEST_F(ChannelProcessTest, ConsumerKilledWhileHoldingALeaseIsReplacedWithoutLoss) {
  // Small pool: the producer blocks on the quota while the consumer is dead.
  ASSERT_TRUE(create_channel(
      "ck", {.pages = 2, .page_bytes = 512, .descriptors_per_page = 8, .ring_cells = 16}));
  const std::uint64_t n = test::scaled(5'000) + 200;
  test::Subprocess first({test::helper_path("channel_consumer_proc"), "ck", "100", "150"});
  ASSERT_TRUE(first.wait_for_line("ready", 10s));
  test::Subprocess producer(
      {test::helper_path("channel_producer_step"), "ck", "stream", std::to_string(n), "100"});
  ASSERT_TRUE(first.wait_for_line("holding 150", 60s)) << first.output();
  first.kill(SIGKILL);
  EXPECT_EQ(first.wait(10s), 128 + SIGKILL);
  test::Subprocess second({test::helper_path("channel_consumer_proc"), "ck", "100"});
  EXPECT_EQ(second.wait(120s), 0) << second.output();
  EXPECT_EQ(producer.wait(60s), 0) << producer.output();
  EXPECT_NE(second.output().find("first 150"), std::string::npos)
      << "the lease in hand is delivered again: " << second.output();
  EXPECT_NE(second.output().find("next=" + std::to_string(n) + " status=end"), std::string::npos)
      << second.output();
}

TEST_F(ChannelProcessTest, SidecarReclaimOfADeadProducerMarksTheChannelAndTheConsumerDrains) {
  ASSERT_TRUE(create_channel(
      "rc", {.pages = 4, .page_bytes = 1024, .descriptors_per_page = 4, .ring_cells = 32}));
  test::Subprocess producer(
      {test::helper_path("channel_producer_step"), "rc", "fault", "before-quota", "8"});
  ASSERT_TRUE(producer.wait_for_line("at before-quota", 20s)) << producer.output();
  producer.kill(SIGKILL);
  EXPECT_EQ(producer.wait(10s), 128 + SIGKILL);
  auto seg = open_channel("rc");
  ASSERT_TRUE(seg) << seg.error().what();
  const SlotInfo dead = seg->slots().front();
  ASSERT_EQ(dead.liveness, Liveness::Dead);
  const auto reclaimed = kChannelDescriptor.reclaim(*seg, dead);
  ASSERT_TRUE(reclaimed) << reclaimed.error().what();
  const std::vector<std::string>& lines = *reclaimed;
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("marked FAULTED (producer died)"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("drains 8 published"), std::string::npos) << lines[0];
  auto c = ChannelConsumer::open("rc");
  ASSERT_TRUE(c) << c.error().what();
  const ChannelDrained d = drain(*c, kFaultMaxLen);
  EXPECT_TRUE(d.intact);
  EXPECT_EQ(d.received, 8u) << "a FAULTED(producer died) lane still delivers what was published";
  ASSERT_TRUE(d.error.has_value());
  EXPECT_EQ(d.error->code, Errc::ProducerDied);
}

TEST_F(ChannelProcessTest, NoHeapAllocationAfterCreateOnEitherSide) {
  test::Subprocess helper({test::helper_path("channel_alloc"), "alloc"});
  EXPECT_EQ(helper.wait(120s), 0) << helper.output();
  EXPECT_NE(helper.output().find("allocations after setup: 0"), std::string::npos)
      << helper.output();
}

}  // namespace
}  // namespace shm
