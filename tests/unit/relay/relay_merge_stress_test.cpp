// Writer threads merging into the same few open keys while a reader takes
// and commits: every op is delivered exactly once, folded into its key's
// value, with its op counted and its sequence unique. The acceptance test of
// the lock-free merge path (issue 38, docs/relay.md): it holds for the mutex
// path today and must hold for any merge path that skips the mutex. Bounded
// by a write budget and ~0.5 s of writing; run it under TSan too.
#include "common/temp_root.hpp"
#include "shm/relay/relay.hpp"
#include "shm/segment/kind.hpp"
#include "shm/testing/relay_crash.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace shm::relay_merge_stress_test {
namespace {

using namespace std::chrono_literals;

constexpr const char* kName = "relay-merge-stress";
constexpr std::size_t kKeys = 4;
constexpr std::uint64_t kWritesPerThread = 20'000;
constexpr auto kWriteBudget = 500ms;

struct Tally {
  std::array<std::uint64_t, kKeys> sum{};  // per key: the fold of the ops written
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

// The policy's fold of two values, and its identity (the fold of nothing).
std::uint64_t fold_of(PolicyId p, std::uint64_t a, std::uint64_t b) {
  if (p == policy::kSum) return a + b;
  if (p == policy::kMax) return std::max(a, b);
  if (p == policy::kMin) return std::min(a, b);
  return a | b;  // bit_or
}
std::uint64_t identity_of(PolicyId p) {
  return p == policy::kMin ? ~std::uint64_t{0} : 0;
}

// The reader's side of a stress: takes and commits up to 8 entries at a time
// while writers run (parking up to 1 ms when nothing came), then what they
// left, handing each entry to `judge`, which returns "" or what is wrong.
// Returns the first problem ("" when none); the writer threads are joined.
template <class Judge>
std::string take_while_writing(RelayReader& reader, const std::atomic<int>& running,
                               std::vector<std::thread>& writers, Judge judge) {
  std::string problem;
  auto take_some = [&] {
    auto got = reader.take(8);
    if (!got) {
      problem = got.error().what();
      return false;
    }
    for (const RelayEntry& e : *got) {
      problem = judge(e);
      if (!problem.empty()) return false;
    }
    if (auto ok = reader.commit(); !ok) {
      problem = ok.error().what();
      return false;
    }
    return !got->empty();
  };
  while (running.load() > 0 && problem.empty()) {
    if (!take_some()) (void)reader.wait(1ms);
  }
  for (std::thread& t : writers) t.join();
  while (problem.empty() && take_some()) {
  }
  return problem;
}

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
      mine.sum.fill(identity_of(c.policy));
      const auto until = std::chrono::steady_clock::now() + kWriteBudget;
      for (std::uint64_t i = 0; i < kWritesPerThread; ++i) {
        if ((i & 255) == 0 && std::chrono::steady_clock::now() > until) break;
        const std::size_t k = static_cast<std::size_t>((i + static_cast<std::uint64_t>(t)) % kKeys);
        // sum: small nonzero addends (never the identity); max (min): a
        // rising (falling) value per thread, so most ops change the key's
        // open entry; bit_or: one bit each, so ops change it until the
        // entry is taken.
        const std::uint64_t up = i * 8 + static_cast<std::uint64_t>(t) + 1;
        const std::uint64_t v = is_sum                     ? (i % 7) + 1
                                : c.policy == policy::kMax ? up
                                : c.policy == policy::kMin ? ~up
                                                           : std::uint64_t{1} << ((i * 5 + t) % 64);
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
        mine.sum[k] = fold_of(c.policy, mine.sum[k], v);
        ++mine.ops;
        mine.seqs.push_back(r->seq);
      }
      running.fetch_sub(1);
    });
  }

  std::array<std::uint64_t, kKeys> fold{};
  fold.fill(identity_of(c.policy));
  std::uint64_t drained_ops = 0;
  const std::string problem =
      take_while_writing(*reader, running, writers, [&](const RelayEntry& e) -> std::string {
        if (e.key < 100 || e.key >= 100 + kKeys || e.value.size() != 8 || e.op_count == 0 ||
            e.first_seq > e.last_seq)
          return "a malformed entry for key " + std::to_string(e.key);
        const std::size_t k = static_cast<std::size_t>(e.key - 100);
        fold[k] = fold_of(c.policy, fold[k], u64_of(e.value));
        drained_ops += e.op_count;
        return "";
      });
  ASSERT_EQ(problem, "");

  std::array<std::uint64_t, kKeys> want{};
  want.fill(identity_of(c.policy));
  std::uint64_t ops = 0;
  std::vector<std::uint64_t> seqs;
  for (const Tally& m : tally) {
    ASSERT_EQ(m.problem, "");
    for (std::size_t k = 0; k < kKeys; ++k) want[k] = fold_of(c.policy, want[k], m.sum[k]);
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
  EXPECT_EQ(s.writes, s.appended + s.merged + s.unchanged) << c.name;
  std::printf("%s: %llu ops, %llu merged into an open entry, %llu appended\n", c.name,
              static_cast<unsigned long long>(ops), static_cast<unsigned long long>(s.merged),
              static_cast<unsigned long long>(s.appended));
  auto seg = Segment::open_any(kName, {});
  ASSERT_TRUE(seg) << seg.error().what();
  const std::vector<std::string> damage = find_kind(kRelayKind)->verify(*seg);
  EXPECT_TRUE(damage.empty()) << (damage.empty() ? std::string() : damage.front());
}

