// Property tests over thousands of small seeds:
//  - converged egress: for every associative policy, the reader's fold of what
//    it drained, under a random drain schedule, equals the flat fold of the ops;
//  - commutative policies give the same fold whatever the order of the ops;
//  - raw_fifo delivers every op once, each writer's ops in its order.
#include "common/scale.hpp"
#include "common/temp_root.hpp"
#include "shm/relay/relay.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace shm {
namespace {

using namespace std::chrono_literals;
using Bytes = std::vector<std::byte>;

struct Op {
  std::uint64_t key;
  Bytes value;
};

Bytes gen_value(PolicyId p, std::mt19937_64& rng) {
  switch (p) {
    case policy::kLww:
      return lww_value(rng() % 6, rng() % 3, u64_value(rng() % 3));
    case policy::kSum:
      return u64_value(rng() % 4);
    case policy::kBitOr:
      return u64_value(rng() % 16);
    case policy::kKeepLatest:
      return u64_value(rng() % 4);
    default:
      return u64_value(rng() % 20);
  }
}

Bytes merge(const MergePolicy& p, const Bytes& a, const Bytes& b) {
  Bytes out(32);
  auto n = combine(p, a, b, out);
  EXPECT_TRUE(n);
  out.resize(n ? *n : 0);
  return out;
}

using Fold = std::map<std::uint64_t, Bytes>;

void fold_into(const MergePolicy& p, Fold& f, std::uint64_t key, const Bytes& v) {
  auto it = f.find(key);
  if (it == f.end())
    f.emplace(key, v);
  else
    it->second = merge(p, it->second, v);
}

// Identity ops leave no entry: drop the key from a flat fold they alone make.
Fold flat_fold(const MergePolicy& p, const std::vector<Op>& ops) {
  Fold f;
  for (const Op& op : ops)
    if (!is_identity(p, op.value)) fold_into(p, f, op.key, op.value);
  return f;
}

// Writes `ops` through the relay, draining with a random credit after random
// writes, then drains the rest; returns the reader's fold. The keys are
// written as key_base + key: a run of its own keys, so what the relay
// remembers of earlier runs' deliveries (the delivered-value memory, in play
// inside each run) stays out of it.
Fold through_relay(RelayWriter& w, RelayReader& r, const MergePolicy& p, const std::vector<Op>& ops,
                   std::mt19937_64& rng, std::uint64_t key_base) {
  Fold egress;
  auto drain = [&](std::size_t credit) {
    auto n = r.drain(credit, [&](const RelayEntry& e) {
      fold_into(p, egress, e.key - key_base, Bytes(e.value.begin(), e.value.end()));
    });
    EXPECT_TRUE(n) << n.error().what();
  };
  for (const Op& op : ops) {
    auto res = w.write(key_base + op.key, op.value, 0ns);
    EXPECT_TRUE(res && res->status != WriteStatus::TimedOut);
    if (rng() % 3 == 0) drain(1 + rng() % 3);
  }
  drain(1000);
  return egress;
}

class RelayPropertyTest : public ::testing::Test {
 protected:
  RelayConfig config(PolicyId p) {
    RelayConfig c;
    c.policy = p;
    c.value_bytes = 24;
    c.max_entries = 64;
    c.backpressure = {Dimension::Count, 60, 1, Overflow::Block};
    return c;
  }
  test::TempRoot root_;
};

TEST_F(RelayPropertyTest, AssociativePoliciesEgressFoldEqualsTheFlatFoldUnderAnyDrainSchedule) {
  const std::uint64_t seeds = test::scaled(2000);
  for (PolicyId id : {policy::kKeepLatest, policy::kLww, policy::kSum, policy::kMax, policy::kMin,
                      policy::kBitOr}) {
    const MergePolicy& p = *find_merge(id).value();
    ASSERT_TRUE(p.flags.associative);
    auto w = RelayWriter::create("assoc-" + p.name, config(id));
    ASSERT_TRUE(w) << w.error().what();
    auto r = RelayReader::open("assoc-" + p.name);
    ASSERT_TRUE(r);
    for (std::uint64_t seed = 0; seed < seeds; ++seed) {
      std::mt19937_64 rng(seed);
      std::vector<Op> ops(1 + rng() % 16);
      for (Op& op : ops) op = Op{rng() % 4, gen_value(id, rng)};
      const Fold egress = through_relay(*w, *r, p, ops, rng, seed * 16);
      ASSERT_EQ(egress, flat_fold(p, ops)) << p.name << " seed " << seed;
    }
  }
}

TEST_F(RelayPropertyTest, CommutativePoliciesAreInvariantUnderReordering) {
  const std::uint64_t seeds = test::scaled(1000);
  for (PolicyId id : {policy::kLww, policy::kSum, policy::kMax, policy::kMin, policy::kBitOr}) {
    const MergePolicy& p = *find_merge(id).value();
    ASSERT_TRUE(p.flags.commutative);
    auto w = RelayWriter::create("comm-" + p.name, config(id));
    ASSERT_TRUE(w) << w.error().what();
    auto r = RelayReader::open("comm-" + p.name);
    ASSERT_TRUE(r);
    for (std::uint64_t seed = 0; seed < seeds; ++seed) {
      std::mt19937_64 rng(seed);
      std::vector<Op> ops(1 + rng() % 12);
      for (Op& op : ops) op = Op{rng() % 3, gen_value(id, rng)};
      const Fold in_order = through_relay(*w, *r, p, ops, rng, seed * 32);
      std::shuffle(ops.begin(), ops.end(), rng);
      const Fold shuffled = through_relay(*w, *r, p, ops, rng, seed * 32 + 16);
      ASSERT_EQ(in_order, shuffled) << p.name << " seed " << seed;
    }
  }
}

TEST_F(RelayPropertyTest, RawFifoDeliversEveryOpOnceInEachWritersOrder) {
  const std::uint64_t seeds = test::scaled(1000);
  RelayConfig c = config(policy::kRawFifo);
  c.value_bytes = 8;
  auto w0 = RelayWriter::create("fifo", c);
  ASSERT_TRUE(w0);
  auto w1 = RelayWriter::open("fifo");
  auto w2 = RelayWriter::open("fifo");
  ASSERT_TRUE(w1 && w2);
  RelayWriter* writers[] = {&*w0, &*w1, &*w2};
  auto r = RelayReader::open("fifo");
  ASSERT_TRUE(r);
  for (std::uint64_t seed = 0; seed < seeds; ++seed) {
    std::mt19937_64 rng(seed);
    const std::size_t n = 1 + rng() % 30;
    std::vector<std::uint64_t> next(3, 0), seen_next(3, 0);
    std::vector<std::uint64_t> delivered;
    auto drain = [&](std::size_t credit) {
      auto got = r->drain(credit, [&](const RelayEntry& e) {
        const std::uint64_t v = u64_of(e.value);
        const std::uint64_t wid = v >> 32, i = v & 0xFFFF'FFFFu;
        ASSERT_LT(wid, 3u);
        ASSERT_EQ(i, seen_next[wid]) << "writer " << wid << " seed " << seed;
        ++seen_next[wid];
        delivered.push_back(v);
      });
      ASSERT_TRUE(got);
    };
    for (std::size_t k = 0; k < n; ++k) {
      const std::uint64_t wid = rng() % 3;
      auto res = writers[wid]->write(wid, u64_value((wid << 32) | next[wid]), 0ns);
      ASSERT_TRUE(res && res->status == WriteStatus::Appended);
      ++next[wid];
      if (rng() % 3 == 0) drain(1 + rng() % 4);
    }
    drain(1000);
    ASSERT_EQ(delivered.size(), n) << "seed " << seed;
    ASSERT_EQ(seen_next, next) << "seed " << seed;
  }
}

}  // namespace
}  // namespace shm
