// Soak verifier for the spsc_ring block of scripts/soak.sh: reads the logs of
// every producer/consumer pair (formats in soak_common.hpp, parsing in
// soak_logs.hpp), checks the delivery semantics, prints a summary, exits 1 on
// any violation.
//
// Semantics verified, per ring:
//  - exactly-once publication: every sequence number 0..N-1 (N from the
//    producer's clean stop) is published once, including across producer
//    kills (a partial or unpublished batch is never visible; a restarted
//    producer continues at the first unpublished number);
//  - nothing lost: the consumers' logs cover 0..N-1 without a gap;
//  - at-least-once only at a consumer kill: within one consumer incarnation
//    sequence numbers are strictly consecutive; a new incarnation after a kill
//    starts either after everything logged, or again exactly at the first
//    record of the batch the killed one had logged but maybe not released
//    (the batch in hand: a consumer releases a whole batch at once, so its
//    successor never resumes in its middle), and nowhere else is a record
//    repeated;
//  - nothing corrupt: every record passed its magic/length/CRC/producer checks.
// Kills and recovery times of every kind are test_soak_recovery's part.
//
//   test_soak_verify --dir DIR --pairs N --batch-max K [--end-ns NS]
#include "soak_logs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

using soak::Incarnation;
using soak::Run;

int main(int argc, char** argv) {
  std::string dir;
  int pairs = 0;
  std::uint64_t batch_max = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k(argv[i]);
    if (k == "--dir")
      dir = argv[i + 1];
    else if (k == "--pairs")
      pairs = std::atoi(argv[i + 1]);
    else if (k == "--batch-max")
      batch_max = std::strtoull(argv[i + 1], nullptr, 10);
    else if (k != "--end-ns")  // accepted for compatibility; recovery is test_soak_recovery's
      std::fprintf(stderr, "test_soak_verify: unknown option %s\n", argv[i]);
  }
  if (dir.empty() || pairs <= 0 || batch_max == 0) {
    std::fprintf(stderr, "usage: test_soak_verify --dir DIR --pairs N --batch-max K\n");
    return 2;
  }
  std::vector<std::string> violations;
  std::uint64_t messages = 0, redelivered = 0, resent_unpublished = 0;

  for (int i = 0; i < pairs; ++i) {
    const std::string pname = fmt::format("producer-{}", i), cname = fmt::format("consumer-{}", i);
    const auto prod = soak::parse_log(fmt::format("{}/{}.log", dir, pname), violations);
    const auto cons =
        soak::parse_log(fmt::format("{}/{}.log", dir, cname), violations,
                        [](char tag, std::istringstream& ls, Incarnation& inc, std::size_t) {
                          Run r{};
                          if (tag == 'B' && (ls >> r.first >> r.last) && r.first <= r.last)
                            inc.runs.push_back(r);
                        });
    for (const auto* p : {&prod, &cons})
      for (const Incarnation& inc : *p)
        for (const std::string& v : inc.violations)
          violations.push_back(fmt::format("{}: {}", p == &prod ? pname : cname, v));

    // S <pid> <ns> <next_seq> fresh|published|unpublished
    for (const Incarnation& inc : prod)
      resent_unpublished +=
          inc.start_fields.size() >= 2 && inc.start_fields[1] == "unpublished" ? 1 : 0;
    std::optional<std::uint64_t> published;
    if (prod.empty() || !prod.back().stop)
      violations.push_back(fmt::format("{}: did not stop cleanly (no final X line)", pname));
    else
      published = prod.back().stop;

    std::uint64_t hi = 0;  // every sequence below hi has been delivered
    std::uint64_t dups = 0;
    Run in_hand{0, 0};  // last logged run of the previous incarnation, if have_in_hand
    bool have_in_hand = false;
    bool prev_clean = true;
    for (std::size_t n = 0; n < cons.size(); ++n) {
      const Incarnation& inc = cons[n];
      for (const std::string& c : inc.corrupt)
        violations.push_back(fmt::format("{}: corrupt record after sequence {}", cname, c));
      std::optional<std::uint64_t> pos;
      for (const Run& r : inc.runs) {
        if (!pos) {
          // The incarnation's first record.
          const bool fresh = r.first == hi;
          const bool after_kill = !prev_clean && have_in_hand;
          const bool redelivery =
              after_kill && r.first == in_hand.first && r.first < hi && hi - r.first <= batch_max;
          if (!fresh && !redelivery) {
            if (r.first > hi)
              violations.push_back(
                  fmt::format("{}: incarnation {} starts at {}: records {}..{} lost", cname, n,
                              r.first, hi, r.first - 1));
            else if (after_kill && r.first > in_hand.first)
              violations.push_back(fmt::format(
                  "{}: incarnation {} starts at {}, not at the first record of the batch in hand "
                  "at the previous kill ({}..{}): a redelivery starts exactly there",
                  cname, n, r.first, in_hand.first, in_hand.last));
            else
              violations.push_back(fmt::format(
                  "{}: incarnation {} starts at {}, before the batch in hand at the previous kill "
                  "({}): records {}..{} duplicated",
                  cname, n, r.first,
                  have_in_hand ? fmt::format("{}..{}", in_hand.first, in_hand.last)
                               : std::string("none"),
                  r.first, hi - 1));
          }
        } else if (r.first != *pos) {
          violations.push_back(fmt::format("{}: incarnation {}: {} follows {} ({})", cname, n,
                                           r.first, *pos - 1,
                                           r.first > *pos ? "records lost" : "records duplicated"));
        }
        if (r.first < hi) dups += std::min(r.last + 1, hi) - r.first;
        pos = r.last + 1;
        hi = std::max(hi, r.last + 1);
      }
      if (!inc.runs.empty()) {
        in_hand = inc.runs.back();
        have_in_hand = true;
      }
      // Clean stop: nothing in hand. Killed: the last logged batch may be in
      // hand; killed before logging anything: whatever was in hand still is.
      if (inc.stop) {
        prev_clean = true;
        have_in_hand = false;
      } else if (!inc.runs.empty()) {
        prev_clean = false;
      }
    }
    if (cons.empty() || !cons.back().stop)
      violations.push_back(
          fmt::format("{}: did not drain and stop cleanly (no final X line)", cname));
    if (published) {
      if (hi < *published)
        violations.push_back(fmt::format(
            "ring {}: published {} records, consumers saw 0..{} only: {} lost", i, *published,
            hi == 0 ? std::string("-") : std::to_string(hi - 1), *published - hi));
      else if (hi > *published)
        violations.push_back(fmt::format(
            "ring {}: consumers saw {} records, producer published only {}", i, hi, *published));
    }
    messages += hi;
    redelivered += dups;
  }

  std::printf(
      "  messages: %llu delivered, %llu redelivered after a consumer kill (at-least-once, "
      "batch in hand)\n",
      static_cast<unsigned long long>(messages), static_cast<unsigned long long>(redelivered));
  std::printf(
      "  producer restarts that found their last batch journalled but unpublished (and "
      "sent it again): %llu\n",
      static_cast<unsigned long long>(resent_unpublished));
  for (const std::string& v : violations) std::printf("  VIOLATION: %s\n", v.c_str());
  return violations.empty() ? 0 : 1;
}
