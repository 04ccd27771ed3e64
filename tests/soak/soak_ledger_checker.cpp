// Soak ledger checker: samples the ledger --ledger from a read-only mapping
// (no attachment) every --interval-us until SIGTERM, while the workers use it
// and get killed. Every sample checks that every account (global, partitions,
// categories, pool accounts) has 0 <= used <= limit and 0 <= reserved <=
// limit, and that the live tickets fit the table; every 16th sample tries to
// take a seqlock-consistent snapshot and recompute every derived counter from
// the ticket table (ledger::verify_unlocked). Only a snapshot that was had and
// checked counts as verified; one that could not be had counts as skipped, by
// reason: "busy" (writers kept it moving) or "in progress" (a mutation left
// half-done by a worker killed inside the lock, until the next locker
// repairs). Each violation is logged as a V line (the first 20; all are
// counted); every 256 samples "P <samples> <verified> <busy> <in progress>"
// tells the verifier how far an incarnation that gets killed came. SIGTERM:
// log "X <samples> <verified> <violations> <busy> <in progress>", exit 0.
//
//   test_soak_ledger_checker --ledger NAME --log PATH [--interval-us US]
#include "soak_ledger.hpp"
#include "soak_process.hpp"

#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

using soak::g_stop;

int main(int argc, char** argv) {
  constexpr std::string_view kProgram = "test_soak_ledger_checker";
  const auto opts =
      soak::Options::parse(argc, argv, kProgram, {"--ledger", "--log", "--interval-us"});
  if (!opts) return 2;
  const std::string name = opts->str("--ledger"), log_path = opts->str("--log");
  const std::uint64_t interval_us = opts->u64("--interval-us", 2000);
  if (name.empty() || log_path.empty())
    return soak::usage_error(kProgram, "need --ledger and --log");
  soak::stop_on_term_signals();
  const soak::ProcessLog process_log(log_path, kProgram, 0);
  if (!process_log.ok()) return 2;
  const int log = process_log.fd();

  // Wait for a worker to create the ledger.
  shm::ledger::ParamBlock block{};
  shm::OpenOptions options;
  options.read_only = true;
  std::optional<shm::Segment> seg;
  for (int attempt = 0; !seg && g_stop == 0; ++attempt) {
    auto s =
        shm::Segment::open(name, shm::ledger::kind_spec(shm::LedgerParams{}, true, block), options);
    if (s) {
      seg = std::move(*s);
    } else if (s.error().code != shm::Errc::NotFound || attempt > 1000) {
      soak::append(log, fmt::format("\nV open: {}\n", s.error().what()));
      return 1;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  if (!seg) return 0;  // stopped before the ledger existed
  auto view = shm::ledger::make_view(*seg);
  if (!view) {
    soak::append(log, fmt::format("\nV view: {}\n", view.error().what()));
    return 1;
  }
  const shm::ledger::View& v = *view;
  soak::append(log, fmt::format("\nS {} {}\n", ::getpid(), soak::realtime_ns()));

  std::uint64_t samples = 0, verified = 0, violations = 0, busy = 0, in_progress = 0;
  auto fail = [&](const std::string& what) {
    if (violations++ < 20) soak::append(log, fmt::format("V sample {}: {}\n", samples, what));
  };
  auto account = [&](const shm::ledger::Account& a, auto&& what) {
    // relaxed: each check is about one value (limits are fixed; every stored
    // used/reserved is within its limit), so no pairing is needed.
    const std::int64_t limit = a.limit.load(std::memory_order_relaxed);
    const std::int64_t used = a.used.load(std::memory_order_relaxed);
    const std::int64_t reserved = a.reserved.load(std::memory_order_relaxed);
    if (used < 0 || used > limit || reserved < 0 || reserved > limit)
      fail(fmt::format("{}: used {} reserved {} outside [0, {}]", what(), used, reserved, limit));
  };
  while (g_stop == 0) {
    ++samples;
    account(v.control->global, [] { return std::string("global"); });
    account(v.control->partitions[0], [] { return std::string("ordinary partition"); });
    account(v.control->partitions[1], [] { return std::string("control partition"); });
    // [C'] acquire: pairs with [C] of define_category; entries below the count are complete.
    const std::uint32_t cc = v.control->lock.category_count.load(std::memory_order_acquire);
    for (std::uint32_t i = 0; i < cc && i < v.params.max_categories; ++i)
      account(v.categories[i].account, [&] { return fmt::format("category {}", i); });
    for (std::uint32_t i = 0; i < v.params.max_pools; ++i)
      for (std::uint32_t a = 0; a < shm::ledger::kPoolAccounts; ++a)
        account(v.pools[i].accounts[a].account,
                [&] { return fmt::format("pool {} account {}", i, a); });
    // relaxed: one value, as above.
    const std::uint64_t live = v.control->lock.live_tickets.load(std::memory_order_relaxed);
    if (live > v.params.max_tickets)
      fail(fmt::format("{} live tickets in a table of {}", live, v.params.max_tickets));
    if (samples % 16 == 0) {
      // No attachment table: tickets of killed workers are not flagged here
      // (the sidecar reclaims them); the final check looks at those.
      const std::vector<std::string> lines = shm::ledger::verify_unlocked(v, {});
      // Busy or descheduled writers, or a holder killed inside the lock (the
      // next locker repairs it): no consistent snapshot (verify_unlocked then
      // returns that one line). Not a violation, and not verified either.
      const bool no_busy = lines.size() == 1 && lines[0].starts_with("no stable snapshot");
      const bool no_stalled =
          lines.size() == 1 && lines[0].starts_with("a ledger mutation has been in progress");
      if (no_busy || no_stalled) {
        (no_busy ? busy : in_progress) += 1;
      } else {
        for (const std::string& line : lines) fail(line);
        ++verified;
      }
    }
    if (samples == 1) soak::append(log, fmt::format("F {}\n", soak::realtime_ns()));
    if (samples % 256 == 0)
      soak::append(log, fmt::format("P {} {} {} {}\n", samples, verified, busy, in_progress));
    std::this_thread::sleep_for(std::chrono::microseconds(interval_us));
  }
  soak::append(log,
               fmt::format("X {} {} {} {} {}\n", samples, verified, violations, busy, in_progress));
  return 0;
}
