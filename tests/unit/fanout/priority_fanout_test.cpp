#include "shm/fanout/priority_fanout.hpp"
#include "common/node_fields.hpp"
#include "common/open_files.hpp"
#include "common/scale.hpp"
#include "common/temp_root.hpp"
#include "common/text.hpp"
#include "shm/segment/kind.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace shm {
namespace {

using namespace std::chrono_literals;

using test::bytes;

using test::u64;

class PriorityFanoutTest : public ::testing::Test {
 protected:
  static constexpr FanoutParams kParams{.priorities = 4, .ring_cells = 16, .slot_bytes = 48};

  PriorityFanout make(const FanoutParams& p = kParams) {
    auto f = PriorityFanout::create("jobs", p);
    EXPECT_TRUE(f) << f.error().what();
    return std::move(*f);
  }
  // {priority, payload} of the next drained item, or nullopt.
  // F: PriorityFanout or FanoutConsumer.
  template <class F>
  std::optional<std::pair<std::uint32_t, std::string>> drain(F& f) {
    std::vector<std::byte> buf(f.slot_bytes());
    auto d = f.try_pop_highest(buf);
    EXPECT_TRUE(d) << d.error().what();
    if (!d || !*d) return std::nullopt;
    return std::pair{(*d)->priority,
                     std::string(reinterpret_cast<const char*>(buf.data()), (*d)->size)};
  }
  // A raw writable view of the bitmap segment (what a buggy process could change).
  struct Raw {
    Segment seg;
    fanout::Control* ctl;
  };
  Raw raw_bitmap() {
    auto seg = Segment::open_any("jobs.bitmap", {});
    EXPECT_TRUE(seg) << seg.error().what();
    auto* ctl = reinterpret_cast<fanout::Control*>(seg->data().data());
    return Raw{std::move(*seg), ctl};
  }

  test::TempRoot root_;
};

TEST_F(PriorityFanoutTest, BitmapStartsEmpty) {
  auto f = make();
  EXPECT_EQ(f.active_priorities(), 0u);
  EXPECT_EQ(drain(f), std::nullopt);
  Node n;
  kFanoutBitmapDescriptor.describe(f.bitmap_segment(), n);
  EXPECT_EQ(std::get<std::string>(n.find("bitmap")->value()), "0b0000");
}

TEST_F(PriorityFanoutTest, SubmitSetsThePriorityBit) {
  auto f = make();
  ASSERT_TRUE(*f.try_submit(2, bytes("mid")));
  EXPECT_EQ(f.active_priorities(), 0b0100u);
  ASSERT_TRUE(*f.try_submit(0, bytes("low")));
  EXPECT_EQ(f.active_priorities(), 0b0101u);
}

TEST_F(PriorityFanoutTest, DrainsHighestPriorityFirst) {
  auto f = make();
  ASSERT_TRUE(*f.try_submit(0, bytes("low-prio")));
  ASSERT_TRUE(*f.try_submit(2, bytes("med-prio")));
  ASSERT_TRUE(*f.try_submit(3, bytes("high-prio")));
  EXPECT_EQ(drain(f), (std::pair<std::uint32_t, std::string>{3, "high-prio"}));
  EXPECT_EQ(drain(f), (std::pair<std::uint32_t, std::string>{2, "med-prio"}));
  EXPECT_EQ(drain(f), (std::pair<std::uint32_t, std::string>{0, "low-prio"}));
  EXPECT_EQ(drain(f), std::nullopt);
  EXPECT_EQ(f.active_priorities(), 0u) << "the pop that empties a ring clears its bit";
  Node n;
  kFanoutBitmapDescriptor.describe(f.bitmap_segment(), n);
  EXPECT_EQ(u64(n, "stale_retries"), 0u);
}

TEST_F(PriorityFanoutTest, FifoWithinAPriority) {
  auto f = make();
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(*f.try_submit(1, bytes("job" + std::to_string(i))));
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(drain(f), (std::pair<std::uint32_t, std::string>{1, "job" + std::to_string(i)}));
}

TEST_F(PriorityFanoutTest, HeartbeatStampsTheBitmapAndEveryRingAttachment) {
  auto f = make();
  // The newest heartbeat of the (single) attached handle in each of the K+1 files.
  auto stamps = [&] {
    std::vector<std::uint64_t> out;
    auto newest = [](const Segment& s) {
      std::uint64_t ns = 0;
      for (const SlotInfo& i : s.slots())
        if (i.state == SlotState::Attached) ns = std::max(ns, i.heartbeat_ns);
      return ns;
    };
    out.push_back(newest(f.bitmap_segment()));
    for (std::uint32_t p = 0; p < f.priorities(); ++p) out.push_back(newest(f.ring(p).segment()));
    return out;
  };
  const std::vector<std::uint64_t> before = stamps();
  std::this_thread::sleep_for(2ms);
  f.heartbeat();
  const std::vector<std::uint64_t> after = stamps();
  ASSERT_EQ(after.size(), std::size_t{kParams.priorities} + 1);
  for (std::size_t i = 0; i < after.size(); ++i)
    EXPECT_GT(after[i], before[i]) << (i == 0 ? "bitmap" : "ring " + std::to_string(i - 1));
}

TEST_F(PriorityFanoutTest, OutOfBoundsPriorityIsRejected) {
  auto f = make();
  auto s = f.try_submit(4, bytes("x"));
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, Errc::PriorityOutOfBounds);
  EXPECT_NE(s.error().message.find("priority 4 is out of bounds"), std::string::npos)
      << s.error().message;
  EXPECT_NE(s.error().message.find("4 priorities (0..3"), std::string::npos) << s.error().message;
  std::vector<std::byte> buf(48);
  EXPECT_EQ(f.try_pop_priority(7, buf).error().code, Errc::PriorityOutOfBounds);
  EXPECT_EQ(f.pop_priority(7, buf, 1ms).error().code, Errc::PriorityOutOfBounds);
  EXPECT_EQ(f.submit(64, bytes("x"), 1ms).error().code, Errc::PriorityOutOfBounds);
  EXPECT_EQ(f.active_priorities(), 0u) << "nothing changed";
}

