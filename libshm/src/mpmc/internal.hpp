// Private to the MPMC ring's sources and to the priority fanout built on it:
// the wait of their blocking calls (spin budget, then a park announced by a
// bit in a waiters mask, polling with backoff while the other side is
// mid-operation).
#pragma once

#include "platform/spin_then_park.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <utility>

namespace shm::mpmc::internal {

// Attempts before a blocking call parks.
inline constexpr int kSpins = 128;
// The first poll interval while the other side is mid-operation, its cap, and
// the longest sleep at all (bounds a wait lost to a reclaim race).
inline constexpr std::uint64_t kFirstBackoffNs = 20'000;
inline constexpr std::uint64_t kBusyBackoffMaxNs = 1'000'000;
inline constexpr std::uint64_t kMaxParkNs = 250'000'000;

// Park phase: each round re-announces the waiter (`bit` in `waiting`, a reclaim
// race may have cleared it) and calls attempt(), which returns true when the
// wait is over (the caller keeps the result). Otherwise busy() says whether
// the other side is mid-operation (then poll with backoff instead of sleeping
// long). Withdraws the bit at the end; returns when attempt() said done or the
// deadline passed.
template <class Attempt, class Busy, class Heartbeat>
void park_announced(const std::atomic<std::uint32_t>& signal, std::atomic<std::uint32_t>& waiting,
                    std::uint32_t bit, std::chrono::steady_clock::time_point deadline,
                    Attempt&& attempt, Busy&& busy, Heartbeat&& heartbeat) {
  detail::BusyBackoff backoff(kFirstBackoffNs, kBusyBackoffMaxNs, kMaxParkNs);
  bool in_flight = false;
  (void)detail::park(
      signal, deadline,
      [&] {
        // seq_cst: announce ourselves ([mpmc.W] / [fanout.D]); Dekker pair with
        // the other side's claim or publish and its seq_cst load of the mask.
        waiting.fetch_or(bit, std::memory_order_seq_cst);
        if (attempt()) return detail::ParkRound::Done;
        // busy() holds a seq_cst load of the other side's position or bitmap:
        // a claim ordered before our announcement shows there; one ordered
        // after it sees our bit.
        in_flight = busy();
        return detail::ParkRound::Sleep;
      },
      [&](std::uint64_t left_ns) { return backoff.sleep_ns(left_ns, in_flight); },
      std::forward<Heartbeat>(heartbeat));
  // Relaxed: a bit seen late only costs the other side a spurious wake.
  waiting.fetch_and(~bit, std::memory_order_relaxed);
}

}  // namespace shm::mpmc::internal
