// The rows of the wake-up table of docs/fanout.md that a dead process plays,
// with real separate processes: an at-least-once taker
// (tests/helpers/fanout/fanout_take_hold.cpp) is SIGKILLed between its take
// and its release; the repair that makes its item an orphan must wake a
// drainer parked on the bitmap (10 s timeout) within test::kWakeBound,
// whoever runs the repair.
#include "common/subprocess.hpp"
#include "common/temp_root.hpp"
#include "common/text.hpp"
#include "common/wake_probe.hpp"
#include "shm/fanout/priority_fanout.hpp"
#include "shm/segment/kind.hpp"

#include <gtest/gtest.h>

#include <array>
#include <csignal>
#include <optional>
#include <string>

namespace shm::fanout_wake_process_test {
namespace {

using namespace std::chrono_literals;
using test::bytes;
using test::Subprocess;

// slot_bytes 48: what test_fanout_take_hold expects (FanoutParams' default).
constexpr FanoutParams kParams{.priorities = 4, .ring_cells = 2, .slot_bytes = 48};

class FanoutWakeProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto f = PriorityFanout::create("wake", kParams);
    ASSERT_TRUE(f) << f.error().what();
    drainer_.emplace(std::move(*f));
    auto s = PriorityFanout::open("wake", kParams);
    ASSERT_TRUE(s) << s.error().what();
    submitter_.emplace(std::move(*s));
    control_ = reinterpret_cast<const fanout::Control*>(drainer_->bitmap_segment().data().data());
  }
  // Submits "kept" (and `more`) at priority 2 and has a taker process take
  // "kept" and die holding it. The drainer drains `more`: every bit is clear.
  void kill_a_taker(const char* more) {
    ASSERT_TRUE(*submitter_->try_submit(2, bytes("kept")));
    if (more != nullptr) {
      ASSERT_TRUE(*submitter_->try_submit(2, bytes(more)));
    }
    Subprocess taker({test::helper_path("fanout_take_hold"), "wake"});
    ASSERT_TRUE(taker.wait_for_line("taken 2 kept", 30s)) << taker.output();
    if (more != nullptr) {
      std::array<std::byte, 48> out{};
      auto r = drainer_->try_pop_highest(out);
      ASSERT_TRUE(r && *r);
    }
    taker.kill(SIGKILL);
    ASSERT_EQ(taker.wait(10s), 128 + SIGKILL);
    ASSERT_EQ(drainer_->active_priorities(), 0u);
  }
  test::WakeProbe drainer_woken_by(const std::function<void()>& change) {
    return test::probe_wake(
        [&] {
          std::array<std::byte, 48> out{};
          auto r = drainer_->pop_highest(out, 10s);
          ASSERT_TRUE(r) << r.error().what();
          ASSERT_TRUE(*r) << "timed out";
          EXPECT_EQ((*r)->priority, 2u);
          EXPECT_EQ(test::str(std::span(out).first((*r)->size)), "kept");
        },
        [&] { return control_->hot.waiters.parked() != 0; }, change);
  }

  test::TempRoot root_;
  std::optional<PriorityFanout> drainer_, submitter_;
  const fanout::Control* control_ = nullptr;
};

// The next open repairs the ring (the orphan) and resurfaces its bit.
TEST_F(FanoutWakeProcessTest, DrainerWakesWhenAnOpenOrphansADeadTakersItem) {
  kill_a_taker(nullptr);
  std::optional<PriorityFanout> next;
  test::expect_woken(drainer_woken_by([&] {
    auto f = PriorityFanout::open("wake", kParams);
    ASSERT_TRUE(f) << f.error().what();
    next.emplace(std::move(*f));
  }));
}

