// Soak verifier for the ledger block of scripts/soak.sh: run after every
// worker stopped and the sidecar had its cycles. Reads the workers' and the
// checker's logs (formats in soak_ledger.hpp) and the ledger itself (read-only
// mapping, no attachment), prints a summary, exits 1 on any violation.
//
// Verified:
//  - no leaked charge: every account (global, partitions, categories, pool
//    accounts) is back at 0 used and 0 reserved, no ticket is live, no pool is
//    still open (a killed worker's tickets and pools were reclaimed), and
//    `verify` (every derived counter recomputed from the ticket table, the
//    owners of tickets) finds nothing; the ledger is not faulted;
//  - tickets are conserved: successful reservations == releases (clean ones
//    plus reclaimed), give or take one per lock repair (a worker killed inside
//    the critical section may leave the statistics one step behind);
//  - never over a limit: the checker, sampling throughout, saw no account
//    outside [0, limit] and no derived counter that disagreed with the tickets,
//    and at least one of its snapshots was actually checked against the
//    tickets (snapshots it could not take, because writers were busy or a
//    killed worker left a mutation in progress, are shown as skipped, by
//    reason, and verify nothing);
//  - every worker's own model of its pools matched the ledger (no V line) and
//    every worker and the checker stopped cleanly (their last incarnation
//    logged X).
// With --sidecar-log, the tickets the sidecar reports having released from
// dead workers are summed and shown next to the ledger's own count.
//
//   test_soak_ledger_verify --ledger NAME --dir DIR --workers N [--sidecar-log PATH]
#include "soak_ledger.hpp"
#include "soak_logs.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using namespace shm;

void check_zero(const AccountState& a, const std::string& what, std::vector<std::string>& out) {
  if (a.used != 0 || a.reserved != 0 || a.tickets != 0)
    out.push_back(fmt::format("{}: used {} reserved {} tickets {} after every worker stopped", what,
                              a.used, a.reserved, a.tickets));
}

