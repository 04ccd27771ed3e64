#include "shm/topic/topic.hpp"

#include "shm/platform/clock.hpp"
#include "shm/platform/cpu_relax.hpp"
#include "shm/platform/futex.hpp"

#include "format/format.hpp"
#include "segment/kind_spec.hpp"
#include "segment/size_check.hpp"
#include "topic/internal.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace shm {
namespace topic {
namespace {

using detail::ld;
using detail::st;

// Polls of a blocking call before it parks.
constexpr int kSpins = 4096;
// The longest single sleep of a parked subscriber (bounds a wait whose wake
// a dead publisher lost after its publish).
constexpr std::uint64_t kMaxParkNs = 1'000'000'000;
// The longest single sleep of a parked publisher, and how often it repairs
// while it waits: a dead subscriber it waits for (Block, or holding chunks)
// is dropped within about this long.
constexpr std::uint64_t kPublisherParkNs = 250'000'000;

bool valid_block(const ParamBlock& p) noexcept {
  return p.max_sample_bytes >= 1 && p.max_sample_bytes <= kMaxSampleBytes && p.chunks >= 1 &&
         p.chunks <= kMaxChunks && p.queue_depth >= 1 && p.queue_depth <= kMaxQueueDepth &&
         p.history <= p.queue_depth && p.max_held >= 1 && p.max_held <= kMaxHeld &&
         p.stride == round_up(p.max_sample_bytes, kChunkAlign) &&
         p.chunks * p.stride <= kMaxPoolBytes;
}

[[noreturn]] void contract(const char* what) noexcept {
  std::fprintf(stderr, "libshm: topic: %s\n", what);
  std::abort();
}

// A record of the kind's references, read under the mutex.
[[nodiscard]] Result<std::uint32_t> chunk_of(const View& v, std::uint32_t entry,
                                             std::string_view where) {
  if (entry == 0 || entry > v.p.chunks)
    return fail(Errc::Corrupt,
                shm::detail::format("topic: {} names chunk entry {}, outside [1, {}]", where, entry,
                                    v.p.chunks));
  return entry - 1;
}

// Drops one reference of chunk `c`; the last one returns it to the free stack.
[[nodiscard]] Result<void> unref(const View& v, std::uint32_t c) {
  ChunkMeta& m = v.meta[c];
  const std::uint32_t refs = ld(m.refs);
  if (refs == 0)
    return fail(Errc::Corrupt,
                shm::detail::format("topic: chunk {} released with no reference left", c));
  st(m.refs, refs - 1);
  if (refs == 1) {
    const std::uint32_t n = ld(v.control->pool.free_count);
    if (n >= v.p.chunks)
      return fail(
          Errc::Corrupt,
          shm::detail::format("topic: free stack full ({} of {}) at chunk {}", n, v.p.chunks, c));
    st(v.free_stack[n], c);
    st(v.control->pool.free_count, n + 1);
  }
  return {};
}

void ref(const View& v, std::uint32_t c) noexcept {
  st(v.meta[c].refs, ld(v.meta[c].refs) + 1);
}

// The subscriber records a publish looks at, under the mutex: records_used,
// capped (a damaged word costs a full scan, never a record out of range).
std::size_t records_in_use(const View& v) noexcept {
  return std::min<std::size_t>(ld(v.control->pool.records_used), kSubscribers);
}

// try_publish's look before the mutex: whether an active Block subscriber's
// queue is full. Without the mutex (relaxed loads of the record words: a
// stale answer is a Full the caller retries, or a look under the mutex that
// decides); head is read before tail, which only this publisher advances, so
// the difference is never negative for a record it did not see re-attached.
bool block_queue_full(const View& v) noexcept {
  const std::size_t records = std::min<std::size_t>(
      v.control->pool.records_used.load(std::memory_order_relaxed), kSubscribers);
  for (std::size_t i = 0; i < records; ++i) {
    const SubscriberRecord& r = v.record(i);
    if (r.active.load(std::memory_order_relaxed) != 1 ||
        r.overflow.load(std::memory_order_relaxed) !=
            static_cast<std::uint32_t>(TopicOverflow::Block))
      continue;
    // [topic.Q] seq_cst, as the subscriber's store of head.
    const std::uint64_t head = r.head.load(std::memory_order_seq_cst);
    if (r.tail.load(std::memory_order_seq_cst) - head >= v.p.queue_depth) return true;
  }
  return false;
}

// Whether an attached slot of generation `generation` is the live holder.
bool holder_valid(const std::vector<SlotInfo>& slots, std::size_t slot, std::uint32_t generation,
                  std::optional<std::size_t> assume_dead) {
  if (assume_dead && *assume_dead == slot) return false;
  const SlotInfo& s = slots[slot];
  return s.state == SlotState::Attached && s.generation == generation &&
         s.liveness == Liveness::Alive;
}

void wake_subscribers(const View& v) noexcept {
  auto& w = v.control->waiters;
  // [topic.W] seq_cst: Dekker pair with a subscriber's announce (+1) and its
  // seq_cst re-load of `tail`; our seq_cst tail store came first.
  if (w.subscribers_parked.load(std::memory_order_seq_cst) == 0) return;
  // release: a waiter that reads the new value before sleeping sees our tail.
  w.data_signal.fetch_add(1, std::memory_order_release);
  (void)futex_wake_all(w.data_signal);
}

void wake_publisher(const View& v) noexcept {
  auto& w = v.control->waiters;
  // [topic.W] seq_cst: Dekker pair with the publisher's announce and its
  // re-check under the mutex (which follows our unlock, or sees our change).
  if (w.publisher_parked.load(std::memory_order_seq_cst) == 0) return;
  w.space_signal.fetch_add(1, std::memory_order_release);  // as in wake_subscribers
  (void)futex_wake_all(w.space_signal);
}

}  // namespace

Result<void> validate(const TopicParams& p) {
  auto bad = [](std::string what) { return fail(Errc::InvalidArgument, "topic " + what); };
  if (p.max_sample_bytes < 1 || p.max_sample_bytes > kMaxSampleBytes)
    return bad(shm::detail::format("max_sample_bytes {} must be in [1, {}]", p.max_sample_bytes,
                                   kMaxSampleBytes));
  if (p.chunks < 1 || p.chunks > kMaxChunks)
    return bad(shm::detail::format("chunks {} must be in [1, {}]", p.chunks, kMaxChunks));
  if (p.queue_depth < 1 || p.queue_depth > kMaxQueueDepth)
    return bad(
        shm::detail::format("queue_depth {} must be in [1, {}]", p.queue_depth, kMaxQueueDepth));
  if (p.history > p.queue_depth)
    return bad(
        shm::detail::format("history {} must be in [0, queue_depth {}]", p.history, p.queue_depth));
  if (p.max_held < 1 || p.max_held > kMaxHeld)
    return bad(shm::detail::format("max_held {} must be in [1, {}]", p.max_held, kMaxHeld));
  const std::uint64_t pool = p.chunks * round_up(p.max_sample_bytes, kChunkAlign);
  if (pool > kMaxPoolBytes)
    return bad(shm::detail::format("pool of {} chunks of {} bytes needs {} bytes, limit {}",
                                   p.chunks, p.max_sample_bytes, pool, kMaxPoolBytes));
  return {};
}

ParamBlock block_for(const TopicParams& p) noexcept {
  return ParamBlock{
      p.max_sample_bytes, p.chunks,
      p.queue_depth,      p.history,
      p.max_held,         p.max_sample_bytes != 0 ? round_up(p.max_sample_bytes, kChunkAlign) : 0};
}

KindSpec kind_spec(const TopicParams& params, ParamBlock& storage) {
  storage = block_for(params);
  const bool complete = params.max_sample_bytes != 0 && params.chunks != 0 &&
                        params.queue_depth != 0 && params.max_held != 0;
  return shm::detail::block_kind_spec(
      kTopicKind, "topic", kFingerprint, storage, complete ? geometry_for(storage).size : 0,
      [](const ParamBlock& f) -> std::string {
        if (valid_block(f)) return {};
        return shm::detail::format(
            "geometry: segment has max_sample_bytes {}, chunks {}, queue_depth {}, history {}, "
            "max_held {}, stride {}; not a valid topic",
            f.max_sample_bytes, f.chunks, f.queue_depth, f.history, f.max_held, f.stride);
      },
      [complete](const ParamBlock& f, const ParamBlock& e, shm::detail::FieldCheck& check) {
        check.field("max_sample_bytes", f.max_sample_bytes, e.max_sample_bytes)
            .field("chunks", f.chunks, e.chunks)
            .field("queue_depth", f.queue_depth, e.queue_depth)
            .field_if(complete, "history", f.history, e.history)
            .field("max_held", f.max_held, e.max_held);
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
  if (!valid_block(p)) {
    if (why)
      *why = shm::detail::format(
          "max_sample_bytes {}, chunks {}, queue_depth {}, history {}, max_held {}, stride {} are "
          "not a valid geometry",
          p.max_sample_bytes, p.chunks, p.queue_depth, p.history, p.max_held, p.stride);
    return std::nullopt;
  }
  const Geometry g = geometry_for(p);
  if (segment.data().size() < g.size) {
    if (why)
      *why = shm::detail::format("data area has {} bytes, the geometry needs {}",
                                 segment.data().size(), g.size);
    return std::nullopt;
  }
  std::byte* base = segment.data().data();
  View v;
  v.control = reinterpret_cast<Control*>(base);
  v.meta = reinterpret_cast<ChunkMeta*>(base + g.meta);
  v.free_stack = reinterpret_cast<std::atomic<std::uint32_t>*>(base + g.free_stack);
  v.history = reinterpret_cast<std::atomic<std::uint32_t>*>(base + g.history);
  v.events = reinterpret_cast<Event*>(base + g.events);
  v.records = base + g.records;
  v.payload = base + g.payload;
  v.p = p;
  v.g = g;
  return v;
}

void record_event_locked(const View& v, EventKind kind, std::uint64_t key, std::uint64_t count) {
  using shm::topic::detail::st;
  Control& ctl = *v.control;
  const std::uint64_t n = ld(ctl.pool.events);
  Event& e = v.events[n % kEventRing];
  // release (the number, both times): a reader that sees number n + 1 sees
  // the fields stored before it; 0 first, so that a reader racing the
  // rewrite of the slot sees its number change and drops what it read.
  st(e.number, 0, std::memory_order_release);
  st(e.time_ns, realtime_ns());
  st(e.key, key);
  st(e.count, count);
  st(e.kind, static_cast<std::uint32_t>(kind));
  st(e.number, n + 1, std::memory_order_release);
  st(ctl.pool.events, n + 1, std::memory_order_release);
}

std::string_view to_string(EventKind k) noexcept {
  switch (k) {
    case EventKind::PublisherGone:
      return "publisher_gone";
    case EventKind::SubscriberGone:
      return "subscriber_gone";
    case EventKind::Repaired:
      return "repaired";
  }
  return "unknown";
}

std::vector<EventRecord> read_events(const View& v) {
  std::vector<EventRecord> out;
  // acquire: pairs with the release store of pool.events.
  const std::uint64_t end = v.control->pool.events.load(std::memory_order_acquire);
  const std::uint64_t begin = end > kEventRing ? end - kEventRing : 0;
  for (std::uint64_t n = begin; n < end; ++n) {
    const Event& e = v.events[n % kEventRing];
    // acquire: pairs with the record's release stores of `number`.
    if (e.number.load(std::memory_order_acquire) != n + 1) continue;  // overwritten since
    EventRecord t;
    t.number = n;
    t.time_ns = e.time_ns.load(std::memory_order_relaxed);
    t.key = e.key.load(std::memory_order_relaxed);
    t.count = e.count.load(std::memory_order_relaxed);
    t.kind = static_cast<EventKind>(e.kind.load(std::memory_order_relaxed));
    // The fields are read before the number again: the number is still
    // n + 1 only when no rewrite of the slot began meanwhile.
    std::atomic_thread_fence(std::memory_order_acquire);
    if (e.number.load(std::memory_order_relaxed) != n + 1) continue;
    out.push_back(t);
  }
  return out;
}

Result<RepairReport> repair_locked(const Segment& segment, const View& v,
                                   std::optional<std::size_t> assume_dead) {
  RepairReport report;
  Control& ctl = *v.control;
  // Indexed by slot (Segment::slots() leaves out free ones).
  std::vector<SlotInfo> slots(kMaxAttachments,
                              SlotInfo{0, SlotState::Free, 0, 0, 0, 0, 0, 0, Liveness::Free});
  for (const SlotInfo& s : segment.slots()) slots[s.index] = s;
  // 1. Drop the records of holders that are gone.
  auto& pub = ctl.publisher;
  if (ld(pub.active) == 1 &&
      !holder_valid(slots, kPublisherRole.id, ld(pub.generation), assume_dead)) {
    std::uint32_t loans = 0;
    for (auto& l : pub.loans) {
      if (ld(l) != 0) ++loans;
      l.store(0, std::memory_order_relaxed);  // [topic.M]
    }
    pub.active.store(0, std::memory_order_relaxed);  // [topic.M]
    // A dead parked publisher leaves its announcement: take it back.
    ctl.waiters.publisher_parked.store(0, std::memory_order_seq_cst);
    ++report.dropped_records;
    report.actions.push_back(shm::detail::format(
        "publisher (slot {}, pid {}, incarnation {}): gone; its {} loaned chunk(s) return to the "
        "pool",
        kPublisherRole.id, slots[kPublisherRole.id].pid, ld(pub.incarnation), loans));
    record_event_locked(v, EventKind::PublisherGone, ld(pub.incarnation), loans);
  }
  for (std::size_t i = 0; i < kSubscribers; ++i) {
    SubscriberRecord& r = v.record(i);
    if (ld(r.active) != 1) continue;
    const std::size_t slot = kExclusiveSlots + i;
    if (holder_valid(slots, slot, ld(r.generation), assume_dead)) continue;
    std::uint32_t held = 0;
    for (std::uint64_t k = 0; k < v.p.max_held; ++k)
      if (ld(v.held(i)[k]) != 0) ++held;
    const std::uint64_t head = ld(r.head), tail = ld(r.tail);
    r.active.store(0, std::memory_order_relaxed);  // [topic.M]
    if (ld(r.parked) != 0) {
      r.parked.store(0, std::memory_order_relaxed);  // [topic.M]
      // seq_cst as every change of the count ([topic.W]).
      ctl.waiters.subscribers_parked.fetch_sub(1, std::memory_order_seq_cst);
    }
    ++report.dropped_records;
    const std::uint64_t queued = tail >= head ? tail - head : 0;
    report.actions.push_back(shm::detail::format(
        "subscriber slot {} (pid {}): gone; its {} queued and {} held sample(s) are released", slot,
        slots[slot].pid, queued, held));
    record_event_locked(v, EventKind::SubscriberGone, slot, queued + held);
  }
  // 2. Recompute what publish scans (records_used) and every chunk's
  // references from the records.
  std::uint32_t used = 0;
  for (std::size_t i = 0; i < kSubscribers; ++i)
    if (ld(v.record(i).active) == 1) used = static_cast<std::uint32_t>(i + 1);
  ctl.pool.records_used.store(used, std::memory_order_relaxed);  // [topic.M]
  for (std::uint64_t c = 0; c < v.p.chunks; ++c) v.meta[c].refs.store(0, std::memory_order_relaxed);
  auto count = [&](std::uint32_t entry, std::string_view where) -> Result<void> {
    auto c = chunk_of(v, entry, where);
    if (!c) return std::unexpected(c.error());
    v.meta[*c].refs.store(ld(v.meta[*c].refs) + 1, std::memory_order_relaxed);  // [topic.M]
    return {};
  };
  if (ld(pub.active) == 1)
    for (auto& l : pub.loans)
      if (const std::uint32_t e = ld(l); e != 0)
        if (auto ok = count(e, "a publisher loan"); !ok) return std::unexpected(ok.error());
  for (std::uint64_t h = 0; h < v.p.history; ++h)
    if (const std::uint32_t e = ld(v.history[h]); e != 0)
      if (auto ok = count(e, "a history entry"); !ok) return std::unexpected(ok.error());
  for (std::size_t i = 0; i < kSubscribers; ++i) {
    SubscriberRecord& r = v.record(i);
    if (ld(r.active) != 1) continue;
    const std::uint64_t head = ld(r.head), tail = ld(r.tail);
    if (tail < head || tail - head > v.p.queue_depth)
      return fail(Errc::Corrupt,
                  shm::detail::format("topic: subscriber slot {} has head {} and tail {}, queue "
                                      "depth {}",
                                      kExclusiveSlots + i, head, tail, v.p.queue_depth));
    for (std::uint64_t pos = head; pos < tail; ++pos)
      if (auto ok = count(ld(v.queue(i)[pos % v.p.queue_depth]), "a queue entry"); !ok)
        return std::unexpected(ok.error());
    for (std::uint64_t k = 0; k < v.p.max_held; ++k)
      if (const std::uint32_t e = ld(v.held(i)[k]); e != 0)
        if (auto ok = count(e, "a held entry"); !ok) return std::unexpected(ok.error());
  }
  // 3. Rebuild the free stack.
  const std::uint32_t before = ld(ctl.pool.free_count);
  std::uint32_t n = 0;
  for (std::uint64_t c = 0; c < v.p.chunks; ++c)
    if (ld(v.meta[c].refs) == 0)
      v.free_stack[n++].store(static_cast<std::uint32_t>(c), std::memory_order_relaxed);
  ctl.pool.free_count.store(n, std::memory_order_relaxed);  // [topic.M]
  report.returned_chunks = n > before ? n - before : 0;
  ctl.lock.repairs.fetch_add(1, std::memory_order_relaxed);  // statistics
  ctl.lock.reclaimed.fetch_add(report.dropped_records, std::memory_order_relaxed);
  return report;
}

namespace {

// What lock() and lock_briefly() do once the mutex answered `r`.
Result<void> locked(const Segment& segment, const View& v, shm::detail::LockResult r) {
  auto& m = v.control->lock.mutex;
  switch (r) {
    case shm::detail::LockResult::Acquired:
      return {};
    case shm::detail::LockResult::OwnerDied: {
      auto repaired = repair_locked(segment, v, std::nullopt);
      if (repaired) record_event_locked(v, EventKind::Repaired, 0, repaired->returned_chunks);
      m.mark_consistent();
      if (!repaired) {
        m.unlock();
        return std::unexpected(std::move(repaired.error()));
      }
      return {};
    }
    case shm::detail::LockResult::Unrecoverable:
      return fail(Errc::Faulted,
                  shm::detail::format("{}: the topic's mutex is unrecoverable", segment.path()));
    case shm::detail::LockResult::DeadOwnerUnregistered:
      return shm::detail::fail_dead_owner(segment.path(), "topic", m);
    case shm::detail::LockResult::Failed:
    case shm::detail::LockResult::Busy:      // try_lock only
    case shm::detail::LockResult::TimedOut:  // lock_for only, answered by lock_briefly
      break;
  }
  return fail(Errc::Corrupt,
              shm::detail::format("{}: the topic's mutex could not be locked", segment.path()));
}

// Polls of a held mutex before the mutex's own wait. Every hold is one
// structural change (well under a microsecond) while the mutex's wait is a
// futex wait, and its holder's unlock then a futex wake: a system call on
// each side, microseconds, on the path of every publish and receive that
// met the other side inside the mutex.
constexpr int kLockSpins = 2048;

// try_lock until the mutex is not Busy or kLockSpins polls passed, reading
// the lock word between tries (a failed try writes the line the holder uses).
shm::detail::LockResult spin_then_try(shm::detail::RobustMutex& m) noexcept {
  int polls = 0;
  for (;;) {
    const shm::detail::LockResult r = m.try_lock();
    if (r != shm::detail::LockResult::Busy || polls >= kLockSpins) return r;
    do {
      shm::detail::cpu_relax();
    } while (++polls < kLockSpins && m.owner_tid() != 0);
  }
}

}  // namespace

Result<void> detail::lock(const Segment& segment, const View& v) {
  auto& m = v.control->lock.mutex;
  const shm::detail::LockResult r = spin_then_try(m);
  return locked(segment, v, r == shm::detail::LockResult::Busy ? m.lock() : r);
}

Result<bool> detail::lock_briefly(const Segment& segment, const View& v) {
  auto& m = v.control->lock.mutex;
  shm::detail::LockResult r = spin_then_try(m);
  if (r == shm::detail::LockResult::Busy) r = m.lock_for(std::chrono::nanoseconds(0));
  if (r == shm::detail::LockResult::TimedOut) return false;
  if (auto ok = locked(segment, v, r); !ok) return std::unexpected(ok.error());
  return true;
}

namespace {

Result<void> check_adopted(const Segment& seg) {
  ParamBlock storage{};
  if (auto ok = shm::detail::check_kind(seg, kind_spec(TopicParams{}, storage)); !ok) return ok;
  std::string why;
  auto v = view(seg, &why);
  if (!v) return fail(Errc::ParamMismatch, shm::detail::format("{}: {}", seg.path(), why));
  return shm::detail::check_total_size(
      seg, v->g.size,
      shm::detail::format("{} chunks of {} bytes, queue depth {}", v->p.chunks,
                          v->p.max_sample_bytes, v->p.queue_depth));
}

// The checks and the attachment every handle's create/open/attach share.
Result<std::unique_ptr<detail::Core>> bind(Result<Segment> seg, const RoleSpec& role) {
  if (!seg) return std::unexpected(std::move(seg.error()));
  if (!seg->writable())
    return fail(Errc::InvalidArgument,
                shm::detail::format("topic '{}': a handle needs a writable mapping", seg->name()));
  if (auto ok = check_adopted(*seg); !ok) return std::unexpected(std::move(ok.error()));
  auto core = std::make_unique<detail::Core>();
  std::string why;
  auto v = view(*seg, &why);
  if (!v) return fail(Errc::Corrupt, shm::detail::format("{}: {}", seg->path(), why));
  auto a = seg->attach(role);
  if (!a) return std::unexpected(std::move(a.error()));
  core->segment = std::move(*seg);
  core->attachment = std::move(*a);
  core->v = *v;
  return core;
}

}  // namespace
}  // namespace topic

// ---------------------------------------------------------------- segments

Result<Segment> create_topic(std::string_view name, const TopicParams& params,
                             const CreateOptions& options) {
  if (auto ok = topic::validate(params); !ok) return std::unexpected(ok.error());
  topic::ParamBlock block{};
  const KindSpec spec = topic::kind_spec(params, block);
  return Segment::create(name, spec, options, [&](std::span<std::byte> data) -> Result<void> {
    auto* ctl = reinterpret_cast<topic::Control*>(data.data());
    if (auto ok = ctl->lock.mutex.init(); !ok) return ok;
    const topic::Geometry g = topic::geometry_for(block);
    auto* free_stack = reinterpret_cast<std::atomic<std::uint32_t>*>(data.data() + g.free_stack);
    // Relaxed: the data area is published by the READY release store of
    // Segment::create; everything else starts zero (no references).
    for (std::uint64_t c = 0; c < params.chunks; ++c)
      free_stack[c].store(static_cast<std::uint32_t>(c), std::memory_order_relaxed);
    ctl->pool.free_count.store(static_cast<std::uint32_t>(params.chunks),
                               std::memory_order_relaxed);
    return {};
  });
}

Result<Segment> open_topic(std::string_view name, const TopicParams& expected,
                           const OpenOptions& options) {
  topic::ParamBlock block{};
  const KindSpec spec = topic::kind_spec(expected, block);
  auto seg = Segment::open(name, spec, options);
  if (!seg) return seg;
  if (auto ok = topic::check_adopted(*seg); !ok) return std::unexpected(std::move(ok.error()));
  return seg;
}

std::string_view to_string(TopicOverflow v) noexcept {
  switch (v) {
    case TopicOverflow::DropOldest:
      return "drop_oldest";
    case TopicOverflow::Block:
      return "block";
  }
  return "unknown";
}

std::string_view to_string(PublishStatus v) noexcept {
  switch (v) {
    case PublishStatus::Published:
      return "published";
    case PublishStatus::Full:
      return "full";
  }
  return "unknown";
}

namespace {

using topic::detail::ld;
using topic::detail::st;

TopicSnapshot read_snapshot(const topic::View& v) noexcept {
  // relaxed throughout: a monitoring sample, read without the mutex.
  const topic::Control& c = *v.control;
  TopicSnapshot s;
  s.published = c.publisher.published.load(std::memory_order_relaxed);
  s.next_seq = c.publisher.next_seq.load(std::memory_order_relaxed);
  s.incarnation = c.publisher.incarnation.load(std::memory_order_relaxed);
  s.publisher_attached = c.publisher.active.load(std::memory_order_relaxed) == 1;
  s.chunks = v.p.chunks;
  s.free_chunks = c.pool.free_count.load(std::memory_order_relaxed);
  s.dropped = c.publisher.dropped.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < topic::kSubscribers; ++i)
    if (v.record(i).active.load(std::memory_order_relaxed) == 1) ++s.subscribers;
  return s;
}

// Gives back the reference a process-local handle (a loan, a held sample)
// holds on `chunk`: under the mutex, the record word `slot_of` names still
// says chunk + 1 (a repair may have taken it back already), so it is cleared
// and the chunk unreferenced; then a publisher waiting for room is woken. A
// forked child's copy gives back nothing (the reference is the parent's); a
// failed lock leaves the record to the repair.
template <class SlotOf>
void give_back(topic::detail::Core& core, std::uint32_t chunk, SlotOf slot_of) noexcept {
  core.outstanding.fetch_sub(1, std::memory_order_relaxed);
  if (core.attachment.copied_by_fork()) return;
  const topic::View& v = core.v;
  if (!topic::detail::lock(core.segment, v)) return;
  std::atomic<std::uint32_t>& slot = slot_of(v, core);
  if (ld(slot) == chunk + 1) {
    st(slot, 0);
    (void)topic::unref(v, chunk);
  }
  topic::detail::unlock(v);
  topic::wake_publisher(v);
}

}  // namespace

// ---------------------------------------------------------------- samples

LoanedSample& LoanedSample::operator=(LoanedSample&& other) noexcept {
  if (this != &other) {
    reset();
    core_ = std::exchange(other.core_, nullptr);
    chunk_ = other.chunk_;
    loan_ = other.loan_;
    bytes_ = std::exchange(other.bytes_, {});
  }
  return *this;
}

void LoanedSample::reset() noexcept {
  topic::detail::Core* core = std::exchange(core_, nullptr);
  bytes_ = {};
  if (core == nullptr) return;
  // A forked child's copy: the loan is the parent's.
  give_back(
      *core, chunk_, [this](const topic::View& v, const topic::detail::Core&) -> auto& {
        return v.control->publisher.loans[loan_];
      });
}

Sample& Sample::operator=(Sample&& other) noexcept {
  if (this != &other) {
    release();
    core_ = std::exchange(other.core_, nullptr);
    chunk_ = other.chunk_;
    held_ = other.held_;
    incarnation_ = other.incarnation_;
    seq_ = other.seq_;
    bytes_ = std::exchange(other.bytes_, {});
  }
  return *this;
}

void Sample::release() noexcept {
  topic::detail::Core* core = std::exchange(core_, nullptr);
  bytes_ = {};
  if (core == nullptr) return;
  // A forked child's copy: the sample is the parent's to release.
  give_back(
      *core, chunk_, [this](const topic::View& v, const topic::detail::Core& c) -> auto& {
        return v.held(c.record)[held_];
      });
}

// ---------------------------------------------------------------- publisher

TopicPublisher::TopicPublisher() noexcept = default;
TopicPublisher::TopicPublisher(TopicPublisher&&) noexcept = default;

TopicPublisher& TopicPublisher::operator=(TopicPublisher&& other) noexcept {
  if (this != &other) {
    TopicPublisher gone(std::move(*this));
    core_ = std::move(other.core_);
  }
  return *this;
}

TopicPublisher::~TopicPublisher() {
  if (!core_) return;
  if (core_->outstanding.load(std::memory_order_relaxed) != 0 &&
      !core_->attachment.copied_by_fork())
    topic::contract("a LoanedSample outlived its TopicPublisher");
  const topic::View& v = core_->v;
  if (!core_->attachment.copied_by_fork() && topic::detail::lock(core_->segment, v)) {
    auto& pub = v.control->publisher;
    if (ld(pub.active) == 1 && ld(pub.generation) == core_->attachment.generation())
      st(pub.active, 0);
    topic::detail::unlock(v);
  }
  core_->attachment.detach();
}

Result<TopicPublisher> TopicPublisher::attach(Segment segment) {
  auto core = topic::bind(std::move(segment), topic::kPublisherRole);
  if (!core) return std::unexpected(std::move(core.error()));
  topic::detail::Core& c = **core;
  c.publisher = true;
  const topic::View& v = c.v;
  if (auto ok = topic::detail::lock(c.segment, v); !ok) return std::unexpected(ok.error());
  // Whatever a dead predecessor (or anybody else dead) left goes back first.
  if (auto r = topic::repair_locked(c.segment, v, std::nullopt); !r) {
    topic::detail::unlock(v);
    return std::unexpected(std::move(r.error()));
  }
  auto& pub = v.control->publisher;
  c.incarnation = ld(pub.incarnation) + 1;
  for (auto& l : pub.loans) st(l, 0);
  st(pub.incarnation, c.incarnation);
  st(pub.generation, c.attachment.generation());
  st(pub.active, 1);
  topic::detail::unlock(v);
  TopicPublisher p;
  p.core_ = std::move(*core);
  return p;
}

Result<TopicPublisher> TopicPublisher::create(std::string_view name, const TopicParams& params,
                                              const CreateOptions& options) {
  auto seg = create_topic(name, params, options);
  if (!seg) return std::unexpected(std::move(seg.error()));
  return attach(std::move(*seg));
}

Result<TopicPublisher> TopicPublisher::open(std::string_view name, const TopicParams& expected,
                                            const OpenOptions& options) {
  auto seg = open_topic(name, expected, options);
  if (!seg) return std::unexpected(std::move(seg.error()));
  return attach(std::move(*seg));
}

Result<std::optional<LoanedSample>> TopicPublisher::try_loan(std::size_t bytes) {
  if (!core_) topic::contract("try_loan on an empty TopicPublisher");
  topic::detail::Core& c = *core_;
  shm::detail::EndpointGuard::Scope scope(c.guard, "a TopicPublisher");
  const topic::View& v = c.v;
  if (bytes > v.p.max_sample_bytes)
    return fail(Errc::TooLarge, shm::detail::format("{}: loan of {} bytes, max_sample_bytes is {}",
                                                    c.segment.path(), bytes, v.p.max_sample_bytes));
  if (c.outstanding.load(std::memory_order_relaxed) >= topic::kMaxLoans)
    return fail(
        Errc::HeldLimit,
        shm::detail::format("{}: the publisher already holds {} loans (the limit); publish "
                            "or drop one first",
                            c.segment.path(), c.outstanding.load(std::memory_order_relaxed)));
  if (auto got = topic::detail::lock_briefly(c.segment, v); !got || !*got) {
    if (!got) return std::unexpected(got.error());
    return std::optional<LoanedSample>{};  // a live holder kept the mutex: nothing now
  }
  auto& pub = v.control->publisher;
  const std::uint32_t n = ld(v.control->pool.free_count);
  std::size_t k = 0;
  while (k < topic::kMaxLoans && ld(pub.loans[k]) != 0) ++k;
  if (n == 0 || k == topic::kMaxLoans || n > v.p.chunks) {
    topic::detail::unlock(v);
    if (n > v.p.chunks)
      return fail(Errc::Corrupt, shm::detail::format("{}: free count {} exceeds {} chunks",
                                                     c.segment.path(), n, v.p.chunks));
    if (k == topic::kMaxLoans)
      return fail(Errc::HeldLimit,
                  shm::detail::format("{}: every loan entry is in use", c.segment.path()));
    return std::optional<LoanedSample>{};  // the pool is empty: back-pressure
  }
  const std::uint32_t chunk = ld(v.free_stack[n - 1]);
  if (chunk >= v.p.chunks || ld(v.meta[chunk].refs) != 0) {
    topic::detail::unlock(v);
    return fail(Errc::Corrupt, shm::detail::format("{}: free stack entry {} names chunk {} ({} "
                                                   "chunks) with references",
                                                   c.segment.path(), n - 1, chunk, v.p.chunks));
  }
  st(v.control->pool.free_count, n - 1);
  st(v.meta[chunk].refs, 1);
  st(v.meta[chunk].length, bytes);
  st(pub.loans[k], chunk + 1);
  topic::detail::unlock(v);
  c.outstanding.fetch_add(1, std::memory_order_relaxed);
  LoanedSample s;
  s.core_ = &c;
  s.chunk_ = chunk;
  s.loan_ = static_cast<std::uint32_t>(k);
  s.bytes_ = {v.chunk(chunk), bytes};
  return std::optional<LoanedSample>(std::move(s));
}

Result<PublishOutcome> TopicPublisher::try_publish(LoanedSample&& sample) {
  if (!core_) topic::contract("try_publish on an empty TopicPublisher");
  topic::detail::Core& c = *core_;
  if (sample.core_ != &c)
    return fail(Errc::InvalidArgument,
                shm::detail::format("{}: publish of a sample this publisher did not loan (or "
                                    "one already published)",
                                    c.segment.path()));
  shm::detail::EndpointGuard::Scope scope(c.guard, "a TopicPublisher");
  const topic::View& v = c.v;
  const std::uint64_t depth = v.p.queue_depth;
  // A full Block queue answers Full without the mutex, which its subscriber
  // needs to make room: a publisher retrying try_publish would otherwise
  // contend with every receive and release.
  if (topic::block_queue_full(v)) {
    v.control->publisher.full.fetch_add(1, std::memory_order_relaxed);  // statistics
    return PublishOutcome{PublishStatus::Full, 0, 0, 0};
  }
  if (auto got = topic::detail::lock_briefly(c.segment, v); !got || !*got) {
    if (!got) return std::unexpected(got.error());
    return PublishOutcome{PublishStatus::Full};  // a live holder kept the mutex: nothing changed
  }
  auto& pub = v.control->publisher;
  // A repair (a dead subscriber's) may have run: our loan must still be ours.
  if (ld(pub.loans[sample.loan_]) != sample.chunk_ + 1) {
    topic::detail::unlock(v);
    return fail(Errc::Corrupt, shm::detail::format("{}: loan entry {} no longer names chunk {}",
                                                   c.segment.path(), sample.loan_, sample.chunk_));
  }
  // Only the records in use: at most 256, each on a cache line of its own.
  const std::size_t records = topic::records_in_use(v);
  // Block subscribers first: Full changes nothing.
  for (std::size_t i = 0; i < records; ++i) {
    const topic::SubscriberRecord& r = v.record(i);
    if (ld(r.active) != 1 || ld(r.overflow) != static_cast<std::uint32_t>(TopicOverflow::Block))
      continue;
    if (ld(r.tail) - ld(r.head) >= depth) {
      pub.full.fetch_add(1, std::memory_order_relaxed);  // statistics
      topic::detail::unlock(v);
      return PublishOutcome{PublishStatus::Full, 0, 0, 0};
    }
  }
  const std::uint32_t chunk = sample.chunk_;
  const std::uint64_t seq = ld(pub.next_seq);
  st(v.meta[chunk].seq, seq);
  st(v.meta[chunk].incarnation, c.incarnation);
  PublishOutcome out{PublishStatus::Published, seq, 0, 0};
  for (std::size_t i = 0; i < records; ++i) {
    topic::SubscriberRecord& r = v.record(i);
    if (ld(r.active) != 1) continue;
    const std::uint64_t head = ld(r.head);
    const std::uint64_t tail = ld(r.tail);
    if (tail - head >= depth) {  // a full DropOldest queue: drop its oldest
      auto old = topic::chunk_of(v, ld(v.queue(i)[head % depth]), "a queue entry");
      if (!old) {
        topic::detail::unlock(v);
        return std::unexpected(old.error());
      }
      st(r.head, head + 1, std::memory_order_seq_cst);  // [topic.Q]
      if (auto ok = topic::unref(v, *old); !ok) {
        topic::detail::unlock(v);
        return std::unexpected(ok.error());
      }
      ++out.dropped;
    }
    st(v.queue(i)[tail % depth], chunk + 1);
    topic::ref(v, chunk);
    // [topic.Q] seq_cst: publishes the entry to the subscriber's lock-free
    // poll and is the publisher's half of the Dekker pair ([topic.W]).
    st(r.tail, tail + 1, std::memory_order_seq_cst);
    ++out.subscribers;
  }
  if (v.p.history != 0) {
    const std::uint64_t hp = ld(v.control->pool.history_pos);
    std::atomic<std::uint32_t>& h = v.history[hp % v.p.history];
    const std::uint32_t old = ld(h);
    topic::ref(v, chunk);
    st(h, chunk + 1);
    st(v.control->pool.history_pos, hp + 1);
    if (old != 0) {
      auto oc = topic::chunk_of(v, old, "a history entry");
      if (!oc || !topic::unref(v, *oc)) {
        topic::detail::unlock(v);
        return fail(Errc::Corrupt,
                    shm::detail::format("{}: history entry {} is invalid", c.segment.path(), old));
      }
    }
  }
  st(pub.next_seq, seq + 1);
  st(pub.published, ld(pub.published) + 1);
  if (out.dropped != 0) st(pub.dropped, ld(pub.dropped) + out.dropped);
  st(pub.loans[sample.loan_], 0);
  auto last = topic::unref(v, chunk);  // the loan's own reference
  topic::detail::unlock(v);
  if (!last) return std::unexpected(last.error());
  sample.core_ = nullptr;
  sample.bytes_ = {};
  c.outstanding.fetch_sub(1, std::memory_order_relaxed);
  topic::wake_subscribers(v);
  return out;
}

namespace {

// The publisher's park loop: re-runs `attempt` (which takes the mutex) after
// announcing itself, sleeps on space_signal, and every kPublisherParkNs repairs so
// that a dead subscriber it waits for is dropped, not waited for.
template <class Attempt, class Done>
auto publisher_wait(topic::detail::Core& c, std::chrono::nanoseconds timeout, Attempt&& attempt,
                    Done&& done) -> decltype(attempt()) {
  const auto deadline = detail::deadline_after(timeout);
  auto& w = c.v.control->waiters;
  auto r = attempt();
  if (!r || done(*r)) return r;
  std::uint64_t last_repair = monotonic_ns();
  for (;;) {
    const std::uint32_t seen = w.space_signal.load(std::memory_order_acquire);
    // [topic.W] seq_cst: the announcement; attempt() re-checks under the mutex.
    w.publisher_parked.store(1, std::memory_order_seq_cst);
    r = attempt();
    if (!r || done(*r)) break;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    if (monotonic_ns() - last_repair >= topic::kPublisherParkNs) {
      last_repair = monotonic_ns();
      // Briefly: a live holder stopped inside the mutex must not hold this
      // timed call past its timeout.
      if (auto got = topic::detail::lock_briefly(c.segment, c.v); got && *got) {
        (void)topic::repair_locked(c.segment, c.v, std::nullopt);
        topic::detail::unlock(c.v);
      }
      r = attempt();
      if (!r || done(*r)) break;
      continue;
    }
    const auto left = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now).count());
    c.attachment.heartbeat();
    (void)futex_wait(w.space_signal, seen, std::min(left, topic::kPublisherParkNs));
    r = attempt();
    if (!r || done(*r)) break;
  }
  w.publisher_parked.store(0, std::memory_order_seq_cst);
  return r;
}

}  // namespace

