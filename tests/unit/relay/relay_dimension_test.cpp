// The Bytes and Keys dimensions reaching high water (docs/relay.md,
// "Backpressure"), as the Count dimension's tests do it (relay_test.cpp,
// relay_wake_test.cpp): is_full sets at high water and clears only at low
// water, DropNewest and DropOldest are counted and logged, Block refuses with
// nothing written and a parked writer wakes within test::kWakeBound of the
// take that brings the level to low water.
//
// Bytes: keep_latest, 16-byte values, high water 64 bytes (4 entries), low
// 16 (1 entry). Keys: max, high water 4 keys, low 1. In both, one entry is one
// unit of four, so the steps below read the same.
#include "common/temp_root.hpp"
#include "common/wake_probe.hpp"
#include "shm/relay/relay.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace shm::relay_dimension_test {
namespace {

using namespace std::chrono_literals;

constexpr std::uint64_t kUnit = 16;  // Bytes: the value size

class RelayDimensionTest : public ::testing::TestWithParam<Dimension> {
 protected:
  [[nodiscard]] bool bytes() const { return GetParam() == Dimension::Bytes; }
  [[nodiscard]] std::uint64_t units(std::uint64_t n) const { return bytes() ? n * kUnit : n; }
  // A value for `key`'s op number `v`: 16 bytes (Bytes) or a u64 (Keys).
  [[nodiscard]] std::vector<std::byte> value(std::uint64_t v) const {
    std::vector<std::byte> out = u64_value(v);
    if (bytes()) out.resize(kUnit, std::byte{0x5a});
    return out;
  }
  void make(Overflow overflow) {
    RelayConfig c;
    c.policy = bytes() ? policy::kKeepLatest : policy::kMax;
    c.max_entries = 16;
    c.value_bytes = bytes() ? static_cast<std::uint32_t>(kUnit) : 8;
    c.backpressure = Backpressure{GetParam(), units(4), units(1), overflow};
    auto w = RelayWriter::create("dim", c);
    ASSERT_TRUE(w) << w.error().what();
    writer_.emplace(std::move(*w));
    auto p = RelayWriter::open("dim");
    ASSERT_TRUE(p) << p.error().what();
    parked_.emplace(std::move(*p));
    auto r = RelayReader::open("dim");
    ASSERT_TRUE(r) << r.error().what();
    reader_.emplace(std::move(*r));
  }
  WriteStatus put(std::uint64_t key, std::uint64_t v) {
    auto r = writer_->try_write(key, value(v));
    EXPECT_TRUE(r) << r.error().what();
    return r ? r->status : WriteStatus::Full;
  }
  std::vector<std::uint64_t> drain(std::size_t credit) {
    std::vector<std::uint64_t> keys;
    auto n = reader_->drain(credit, [&](const RelayEntry& e) { keys.push_back(e.key); });
    EXPECT_TRUE(n) << n.error().what();
    return keys;
  }
  [[nodiscard]] std::uint64_t level() const { return writer_->snapshot().level(); }

