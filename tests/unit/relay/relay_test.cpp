#include "shm/relay/relay.hpp"
#include "common/temp_root.hpp"
#include "common/text.hpp"
#include "shm/segment/kind.hpp"
#include "sidecar/metrics.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace shm {
namespace {

using namespace std::chrono_literals;

using test::contains;

using test::expect_error;

RelayConfig cfg(PolicyId policy, Overflow overflow = Overflow::Block, std::uint64_t high = 4,
                std::uint64_t low = 1, std::uint32_t capacity = 16, std::uint32_t value_bytes = 8) {
  RelayConfig c;
  c.policy = policy;
  c.max_entries = capacity;
  c.value_bytes = value_bytes;
  c.backpressure = Backpressure{Dimension::Count, high, low, overflow};
  return c;
}

WriteStatus put(RelayWriter& w, std::uint64_t key, std::uint64_t v) {
  auto r = w.write(key, u64_value(v), 0ns);
  EXPECT_TRUE(r) << r.error().what();
  return r ? r->status : WriteStatus::Full;
}

std::vector<std::pair<std::uint64_t, std::uint64_t>> drain_all(RelayReader& r,
                                                               std::size_t credit = 1000) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
  auto n = r.drain(credit, [&](const RelayEntry& e) { out.emplace_back(e.key, u64_of(e.value)); });
  EXPECT_TRUE(n) << n.error().what();
  return out;
}

class RelayTest : public ::testing::Test {
 protected:
  test::TempRoot root_;
};

TEST_F(RelayTest, CreateRefusesEveryPairTheValidationTableForbids) {
  struct Case {
    PolicyId policy;
    Overflow overflow;
    EgressOrder egress;
    std::string fragment;
  };
  const std::vector<Case> cases = {
      {policy::kRawFifo, Overflow::Conflate, EgressOrder::Arrival,
       "overflow conflate with policy raw_fifo"},
      {policy::kSum, Overflow::DropOldest, EgressOrder::Arrival,
       "overflow drop_oldest with policy sum"},
      {policy::kSum, Overflow::DropNewest, EgressOrder::Arrival,
       "overflow drop_newest with policy sum"},
      {policy::kSum, Overflow::Spill, EgressOrder::Arrival,
       "needs an idempotent merge or spill dedup"},
      {policy::kMax, Overflow::Spill, EgressOrder::Arrival, "Spill needs a spill store"},
      {policy::kKeepLatest, Overflow::Block, EgressOrder::Reordering,
       "egress reordering with policy keep_latest"},
      {policy::kRawFifo, Overflow::Block, EgressOrder::Reordering, "needs a commutative merge"},
  };
  int n = 0;
  for (const Case& c : cases) {
    RelayConfig rc = cfg(c.policy, c.overflow);
    rc.egress = c.egress;
    auto w = RelayWriter::create("refused" + std::to_string(n++), rc);
    expect_error(w, Errc::PolicyRefused, c.fragment);
  }
  // Spill with dedup on a non-idempotent policy still needs the store.
  RelayConfig rc = cfg(policy::kSum, Overflow::Spill);
  rc.spill_dedup = true;
  expect_error(RelayWriter::create("dedup", rc), Errc::PolicyRefused, "none is configured");
  // And the sound pairs are accepted.
  EXPECT_TRUE(RelayWriter::create("ok1", cfg(policy::kSum, Overflow::Conflate)));
  EXPECT_TRUE(RelayWriter::create("ok2", cfg(policy::kRawFifo, Overflow::DropOldest)));
  RelayConfig re = cfg(policy::kMax, Overflow::DropNewest);
  re.egress = EgressOrder::Reordering;
  EXPECT_TRUE(RelayWriter::create("ok3", re));
}

TEST_F(RelayTest, LowWaterMustBeBelowHighWater) {
  expect_error(RelayWriter::create("eq", cfg(policy::kMax, Overflow::Block, 4, 4)),
               Errc::InvalidArgument, "low_water 4 must be below high_water 4");
  auto w = RelayWriter::create("ok", cfg(policy::kMax));
  ASSERT_TRUE(w);
  expect_error(w->retune({Dimension::Count, 3, 5, Overflow::Block}), Errc::InvalidArgument,
               "low_water 5 must be below high_water 3");
  EXPECT_TRUE(w->retune({Dimension::Count, 8, 2, Overflow::DropOldest}));  // max is not lossless
  auto s = RelayWriter::create("sum", cfg(policy::kSum));
  ASSERT_TRUE(s);
  expect_error(s->retune({Dimension::Count, 8, 2, Overflow::DropOldest}), Errc::PolicyRefused,
               "overflow drop_oldest with policy sum");
  EXPECT_EQ(s->snapshot().backpressure.overflow, Overflow::Block)
      << "a refused retune changes nothing";
}