// The next position's cell is the dead taker's: a blocking
// submit stuck behind the dead taker's cell repairs it after
// mpmc::kStuckGraceNs and makes the item an orphan. The drainer sleeps on
// the bitmap's epoch, not on the ring's words: the repair must set the bit
// and wake it, or it sleeps until its park round ends (kMaxParkNs).
TEST_F(FanoutWakeProcessTest, DrainerWakesWhenASubmitterBlockedBehindADeadTakersCellRepairsIt) {
  kill_a_taker("more");
  auto full = submitter_->try_submit(2, bytes("y"));
  ASSERT_TRUE(full);
  ASSERT_FALSE(*full) << "the next position's cell is the dead taker's";
  test::expect_woken(drainer_woken_by([&] {
    auto r = submitter_->submit(2, bytes("y"), 10s);
    ASSERT_TRUE(r) << r.error().what();
    EXPECT_TRUE(*r) << "the submitter timed out";
  }));
}

// A submitter that died between its ring commit and its bit left an item
// under a clear bit (played here by a ring handle of our own: the state is
// the same); the kind's reclaim of a dead attacher (the sidecar, `shmctl
// reclaim`) resurfaces it and wakes every parked drainer.
TEST_F(FanoutWakeProcessTest, DrainerWakesWhenTheKindsReclaimResurfacesAStrandedItem) {
  Subprocess dead({test::helper_path("fanout_attach_hold"), "wake"});
  ASSERT_TRUE(dead.wait_for_line("attached", 30s)) << dead.output();
  std::optional<SlotInfo> slot;
  for (const SlotInfo& s : drainer_->bitmap_segment().slots())
    if (s.pid == dead.pid()) slot = s;
  ASSERT_TRUE(slot);
  dead.kill(SIGKILL);
  ASSERT_EQ(dead.wait(10s), 128 + SIGKILL);
  auto ring = MpmcRing::open(fanout::ring_name("wake", 2));
  ASSERT_TRUE(ring) << ring.error().what();
  auto seg = Segment::open_any("wake.bitmap", OpenOptions{});  // writable, as the sidecar
  ASSERT_TRUE(seg) << seg.error().what();
  test::expect_woken(drainer_woken_by([&] {
    ASSERT_TRUE(*ring->try_push(bytes("kept")));
    auto done = reclaim_dead_attacher(*seg, kFanoutBitmapDescriptor, *slot);
    ASSERT_TRUE(done) << done.error().what();
    EXPECT_EQ(done->status, ReclaimStatus::Reclaimed);
  }));
}

// The sidecar reclaims each segment on its own. The ring's reclaim of a dead
// taker makes its item an orphan (waking the ring's waiters, not the
// bitmap's); the bitmap's reclaim that follows must see the orphan as an
// item under a clear bit, set the bit and wake the parked drainer.
TEST_F(FanoutWakeProcessTest, DrainerWakesWhenTheReclaimsOfRingAndBitmapOrphanADeadTakersItem) {
  ASSERT_TRUE(*submitter_->try_submit(2, bytes("kept")));
  Subprocess taker({test::helper_path("fanout_take_hold"), "wake"});
  ASSERT_TRUE(taker.wait_for_line("taken 2 kept", 30s)) << taker.output();
  std::optional<SlotInfo> in_ring, in_bitmap;
  for (const SlotInfo& s : drainer_->ring(2).segment().slots())
    if (s.pid == taker.pid()) in_ring = s;
  for (const SlotInfo& s : drainer_->bitmap_segment().slots())
    if (s.pid == taker.pid()) in_bitmap = s;
  ASSERT_TRUE(in_ring && in_bitmap);
  taker.kill(SIGKILL);
  ASSERT_EQ(taker.wait(10s), 128 + SIGKILL);
  ASSERT_EQ(drainer_->active_priorities(), 0u);
  auto ring = Segment::open_any(fanout::ring_name("wake", 2), OpenOptions{});
  ASSERT_TRUE(ring) << ring.error().what();
  auto bitmap = Segment::open_any("wake.bitmap", OpenOptions{});
  ASSERT_TRUE(bitmap) << bitmap.error().what();
  test::expect_woken(drainer_woken_by([&] {
    auto r = reclaim_dead_attacher(*ring, kMpmcRingDescriptor, *in_ring);
    ASSERT_TRUE(r) << r.error().what();
    auto b = reclaim_dead_attacher(*bitmap, kFanoutBitmapDescriptor, *in_bitmap);
    ASSERT_TRUE(b) << b.error().what();
  }));
}

}  // namespace
}  // namespace shm::fanout_wake_process_test
