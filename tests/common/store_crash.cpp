#include "common/store_crash.hpp"

#include "shm/testing/store_crash.hpp"

#include <fmt/format.h>

#include <sys/wait.h>
#include <unistd.h>
#include <csignal>
#include <thread>

namespace shm::test {

namespace {

constexpr int kCompleted = 0;
constexpr int kWrongOutcome = 3;

// Waits for `pid` up to `timeout`; returns the wait status, or -1 after
// killing a child that overstayed.
int reap(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0) return -1;
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      (void)::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace

StoreCrashRun kill_at_every_store(const std::function<void()>& setup,
                                  const std::function<bool()>& op,
                                  const std::function<void(std::uint64_t n)>& after_kill,
                                  std::uint64_t max_stores,
                                  std::chrono::milliseconds child_timeout) {
  StoreCrashRun run;
  for (std::uint64_t n = 1; n <= max_stores + 1; ++n) {
    setup();
    const pid_t pid = ::fork();
    if (pid < 0) {
      run.error = "fork failed";
      return run;
    }
    if (pid == 0) {
      test_hooks::arm_store_crash(n);
      const bool ok = op();
      test_hooks::arm_store_crash(0);
      ::_exit(ok ? kCompleted : kWrongOutcome);
    }
    const int status = reap(pid, child_timeout);
    if (status == -1) {
      run.error = fmt::format("the child armed at store {} did not finish in {} ms", n,
                              child_timeout.count());
      return run;
    }
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
      ++run.kills;
      after_kill(n);
      continue;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == kCompleted) {
      run.stores = n - 1;
      return run;
    }
    run.error = WIFEXITED(status) ? fmt::format(
                                        "the child armed at store {} exited {} (3: the operation's "
                                        "outcome was not the expected one)",
                                        n, WEXITSTATUS(status))
                                  : fmt::format("the child armed at store {} died of signal {}", n,
                                                WTERMSIG(status));
    return run;
  }
  run.error = fmt::format("the operation made more than {} stores", max_stores);
  return run;
}

std::string position_name(std::string name, std::size_t position) {
  constexpr const char* kWhere[] = {"First", "Middle", "Last"};
  for (char& c : name)
    if (c == '-') c = '_';
  return name + "_" + (position < 3 ? kWhere[position] : "Other");
}

}  // namespace shm::test
