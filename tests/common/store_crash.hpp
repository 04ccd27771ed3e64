// Kills an operation at every store it makes to shared memory, in a real
// separate process each time (fork), for the crash tests of the structures
// whose shared fields go through a counting `st` (shm/testing/store_crash.hpp).
//
//   kill_at_every_store(setup, op, after_kill)
//
// For n = 1, 2, ...: setup() builds the state in the parent (a fresh segment);
// a forked child arms the countdown at n and runs op(), which opens its own
// handles and makes the change; the nth store raises SIGKILL. The parent then
// calls after_kill(n), which checks what the next locker repairs. The loop
// ends at the first n the child completes (n - 1 stores: the whole
// operation), so no store is left out and none is picked by hand.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace shm::test {

struct StoreCrashRun {
  std::uint64_t kills = 0;   // children killed at a store
  std::uint64_t stores = 0;  // stores the completed operation made
  std::string error;         // non-empty: the loop stopped on something unexpected
};

// op() runs in the child and returns true when the operation did what the
// test expected (false exits the child with 3, reported in `error`).
// `max_stores` bounds the loop; `child_timeout` bounds each child.
StoreCrashRun kill_at_every_store(
    const std::function<void()>& setup, const std::function<bool()>& op,
    const std::function<void(std::uint64_t n)>& after_kill, std::uint64_t max_stores = 4096,
    std::chrono::milliseconds child_timeout = std::chrono::seconds(30));

// The name of a test parameterised by (operation, position 0 | 1 | 2):
// "<name>_First", "_Middle" or "_Last" ('-' in the name becomes '_').
[[nodiscard]] std::string position_name(std::string name, std::size_t position);

}  // namespace shm::test
