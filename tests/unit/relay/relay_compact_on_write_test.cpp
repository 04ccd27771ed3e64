// SpillMode::CompactOnWrite (docs/spill.md): a seal writes the entries of
// one key as one record where that is sound, and as they are otherwise. The
// hot head keeps one open entry per key, so a page can hold several entries
// of a key only beside entries closed to merges: those of a seal that failed
// (never delivered: merged) and those a reader gave back (delivered once:
// never merged, whatever the policy).
#include "common/temp_dir.hpp"
#include "common/temp_root.hpp"
#include "shm/relay/relay.hpp"
#include "shm/testing/spill_crash.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace shm::relay_compact_on_write_test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

RelayConfig compact_cfg(PolicyId policy, relay::SpillMode mode, std::uint64_t high,
                        std::uint64_t low) {
  RelayConfig c;
  c.policy = policy;
  c.max_entries = 8;
  c.value_bytes = 8;
  c.backpressure = Backpressure{Dimension::Count, high, low, Overflow::Spill};
  c.spill_dedup = true;
  c.spill.enabled = true;
  c.spill.mode = mode;
  c.spill.page_size = spill::kPageHeaderSize + 16 * spill::record_stride(8);  // room for all
  return c;
}

struct Drained {
  std::uint64_t value = 0, first_seq = 0, ops = 0;
  bool redelivered = false;
};
using DrainedByKey = std::map<std::uint64_t, std::vector<Drained>>;

void drain_all(RelayReader& r, DrainedByKey& got) {
  for (int guard = 0; guard < 100; ++guard) {
    auto n = r.drain(16, [&](const RelayEntry& e) {
      got[e.key].push_back(Drained{u64_of(e.value), e.first_seq, e.op_count, e.redelivered});
    });
    ASSERT_TRUE(n) << n.error().what();
    if (*n == 0) break;
  }
}

// Makes the seal in flight fail: its temporary file goes before the rename.
std::string g_compact_dir;
void remove_the_temporary_file(test_hooks::SpillCrashPoint point) {
  if (point != test_hooks::SpillCrashPoint::ContentWritten) return;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(g_compact_dir, ec))
    if (e.path().extension() == ".tmp") fs::remove(e.path(), ec);
}

// Keys 0, 1, 2 written (high water 3); the seal of the next write fails, so
// they stay pending, closed to merges. The high water is raised, keys 0 and
// 1 written again (new open entries beside the closed ones), then 3 and 4;
// the next write seals all seven into one page. Returns that page's records.
std::uint64_t seal_after_a_failed_seal(PolicyId policy, relay::SpillMode mode,
                                       const std::string& name, const std::string& dir,
                                       DrainedByKey& got) {
  auto w = RelayWriter::create(name, compact_cfg(policy, mode, 3, 1));
  EXPECT_TRUE(w) << w.error().what();
  if (!w) return 0;
  for (std::uint64_t k = 0; k < 3; ++k) EXPECT_TRUE(w->write(k, u64_value(10 * k + 1), 0ns));
  g_compact_dir = dir;
  test_hooks::set_spill_crash_hook(remove_the_temporary_file);
  auto failed = w->write(9, u64_value(90), 0ns);
  test_hooks::set_spill_crash_hook(nullptr);
  EXPECT_TRUE(failed);
  if (failed) {
    EXPECT_EQ(failed->status, WriteStatus::TimedOut) << to_string(failed->status);
  }
  RelaySnapshot s = w->snapshot();
  EXPECT_EQ(s.seal_errors, 1u);
  EXPECT_EQ(s.pages_sealed, 0u);
  EXPECT_EQ(s.depth, 3u);
  EXPECT_TRUE(w->retune(Backpressure{Dimension::Count, 7, 3, Overflow::Spill}));
  for (std::uint64_t k : {0, 1, 3, 4}) EXPECT_TRUE(w->write(k, u64_value(10 * k + 2), 0ns));
  EXPECT_TRUE(w->write(5, u64_value(52), 0ns));  // the eighth: finds the relay full, seals
  s = w->snapshot();
  EXPECT_EQ(s.pages_sealed, 1u);
  EXPECT_EQ(s.depth, 1u);
  const std::uint64_t records = s.manifest.empty() ? 0 : s.manifest.front().records;
  auto r = RelayReader::open(name);
  EXPECT_TRUE(r);
  if (r) drain_all(*r, got);
  return records;
}

