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
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
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
  ASSERT_GE(child, 0) << "fork: " << std::strerror(errno);
  if (child == 0) ::_exit(0);
  const std::uint64_t start = process_start_time(child);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  ASSERT_GT(start, 0u) << "read while the child existed (a zombie at worst)";
  EXPECT_FALSE(process_alive(ProcessId{child, start}));
}

TEST(Process, CmdlineOfAnExitingOrGoneProcessIsEmptyNeverAnException) {
  EXPECT_NE(process_cmdline(::getpid()).find("shm_unit_tests"), std::string::npos);
  // Read while the child exits (the read may fail with ESRCH), as a zombie, and once reaped.
  for (int i = 0; i < 100; ++i) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0) << "fork: " << std::strerror(errno);
    if (child == 0) ::_exit(0);
    EXPECT_NO_THROW((void)process_cmdline(child));
    siginfo_t info{};
    ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);  // a zombie
    EXPECT_NO_THROW((void)process_cmdline(child));
    ASSERT_EQ(::waitpid(child, nullptr, 0), child);
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

// Polls `done` every millisecond until it holds or `deadline` passes.
template <class Done>
bool poll_until(Done done, std::chrono::seconds deadline) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

TEST(Futex, WakeReachesWaiterInAnotherProcessThroughSharedFileMapping) {
  char path[] = "/dev/shm/libshm-futex-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  FileHandle file(fd);
  ::unlink(path);
  ASSERT_EQ(::ftruncate(fd, 4096), 0);
  auto map = Mapping::map(fd, 4096, true, path);
  ASSERT_TRUE(map);
  // The futex word, the child's "about to wait" flag and how its wait ended.
  auto* word = new (map->data()) std::atomic<std::uint32_t>(0);
  auto* ready = new (map->data() + 64) std::atomic<std::uint32_t>(0);
  constexpr std::uint32_t kNotReturned = 0xff;
  auto* outcome = new (map->data() + 128) std::atomic<std::uint32_t>(kNotReturned);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0) << "fork: " << std::strerror(errno);
  if (child == 0) {
    // Waits in another process (own address space, same file page), far
    // longer than the parent's deadline: only a wake can end this wait. The
    // word never changes, so the wait cannot end as ValueChanged either.
    ready->store(1);
    WaitResult r = WaitResult::Interrupted;
    while (r == WaitResult::Interrupted) r = futex_wait(*word, 0, 600'000'000'000ull);
    outcome->store(static_cast<std::uint32_t>(r));
    ::_exit(0);
  }
  struct Reaper {  // kills and reaps the child on every way out of the test
    pid_t pid;
    ~Reaper() {
      if (pid > 0) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
    }
  } reaper{child};
  ASSERT_TRUE(poll_until([&] { return ready->load() != 0; }, 30s)) << "the child never started";
  // Wake until the kernel reports a waiter woken: the child may not be parked
  // yet (then the wake finds nobody and is repeated). A wake that cannot reach
  // another process (private, or none) never finds it.
  int woken = 0;
  ASSERT_TRUE(poll_until([&] { return (woken = futex_wake_all(*word)) > 0; }, 30s))
      << "no wake through the shared mapping ever reached the waiter in the child";
  EXPECT_EQ(woken, 1);
  ASSERT_TRUE(poll_until([&] { return outcome->load() != kNotReturned; }, 30s))
      << "the child's wait never returned";
  EXPECT_EQ(outcome->load(), static_cast<std::uint32_t>(WaitResult::Woken))
      << "0 Woken, 1 ValueChanged, 2 TimedOut, 3 Interrupted";
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  reaper.pid = -1;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
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
// installed there, never in the test process) and stores its wait status.
// A fork or wait that fails is a fatal failure (ASSERT_NO_FATAL_FAILURE).
template <class Body>
void in_child(Body body, int& status) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0) << "fork: " << std::strerror(errno);
  if (child == 0) ::_exit(body());
  ASSERT_EQ(::waitpid(child, &status, 0), child);
}

// The child's exit codes for a failed setup, before what the test checks.
constexpr int kNoShrunkMapping = 10;
constexpr int kInstallFailed = 11;

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
  int status = -1;
  ASSERT_NO_FATAL_FAILURE(in_child(
      [] {
        auto m = shrunk_mapping();
        if (!m) return kNoShrunkMapping;
        // install() is idempotent.
        if (!TruncationGuard::install() || !TruncationGuard::install()) return kInstallFailed;
        const auto* bytes = reinterpret_cast<const volatile unsigned char*>(m->map.data());
        TruncationGuard::Scope scope(m->map.data(), m->map.size());
        if (bytes[0] != 0xab || scope.hit()) return 12;              // the page the file still has
        if (bytes[2 * m->page + 5] != 0 || !scope.hit()) return 13;  // a lost page
        if (bytes[m->page] != 0) return 14;  // another lost page: handled again
        return 0;
      },
      status));
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(TruncationGuard, ADefaultScopeGuardsEveryFileMappingAndHidesTheOuterScope) {
  int status = -1;
  ASSERT_NO_FATAL_FAILURE(in_child(
      [] {
        auto m = shrunk_mapping();
        if (!m) return kNoShrunkMapping;
        if (!TruncationGuard::install()) return kInstallFailed;
        const auto* bytes = reinterpret_cast<const volatile unsigned char*>(m->map.data());
        TruncationGuard::Scope outer;
        {
          TruncationGuard::Scope inner;
          if (bytes[2 * m->page] != 0 || !inner.hit()) return 12;
        }
        if (outer.hit()) return 13;  // the inner scope took the hit
        if (bytes[m->page] != 0 || !outer.hit()) return 14;
        return 0;
      },
      status));
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(TruncationGuard, AFaultOutsideTheGuardedRangeStillKills) {
  int status = -1;
  ASSERT_NO_FATAL_FAILURE(in_child(
      [] {
        auto m = shrunk_mapping();
        if (!m) return kNoShrunkMapping;
        if (!TruncationGuard::install()) return kInstallFailed;
        static const char elsewhere[64] = {};
        const auto* bytes = reinterpret_cast<const volatile unsigned char*>(m->map.data());
        TruncationGuard::Scope scope(elsewhere, sizeof elsewhere);
        (void)bytes[2 * m->page];  // not guarded: must not be survived
        return 0;
      },
      status));
  // Killed by SIGBUS, or (under a sanitizer that reports SIGBUS) a failing
  // exit; but not a failed setup, which would pass for one.
  ASSERT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == kNoShrunkMapping)
      << "setup failed in the child: no truncated mapping";
  ASSERT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == kInstallFailed)
      << "setup failed in the child: TruncationGuard::install()";
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "an unguarded SIGBUS was swallowed";
  if (WIFSIGNALED(status)) {
    EXPECT_EQ(WTERMSIG(status), SIGBUS);
  }
}

}  // namespace
}  // namespace shm
