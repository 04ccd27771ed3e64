// The conflated catch-up of a relay reader (docs/spill.md): while two or more
// cold pages wait, a reader set to CatchUp::Conflated receives them folded
// into one entry per key, credit by credit; the pages go only after the
// summary's last commit; a reader that dies in the middle leaves the pages,
// and the next one never receives more ops under one entry than the summary
// it replaces; the fold of what a reader applies equals the flat fold of
// every op, over many seeds and every keyed policy.
#include "common/scale.hpp"
#include "common/temp_dir.hpp"
#include "common/temp_root.hpp"
#include "shm/relay/relay.hpp"
#include "shm/testing/spill_crash.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace shm {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using ValueBytes = std::vector<std::byte>;

// A Spill relay of 8 entries (spills at 6 pending) whose pages hold
// `page_records` records of `value_bytes` bytes.
RelayConfig catch_up_cfg(PolicyId policy, std::uint32_t value_bytes = 8,
                         std::uint64_t page_records = 4) {
  RelayConfig c;
  c.policy = policy;
  c.max_entries = 8;
  c.value_bytes = value_bytes;
  c.backpressure = Backpressure{Dimension::Count, 6, 2, Overflow::Spill};
  c.spill_dedup = true;
  c.spill.enabled = true;
  c.spill.page_size = spill::kPageHeaderSize + page_records * spill::record_stride(value_bytes);
  return c;
}

std::size_t spill_page_files(const std::string& dir) {
  std::size_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().ends_with(".spill")) ++n;
  return n;
}

ValueBytes merge_value(const MergePolicy& p, const ValueBytes& current,
                       std::span<const std::byte> op, std::size_t value_bytes) {
  ValueBytes out(value_bytes);
  auto n = combine(p, current, op, out);
  EXPECT_TRUE(n) << n.error().what();
  out.resize(n ? *n : 0);
  return out;
}

// What an application of a non-idempotent policy does with what it
// receives: an entry whose last op sequence is at or below the last one
// applied for its key is a redelivery, skipped; anything else is merged.
class DedupConsumer {
 public:
  DedupConsumer(const MergePolicy& p, std::size_t value_bytes)
      : policy_(p), value_size_(value_bytes) {}
  void apply(const RelayEntry& e) {
    auto [last, fresh] = last_seq_.try_emplace(e.key, 0);
    if (!fresh && e.last_seq <= last->second) return;
    last->second = e.last_seq;
    auto [it, first] = fold_.try_emplace(e.key, ValueBytes(e.value.begin(), e.value.end()));
    if (!first) it->second = merge_value(policy_, it->second, e.value, value_size_);
  }
  [[nodiscard]] const std::map<std::uint64_t, ValueBytes>& fold() const { return fold_; }
  [[nodiscard]] std::uint64_t last_seq(std::uint64_t key) const {
    auto it = last_seq_.find(key);
    return it == last_seq_.end() ? 0 : it->second;
  }

 private:
  const MergePolicy& policy_;
  std::size_t value_size_;
  std::map<std::uint64_t, std::uint64_t> last_seq_;
  std::map<std::uint64_t, ValueBytes> fold_;
};

class RelayCatchUpTest : public ::testing::Test {
 protected:
  test::TempRoot root_;
  test::TempSpillDir spill_;
};

