// Soak verifier for the spsc_ring block of scripts/soak.sh: reads the logs of
// every producer/consumer pair (formats in soak_common.hpp) and the kill log,
// checks the delivery semantics, prints a summary, exits 1 on any violation.
//
// Semantics verified, per ring:
//  - exactly-once publication: every sequence number 0..N-1 (N from the
//    producer's clean stop) is published once, including across producer
//    kills (a partial or unpublished batch is never visible; a restarted
//    producer continues at the first unpublished number);
//  - nothing lost: the consumers' logs cover 0..N-1 without a gap;
//  - at-least-once only at a consumer kill: within one consumer incarnation
//    sequence numbers are strictly consecutive; a new incarnation after a kill
//    may start again no earlier than the first record of the batch the killed
//    one had logged but maybe not released (the batch in hand), and nowhere
//    else is a record repeated;
//  - nothing corrupt: every record passed its magic/length/CRC/producer checks;
//  - recovery: every killed process was restarted and made progress; the
//    time from kill -9 to the first batch after restart is the recovery time.
//
//   test_soak_verify --dir DIR --pairs N --batch-max K --end-ns NS
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Run {
  std::uint64_t first, last;
};

struct Incarnation {
  std::uint64_t start_ns = 0;
  std::optional<std::uint64_t> first_progress_ns;
  std::optional<std::uint64_t> stop;    // X value
  std::uint64_t start_next = 0;         // producers
  std::string resumed;                  // producers: fresh | published | unpublished
  std::vector<Run> runs;                // consumers
  std::vector<std::string> corrupt;     // C lines
  std::vector<std::string> violations;  // V lines
};

std::vector<Incarnation> parse(const std::string& path, std::vector<std::string>& problems) {
  std::vector<Incarnation> out;
  std::ifstream in(path);
  if (!in) {
    problems.push_back(fmt::format("{}: cannot read", path));
    return out;
  }
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::istringstream ls(line.substr(1));
    const char tag = line[0];
    if (tag == 'S') {
      Incarnation inc;
      long long pid = 0;
      ls >> pid >> inc.start_ns >> inc.start_next >> inc.resumed;
      out.push_back(std::move(inc));
      continue;
    }
    if (out.empty()) {
      problems.push_back(fmt::format("{}: line before the first start: '{}'", path, line));
      continue;
    }
    Incarnation& inc = out.back();
    if (tag == 'B') {
      Run r{};
      if ((ls >> r.first >> r.last) && r.first <= r.last) inc.runs.push_back(r);
    } else if (tag == 'F') {
      std::uint64_t ns = 0;
      if (ls >> ns && !inc.first_progress_ns) inc.first_progress_ns = ns;
    } else if (tag == 'X') {
      std::uint64_t v = 0;
      if (ls >> v) inc.stop = v;
    } else if (tag == 'C') {
      inc.corrupt.push_back(line.substr(2));
    } else if (tag == 'V') {
      inc.violations.push_back(line.substr(2));
    }
    // Anything else is the torn remainder of a line cut by kill -9: ignored
    // (a batch whose log line was torn was never released, so it is delivered
    // again and logged whole by the next incarnation).
  }
  return out;
}

