#include "shm/platform/clock.hpp"
#include "shm/platform/file.hpp"
#include "shm/platform/futex.hpp"
#include "shm/platform/process.hpp"
#include "shm/platform/truncation_guard.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <csignal>
#include <optional>
#include <thread>
#include <vector>

namespace shm {
namespace {

using namespace std::chrono_literals;

TEST(Process, SelfIdentityHasStartTimeAndIsAlive) {
  const ProcessId self = self_process();
  EXPECT_EQ(self.pid, ::getpid());
  EXPECT_GT(self.start_time, 0u);
  EXPECT_TRUE(process_alive(self));
}

TEST(Process, ReusedPidWithOtherStartTimeIsNotAlive) {
  ProcessId self = self_process();
  self.start_time += 1;
  EXPECT_FALSE(process_alive(self));
  EXPECT_FALSE(process_alive(ProcessId{0, 0}));
}

TEST(Process, ExitedChildIsNotAlive) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  const std::uint64_t start = process_start_time(child);
  ::waitpid(child, nullptr, 0);
  EXPECT_FALSE(process_alive(ProcessId{child, start}));
}

TEST(Process, CmdlineOfAnExitingOrGoneProcessIsEmptyNeverAnException) {
  EXPECT_NE(process_cmdline(::getpid()).find("shm_unit_tests"), std::string::npos);
  // Read while the child exits (the read may fail with ESRCH), as a zombie, and once reaped.
  for (int i = 0; i < 100; ++i) {
    const pid_t child = ::fork();
    if (child == 0) ::_exit(0);
    EXPECT_NO_THROW((void)process_cmdline(child));
    siginfo_t info{};
    ::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT);  // a zombie now
    EXPECT_NO_THROW((void)process_cmdline(child));
    ::waitpid(child, nullptr, 0);
    EXPECT_EQ(process_cmdline(child), "");
  }
}

TEST(Clock, MonotonicNeverGoesBack) {
  const auto a = monotonic_ns();
  const auto b = monotonic_ns();
  EXPECT_LE(a, b);
  EXPECT_GT(realtime_ns(), 1'600'000'000ull * 1'000'000'000ull);
}