TEST_F(PriorityFanoutTest, DedicatedWorkerDrainsOnlyItsPriority) {
  auto f = make();
  ASSERT_TRUE(*f.try_submit(3, bytes("urgent")));
  ASSERT_TRUE(*f.try_submit(1, bytes("routine")));
  auto worker = PriorityFanout::open("jobs", kParams);
  ASSERT_TRUE(worker);
  std::vector<std::byte> buf(48);
  auto got = worker->try_pop_priority(1, buf);
  ASSERT_TRUE(got && *got);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(buf.data()), **got), "routine");
  got = worker->try_pop_priority(1, buf);
  ASSERT_TRUE(got);
  EXPECT_FALSE(*got);
  EXPECT_EQ(drain(f), (std::pair<std::uint32_t, std::string>{3, "urgent"}));
  EXPECT_EQ(f.active_priorities(), 0u) << "each pop that emptied its ring cleared the bit";
}

TEST_F(PriorityFanoutTest, FullRingReturnsFullNotAnError) {
  auto f = make();
  for (std::uint64_t i = 0; i < kParams.ring_cells; ++i) ASSERT_TRUE(*f.try_submit(2, bytes("x")));
  auto full = f.try_submit(2, bytes("x"));
  ASSERT_TRUE(full) << full.error().what();
  EXPECT_FALSE(*full);
  EXPECT_TRUE(*f.try_submit(1, bytes("other priorities have their own room")));
  auto timed = f.submit(2, bytes("x"), 5ms);
  ASSERT_TRUE(timed);
  EXPECT_FALSE(*timed);
}

TEST_F(PriorityFanoutTest, CapacityBoundary) {
  auto f = make({.priorities = 2, .ring_cells = 4, .slot_bytes = 8});
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(*f.try_submit(1, bytes(std::to_string(i))));
  EXPECT_FALSE(*f.try_submit(1, bytes("4")));
  EXPECT_EQ(drain(f), (std::pair<std::uint32_t, std::string>{1, "0"}));
  EXPECT_TRUE(*f.try_submit(1, bytes("4")));
  EXPECT_FALSE(*f.try_submit(1, bytes("5")));
  for (int i = 1; i <= 4; ++i)
    EXPECT_EQ(drain(f), (std::pair<std::uint32_t, std::string>{1, std::to_string(i)}));
  const std::string exact(8, 'e');
  EXPECT_TRUE(*f.try_submit(0, bytes(exact)));
  auto big = f.try_submit(0, bytes(exact + "!"));
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error().code, Errc::TooLarge);
  EXPECT_NE(big.error().message.find("9 bytes exceeds the ring's slot size of 8"),
            std::string::npos)
      << big.error().message;
}

TEST_F(PriorityFanoutTest, SubmitsAreVisibleThroughAnotherHandle) {
  auto a = make();
  auto b = PriorityFanout::open("jobs", kParams);
  ASSERT_TRUE(b) << b.error().what();
  ASSERT_TRUE(*a.try_submit(1, bytes("from a")));
  EXPECT_EQ(b->active_priorities(), 0b0010u);
  EXPECT_EQ(drain(*b), (std::pair<std::uint32_t, std::string>{1, "from a"}));
  ASSERT_TRUE(*b->try_submit(3, bytes("from b")));
  EXPECT_EQ(drain(a), (std::pair<std::uint32_t, std::string>{3, "from b"}));
}

