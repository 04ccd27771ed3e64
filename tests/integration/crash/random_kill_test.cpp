// Random kill -9 inside the locks, as an operator's crash would land: a
// forked worker runs random operations of an egress, a relay (two policies)
// or a ledger back to back, mostly inside their robust mutexes, and is
// killed after a random 0-3 ms (scaled under the sanitizers); the next
// locker repairs. After every kill the
// structure must be usable (never Faulted), its invariant check clean, and
// what only grows (sequences, the acknowledgement watermark, generations,
// op sequences) must not have gone back. The counted kills at every store
// (*_store_crash_test.cpp) compare each operation with its before and after;
// this one finds what sequences of operations and repairs do to each other.
//
// Kills per structure: LIBSHM_KILL_ROUNDS (default 2500, fewer under the
// sanitizers), or LIBSHM_KILL_MINUTES=M to kill for M minutes instead.
#include "common/scale.hpp"
#include "common/temp_root.hpp"
#include "shm/egress/egress.hpp"
#include "shm/ledger/ledger.hpp"
#include "shm/relay/relay.hpp"
#include "shm/segment/kind.hpp"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace shm::random_kill_test {
namespace {

using namespace std::chrono_literals;

// How long to go on: a number of kills, or minutes (the knob for long runs).
struct Budget {
  std::uint64_t rounds = 0;
  std::chrono::steady_clock::time_point until{};
  [[nodiscard]] bool more(std::uint64_t done) const {
    return rounds != 0 ? done < rounds : std::chrono::steady_clock::now() < until;
  }
};
Budget budget() {
  Budget b;
  if (const char* m = std::getenv("LIBSHM_KILL_MINUTES"); m != nullptr && std::atof(m) > 0) {
    b.until = std::chrono::steady_clock::now() +
              std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                  std::chrono::duration<double, std::ratio<60>>(std::atof(m)));
    return b;
  }
  const char* r = std::getenv("LIBSHM_KILL_ROUNDS");
  b.rounds = r != nullptr && std::atoll(r) > 0 ? static_cast<std::uint64_t>(std::atoll(r))
                                               : test::scaled(2500);
  return b;
}

// Forks `work` (it loops until killed), kills it after a random 0-3 ms, and
// calls `check` after each kill; returns the kills made.
std::uint64_t kill_randomly(const std::function<void(std::uint64_t seed)>& work,
                            const std::function<void(std::uint64_t round)>& check) {
  const Budget b = budget();
  std::mt19937_64 rng(0x5eed2026);
  std::uint64_t round = 0;
  for (; b.more(round) && !::testing::Test::HasFatalFailure(); ++round) {
    const std::uint64_t seed = rng();
    const pid_t pid = ::fork();
    if (pid < 0) {
      ADD_FAILURE() << "fork failed";
      break;
    }
    if (pid == 0) {
      work(seed);
      ::_exit(0);
    }
    // 0-3 ms of work (longer under the sanitizers, where opening alone takes
    // milliseconds) before the kill.
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % (3000 * test::kScaleDivisor)));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFSIGNALED(status)) {
      ADD_FAILURE() << "round " << round << ": the worker stopped by itself (status " << status
                    << ")";
      break;
    }
    check(round);
  }
  return round;
}

class RandomKillTest : public ::testing::Test {
 protected:
  test::TempRoot root_;
};

// ---------------------------------------------------------------- egress

