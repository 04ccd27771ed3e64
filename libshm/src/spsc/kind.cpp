// The SpscRing kind descriptor: what shmctl and the sidecar see of a ring.
#include "shm/segment/kind.hpp"
#include "shm/spsc/layout.hpp"

#include "format/format.hpp"

#include <array>
#include <cstring>

namespace shm {
namespace {

struct RingView {
  ring::ParamBlock params{};
  const ring::RingControl* control = nullptr;
  const std::byte* buffer = nullptr;
  bool ok = false;
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

// Walks records in [head, tail); calls f(payload) for each; returns a
// violation or an empty string.
template <class F>
std::string walk(const RingView& v, std::uint64_t head, std::uint64_t tail, std::size_t limit,
                 F&& f) {
  const std::uint64_t cap = v.params.capacity;
  std::uint64_t pos = head;
  std::size_t n = 0;
  while (pos < tail && n < limit) {
    const std::uint64_t off = pos & (cap - 1);
    ring::RecordHeader rec;
    std::memcpy(&rec, v.buffer + off, sizeof rec);
    switch (ring::check_record(rec, off, tail - pos, cap, v.params.max_payload)) {
      case ring::RecordCheck::Data:
        break;
      case ring::RecordCheck::Padding:
        pos += rec.length;
        continue;
      case ring::RecordCheck::BadPadding:
        return shm::detail::format("padding record at {} has length {}, expected {}", pos,
                                   rec.length, cap - off);
      case ring::RecordCheck::BadType:
        return shm::detail::format("record at {} has type {:#x}, expected data or padding", pos,
                                   rec.type);
      case ring::RecordCheck::BadLength:
        return shm::detail::format("record at {} has length {} (max {}, {} bytes left before tail)",
                                   pos, rec.length, v.params.max_payload, tail - pos);
    }
    const std::uint64_t size = ring::record_size(rec.length);
    f(std::span<const std::byte>(v.buffer + off + ring::kRecordHeader, rec.length));
    pos += size;
    ++n;
  }
  return {};
}

void describe(const Segment& seg, Node& out) {
  const RingView v = view(seg);
  if (!v.ok) {
    out.set("error", std::string("ring parameters or size are invalid"));
    return;
  }
  // acquire: pairs with [spsc.C] and [spsc.P]; the records in between are complete.
  const std::uint64_t head = v.control->consumer.head.load(std::memory_order_acquire);
  const std::uint64_t tail = v.control->producer.tail.load(std::memory_order_acquire);
  out.set("capacity", v.params.capacity);
  out.set("max_record", v.params.max_payload);
  out.set("head", head);
  out.set("tail", tail);
  out.gauge("depth_bytes", tail >= head ? tail - head : 0);
  // relaxed: counters and flags for display only; nothing is read through them.
  const std::uint64_t pushed = v.control->producer.records.load(std::memory_order_relaxed);
  const std::uint64_t popped = v.control->consumer.records.load(std::memory_order_relaxed);
  out.gauge("depth_records", pushed >= popped ? pushed - popped : 0);
  out.counter("records_pushed", pushed);
  out.counter("records_popped", popped);
  out.set("consumer_parked",
          v.control->waiters.consumer_parked.load(std::memory_order_relaxed) != 0);
  out.set("producer_parked",
          v.control->waiters.producer_parked.load(std::memory_order_relaxed) != 0);
}

std::vector<std::string> verify(const Segment& seg) {
  std::vector<std::string> bad;
  const RingView v = view(seg);
  if (!v.ok) {
    bad.push_back(shm::detail::format("ring parameters (capacity {}) or data size {} are invalid",
                                      v.params.capacity, seg.data().size()));
    return bad;
  }
  if (v.params.max_payload != ring::max_payload_for(v.params.capacity))
    bad.push_back(shm::detail::format("max_record {} does not match capacity {}",
                                      v.params.max_payload, v.params.capacity));
  // acquire: pairs with [spsc.C] and [spsc.P]; the records in between are complete.
  const std::uint64_t head = v.control->consumer.head.load(std::memory_order_acquire);
  const std::uint64_t tail = v.control->producer.tail.load(std::memory_order_acquire);
  if (!ring::positions_aligned(head, tail))
    bad.push_back(shm::detail::format("head {} / tail {} not {}-byte aligned", head, tail,
                                      ring::kRecordAlign));
  if (!ring::positions_in_range(head, tail, v.params.capacity)) {
    bad.push_back(shm::detail::format("tail {} - head {} is outside [0, capacity {}]", tail, head,
                                      v.params.capacity));
    return bad;
  }
  if (!bad.empty()) return bad;
  if (auto why = walk(v, head, tail, SIZE_MAX, [](auto) {}); !why.empty()) bad.push_back(why);
  return bad;
}

Result<std::vector<std::string>> reclaim(Segment&, const SlotInfo& dead) {
  // Nothing to release: a dead consumer's unreleased records stay for the next
  // consumer; a dead producer's unpublished reservation was never visible.
  return std::vector<std::string>{
      shm::detail::format("slot {} (pid {}) freed; ring positions kept", dead.index, dead.pid)};
}

std::vector<std::vector<std::byte>> dump(const Segment& seg, std::size_t limit) {
  std::vector<std::vector<std::byte>> out;
  const RingView v = view(seg);
  if (!v.ok) return out;
  // acquire: pairs with [spsc.C] and [spsc.P]; the records in between are complete.
  const std::uint64_t head = v.control->consumer.head.load(std::memory_order_acquire);
  const std::uint64_t tail = v.control->producer.tail.load(std::memory_order_acquire);
  if (!ring::positions_in_range(head, tail, v.params.capacity)) return out;
  (void)walk(v, head, tail, limit,
             [&](std::span<const std::byte> p) { out.emplace_back(p.begin(), p.end()); });
  return out;
}

constexpr std::array<RoleSpec, 3> kRoles = {ring::kProducerRole, ring::kConsumerRole,
                                            ring::kObserverRole};

}  // namespace

const KindDescriptor kSpscRingDescriptor{
    kSpscRingKind, "spsc_ring", ring::kFingerprint, kRoles, describe, verify, reclaim,
    nullptr,       dump,
};

}  // namespace shm
