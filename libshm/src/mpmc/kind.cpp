// The MpmcRing kind descriptor: what shmctl and the sidecar see of an MPMC ring.
#include "shm/segment/kind.hpp"
#include "shm/mpmc/layout.hpp"

#include "format/format.hpp"

#include <array>
#include <bit>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace shm {
namespace {

// Memory orders in this file: descriptors read snapshots for people and tools.
// Acquire loads of head/tail/seq/bitmap pair with the handles' release/seq_cst
// writes ([mpmc.T]/[mpmc.H]/[mpmc.S]/[mpmc.R]/[mpmc.X] in mpmc_ring.hpp and mpmc_ring.cpp,
// [fanout.B1]/[fanout.B2] in priority_fanout.hpp); relaxed loads are statistics, waiter masks and
// lengths read after an acquire of their cell's sequence: no ordering needed.

using mpmc::kTombstone;

// Positions scanned by describe (verify scans the whole ring).
constexpr std::uint64_t kDescribeScan = 1u << 16;

struct Held {
  mpmc::Side side;
  std::uint64_t pos;
};

// Describes who holds a held cell: empty when a live handle may (in flight).
std::string judge_held(const Segment& seg, const mpmc::View& v, const Held& held) {
  const auto& ctl = *v.control;
  std::string holders;
  bool kept = false;  // taken with try_take(): repair keeps the item, it is not lost
  for (std::size_t i = 0; i < kMaxAttachments; ++i) {
    const auto& in = ctl.intents[i];
    const std::uint64_t w =
        (held.side == mpmc::Side::Push ? in.push : in.pop).load(std::memory_order_relaxed);
    const std::uint64_t at = held.side == mpmc::Side::Pop ? w & ~mpmc::kKeepIntent : w;
    if (w == mpmc::kNoIntent || at != held.pos + 1) continue;
    if (at != w) kept = true;
    const Liveness live = seg.liveness(i);
    if (live == Liveness::Alive) return {};
    holders += shm::detail::format("{}slot {} (pid {}, {})", holders.empty() ? "" : ", ", i,
                                   seg.header().slots[i].pid.load(std::memory_order_relaxed),
                                   to_string(live));
  }
  const std::uint64_t cell = held.pos & v.mask;
  if (held.side == mpmc::Side::Push) {
    if (holders.empty())
      return shm::detail::format(
          "cell {} (position {}) is claimed but unpublished and no attachment's "
          "intent names it: its holder is unknown and it cannot be repaired "
          "automatically; consumers stop in front of it",
          cell, held.pos);
    return shm::detail::format(
        "cell {} (position {}) was claimed by {} which died before publishing it: "
        "consumers stop in front of it until it is repaired (sidecar reclaim, the "
        "next handle that opens the ring, or a waiting consumer after 1 ms)",
        cell, held.pos, holders);
  }
  if (holders.empty())
    return shm::detail::format(
        "cell {} (position {}) is popped but never released and no attachment's "
        "intent names it: producers stop in front of it",
        cell, held.pos);
  if (kept)
    return shm::detail::format(
        "cell {} (position {}) was taken by {} which died before releasing it: repair "
        "keeps its item for the next consumer; producers stop in front of it until then",
        cell, held.pos, holders);
  return shm::detail::format(
      "cell {} (position {}) was popped by {} which died before releasing it: its "
      "item is lost and producers stop in front of it until it is repaired",
      cell, held.pos, holders);
}

// Checks every cell against a snapshot of (head, tail); appends violations and
// held cells. Meaningful only when head and tail did not move meanwhile.
void scan(const mpmc::View& v, std::uint64_t head, std::uint64_t tail,
          std::vector<std::string>& bad, std::vector<Held>& held) {
  const std::uint64_t cap = v.capacity;
  const std::uint64_t lo = tail >= cap ? tail - cap : 0;
  for (std::uint64_t pos = lo; pos < tail; ++pos) {
    const mpmc::Cell& c = v.cell(pos);
    const std::uint64_t seq = c.seq.load(std::memory_order_acquire);
    const std::uint64_t s = seq & ~kTombstone;
    const bool tomb = (seq & kTombstone) != 0;
    if (pos >= head) {  // claimed by a producer, not yet by a consumer
      if (seq == pos) {
        held.push_back({mpmc::Side::Push, pos});
      } else if (s == pos + 1) {
        const std::uint32_t len = c.length.load(std::memory_order_relaxed);
        if (!tomb && len > v.slot_bytes)
          bad.push_back(
              shm::detail::format("cell {} (position {}): payload length {} exceeds the slot "
                                  "size {}",
                                  pos & v.mask, pos, len, v.slot_bytes));
      } else {
        bad.push_back(
            shm::detail::format("cell {} (position {}, between head {} and tail {}): sequence "
                                "{:#x}; expected {} (being written) or {} (published)",
                                pos & v.mask, pos, head, tail, seq, pos, pos + 1));
      }
    } else {  // claimed by a consumer
      if (s == pos + 1) {
        held.push_back({mpmc::Side::Pop, pos});
      } else if (seq == ((pos + 1) | mpmc::kOrphan)) {
        // A kept item of a dead taker, waiting for the next consumer: legal.
      } else if (seq != pos + cap) {
        bad.push_back(
            shm::detail::format("cell {} (position {}, before head {}): sequence {:#x}; expected "
                                "{} (being read) or {} (released)",
                                pos & v.mask, pos, head, seq, pos + 1, pos + cap));
      }
    }
  }
  for (std::uint64_t i = tail; i < cap; ++i) {  // never claimed yet
    const std::uint64_t seq = v.cell(i).seq.load(std::memory_order_acquire);
    if (seq != i)
      bad.push_back(
          shm::detail::format("cell {} was never used (tail {}) but has sequence {:#x}; expected "
                              "{}",
                              i, tail, seq, i));
  }
}

void describe(const Segment& seg, Node& out) {
  std::string why;
  const auto v = mpmc::view(seg, &why);
  if (!v) {
    out.set("error", why);
    return;
  }
  const auto& ctl = *v->control;
  const std::uint64_t head = ctl.consumer.head.load(std::memory_order_acquire);
  const std::uint64_t tail = ctl.producer.tail.load(std::memory_order_acquire);
  out.set("capacity", v->capacity);
  out.set("slot_size", v->slot_bytes);
  out.set("cell_stride", v->stride);
  out.set("head", head);
  out.set("tail", tail);
  out.gauge("depth", tail >= head ? tail - head : 0);
  std::uint64_t unpublished = 0;
  for (std::uint64_t pos = head; pos < tail && pos - head < kDescribeScan; ++pos)
    if (v->cell(pos).seq.load(std::memory_order_relaxed) == pos) ++unpublished;
  out.gauge("pushes_in_flight", unpublished);
  out.counter("pushed", tail);
  out.counter("popped", head);
  out.counter("abandoned_pushes", ctl.stats.abandoned_pushes.load(std::memory_order_relaxed));
  out.counter("lost_pops", ctl.stats.lost_pops.load(std::memory_order_relaxed));
  out.counter("tombstones_skipped", ctl.stats.tombstones_skipped.load(std::memory_order_relaxed));
  out.gauge("orphans", ctl.consumer.orphans.load(std::memory_order_relaxed));
  out.counter("orphans_adopted", ctl.stats.adopted.load(std::memory_order_relaxed));
  out.counter("cancelled_pushes", ctl.stats.cancelled_pushes.load(std::memory_order_relaxed));
  out.counter("parks", ctl.stats.parks.load(std::memory_order_relaxed));
  out.counter("wakeups", ctl.stats.wakeups.load(std::memory_order_relaxed));
  out.gauge("consumers_waiting", ctl.waiters.consumers_waiting.parked());
  out.gauge("producers_waiting", ctl.waiters.producers_waiting.parked());
}

std::vector<std::string> verify(const Segment& seg) {
  std::vector<std::string> bad;
  std::string why;
  const auto v = mpmc::view(seg, &why);
  if (!v) {
    bad.push_back(why);
    return bad;
  }
  const auto& ctl = *v->control;
  for (int attempt = 0; attempt < 20; ++attempt) {
    const std::uint64_t h1 = ctl.consumer.head.load(std::memory_order_acquire);
    const std::uint64_t t = ctl.producer.tail.load(std::memory_order_acquire);
    const std::uint64_t h2 = ctl.consumer.head.load(std::memory_order_acquire);
    // head is read before tail, so tail >= head; and tail <= (head then) + capacity.
    if (t < h1 || h2 < h1 || t > h2 + v->capacity || t >= (1ull << 62)) {
      bad.push_back(shm::detail::format(
          "positions head {} and tail {} are impossible for capacity {}", h2, t, v->capacity));
      return bad;
    }
    std::vector<std::string> found;
    std::vector<Held> held;
    scan(*v, h1, t, found, held);
    if (ctl.consumer.head.load(std::memory_order_acquire) != h1 ||
        ctl.producer.tail.load(std::memory_order_acquire) != t) {
      std::this_thread::yield();
      continue;  // moved while scanning: the cell states are not a snapshot
    }
    for (const Held& h : held)
      if (auto line = judge_held(seg, *v, h); !line.empty()) found.push_back(std::move(line));
    return found;
  }
  // Never quiescent: only what holds at any instant.
  for (std::uint64_t i = 0; i < v->capacity; ++i) {
    const std::uint64_t seq = v->cell(i).seq.load(std::memory_order_relaxed);
    const std::uint64_t residue = ((seq & ~kTombstone) - i) & v->mask;
    if (residue > 1 || ((seq & kTombstone) != 0 && residue != 1))
      bad.push_back(
          shm::detail::format("cell {}: sequence {:#x} is not congruent to its index", i, seq));
  }
  return bad;
}

Result<std::vector<std::string>> reclaim(Segment& seg, const SlotInfo& dead) {
  std::string why;
  const auto v = mpmc::view(seg, &why);
  if (!v) return fail(Errc::Corrupt, shm::detail::format("ring not repaired: {}", why));
  // `dead` is assumed dead, not probed: the caller (reclaim_dead_attacher)
  // holds its kernel lock, which a probe through another file description
  // would report as a live holder. Other handles named on a cell are probed.
  mpmc::RepairReport report = mpmc::repair_slots(seg, *v, dead.index, dead.index);
  if (report.actions.empty())
    report.actions.push_back(
        shm::detail::format("slot {} (pid {}) held no cell of the ring", dead.index, dead.pid));
  return std::move(report.actions);
}

std::vector<std::vector<std::byte>> dump(const Segment& seg, std::size_t limit) {
  std::vector<std::vector<std::byte>> out;
  const auto v = mpmc::view(seg);
  if (!v) return out;
  const std::uint64_t head = v->control->consumer.head.load(std::memory_order_acquire);
  const std::uint64_t tail = v->control->producer.tail.load(std::memory_order_acquire);
  if (tail < head || tail - head > v->capacity) return out;
  for (std::uint64_t pos = head; pos < tail && out.size() < limit; ++pos) {
    const mpmc::Cell& c = v->cell(pos);
    if (c.seq.load(std::memory_order_acquire) != pos + 1) continue;  // in flight, taken, tombstone
    const std::uint32_t len = c.length.load(std::memory_order_relaxed);
    if (len > v->slot_bytes) continue;
    const std::byte* p = v->payload(pos);
    out.emplace_back(p, p + len);
  }
  return out;
}

// Consumers have work while claimed positions trail published ones; their
// progress is the consumers' claim position (shared by all consumers: one
// that stops is seen only when the others cannot cover for it). relaxed: a
// monitoring sample.
std::optional<RoleProgress> progress(const Segment& seg, std::uint32_t role) {
  if (role != mpmc::kConsumerRole.id && role != mpmc::kPeerRole.id) return std::nullopt;
  const auto v = mpmc::view(seg);
  if (!v) return std::nullopt;
  const std::uint64_t head = v->control->consumer.head.load(std::memory_order_relaxed);
  const std::uint64_t tail = v->control->producer.tail.load(std::memory_order_relaxed);
  return RoleProgress{tail > head, head};
}

constexpr std::array<RoleSpec, 3> kRoles = {mpmc::kProducerRole, mpmc::kConsumerRole,
                                            mpmc::kPeerRole};

}  // namespace

const KindDescriptor kMpmcRingDescriptor{
    .kind = kMpmcRingKind,
    .name = "mpmc_ring",
    .fingerprint = mpmc::kFingerprint,
    .roles = kRoles,
    .describe = describe,
    .verify = verify,
    .reclaim = reclaim,
    .dump = dump,
    .progress = progress,
};

}  // namespace shm