TEST_F(RandomKillTest, EgressStaysUsableAndMonotoneThroughKillsInsideItsLock) {
  EgressParams p;
  p.max_payloads = 16;
  p.slot_bytes = 8;
  p.inflight_limit = 4;
  p.retry_budget = 2;
  p.retry_base = 1us;
  p.retry_ceiling = 10us;
  auto made = Egress::create("eg", p);
  ASSERT_TRUE(made) << made.error().what();
  Egress& e = *made;
  egress::Projection last = *e.projection(true);
  const std::byte payload[4] = {};

  const std::uint64_t kills = kill_randomly(
      [&](std::uint64_t seed) {
        auto mine = Egress::open("eg");
        if (!mine) ::_exit(3);
        std::mt19937_64 rng(seed);
        std::uint64_t now = 1;
        std::vector<std::byte> buf;
        for (;;) {
          auto pr = mine->projection(true);
          if (!pr) ::_exit(4);
          const std::uint64_t g = pr->generation;
          now += 5'000;
          switch (rng() % 8) {
            case 0:
            case 1:
              (void)mine->try_enqueue_at(payload, now);
              break;
            case 2:
            case 3:
              (void)mine->claim(g, buf);
              break;
            case 4:
              if (pr->next_sequence != 0)
                (void)mine->ack(g, pr->acked_through.value_or(0) +
                                       rng() % (pr->next_sequence - pr->acked_through.value_or(0)));
              break;
            case 5:
              for (const egress::RecordView& r : pr->records)
                if (r.state == egress::RecordState::Inflight && rng() % 2 == 0)
                  (void)mine->fail(g, r.sequence, now);
              break;
            case 6:
              (void)mine->retry_due(g, now);
              (void)mine->pop_dead_letter(nullptr);
              break;
            case 7:
              if (rng() % 8 == 0) (void)mine->reconnect(g + 1);
              break;
          }
        }
      },
      [&](std::uint64_t round) {
        auto now = e.projection(true);  // the next locker: repairs
        ASSERT_TRUE(now) << "round " << round << ": " << now.error().what();
        auto damage = e.verify();
        ASSERT_TRUE(damage) << damage.error().what();
        ASSERT_TRUE(damage->empty()) << "round " << round << ": " << damage->front();
        ASSERT_GE(now->generation, last.generation) << "round " << round;
        ASSERT_GE(now->next_sequence, last.next_sequence) << "round " << round;
        ASSERT_GE(now->acked_through.value_or(0), last.acked_through.value_or(0))
            << "round " << round;
        last = *now;
      });
  EXPECT_GT(last.next_sequence, 0u) << "the workers never got anything done";
  EXPECT_GT(e.projection()->reader_versions[0], 0u);
  std::printf("egress: %llu kills, next_sequence %llu, generation %llu\n",
              static_cast<unsigned long long>(kills),
              static_cast<unsigned long long>(last.next_sequence),
              static_cast<unsigned long long>(last.generation));
}

// ---------------------------------------------------------------- relay

void relay_round(const char* name, PolicyId policy, Overflow overflow, std::uint32_t value_bytes) {
  RelayConfig cfg;
  cfg.policy = policy;
  cfg.max_entries = 16;
  cfg.value_bytes = value_bytes;
  cfg.backpressure = Backpressure{Dimension::Count, 12, 4, overflow};
  {
    auto w = RelayWriter::create(name, cfg);
    ASSERT_TRUE(w) << w.error().what();
  }
  std::uint64_t last_seq = 0;
  const std::uint64_t kills = kill_randomly(
      [&](std::uint64_t seed) {
        auto w = RelayWriter::open(name);
        auto r = RelayReader::open(name);
        if (!w || !r) ::_exit(3);
        std::mt19937_64 rng(seed);
        std::vector<std::byte> v(value_bytes);
        for (;;) {
          if (rng() % 4 != 0) {
            const std::size_t len = policy == policy::kKeepLatest ? 1 + rng() % value_bytes : 8;
            for (std::size_t i = 0; i < len; ++i) v[i] = static_cast<std::byte>(rng());
            (void)w->write(rng() % 24, std::span(v.data(), len), 0ns);
          } else {
            auto got = r->take(1 + rng() % 6);
            if (got && rng() % 5 != 0)
              (void)r->commit();
            else if (got)
              (void)r->abandon();
          }
        }
      },
      [&](std::uint64_t round) {
        auto r = RelayReader::open(name);  // repairs, returns what the dead reader held
        ASSERT_TRUE(r) << "round " << round << ": " << r.error().what();
        const RelaySnapshot s = r->snapshot();
        ASSERT_FALSE(s.faulted) << "round " << round;
        auto seg = Segment::open_any(name, {});
        ASSERT_TRUE(seg);
        const std::vector<std::string> damage = find_kind(kRelayKind)->verify(*seg);
        ASSERT_TRUE(damage.empty()) << "round " << round << ": " << damage.front();
        // Drain a little: the reader works, and every sequence is one issued.
        std::uint64_t top = 0;
        auto n = r->drain(4, [&](const RelayEntry& e) { top = std::max(top, e.last_seq); });
        ASSERT_TRUE(n) << "round " << round << ": " << n.error().what();
        auto w = RelayWriter::open(name);
        ASSERT_TRUE(w) << w.error().what();
        std::vector<std::byte> v(value_bytes, std::byte{1});
        auto wrote = w->write(1000 + round % 8,
                              std::span(v.data(), policy == policy::kKeepLatest ? 3 : 8), 0ns);
        ASSERT_TRUE(wrote) << "round " << round << ": " << wrote.error().what();
        if (wrote->seq != 0) {
          ASSERT_GT(wrote->seq, last_seq) << "round " << round << ": an op sequence went back";
          last_seq = wrote->seq;
        }
      });
  std::printf("relay %s: %llu kills, last op sequence %llu\n", name,
              static_cast<unsigned long long>(kills), static_cast<unsigned long long>(last_seq));
}

