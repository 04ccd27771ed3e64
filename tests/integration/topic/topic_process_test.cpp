// Topics across real processes (fork + exec of test_topic_peer): one
// publisher and several subscribers, DropOldest against Block, dead
// subscribers and publishers giving their chunks back, and parked handles
// woken by the other side's publish, receive or release.
#include "common/must.hpp"
#include "common/subprocess.hpp"
#include "common/temp_root.hpp"
#include "common/topic_audit.hpp"
#include "shm/segment/kind.hpp"
#include "shm/topic/topic.hpp"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace shm::topic_process_test {
namespace {

using namespace std::chrono_literals;
using test::Subprocess;

constexpr auto kLine = 20s;  // bound on any helper's next line

TopicParams params(std::uint64_t chunks, std::uint64_t depth, std::uint64_t bytes = 4096,
                   std::uint64_t max_held = 2) {
  TopicParams p;
  p.max_sample_bytes = bytes;
  p.chunks = chunks;
  p.queue_depth = depth;
  p.max_held = max_held;
  return p;
}

using test::must;

Subprocess peer(std::vector<std::string> args) {
  args.insert(args.begin(), test::helper_path("topic_peer"));
  return Subprocess(std::move(args));
}

// Parses "received R missed M" from a sub helper's output.
std::pair<std::uint64_t, std::uint64_t> tally(Subprocess& p) {
  unsigned long long r = 0, m = 0;
  const std::string& out = p.output();
  const auto at = out.find("received ");
  if (at == std::string::npos ||
      std::sscanf(out.c_str() + at, "received %llu missed %llu", &r, &m) != 2)
    ADD_FAILURE() << "no tally in: " << out;
  return {r, m};
}

// Waits until `word` (a parked announcement of the topic's Control) is set.
bool wait_parked(const std::atomic<std::uint32_t>& word) {
  const auto deadline = std::chrono::steady_clock::now() + kLine;
  while (std::chrono::steady_clock::now() < deadline) {
    if (word.load(std::memory_order_seq_cst) != 0) return true;
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

// Publishes `n` samples of 8 bytes.
void publish_samples(TopicPublisher& pub, int n) {
  for (int i = 0; i < n; ++i) {
    auto loan = must(pub.try_loan(8));
    ASSERT_TRUE(loan);
    (void)must(pub.try_publish(std::move(*loan)));
  }
}

// A subscriber process (topic "t") that received 1 of 3 samples and holds
// it, 2 still queued, killed -9.
void kill_a_holding_subscriber(TopicPublisher& pub) {
  auto holder = peer({"hold-sub", "t", "1"});
  while (pub.snapshot().subscribers == 0) std::this_thread::sleep_for(1ms);
  ASSERT_NO_FATAL_FAILURE(publish_samples(pub, 3));
  ASSERT_TRUE(holder.wait_for_line("holding", kLine)) << holder.output();
  holder.kill();
  (void)holder.wait(kLine);
}

class TopicProcessTest : public ::testing::Test {
 protected:
  test::TempRoot root;
};

// The tests that run shmctl: it must be built when the tools are.
class TopicShmctlTest : public TopicProcessTest {
 protected:
  void SetUp() override {
    if (::access(test::bin_path("shmctl").c_str(), X_OK) == 0) return;
#if SHM_EXPECT_TOOLS
    FAIL() << test::bin_path("shmctl") << " is missing although LIBSHM_BUILD_TOOLS is ON";
#else
    GTEST_SKIP() << "shmctl is not built: LIBSHM_BUILD_TOOLS is OFF";
#endif
  }
};

TEST_F(TopicProcessTest, ThreeSubscriberProcessesEachGetEverySampleOfAPublisherProcess) {
  auto seg = must(create_topic("t", params(32, 8)));
  std::vector<Subprocess> subs;
  for (const char* how : {"block", "block", "block"})
    subs.push_back(peer({"sub", "t", how, "300", "0"}));
  for (auto& s : subs) ASSERT_TRUE(s.wait_for_line("ready", kLine)) << s.output();
  auto pub = peer({"pub", "t", "300", "4096"});
  ASSERT_TRUE(pub.wait_for_line("published 300", kLine)) << pub.output();
  EXPECT_EQ(pub.wait(kLine), 0);
  for (auto& s : subs) {
    EXPECT_EQ(s.wait(kLine), 0) << s.output();
    EXPECT_EQ(tally(s), std::make_pair(std::uint64_t{300}, std::uint64_t{0}));
  }
  EXPECT_EQ(test::audit_topic(seg).error, "");
  EXPECT_EQ(test::audit_topic(seg).free, 32u) << "every chunk is back";
}

TEST_F(TopicProcessTest, ASlowDropOldestSubscriberMissesAndCountsWhileBlockOnesGetAll) {
  auto seg = must(create_topic("t", params(16, 4)));
  auto fast = peer({"sub", "t", "block", "50", "0"});
  auto slow = peer({"sub", "t", "drop", "50", "20000"});  // 20 ms per sample
  ASSERT_TRUE(fast.wait_for_line("ready", kLine));
  ASSERT_TRUE(slow.wait_for_line("ready", kLine));
  auto pub = peer({"pub", "t", "50", "1024"});
  EXPECT_EQ(pub.wait(kLine), 0) << pub.output();
  EXPECT_EQ(fast.wait(kLine), 0) << fast.output();
  EXPECT_EQ(slow.wait(kLine), 0) << slow.output();
  EXPECT_EQ(tally(fast), std::make_pair(std::uint64_t{50}, std::uint64_t{0}));
  const auto [received, missed] = tally(slow);
  EXPECT_EQ(received + missed, 50u) << "every sample is received or counted as missed";
  EXPECT_GT(missed, 0u) << "the publisher did not wait for the slow DropOldest subscriber";
}

TEST_F(TopicProcessTest, ADeadSubscribersSamplesComeBackAndItNoLongerBlocksThePublisher) {
  auto pub = must(TopicPublisher::create("t", params(8, 2, 64)));
  auto holder = peer({"hold-sub", "t", "2"});
  // Wait for the holder's record before publishing.
  while (pub.snapshot().subscribers == 0) std::this_thread::sleep_for(1ms);
  auto publish = [&] {
    auto loan = must(pub.try_loan(8));
    ASSERT_TRUE(loan);
    const PublishOutcome o = must(pub.try_publish(std::move(*loan)));
    ASSERT_EQ(o.status, PublishStatus::Published);
  };
  publish();
  publish();
  ASSERT_TRUE(holder.wait_for_line("holding", kLine));
  publish();
  publish();
  // It holds 2 and its Block queue (depth 2) is full: 4 chunks out.
  EXPECT_EQ(pub.snapshot().free_chunks, 4u);
  auto loan = must(pub.try_loan(8));
  ASSERT_TRUE(loan);
  EXPECT_EQ(must(pub.try_publish(std::move(*loan))).status, PublishStatus::Full);
  holder.kill();
  (void)holder.wait(kLine);
  // The publisher's wait repairs: the dead Block subscriber is dropped, not waited for.
  const PublishOutcome o = must(pub.publish(std::move(*loan), 10s));
  EXPECT_EQ(o.status, PublishStatus::Published);
  EXPECT_EQ(o.subscribers, 0u);
  EXPECT_EQ(pub.snapshot().free_chunks, 8u);
  EXPECT_EQ(pub.snapshot().subscribers, 0u);
  auto seg = must(open_topic("t"));
  EXPECT_EQ(test::audit_topic(seg).error, "");
  // The topic's own event says whose record went and what it released.
  const std::vector<TopicEvent> events = pub.events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, topic::EventKind::SubscriberGone);
  EXPECT_EQ(events[0].key, kExclusiveSlots);  // the first subscriber slot
  EXPECT_EQ(events[0].count, 4u);             // 2 queued + 2 held
  EXPECT_GT(events[0].time_ns, 0u);
}

TEST_F(TopicProcessTest, ReclaimOfADeadSubscriberGivesItsChunksBackAtOnce) {
  auto pub = must(TopicPublisher::create("t", params(8, 4, 64)));
  // A subscriber process holding 1 of 3 samples (2 queued), killed.
  ASSERT_NO_FATAL_FAILURE(kill_a_holding_subscriber(pub));
  EXPECT_EQ(pub.snapshot().free_chunks, 5u);
  auto seg = must(open_topic("t"));
  bool reclaimed = false;
  for (const SlotInfo& s : seg.slots()) {
    if (s.liveness != Liveness::Dead) continue;
    auto r = must(reclaim_dead_attacher(seg, kTopicDescriptor, s));
    EXPECT_EQ(r.status, ReclaimStatus::Reclaimed);
    ASSERT_FALSE(r.actions.empty());
    EXPECT_NE(r.actions[0].find("2 queued and 1 held"), std::string::npos) << r.actions[0];
    reclaimed = true;
  }
  EXPECT_TRUE(reclaimed);
  EXPECT_EQ(pub.snapshot().free_chunks, 8u);
  EXPECT_EQ(test::audit_topic(seg).error, "");
}

TEST_F(TopicProcessTest, ADeadPublishersLoanComesBackAndTheNextPublisherIsANewIncarnation) {
  auto sub = must(TopicSubscriber::create("t", params(4, 4, 64), TopicOverflow::DropOldest));
  auto holder = peer({"hold-loan", "t"});
  ASSERT_TRUE(holder.wait_for_line("loaned", kLine)) << holder.output();
  EXPECT_EQ(sub.snapshot().free_chunks, 3u);
  EXPECT_EQ(sub.snapshot().incarnation, 1u);
  holder.kill();
  (void)holder.wait(kLine);
  auto pub = must(TopicPublisher::open("t"));
  EXPECT_EQ(pub.incarnation(), 2u);
  EXPECT_EQ(pub.snapshot().free_chunks, 4u);
  const std::vector<TopicEvent> events = sub.events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, topic::EventKind::PublisherGone);
  EXPECT_EQ(events[0].key, 1u);    // its incarnation
  EXPECT_EQ(events[0].count, 1u);  // one loan returned
  auto loan = must(pub.try_loan(3));
  ASSERT_TRUE(loan);
  std::memcpy(loan->bytes().data(), "abc", 3);
  (void)must(pub.try_publish(std::move(*loan)));
  auto s = must(sub.try_receive());
  ASSERT_TRUE(s);
  EXPECT_EQ(s->incarnation(), 2u);
  EXPECT_EQ(s->seq(), 0u);
}

TEST_F(TopicProcessTest, AParkedSubscriberProcessWakesWithin100msOfAPublish) {
  auto pub = must(TopicPublisher::create("t", params(4, 4, 64)));
  auto raw = must(open_topic("t"));
  const auto v = topic::view(raw);
  ASSERT_TRUE(v);
  auto waiter = peer({"wait-sub", "t"});
  ASSERT_TRUE(waiter.wait_for_line("ready", kLine));
  ASSERT_TRUE(wait_parked(v->control->waiters.subscribers_parked));
  std::this_thread::sleep_for(20ms);  // well into its futex sleep
  auto loan = must(pub.try_loan(8));
  ASSERT_TRUE(loan);
  const auto t0 = std::chrono::steady_clock::now();
  (void)must(pub.try_publish(std::move(*loan)));
  ASSERT_TRUE(waiter.wait_for_line("got 0", kLine)) << waiter.output();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 100ms);
  EXPECT_EQ(waiter.wait(kLine), 0);
}