TEST_F(PriorityFanoutTest, InterleavedSubmitAndDrainKeepPriorityOrder) {
  auto f = make();
  ASSERT_TRUE(*f.try_submit(1, bytes("a1")));
  ASSERT_TRUE(*f.try_submit(0, bytes("a0")));
  EXPECT_EQ(drain(f), (std::pair<std::uint32_t, std::string>{1, "a1"}));
  ASSERT_TRUE(*f.try_submit(3, bytes("b3")));
  ASSERT_TRUE(*f.try_submit(1, bytes("b1")));
  EXPECT_EQ(drain(f), (std::pair<std::uint32_t, std::string>{3, "b3"}));
  ASSERT_TRUE(*f.try_submit(2, bytes("c2")));
  EXPECT_EQ(drain(f), (std::pair<std::uint32_t, std::string>{2, "c2"}));
  EXPECT_EQ(drain(f), (std::pair<std::uint32_t, std::string>{1, "b1"}));
  EXPECT_EQ(drain(f), (std::pair<std::uint32_t, std::string>{0, "a0"}));
  EXPECT_EQ(drain(f), std::nullopt);
}

TEST_F(PriorityFanoutTest, ConcurrentProducersRouteToTheRightPriorities) {
  const FanoutParams params{.priorities = 4, .ring_cells = 1024, .slot_bytes = 16};
  auto f = make(params);
  const std::uint64_t per_thread = test::scaled(20'000);
  std::atomic<bool> go{false}, failed{false};
  std::atomic<std::uint64_t> drained{0};
  std::vector<std::array<std::uint64_t, 4>> counts(2, std::array<std::uint64_t, 4>{});
  std::vector<std::thread> threads;
  for (std::uint32_t t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      auto h = FanoutProducer::open("jobs", params);
      if (!h) return failed.store(true);
      while (!go.load()) std::this_thread::yield();
      for (std::uint64_t i = 0; i < per_thread; ++i) {
        const std::uint32_t prio = static_cast<std::uint32_t>((i + t) % 4);
        const std::uint64_t item[2] = {prio, t * per_thread + i};
        auto ok = h->submit(prio, std::as_bytes(std::span(item)), 10s);
        if (!ok || !*ok) return failed.store(true);
      }
    });
  for (int c = 0; c < 2; ++c)
    threads.emplace_back([&, c] {
      auto h = FanoutConsumer::open("jobs", params);
      if (!h) return failed.store(true);
      std::uint64_t item[2];
      while (drained.load() < 4 * per_thread && !failed.load()) {
        auto d = h->pop_highest(std::as_writable_bytes(std::span(item)), 20ms);
        if (!d) return failed.store(true);
        if (!*d) continue;
        if ((*d)->priority != item[0]) return failed.store(true);  // routed to the wrong ring
        ++counts[c][(*d)->priority];
        drained.fetch_add(1);
      }
    });
  go = true;
  for (auto& th : threads) th.join();
  ASSERT_FALSE(failed.load());
  for (std::uint32_t p = 0; p < 4; ++p) EXPECT_EQ(counts[0][p] + counts[1][p], per_thread) << p;
  EXPECT_TRUE(kFanoutBitmapDescriptor.verify(f.bitmap_segment()).empty());
}

TEST_F(PriorityFanoutTest, FilesPersistAfterHandlesCloseAndUnlinkRemovesThem) {
  {
    auto f = make();
    ASSERT_TRUE(*f.try_submit(2, bytes("persisted")));
  }
  for (const char* file : {"jobs.bitmap", "jobs.prio0", "jobs.prio1", "jobs.prio2", "jobs.prio3"})
    EXPECT_TRUE(std::filesystem::exists(root_.file(file))) << file;
  {
    auto f = PriorityFanout::open("jobs", kParams);
    ASSERT_TRUE(f) << f.error().what();
    EXPECT_EQ(f->active_priorities(), 0b0100u);
    EXPECT_EQ(drain(*f), (std::pair<std::uint32_t, std::string>{2, "persisted"}));
  }
  ASSERT_TRUE(PriorityFanout::unlink("jobs"));
  EXPECT_TRUE(std::filesystem::is_empty(root_.path()));
  auto again = PriorityFanout::unlink("jobs");
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, Errc::NotFound);
  auto gone = PriorityFanout::open("jobs", kParams);
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, Errc::NotFound);
}