TEST_F(RelayTest, KeyedPoliciesMergeAndReportWritesThatChangeNothing) {
  auto w = RelayWriter::create("sum", cfg(policy::kSum, Overflow::Block, 16, 1, 16));
  ASSERT_TRUE(w) << w.error().what();
  auto r = RelayReader::open("sum");
  ASSERT_TRUE(r) << r.error().what();
  EXPECT_EQ(put(*w, 1, 5), WriteStatus::Appended);
  EXPECT_EQ(put(*w, 1, 7), WriteStatus::Merged);
  const RelaySnapshot before = w->snapshot();
  EXPECT_EQ(put(*w, 1, 0), WriteStatus::Unchanged);  // a sum of zero
  EXPECT_EQ(put(*w, 2, 0), WriteStatus::Unchanged);  // even with no open entry
  const RelaySnapshot after = w->snapshot();
  EXPECT_EQ(after.depth, before.depth);
  EXPECT_EQ(after.lag, before.lag);
  EXPECT_EQ(after.notifies, before.notifies) << "a write that changes nothing wakes nobody";
  EXPECT_EQ(after.unchanged, before.unchanged + 2);
  auto got = drain_all(*r);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], (std::pair<std::uint64_t, std::uint64_t>{1, 12}));

  auto m = RelayWriter::create("max", cfg(policy::kMax, Overflow::Block, 16, 1));
  ASSERT_TRUE(m);
  EXPECT_EQ(put(*m, 3, 10), WriteStatus::Appended);
  const std::uint64_t notifies = m->snapshot().notifies;
  EXPECT_EQ(put(*m, 3, 10), WriteStatus::Unchanged);
  EXPECT_EQ(put(*m, 3, 4), WriteStatus::Unchanged);
  EXPECT_EQ(m->snapshot().notifies, notifies);
  EXPECT_EQ(put(*m, 3, 11), WriteStatus::Merged);

  auto k = RelayWriter::create("latest", cfg(policy::kKeepLatest, Overflow::Block, 16, 1));
  ASSERT_TRUE(k);
  EXPECT_EQ(put(*k, 0, 9), WriteStatus::Appended);
  EXPECT_EQ(put(*k, 0, 9), WriteStatus::Unchanged);
  EXPECT_EQ(put(*k, 0, 8), WriteStatus::Merged);

  auto b = RelayWriter::create("bits", cfg(policy::kBitOr, Overflow::Block, 16, 1));
  ASSERT_TRUE(b);
  EXPECT_EQ(put(*b, 0, 0b0101), WriteStatus::Appended);
  EXPECT_EQ(put(*b, 0, 0b0001), WriteStatus::Unchanged);
  EXPECT_EQ(put(*b, 0, 0b1000), WriteStatus::Merged);
}

// An open entry whose length in the mapping exceeds the value size is
// Corrupt at the next merge into it: the merge never reads past the slot.
// keep_latest: a shorter value that is a prefix of the current one changes
// the value (its length), so it is Merged and the reader gets the short one;
// every other merge test used fixed sizes (a mutant comparing only the common
// prefix survived).
TEST_F(RelayTest, AShorterValueThatIsAPrefixOfTheCurrentOneIsAChange) {
  auto w = RelayWriter::create("prefix", cfg(policy::kKeepLatest, Overflow::Block, 16, 1, 16, 16));
  ASSERT_TRUE(w) << w.error().what();
  auto r = RelayReader::open("prefix");
  ASSERT_TRUE(r) << r.error().what();
  const auto text = [](std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); };
  ASSERT_EQ(w->write(1, text("abcdef"), 0ns)->status, WriteStatus::Appended);
  EXPECT_EQ(w->write(1, text("abc"), 0ns)->status, WriteStatus::Merged);
  EXPECT_EQ(w->write(1, text("abc"), 0ns)->status, WriteStatus::Unchanged);
  EXPECT_EQ(w->write(1, text("abcdef"), 0ns)->status, WriteStatus::Merged);
  EXPECT_EQ(w->write(1, text("ab"), 0ns)->status, WriteStatus::Merged);
  std::vector<std::string> got;
  auto n = r->drain(8, [&](const RelayEntry& e) {
    got.emplace_back(reinterpret_cast<const char*>(e.value.data()), e.value.size());
  });
  ASSERT_TRUE(n) << n.error().what();
  EXPECT_EQ(got, std::vector<std::string>{"ab"});
  EXPECT_EQ(r->snapshot().bytes, 0u);
}

