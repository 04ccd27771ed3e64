// shm_bench_harness: the pieces every libshm benchmark shares. Link the
// static library `shm_bench_harness` (bench/CMakeLists.txt does it for every
// bench/micro_*.cpp and bench/xproc_*.cpp) and include "harness/harness.hpp".
//
// API (namespace shm::bench)
//
//   CPUs
//     allowed_cpus()            CPUs this process may run on (sched_getaffinity).
//     pin_to_cpu(cpu)           pins the calling thread; false (and one warning on
//                               stderr) when the kernel refuses.
//     CpuPair choose_cpus(spec) "0,1"-style spec or, empty, the first two allowed
//                               CPUs; `self` for this process, `peer` for forked peers.
//
//   Memory
//     prefault(span, write)     touches every page (write = read and write back
//                               each page's first byte; only for memory no other
//                               process writes yet).
//     SharedBlock<T>            a T in an anonymous MAP_SHARED mapping, prefaulted,
//                               visible to every process forked afterwards (the
//                               harness's own control block: gates, results).
//     StartGate                 a single-use spinning barrier that lives in shared
//                               memory: arrive_and_wait(parties, timeout).
//     ScratchRoot               a fresh LIBSHM_ROOT under /dev/shm (set in the
//                               environment, so forked peers inherit it), removed
//                               with everything in it on destruction; path().
//
//   Processes
//     Peer::fork_pinned(cpu, body)   forks; the child pins itself to `cpu`, runs
//                                    body() and _exit()s with its return value (an
//                                    exception prints and exits 101). The child never
//                                    runs the parent's destructors.
//     Peer::wait(timeout)            exit code, 128 + signal, or -1 on timeout (the
//                                    child is then killed). ~Peer kills and reaps.
//     measure_in_child(cpu, limit, run)  runs run() in a child pinned to `cpu`
//                                    and returns its Measurement (for transports
//                                    whose per-process state a fork must not copy:
//                                    iceoryx's registration with RouDi).
//     Watchdog w(seconds)            alarm(2) for the scope: a run blocked for good in
//                                    a baseline without timeouts (a pipe read, a
//                                    message_queue receive) kills the harness with
//                                    SIGALRM instead of hanging it; peers die with it
//                                    (PR_SET_PDEATHSIG).
//
//   Clocks
//     now_ns()                  CLOCK_MONOTONIC (steady_clock) in ns.
//     TickClock                 the cheapest per-sample timestamp: rdtsc on x86-64
//                               (calibrated against steady_clock once), else
//                               steady_clock. ticks() / to_ns(ticks).
//     timer_cost_ns(clock)      median cost of one timestamp (back-to-back reads).
//     Deadline                  a hard time limit checked every N calls of
//                               expired_every(): spin loops use it so a dead peer
//                               makes a run fail instead of hanging.
//     spin_pause()              the CPU's spin-wait hint (pause on x86-64).
//
//   Statistics
//     percentile(values, q)     q in [0, 1], linear interpolation between closest
//                               ranks; reorders `values` (nth_element), no copy.
//     Summary summarize(values) n, min, p10, p50, p90, p99, p99.9, max.
//
//   Interleaved comparisons (the baseline runs in the same process run as the
//   contender, run by run)
//     Comparison c(title, {MetricSpec{key, heading, scale, decimals}, ...});
//     c.add_case(name, [] { return Measurement().set("msg_s", x); });
//     c.add_ratio({label, num_case, num_metric, den_case, den_metric,
//                  Target{Goal::AtMost, 1.5}});
//     ComparisonResult r = c.run(repetitions);
//       Round k runs every case once, starting with case k mod n (the rotation
//       spreads order effects over all cases). A ratio is computed inside each
//       round (contender and baseline of the same round), then summarised over
//       rounds: median with p10/p90. A target is met when the median ratio meets it.
//       A case that throws aborts the comparison (the exception propagates).
//
//   Printing
//     print_markdown(out, result)    a table per comparison: each metric as
//                                    "median (p10–p90)" over rounds, then the ratios
//                                    with their target and verdict.
//     print_targets(out, results)    one table of every ratio that has a target,
//                                    across comparisons (the summary to quote).
//     append_csv(out, result)        every per-round value (for plots).
//     MachineInfo machine_info()     nproc, CPU model, kernel, load average,
//                                    clocksource; print_machine(out, info, argv).
//
//   Command lines
//     Args args(argc, argv);  args.flag("--quick");  args.value("--reps", "5");
//     args.finish(usage) rejects unknown arguments (prints usage, exits 2).
//     RunOptions parse_run_options(args, reps, quick_reps)   the options every
//                               xproc program takes: --quick, --smoke, --reps,
//                               --csv, --check-targets.
//
//   Programs (the report and main() every xproc program shares; the program
//   defines its options, its contender and baseline cases and its comparisons)
//     run_report(Report{program, options, setup line, pin CPU, targets table,
//                       smoke message}, argc, argv, {comparison factories...})
//       opens --csv, prints the header, the machine and the setup line, pins,
//       runs each comparison in order and prints it as it finishes, then the
//       targets table, the CSV and the load average; returns the exit status
//       (3 when --check-targets and a target ratio was missed; 0 with --smoke).
//     guarded_main(program, argc, argv, run)   main(): an exception is printed
//                               as "<program>: <what>" and exits 1.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <new>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <sys/types.h>

