// Every egress operation killed at every store it makes to the mapping
// (N = 1 ... all, a counting hook: common/store_crash.hpp), on the first, a
// middle and the last record of the retained range, which wraps around the
// record table. After each kill the next locker repairs, and the state must
// be exactly the one before or the one after the operation (the same history
// run without a kill), never faulted, and the invariant check clean.
#include "common/must.hpp"
#include "common/store_crash.hpp"
#include "common/temp_root.hpp"
#include "shm/egress/egress.hpp"
#include "shm/segment/segment.hpp"

#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <optional>
#include <string>

namespace shm::egress_store_crash_test {
namespace {

constexpr const char* kName = "store-crash";
constexpr std::uint64_t kGen = 1;

EgressParams params() {
  EgressParams p;
  p.max_payloads = 8;
  p.slot_bytes = 16;
  p.inflight_limit = 8;
  p.retry_budget = 2;
  p.retry_base = std::chrono::nanoseconds(100);
  p.retry_ceiling = std::chrono::nanoseconds(1000);
  return p;
}

const std::byte kPayload[3] = {std::byte{'a'}, std::byte{'b'}, std::byte{'c'}};

// Everything a projection says except the reader counters (a repair moves
// every counter once: docs/egress.md, deviations).
struct Same {
  std::uint64_t generation, next_sequence;
  std::optional<std::uint64_t> acked;
  std::uint64_t pending, inflight, parked, terminal;
  std::optional<egress::RetryRecord> retry;
  std::optional<std::uint64_t> next_due, oldest_enqueue;
  std::vector<egress::RecordView> records;
  friend bool operator==(const Same&, const Same&) = default;
};
Same same(const egress::Projection& p) {
  return Same{p.generation, p.next_sequence, p.acked_through, p.pending,     p.inflight,
              p.parked,     p.terminal,      p.retry,         p.next_due_ns, p.oldest_enqueue_ns,
              p.records};
}
std::string show(const Same& s) {
  std::string out =
      "gen " + std::to_string(s.generation) + " next " + std::to_string(s.next_sequence) +
      " acked " + (s.acked ? std::to_string(*s.acked) : "-") + " retry " +
      (s.retry ? std::to_string(s.retry->sequence) + (s.retry->exhausted ? "x" : "p") : "-") +
      " records";
  for (const auto& r : s.records)
    out += " " + std::to_string(r.sequence) + ":" + std::string(egress::to_string(r.state)) + "/" +
           std::to_string(r.attempt);
  return out;
}

using test::must;

// The retained range after the prelude: sequences 5..9 in slots 5, 6, 7, 0, 1.
constexpr std::array<std::uint64_t, 3> kTarget{5, 7, 9};

void prelude(Egress& e) {
  std::vector<std::byte> buf;
  for (int i = 0; i < 5; ++i) (void)must(e.try_enqueue_at(kPayload, 1));
  for (int i = 0; i < 5; ++i) (void)must(e.claim(kGen, buf));
  (void)must(e.ack(kGen, 4));
  for (int i = 0; i < 5; ++i) (void)must(e.try_enqueue_at(kPayload, 2));
}
void claim_all(Egress& e) {
  std::vector<std::byte> buf;
  while (must(e.claim(kGen, buf)).status == egress::ClaimStatus::Claimed) {
  }
}
// Fails the two other targets, then `target`, so the retry reader names it.
void park_targets(Egress& e, std::uint64_t target) {
  for (std::uint64_t q : kTarget)
    if (q != target) (void)must(e.fail(kGen, q, 10));
  (void)must(e.fail(kGen, target, 10));
}
// Spends `target`'s retry budget; the other records stay in flight.
void spend_budget(Egress& e, std::uint64_t target) {
  std::vector<std::byte> buf;
  for (std::uint32_t i = 0; i < params().retry_budget; ++i) {
    (void)must(e.fail(kGen, target, 10));
    (void)must(e.retry_now(kGen, target));
    (void)must(e.claim(kGen, buf));
  }
}

struct Case {
  const char* name;
  // Builds the state before the operation (after the prelude), for target k.
  std::function<void(Egress&, std::size_t k)> arrange;
  // The operation, through the given handle; true when its outcome is the expected one.
  std::function<bool(Egress&, std::size_t k)> op;
};

const Case kCases[] = {
    {"enqueue",  // fills the free slots one by one: the last free slot at k = 2
     [](Egress& e, std::size_t k) {
       for (std::size_t i = 0; i < k; ++i) (void)must(e.try_enqueue_at(kPayload, 3));
     },
     [](Egress& e, std::size_t) {
       auto r = e.try_enqueue_at(kPayload, 4);
       return r && r->status == egress::EnqueueStatus::Enqueued;
     }},
    {"claim",  // claims 5, 7 or 9 (the lower records already in flight)
     [](Egress& e, std::size_t k) {
       std::vector<std::byte> buf;
       for (std::size_t i = 0; i < 2 * k; ++i) (void)must(e.claim(kGen, buf));
     },
     [](Egress& e, std::size_t k) {
       std::vector<std::byte> buf;
       auto r = e.claim(kGen, buf);
       return r && r->status == egress::ClaimStatus::Claimed && r->envelope.sequence == kTarget[k];
     }},
    {"fail-retrying", [](Egress& e, std::size_t) { claim_all(e); },
     [](Egress& e, std::size_t k) {
       auto r = e.fail(kGen, kTarget[k], 10);
       return r && r->status == egress::FailStatus::Retrying;
     }},
    {"fail-exhausted",
     [](Egress& e, std::size_t k) {
       claim_all(e);
       spend_budget(e, kTarget[k]);
     },
     [](Egress& e, std::size_t k) {
       auto r = e.fail(kGen, kTarget[k], 10);
       return r && r->status == egress::FailStatus::Exhausted;
     }},
    {"ack",  // acknowledges through the target, the retry reader naming it (parked)
     [](Egress& e, std::size_t k) {
       claim_all(e);
       park_targets(e, kTarget[k]);
     },
     [](Egress& e, std::size_t k) {
       auto r = e.ack(kGen, kTarget[k]);
       return r && r->status == egress::AckStatus::Advanced;
     }},
    {"retry_due",
     [](Egress& e, std::size_t k) {
       claim_all(e);
       park_targets(e, kTarget[k]);
     },
     [](Egress& e, std::size_t) {
       auto r = e.retry_due(kGen, 1'000'000);
       return r && r->status == egress::RetryStatus::Scheduled && r->scheduled == 3;
     }},
    {"retry_now",
     [](Egress& e, std::size_t k) {
       claim_all(e);
       park_targets(e, kTarget[k]);
     },
     [](Egress& e, std::size_t k) {
       auto r = e.retry_now(kGen, kTarget[k]);
       return r && r->status == egress::RetryStatus::Scheduled;
     }},
    {"reconnect",
     [](Egress& e, std::size_t k) {
       claim_all(e);
       park_targets(e, kTarget[k]);
     },
     [](Egress& e, std::size_t) {
       auto r = e.reconnect(kGen + 1);
       return r && r->status == egress::ReconnectStatus::Advanced && r->replayed == 5;
     }},
    {"take_dead_letter",
     [](Egress& e, std::size_t k) {
       claim_all(e);
       spend_budget(e, kTarget[k]);
       (void)must(e.fail(kGen, kTarget[k], 10));
     },
     [](Egress& e, std::size_t k) {
       auto r = e.pop_dead_letter(nullptr);
       return r && r->has_value() && (*r)->sequence == kTarget[k];
     }},
};

class EgressStoreCrashTest : public ::testing::TestWithParam<std::tuple<int, std::size_t>> {
 protected:
  test::TempRoot root_;
};

TEST_P(EgressStoreCrashTest, KilledAtEveryStoreLeavesTheStateBeforeOrAfter) {
  const Case& c = kCases[std::get<0>(GetParam())];
  const std::size_t k = std::get<1>(GetParam());
  std::optional<Egress> e;
  auto fresh = [&] {
    e.reset();
    (void)Segment::unlink(kName);
    e.emplace(must(Egress::create(kName, params())));
    prelude(*e);
    c.arrange(*e, k);
  };
  fresh();
  const Same before = same(must(e->projection(true)));
  ASSERT_TRUE(c.op(*e, k)) << c.name << ": the operation's outcome without a kill";
  const Same after = same(must(e->projection(true)));
  ASSERT_NE(before, after) << c.name << ": the operation changed nothing";

  std::uint64_t rolled_back = 0, rolled_forward = 0;
  const test::StoreCrashRun run = test::kill_at_every_store(
      fresh,
      [&] {
        auto mine = Egress::open(kName);
        return mine && c.op(*mine, k);
      },
      [&](std::uint64_t n) {
        auto p = e->projection(true);  // the next locker: repairs
        ASSERT_TRUE(p) << c.name << " killed at store " << n << ": " << p.error().what();
        const Same now = same(*p);
        if (now == before) ++rolled_back;
        if (now == after) ++rolled_forward;
        EXPECT_TRUE(now == before || now == after)
            << c.name << " killed at store " << n << "\n  repaired: " << show(now)
            << "\n  before:   " << show(before) << "\n  after:    " << show(after);
        auto damage = e->verify();
        ASSERT_TRUE(damage) << damage.error().what();
        EXPECT_TRUE(damage->empty()) << c.name << " killed at store " << n << ": "
                                     << (damage->empty() ? "" : damage->front());
        // Still usable: a claim under the current generation is answered, not Faulted.
        std::vector<std::byte> buf;
        auto claimed = e->claim(e->projection()->generation, buf);
        EXPECT_TRUE(claimed) << c.name << " killed at store " << n << ": "
                             << claimed.error().what();
      });
  ASSERT_TRUE(run.error.empty()) << c.name << ": " << run.error;
  EXPECT_GE(run.kills, 3u) << c.name << ": the hook killed almost nothing";
  EXPECT_EQ(run.kills, run.stores) << c.name;
  EXPECT_EQ(rolled_back + rolled_forward, run.kills);
  EXPECT_GT(rolled_back, 0u) << c.name << ": no kill left the state before";
  std::printf("%s k=%zu: %llu stores, %llu rolled back, %llu rolled forward\n", c.name, k,
              static_cast<unsigned long long>(run.stores),
              static_cast<unsigned long long>(rolled_back),
              static_cast<unsigned long long>(rolled_forward));
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<int, std::size_t>>& info) {
  return test::position_name(kCases[std::get<0>(info.param)].name, std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    EveryOperation, EgressStoreCrashTest,
    ::testing::Combine(::testing::Range(0, static_cast<int>(std::size(kCases))),
                       ::testing::Values(std::size_t{0}, std::size_t{1}, std::size_t{2})),
    case_name);

}  // namespace
}  // namespace shm::egress_store_crash_test
