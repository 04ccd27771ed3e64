// Crash repair of the MPMC ring: a cell left held by a dead producer
// (tombstoned) or a dead consumer (released), found by a blocked handle
// (note_stuck), by open, or by the sidecar's reclaim (repair_slots).
#include "shm/mpmc/mpmc_ring.hpp"

#include "mpmc/internal.hpp"
#include "segment/size_check.hpp"
#include "shm/platform/futex.hpp"

#include "format/format.hpp"

#include <algorithm>
#include <array>
#include <cstring>

namespace shm {
namespace mpmc {

std::string_view to_string(RepairStatus outcome) noexcept {
  switch (outcome) {
    case RepairStatus::NotHeld:
      return "not held";
    case RepairStatus::HeldByLive:
      return "held by a live handle";
    case RepairStatus::Unprovable:
      return "held, holder unknown";
    case RepairStatus::Repaired:
      return "repaired";
  }
  return "unknown";
}

RepairStatus repair_position(const Segment& segment, const View& v, Side side, std::uint64_t pos,
                             std::optional<std::size_t> assume_dead, std::string* action) {
  Control& ctl = *v.control;
  Cell& c = v.cell(pos);
  std::uint64_t seq = 0;
  if (side == Side::Push) {
    // [T''] acquire: pairs with the claimer's [mpmc.T]; its intent store is visible below.
    if (ctl.producer.tail.load(std::memory_order_acquire) <= pos) return RepairStatus::NotHeld;
    seq = c.seq.load(std::memory_order_acquire);   // [mpmc.S'] pairs with [mpmc.S]/[mpmc.X]
    if (seq != pos) return RepairStatus::NotHeld;  // published (or a later lap)
  } else {
    // [H''] acquire: pairs with the claimer's [mpmc.H]; its intent store is visible below.
    if (ctl.consumer.head.load(std::memory_order_acquire) <= pos) return RepairStatus::NotHeld;
    seq = c.seq.load(std::memory_order_acquire);  // [mpmc.R'] pairs with [mpmc.R]/[mpmc.X]
    if ((seq & ~kTombstone) != pos + 1) return RepairStatus::NotHeld;  // released
  }
  // Whoever holds `pos` stored intent pos+1 before its claiming CAS and keeps
  // it until it publishes/releases; a handle whose CAS failed clears it.
  std::array<std::uint64_t, kMaxAttachments> named{};  // the intent word naming `pos`, or 0
  bool any = false;
  bool kept = false;  // a holder took it with try_take(): orphan it, never release it
  for (std::size_t i = 0; i < kMaxAttachments; ++i) {
    const auto& in = ctl.intents[i];
    // Relaxed: ordered by [T'']/[H''] above (the claimer's intent precedes its CAS).
    const std::uint64_t w = (side == Side::Push ? in.push : in.pop).load(std::memory_order_relaxed);
    const std::uint64_t at = side == Side::Pop ? w & ~kKeepIntent : w;
    if (w != kNoIntent && at == pos + 1) {
      named[i] = w;
      any = true;
      if (w != at) kept = true;
    }
  }
  if (!any) return RepairStatus::Unprovable;
  std::size_t holder = kMaxAttachments;
  for (std::size_t i = 0; i < kMaxAttachments; ++i) {
    if (!named[i]) continue;
    if (holder == kMaxAttachments) holder = i;
    if (assume_dead && *assume_dead == i) continue;
    if (segment.liveness(i) == Liveness::Alive) return RepairStatus::HeldByLive;
  }
  // Every handle that may hold `pos` is dead: nobody else will write this cell.
  if (side == Side::Push) {
    std::uint64_t expected = pos;
    // [mpmc.X] acq_rel: publishes the tombstone; pairs with the consumer's [mpmc.S'].
    // Failure relaxed: the cell moved on; nothing is read from it.
    if (!c.seq.compare_exchange_strong(expected, (pos + 1) | kTombstone, std::memory_order_acq_rel,
                                       std::memory_order_relaxed))
      return RepairStatus::NotHeld;
    ctl.stats.abandoned_pushes.fetch_add(1, std::memory_order_relaxed);  // statistics only
    ctl.waiters.data_signal.fetch_add(1, std::memory_order_release);  // [mpmc.G] see MpmcRing::wait
    (void)futex_wake_all(ctl.waiters.data_signal);
  } else if (kept && (seq & kTombstone) == 0) {
    std::uint64_t expected = seq;
    // [mpmc.O] acq_rel: marks the kept item an orphan; pairs with an adopter's
    // [mpmc.A] CAS. Failure relaxed: the cell moved on; nothing is read from it.
    if (!c.seq.compare_exchange_strong(expected, (pos + 1) | kOrphan, std::memory_order_acq_rel,
                                       std::memory_order_relaxed))
      return RepairStatus::NotHeld;
    // Release: a consumer that reads the count (acquire) finds the mark in its scan.
    ctl.consumer.orphans.fetch_add(1, std::memory_order_release);
    ctl.waiters.data_signal.fetch_add(1, std::memory_order_release);  // [mpmc.G]
    (void)futex_wake_all(ctl.waiters.data_signal);
  } else {
    std::uint64_t expected = seq;
    // [mpmc.X] acq_rel: frees the cell; pairs with the next producer's [mpmc.R'].
    // Failure relaxed: the cell moved on; nothing is read from it.
    if (!c.seq.compare_exchange_strong(expected, pos + v.capacity, std::memory_order_acq_rel,
                                       std::memory_order_relaxed))
      return RepairStatus::NotHeld;
    if ((seq & kTombstone) != 0)  // statistics only (relaxed)
      ctl.stats.tombstones_skipped.fetch_add(1, std::memory_order_relaxed);
    else
      ctl.stats.lost_pops.fetch_add(1, std::memory_order_relaxed);
    ctl.waiters.space_signal.fetch_add(1, std::memory_order_release);  // [mpmc.G]
    (void)futex_wake_all(ctl.waiters.space_signal);
  }
  for (std::size_t i = 0; i < kMaxAttachments; ++i) {
    if (!named[i]) continue;
    auto& word = side == Side::Push ? ctl.intents[i].push : ctl.intents[i].pop;
    std::uint64_t w = named[i];
    (void)word.compare_exchange_strong(w, kNoIntent, std::memory_order_relaxed);  // tidiness only
  }
  // Relaxed: a pid for the message only.
  const std::int32_t pid = segment.header().slots[holder].pid.load(std::memory_order_relaxed);
  segment.record_event(EventType::Reclaimed, static_cast<std::uint32_t>(holder),
                       side == Side::Push ? 1u : 2u);
  if (action != nullptr)
    *action = side == Side::Push
                  ? shm::detail::format(
                        "slot {} (pid {}) died after claiming position {} (cell {}) and "
                        "before publishing it: published a tombstone consumers skip",
                        holder, pid, pos, pos & v.mask)
              : kept && (seq & kTombstone) == 0
                  ? shm::detail::format(
                        "slot {} (pid {}) died after taking position {} (cell {}) and "
                        "before releasing it: kept it for the next consumer (an orphan)",
                        holder, pid, pos, pos & v.mask)
                  : shm::detail::format(
                        "slot {} (pid {}) died after popping position {} (cell {}) and "
                        "before releasing it: released the cell, its item is lost",
                        holder, pid, pos, pos & v.mask);
  return RepairStatus::Repaired;
}

RepairReport repair_slots(const Segment& segment, const View& v, std::optional<std::size_t> slot,
                          std::optional<std::size_t> assume_dead) {
  RepairReport report;
  Control& ctl = *v.control;
  const std::size_t first = slot ? *slot : 0;
  const std::size_t last = slot ? *slot + 1 : kMaxAttachments;
  for (std::size_t i = first; i < last && i < kMaxAttachments; ++i) {
    for (Side side : {Side::Push, Side::Pop}) {
      const auto& word = side == Side::Push ? ctl.intents[i].push : ctl.intents[i].pop;
      // Relaxed: only a hint of which position to examine; repair_position orders its reads.
      const std::uint64_t w = word.load(std::memory_order_relaxed);
      if (w == kNoIntent) continue;
      std::string action;
      const std::uint64_t at = side == Side::Pop ? w & ~kKeepIntent : w;
      switch (repair_position(segment, v, side, at - 1, assume_dead, &action)) {
        case RepairStatus::Repaired:
          ++(side == Side::Push ? report.repaired_pushes : report.repaired_pops);
          report.actions.push_back(std::move(action));
          break;
        case RepairStatus::HeldByLive:
          ++report.held_by_live;
          break;
        case RepairStatus::NotHeld:
        case RepairStatus::Unprovable:
          break;
      }
    }
    // A waiter bit of a slot that is not live: its holder died while parked.
    // Clearing it only saves producers/consumers spurious wakes.
    // Relaxed loads (has()): waiter bits only decide whether a wake is issued.
    if ((ctl.waiters.consumers_waiting.has(i) || ctl.waiters.producers_waiting.has(i)) &&
        ((assume_dead && *assume_dead == i) || segment.liveness(i) != Liveness::Alive)) {
      (void)ctl.waiters.consumers_waiting.clear(i);
      (void)ctl.waiters.producers_waiting.clear(i);
      report.actions.push_back(
          shm::detail::format("slot {}: cleared the waiter bit of a dead handle", i));
    }
  }
  return report;
}

}  // namespace mpmc

// ---------------------------------------------------------------- handle

void MpmcRing::note_stuck(mpmc::Side side, std::uint64_t pos) noexcept {
  const std::uint64_t now = monotonic_ns();
  if (stuck_.side != side || stuck_.pos != pos) {
    stuck_ = Stuck{side, pos, now};
    return;
  }
  if (now - stuck_.since_ns < mpmc::kStuckGraceNs) return;
  stuck_.since_ns = now;  // at most one repair attempt per grace period
  if (mpmc::repair_position(segment_, v_, side, pos, std::nullopt) ==
          mpmc::RepairStatus::Repaired &&
      repair_hook_ != nullptr)
    repair_hook_(repair_context_, repair_tag_, *this);
}

mpmc::RepairReport MpmcRing::repair() const {
  return mpmc::repair_slots(segment_, v_);
}

}  // namespace shm
