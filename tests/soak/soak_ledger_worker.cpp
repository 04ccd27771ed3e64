// Soak ledger worker: random reserve/commit/replace/release on two pools of
// its own and admit on the shared buckets, throttled to --rate operations per
// second, holding up to 48 tickets. Every 32 operations it compares its pools'
// accounts (a consistent snapshot) with the tickets it holds; a mismatch, or
// any error other than a budget/rate refusal, is logged as a violation and
// ends the process with status 1. SIGTERM: release every ticket, check that
// its pools are back at zero, close them, log "X ...", exit 0.
//
//   test_soak_ledger_worker --ledger NAME --id N --log PATH [--rate R]
#include "soak_ledger.hpp"
#include "soak_process.hpp"

#include <fmt/format.h>

#include <array>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t kMaxLive = 48;
constexpr std::uint64_t kCheckEvery = 32;

// A ticket this worker holds, as it believes it to be.
struct Held {
  shm::Ticket ticket;
  std::uint32_t pool;  // 0: pool a, 1: pool b
  std::uint32_t category;
  std::int64_t bytes;
  bool committed;
};

struct AccountModel {
  std::int64_t used = 0, reserved = 0;
  std::uint64_t tickets = 0;
};

}  // namespace

using soak::g_stop;

int main(int argc, char** argv) {
  constexpr std::string_view kProgram = "test_soak_ledger_worker";
  const auto opts =
      soak::Options::parse(argc, argv, kProgram, {"--ledger", "--id", "--log", "--rate"});
  if (!opts) return 2;
  const std::string name = opts->str("--ledger"), log_path = opts->str("--log");
  const std::uint32_t id = opts->u32("--id", 0);
  const std::uint64_t rate = opts->u64("--rate", 2000);
  if (name.empty() || log_path.empty() || rate == 0)
    return soak::usage_error(kProgram, "need --ledger and --log; --rate > 0");
  soak::stop_on_term_signals();
  const soak::ProcessLog process_log(log_path, kProgram, id);
  if (!process_log.ok()) return 2;
  const int log = process_log.fd();
  auto violation = [&](std::string_view what) { return process_log.violation(what); };

  auto attached = soak::attach_ledger(name);
  if (!attached) return violation(attached.error().what());
  shm::Ledger l = std::move(*attached);
  std::array<shm::CategoryId, 3> cats{};
  const char* cat_labels[] = {"frames", "meta", "control"};
  for (std::size_t i = 0; i < cats.size(); ++i) {
    auto c = l.category(cat_labels[i]);
    if (!c) return violation(c.error().what());
    cats[i] = *c;
  }
  auto ops_bucket = l.bucket("ops");
  auto bursty_bucket = l.bucket("bursty");
  if (!ops_bucket || !bursty_bucket) return violation("buckets 'ops' and 'bursty' are missing");
  const std::string label_a = fmt::format("w{}.{}.a", id, ::getpid());
  const std::string label_b = fmt::format("w{}.{}.b", id, ::getpid());
  auto pool_a = l.open_pool(shm::PoolSpec{
      label_a,
      {{"data", 24 * soak::kKiB, {cats[0], cats[1]}}, {"ctl", 8 * soak::kKiB, {cats[2]}}},
      32});
  if (!pool_a) return violation(pool_a.error().what());
  auto pool_b = l.open_pool(shm::PoolSpec{label_b, {{"all", 16 * soak::kKiB, {}}}, 0});
  if (!pool_b) return violation(pool_b.error().what());
  const std::array<shm::PoolId, 2> pools{*pool_a, *pool_b};
  soak::append(log,
               fmt::format("\nS {} {} {} {}\n", ::getpid(), soak::realtime_ns(), label_a, label_b));

  // Which account of `pool` a category is charged to (pool a: data | ctl).
  auto account_of = [&](std::uint32_t pool, std::uint32_t cat) -> std::size_t {
    return pool == 0 && cat == 2 ? 1 : 0;
  };
  std::vector<Held> live;
  // Compares the worker's pools in a consistent snapshot with `live`.
  auto check_model = [&]() -> std::string {
    std::array<std::array<AccountModel, 2>, 2> model{};
    std::array<std::uint64_t, 2> tickets{};
    for (const Held& h : live) {
      AccountModel& m = model[h.pool][account_of(h.pool, h.category)];
      m.used += h.bytes;
      m.reserved += h.committed ? 0 : h.bytes;
      ++m.tickets;
      ++tickets[h.pool];
    }
    auto snap = l.snapshot();
    if (!snap) return fmt::format("snapshot: {}", snap.error().what());
    for (std::uint32_t p = 0; p < 2; ++p) {
      const shm::PoolState* found = nullptr;
      for (const shm::PoolState& ps : snap->pools)
        if (ps.id == pools[p]) found = &ps;
      const std::string& label = p == 0 ? label_a : label_b;
      if (found == nullptr) return fmt::format("pool '{}' is no longer open", label);
      if (found->tickets != tickets[p])
        return fmt::format("pool '{}' counts {} tickets, this worker holds {}", label,
                           found->tickets, tickets[p]);
      for (std::size_t a = 0; a < found->accounts.size() && a < 2; ++a) {
        const shm::AccountState& s = found->accounts[a];
        const AccountModel& m = model[p][a];
        if (s.used != m.used || s.reserved != m.reserved || s.tickets != m.tickets)
          return fmt::format(
              "pool '{}' account '{}': used {} reserved {} tickets {}; this worker's tickets "
              "make used {} reserved {} tickets {}",
              label, s.label, s.used, s.reserved, s.tickets, m.used, m.reserved, m.tickets);
      }
    }
    return {};
  };

  std::mt19937_64 rng(soak::mix(soak::realtime_ns() ^ static_cast<std::uint64_t>(::getpid())));
  auto pick = [&](std::uint64_t n) { return static_cast<std::size_t>(rng() % n); };
  std::uint64_t ops = 0, reserves = 0, rejections = 0;
  const auto start = std::chrono::steady_clock::now();
  while (g_stop == 0) {
    const std::size_t op = pick(100);
    if (op < 40 || live.empty()) {
      if (live.size() < kMaxLive) {
        const auto pool = static_cast<std::uint32_t>(pick(2));
        const std::size_t c = pick(10);
        const auto cat = static_cast<std::uint32_t>(c < 5 ? 0 : c < 8 ? 1 : 2);
        const std::int64_t bytes = pick(8) == 0 ? 0 : static_cast<std::int64_t>(1 + pick(2048));
        auto r = l.reserve(pools[pool], cats[cat], bytes);
        if (!r) return violation(fmt::format("reserve: {}", r.error().what()));
        if (r->has_value()) {
          live.push_back(Held{**r, pool, cat, bytes, false});
          ++reserves;
        } else {
          ++rejections;
        }
      }
    } else if (op < 55) {
      Held& h = live[pick(live.size())];
      if (!h.committed) {
        if (auto r = l.commit(h.ticket); !r)
          return violation(fmt::format("commit: {}", r.error().what()));
        h.committed = true;
      }
    } else if (op < 65) {
      Held& h = live[pick(live.size())];
      const auto pool = static_cast<std::uint32_t>(pick(2));
      const auto bytes = static_cast<std::int64_t>(pick(2049));
      auto r = l.replace(h.ticket, pools[pool], bytes);
      if (!r) return violation(fmt::format("replace: {}", r.error().what()));
      if (r->has_value()) {
        h.pool = pool;
        h.bytes = bytes;
      } else {
        ++rejections;
      }
    } else if (op < 95) {
      const std::size_t i = pick(live.size());
      if (auto r = l.release(live[i].ticket); !r)
        return violation(fmt::format("release: {}", r.error().what()));
      live[i] = live.back();
      live.pop_back();
    } else {
      const std::vector<shm::Constraint> cs = {{*ops_bucket, 1},
                                               {*bursty_bucket, static_cast<std::int64_t>(pick(2))},
                                               {*ops_bucket, static_cast<std::int64_t>(pick(3))}};
      auto r = l.admit(cs, shm::monotonic_ms());
      if (!r) return violation(fmt::format("admit: {}", r.error().what()));
      if (!r->has_value()) ++rejections;
    }
    ++ops;
    if (ops == 1) soak::append(log, fmt::format("F {}\n", soak::realtime_ns()));
    if (ops % kCheckEvery == 0) {
      if (std::string bad = check_model(); !bad.empty()) return violation(bad);
      l.heartbeat();
    }
    const auto due = start + std::chrono::nanoseconds(ops * 1'000'000'000ull / rate);
    if (due > std::chrono::steady_clock::now()) std::this_thread::sleep_until(due);
  }

  for (const Held& h : live)
    if (auto r = l.release(h.ticket); !r)
      return violation(fmt::format("final release: {}", r.error().what()));
  live.clear();
  if (std::string bad = check_model(); !bad.empty())
    return violation("after the final release: " + bad);
  for (const shm::PoolId p : pools)
    if (auto r = l.close_pool(p); !r)
      return violation(fmt::format("close_pool: {}", r.error().what()));
  soak::append(log, fmt::format("X {} {} {}\n", ops, reserves, rejections));
  return 0;
}
