#include "shm/mpmc/mpmc_ring.hpp"
#include "common/node_fields.hpp"
#include "common/open_files.hpp"
#include "common/scale.hpp"
#include "common/temp_root.hpp"
#include "common/text.hpp"
#include "shm/segment/kind.hpp"
#include "shm/spsc/layout.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace shm {
namespace {

using namespace std::chrono_literals;

using test::bytes;
using test::str;

const Node* find(const Node& n, std::string_view key) {
  return n.find(key);
}
using test::u64;

// Waits (up to a generous deadline) until `gauge` (consumers_waiting or
// producers_waiting) shows a parked handle, so what follows must wake it: a
// test that acted before the park would pass without exercising the wake.
bool wait_until_waiting(const Segment& seg, std::string_view gauge) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < deadline) {
    Node n;
    kMpmcRingDescriptor.describe(seg, n);
    if (u64(n, gauge) == 1) return true;
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

class MpmcRingTest : public ::testing::Test {
 protected:
  // A second, raw mapping of the ring: what a buggy or hostile process could write.
  struct Raw {
    Segment seg;
    mpmc::View v;
  };
  Raw raw(const std::string& name) {
    auto seg = open_mpmc_ring(name);
    EXPECT_TRUE(seg) << seg.error().what();
    auto v = mpmc::view(*seg);
    EXPECT_TRUE(v.has_value());
    return Raw{std::move(*seg), *v};
  }
  // R: MpmcRing or MpmcConsumer.
  template <class R>
  std::optional<std::string> pop_str(R& r) {
    std::vector<std::byte> buf(r.slot_bytes());
    auto got = r.try_pop(buf);
    EXPECT_TRUE(got) << got.error().what();
    if (!got || !*got) return std::nullopt;
    return std::string(reinterpret_cast<const char*>(buf.data()), **got);
  }

  test::TempRoot root_;
};

TEST_F(MpmcRingTest, PushThenPopReturnsItemsInFifoOrder) {
  auto r = MpmcRing::create("r", {.ring_cells = 16, .slot_bytes = 48});
  ASSERT_TRUE(r) << r.error().what();
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(*r->try_push(bytes("item" + std::to_string(i))));
  for (int i = 0; i < 10; ++i) EXPECT_EQ(pop_str(*r), "item" + std::to_string(i));
  EXPECT_EQ(pop_str(*r), std::nullopt);
}

TEST_F(MpmcRingTest, EmptyItemsAreDelivered) {
  auto r = MpmcRing::create("r", {.ring_cells = 4, .slot_bytes = 8});
  ASSERT_TRUE(r);
  ASSERT_TRUE(*r->try_push({}));
  std::vector<std::byte> buf(8);
  auto got = r->try_pop(buf);
  ASSERT_TRUE(got && *got);
  EXPECT_EQ(**got, 0u);
}

TEST_F(MpmcRingTest, FullRingRefusesPushUntilAnItemIsPopped) {
  auto r = MpmcRing::create("r", {.ring_cells = 8, .slot_bytes = 16});
  ASSERT_TRUE(r);
  for (int lap = 0; lap < 3; ++lap) {
    for (int i = 0; i < 8; ++i) ASSERT_TRUE(*r->try_push(bytes("x" + std::to_string(i))));
    auto full = r->try_push(bytes("one too many"));
    ASSERT_TRUE(full) << full.error().what();  // back-pressure is not an error
    EXPECT_FALSE(*full);
    EXPECT_EQ(pop_str(*r), "x0");
    EXPECT_TRUE(*r->try_push(bytes("x8")));
    EXPECT_FALSE(*r->try_push(bytes("x9")));
    for (int i = 1; i <= 8; ++i) EXPECT_EQ(pop_str(*r), "x" + std::to_string(i));
    EXPECT_EQ(pop_str(*r), std::nullopt);
  }
}

TEST_F(MpmcRingTest, PayloadLargerThanSlotIsTooLargeNamingBothSizes) {
  auto r = MpmcRing::create("r", {.ring_cells = 4, .slot_bytes = 48});
  ASSERT_TRUE(r);
  const std::string big(49, 'x');
  auto p = r->try_push(bytes(big));
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().code, Errc::TooLarge);
  EXPECT_NE(p.error().message.find("49"), std::string::npos) << p.error().message;
  EXPECT_NE(p.error().message.find("48"), std::string::npos) << p.error().message;
  auto blocking = r->push(bytes(big), 1ms);
  ASSERT_FALSE(blocking);
  EXPECT_EQ(blocking.error().code, Errc::TooLarge);
}