Result<std::optional<LoanedSample>> TopicPublisher::loan(std::size_t bytes,
                                                         std::chrono::nanoseconds timeout) {
  if (!core_) topic::contract("loan on an empty TopicPublisher");
  return publisher_wait(
      *core_, timeout, [&] { return try_loan(bytes); },
      [](const std::optional<LoanedSample>& s) { return s.has_value(); });
}

Result<PublishOutcome> TopicPublisher::publish(LoanedSample&& sample,
                                               std::chrono::nanoseconds timeout) {
  if (!core_) topic::contract("publish on an empty TopicPublisher");
  return publisher_wait(
      *core_, timeout, [&] { return try_publish(std::move(sample)); },
      [](const PublishOutcome& o) { return o.status == PublishStatus::Published; });
}

std::uint64_t TopicPublisher::max_sample_bytes() const noexcept {
  return core_ ? core_->v.p.max_sample_bytes : 0;
}

std::vector<TopicEvent> TopicPublisher::events() const {
  return core_ ? topic::read_events(core_->v) : std::vector<TopicEvent>{};
}

std::vector<TopicEvent> TopicSubscriber::events() const {
  return core_ ? topic::read_events(core_->v) : std::vector<TopicEvent>{};
}

TopicSnapshot TopicPublisher::snapshot() const noexcept {
  return core_ ? read_snapshot(core_->v) : TopicSnapshot{};
}

