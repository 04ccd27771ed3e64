// The wake-up table of docs/channel.md, the rows one process can play: a
// consumer parked in receive()/receive_into() or a producer parked in
// send()/reserve(), with a 10 s timeout, must return within test::kWakeBound
// of the change that unblocks it, whichever call made the change. The rows a
// dead peer plays are in tests/integration/wake/channel_wake_process_test.cpp.
#include "common/temp_root.hpp"
#include "common/text.hpp"
#include "common/wake_probe.hpp"
#include "shm/testing/channel.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace shm::channel_wake_test {
namespace {

using namespace std::chrono_literals;
using detail::ChannelTesting;
using test::bytes;

class ChannelWakeTest : public ::testing::Test {
 protected:
  void make(const ChannelParams& params) {
    auto p = ChannelProducer::create("wake", params);
    ASSERT_TRUE(p) << p.error().what();
    producer_.emplace(std::move(*p));
    auto c = ChannelConsumer::open("wake");
    ASSERT_TRUE(c) << c.error().what();
    consumer_.emplace(std::move(*c));
    control_ = ChannelTesting::view(*consumer_).control;
  }
  void send(const std::string& s, SendStatus expected = SendStatus::Ok) {
    auto r = producer_->try_send(bytes(s));
    ASSERT_TRUE(r) << r.error().what();
    ASSERT_EQ(r->status, expected);
  }
  void receive_one() {
    auto r = consumer_->try_receive();
    ASSERT_TRUE(r) << r.error().what();
    ASSERT_TRUE(*r);
    r->lease.release();
  }
  // Parks the consumer in receive(10 s); `change` must wake it. The outcome
  // is left in `got`.
  test::WakeProbe consumer_woken_by(const std::function<void()>& change,
                                    std::optional<Result<ReceiveStatus>>& got) {
    return test::probe_wake(
        [&] {
          auto r = consumer_->receive(10s);
          if (!r)
            got.emplace(std::unexpected(r.error()));
          else
            got.emplace(r->status);
        },
        [&] { return control_->waiters.consumer_parked.load() != 0; }, change);
  }
  // Parks the producer in send(10 s); `change` must wake it.
  test::WakeProbe producer_woken_by(const std::function<void()>& change,
                                    std::optional<Result<SendStatus>>& got) {
    return test::probe_wake(
        [&] {
          auto r = producer_->send(bytes("late"), 10s);
          if (!r)
            got.emplace(std::unexpected(r.error()));
          else
            got.emplace(r->status);
        },
        [&] { return control_->waiters.producer_parked.load() != 0; }, change);
  }

