#include "shm/spsc/layout.hpp"

#include "platform/spin_then_park.hpp"
#include "segment/kind_spec.hpp"
#include "segment/size_check.hpp"
#include "shm/platform/clock.hpp"
#include "shm/platform/futex.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"
#include "shm/testing/ring_crash.hpp"
#include "spsc/chain.hpp"

#include "format/format.hpp"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace shm {
namespace ring {

Result<void> validate(const RingParams& params) {
  if (!is_power_of_two(params.capacity_bytes) || params.capacity_bytes < kMinCapacity ||
      params.capacity_bytes > kMaxCapacity)
    return fail(Errc::InvalidArgument,
                shm::detail::format("ring capacity {} must be a power of two in [{}, {}]",
                                    params.capacity_bytes, kMinCapacity, kMaxCapacity));
  return {};
}

KindSpec kind_spec(const RingParams& params, ParamBlock& storage) {
  storage = ParamBlock{params.capacity_bytes,
                       params.capacity_bytes ? max_payload_for(params.capacity_bytes) : 0};
  return shm::detail::block_kind_spec(
      kSpscRingKind, "spsc_ring", kFingerprint, storage,
      params.capacity_bytes ? kBufferOffset + params.capacity_bytes : 0,
      [](const ParamBlock& f) -> std::string {
        if (!is_power_of_two(f.capacity) || f.capacity < kMinCapacity || f.capacity > kMaxCapacity)
          return shm::detail::format("capacity: segment has {}, not a power of two in [{}, {}]",
                                     f.capacity, kMinCapacity, kMaxCapacity);
        if (!max_payload_matches(f.max_payload, f.capacity))
          return shm::detail::format("max_payload: segment has {}, capacity {} implies {}",
                                     f.max_payload, f.capacity, max_payload_for(f.capacity));
        return {};
      },
      [](const ParamBlock& f, const ParamBlock& e, shm::detail::FieldCheck& check) {
        check.field("capacity_bytes", f.capacity, e.capacity);
      });
}

}  // namespace ring