// 300 sums over 40 keys (the head spills past 6 open keys) in many pages: the conflated reader gets
// one entry per key for all of them, the pages stay until its last commit.
TEST_F(RelayCatchUpTest, SeveralPagesArriveAsOneEntryPerKeyAndGoAfterTheLastCommit) {
  auto w = RelayWriter::create("sums", catch_up_cfg(policy::kSum, 8, 16));
  ASSERT_TRUE(w) << w.error().what();
  std::map<std::uint64_t, std::uint64_t> expect;
  std::mt19937_64 rng(11);
  constexpr std::uint64_t kOps = 300;
  for (std::uint64_t i = 0; i < kOps; ++i) {
    const std::uint64_t key = rng() % 40, v = 1 + rng() % 9;
    expect[key] += v;
    auto r = w->write(key, u64_value(v), 0ns);
    ASSERT_TRUE(r) << r.error().what();
    ASSERT_NE(r->status, WriteStatus::TimedOut);
  }
  const RelaySnapshot before = w->snapshot();
  ASSERT_GE(before.cold_pages, 3u);
  const std::string dir = spill_.sub("sums");
  ASSERT_EQ(spill_page_files(dir), before.cold_pages);

  auto r = RelayReader::open("sums");
  ASSERT_TRUE(r);
  ASSERT_TRUE(r->set_catch_up(CatchUp::Conflated));
  EXPECT_EQ(r->catch_up(), CatchUp::Conflated);
  std::map<std::uint64_t, std::uint64_t> got;
  std::vector<std::uint64_t> summary_keys;
  // Credit 2: two entries of the summary; nothing acknowledged yet.
  auto t = r->take(2);
  ASSERT_TRUE(t) << t.error().what();
  ASSERT_EQ(t->size(), 2u);
  for (const RelayEntry& e : *t) {
    EXPECT_NE(e.page_id, 0u);
    EXPECT_GE(e.op_count, 1u);
    EXPECT_LE(e.first_seq, e.last_seq);
    EXPECT_FALSE(e.redelivered);
    got[e.key] += u64_of(e.value);
    summary_keys.push_back(e.key);
  }
  ASSERT_TRUE(r->commit());
  EXPECT_EQ(spill_page_files(dir), before.cold_pages);
  EXPECT_EQ(r->snapshot().pages_acked, 0u);
  // The summary in delivery is recorded: its last page (shmctl inspect shows it).
  const std::uint64_t summary_end = r->snapshot().catch_up_page;
  EXPECT_GT(summary_end, before.manifest.front().page_id);
  // An abandoned take of the summary comes back, marked redelivered.
  t = r->take(1);
  ASSERT_TRUE(t);
  ASSERT_EQ(t->size(), 1u);
  const std::uint64_t abandoned = (*t)[0].key;
  ASSERT_TRUE(r->abandon());
  t = r->take(1);
  ASSERT_TRUE(t);
  ASSERT_EQ(t->size(), 1u);
  EXPECT_EQ((*t)[0].key, abandoned);
  EXPECT_TRUE((*t)[0].redelivered);
  for (const RelayEntry& e : *t) got[e.key] += u64_of(e.value);
  ASSERT_TRUE(r->commit());
  // The rest: summaries while two or more pages wait (each stops before the
  // page the hot head's oldest entry must precede), the hot head between
  // them and after. A summary's pages go together, after its last commit.
  // Cold entries delivered while pages_acked stays put belong to one summary
  // (or one page): one entry per key.
  std::uint64_t cold_entries = summary_keys.size() + t->size(), first_acked = 0;
  std::map<std::uint64_t, std::set<std::uint64_t>> keys_by_epoch;
  keys_by_epoch[0].insert(summary_keys.begin(), summary_keys.end());
  keys_by_epoch[0].insert((*t)[0].key);
  for (int guard = 0; guard < 10000; ++guard) {
    const std::uint64_t epoch = r->snapshot().pages_acked;
    if (first_acked == 0) first_acked = epoch;
    auto n = r->drain(3, [&](const RelayEntry& e) {
      got[e.key] += u64_of(e.value);
      if (e.page_id == 0) return;
      ++cold_entries;
      EXPECT_TRUE(keys_by_epoch[epoch].insert(e.key).second) << "key " << e.key << " twice";
    });
    ASSERT_TRUE(n) << n.error().what();
    if (*n == 0) break;
  }
  EXPECT_GE(first_acked, 2u) << "the first summary covered several pages";
  EXPECT_EQ(r->snapshot().catch_up_page, 0u);
  std::uint64_t records = 0;
  for (const auto& page : before.manifest) records += page.records;
  EXPECT_LT(cold_entries, records) << "conflated: fewer entries than the pages' records";
  EXPECT_EQ(got, expect);
  const RelaySnapshot after = r->snapshot();
  EXPECT_EQ(after.pages_acked, after.pages_sealed);
  EXPECT_EQ(after.cold_pages, 0u);
  EXPECT_EQ(spill_page_files(dir), 0u);
  EXPECT_EQ(after.drained_ops, kOps);
  EXPECT_EQ(after.lag, 0u);
}

TEST_F(RelayCatchUpTest, IsRefusedForAPolicyThatCannotBeConflated) {
  auto w = RelayWriter::create("fifo", catch_up_cfg(policy::kRawFifo));
  ASSERT_TRUE(w) << w.error().what();
  auto r = RelayReader::open("fifo");
  ASSERT_TRUE(r);
  auto refused = r->set_catch_up(CatchUp::Conflated);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::PolicyRefused);
  EXPECT_NE(refused.error().message.find("raw_fifo"), std::string::npos) << refused.error().message;
  EXPECT_EQ(r->catch_up(), CatchUp::PageByPage);
  // Page by page: every op, in order.
  for (std::uint64_t i = 0; i < 20; ++i) ASSERT_TRUE(w->write(u64_value(i), 0ns));
  std::vector<std::uint64_t> got;
  for (int guard = 0; guard < 100; ++guard) {
    auto n = r->drain(3, [&](const RelayEntry& e) { got.push_back(u64_of(e.value)); });
    ASSERT_TRUE(n);
    if (*n == 0) break;
  }
  ASSERT_EQ(got.size(), 20u);
  for (std::uint64_t i = 0; i < 20; ++i) EXPECT_EQ(got[i], i);
}