// The lock-free merge path: while one writer holds the relay's mutex
// (stopped inside an append by the test-only crash hook), merges of sum,
// max, min and bit_or into keys already open still complete, with their
// sequences, and the reader then finds every one of them.
std::atomic<int> g_stop_state{0};  // 0 idle, 1 a writer is stopped inside, 2 release it
void stop_inside_append(test_hooks::RelayCrashPoint point) {
  if (point != test_hooks::RelayCrashPoint::AppendFilled) return;
  g_stop_state.store(1);
  while (g_stop_state.load() != 2) std::this_thread::sleep_for(1ms);
}

// A second writer of this process stopped inside an append of key 3
// (`value`), holding the relay's mutex until release() (or destruction).
class MutexHeldByAStoppedAppend {
 public:
  explicit MutexHeldByAStoppedAppend(std::vector<std::byte> value) {
    g_stop_state.store(0);
    test_hooks::set_relay_crash_hook(&stop_inside_append);
    holder_ = std::thread([v = std::move(value)] {
      auto h = RelayWriter::open(kName);
      if (h) (void)h->write(3, v, 1s);  // a new key: stops holding the mutex
    });
    while (g_stop_state.load() != 1) std::this_thread::sleep_for(1ms);
  }
  MutexHeldByAStoppedAppend(const MutexHeldByAStoppedAppend&) = delete;
  MutexHeldByAStoppedAppend& operator=(const MutexHeldByAStoppedAppend&) = delete;
  ~MutexHeldByAStoppedAppend() { release(); }

  // True while the holder is still stopped inside its append.
  [[nodiscard]] bool held() const { return g_stop_state.load() == 1; }
  void release() {
    if (!holder_.joinable()) return;
    g_stop_state.store(2);
    holder_.join();
    test_hooks::set_relay_crash_hook(nullptr);
  }

 private:
  std::thread holder_;
};

// The relay's own verify finds nothing wrong.
void expect_verify_clean() {
  auto seg = Segment::open_any(kName, {});
  ASSERT_TRUE(seg) << seg.error().what();
  const std::vector<std::string> damage = find_kind(kRelayKind)->verify(*seg);
  EXPECT_TRUE(damage.empty()) << (damage.empty() ? std::string() : damage.front());
}

class RelayFastMergeTest : public ::testing::TestWithParam<PolicyId> {
 protected:
  test::TempRoot root_;
};

