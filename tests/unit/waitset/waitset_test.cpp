// WaitSet in one process: making it, attaching and detaching members, the
// errors of bad input, and the answers of a wait that needs no other process
// (tests/integration/waitset/ has the cross-process wake-ups).
#include "shm/testing/waitset.hpp"
#include "common/temp_root.hpp"
#include "shm/channel/consumer.hpp"
#include "shm/channel/producer.hpp"
#include "shm/fanout/priority_fanout.hpp"
#include "shm/mpmc/mpmc_ring.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"
#include "shm/topic/layout.hpp"
#include "shm/topic/topic.hpp"
#include "shm/waitset/waitset.hpp"

#include <gtest/gtest.h>

#include <string>

namespace shm::waitset_test {
namespace {

using namespace std::chrono_literals;

std::span<const std::byte> bytes(const char* s) {
  return std::as_bytes(std::span<const char>(s, std::char_traits<char>::length(s)));
}

TEST(WaitSet, RefusesToBeMadeWithoutFutexWaitv) {
  test_hooks::pretend_no_futex_waitv(true);
  auto set = WaitSet::make();
  test_hooks::pretend_no_futex_waitv(false);
  ASSERT_FALSE(set);
  EXPECT_EQ(set.error().code, Errc::SystemError);
  EXPECT_NE(set.error().message.find("futex_waitv system call (Linux 5.16 or newer)"),
            std::string::npos)
      << set.error().message;
  EXPECT_TRUE(WaitSet::make());
}

TEST(WaitSet, RefusesOptionsOutOfRange) {
  for (std::size_t n : {std::size_t{0}, WaitSet::kMaxMembers + 1}) {
    auto set = WaitSet::make({.max_members = n});
    ASSERT_FALSE(set);
    EXPECT_EQ(set.error().code, Errc::InvalidArgument);
    EXPECT_NE(set.error().message.find("max_members " + std::to_string(n)), std::string::npos);
  }
  auto set = WaitSet::make({.liveness_interval = 0ms});
  ASSERT_FALSE(set);
  EXPECT_NE(set.error().message.find("liveness_interval 0 ms"), std::string::npos);
}

TEST(WaitSet, AnEmptySetTimesOut) {
  auto set = WaitSet::make();
  ASSERT_TRUE(set);
  auto r = set->wait(0ns);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, WaitStatus::TimedOut);
  r = set->wait(5ms);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, WaitStatus::TimedOut);
  EXPECT_TRUE(r->ready.empty());
}

// The wait sleeps in the kernel (one futex_waitv for the whole timeout), it
// does not loop: a wait on an idle member parks once or twice, not thousands
// of times.
TEST(WaitSet, AnIdleWaitSleepsInOneFutexWaitv) {
  test::TempRoot root;
  auto c = RingConsumer::create("idle", {.capacity_bytes = 1024});
  ASSERT_TRUE(c);
  auto set = WaitSet::make({.liveness_interval = 10s});
  ASSERT_TRUE(set && set->attach(*c, 1));
  const auto start = std::chrono::steady_clock::now();
  auto r = set->wait(100ms);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, WaitStatus::TimedOut);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 100ms);
  EXPECT_GE(set->snapshot().parks, 1u);
  EXPECT_LE(set->snapshot().parks, 2u);
}

TEST(WaitSet, RefusesDuplicateTagsTheSameHandleTwiceAFullSetAndUnknownDetach) {
  test::TempRoot root;
  auto a = RingConsumer::create("a", {.capacity_bytes = 1024});
  auto b = RingConsumer::create("b", {.capacity_bytes = 1024});
  ASSERT_TRUE(a && b);
  auto set = WaitSet::make({.max_members = 1});
  ASSERT_TRUE(set);
  ASSERT_TRUE(set->attach(*a, 7));
  auto again = set->attach(*a, 8);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, Errc::InvalidArgument);
  auto full = set->attach(*b, 9);
  ASSERT_FALSE(full);
  EXPECT_NE(full.error().message.find("full"), std::string::npos) << full.error().message;
  auto big = WaitSet::make();
  ASSERT_TRUE(big && big->attach(*b, 1));
  auto dup = big->attach(*a, 1);
  ASSERT_FALSE(dup);
  EXPECT_NE(dup.error().message.find("tag 1"), std::string::npos) << dup.error().message;
  auto gone = set->detach(99);
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, Errc::NotFound);
  EXPECT_TRUE(set->detach(7));
  EXPECT_EQ(set->size(), 0u);
}

