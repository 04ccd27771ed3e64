#include "common/subprocess.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace shm::test {

Subprocess::Subprocess(std::vector<std::string> argv, bool capture) {
  int fds[2] = {-1, -1};
  if (capture && ::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    // A test binary killed from outside (a ctest timeout, a hand's pkill)
    // never runs the destructor that kills this child: without this a
    // nats-server or shm-bridge outlives it and holds its ports and
    // segments for the tests after it. The signal follows the forking
    // thread, so a Subprocess must be made by a thread that outlives it
    // (every test makes its own on the test's thread). The getppid check
    // covers a parent that died before the prctl.
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(126);
    if (capture) {
      ::dup2(fds[1], STDOUT_FILENO);
    }
    ::execv(args[0], args.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  if (capture) {
    ::close(fds[1]);
    out_fd_ = fds[0];
  }
}

Subprocess::Subprocess(Subprocess&& o) noexcept
    : pid_(o.pid_),
      out_fd_(o.out_fd_),
      reaped_(o.reaped_),
      status_(o.status_),
      out_(std::move(o.out_)) {
  o.pid_ = -1;
  o.out_fd_ = -1;
  o.reaped_ = true;
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !reaped_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (out_fd_ >= 0) ::close(out_fd_);
}

void Subprocess::drain(std::chrono::milliseconds timeout) {
  if (out_fd_ < 0) return;
  pollfd p{out_fd_, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return;
  char buf[4096];
  const ssize_t n = ::read(out_fd_, buf, sizeof buf);
  if (n > 0) {
    out_.append(buf, static_cast<std::size_t>(n));
  } else if (n == 0) {
    ::close(out_fd_);
    out_fd_ = -1;
  }
}

bool Subprocess::wait_for_line(const std::string& line, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::size_t start = 0;
    while (start < out_.size()) {
      const std::size_t end = out_.find('\n', start);
      if (end == std::string::npos) break;
      if (out_.compare(start, end - start, line) == 0) return true;
      start = end + 1;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline || out_fd_ < 0) return false;
    drain(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now) +
          std::chrono::milliseconds(1));
  }
}

bool Subprocess::wait_for_text(const std::string& text, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (out_.find(text) != std::string::npos) return true;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline || out_fd_ < 0) return false;
    drain(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now) +
          std::chrono::milliseconds(1));
  }
}

int Subprocess::wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!reaped_) {
    const pid_t r = ::waitpid(pid_, &status_, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(SIGKILL);
      ::waitpid(pid_, &status_, 0);
      reaped_ = true;
      while (out_fd_ >= 0) drain(std::chrono::milliseconds(100));
      return -1;
    }
    if (out_fd_ >= 0)
      drain(std::chrono::milliseconds(5));
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  while (out_fd_ >= 0) drain(std::chrono::milliseconds(1000));
  if (WIFEXITED(status_)) return WEXITSTATUS(status_);
  if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
  return -2;
}

const std::string& Subprocess::output() {
  for (std::size_t before = out_.size() + 1; out_fd_ >= 0 && out_.size() != before;) {
    before = out_.size();
    drain(std::chrono::milliseconds(0));
  }
  return out_;
}

void Subprocess::kill(int sig) {
  if (pid_ > 0 && !reaped_) ::kill(pid_, sig);
}

std::string helper_path(const std::string& name) {
  return std::string(SHM_HELPER_DIR) + "/test_" + name;
}
std::string bin_path(const std::string& name) {
  return std::string(SHM_BIN_DIR) + "/" + name;
}

}  // namespace shm::test