TEST_F(MpmcRingTest, ItemLargerThanBufferIsTooLargeAndStaysInRing) {
  auto r = MpmcRing::create("r", {.ring_cells = 4, .slot_bytes = 48});
  ASSERT_TRUE(r);
  ASSERT_TRUE(*r->try_push(bytes("twelve bytes")));
  std::vector<std::byte> small(4);
  auto got = r->try_pop(small);
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code, Errc::TooLarge);
  EXPECT_NE(got.error().message.find("12"), std::string::npos) << got.error().message;
  EXPECT_EQ(pop_str(*r), "twelve bytes");
}

TEST_F(MpmcRingTest, CreateRejectsInvalidParameters) {
  for (const MpmcParams& p :
       {MpmcParams{3, 8}, MpmcParams{1, 8}, MpmcParams{0, 8}, MpmcParams{8, 0},
        MpmcParams{8, mpmc::kMaxSlotSize + 1}, MpmcParams{mpmc::kMaxCapacity * 2, 8}}) {
    auto r = MpmcRing::create("bad", p);
    ASSERT_FALSE(r) << p.ring_cells << "/" << p.slot_bytes;
    EXPECT_EQ(r.error().code, Errc::InvalidArgument);
  }
  auto r = MpmcRing::create("bad", {.ring_cells = 6, .slot_bytes = 8});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("capacity 6 must be a power of two"), std::string::npos)
      << r.error().message;
}

TEST_F(MpmcRingTest, OpenWithDifferentCapacityIsParamMismatchNamingBothValues) {
  auto r = MpmcRing::create("r", {.ring_cells = 64, .slot_bytes = 48});
  ASSERT_TRUE(r);
  auto o = MpmcRing::open("r", {.ring_cells = 128, .slot_bytes = 48});
  ASSERT_FALSE(o);
  EXPECT_EQ(o.error().code, Errc::ParamMismatch);
  EXPECT_NE(o.error().message.find("ring_cells: segment has 64, caller expects 128"),
            std::string::npos)
      << o.error().message;
  auto s = MpmcRing::open("r", {.ring_cells = 64, .slot_bytes = 32});
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, Errc::ParamMismatch);
  EXPECT_NE(s.error().message.find("slot_bytes: segment has 48, caller expects 32"),
            std::string::npos)
      << s.error().message;
  EXPECT_TRUE(MpmcRing::open("r")) << "zero fields accept any geometry";
}

TEST_F(MpmcRingTest, OpeningAnotherKindIsKindMismatch) {
  ASSERT_TRUE(create_ring("spsc", {.capacity_bytes = 1024}));
  auto o = MpmcRing::open("spsc");
  ASSERT_FALSE(o);
  EXPECT_EQ(o.error().code, Errc::KindMismatch);
  EXPECT_NE(o.error().message.find("mpmc_ring"), std::string::npos) << o.error().message;
  EXPECT_NE(o.error().message.find("segment has spsc_ring (1)"), std::string::npos)
      << "the found kind by its name: " << o.error().message;
}

TEST_F(MpmcRingTest, ZeroCopyReserveCommitAndPeekRelease) {
  auto r = MpmcRing::create("r", {.ring_cells = 4, .slot_bytes = 32});
  ASSERT_TRUE(r);
  auto w = r->try_reserve();
  ASSERT_TRUE(w && *w);
  EXPECT_EQ((*w)->size(), 32u);
  std::memcpy((*w)->data(), "hello", 5);
  {
    std::vector<std::byte> buf(32);
    auto none = r->try_pop(buf);  // reserved but not committed: invisible
    ASSERT_TRUE(none);
    EXPECT_FALSE(*none);
  }
  r->commit(5);
  auto p = r->try_peek();
  ASSERT_TRUE(p && *p);
  EXPECT_EQ(str(**p), "hello");
  r->release();
  EXPECT_EQ(pop_str(*r), std::nullopt);
}

TEST_F(MpmcRingTest, CancelledReservationIsSkippedByConsumers) {
  auto r = MpmcRing::create("r", {.ring_cells = 4, .slot_bytes = 32});
  auto other = MpmcRing::open("r");
  ASSERT_TRUE(r && other);
  auto w = r->try_reserve();
  ASSERT_TRUE(w && *w);
  ASSERT_TRUE(*other->try_push(bytes("after")));
  r->cancel();
  EXPECT_EQ(pop_str(*r), "after");
  EXPECT_EQ(pop_str(*r), std::nullopt);
  Node n;
  kMpmcRingDescriptor.describe(r->segment(), n);
  EXPECT_EQ(u64(n, "cancelled_pushes"), 1u);
  EXPECT_EQ(u64(n, "tombstones_skipped"), 1u);
}