TEST_P(RelayFastMergeTest, MergesIntoOpenKeysCompleteWhileTheMutexIsHeld) {
  const PolicyId p = GetParam();
  (void)Segment::unlink(kName);
  RelayConfig cfg;
  cfg.policy = p;
  cfg.value_bytes = 8;
  cfg.max_entries = 16;
  cfg.backpressure = Backpressure{Dimension::Count, 16, 1, Overflow::Block};
  auto reader = RelayReader::create(kName, cfg);
  ASSERT_TRUE(reader) << reader.error().what();
  auto w = RelayWriter::open(kName);
  ASSERT_TRUE(w) << w.error().what();
  // Keys 1 and 2 open, each with one op that every later op changes.
  const std::uint64_t first = p == policy::kMin ? 1000 : 1;
  for (std::uint64_t k : {1, 2}) {
    ASSERT_TRUE(w->write(k, u64_value(first), 1s));
  }
  MutexHeldByAStoppedAppend mutex_held(u64_value(first));
  std::uint64_t want[2] = {first, first};
  std::vector<std::uint64_t> seqs;
  constexpr std::uint64_t kOps = 50;
  for (std::uint64_t i = 0; i < kOps; ++i) {
    const std::uint64_t v = p == policy::kSum   ? 3
                            : p == policy::kMax ? 2 + i
                            : p == policy::kMin ? 999 - i
                                                : std::uint64_t{2} << i;
    const std::size_t k = i % 2;
    auto r = w->write(1 + k, u64_value(v), 1s);  // would wait for the mutex without the fast path
    ASSERT_TRUE(r) << r.error().what();
    EXPECT_EQ(r->status, WriteStatus::Merged) << "op " << i;
    seqs.push_back(r->seq);
    want[k] = fold_of(p, want[k], v);
  }
  // An op that changes nothing answers Unchanged, also with no lock.
  auto same = w->write(1, u64_value(p == policy::kMin ? 1000 : p == policy::kSum ? 0 : 2), 1s);
  ASSERT_TRUE(same) << same.error().what();
  EXPECT_EQ(same->status, WriteStatus::Unchanged);
  EXPECT_TRUE(mutex_held.held()) << "the mutex holder went on";
  mutex_held.release();
  EXPECT_EQ(reader->snapshot().lag, 3 + kOps) << "the words' ops count in the lag";
  std::sort(seqs.begin(), seqs.end());
  EXPECT_EQ(std::adjacent_find(seqs.begin(), seqs.end()), seqs.end());
  std::uint64_t got[2] = {0, 0}, ops = 0;
  auto n = reader->drain(16, [&](const RelayEntry& e) {
    if (e.key == 1 || e.key == 2) got[e.key - 1] = u64_of(e.value);
    ops += e.op_count;
  });
  ASSERT_TRUE(n) << n.error().what();
  EXPECT_EQ(got[0], want[0]);
  EXPECT_EQ(got[1], want[1]);
  EXPECT_EQ(ops, 3 + kOps);
  const RelaySnapshot s = reader->snapshot();
  EXPECT_EQ(s.lag, 0u);
  EXPECT_EQ(s.merged, kOps);
  EXPECT_EQ(s.writes, 3 + kOps + 1);
  EXPECT_EQ(s.unchanged, 1u);
  expect_verify_clean();
}

INSTANTIATE_TEST_SUITE_P(WordPolicies, RelayFastMergeTest,
                         ::testing::Values(policy::kSum, policy::kMax, policy::kMin,
                                           policy::kBitOr));

// lww and keep_latest (the copy merge): writer threads write 64-byte values
// into the same four open keys while a reader takes and commits. A value's
// payload is a function of its (timestamp, writer), so a torn value shows.
// lww: every entry the reader receives for a key is strictly newer than the
// last one it received (the delivered-value memory), and each key ends with
// the largest (timestamp, writer) written. keep_latest: each key ends with
// the last value one of the writers wrote to it. Both: every accepted op is
// delivered once, sequences unique, counters agree, verify clean.
constexpr std::uint32_t kCopyBytes = 64;
std::vector<std::byte> copy_value(std::uint64_t ts, std::uint64_t writer) {
  return lww_value(ts, writer,
                   std::vector<std::byte>(kCopyBytes - 16,
                                          static_cast<std::byte>((ts * 31 + writer * 7) & 0xFF)));
}

class RelayCopyStressTest : public ::testing::TestWithParam<Case> {
 protected:
  test::TempRoot root_;
};

