#include "common/forked_child.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
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

Bystander::Bystander(void* unmap, std::size_t length) {
  int ready[2];
  if (::pipe(ready) != 0) return;
  pid_ = ::fork();
  if (pid_ == 0) {
    if (unmap != nullptr) ::munmap(unmap, length);
    ::close(ready[0]);
    ::close(ready[1]);  // the parent's read ends: the child no longer maps it
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char c = 0;
  (void)!::read(ready[0], &c, 1);  // EOF once the child has unmapped
  ::close(ready[0]);
}

Bystander::~Bystander() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  (void)::waitpid(pid_, &status, 0);
}

pid_t kernel_thread_tid() {
  std::FILE* f = std::fopen("/proc/2/comm", "re");
  if (f == nullptr) return 0;
  char comm[32] = {};
  const bool kthreadd =
      std::fgets(comm, sizeof comm, f) != nullptr && std::strcmp(comm, "kthreadd\n") == 0;
  std::fclose(f);
  return kthreadd ? 2 : 0;
}

}  // namespace shm::test