const Attachment& TopicPublisher::attachment() const noexcept {
  if (!core_) topic::contract("attachment() of an empty TopicPublisher");
  return core_->attachment;
}

std::uint32_t TopicPublisher::incarnation() const noexcept {
  return core_ ? core_->incarnation : 0;
}

// ---------------------------------------------------------------- subscriber

TopicSubscriber::TopicSubscriber() noexcept = default;
TopicSubscriber::TopicSubscriber(TopicSubscriber&&) noexcept = default;

TopicSubscriber& TopicSubscriber::operator=(TopicSubscriber&& other) noexcept {
  if (this != &other) {
    TopicSubscriber gone(std::move(*this));
    core_ = std::move(other.core_);
  }
  return *this;
}

TopicSubscriber::~TopicSubscriber() {
  if (!core_) return;
  if (core_->outstanding.load(std::memory_order_relaxed) != 0 &&
      !core_->attachment.copied_by_fork())
    topic::contract("a Sample outlived its TopicSubscriber");
  const topic::View& v = core_->v;
  if (!core_->attachment.copied_by_fork() && topic::detail::lock(core_->segment, v)) {
    topic::SubscriberRecord& r = v.record(core_->record);
    if (ld(r.active) == 1 && ld(r.generation) == core_->attachment.generation()) {
      const std::uint64_t depth = v.p.queue_depth;
      for (std::uint64_t pos = ld(r.head), tail = ld(r.tail); pos < tail; ++pos) {
        auto c = topic::chunk_of(v, ld(v.queue(core_->record)[pos % depth]), "a queue entry");
        st(r.head, pos + 1, std::memory_order_seq_cst);  // [topic.Q]
        if (!c || !topic::unref(v, *c)) break;           // corrupt: a repair recomputes
      }
      st(r.active, 0);
    }
    topic::detail::unlock(v);
    topic::wake_publisher(v);  // a Block subscriber leaving makes room
  }
  core_->attachment.detach();
}

