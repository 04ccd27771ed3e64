// Egress stages over a relay reader (shm/relay/stages.hpp, docs/relay.md,
// "Egress stages"): the window delivers at most one batch per window while
// ops merge in the head, the rate paces entries and the head fills until the
// writers feel the relay's high water, expiry consumes and counts entries
// older than the deadline (entries of cold pages have no time and pass), the
// delivered fold equals the flat fold under window and rate (specification
// §9), and bad parameters are InvalidArgument naming the field. Times are
// given to take_at() where the test judges the stages, so nothing depends on
// how fast the machine is.
#include "common/temp_dir.hpp"
#include "common/temp_root.hpp"
#include "common/text.hpp"
#include "common/wake_probe.hpp"
#include "shm/platform/clock.hpp"
#include "shm/relay/relay.hpp"
#include "shm/relay/stages.hpp"
#include "shm/spill/page.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace shm::relay_stages_test {
namespace {

using namespace std::chrono_literals;
using test::expect_error;

constexpr std::uint64_t kMs = 1'000'000;

RelayConfig keyed(PolicyId policy, std::uint32_t capacity = 64, std::uint32_t value_bytes = 8) {
  RelayConfig c;
  c.policy = policy;
  c.max_entries = capacity;
  c.value_bytes = value_bytes;
  c.backpressure = Backpressure{Dimension::Count, capacity, capacity / 4, Overflow::Conflate};
  return c;
}

WriteStatus put(RelayWriter& w, std::uint64_t key, std::uint64_t v) {
  auto r = w.try_write(key, u64_value(v));
  EXPECT_TRUE(r) << r.error().what();
  return r ? r->status : WriteStatus::Full;
}

class RelayStagesTest : public ::testing::Test {
 protected:
  // Creates relay `name` with `config`, a writer and a staged reader.
  void make(const std::string& name, const RelayConfig& config, const RelayStages& stages) {
    auto w = RelayWriter::create(name, config);
    ASSERT_TRUE(w) << w.error().what();
    writer_.emplace(std::move(*w));
    auto r = RelayReader::open(name);
    ASSERT_TRUE(r) << r.error().what();
    auto s = StagedReader::make(std::move(*r), stages);
    ASSERT_TRUE(s) << s.error().what();
    staged_.emplace(std::move(*s));
  }
  TakeOutcome take_at(std::size_t credit, std::uint64_t now) {
    auto t = staged_->take_at(credit, now);
    EXPECT_TRUE(t) << t.error().what();
    return t ? *t : TakeOutcome{};
  }

