#include "shm/spsc/layout.hpp"

#include "platform/spin_then_park.hpp"
#include "segment/kind_spec.hpp"
#include "segment/size_check.hpp"
#include "shm/platform/futex.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"

#include "format/format.hpp"

#include <cassert>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace shm {
namespace ring {

Result<void> validate(const RingParams& params) {
  if (!is_power_of_two(params.capacity) || params.capacity < kMinCapacity ||
      params.capacity > kMaxCapacity)
    return fail(Errc::InvalidArgument,
                shm::detail::format("ring capacity {} must be a power of two in [{}, {}]",
                                    params.capacity, kMinCapacity, kMaxCapacity));
  return {};
}

KindSpec kind_spec(const RingParams& params, ParamBlock& storage) {
  storage = ParamBlock{params.capacity, params.capacity ? max_payload_for(params.capacity) : 0};
  return shm::detail::block_kind_spec(
      kSpscRingKind, "spsc_ring", kFingerprint, storage,
      params.capacity ? kBufferOffset + params.capacity : 0,
      [](const ParamBlock& f) -> std::string {
        if (!is_power_of_two(f.capacity) || f.capacity < kMinCapacity || f.capacity > kMaxCapacity)
          return shm::detail::format("capacity: segment has {}, not a power of two in [{}, {}]",
                                     f.capacity, kMinCapacity, kMaxCapacity);
        if (f.max_payload != max_payload_for(f.capacity))
          return shm::detail::format("max_payload: segment has {}, capacity {} implies {}",
                                     f.max_payload, f.capacity, max_payload_for(f.capacity));
        return {};
      },
      [](const ParamBlock& f, const ParamBlock& e, shm::detail::FieldCheck& check) {
        check.field("capacity", f.capacity, e.capacity);
      });
}

}  // namespace ring

Result<Segment> create_ring(std::string_view name, const RingParams& params,
                            const CreateOptions& options) {
  if (auto ok = ring::validate(params); !ok) return std::unexpected(ok.error());
  ring::ParamBlock block{};
  const KindSpec spec = ring::kind_spec(params, block);
  // The data area comes zero-filled from posix_fallocate: head = tail = 0.
  return Segment::create(name, spec, options, nullptr);
}

Result<Segment> open_ring(std::string_view name, const RingParams& expected,
                          const OpenOptions& options) {
  if (expected.capacity != 0) {
    if (auto ok = ring::validate(expected); !ok) return std::unexpected(ok.error());
  }
  ring::ParamBlock block{};
  KindSpec spec = ring::kind_spec(expected, block);
  auto seg = Segment::open(name, spec, options);
  if (!seg) return seg;
  // capacity 0 = "any": check the size against the segment's own (validated) capacity.
  ring::ParamBlock found{};
  std::memcpy(&found, seg->params().data(), sizeof found);
  if (auto ok = detail::check_total_size(*seg, ring::kBufferOffset + found.capacity,
                                         shm::detail::format("capacity {} needs", found.capacity));
      !ok)
    return std::unexpected(std::move(ok.error()));
  return seg;
}

namespace detail {

std::string too_large_message(std::size_t n, std::uint64_t max_payload) {
  return shm::detail::format("record of {} bytes exceeds the ring's maximum of {} bytes", n,
                             max_payload);
}

Result<void> RingEndpoint::bind(RingEndpoint& e, Segment segment, const RoleSpec& role) {
  auto attachment = segment.attach(role);
  if (!attachment) return std::unexpected(attachment.error());
  ring::ParamBlock block{};
  std::memcpy(&block, segment.params().data(), sizeof block);
  e.segment_ = std::move(segment);
  e.attachment_ = std::move(*attachment);
  e.control_ = reinterpret_cast<ring::RingControl*>(e.segment_.data().data());
  e.buffer_ = e.segment_.data().data() + ring::kBufferOffset;
  e.capacity_ = block.capacity;
  e.mask_ = block.capacity - 1;
  e.max_payload_ = block.max_payload;
  return {};
}

}  // namespace detail