// A reader that dies inside a summary (some entries committed, one taken)
// leaves every page. More pages are sealed before the next reader comes: a
// conflated reader folds the same pages again (all marked redelivered, no
// entry covering ops past the first summary's), a page-by-page reader gets
// their records; either way the consumer's fold equals the flat fold.
TEST_F(RelayCatchUpTest, AReaderDeadInsideASummaryLeavesThePagesAndNoEntryCoversMoreOps) {
  const MergePolicy& sum = **find_merge(policy::kSum);
  for (const CatchUp next : {CatchUp::Conflated, CatchUp::PageByPage}) {
    SCOPED_TRACE(next == CatchUp::Conflated ? "next reader conflated" : "next reader page by page");
    const std::string name = next == CatchUp::Conflated ? "dead-c" : "dead-p";
    auto w = RelayWriter::create(name, catch_up_cfg(policy::kSum));
    ASSERT_TRUE(w) << w.error().what();
    std::map<std::uint64_t, std::uint64_t> expect;
    std::mt19937_64 rng(21);
    auto write_some = [&](int n) {
      for (int i = 0; i < n; ++i) {
        const std::uint64_t key = rng() % 30, v = 1 + rng() % 9;
        expect[key] += v;
        auto r = w->write(key, u64_value(v), 0ns);
        ASSERT_TRUE(r) << r.error().what();
      }
    };
    write_some(120);
    ASSERT_GE(w->snapshot().cold_pages, 3u);
    const std::uint64_t pages_before = w->snapshot().cold_pages;
    DedupConsumer app(sum, 8);
    std::map<std::uint64_t, std::uint64_t> first_summary_last;
    {
      auto r = RelayReader::open(name);
      ASSERT_TRUE(r);
      ASSERT_TRUE(r->set_catch_up(CatchUp::Conflated));
      auto t = r->take(100);
      ASSERT_TRUE(t);
      ASSERT_GE(t->size(), 3u);
      for (const RelayEntry& e : *t) first_summary_last[e.key] = e.last_seq;
      ASSERT_TRUE(r->abandon());
      t = r->take(2);
      ASSERT_TRUE(t);
      for (const RelayEntry& e : *t) app.apply(e);
      ASSERT_TRUE(r->commit());
      t = r->take(1);  // taken, applied, never committed: the reader "dies"
      ASSERT_TRUE(t);
      for (const RelayEntry& e : *t) app.apply(e);
    }
    EXPECT_EQ(w->snapshot().pages_acked, 0u);
    EXPECT_NE(w->snapshot().catch_up_page, 0u) << "the dead reader's summary stays recorded";
    EXPECT_EQ(spill_page_files(spill_.sub(name)), pages_before);
    write_some(60);  // more pages: a fresh summary would cover more ops
    auto r = RelayReader::open(name);
    ASSERT_TRUE(r);
    ASSERT_TRUE(r->set_catch_up(next));
    bool first_take = true;
    for (int guard = 0; guard < 1000; ++guard) {
      auto t = r->take(4);
      ASSERT_TRUE(t) << t.error().what();
      if (t->empty()) break;
      for (const RelayEntry& e : *t) {
        if (first_take && next == CatchUp::Conflated) {
          EXPECT_TRUE(e.redelivered);
          ASSERT_TRUE(first_summary_last.contains(e.key));
          EXPECT_EQ(e.last_seq, first_summary_last[e.key])
              << "the summary delivered again covers the same ops";
        }
        app.apply(e);
      }
      first_take = false;
      ASSERT_TRUE(r->commit());
    }
    std::map<std::uint64_t, std::uint64_t> fold;
    for (const auto& [k, v] : app.fold()) fold[k] = u64_of(v);
    EXPECT_EQ(fold, expect);
    EXPECT_EQ(r->snapshot().cold_pages, 0u);
    EXPECT_EQ(spill_page_files(spill_.sub(name)), 0u);
  }
}

// The converged-egress invariant with conflated catch-ups: random writes,
// takes of random credit committed, abandoned or dropped with the reader
// (reopened conflated or page by page); the consumer's fold equals the flat
// fold of every accepted op, for every keyed policy.
struct CatchUpCase {
  PolicyId id;
  std::uint32_t value_bytes;
};