  test::TempRoot root_;
  std::optional<RelayWriter> writer_;
  std::optional<StagedReader> staged_;
};

TEST_F(RelayStagesTest, BadParametersAreInvalidArgumentNamingTheField) {
  auto w = RelayWriter::create("bad", keyed(policy::kSum));
  ASSERT_TRUE(w);
  auto r = RelayReader::open("bad");
  ASSERT_TRUE(r);
  const std::vector<std::pair<RelayStages, std::string>> cases = {
      {RelayStages{WindowPolicy{0ns}, {}, {}}, "WindowPolicy::window"},
      {RelayStages{WindowPolicy{-5ms}, {}, {}}, "WindowPolicy::window"},
      {RelayStages{{}, RatePolicy{-1, 4}, {}}, "RatePolicy::per_second"},
      {RelayStages{{}, RatePolicy{10, -1}, {}}, "RatePolicy::burst"},
      {RelayStages{{}, RatePolicy{0, 4}, {}}, "RatePolicy::per_second is 0"},
      {RelayStages{{}, RatePolicy{10, 0}, {}}, "RatePolicy::burst is 0"},
      {RelayStages{{}, {}, ExpiryPolicy{0ns}}, "ExpiryPolicy::deadline"},
      {RelayStages{{}, {}, ExpiryPolicy{-1s}}, "ExpiryPolicy::deadline"},
  };
  for (const auto& [stages, field] : cases) {
    expect_error(validate(stages), Errc::InvalidArgument, field);
    expect_error(StagedReader::make(std::move(*r), stages), Errc::InvalidArgument, field);
    EXPECT_NE(r->view().control, nullptr) << "a refused make leaves the reader as it was";
  }
  RelayReader empty;
  expect_error(StagedReader::make(std::move(empty), RelayStages{}), Errc::InvalidArgument,
               "not attached");
  // No stage at all is valid: a staged reader that hands every take on.
  auto plain = StagedReader::make(std::move(*r), RelayStages{});
  ASSERT_TRUE(plain) << plain.error().what();
  EXPECT_EQ(put(*w, 1, 5), WriteStatus::Appended);
  std::uint64_t got = 0;
  auto d = plain->drain(16, [&](const RelayEntry& e) { got += u64_of(e.value); });
  ASSERT_TRUE(d) << d.error().what();
  EXPECT_EQ(d->status, TakeStatus::Delivered);
  EXPECT_EQ(got, 5u);
}

// Throttle: the first batch goes at once, the next no earlier than one window
// after it; meanwhile the key's ops merge into one entry in the head.
TEST_F(RelayStagesTest, WindowDeliversOneBatchPerWindowWhileOpsMergeInTheHead) {
  make("window", keyed(policy::kSum), RelayStages{WindowPolicy{100ms}, {}, {}});
  const std::uint64_t t0 = monotonic_ns();
  EXPECT_EQ(put(*writer_, 1, 1), WriteStatus::Appended);
  TakeOutcome t = take_at(16, t0);
  ASSERT_EQ(t.status, TakeStatus::Delivered);
  ASSERT_EQ(t.entries.size(), 1u);
  EXPECT_EQ(u64_of(t.entries[0].value), 1u);
  ASSERT_TRUE(staged_->commit());

  EXPECT_EQ(put(*writer_, 1, 2), WriteStatus::Appended);
  EXPECT_EQ(put(*writer_, 1, 3), WriteStatus::Merged);
  t = take_at(16, t0 + 40 * kMs);
  EXPECT_EQ(t.status, TakeStatus::Window);
  EXPECT_TRUE(t.entries.empty());
  EXPECT_EQ(t.ready_in, 60ms);
  EXPECT_EQ(staged_->reader().snapshot().depth, 1u) << "a held take takes nothing";
  EXPECT_EQ(put(*writer_, 1, 4), WriteStatus::Merged) << "the held entry keeps merging";
  t = take_at(16, t0 + 99 * kMs);
  EXPECT_EQ(t.status, TakeStatus::Window);

  t = take_at(16, t0 + 100 * kMs);
  ASSERT_EQ(t.status, TakeStatus::Delivered);
  ASSERT_EQ(t.entries.size(), 1u);
  EXPECT_EQ(u64_of(t.entries[0].value), 9u);
  EXPECT_EQ(t.entries[0].op_count, 3u);
  ASSERT_TRUE(staged_->commit());
  // Nothing pending while the window is closed: still Window (the gate is
  // judged first); once it opens, Empty.
  EXPECT_EQ(take_at(16, t0 + 150 * kMs).status, TakeStatus::Window);
  EXPECT_EQ(take_at(16, t0 + 200 * kMs).status, TakeStatus::Empty);
  const StagedSnapshot s = staged_->snapshot();
  EXPECT_EQ(s.batches, 2u);
  EXPECT_EQ(s.delivered, 2u);
  EXPECT_EQ(s.held_window, 3u);
  EXPECT_EQ(s.held_rate, 0u);
}

// Tokens: 2 a second, a burst of 2. What the rate holds stays in the head;
// the relay stays full (Block) until the paced takes bring it to low water.
TEST_F(RelayStagesTest, RatePacesEntriesAndTheHeadFillsUntilWritersFeelHighWater) {
  RelayConfig c = keyed(policy::kSum, 16);
  c.backpressure = Backpressure{Dimension::Count, 4, 1, Overflow::Block};
  make("rate", c, RelayStages{{}, RatePolicy{2, 2}, {}});
  for (std::uint64_t k = 1; k <= 4; ++k) EXPECT_EQ(put(*writer_, k, k), WriteStatus::Appended);
  ASSERT_TRUE(writer_->snapshot().is_full);
  const std::uint64_t t0 = monotonic_ns();
  TakeOutcome t = take_at(100, t0);
  ASSERT_EQ(t.status, TakeStatus::Delivered);
  ASSERT_EQ(t.entries.size(), 2u) << "the burst";
  EXPECT_EQ(t.entries[0].key, 1u);
  EXPECT_EQ(t.entries[1].key, 2u);
  ASSERT_TRUE(staged_->commit());
  EXPECT_TRUE(writer_->snapshot().is_full) << "2 pending is above low water 1";
  EXPECT_EQ(put(*writer_, 5, 1), WriteStatus::TimedOut) << "the writer feels the paced egress";
  EXPECT_EQ(put(*writer_, 3, 10), WriteStatus::Merged) << "an open key still merges";

  t = take_at(100, t0);
  EXPECT_EQ(t.status, TakeStatus::Rate);
  EXPECT_GT(t.ready_in, 499ms);
  EXPECT_LE(t.ready_in, 500ms);
  EXPECT_EQ(take_at(100, t0 + 499 * kMs).status, TakeStatus::Rate);
  t = take_at(100, t0 + 500 * kMs);
  ASSERT_EQ(t.status, TakeStatus::Delivered);
  ASSERT_EQ(t.entries.size(), 1u) << "one token in half a second";
  EXPECT_EQ(t.entries[0].key, 3u);
  EXPECT_EQ(u64_of(t.entries[0].value), 13u);
  ASSERT_TRUE(staged_->commit());
  EXPECT_FALSE(writer_->snapshot().is_full) << "1 pending: low water";
  EXPECT_EQ(put(*writer_, 5, 1), WriteStatus::Appended);

  t = take_at(100, t0 + 2000 * kMs);  // 1.5 s later: the bucket holds its burst again
  ASSERT_EQ(t.status, TakeStatus::Delivered);
  EXPECT_EQ(t.entries.size(), 2u);
  ASSERT_TRUE(staged_->commit());
  const StagedSnapshot s = staged_->snapshot();
  EXPECT_EQ(s.delivered, 5u);
  EXPECT_EQ(s.held_rate, 2u);
}

// Entries older than the deadline when taken are consumed, not delivered,
// and counted; a batch of only expired entries is committed at once.
TEST_F(RelayStagesTest, ExpiryConsumesAndCountsEntriesOlderThanTheDeadline) {
  make("expiry", keyed(policy::kMax), RelayStages{{}, {}, ExpiryPolicy{20ms}});
  EXPECT_EQ(put(*writer_, 1, 10), WriteStatus::Appended);
  EXPECT_EQ(put(*writer_, 2, 20), WriteStatus::Appended);
  const std::uint64_t written = monotonic_ns();  // both entries are at least this old
  TakeOutcome t = take_at(16, written + 21 * kMs);
  EXPECT_EQ(t.status, TakeStatus::Empty);
  EXPECT_EQ(t.expired, 2u);
  EXPECT_EQ(staged_->snapshot().expired, 2u);
  RelaySnapshot rs = staged_->reader().snapshot();
  EXPECT_EQ(rs.depth, 0u);
  EXPECT_EQ(rs.in_hand, 0u) << "consumed: committed by the take";

  // A mixed batch: key 3 is old, key 4 fresh when judged.
  EXPECT_EQ(put(*writer_, 3, 30), WriteStatus::Appended);
  const std::uint64_t old_written = monotonic_ns();
  std::this_thread::sleep_for(50ms);
  const std::uint64_t before_fresh = monotonic_ns();
  EXPECT_EQ(put(*writer_, 4, 40), WriteStatus::Appended);
  // Key 3 is >= 51 ms old at `judged`; key 4 at most 1 ms plus the coarse
  // clock's tick (an entry's time may be a tick early): well under 20 ms.
  const std::uint64_t judged = std::max(before_fresh, old_written + 50 * kMs) + 1 * kMs;
  t = take_at(16, judged);
  ASSERT_EQ(t.status, TakeStatus::Delivered);
  ASSERT_EQ(t.entries.size(), 1u);
  EXPECT_EQ(t.entries[0].key, 4u);
  EXPECT_EQ(t.expired, 1u);
  EXPECT_GT(t.entries[0].created_ns, 0u);
  EXPECT_LE(t.entries[0].created_ns, monotonic_ns());
  EXPECT_EQ(staged_->snapshot().expired, 2u) << "counted when the batch is committed";
  ASSERT_TRUE(staged_->abandon());
  EXPECT_EQ(staged_->snapshot().expired, 2u) << "an abandoned batch consumed nothing";
  EXPECT_EQ(staged_->reader().snapshot().depth, 2u);
  t = take_at(16, judged);  // judged again, the same way
  ASSERT_EQ(t.status, TakeStatus::Delivered);
  ASSERT_EQ(t.entries.size(), 1u);
  EXPECT_EQ(t.entries[0].key, 4u);
  ASSERT_TRUE(staged_->commit());
  const StagedSnapshot s = staged_->snapshot();
  EXPECT_EQ(s.expired, 3u);
  EXPECT_EQ(s.delivered, 2u) << "the abandoned delivery and its redelivery";
  rs = staged_->reader().snapshot();
  EXPECT_EQ(rs.depth, 0u);
  EXPECT_EQ(rs.drained, 4u) << "the relay counts expired entries as drained: the stage took them";
}

// Records of cold pages carry no time (created_ns 0): expiry delivers them
// (counted as undated), while hot entries of the same age are consumed and
// counted.
TEST_F(RelayStagesTest, ExpiryDropsHotEntriesButDeliversColdOnesOfTheSameAge) {
  test::TempSpillDir spill;
  RelayConfig c;
  c.policy = policy::kRawFifo;
  c.max_entries = 8;
  c.value_bytes = 8;
  c.backpressure = Backpressure{Dimension::Count, 6, 2, Overflow::Spill};
  c.spill_dedup = true;
  c.spill.enabled = true;
  c.spill.page_size = spill::kPageHeaderSize + 4 * spill::record_stride(8);
  make("cold", c, RelayStages{{}, {}, ExpiryPolicy{1s}});
  constexpr std::uint64_t kOps = 20;
  for (std::uint64_t i = 0; i < kOps; ++i) EXPECT_EQ(put(*writer_, 0, i), WriteStatus::Appended);
  const std::uint64_t hot = writer_->snapshot().depth;
  ASSERT_GT(hot, 0u);
  const std::uint64_t late = monotonic_ns() + 10'000 * kMs;
  std::uint64_t delivered = 0, expired = 0;
  for (int guard = 0; guard < 100; ++guard) {
    auto t = staged_->take_at(3, late);
    ASSERT_TRUE(t) << t.error().what();
    expired += t->expired;
    if (t->status == TakeStatus::Empty) break;
    ASSERT_EQ(t->status, TakeStatus::Delivered);
    for (const RelayEntry& e : t->entries) {
      EXPECT_NE(e.page_id, 0u) << "only cold entries pass";
      EXPECT_EQ(e.created_ns, 0u);
      EXPECT_EQ(u64_of(e.value), delivered);
      ++delivered;
    }
    ASSERT_TRUE(staged_->commit());
  }
  EXPECT_EQ(expired, hot);
  EXPECT_EQ(delivered + expired, kOps);
  EXPECT_EQ(staged_->snapshot().expired, hot);
  EXPECT_EQ(staged_->snapshot().undated, delivered);
}

// §9: window and rate only change where the relay flushes, so for an
// associative policy the fold of what a staged reader delivers equals the
// fold of what a plain reader delivers, and both the flat fold of the ops.
// Two relays get the same ops in the same order; one is drained after every
// op, the other through a window and a rate on a simulated clock.
struct Folded {
  std::map<std::uint64_t, std::vector<std::byte>> by_key;     // keyed: the fold per key
  std::vector<std::pair<std::uint64_t, std::uint64_t>> fifo;  // raw_fifo: (key, value) in order
  std::uint64_t entries = 0;
};

void fold_into(Folded& f, const MergePolicy& p, const RelayEntry& e) {
  ++f.entries;
  if (!p.keyed) {
    f.fifo.emplace_back(e.key, u64_of(e.value));
    return;
  }
  const std::vector<std::byte> v(e.value.begin(), e.value.end());
  auto [it, fresh] = f.by_key.try_emplace(e.key, v);
  if (fresh) return;
  std::vector<std::byte> out(256);
  auto n = combine(p, it->second, v, out);
  ASSERT_TRUE(n) << n.error().what();
  out.resize(*n);
  it->second = std::move(out);
}

void expect_staged_fold_is_the_flat_fold(PolicyId id, const std::string& name) {
  auto policy = find_merge(id);
  ASSERT_TRUE(policy) << policy.error().what();
  const MergePolicy& p = **policy;
  RelayConfig c;
  c.policy = id;
  c.value_bytes = id == policy::kLww ? 24 : 8;
  if (p.keyed) {
    c.max_entries = 64;
    c.backpressure = Backpressure{Dimension::Count, 64, 16, Overflow::Conflate};
  } else {
    c.max_entries = 4096;
    c.backpressure = Backpressure{Dimension::Count, 4096, 1024, Overflow::Block};
  }
  auto wf = RelayWriter::create(name + "-flat", c);
  auto ws = RelayWriter::create(name + "-staged", c);
  ASSERT_TRUE(wf && ws);
  auto rf = RelayReader::open(name + "-flat");
  auto rs = RelayReader::open(name + "-staged");
  ASSERT_TRUE(rf && rs);
  auto staged =
      StagedReader::make(std::move(*rs), RelayStages{WindowPolicy{5ms}, RatePolicy{100, 3}, {}});
  ASSERT_TRUE(staged) << staged.error().what();

  std::mt19937_64 rng(20261208 + id);
  constexpr int kOps = 2000;
  Folded flat_ops, flat, via_stages;
  std::uint64_t t = monotonic_ns();
  for (int i = 0; i < kOps; ++i) {
    const std::uint64_t key = rng() % 16;
    std::vector<std::byte> op;
    if (id == policy::kLww) {
      std::vector<std::byte> payload = u64_value(rng());
      op = lww_value(1 + rng() % 1000, 1 + rng() % 3, payload);
    } else {
      op = u64_value(id == policy::kSum ? rng() % 100 : rng() % 1'000'000);
    }
    // The flat fold of the ops (an op that changes nothing folds to the same).
    RelayEntry as_entry;
    as_entry.key = key;
    as_entry.value = op;
    fold_into(flat_ops, p, as_entry);
    for (RelayWriter* w : {&*wf, &*ws}) {
      auto r = w->try_write(key, op);
      ASSERT_TRUE(r) << r.error().what();
      ASSERT_TRUE(r->status == WriteStatus::Appended || r->status == WriteStatus::Merged ||
                  r->status == WriteStatus::Unchanged)
          << to_string(r->status);
    }
    auto n = rf->drain(1000, [&](const RelayEntry& e) { fold_into(flat, p, e); });
    ASSERT_TRUE(n) << n.error().what();
    auto d = staged->take_at(4, t);
    ASSERT_TRUE(d) << d.error().what();
    if (d->status == TakeStatus::Delivered) {
      for (const RelayEntry& e : d->entries) fold_into(via_stages, p, e);
      ASSERT_TRUE(staged->commit());
    }
    t += kMs;
  }
  for (int guard = 0; guard < 100000; ++guard) {  // the rest, as the stages let it out
    auto d = staged->take_at(4, t);
    ASSERT_TRUE(d) << d.error().what();
    if (d->status == TakeStatus::Empty) break;
    if (d->status == TakeStatus::Delivered) {
      for (const RelayEntry& e : d->entries) fold_into(via_stages, p, e);
      ASSERT_TRUE(staged->commit());
    }
    t += kMs;
  }
  EXPECT_EQ(staged->reader().snapshot().depth, 0u);
  EXPECT_EQ(via_stages.by_key, flat.by_key) << p.name;
  EXPECT_EQ(via_stages.fifo, flat.fifo) << p.name;
  EXPECT_EQ(flat.by_key, flat_ops.by_key) << p.name;
  EXPECT_EQ(flat.fifo, flat_ops.fifo) << p.name;
  const StagedSnapshot s = staged->snapshot();
  EXPECT_GT(s.held_window, 0u) << "the window changed where the relay flushed";
  EXPECT_GT(s.held_rate, 0u) << "the rate changed where the relay flushed";
  if (id == policy::kSum) {
    EXPECT_LT(via_stages.entries, flat.entries) << "held entries merged more";
  } else if (p.keyed) {  // few ops raise a max or win an lww: merges are rarer
    EXPECT_LE(via_stages.entries, flat.entries);
  } else {
    EXPECT_EQ(via_stages.entries, static_cast<std::uint64_t>(kOps));
  }
}

TEST_F(RelayStagesTest, DeliveredFoldEqualsTheFlatFoldUnderWindowAndRateSum) {
  expect_staged_fold_is_the_flat_fold(policy::kSum, "conv-sum");
}
TEST_F(RelayStagesTest, DeliveredFoldEqualsTheFlatFoldUnderWindowAndRateMax) {
  expect_staged_fold_is_the_flat_fold(policy::kMax, "conv-max");
}
TEST_F(RelayStagesTest, DeliveredFoldEqualsTheFlatFoldUnderWindowAndRateLww) {
  expect_staged_fold_is_the_flat_fold(policy::kLww, "conv-lww");
}
TEST_F(RelayStagesTest, DeliveredSequenceEqualsTheOpSequenceUnderWindowAndRateRawFifo) {
  expect_staged_fold_is_the_flat_fold(policy::kRawFifo, "conv-fifo");
}

TEST_F(RelayStagesTest, TakeAgainBeforeCommitIsOutOfOrderAndDrainAbandonsOnAThrow) {
  make("order", keyed(policy::kSum), RelayStages{WindowPolicy{1ms}, {}, {}});
  EXPECT_EQ(put(*writer_, 1, 1), WriteStatus::Appended);
  const std::uint64_t t0 = monotonic_ns();
  ASSERT_EQ(take_at(16, t0).status, TakeStatus::Delivered);
  auto again = staged_->take_at(16, t0 + 10 * kMs);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, Errc::OutOfOrder);
  ASSERT_TRUE(staged_->abandon());
  std::this_thread::sleep_for(2ms);  // drain() judges by the clock: let the window open
  EXPECT_THROW((void)staged_->drain(16, [](const RelayEntry&) { throw 7; }), int);
  EXPECT_EQ(staged_->reader().snapshot().depth, 1u) << "abandoned: back in the head";
  EXPECT_EQ(staged_->reader().snapshot().in_hand, 0u);
  std::this_thread::sleep_for(2ms);
  std::uint64_t got = 0;
  auto d = staged_->drain(16, [&](const RelayEntry& e) { got += u64_of(e.value); });
  ASSERT_TRUE(d) << d.error().what();
  ASSERT_EQ(d->status, TakeStatus::Delivered);
  EXPECT_EQ(got, 1u);
  EXPECT_EQ(staged_->reader().snapshot().in_hand, 0u) << "drain committed";
}