TEST_F(PriorityFanoutTest, OpenWithDifferentParametersIsMismatchNamingBothValues) {
  auto f = make();
  struct Case {
    FanoutParams params;
    const char* message;
  };
  for (const Case& c : {Case{{8, 16, 48}, "priorities: segment has 4, caller expects 8"},
                        Case{{4, 32, 48}, "ring_cells: segment has 16, caller expects 32"},
                        Case{{4, 16, 64}, "slot_bytes: segment has 48, caller expects 64"}}) {
    auto o = PriorityFanout::open("jobs", c.params);
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error().code, Errc::ParamMismatch);
    EXPECT_NE(o.error().message.find(c.message), std::string::npos) << o.error().message;
  }
  auto any = PriorityFanout::open("jobs", {.priorities = 0, .ring_cells = 0, .slot_bytes = 0});
  ASSERT_TRUE(any) << any.error().what();
  EXPECT_EQ(any->priorities(), 4u);
  EXPECT_EQ(any->ring_cells(), 16u);
}

TEST_F(PriorityFanoutTest, CreateRejectsBadPriorityCounts) {
  for (std::uint32_t k : {0u, 65u}) {
    auto f = PriorityFanout::create("bad", {.priorities = k, .ring_cells = 16, .slot_bytes = 8});
    ASSERT_FALSE(f);
    EXPECT_EQ(f.error().code, Errc::InvalidArgument);
    EXPECT_NE(f.error().message.find("must be in [1, 64]"), std::string::npos) << f.error().message;
  }
  auto cap = PriorityFanout::create("bad", {.priorities = 4, .ring_cells = 10, .slot_bytes = 8});
  ASSERT_FALSE(cap);
  EXPECT_EQ(cap.error().code, Errc::InvalidArgument);
  EXPECT_TRUE(std::filesystem::is_empty(root_.path()));
}

TEST_F(PriorityFanoutTest, SixtyFourPrioritiesUseTheTopBit) {
  auto f = make({.priorities = 64, .ring_cells = 2, .slot_bytes = 8});
  ASSERT_TRUE(*f.try_submit(0, bytes("bottom")));
  ASSERT_TRUE(*f.try_submit(63, bytes("top")));
  EXPECT_EQ(f.active_priorities(), (1ull << 63) | 1u);
  EXPECT_EQ(drain(f), (std::pair<std::uint32_t, std::string>{63, "top"}));
  EXPECT_EQ(drain(f), (std::pair<std::uint32_t, std::string>{0, "bottom"}));
}

TEST_F(PriorityFanoutTest, CreateFailsCleanlyWhenOneFileExists) {
  ASSERT_TRUE(create_mpmc_ring("jobs.prio2", {.ring_cells = 16, .slot_bytes = 48}));
  auto f = PriorityFanout::create("jobs", kParams);
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error().code, Errc::AlreadyExists);
  EXPECT_FALSE(std::filesystem::exists(root_.file("jobs.prio0")));
  EXPECT_FALSE(std::filesystem::exists(root_.file("jobs.prio1")));
  EXPECT_TRUE(std::filesystem::exists(root_.file("jobs.prio2"))) << "not ours: left alone";
  EXPECT_FALSE(std::filesystem::exists(root_.file("jobs.bitmap")));
}

TEST_F(PriorityFanoutTest, RingRecreatedOnItsOwnIsRefused) {
  { auto f = make(); }
  ASSERT_TRUE(Segment::unlink("jobs.prio1"));
  ASSERT_TRUE(create_mpmc_ring("jobs.prio1", {.ring_cells = 16, .slot_bytes = 48}));
  auto o = PriorityFanout::open("jobs", kParams);
  ASSERT_FALSE(o);
  EXPECT_EQ(o.error().code, Errc::ParamMismatch);
  EXPECT_NE(o.error().message.find("jobs.prio1: incarnation"), std::string::npos)
      << o.error().message;
  ASSERT_TRUE(Segment::unlink("jobs.prio1"));
  auto missing = PriorityFanout::open("jobs", kParams);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, Errc::NotFound);
  EXPECT_NE(missing.error().message.find("'jobs.prio1' of priority 1 is missing"),
            std::string::npos)
      << missing.error().message;
  const auto bad = kFanoutBitmapDescriptor.verify(raw_bitmap().seg);
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_NE(bad[0].find("priority 1"), std::string::npos) << bad[0];
}

