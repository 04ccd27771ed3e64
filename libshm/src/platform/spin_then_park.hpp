// The blocking calls' wait: spin a little, then park on a futex word. Every
// structure (SPSC ring, channel, MPMC ring, priority fanout) waits this way;
// what differs is passed in: the spin budget, how a waiter announces itself
// and re-checks (the Dekker pairing with the waker), and how long one sleep
// may last. Private to the library.
#pragma once

#include "shm/platform/cpu_relax.hpp"
#include "shm/platform/futex.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <utility>

namespace shm::detail {

// Spin phase: up to `spins` calls of attempt(), with cpu_relax() between them.
// Returns the first result for which done(result) holds, or nullopt when the
// budget is spent.
template <class Attempt, class Done>
[[nodiscard]] auto spin(int spins, Attempt&& attempt, Done&& done)
    -> std::optional<decltype(attempt())> {
  for (int i = 0; i < spins; ++i) {
    auto r = attempt();
    if (done(r)) return r;
    cpu_relax();
  }
  return std::nullopt;
}

// What one round of the park phase found after announcing the waiter.
enum class ParkRound : std::uint8_t {
  Done,   // the wait is over (the caller holds its result)
  Retry,  // look again at once, without sleeping or checking the deadline
  Sleep,  // nothing yet: sleep on the word (if the deadline allows)
};

// Park phase. Each round reads the futex word, then round() announces the
// waiter and re-checks the condition. On Sleep it sleeps on the word for
// sleep_ns(ns left before the deadline) at most, after heartbeat(). Returns
// true when a round said Done, false when the deadline passed (the caller
// withdraws its announcement in both cases, as its protocol wants).
template <class Round, class SleepNs, class Heartbeat>
[[nodiscard]] bool park(const std::atomic<std::uint32_t>& word,
                        std::chrono::steady_clock::time_point deadline, Round&& round,
                        SleepNs&& sleep_ns, Heartbeat&& heartbeat) {
  for (;;) {
    // Read the futex word before announcing ourselves: a wake after this load
    // changes it, and futex_wait then returns at once. acquire: pairs with the
    // waker's release increment of the word.
    const std::uint32_t seen = word.load(std::memory_order_acquire);
    switch (round()) {
      case ParkRound::Done:
        return true;
      case ParkRound::Retry:
        continue;
      case ParkRound::Sleep:
        break;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    const auto left = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now).count());
    const std::uint64_t ns = sleep_ns(left);
    heartbeat();
    (void)futex_wait(word, seen, ns);
  }
}

// Sleep bound for a waiter that polls while the other side is mid-operation
// (MPMC ring, priority fanout): while busy, the sleeps grow from first_ns and
// double up to max_busy_ns; no sleep is longer than max_park_ns.
class BusyBackoff {
 public:
  constexpr BusyBackoff(std::uint64_t first_ns, std::uint64_t max_busy_ns,
                        std::uint64_t max_park_ns) noexcept
      : next_ns_(first_ns), max_busy_ns_(max_busy_ns), max_park_ns_(max_park_ns) {}

  [[nodiscard]] std::uint64_t sleep_ns(std::uint64_t left_ns, bool busy) noexcept {
    if (busy) {
      left_ns = std::min(left_ns, next_ns_);
      next_ns_ = std::min(next_ns_ * 2, max_busy_ns_);
    }
    return std::min(left_ns, max_park_ns_);
  }

 private:
  std::uint64_t next_ns_;
  std::uint64_t max_busy_ns_;
  std::uint64_t max_park_ns_;
};

}  // namespace shm::detail
