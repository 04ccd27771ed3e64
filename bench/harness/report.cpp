// Benchmark harness: what every xproc program shares around its comparisons
// (the common options, the report, main()).
#include "harness/harness.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <exception>

namespace shm::bench {

RunOptions parse_run_options(Args& args, int reps, int quick_reps) {
  RunOptions o;
  o.reps = reps;
  o.quick = args.flag("--quick");
  if (o.quick) o.reps = quick_reps;
  o.smoke = args.flag("--smoke");
  if (o.smoke) o.reps = 1;
  o.reps = args.int_value("--reps", o.reps);
  if (o.reps < 1) throw BenchError("--reps must be at least 1");
  o.csv = args.value("--csv", "");
  o.check_targets = args.flag("--check-targets");
  return o;
}

int run_report(const Report& report, int argc, char** argv,
               const std::vector<std::function<Comparison()>>& comparisons) {
  const RunOptions& o = report.options;
  const MachineInfo machine = machine_info();
  std::FILE* csv = nullptr;
  if (!o.csv.empty()) {
    csv = std::fopen(o.csv.c_str(), "w");
    if (csv == nullptr) throw BenchError(fmt::format("{}: {}", o.csv, std::strerror(errno)));
  }
  fmt::print("## {}{}\n\n", report.program,
             o.smoke ? " (smoke: correctness only, timings meaningless)" : "");
  print_machine(stdout, machine, argc, argv);
  fmt::print("{}\n", report.setup);
  std::fflush(stdout);
  if (report.pin_cpu && !pin_to_cpu(*report.pin_cpu))
    fmt::print("- (could not pin this process)\n");
  if (report.prepare) report.prepare();
  std::vector<ComparisonResult> results;
  for (const auto& make : comparisons) {
    results.push_back(make().run(o.reps));
    print_markdown(stdout, results.back());
    std::fflush(stdout);
    if (csv != nullptr) append_csv(csv, results.back());
  }
  if (report.targets_table) {
    fmt::print("\n");
    print_targets(stdout, results);
  }
  if (csv != nullptr) std::fclose(csv);
  fmt::print("\n- load average at end: {}\n", machine_info().load_average);
  if (o.smoke) {
    fmt::print("\nsmoke: {}\n", report.smoke_ok);
    return 0;
  }
  bool met = true;
  for (const auto& r : results) met = met && r.all_targets_met();
  return o.check_targets && !met ? 3 : 0;
}

int guarded_main(std::string_view program, int argc, char** argv, int (*run)(int, char**)) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%.*s: %s\n", static_cast<int>(program.size()), program.data(), e.what());
    return 1;
  }
}

}  // namespace shm::bench