class RelayCompactOnWrite : public ::testing::Test {
 protected:
  test::TempRoot root_;
  test::TempSpillDir spill_;
};

TEST_F(RelayCompactOnWrite, EntriesOfAFailedSealMergeWithTheirKeysNewOnesIntoOneRecord) {
  for (const PolicyId policy : {policy::kSum, policy::kKeepLatest}) {
    const bool sum = policy == policy::kSum;
    SCOPED_TRACE(sum ? "sum" : "keep_latest");
    DrainedByKey append, compact;
    const std::string a = sum ? "sum-append" : "latest-append";
    const std::string c = sum ? "sum-compact" : "latest-compact";
    EXPECT_EQ(
        seal_after_a_failed_seal(policy, relay::SpillMode::AppendCompact, a, spill_.sub(a), append),
        7u);
    EXPECT_EQ(seal_after_a_failed_seal(policy, relay::SpillMode::CompactOnWrite, c, spill_.sub(c),
                                       compact),
              5u);
    ASSERT_EQ(append[0].size(), 2u);
    ASSERT_EQ(compact[0].size(), 1u);
    EXPECT_EQ(compact[0][0].value, sum ? 1u + 2u : 2u);
    EXPECT_EQ(compact[1][0].value, sum ? 11u + 12u : 12u);
    EXPECT_EQ(compact[0][0].ops, 2u);
    EXPECT_EQ(compact[0][0].first_seq, append[0][0].first_seq);  // the first one's place
    EXPECT_FALSE(compact[0][0].redelivered);
    for (std::uint64_t k : {2, 3, 4, 5}) ASSERT_EQ(compact[k].size(), 1u) << "key " << k;
  }
}

// Keys 1..5 written; the reader takes 1 and 2 and gives them back; key 1
// written again, then key 2: that write finds the relay full and seals the
// six pending entries. The given-back entry of key 1 stays a record of its
// own beside key 1's new one, for an idempotent policy too.
TEST_F(RelayCompactOnWrite, AnEntryAReaderGaveBackIsNeverMerged) {
  for (const PolicyId policy : {policy::kSum, policy::kKeepLatest}) {
    SCOPED_TRACE(policy == policy::kSum ? "sum" : "keep_latest");
    const std::string name = policy == policy::kSum ? "sum-given" : "latest-given";
    auto w = RelayWriter::create(name, compact_cfg(policy, relay::SpillMode::CompactOnWrite, 6, 2));
    ASSERT_TRUE(w) << w.error().what();
    auto r = RelayReader::open(name);
    ASSERT_TRUE(r);
    for (std::uint64_t k = 1; k <= 5; ++k) ASSERT_TRUE(w->write(k, u64_value(10 * k), 0ns));
    auto t = r->take(2);
    ASSERT_TRUE(t);
    ASSERT_EQ(t->size(), 2u);
    ASSERT_TRUE(r->abandon());
    ASSERT_TRUE(w->write(1, u64_value(11), 0ns));
    ASSERT_TRUE(w->write(2, u64_value(21), 0ns));
    const RelaySnapshot s = w->snapshot();
    ASSERT_EQ(s.pages_sealed, 1u);
    ASSERT_EQ(s.manifest.size(), 1u);
    EXPECT_EQ(s.manifest.front().records, 6u);
    DrainedByKey got;
    drain_all(*r, got);
    ASSERT_EQ(got[1].size(), 2u);
    EXPECT_TRUE(got[1][0].redelivered);
    EXPECT_EQ(got[1][0].value, 10u);
    EXPECT_FALSE(got[1][1].redelivered);
    EXPECT_EQ(got[1][1].value, 11u);
  }
}

}  // namespace
}  // namespace shm::relay_compact_on_write_test