TEST(WaitSet, RefusesAHandleAttachedToNothing) {
  test::TempRoot root;
  auto set = WaitSet::make();
  ASSERT_TRUE(set);
  ChannelConsumer none;
  auto r = set->attach(none, 1);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::InvalidArgument);
  EXPECT_NE(r.error().message.find("attached to nothing"), std::string::npos) << r.error().message;
  ChannelProducer no_producer;
  r = set->attach(no_producer, 2, 8);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::InvalidArgument);
  auto ring = RingConsumer::create("r", {.capacity_bytes = 1024});
  ASSERT_TRUE(ring);
  RingConsumer moved = std::move(*ring);
  r = set->attach(*ring, 3);  // NOLINT(bugprone-use-after-move): the point of the test
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::InvalidArgument);
  EXPECT_TRUE(set->attach(moved, 3));
  EXPECT_EQ(set->size(), 1u);
}

TEST(WaitSet, RefusesRoomForMoreThanTheLargestPayload) {
  test::TempRoot root;
  auto ring = RingProducer::create("r", {.capacity_bytes = 64});
  ASSERT_TRUE(ring);
  auto set = WaitSet::make();
  ASSERT_TRUE(set);
  auto r = set->attach(*ring, 1, 25);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::TooLarge);
  EXPECT_NE(r.error().message.find("largest payload is 24 bytes"), std::string::npos)
      << r.error().message;
  EXPECT_TRUE(set->attach(*ring, 1, 24));
}

TEST(WaitSet, ReportsEachReadyMemberWithItsTagAndReason) {
  test::TempRoot root;
  auto rc = RingConsumer::create("rc", {.capacity_bytes = 1024});
  auto rp = RingProducer::open("rc");
  auto params = ChannelParams::for_payload(64, 4);
  ASSERT_TRUE(params);
  auto cc = ChannelConsumer::create("cc", *params);
  auto cp = ChannelProducer::open("cc");
  ASSERT_TRUE(rc && rp && cc && cp);
  auto set = WaitSet::make();
  ASSERT_TRUE(set);
  ASSERT_TRUE(set->attach(*rc, 10));
  ASSERT_TRUE(set->attach(*cc, 20));
  ASSERT_TRUE(set->attach(*cp, 30, 64));
  auto r = set->wait(0ns);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, WaitStatus::Ready);
  ASSERT_EQ(r->ready.size(), 1u);  // only the channel producer has room; nothing to take
  EXPECT_EQ(r->ready[0].tag, 30u);
  EXPECT_EQ(r->ready[0].reason, ReadyReason::Room);
  ASSERT_TRUE(set->detach(30));
  ASSERT_TRUE(rp->try_push(bytes("ring")));
  ASSERT_TRUE(cp->try_send(bytes("chan")));
  r = set->wait(1s);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->ready.size(), 2u);
  EXPECT_EQ(r->ready[0].tag, 10u);
  EXPECT_EQ(r->ready[0].reason, ReadyReason::Data);
  EXPECT_EQ(r->ready[1].tag, 20u);
  EXPECT_EQ(r->ready[1].reason, ReadyReason::Data);
  // Level-triggered: still ready until taken.
  r = set->wait(0ns);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->ready.size(), 2u);
  std::byte buf[64];
  ASSERT_TRUE(rc->try_pop(buf));
  auto got = cc->try_receive_into(buf);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, ReceiveStatus::Received);
  r = set->wait(0ns);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, WaitStatus::TimedOut);
  ASSERT_TRUE(cp->finish());
  r = set->wait(1s);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->ready.size(), 1u);
  EXPECT_EQ(r->ready[0].tag, 20u);
  EXPECT_EQ(r->ready[0].reason, ReadyReason::Closed);
  // The producer that finished is Closed too.
  ASSERT_TRUE(set->attach(*cp, 30, 8));
  r = set->wait(0ns);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->ready.size(), 2u);
  EXPECT_EQ(r->ready[1].tag, 30u);
  EXPECT_EQ(r->ready[1].reason, ReadyReason::Closed);
}

// ---------------------------------------------------------------- topic subscriber

TopicParams small_topic() {
  return TopicParams{
      .max_sample_bytes = 64, .chunks = 16, .queue_depth = 4, .history = 0, .max_held = 2};
}

// The topic's count of parked subscribers, read from the segment.
std::uint32_t parked_subscribers(const Segment& seg) {
  auto v = topic::view(seg);
  EXPECT_TRUE(v);
  return v ? v->control->waiters.subscribers_parked.load() : 0;
}