TEST_F(MpmcRingTest, ConsumerReportsImpossibleSequenceInsteadOfSpinning) {
  auto r = MpmcRing::create("r", {.ring_cells = 8, .slot_bytes = 16});
  ASSERT_TRUE(r);
  Raw w = raw("r");
  // Not congruent to the cell index at all.
  w.v.cell(0).seq.store(5, std::memory_order_relaxed);
  std::vector<std::byte> buf(16);
  auto got = r->try_pop(buf);
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code, Errc::Corrupt);
  EXPECT_NE(got.error().message.find("cell 0 (position 0): sequence 0x5 is impossible"),
            std::string::npos)
      << got.error().message;
  // Congruent but ahead of a head that does not move: a naive popper would
  // reload head forever.
  w.v.cell(0).seq.store(8 * 1000, std::memory_order_relaxed);
  got = r->try_pop(buf);
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code, Errc::Corrupt);
  EXPECT_NE(got.error().message.find("while head is 0"), std::string::npos) << got.error().message;
  // The blocking variant reports it too instead of waiting.
  auto blocking = r->pop(buf, 10s);
  ASSERT_FALSE(blocking);
  EXPECT_EQ(blocking.error().code, Errc::Corrupt);
}

TEST_F(MpmcRingTest, ProducerReportsImpossibleSequenceInsteadOfSpinning) {
  auto r = MpmcRing::create("r", {.ring_cells = 8, .slot_bytes = 16});
  ASSERT_TRUE(r);
  Raw w = raw("r");
  w.v.cell(0).seq.store(3, std::memory_order_relaxed);
  auto p = r->try_push(bytes("x"));
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().code, Errc::Corrupt);
  w.v.cell(0).seq.store(8 * 7 + 1, std::memory_order_relaxed);  // "published" far ahead
  p = r->try_push(bytes("x"));
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().code, Errc::Corrupt);
  EXPECT_NE(p.error().message.find("while tail is 0"), std::string::npos) << p.error().message;
}

TEST_F(MpmcRingTest, CorruptPayloadLengthIsReportedAndNotCopied) {
  auto r = MpmcRing::create("r", {.ring_cells = 8, .slot_bytes = 16});
  ASSERT_TRUE(r);
  ASSERT_TRUE(*r->try_push(bytes("ok")));
  Raw w = raw("r");
  w.v.cell(0).length.store(1u << 30, std::memory_order_relaxed);
  std::vector<std::byte> buf(1 << 12);
  auto got = r->try_pop(buf);
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code, Errc::Corrupt);
  EXPECT_NE(got.error().message.find("payload length 1073741824 exceeds the slot size 16"),
            std::string::npos)
      << got.error().message;
  const auto bad = kMpmcRingDescriptor.verify(w.seg);
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_NE(bad[0].find("payload length 1073741824"), std::string::npos) << bad[0];
}

TEST_F(MpmcRingTest, ImpossiblePositionsAreReportedByVerify) {
  auto r = MpmcRing::create("r", {.ring_cells = 8, .slot_bytes = 16});
  ASSERT_TRUE(r);
  Raw w = raw("r");
  EXPECT_TRUE(kMpmcRingDescriptor.verify(w.seg).empty());
  w.v.control->producer.tail.store(100, std::memory_order_relaxed);
  const auto bad = kMpmcRingDescriptor.verify(w.seg);
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_NE(bad[0].find("head 0 and tail 100 are impossible for capacity 8"), std::string::npos)
      << bad[0];
  // And a producer at that tail reports Corrupt instead of looping.
  auto p = r->try_push(bytes("x"));
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().code, Errc::Corrupt);
}

TEST_F(MpmcRingTest, DeadProducersHeldCellIsRepairedAndConsumersMoveOn) {
  auto r = MpmcRing::create("r", {.ring_cells = 8, .slot_bytes = 16});
  ASSERT_TRUE(r);
  Raw w = raw("r");
  // Simulate a handle in (free, i.e. dead) slot 20 that claimed position 0 and
  // died before publishing it.
  w.v.control->intents[20].push.store(1, std::memory_order_relaxed);
  w.v.control->producer.tail.store(1, std::memory_order_relaxed);
  ASSERT_TRUE(*r->try_push(bytes("behind")));
  const auto bad = kMpmcRingDescriptor.verify(w.seg);
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_NE(bad[0].find("cell 0 (position 0) was claimed by slot 20"), std::string::npos) << bad[0];
  EXPECT_NE(bad[0].find("died before publishing"), std::string::npos) << bad[0];
  // try_pop never spins on it: nullopt while it is held...
  EXPECT_EQ(pop_str(*r), std::nullopt);
  // ...and once it stayed held past the grace period, the next attempt repairs it.
  std::vector<std::byte> buf(16);
  auto got = r->pop(buf, 5s);
  ASSERT_TRUE(got && *got) << (got ? "timed out" : got.error().what());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(buf.data()), **got), "behind");
  EXPECT_TRUE(kMpmcRingDescriptor.verify(w.seg).empty());
  Node n;
  kMpmcRingDescriptor.describe(w.seg, n);
  EXPECT_EQ(u64(n, "abandoned_pushes"), 1u);
  EXPECT_EQ(u64(n, "tombstones_skipped"), 1u);
}

