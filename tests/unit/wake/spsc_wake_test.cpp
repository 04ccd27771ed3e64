// The wake-up table of docs/spsc.md, the rows one process can play: a
// consumer parked in peek()/pop() or a producer parked in reserve()/push(),
// with a 10 s timeout, must return within test::kWakeBound of the change that
// unblocks it, whichever call made the change. The rows a dead peer plays are
// in tests/integration/wake/spsc_wake_process_test.cpp.
#include "common/temp_root.hpp"
#include "common/text.hpp"
#include "common/wake_probe.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/layout.hpp"
#include "shm/spsc/producer.hpp"
#include "shm/testing/ring_crash.hpp"

#include <gtest/gtest.h>

#include <array>
#include <optional>
#include <string>
#include <vector>

namespace shm::spsc_wake_test {
namespace {

using namespace std::chrono_literals;
using test::bytes;

constexpr std::uint64_t kCapacity = 1024;
constexpr std::size_t kRecord = 56;  // 64 bytes with its header: 16 fill the ring

const ring::RingControl& control_of(const Segment& seg) {
  return *reinterpret_cast<const ring::RingControl*>(seg.data().data());
}

class SpscWakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto p = RingProducer::create("wake", {.capacity_bytes = kCapacity});
    ASSERT_TRUE(p) << p.error().what();
    producer_.emplace(std::move(*p));
    auto c = RingConsumer::open("wake");
    ASSERT_TRUE(c) << c.error().what();
    consumer_.emplace(std::move(*c));
  }
  const ring::RingControl& control() const { return control_of(producer_->segment()); }
  void fill() {
    const std::vector<std::byte> rec(kRecord, std::byte{7});
    for (std::uint64_t i = 0; i < kCapacity / 64; ++i) ASSERT_TRUE(*producer_->try_push(rec));
    ASSERT_FALSE(*producer_->try_push(rec)) << "the ring should be full";
  }
  // Parks the consumer in peek(10 s); `change` must wake it with a record.
  test::WakeProbe consumer_woken_by(const std::function<void()>& change) {
    return test::probe_wake(
        [&] {
          auto r = consumer_->peek(10s);
          ASSERT_TRUE(r) << r.error().what();
          EXPECT_TRUE(*r) << "timed out";
          consumer_->release();
        },
        [&] { return control().producer.consumer_parked.load() != 0; }, change);
  }
  // Parks the producer in push(10 s) on a full ring; `change` must wake it.
  test::WakeProbe producer_woken_by(const std::function<void()>& change) {
    return test::probe_wake(
        [&] {
          const std::vector<std::byte> rec(kRecord, std::byte{9});
          auto r = producer_->push(rec, 10s);
          ASSERT_TRUE(r) << r.error().what();
          EXPECT_TRUE(*r) << "timed out";
        },
        [&] { return control().consumer.producer_parked.load() != 0; }, change);
  }

  test::TempRoot root_;
  std::optional<RingProducer> producer_;
  std::optional<RingConsumer> consumer_;
};

TEST_F(SpscWakeTest, ConsumerWakesOnTryPush) {
  test::expect_woken(consumer_woken_by([&] { ASSERT_TRUE(*producer_->try_push(bytes("one"))); }));
}

TEST_F(SpscWakeTest, ConsumerWakesOnACommitOfABatch) {
  test::expect_woken(consumer_woken_by([&] {
    for (int i = 0; i < 3; ++i) {
      auto r = producer_->try_reserve(24);
      ASSERT_TRUE(r && *r);
    }
    producer_->commit();
  }));
}

TEST_F(SpscWakeTest, ConsumerWakesOnTryPushBatch) {
  test::expect_woken(consumer_woken_by([&] {
    const std::array<std::span<const std::byte>, 2> recs{bytes("a"), bytes("bc")};
    auto n = producer_->try_push_batch(recs);
    ASSERT_TRUE(n);
    EXPECT_EQ(*n, 2u);
  }));
}

// A commit whose record needs a padding record first (the wrap).
TEST_F(SpscWakeTest, ConsumerWakesOnACommitThatWraps) {
  const std::vector<std::byte> rec(kRecord, std::byte{1});
  for (int i = 0; i < 15; ++i) ASSERT_TRUE(*producer_->try_push(rec));
  std::vector<std::byte> out(kCapacity);
  for (int i = 0; i < 15; ++i) ASSERT_TRUE(*consumer_->try_pop(out));
  test::expect_woken(consumer_woken_by([&] {
    const std::vector<std::byte> big(200, std::byte{2});
    ASSERT_TRUE(*producer_->try_push(big));
  }));
}

// A waker whose process could not register for membarrier (a full fence
// instead of the compiler barrier before its flag load).
TEST_F(SpscWakeTest, ConsumerWakesOnACommitByAFencedWaker) {
  test_hooks::force_fenced_waker(*producer_);
  test::expect_woken(consumer_woken_by([&] { ASSERT_TRUE(*producer_->try_push(bytes("one"))); }));
}

TEST_F(SpscWakeTest, ProducerWakesOnARelease) {
  fill();
  test::expect_woken(producer_woken_by([&] {
    auto r = consumer_->try_peek();
    ASSERT_TRUE(r && *r);
    consumer_->release();
  }));
}

TEST_F(SpscWakeTest, ProducerWakesOnTryPop) {
  fill();
  test::expect_woken(producer_woken_by([&] {
    std::vector<std::byte> out(kCapacity);
    auto r = consumer_->try_pop(out);
    ASSERT_TRUE(r && *r);
  }));
}

TEST_F(SpscWakeTest, ProducerWakesOnADrain) {
  fill();
  test::expect_woken(producer_woken_by([&] {
    auto n = consumer_->drain([](std::span<const std::byte>) {}, 2);
    ASSERT_TRUE(n);
    EXPECT_EQ(*n, 2u);
  }));
}

TEST_F(SpscWakeTest, ProducerWakesOnAReleaseByAFencedWaker) {
  test_hooks::force_fenced_waker(*consumer_);
  fill();
  test::expect_woken(producer_woken_by([&] {
    std::vector<std::byte> out(kCapacity);
    auto r = consumer_->try_pop(out);
    ASSERT_TRUE(r && *r);
  }));
}

}  // namespace
}  // namespace shm::spsc_wake_test