Result<TopicSubscriber> TopicSubscriber::attach(Segment segment, TopicOverflow overflow) {
  if (overflow != TopicOverflow::DropOldest && overflow != TopicOverflow::Block)
    return fail(Errc::InvalidArgument,
                shm::detail::format("topic: overflow {} is neither DropOldest nor Block",
                                    static_cast<int>(overflow)));
  auto core = topic::bind(std::move(segment), topic::kSubscriberRole);
  if (!core) return std::unexpected(std::move(core.error()));
  topic::detail::Core& c = **core;
  c.overflow = overflow;
  c.record = c.attachment.slot() - kExclusiveSlots;
  const topic::View& v = c.v;
  if (auto ok = topic::detail::lock(c.segment, v); !ok) return std::unexpected(ok.error());
  // Drops a dead predecessor's record in our slot (its generation is older)
  // and whatever other dead holders left.
  if (auto r = topic::repair_locked(c.segment, v, std::nullopt); !r) {
    topic::detail::unlock(v);
    return std::unexpected(std::move(r.error()));
  }
  topic::SubscriberRecord& r = v.record(c.record);
  const std::uint64_t depth = v.p.queue_depth;
  st(r.active, 0);
  st(r.head, 0, std::memory_order_seq_cst);  // [topic.Q]
  st(r.tail, 0, std::memory_order_seq_cst);  // [topic.Q]
  st(r.received, 0);
  st(r.parked, 0);
  for (std::uint64_t k = 0; k < v.p.max_held; ++k) st(v.held(c.record)[k], 0);
  st(r.overflow, static_cast<std::uint32_t>(overflow));
  st(r.generation, c.attachment.generation());
  // Before the record goes active: publish scans [0, records_used).
  if (ld(v.control->pool.records_used) <= c.record) st(v.control->pool.records_used, c.record + 1);
  // Late joiner: the last `history` samples, oldest first.
  const std::uint64_t hp = ld(v.control->pool.history_pos);
  const std::uint64_t n = std::min<std::uint64_t>(hp, v.p.history);
  std::uint64_t tail = 0;
  std::uint64_t first_seq = ld(v.control->publisher.next_seq);
  for (std::uint64_t j = hp - n; j < hp; ++j) {
    const std::uint32_t e = ld(v.history[j % v.p.history]);
    auto ch = topic::chunk_of(v, e, "a history entry");
    if (!ch) {
      topic::detail::unlock(v);
      return std::unexpected(ch.error());
    }
    if (tail == 0) first_seq = ld(v.meta[*ch].seq);
    st(v.queue(c.record)[tail % depth], e);
    topic::ref(v, *ch);
    ++tail;
  }
  st(r.tail, tail, std::memory_order_seq_cst);  // [topic.Q]
  st(r.first_seq, first_seq);
  st(r.active, 1);
  topic::detail::unlock(v);
  TopicSubscriber s;
  s.core_ = std::move(*core);
  return s;
}