// DropOldest counts every op of the dropped entry, not one per entry: on a
// keyed policy an entry holds several merged ops (raw_fifo, one op an entry,
// could not tell the two apart). sum is lossless, so no drop: max.
TEST_F(RelayTest, DropOldestCountsEveryOpOfTheDroppedEntry) {
  auto w = RelayWriter::create("drop", cfg(policy::kMax, Overflow::DropOldest, 3, 1, 8));
  ASSERT_TRUE(w) << w.error().what();
  for (std::uint64_t i = 0; i < 5; ++i)
    ASSERT_EQ(put(*w, 1, i + 1), i == 0 ? WriteStatus::Appended : WriteStatus::Merged);
  ASSERT_EQ(put(*w, 2, 1), WriteStatus::Appended);
  ASSERT_EQ(put(*w, 3, 1), WriteStatus::Appended);   // high water 3: full
  EXPECT_EQ(put(*w, 4, 1), WriteStatus::Displaced);  // drops key 1, its 5 ops
  const RelaySnapshot s = w->snapshot();
  EXPECT_EQ(s.dropped, 5u);
  EXPECT_EQ(s.lag, 3u) << "the ops of keys 2, 3 and 4";
}

TEST_F(RelayTest, AMergeIntoAnEntryLongerThanTheValueSizeIsCorrupt) {
  auto w = RelayWriter::create("longer", cfg(policy::kSum, Overflow::Block, 16, 1, 16));
  ASSERT_TRUE(w) << w.error().what();
  EXPECT_EQ(put(*w, 1, 5), WriteStatus::Appended);
  const std::uint32_t e = w->view().control->head.load();
  ASSERT_LT(e, 16u);
  w->view().entry(e).len.store(4096);
  auto r = w->write(1, u64_value(7), 0ns);
  ASSERT_FALSE(r) << "a 4096-byte value in an 8-byte slot gave " << to_string(r->status);
  EXPECT_EQ(r.error().code, Errc::Corrupt) << r.error().what();
  EXPECT_TRUE(contains(r.error().message, "holds a 4096-byte value (value size 8)"))
      << r.error().what();
}

TEST_F(RelayTest, LwwConvergesWhateverTheArrivalOrder) {
  RelayConfig c = cfg(policy::kLww, Overflow::Block, 16, 1, 16, 32);
  auto w = RelayWriter::create("lww", c);
  ASSERT_TRUE(w) << w.error().what();
  auto r = RelayReader::open("lww");
  ASSERT_TRUE(r);
  const auto a = lww_value(10, 1), b = lww_value(10, 2), old = lww_value(9, 7);
  ASSERT_TRUE(w->write(5, b, shm::forever));
  auto ra = w->write(5, a, shm::forever);
  ASSERT_TRUE(ra);
  EXPECT_EQ(ra->status, WriteStatus::Unchanged);  // (10, 1) loses to (10, 2)
  auto ro = w->write(5, old, shm::forever);
  ASSERT_TRUE(ro);
  EXPECT_EQ(ro->status, WriteStatus::Unchanged);
  std::vector<std::byte> seen;
  ASSERT_TRUE(
      r->drain(10, [&](const RelayEntry& e) { seen.assign(e.value.begin(), e.value.end()); }));
  EXPECT_EQ(seen, b);
}

TEST_F(RelayTest, SecondReaderIsRoleTakenWhileTheFirstLives) {
  auto r = RelayReader::create("one", cfg(policy::kMax));
  ASSERT_TRUE(r);
  expect_error(RelayReader::open("one"), Errc::RoleTaken, "role 'reader'");
  auto w1 = RelayWriter::open("one");
  auto w2 = RelayWriter::open("one");
  EXPECT_TRUE(w1 && w2) << "any number of writers";
}