TEST_F(PriorityFanoutTest, StaleBitIsClearedAndCounted) {
  auto f = make();
  ASSERT_TRUE(*f.try_submit(3, bytes("x")));
  ASSERT_TRUE(*f.try_submit(3, bytes("y")));
  // Pops that bypass the fanout (a plain ring handle) leave bit 3 set over an empty ring.
  auto bypass = MpmcRing::open("jobs.prio3");
  ASSERT_TRUE(bypass);
  std::vector<std::byte> buf(48);
  ASSERT_TRUE(*bypass->try_pop(buf));
  ASSERT_TRUE(*bypass->try_pop(buf));
  EXPECT_EQ(f.active_priorities(), 0b1000u);
  ASSERT_TRUE(*f.try_submit(1, bytes("y")));
  EXPECT_EQ(drain(f), (std::pair<std::uint32_t, std::string>{1, "y"}));
  EXPECT_EQ(f.active_priorities(), 0u)
      << "stale bit 3 cleared by the failed pop, bit 1 by the emptying pop";
  Node n;
  kFanoutBitmapDescriptor.describe(f.bitmap_segment(), n);
  EXPECT_EQ(u64(n, "stale_retries"), 1u);
}

TEST_F(PriorityFanoutTest, InFlightPushDoesNotHideLowerPriorities) {
  auto f = make();
  auto top = MpmcRing::open("jobs.prio3");  // a pusher of priority 3, mid-push
  ASSERT_TRUE(top);
  auto held = top->try_reserve();
  ASSERT_TRUE(held && *held);
  Raw raw = raw_bitmap();
  raw.ctl->hot.bitmap.fetch_or(1u << 3);  // as if another item of priority 3 had been announced
  ASSERT_TRUE(*f.try_submit(1, bytes("low")));
  EXPECT_EQ(drain(f), (std::pair<std::uint32_t, std::string>{1, "low"}));
  EXPECT_EQ(f.active_priorities() & 0b1000u, 0b1000u) << "kept: a push of priority 3 is in flight";
  EXPECT_TRUE(kFanoutBitmapDescriptor.verify(f.bitmap_segment()).empty());
  std::memcpy((*held)->data(), "top", 3);
  top->commit(3);
  EXPECT_EQ(drain(f), (std::pair<std::uint32_t, std::string>{3, "top"}));
}

// A ring with items and a clear bit (what a submitter killed between its
// ring commit and its bit leaves; here a push that bypasses the fanout): the
// next handle that opens the fanout sets the bit again.
TEST_F(PriorityFanoutTest, OpeningAHandleResurfacesARingWhoseBitIsClear) {
  auto f = make();
  auto bypass = MpmcProducer::open("jobs.prio1");
  ASSERT_TRUE(bypass);
  ASSERT_TRUE(*bypass->try_push(bytes("stranded")));
  EXPECT_EQ(drain(f), std::nullopt) << "bit 1 is clear: try_pop_highest skips the ring";
  auto next = FanoutConsumer::open("jobs", kParams);
  ASSERT_TRUE(next) << next.error().what();
  EXPECT_EQ(f.active_priorities(), 0b0010u);
  EXPECT_EQ(drain(*next), (std::pair<std::uint32_t, std::string>{1, "stranded"}));
}

// Pushes in flight on every ring (claimed, not yet published) keep their bits
// set: each clear is set back by the re-check. A call still tries each
// priority once and returns; the specification's 2K-attempt bound is never
// what stops it.
TEST_F(PriorityFanoutTest, EachPriorityIsTriedAtMostOncePerCall) {
  auto f = make();
  std::vector<MpmcProducer> pushers;
  std::vector<std::span<std::byte>> cells;
  for (std::uint32_t p = 0; p < kParams.priorities; ++p) {
    auto r = MpmcProducer::open("jobs.prio" + std::to_string(p));
    ASSERT_TRUE(r) << r.error().what();
    auto held = r->try_reserve();
    ASSERT_TRUE(held && *held);
    cells.push_back(**held);
    pushers.push_back(std::move(*r));
  }
  Raw raw = raw_bitmap();
  raw.ctl->hot.bitmap.store(0b1111);  // as if announced
  EXPECT_EQ(drain(f), std::nullopt);
  Node n;
  kFanoutBitmapDescriptor.describe(f.bitmap_segment(), n);
  EXPECT_EQ(u64(n, "stale_retries"), kParams.priorities) << "one attempt per priority, not 2K";
  EXPECT_EQ(f.active_priorities(), 0b1111u) << "every bit set back: a push is in flight";
  for (std::uint32_t p = 0; p < kParams.priorities; ++p) {
    std::memcpy(cells[p].data(), "z", 1);
    pushers[p].commit(1);
  }
  for (std::uint32_t p = kParams.priorities; p-- > 0;)
    EXPECT_EQ(drain(f), (std::pair<std::uint32_t, std::string>{p, "z"}));
}