TEST_F(MpmcRingTest, DeadConsumersHeldCellIsReleasedAndProducersMoveOn) {
  auto r = MpmcRing::create("r", {.ring_cells = 4, .slot_bytes = 16});
  ASSERT_TRUE(r);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(*r->try_push(bytes("i" + std::to_string(i))));
  Raw w = raw("r");
  // A consumer in dead slot 21 popped position 0 and died before releasing it.
  w.v.control->intents[21].pop.store(1, std::memory_order_relaxed);
  w.v.control->consumer.head.store(1, std::memory_order_relaxed);
  for (int i = 1; i < 4; ++i) EXPECT_EQ(pop_str(*r), "i" + std::to_string(i));
  const auto bad = kMpmcRingDescriptor.verify(w.seg);
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_NE(bad[0].find("popped by slot 21"), std::string::npos) << bad[0];
  EXPECT_NE(bad[0].find("its item is lost"), std::string::npos) << bad[0];
  EXPECT_FALSE(*r->try_push(bytes("i4")));  // cell 0 is still held: full
  auto pushed = r->push(bytes("i4"), 5s);
  ASSERT_TRUE(pushed && *pushed);
  EXPECT_EQ(pop_str(*r), "i4");
  Node n;
  kMpmcRingDescriptor.describe(w.seg, n);
  EXPECT_EQ(u64(n, "lost_pops"), 1u);
  EXPECT_TRUE(kMpmcRingDescriptor.verify(w.seg).empty());
}

TEST_F(MpmcRingTest, CellHeldByALiveHandleIsNeverRepaired) {
  auto r = MpmcRing::create("r", {.ring_cells = 4, .slot_bytes = 16});
  auto holder = MpmcRing::open("r");
  ASSERT_TRUE(r && holder);
  auto w = holder->try_reserve();
  ASSERT_TRUE(w && *w);
  ASSERT_TRUE(*r->try_push(bytes("behind")));
  std::vector<std::byte> buf(16);
  auto got = r->pop(buf, 20ms);  // times out: the holder is alive
  ASSERT_TRUE(got);
  EXPECT_FALSE(*got);
  const auto report = r->repair();
  EXPECT_EQ(report.repaired_pushes, 0u);
  EXPECT_EQ(report.held_by_live, 1u);
  EXPECT_TRUE(kMpmcRingDescriptor.verify(r->segment()).empty()) << "in flight is healthy";
  std::memcpy((*w)->data(), "first", 5);
  holder->commit(5);
  EXPECT_EQ(pop_str(*r), "first");
  EXPECT_EQ(pop_str(*r), "behind");
}

TEST_F(MpmcRingTest, OpeningAHandleRepairsWhatDeadHandlesLeft) {
  auto r = MpmcRing::create("r", {.ring_cells = 8, .slot_bytes = 16});
  ASSERT_TRUE(r);
  Raw w = raw("r");
  w.v.control->intents[22].push.store(1, std::memory_order_relaxed);
  w.v.control->producer.tail.store(1, std::memory_order_relaxed);
  ASSERT_TRUE(*r->try_push(bytes("behind")));
  auto fresh = MpmcRing::open("r");
  ASSERT_TRUE(fresh);
  EXPECT_EQ(pop_str(*fresh), "behind");  // no grace period needed
}

TEST_F(MpmcRingTest, ManyThreadsDeliverEveryItemExactlyOnce) {
  constexpr int kProducers = 4, kConsumers = 4;
  const std::uint64_t per_producer = test::scaled(50'000);
  auto r = MpmcRing::create("r", {.ring_cells = 256, .slot_bytes = 16});
  ASSERT_TRUE(r);
  std::vector<std::atomic<std::uint8_t>> seen(kProducers * per_producer);
  std::atomic<std::uint64_t> delivered{0};
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  for (int p = 0; p < kProducers; ++p)
    threads.emplace_back([&, p] {
      auto h = MpmcProducer::open("r");
      if (!h) return failed.store(true);
      for (std::uint64_t i = 0; i < per_producer; ++i) {
        const std::uint64_t item[2] = {static_cast<std::uint64_t>(p), i};
        auto ok = h->push(std::as_bytes(std::span(item)), 10s);
        if (!ok || !*ok) return failed.store(true);
      }
    });
  for (int c = 0; c < kConsumers; ++c)
    threads.emplace_back([&] {
      auto h = MpmcConsumer::open("r");
      if (!h) return failed.store(true);
      std::uint64_t item[2];
      while (delivered.load() < kProducers * per_producer && !failed.load()) {
        auto got = h->pop(std::as_writable_bytes(std::span(item)), 20ms);
        if (!got) return failed.store(true);
        if (!*got) continue;
        if (**got != sizeof item || item[0] >= kProducers || item[1] >= per_producer)
          return failed.store(true);
        seen[item[0] * per_producer + item[1]].fetch_add(1);
        delivered.fetch_add(1);
      }
    });
  for (auto& t : threads) t.join();
  ASSERT_FALSE(failed.load());
  EXPECT_EQ(delivered.load(), kProducers * per_producer);
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](auto& s) { return s.load() == 1; }));
  EXPECT_TRUE(kMpmcRingDescriptor.verify(r->segment()).empty());
}