TEST_F(RelayTest, IsFullHasHysteresisAndDropNewestCountsAndLogs) {
  auto w = RelayWriter::create("hyst", cfg(policy::kKeepLatest, Overflow::DropNewest, 4, 1));
  ASSERT_TRUE(w);
  auto r = RelayReader::open("hyst");
  ASSERT_TRUE(r);
  for (std::uint64_t k = 0; k < 3; ++k) EXPECT_EQ(put(*w, k, 1), WriteStatus::Appended);
  EXPECT_FALSE(w->snapshot().is_full);
  EXPECT_EQ(put(*w, 3, 1), WriteStatus::Appended);
  EXPECT_TRUE(w->snapshot().is_full) << "sets at high water";
  EXPECT_EQ(put(*w, 9, 1), WriteStatus::Dropped);
  EXPECT_EQ(put(*w, 0, 2), WriteStatus::Merged) << "an open key still merges when full";
  EXPECT_EQ(drain_all(*r, 2).size(), 2u);
  EXPECT_TRUE(w->snapshot().is_full) << "level 2 is above low water 1: still full";
  EXPECT_EQ(put(*w, 9, 1), WriteStatus::Dropped);
  EXPECT_EQ(drain_all(*r, 1).size(), 1u);
  const RelaySnapshot s = w->snapshot();
  EXPECT_FALSE(s.is_full) << "clears at low water";
  EXPECT_EQ(s.dropped, 2u);
  int drops = 0;
  for (const RelayEvent& e : s.events) drops += e.kind == relay::EventKind::Dropped ? 1 : 0;
  EXPECT_EQ(drops, 2) << "every lossy action is logged";
  EXPECT_EQ(put(*w, 9, 1), WriteStatus::Appended);
}

TEST_F(RelayTest, DropOldestDisplacesTheOldestEntry) {
  auto w = RelayWriter::create("old", cfg(policy::kRawFifo, Overflow::DropOldest, 3, 1));
  ASSERT_TRUE(w);
  auto r = RelayReader::open("old");
  ASSERT_TRUE(r);
  for (std::uint64_t v = 1; v <= 3; ++v) EXPECT_EQ(put(*w, 0, v), WriteStatus::Appended);
  EXPECT_EQ(put(*w, 0, 4), WriteStatus::Displaced);
  EXPECT_EQ(put(*w, 0, 5), WriteStatus::Displaced);
  const auto got = drain_all(*r);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].second, 3u);
  EXPECT_EQ(got[2].second, 5u);
  EXPECT_EQ(w->snapshot().dropped, 2u);
}

TEST_F(RelayTest, BlockTimesOutWithNothingWrittenAndResumesBelowLowWater) {
  auto w = RelayWriter::create("blk", cfg(policy::kRawFifo, Overflow::Block, 2, 0));
  ASSERT_TRUE(w);
  auto r = RelayReader::open("blk");
  ASSERT_TRUE(r);
  EXPECT_EQ(put(*w, 0, 1), WriteStatus::Appended);
  EXPECT_EQ(put(*w, 0, 2), WriteStatus::Appended);
  auto t = w->write(0, u64_value(3), 5ms);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->status, WriteStatus::TimedOut);
  EXPECT_EQ(w->snapshot().depth, 2u);
  EXPECT_EQ(w->snapshot().timed_out, 1u);
  // The timed-out write above parked once already: wait for this writer's own park.
  const std::uint64_t parked_before = w->snapshot().blocked;
  std::atomic<int> done{0};
  std::thread writer([&] {
    auto x = w->write(0, u64_value(3), 30s);
    done = x && x->status == WriteStatus::Appended ? 1 : 2;
  });
  // The writer parks; draining one entry (level 1 > low 0) does not release it.
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (w->snapshot().blocked == parked_before && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  EXPECT_EQ(w->snapshot().blocked, parked_before + 1) << "the writer never parked";
  EXPECT_EQ(drain_all(*r, 1).size(), 1u);
  EXPECT_EQ(done.load(), 0);
  EXPECT_EQ(drain_all(*r, 1).size(), 1u);  // level 0: is_full clears, the writer resumes
  writer.join();
  EXPECT_EQ(done.load(), 1);
  EXPECT_EQ(drain_all(*r).size(), 1u);
}

