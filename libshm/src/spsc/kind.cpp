// The SpscRing kind descriptor: what shmctl and the sidecar see of a ring,
// and a read-only description of a ring of layout version 1.
#include "shm/segment/kind.hpp"
#include "shm/spsc/layout.hpp"
#include "spsc/chain.hpp"

#include "format/format.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

namespace shm {
namespace {

struct RingView {
  ring::ParamBlock params{};
  const ring::RingControl* control = nullptr;
  const std::byte* buffer = nullptr;
  bool ok = false;
  [[nodiscard]] ring::detail::ChainView chain() const {
    return {buffer, params.capacity, static_cast<unsigned>(std::countr_zero(params.capacity)),
            params.max_payload};
  }
};

// Reads geometry from a segment that passed the generic header checks, but not
// necessarily the ring's own: every value is checked before use.
RingView view(const Segment& seg) {
  RingView v;
  if (seg.params().size() != sizeof v.params) return v;
  std::memcpy(&v.params, seg.params().data(), sizeof v.params);
  const std::uint64_t cap = v.params.capacity;
  if (!is_power_of_two(cap) || cap < ring::kMinCapacity || cap > ring::kMaxCapacity) return v;
  if (seg.data().size() < ring::kBufferOffset + cap) return v;
  v.control = reinterpret_cast<const ring::RingControl*>(seg.data().data());
  v.buffer = seg.data().data() + ring::kBufferOffset;
  v.ok = true;
  return v;
}

struct Positions {
  std::uint64_t head = 0;
  std::uint64_t hint = 0;  // the producer's `tail` hint
  bool possible = false;
};

Positions positions(const RingView& v) {
  Positions p;
  // acquire: pairs with [spsc.C] and the hint's release store in commit().
  p.head = v.control->consumer.head.load(std::memory_order_acquire);
  p.hint = v.control->producer.tail.load(std::memory_order_acquire);
  p.possible = ring::position_aligned(p.head) && ring::position_aligned(p.hint) &&
               (p.hint <= p.head || p.hint - p.head <= v.params.capacity);
  return p;
}

template <class F>
ring::detail::ChainEnd walk(const RingView& v, const Positions& p, std::size_t limit, F&& f) {
  // From head, not the hint: dump and the record count want every record.
  return ring::detail::walk_chain(v.chain(), p.head, p.head, limit, std::forward<F>(f));
}

void describe(const Segment& seg, Node& out) {
  const RingView v = view(seg);
  if (!v.ok) {
    out.set("error", std::string("ring parameters or size are invalid"));
    return;
  }
  const Positions p = positions(v);
  out.set("ring_layout_version", static_cast<std::uint64_t>(ring::kLayoutVersion));
  out.set("capacity", v.params.capacity);
  out.set("max_record", v.params.max_payload);
  out.set("head", p.head);
  out.set("tail_hint", p.hint);
  if (p.possible) {
    const auto end = walk(v, p, SIZE_MAX, [](std::uint64_t, std::span<const std::byte>) {});
    out.set("tail", end.end);
    out.gauge("depth_bytes", end.end - p.head);
    out.gauge("depth_records", end.records);
  }
  // relaxed: counters and flags for display only; nothing is read through them.
  out.counter("records_pushed", v.control->producer.records.load(std::memory_order_relaxed));
  out.counter("records_popped", v.control->consumer.records.load(std::memory_order_relaxed));
  out.set("consumer_parked",
          v.control->producer.consumer_parked.load(std::memory_order_relaxed) != 0);
  out.set("producer_parked",
          v.control->consumer.producer_parked.load(std::memory_order_relaxed) != 0);
}

std::vector<std::string> verify(const Segment& seg) {
  std::vector<std::string> bad;
  const RingView v = view(seg);
  if (!v.ok) {
    bad.push_back(shm::detail::format("ring parameters (capacity {}) or data size {} are invalid",
                                      v.params.capacity, seg.data().size()));
    return bad;
  }
  if (!ring::max_payload_matches(v.params.max_payload, v.params.capacity))
    bad.push_back(shm::detail::format("max_record {} does not match capacity {}",
                                      v.params.max_payload, v.params.capacity));
  const Positions p = positions(v);
  if (!p.possible) {
    bad.push_back(shm::detail::format(
        "head {} / tail hint {} impossible (not {}-byte aligned, or the hint more than capacity "
        "{} ahead)",
        p.head, p.hint, ring::kRecordAlign, v.params.capacity));
    return bad;
  }
  if (!bad.empty()) return bad;
  const auto end = walk(v, p, SIZE_MAX, [](std::uint64_t, std::span<const std::byte>) {});
  // A live consumer may release, and the producer overwrite, records while we
  // walk: report a damaged record only if head did not move meanwhile.
  if (!end.problem.empty() && v.control->consumer.head.load(std::memory_order_acquire) == p.head)
    bad.push_back(end.problem);
  return bad;
}

Result<std::vector<std::string>> reclaim(Segment&, const SlotInfo& dead) {
  // Nothing to release: a dead consumer's unreleased records stay for the next
  // consumer; a dead producer's unpublished reservation was never reachable.
  return std::vector<std::string>{
      shm::detail::format("slot {} (pid {}) freed; ring positions kept", dead.index, dead.pid)};
}

std::vector<std::vector<std::byte>> dump(const Segment& seg, std::size_t limit) {
  std::vector<std::vector<std::byte>> out;
  const RingView v = view(seg);
  if (!v.ok) return out;
  const Positions p = positions(v);
  if (!p.possible) return out;
  (void)walk(v, p, limit, [&](std::uint64_t, std::span<const std::byte> payload) {
    out.emplace_back(payload.begin(), payload.end());
  });
  return out;
}

// ---------------------------------------------------------------- layout version 1

// The version-1 control block: tail and head published positions, parked
// flags and futex words in a third line. Read-only here.
struct V1Control {
  struct alignas(kFalseSharingRange) Producer {
    std::atomic<std::uint64_t> tail;
    std::atomic<std::uint64_t> records;
  } producer;
  struct alignas(kFalseSharingRange) Consumer {
    std::atomic<std::uint64_t> head;
    std::atomic<std::uint64_t> records;
  } consumer;
  struct alignas(kFalseSharingRange) Waiters {
    std::atomic<std::uint32_t> data_signal;
    std::atomic<std::uint32_t> consumer_parked;
    std::atomic<std::uint32_t> space_signal;
    std::atomic<std::uint32_t> producer_parked;
  } waiters;
};
static_assert(sizeof(V1Control) == ring::kBufferOffset);
static_assert(ring::v1::kFingerprint ==
              layout_fingerprint({kHeaderFingerprint, sizeof(V1Control),
                                  offsetof(V1Control, consumer), offsetof(V1Control, waiters),
                                  ring::kRecordHeader, ring::kRecordAlign, kFalseSharingRange}));
static_assert(ring::v1::kFingerprint != ring::kFingerprint);

void describe_v1(const Segment& seg, Node& out) {
  const RingView v = view(seg);
  out.set("ring_layout_version", static_cast<std::uint64_t>(ring::v1::kLayoutVersion));
  if (!v.ok) {
    out.set("error", std::string("ring parameters or size are invalid"));
    return;
  }
  const auto* c = reinterpret_cast<const V1Control*>(v.control);
  // acquire: as a version-1 reader would (pairs with that layout's [spsc.C]/[spsc.P]).
  const std::uint64_t head = c->consumer.head.load(std::memory_order_acquire);
  const std::uint64_t tail = c->producer.tail.load(std::memory_order_acquire);
  out.set("capacity", v.params.capacity);
  out.set("max_record", v.params.max_payload);
  out.set("head", head);
  out.set("tail", tail);
  out.gauge("depth_bytes", tail >= head ? tail - head : 0);
  // relaxed: display only.
  const std::uint64_t pushed = c->producer.records.load(std::memory_order_relaxed);
  const std::uint64_t popped = c->consumer.records.load(std::memory_order_relaxed);
  out.gauge("depth_records", pushed >= popped ? pushed - popped : 0);
  out.counter("records_pushed", pushed);
  out.counter("records_popped", popped);
  out.set("consumer_parked", c->waiters.consumer_parked.load(std::memory_order_relaxed) != 0);
  out.set("producer_parked", c->waiters.producer_parked.load(std::memory_order_relaxed) != 0);
}

// The consumer has work while published records outnumber released ones;
// its progress is the released count. relaxed: a monitoring sample of two
// counters that only grow; a stale read delays a verdict by one cycle.
std::optional<RoleProgress> progress(const Segment& seg, std::uint32_t role) {
  if (role != ring::kConsumerRole.id) return std::nullopt;
  const RingView v = view(seg);
  if (!v.ok) return std::nullopt;
  const std::uint64_t released = v.control->consumer.records.load(std::memory_order_relaxed);
  const std::uint64_t published = v.control->producer.records.load(std::memory_order_relaxed);
  return RoleProgress{published != released, released};
}

constexpr std::array<RoleSpec, 3> kRoles = {ring::kProducerRole, ring::kConsumerRole,
                                            ring::kObserverRole};
constexpr std::array<OlderLayout, 1> kOlderLayouts = {
    OlderLayout{ring::v1::kFingerprint, ring::v1::kLayoutVersion, describe_v1}};

}  // namespace

const KindDescriptor kSpscRingDescriptor{
    kSpscRingKind, "spsc_ring", ring::kFingerprint,   kRoles,        describe, verify, reclaim,
    nullptr,       dump,        ring::kLayoutVersion, kOlderLayouts, progress,
};

}  // namespace shm
