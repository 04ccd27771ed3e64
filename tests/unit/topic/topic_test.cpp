// TopicPublisher / TopicSubscriber in one process: every subscriber gets
// every sample, zero copy, chunk accounting, DropOldest and Block, the held
// limit, history for late joiners, parameters and kind checks, wakes.
#include "shm/topic/topic.hpp"
#include "common/must.hpp"
#include "common/node_fields.hpp"
#include "common/temp_root.hpp"
#include "common/text.hpp"
#include "common/topic_audit.hpp"
#include "shm/mpmc/mpmc_ring.hpp"
#include "shm/segment/kind.hpp"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace shm::topic_test {
namespace {

using namespace std::chrono_literals;
using test::expect_error;

TopicParams params(std::uint64_t chunks = 8, std::uint64_t depth = 4, std::uint64_t history = 0,
                   std::uint64_t max_held = 2) {
  TopicParams p;
  p.max_sample_bytes = 256;
  p.chunks = chunks;
  p.queue_depth = depth;
  p.history = history;
  p.max_held = max_held;
  return p;
}

using test::must;

// Publishes "s<seq>" and returns its outcome.
PublishOutcome send(TopicPublisher& pub, const std::string& text) {
  auto loan = must(pub.try_loan(text.size()));
  if (!loan) throw std::runtime_error("pool empty");
  std::memcpy(loan->bytes().data(), text.data(), text.size());
  return must(pub.try_publish(std::move(*loan)));
}

std::string text(const Sample& s) {
  return test::str(s.bytes());
}

class TopicTest : public ::testing::Test {
 protected:
  test::TempRoot root;
};

TEST_F(TopicTest, EverySubscriberReceivesEverySampleInOrder) {
  auto pub = must(TopicPublisher::create("t", params()));
  auto a = must(TopicSubscriber::open("t", TopicOverflow::Block));
  auto b = must(TopicSubscriber::open("t", TopicOverflow::DropOldest));
  for (int i = 0; i < 3; ++i) {
    const PublishOutcome o = send(pub, "sample " + std::to_string(i));
    EXPECT_EQ(o.status, PublishStatus::Published);
    EXPECT_EQ(o.seq, static_cast<std::uint64_t>(i));
    EXPECT_EQ(o.subscribers, 2u);
  }
  for (auto* s : {&a, &b}) {
    for (int i = 0; i < 3; ++i) {
      auto got = must(s->try_receive());
      ASSERT_TRUE(got);
      EXPECT_EQ(text(*got), "sample " + std::to_string(i));
      EXPECT_EQ(got->seq(), static_cast<std::uint64_t>(i));
      EXPECT_EQ(got->incarnation(), 1u);
    }
    EXPECT_FALSE(must(s->try_receive()));
    EXPECT_EQ(s->missed(), 0u);
  }
}

TEST_F(TopicTest, ASampleIsOneChunkSharedByItsHoldersAndComesBackAfterTheLast) {
  auto pub = must(TopicPublisher::create("t", params(4)));
  auto a = must(TopicSubscriber::open("t", TopicOverflow::Block));
  auto b = must(TopicSubscriber::open("t", TopicOverflow::Block));
  auto loan = must(pub.try_loan(5));
  ASSERT_TRUE(loan);
  EXPECT_EQ(pub.snapshot().free_chunks, 3u);
  std::memcpy(loan->bytes().data(), "hello", 5);
  (void)must(pub.try_publish(std::move(*loan)));
  EXPECT_FALSE(*loan);  // published: emptied
  auto sa = must(a.try_receive());
  auto sb = must(b.try_receive());
  ASSERT_TRUE(sa && sb);
  auto seg = must(open_topic("t"));
  EXPECT_EQ(text(*sa), "hello");
  EXPECT_EQ(text(*sb), "hello");
  EXPECT_EQ(pub.snapshot().free_chunks, 3u);
  sa->release();
  EXPECT_EQ(pub.snapshot().free_chunks, 3u) << "b still holds it";
  sb->release();
  EXPECT_EQ(pub.snapshot().free_chunks, 4u);
  EXPECT_EQ(test::audit_topic(seg).error, "");
}

TEST_F(TopicTest, DropOldestLosesTheOldestAndCountsEveryMissedSample) {
  auto pub = must(TopicPublisher::create("t", params(8, 2)));
  auto slow = must(TopicSubscriber::open("t", TopicOverflow::DropOldest));
  std::uint32_t dropped = 0;
  for (int i = 0; i < 5; ++i) dropped += send(pub, std::to_string(i)).dropped;
  EXPECT_EQ(dropped, 3u);
  EXPECT_EQ(slow.missed(), 3u);
  auto s3 = must(slow.try_receive());
  ASSERT_TRUE(s3);
  EXPECT_EQ(s3->seq(), 3u);
  auto s4 = must(slow.try_receive());
  ASSERT_TRUE(s4);
  EXPECT_EQ(s4->seq(), 4u);
  EXPECT_EQ(slow.missed(), 3u);
  EXPECT_EQ(slow.snapshot().missed, 3u);
  EXPECT_EQ(slow.snapshot().received, 2u);
  EXPECT_EQ(pub.snapshot().dropped, 3u);
}

TEST_F(TopicTest, AFullBlockSubscriberMakesTryPublishFullAndChangesNothing) {
  auto pub = must(TopicPublisher::create("t", params(8, 2)));
  auto block = must(TopicSubscriber::open("t", TopicOverflow::Block));
  auto drop = must(TopicSubscriber::open("t", TopicOverflow::DropOldest));
  send(pub, "0");
  send(pub, "1");
  auto loan = must(pub.try_loan(1));
  ASSERT_TRUE(loan);
  const PublishOutcome full = must(pub.try_publish(std::move(*loan)));
  EXPECT_EQ(full.status, PublishStatus::Full);
  EXPECT_TRUE(*loan) << "the caller keeps the sample";
  EXPECT_EQ(drop.missed(), 0u) << "nothing changed for the other subscriber";
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(must(pub.publish(std::move(*loan), 30ms)).status, PublishStatus::Full);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 30ms);
  {
    auto s = must(block.try_receive());
    ASSERT_TRUE(s);
    EXPECT_EQ(s->seq(), 0u);
  }
  const PublishOutcome ok = must(pub.try_publish(std::move(*loan)));
  EXPECT_EQ(ok.status, PublishStatus::Published);
  EXPECT_EQ(ok.seq, 2u);
}