TEST_F(RelayTest, RetuneFromAnotherHandleIsFollowedWithoutReattaching) {
  auto w = RelayWriter::create("tune", cfg(policy::kKeepLatest, Overflow::DropNewest, 2, 1));
  ASSERT_TRUE(w);
  EXPECT_EQ(put(*w, 1, 1), WriteStatus::Appended);
  EXPECT_EQ(put(*w, 2, 1), WriteStatus::Appended);
  EXPECT_EQ(put(*w, 3, 1), WriteStatus::Dropped);
  ASSERT_TRUE(retune_relay("tune", {Dimension::Count, 8, 2, Overflow::DropNewest}));
  EXPECT_EQ(w->snapshot().backpressure.high_water, 8u);
  EXPECT_FALSE(w->snapshot().is_full) << "level 2 is at the new low water";
  EXPECT_EQ(put(*w, 3, 1), WriteStatus::Appended);
  expect_error(retune_relay("tune", {Dimension::Count, 8, 9, Overflow::Block}),
               Errc::InvalidArgument, "low_water 9");
  // The kind's set (shmctl set) goes through the same validation.
  auto seg = Segment::open_any("tune", {});
  ASSERT_TRUE(seg);
  const KindDescriptor* kind = find_kind(kRelayKind);
  ASSERT_NE(kind, nullptr);
  ASSERT_TRUE(kind->set(*seg, "high_water", "16"));
  EXPECT_EQ(w->snapshot().backpressure.high_water, 16u);
  expect_error(kind->set(*seg, "low_water", "16"), Errc::InvalidArgument,
               "low_water 16 must be below high_water 16");
  expect_error(kind->set(*seg, "dimension", "weight"), Errc::InvalidArgument, "dimension 'weight'");
  auto fifo = RelayWriter::create("fifo", cfg(policy::kRawFifo));
  ASSERT_TRUE(fifo);
  auto fseg = Segment::open_any("fifo", {});
  ASSERT_TRUE(fseg);
  expect_error(kind->set(*fseg, "overflow", "conflate"), Errc::PolicyRefused,
               "overflow conflate with policy raw_fifo");
}

TEST_F(RelayTest, ReconfigureOnlyWhileTheHeadIsEmptyAndRevalidates) {
  auto w = RelayWriter::create("swap", cfg(policy::kMax, Overflow::DropOldest));
  ASSERT_TRUE(w);
  auto r = RelayReader::open("swap");
  ASSERT_TRUE(r);
  EXPECT_EQ(put(*w, 1, 3), WriteStatus::Appended);
  EXPECT_FALSE(w->can_reconfigure());
  expect_error(w->reconfigure(policy::kMin), Errc::InvalidArgument, "needs an empty head (depth 1");
  EXPECT_EQ(drain_all(*r).size(), 1u);
  EXPECT_TRUE(w->can_reconfigure());
  expect_error(w->reconfigure(policy::kSum), Errc::PolicyRefused,
               "overflow drop_oldest with policy sum");
  ASSERT_TRUE(w->reconfigure(policy::kSum, Overflow::Block));
  EXPECT_EQ(put(*w, 1, 3), WriteStatus::Appended);
  EXPECT_EQ(put(*w, 1, 3), WriteStatus::Merged) << "the new merge is followed";
  const auto got = drain_all(*r);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].second, 6u);
  EXPECT_EQ(w->snapshot().reconfigures, 1u);
}