namespace ring {

Result<void> check_geometry(const Segment& seg) {
  // capacity 0 = "any": check the size against the segment's own (validated) capacity.
  ParamBlock found{};
  std::memcpy(&found, seg.params().data(), sizeof found);
  return shm::detail::check_total_size(seg, kBufferOffset + found.capacity,
                                       shm::detail::format("capacity {} needs", found.capacity));
}

Result<void> check_adopted(const Segment& seg) {
  ParamBlock storage{};
  if (auto ok = shm::detail::check_kind(seg, kind_spec(RingParams{}, storage)); !ok) return ok;
  ParamBlock found{};
  std::memcpy(&found, seg.params().data(), sizeof found);
  if (auto ok = validate(RingParams{found.capacity}); !ok) return ok;
  if (!max_payload_matches(found.max_payload, found.capacity))
    return fail(Errc::Corrupt, shm::detail::format("{}: max_payload {} does not match capacity {}",
                                                   seg.path(), found.max_payload, found.capacity));
  return check_geometry(seg);
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
  if (expected.capacity_bytes != 0) {
    if (auto ok = ring::validate(expected); !ok) return std::unexpected(ok.error());
  }
  ring::ParamBlock block{};
  KindSpec spec = ring::kind_spec(expected, block);
  auto seg = Segment::open(name, spec, options);
  if (!seg && seg.error().code == Errc::FingerprintMismatch) {
    // A ring of an older layout version: name both versions.
    OpenOptions look = options;
    look.read_only = true;
    if (auto any = Segment::open_any(name, look);
        any && any->header().kind == kSpscRingKind &&
        any->header().fingerprint == ring::v1::kFingerprint)
      return fail(Errc::VersionMismatch,
                  shm::detail::format("{}: spsc_ring layout version: segment has {}, this library "
                                      "speaks {} (recreate the ring; `shmctl inspect` still "
                                      "describes it)",
                                      any->path(), ring::v1::kLayoutVersion, ring::kLayoutVersion));
  }
  if (!seg) return seg;
  if (auto ok = ring::check_geometry(*seg); !ok) return std::unexpected(std::move(ok.error()));
  return seg;
}

namespace detail {
namespace {

bool membarrier_registered() noexcept {
  // Once per process: every process that maps a ring registers, so a
  // waiter's MEMBARRIER_CMD_GLOBAL_EXPEDITED reaches every waker.
  static const bool registered = [] {
    const long commands = ::syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    if (commands < 0 || (commands & MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0) return false;
    return ::syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0;
  }();
  return registered;
}

}  // namespace

std::string too_large_message(std::size_t n, std::uint64_t max_payload) {
  if (max_payload == ring::kMaxRecordPayload)
    return shm::detail::format(
        "record of {} bytes exceeds the ring's maximum of {} bytes (the limit of the record "
        "header's 32-bit length field)",
        n, max_payload);
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
  // A segment of an older build stores the uncapped half of the ring: the cap
  // applies all the same (the header's length field is 32 bits).
  e.max_payload_ = std::min(block.max_payload, ring::kMaxRecordPayload);
  e.capacity_log2_ = static_cast<unsigned>(std::countr_zero(block.capacity));
  e.registered_ = membarrier_registered();
  return {};
}

struct RingTestAccess {
  static void set_hook(RingEndpoint& e, test_hooks::RingCrashHook hook) noexcept {
    // The handle's hook takes the enum's underlying type (the public header
    // cannot name the test-only enum).
    static test_hooks::RingCrashHook installed = nullptr;
    installed = hook;
    e.crash_hook_ = hook == nullptr ? nullptr : +[](std::uint8_t point) {
      installed(static_cast<test_hooks::RingCrashPoint>(point));
    };
  }
  static void fence(RingEndpoint& e) noexcept { e.registered_ = false; }
};

}  // namespace detail

void test_hooks::set_ring_crash_hook(RingProducer& producer, RingCrashHook hook) noexcept {
  detail::RingTestAccess::set_hook(producer, hook);
}
void test_hooks::set_ring_crash_hook(RingConsumer& consumer, RingCrashHook hook) noexcept {
  detail::RingTestAccess::set_hook(consumer, hook);
}
void test_hooks::force_fenced_waker(RingProducer& producer) noexcept {
  detail::RingTestAccess::fence(producer);
}
void test_hooks::force_fenced_waker(RingConsumer& consumer) noexcept {
  detail::RingTestAccess::fence(consumer);
}

namespace {

// Spin budget of reserve() and peek() before they park.
constexpr int kSpins = 4096;
// Longest single sleep of a waiter whose membarrier call failed: its waker
// may have relied on that barrier and missed the flag, so it looks again.
constexpr std::uint64_t kFencelessSleepNs = 1'000'000;
// Longest first sleep of a park, which skips the heavy barrier (see wait_for).
constexpr std::uint64_t kFirstSleepNs = 200'000;

// The heavy half of the asymmetric barrier ([spsc.D']): every running thread
// of every registered process executes a full barrier before it returns.
bool heavy_barrier() noexcept {
  return ::syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) == 0;
}

// The blocking wait of RingProducer::reserve() and RingConsumer::peek():
// attempt() until it returns an error or a value, spinning kSpins times, then
// parking on `signal` (with `parked`, the flag on the peer's line, set) until
// the peer publishes or the timeout passes (then an empty optional).
template <class Attempt>
auto wait_for(std::chrono::nanoseconds timeout, Attempt&& attempt,
              std::atomic<std::uint32_t>& signal, std::atomic<std::uint32_t>& parked,
              Attachment& attachment) -> decltype(attempt()) {
  using R = decltype(attempt());
  const auto deadline = ::shm::detail::deadline_after(timeout);
  const auto done = [](const R& r) { return !r || *r; };
  if (auto r = detail::spin(kSpins, attempt, done)) return std::move(*r);
  R r = typename R::value_type{};
  bool fenceless = false;
  // The first round of a park skips the heavy barrier: membarrier interrupts
  // every CPU running a registered process, 46 us per call on the project's
  // 2-vCPU VM, where a peer that is waking up answers within about 90 us, just
  // after the spin budget (73 us) ran out; paid on every such round trip, it
  // made a parked round trip slower than a pipe's. Without it the pairing
  // below can fail only in the instant the peer's publishing store still
  // sits in its store buffer while its flag load already ran; then the first
  // sleep, bounded by kFirstSleepNs, ends by itself, and every later round
  // is the full pairing.
  bool first_round = true;
  const bool over = detail::park(
      signal, deadline,
      [&] {
        // A round after a wake looks first: the record (or space) the
        // waker published is usually there, and announcing again would put
        // the heavy barrier on the path of every woken wait.
        if (!first_round) {
          r = attempt();
          if (done(r)) {
            parked.store(0, std::memory_order_relaxed);  // a hint, as below
            return detail::ParkRound::Done;
          }
        }
        // [spsc.D'] seq_cst store of the flag, then the heavy barrier (from
        // the second round on), then the re-check: pairs with [spsc.D] in
        // RingProducer::commit() / RingConsumer::release(). Either the
        // re-check sees the peer's publishing store, or the peer's flag load
        // (after its light barrier) sees our flag and wakes us.
        parked.store(1, std::memory_order_seq_cst);
        if (!first_round) fenceless = !heavy_barrier();
        r = attempt();
        if (!done(r)) return detail::ParkRound::Sleep;
        parked.store(0, std::memory_order_relaxed);  // a hint: at worst one needless wake
        return detail::ParkRound::Done;
      },
      [&](std::uint64_t left_ns) {
        if (std::exchange(first_round, false)) return std::min(left_ns, kFirstSleepNs);
        return fenceless ? std::min(left_ns, kFencelessSleepNs) : left_ns;
      },
      [&] { attachment.heartbeat(); });
  if (over) return r;
  parked.store(0, std::memory_order_relaxed);  // a hint: at worst one needless wake
  return typename R::value_type{};
}

ring::detail::ChainView chain_view(const std::byte* buffer, std::uint64_t capacity,
                                   std::uint64_t max_payload) {
  return {buffer, capacity, static_cast<unsigned>(std::countr_zero(capacity)), max_payload};
}

// Both positions, as read at attach, must be possible: aligned, and the tail
// hint at most a ring ahead of head (it may lag behind head).
Result<void> check_positions(const Segment& seg, std::uint64_t head, std::uint64_t tail,
                             std::uint64_t capacity) {
  if (!ring::position_aligned(head) || !ring::position_aligned(tail) ||
      (tail > head && tail - head > capacity))
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
  return adopt(std::move(*seg));
}

Result<RingProducer> RingProducer::open(std::string_view name, const RingParams& expected,
                                        const OpenOptions& options) {
  auto seg = open_ring(name, expected, options);
  if (!seg) return std::unexpected(seg.error());
  return adopt(std::move(*seg));
}

Result<RingProducer> RingProducer::attach(Segment segment) {
  if (auto ok = ring::check_adopted(segment); !ok) return std::unexpected(ok.error());
  return adopt(std::move(segment));
}

Result<RingProducer> RingProducer::adopt(Segment segment) {
  RingProducer p;
  if (auto ok = bind(p, std::move(segment), ring::kProducerRole); !ok)
    return std::unexpected(ok.error());
  // We are the only producer now. A dead predecessor may have published
  // records past its `tail` hint (killed between [spsc.P] and the hint's
  // store): walk the chain from max(head, hint) to the first empty slot.
  // Its unpublished reservations lie beyond and are overwritten.
  // acquire: pairs with [spsc.C] of the consumer and the hint's release store.
  const std::uint64_t head = p.control_->consumer.head.load(std::memory_order_acquire);
  const std::uint64_t hint = p.control_->producer.tail.load(std::memory_order_acquire);
  if (auto ok = check_positions(p.segment_, head, hint, p.capacity_); !ok)
    return std::unexpected(ok.error());
  const auto end = ring::detail::walk_chain(chain_view(p.buffer_, p.capacity_, p.max_payload_),
                                            head, std::max(head, hint), SIZE_MAX,
                                            [](std::uint64_t, std::span<const std::byte>) {});
  if (!end.problem.empty())
    return fail(Errc::Corrupt, shm::detail::format("{}: published records after head {}: {}",
                                                   p.segment_.path(), head, end.problem));
  p.cached_head_ = head;
  p.tail_ = p.reserved_ = end.end;
  p.control_->producer.tail.store(p.tail_, std::memory_order_release);
  // A predecessor killed after its publish ([spsc.P]) and before its load of
  // consumer_parked took the consumer's wake with it: issue it now (only to a
  // consumer whose flag is set).
  p.wake_consumer();
  return p;
}

Result<std::optional<std::span<std::byte>>> RingProducer::reserve_slow(std::size_t n) {
  if (n > max_payload_) [[unlikely]]
    return fail(Errc::TooLarge, detail::too_large_message(n, max_payload_));
  const std::uint64_t need = ring::record_size(n);
  const std::uint64_t offset = reserved_ & mask_;
  const std::uint64_t contiguous = capacity_ - offset;
  const std::uint64_t padding = need <= contiguous ? 0 : contiguous;
  if (reserved_ + padding + need - cached_head_ > capacity_) [[unlikely]] {
    auto room = refresh_head(reserved_ + padding + need);
    if (!room) return std::unexpected(std::move(room.error()));
    if (!*room) return std::optional<std::span<std::byte>>{};
  }
  if (padding != 0) {
    put_header(reserved_, ring::header_word(static_cast<std::uint32_t>(padding),
                                            ring::kRecordPadding, lap(reserved_)));
    reserved_ += padding;
  }
  std::byte* p = at(reserved_);
  put_header(reserved_,
             ring::header_word(static_cast<std::uint32_t>(n), ring::kRecordData, lap(reserved_)));
  reserved_ += need;
  ++pending_records_;
  return std::optional<std::span<std::byte>>{std::span<std::byte>(p + ring::kRecordHeader, n)};
}

Result<bool> RingProducer::push_slow(std::span<const std::byte> record) {
  auto r = reserve_unguarded(record.size());
  if (!r) return std::unexpected(std::move(r.error()));
  if (!*r) return false;
  if (!record.empty()) std::memcpy((*r)->data(), record.data(), record.size());
  commit_unguarded();
  return true;
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
  // Waits for head to move: the flag is on the consumer's line. The guard is
  // held for the whole wait, so a second thread entering meanwhile is caught.
  const detail::EndpointGuard::Scope scope(guard_, "an SPSC endpoint");
  return wait_for(
      timeout, [&] { return reserve_unguarded(n); }, control_->waiters.space_signal,
      control_->consumer.producer_parked, attachment_);
}

void RingProducer::wake_consumer() noexcept {
  // relaxed: the flag was read after [spsc.D]; clearing it is a hint.
  if (control_->producer.consumer_parked.exchange(0, std::memory_order_relaxed) != 0) {
    auto& w = control_->waiters;
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
  const detail::EndpointGuard::Scope scope(guard_, "an SPSC endpoint");
  std::size_t n = 0;
  for (const auto& rec : records) {
    auto r = reserve_unguarded(rec.size());
    if (!r) {
      commit_unguarded();
      return std::unexpected(std::move(r.error()));
    }
    if (!*r) break;
    if (!rec.empty()) std::memcpy((*r)->data(), rec.data(), rec.size());
    ++n;
  }
  commit_unguarded();
  return n;
}

// ---------------------------------------------------------------- consumer

Result<RingConsumer> RingConsumer::create(std::string_view name, const RingParams& params,
                                          const CreateOptions& options) {
  auto seg = create_ring(name, params, options);
  if (!seg) return std::unexpected(seg.error());
  return adopt(std::move(*seg));
}

Result<RingConsumer> RingConsumer::open(std::string_view name, const RingParams& expected,
                                        const OpenOptions& options) {
  auto seg = open_ring(name, expected, options);
  if (!seg) return std::unexpected(seg.error());
  return adopt(std::move(*seg));
}

Result<RingConsumer> RingConsumer::attach(Segment segment) {
  if (auto ok = ring::check_adopted(segment); !ok) return std::unexpected(ok.error());
  return adopt(std::move(segment));
}

Result<RingConsumer> RingConsumer::adopt(Segment segment) {
  RingConsumer c;
  if (auto ok = bind(c, std::move(segment), ring::kConsumerRole); !ok)
    return std::unexpected(ok.error());
  // A predecessor's peeked-but-unreleased records are still past head: we see them again.
  // acquire: pairs with [spsc.C] of an earlier consumer.
  c.head_ = c.control_->consumer.head.load(std::memory_order_acquire);
  const std::uint64_t hint = c.control_->producer.tail.load(std::memory_order_acquire);
  if (auto ok = check_positions(c.segment_, c.head_, hint, c.capacity_); !ok)
    return std::unexpected(ok.error());
  c.peek_pos_ = c.head_;
  // A predecessor killed after its store of head ([spsc.C]) and before its
  // load of producer_parked took the producer's wake with it: issue it now
  // (only to a producer whose flag is set).
  c.wake_producer();
  return c;
}

Result<std::optional<std::span<const std::byte>>> RingConsumer::peek_slow() {
  for (;;) {
    std::byte* slot = at(peek_pos_);
    // [spsc.P'] acquire: pairs with the producer's [spsc.P]; a current-lap
    // header makes its payload (and the batch after it) visible.
    const std::uint64_t word = detail::header_at(slot).load(std::memory_order_acquire);
    switch (ring::classify_slot(word, lap(peek_pos_))) {
      case ring::SlotState::Current:
        [[likely]] break;
      case ring::SlotState::Empty:
      case ring::SlotState::Stale:
        return std::optional<std::span<const std::byte>>{};
      case ring::SlotState::Foreign:
        return foreign_header(word);
    }
    // The producer may be buggy or hostile: check the header against the
    // bytes it may have written (up to head + capacity) and the buffer end.
    const ring::RecordHeader rec = ring::unpack(word);
    const std::uint64_t offset = peek_pos_ & mask_;
    const std::uint64_t available = head_ + capacity_ - peek_pos_;
    switch (ring::check_record(rec, offset, available, capacity_, max_payload_)) {
      case ring::RecordCheck::Data:
        [[likely]] break;
      case ring::RecordCheck::Padding:
        peek_pos_ += rec.length;
        continue;
      case ring::RecordCheck::BadPadding:
        return corrupt("padding record length", rec.length, capacity_ - offset);
      case ring::RecordCheck::BadType:
        return corrupt("record type", rec.type(), ring::kRecordData);
      case ring::RecordCheck::BadLength:
        return corrupt("record length", rec.length,
                       std::min<std::uint64_t>(max_payload_, available));
    }
    const std::uint64_t size = ring::record_size(rec.length);
    peek_pos_ += size;
    ++peeked_records_;
    return std::optional<std::span<const std::byte>>{
        std::span<const std::byte>(slot + ring::kRecordHeader, rec.length)};
  }
}

std::unexpected<Error> RingConsumer::corrupt(const char* what, std::uint64_t value,
                                             std::uint64_t bound) const {
  return fail(Errc::Corrupt,
              shm::detail::format("{}: {} {} at position {} (head {}) is invalid; expected {}",
                                  segment_.path(), what, value, peek_pos_, head_, bound));
}

std::unexpected<Error> RingConsumer::foreign_header(std::uint64_t word) const {
  const std::uint32_t l = lap(peek_pos_);
  return fail(
      Errc::Corrupt,
      shm::detail::format("{}: record header {:#018x} at position {} (head {}) is neither "
                          "empty nor of lap {} or {}",
                          segment_.path(), word, peek_pos_, head_, l, (l - 1) & ring::kLapMask));
}

Result<std::optional<std::span<const std::byte>>> RingConsumer::peek(
    std::chrono::nanoseconds timeout) {
  // Waits for the header at the peek position: the flag is on the producer's
  // line. The guard is held for the whole wait (as in reserve()).
  const detail::EndpointGuard::Scope scope(guard_, "an SPSC endpoint");
  return wait_for(
      timeout, [&] { return peek_unguarded(); }, control_->waiters.data_signal,
      control_->producer.consumer_parked, attachment_);
}

void RingConsumer::wake_producer() noexcept {
  // relaxed: the flag was read after [spsc.D]; clearing it is a hint.
  if (control_->consumer.producer_parked.exchange(0, std::memory_order_relaxed) != 0) {
    auto& w = control_->waiters;
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

Result<std::optional<std::size_t>> RingConsumer::pop_slow(std::span<std::byte> out) {
  if (peeked_records_ != 0) return peeks_outstanding("try_pop");
  auto r = peek_unguarded();
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
  release_unguarded();
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
