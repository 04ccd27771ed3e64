#include "harness/harness.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

namespace shm::bench {

// ---------------------------------------------------------------- CPUs

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

bool pin_to_cpu(int cpu) noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (::sched_setaffinity(0, sizeof set, &set) == 0) return true;
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true))
    std::fprintf(stderr, "warning: cannot pin to CPU %d: %s (running unpinned)\n", cpu,
                 std::strerror(errno));
  return false;
}

CpuPair choose_cpus(std::string_view spec) {
  if (!spec.empty()) {
    const auto comma = spec.find(',');
    if (comma == std::string_view::npos)
      throw BenchError(fmt::format("--cpus: expected A,B, got '{}'", spec));
    CpuPair pair;
    const auto a = spec.substr(0, comma);
    const auto b = spec.substr(comma + 1);
    if (std::from_chars(a.data(), a.data() + a.size(), pair.self).ec != std::errc{} ||
        std::from_chars(b.data(), b.data() + b.size(), pair.peer).ec != std::errc{})
      throw BenchError(fmt::format("--cpus: expected A,B, got '{}'", spec));
    return pair;
  }
  const auto cpus = allowed_cpus();
  if (cpus.empty()) return {};
  if (cpus.size() == 1) {
    std::fprintf(stderr, "warning: only CPU %d is allowed; both processes share it\n", cpus[0]);
    return {cpus[0], cpus[0]};
  }
  return {cpus[0], cpus[1]};
}

// ---------------------------------------------------------------- memory

void prefault(std::span<std::byte> memory, bool write) noexcept {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  for (std::size_t off = 0; off < memory.size(); off += page) {
    volatile std::byte* b = memory.data() + off;
    const std::byte v = *b;
    if (write) *b = v;
  }
}

void* map_shared_anonymous(std::size_t size) {
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    throw BenchError(fmt::format("mmap of {} shared bytes: {}", size, std::strerror(errno)));
  prefault({static_cast<std::byte*>(p), size}, true);
  return p;
}

void unmap(void* p, std::size_t size) noexcept {
  ::munmap(p, size);
}

bool StartGate::arrive_and_wait(std::uint32_t parties, std::chrono::milliseconds timeout) noexcept {
  // acq_rel / acquire: every arrival's earlier writes (setup) are visible to all
  // parties once the count is complete.
  arrived.fetch_add(1, std::memory_order_acq_rel);
  Deadline deadline(timeout);
  while (arrived.load(std::memory_order_acquire) < parties) {
    spin_pause();
    if (deadline.expired_every()) return false;
  }
  return true;
}

ScratchRoot::ScratchRoot() {
  for (const char* base : {"/dev/shm", "/tmp"}) {
    std::string tmpl = fmt::format("{}/libshm-bench-XXXXXX", base);
    if (::mkdtemp(tmpl.data()) != nullptr) {
      path_ = std::move(tmpl);
      break;
    }
  }
  if (path_.empty()) throw BenchError(fmt::format("mkdtemp: {}", std::strerror(errno)));
  ::setenv("LIBSHM_ROOT", path_.c_str(), 1);
}

ScratchRoot::~ScratchRoot() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

// ---------------------------------------------------------------- processes

Peer& Peer::operator=(Peer&& other) noexcept {
  if (this != &other) {
    if (pid_ > 0) (void)wait(std::chrono::milliseconds(0));
    pid_ = std::exchange(other.pid_, -1);
  }
  return *this;
}

Peer::~Peer() {
  if (pid_ > 0) (void)wait(std::chrono::milliseconds(0));
}

Peer Peer::fork_pinned(int cpu, const std::function<int()>& body) {
  std::fflush(nullptr);  // the child must not flush the parent's buffered output again
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw BenchError(fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    // A peer never outlives the harness.
    (void)::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(100);
    (void)pin_to_cpu(cpu);
    int rc = 0;
    try {
      rc = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "peer (pid %d): %s\n", static_cast<int>(::getpid()), e.what());
      rc = 101;
    } catch (...) {
      rc = 102;
    }
    std::fflush(stderr);
    ::_exit(rc);
  }
  return Peer(pid);
}

int Peer::wait(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  const std::uint64_t deadline = now_ns() + static_cast<std::uint64_t>(timeout.count()) * 1'000'000;
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
      return -1;
    }
    if (r < 0 && errno != EINTR) {
      pid_ = -1;
      return -1;
    }
    if (now_ns() >= deadline) {
      ::kill(pid_, SIGKILL);
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      pid_ = -1;
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

Watchdog::Watchdog(std::chrono::seconds limit) noexcept {
  ::alarm(static_cast<unsigned>(std::max<std::chrono::seconds::rep>(1, limit.count())));
}

Watchdog::~Watchdog() {
  ::alarm(0);
}

// ---------------------------------------------------------------- clocks

std::uint64_t now_ns() noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

namespace {

bool cpu_has_flag(std::string_view flag) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    const std::string padded = line + " ";
    return padded.find(fmt::format(" {} ", flag)) != std::string::npos;
  }
  return false;
}

}  // namespace