TEST_F(RelayTest, CustomMergesAreRegisteredAndTheirLawsChecked) {
  // A merge that keeps the longer string, ties broken by bytes: a semilattice.
  MergePolicy longest;
  longest.id = policy::kFirstCustomPolicy + 1;
  longest.name = "longest";
  longest.flags = {true, true, true, true, false};
  longest.combine = [](std::span<const std::byte> a, std::span<const std::byte> b,
                       std::span<std::byte> out) {
    const bool take_b = b.size() > a.size() ||
                        (b.size() == a.size() &&
                         std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end()));
    const auto& src = take_b ? b : a;
    std::memcpy(out.data(), src.data(), src.size());
    return src.size();
  };
  ASSERT_TRUE(register_merge(longest));
  ASSERT_TRUE(register_merge(longest)) << "the same registration again is a no-op";
  auto gen = [](std::mt19937_64& rng) {
    std::vector<std::byte> v(rng() % 5 + 1);
    for (auto& b : v) b = static_cast<std::byte>(rng() % 3);
    return v;
  };
  EXPECT_TRUE(check_merge_laws(longest, gen).ok());

  // A subtraction that claims to be a lattice: every law is refuted.
  MergePolicy minus;
  minus.id = policy::kFirstCustomPolicy + 2;
  minus.name = "minus";
  minus.flags = {true, true, true, true, false};
  minus.op_size = 8;
  minus.combine = [](std::span<const std::byte> a, std::span<const std::byte> b,
                     std::span<std::byte> out) {
    const std::uint64_t r = u64_of(a) - u64_of(b);
    std::memcpy(out.data(), &r, 8);
    return std::size_t{8};
  };
  auto g8 = [](std::mt19937_64& rng) { return u64_value(rng() % 100 + 1); };
  const LawReport bad = check_merge_laws(minus, g8);
  ASSERT_FALSE(bad.ok());
  std::string all;
  for (const auto& l : bad.violations) all += l + "\n";
  EXPECT_TRUE(contains(all, "declares associative")) << all;
  EXPECT_TRUE(contains(all, "declares commutative")) << all;
  EXPECT_TRUE(contains(all, "declares idempotent")) << all;
  for (PolicyId id :
       {policy::kKeepLatest, policy::kSum, policy::kMax, policy::kMin, policy::kBitOr}) {
    auto p = find_merge(id);
    ASSERT_TRUE(p);
    EXPECT_TRUE(check_merge_laws(**p, g8).ok()) << (*p)->name;
  }

  RelayConfig c = cfg(longest.id, Overflow::Conflate, 16, 1, 16, 16);
  auto w = RelayWriter::create("custom", c);
  ASSERT_TRUE(w) << w.error().what();
  auto r = RelayReader::open("custom");
  ASSERT_TRUE(r);
  const std::vector<std::byte> s1{std::byte{1}, std::byte{2}}, s2{std::byte{9}};
  ASSERT_TRUE(w->write(4, s1, shm::forever));
  auto again = w->write(4, s2, shm::forever);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, WriteStatus::Unchanged);
  expect_error(RelayWriter::create("unknown", cfg(4242)), Errc::UnknownPolicy,
               "merge policy id 4242 is not registered");
  expect_error(register_merge(MergePolicy{longest.id, "other", {}, true, 0, 0, longest.combine}),
               Errc::AlreadyExists, "already registered as 'longest'");
}

TEST_F(RelayTest, EntriesADeadReaderHeldAreRedeliveredWithTheirSequences) {
  auto w = RelayWriter::create("again", cfg(policy::kSum, Overflow::Block, 16, 1));
  ASSERT_TRUE(w);
  std::uint64_t first = 0;
  {
    auto r = RelayReader::open("again");
    ASSERT_TRUE(r);
    EXPECT_EQ(put(*w, 1, 2), WriteStatus::Appended);
    EXPECT_EQ(put(*w, 1, 3), WriteStatus::Merged);
    auto got = r->take(10);
    ASSERT_TRUE(got);
    ASSERT_EQ(got->size(), 1u);
    first = (*got)[0].first_seq;
    EXPECT_TRUE(w->snapshot().is_draining);
    // The key's entry is in hand: a new write opens a new entry.
    EXPECT_EQ(put(*w, 1, 10), WriteStatus::Appended);
    // The reader "dies" without commit (its handle goes away).
  }
  auto r2 = RelayReader::open("again");
  ASSERT_TRUE(r2);
  std::vector<RelayEntry> seen;
  ASSERT_TRUE(r2->drain(10, [&](const RelayEntry& e) { seen.push_back(e); }));
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_TRUE(seen[0].redelivered);
  EXPECT_EQ(seen[0].first_seq, first);
  EXPECT_EQ(seen[0].op_count, 2u);
  EXPECT_FALSE(seen[1].redelivered);
  const RelaySnapshot s = w->snapshot();
  EXPECT_EQ(s.returned, 1u);
  EXPECT_EQ(s.depth, 0u);
  EXPECT_EQ(s.in_hand, 0u);
  auto seg = Segment::open_any("again", {});
  ASSERT_TRUE(seg);
  EXPECT_TRUE(find_kind(kRelayKind)->verify(*seg).empty());
}

