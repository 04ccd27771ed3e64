#include "shm/mpmc/mpmc_ring.hpp"
#include "shm/platform/clock.hpp"

#include "mpmc/internal.hpp"
#include "segment/kind_spec.hpp"
#include "segment/size_check.hpp"
#include "shm/platform/futex.hpp"

#include "format/format.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

namespace shm {
namespace mpmc {
namespace {

bool valid_geometry(const ParamBlock& p) noexcept {
  return is_power_of_two(p.capacity) && p.capacity >= kMinCapacity && p.capacity <= kMaxCapacity &&
         p.slot_bytes >= 1 && p.slot_bytes <= kMaxSlotSize &&
         p.stride == stride_for(p.slot_bytes) && p.capacity * p.stride <= kMaxCellBytes;
}

}  // namespace

Result<void> validate(const MpmcParams& params) {
  if (!is_power_of_two(params.ring_cells) || params.ring_cells < kMinCapacity ||
      params.ring_cells > kMaxCapacity)
    return fail(Errc::InvalidArgument,
                shm::detail::format("mpmc ring capacity {} must be a power of two in [{}, {}]",
                                    params.ring_cells, kMinCapacity, kMaxCapacity));
  if (params.slot_bytes < 1 || params.slot_bytes > kMaxSlotSize)
    return fail(Errc::InvalidArgument,
                shm::detail::format("mpmc ring slot size {} must be in [1, {}]", params.slot_bytes,
                                    kMaxSlotSize));
  if (params.ring_cells * stride_for(params.slot_bytes) > kMaxCellBytes)
    return fail(
        Errc::InvalidArgument,
        shm::detail::format("mpmc ring of {} cells of {} bytes needs {} bytes, limit {}",
                            params.ring_cells, stride_for(params.slot_bytes),
                            params.ring_cells * stride_for(params.slot_bytes), kMaxCellBytes));
  return {};
}

KindSpec kind_spec(const MpmcParams& params, ParamBlock& storage) {
  storage = ParamBlock{params.ring_cells, params.slot_bytes,
                       params.slot_bytes != 0 ? stride_for(params.slot_bytes) : 0};
  return shm::detail::block_kind_spec(
      kMpmcRingKind, "mpmc_ring", kFingerprint, storage,
      params.ring_cells != 0 && params.slot_bytes != 0
          ? data_size_for(params.ring_cells, params.slot_bytes)
          : 0,
      [](const ParamBlock& f) -> std::string {
        if (valid_geometry(f)) return {};
        return shm::detail::format(
            "geometry: segment has capacity {}, slot size {}, stride {}; not a valid "
            "mpmc ring",
            f.capacity, f.slot_bytes, f.stride);
      },
      [](const ParamBlock& f, const ParamBlock& e, shm::detail::FieldCheck& check) {
        check.field("ring_cells", f.capacity, e.capacity)
            .field("slot_bytes", f.slot_bytes, e.slot_bytes);
      });
}

std::optional<View> view(const Segment& segment, std::string* why) {
  ParamBlock p{};
  if (segment.params().size() != sizeof p) {
    if (why)
      *why = shm::detail::format("parameter block has {} bytes, expected {}",
                                 segment.params().size(), sizeof p);
    return std::nullopt;
  }
  std::memcpy(&p, segment.params().data(), sizeof p);
  if (!valid_geometry(p)) {
    if (why)
      *why = shm::detail::format("capacity {}, slot size {}, stride {} are not a valid geometry",
                                 p.capacity, p.slot_bytes, p.stride);
    return std::nullopt;
  }
  const std::uint64_t need = data_size_for(p.capacity, p.slot_bytes);
  if (segment.data().size() < need) {
    if (why)
      *why = shm::detail::format("data area has {} bytes, the geometry needs {}",
                                 segment.data().size(), need);
    return std::nullopt;
  }
  View v;
  v.control = reinterpret_cast<Control*>(segment.data().data());
  v.cells = segment.data().data() + kCellsOffset;
  v.capacity = p.capacity;
  v.mask = p.capacity - 1;
  v.slot_bytes = p.slot_bytes;
  v.stride = p.stride;
  return v;
}

}  // namespace mpmc

// ---------------------------------------------------------------- segments

Result<Segment> create_mpmc_ring(std::string_view name, const MpmcParams& params,
                                 const CreateOptions& options) {
  if (auto ok = mpmc::validate(params); !ok) return std::unexpected(ok.error());
  mpmc::ParamBlock block{};
  const KindSpec spec = mpmc::kind_spec(params, block);
  const std::uint64_t stride = block.stride;
  // The data area comes zero-filled (head = tail = 0); cell i starts free for
  // position i. Published to openers by the READY release store.
  return Segment::create(name, spec, options, [&](std::span<std::byte> data) -> Result<void> {
    std::byte* cells = data.data() + mpmc::kCellsOffset;
    for (std::uint64_t i = 0; i < params.ring_cells; ++i)
      // Relaxed: published by the READY release store of Segment::create.
      reinterpret_cast<mpmc::Cell*>(cells + i * stride)->seq.store(i, std::memory_order_relaxed);
    return {};
  });
}

Result<Segment> open_mpmc_ring(std::string_view name, const MpmcParams& expected,
                               const OpenOptions& options) {
  if (expected.ring_cells != 0 || expected.slot_bytes != 0) {
    MpmcParams probe = expected;
    if (probe.ring_cells == 0) probe.ring_cells = mpmc::kMinCapacity;
    if (probe.slot_bytes == 0) probe.slot_bytes = 1;
    if (auto ok = mpmc::validate(probe); !ok) return std::unexpected(ok.error());
  }
  mpmc::ParamBlock block{};
  const KindSpec spec = mpmc::kind_spec(expected, block);
  auto seg = Segment::open(name, spec, options);
  if (!seg) return seg;
  // Partial expectations skip Segment::open's size check: check against the
  // segment's own (validated) geometry.
  mpmc::ParamBlock found{};
  std::memcpy(&found, seg->params().data(), sizeof found);
  if (auto ok =
          detail::check_total_size(*seg, mpmc::data_size_for(found.capacity, found.slot_bytes),
                                   shm::detail::format("capacity {} x slot size {} needs",
                                                       found.capacity, found.slot_bytes));
      !ok)
    return std::unexpected(std::move(ok.error()));
  return seg;
}

// ---------------------------------------------------------------- handle

MpmcRing& MpmcRing::operator=(MpmcRing&& other) noexcept {
  if (this != &other) {
    attachment_.detach();  // writes the slot: before segment_ unmaps the header
    segment_ = std::move(other.segment_);
    attachment_ = std::move(other.attachment_);
    v_ = std::exchange(other.v_, mpmc::View{});
    intent_ = std::exchange(other.intent_, nullptr);
    slot_ = other.slot_;
    reserved_pos_ = other.reserved_pos_;
    peeked_pos_ = other.peeked_pos_;
    reserved_ = std::exchange(other.reserved_, false);
    peeked_ = std::exchange(other.peeked_, false);
    wake_consumers_ = other.wake_consumers_;
    wake_producers_ = other.wake_producers_;
    stuck_ = other.stuck_;
    repair_hook_ = std::exchange(other.repair_hook_, nullptr);
    repair_context_ = std::exchange(other.repair_context_, nullptr);
    repair_tag_ = other.repair_tag_;
    guard_ = std::move(other.guard_);
  }
  return *this;
}

Result<MpmcRing> MpmcRing::bind(Segment segment, const RoleSpec& role) {
  std::string why;
  auto v = mpmc::view(segment, &why);
  if (!v) return fail(Errc::Corrupt, shm::detail::format("{}: {}", segment.path(), why));
  auto attachment = segment.attach(role);
  if (!attachment) return std::unexpected(attachment.error());
  MpmcRing r;
  r.segment_ = std::move(segment);
  r.attachment_ = std::move(*attachment);
  r.v_ = *v;
  const std::size_t slot = r.attachment_.slot();
  r.intent_ = &r.v_.control->intents[slot];
  r.slot_ = static_cast<std::uint32_t>(slot);
  // The slot's previous holder (if it died) may have left a cell held: we own
  // its lock now, so it is provably dead. Repair before reusing its intents.
  (void)mpmc::repair_slots(r.segment_, r.v_, slot, slot);
  // Relaxed: the next claim's CAS ([mpmc.T]/[mpmc.H]) publishes whatever intent follows.
  r.intent_->push.store(mpmc::kNoIntent, std::memory_order_relaxed);
  r.intent_->pop.store(mpmc::kNoIntent, std::memory_order_relaxed);
  // And whatever other dead handles left behind.
  (void)mpmc::repair_slots(r.segment_, r.v_);
  return r;
}

Result<void> mpmc::check_adopted(const Segment& seg) {
  mpmc::ParamBlock storage{};
  if (auto ok = shm::detail::check_kind(seg, mpmc::kind_spec(MpmcParams{}, storage)); !ok)
    return ok;
  mpmc::ParamBlock found{};
  std::memcpy(&found, seg.params().data(), sizeof found);
  if (auto ok = mpmc::validate(MpmcParams{found.capacity, found.slot_bytes}); !ok) return ok;
  return shm::detail::check_total_size(
      seg, mpmc::data_size_for(found.capacity, found.slot_bytes),
      shm::detail::format("capacity {} x slot size {} needs", found.capacity, found.slot_bytes));
}

Result<MpmcRing> MpmcRing::adopt(Result<Segment> seg, const RoleSpec& role) {
  if (!seg) return std::unexpected(std::move(seg.error()));
  if (!seg->writable())
    return fail(
        Errc::InvalidArgument,
        shm::detail::format("mpmc ring '{}': a handle needs a writable mapping", seg->name()));
  return bind(std::move(*seg), role);
}

Result<MpmcRing> MpmcRing::attach_checked(Segment segment, const RoleSpec& role) {
  if (auto ok = mpmc::check_adopted(segment); !ok) return std::unexpected(ok.error());
  return adopt(std::move(segment), role);
}

Result<MpmcRing> MpmcRing::create(std::string_view name, const MpmcParams& params,
                                  const CreateOptions& options) {
  return adopt(create_mpmc_ring(name, params, options), mpmc::kPeerRole);
}

Result<MpmcRing> MpmcRing::open(std::string_view name, const MpmcParams& expected,
                                const OpenOptions& options) {
  return adopt(open_mpmc_ring(name, expected, options), mpmc::kPeerRole);
}

Result<MpmcRing> MpmcRing::attach(Segment segment) {
  return attach_checked(std::move(segment), mpmc::kPeerRole);
}

Result<MpmcProducer> MpmcProducer::create(std::string_view name, const MpmcParams& params,
                                          const CreateOptions& options) {
  auto r = MpmcRing::adopt(create_mpmc_ring(name, params, options), mpmc::kProducerRole);
  if (!r) return std::unexpected(std::move(r.error()));
  return MpmcProducer(std::move(*r));
}

Result<MpmcProducer> MpmcProducer::open(std::string_view name, const MpmcParams& expected,
                                        const OpenOptions& options) {
  auto r = MpmcRing::adopt(open_mpmc_ring(name, expected, options), mpmc::kProducerRole);
  if (!r) return std::unexpected(std::move(r.error()));
  return MpmcProducer(std::move(*r));
}

Result<MpmcProducer> MpmcProducer::attach(Segment segment) {
  auto r = MpmcRing::attach_checked(std::move(segment), mpmc::kProducerRole);
  if (!r) return std::unexpected(std::move(r.error()));
  return MpmcProducer(std::move(*r));
}

Result<MpmcConsumer> MpmcConsumer::create(std::string_view name, const MpmcParams& params,
                                          const CreateOptions& options) {
  auto r = MpmcRing::adopt(create_mpmc_ring(name, params, options), mpmc::kConsumerRole);
  if (!r) return std::unexpected(std::move(r.error()));
  return MpmcConsumer(std::move(*r));
}

Result<MpmcConsumer> MpmcConsumer::open(std::string_view name, const MpmcParams& expected,
                                        const OpenOptions& options) {
  auto r = MpmcRing::adopt(open_mpmc_ring(name, expected, options), mpmc::kConsumerRole);
  if (!r) return std::unexpected(std::move(r.error()));
  return MpmcConsumer(std::move(*r));
}

Result<MpmcConsumer> MpmcConsumer::attach(Segment segment) {
  auto r = MpmcRing::attach_checked(std::move(segment), mpmc::kConsumerRole);
  if (!r) return std::unexpected(std::move(r.error()));
  return MpmcConsumer(std::move(*r));
}

std::uint64_t MpmcRing::size_hint() const noexcept {
  // Relaxed: a hint, no data is read on its strength.
  const std::uint64_t h = v_.control->consumer.head.load(std::memory_order_relaxed);
  const std::uint64_t t = v_.control->producer.tail.load(std::memory_order_relaxed);
  return t > h ? t - h : 0;
}

MpmcSnapshot MpmcRing::snapshot() const noexcept {
  const mpmc::Control& c = *v_.control;
  MpmcSnapshot s;
  s.ring_cells = v_.capacity;
  s.slot_bytes = v_.slot_bytes;
  // Relaxed: observed values and counters; nothing is read on their strength.
  s.head = c.consumer.head.load(std::memory_order_relaxed);
  s.tail = c.producer.tail.load(std::memory_order_relaxed);
  s.depth = s.tail > s.head ? s.tail - s.head : 0;
  s.orphans = c.consumer.orphans.load(std::memory_order_relaxed);
  s.abandoned_pushes = c.stats.abandoned_pushes.load(std::memory_order_relaxed);
  s.lost_pops = c.stats.lost_pops.load(std::memory_order_relaxed);
  s.tombstones_skipped = c.stats.tombstones_skipped.load(std::memory_order_relaxed);
  s.cancelled_pushes = c.stats.cancelled_pushes.load(std::memory_order_relaxed);
  s.parks = c.stats.parks.load(std::memory_order_relaxed);
  s.wakeups = c.stats.wakeups.load(std::memory_order_relaxed);
  s.adopted = c.stats.adopted.load(std::memory_order_relaxed);
  return s;
}

bool MpmcRing::has_claimed_items() const noexcept {
  // [fanout.C] seq_cst: the caller's preceding seq_cst RMW (a bitmap clear) and this
  // load order against a producer's [mpmc.T] + its seq_cst bitmap load.
  const std::uint64_t t = v_.control->producer.tail.load(std::memory_order_seq_cst);
  const std::uint64_t h = v_.control->consumer.head.load(
      std::memory_order_acquire);  // a later head only hides consumed items
  // Acquire: pairs with repair's release increment (an orphan is an item too).
  return t > h || v_.control->consumer.orphans.load(std::memory_order_acquire) != 0;
}

void MpmcRing::cancel() noexcept {
  const detail::EndpointGuard::Scope scope(guard_, detail::kMpmcGuardName);
  assert(reserved_ && "cancel() without try_reserve()");
  mpmc::Cell& c = v_.cell(reserved_pos_);
  c.length.store(0, std::memory_order_relaxed);  // published by [mpmc.S] below
  // [mpmc.S] release: publishes a tombstone; pairs with the consumer's [mpmc.S'].
  c.seq.store((reserved_pos_ + 1) | mpmc::kTombstone, std::memory_order_release);
  v_.control->stats.cancelled_pushes.fetch_add(1, std::memory_order_relaxed);  // statistics only
  reserved_ = false;
  if (wake_consumers_) wake_consumers();
}

std::unexpected<Error> MpmcRing::corrupt_cell(std::uint64_t pos, std::uint64_t seq,
                                              std::string_view expected) const {
  return fail(
      Errc::Corrupt,
      // Relaxed loads: values for the message only.
      shm::detail::format("{}: cell {} (position {}): sequence {:#x} is impossible; expected {} "
                          "(head {}, tail {}, capacity {})",
                          segment_.path(), pos & v_.mask, pos, seq, expected,
                          v_.control->consumer.head.load(std::memory_order_relaxed),
                          v_.control->producer.tail.load(std::memory_order_relaxed), v_.capacity));
}

std::unexpected<Error> MpmcRing::corrupt_length(std::uint64_t pos, std::uint32_t len) const {
  return fail(
      Errc::Corrupt,
      shm::detail::format("{}: cell {} (position {}): payload length {} exceeds the slot size {}",
                          segment_.path(), pos & v_.mask, pos, len, v_.slot_bytes));
}

std::unexpected<Error> MpmcRing::too_small(std::uint32_t len, std::size_t room) const {
  return fail(Errc::TooLarge,
              shm::detail::format("item of {} bytes does not fit the {}-byte buffer", len, room));
}

std::unexpected<Error> MpmcRing::too_large(std::size_t n) const {
  return fail(Errc::TooLarge,
              shm::detail::format("payload of {} bytes exceeds the ring's slot size of {} bytes", n,
                                  v_.slot_bytes));
}

Result<std::optional<std::uint64_t>> MpmcRing::push_slow(std::uint64_t pos, std::uint64_t seq) {
  const std::uint64_t cap = v_.capacity;
  const bool tomb = (seq & mpmc::kTombstone) != 0;
  const std::uint64_t s = seq & ~mpmc::kTombstone;
  // Every state of cell (pos & mask) is x or x+1 (tombstone: only x+1) for an
  // x congruent to its index.
  const std::uint64_t residue = (s - pos) & v_.mask;
  if (residue > 1 || (tomb && residue != 1))
    return corrupt_cell(pos, seq, "a value congruent to the cell index (or +1)");
  if (pos >= cap && seq == ((pos - cap + 1) | mpmc::kOrphan))
    return std::optional<std::uint64_t>{};  // the previous lap's kept item awaits adoption: full
  if (pos >= cap) {
    const std::uint64_t prev = pos - cap;
    if (seq == prev) {  // the previous lap's push is still in flight (or its producer died)
      note_stuck(mpmc::Side::Push, prev);
      return std::optional<std::uint64_t>{};
    }
    if (s == prev + 1) {  // the previous lap's item is not released yet: full
      // [H''] acquire: a claimed-but-unreleased cell may be held by a dead consumer.
      if (v_.control->consumer.head.load(std::memory_order_acquire) > prev)
        note_stuck(mpmc::Side::Pop, prev);
      return std::optional<std::uint64_t>{};
    }
  }
  if (s > pos) {
    // Someone claimed `pos` (its seq store happens after its tail CAS, which
    // [mpmc.R']/[mpmc.S'] made visible): a fresh tail must be past it.
    const std::uint64_t t = v_.control->producer.tail.load(std::memory_order_acquire);  // [mpmc.T']
    if (t > pos) return std::optional<std::uint64_t>{t};
    return corrupt_cell(pos, seq, shm::detail::format("at most {} while tail is {}", pos, t));
  }
  return corrupt_cell(
      pos, seq,
      shm::detail::format("{} (free) or {}..{} (previous lap)", pos, pos >= cap ? pos - cap : 0,
                          pos >= cap ? pos - cap + 1 : 0));
}

Result<std::optional<std::uint64_t>> MpmcRing::pop_slow(std::uint64_t pos, std::uint64_t seq) {
  const std::uint64_t cap = v_.capacity;
  auto& head = v_.control->consumer.head;
  const bool tomb = (seq & mpmc::kTombstone) != 0;
  const std::uint64_t s = seq & ~mpmc::kTombstone;
  const std::uint64_t residue = (s - pos) & v_.mask;
  if (residue > 1 || (tomb && residue != 1))
    return corrupt_cell(pos, seq, "a value congruent to the cell index (or +1)");
  if (pos >= cap && seq == ((pos - cap + 1) | mpmc::kOrphan))
    return std::optional<std::uint64_t>{};  // an orphan of the previous lap: nothing at `pos` yet
  if (tomb && s == pos + 1) {
    // A tombstone: claim it like an item, release it, move on.
    intent_->pop.store(pos + 1, std::memory_order_relaxed);  // published by [mpmc.H]
    std::uint64_t expected = pos;
    if (head.compare_exchange_strong(expected, pos + 1, std::memory_order_seq_cst,
                                     std::memory_order_acquire)) {                   // [mpmc.H]
      const bool waiting = v_.control->waiters.producers_waiting.any();              // [mpmc.W1]
      v_.cell(pos).seq.store(pos + cap, std::memory_order_release);                  // [mpmc.R]
      v_.control->stats.tombstones_skipped.fetch_add(1, std::memory_order_relaxed);  // statistics
      if (waiting) wake_producers();
      return std::optional<std::uint64_t>{pos + 1};
    }
    intent_->pop.store(mpmc::kNoIntent, std::memory_order_relaxed);  // not ours after all
    return std::optional<std::uint64_t>{expected};
  }
  if (!tomb && s == pos) {  // not published yet
    // [T''] acquire: tail past pos means a producer claimed it and is mid-push (or died).
    if (v_.control->producer.tail.load(std::memory_order_acquire) > pos)
      note_stuck(mpmc::Side::Push, pos);
    return std::optional<std::uint64_t>{};
  }
  if (pos >= cap && s == pos - cap + 1) {
    // The previous lap's item (or tombstone) is claimed by a consumer that has
    // not released it yet: nothing can be at `pos`.
    note_stuck(mpmc::Side::Pop, pos - cap);
    return std::optional<std::uint64_t>{};
  }
  if (s > pos + 1) {
    // Released (or re-filled) after a consumer claimed `pos`: a fresh head is past it.
    const std::uint64_t h = head.load(std::memory_order_acquire);  // [mpmc.H']
    if (h > pos) return std::optional<std::uint64_t>{h};
    return corrupt_cell(pos, seq, shm::detail::format("at most {} while head is {}", pos + 1, h));
  }
  return corrupt_cell(pos, seq,
                      shm::detail::format("{} (published), {} (not yet) or {} (previous lap)",
                                          pos + 1, pos, pos >= cap ? pos - cap + 1 : 0));
}

Result<std::optional<std::uint32_t>> MpmcRing::adopt_orphan(std::size_t room) {
  auto& ctl = *v_.control;
  // [mpmc.H'] acquire. An orphan holds its cell, so producers cannot pass it:
  // it lies in [head - capacity, head).
  const std::uint64_t head = ctl.consumer.head.load(std::memory_order_acquire);
  const std::uint64_t lo = head >= v_.capacity ? head - v_.capacity : 0;
  for (std::uint64_t q = lo; q < head; ++q) {
    mpmc::Cell& c = v_.cell(q);
    std::uint64_t seq = c.seq.load(std::memory_order_acquire);  // pairs with [mpmc.O]
    if (seq != ((q + 1) | mpmc::kOrphan)) continue;
    const std::uint32_t len = c.length.load(std::memory_order_relaxed);  // ordered by the acquire
    if (len > v_.slot_bytes) return corrupt_length(q, len);
    if (len > room) return too_small(len, room);
    intent_->pop.store((q + 1) | mpmc::kKeepIntent,
                       std::memory_order_relaxed);  // published by [mpmc.A]
    // [mpmc.A] acq_rel: adopts the orphan (back to "published, claimed"); its
    // release publishes our intent to a repair that reads this seq (acquire).
    if (c.seq.compare_exchange_strong(seq, q + 1, std::memory_order_acq_rel,
                                      std::memory_order_relaxed)) {
      ctl.consumer.orphans.fetch_sub(1, std::memory_order_relaxed);  // a hint count
      ctl.stats.adopted.fetch_add(1, std::memory_order_relaxed);     // statistics only
      // [mpmc.W1] seq_cst: as in claim_pop(), whether a producer waits for this cell.
      wake_producers_ = ctl.waiters.producers_waiting.any();
      peeked_pos_ = q;
      peeked_ = true;
      return std::optional<std::uint32_t>{len};
    }
    intent_->pop.store(mpmc::kNoIntent, std::memory_order_relaxed);  // someone else adopted it
  }
  return std::optional<std::uint32_t>{};
}

void MpmcRing::wake_consumers() noexcept {
  auto& w = v_.control->waiters;
  // [mpmc.G] release: pairs with the waiter's [mpmc.G'] load of the signal.
  w.data_signal.fetch_add(1, std::memory_order_release);
  (void)futex_wake(w.data_signal, 1);
  v_.control->stats.wakeups.fetch_add(1, std::memory_order_relaxed);  // statistics only
}

void MpmcRing::wake_producers() noexcept {
  auto& w = v_.control->waiters;
  w.space_signal.fetch_add(1, std::memory_order_release);  // [mpmc.G]
  (void)futex_wake(w.space_signal, 1);
  v_.control->stats.wakeups.fetch_add(1, std::memory_order_relaxed);  // statistics only
}

template <class Attempt, class Busy>
Result<bool> MpmcRing::wait(std::atomic<std::uint32_t>& signal, mpmc::ParkedSet& waiting,
                            std::chrono::steady_clock::time_point deadline, Attempt&& attempt,
                            Busy&& busy) {
  v_.control->stats.parks.fetch_add(1, std::memory_order_relaxed);  // statistics only
  Result<bool> done = false;
  // [mpmc.G'] (the acquire load of the signal in detail::park) pairs with the
  // waker's [mpmc.G]. [mpmc.W] (the announcement) is the Dekker pair of the other side's
  // [mpmc.T]/[mpmc.H] + [mpmc.W1]; [mpmc.W2] is the seq_cst load inside busy(): a claim ordered
  // before [mpmc.W] shows there, one ordered after it sees our bit.
  mpmc::internal::park_announced(
      signal, waiting, slot_, deadline,
      [&] {
        done = attempt();
        return !done || *done;
      },
      busy, [&] { attachment_.heartbeat(); });
  return done;
}

Result<bool> MpmcRing::push(std::span<const std::byte> payload, std::chrono::nanoseconds timeout) {
  const detail::EndpointGuard::Scope scope(guard_, detail::kMpmcGuardName);
  if (payload.size() > v_.slot_bytes) return too_large(payload.size());
  const auto deadline = ::shm::detail::deadline_after(timeout);
  const auto done = [](const Result<bool>& r) { return !r || *r; };
  if (auto r = detail::spin(
          mpmc::internal::kSpins, [&] { return push_unguarded(payload); }, done))
    return std::move(*r);
  auto& w = v_.control->waiters;
  return wait(
      w.space_signal, w.producers_waiting, deadline, [&] { return push_unguarded(payload); },
      [&] {
        // [mpmc.W2] seq_cst: see wait(). A consumer has claimed the cell we wait for.
        const std::uint64_t h = v_.control->consumer.head.load(std::memory_order_seq_cst);
        // Relaxed: only chooses between polling and sleeping.
        return h + v_.capacity > v_.control->producer.tail.load(std::memory_order_relaxed);
      });
}

Result<std::optional<std::size_t>> MpmcRing::pop(std::span<std::byte> out,
                                                 std::chrono::nanoseconds timeout) {
  const detail::EndpointGuard::Scope scope(guard_, detail::kMpmcGuardName);
  const auto deadline = ::shm::detail::deadline_after(timeout);
  const auto done = [](const Result<std::optional<std::size_t>>& r) { return !r || *r; };
  if (auto r = detail::spin(
          mpmc::internal::kSpins, [&] { return pop_unguarded(out); }, done))
    return std::move(*r);
  std::optional<std::size_t> got;
  auto& w = v_.control->waiters;
  auto r = wait(
      w.data_signal, w.consumers_waiting, deadline,
      [&]() -> Result<bool> {
        auto p = pop_unguarded(out);
        if (!p) return std::unexpected(std::move(p.error()));
        got = *p;
        return got.has_value();
      },
      [&] {
        // [mpmc.W2] seq_cst: see wait(). A producer has claimed a position past head.
        const std::uint64_t t = v_.control->producer.tail.load(std::memory_order_seq_cst);
        // Relaxed: only chooses between polling and sleeping.
        return t > v_.control->consumer.head.load(std::memory_order_relaxed);
      });
  if (!r) return std::unexpected(std::move(r.error()));
  return got;
}

}  // namespace shm