namespace shm::bench {

// A failed benchmark run (a peer died, data arrived corrupt, a timeout).
class BenchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// ---------------------------------------------------------------- CPUs

[[nodiscard]] std::vector<int> allowed_cpus();
bool pin_to_cpu(int cpu) noexcept;

struct CpuPair {
  int self = 0;
  int peer = 1;
};
// `spec` is "A,B" or empty (the first two allowed CPUs; the same CPU twice when
// only one is allowed, with a warning).
[[nodiscard]] CpuPair choose_cpus(std::string_view spec);

// ---------------------------------------------------------------- memory

void prefault(std::span<std::byte> memory, bool write) noexcept;

void* map_shared_anonymous(std::size_t size);  // throws BenchError
void unmap(void* p, std::size_t size) noexcept;

template <class T>
class SharedBlock {
  static_assert(std::is_trivially_destructible_v<T>, "a SharedBlock is never destroyed in peers");

 public:
  SharedBlock() : p_(new (map_shared_anonymous(sizeof(T))) T{}) {}
  SharedBlock(const SharedBlock&) = delete;
  SharedBlock& operator=(const SharedBlock&) = delete;
  ~SharedBlock() { unmap(p_, sizeof(T)); }
  T* operator->() const noexcept { return p_; }
  T& operator*() const noexcept { return *p_; }
  // Puts a fresh T in place (between runs, while no peer is alive).
  void reset() { p_ = new (p_) T{}; }

 private:
  T* p_;
};

struct StartGate {
  std::atomic<std::uint32_t> arrived{0};
  // Spins until `parties` processes arrived; false when `timeout` passed first.
  bool arrive_and_wait(std::uint32_t parties, std::chrono::milliseconds timeout) noexcept;
};
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

// A private segment root for one benchmark program (sets LIBSHM_ROOT).
class ScratchRoot {
 public:
  ScratchRoot();
  ScratchRoot(const ScratchRoot&) = delete;
  ScratchRoot& operator=(const ScratchRoot&) = delete;
  ~ScratchRoot();
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

// One scratch root per benchmark process, made on first use and removed at exit
// (the micro benchmarks of every structure share it).
ScratchRoot& process_scratch_root();

// ---------------------------------------------------------------- processes

class Peer {
 public:
  Peer() = default;
  Peer(Peer&& other) noexcept : pid_(std::exchange(other.pid_, -1)) {}
  Peer& operator=(Peer&& other) noexcept;
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;
  ~Peer();

