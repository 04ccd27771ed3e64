// Benchmark harness: Clocks: the monotonic ns clock, the TSC tick clock and the cost of reading it.
#include "harness/harness.hpp"

#include <fmt/format.h>

#include <fstream>

namespace shm::bench {

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

}  // namespace shm::bench
