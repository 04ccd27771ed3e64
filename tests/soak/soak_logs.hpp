// Reading the soak's logs (scripts/soak.sh): shared by the verifiers
// (test_soak_verify, test_soak_fanout_verify, test_soak_ledger_verify,
// test_soak_recovery).
//
// Every soak process appends to <dir>/<name>.log; one incarnation (one start
// of the process) begins with an S line. The lines every kind shares:
//   S <pid> <realtime_ns> [fields...]   incarnation start (kind-specific fields)
//   F <realtime_ns>                     first progress of this incarnation
//   X [fields...]                       clean stop (the first field a number)
//   C <text>                            a record/item failed its checks
//   V <text>                            a violation seen by the process
// Other tags are kind-specific and handed to the caller. A line cut by
// kill -9 is terminated by the next incarnation's leading "\n"; a torn line
// that no longer parses is ignored (the processes log before they act, so a
// torn line describes an action that did not happen).
//
// events.log, written by the script: "K <name> <ns>" (kill -9) and
// "R <name> <ns>" (restart), one pair per kill, in order.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace soak {

struct Run {
  std::uint64_t first, last;
};

struct Incarnation {
  std::int64_t pid = 0;
  std::uint64_t start_ns = 0;
  std::vector<std::string> start_fields;  // the S line after pid and time
  std::optional<std::uint64_t> first_progress_ns;
  std::optional<std::uint64_t> stop;  // the X line's first field
  std::vector<std::string> stop_fields;
  std::vector<Run> runs;                // B lines (spsc consumers)
  std::vector<std::string> corrupt;     // C lines
  std::vector<std::string> violations;  // V lines
};

inline std::vector<std::string> fields(std::istringstream& in) {
  std::vector<std::string> out;
  for (std::string f; in >> f;) out.push_back(std::move(f));
  return out;
}

// Parses one process's log. `other(tag, rest, incarnation, index)` receives
// the lines with kind-specific tags (after the tag character).
template <class Other>
std::vector<Incarnation> parse_log(const std::string& path, std::vector<std::string>& problems,
                                   Other&& other) {
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
      if (ls >> inc.pid >> inc.start_ns) inc.start_fields = fields(ls);
      out.push_back(std::move(inc));
      continue;
    }
    if (out.empty()) {
      problems.push_back(fmt::format("{}: line before the first start: '{}'", path, line));
      continue;
    }
    Incarnation& inc = out.back();
    if (tag == 'F') {
      std::uint64_t ns = 0;
      if (ls >> ns && !inc.first_progress_ns) inc.first_progress_ns = ns;
    } else if (tag == 'X') {
      std::uint64_t v = 0;
      if (ls >> v) {
        inc.stop = v;
        inc.stop_fields = fields(ls);
      }
    } else if (tag == 'C') {
      inc.corrupt.push_back(line.size() > 2 ? line.substr(2) : std::string());
    } else if (tag == 'V') {
      inc.violations.push_back(line.size() > 2 ? line.substr(2) : std::string());
    } else {
      other(tag, ls, inc, out.size() - 1);
    }
  }
  return out;
}

inline std::vector<Incarnation> parse_log(const std::string& path,
                                          std::vector<std::string>& problems) {
  return parse_log(path, problems, [](char, std::istringstream&, Incarnation&, std::size_t) {});
}

// Incarnations that ended without a clean stop (killed), not counting the last.
inline std::uint64_t killed_incarnations(const std::vector<Incarnation>& incs) {
  std::uint64_t n = 0;
  for (std::size_t i = 0; i + 1 < incs.size(); ++i) n += incs[i].stop ? 0 : 1;
  return n;
}

struct Event {
  std::string name;
  std::uint64_t ns;
};

// events.log: kills and restarts, each in order.
inline void read_events(const std::string& dir, std::vector<Event>& kills,
                        std::vector<Event>& restarts) {
  std::ifstream ev(dir + "/events.log");
  std::string tag, name;
  std::uint64_t ns = 0;
  while (ev >> tag >> name >> ns) {
    if (tag == "K") kills.push_back({name, ns});
    if (tag == "R") restarts.push_back({name, ns});
  }
}

}  // namespace soak
