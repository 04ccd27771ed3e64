// Cross-process wait/notify on a 32-bit word in a shared mapping. Uses the
// non-private futex operations: std::atomic::wait in libstdc++ uses private
// futexes and a process-local waiter table and never wakes another process.
#pragma once

#include <atomic>
#include <cstdint>
#include <string_view>

namespace shm {

enum class WaitResult : std::uint8_t { Woken, ValueChanged, TimedOut, Interrupted };
[[nodiscard]] std::string_view to_string(WaitResult v) noexcept;

// Sleeps while `word == expected`, at most `timeout_ns` (relative, monotonic).
// Spurious returns are possible; callers re-check their condition.
WaitResult futex_wait(const std::atomic<std::uint32_t>& word, std::uint32_t expected,
                      std::uint64_t timeout_ns) noexcept;
// Wakes up to `count` waiters in any process; returns how many were woken.
int futex_wake(const std::atomic<std::uint32_t>& word, int count = 1) noexcept;
inline int futex_wake_all(const std::atomic<std::uint32_t>& word) noexcept {
  return futex_wake(word, 1 << 30);
}

static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<std::uint32_t>) == 4, "futex needs a plain 32-bit word");

}  // namespace shm
