#include "shm/platform/futex.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cerrno>
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

int futex_wake(const std::atomic<std::uint32_t>& word, int count) noexcept {
  const long n = futex_call(word, FUTEX_WAKE, static_cast<std::uint32_t>(count), nullptr);
  return n < 0 ? 0 : static_cast<int>(n);
}

}  // namespace shm
