// The test harness's own promise: a helper process started through
// test::Subprocess does not outlive a test binary killed from outside.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "common/subprocess.hpp"

namespace {

using namespace std::chrono_literals;

// Dead: gone from /proc, or a zombie nobody has reaped yet.
bool process_is_dead(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const auto paren = line.rfind(')');
  return paren == std::string::npos || paren + 2 >= line.size() || line[paren + 2] == 'Z' ||
         line[paren + 2] == 'X';
}

TEST(SubprocessTest, ChildDiesWhenTheProcessThatStartedItIsKilled) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t middle = ::fork();
  ASSERT_GE(middle, 0);
  if (middle == 0) {
    ::close(fds[0]);
    shm::test::Subprocess sleeper({"/bin/sleep", "600"}, false);
    const pid_t pid = sleeper.pid();
    if (::write(fds[1], &pid, sizeof pid) != sizeof pid) ::_exit(1);
    for (;;) ::pause();  // killed below; the destructor never runs
  }
  ::close(fds[1]);
  pid_t grandchild = -1;
  ASSERT_EQ(::read(fds[0], &grandchild, sizeof grandchild),
            static_cast<ssize_t>(sizeof grandchild));
  ::close(fds[0]);
  ASSERT_GT(grandchild, 0);
  EXPECT_FALSE(process_is_dead(grandchild)) << "the sleeper runs while its parent lives";

  ASSERT_EQ(::kill(middle, SIGKILL), 0);
  ASSERT_EQ(::waitpid(middle, nullptr, 0), middle);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!process_is_dead(grandchild) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  const bool died = process_is_dead(grandchild);
  if (!died) ::kill(grandchild, SIGKILL);
  EXPECT_TRUE(died) << "pid " << grandchild << " outlived the process that started it";
}

}  // namespace