  test::TempRoot root_;
  std::optional<ChannelProducer> producer_;
  std::optional<ChannelConsumer> consumer_;
  channel::ChannelControl* control_ = nullptr;
};

constexpr ChannelParams kRoomy{
    .pages = 4, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 16};

TEST_F(ChannelWakeTest, ConsumerWakesOnTrySend) {
  make(kRoomy);
  std::optional<Result<ReceiveStatus>> got;
  test::expect_woken(consumer_woken_by([&] { send("one"); }, got));
  ASSERT_TRUE(got && *got);
  EXPECT_EQ(**got, ReceiveStatus::Received);
}

TEST_F(ChannelWakeTest, ConsumerWakesOnACommittedReservation) {
  make(kRoomy);
  std::optional<Result<ReceiveStatus>> got;
  test::expect_woken(consumer_woken_by(
      [&] {
        auto r = producer_->try_reserve(8);
        ASSERT_TRUE(r && *r);
        std::memset(r->bytes().data(), 'r', 8);
        auto s = r->commit();
        ASSERT_TRUE(s && *s);
      },
      got));
  ASSERT_TRUE(got && *got);
  EXPECT_EQ(**got, ReceiveStatus::Received);
}

// The first payload of a new page (the producer rotates, then describes it).
TEST_F(ChannelWakeTest, ConsumerWakesOnASendThatRotatesThePage) {
  make({.pages = 2, .page_bytes = 64, .descriptors_per_page = 2, .ring_cells = 16});
  send("a");
  send("b");
  receive_one();
  receive_one();
  std::optional<Result<ReceiveStatus>> got;
  test::expect_woken(consumer_woken_by([&] { send("c"); }, got));
  ASSERT_TRUE(got && *got);
  EXPECT_EQ(**got, ReceiveStatus::Received);
}

// Coalescing holds payloads back from a polling consumer, never from one
// about to park: one payload below the threshold wakes it.
TEST_F(ChannelWakeTest, ConsumerWakesOnASendBelowTheCoalescingThreshold) {
  make(kRoomy);
  ASSERT_TRUE(consumer_->set_coalescing({.descriptors = 4, .max_delay = 1s}));
  std::optional<Result<ReceiveStatus>> got;
  test::expect_woken(consumer_woken_by([&] { send("one"); }, got));
  ASSERT_TRUE(got && *got);
  EXPECT_EQ(**got, ReceiveStatus::Received);
}

TEST_F(ChannelWakeTest, ConsumerWakesOnFinish) {
  make(kRoomy);
  std::optional<Result<ReceiveStatus>> got;
  test::expect_woken(consumer_woken_by([&] { ASSERT_TRUE(producer_->finish()); }, got));
  ASSERT_TRUE(got && *got);
  EXPECT_EQ(**got, ReceiveStatus::End);
}

// Nothing wakes the consumer here: it sleeps in kLivenessSlice slices and
// probes the producer's slot between them.
TEST_F(ChannelWakeTest, ConsumerWakesWhenTheProducerDetachesWithoutFinish) {
  make(kRoomy);
  std::optional<Result<ReceiveStatus>> got;
  test::expect_woken(consumer_woken_by([&] { producer_.reset(); }, got));
  ASSERT_TRUE(got);
  ASSERT_FALSE(*got);
  EXPECT_EQ(got->error().code, Errc::ProducerDied);
}

TEST_F(ChannelWakeTest, ProducerWakesWhenALeaseReleaseFreesTheRing) {
  make({.pages = 4, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 2});
  send("a");
  send("b");
  send("c", SendStatus::RingFull);
  std::optional<Result<SendStatus>> got;
  test::expect_woken(producer_woken_by([&] { receive_one(); }, got));
  ASSERT_TRUE(got && *got);
  EXPECT_EQ(**got, SendStatus::Ok);
}

TEST_F(ChannelWakeTest, ProducerWakesWhenACopyOutFreesTheRing) {
  make({.pages = 4, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 2});
  send("a");
  send("b");
  std::optional<Result<SendStatus>> got;
  test::expect_woken(producer_woken_by(
      [&] {
        std::vector<std::byte> out(64);
        auto r = consumer_->try_receive_into(out);
        ASSERT_TRUE(r && *r);
      },
      got));
  ASSERT_TRUE(got && *got);
  EXPECT_EQ(**got, SendStatus::Ok);
}

// Every page in use: the consumer's first receive of the next epoch releases
// the old one ([chan.E] at the seam).
TEST_F(ChannelWakeTest, ProducerWakesWhenTheSeamReleasesAPage) {
  make({.pages = 2, .page_bytes = 64, .descriptors_per_page = 2, .ring_cells = 16});
  for (const char* s : {"a", "b", "c", "d"}) send(s);
  send("e", SendStatus::PageQuotaExhausted);
  receive_one();
  receive_one();
  std::optional<Result<SendStatus>> got;
  test::expect_woken(producer_woken_by([&] { receive_one(); }, got));
  ASSERT_TRUE(got && *got);
  EXPECT_EQ(**got, SendStatus::Ok);
}

// The consumer finds a damaged payload and faults the channel: the parked
// producer learns it at once instead of at its timeout.
TEST_F(ChannelWakeTest, ProducerWakesWhenTheConsumerFaultsTheChannel) {
  make({.pages = 4, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 2});
  send("intact");
  send("damaged");
  ChannelTesting::view(*consumer_).arena(0)[3] ^= std::byte{0x20};
  std::optional<Result<SendStatus>> got;
  test::expect_woken(producer_woken_by(
      [&] {
        auto r = consumer_->try_receive();
        ASSERT_FALSE(r);
        EXPECT_EQ(r.error().code, Errc::Corrupt);
      },
      got));
  ASSERT_TRUE(got);
  ASSERT_FALSE(*got);
  EXPECT_EQ(got->error().code, Errc::Faulted);
  EXPECT_NE(got->error().message.find("FAULTED"), std::string::npos) << got->error().message;
}

}  // namespace
}  // namespace shm::channel_wake_test