TEST(WaitSet, TopicSubscriberIsReadyWhileItsQueueHoldsASample) {
  test::TempRoot root;
  auto sub = TopicSubscriber::create("t", small_topic(), TopicOverflow::DropOldest);
  ASSERT_TRUE(sub) << sub.error().what();
  auto pub = TopicPublisher::open("t");
  ASSERT_TRUE(pub) << pub.error().what();
  auto set = WaitSet::make();
  ASSERT_TRUE(set);
  TopicSubscriber empty;
  auto bad = set->attach(empty, 1);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, Errc::InvalidArgument);
  ASSERT_TRUE(set->attach(*sub, 7));
  auto r = set->wait(1ms);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, WaitStatus::TimedOut);
  for (int i = 0; i < 2; ++i) {
    auto loan = pub->try_loan(4);
    ASSERT_TRUE(loan && *loan);
    ASSERT_TRUE(pub->try_publish(std::move(**loan)));
  }
  for (int i = 0; i < 2; ++i) {  // level-triggered: ready until both are taken
    r = set->wait(1s);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, WaitStatus::Ready);
    ASSERT_EQ(r->ready.size(), 1u);
    EXPECT_EQ(r->ready[0].tag, 7u);
    EXPECT_EQ(r->ready[0].reason, ReadyReason::Data);
    auto s = sub->try_receive();
    ASSERT_TRUE(s && *s);
  }
  r = set->wait(1ms);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, WaitStatus::TimedOut);
}

// The topic counts parked subscribers (the publisher wakes while the count is
// not zero): every way out of the set takes the set's +1 back.
TEST(WaitSet, TopicSubscriberAnnouncementIsTakenBack) {
  test::TempRoot root;
  auto sub = TopicSubscriber::create("t", small_topic(), TopicOverflow::DropOldest);
  ASSERT_TRUE(sub) << sub.error().what();
  auto seg = open_topic("t");
  ASSERT_TRUE(seg) << seg.error().what();
  {
    auto set = WaitSet::make();
    ASSERT_TRUE(set);
    ASSERT_TRUE(set->attach(*sub, 1));
    // Long enough to park after the spin (which does not look at the clock:
    // under TSan on a loaded machine it took more than 2 ms, and a wait that
    // spent its timeout spinning returns without parking).
    auto r = set->wait(100ms);  // parks, times out
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, WaitStatus::TimedOut);
    EXPECT_GT(set->snapshot().parks, 0u);
    EXPECT_EQ(parked_subscribers(*seg), 0u);
    ASSERT_TRUE(set->fd());
    r = set->wait(0ns);  // armed for fd(): the announcement stays up
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, WaitStatus::TimedOut);
    EXPECT_EQ(parked_subscribers(*seg), 1u);
    r = set->wait(0ns);  // announced once, however many rounds
    ASSERT_TRUE(r);
    EXPECT_EQ(parked_subscribers(*seg), 1u);
    ASSERT_TRUE(set->detach(1));
    EXPECT_EQ(parked_subscribers(*seg), 0u);
    ASSERT_TRUE(set->attach(*sub, 2));
    r = set->wait(0ns);
    ASSERT_TRUE(r);
    EXPECT_EQ(parked_subscribers(*seg), 1u);
  }  // the set's destruction
  EXPECT_EQ(parked_subscribers(*seg), 0u);
}

TEST(WaitSet, AMovedFromSetRefusesCalls) {
  auto set = WaitSet::make();
  ASSERT_TRUE(set);
  WaitSet other = std::move(*set);
  auto r = set->wait(0ns);  // NOLINT(bugprone-use-after-move): the point of the test
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::InvalidArgument);
  EXPECT_TRUE(other.wait(0ns));
}

// ---------------------------------------------------------------- MPMC ring and fanout

std::uint64_t parked_in(const Segment& seg, bool consumers) {
  const auto& w = reinterpret_cast<const mpmc::Control*>(seg.data().data())->waiters;
  return consumers ? w.consumers_waiting.parked() : w.producers_waiting.parked();
}
std::uint64_t parked_drainers(const FanoutConsumer& f) {
  return reinterpret_cast<const fanout::Control*>(f.bitmap_segment().data().data())
      ->hot.waiters.parked();
}

