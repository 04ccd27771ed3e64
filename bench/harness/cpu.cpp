// Benchmark harness: CPUs: which ones this process may use, pinning, choosing a pair.
#include "harness/harness.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include <sched.h>

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

}  // namespace shm::bench
