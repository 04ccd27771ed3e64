// snapshot() on every handle (docs/idioms.md, "Snapshots"): a plain value of
// counters and positions read without blocking writers, whose fields follow
// the operations.
#include "common/temp_root.hpp"
#include "shm/shm.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <span>
#include <vector>

namespace shm::snapshot_test {
namespace {

using namespace std::chrono_literals;

class SnapshotTest : public ::testing::Test {
 protected:
  test::TempRoot root_;
};

const std::byte kPayload[5]{std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}, std::byte{5}};

TEST_F(SnapshotTest, RingProducerAndConsumerSnapshotsFollowPushAndPop) {
  auto p = RingProducer::create("ring", RingParams{4096});
  ASSERT_TRUE(p) << p.error().message;
  auto c = RingConsumer::open("ring");
  ASSERT_TRUE(c) << c.error().message;
  RingSnapshot s = p->snapshot();
  EXPECT_EQ(s.capacity_bytes, 4096u);
  EXPECT_GT(s.max_payload, 0u);
  EXPECT_EQ(s.tail, 0u);
  EXPECT_EQ(s.records_pushed, 0u);

  ASSERT_TRUE(*p->try_push(kPayload));
  ASSERT_TRUE(*p->try_push(kPayload));
  s = p->snapshot();
  EXPECT_EQ(s.records_pushed, 2u);
  EXPECT_EQ(s.tail, 2 * ring::record_size(sizeof kPayload));
  EXPECT_EQ(s.used_bytes, s.tail);
  EXPECT_EQ(s.head, 0u);

  std::byte out[16];
  ASSERT_TRUE(c->try_pop(out)->has_value());
  RingSnapshot cs = c->snapshot();
  EXPECT_EQ(cs.records_released, 1u);
  EXPECT_EQ(cs.head, ring::record_size(sizeof kPayload));
  EXPECT_EQ(cs.records_pushed, 2u);
  // The producer sees the consumer's release too.
  s = p->snapshot();
  EXPECT_EQ(s.head, cs.head);
  EXPECT_EQ(s.used_bytes, ring::record_size(sizeof kPayload));
}

TEST_F(SnapshotTest, ChannelSnapshotsFollowSendAndReceive) {
  auto params = ChannelParams::for_payload(64, 8);
  ASSERT_TRUE(params);
  auto p = ChannelProducer::create("chan", *params);
  ASSERT_TRUE(p) << p.error().message;
  auto c = ChannelConsumer::open("chan");
  ASSERT_TRUE(c) << c.error().message;
  ChannelSnapshot s = c->snapshot();
  EXPECT_EQ(s.pages, params->pages);
  EXPECT_EQ(s.ring_cells, params->ring_cells);
  EXPECT_EQ(s.sent, 0u);
  EXPECT_EQ(s.state, ChannelState::Open);

  ASSERT_TRUE(p->try_send(kPayload)->admitted());
  ASSERT_TRUE(p->try_send(kPayload)->admitted());
  s = c->snapshot();
  EXPECT_EQ(s.sent, 2u);
  EXPECT_EQ(s.in_flight, 2u);
  EXPECT_EQ(s.received, 0u);

  std::byte out[64];
  ASSERT_TRUE(*c->try_receive_into(out));
  s = p->snapshot();
  EXPECT_EQ(s.received, 1u);
  EXPECT_EQ(s.in_flight, 1u);

  ASSERT_TRUE(p->finish());
  EXPECT_EQ(c->snapshot().state, ChannelState::Clean);
}

TEST_F(SnapshotTest, MpmcSnapshotFollowsPushAndPopOnEveryHandleType) {
  auto peer = MpmcRing::create("jobs", MpmcParams{8, 16});
  ASSERT_TRUE(peer) << peer.error().message;
  auto producer = MpmcProducer::open("jobs");
  auto consumer = MpmcConsumer::open("jobs");
  ASSERT_TRUE(producer && consumer);
  MpmcSnapshot s = peer->snapshot();
  EXPECT_EQ(s.ring_cells, 8u);
  EXPECT_EQ(s.slot_bytes, 16u);
  EXPECT_EQ(s.depth, 0u);

  ASSERT_TRUE(*producer->try_push(kPayload));
  ASSERT_TRUE(*producer->try_push(kPayload));
  s = consumer->snapshot();
  EXPECT_EQ(s.tail, 2u);
  EXPECT_EQ(s.depth, 2u);

  std::byte out[16];
  ASSERT_TRUE(consumer->try_pop(out)->has_value());
  s = producer->snapshot();
  EXPECT_EQ(s.head, 1u);
  EXPECT_EQ(s.depth, 1u);

  auto r = producer->try_reserve();
  ASSERT_TRUE(r && *r);
  producer->cancel();
  EXPECT_EQ(peer->snapshot().cancelled_pushes, 1u);
}

TEST_F(SnapshotTest, FanoutSnapshotFollowsSubmitAndPop) {
  const FanoutParams params{.priorities = 3, .ring_cells = 8, .slot_bytes = 16};
  auto producer = FanoutProducer::create("work", params);
  ASSERT_TRUE(producer) << producer.error().message;
  auto consumer = FanoutConsumer::open("work", params);
  ASSERT_TRUE(consumer) << consumer.error().message;
  FanoutSnapshot s = producer->snapshot();
  EXPECT_EQ(s.priorities, 3u);
  EXPECT_EQ(s.ring_cells, 8u);
  EXPECT_EQ(s.slot_bytes, 16u);
  EXPECT_EQ(s.bitmap, 0u);
  ASSERT_EQ(s.rings.size(), 3u);

  ASSERT_TRUE(*producer->try_submit(2, kPayload));
  s = consumer->snapshot();
  EXPECT_EQ(s.bitmap, 0b100u);
  EXPECT_EQ(s.rings[2].depth, 1u);
  EXPECT_EQ(s.rings[0].depth, 0u);

  std::byte out[16];
  ASSERT_TRUE(consumer->try_pop_highest(out)->has_value());
  s = consumer->snapshot();
  EXPECT_EQ(s.bitmap, 0u);
  EXPECT_EQ(s.rings[2].depth, 0u);
  EXPECT_EQ(s.rings[2].head, 1u);
}

TEST_F(SnapshotTest, EgressAndTransportSnapshotsFollowEnqueueClaimAndAck) {
  EgressParams params;
  params.max_payloads = 8;
  params.slot_bytes = 16;
  params.inflight_limit = 4;
  auto e = Egress::create("uplink", params);
  ASSERT_TRUE(e) << e.error().message;
  auto t = EgressTransport::open("uplink");
  ASSERT_TRUE(t) << t.error().message;
  egress::Projection s = e->snapshot();
  EXPECT_TRUE(s.consistent);
  EXPECT_EQ(s.next_sequence, 0u);
  EXPECT_EQ(s.pending, 0u);

  ASSERT_TRUE(e->try_enqueue(kPayload));
  ASSERT_TRUE(e->try_enqueue(kPayload));
  s = e->snapshot();
  EXPECT_EQ(s.next_sequence, 2u);
  EXPECT_EQ(s.pending, 2u);

  std::vector<std::byte> payload;
  auto claimed = t->try_claim(payload);
  ASSERT_TRUE(claimed);
  ASSERT_EQ(claimed->status, egress::ClaimStatus::Claimed);
  EgressTransportSnapshot ts = t->snapshot();
  EXPECT_EQ(ts.generation, t->generation());
  EXPECT_FALSE(ts.fenced);
  EXPECT_EQ(ts.egress.pending, 1u);
  EXPECT_EQ(ts.egress.inflight, 1u);
  EXPECT_FALSE(ts.egress.acked_through.has_value());

  ASSERT_TRUE(t->ack(claimed->envelope.sequence));
  ts = t->snapshot(true);
  EXPECT_EQ(ts.egress.inflight, 0u);
  ASSERT_TRUE(ts.egress.acked_through.has_value());
  EXPECT_EQ(*ts.egress.acked_through, 0u);
  EXPECT_EQ(ts.egress.records.size(), 1u);

  // A second live transport is refused; the first stays unfenced.
  auto t2 = EgressTransport::open("uplink");
  ASSERT_FALSE(t2);  // the first is alive: RoleTaken
  EXPECT_EQ(t2.error().code, Errc::RoleTaken);
  EXPECT_FALSE(t->snapshot().fenced);
}

}  // namespace
}  // namespace shm::snapshot_test