// A handle is for one thread at a time: a second thread entering while the
// first is parked in pop_highest() is refused with an abort, in every build.
TEST_F(PriorityFanoutTest, SecondThreadOnABusyHandleAbortsInEveryBuild) {
  auto f = make();
  EXPECT_DEATH(
      {
        std::thread t([&f] {
          std::vector<std::byte> buf(48);
          (void)f.pop_highest(buf, 30s);
        });
        const auto deadline = std::chrono::steady_clock::now() + 30s;
        while (std::chrono::steady_clock::now() < deadline) {
          Node n;
          kFanoutBitmapDescriptor.describe(f.bitmap_segment(), n);
          if (u64(n, "drainers_waiting") == 1) break;
          std::this_thread::sleep_for(1ms);
        }
        (void)f.try_submit(1, bytes("x"));
        t.join();  // reached only if the guard let the second thread in
      },
      "a PriorityFanout handle is used by two threads at once");
}

// The handle types decide what a handle may do: a drain on a producer (and
// a submit on a consumer) does not compile; a peer does both.
template <class H>
concept Submits = requires(H& h, std::span<const std::byte> in) {
  h.try_submit(0, in);
};
template <class H>
concept Drains = requires(H& h, std::span<std::byte> out) {
  h.try_pop_highest(out);
  h.try_pop_priority(0, out);
};
static_assert(Submits<FanoutProducer> && !Drains<FanoutProducer>);
static_assert(Drains<FanoutConsumer> && !Submits<FanoutConsumer>);
static_assert(Submits<PriorityFanout> && Drains<PriorityFanout>);

TEST_F(PriorityFanoutTest, TypedHandlesAttachUnderTheirRoles) {
  auto peer = make();
  auto s = FanoutProducer::open("jobs", kParams);
  auto d = FanoutConsumer::open("jobs", kParams);
  ASSERT_TRUE(s && d) << (s ? d.error().what() : s.error().what());
  ASSERT_TRUE(*s->try_submit(3, bytes("typed")));
  EXPECT_EQ(drain(*d), (std::pair<std::uint32_t, std::string>{3, "typed"}));
  auto roles_of = [](const Segment& seg) {
    Node n;
    describe_header(seg, n);
    std::vector<std::string> roles;
    for (const Node& a : n.find("attachers")->elements())
      roles.push_back(std::get<std::string>(a.find("role")->value()));
    std::sort(roles.begin(), roles.end());
    return roles;
  };
  EXPECT_EQ(roles_of(peer.bitmap_segment()),
            (std::vector<std::string>{"drainer", "peer", "submitter"}));
  EXPECT_EQ(roles_of(peer.ring(3).segment()),
            (std::vector<std::string>{"consumer", "peer", "producer"}));
}

// Handing a handle from one thread to another (one at a time) is allowed.
TEST_F(PriorityFanoutTest, AHandleMayMoveBetweenThreadsOneAtATime) {
  auto f = make();
  std::thread t([&f] { ASSERT_TRUE(*f.try_submit(2, bytes("from t"))); });
  t.join();
  EXPECT_EQ(drain(f), (std::pair<std::uint32_t, std::string>{2, "from t"}));
}

TEST_F(PriorityFanoutTest, BlockingDrainWakesOnSubmitFromAnotherHandle) {
  auto drainer = make();
  auto submitter = FanoutProducer::open("jobs", kParams);
  ASSERT_TRUE(submitter);
  std::thread t([&] {
    // Bounded wait until the drainer is parked, then submit (the parks and
    // wakeups counters below fail the test if it never parked).
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (std::chrono::steady_clock::now() < deadline) {
      Node n;
      kFanoutBitmapDescriptor.describe(submitter->bitmap_segment(), n);
      if (u64(n, "drainers_waiting") == 1) break;
      std::this_thread::sleep_for(1ms);
    }
    ASSERT_TRUE(*submitter->try_submit(2, bytes("wake up")));
  });
  std::vector<std::byte> buf(48);
  auto d = drainer.pop_highest(buf, 30s);
  t.join();
  ASSERT_TRUE(d && *d) << (d ? "timed out" : d.error().what());
  EXPECT_EQ((*d)->priority, 2u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(buf.data()), (*d)->size), "wake up");
  Node n;
  kFanoutBitmapDescriptor.describe(drainer.bitmap_segment(), n);
  EXPECT_EQ(u64(n, "drainers_waiting"), 0u);
  EXPECT_GE(u64(n, "parks"), 1u);
  EXPECT_GE(u64(n, "wakeups"), 1u);
}

