// Samples a ledger from a read-only mapping while other processes use it.
//
//   test_ledger_checker NAME MILLIS
//
// Every sample loads each account's `used` (one atomic each) and checks
// 0 <= used <= limit; every 16th sample tries to take a seqlock-consistent
// snapshot and recompute every derived counter from the ticket table
// (ledger::verify_unlocked). Only a snapshot that was had and checked counts as
// verified; one that could not be had (writers too busy, or a mutation left in
// progress by a holder that died inside the lock) counts as skipped, by reason.
// Prints
//   samples S verified V skipped K violations X
//   skipped: B busy, P in progress           (when K > 0)
//   skip: <the first reason's text>          (when K > 0)
//   violation: <text>                        (the first 5)
// Exit 0; 1 when no snapshot at all could be verified (the run checked no
// derived counter, which a test must not mistake for a pass) or on an error.
#include "shm/ledger/ledger.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace {

using namespace shm;

struct Checker {
  std::uint64_t violations = 0;
  std::vector<std::string> first;
  void fail(std::string what) {
    ++violations;
    if (first.size() < 5) first.push_back(std::move(what));
  }
  void account(const ledger::Account& a, std::string_view what) {
    // relaxed: each check is about one value (limits are fixed; every stored
    // `used` is within its limit), so no pairing is needed.
    const std::int64_t limit = a.limit.load(std::memory_order_relaxed);
    const std::int64_t used = a.used.load(std::memory_order_relaxed);
    if (used < 0 || used > limit)
      fail(fmt::format("{}: used {} outside [0, {}]", what, used, limit));
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: test_ledger_checker NAME MILLIS\n");
    return 2;
  }
  const std::string name = argv[1];
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(std::stol(argv[2]));
  ledger::ParamBlock block{};
  OpenOptions options;
  options.read_only = true;
  auto seg = Segment::open(name, ledger::kind_spec(LedgerParams{}, true, block), options);
  if (!seg) {
    std::printf("error: %s\n", seg.error().what().c_str());
    return 1;
  }
  auto view = ledger::make_view(*seg);
  if (!view) {
    std::printf("error: %s\n", view.error().what().c_str());
    return 1;
  }
  const ledger::View& v = *view;
  Checker check;
  std::uint64_t samples = 0, verified = 0, busy = 0, in_progress = 0;
  std::string first_skip;
  while (std::chrono::steady_clock::now() < deadline) {
    ++samples;
    check.account(v.control->global, "global");
    check.account(v.control->partitions[0], "ordinary");
    check.account(v.control->partitions[1], "control");
    const std::uint32_t cc =
        v.control->lock.category_count.load(std::memory_order_acquire);  // [C'] pairs with [C]
    for (std::uint32_t i = 0; i < cc && i < v.params.max_categories; ++i)
      check.account(v.categories[i].account, fmt::format("category {}", i));
    for (std::uint32_t i = 0; i < v.params.max_pools; ++i)
      for (std::uint32_t a = 0; a < ledger::kPoolAccounts; ++a)
        check.account(v.pools[i].accounts[a].account, fmt::format("pool {} account {}", i, a));
    // relaxed: one value, as above.
    if (v.control->lock.live_tickets.load(std::memory_order_relaxed) > v.params.max_tickets)
      check.fail("live tickets exceed the table");
    if (samples % 16 == 0) {
      const std::vector<std::string> lines = ledger::verify_unlocked(v, {});
      // Busy or descheduled writers, or a holder that died inside the lock,
      // prevent a snapshot: not a violation, but nothing was verified either
      // (verify_unlocked then returns that one line).
      const bool no_busy = lines.size() == 1 && lines[0].starts_with("no stable snapshot");
      const bool no_stalled =
          lines.size() == 1 && lines[0].starts_with("a ledger mutation has been in progress");
      if (no_busy || no_stalled) {
        (no_busy ? busy : in_progress) += 1;
        if (first_skip.empty()) first_skip = lines[0];
      } else {
        for (const std::string& line : lines) check.fail(line);
        ++verified;
      }
    }
  }
  const std::uint64_t skipped = busy + in_progress;
  std::printf("samples %llu verified %llu skipped %llu violations %llu\n",
              static_cast<unsigned long long>(samples), static_cast<unsigned long long>(verified),
              static_cast<unsigned long long>(skipped),
              static_cast<unsigned long long>(check.violations));
  if (skipped != 0) {
    std::printf("skipped: %llu busy, %llu in progress\n", static_cast<unsigned long long>(busy),
                static_cast<unsigned long long>(in_progress));
    std::printf("skip: %s\n", first_skip.c_str());
  }
  for (const std::string& f : check.first) std::printf("violation: %s\n", f.c_str());
  if (verified == 0) {
    std::printf("error: no snapshot could be verified against the ticket table\n");
    return 1;
  }
  return 0;
}
