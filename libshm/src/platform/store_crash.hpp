// The store countdown behind shm/testing/store_crash.hpp (test-only kills at
// every store of a multi-step shared-memory update).
#pragma once

#include <atomic>
#include <cstdint>

namespace shm::detail {

// Stores left before a SIGKILL; 0 when disarmed. Defined in store_crash.cpp.
extern std::atomic<std::uint64_t> store_crash_countdown;
[[noreturn]] void store_crash_fire() noexcept;

// Called before each store of a multi-step update (see the test header).
[[gnu::always_inline]] inline void store_crash_tick() noexcept {
  // relaxed: armed by the thread that runs the operation, before it starts.
  const std::uint64_t left = store_crash_countdown.load(std::memory_order_relaxed);
  if (left != 0) [[unlikely]] {
    if (left == 1) store_crash_fire();
    store_crash_countdown.store(left - 1, std::memory_order_relaxed);
    // A SIGKILL lands between instructions: keep the compiler from moving the
    // store that follows across this tick.
    std::atomic_signal_fence(std::memory_order_seq_cst);
  }
}

}  // namespace shm::detail