TEST_F(TopicProcessTest, AParkedBlockPublisherProcessWakesWithin100msOfAReceive) {
  auto sub = must(TopicSubscriber::create("t", params(4, 1, 64), TopicOverflow::Block));
  auto raw = must(open_topic("t"));
  const auto v = topic::view(raw);
  ASSERT_TRUE(v);
  {
    auto first = peer({"block-pub", "t"});  // fills the queue (depth 1)
    ASSERT_TRUE(first.wait_for_line("published", kLine)) << first.output();
    EXPECT_EQ(first.wait(kLine), 0);
  }
  auto blocked = peer({"block-pub", "t"});
  ASSERT_TRUE(blocked.wait_for_line("ready", kLine));
  ASSERT_TRUE(wait_parked(v->control->waiters.publisher_parked));
  std::this_thread::sleep_for(20ms);
  const auto t0 = std::chrono::steady_clock::now();
  auto s = must(sub.try_receive());
  ASSERT_TRUE(s);
  ASSERT_TRUE(blocked.wait_for_line("published", kLine)) << blocked.output();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 100ms);
  EXPECT_EQ(blocked.wait(kLine), 0);
}

TEST_F(TopicProcessTest, APublisherProcessWaitingForAChunkWakesWithin100msOfARelease) {
  auto sub = must(TopicSubscriber::create("t", params(1, 1, 64), TopicOverflow::DropOldest));
  auto raw = must(open_topic("t"));
  const auto v = topic::view(raw);
  ASSERT_TRUE(v);
  {
    auto first = peer({"block-pub", "t"});  // its one chunk ends in our queue
    ASSERT_TRUE(first.wait_for_line("published", kLine)) << first.output();
    EXPECT_EQ(first.wait(kLine), 0);
  }
  auto s = must(sub.try_receive());
  ASSERT_TRUE(s);
  auto waiting = peer({"loan-pub", "t"});
  ASSERT_TRUE(waiting.wait_for_line("ready", kLine));
  ASSERT_TRUE(wait_parked(v->control->waiters.publisher_parked));
  std::this_thread::sleep_for(20ms);
  const auto t0 = std::chrono::steady_clock::now();
  s->release();
  ASSERT_TRUE(waiting.wait_for_line("loaned", kLine)) << waiting.output();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 100ms);
  EXPECT_EQ(waiting.wait(kLine), 0);
}

