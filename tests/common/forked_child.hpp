// A function run in a forked child of the test process, bounded in time, and
// the id of a thread that no longer exists.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>

namespace shm::test {

// Runs `body` in a forked child; its return value is the child's exit status
// (128 + the signal when a signal ended it). -1 when the child still runs
// after `limit`: it is killed, so a hang fails the test instead of blocking
// it; -2 when fork failed.
[[nodiscard]] int run_in_child(const std::function<int()>& body,
                               std::chrono::milliseconds limit = std::chrono::seconds(20));

// The id of a thread that existed and is gone: a child that exited and was
// reaped (ids are reused only after the pid space wraps).
[[nodiscard]] pid_t gone_tid();

// A live process that maps none of the memory given to it: a forked child
// that unmaps [unmap, unmap + length) (when given) and waits until the object
// ends, which kills and reaps it. A lock word naming its id names a live
// thread that cannot hold a mutex in that memory.
class Bystander {
 public:
  explicit Bystander(void* unmap = nullptr, std::size_t length = 0);
  Bystander(const Bystander&) = delete;
  Bystander& operator=(const Bystander&) = delete;
  ~Bystander();
  [[nodiscard]] pid_t pid() const noexcept { return pid_; }

 private:
  pid_t pid_ = -1;
};

// The id of a kernel thread visible here (kthreadd, id 2, as /proc/2/comm
// names it), 0 when there is none (a pid namespace of its own).
[[nodiscard]] pid_t kernel_thread_tid();

}  // namespace shm::test