TEST_F(TopicTest, ABlockedPublishWakesWhenTheSubscriberReceives) {
  auto pub = must(TopicPublisher::create("t", params(8, 1)));
  auto block = must(TopicSubscriber::open("t", TopicOverflow::Block));
  send(pub, "0");
  std::thread t([&] {
    std::this_thread::sleep_for(50ms);
    auto s = must(block.try_receive());
    EXPECT_TRUE(s);
  });
  auto loan = must(pub.try_loan(1));
  ASSERT_TRUE(loan);
  const PublishOutcome o = must(pub.publish(std::move(*loan), 10s));
  t.join();
  EXPECT_EQ(o.status, PublishStatus::Published);
}

TEST_F(TopicTest, ReceiveWaitsForAPublishAndTimesOutWithNothing) {
  auto pub = must(TopicPublisher::create("t", params()));
  auto sub = must(TopicSubscriber::open("t", TopicOverflow::DropOldest));
  EXPECT_FALSE(must(sub.receive(20ms)));
  std::thread t([&] {
    std::this_thread::sleep_for(50ms);
    send(pub, "late");
  });
  auto s = must(sub.receive(10s));
  t.join();
  ASSERT_TRUE(s);
  EXPECT_EQ(text(*s), "late");
}

TEST_F(TopicTest, ASubscriberHoldingMaxHeldSamplesGetsHeldLimit) {
  auto pub = must(TopicPublisher::create("t", params(8, 4, 0, 2)));
  auto sub = must(TopicSubscriber::open("t", TopicOverflow::DropOldest));
  for (int i = 0; i < 3; ++i) send(pub, std::to_string(i));
  auto s0 = must(sub.try_receive());
  auto s1 = must(sub.try_receive());
  ASSERT_TRUE(s0 && s1);
  expect_error(sub.try_receive(), Errc::HeldLimit, "max_held");
  expect_error(sub.receive(10ms), Errc::HeldLimit, "max_held");
  s0->release();
  auto s2 = must(sub.try_receive());
  ASSERT_TRUE(s2);
  EXPECT_EQ(s2->seq(), 2u);
}

TEST_F(TopicTest, ALateJoinerReceivesTheLastHistorySamples) {
  auto pub = must(TopicPublisher::create("t", params(8, 4, 2, 3)));
  for (int i = 0; i < 5; ++i) send(pub, std::to_string(i));
  EXPECT_EQ(test::audit_topic(must(open_topic("t"))).referenced, 2u) << "history keeps two";
  auto late = must(TopicSubscriber::open("t", TopicOverflow::DropOldest));
  auto a = must(late.try_receive());
  auto b = must(late.try_receive());
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->seq(), 3u);
  EXPECT_EQ(b->seq(), 4u);
  EXPECT_EQ(text(*b), "4");
  EXPECT_FALSE(must(late.try_receive()));
  EXPECT_EQ(late.missed(), 0u);
}

TEST_F(TopicTest, LoansAreBoundedBySizeCountAndPool) {
  auto pub = must(TopicPublisher::create("t", params(2)));
  expect_error(pub.try_loan(257), Errc::TooLarge, "max_sample_bytes is 256");
  auto l1 = must(pub.try_loan(1));
  auto l2 = must(pub.try_loan(256));
  ASSERT_TRUE(l1 && l2);
  EXPECT_FALSE(must(pub.try_loan(1))) << "the pool is empty: back-pressure, not an error";
  std::thread t([&] {
    std::this_thread::sleep_for(50ms);
    l1->reset();
  });
  auto l3 = must(pub.loan(1, 10s));
  t.join();
  EXPECT_TRUE(l3) << "a dropped loan returns its chunk and wakes the waiting loan";
}

