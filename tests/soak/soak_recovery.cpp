// Soak recovery check (scripts/soak.sh, every kind): for each kill -9 in
// events.log, finds the victim's next incarnation in <dir>/<name>.log and the
// time of its first progress (F line). Prints kills by process type,
// recoveries and recovery times; exits 1 when a killed process never made
// progress again (except one killed in the last 5 s before --end-ns, which had
// no time to: counted as pending). Processes without a log (the sidecar) are
// counted, not timed: the script checks the sidecar itself.
//
// The script restarts a victim 0-300 ms after the kill (on purpose: sometimes
// the sidecar reclaims first, sometimes the new process takes the slot over);
// recovery is timed from the restart to the first progress of the new
// incarnation, the outage from the kill.
//
//   test_soak_recovery --dir DIR --end-ns NS
#include "soak_logs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace {

// "fanout-consumer-1" -> "fanout-consumer"
std::string type_of(const std::string& name) {
  const auto dash = name.rfind('-');
  if (dash == std::string::npos || dash + 1 == name.size()) return name;
  for (std::size_t i = dash + 1; i < name.size(); ++i)
    if (std::isdigit(static_cast<unsigned char>(name[i])) == 0) return name;
  return name.substr(0, dash);
}

struct PerType {
  std::uint64_t kills = 0, recovered = 0, pending = 0, untimed = 0;
  std::uint64_t max_ns = 0;
};

double ms(std::uint64_t ns) {
  return static_cast<double>(ns) / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  std::uint64_t end_ns = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k(argv[i]);
    if (k == "--dir")
      dir = argv[i + 1];
    else if (k == "--end-ns")
      end_ns = std::strtoull(argv[i + 1], nullptr, 10);
  }
  if (dir.empty() || end_ns == 0) {
    std::fprintf(stderr, "usage: test_soak_recovery --dir DIR --end-ns NS\n");
    return 2;
  }
  std::vector<std::string> violations;
  std::vector<soak::Event> kills, restarts;
  soak::read_events(dir, kills, restarts);

  std::map<std::string, std::vector<soak::Incarnation>> logs;  // by process name, parsed once
  std::map<std::string, PerType> types;
  std::uint64_t recovered = 0, pending = 0, max_ns = 0, sum_ns = 0, max_outage_ns = 0;
  for (std::size_t n = 0; n < kills.size(); ++n) {
    const soak::Event& k = kills[n];
    PerType& t = types[type_of(k.name)];
    ++t.kills;
    const std::string path = fmt::format("{}/{}.log", dir, k.name);
    auto it = logs.find(k.name);
    if (it == logs.end()) {
      std::vector<soak::Incarnation> incs;
      if (std::filesystem::exists(path)) incs = soak::parse_log(path, violations);
      it = logs.emplace(k.name, std::move(incs)).first;
    }
    if (it->second.empty()) {
      ++t.untimed;  // no log of its own (the sidecar)
      continue;
    }
    const std::uint64_t restart_ns =
        n < restarts.size() && restarts[n].name == k.name ? restarts[n].ns : k.ns;
    std::optional<std::uint64_t> done;
    for (const soak::Incarnation& inc : it->second)
      if (inc.start_ns > k.ns && inc.first_progress_ns) {
        done = *inc.first_progress_ns;
        break;
      }
    if (done && *done >= k.ns) {
      const std::uint64_t took = *done >= restart_ns ? *done - restart_ns : 0;
      ++recovered;
      ++t.recovered;
      max_ns = std::max(max_ns, took);
      t.max_ns = std::max(t.max_ns, took);
      sum_ns += took;
      max_outage_ns = std::max(max_outage_ns, *done - k.ns);
    } else if (end_ns > k.ns && end_ns - k.ns < 5'000'000'000ull) {
      ++pending;  // killed shortly before the end: no time to show progress
      ++t.pending;
    } else {
      violations.push_back(
          fmt::format("{}: killed at {} and never made progress again", k.name, k.ns));
    }
  }

  std::string by_type;
  for (const auto& [name, t] : types)
    by_type += fmt::format("{}{} {}", by_type.empty() ? "" : ", ", name, t.kills);
  const std::string pending_note =
      pending ? fmt::format(" ({} too close to the end)", pending) : "";
  std::printf("  kills: %zu (%s); recoveries: %llu of %llu%s\n", kills.size(),
              by_type.empty() ? "none" : by_type.c_str(),
              static_cast<unsigned long long>(recovered),
              static_cast<unsigned long long>(recovered + pending), pending_note.c_str());
  for (const auto& [name, t] : types) {
    if (t.untimed == t.kills) {
      std::printf("    %-16s %3llu kill(s), restarted (not timed: no progress log)\n", name.c_str(),
                  static_cast<unsigned long long>(t.kills));
      continue;
    }
    std::printf("    %-16s %3llu kill(s), %llu recovered, max %.1f ms\n", name.c_str(),
                static_cast<unsigned long long>(t.kills),
                static_cast<unsigned long long>(t.recovered), ms(t.max_ns));
  }
  std::printf(
      "  recovery (restart to first progress): max %.1f ms, mean %.1f ms; longest outage "
      "(kill to first progress) %.1f ms\n",
      ms(max_ns), recovered ? ms(sum_ns) / static_cast<double>(recovered) : 0.0, ms(max_outage_ns));
  for (const std::string& v : violations) std::printf("  VIOLATION: %s\n", v.c_str());
  return violations.empty() ? 0 : 1;
}
