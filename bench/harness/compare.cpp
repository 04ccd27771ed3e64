// Benchmark harness: Comparisons (cases run in alternation, their ratios and targets) and how
// they are printed (markdown, targets, CSV, the machine).
#include "harness/harness.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <sys/utsname.h>
#include <unistd.h>

namespace shm::bench {

// ---------------------------------------------------------------- comparisons

Measurement& Measurement::set(std::string_view key, double value) {
  for (auto& [k, v] : values_) {
    if (k == key) {
      v = value;
      return *this;
    }
  }
  values_.emplace_back(std::string(key), value);
  return *this;
}

std::optional<double> Measurement::get(std::string_view key) const {
  for (const auto& [k, v] : values_)
    if (k == key) return v;
  return std::nullopt;
}

std::vector<double> CaseResult::series(std::string_view key) const {
  std::vector<double> out;
  for (const auto& m : rounds)
    if (auto v = m.get(key)) out.push_back(*v);
  return out;
}

bool ComparisonResult::all_targets_met() const noexcept {
  return std::all_of(ratios.begin(), ratios.end(),
                     [](const RatioResult& r) { return r.met.value_or(true); });
}

namespace {

// LIBSHM_BENCH_CASES="ring spin,reference ring" runs only the cases named
// (for a profile of one transport); ratios needing a case left out are dropped,
// targets included, so the filter says so once on stderr: a run under it is
// never a verdict on every target.
bool case_selected(const std::string& name) {
  const char* list = std::getenv("LIBSHM_BENCH_CASES");
  if (list == nullptr || *list == '\0') return true;
  static const bool told = [list] {
    std::fprintf(stderr,
                 "LIBSHM_BENCH_CASES=\"%s\": only these cases run; ratios and targets that "
                 "need another case are left out\n",
                 list);
    return true;
  }();
  (void)told;
  std::string_view rest(list);
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    if (rest.substr(0, comma) == name) return true;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace

Comparison& Comparison::add_case(std::string name, std::function<Measurement()> run) {
  if (case_selected(name)) cases_.emplace_back(std::move(name), std::move(run));
  return *this;
}

Comparison& Comparison::add_ratio(RatioSpec spec) {
  if (case_selected(spec.num_case) && case_selected(spec.den_case))
    ratios_.push_back(std::move(spec));
  return *this;
}

ComparisonResult Comparison::run(int repetitions, std::FILE* progress) const {
  const auto index_of = [&](const std::string& name) {
    for (std::size_t i = 0; i < cases_.size(); ++i)
      if (cases_[i].first == name) return i;
    throw BenchError(fmt::format("{}: ratio refers to unknown case '{}'", title_, name));
  };
  for (const auto& r : ratios_) {
    (void)index_of(r.num_case);
    (void)index_of(r.den_case);
  }

  ComparisonResult result;
  result.title = title_;
  result.repetitions = repetitions;
  result.metrics = metrics_;
  for (const auto& [name, fn] : cases_) {
    CaseResult c;
    c.name = name;
    c.rounds.resize(static_cast<std::size_t>(repetitions));
    result.cases.push_back(std::move(c));
  }
  const std::size_t n = cases_.size();
  for (int round = 0; round < repetitions; ++round) {
    for (std::size_t j = 0; j < n; ++j) {
      const std::size_t i = (static_cast<std::size_t>(round) + j) % n;
      if (progress != nullptr) {
        static const std::uint64_t t0 = now_ns();
        std::fprintf(progress, "  %7.1f s  [%s] round %d/%d: %s\n",
                     static_cast<double>(now_ns() - t0) / 1e9, title_.c_str(), round + 1,
                     repetitions, cases_[i].first.c_str());
        std::fflush(progress);
      }
      result.cases[i].rounds[static_cast<std::size_t>(round)] = cases_[i].second();
    }
  }
  for (const auto& spec : ratios_) {
    RatioResult rr;
    rr.spec = spec;
    const auto& num = result.cases[index_of(spec.num_case)];
    const auto& den = result.cases[index_of(spec.den_case)];
    for (int round = 0; round < repetitions; ++round) {
      const auto a = num.rounds[static_cast<std::size_t>(round)].get(spec.num_metric);
      const auto b = den.rounds[static_cast<std::size_t>(round)].get(spec.den_metric);
      if (a && b && *b != 0.0) rr.rounds.push_back(*a / *b);
    }
    rr.summary = summarize(rr.rounds);
    if (spec.target && rr.summary.n > 0)
      rr.met = spec.target->goal == Goal::AtMost ? rr.summary.p50 <= spec.target->bound
                                                 : rr.summary.p50 >= spec.target->bound;
    result.ratios.push_back(std::move(rr));
  }
  return result;
}

// ---------------------------------------------------------------- printing

namespace {

std::string fixed(double v, int decimals) {
  if (std::isnan(v)) return "–";
  return fmt::format("{:.{}f}", v, decimals);
}

std::string ratio_text(double v) {
  return fixed(v, v < 1.0 ? 3 : 2);
}

}  // namespace

void print_markdown(std::FILE* out, const ComparisonResult& r) {
  fmt::print(out, "\n### {}\n\n", r.title);
  fmt::print(out, "{} round(s), cases interleaved; each cell: median over rounds (p10–p90).\n\n",
             r.repetitions);
  fmt::print(out, "| case |");
  for (const auto& m : r.metrics) fmt::print(out, " {} |", m.heading);
  fmt::print(out, "\n|---|");
  for (std::size_t i = 0; i < r.metrics.size(); ++i) fmt::print(out, "---:|");
  fmt::print(out, "\n");
  for (const auto& c : r.cases) {
    fmt::print(out, "| {} |", c.name);
    for (const auto& m : r.metrics) {
      const auto series = c.series(m.key);
      if (series.empty()) {
        fmt::print(out, " – |");
        continue;
      }
      const Summary s = summarize(series);
      if (series.size() == 1)
        fmt::print(out, " {} |", fixed(s.p50 * m.scale, m.decimals));
      else
        fmt::print(out, " {} ({}–{}) |", fixed(s.p50 * m.scale, m.decimals),
                   fixed(s.p10 * m.scale, m.decimals), fixed(s.p90 * m.scale, m.decimals));
    }
    fmt::print(out, "\n");
  }
  if (r.ratios.empty()) return;
  fmt::print(out, "\n| same-round ratio | median | p10 | p90 | target | verdict |\n");
  fmt::print(out, "|---|---:|---:|---:|---|---|\n");
  for (const auto& rr : r.ratios) {
    std::string target = "–";
    std::string verdict = "(info)";
    if (rr.spec.target) {
      target = fmt::format("{} {}", rr.spec.target->goal == Goal::AtMost ? "≤" : "≥",
                           ratio_text(rr.spec.target->bound));
      verdict = !rr.met ? "no data" : *rr.met ? "met" : "**missed**";
    }
    fmt::print(out, "| {} | {} | {} | {} | {} | {} |\n", rr.spec.label, ratio_text(rr.summary.p50),
               ratio_text(rr.summary.p10), ratio_text(rr.summary.p90), target, verdict);
  }
}

void print_targets(std::FILE* out, std::span<const ComparisonResult> results) {
  fmt::print(out, "\n### Targets\n\n");
  fmt::print(out, "| comparison | same-round ratio | median | p10 | p90 | target | verdict |\n");
  fmt::print(out, "|---|---|---:|---:|---:|---|---|\n");
  for (const auto& r : results) {
    for (const auto& rr : r.ratios) {
      if (!rr.spec.target) continue;
      const auto& t = *rr.spec.target;
      fmt::print(out, "| {} | {} | {} | {} | {} | {} {} | {} |\n", r.title, rr.spec.label,
                 ratio_text(rr.summary.p50), ratio_text(rr.summary.p10), ratio_text(rr.summary.p90),
                 t.goal == Goal::AtMost ? "≤" : "≥", ratio_text(t.bound),
                 !rr.met   ? "no data"
                 : *rr.met ? "met"
                           : "**missed**");
    }
  }
}

void append_csv(std::FILE* out, const ComparisonResult& r) {
  if (std::ftell(out) <= 0) fmt::print(out, "comparison,case,metric,round,value\n");
  for (const auto& c : r.cases)
    for (std::size_t round = 0; round < c.rounds.size(); ++round)
      for (const auto& [key, value] : c.rounds[round].values())
        fmt::print(out, "\"{}\",\"{}\",{},{},{}\n", r.title, c.name, key, round, value);
  for (const auto& rr : r.ratios)
    for (std::size_t round = 0; round < rr.rounds.size(); ++round)
      fmt::print(out, "\"{}\",\"ratio: {}\",ratio,{},{}\n", r.title, rr.spec.label, round,
                 rr.rounds[round]);
}

namespace {

std::string first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

MachineInfo machine_info() {
  MachineInfo info;
  info.nproc = static_cast<unsigned>(::sysconf(_SC_NPROCESSORS_ONLN));
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) info.cpu_model = line.substr(colon + 2);
      break;
    }
  }
  utsname u{};
  if (::uname(&u) == 0) info.kernel = fmt::format("{} {} {}", u.sysname, u.release, u.machine);
  const std::string load = first_line("/proc/loadavg");
  std::size_t pos = 0;
  for (int field = 0; field < 3 && pos != std::string::npos; ++field) pos = load.find(' ', pos + 1);
  info.load_average = load.substr(0, pos);
  info.clocksource = first_line("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  return info;
}

void print_machine(std::FILE* out, const MachineInfo& info, int argc, char** argv) {
  std::string command;
  for (int i = 0; i < argc; ++i) {
    if (i > 0) command.push_back(' ');
    command.append(argv[i]);
  }
  char when[64] = "?";
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  if (::gmtime_r(&now, &tm) != nullptr)
    std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
  fmt::print(out, "- command: `{}`\n", command);
  fmt::print(out, "- date: {}\n", when);
  fmt::print(out, "- machine: {} online CPU(s), {}, {}\n", info.nproc, info.cpu_model, info.kernel);
  fmt::print(out, "- clocksource: {}; load average at start (1/5/15 min): {}\n", info.clocksource,
             info.load_average);
}

}  // namespace shm::bench