TEST_F(MpmcRingTest, BlockingPopWakesWhenAnotherThreadPushes) {
  auto c = MpmcRing::create("r", {.ring_cells = 8, .slot_bytes = 16});
  auto p = MpmcRing::open("r");
  ASSERT_TRUE(c && p);
  std::thread t([&] {
    EXPECT_TRUE(wait_until_waiting(p->segment(), "consumers_waiting")) << "never parked";
    ASSERT_TRUE(*p->try_push(bytes("late")));
  });
  std::vector<std::byte> buf(16);
  auto got = c->pop(buf, 30s);
  t.join();
  ASSERT_TRUE(got && *got);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(buf.data()), **got), "late");
  // A parked pop also re-checks every kMaxParkNs, so the outcome alone does
  // not prove the wake: the counter does.
  Node n;
  kMpmcRingDescriptor.describe(p->segment(), n);
  EXPECT_GE(u64(n, "wakeups"), 1u) << "the push issued no wake";
}

TEST_F(MpmcRingTest, BlockingPopTimesOutOnAnEmptyRing) {
  auto r = MpmcRing::create("r", {.ring_cells = 8, .slot_bytes = 16});
  ASSERT_TRUE(r);
  std::vector<std::byte> buf(16);
  auto got = r->pop(buf, 20ms);
  ASSERT_TRUE(got);
  EXPECT_FALSE(*got);
  Node n;
  kMpmcRingDescriptor.describe(r->segment(), n);
  EXPECT_EQ(u64(n, "consumers_waiting"), 0u) << "the waiter bit is cleared on return";
}

TEST_F(MpmcRingTest, BlockingPushWakesWhenAConsumerFreesACell) {
  auto p = MpmcRing::create("r", {.ring_cells = 2, .slot_bytes = 16});
  auto c = MpmcRing::open("r");
  ASSERT_TRUE(p && c);
  ASSERT_TRUE(*p->try_push(bytes("a")));
  ASSERT_TRUE(*p->try_push(bytes("b")));
  std::thread t([&] {
    EXPECT_TRUE(wait_until_waiting(c->segment(), "producers_waiting")) << "never parked";
    EXPECT_EQ(pop_str(*c), "a");
  });
  auto ok = p->push(bytes("c"), 30s);
  t.join();
  ASSERT_TRUE(ok && *ok);
  Node n;
  kMpmcRingDescriptor.describe(p->segment(), n);
  EXPECT_GE(u64(n, "wakeups"), 1u) << "the pop issued no wake";
  auto timed_out = p->push(bytes("d"), 10ms);
  ASSERT_TRUE(timed_out);
  EXPECT_FALSE(*timed_out);
}

TEST_F(MpmcRingTest, ParkedConsumerIsVisibleAndWokenOnlyThen) {
  auto c = MpmcRing::create("r", {.ring_cells = 8, .slot_bytes = 16});
  auto p = MpmcRing::open("r");
  ASSERT_TRUE(c && p);
  // Nobody waits: pushes and pops issue no wake.
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(*p->try_push(bytes("x")));
    ASSERT_TRUE(pop_str(*c));
  }
  Node before;
  kMpmcRingDescriptor.describe(c->segment(), before);
  EXPECT_EQ(u64(before, "wakeups"), 0u);
  std::atomic<bool> done{false};
  std::thread t([&] {
    std::vector<std::byte> buf(16);
    auto got = c->pop(buf, 30s);
    EXPECT_TRUE(got && *got);
    done = true;
  });
  // Wait (bounded) until the consumer has announced itself.
  EXPECT_TRUE(wait_until_waiting(p->segment(), "consumers_waiting"));
  Node parked;
  kMpmcRingDescriptor.describe(p->segment(), parked);
  EXPECT_EQ(u64(parked, "consumers_waiting"), 1u);
  ASSERT_TRUE(*p->try_push(bytes("wake")));
  t.join();
  EXPECT_TRUE(done);
  Node after;
  kMpmcRingDescriptor.describe(p->segment(), after);
  EXPECT_GE(u64(after, "wakeups"), 1u);
}