TEST_F(RelayTest, InboxAndOutboxFactoriesUseTheRolesTableDefaults) {
  const RelayConfig state = Outbox::config(policy::kLww, Traffic::State, 64, 32);
  EXPECT_EQ(state.backpressure.overflow, Overflow::Conflate);
  EXPECT_TRUE(Outbox::create("out", state));
  const RelayConfig events = Outbox::config(policy::kRawFifo, Traffic::Events);
  EXPECT_EQ(events.backpressure.overflow, Overflow::Spill);
  EXPECT_TRUE(events.spill.enabled);  // created and written in RelaySpillTest
  EXPECT_TRUE(events.spill_dedup);    // raw_fifo is not idempotent
  EXPECT_FALSE(Outbox::config(policy::kMax, Traffic::Events).spill_dedup);
  auto in = Inbox::config(policy::kMax);
  ASSERT_TRUE(in);
  EXPECT_EQ(in->backpressure.overflow, Overflow::Conflate);
  auto log = Inbox::config(policy::kRawFifo);
  ASSERT_TRUE(log);
  EXPECT_EQ(log->backpressure.overflow, Overflow::Block);
  EXPECT_TRUE(Inbox::create("in", *log));
}

TEST_F(RelayTest, ConflateAdmitsNewKeysUntilTheTableIsFull) {
  auto w = RelayWriter::create("conf", cfg(policy::kMax, Overflow::Conflate, 2, 1, 3));
  ASSERT_TRUE(w);
  EXPECT_EQ(put(*w, 1, 1), WriteStatus::Appended);
  EXPECT_EQ(put(*w, 2, 1), WriteStatus::Appended);
  EXPECT_TRUE(w->snapshot().is_full);
  EXPECT_EQ(put(*w, 3, 1), WriteStatus::Appended);
  EXPECT_EQ(put(*w, 4, 1), WriteStatus::Full) << "no free entry: back-pressure, nothing lost";
  EXPECT_EQ(put(*w, 1, 5), WriteStatus::Merged);
  const RelaySnapshot s = w->snapshot();
  EXPECT_EQ(s.conflated, 1u);
  EXPECT_EQ(s.refused_full, 1u);
  EXPECT_EQ(s.pending_keys, 3u);
}

