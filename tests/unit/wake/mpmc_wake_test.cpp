// The wake-up table of docs/mpmc.md, the rows one process can play: a
// consumer parked in pop() or a producer parked in push(), with a 10 s
// timeout, must return within test::kWakeBound of the change that unblocks
// it, whichever call made the change. The rows a dead holder plays are in
// tests/integration/wake/mpmc_wake_process_test.cpp.
#include "common/temp_root.hpp"
#include "common/text.hpp"
#include "common/wake_probe.hpp"
#include "shm/mpmc/mpmc_ring.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace shm::mpmc_wake_test {
namespace {

using namespace std::chrono_literals;
using test::bytes;

class MpmcWakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto r = MpmcRing::create("wake", {.ring_cells = 4, .slot_bytes = 16});
    ASSERT_TRUE(r) << r.error().what();
    parked_.emplace(std::move(*r));
    auto o = MpmcRing::open("wake");
    ASSERT_TRUE(o) << o.error().what();
    other_.emplace(std::move(*o));
    control_ = reinterpret_cast<const mpmc::Control*>(parked_->segment().data().data());
  }
  void fill() {
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(*other_->try_push(bytes("item")));
    ASSERT_FALSE(*other_->try_push(bytes("item")));
  }
  // Parks `parked_` in pop(10 s); `change` must wake it with an item.
  test::WakeProbe consumer_woken_by(const std::function<void()>& change,
                                    const std::string& expected) {
    return test::probe_wake(
        [&] {
          std::vector<std::byte> out(16);
          auto r = parked_->pop(out, 10s);
          ASSERT_TRUE(r) << r.error().what();
          ASSERT_TRUE(*r) << "timed out";
          EXPECT_EQ(test::str(std::span(out).first(**r)), expected);
        },
        [&] { return control_->waiters.consumers_waiting.count.load() != 0; }, change);
  }
  // Parks `parked_` in push(10 s) on a full ring; `change` must wake it.
  test::WakeProbe producer_woken_by(const std::function<void()>& change) {
    return test::probe_wake(
        [&] {
          auto r = parked_->push(bytes("late"), 10s);
          ASSERT_TRUE(r) << r.error().what();
          EXPECT_TRUE(*r) << "timed out";
        },
        [&] { return control_->waiters.producers_waiting.count.load() != 0; }, change);
  }

  test::TempRoot root_;
  std::optional<MpmcRing> parked_, other_;
  const mpmc::Control* control_ = nullptr;
};

TEST_F(MpmcWakeTest, ConsumerWakesOnTryPush) {
  test::expect_woken(
      consumer_woken_by([&] { ASSERT_TRUE(*other_->try_push(bytes("one"))); }, "one"));
}

TEST_F(MpmcWakeTest, ConsumerWakesOnACommit) {
  test::expect_woken(consumer_woken_by(
      [&] {
        auto w = other_->try_reserve();
        ASSERT_TRUE(w && *w);
        std::memcpy((*w)->data(), "two", 3);
        other_->commit(3);
      },
      "two"));
}

// Another producer holds the cell at head (claimed, not published) with an
// item behind it: the parked consumer polls the held cell, and a cancel (a
// tombstone) lets it through to the item.
TEST_F(MpmcWakeTest, ConsumerWakesWhenACancelUnblocksTheItemBehindIt) {
  auto third = MpmcRing::open("wake");
  ASSERT_TRUE(third) << third.error().what();
  auto w = third->try_reserve();
  ASSERT_TRUE(w && *w);
  ASSERT_TRUE(*other_->try_push(bytes("behind")));
  test::expect_woken(consumer_woken_by([&] { third->cancel(); }, "behind"));
}

TEST_F(MpmcWakeTest, ConsumerWakesWhenACommitUnblocksTheItemBehindIt) {
  auto third = MpmcRing::open("wake");
  ASSERT_TRUE(third) << third.error().what();
  auto w = third->try_reserve();
  ASSERT_TRUE(w && *w);
  ASSERT_TRUE(*other_->try_push(bytes("behind")));
  test::expect_woken(consumer_woken_by(
      [&] {
        std::memcpy((*w)->data(), "front", 5);
        third->commit(5);
      },
      "front"));
}

TEST_F(MpmcWakeTest, ProducerWakesOnTryPop) {
  fill();
  test::expect_woken(producer_woken_by([&] {
    std::vector<std::byte> out(16);
    auto r = other_->try_pop(out);
    ASSERT_TRUE(r && *r);
  }));
}

TEST_F(MpmcWakeTest, ProducerWakesOnAReleaseAfterAPeek) {
  fill();
  auto p = other_->try_peek();
  ASSERT_TRUE(p && *p);
  test::expect_woken(producer_woken_by([&] { other_->release(); }));
}

TEST_F(MpmcWakeTest, ProducerWakesOnAReleaseAfterAKeptTake) {
  fill();
  auto t = other_->try_take();
  ASSERT_TRUE(t && *t);
  test::expect_woken(producer_woken_by([&] { other_->release(); }));
}

// The peek (the claim) happens while the producer is parked: the waker reads
// the waiter set at the claim, and releases later.
TEST_F(MpmcWakeTest, ProducerWakesOnAPeekAndReleaseMadeWhileItWaits) {
  fill();
  test::expect_woken(producer_woken_by([&] {
    auto p = other_->try_peek();
    ASSERT_TRUE(p && *p);
    other_->release();
  }));
}

}  // namespace
}  // namespace shm::mpmc_wake_test