  [[nodiscard]] static Peer fork_pinned(int cpu, const std::function<int()>& body);
  [[nodiscard]] pid_t pid() const noexcept { return pid_; }
  int wait(std::chrono::milliseconds timeout);

 private:
  explicit Peer(pid_t pid) noexcept : pid_(pid) {}
  pid_t pid_ = -1;
};

class Measurement;
// Throws BenchError when the child fails or outlives `limit` (it is then killed).
[[nodiscard]] Measurement measure_in_child(int cpu, std::chrono::milliseconds limit,
                                           const std::function<Measurement()>& run);

class Watchdog {
 public:
  explicit Watchdog(std::chrono::seconds limit) noexcept;
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  ~Watchdog();
};

// ---------------------------------------------------------------- clocks

[[nodiscard]] std::uint64_t now_ns() noexcept;

inline void spin_pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

class TickClock {
 public:
  TickClock();  // calibrates (about 20 ms) when the clock is the TSC
  [[nodiscard]] static std::uint64_t ticks() noexcept {
#if defined(__x86_64__)
    return __builtin_ia32_rdtsc();
#else
    return now_ns();
#endif
  }
  [[nodiscard]] double to_ns(std::uint64_t ticks) const noexcept {
    return static_cast<double>(ticks) * ns_per_tick_;
  }
  [[nodiscard]] std::string_view source() const noexcept {
    return source_;
  }

 private:
  double ns_per_tick_ = 1.0;
  std::string_view source_ = "steady_clock";
};

[[nodiscard]] double timer_cost_ns(const TickClock& clock);

class Deadline {
 public:
  explicit Deadline(std::chrono::nanoseconds from_now)
      : at_ns_(now_ns() + static_cast<std::uint64_t>(from_now.count())) {}
  [[nodiscard]] bool expired() const noexcept { return now_ns() >= at_ns_; }
  // Reads the clock only every 4096th call.
  [[nodiscard]] bool expired_every() noexcept { return (++calls_ & 4095u) == 0 && expired(); }

 private:
  std::uint64_t at_ns_;
  std::uint32_t calls_ = 0;
};

// ---------------------------------------------------------------- statistics

template <class T>
[[nodiscard]] double percentile(std::span<T> values, double q);
extern template double percentile<double>(std::span<double>, double);
extern template double percentile<std::uint64_t>(std::span<std::uint64_t>, double);

struct Summary {
  std::size_t n = 0;
  double min = 0, p10 = 0, p50 = 0, p90 = 0, p99 = 0, p999 = 0, max = 0;
};
[[nodiscard]] Summary summarize(std::vector<double> values);

// ---------------------------------------------------------------- comparisons

struct MetricSpec {
  std::string key;      // "msg_s"
  std::string heading;  // "Mmsg/s"
  double scale = 1.0;   // printed = value * scale
  int decimals = 2;
};

class Measurement {
 public:
  Measurement& set(std::string_view key, double value);
  [[nodiscard]] std::optional<double> get(std::string_view key) const;
  [[nodiscard]] const std::vector<std::pair<std::string, double>>& values() const noexcept {
    return values_;
  }

 private:
  std::vector<std::pair<std::string, double>> values_;
};

enum class Goal : std::uint8_t { AtMost, AtLeast };
struct Target {
  Goal goal;
  double bound;
};

struct RatioSpec {
  std::string label;
  std::string num_case, num_metric;
  std::string den_case, den_metric;
  std::optional<Target> target;
};

struct CaseResult {
  std::string name;
  std::vector<Measurement> rounds;  // one per round, in round order
  [[nodiscard]] std::vector<double> series(std::string_view key) const;
};

struct RatioResult {
  RatioSpec spec;
  std::vector<double> rounds;
  Summary summary;
  std::optional<bool> met;  // empty without a target
};

struct ComparisonResult {
  std::string title;
  int repetitions = 0;
  std::vector<MetricSpec> metrics;
  std::vector<CaseResult> cases;
  std::vector<RatioResult> ratios;
  [[nodiscard]] bool all_targets_met() const noexcept;
};

class Comparison {
 public:
  Comparison(std::string title, std::vector<MetricSpec> metrics)
      : title_(std::move(title)), metrics_(std::move(metrics)) {}
  Comparison& add_case(std::string name, std::function<Measurement()> run);
  Comparison& add_ratio(RatioSpec spec);
  // Progress lines ("title: round 2/5 case") go to `progress` when not null.
  [[nodiscard]] ComparisonResult run(int repetitions, std::FILE* progress = stderr) const;

