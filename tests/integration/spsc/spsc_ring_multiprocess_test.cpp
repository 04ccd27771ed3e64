// SpscRing across real processes: every peer is a separate executable
// (tests/helpers/spsc/ring_peer.cpp) started with fork+exec and a deadline.
#include "common/ring_record.hpp"
#include "common/scale.hpp"
#include "common/subprocess.hpp"
#include "common/temp_root.hpp"
#include "shm/segment/kind.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>

namespace shm {
namespace {

using namespace std::chrono_literals;
using test::Subprocess;
using ::testing::HasSubstr;

Subprocess peer(std::initializer_list<std::string> args) {
  std::vector<std::string> argv{test::helper_path("ring_peer")};
  argv.insert(argv.end(), args);
  return Subprocess(argv);
}

// The sequence number of the first unreleased record, read without consuming.
// The ring may be empty for a moment (the consumer had caught up with a slow
// producer); the producer is still running, so wait for the next record.
std::uint64_t seq_at_head(const std::string& name) {
  auto seg = open_ring(name, {}, {.read_only = true});
  EXPECT_TRUE(seg);
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  for (;;) {
    const auto recs = kSpscRingDescriptor.dump(*seg, 1);
    if (!recs.empty()) {
      std::uint64_t seq = 0;
      std::memcpy(&seq, recs[0].data(), sizeof seq);
      return seq;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "ring stayed empty for 60 s after the consumer was killed";
      return 0;
    }
    std::this_thread::sleep_for(1ms);
  }
}

// Reads `n` records with a 10 s deadline each, releasing each; returns their
// sequence numbers (an empty optional's place holds UINT64_MAX).
std::vector<std::uint64_t> read_seqs(RingConsumer& c, std::size_t n, std::size_t min,
                                     std::size_t max) {
  std::vector<std::uint64_t> out;
  for (std::size_t i = 0; i < n; ++i) {
    auto r = c.peek(10s);
    if (!r || !*r) {
      out.push_back(UINT64_MAX);
      break;
    }
    auto seq = test::ring_record::check(**r, min, max);
    out.push_back(seq ? *seq : UINT64_MAX - 1);
    c.release();
  }
  return out;
}

std::vector<std::uint64_t> iota(std::uint64_t from, std::uint64_t to) {
  std::vector<std::uint64_t> v;
  for (std::uint64_t i = from; i < to; ++i) v.push_back(i);
  return v;
}

class SpscRingMultiProcess : public ::testing::Test {
 protected:
  test::TempRoot root_;
};

TEST_F(SpscRingMultiProcess, TenMillionMixedRecordsArriveIntactInOrder) {
  const std::string count = std::to_string(test::scaled(10'000'000));
  ASSERT_TRUE(create_ring("big", {.capacity_bytes = 1 << 20}));
  auto consumer = peer({"consume", "big", count, "--start", "0", "--min", "1", "--max", "4096"});
  auto producer = peer({"produce", "big", count, "--min", "1", "--max", "4096"});
  EXPECT_EQ(producer.wait(600s), 0) << producer.output();
  EXPECT_EQ(consumer.wait(600s), 0) << consumer.output();
  EXPECT_THAT(consumer.output(),
              HasSubstr("OK " + count + " " + std::to_string(std::stoull(count) - 1)));
  auto seg = open_ring("big");
  ASSERT_TRUE(seg);
  EXPECT_TRUE(kSpscRingDescriptor.verify(*seg).empty());
}

TEST_F(SpscRingMultiProcess, KilledConsumerIsReplacedAndStreamContinuesWithNothingLost) {
  const std::uint64_t total = test::scaled(400'000);
  ASSERT_TRUE(create_ring("k", {.capacity_bytes = 1 << 16}));
  auto producer = peer({"produce", "k", std::to_string(total), "--min", "16", "--max", "512"});
  auto first = peer({"consume", "k", std::to_string(total), "--min", "16", "--max", "512",
                     "--report-every", "1000"});
  const std::uint64_t kill_at = total / 4 / 1000 * 1000 - 1;
  ASSERT_TRUE(first.wait_for_line("REL " + std::to_string(kill_at), 120s)) << first.output();
  first.kill(SIGKILL);
  EXPECT_EQ(first.wait(10s), 128 + SIGKILL);
  // Whatever the dead consumer had not released is still in the ring.
  const std::uint64_t head_seq = seq_at_head("k");
  EXPECT_GT(head_seq, kill_at);
  const std::uint64_t rest = total - head_seq;
  auto second = peer({"consume", "k", std::to_string(rest), "--min", "16", "--max", "512"});
  EXPECT_EQ(second.wait(300s), 0) << second.output();
  EXPECT_THAT(second.output(), HasSubstr("FIRST " + std::to_string(head_seq)));
  EXPECT_THAT(second.output(),
              HasSubstr("OK " + std::to_string(rest) + " " + std::to_string(total - 1)));
  EXPECT_EQ(producer.wait(60s), 0) << producer.output();
  auto seg = open_ring("k");
  ASSERT_TRUE(seg);
  EXPECT_EQ(seg->header().counters.takeovers.load(), 1u);
}

TEST_F(SpscRingMultiProcess, ConsumerKilledBetweenPeekAndReleaseRedeliversThatRecord) {
  ASSERT_TRUE(create_ring("p", {.capacity_bytes = 1 << 16}));
  auto producer = peer({"produce", "p", "100", "--min", "16", "--max", "64"});
  EXPECT_EQ(producer.wait(30s), 0);
  auto first = peer({"consume-then-hang", "p", "40", "--min", "16", "--max", "64"});
  ASSERT_TRUE(first.wait_for_line("PEEKED 40", 30s)) << first.output();
  first.kill(SIGKILL);
  (void)first.wait(10s);
  auto second = peer({"consume", "p", "60", "--min", "16", "--max", "64"});
  EXPECT_EQ(second.wait(30s), 0) << second.output();
  EXPECT_THAT(second.output(), HasSubstr("FIRST 40"));
  EXPECT_THAT(second.output(), HasSubstr("OK 60 99"));
}

TEST_F(SpscRingMultiProcess, ProducerKilledBetweenReserveAndCommitNeverExposesPartialRecord) {
  ASSERT_TRUE(create_ring("half", {.capacity_bytes = 1 << 16}));
  auto producer = peer({"produce-then-hang", "half", "10", "1000", "--min", "16", "--max", "1024"});
  ASSERT_TRUE(producer.wait_for_line("RESERVED", 30s)) << producer.output();
  producer.kill(SIGKILL);
  (void)producer.wait(10s);
  auto consumer = RingConsumer::open("half");
  ASSERT_TRUE(consumer);
  for (std::uint64_t i = 0; i < 10; ++i) {
    auto r = consumer->try_peek();
    ASSERT_TRUE(r && *r) << i;
    auto seq = test::ring_record::check(**r, 16, 1024);
    ASSERT_TRUE(seq) << seq.error();
    EXPECT_EQ(*seq, i);
    consumer->release();
  }
  auto none = consumer->try_peek();
  ASSERT_TRUE(none);
  EXPECT_FALSE(*none) << "the dead producer's reservation became visible";
  // A new producer takes the dead one's slot and overwrites the abandoned bytes.
  auto next = peer({"produce", "half", "5", "--start", "10", "--min", "16", "--max", "1024"});
  EXPECT_EQ(next.wait(30s), 0) << next.output();
  for (std::uint64_t i = 10; i < 15; ++i) {
    auto r = consumer->peek(10s);
    ASSERT_TRUE(r && *r) << i;
    auto seq = test::ring_record::check(**r, 16, 1024);
    ASSERT_TRUE(seq) << seq.error();
    EXPECT_EQ(*seq, i);
    consumer->release();
  }
}

// kill -9 inside commit(), before the batch's first header is stored: none
// of the batch is visible, and a new producer overwrites it. The capacity is
// small so that the batch wraps (its first record is a padding record).
TEST_F(SpscRingMultiProcess, ProducerKilledBeforeTheFirstHeaderExposesNoneOfTheBatch) {
  ASSERT_TRUE(create_ring("cb", {.capacity_bytes = 1024}));
  auto consumer = RingConsumer::open("cb");
  ASSERT_TRUE(consumer);
  // 11 records of 88 bytes end at offset 968: the batch starts with padding.
  auto producer = peer({"crash-commit", "cb", "11", "0", "3", "--min", "80", "--max", "80"});
  EXPECT_EQ(read_seqs(*consumer, 11, 80, 80), iota(0, 11));
  ASSERT_TRUE(producer.wait_for_line("AT 0", 30s)) << producer.output();
  producer.kill(SIGKILL);
  (void)producer.wait(10s);
  auto none = consumer->try_peek();
  ASSERT_TRUE(none);
  EXPECT_FALSE(*none) << "a record of the unpublished batch became visible";
  auto next = peer({"produce", "cb", "20", "--start", "11", "--min", "80", "--max", "80"});
  EXPECT_EQ(read_seqs(*consumer, 20, 80, 80), iota(11, 31));
  EXPECT_EQ(next.wait(30s), 0) << next.output();
  auto seg = open_ring("cb");
  ASSERT_TRUE(seg);
  EXPECT_TRUE(kSpscRingDescriptor.verify(*seg).empty());
}

// kill -9 inside commit(), after the first header's store and before the
// `tail` hint's: the batch is published; a new producer finds its end by
// walking the chain (starting at the stale hint would overwrite it).
TEST_F(SpscRingMultiProcess, ProducerKilledAfterPublishingKeepsTheBatchAndTheNextContinuesAfterIt) {
  ASSERT_TRUE(create_ring("ca", {.capacity_bytes = 4096}));
  auto producer = peer({"crash-commit", "ca", "5", "1", "4", "--min", "16", "--max", "200"});
  ASSERT_TRUE(producer.wait_for_line("AT 1", 30s)) << producer.output();
  producer.kill(SIGKILL);
  (void)producer.wait(10s);
  auto next = peer({"produce", "ca", "6", "--start", "9", "--min", "16", "--max", "200"});
  EXPECT_EQ(next.wait(30s), 0) << next.output();
  auto consumer = RingConsumer::open("ca");
  ASSERT_TRUE(consumer);
  EXPECT_EQ(read_seqs(*consumer, 15, 16, 200), iota(0, 15));
  auto none = consumer->try_peek();
  ASSERT_TRUE(none);
  EXPECT_FALSE(*none);
}

// kill -9 inside release(): before head's store the batch is delivered again
// (at-least-once); after it, never again (the counter may lag).
TEST_F(SpscRingMultiProcess, ConsumerKilledWhileReturningSpaceRedeliversOnlyWhatHeadKept) {
  for (const int point : {2, 3}) {
    SCOPED_TRACE(point);
    const std::string name = "cr" + std::to_string(point);
    auto producer = RingProducer::create(name, {.capacity_bytes = 4096});
    ASSERT_TRUE(producer);
    for (std::uint64_t seq = 0; seq < 20; ++seq) {
      std::vector<std::byte> rec(test::ring_record::size_for(seq, 16, 100));
      test::ring_record::fill(seq, rec);
      ASSERT_TRUE(*producer->try_push(rec));
    }
    auto first = peer(
        {"crash-release", name, "6", std::to_string(point), "5", "--min", "16", "--max", "100"});
    ASSERT_TRUE(first.wait_for_line("AT " + std::to_string(point), 30s)) << first.output();
    first.kill(SIGKILL);
    (void)first.wait(10s);
    auto second = RingConsumer::open(name);
    ASSERT_TRUE(second) << second.error().what();
    const std::uint64_t from = point == 2 ? 6 : 11;
    EXPECT_EQ(read_seqs(*second, 20 - from, 16, 100), iota(from, 20));
  }
}

TEST_F(SpscRingMultiProcess, SecondLiveProducerGetsRoleTakenUntilTheFirstDies) {
  ASSERT_TRUE(create_ring("role", {.capacity_bytes = 4096}));
  auto holder = peer({"hold-producer", "role"});
  ASSERT_TRUE(holder.wait_for_line("ATTACHED", 30s));
  auto mine = RingProducer::open("role");
  ASSERT_FALSE(mine);
  EXPECT_EQ(mine.error().code, Errc::RoleTaken);
  EXPECT_THAT(mine.error().message, HasSubstr(std::to_string(holder.pid())));
  EXPECT_THAT(mine.error().message, HasSubstr("test_ring_peer"));
  holder.kill(SIGKILL);
  (void)holder.wait(10s);
  auto after = RingProducer::open("role");
  ASSERT_TRUE(after) << after.error().what();
  EXPECT_TRUE(after->attachment().took_over());
}

TEST_F(SpscRingMultiProcess, BlockedConsumerWakesForProducerInAnotherProcess) {
  auto consumer = RingConsumer::create("wake", {.capacity_bytes = 4096});
  ASSERT_TRUE(consumer);
  auto producer = peer({"push-after", "wake", "200", "--min", "16", "--max", "64"});
  auto r = consumer->peek(30s);
  ASSERT_TRUE(r) << r.error().what();
  ASSERT_TRUE(*r) << "timed out: the futex wake did not cross the process boundary";
  EXPECT_EQ(*test::ring_record::check(**r, 16, 64), 0u);
  EXPECT_EQ(producer.wait(10s), 0);
}

}  // namespace
}  // namespace shm
