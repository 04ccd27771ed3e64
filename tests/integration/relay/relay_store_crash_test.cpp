// Every multi-step relay operation killed at every store it makes to the
// mapping (N = 1 ... all, a counting hook: common/store_crash.hpp; a value
// copy counts as one store), on the first, a middle and the last entry of the
// head's list. After each kill a fresh reader (the next locker: it repairs
// and returns what a dead reader held) must find the state before or after
// the operation: the same entries, values, sequences and op counts, never a
// torn value, never faulted, the invariant check clean.
#include "common/store_crash.hpp"
#include "common/temp_root.hpp"
#include "shm/relay/relay.hpp"
#include "shm/segment/kind.hpp"
#include "shm/segment/segment.hpp"

#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace shm::relay_store_crash_test {
namespace {

constexpr const char* kName = "relay-store-crash";

struct Drained {
  std::uint64_t key, first_seq, last_seq, op_count;
  std::vector<std::byte> value;
  friend bool operator==(const Drained&, const Drained&) = default;
};
std::string show(const std::vector<Drained>& v) {
  std::string out;
  for (const Drained& d : v)
    out += " k" + std::to_string(d.key) + "[" + std::to_string(d.first_seq) + "-" +
           std::to_string(d.last_seq) + " ops " + std::to_string(d.op_count) + " len " +
           std::to_string(d.value.size()) + "]";
  return out;
}

std::vector<std::byte> val(std::size_t n, unsigned char b) {
  return std::vector<std::byte>(n, static_cast<std::byte>(b));
}

// The five keys of the head, oldest first; targets: the first, a middle, the last.
constexpr std::array<std::uint64_t, 5> kKeys{11, 12, 13, 14, 15};
constexpr std::array<std::size_t, 3> kTarget{0, 2, 4};

struct Case {
  const char* name;
  PolicyId policy;
  Overflow overflow;
  std::uint64_t high_water;
  // What the writer writes before the operation (after the head's five keys).
  std::function<std::vector<std::byte>(std::uint64_t key)> initial;
  // The operation in the child: true when its outcome is the expected one.
  std::function<bool(std::size_t k)> op;
  // Slots of the delivered-value memory (RelayConfig::remembered_keys); when
  // not 0, a reader drained older values of the five keys first, so the
  // operation's take updates remembered keys and evicts one (CLOCK).
  std::uint32_t remembered = 0;
  // Ops of 1 merged into each of the five keys after its first value (sum):
  // their entries' merge words hold that many ops (the lock-free merge path).
  std::uint64_t merges_first = 0;
  // Fewest stores the operation makes (a merge by the lock-free path: its
  // sequence's fetch_add and the word's compare-exchange).
  std::uint64_t min_stores = 3;
  // The relay's value size.
  std::uint32_t value_bytes = 16;
  // When set, written to each of the five keys after its first value (a
  // copy merge: the value then lives in the entry's second buffer).
  std::function<std::vector<std::byte>(std::uint64_t key)> second = nullptr;
};

// A 64-byte lww value (timestamp, writer, 48 payload bytes all equal `fill`):
// a torn value mixes two fills or a fill with another timestamp.
std::vector<std::byte> lww64(std::uint64_t ts, std::uint64_t writer, unsigned char fill) {
  return lww_value(ts, writer, val(48, fill));
}

bool take_commit(std::size_t n) {
  auto r = RelayReader::open(kName);
  if (!r) return false;
  auto got = r->take(n);
  if (!got || got->size() != n) return false;
  return r->commit().has_value();
}

bool write_is(std::uint64_t key, const std::vector<std::byte>& v, WriteStatus want) {
  auto w = RelayWriter::open(kName);
  if (!w) return false;
  auto r = w->write(key, v, std::chrono::nanoseconds(0));
  return r && r->status == want;
}

const Case kCases[] = {
    // sum and max into an open key: the lock-free merge path (docs/relay.md),
    // two stores (the sequence's fetch_add, the merge word's compare-exchange).
    {"merge_sum", policy::kSum, Overflow::Block, 8, [](std::uint64_t k) { return u64_value(k); },
     [](std::size_t k) { return write_is(kKeys[kTarget[k]], u64_value(7), WriteStatus::Merged); },
     0, 0, 2},
    // max: a larger value over the key's open entry.
    {"merge_max", policy::kMax, Overflow::Block, 8, [](std::uint64_t k) { return u64_value(k); },
     [](std::size_t k) {
       return write_is(kKeys[kTarget[k]], u64_value(1000), WriteStatus::Merged);
     },
     0, 0, 2},
    // keep_latest: a shorter value over a longer one (the entry's length shrinks)
    {"merge_shrink", policy::kKeepLatest, Overflow::Block, 8,
     [](std::uint64_t k) { return val(16, static_cast<unsigned char>(k)); },
     [](std::size_t k) { return write_is(kKeys[kTarget[k]], val(5, 0xEE), WriteStatus::Merged); }},
    // A new key into the first, a middle or the last free entry (fresh()
    // writes k more keys first: 0, 1 or 2 of the three free).
    {"append", policy::kSum, Overflow::Block, 8, [](std::uint64_t k) { return u64_value(k); },
     [](std::size_t) { return write_is(200, u64_value(5), WriteStatus::Appended); }},
    // DropOldest at high water (5): the oldest entry is dropped, the op appended.
    {"drop_oldest", policy::kKeepLatest, Overflow::DropOldest, 5,
     [](std::uint64_t k) { return val(16, static_cast<unsigned char>(k)); },
     [](std::size_t k) { return write_is(90 + k, val(9, 0x99), WriteStatus::Displaced); }},
    // A reader takes the first 1, 3 or 5 entries and commits them.
    {"take_commit", policy::kSum, Overflow::Block, 8, [](std::uint64_t k) { return u64_value(k); },
     [](std::size_t k) { return take_commit(kTarget[k] + 1); }},
    // The same after two lock-free merges into each key: the take closes
    // each entry, then folds its merge word into it inside the rebase record.
    {"take_merged", policy::kSum, Overflow::Block, 8, [](std::uint64_t k) { return u64_value(k); },
     [](std::size_t k) { return take_commit(kTarget[k] + 1); }, 0, 2},
    // A merge into a key whose word is full (4,095 ops): the mutex path
    // folds the word into the entry (the rebase record), then merges.
    {"merge_rebase", policy::kSum, Overflow::Block, 8, [](std::uint64_t k) { return u64_value(k); },
     [](std::size_t k) { return write_is(kKeys[kTarget[k]], u64_value(7), WriteStatus::Merged); },
     0, relay::kWordOpsMax},
    // lww into an open key (64-byte values): the copy merge of the lock-free
    // path, four stores (the sequence, the claim, the value into the other
    // buffer, the publishing compare-exchange).
    {"merge_lww", policy::kLww, Overflow::Block, 8,
     [](std::uint64_t k) { return lww64(100 + k, 1, static_cast<unsigned char>(k)); },
     [](std::size_t k) {
       return write_is(kKeys[kTarget[k]], lww64(500, 2, 0x5A), WriteStatus::Merged);
     },
     0, 0, 4, 64},
    // The same after one copy merge into each key: the value is in the
    // entry's second buffer and the write fills the first.
    {"merge_lww_again", policy::kLww, Overflow::Block, 8,
     [](std::uint64_t k) { return lww64(100 + k, 1, static_cast<unsigned char>(k)); },
     [](std::size_t k) {
       return write_is(kKeys[kTarget[k]], lww64(500, 2, 0x5A), WriteStatus::Merged);
     },
     0, 0, 4, 64,
     [](std::uint64_t k) { return lww64(200 + k, 3, static_cast<unsigned char>(0x80 + k)); }},
    // keep_latest, same length: the copy merge.
    {"merge_keep_latest", policy::kKeepLatest, Overflow::Block, 8,
     [](std::uint64_t k) { return val(64, static_cast<unsigned char>(k)); },
     [](std::size_t k) { return write_is(kKeys[kTarget[k]], val(64, 0xEE), WriteStatus::Merged); },
     0, 0, 4, 64, [](std::uint64_t k) { return val(64, static_cast<unsigned char>(0x40 + k)); }},
    // lww of another length into a key whose value is in the second
    // buffer: the mutex path holds the entry (its word folded, the value
    // moved back to the first buffer), merges inside the intent, reopens.
    {"merge_lww_locked", policy::kLww, Overflow::Block, 8,
     [](std::uint64_t k) { return lww64(100 + k, 1, static_cast<unsigned char>(k)); },
     [](std::size_t k) {
       return write_is(kKeys[kTarget[k]], lww_value(600, 2, val(8, 0x77)), WriteStatus::Merged);
     },
     0, 0, 3, 64,
     [](std::uint64_t k) { return lww64(200 + k, 3, static_cast<unsigned char>(0x80 + k)); }},
    // A take of lww entries whose values are in the second buffer: each
    // rebase moves the value back to the first before it is copied out.
    {"take_lww_merged", policy::kLww, Overflow::Block, 8,
     [](std::uint64_t k) { return lww64(100 + k, 1, static_cast<unsigned char>(k)); },
     [](std::size_t k) { return take_commit(kTarget[k] + 1); }, 0, 0, 3, 64,
     [](std::uint64_t k) { return lww64(200 + k, 3, static_cast<unsigned char>(0x80 + k)); }},
    // lww with a memory of 4 keys holding older values of 15, 14, 13 and 11:
    // the take of the first two entries remembers 11 (a remembered key: its
    // slot gets the new value) and 12 (a new key: the CLOCK evicts one), each
    // inside the Remember intent. One position only (instantiated below).
    {"take_remember", policy::kLww, Overflow::Block, 8,
     [](std::uint64_t k) { return lww_value(100 + k, 1); },
     [](std::size_t) { return take_commit(2); }, 4},
};
constexpr int kPositionedCases = 13;  // the cases above take_remember: at three positions

RelayConfig config(const Case& c) {
  RelayConfig cfg;
  cfg.policy = c.policy;
  cfg.value_bytes = c.value_bytes;
  cfg.max_entries = 8;
  cfg.backpressure = Backpressure{Dimension::Count, c.high_water, 1, c.overflow};
  cfg.remembered_keys = c.remembered;
  return cfg;
}

class RelayStoreCrashTest : public ::testing::TestWithParam<std::tuple<int, std::size_t>> {
 protected:
  test::TempRoot root_;
};

TEST_P(RelayStoreCrashTest, KilledAtEveryStoreLeavesTheStateBeforeOrAfter) {
  const Case& c = kCases[std::get<0>(GetParam())];
  const std::size_t k = std::get<1>(GetParam());
  const bool append = std::string(c.name) == "append";
  auto fresh = [&] {
    (void)Segment::unlink(kName);
    auto w = RelayWriter::create(kName, config(c));
    ASSERT_TRUE(w) << w.error().what();
    if (c.remembered != 0) {  // older values of four keys, delivered: the memory is full
      for (std::uint64_t key : {15, 14, 13, 11}) {
        ASSERT_TRUE(w->write(key, lww_value(key, 1), shm::forever));
      }
      auto r = RelayReader::open(kName);
      ASSERT_TRUE(r) << r.error().what();
      ASSERT_TRUE(r->drain(100, [](const RelayEntry&) {}));
      ASSERT_EQ(r->snapshot().remembered, c.remembered);
    }
    for (std::uint64_t key : kKeys) {
      ASSERT_TRUE(w->write(key, c.initial(key), shm::forever));
    }
    if (c.second)
      for (std::uint64_t key : kKeys) {
        auto r = w->write(key, c.second(key), shm::forever);
        ASSERT_TRUE(r && r->status == WriteStatus::Merged) << c.name;
      }
    for (std::uint64_t key : kKeys)
      for (std::uint64_t i = 0; i < c.merges_first; ++i) {
        ASSERT_TRUE(w->write(key, u64_value(1), shm::forever));
      }
    if (append) {  // k more keys: the new one takes the first, a middle or the last free entry
      for (std::size_t i = 0; i < k; ++i) {
        ASSERT_TRUE(w->write(100 + i, u64_value(1), shm::forever));
      }
    }
  };
  auto op = [&] { return c.op(k); };
  // The delivered-value memory of the five keys, as the reader's handle sees it.
  using Memory = std::vector<std::optional<std::vector<std::byte>>>;
  Memory pre, post;  // of the last drained(): before and after its drain
  auto memory = [&](RelayReader& r, std::string& problem) {
    Memory m;
    for (std::uint64_t key : kKeys) {
      auto had = r.delivered(key);
      if (!had) problem = had.error().what();
      m.push_back(had ? *had : std::nullopt);
    }
    return m;
  };
  // What the next reader drains (it repairs first), and the relay's health.
  auto drained = [&](std::string& problem) {
    std::vector<Drained> out;
    auto r = RelayReader::open(kName);
    if (!r) {
      problem = r.error().what();
      return out;
    }
    pre = memory(*r, problem);
    const RelaySnapshot s = r->snapshot();
    if (s.faulted || !s.consistent) problem = "faulted or inconsistent";
    if (auto seg = Segment::open_any(kName, {})) {
      const std::vector<std::string> damage = find_kind(kRelayKind)->verify(*seg);
      if (!damage.empty()) problem = damage.front();
    }
    auto n = r->drain(100, [&](const RelayEntry& e) {
      out.push_back(Drained{e.key, e.first_seq, e.last_seq, e.op_count,
                            std::vector<std::byte>(e.value.begin(), e.value.end())});
    });
    if (!n) problem = n.error().what();
    post = memory(*r, problem);
    return out;
  };

  std::string problem;
  fresh();
  const std::vector<Drained> before = drained(problem);
  const Memory pre_before = pre, post_before = post;
  ASSERT_EQ(problem, "");
  fresh();
  ASSERT_TRUE(op()) << c.name << ": the operation's outcome without a kill";
  const std::vector<Drained> after = drained(problem);
  const Memory pre_after = pre, post_after = post;
  ASSERT_EQ(problem, "");
  ASSERT_NE(before, after) << c.name;
  // Each key's remembered value is the one before or the one after (a take
  // remembers entry by entry, so keys may differ in which), or none (a key
  // the take evicted to remember another one, before that one's turn came),
  // never torn; after the full drain, a remembered value is what the reader
  // was last given (which key the CLOCK evicted may differ).
  auto check_memory = [&](std::uint64_t n, const std::vector<Drained>& now) {
    for (std::size_t i = 0; i < kKeys.size(); ++i) {
      // take_remember: the key's older value (primed) or the take's entry.
      const bool known =
          c.remembered != 0 && (pre[i] == lww_value(kKeys[i], 1) || pre[i] == c.initial(kKeys[i]));
      EXPECT_TRUE(!pre[i] || known || pre[i] == pre_before[i] || pre[i] == pre_after[i])
          << c.name << " killed at store " << n << ": key " << kKeys[i];
      std::optional<std::vector<std::byte>> last;
      for (const Drained& d : now)
        if (d.key == kKeys[i]) last = d.value;
      EXPECT_TRUE(!post[i] || post[i] == post_before[i] || post[i] == post_after[i] ||
                  post[i] == last)
          << c.name << " killed at store " << n << ": key " << kKeys[i];
    }
  };
  if (c.remembered != 0) {
    ASSERT_NE(pre_before, pre_after) << c.name << ": the take remembered nothing";
  }

  std::uint64_t back = 0, forward = 0;
  const test::StoreCrashRun run = test::kill_at_every_store(fresh, op, [&](std::uint64_t n) {
    std::string why;
    const std::vector<Drained> now = drained(why);
    EXPECT_EQ(why, "") << c.name << " killed at store " << n;
    check_memory(n, now);
    back += now == before;
    forward += now == after;
    EXPECT_TRUE(now == before || now == after)
        << c.name << " killed at store " << n << "\n  repaired:" << show(now)
        << "\n  before:  " << show(before) << "\n  after:   " << show(after);
  });
  ASSERT_TRUE(run.error.empty()) << c.name << ": " << run.error;
  EXPECT_GE(run.kills, c.min_stores) << c.name << ": the hook killed almost nothing";
  EXPECT_EQ(run.kills, run.stores);
  EXPECT_GT(back, 0u);
  std::printf("%s k=%zu: %llu stores, %llu rolled back, %llu rolled forward\n", c.name, k,
              static_cast<unsigned long long>(run.stores), static_cast<unsigned long long>(back),
              static_cast<unsigned long long>(forward));
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<int, std::size_t>>& info) {
  return test::position_name(kCases[std::get<0>(info.param)].name, std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(EveryOperation, RelayStoreCrashTest,
                         ::testing::Combine(::testing::Range(0, kPositionedCases),
                                            ::testing::Values(std::size_t{0}, std::size_t{1},
                                                              std::size_t{2})),
                         case_name);
INSTANTIATE_TEST_SUITE_P(DeliveredMemory, RelayStoreCrashTest,
                         ::testing::Values(std::make_tuple(kPositionedCases, std::size_t{0})),
                         case_name);

}  // namespace
}  // namespace shm::relay_store_crash_test
