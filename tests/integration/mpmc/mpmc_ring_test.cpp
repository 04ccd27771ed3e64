// MpmcRing across real processes: a handle killed (or stopped) in the middle
// of a push or a pop never wedges the ring for the others.
#include "shm/mpmc/mpmc_ring.hpp"
#include "common/mpmc_probe.hpp"
#include "common/subprocess.hpp"
#include "common/temp_root.hpp"
#include "common/text.hpp"
#include "shm/segment/kind.hpp"

#include <gtest/gtest.h>

#include <csignal>
#include <string>
#include <vector>

namespace shm {
namespace {

using namespace std::chrono_literals;

using test::bytes;

class MpmcRingProcessTest : public ::testing::Test {
 protected:
  // R: MpmcRing or MpmcConsumer.
  template <class R>
  std::optional<std::string> pop_str(R& r, std::chrono::nanoseconds timeout = 0ns) {
    std::vector<std::byte> buf(r.slot_bytes());
    auto got = timeout == 0ns ? r.try_pop(buf) : r.pop(buf, timeout);
    EXPECT_TRUE(got) << got.error().what();
    if (!got || !*got) return std::nullopt;
    return std::string(reinterpret_cast<const char*>(buf.data()), **got);
  }
  template <class R>
  std::uint64_t counter(const R& r, std::string_view key) {
    Node n;
    kMpmcRingDescriptor.describe(r.segment(), n);
    return std::get<std::uint64_t>(n.find(key)->value());
  }
  test::TempRoot root_;
};

TEST_F(MpmcRingProcessTest, ProducerKilledBetweenClaimAndPublishIsSkippedAfterRepair) {
  auto r = MpmcConsumer::create("r", {.ring_cells = 8, .slot_bytes = 16});
  auto p = MpmcProducer::open("r");
  ASSERT_TRUE(r && p);
  test::Subprocess holder({test::helper_path("mpmc_hold"), "r", "reserve"});
  ASSERT_TRUE(holder.wait_for_line("held", 10s)) << holder.output();
  ASSERT_EQ(test::claimed_by(r->segment(), holder.pid(), mpmc::Side::Push), 0u)
      << "the victim holds position 0 claimed and unpublished";
  ASSERT_TRUE(*p->try_push(bytes("behind")));
  holder.kill(SIGKILL);
  ASSERT_EQ(holder.wait(10s), 128 + SIGKILL);

  const auto bad = kMpmcRingDescriptor.verify(r->segment());
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_NE(bad[0].find("cell 0 (position 0) was claimed by slot"), std::string::npos) << bad[0];
  EXPECT_NE(bad[0].find("dead"), std::string::npos) << bad[0];
  EXPECT_NE(bad[0].find("died before publishing it"), std::string::npos) << bad[0];

  EXPECT_EQ(pop_str(*r), std::nullopt) << "try_pop returns at once, it never waits on the cell";
  EXPECT_EQ(pop_str(*r, 10s), "behind") << "repaired after the grace period, then skipped";
  EXPECT_TRUE(kMpmcRingDescriptor.verify(r->segment()).empty());
  EXPECT_EQ(counter(*r, "abandoned_pushes"), 1u);
  ASSERT_TRUE(*p->try_push(bytes("still works")));
  EXPECT_EQ(pop_str(*r), "still works");
}

TEST_F(MpmcRingProcessTest, StoppedProducerKeepsConsumersEmptyWithoutHanging) {
  auto r = MpmcRing::create("r", {.ring_cells = 8, .slot_bytes = 16});
  ASSERT_TRUE(r);
  test::Subprocess holder({test::helper_path("mpmc_hold"), "r", "reserve"});
  ASSERT_TRUE(holder.wait_for_line("held", 10s)) << holder.output();
  ASSERT_EQ(test::claimed_by(r->segment(), holder.pid(), mpmc::Side::Push), 0u)
      << "the victim holds position 0 claimed and unpublished";
  ASSERT_TRUE(*r->try_push(bytes("behind")));
  holder.kill(SIGSTOP);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(pop_str(*r), std::nullopt);
  EXPECT_EQ(pop_str(*r, 50ms), std::nullopt) << "the blocking pop times out";
  EXPECT_TRUE(kMpmcRingDescriptor.verify(r->segment()).empty())
      << "a live holder is a push in flight, not a fault";
  EXPECT_EQ(r->repair().held_by_live, 1u);
  holder.kill(SIGKILL);
  ASSERT_EQ(holder.wait(10s), 128 + SIGKILL);
  EXPECT_EQ(pop_str(*r, 10s), "behind");
}

TEST_F(MpmcRingProcessTest, ConsumerKilledBetweenPopAndReleaseLosesOnlyThatItem) {
  auto r = MpmcRing::create("r", {.ring_cells = 4, .slot_bytes = 16});
  ASSERT_TRUE(r);
  for (const char* s : {"a", "b", "c", "d"}) ASSERT_TRUE(*r->try_push(bytes(s)));
  test::Subprocess holder({test::helper_path("mpmc_hold"), "r", "peek"});
  ASSERT_TRUE(holder.wait_for_line("held a", 10s)) << holder.output();
  ASSERT_EQ(test::claimed_by(r->segment(), holder.pid(), mpmc::Side::Pop), 0u)
      << "the victim holds position 0 popped and unreleased";
  holder.kill(SIGKILL);
  ASSERT_EQ(holder.wait(10s), 128 + SIGKILL);
  EXPECT_EQ(pop_str(*r), "b");
  EXPECT_EQ(pop_str(*r), "c");
  EXPECT_EQ(pop_str(*r), "d");
  const auto bad = kMpmcRingDescriptor.verify(r->segment());
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_NE(bad[0].find("died before releasing it: its item is lost"), std::string::npos) << bad[0];
  EXPECT_FALSE(*r->try_push(bytes("e"))) << "the held cell blocks producers until repaired";
  auto pushed = r->push(bytes("e"), 10s);
  ASSERT_TRUE(pushed && *pushed);
  for (const char* s : {"f", "g", "h"}) ASSERT_TRUE(*r->try_push(bytes(s)));
  for (const char* s : {"e", "f", "g", "h"}) EXPECT_EQ(pop_str(*r), s);
  EXPECT_EQ(counter(*r, "lost_pops"), 1u);
  EXPECT_TRUE(kMpmcRingDescriptor.verify(r->segment()).empty());
}

TEST_F(MpmcRingProcessTest, ReclaimOfTheDeadSlotRepairsItsCellAtOnce) {
  auto r = MpmcRing::create("r", {.ring_cells = 8, .slot_bytes = 16});
  ASSERT_TRUE(r);
  test::Subprocess holder({test::helper_path("mpmc_hold"), "r", "reserve"});
  ASSERT_TRUE(holder.wait_for_line("held", 10s)) << holder.output();
  ASSERT_TRUE(*r->try_push(bytes("behind")));
  ASSERT_EQ(test::claimed_by(r->segment(), holder.pid(), mpmc::Side::Push), 0u)
      << "the victim holds position 0 claimed and unpublished";
  std::optional<SlotInfo> dead;
  for (const SlotInfo& s : r->segment().slots())
    if (s.pid == holder.pid()) dead = s;
  ASSERT_TRUE(dead);
  holder.kill(SIGKILL);
  ASSERT_EQ(holder.wait(10s), 128 + SIGKILL);
  auto seg = open_mpmc_ring("r");  // what the sidecar holds: a writable mapping
  ASSERT_TRUE(seg);
  // The programs' path: it holds the dead slot's kernel lock while the kind
  // reclaims, so the kind must not mistake that lock for a live holder.
  auto done = reclaim_dead_attacher(*seg, kMpmcRingDescriptor, *dead);
  ASSERT_TRUE(done) << done.error().what();
  ASSERT_EQ(done->status, ReclaimStatus::Reclaimed);
  ASSERT_EQ(done->actions.size(), 1u);
  EXPECT_NE(done->actions[0].find("published a tombstone consumers skip"), std::string::npos)
      << done->actions[0];
  EXPECT_EQ(seg->liveness(dead->index), Liveness::Free);
  EXPECT_EQ(pop_str(*r), "behind") << "no grace period after a reclaim";
}

}  // namespace
}  // namespace shm