TEST_P(RelayCopyStressTest, NoTornValueAndTheNewestWins) {
  const Case& c = GetParam();
  const bool lww = c.policy == policy::kLww;
  (void)Segment::unlink(kName);
  RelayConfig cfg;
  cfg.policy = c.policy;
  cfg.value_bytes = kCopyBytes;
  cfg.max_entries = 64;
  cfg.backpressure = Backpressure{Dimension::Count, 48, 8, Overflow::Block};
  auto reader = RelayReader::create(kName, cfg);
  ASSERT_TRUE(reader) << reader.error().what();

  struct CopyTally {
    std::array<std::pair<std::uint64_t, std::uint64_t>, kKeys> newest{};  // (ts, writer) written
    std::array<std::uint64_t, kKeys> last_ts{};                           // keep_latest: the last
    std::uint64_t ops = 0;
    std::vector<std::uint64_t> seqs;
    std::string problem;
  };
  std::atomic<int> running{c.writers};
  std::vector<CopyTally> tally(static_cast<std::size_t>(c.writers));
  std::vector<std::thread> writers;
  for (int t = 0; t < c.writers; ++t) {
    writers.emplace_back([&, t] {
      CopyTally& mine = tally[static_cast<std::size_t>(t)];
      const std::uint64_t id = static_cast<std::uint64_t>(t) + 1;
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
        const std::size_t k = static_cast<std::size_t>((i + id) % kKeys);
        // Timestamps rise with i but wander (every 8th goes back 40): the
        // writers tie and overtake each other, and some ops are older than
        // the key's value (lww: Unchanged).
        const std::uint64_t ts = 1000 + i / 2 - ((i % 8) == 7 ? 40 : 0);
        auto r = w->write(100 + k, copy_value(ts, id), 1s);
        if (!r) {
          mine.problem = r.error().what();
          break;
        }
        mine.newest[k] = std::max(mine.newest[k], std::make_pair(ts, id));
        mine.last_ts[k] = ts;
        if (r->status == WriteStatus::Unchanged) continue;
        if (r->status != WriteStatus::Merged && r->status != WriteStatus::Appended) {
          mine.problem = std::string("write status ") + std::string(to_string(r->status));
          break;
        }
        ++mine.ops;
        mine.seqs.push_back(r->seq);
      }
      running.fetch_sub(1);
    });
  }

  std::array<std::pair<std::uint64_t, std::uint64_t>, kKeys> have{};  // the last delivered
  std::uint64_t drained_ops = 0, older = 0;
  const std::string problem =
      take_while_writing(*reader, running, writers, [&](const RelayEntry& e) -> std::string {
        std::uint64_t ts = 0, id = 0;
        if (e.value.size() == kCopyBytes) {
          std::memcpy(&ts, e.value.data(), 8);
          std::memcpy(&id, e.value.data() + 8, 8);
        }
        const std::vector<std::byte> whole = copy_value(ts, id);
        if (e.key < 100 || e.key >= 100 + kKeys || e.op_count == 0 || e.first_seq > e.last_seq ||
            e.value.size() != kCopyBytes ||
            !std::equal(e.value.begin(), e.value.end(), whole.begin(), whole.end()))
          return "a malformed or torn entry for key " + std::to_string(e.key);
        const std::size_t k = static_cast<std::size_t>(e.key - 100);
        if (lww && have[k].first != 0 && std::make_pair(ts, id) <= have[k]) ++older;
        have[k] = {ts, id};
        drained_ops += e.op_count;
        return "";
      });
  ASSERT_EQ(problem, "");

  std::uint64_t ops = 0;
  std::vector<std::uint64_t> seqs;
  for (const CopyTally& m : tally) {
    ASSERT_EQ(m.problem, "");
    ops += m.ops;
    seqs.insert(seqs.end(), m.seqs.begin(), m.seqs.end());
  }
  ASSERT_GT(ops, 0u);
  EXPECT_EQ(older, 0u) << c.name << ": a value older than one delivered for its key";
  for (std::size_t k = 0; k < kKeys; ++k) {
    if (lww) {
      std::pair<std::uint64_t, std::uint64_t> want{0, 0};
      for (const CopyTally& m : tally) want = std::max(want, m.newest[k]);
      EXPECT_EQ(have[k], want) << c.name << ": key " << k << " ends with its newest write";
    } else {
      bool some = false;
      for (std::size_t t = 0; t < tally.size(); ++t)
        some = some || have[k] == std::make_pair(tally[t].last_ts[k], std::uint64_t{t + 1});
      EXPECT_TRUE(some) << c.name << ": key " << k << " ends with a writer's last value";
    }
  }
  EXPECT_EQ(drained_ops, ops) << c.name << ": every accepted op delivered once";
  std::sort(seqs.begin(), seqs.end());
  EXPECT_EQ(std::adjacent_find(seqs.begin(), seqs.end()), seqs.end()) << "a sequence given twice";

  const RelaySnapshot s = reader->snapshot();
  EXPECT_TRUE(s.consistent);
  EXPECT_FALSE(s.faulted);
  EXPECT_EQ(s.lag, 0u);
  EXPECT_EQ(s.appended + s.merged, ops);
  EXPECT_EQ(s.drained_ops, ops);
  EXPECT_EQ(s.writes, s.appended + s.merged + s.unchanged) << c.name;
  std::printf(
      "%s: %llu ops, %llu merged into an open entry, %llu appended, %llu unchanged\n", c.name,
      static_cast<unsigned long long>(ops), static_cast<unsigned long long>(s.merged),
      static_cast<unsigned long long>(s.appended), static_cast<unsigned long long>(s.unchanged));
  auto seg = Segment::open_any(kName, {});
  ASSERT_TRUE(seg) << seg.error().what();
  const std::vector<std::string> damage = find_kind(kRelayKind)->verify(*seg);
  EXPECT_TRUE(damage.empty()) << (damage.empty() ? std::string() : damage.front());
}