TickClock::TickClock() {
#if defined(__x86_64__)
  const std::uint64_t n0 = now_ns();
  const std::uint64_t t0 = ticks();
  while (now_ns() - n0 < 20'000'000) spin_pause();
  const std::uint64_t n1 = now_ns();
  const std::uint64_t t1 = ticks();
  ns_per_tick_ = static_cast<double>(n1 - n0) / static_cast<double>(t1 - t0);
  source_ = cpu_has_flag("constant_tsc") ? "rdtsc (constant_tsc)" : "rdtsc (no constant_tsc flag!)";
#endif
}

double timer_cost_ns(const TickClock& clock) {
  constexpr int kReads = 1000;
  std::vector<double> per_read;
  std::uint64_t sink = 0;
  for (int trial = 0; trial < 101; ++trial) {
    const std::uint64_t t0 = TickClock::ticks();
    for (int i = 0; i < kReads; ++i) sink += TickClock::ticks();
    const std::uint64_t t1 = TickClock::ticks();
    per_read.push_back(clock.to_ns(t1 - t0) / kReads);
  }
  std::atomic_signal_fence(std::memory_order_seq_cst);
  if (sink == 42) std::fprintf(stderr, " ");  // keeps the reads
  return summarize(std::move(per_read)).p50;
}

// ---------------------------------------------------------------- statistics

template <class T>
double percentile(std::span<T> values, double q) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  q = std::clamp(q, 0.0, 1.0);
  const double pos = q * static_cast<double>(values.size() - 1);
  const auto k = static_cast<std::size_t>(pos);
  const double frac = pos - static_cast<double>(k);
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(k), values.end());
  const auto lo = static_cast<double>(values[k]);
  if (frac == 0.0 || k + 1 >= values.size()) return lo;
  const auto hi = static_cast<double>(
      *std::min_element(values.begin() + static_cast<std::ptrdiff_t>(k) + 1, values.end()));
  return lo + frac * (hi - lo);
}
template double percentile<double>(std::span<double>, double);
template double percentile<std::uint64_t>(std::span<std::uint64_t>, double);

Summary summarize(std::vector<double> values) {
  Summary s;
  s.n = values.size();
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  const auto at = [&](double q) {
    const double pos = q * static_cast<double>(values.size() - 1);
    const auto k = static_cast<std::size_t>(pos);
    const double frac = pos - static_cast<double>(k);
    if (k + 1 >= values.size()) return values[k];
    return values[k] + frac * (values[k + 1] - values[k]);
  };
  s.min = values.front();
  s.max = values.back();
  s.p10 = at(0.10);
  s.p50 = at(0.50);
  s.p90 = at(0.90);
  s.p99 = at(0.99);
  s.p999 = at(0.999);
  return s;
}

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

Comparison& Comparison::add_case(std::string name, std::function<Measurement()> run) {
  cases_.emplace_back(std::move(name), std::move(run));
  return *this;
}

Comparison& Comparison::add_ratio(RatioSpec spec) {
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

// ---------------------------------------------------------------- command lines

Args::Args(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) args_.emplace_back(argv[i]);
  used_.assign(args_.size(), false);
}

bool Args::flag(std::string_view name) {
  bool found = false;
  for (std::size_t i = 0; i < args_.size(); ++i) {
    if (!used_[i] && args_[i] == name) {
      used_[i] = true;
      found = true;
    }
  }
  return found;
}

std::string Args::value(std::string_view name, std::string_view fallback) {
  std::string result(fallback);
  for (std::size_t i = 0; i < args_.size(); ++i) {
    if (used_[i]) continue;
    const std::string& a = args_[i];
    if (a == name) {
      if (i + 1 >= args_.size()) throw BenchError(fmt::format("{} needs a value", name));
      used_[i] = used_[i + 1] = true;
      result = args_[i + 1];
      ++i;
    } else if (a.size() > name.size() && a.compare(0, name.size(), name) == 0 &&
               a[name.size()] == '=') {
      used_[i] = true;
      result = a.substr(name.size() + 1);
    }
  }
  return result;
}

int Args::int_value(std::string_view name, int fallback) {
  const std::string v = value(name, std::to_string(fallback));
  int out = 0;
  const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc{} || ptr != v.data() + v.size())
    throw BenchError(fmt::format("{}: expected an integer, got '{}'", name, v));
  return out;
}

double Args::double_value(std::string_view name, double fallback) {
  const std::string v = value(name, fmt::format("{}", fallback));
  char* end = nullptr;
  const double out = std::strtod(v.c_str(), &end);
  if (end != v.c_str() + v.size() || v.empty())
    throw BenchError(fmt::format("{}: expected a number, got '{}'", name, v));
  return out;
}

void Args::finish(std::string_view usage) {
  if (flag("--help") || flag("-h")) {
    fmt::print("{}", usage);
    std::exit(0);
  }
  for (std::size_t i = 0; i < args_.size(); ++i) {
    if (!used_[i]) {
      fmt::print(stderr, "unknown argument '{}'\n\n{}", args_[i], usage);
      std::exit(2);
    }
  }
}

std::vector<std::size_t> parse_sizes(std::string_view list) {
  std::vector<std::size_t> sizes;
  while (!list.empty()) {
    const auto comma = list.find(',');
    const auto item = list.substr(0, comma);
    std::size_t v = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc{} || ptr != item.data() + item.size() || v == 0)
      throw BenchError(
          fmt::format("expected a list of positive sizes like 8,64,1024, got '{}'", list));
    sizes.push_back(v);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return sizes;
}

}  // namespace shm::bench
