#include "platform/store_crash.hpp"

#include "shm/testing/store_crash.hpp"

#include <csignal>
#include <cstdlib>

namespace shm {

std::atomic<std::uint64_t> detail::store_crash_countdown{0};

void detail::store_crash_fire() noexcept {
  std::atomic_signal_fence(std::memory_order_seq_cst);
  std::raise(SIGKILL);
  std::abort();  // not reached: SIGKILL cannot be caught
}

void test_hooks::arm_store_crash(std::uint64_t n) noexcept {
  detail::store_crash_countdown.store(n, std::memory_order_relaxed);
}

std::uint64_t test_hooks::store_crash_remaining() noexcept {
  return detail::store_crash_countdown.load(std::memory_order_relaxed);
}

}  // namespace shm