// 256 handles (kSharedSlots) on one fanout at once, every one submitting and
// draining; the 257th open gets NoFreeSlot.
TEST_F(PriorityFanoutTest, TwoHundredFiftySixHandlesSubmitAndDrainThe257thGetsNoFreeSlot) {
  constexpr FanoutParams kWide{.priorities = 2, .ring_cells = 256, .slot_bytes = 16};
  // Two descriptors per handle per segment (the bitmap and two rings).
  test::raise_open_files_limit(6 * kSharedSlots + 64);
  std::vector<PriorityFanout> handles;
  handles.push_back(make(kWide));
  while (handles.size() < kSharedSlots) {
    auto h = PriorityFanout::open("jobs", kWide);
    ASSERT_TRUE(h) << handles.size() << ": " << h.error().what();
    handles.push_back(std::move(*h));
  }
  auto extra = PriorityFanout::open("jobs", kWide);
  ASSERT_FALSE(extra);
  EXPECT_EQ(extra.error().code, Errc::NoFreeSlot);
  EXPECT_NE(extra.error().message.find("all 256 shared attachment slots"), std::string::npos)
      << extra.error().message;
  std::vector<std::pair<std::uint32_t, std::string>> expected, drained;
  for (std::size_t i = 0; i < handles.size(); ++i) {
    const auto prio = static_cast<std::uint32_t>(i % 2);
    ASSERT_TRUE(*handles[i].try_submit(prio, bytes("h" + std::to_string(i)))) << i;
  }
  for (std::uint32_t prio : {1u, 0u})  // highest first, FIFO within a priority
    for (std::size_t i = prio; i < handles.size(); i += 2)
      expected.emplace_back(prio, "h" + std::to_string(i));
  for (std::size_t i = handles.size(); i-- > 0;) {
    auto d = drain(handles[i]);
    ASSERT_TRUE(d) << "handle " << i;
    drained.push_back(*d);
  }
  EXPECT_EQ(drained, expected);
  EXPECT_EQ(drain(handles[0]), std::nullopt);
  EXPECT_EQ(kFanoutBitmapDescriptor.verify(handles[0].bitmap_segment()),
            std::vector<std::string>{});
  handles.pop_back();
  EXPECT_TRUE(PriorityFanout::open("jobs", kWide)) << "a closed handle frees its slots";
}

// Drainers parked on slots past the first 64-bit word of the waiter set (70,
// 140, 207) are woken by submits from a handle in the first word. A parked
// drain also re-checks every kMaxParkNs, so the items alone do not prove the
// wakes: the counter does (every submit finds a drainer still announced).
TEST_F(PriorityFanoutTest, DrainersParkedOnSlotsAbove64AreWokenBySubmits) {
  constexpr FanoutParams kWide{.priorities = 2, .ring_cells = 16, .slot_bytes = 16};
  test::raise_open_files_limit(6 * kSharedSlots + 64);
  std::vector<PriorityFanout> handles;
  handles.push_back(make(kWide));
  while (handles.size() < 200) {
    auto h = PriorityFanout::open("jobs", kWide);
    ASSERT_TRUE(h) << h.error().what();
    handles.push_back(std::move(*h));
  }
  ASSERT_EQ(handles[0].attachment().slot(), kExclusiveSlots);
  std::vector<PriorityFanout*> sleepers;
  for (PriorityFanout& h : handles)
    if (const std::size_t s = h.attachment().slot(); s == 70 || s == 140 || s == 207)
      sleepers.push_back(&h);
  ASSERT_EQ(sleepers.size(), 3u);
  std::vector<std::string> got(sleepers.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < sleepers.size(); ++i)
    threads.emplace_back([&, i] {
      std::vector<std::byte> buf(16);
      auto d = sleepers[i]->pop_highest(buf, 30s);
      ASSERT_TRUE(d && *d);
      got[i] = std::string(reinterpret_cast<const char*>(buf.data()), (*d)->size);
    });
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  for (;;) {
    Node n;
    kFanoutBitmapDescriptor.describe(handles[0].bitmap_segment(), n);
    if (u64(n, "drainers_waiting") == 3) break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the drainers never parked";
    std::this_thread::sleep_for(1ms);
  }
  for (const char* item : {"a", "b", "c"}) ASSERT_TRUE(*handles[0].try_submit(1, bytes(item)));
  for (auto& t : threads) t.join();
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::string>{"a", "b", "c"}));
  Node n;
  kFanoutBitmapDescriptor.describe(handles[0].bitmap_segment(), n);
  EXPECT_GE(u64(n, "wakeups"), 3u) << "a submit did not see a drainer parked on a high slot";
  EXPECT_EQ(u64(n, "drainers_waiting"), 0u);
  auto raw = raw_bitmap();
  EXPECT_EQ(raw.ctl->hot.waiters.count.load(), 0u) << "the count went back to 0";
}