TEST(WaitSet, MpmcAndFanoutMembersAreReadyWhileTheyHaveAnItemOrRoom) {
  test::TempRoot root;
  auto c = MpmcConsumer::create("m", {.ring_cells = 2, .slot_bytes = 8});
  auto p = MpmcProducer::open("m");
  auto fc = FanoutConsumer::create("f", {.priorities = 3, .ring_cells = 2, .slot_bytes = 8});
  auto fp = FanoutProducer::open("f", FanoutParams{0, 0, 0});
  ASSERT_TRUE(c && p && fc && fp);
  auto set = WaitSet::make();
  ASSERT_TRUE(set);
  ASSERT_TRUE(set->attach(*c, 1));
  ASSERT_TRUE(set->attach(*fc, 2));
  ASSERT_TRUE(set->attach(*p, 3, 8));
  auto r = set->wait(0ns);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->ready.size(), 1u);  // only the producer: room
  EXPECT_EQ(r->ready[0].tag, 3u);
  EXPECT_EQ(r->ready[0].reason, ReadyReason::Room);
  ASSERT_TRUE(set->detach(3));
  r = set->wait(100ms);  // parks (after the spin), times out
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, WaitStatus::TimedOut);
  EXPECT_GT(set->snapshot().parks, 0u);
  EXPECT_EQ(parked_in(c->segment(), true), 0u);  // withdrawn
  EXPECT_EQ(parked_drainers(*fc), 0u);
  ASSERT_TRUE(*p->try_push(bytes("one")));
  ASSERT_TRUE(*fp->try_submit(2, bytes("two")));
  for (int round = 0; round < 2; ++round) {  // level-triggered
    r = set->wait(0ns);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->ready.size(), 2u);
    EXPECT_EQ(r->ready[0].reason, ReadyReason::Data);
    EXPECT_EQ(r->ready[1].reason, ReadyReason::Data);
  }
  std::byte buf[8];
  ASSERT_TRUE(*c->try_pop(buf));
  auto popped = fc->try_pop_highest(buf);
  ASSERT_TRUE(popped && *popped);
  EXPECT_EQ((*popped)->priority, 2u);
  r = set->wait(0ns);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, WaitStatus::TimedOut);
  // A cancelled reservation is a tombstone: nothing to take (the pop skips it).
  auto cell = p->try_reserve();
  ASSERT_TRUE(cell && *cell);
  p->cancel();
  r = set->wait(0ns);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, WaitStatus::TimedOut);
  // ... and an item behind it is Data.
  ASSERT_TRUE(*p->try_push(bytes("three")));
  r = set->wait(0ns);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->ready.size(), 1u);
  EXPECT_EQ(r->ready[0].tag, 1u);
  // A ring full for the producer: no room until a pop.
  ASSERT_TRUE(*p->try_push(bytes("four")));
  ASSERT_TRUE(set->attach(*p, 3, 8));
  r = set->wait(0ns);
  ASSERT_TRUE(r);
  for (const auto& e : r->ready) EXPECT_NE(e.tag, 3u);
  ASSERT_TRUE(*c->try_pop(buf));
  r = set->wait(0ns);
  ASSERT_TRUE(r);
  bool room = false;
  for (const auto& e : r->ready) room = room || (e.tag == 3 && e.reason == ReadyReason::Room);
  EXPECT_TRUE(room);
}

// A stale bit (its ring empty) is cleared by the set's look, as a pop clears
// it; a set left armed for fd() keeps its waiter bit up until it is destroyed
// or the member detached.
TEST(WaitSet, FanoutStaleBitIsClearedAndWaiterBitsAreTakenBack) {
  test::TempRoot root;
  auto fc = FanoutConsumer::create("f", {.priorities = 2, .ring_cells = 2, .slot_bytes = 8});
  auto c = MpmcConsumer::create("m", {.ring_cells = 2, .slot_bytes = 8});
  ASSERT_TRUE(fc && c);
  auto& bitmap = reinterpret_cast<fanout::Control*>(fc->bitmap_segment().data().data())->hot.bitmap;
  bitmap.store(2);  // priority 1, whose ring is empty
  {
    auto set = WaitSet::make();
    ASSERT_TRUE(set);
    ASSERT_TRUE(set->attach(*fc, 1));
    ASSERT_TRUE(set->attach(*c, 2));
    auto r = set->wait(0ns);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, WaitStatus::TimedOut);
    EXPECT_EQ(bitmap.load(), 0u);
    ASSERT_TRUE(set->fd());
    r = set->wait(0ns);  // armed: the bits stay up for the helper
    ASSERT_TRUE(r);
    EXPECT_EQ(parked_drainers(*fc), 1u);
    EXPECT_EQ(parked_in(c->segment(), true), 1u);
    ASSERT_TRUE(set->detach(2));
    EXPECT_EQ(parked_in(c->segment(), true), 0u);
  }  // the set's destruction
  EXPECT_EQ(parked_drainers(*fc), 0u);
}

TEST(WaitSet, RefusesMpmcRoomForMoreThanTheSlot) {
  test::TempRoot root;
  auto p = MpmcProducer::create("m", {.ring_cells = 2, .slot_bytes = 8});
  ASSERT_TRUE(p);
  auto set = WaitSet::make();
  ASSERT_TRUE(set);
  auto r = set->attach(*p, 1, 9);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::TooLarge);
  EXPECT_TRUE(set->attach(*p, 1, 8));
  MpmcConsumer none;
  r = set->attach(none, 2);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::InvalidArgument);
  FanoutConsumer no_fanout;
  r = set->attach(no_fanout, 3);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::InvalidArgument);
}

}  // namespace
}  // namespace shm::waitset_test