namespace {

// Spin budget of reserve() and peek() before they park.
constexpr int kSpins = 4096;

// The blocking wait of RingProducer::reserve() and RingConsumer::peek():
// attempt() until it returns an error or a value, spinning kSpins times, then
// parking on `signal` until the other side moves `position` away from
// `cached` (the value our last attempt saw), or the timeout passes (then an
// empty optional).
template <class Attempt>
auto wait_for(std::chrono::nanoseconds timeout, Attempt&& attempt,
              std::atomic<std::uint32_t>& signal, std::atomic<std::uint32_t>& parked,
              const std::atomic<std::uint64_t>& position, const std::uint64_t& cached,
              Attachment& attachment) -> decltype(attempt()) {
  using R = decltype(attempt());
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const auto done = [](const R& r) { return !r || *r; };
  if (auto r = detail::spin(kSpins, attempt, done)) return std::move(*r);
  R r = typename R::value_type{};
  const bool over = detail::park(
      signal, deadline,
      [&] {
        // [spsc.D1'] / [spsc.D2'] seq_cst store of the flag, then a seq_cst load of the
        // position: pairs with [spsc.D1] in RingProducer::commit() / [spsc.D2] in
        // RingConsumer::release(). Either we see the new position here, or
        // the other side sees our flag and wakes us.
        parked.store(1, std::memory_order_seq_cst);
        if (position.load(std::memory_order_seq_cst) == cached) return detail::ParkRound::Sleep;
        parked.store(0, std::memory_order_relaxed);  // a hint: at worst one spurious wake
        r = attempt();
        return done(r) ? detail::ParkRound::Done : detail::ParkRound::Retry;
      },
      [](std::uint64_t left_ns) { return left_ns; }, [&] { attachment.heartbeat(); });
  if (over) return r;
  parked.store(0, std::memory_order_relaxed);  // a hint: at worst one spurious wake
  return typename R::value_type{};
}

// Both positions, as read at attach, must describe a possible ring state.
Result<void> check_positions(const Segment& seg, std::uint64_t head, std::uint64_t tail,
                             std::uint64_t capacity) {
  if (!ring::positions_aligned(head, tail) || !ring::positions_in_range(head, tail, capacity))
    return fail(Errc::Corrupt,
                shm::detail::format("{}: ring positions head {} tail {} are impossible for "
                                    "capacity {}",
                                    seg.path(), head, tail, capacity));
  return {};
}

}  // namespace

// ---------------------------------------------------------------- producer

Result<RingProducer> RingProducer::create(std::string_view name, const RingParams& params,
                                          const CreateOptions& options) {
  auto seg = create_ring(name, params, options);
  if (!seg) return std::unexpected(seg.error());
  RingProducer p;
  if (auto ok = bind(p, std::move(*seg), ring::kProducerRole); !ok)
    return std::unexpected(ok.error());
  return p;
}

Result<RingProducer> RingProducer::open(std::string_view name, const RingParams& expected,
                                        const OpenOptions& options) {
  auto seg = open_ring(name, expected, options);
  if (!seg) return std::unexpected(seg.error());
  RingProducer p;
  if (auto ok = bind(p, std::move(*seg), ring::kProducerRole); !ok)
    return std::unexpected(ok.error());
  // We are the only writer of tail now; a dead predecessor's unpublished
  // reservations are simply overwritten.
  // acquire: pairs with [spsc.P] of an earlier producer and [spsc.C] of the consumer.
  p.tail_ = p.control_->producer.tail.load(std::memory_order_acquire);
  p.cached_head_ = p.control_->consumer.head.load(std::memory_order_acquire);
  if (auto ok = check_positions(p.segment_, p.cached_head_, p.tail_, p.capacity_); !ok)
    return std::unexpected(ok.error());
  p.reserved_ = p.tail_;
  p.records_ = p.control_->producer.records.load(std::memory_order_relaxed);  // statistics only
  return p;
}

Result<bool> RingProducer::refresh_head(std::uint64_t need_end) {
  // [spsc.C'] acquire: pairs with the consumer's [spsc.C]; the bytes before head are free.
  const std::uint64_t head = control_->consumer.head.load(std::memory_order_acquire);
  if (head < cached_head_ || head > tail_ || head % ring::kRecordAlign != 0)
    return fail(Errc::Corrupt,
                shm::detail::format("{}: consumer head {} is outside [{}, {}] (published tail)",
                                    segment_.path(), head, cached_head_, tail_));
  cached_head_ = head;
  return need_end - head <= capacity_;
}

Result<std::optional<std::span<std::byte>>> RingProducer::reserve(
    std::size_t n, std::chrono::nanoseconds timeout) {
  // [spsc.D2'] pairs with [spsc.D2] in RingConsumer::release(): waits for head to move.
  auto& w = control_->waiters;
  return wait_for(
      timeout, [&] { return try_reserve(n); }, w.space_signal, w.producer_parked,
      control_->consumer.head, cached_head_, attachment_);
}

void RingProducer::wake_consumer() noexcept {
  auto& w = control_->waiters;
  // relaxed: the flag was read seq_cst in commit() ([spsc.D1]); clearing it is a hint.
  if (w.consumer_parked.exchange(0, std::memory_order_relaxed) != 0) {
    // [spsc.W] release: pairs with the waiter's acquire load of the signal in detail::park.
    w.data_signal.fetch_add(1, std::memory_order_release);
    (void)futex_wake_all(w.data_signal);
  }
}

Result<bool> RingProducer::push(std::span<const std::byte> record,
                                std::chrono::nanoseconds timeout) {
  auto r = reserve(record.size(), timeout);
  if (!r) return std::unexpected(std::move(r.error()));
  if (!*r) return false;
  if (!record.empty()) std::memcpy((*r)->data(), record.data(), record.size());
  commit();
  return true;
}

Result<std::size_t> RingProducer::try_push_batch(
    std::span<const std::span<const std::byte>> records) {
  std::size_t n = 0;
  for (const auto& rec : records) {
    auto r = try_reserve(rec.size());
    if (!r) {
      commit();
      return std::unexpected(std::move(r.error()));
    }
    if (!*r) break;
    if (!rec.empty()) std::memcpy((*r)->data(), rec.data(), rec.size());
    ++n;
  }
  commit();
  return n;
}