TEST_F(RandomKillTest, RelayStaysUsableThroughKillsInsideItsLock) {
  relay_round("sum", policy::kSum, Overflow::Conflate, 8);
  relay_round("latest", policy::kKeepLatest, Overflow::DropOldest, 16);
}

// ---------------------------------------------------------------- ledger

TEST_F(RandomKillTest, LedgerStaysUsableAndBalancedThroughKillsInsideItsLock) {
  LedgerConfig c;
  c.params.global_limit = 100'000;
  c.params.control_reserve = 10'000;
  c.params.max_tickets = 32;
  c.params.max_categories = 4;
  c.params.max_pools = 4;
  c.params.max_buckets = 4;
  c.categories = {{"msg", 80'000, Partition::Ordinary}, {"ctl", 20'000, Partition::Control}};
  c.buckets = {{"a", 1000, 50}, {"b", 10'000, 500}};
  auto made = Ledger::create("budget", c);
  ASSERT_TRUE(made) << made.error().what();
  Ledger& l = *made;
  const PoolSpec spec{"main", {{"all", 90'000, {CategoryId{0}, CategoryId{1}}}}, 0};
  ASSERT_TRUE(l.open_pool(spec));
  ASSERT_TRUE(l.open_pool(PoolSpec{"other", spec.accounts, 0}));

  const std::uint64_t kills = kill_randomly(
      [&](std::uint64_t seed) {
        auto mine = Ledger::open("budget");
        if (!mine) ::_exit(3);
        auto main = mine->pool("main");
        auto other = mine->pool("other");
        if (!main || !other) ::_exit(4);
        std::mt19937_64 rng(seed);
        std::vector<Ticket> held;
        std::int64_t now_ms = 1;
        for (;;) {
          switch (rng() % 6) {
            case 0:
            case 1:
              if (auto t = mine->reserve(rng() % 2 ? *main : *other,
                                         CategoryId{static_cast<std::uint32_t>(rng() % 2)},
                                         static_cast<std::int64_t>(1 + rng() % 500));
                  t && t->has_value())
                held.push_back(**t);
              break;
            case 2:
              if (!held.empty()) (void)mine->commit(held[rng() % held.size()]);
              break;
            case 3:
              if (!held.empty()) {
                const std::size_t i = rng() % held.size();
                (void)mine->release(held[i]);
                held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
              }
              break;
            case 4:
              if (!held.empty())
                (void)mine->replace(held[rng() % held.size()], rng() % 2 ? *main : *other,
                                    static_cast<std::int64_t>(1 + rng() % 500));
              break;
            case 5: {
              const std::array<Constraint, 2> cs{{{BucketId{0}, 1}, {BucketId{1}, 3}}};
              (void)mine->admit(cs, now_ms += 1);
              break;
            }
          }
        }
      },
      [&](std::uint64_t round) {
        auto tickets = l.tickets();  // the next locker: repairs
        ASSERT_TRUE(tickets) << "round " << round << ": " << tickets.error().what();
        std::vector<Owner> dead;
        for (const TicketInfo& t : *tickets)
          if (!(t.owner == l.owner()) && std::find(dead.begin(), dead.end(), t.owner) == dead.end())
            dead.push_back(t.owner);
        for (const Owner& o : dead) {
          auto r = l.reclaim(o);
          ASSERT_TRUE(r) << "round " << round << ": " << r.error().what();
        }
        auto damage = l.verify();
        ASSERT_TRUE(damage) << damage.error().what();
        ASSERT_TRUE(damage->empty()) << "round " << round << ": " << damage->front();
        auto s = l.snapshot();
        ASSERT_TRUE(s) << s.error().what();
        ASSERT_FALSE(s->faulted);
        // Every worker is dead and reclaimed: nothing may stay charged.
        ASSERT_EQ(s->global.used, 0) << "round " << round << ": a charge leaked";
        ASSERT_EQ(s->live_tickets, 0u) << "round " << round;
        for (const PoolState& ps : s->pools)
          for (const AccountState& a : ps.accounts) ASSERT_EQ(a.used, 0) << ps.label;
      });
  std::printf("ledger: %llu kills\n", static_cast<unsigned long long>(kills));
}

}  // namespace
}  // namespace shm::random_kill_test
