// Writer threads merging into the same few open keys while a reader takes
// and commits: every op is delivered exactly once, folded into its key's
// value, with its op counted and its sequence unique. The acceptance test of
// the lock-free merge path (issue 38, docs/relay.md): it holds for the mutex
// path today and must hold for any merge path that skips the mutex. Bounded
// by a write budget and ~0.5 s of writing; run it under TSan too.
#include "common/temp_root.hpp"
#include "shm/relay/relay.hpp"
#include "shm/segment/kind.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace shm::relay_merge_stress_test {
namespace {

using namespace std::chrono_literals;

constexpr const char* kName = "relay-merge-stress";
constexpr std::size_t kKeys = 4;
constexpr std::uint64_t kWritesPerThread = 20'000;
constexpr auto kWriteBudget = 500ms;

struct Tally {
  std::array<std::uint64_t, kKeys> sum{};  // per key: the fold of the ops written (sum) or the max
  std::uint64_t ops = 0;                   // ops accepted (Merged or Appended)
  std::vector<std::uint64_t> seqs;         // their sequences
  std::string problem;
};

struct Case {
  const char* name;
  PolicyId policy;
  int writers;
};

class RelayMergeStressTest : public ::testing::TestWithParam<Case> {
 protected:
  test::TempRoot root_;
};

TEST_P(RelayMergeStressTest, TheReadersFoldEqualsWhatTheWritersWrote) {
  const Case& c = GetParam();
  const bool is_sum = c.policy == policy::kSum;
  (void)Segment::unlink(kName);
  RelayConfig cfg;
  cfg.policy = c.policy;
  cfg.value_bytes = 8;
  cfg.max_entries = 64;
  cfg.backpressure = Backpressure{Dimension::Count, 48, 8, Overflow::Block};
  auto reader = RelayReader::create(kName, cfg);
  ASSERT_TRUE(reader) << reader.error().what();

  std::atomic<int> running{c.writers};
  std::vector<Tally> tally(static_cast<std::size_t>(c.writers));
  std::vector<std::thread> writers;
  for (int t = 0; t < c.writers; ++t) {
    writers.emplace_back([&, t] {
      Tally& mine = tally[static_cast<std::size_t>(t)];
      auto w = RelayWriter::open(kName);
      if (!w) {
        mine.problem = w.error().what();
        running.fetch_sub(1);
        return;
      }
      mine.seqs.reserve(kWritesPerThread);
      const auto until = std::chrono::steady_clock::now() + kWriteBudget;
      for (std::uint64_t i = 0; i < kWritesPerThread; ++i) {
        if ((i & 255) == 0 && std::chrono::steady_clock::now() > until) break;
        const std::size_t k = static_cast<std::size_t>((i + static_cast<std::uint64_t>(t)) % kKeys);
        // sum: small nonzero addends (never the identity); max: a rising
        // value per thread, so most ops change the key's open entry.
        const std::uint64_t v = is_sum ? (i % 7) + 1 : i * 8 + static_cast<std::uint64_t>(t) + 1;
        auto r = w->write(100 + k, u64_value(v), 1s);
        if (!r) {
          mine.problem = r.error().what();
          break;
        }
        if (r->status == WriteStatus::Unchanged) {
          if (is_sum) {
            mine.problem = "a sum op reported Unchanged";
            break;
          }
          continue;
        }
        if (r->status != WriteStatus::Merged && r->status != WriteStatus::Appended) {
          mine.problem = std::string("write status ") + std::string(to_string(r->status));
          break;
        }
        mine.sum[k] = is_sum ? mine.sum[k] + v : std::max(mine.sum[k], v);
        ++mine.ops;
        mine.seqs.push_back(r->seq);
      }
      running.fetch_sub(1);
    });
  }

  std::array<std::uint64_t, kKeys> fold{};
  std::uint64_t drained_ops = 0;
  std::string problem;
  auto take_some = [&] {
    auto got = reader->take(8);
    if (!got) {
      problem = got.error().what();
      return false;
    }
    for (const RelayEntry& e : *got) {
      if (e.key < 100 || e.key >= 100 + kKeys || e.value.size() != 8 || e.op_count == 0 ||
          e.first_seq > e.last_seq) {
        problem = "a malformed entry for key " + std::to_string(e.key);
        return false;
      }
      const std::size_t k = static_cast<std::size_t>(e.key - 100);
      fold[k] = is_sum ? fold[k] + u64_of(e.value) : std::max(fold[k], u64_of(e.value));
      drained_ops += e.op_count;
    }
    if (auto ok = reader->commit(); !ok) {
      problem = ok.error().what();
      return false;
    }
    return !got->empty();
  };
  while (running.load() > 0 && problem.empty()) {
    if (!take_some()) (void)reader->wait(1ms);
  }
  for (std::thread& t : writers) t.join();
  while (problem.empty() && take_some()) {
  }
  ASSERT_EQ(problem, "");

  std::array<std::uint64_t, kKeys> want{};
  std::uint64_t ops = 0;
  std::vector<std::uint64_t> seqs;
  for (const Tally& m : tally) {
    ASSERT_EQ(m.problem, "");
    for (std::size_t k = 0; k < kKeys; ++k)
      want[k] = is_sum ? want[k] + m.sum[k] : std::max(want[k], m.sum[k]);
    ops += m.ops;
    seqs.insert(seqs.end(), m.seqs.begin(), m.seqs.end());
  }
  ASSERT_GT(ops, 0u);
  EXPECT_EQ(fold, want) << c.name;
  EXPECT_EQ(drained_ops, ops) << c.name << ": every accepted op delivered once";
  std::sort(seqs.begin(), seqs.end());
  EXPECT_EQ(std::adjacent_find(seqs.begin(), seqs.end()), seqs.end()) << "a sequence given twice";
  EXPECT_GT(seqs.front(), 0u);

  const RelaySnapshot s = reader->snapshot();
  EXPECT_TRUE(s.consistent);
  EXPECT_FALSE(s.faulted);
  EXPECT_EQ(s.lag, 0u);
  EXPECT_EQ(s.appended + s.merged, ops);
  EXPECT_EQ(s.drained_ops, ops);
  EXPECT_EQ(s.merged, s.conflated);
  std::printf("%s: %llu ops, %llu merged into an open entry, %llu appended\n", c.name,
              static_cast<unsigned long long>(ops), static_cast<unsigned long long>(s.merged),
              static_cast<unsigned long long>(s.appended));
  auto seg = Segment::open_any(kName, {});
  ASSERT_TRUE(seg) << seg.error().what();
  const std::vector<std::string> damage = find_kind(kRelayKind)->verify(*seg);
  EXPECT_TRUE(damage.empty()) << (damage.empty() ? std::string() : damage.front());
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(Policies, RelayMergeStressTest,
                         ::testing::Values(Case{"sum_2", policy::kSum, 2},
                                           Case{"sum_4", policy::kSum, 4},
                                           Case{"max_3", policy::kMax, 3}),
                         case_name);

}  // namespace
}  // namespace shm::relay_merge_stress_test