// ---------------------------------------------------------------- consumer

Result<RingConsumer> RingConsumer::create(std::string_view name, const RingParams& params,
                                          const CreateOptions& options) {
  auto seg = create_ring(name, params, options);
  if (!seg) return std::unexpected(seg.error());
  RingConsumer c;
  if (auto ok = bind(c, std::move(*seg), ring::kConsumerRole); !ok)
    return std::unexpected(ok.error());
  return c;
}

Result<RingConsumer> RingConsumer::open(std::string_view name, const RingParams& expected,
                                        const OpenOptions& options) {
  auto seg = open_ring(name, expected, options);
  if (!seg) return std::unexpected(seg.error());
  RingConsumer c;
  if (auto ok = bind(c, std::move(*seg), ring::kConsumerRole); !ok)
    return std::unexpected(ok.error());
  // A predecessor's peeked-but-unreleased records are still past head: we see them again.
  // acquire: pairs with [spsc.C] of an earlier consumer and [spsc.P] of the producer.
  c.head_ = c.control_->consumer.head.load(std::memory_order_acquire);
  c.cached_tail_ = c.control_->producer.tail.load(std::memory_order_acquire);
  if (auto ok = check_positions(c.segment_, c.head_, c.cached_tail_, c.capacity_); !ok)
    return std::unexpected(ok.error());
  c.peek_pos_ = c.head_;
  c.records_ = c.control_->consumer.records.load(std::memory_order_relaxed);  // statistics only
  return c;
}

std::unexpected<Error> RingConsumer::corrupt(const char* what, std::uint64_t value,
                                             std::uint64_t bound) const {
  return fail(
      Errc::Corrupt,
      shm::detail::format("{}: {} {} at position {} (head {}, tail {}) is invalid; "
                          "expected {}",
                          segment_.path(), what, value, peek_pos_, head_, cached_tail_, bound));
}

Result<bool> RingConsumer::refresh_tail() {
  // [spsc.P'] acquire: pairs with the producer's [spsc.P]; records before tail are complete.
  const std::uint64_t tail = control_->producer.tail.load(std::memory_order_acquire);
  if (tail < cached_tail_ || tail - head_ > capacity_ || tail % ring::kRecordAlign != 0)
    return fail(Errc::Corrupt,
                shm::detail::format("{}: producer tail {} is impossible (head {}, last tail "
                                    "{}, capacity {})",
                                    segment_.path(), tail, head_, cached_tail_, capacity_));
  cached_tail_ = tail;
  return peek_pos_ != tail;
}

Result<std::optional<std::span<const std::byte>>> RingConsumer::peek(
    std::chrono::nanoseconds timeout) {
  // [spsc.D1'] pairs with [spsc.D1] in RingProducer::commit(): waits for tail to move.
  auto& w = control_->waiters;
  return wait_for(
      timeout, [&] { return try_peek(); }, w.data_signal, w.consumer_parked,
      control_->producer.tail, cached_tail_, attachment_);
}

void RingConsumer::wake_producer() noexcept {
  auto& w = control_->waiters;
  // relaxed: the flag was read seq_cst in release() ([spsc.D2]); clearing it is a hint.
  if (w.producer_parked.exchange(0, std::memory_order_relaxed) != 0) {
    // [spsc.W] release: pairs with the waiter's acquire load of the signal in detail::park.
    w.space_signal.fetch_add(1, std::memory_order_release);
    (void)futex_wake_all(w.space_signal);
  }
}

std::unexpected<Error> RingConsumer::peeks_outstanding(const char* op) const {
  return fail(Errc::InvalidArgument,
              shm::detail::format("{}: {} with {} peeked record(s) not released: call release() or "
                                  "unpeek() first",
                                  segment_.path(), op, peeked_records_));
}

Result<std::optional<std::size_t>> RingConsumer::try_pop(std::span<std::byte> out) {
  if (peeked_records_ != 0) [[unlikely]]
    return peeks_outstanding("try_pop");
  auto r = try_peek();
  if (!r) return std::unexpected(std::move(r.error()));
  if (!*r) return std::optional<std::size_t>{};
  const auto rec = **r;
  if (rec.size() > out.size()) {
    unpeek();
    return fail(Errc::TooLarge,
                shm::detail::format("record of {} bytes does not fit the {}-byte buffer",
                                    rec.size(), out.size()));
  }
  if (!rec.empty()) std::memcpy(out.data(), rec.data(), rec.size());
  release();
  return std::optional<std::size_t>{rec.size()};
}

Result<std::optional<std::size_t>> RingConsumer::pop(std::span<std::byte> out,
                                                     std::chrono::nanoseconds timeout) {
  if (peeked_records_ != 0) [[unlikely]]
    return peeks_outstanding("pop");
  auto r = peek(timeout);
  if (!r) return std::unexpected(std::move(r.error()));
  if (!*r) return std::optional<std::size_t>{};
  unpeek();  // the record just peeked is the next one: try_pop takes it
  return try_pop(out);
}

}  // namespace shm