// Sums "released N tickets" of the sidecar's attacher_reclaimed lines for `name`.
std::uint64_t sidecar_released(const std::string& path, const std::string& name) {
  std::ifstream in(path);
  const std::string key = "segment=" + name;
  constexpr std::string_view kReleased = "released ";
  std::uint64_t n = 0;
  for (std::string line; std::getline(in, line);) {
    const auto at = line.find(key);
    if (line.find("event=attacher_reclaimed") == std::string::npos || at == std::string::npos ||
        (at + key.size() < line.size() && line[at + key.size()] != ' '))
      continue;
    const auto r = line.find(kReleased);
    if (r == std::string::npos) continue;
    const char* first = line.c_str() + r + kReleased.size();
    char* end = nullptr;
    const std::uint64_t tickets = std::strtoull(first, &end, 10);
    if (end != first && std::string_view(end).starts_with(" tickets")) n += tickets;
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  std::string name, dir, sidecar_log;
  int workers = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k(argv[i]);
    if (k == "--ledger")
      name = argv[i + 1];
    else if (k == "--dir")
      dir = argv[i + 1];
    else if (k == "--workers")
      workers = std::atoi(argv[i + 1]);
    else if (k == "--sidecar-log")
      sidecar_log = argv[i + 1];
  }
  if (name.empty() || dir.empty() || workers <= 0) {
    std::fprintf(stderr,
                 "usage: test_soak_ledger_verify --ledger NAME --dir DIR --workers N "
                 "[--sidecar-log PATH]\n");
    return 2;
  }
  std::vector<std::string> violations;

  // The logs.
  std::uint64_t worker_kills = 0;
  for (int w = 0; w < workers; ++w) {
    const std::string proc = fmt::format("ledger-worker-{}", w);
    const auto incs = soak::parse_log(fmt::format("{}/{}.log", dir, proc), violations);
    for (const soak::Incarnation& inc : incs) {
      for (const std::string& v : inc.violations)
        violations.push_back(fmt::format("{}: {}", proc, v));
    }
    if (incs.empty() || !incs.back().stop)
      violations.push_back(fmt::format("{}: did not stop cleanly (no final X line)", proc));
    worker_kills += soak::killed_incarnations(incs);
  }
  std::uint64_t samples = 0, verified = 0, over = 0, busy = 0, in_progress = 0;
  {
    // Counts of every incarnation: a clean one's X line, a killed one's last P line.
    struct Counts {
      std::uint64_t samples = 0, verified = 0, busy = 0, in_progress = 0;
    };
    std::vector<Counts> progress;  // per incarnation
    const auto incs = soak::parse_log(
        dir + "/ledger-checker.log", violations,
        [&](char tag, std::istringstream& ls, soak::Incarnation&, std::size_t index) {
          Counts c;
          if (tag != 'P' || !(ls >> c.samples >> c.verified >> c.busy >> c.in_progress)) return;
          if (progress.size() <= index) progress.resize(index + 1);
          progress[index] = c;
        });
    progress.resize(incs.size());
    auto field = [](const soak::Incarnation& inc, std::size_t i) {
      return std::strtoull(inc.stop_fields[i].c_str(), nullptr, 10);
    };
    for (std::size_t i = 0; i < incs.size(); ++i) {
      const soak::Incarnation& inc = incs[i];
      for (const std::string& v : inc.violations)
        violations.push_back(fmt::format("ledger-checker: {}", v));
      if (inc.stop && inc.stop_fields.size() >= 4) {
        samples += *inc.stop;
        verified += field(inc, 0);
        over += field(inc, 1);
        busy += field(inc, 2);
        in_progress += field(inc, 3);
      } else if (inc.stop) {
        violations.push_back(fmt::format(
            "ledger-checker: X line of incarnation {} has {} fields after the samples, expected "
            "<verified> <violations> <busy> <in progress>",
            i, inc.stop_fields.size()));
      } else {
        samples += progress[i].samples;
        verified += progress[i].verified;
        busy += progress[i].busy;
        in_progress += progress[i].in_progress;
      }
    }
    if (incs.empty() || !incs.back().stop)
      violations.push_back("ledger-checker: did not stop cleanly (no final X line)");
    else if (samples == 0)
      violations.push_back("ledger-checker: took no sample");
    else if (verified == 0)
      violations.push_back(fmt::format(
          "ledger-checker: no snapshot could be verified against the tickets ({} skipped: {} with "
          "writers too busy, {} with a mutation in progress): the derived counters were never "
          "checked",
          busy + in_progress, busy, in_progress));
    if (over != 0)
      violations.push_back(fmt::format("ledger-checker: {} violation(s) while sampling", over));
  }

  // The ledger.
  ledger::ParamBlock block{};
  OpenOptions options;
  options.read_only = true;
  auto seg = Segment::open(name, ledger::kind_spec(LedgerParams{}, true, block), options);
  auto view = seg ? ledger::make_view(*seg) : Result<ledger::View>(std::unexpected(seg.error()));
  LedgerSnapshot s;
  if (!view) {
    violations.push_back(fmt::format("ledger '{}': {}", name, view.error().what()));
  } else {
    for (const std::string& line : ledger::verify_unlocked(*view, seg->slots()))
      violations.push_back(fmt::format("verify: {}", line));
    s = ledger::read_snapshot(*view);
    if (s.faulted) violations.push_back("the ledger is faulted");
    check_zero(s.global, "global", violations);
    check_zero(s.partitions[0], "ordinary partition", violations);
    check_zero(s.partitions[1], "control partition", violations);
    for (const CategoryState& c : s.categories)
      check_zero(c.account, fmt::format("category '{}'", c.account.label), violations);
    for (const PoolState& p : s.pools) {
      violations.push_back(
          fmt::format("pool '{}' is still open (owner slot {} generation {}, {} tickets)", p.label,
                      p.owner.slot, p.owner.generation, p.tickets));
      for (const AccountState& a : p.accounts)
        check_zero(a, fmt::format("pool '{}' account '{}'", p.label, a.label), violations);
    }
    if (s.live_tickets != 0)
      violations.push_back(fmt::format("{} ticket(s) still live", s.live_tickets));
    const ledger::View& v = *view;
    std::size_t listed = 0;
    for (std::uint32_t i = 0; i < v.params.max_tickets && listed < 8; ++i) {
      const ledger::TicketSlot& t = v.tickets[i];
      // relaxed: every writer has stopped; these are plain reads of settled values.
      if (t.state.load(std::memory_order_relaxed) ==
          static_cast<std::uint32_t>(ledger::TicketState::Free))
        continue;
      ++listed;
      violations.push_back(fmt::format(
          "ticket {} is live: owner slot {} generation {}, pool {}, category {}, {} bytes", i,
          t.owner_slot.load(std::memory_order_relaxed),
          t.owner_generation.load(std::memory_order_relaxed),
          t.pool.load(std::memory_order_relaxed), t.category.load(std::memory_order_relaxed),
          t.bytes.load(std::memory_order_relaxed)));
    }
    const std::uint64_t gap = s.stats.reserves > s.stats.releases
                                  ? s.stats.reserves - s.stats.releases
                                  : s.stats.releases - s.stats.reserves;
    if (gap > s.stats.repairs)
      violations.push_back(fmt::format(
          "{} reservations but {} releases (reclaims included) with {} lock repair(s): tickets "
          "were not conserved",
          s.stats.reserves, s.stats.releases, s.stats.repairs));
  }

  std::uint64_t rejected = 0;
  for (std::uint64_t r : s.stats.rejections) rejected += r;
  std::string by_scope;
  for (std::size_t i = 0; i < s.stats.rejections.size(); ++i)
    if (s.stats.rejections[i] != 0)
      by_scope += fmt::format("{}{} {}", by_scope.empty() ? "" : ", ",
                              to_string(static_cast<LedgerScope>(i)), s.stats.rejections[i]);
  const std::uint64_t ops = s.stats.reserves + s.stats.commits + s.stats.replaces +
                            s.stats.releases + s.stats.admits + rejected;
  std::printf(
      "  operations: %llu (%llu reserves, %llu commits, %llu replaces, %llu releases, %llu admits, "
      "%llu refusals: %s)\n",
      static_cast<unsigned long long>(ops), static_cast<unsigned long long>(s.stats.reserves),
      static_cast<unsigned long long>(s.stats.commits),
      static_cast<unsigned long long>(s.stats.replaces),
      static_cast<unsigned long long>(s.stats.releases),
      static_cast<unsigned long long>(s.stats.admits), static_cast<unsigned long long>(rejected),
      by_scope.empty() ? "none" : by_scope.c_str());
  const std::string from_sidecar =
      sidecar_log.empty()
          ? std::string()
          : fmt::format(", {} of them by the sidecar", sidecar_released(sidecar_log, name));
  std::printf(
      "  killed workers: %llu; their tickets reclaimed: %llu%s; lock repairs (a holder killed "
      "inside the critical section): %llu\n",
      static_cast<unsigned long long>(worker_kills),
      static_cast<unsigned long long>(s.stats.reclaimed_tickets), from_sidecar.c_str(),
      static_cast<unsigned long long>(s.stats.repairs));
  std::printf(
      "  never over a limit: %llu samples (%llu verified against the tickets, %llu skipped: %llu "
      "busy, %llu in progress), %llu violations; end state: %llu live tickets, %zu open pools, "
      "global used %lld\n",
      static_cast<unsigned long long>(samples), static_cast<unsigned long long>(verified),
      static_cast<unsigned long long>(busy + in_progress), static_cast<unsigned long long>(busy),
      static_cast<unsigned long long>(in_progress), static_cast<unsigned long long>(over),
      static_cast<unsigned long long>(s.live_tickets), s.pools.size(),
      static_cast<long long>(s.global.used));
  for (const std::string& v : violations) std::printf("  VIOLATION: %s\n", v.c_str());
  return violations.empty() ? 0 : 1;
}
