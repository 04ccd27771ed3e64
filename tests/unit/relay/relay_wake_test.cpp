// The wake-up table of docs/relay.md, one test per row: a writer parked by
// Block, or a reader in wait(), with a 10 s timeout, must return within
// test::kWakeBound of the change that unblocks it, whichever call made it.
#include "common/temp_root.hpp"
#include "common/wake_probe.hpp"
#include "shm/relay/relay.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

namespace shm::relay_wake_test {
namespace {

using namespace std::chrono_literals;

std::vector<std::byte> value_of(std::size_t n, char c) {
  return std::vector<std::byte>(n, static_cast<std::byte>(c));
}

class RelayWakeTest : public ::testing::Test {
 protected:
  void make(PolicyId policy, Backpressure bp, std::uint32_t capacity, std::uint32_t value_bytes) {
    RelayConfig c;
    c.policy = policy;
    c.max_entries = capacity;
    c.value_bytes = value_bytes;
    c.backpressure = bp;
    auto r = RelayReader::create("wake", c);
    ASSERT_TRUE(r) << r.error().what();
    reader_.emplace(std::move(*r));
    for (auto* w : {&parked_, &other_}) {
      auto h = RelayWriter::open("wake");
      ASSERT_TRUE(h) << h.error().what();
      w->emplace(std::move(*h));
    }
  }
  void put(std::uint64_t key, const std::vector<std::byte>& v) {
    auto r = other_->write(key, v, 0ns);
    ASSERT_TRUE(r) << r.error().what();
    ASSERT_NE(r->status, WriteStatus::TimedOut);
  }
  // Parks `parked_` writing `key` (Block, 10 s); `change` must wake it.
  test::WakeProbe writer_woken_by(std::uint64_t key, const std::vector<std::byte>& v,
                                  const std::function<void()>& change) {
    return test::probe_wake(
        [&] {
          auto r = parked_->write(key, v, 10s);
          ASSERT_TRUE(r) << r.error().what();
          EXPECT_EQ(r->status, WriteStatus::Appended);
        },
        [&] { return parked_->view().control->writers_waiting.load() != 0; }, change);
  }

