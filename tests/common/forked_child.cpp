#include "common/forked_child.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

namespace shm::test {

int run_in_child(const std::function<int()>& body, std::chrono::milliseconds limit) {
  const pid_t child = ::fork();
  if (child < 0) return -2;
  if (child == 0) ::_exit(body());
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (::waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(child, SIGKILL);
      (void)::waitpid(child, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

pid_t gone_tid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  (void)::waitpid(child, &status, 0);
  return child;
}

}  // namespace shm::test
