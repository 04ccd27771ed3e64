// A function run in a forked child of the test process, bounded in time, and
// the id of a thread that no longer exists.
#pragma once

#include <sys/types.h>

#include <chrono>
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

}  // namespace shm::test