  test::TempRoot root_;
  std::optional<RelayReader> reader_;
  std::optional<RelayWriter> parked_, other_;
};

TEST_F(RelayWakeTest, WriterWakesWhenATakeBringsTheLevelToLowWater) {
  make(policy::kSum, Backpressure{Dimension::Count, 4, 1, Overflow::Block}, 16, 8);
  for (std::uint64_t k = 1; k <= 4; ++k) put(k, u64_value(1));
  ASSERT_TRUE(reader_->snapshot().is_full);
  test::expect_woken(writer_woken_by(9, u64_value(1), [&] {
    auto got = reader_->take(3);
    ASSERT_TRUE(got) << got.error().what();
  }));
}

// Every entry in the reader's hands: the level is low, but no entry is free
// until the commit.
TEST_F(RelayWakeTest, WriterWakesWhenACommitFreesAnEntry) {
  make(policy::kSum, Backpressure{Dimension::Count, 4, 3, Overflow::Block}, 4, 8);
  for (std::uint64_t k = 1; k <= 4; ++k) put(k, u64_value(1));
  auto got = reader_->take(4);
  ASSERT_TRUE(got) << got.error().what();
  ASSERT_FALSE(reader_->snapshot().is_full);
  test::expect_woken(writer_woken_by(9, u64_value(1), [&] { ASSERT_TRUE(reader_->commit()); }));
}

// The audit's defect: a merge that shrinks a value brings the Bytes level to
// low water; the write ignored it and the parked writer slept its futex slice.
TEST_F(RelayWakeTest, WriterWakesWhenAMergeShrinksTheLevelToLowWater) {
  make(policy::kKeepLatest, Backpressure{Dimension::Bytes, 24, 16, Overflow::Block}, 16, 16);
  put(1, value_of(16, 'a'));
  put(2, value_of(8, 'b'));
  ASSERT_TRUE(reader_->snapshot().is_full);
  test::expect_woken(writer_woken_by(3, value_of(8, 'c'), [&] { put(1, value_of(8, 'd')); }));
}

TEST_F(RelayWakeTest, WriterWakesWhenARetuneRaisesTheLimits) {
  make(policy::kSum, Backpressure{Dimension::Count, 4, 1, Overflow::Block}, 16, 8);
  for (std::uint64_t k = 1; k <= 4; ++k) put(k, u64_value(1));
  test::expect_woken(writer_woken_by(9, u64_value(1), [&] {
    auto ok = other_->retune(Backpressure{Dimension::Count, 8, 4, Overflow::Block});
    ASSERT_TRUE(ok) << ok.error().what();
  }));
}

TEST_F(RelayWakeTest, ReaderWakesOnAWrite) {
  make(policy::kSum, Backpressure{Dimension::Count, 4, 1, Overflow::Block}, 16, 8);
  test::expect_woken(test::probe_wake(
      [&] {
        auto r = reader_->wait(10s);
        ASSERT_TRUE(r) << r.error().what();
        EXPECT_TRUE(*r);
      },
      [&] { return reader_->view().control->reader_waiting.load() != 0; },
      [&] { put(1, u64_value(1)); }));
}

// take() twice before commit(): a typed error in every build, the batch in
// hand untouched (the audit found it leaked in a Release build).
TEST_F(RelayWakeTest, TakeAgainBeforeCommitIsOutOfOrderAndKeepsTheBatch) {
  make(policy::kSum, Backpressure{Dimension::Count, 4, 1, Overflow::Block}, 4, 8);
  for (std::uint64_t k = 1; k <= 2; ++k) put(k, u64_value(k));
  auto first = reader_->take(1);
  ASSERT_TRUE(first);
  ASSERT_EQ(first->size(), 1u);
  auto again = reader_->take(1);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, Errc::OutOfOrder);
  EXPECT_NE(std::string(again.error().what()).find("commit() or abandon()"), std::string::npos)
      << again.error().what();
  EXPECT_EQ(reader_->snapshot().in_hand, 1u);
  ASSERT_TRUE(reader_->commit());
  auto rest = reader_->take(4);
  ASSERT_TRUE(rest);
  EXPECT_EQ(rest->size(), 1u);
  ASSERT_TRUE(reader_->commit());
  const RelaySnapshot s = reader_->snapshot();
  EXPECT_EQ(s.depth, 0u);
  EXPECT_EQ(s.in_hand, 0u);
  EXPECT_FALSE(s.is_draining);
}

TEST_F(RelayWakeTest, HighWaterTheRelayCannotReachIsRefused) {
  RelayConfig c;
  c.policy = policy::kSum;
  c.max_entries = 64;
  c.value_bytes = 8;
  c.backpressure = Backpressure{Dimension::Count, 100, 10, Overflow::Block};
  auto r = RelayReader::create("unreachable", c);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::InvalidArgument);
  EXPECT_NE(std::string(r.error().what()).find("high_water 100 exceeds the 64"), std::string::npos)
      << r.error().what();
  c.backpressure = Backpressure{Dimension::Bytes, 64 * 8 + 1, 10, Overflow::Block};
  r = RelayReader::create("unreachable", c);
  ASSERT_FALSE(r);
  EXPECT_NE(std::string(r.error().what()).find("512"), std::string::npos) << r.error().what();
  c.backpressure = Backpressure{Dimension::Count, 64, 10, Overflow::Block};
  r = RelayReader::create("unreachable", c);
  ASSERT_TRUE(r) << r.error().what();
  auto retuned = r->retune(Backpressure{Dimension::Keys, 65, 10, Overflow::Block});
  ASSERT_FALSE(retuned);
  EXPECT_NE(std::string(retuned.error().what()).find("high_water 65 exceeds the 64"),
            std::string::npos)
      << retuned.error().what();
  EXPECT_EQ(r->snapshot().backpressure.high_water, 64u);
}

}  // namespace
}  // namespace shm::relay_wake_test
