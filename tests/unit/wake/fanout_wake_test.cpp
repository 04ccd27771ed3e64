// The wake-up table of docs/fanout.md, the rows one process can play: a
// drainer parked in pop_highest()/take_highest() (on the bitmap's epoch), a
// drainer parked in pop_priority() or a submitter parked in a blocking
// submit() (both on the ring's own futex words), with a 10 s timeout, must
// return within test::kWakeBound of the change that unblocks it. The rows a
// dead process plays are in tests/integration/wake/fanout_wake_process_test.cpp.
#include "common/temp_root.hpp"
#include "common/text.hpp"
#include "common/wake_probe.hpp"
#include "shm/fanout/priority_fanout.hpp"

#include <gtest/gtest.h>

#include <array>
#include <optional>
#include <string>

namespace shm::fanout_wake_test {
namespace {

using namespace std::chrono_literals;
using test::bytes;

constexpr FanoutParams kParams{.priorities = 4, .ring_cells = 2, .slot_bytes = 16};

class FanoutWakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto f = PriorityFanout::create("wake", kParams);
    ASSERT_TRUE(f) << f.error().what();
    parked_.emplace(std::move(*f));
    auto o = PriorityFanout::open("wake", kParams);
    ASSERT_TRUE(o) << o.error().what();
    other_.emplace(std::move(*o));
    control_ = reinterpret_cast<const fanout::Control*>(parked_->bitmap_segment().data().data());
  }
  const mpmc::Control& ring_control(std::uint32_t p) const {
    return *reinterpret_cast<const mpmc::Control*>(parked_->ring(p).segment().data().data());
  }
  void submit(std::uint32_t p, const char* s, bool expected = true) {
    auto r = other_->try_submit(p, bytes(s));
    ASSERT_TRUE(r) << r.error().what();
    ASSERT_EQ(*r, expected);
  }
  // Parks `parked_` in pop_highest(10 s); `change` must wake it with
  // `expected` from priority `priority`.
  test::WakeProbe drainer_woken_by(const std::function<void()>& change, std::uint32_t priority,
                                   const std::string& expected) {
    return test::probe_wake(
        [&] {
          std::array<std::byte, 16> out{};
          auto r = parked_->pop_highest(out, 10s);
          ASSERT_TRUE(r) << r.error().what();
          ASSERT_TRUE(*r) << "timed out";
          EXPECT_EQ((*r)->priority, priority);
          EXPECT_EQ(test::str(std::span(out).first((*r)->size)), expected);
        },
        [&] { return control_->hot.waiters.parked() != 0; }, change);
  }
  // Parks `parked_` in submit(priority, 10 s) on a full ring; `change` must wake it.
  test::WakeProbe submitter_woken_by(std::uint32_t priority, const std::function<void()>& change) {
    return test::probe_wake(
        [&] {
          auto r = parked_->submit(priority, bytes("late"), 10s);
          ASSERT_TRUE(r) << r.error().what();
          EXPECT_TRUE(*r) << "timed out";
        },
        [&, priority] { return ring_control(priority).waiters.producers_waiting.parked() != 0; },
        change);
  }

  test::TempRoot root_;
  std::optional<PriorityFanout> parked_, other_;
  const fanout::Control* control_ = nullptr;
};

TEST_F(FanoutWakeTest, DrainerWakesOnASubmit) {
  test::expect_woken(drainer_woken_by([&] { submit(2, "two"); }, 2, "two"));
}

TEST_F(FanoutWakeTest, DrainerWakesOnASubmitToTheLowestPriority) {
  test::expect_woken(drainer_woken_by([&] { submit(0, "zero"); }, 0, "zero"));
}

TEST_F(FanoutWakeTest, TakerWakesOnASubmit) {
  test::expect_woken(test::probe_wake(
      [&] {
        auto r = parked_->take_highest(10s);
        ASSERT_TRUE(r) << r.error().what();
        ASSERT_TRUE(*r) << "timed out";
        EXPECT_EQ(test::str((*r)->payload), "taken");
        parked_->release();
      },
      [&] { return control_->hot.waiters.parked() != 0; }, [&] { submit(3, "taken"); }));
}

// pop_priority() waits on the ring's own words, not on the bitmap.
TEST_F(FanoutWakeTest, PriorityDrainerWakesOnASubmitToItsPriority) {
  test::expect_woken(test::probe_wake(
      [&] {
        std::array<std::byte, 16> out{};
        auto r = parked_->pop_priority(1, out, 10s);
        ASSERT_TRUE(r) << r.error().what();
        ASSERT_TRUE(*r) << "timed out";
        EXPECT_EQ(test::str(std::span(out).first(**r)), "one");
      },
      [&] { return ring_control(1).waiters.consumers_waiting.parked() != 0; },
      [&] { submit(1, "one"); }));
}

// A submitter that died between its ring commit and its bit leaves an item
// under a clear bit (played here by a ring handle of our own: the state is
// the same). The parked drainer's own look at the rings comes only once per
// park round (mpmc::internal::kMaxParkNs); the next open resurfaces the item
// and wakes it.
TEST_F(FanoutWakeTest, DrainerWakesWhenAnOpenResurfacesAStrandedItem) {
  auto ring = MpmcRing::open(fanout::ring_name("wake", 1));
  ASSERT_TRUE(ring) << ring.error().what();
  std::optional<PriorityFanout> next;
  test::expect_woken(drainer_woken_by(
      [&] {
        ASSERT_TRUE(*ring->try_push(bytes("stranded")));
        auto f = PriorityFanout::open("wake", kParams);
        ASSERT_TRUE(f) << f.error().what();
        next.emplace(std::move(*f));
      },
      1, "stranded"));
}

TEST_F(FanoutWakeTest, SubmitterWakesWhenADrainFreesItsRing) {
  submit(2, "a");
  submit(2, "b");
  submit(2, "c", false);
  test::expect_woken(submitter_woken_by(2, [&] {
    std::array<std::byte, 16> out{};
    auto r = other_->try_pop_highest(out);
    ASSERT_TRUE(r && *r);
  }));
}

TEST_F(FanoutWakeTest, SubmitterWakesWhenAPriorityDrainFreesItsRing) {
  submit(1, "a");
  submit(1, "b");
  test::expect_woken(submitter_woken_by(1, [&] {
    std::array<std::byte, 16> out{};
    auto r = other_->try_pop_priority(1, out);
    ASSERT_TRUE(r && *r);
  }));
}

TEST_F(FanoutWakeTest, SubmitterWakesWhenATakenItemIsReleased) {
  submit(3, "a");
  submit(3, "b");
  auto t = other_->try_take_highest();
  ASSERT_TRUE(t && *t);
  test::expect_woken(submitter_woken_by(3, [&] { other_->release(); }));
}

}  // namespace
}  // namespace shm::fanout_wake_test