// The handle types decide what a handle may do: a consumer call on a
// producer (and the reverse) does not compile; a peer does both.
template <class H>
concept Pushes = requires(H& h, std::span<const std::byte> in) {
  h.try_push(in);
  h.try_reserve();
};
template <class H>
concept Pops = requires(H& h, std::span<std::byte> out) {
  h.try_pop(out);
  h.try_peek();
};
static_assert(Pushes<MpmcProducer> && !Pops<MpmcProducer>);
static_assert(Pops<MpmcConsumer> && !Pushes<MpmcConsumer>);
static_assert(Pushes<MpmcRing> && Pops<MpmcRing>);
static_assert(!std::is_convertible_v<MpmcProducer&, MpmcRing&> &&
              !std::is_convertible_v<MpmcConsumer&, MpmcRing&>);

TEST_F(MpmcRingTest, TypedHandlesAttachUnderTheirRole) {
  auto peer = MpmcRing::create("r", {.ring_cells = 8, .slot_bytes = 16});
  auto p = MpmcProducer::open("r");
  auto c = MpmcConsumer::open("r");
  ASSERT_TRUE(peer && p && c);
  ASSERT_TRUE(*p->try_push(bytes("typed")));
  EXPECT_EQ(pop_str(*c), "typed");
  Node n;
  describe_header(peer->segment(), n);
  std::vector<std::string> roles;
  for (const Node& a : find(n, "attachers")->elements())
    roles.push_back(std::get<std::string>(a.find("role")->value()));
  std::sort(roles.begin(), roles.end());
  EXPECT_EQ(roles, (std::vector<std::string>{"consumer", "peer", "producer"}));
}

// A handle is for one thread at a time: a second thread entering while the
// first is parked in pop() (or push()) is refused with an abort, in every build.
TEST_F(MpmcRingTest, SecondThreadOnABusyHandleAbortsInEveryBuild) {
  constexpr const char* kBusy = "an MpmcRing handle is used by two threads at once";
  auto r = MpmcRing::create("r", {.ring_cells = 2, .slot_bytes = 16});
  ASSERT_TRUE(r);
  EXPECT_DEATH(
      {
        std::thread t([&r] {
          std::vector<std::byte> buf(16);
          (void)r->pop(buf, 30s);
        });
        if (wait_until_waiting(r->segment(), "consumers_waiting")) (void)r->try_push(bytes("x"));
        t.join();  // reached only if the guard let the second thread in
      },
      kBusy);
  auto p = MpmcProducer::open("r");
  ASSERT_TRUE(p);
  ASSERT_TRUE(*p->try_push(bytes("a")));
  ASSERT_TRUE(*p->try_push(bytes("b")));  // full: the next push parks
  EXPECT_DEATH(
      {
        std::thread t([&p] { (void)p->push(bytes("c"), 30s); });
        if (wait_until_waiting(p->segment(), "producers_waiting")) {
          auto w = p->try_reserve();
          (void)w;
        }
        t.join();
      },
      kBusy);
}

// Handing a handle from one thread to another (one at a time) is allowed,
// zero-copy calls included (each call holds the guard only while it runs).
TEST_F(MpmcRingTest, AHandleMayMoveBetweenThreadsOneAtATime) {
  auto r = MpmcRing::create("r", {.ring_cells = 8, .slot_bytes = 16});
  ASSERT_TRUE(r);
  std::thread t([&r] {
    auto w = r->try_reserve();
    ASSERT_TRUE(w && *w);
    std::memcpy((*w)->data(), "hop", 3);
  });
  t.join();
  r->commit(3);
  EXPECT_EQ(pop_str(*r), "hop");
}

