/// @file
/// Cross-process wait/notify on a 32-bit word in a shared mapping. Uses the
/// non-private futex operations: std::atomic::wait in libstdc++ uses private
/// futexes and a process-local waiter table and never wakes another process.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace shm {

/// How futex_wait() returned. None of them proves the awaited condition holds.
enum class WaitResult : std::uint8_t {
  Woken,         ///< a wake (or a spurious return) ended the sleep
  ValueChanged,  ///< the word no longer held `expected`: no sleep at all (EAGAIN)
  TimedOut,      ///< the timeout passed
  Interrupted    ///< a signal, or any other error of the call
};
/// The enumerator's name, for logs and tool output.
[[nodiscard]] std::string_view to_string(WaitResult v) noexcept;

/// Sleeps while `word == expected`, at most `timeout_ns` (relative, monotonic).
/// Spurious returns are possible; callers re-check their condition.
WaitResult futex_wait(const std::atomic<std::uint32_t>& word, std::uint32_t expected,
                      std::uint64_t timeout_ns) noexcept;
/// Wakes up to `count` waiters in any process; returns how many were woken.
int futex_wake(const std::atomic<std::uint32_t>& word, int count = 1) noexcept;
/// One word of futex_wait_any(): sleep while `*word == expected`.
struct FutexWaitEntry {
  const std::atomic<std::uint32_t>* word;  ///< in a shared mapping or in process memory
  std::uint32_t expected;                  ///< the value read before the caller's re-check
};
/// The most words one futex_wait_any() call takes (the kernel's FUTEX_WAITV_MAX).
inline constexpr std::size_t kFutexWaitMany = 128;
/// Sleeps until any entry's word is woken or differs from its `expected`, at
/// most `timeout_ns` (relative, monotonic): the futex_waitv system call
/// (Linux 5.16 and newer). ValueChanged when a word already differed (or a
/// word's page was not mapped), Interrupted on a signal or any other error
/// (ENOSYS on an older kernel: check futex_wait_any_supported() first).
/// At most kFutexWaitMany entries. Spurious returns are possible.
WaitResult futex_wait_any(const FutexWaitEntry* entries, std::size_t count,
                          std::uint64_t timeout_ns) noexcept;
/// Whether this kernel has futex_waitv (asked once per process; a seccomp
/// filter that refuses it counts as absent).
[[nodiscard]] bool futex_wait_any_supported() noexcept;
/// Wakes every waiter on `word` in any process; returns how many were woken.
inline int futex_wake_all(const std::atomic<std::uint32_t>& word) noexcept {
  return futex_wake(word, 1 << 30);
}

static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<std::uint32_t>) == 4, "futex needs a plain 32-bit word");

}  // namespace shm