TEST_F(PriorityFanoutTest, BlockingDrainTimesOutWhenIdle) {
  auto f = make();
  std::vector<std::byte> buf(48);
  auto d = f.pop_highest(buf, 20ms);
  ASSERT_TRUE(d);
  EXPECT_FALSE(*d);
  auto p = f.pop_priority(1, buf, 5ms);
  ASSERT_TRUE(p);
  EXPECT_FALSE(*p);
}

TEST_F(PriorityFanoutTest, DescribeShowsBitmapAsBitsAndListWithPerPriorityDepth) {
  auto f = make();
  ASSERT_TRUE(*f.try_submit(3, bytes("a")));
  ASSERT_TRUE(*f.try_submit(1, bytes("b")));
  ASSERT_TRUE(*f.try_submit(1, bytes("c")));
  Node n;
  describe_header(f.bitmap_segment(), n);
  kFanoutBitmapDescriptor.describe(f.bitmap_segment(), n);
  EXPECT_EQ(std::get<std::string>(n.find("kind")->value()), "fanout_bitmap");
  EXPECT_EQ(std::get<std::string>(n.find("bitmap")->value()), "0b1010");
  std::vector<std::uint64_t> active;
  for (const Node& e : n.find("active")->elements())
    active.push_back(std::get<std::uint64_t>(e.value()));
  EXPECT_EQ(active, (std::vector<std::uint64_t>{3, 1}));
  EXPECT_EQ(u64(n, "depth_total"), 3u);
  const auto& rings = n.find("rings")->elements();
  ASSERT_EQ(rings.size(), 4u);
  EXPECT_EQ(u64(rings[0], "priority"), 3u);  // highest first
  EXPECT_EQ(u64(rings[2], "priority"), 1u);
  EXPECT_EQ(u64(rings[2], "depth"), 2u);
  EXPECT_EQ(rings[2].find("depth")->metric(), Node::Metric::Gauge);
  EXPECT_EQ(u64(rings[2], "capacity"), 16u);
  EXPECT_EQ(u64(rings[2], "submitted"), 2u);
  EXPECT_EQ(rings[2].find("submitted")->metric(), Node::Metric::Counter);
  EXPECT_EQ(u64(rings[2], "drained"), 0u);
}

TEST_F(PriorityFanoutTest, VerifyReportsBitsAboveKAndStrandedItems) {
  auto f = make();
  EXPECT_TRUE(kFanoutBitmapDescriptor.verify(f.bitmap_segment()).empty());
  ASSERT_TRUE(*f.try_submit(2, bytes("x")));
  Raw raw = raw_bitmap();
  raw.ctl->hot.bitmap.store(1u << 6);  // priority 2's bit lost, a bit beyond K set
  const auto bad = kFanoutBitmapDescriptor.verify(raw.seg);
  ASSERT_EQ(bad.size(), 2u);
  EXPECT_NE(bad[0].find("bits set above priority 3"), std::string::npos) << bad[0];
  EXPECT_NE(bad[1].find("priority 2: ring holds 1 item(s) but its bitmap bit is clear"),
            std::string::npos)
      << bad[1];
  std::vector<std::byte> buf(48);
  auto d = f.try_pop_highest(buf);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, Errc::Corrupt);
  EXPECT_NE(d.error().message.find("has a bit set above priority 3"), std::string::npos)
      << d.error().message;
}

// Move-assigning over a live fanout detaches from its bitmap while the old
// mapping is still there (a defaulted operator= unmapped first: SIGSEGV in
// the detach), and frees the bitmap's and the rings' slots.
TEST_F(PriorityFanoutTest, MoveAssignOverALiveFanoutDetachesBeforeUnmapping) {
  PriorityFanout jobs = make();
  auto other = PriorityFanout::create("other", kParams);
  ASSERT_TRUE(other) << other.error().what();
  auto bitmap = Segment::open_any("jobs.bitmap", {});
  ASSERT_TRUE(bitmap) << bitmap.error().what();
  ASSERT_EQ(bitmap->slots().size(), 1u);

  jobs = std::move(*other);

  EXPECT_TRUE(bitmap->slots().empty()) << "the old bitmap slot is still held";
  ASSERT_TRUE(*jobs.try_submit(2, bytes("moved")));
  auto got = drain(jobs);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->second, "moved");
  EXPECT_TRUE(PriorityFanout::open("jobs", kParams)) << "the freed slots are reattachable";
}

}  // namespace
}  // namespace shm
