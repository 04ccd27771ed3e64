#include "shm/platform/clock.hpp"

#include <ctime>

namespace shm {
namespace {
std::uint64_t read_clock(clockid_t id) noexcept {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}
}  // namespace

std::uint64_t monotonic_ns() noexcept {
  return read_clock(CLOCK_MONOTONIC);
}
std::uint64_t coarse_monotonic_ns() noexcept {
  return read_clock(CLOCK_MONOTONIC_COARSE);
}
std::uint64_t realtime_ns() noexcept {
  return read_clock(CLOCK_REALTIME);
}

}  // namespace shm