// The copy merge is lock-free: while one writer holds the relay's mutex
// (stopped inside an append), lww and keep_latest writes into open keys of
// the same length still merge, a losing lww write is Unchanged, and the
// reader then finds the last value of each.
class RelayFastCopyTest : public ::testing::TestWithParam<PolicyId> {
 protected:
  test::TempRoot root_;
};

TEST_P(RelayFastCopyTest, CopyMergesIntoOpenKeysCompleteWhileTheMutexIsHeld) {
  const PolicyId p = GetParam();
  (void)Segment::unlink(kName);
  RelayConfig cfg;
  cfg.policy = p;
  cfg.value_bytes = kCopyBytes;
  cfg.max_entries = 16;
  cfg.backpressure = Backpressure{Dimension::Count, 16, 1, Overflow::Block};
  auto reader = RelayReader::create(kName, cfg);
  ASSERT_TRUE(reader) << reader.error().what();
  auto w = RelayWriter::open(kName);
  ASSERT_TRUE(w) << w.error().what();
  for (std::uint64_t k : {1, 2}) {
    ASSERT_TRUE(w->write(k, copy_value(10, 1), 1s));
  }
  MutexHeldByAStoppedAppend mutex_held(copy_value(10, 1));
  constexpr std::uint64_t kOps = 50;
  for (std::uint64_t i = 0; i < kOps; ++i) {
    auto r = w->write(1 + i % 2, copy_value(20 + i, 2), 1s);  // would wait for the mutex
    ASSERT_TRUE(r) << r.error().what();
    EXPECT_EQ(r->status, WriteStatus::Merged) << "op " << i;
  }
  auto same = w->write(1, p == policy::kLww ? copy_value(5, 9) : copy_value(20 + kOps - 2, 2), 1s);
  ASSERT_TRUE(same) << same.error().what();
  EXPECT_EQ(same->status, WriteStatus::Unchanged);
  EXPECT_TRUE(mutex_held.held()) << "the mutex holder went on";
  mutex_held.release();
  EXPECT_EQ(reader->snapshot().lag, 3 + kOps);
  std::vector<std::byte> got[2];
  std::uint64_t ops = 0;
  auto n = reader->drain(16, [&](const RelayEntry& e) {
    if (e.key == 1 || e.key == 2) got[e.key - 1].assign(e.value.begin(), e.value.end());
    ops += e.op_count;
  });
  ASSERT_TRUE(n) << n.error().what();
  EXPECT_EQ(got[0], copy_value(20 + kOps - 2, 2));
  EXPECT_EQ(got[1], copy_value(20 + kOps - 1, 2));
  EXPECT_EQ(ops, 3 + kOps);
  const RelaySnapshot s = reader->snapshot();
  EXPECT_EQ(s.merged, kOps);
  EXPECT_EQ(s.unchanged, 1u);
  expect_verify_clean();
}

INSTANTIATE_TEST_SUITE_P(CopyPolicies, RelayFastCopyTest,
                         ::testing::Values(policy::kLww, policy::kKeepLatest));

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(Policies, RelayCopyStressTest,
                         ::testing::Values(Case{"lww_2", policy::kLww, 2},
                                           Case{"lww_4", policy::kLww, 4},
                                           Case{"keep_latest_3", policy::kKeepLatest, 3}),
                         case_name);

INSTANTIATE_TEST_SUITE_P(Policies, RelayMergeStressTest,
                         ::testing::Values(Case{"sum_2", policy::kSum, 2},
                                           Case{"sum_4", policy::kSum, 4},
                                           Case{"max_3", policy::kMax, 3},
                                           Case{"min_2", policy::kMin, 2},
                                           Case{"bit_or_2", policy::kBitOr, 2}),
                         case_name);

}  // namespace
}  // namespace shm::relay_merge_stress_test