TEST_F(TopicShmctlTest, InspectShowsEachSubscriberAndVerifyIsClean) {
  auto pub = must(TopicPublisher::create("t", params(8, 2, 64)));
  auto sub = must(TopicSubscriber::open("t", TopicOverflow::DropOldest));
  ASSERT_NO_FATAL_FAILURE(publish_samples(pub, 3));
  Subprocess inspect({test::bin_path("shmctl"), "inspect", "t", "--json"});
  EXPECT_EQ(inspect.wait(kLine), 0) << inspect.output();
  const std::string& out = inspect.output();
  for (const char* field : {"\"kind\": \"topic\"", "\"overflow\": \"drop_oldest\"", "\"missed\": 1",
                            "\"queue\": 2", "\"free_chunks\": 6"})
    EXPECT_NE(out.find(field), std::string::npos) << field << " not in\n" << out;
  Subprocess verify({test::bin_path("shmctl"), "verify", "t"});
  EXPECT_EQ(verify.wait(kLine), 0) << verify.output();
}

// `shmctl events` merges the topic's own events (a dead subscriber's record
// dropped) with the segment's (attach, detach, ...), their source "topic".
TEST_F(TopicShmctlTest, EventsShowsADeadSubscribersRecordDropped) {
  auto pub = must(TopicPublisher::create("t", params(8, 4, 64)));
  // A subscriber process holding 1 of 3 samples (2 queued), killed.
  ASSERT_NO_FATAL_FAILURE(kill_a_holding_subscriber(pub));
  auto late = must(TopicSubscriber::open("t", TopicOverflow::DropOldest));  // its attach repairs
  Subprocess events({test::bin_path("shmctl"), "events", "t"});
  EXPECT_EQ(events.wait(kLine), 0) << events.output();
  const std::string& out = events.output();
  EXPECT_NE(out.find("subscriber_gone"), std::string::npos) << out;
  EXPECT_NE(out.find(fmt::format("key={} count=3", kExclusiveSlots)), std::string::npos) << out;
  EXPECT_NE(out.find("topic"), std::string::npos) << out;
}

}  // namespace
}  // namespace shm::topic_process_test
