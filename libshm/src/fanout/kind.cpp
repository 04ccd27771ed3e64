// The fanout_bitmap kind descriptor: what shmctl and the sidecar see of a
// PriorityFanout through its `<base>.bitmap` file. It opens the K ring files
// next to it (read-only) to show per-priority depth and counters.
#include "shm/segment/kind.hpp"
#include "shm/fanout/layout.hpp"
#include "shm/platform/futex.hpp"

#include "format/format.hpp"

#include <array>
#include <bit>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>

namespace shm {
namespace {

// Memory orders in this file: descriptors read snapshots for people and tools.
// Acquire loads of head/tail/seq/bitmap pair with the handles' release/seq_cst
// writes ([mpmc.T]/[mpmc.H]/[mpmc.S]/[mpmc.R]/[mpmc.X] in mpmc_ring.hpp and mpmc_ring.cpp,
// [fanout.B1]/[fanout.B2] in priority_fanout.hpp); relaxed loads are statistics, waiter masks and
// lengths read after an acquire of their cell's sequence: no ordering needed.

struct FanoutView {
  fanout::ParamBlock params{};
  const fanout::Control* control = nullptr;
  std::string base;
  std::string root;
};

std::optional<FanoutView> view(const Segment& seg, std::string& why) {
  FanoutView v;
  if (seg.params().size() != sizeof v.params) {
    why = shm::detail::format("parameter block has {} bytes, expected {}", seg.params().size(),
                              sizeof v.params);
    return std::nullopt;
  }
  std::memcpy(&v.params, seg.params().data(), sizeof v.params);
  if (auto ok = fanout::validate(
          FanoutParams{v.params.priorities, v.params.ring_cells, v.params.slot_bytes});
      !ok) {
    why = ok.error().message;
    return std::nullopt;
  }
  if (seg.data().size() < sizeof(fanout::Control)) {
    why = shm::detail::format("data area has {} bytes, the bitmap needs {}", seg.data().size(),
                              sizeof(fanout::Control));
    return std::nullopt;
  }
  v.control = reinterpret_cast<const fanout::Control*>(seg.data().data());
  v.base = fanout::base_of(seg.name());
  v.root = std::filesystem::path(seg.path()).parent_path().string();
  if (v.base.empty()) {
    why = shm::detail::format("segment name '{}' does not end in .bitmap", seg.name());
    return std::nullopt;
  }
  return v;
}

std::uint64_t all_bits(std::uint32_t k) {
  return k >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << k) - 1;
}

// Opens ring `i` read-only and checks that it belongs to this fanout.
Result<Segment> open_ring(const FanoutView& v, std::uint32_t i) {
  const std::string name = fanout::ring_name(v.base, i);
  OpenOptions o;
  o.root = v.root;
  o.read_only = true;
  o.allow_other_owner = true;  // read-only, and every value is checked before use
  auto seg = Segment::open_any(name, o);
  if (!seg) return seg;
  const SegmentHeader& h = seg->header();
  if (h.kind != kMpmcRingKind)
    return fail(Errc::KindMismatch,
                shm::detail::format("{}: kind: segment has {}, expected {} (mpmc_ring)",
                                    seg->path(), h.kind, kMpmcRingKind));
  if (h.fingerprint != mpmc::kFingerprint)
    return fail(Errc::FingerprintMismatch,
                shm::detail::format("{}: layout fingerprint {:#018x}, this build has {:#018x}",
                                    seg->path(), h.fingerprint, mpmc::kFingerprint));
  if (h.incarnation != v.control->rings.incarnation[i])
    return fail(
        Errc::ParamMismatch,
        shm::detail::format("{}: incarnation: segment has {:016x}, the bitmap expects {:016x}",
                            seg->path(), h.incarnation, v.control->rings.incarnation[i]));
  std::string why;
  auto rv = mpmc::view(*seg, &why);
  if (!rv) return fail(Errc::Corrupt, shm::detail::format("{}: {}", seg->path(), why));
  if (rv->capacity != v.params.ring_cells || rv->slot_bytes != v.params.slot_bytes)
    return fail(Errc::ParamMismatch,
                shm::detail::format(
                    "{}: capacity/slot_size: segment has {}/{}, the fanout has {}/{}", seg->path(),
                    rv->capacity, rv->slot_bytes, v.params.ring_cells, v.params.slot_bytes));
  return seg;
}

void describe(const Segment& seg, Node& out) {
  std::string why;
  const auto v = view(seg, why);
  if (!v) {
    out.set("error", why);
    return;
  }
  const std::uint32_t k = v->params.priorities;
  const auto& ctl = *v->control;
  const std::uint64_t bm = ctl.hot.bitmap.load(std::memory_order_acquire);
  out.set("base", v->base);
  out.set("priorities", static_cast<std::uint64_t>(k));
  out.set("ring_capacity", v->params.ring_cells);
  out.set("slot_size", v->params.slot_bytes);
  std::string bits = "0b";
  for (std::uint32_t i = k; i-- > 0;) bits += ((bm >> i) & 1) != 0 ? '1' : '0';
  out.set("bitmap", bits);  // most significant digit = highest priority
  out.set("bitmap_hex", shm::detail::format("{:#018x}", bm));
  Node& active = out.array("active");  // highest first
  for (std::uint32_t i = 64; i-- > 0;)
    if (((bm >> i) & 1) != 0) active.push(static_cast<std::uint64_t>(i));
  out.gauge("active_count", static_cast<std::uint64_t>(std::popcount(bm & all_bits(k))));
  out.gauge("drainers_waiting", ctl.hot.waiters.parked());
  out.set("epoch", static_cast<std::uint64_t>(ctl.hot.epoch.load(std::memory_order_relaxed)));
  out.counter("stale_retries", ctl.stats.stale_retries.load(std::memory_order_relaxed));
  out.counter("parks", ctl.stats.parks.load(std::memory_order_relaxed));
  out.counter("wakeups", ctl.stats.wakeups.load(std::memory_order_relaxed));
  std::uint64_t depth_total = 0, submitted_total = 0, drained_total = 0;
  Node& rings = out.array("rings");
  for (std::uint32_t i = k; i-- > 0;) {
    Node& r = rings.push_object();
    r.set("priority", static_cast<std::uint64_t>(i));
    r.set("name", fanout::ring_name(v->base, i));
    r.set("bit", ((bm >> i) & 1) != 0);
    auto ring = open_ring(*v, i);
    if (!ring) {
      r.set("error", ring.error().what());
      continue;
    }
    const auto rv = mpmc::view(*ring);
    const std::uint64_t head = rv->control->consumer.head.load(std::memory_order_acquire);
    const std::uint64_t tail = rv->control->producer.tail.load(std::memory_order_acquire);
    const std::uint64_t depth = tail >= head ? tail - head : 0;
    r.gauge("depth", depth);
    r.set("capacity", rv->capacity);
    // Positions claimed; positions abandoned by dead handles are counted too
    // (see the ring's own abandoned_pushes / lost_pops).
    r.counter("submitted", tail);
    r.counter("drained", head);
    depth_total += depth;
    submitted_total += tail;
    drained_total += head;
  }
  out.gauge("depth_total", depth_total);
  out.counter("submitted_total", submitted_total);
  out.counter("drained_total", drained_total);
}

std::vector<std::string> verify(const Segment& seg) {
  std::vector<std::string> bad;
  std::string why;
  const auto v = view(seg, why);
  if (!v) {
    bad.push_back(why);
    return bad;
  }
  const std::uint32_t k = v->params.priorities;
  const auto& ctl = *v->control;
  if (const std::uint64_t bm = ctl.hot.bitmap.load(std::memory_order_acquire);
      (bm & ~all_bits(k)) != 0)
    bad.push_back(
        shm::detail::format("bitmap {:#018x} has bits set above priority {} (the fanout has {} "
                            "priorities)",
                            bm, k - 1, k));
  for (std::uint32_t i = 0; i < k; ++i) {
    auto ring = open_ring(*v, i);
    if (!ring) {
      bad.push_back(shm::detail::format("priority {}: {}", i, ring.error().what()));
      continue;
    }
    const auto rv = mpmc::view(*ring);
    const std::uint64_t bit = std::uint64_t{1} << i;
    // Every non-empty ring's bit will be observed: set, or a push is in flight
    // (its pusher sets the bit after publishing). A pusher between publishing
    // and setting the bit looks like a violation for microseconds: re-check.
    std::string problem;
    for (int attempt = 0; attempt < 5; ++attempt) {
      problem.clear();
      const std::uint64_t head = rv->control->consumer.head.load(std::memory_order_seq_cst);
      const std::uint64_t tail = rv->control->producer.tail.load(std::memory_order_seq_cst);
      if (tail <= head) break;
      if ((ctl.hot.bitmap.load(std::memory_order_seq_cst) & bit) != 0) break;
      bool in_flight = false;
      for (std::uint64_t pos = head; pos < tail && pos - head < rv->capacity; ++pos)
        if (rv->cell(pos).seq.load(std::memory_order_acquire) == pos) {
          in_flight = true;
          break;
        }
      if (in_flight) break;
      problem = shm::detail::format(
          "priority {}: ring holds {} item(s) but its bitmap bit is clear and no "
          "push is in flight: try_pop_highest() will not see them until the "
          "next submit to priority {}, a reclaim, a new handle or a parked pop_highest() "
          "sets it again",
          i, tail - head, i);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (!problem.empty()) bad.push_back(std::move(problem));
  }
  return bad;
}

Result<std::vector<std::string>> reclaim(Segment& seg, const SlotInfo& dead) {
  std::string why;
  const auto v = view(seg, why);
  if (!v) return fail(Errc::Corrupt, shm::detail::format("nothing reclaimed: {}", why));
  // The rings are segments of their own: the sidecar reclaims their slots
  // through the mpmc_ring descriptor. Here the drainer's waiter bit, and the
  // bit of any ring a submitter left non-empty (it died between its ring
  // commit and its bit).
  auto* ctl = reinterpret_cast<fanout::Control*>(seg.data().data());
  std::vector<std::string> actions;
  // No liveness probe here: the caller (reclaim_dead_attacher) holds the dead
  // slot's kernel lock, and a probe through another file description would see
  // that lock and report the slot alive.
  // The waiter bits are a wake hint; a bit left set costs submitters a futex
  // wake per announcement (see pop_highest()). clear() keeps the count.
  if (ctl->hot.waiters.clear(dead.index)) {
    actions.push_back(
        shm::detail::format("slot {} (pid {}) died parked in pop_highest(): cleared its waiter bit",
                            dead.index, dead.pid));
  }
  // Resurface stranded items (PriorityFanout::resurface() does the same from
  // a handle). A ring that cannot be opened is reported and left: the bitmap
  // bit of a ring we cannot read would be a guess.
  bool set = false;
  for (std::uint32_t i = 0; i < v->params.priorities; ++i) {
    const std::uint64_t pbit = std::uint64_t{1} << i;
    // [fanout.B1] seq_cst, as in resurface().
    if ((ctl->hot.bitmap.load(std::memory_order_seq_cst) & pbit) != 0) continue;
    auto ring = open_ring(*v, i);
    if (!ring) {
      actions.push_back(shm::detail::format("priority {}: not checked for stranded items: {}", i,
                                            ring.error().what()));
      continue;
    }
    const auto rv = mpmc::view(*ring);
    // [fanout.C] seq_cst loads, as in MpmcRing::has_claimed_items().
    const std::uint64_t tail = rv->control->producer.tail.load(std::memory_order_seq_cst);
    const std::uint64_t head = rv->control->consumer.head.load(std::memory_order_seq_cst);
    // An orphan (a dead taker's kept item, made by the ring's own reclaim) is
    // an item too. Acquire: pairs with repair's release increment.
    const std::uint64_t orphans = rv->control->consumer.orphans.load(std::memory_order_acquire);
    if (tail <= head && orphans == 0) continue;
    ctl->hot.bitmap.fetch_or(pbit, std::memory_order_seq_cst);
    set = true;
    actions.push_back(shm::detail::format(
        "priority {}: ring holds {} item(s) with its bitmap bit clear (a submitter died "
        "before setting it, or a taker died holding one): set the bit",
        i, (tail > head ? tail - head : 0) + orphans));
  }
  // [fanout.D1] seq_cst / [fanout.E] release, as in PriorityFanout::wake_drainers().
  if (set && ctl->hot.waiters.any()) {
    ctl->hot.epoch.fetch_add(1, std::memory_order_release);
    (void)futex_wake_all(ctl->hot.epoch);
    ctl->stats.wakeups.fetch_add(1, std::memory_order_relaxed);  // statistics only
  }
  if (actions.empty())
    actions.push_back(shm::detail::format(
        "slot {} (pid {}) held nothing in the bitmap; its ring cells are repaired "
        "per ring",
        dead.index, dead.pid));
  return actions;
}

constexpr std::array<RoleSpec, 3> kRoles = {fanout::kSubmitterRole, fanout::kDrainerRole,
                                            fanout::kPeerRole};

}  // namespace

const KindDescriptor kFanoutBitmapDescriptor{
    kFanoutBitmapKind, "fanout_bitmap", fanout::kFingerprint, kRoles, describe, verify, reclaim,
    nullptr,           nullptr,
};

}  // namespace shm