// The limit is 256 handles per ring (kSharedSlots), and every one of them works.
TEST_F(MpmcRingTest, TwoHundredFiftySixHandlesPushAndPopThe257thGetsNoFreeSlot) {
  test::raise_open_files_limit(4 * kSharedSlots + 64);  // two descriptors per handle
  std::vector<MpmcRing> handles;
  auto first = MpmcRing::create("r", {.ring_cells = 512, .slot_bytes = 8});
  ASSERT_TRUE(first) << first.error().what();
  handles.push_back(std::move(*first));
  while (handles.size() < kSharedSlots) {
    auto h = MpmcRing::open("r");
    ASSERT_TRUE(h) << handles.size() << ": " << h.error().what();
    handles.push_back(std::move(*h));
  }
  EXPECT_EQ(handles.size(), 256u);
  auto extra = MpmcRing::open("r");
  ASSERT_FALSE(extra);
  EXPECT_EQ(extra.error().code, Errc::NoFreeSlot);
  EXPECT_NE(extra.error().message.find("all 256 shared attachment slots"), std::string::npos)
      << extra.error().message;
  // Every handle pushes one item; every handle, in the other order, pops one.
  std::vector<std::string> pushed, popped;
  for (std::size_t i = 0; i < handles.size(); ++i) {
    pushed.push_back("h" + std::to_string(i));
    auto ok = handles[i].try_push(bytes(pushed.back()));
    ASSERT_TRUE(ok && *ok) << "handle " << i;
  }
  for (std::size_t i = handles.size(); i-- > 0;) {
    auto got = pop_str(handles[i]);
    ASSERT_TRUE(got) << "handle " << i;
    popped.push_back(*got);
  }
  EXPECT_EQ(popped, pushed) << "FIFO across all 256 handles";
  EXPECT_EQ(pop_str(handles[0]), std::nullopt);
  EXPECT_TRUE(kMpmcRingDescriptor.verify(handles[0].segment()).empty());
  handles.pop_back();
  EXPECT_TRUE(MpmcRing::open("r")) << "a closed handle frees its slot";
}

// Consumers parked on slots past the first 64-bit word of the waiter set are
// woken by a push from a handle in the first word: the counter proves the wake
// (a missed one would still be found by the kMaxParkNs re-check).
TEST_F(MpmcRingTest, ConsumersParkedOnSlotsAbove64AreWokenByPushes) {
  test::raise_open_files_limit(4 * kSharedSlots + 64);
  std::vector<MpmcRing> handles;
  auto first = MpmcRing::create("r", {.ring_cells = 8, .slot_bytes = 16});
  ASSERT_TRUE(first) << first.error().what();
  handles.push_back(std::move(*first));
  while (handles.size() < 200) {
    auto h = MpmcRing::open("r");
    ASSERT_TRUE(h) << h.error().what();
    handles.push_back(std::move(*h));
  }
  std::vector<MpmcRing*> sleepers;
  for (MpmcRing& h : handles)
    if (const std::size_t s = h.attachment().slot(); s == 70 || s == 140 || s == 207)
      sleepers.push_back(&h);
  ASSERT_EQ(sleepers.size(), 3u);
  ASSERT_EQ(handles[0].attachment().slot(), kExclusiveSlots);
  std::vector<std::string> got(sleepers.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < sleepers.size(); ++i)
    threads.emplace_back([&, i] {
      std::vector<std::byte> buf(16);
      auto r = sleepers[i]->pop(buf, 30s);
      ASSERT_TRUE(r && *r);
      got[i] = std::string(reinterpret_cast<const char*>(buf.data()), **r);
    });
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  for (;;) {
    Node n;
    kMpmcRingDescriptor.describe(handles[0].segment(), n);
    if (u64(n, "consumers_waiting") == 3) break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the consumers never parked";
    std::this_thread::sleep_for(1ms);
  }
  for (const char* item : {"a", "b", "c"}) ASSERT_TRUE(*handles[0].try_push(bytes(item)));
  for (auto& t : threads) t.join();
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::string>{"a", "b", "c"}));
  Node n;
  kMpmcRingDescriptor.describe(handles[0].segment(), n);
  EXPECT_GE(u64(n, "wakeups"), 3u) << "a push did not see a consumer parked on a high slot";
  EXPECT_EQ(u64(n, "consumers_waiting"), 0u);
  const auto v = mpmc::view(handles[0].segment());
  ASSERT_TRUE(v);
  EXPECT_EQ(v->control->waiters.consumers_waiting.count.load(), 0u) << "the count went back to 0";
}

// ParkedSet bookkeeping: the count follows the bits, a repeated announcement
// counts once, and only a clear that found the bit set subtracts.
TEST(ParkedSetTest, CountFollowsTheBitsAcrossEveryWord) {
  mpmc::ParkedSet ps{};
  EXPECT_FALSE(ps.any());
  ps.announce(263);
  ps.announce(263);
  EXPECT_TRUE(ps.any());
  EXPECT_TRUE(ps.has(263));
  EXPECT_EQ(ps.count.load(), 1u);
  EXPECT_EQ(ps.slots[4].load(), std::uint64_t{1} << (263 % 64));
  ps.announce(8);
  ps.announce(64);
  EXPECT_EQ(ps.count.load(), 3u);
  EXPECT_EQ(ps.parked(), 3u);
  EXPECT_TRUE(ps.clear(263));
  EXPECT_FALSE(ps.clear(263)) << "already clear: nothing to subtract";
  EXPECT_EQ(ps.count.load(), 2u);
  EXPECT_TRUE(ps.clear(8));
  EXPECT_TRUE(ps.any()) << "slot 64 (word 1) is still parked";
  EXPECT_TRUE(ps.clear(64));
  EXPECT_EQ(ps.count.load(), 0u);
  EXPECT_FALSE(ps.any());
  // A count left high (a process killed between its +1 and its bit) only
  // makes any() read the words, which are all clear.
  ps.count.store(1);
  EXPECT_FALSE(ps.any());
}