 private:
  std::string title_;
  std::vector<MetricSpec> metrics_;
  std::vector<std::pair<std::string, std::function<Measurement()>>> cases_;
  std::vector<RatioSpec> ratios_;
};

// ---------------------------------------------------------------- printing

void print_markdown(std::FILE* out, const ComparisonResult& result);
void print_targets(std::FILE* out, std::span<const ComparisonResult> results);
void append_csv(std::FILE* out, const ComparisonResult& result);

struct MachineInfo {
  unsigned nproc = 0;
  std::string cpu_model;
  std::string kernel;
  std::string load_average;  // /proc/loadavg, first three fields
  std::string clocksource;
};
[[nodiscard]] MachineInfo machine_info();
void print_machine(std::FILE* out, const MachineInfo& info, int argc, char** argv);

// ---------------------------------------------------------------- command lines

class Args {
 public:
  Args(int argc, char** argv);
  // True when `name` is present (and consumes it).
  bool flag(std::string_view name);
  // "--name V" or "--name=V" (consumes it), else `fallback`.
  std::string value(std::string_view name, std::string_view fallback);
  [[nodiscard]] int int_value(std::string_view name, int fallback);
  [[nodiscard]] double double_value(std::string_view name, double fallback);
  // Exits 0 after printing `usage` on --help; exits 2 on anything not consumed.
  void finish(std::string_view usage);

 private:
  std::vector<std::string> args_;
  std::vector<bool> used_;
};

// "8,64,1024" -> {8, 64, 1024}; throws BenchError on junk.
[[nodiscard]] std::vector<std::size_t> parse_sizes(std::string_view list);

// The options every xproc program takes. --quick: quick_reps rounds (the
// program shortens its own runs when `quick`); --smoke: 1 round of tiny runs
// that check the data and assert nothing about speed (the program shrinks its
// runs when `smoke`); --reps N overrides both; --csv FILE; --check-targets.
struct RunOptions {
  int reps = 0;
  bool quick = false;
  bool smoke = false;
  std::string csv;
  bool check_targets = false;
};
[[nodiscard]] RunOptions parse_run_options(Args& args, int reps, int quick_reps);

// ---------------------------------------------------------------- programs

struct Report {
  std::string_view program;  // "xproc_fanout": the heading and error prefix
  const RunOptions& options;
  std::string setup;              // one line after the machine ("- consumers pinned to ...")
  std::optional<int> pin_cpu;     // pin this process before the runs (a note when refused)
  bool targets_table = false;     // end with print_targets over every comparison
  std::string_view smoke_ok;      // "every case checked its data" (printed after --smoke)
  std::function<void()> prepare;  // runs after the pin, before the first comparison
};

// Runs every comparison (built by its factory when its turn comes) with
// options.reps rounds and reports them; returns the program's exit status.
[[nodiscard]] int run_report(const Report& report, int argc, char** argv,
                             const std::vector<std::function<Comparison()>>& comparisons);

// The body of main(): run(argc, argv), or "<program>: <what>" on stderr and 1
// when it throws.
[[nodiscard]] int guarded_main(std::string_view program, int argc, char** argv,
                               int (*run)(int, char**));

}  // namespace shm::bench