TEST_F(TopicTest, PublishersAreExclusiveAndEachAttachIsANewIncarnation) {
  auto pub = must(TopicPublisher::create("t", params()));
  expect_error(TopicPublisher::open("t"), Errc::RoleTaken, "publisher");
  auto sub = must(TopicSubscriber::open("t", TopicOverflow::DropOldest));
  send(pub, "a");
  pub = TopicPublisher{};
  auto next = must(TopicPublisher::open("t"));
  EXPECT_EQ(next.incarnation(), 2u);
  send(next, "b");
  auto a = must(sub.try_receive());
  auto b = must(sub.try_receive());
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->incarnation(), 1u);
  EXPECT_EQ(b->incarnation(), 2u);
  EXPECT_EQ(b->seq(), 1u) << "sequence numbers continue across incarnations";
}

TEST_F(TopicTest, WrongKindsAndParametersAreTypedErrors) {
  auto ring = must(create_mpmc_ring("ring", MpmcParams{4, 8}));
  expect_error(TopicSubscriber::open("ring", TopicOverflow::Block), Errc::KindMismatch, "topic");
  auto seg = must(create_topic("t", params()));
  expect_error(MpmcRing::open("t"), Errc::KindMismatch, "topic");
  TopicParams other = params();
  other.chunks = 16;
  expect_error(TopicSubscriber::open("t", TopicOverflow::Block, other), Errc::ParamMismatch,
               "chunks: segment has 8, caller expects 16");
  TopicParams bad = params();
  bad.history = 5;
  expect_error(create_topic("u", bad), Errc::InvalidArgument, "history 5");
  bad = params();
  bad.max_sample_bytes = 0;
  expect_error(create_topic("u", bad), Errc::InvalidArgument, "max_sample_bytes 0");
  expect_error(TopicSubscriber::attach(must(open_topic("t")), static_cast<TopicOverflow>(9)),
               Errc::InvalidArgument, "overflow");
}

TEST_F(TopicTest, ADetachedSubscriberGivesItsQueuedChunksBack) {
  auto pub = must(TopicPublisher::create("t", params(4, 4)));
  {
    auto sub = must(TopicSubscriber::open("t", TopicOverflow::Block));
    send(pub, "a");
    send(pub, "b");
    EXPECT_EQ(pub.snapshot().free_chunks, 2u);
    EXPECT_EQ(pub.snapshot().subscribers, 1u);
  }
  EXPECT_EQ(pub.snapshot().free_chunks, 4u);
  EXPECT_EQ(pub.snapshot().subscribers, 0u);
  EXPECT_EQ(send(pub, "c").subscribers, 0u);
  EXPECT_EQ(pub.snapshot().free_chunks, 4u) << "nobody to hold it";
}

TEST_F(TopicTest, DescribeShowsEachSubscribersQueueHeldMissedAndVerifyIsClean) {
  auto pub = must(TopicPublisher::create("t", params(8, 2)));
  auto sub = must(TopicSubscriber::open("t", TopicOverflow::DropOldest));
  for (int i = 0; i < 4; ++i) send(pub, std::to_string(i));
  auto held = must(sub.try_receive());
  auto seg = must(open_topic("t"));
  Node n;
  kTopicDescriptor.describe(seg, n);
  const Node* subs = n.find("subscribers");
  ASSERT_NE(subs, nullptr);
  ASSERT_EQ(subs->elements().size(), 1u);
  const Node& s = subs->elements()[0];
  EXPECT_EQ(test::u64(s, "queue"), 1u);
  EXPECT_EQ(test::u64(s, "held"), 1u);
  EXPECT_EQ(test::u64(s, "missed"), 2u);
  EXPECT_EQ(test::u64(s, "received"), 1u);
  EXPECT_EQ(test::u64(s, "lag"), 1u);
  EXPECT_TRUE(kTopicDescriptor.verify(seg).empty());
  EXPECT_EQ(find_kind(kTopicKind), &kTopicDescriptor);
  EXPECT_EQ(test::audit_topic(seg).error, "");
}

TEST_F(TopicTest, AForkedChildDroppingItsCopyOfASampleLeavesTheParentsSampleHeld) {
  auto pub = must(TopicPublisher::create("t", params(4)));
  auto sub = must(TopicSubscriber::open("t", TopicOverflow::DropOldest));
  send(pub, "mine");
  auto s = must(sub.try_receive());
  ASSERT_TRUE(s);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    { Sample copy = std::move(*s); }  // the child's copy goes: not the parent's sample
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_EQ(pub.snapshot().free_chunks, 3u) << "the parent still holds its sample";
  EXPECT_EQ(text(*s), "mine");
  s->release();
  EXPECT_EQ(pub.snapshot().free_chunks, 4u);
}

TEST_F(TopicTest, EnumsHaveNames) {
  EXPECT_EQ(to_string(TopicOverflow::DropOldest), "drop_oldest");
  EXPECT_EQ(to_string(TopicOverflow::Block), "block");
  EXPECT_EQ(to_string(PublishStatus::Published), "published");
  EXPECT_EQ(to_string(PublishStatus::Full), "full");
  EXPECT_EQ(to_string(Errc::HeldLimit), "HeldLimit");
}

}  // namespace
}  // namespace shm::topic_test
