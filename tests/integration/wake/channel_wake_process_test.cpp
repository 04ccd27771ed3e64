// The rows of the wake-up table of docs/channel.md that a dead peer plays,
// with real separate processes (tests/helpers/channel/): the parked party
// (10 s timeout) returns within test::kWakeBound of the change.
#include "common/subprocess.hpp"
#include "common/temp_root.hpp"
#include "common/wake_probe.hpp"
#include "helpers/channel/channel_payload.hpp"
#include "shm/testing/channel.hpp"

#include <gtest/gtest.h>

#include <csignal>
#include <optional>
#include <string>
#include <thread>

namespace shm::channel_wake_process_test {
namespace {

using namespace std::chrono_literals;
using detail::ChannelTesting;
using test::Subprocess;

constexpr std::size_t kMaxLen = 40;

class ChannelWakeProcessTest : public ::testing::Test {
 protected:
  test::TempRoot root_;
};

// Nothing wakes the consumer when its producer is killed: it sleeps in
// kLivenessSlice (20 ms) slices and probes the producer's kernel lock.
TEST_F(ChannelWakeProcessTest, ConsumerWakesWhenTheProducerIsKilled) {
  auto c = ChannelConsumer::create(
      "wake", {.pages = 4, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 16});
  ASSERT_TRUE(c) << c.error().what();
  Subprocess producer(
      {test::helper_path("channel_producer_step"), "wake", "fault", "reserve-commit", "1"});
  ASSERT_TRUE(producer.wait_for_line("at reserve-commit", 30s)) << producer.output();
  const channel::ChannelControl* control = ChannelTesting::view(*c).control;
  std::optional<Result<Received>> got;
  test::expect_woken(test::probe_wake(
      [&] {
        // The payload the producer committed, then (parked) its death.
        auto first = c->receive(10s);
        ASSERT_TRUE(first && *first);
        first->lease.release();
        got.emplace(c->receive(10s));
      },
      [&] { return control->waiters.consumer_parked.load() != 0; },
      [&] { producer.kill(SIGKILL); }));
  ASSERT_TRUE(got);
  ASSERT_FALSE(*got);
  EXPECT_EQ(got->error().code, Errc::ProducerDied);
}

// A consumer killed inside its give-back, after its store of head and before
// its load of producer_parked, leaves room in the ring and a producer asleep.
// No crash hook sits there: the test kills a consumer holding the lease of
// sequence 0, then stores head = 1 for it (the dead consumer's last store).
// The consumer that takes over owes the wake.
TEST_F(ChannelWakeProcessTest, ProducerWakesWhenAConsumerTakesOverFromOneKilledAfterReleasing) {
  auto p = ChannelProducer::create(
      "wake", {.pages = 4, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 2});
  ASSERT_TRUE(p) << p.error().what();
  for (std::uint64_t seq = 0; seq < 2; ++seq) {
    auto r = p->try_send(test::channel_payload(seq, test::channel_length(seq, kMaxLen)));
    ASSERT_TRUE(r && *r);
  }
  Subprocess dying(
      {test::helper_path("channel_consumer_proc"), "wake", std::to_string(kMaxLen), "0"});
  ASSERT_TRUE(dying.wait_for_line("holding 0", 30s)) << dying.output();
  dying.kill(SIGKILL);
  ASSERT_EQ(dying.wait(10s), 128 + SIGKILL);
  channel::ChannelControl* control = ChannelTesting::view(*p).control;
  bool released = false;
  std::optional<ChannelConsumer> successor;
  test::expect_woken(test::probe_wake(
      [&] {
        const auto payload = test::channel_payload(2, test::channel_length(2, kMaxLen));
        auto r = p->send(payload, 10s);
        ASSERT_TRUE(r) << r.error().what();
        EXPECT_EQ(r->status, SendStatus::Ok);
      },
      [&] {
        if (control->waiters.producer_parked.load() == 0) return false;
        if (!released) {
          std::this_thread::sleep_for(20ms);
          control->consumer.head.store(1);  // the dead consumer's give-back, without its wake
          released = true;
        }
        return control->waiters.producer_parked.load() != 0;
      },
      [&] {
        auto c = ChannelConsumer::open("wake");
        ASSERT_TRUE(c) << c.error().what();
        successor.emplace(std::move(*c));
      }));
}

}  // namespace
}  // namespace shm::channel_wake_process_test
