// Runs helper executables as real separate processes (fork + exec) with a
// deadline, so a hang fails the test instead of blocking CI.
#pragma once

#include <sys/types.h>
#include <chrono>
#include <csignal>
#include <string>
#include <vector>

namespace shm::test {

class Subprocess {
 public:
  // Starts `argv[0]` (a path) with the given arguments; stdout is captured
  // through a pipe when `capture` is set.
  explicit Subprocess(std::vector<std::string> argv, bool capture = true);
  Subprocess(Subprocess&& other) noexcept;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  // Kills (SIGKILL) and reaps a child still running. A child also dies with
  // the thread that made it (PR_SET_PDEATHSIG), so one made by a test binary
  // killed from outside does not outlive it.
  ~Subprocess();

  [[nodiscard]] pid_t pid() const { return pid_; }
  // Reads stdout until a line equal to `line` appears or the timeout passes.
  [[nodiscard]] bool wait_for_line(const std::string& line, std::chrono::milliseconds timeout);
  // Reads stdout until `text` appears anywhere in it or the timeout passes.
  [[nodiscard]] bool wait_for_text(const std::string& text, std::chrono::milliseconds timeout);
  // Waits for exit; returns the exit code, 128+signal when killed, -1 on timeout
  // (the child is then killed).
  int wait(std::chrono::milliseconds timeout);
  void kill(int sig = SIGKILL);
  // Everything the child has written to stdout so far (after wait(): all of
  // it): what is waiting in the pipe is read first, so a failure message
  // shows the child's latest lines, not only those an earlier wait read.
  [[nodiscard]] const std::string& output();

 private:
  void drain(std::chrono::milliseconds timeout);
  pid_t pid_ = -1;
  int out_fd_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  std::string out_;
};

[[nodiscard]] std::string helper_path(const std::string& name);  // SHM_HELPER_DIR/test_<name>
[[nodiscard]] std::string bin_path(const std::string& name);     // SHM_BIN_DIR/<name>

}  // namespace shm::test