// Real time, no injected clock: polls until the oldest pending op is older
// than `ns` (the age tests' high water is 2 ms, so 3 ms is past it).
void wait_until_oldest_is_older_than(const RelayWriter& w, std::uint64_t ns) {
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (w.snapshot().oldest_age_ns < ns && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  ASSERT_GE(w.snapshot().oldest_age_ns, ns);
}

TEST_F(RelayTest, AgeDimensionFillsWhenTheOldestPendingOpGetsOld) {
  RelayConfig c = cfg(policy::kMax, Overflow::DropNewest);
  c.backpressure = {Dimension::Age, 2, 0, Overflow::DropNewest};  // milliseconds
  auto w = RelayWriter::create("age", c);
  ASSERT_TRUE(w);
  auto r = RelayReader::open("age");
  ASSERT_TRUE(r);
  EXPECT_EQ(put(*w, 1, 1), WriteStatus::Appended);
  ASSERT_NO_FATAL_FAILURE(wait_until_oldest_is_older_than(*w, 3'000'000));
  EXPECT_EQ(put(*w, 2, 1), WriteStatus::Dropped) << "the oldest op is older than high water";
  EXPECT_TRUE(w->snapshot().is_full);
  EXPECT_EQ(put(*w, 1, 5), WriteStatus::Merged) << "an open key still merges";
  EXPECT_TRUE(w->snapshot().is_full) << "a merge reads the age: still above low water";
  EXPECT_EQ(drain_all(*r).size(), 1u);
  EXPECT_FALSE(w->snapshot().is_full) << "nothing pending: age 0 is at low water";
  EXPECT_EQ(put(*w, 2, 1), WriteStatus::Appended);
}

// Age with Block, in real time: once the oldest pending op is older than high
// water a new key parks the writer; a short timeout gives TimedOut with
// nothing written; a parked writer resumes when the reader drains.
TEST_F(RelayTest, AgeDimensionParksAWriterUntilTheReaderDrains) {
  RelayConfig c = cfg(policy::kMax, Overflow::Block);
  c.backpressure = {Dimension::Age, 2, 0, Overflow::Block};  // milliseconds
  auto w = RelayWriter::create("aged", c);
  ASSERT_TRUE(w);
  auto r = RelayReader::open("aged");
  ASSERT_TRUE(r);
  EXPECT_EQ(put(*w, 1, 1), WriteStatus::Appended);
  ASSERT_NO_FATAL_FAILURE(wait_until_oldest_is_older_than(*w, 3'000'000));
  auto timed = w->write(2, u64_value(1), 20ms);
  ASSERT_TRUE(timed);
  EXPECT_EQ(timed->status, WriteStatus::TimedOut);
  RelaySnapshot s = w->snapshot();
  EXPECT_EQ(s.timed_out, 1u);
  EXPECT_EQ(s.depth, 1u) << "a timed-out write writes nothing";
  EXPECT_TRUE(s.is_full);

  auto w2 = RelayWriter::open("aged");  // a handle of its own for the parking thread
  ASSERT_TRUE(w2);
  std::optional<Result<WriteOutcome>> parked;
  std::thread writer([&] { parked.emplace(w2->write(2, u64_value(1), 30s)); });
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (w->snapshot().blocked < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  EXPECT_EQ(w->snapshot().blocked, 2u) << "the second writer never parked";
  EXPECT_EQ(drain_all(*r).size(), 1u);
  writer.join();
  ASSERT_TRUE(parked && *parked);
  EXPECT_EQ((*parked)->status, WriteStatus::Appended);
  s = w->snapshot();
  EXPECT_EQ(s.depth, 1u);
  EXPECT_EQ(s.timed_out, 1u);
}

TEST_F(RelayTest, SidecarMetricsExportTheProjectionsCountersAndFlags) {
  auto w = RelayWriter::create("m", cfg(policy::kKeepLatest, Overflow::DropNewest, 2, 1));
  ASSERT_TRUE(w);
  EXPECT_EQ(put(*w, 1, 1), WriteStatus::Appended);
  EXPECT_EQ(put(*w, 2, 1), WriteStatus::Appended);
  EXPECT_EQ(put(*w, 3, 1), WriteStatus::Dropped);
  auto seg = Segment::open_any("m", {.read_only = true});
  ASSERT_TRUE(seg);
  Node tree;
  find_kind(kRelayKind)->describe(*seg, tree);
  sidecar::MetricsWriter mw;
  mw.tree("libshm_relay", tree, {{"segment", "m"}});
  const std::string out = mw.render();
  for (const char* line :
       {"libshm_relay_flags_is_full{segment=\"m\"} 1\n",
        "libshm_relay_flags_is_spilling{segment=\"m\"} 0\n",
        "libshm_relay_head_depth{segment=\"m\"} 2\n", "libshm_relay_head_lag{segment=\"m\"} 2\n",
        "libshm_relay_counters_dropped_total{segment=\"m\"} 1\n",
        "libshm_relay_backpressure_high_water{segment=\"m\"} 2\n"})
    EXPECT_NE(out.find(line), std::string::npos) << line << out;
}

// Move-assigning over a live relay handle detaches while the old mapping is
// still there (a defaulted operator= unmapped first: SIGSEGV in the detach).
TEST_F(RelayTest, MoveAssignOverALiveHandleDetachesBeforeUnmapping) {
  RelayConfig c;
  auto a = RelayWriter::create("a", c);
  ASSERT_TRUE(a) << a.error().what();
  auto b = RelayWriter::create("b", c);
  ASSERT_TRUE(b) << b.error().what();
  auto r = RelayReader::open("a");
  ASSERT_TRUE(r) << r.error().what();
  auto observer = Segment::open_any("a", {});
  ASSERT_TRUE(observer) << observer.error().what();
  ASSERT_EQ(observer->slots().size(), 2u);

  *a = std::move(*b);  // a writer over a writer
  EXPECT_EQ(observer->slots().size(), 1u) << "the old writer slot is still held";
  EXPECT_EQ(a->segment().name(), "b");
  auto other_reader = RelayReader::create("c", c);
  ASSERT_TRUE(other_reader) << other_reader.error().what();
  *r = std::move(*other_reader);  // the reader: its exclusive role is free again
  EXPECT_TRUE(observer->slots().empty()) << "the old reader slot is still held";
  EXPECT_TRUE(RelayReader::open("a")) << "the reader role is free";
}

}  // namespace
}  // namespace shm
