#include "shm/platform/futex.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <ctime>

namespace shm {
namespace {
// The word lives in a MAP_SHARED file mapping; FUTEX_WAIT without
// FUTEX_PRIVATE_FLAG keys the wait on the inode + offset, so any process that
// maps the file meets the same futex.
long futex_call(const std::atomic<std::uint32_t>& word, int op, std::uint32_t val,
                const timespec* timeout) noexcept {
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-const-cast): the kernel only reads *uaddr for WAIT
  auto* addr = const_cast<std::atomic<std::uint32_t>*>(&word);
  return ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(addr), op, val, timeout, nullptr, 0);
}
}  // namespace

WaitResult futex_wait(const std::atomic<std::uint32_t>& word, std::uint32_t expected,
                      std::uint64_t timeout_ns) noexcept {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout_ns / 1'000'000'000ull);
  ts.tv_nsec = static_cast<long>(timeout_ns % 1'000'000'000ull);
  if (futex_call(word, FUTEX_WAIT, expected, &ts) == 0) return WaitResult::Woken;
  switch (errno) {
    case EAGAIN:
      return WaitResult::ValueChanged;
    case ETIMEDOUT:
      return WaitResult::TimedOut;
    default:
      return WaitResult::Interrupted;
  }
}

WaitResult futex_wait_any(const FutexWaitEntry* entries, std::size_t count,
                          std::uint64_t timeout_ns) noexcept {
  if (count == 0 || count > kFutexWaitMany) return WaitResult::Interrupted;
  std::array<futex_waitv, kFutexWaitMany> v{};
  for (std::size_t i = 0; i < count; ++i) {
    v[i].val = entries[i].expected;
    v[i].uaddr = reinterpret_cast<std::uintptr_t>(entries[i].word);
    // Shared (no FUTEX_PRIVATE_FLAG): a word in a MAP_SHARED file mapping is
    // keyed on inode + offset, so the waker's FUTEX_WAKE in another process
    // meets it; a word in private memory is keyed on this process alone.
    v[i].flags = FUTEX_32;
  }
  // futex_waitv takes an absolute deadline on the clock it is given.
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  const std::uint64_t cap = 3600ull * 1'000'000'000ull * 24 * 365;  // a year: "forever"
  const std::uint64_t ns = std::min(timeout_ns, cap) + static_cast<std::uint64_t>(now.tv_nsec);
  timespec abs{};
  abs.tv_sec = now.tv_sec + static_cast<time_t>(ns / 1'000'000'000ull);
  abs.tv_nsec = static_cast<long>(ns % 1'000'000'000ull);
  const long r =
      ::syscall(SYS_futex_waitv, v.data(), static_cast<unsigned>(count), 0u, &abs, CLOCK_MONOTONIC);
  if (r >= 0) return WaitResult::Woken;
  switch (errno) {
    case EAGAIN:
    case EFAULT:  // a word's page is gone: the caller re-checks what it watches
      return WaitResult::ValueChanged;
    case ETIMEDOUT:
      return WaitResult::TimedOut;
    default:
      return WaitResult::Interrupted;
  }
}

bool futex_wait_any_supported() noexcept {
  // No entries: a kernel with the call refuses the count (EINVAL); one
  // without it (or a filter) says ENOSYS / EPERM.
  static const bool supported = [] {
    const long r = ::syscall(SYS_futex_waitv, nullptr, 0u, 0u, nullptr, CLOCK_MONOTONIC);
    return r < 0 && errno == EINVAL;
  }();
  return supported;
}

int futex_wake(const std::atomic<std::uint32_t>& word, int count) noexcept {
  const long n = futex_call(word, FUTEX_WAKE, static_cast<std::uint32_t>(count), nullptr);
  return n < 0 ? 0 : static_cast<int>(n);
}

}  // namespace shm