ValueBytes random_op(PolicyId policy, std::mt19937_64& rng) {
  if (policy == policy::kLww) return lww_value(1 + rng() % 40, 1 + rng() % 3);
  if (policy == policy::kBitOr) return u64_value(std::uint64_t{1} << (rng() % 64));
  return u64_value(1 + rng() % 50);
}

void run_catch_up_seed(const CatchUpCase& pc, std::uint64_t seed, const std::string& name,
                       std::uint64_t& summaries) {
  const MergePolicy& policy = **find_merge(pc.id);
  auto w = RelayWriter::create(name, catch_up_cfg(pc.id, pc.value_bytes, 1 + seed % 3));
  ASSERT_TRUE(w) << w.error().what();
  std::optional<RelayReader> r;
  std::mt19937_64 rng(seed);
  auto open_reader = [&] {
    auto opened = RelayReader::open(name);
    ASSERT_TRUE(opened) << opened.error().what();
    r.emplace(std::move(*opened));
    ASSERT_TRUE(r->set_catch_up(rng() % 4 == 0 ? CatchUp::PageByPage : CatchUp::Conflated));
  };
  open_reader();
  std::map<std::uint64_t, ValueBytes> flat;
  DedupConsumer app(policy, pc.value_bytes);
  auto step = [&](bool drain_only) {
    auto t = r->take(1 + rng() % 5);
    ASSERT_TRUE(t) << t.error().what();
    if (t->empty()) return;
    for (const RelayEntry& e : *t)
      if (e.page_id != 0 && e.op_count > 1 && r->catch_up() == CatchUp::Conflated) ++summaries;
    const auto dice = drain_only ? 0 : rng() % 5;
    if (dice == 3) {  // abandoned unapplied
      ASSERT_TRUE(r->abandon());
      return;
    }
    for (const RelayEntry& e : *t) app.apply(e);
    if (dice == 4) {  // applied, then the reader is gone before its commit
      r.reset();
      open_reader();
      return;
    }
    ASSERT_TRUE(r->commit());
  };
  for (int i = 0; i < 48; ++i) {
    const std::uint64_t key = rng() % 12;
    const ValueBytes v = random_op(pc.id, rng);
    auto res = w->write(key, v, 0ns);
    ASSERT_TRUE(res) << res.error().what();
    if (res->status == WriteStatus::Appended || res->status == WriteStatus::Merged) {
      auto [it, fresh] = flat.try_emplace(key, v);
      if (!fresh) it->second = merge_value(policy, it->second, v, pc.value_bytes);
    } else {
      ASSERT_EQ(res->status, WriteStatus::Unchanged) << to_string(res->status);
    }
    if (rng() % 5 == 0) {
      step(false);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  for (int guard = 0; guard < 1000 && r->snapshot().lag + r->snapshot().cold_pages != 0; ++guard) {
    step(true);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_EQ(app.fold(), flat) << "seed " << seed;
  const RelaySnapshot s = r->snapshot();
  EXPECT_EQ(s.cold_pages, 0u);
  EXPECT_EQ(s.depth, 0u);
  r.reset();
  ASSERT_TRUE(w->segment().unlink());
}

TEST_F(RelayCatchUpTest, TheConsumersFoldEqualsTheFlatFoldOverManySeedsForEveryKeyedPolicy) {
  const std::vector<CatchUpCase> cases = {{policy::kKeepLatest, 8}, {policy::kLww, 16},
                                          {policy::kSum, 8},        {policy::kMax, 8},
                                          {policy::kMin, 8},        {policy::kBitOr, 8}};
  test_hooks::set_spill_sync(false);  // logic, not durability
  struct Restore {
    ~Restore() { test_hooks::set_spill_sync(true); }
  } restore;
  const std::uint64_t seeds = test::scaled(150);
  std::uint64_t summaries = 0;
  for (const CatchUpCase& pc : cases) {
    for (std::uint64_t seed = 1; seed <= seeds; ++seed) {
      SCOPED_TRACE(std::string((*find_merge(pc.id))->name) + " seed " + std::to_string(seed));
      run_catch_up_seed(pc, seed, (*find_merge(pc.id))->name + "-" + std::to_string(seed),
                        summaries);
      if (HasFatalFailure()) return;
    }
  }
  EXPECT_GT(summaries, seeds) << "the schedules really conflate pages";
  ::testing::Test::RecordProperty("summary_entries", static_cast<int>(summaries));
}

}  // namespace
}  // namespace shm