struct Kill {
  std::string name;
  std::uint64_t ns;
};

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  int pairs = 0;
  std::uint64_t batch_max = 0, end_ns = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k(argv[i]);
    if (k == "--dir")
      dir = argv[i + 1];
    else if (k == "--pairs")
      pairs = std::atoi(argv[i + 1]);
    else if (k == "--batch-max")
      batch_max = std::strtoull(argv[i + 1], nullptr, 10);
    else if (k == "--end-ns")
      end_ns = std::strtoull(argv[i + 1], nullptr, 10);
  }
  if (dir.empty() || pairs <= 0 || batch_max == 0) {
    std::fprintf(stderr, "usage: test_soak_verify --dir DIR --pairs N --batch-max K --end-ns NS\n");
    return 2;
  }
  std::vector<std::string> violations;
  std::uint64_t messages = 0, redelivered = 0, resent_unpublished = 0;

  std::map<std::string, std::vector<Incarnation>> procs;
  for (int i = 0; i < pairs; ++i) {
    const std::string pname = fmt::format("producer-{}", i), cname = fmt::format("consumer-{}", i);
    auto prod = parse(fmt::format("{}/{}.log", dir, pname), violations);
    auto cons = parse(fmt::format("{}/{}.log", dir, cname), violations);
    for (const auto* p : {&prod, &cons})
      for (const Incarnation& inc : *p)
        for (const std::string& v : inc.violations)
          violations.push_back(fmt::format("{}: {}", p == &prod ? pname : cname, v));

    for (const Incarnation& inc : prod) resent_unpublished += inc.resumed == "unpublished" ? 1 : 0;
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
          const bool redelivery = r.first < hi && !prev_clean && have_in_hand &&
                                  r.first >= in_hand.first && hi - r.first <= batch_max;
          if (!fresh && !redelivery) {
            if (r.first > hi)
              violations.push_back(
                  fmt::format("{}: incarnation {} starts at {}: records {}..{} lost", cname, n,
                              r.first, hi, r.first - 1));
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
    procs.emplace(pname, std::move(prod));
    procs.emplace(cname, std::move(cons));
  }

  // Kills and recovery times. The script restarts a victim 0-300 ms after the
  // kill (on purpose: sometimes the sidecar reclaims first, sometimes the new
  // process takes the slot over); recovery is timed from the restart to the
  // first progress of the new incarnation, and the outage from the kill.
  std::vector<Kill> kills, restarts;
  {
    std::ifstream ev(dir + "/events.log");
    std::string tag, name;
    std::uint64_t ns = 0;
    while (ev >> tag >> name >> ns) {
      if (tag == "K") kills.push_back({name, ns});
      if (tag == "R") restarts.push_back({name, ns});
    }
  }
  std::map<std::string, int> kills_by_type;
  std::uint64_t recovered = 0, pending = 0, max_ns = 0, sum_ns = 0, max_outage_ns = 0;
  for (std::size_t n = 0; n < kills.size(); ++n) {
    const Kill& k = kills[n];
    const std::string type = k.name.substr(0, k.name.find('-'));
    ++kills_by_type[type];
    const auto it = procs.find(k.name);
    if (it == procs.end()) continue;  // the sidecar: checked by the script
    const std::uint64_t restart_ns =
        n < restarts.size() && restarts[n].name == k.name ? restarts[n].ns : k.ns;
    std::optional<std::uint64_t> done;
    for (const Incarnation& inc : it->second)
      if (inc.start_ns > k.ns && inc.first_progress_ns) {
        done = *inc.first_progress_ns;
        break;
      }
    if (done && *done >= k.ns) {
      const std::uint64_t took = *done >= restart_ns ? *done - restart_ns : 0;
      ++recovered;
      max_ns = std::max(max_ns, took);
      sum_ns += took;
      max_outage_ns = std::max(max_outage_ns, *done - k.ns);
    } else if (end_ns > k.ns && end_ns - k.ns < 5'000'000'000ull) {
      ++pending;  // killed shortly before the end: no time to show progress
    } else {
      violations.push_back(
          fmt::format("{}: killed at {} and never made progress again", k.name, k.ns));
    }
  }

  std::string by_type;
  for (const auto& [t, n] : kills_by_type)
    by_type += fmt::format("{}{} {}", by_type.empty() ? "" : ", ", t, n);
  std::printf(
      "  messages: %llu delivered, %llu redelivered after a consumer kill (at-least-once, "
      "batch in hand)\n",
      static_cast<unsigned long long>(messages), static_cast<unsigned long long>(redelivered));
  std::printf(
      "  producer restarts that found their last batch journalled but unpublished (and "
      "sent it again): %llu\n",
      static_cast<unsigned long long>(resent_unpublished));
  const std::string pending_note =
      pending ? fmt::format(" ({} too close to the end)", pending) : "";
  std::printf("  kills: %zu (%s); recoveries: %llu of %llu%s\n", kills.size(),
              by_type.empty() ? "none" : by_type.c_str(),
              static_cast<unsigned long long>(recovered),
              static_cast<unsigned long long>(recovered + pending), pending_note.c_str());
  std::printf(
      "  recovery (restart to first progress): max %.1f ms, mean %.1f ms; longest outage "
      "(kill to first progress) %.1f ms\n",
      static_cast<double>(max_ns) / 1e6,
      recovered ? static_cast<double>(sum_ns) / 1e6 / static_cast<double>(recovered) : 0.0,
      static_cast<double>(max_outage_ns) / 1e6);
  for (const std::string& v : violations) std::printf("  VIOLATION: %s\n", v.c_str());
  return violations.empty() ? 0 : 1;
}
