// Every topic operation killed at every store it makes to the mapping (N = 1
// ... all, a counting hook: common/store_crash.hpp), in a forked child that
// owns the handle: loan and publish (the child is the publisher), receive
// and release (the child is a subscriber). After each kill the next attach
// repairs, and then: the chunk accounting recomputed from the records
// matches the stored references and the free stack exactly (no chunk leaked,
// none freed twice), and the parent's own subscribers see the operation
// before or after, with every sample either received intact or counted
// missed.
#include "common/must.hpp"
#include "common/store_crash.hpp"
#include "common/temp_root.hpp"
#include "common/topic_audit.hpp"
#include "shm/testing/store_crash.hpp"
#include "shm/topic/topic.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace shm::topic_store_crash_test {
namespace {

constexpr const char* kName = "t";

TopicParams params() {
  TopicParams p;
  p.max_sample_bytes = 64;
  p.chunks = 8;
  p.queue_depth = 2;
  p.history = 1;
  p.max_held = 2;
  return p;
}

using test::must;

void publish(TopicPublisher& pub, std::uint64_t seq) {
  auto loan = must(pub.try_loan(8));
  if (!loan) throw std::runtime_error("pool empty");
  std::memcpy(loan->bytes().data(), &seq, 8);
  if (must(pub.try_publish(std::move(*loan))).status != PublishStatus::Published)
    throw std::runtime_error("publish refused");
}

// Runs `attach` with the store countdown paused: the kill lands in the
// operation under test, not in the handle's attach.
template <class F>
auto paused(F&& attach) {
  const std::uint64_t left = test_hooks::store_crash_remaining();
  test_hooks::arm_store_crash(0);
  auto r = attach();
  test_hooks::arm_store_crash(left);
  return r;
}

// The parent's side of every run: a fresh topic with two samples published
// (seq 0 and 1), a DropOldest subscriber holding both queued (full), a Block
// subscriber that received and released seq 0 (one queued).
struct World {
  std::optional<TopicSubscriber> drop, block;
  std::optional<TopicPublisher> pub;  // kept only by the subscriber-side runs
};

void build(World& w, bool keep_publisher) {
  w = World{};
  (void)Segment::unlink(kName);
  auto pub = must(TopicPublisher::create(kName, params()));
  w.drop = must(TopicSubscriber::open(kName, TopicOverflow::DropOldest));
  w.block = must(TopicSubscriber::open(kName, TopicOverflow::Block));
  publish(pub, 0);
  publish(pub, 1);
  {
    auto s = must(w.block->try_receive());
    if (!s) throw std::runtime_error("block subscriber got nothing");
  }
  if (keep_publisher) w.pub = std::move(pub);
}

// Receives what `sub` has queued: sequence numbers, each payload checked.
std::vector<std::uint64_t> drain(TopicSubscriber& sub) {
  std::vector<std::uint64_t> seqs;
  for (;;) {
    auto s = must(sub.try_receive());
    if (!s) return seqs;
    std::uint64_t inside = 0;
    std::memcpy(&inside, s->bytes().data(), 8);
    EXPECT_EQ(inside, s->seq()) << "payload of sample " << s->seq();
    seqs.push_back(s->seq());
  }
}

void expect_clean(const Segment& seg, std::uint64_t n) {
  const test::TopicAudit a = test::audit_topic(seg);
  EXPECT_EQ(a.error, "") << "killed at store " << n;
  EXPECT_EQ(a.free + a.referenced, params().chunks) << "killed at store " << n;
}

class TopicStoreCrashTest : public ::testing::Test {
 protected:
  test::TempRoot root;
  World w;
};

TEST_F(TopicStoreCrashTest, APublisherKilledInsideLoanLeaksNoChunk) {
  const auto run = test::kill_at_every_store(
      [&] { build(w, false); },
      [] {
        auto pub = paused([] { return TopicPublisher::open(kName); });
        if (!pub) return false;
        auto loan = pub->try_loan(8);
        return loan && loan->has_value();
      },
      [&](std::uint64_t n) {
        auto pub = must(TopicPublisher::open(kName));  // takes over: repairs
        EXPECT_EQ(pub.incarnation(), 3u) << "1: the setup's, 2: the killed child's";
        auto seg = must(open_topic(kName));
        expect_clean(seg, n);
        // Loaned or not, the chunk is back: seq 1 sits in history and both
        // queues, seq 0 in the DropOldest queue: 2 chunks referenced.
        EXPECT_EQ(pub.snapshot().free_chunks, 6u) << "killed at store " << n;
        EXPECT_EQ(drain(*w.drop), (std::vector<std::uint64_t>{0, 1}));
      });
  EXPECT_EQ(run.error, "");
  EXPECT_GE(run.kills, 3u);
}

TEST_F(TopicStoreCrashTest, APublisherKilledInsidePublishLeavesEachSubscriberBeforeOrAfter) {
  const auto run = test::kill_at_every_store(
      [&] { build(w, false); },
      [] {
        auto pub = paused([] { return TopicPublisher::open(kName); });
        if (!pub) return false;
        auto loan = paused([&] { return pub->try_loan(8); });
        if (!loan || !*loan) return false;
        const std::uint64_t seq = 2;
        std::memcpy((*loan)->bytes().data(), &seq, 8);
        auto o = pub->try_publish(std::move(**loan));
        return o && o->status == PublishStatus::Published;
      },
      [&](std::uint64_t n) {
        auto pub = must(TopicPublisher::open(kName));
        auto seg = must(open_topic(kName));
        expect_clean(seg, n);
        // DropOldest (held 0, 1; full): before [0, 1]; after [1, 2] with one
        // missed; killed between its drop and its push: [1], one missed.
        const std::vector<std::uint64_t> d = drain(*w.drop);
        const std::uint64_t missed = w.drop->missed();
        EXPECT_EQ(d.size() + missed, d.empty() || d.back() != 2 ? 2u : 3u)
            << "killed at store " << n << ": a sample neither received nor counted missed";
        for (std::size_t i = 1; i < d.size(); ++i) EXPECT_LT(d[i - 1], d[i]);
        // Block (queued 1): before [1], after [1, 2].
        const std::vector<std::uint64_t> b = drain(*w.block);
        EXPECT_TRUE(b == (std::vector<std::uint64_t>{1}) || b == (std::vector<std::uint64_t>{1, 2}))
            << "killed at store " << n;
        EXPECT_EQ(w.block->missed(), 0u);
        // Whatever the kill left, the next publish works and reaches both.
        publish(pub, pub.snapshot().next_seq);
        EXPECT_EQ(drain(*w.block).size(), 1u);
        expect_clean(seg, n);
      });
  EXPECT_EQ(run.error, "");
  EXPECT_GE(run.kills, 8u);
}

TEST_F(TopicStoreCrashTest, ASubscriberKilledInsideReceiveLeaksNoChunk) {
  const auto run = test::kill_at_every_store(
      [&] { build(w, true); },
      [] {
        // Joins late: history gives it seq 1.
        auto sub = paused([] { return TopicSubscriber::open(kName, TopicOverflow::Block); });
        if (!sub) return false;
        auto s = sub->try_receive();
        if (!s || !*s) return false;
        paused([&] {  // the release has its own test below
          (*s)->release();
          return 0;
        });
        return true;
      },
      [&](std::uint64_t n) {
        auto next = must(TopicSubscriber::open(kName, TopicOverflow::Block));  // repairs
        auto seg = must(open_topic(kName));
        expect_clean(seg, n);
        EXPECT_EQ(w.pub->snapshot().subscribers, 3u) << "the dead one is gone";
        EXPECT_EQ(drain(next), (std::vector<std::uint64_t>{1}));
        EXPECT_EQ(drain(*w.drop), (std::vector<std::uint64_t>{0, 1}));
      });
  EXPECT_EQ(run.error, "");
  EXPECT_GE(run.kills, 2u);
}

TEST_F(TopicStoreCrashTest, ASubscriberKilledInsideReleaseLeaksNoChunk) {
  const auto run = test::kill_at_every_store(
      [&] { build(w, true); },
      [] {
        auto sub = paused([] { return TopicSubscriber::open(kName, TopicOverflow::Block); });
        if (!sub) return false;
        auto s = paused([&] { return sub->try_receive(); });
        if (!s || !*s) return false;
        (*s)->release();
        return true;
      },
      [&](std::uint64_t n) {
        auto next = must(TopicSubscriber::open(kName, TopicOverflow::Block));
        auto seg = must(open_topic(kName));
        expect_clean(seg, n);
        // Seq 1: history, both parent queues and `next`; seq 0: the DropOldest queue.
        EXPECT_EQ(w.pub->snapshot().free_chunks, 6u) << "killed at store " << n;
      });
  EXPECT_EQ(run.error, "");
  EXPECT_GE(run.kills, 2u);
}

}  // namespace
}  // namespace shm::topic_store_crash_test