TEST_F(MpmcRingTest, DescribeShowsDepthCountersAndRoles) {
  auto p = MpmcProducer::create("r", {.ring_cells = 16, .slot_bytes = 48});
  auto c = MpmcConsumer::open("r");
  ASSERT_TRUE(p && c);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(*p->try_push(bytes("x")));
  ASSERT_TRUE(pop_str(*c));
  Node n;
  describe_header(p->segment(), n);
  kMpmcRingDescriptor.describe(p->segment(), n);
  EXPECT_EQ(std::get<std::string>(find(n, "kind")->value()), "mpmc_ring");
  EXPECT_EQ(u64(n, "capacity"), 16u);
  EXPECT_EQ(u64(n, "slot_size"), 48u);
  EXPECT_EQ(u64(n, "cell_stride"), 64u);
  EXPECT_EQ(u64(n, "depth"), 4u);
  EXPECT_EQ(find(n, "depth")->metric(), Node::Metric::Gauge);
  EXPECT_EQ(u64(n, "pushed"), 5u);
  EXPECT_EQ(u64(n, "popped"), 1u);
  EXPECT_EQ(find(n, "popped")->metric(), Node::Metric::Counter);
  std::vector<std::string> roles;
  for (const Node& a : find(n, "attachers")->elements())
    roles.push_back(std::get<std::string>(a.find("role")->value()));
  std::sort(roles.begin(), roles.end());
  EXPECT_EQ(roles, (std::vector<std::string>{"consumer", "producer"}));
}

TEST_F(MpmcRingTest, DumpShowsQueuedItemsWithoutConsumingThem) {
  auto r = MpmcRing::create("r", {.ring_cells = 8, .slot_bytes = 16});
  ASSERT_TRUE(r);
  ASSERT_TRUE(*r->try_push(bytes("one")));
  ASSERT_TRUE(*r->try_push(bytes("two")));
  const auto items = kMpmcRingDescriptor.dump(r->segment(), 10);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(str(items[0]), "one");
  EXPECT_EQ(str(items[1]), "two");
  EXPECT_EQ(pop_str(*r), "one");
}

TEST_F(MpmcRingTest, ItemsSurviveTheHandlesThatWroteThem) {
  {
    auto r = MpmcRing::create("r", {.ring_cells = 8, .slot_bytes = 16});
    ASSERT_TRUE(r);
    ASSERT_TRUE(*r->try_push(bytes("kept")));
  }
  auto r = MpmcRing::open("r", {.ring_cells = 8, .slot_bytes = 16});
  ASSERT_TRUE(r);
  EXPECT_EQ(pop_str(*r), "kept");
}

// Move-assigning over a live handle detaches its attachment while the old
// mapping is still there (a defaulted operator= unmapped first, then wrote the
// slot through the unmapped header: SIGSEGV, or a write into whatever was
// mapped there since), and the old slot is free for the next attacher.
TEST_F(MpmcRingTest, MoveAssignOverALiveHandleDetachesBeforeUnmapping) {
  auto x = MpmcRing::create("x", {.ring_cells = 4, .slot_bytes = 8});
  ASSERT_TRUE(x) << x.error().what();
  auto y = MpmcRing::create("y", {.ring_cells = 4, .slot_bytes = 8});
  ASSERT_TRUE(y) << y.error().what();
  auto observer = open_mpmc_ring("x");
  ASSERT_TRUE(observer) << observer.error().what();
  const std::size_t old_slot = x->attachment().slot();
  ASSERT_EQ(observer->liveness(old_slot), Liveness::Alive);

  *x = std::move(*y);  // x now holds y's attachment; its own on "x" is released

  EXPECT_EQ(observer->liveness(old_slot), Liveness::Free);
  for (const SlotInfo& s : observer->slots()) EXPECT_NE(s.index, old_slot) << "slot still held";
  ASSERT_TRUE(x->attachment().attached());
  EXPECT_EQ(x->segment().name(), "y");
  ASSERT_TRUE(*x->try_push(bytes("moved")));
  EXPECT_EQ(pop_str(*x), "moved");
  // The freed slot is reattachable.
  auto again = MpmcRing::open("x");
  ASSERT_TRUE(again) << again.error().what();
  EXPECT_EQ(observer->liveness(again->attachment().slot()), Liveness::Alive);
}

}  // namespace
}  // namespace shm