Result<TopicSubscriber> TopicSubscriber::create(std::string_view name, const TopicParams& params,
                                                TopicOverflow overflow,
                                                const CreateOptions& options) {
  auto seg = create_topic(name, params, options);
  if (!seg) return std::unexpected(std::move(seg.error()));
  return attach(std::move(*seg), overflow);
}

Result<TopicSubscriber> TopicSubscriber::open(std::string_view name, TopicOverflow overflow,
                                              const TopicParams& expected,
                                              const OpenOptions& options) {
  auto seg = open_topic(name, expected, options);
  if (!seg) return std::unexpected(std::move(seg.error()));
  return attach(std::move(*seg), overflow);
}

Result<std::optional<Sample>> TopicSubscriber::try_receive() {
  if (!core_) topic::contract("try_receive on an empty TopicSubscriber");
  topic::detail::Core& c = *core_;
  shm::detail::EndpointGuard::Scope scope(c.guard, "a TopicSubscriber");
  const topic::View& v = c.v;
  if (c.outstanding.load(std::memory_order_relaxed) >= v.p.max_held)
    return fail(Errc::HeldLimit,
                shm::detail::format("{}: subscriber slot {} already holds {} samples (max_held); "
                                    "drop one before receiving another",
                                    c.segment.path(), c.attachment.slot(),
                                    c.outstanding.load(std::memory_order_relaxed)));
  topic::SubscriberRecord& r = v.record(c.record);
  // [topic.Q] a lock-free look first: an empty queue costs no lock.
  if (r.tail.load(std::memory_order_seq_cst) == r.head.load(std::memory_order_relaxed))
    return std::optional<Sample>{};
  if (auto got = topic::detail::lock_briefly(c.segment, v); !got || !*got) {
    if (!got) return std::unexpected(got.error());
    return std::optional<Sample>{};  // a live holder kept the mutex: nothing now
  }
  if (ld(r.active) != 1 || ld(r.generation) != c.attachment.generation()) {
    topic::detail::unlock(v);
    return fail(Errc::Corrupt,
                shm::detail::format("{}: subscriber slot {}'s record was dropped (the slot was "
                                    "reclaimed while this handle held it)",
                                    c.segment.path(), c.attachment.slot()));
  }
  const std::uint64_t head = ld(r.head), tail = ld(r.tail);
  if (head == tail) {
    topic::detail::unlock(v);
    return std::optional<Sample>{};
  }
  std::atomic<std::uint32_t>* held = v.held(c.record);
  std::uint32_t k = 0;
  while (k < v.p.max_held && ld(held[k]) != 0) ++k;
  const std::uint32_t entry = ld(v.queue(c.record)[head % v.p.queue_depth]);
  auto chunk = topic::chunk_of(v, entry, "a queue entry");
  if (k == v.p.max_held || !chunk) {
    topic::detail::unlock(v);
    if (!chunk) return std::unexpected(chunk.error());
    return fail(Errc::Corrupt, shm::detail::format("{}: subscriber slot {}'s held list is full",
                                                   c.segment.path(), c.attachment.slot()));
  }
  const topic::ChunkMeta& m = v.meta[*chunk];
  const std::uint64_t length = ld(m.length);
  if (length > v.p.max_sample_bytes) {
    topic::detail::unlock(v);
    return fail(Errc::Corrupt,
                shm::detail::format("{}: chunk {} has length {}, max {}", c.segment.path(), *chunk,
                                    length, v.p.max_sample_bytes));
  }
  st(held[k], entry);
  st(r.head, head + 1, std::memory_order_seq_cst);  // [topic.Q]
  st(r.received, ld(r.received) + 1);
  Sample s;
  s.core_ = &c;
  s.chunk_ = *chunk;
  s.held_ = k;
  s.seq_ = ld(m.seq);
  s.incarnation_ = ld(m.incarnation);
  s.bytes_ = {v.chunk(*chunk), length};
  topic::detail::unlock(v);
  c.outstanding.fetch_add(1, std::memory_order_relaxed);
  topic::wake_publisher(v);  // room for a Block publisher
  return std::optional<Sample>(std::move(s));
}

