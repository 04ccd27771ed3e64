/// @file
/// ParkedSet: which attachment slots have a handle parked (or about to park) on
/// one futex word, laid out in shared memory. Used by the MPMC ring (parked
/// consumers, parked producers) and the priority fanout (parked drainers).
///
/// One bit per attachment slot in `slots` (kMaxAttachments bits, several 64-bit
/// words), and `count`, an upper bound of the number of bits set. The side that
/// makes progress (a push, a pop, a submit) asks any() on its hot path: one
/// load of `count` when nobody is parked, the words only when somebody may be.
///
/// The count is kept >= the bits set, at every point of its modification order:
/// - announce(): count +1 (seq_cst), then set the bit (seq_cst RMW); if the bit
///   was already set (an earlier round of the same park), count -1.
/// - clear() (the waiter leaving its park; repair, reclaim or the slot's next
///   holder clearing a dead holder's bit): clear the bit with an acquire RMW;
///   only whoever actually cleared it does count -1. The acquire synchronizes
///   with the release half of the RMW that set the bit (a release sequence
///   runs through the other bits' RMWs), so the setter's +1 happens before this
///   -1 and precedes it in the count's modification order: every -1 follows
///   its own +1, and the count never drops below the bits set.
/// A process killed between its +1 and setting the bit, or between clearing a
/// bit and its -1, leaves the count one too high forever: wakers then read the
/// words (still exact) instead of stopping at the count. Never too low.
///
/// Dekker (why a wake is not lost): a waiter runs announce(), then a seq_cst
/// load of the other side's position ([mpmc.W2] / [fanout.D2]); the other side
/// runs its seq_cst claim or publish, then any() (seq_cst loads). In the single
/// total order S, if any() returns false, either its count load precedes the
/// waiter's +1 (read after it, with the bit set, the count is not 0), or its
/// load of the waiter's word precedes the waiter's fetch_or (else it would see
/// the bit). Either way the claim precedes the waiter's load of the position
/// in S: the waiter sees it and does not sleep on it. Otherwise any() returns
/// true and the other side wakes. A bit cleared under a live waiter (a reclaim
/// race) is set again by its next park round; kMaxParkNs bounds that sleep.
#pragma once

#include "shm/segment/header.hpp"

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace shm::mpmc {

/// 64-bit words of ParkedSet::slots: one bit per attachment slot.
inline constexpr std::size_t kParkedWords = (kMaxAttachments + 63) / 64;

/// The set of parked attachment slots of one futex word (see the file's description).
struct ParkedSet {
  std::atomic<std::uint32_t> count;                ///< >= the bits set in `slots` (see above)
  std::uint32_t reserved;                          ///< zero
  std::atomic<std::uint64_t> slots[kParkedWords];  ///< bit s % 64 of word s / 64: slot s

  /// Whether a handle may be parked: the waker's half of the Dekker pair.
  [[nodiscard]] bool any() const noexcept {
    // seq_cst: see the header comment ([mpmc.W1] / [fanout.D1] at the callers).
    if (count.load(std::memory_order_seq_cst) == 0) [[likely]]
      return false;
    for (const auto& w : slots)
      if (w.load(std::memory_order_seq_cst) != 0) return true;
    return false;
  }

  /// The waiter's announcement ([mpmc.W] / [fanout.D]); repeated every park round.
  void announce(std::size_t slot) noexcept {
    const std::uint64_t bit = std::uint64_t{1} << (slot % 64);
    // seq_cst +1 before the bit: a bit is never set without its count.
    count.fetch_add(1, std::memory_order_seq_cst);
    // seq_cst: the Dekker store of the waiter; its release half orders the +1
    // above before whoever clears the bit (and subtracts) later.
    if ((slots[slot / 64].fetch_or(bit, std::memory_order_seq_cst) & bit) != 0)
      // Relaxed: our own +1 of this round, undone; the bit keeps its first one.
      count.fetch_sub(1, std::memory_order_relaxed);
  }

  /// Withdraws `slot`'s bit (its holder stopped waiting, or died parked); true
  /// when the bit was set. Relaxed for the waker: a bit seen late only costs it
  /// a spurious wake.
  bool clear(std::size_t slot) noexcept {
    const std::uint64_t bit = std::uint64_t{1} << (slot % 64);
    // Acquire: pairs with the release half of announce()'s fetch_or, so the
    // announcer's +1 precedes our -1 in the count's modification order.
    if ((slots[slot / 64].fetch_and(~bit, std::memory_order_acquire) & bit) == 0) return false;
    count.fetch_sub(1, std::memory_order_relaxed);  // ordered after that +1 by the acquire
    return true;
  }

  /// Relaxed, for tools and repair: whether `slot`'s bit is set.
  [[nodiscard]] bool has(std::size_t slot) const noexcept {
    return (slots[slot / 64].load(std::memory_order_relaxed) >> (slot % 64) & 1u) != 0;
  }
  /// Relaxed: how many bits are set.
  [[nodiscard]] std::uint64_t parked() const noexcept {
    std::uint64_t n = 0;
    for (const auto& w : slots)
      n += static_cast<std::uint64_t>(std::popcount(w.load(std::memory_order_relaxed)));
    return n;
  }
};
static_assert(std::is_standard_layout_v<ParkedSet>);
static_assert(offsetof(ParkedSet, slots) == 8);
static_assert(sizeof(ParkedSet) == 8 + 8 * kParkedWords);
static_assert(kParkedWords * 64 >= kMaxAttachments);

}  // namespace shm::mpmc
