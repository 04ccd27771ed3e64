// Private to the MPMC ring's sources and to the priority fanout built on it:
// the wait of their blocking calls (spin budget, then a park announced by a
// slot's bit in a ParkedSet, polling with backoff while the other side is
// mid-operation).
#pragma once

#include "platform/spin_then_park.hpp"
#include "shm/mpmc/parked_set.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
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

// Park phase: each round re-announces the waiter (`slot` in `waiting`, a reclaim
// race may have cleared it) and calls attempt(), which returns true when the
// wait is over (the caller keeps the result). Otherwise busy() says whether
// the other side is mid-operation (then poll with backoff instead of sleeping
// long). Withdraws the slot at the end; returns when attempt() said done or the
// deadline passed.
template <class Attempt, class Busy, class Heartbeat>
void park_announced(const std::atomic<std::uint32_t>& signal, ParkedSet& waiting, std::size_t slot,
                    std::chrono::steady_clock::time_point deadline, Attempt&& attempt, Busy&& busy,
                    Heartbeat&& heartbeat) {
  detail::BusyBackoff backoff(kFirstBackoffNs, kBusyBackoffMaxNs, kMaxParkNs);
  bool in_flight = false;
  (void)detail::park(
      signal, deadline,
      [&] {
        // seq_cst: announce ourselves ([mpmc.W] / [fanout.D]); Dekker pair with
        // the other side's claim or publish and its seq_cst loads in
        // ParkedSet::any() (the count, then the words).
        waiting.announce(slot);
        if (attempt()) return detail::ParkRound::Done;
        // busy() holds a seq_cst load of the other side's position or bitmap:
        // a claim ordered before our announcement shows there; one ordered
        // after it sees our bit.
        in_flight = busy();
        return detail::ParkRound::Sleep;
      },
      [&](std::uint64_t left_ns) { return backoff.sleep_ns(left_ns, in_flight); },
      std::forward<Heartbeat>(heartbeat));
  // A bit seen late only costs the other side a spurious wake (the acquire in
  // clear() keeps the count >= the bits, see ParkedSet).
  (void)waiting.clear(slot);
}

}  // namespace shm::mpmc::internal