  test::TempRoot root_;
  std::optional<RelayWriter> writer_, parked_;
  std::optional<RelayReader> reader_;
};

TEST_P(RelayDimensionTest, IsFullSetsAtHighWaterAndClearsAtLowWater) {
  make(Overflow::DropNewest);
  for (std::uint64_t k = 1; k <= 3; ++k) EXPECT_EQ(put(k, 1), WriteStatus::Appended);
  EXPECT_EQ(level(), units(3));
  EXPECT_FALSE(writer_->snapshot().is_full);
  EXPECT_EQ(put(4, 1), WriteStatus::Appended);
  EXPECT_EQ(level(), units(4));
  EXPECT_TRUE(writer_->snapshot().is_full) << "sets at high water";
  EXPECT_EQ(put(1, 2), WriteStatus::Merged) << "an open key merges when full";
  EXPECT_EQ(level(), units(4)) << "a merge of the same size does not move the level";
  EXPECT_EQ(drain(2).size(), 2u);
  EXPECT_EQ(level(), units(2));
  EXPECT_TRUE(writer_->snapshot().is_full) << "above low water: still full";
  EXPECT_EQ(drain(1).size(), 1u);
  EXPECT_EQ(level(), units(1));
  EXPECT_FALSE(writer_->snapshot().is_full) << "clears at low water";
  EXPECT_EQ(put(9, 1), WriteStatus::Appended);
}

TEST_P(RelayDimensionTest, DropNewestAtHighWaterIsCountedAndLogged) {
  make(Overflow::DropNewest);
  for (std::uint64_t k = 1; k <= 4; ++k) EXPECT_EQ(put(k, 1), WriteStatus::Appended);
  EXPECT_EQ(put(9, 1), WriteStatus::Dropped);
  EXPECT_EQ(put(10, 1), WriteStatus::Dropped);
  const RelaySnapshot s = writer_->snapshot();
  EXPECT_EQ(s.dropped, 2u);
  EXPECT_EQ(s.depth, 4u);
  EXPECT_EQ(s.level(), units(4));
  int drops = 0;
  for (const RelayEvent& e : s.events) drops += e.kind == relay::EventKind::Dropped ? 1 : 0;
  EXPECT_EQ(drops, 2) << "every drop is logged";
  EXPECT_EQ(drain(16), (std::vector<std::uint64_t>{1, 2, 3, 4}));
}

TEST_P(RelayDimensionTest, DropOldestAtHighWaterDisplacesTheOldestAndCountsItsOps) {
  make(Overflow::DropOldest);
  for (std::uint64_t k = 1; k <= 4; ++k) EXPECT_EQ(put(k, 1), WriteStatus::Appended);
  EXPECT_EQ(put(1, 2), WriteStatus::Merged);  // the oldest entry carries two ops
  EXPECT_EQ(put(9, 1), WriteStatus::Displaced);
  RelaySnapshot s = writer_->snapshot();
  EXPECT_EQ(s.dropped, 2u) << "every op of the displaced entry";
  EXPECT_EQ(s.level(), units(4));
  EXPECT_TRUE(s.is_full);
  int drops = 0;
  for (const RelayEvent& e : s.events) drops += e.kind == relay::EventKind::DroppedOldest ? 1 : 0;
  EXPECT_EQ(drops, 1);
  EXPECT_EQ(put(10, 1), WriteStatus::Displaced);
  EXPECT_EQ(writer_->snapshot().dropped, 3u);
  EXPECT_EQ(drain(16), (std::vector<std::uint64_t>{3, 4, 9, 10}));
}

TEST_P(RelayDimensionTest, BlockParksAndATakeToLowWaterWakesTheWriter) {
  make(Overflow::Block);
  for (std::uint64_t k = 1; k <= 4; ++k) EXPECT_EQ(put(k, 1), WriteStatus::Appended);
  EXPECT_EQ(put(9, 1), WriteStatus::TimedOut) << "try_write never parks";
  auto t = writer_->write(9, value(1), 5ms);
  ASSERT_TRUE(t) << t.error().what();
  EXPECT_EQ(t->status, WriteStatus::TimedOut);
  RelaySnapshot s = writer_->snapshot();
  EXPECT_EQ(s.depth, 4u) << "nothing written";
  EXPECT_GE(s.timed_out, 1u);
  EXPECT_EQ(drain(2).size(), 2u);
  EXPECT_EQ(put(9, 1), WriteStatus::TimedOut) << "above low water: still full";
  test::expect_woken(test::probe_wake(
      [&] {
        auto r = parked_->write(9, value(1), 10s);
        ASSERT_TRUE(r) << r.error().what();
        EXPECT_EQ(r->status, WriteStatus::Appended);
      },
      [&] { return parked_->view().control->writers_waiting.load() != 0; },
      [&] {
        auto got = reader_->take(1);  // the level falls to low water at the take
        ASSERT_TRUE(got) << got.error().what();
        ASSERT_EQ(got->size(), 1u);
      }));
  ASSERT_TRUE(reader_->commit());
  s = writer_->snapshot();
  EXPECT_EQ(s.level(), units(2));
  EXPECT_GE(s.blocked, 2u);
  EXPECT_EQ(drain(16), (std::vector<std::uint64_t>{4, 9}));
}

std::string dimension_name(const ::testing::TestParamInfo<Dimension>& info) {
  return info.param == Dimension::Bytes ? "Bytes" : "Keys";
}

INSTANTIATE_TEST_SUITE_P(Dimensions, RelayDimensionTest,
                         ::testing::Values(Dimension::Bytes, Dimension::Keys), dimension_name);

}  // namespace
}  // namespace shm::relay_dimension_test