TEST(Futex, WaitReturnsAtOnceWhenValueDiffers) {
  std::atomic<std::uint32_t> word{5};
  EXPECT_EQ(futex_wait(word, 4, 1'000'000'000ull), WaitResult::ValueChanged);
}

TEST(Futex, WaitTimesOutWhenNobodyWakes) {
  std::atomic<std::uint32_t> word{0};
  EXPECT_EQ(futex_wait(word, 0, 20'000'000ull), WaitResult::TimedOut);
}

TEST(Futex, WakeReachesWaiterInAnotherProcessThroughSharedFileMapping) {
  char path[] = "/dev/shm/libshm-futex-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 4096), 0);
  auto map = Mapping::map(fd, 4096, true, path);
  ASSERT_TRUE(map);
  ::unlink(path);
  auto* word = new (map->data()) std::atomic<std::uint32_t>(0);
  const pid_t child = ::fork();
  if (child == 0) {
    // Waits in another process (own address space, same file page).
    while (word->load() == 0) (void)futex_wait(*word, 0, 5'000'000'000ull);
    ::_exit(word->load() == 7 ? 0 : 1);
  }
  std::this_thread::sleep_for(50ms);
  word->store(7);
  // The child may not be parked yet; keep waking until it exits.
  int status = 0;
  for (int i = 0; i < 500 && ::waitpid(child, &status, WNOHANG) == 0; ++i) {
    (void)futex_wake_all(*word);
    std::this_thread::sleep_for(10ms);
  }
  if (::waitpid(child, &status, WNOHANG) == 0) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
    FAIL() << "waiter in the child process was never woken";
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ::close(fd);
}

TEST(OfdLock, SecondDescriptionCannotTakeHeldByteAndSeesItHeld) {
  char path[] = "/dev/shm/libshm-lock-XXXXXX";
  const int fd1 = ::mkstemp(path);
  ASSERT_GE(fd1, 0);
  FileHandle a(fd1);
  auto b = reopen(a.get(), true);
  ASSERT_TRUE(b);
  ::unlink(path);
  ASSERT_TRUE(*try_lock_byte(a.get(), 10));
  EXPECT_FALSE(*try_lock_byte(b->get(), 10));
  EXPECT_EQ(*probe_byte(b->get(), 10), LockProbe::Held);
  EXPECT_EQ(*probe_byte(b->get(), 11), LockProbe::Free);
  a = FileHandle();  // closing the description drops its locks
  EXPECT_EQ(*probe_byte(b->get(), 10), LockProbe::Free);
  EXPECT_TRUE(*try_lock_byte(b->get(), 10));
}

// Runs `body` in a forked child (the SIGBUS handler is process-wide: it is
// installed there, never in the test process) and returns its wait status.
template <class Body>
int in_child(Body body) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(body());
  int status = 0;
  ::waitpid(child, &status, 0);
  return status;
}

// A 3-page file mapped read-only, then truncated to 1 page under the mapping.
struct ShrunkMapping {
  FileHandle fd;
  Mapping map;
  long page = ::sysconf(_SC_PAGESIZE);
};
std::optional<ShrunkMapping> shrunk_mapping() {
  char path[] = "/dev/shm/libshm-trunc-XXXXXX";
  const int raw = ::mkstemp(path);
  if (raw < 0) return std::nullopt;
  ShrunkMapping m{FileHandle(raw), Mapping{}};
  ::unlink(path);
  const auto size = static_cast<std::size_t>(3 * m.page);
  if (::ftruncate(raw, static_cast<off_t>(size)) != 0) return std::nullopt;
  std::vector<char> fill(size, '\xab');
  if (::pwrite(raw, fill.data(), size, 0) != static_cast<ssize_t>(size)) return std::nullopt;
  auto map = Mapping::map(raw, size, false, path);
  if (!map) return std::nullopt;
  m.map = std::move(*map);
  if (::ftruncate(raw, m.page) != 0) return std::nullopt;
  return m;
}

TEST(TruncationGuard, GuardedReadPastTheNewEndReadsZerosAndReportsTheHit) {
  const int status = in_child([] {
    auto m = shrunk_mapping();
    if (!m) return 10;
    if (!TruncationGuard::install() || !TruncationGuard::install()) return 11;  // idempotent
    const auto* bytes = reinterpret_cast<const volatile unsigned char*>(m->map.data());
    TruncationGuard::Scope scope(m->map.data(), m->map.size());
    if (bytes[0] != 0xab || scope.hit()) return 12;              // the page the file still has
    if (bytes[2 * m->page + 5] != 0 || !scope.hit()) return 13;  // a lost page
    if (bytes[m->page] != 0) return 14;                          // another lost page: handled again
    return 0;
  });
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(TruncationGuard, ADefaultScopeGuardsEveryFileMappingAndHidesTheOuterScope) {
  const int status = in_child([] {
    auto m = shrunk_mapping();
    if (!m) return 10;
    if (!TruncationGuard::install()) return 11;
    const auto* bytes = reinterpret_cast<const volatile unsigned char*>(m->map.data());
    TruncationGuard::Scope outer;
    {
      TruncationGuard::Scope inner;
      if (bytes[2 * m->page] != 0 || !inner.hit()) return 12;
    }
    if (outer.hit()) return 13;  // the inner scope took the hit
    if (bytes[m->page] != 0 || !outer.hit()) return 14;
    return 0;
  });
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(TruncationGuard, AFaultOutsideTheGuardedRangeStillKills) {
  const int status = in_child([] {
    auto m = shrunk_mapping();
    if (!m) return 10;
    if (!TruncationGuard::install()) return 11;
    static const char elsewhere[64] = {};
    const auto* bytes = reinterpret_cast<const volatile unsigned char*>(m->map.data());
    TruncationGuard::Scope scope(elsewhere, sizeof elsewhere);
    (void)bytes[2 * m->page];  // not guarded: must not be survived
    return 0;
  });
  // Killed by SIGBUS, or (under a sanitizer that reports SIGBUS) a failing exit.
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "an unguarded SIGBUS was swallowed";
  if (WIFSIGNALED(status)) {
    EXPECT_EQ(WTERMSIG(status), SIGBUS);
  }
}

}  // namespace
}  // namespace shm