Result<std::optional<Sample>> TopicSubscriber::receive(std::chrono::nanoseconds timeout) {
  if (!core_) topic::contract("receive on an empty TopicSubscriber");
  topic::detail::Core& c = *core_;
  const auto deadline = detail::deadline_after(timeout);
  topic::SubscriberRecord& r = c.v.record(c.record);
  auto ready = [&] {
    // [topic.W] seq_cst: the subscriber's re-check of the Dekker pair.
    return r.tail.load(std::memory_order_seq_cst) != r.head.load(std::memory_order_relaxed);
  };
  for (int i = 0; i < topic::kSpins; ++i) {
    if (ready() || i == 0) {
      auto got = try_receive();
      if (!got || *got) return got;
      // Queued but not taken: a live holder kept the mutex through a lock
      // slice. The loop below retries within the deadline.
      if (ready()) break;
    }
    detail::cpu_relax();
  }
  auto& w = c.v.control->waiters;
  for (;;) {
    const std::uint32_t seen = w.data_signal.load(std::memory_order_acquire);
    // [topic.W] seq_cst: announce, then re-check `tail` (ready()).
    w.subscribers_parked.fetch_add(1, std::memory_order_seq_cst);
    r.parked.store(1, std::memory_order_relaxed);  // for repair only (under no ordering)
    bool go = ready();
    const auto now = std::chrono::steady_clock::now();
    if (!go && now < deadline) {
      const auto left = static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now).count());
      c.attachment.heartbeat();
      (void)futex_wait(w.data_signal, seen, std::min(left, topic::kMaxParkNs));
    }
    r.parked.store(0, std::memory_order_relaxed);
    w.subscribers_parked.fetch_sub(1, std::memory_order_seq_cst);
    auto got = try_receive();
    if (!got || *got) return got;
    if (std::chrono::steady_clock::now() >= deadline) return got;
  }
}

