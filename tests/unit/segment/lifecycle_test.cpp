// One lifecycle for every structure (docs/idioms.md, "Lifecycle"): the setup
// helpers create_X / open_X make or open a segment without attaching, and
// every handle type's attach(segment) adopts it under its own role, refusing
// a segment of another kind.
#include "common/temp_root.hpp"
#include "shm/shm.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <span>
#include <string>
#include <typeinfo>
#include <vector>

namespace shm::lifecycle_test {
namespace {

class LifecycleTest : public ::testing::Test {
 protected:
  test::TempRoot root_;
};

// The number of attached slots of a segment.
std::size_t attached(const Segment& s) {
  std::size_t n = 0;
  for (const SlotInfo& slot : s.slots())
    if (slot.state == SlotState::Attached) ++n;
  return n;
}

// attach() refuses a segment of another kind with KindMismatch.
template <class H>
void expect_refuses_other_kind() {
  auto other = create_ring(fmt::format("other-{}", typeid(H).hash_code()), RingParams{4096});
  ASSERT_TRUE(other) << other.error().message;
  auto h = H::attach(std::move(*other));
  ASSERT_FALSE(h);
  EXPECT_EQ(h.error().code, Errc::KindMismatch) << h.error().message;
}

TEST_F(LifecycleTest, RingHelpersMakeASegmentNobodyIsAttachedToAndHandlesAdoptIt) {
  auto seg = create_ring("ring", RingParams{4096});
  ASSERT_TRUE(seg) << seg.error().message;
  EXPECT_EQ(attached(*seg), 0u);
  auto p = RingProducer::attach(std::move(*seg));
  ASSERT_TRUE(p) << p.error().message;
  auto opened = open_ring("ring");
  ASSERT_TRUE(opened);
  auto c = RingConsumer::attach(std::move(*opened));
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(attached(p->segment()), 2u);
  const std::byte one[1]{std::byte{7}};
  ASSERT_TRUE(*p->try_push(one));
  std::byte out[8];
  auto got = c->try_pop(out);
  ASSERT_TRUE(got && *got);
  EXPECT_EQ(**got, 1u);
}

TEST_F(LifecycleTest, ChannelHelpersAndAttach) {
  auto params = ChannelParams::for_payload(64);
  ASSERT_TRUE(params);
  auto seg = create_channel("chan", *params);
  ASSERT_TRUE(seg) << seg.error().message;
  EXPECT_EQ(attached(*seg), 0u);
  auto c = ChannelConsumer::attach(std::move(*seg));
  ASSERT_TRUE(c) << c.error().message;
  auto opened = open_channel("chan");
  ASSERT_TRUE(opened);
  auto p = ChannelProducer::attach(std::move(*opened));
  ASSERT_TRUE(p) << p.error().message;
  const std::byte one[1]{std::byte{7}};
  auto sent = p->try_send(one);
  ASSERT_TRUE(sent && sent->admitted());
  auto r = c->try_receive();
  ASSERT_TRUE(r && *r);
  EXPECT_EQ(r->lease.size(), 1u);
}

TEST_F(LifecycleTest, MpmcHelpersAndAttachForEveryHandleType) {
  ASSERT_TRUE(create_mpmc_ring("jobs", MpmcParams{16, 32}));
  auto peer = MpmcRing::attach(*open_mpmc_ring("jobs"));
  auto producer = MpmcProducer::attach(*open_mpmc_ring("jobs"));
  auto consumer = MpmcConsumer::attach(*open_mpmc_ring("jobs"));
  ASSERT_TRUE(peer && producer && consumer);
  EXPECT_EQ(attached(peer->segment()), 3u);
  const std::byte one[1]{std::byte{7}};
  ASSERT_TRUE(*producer->try_push(one));
  std::byte out[32];
  auto got = consumer->try_pop(out);
  ASSERT_TRUE(got && *got);
}

TEST_F(LifecycleTest, TopicHelpersAndAttachForEveryHandleType) {
  const TopicParams params{.max_sample_bytes = 16, .chunks = 4, .queue_depth = 2, .max_held = 1};
  ASSERT_TRUE(create_topic("frames", params));
  auto seg = open_topic("frames");
  ASSERT_TRUE(seg);
  EXPECT_EQ(attached(*seg), 0u) << "the helpers attach nothing";
  auto pub = TopicPublisher::attach(*open_topic("frames"));
  auto sub = TopicSubscriber::attach(*open_topic("frames", params), TopicOverflow::Block);
  ASSERT_TRUE(pub && sub);
  EXPECT_EQ(attached(*seg), 2u);
  auto loan = pub->try_loan(1);
  ASSERT_TRUE(loan && *loan);
  ASSERT_TRUE(pub->try_publish(std::move(**loan)));
  auto got = sub->try_receive();
  ASSERT_TRUE(got && *got);
}

TEST_F(LifecycleTest, FanoutHelpersAndAttachForEveryHandleType) {
  const FanoutParams params{.priorities = 3, .ring_cells = 8, .slot_bytes = 16};
  auto made = create_fanout("work", params);
  ASSERT_TRUE(made) << made.error().message;
  EXPECT_EQ(made->rings.size(), 3u);
  EXPECT_EQ(attached(made->bitmap), 0u);
  auto producer = FanoutProducer::attach(std::move(*made));
  ASSERT_TRUE(producer) << producer.error().message;
  auto consumer = FanoutConsumer::attach(*open_fanout("work", params));
  ASSERT_TRUE(consumer) << consumer.error().message;
  auto peer = PriorityFanout::attach(*open_fanout("work", params));
  ASSERT_TRUE(peer) << peer.error().message;
  const std::byte one[1]{std::byte{7}};
  ASSERT_TRUE(*producer->try_submit(2, one));
  std::byte out[16];
  auto got = consumer->try_pop_highest(out);
  ASSERT_TRUE(got && *got);
  EXPECT_EQ((*got)->priority, 2u);
}

TEST_F(LifecycleTest, FanoutAttachRefusesARingOfAnotherFanout) {
  const FanoutParams params{.priorities = 2, .ring_cells = 8, .slot_bytes = 16};
  auto a = create_fanout("a", params);
  auto b = create_fanout("b", params);
  ASSERT_TRUE(a && b);
  std::swap(a->rings[1], b->rings[1]);
  auto h = PriorityFanout::attach(std::move(*a));
  ASSERT_FALSE(h);
  EXPECT_EQ(h.error().code, Errc::ParamMismatch) << h.error().message;
}

TEST_F(LifecycleTest, LedgerHelpersAndAttach) {
  LedgerConfig config;
  config.params.global_limit = 1000;
  config.categories.push_back({.label = "frames", .limit = 500});
  auto seg = create_ledger("budget", config);
  ASSERT_TRUE(seg) << seg.error().message;
  EXPECT_EQ(attached(*seg), 0u);
  auto l = Ledger::attach(std::move(*seg));
  ASSERT_TRUE(l) << l.error().message;
  EXPECT_TRUE(l->category("frames"));
  auto again = Ledger::attach(*open_ledger("budget"));
  ASSERT_TRUE(again);
  EXPECT_EQ(attached(l->segment()), 2u);
}

TEST_F(LifecycleTest, RelayHelpersAndAttach) {
  RelayConfig config;
  auto seg = create_relay("prices", config);
  ASSERT_TRUE(seg) << seg.error().message;
  EXPECT_EQ(attached(*seg), 0u);
  auto w = RelayWriter::attach(std::move(*seg));
  ASSERT_TRUE(w) << w.error().message;
  auto r = RelayReader::attach(*open_relay("prices"));
  ASSERT_TRUE(r) << r.error().message;
  const std::uint64_t v = 42;
  auto wrote = w->try_write(1, std::as_bytes(std::span(&v, 1)));
  ASSERT_TRUE(wrote);
  auto got = r->take(8);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->size(), 1u);
}

TEST_F(LifecycleTest, EgressHelpersAndAttachAndTransportOpen) {
  auto seg = create_egress("uplink", EgressParams{});
  ASSERT_TRUE(seg) << seg.error().message;
  EXPECT_EQ(attached(*seg), 0u);
  auto e = Egress::attach(std::move(*seg));
  ASSERT_TRUE(e) << e.error().message;
  auto t = EgressTransport::attach(*open_egress("uplink"));
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(t->generation(), 1u);
  t = {};
  // A second transport reconnects (generation + 1), by name this time.
  auto t2 = EgressTransport::open("uplink");
  ASSERT_TRUE(t2) << t2.error().message;
  EXPECT_EQ(t2->generation(), 2u);
}

TEST_F(LifecycleTest, EveryHandleTypeRefusesASegmentOfAnotherKind) {
  expect_refuses_other_kind<ChannelProducer>();
  expect_refuses_other_kind<ChannelConsumer>();
  expect_refuses_other_kind<MpmcRing>();
  expect_refuses_other_kind<MpmcProducer>();
  expect_refuses_other_kind<MpmcConsumer>();
  expect_refuses_other_kind<Ledger>();
  expect_refuses_other_kind<RelayWriter>();
  expect_refuses_other_kind<RelayReader>();
  expect_refuses_other_kind<Egress>();
  expect_refuses_other_kind<EgressTransport>();
  expect_refuses_other_kind<TopicPublisher>();
  {
    auto other = create_ring("other-topic-subscriber", RingParams{4096});
    ASSERT_TRUE(other);
    auto h = TopicSubscriber::attach(std::move(*other), TopicOverflow::DropOldest);
    ASSERT_FALSE(h);
    EXPECT_EQ(h.error().code, Errc::KindMismatch) << h.error().message;
  }
  // And a ring handle a segment of another kind.
  ASSERT_TRUE(create_mpmc_ring("not-a-ring", MpmcParams{16, 32}));
  auto p = RingProducer::attach(*open_mpmc_ring("not-a-ring"));
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().code, Errc::KindMismatch) << p.error().message;
}

TEST_F(LifecycleTest, AttachOfAnEmptySegmentIsAnError) {
  auto p = RingProducer::attach(Segment{});
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().code, Errc::InvalidArgument) << p.error().message;
  auto l = Ledger::attach(Segment{});
  ASSERT_FALSE(l);
  EXPECT_EQ(l.error().code, Errc::InvalidArgument) << l.error().message;
  auto t = TopicSubscriber::attach(Segment{}, TopicOverflow::Block);
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code, Errc::InvalidArgument) << t.error().message;
}

}  // namespace
}  // namespace shm::lifecycle_test