// wait(): a closed window is waited out (only time opens it), an open one
// waits for an entry; a timeout shorter than the window returns false.
TEST_F(RelayStagesTest, WaitSleepsOutAClosedWindowAndWakesWhenItOpens) {
  make("wait", keyed(policy::kSum), RelayStages{WindowPolicy{200ms}, {}, {}});
  EXPECT_EQ(put(*writer_, 1, 1), WriteStatus::Appended);
  const auto before = std::chrono::steady_clock::now();  // the window opens after before + 200 ms
  auto d = staged_->drain(16, [](const RelayEntry&) {});
  ASSERT_TRUE(d);
  ASSERT_EQ(d->status, TakeStatus::Delivered);
  const auto opened = std::chrono::steady_clock::now() + 200ms;  // no earlier than this
  EXPECT_EQ(put(*writer_, 2, 1), WriteStatus::Appended);
  auto early = staged_->wait(1ms);
  ASSERT_TRUE(early);
  EXPECT_FALSE(*early) << "the window is closed for 200 ms";
  auto w = staged_->wait(10s);
  ASSERT_TRUE(w) << w.error().what();
  EXPECT_TRUE(*w);
  const auto returned = std::chrono::steady_clock::now();
  EXPECT_GE(returned, before + 200ms) << "returned before the window opened";
  const auto late = returned - opened;
  EXPECT_LE(late, test::kWakeBound)
      << "woken " << std::chrono::duration_cast<std::chrono::milliseconds>(late).count()
      << " ms after the window opened";
  d = staged_->drain(16, [](const RelayEntry&) {});
  ASSERT_TRUE(d);
  EXPECT_EQ(d->status, TakeStatus::Delivered);
}

TEST_F(RelayStagesTest, WaitWithTheGatesOpenWakesOnAWrite) {
  make("waitw", keyed(policy::kSum), RelayStages{WindowPolicy{1ms}, RatePolicy{1000, 10}, {}});
  test::expect_woken(test::probe_wake(
      [&] {
        auto r = staged_->wait(10s);
        ASSERT_TRUE(r) << r.error().what();
        EXPECT_TRUE(*r);
      },
      [&] { return staged_->reader().view().control->reader_waiting.load() != 0; },
      [&] { EXPECT_EQ(put(*writer_, 1, 1), WriteStatus::Appended); }));
}

}  // namespace
}  // namespace shm::relay_stages_test