std::uint64_t TopicSubscriber::missed() const noexcept {
  if (!core_) return 0;
  const topic::SubscriberRecord& r = core_->v.record(core_->record);
  // relaxed: a count; exact when read by the subscriber between its calls
  // (head only grows by receives, which also grow received, or by drops).
  const std::uint64_t head = r.head.load(std::memory_order_seq_cst);
  const std::uint64_t received = r.received.load(std::memory_order_relaxed);
  return head >= received ? head - received : 0;
}

TopicOverflow TopicSubscriber::overflow() const noexcept {
  return core_ ? core_->overflow : TopicOverflow::DropOldest;
}

TopicSnapshot TopicSubscriber::snapshot() const noexcept {
  if (!core_) return {};
  TopicSnapshot s = read_snapshot(core_->v);
  const topic::SubscriberRecord& r = core_->v.record(core_->record);
  // relaxed: a monitoring sample.
  const std::uint64_t head = r.head.load(std::memory_order_relaxed);
  const std::uint64_t tail = r.tail.load(std::memory_order_relaxed);
  s.queued = tail >= head ? tail - head : 0;
  s.held = core_->outstanding.load(std::memory_order_relaxed);
  s.received = r.received.load(std::memory_order_relaxed);
  s.missed = head >= s.received ? head - s.received : 0;
  return s;
}

const Attachment& TopicSubscriber::attachment() const noexcept {
  if (!core_) topic::contract("attachment() of an empty TopicSubscriber");
  return core_->attachment;
}

}  // namespace shm
