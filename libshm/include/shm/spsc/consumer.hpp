/// @file
/// The consuming end of an SpscRing (move-only; one per ring).
///
/// Records are read in place (zero copy): try_peek() returns the next record
/// after every record already peeked; release() frees all peeked records with
/// one store. A record is consumed when released: a consumer killed between
/// peek and release leaves it in the ring, and the next consumer to attach sees
/// it again (at-least-once for the records in hand, nothing lost).
#pragma once

#include "shm/spsc/endpoint.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <span>

namespace shm::detail {
struct WaitSetAccess;  // the WaitSet reads a member's state (shm/waitset/waitset.hpp)
}  // namespace shm::detail

namespace shm {

/// The consuming end of an SpscRing: peek and release in place, or copy out
/// with try_pop / pop, or drain a batch. One thread at a time (the endpoint
/// guard aborts a concurrent use). Also: segment(), attachment(),
/// capacity_bytes(), max_payload(), heartbeat().
class RingConsumer : public detail::RingEndpoint {
 public:
  /// Attached to nothing: only assignment is valid.
  RingConsumer() = default;
  /// Takes over the attachment and any peeked records.
  RingConsumer(RingConsumer&&) noexcept = default;
  /// Detaches this consumer, then takes over `other`'s attachment.
  RingConsumer& operator=(RingConsumer&&) noexcept = default;

  /// Opens an existing ring and attaches as its consumer (taking over a dead
  /// one: records it peeked and did not release are delivered again).
  /// `expected.capacity_bytes` 0 accepts any capacity.
  [[nodiscard]] static Result<RingConsumer> open(std::string_view name,
                                                 const RingParams& expected = {},
                                                 const OpenOptions& options = {});
  /// Creates the ring and attaches as its consumer (for a consumer that starts first).
  [[nodiscard]] static Result<RingConsumer> create(std::string_view name, const RingParams& params,
                                                   const CreateOptions& options = {});
  /// Adopts a segment opened or created already (open_ring, create_ring) and
  /// attaches as its consumer; KindMismatch / SizeMismatch when it is not a ring.
  [[nodiscard]] static Result<RingConsumer> attach(Segment segment);

  /// The next unpeeked record, or nullopt when none is published yet. The span
  /// stays valid until release().
  [[nodiscard]] Result<std::optional<std::span<const std::byte>>> try_peek();
  /// Blocking peek: spins, then parks until a record arrives or `timeout` passes.
  [[nodiscard]] Result<std::optional<std::span<const std::byte>>> peek(
      std::chrono::nanoseconds timeout);
  /// Frees every record peeked so far (one release store of head; nothing in
  /// the records is rewritten).
  void release() noexcept;
  /// Forgets the peeks since the last release; the records will be peeked again.
  void unpeek() noexcept {
    peek_pos_ = head_;
    peeked_records_ = 0;
  }

  /// Copies the next record into `out` and releases it; nullopt when empty.
  /// A record larger than `out` is TooLarge and stays in the ring.
  /// With records peeked and not yet released, try_pop and pop are
  /// InvalidArgument (call release() or unpeek() first): a copy-and-release of
  /// one record cannot tell whether the earlier peeks were handled, so it
  /// neither releases them unseen nor delivers them twice. (drain() is a batch
  /// continuation: it goes on after the peeks and releases them with its own.)
  /// Inline in the caller like RingProducer::try_push. The value is the
  /// record's length in bytes.
  [[nodiscard, gnu::always_inline]] Result<std::optional<std::size_t>> try_pop(
      std::span<std::byte> out);
  /// As try_pop, waiting as peek() does; nullopt when `timeout` passed first.
  [[nodiscard]] Result<std::optional<std::size_t>> pop(std::span<std::byte> out,
                                                       std::chrono::nanoseconds timeout);
  /// Calls f(record) for up to `max` published records, then releases them all
  /// at once. Returns how many were handled. The endpoint guard is held for the
  /// whole batch (taken once, not once per record), so f must not call this
  /// consumer: such a call aborts as a concurrent use.
  template <class F>
  [[nodiscard]] Result<std::size_t> drain(F&& f, std::size_t max);

  /// Byte position of the end of the last released record (only grows).
  [[nodiscard]] std::uint64_t released_position() const noexcept { return head_; }
  /// Positions and counters now (never blocks; `tail` is the larger of what
  /// this consumer has peeked and the producer's lazy hint).
  [[nodiscard]] RingSnapshot snapshot() const noexcept {
    // acquire: pairs with the hint's release store (publish_hint).
    return snapshot_at(
        std::max(peek_pos_, control_->producer.tail.load(std::memory_order_acquire)));
  }

 private:
  friend struct detail::WaitSetAccess;
  [[nodiscard]] static Result<RingConsumer> adopt(Segment segment);
  /// try_peek() and release() for a caller that already holds the endpoint
  /// guard (drain and try_pop take it once).
  [[nodiscard]] Result<std::optional<std::span<const std::byte>>> peek_unguarded();
  /// The steady state of a peek, inline: the payload of the record at the peek
  /// position when it is a current-lap data record within every bound, else
  /// nullptr. `word` receives the header word it read: the caller answers an
  /// empty slot from it (ring::is_vacant) and leaves the rest to the slow
  /// path, which reads the slot again and says what it is (padding or
  /// Corrupt; pop_slow() also a record too large for the caller's buffer).
  /// Changes nothing.
  [[nodiscard]] const std::byte* peek_fast(std::uint32_t& length,
                                           std::uint64_t& word) const noexcept;
  [[nodiscard]] Result<std::optional<std::span<const std::byte>>> peek_slow();
  /// try_pop() past its fast path (guard held): peeks outstanding, padding,
  /// empty, a record larger than `out`, or Corrupt.
  [[nodiscard]] Result<std::optional<std::size_t>> pop_slow(std::span<std::byte> out);
  void release_unguarded() noexcept;
  /// Stores head_ (the release of `count` records), then the records counter
  /// and the producer's parked flag.
  [[gnu::always_inline]] void publish_head(std::uint64_t count) noexcept;
  [[nodiscard]] std::unexpected<Error> peeks_outstanding(const char* op) const;
  [[nodiscard]] std::unexpected<Error> corrupt(const char* what, std::uint64_t value,
                                               std::uint64_t bound) const;
  [[nodiscard]] std::unexpected<Error> foreign_header(std::uint64_t word) const;
  void wake_producer() noexcept;

  std::uint64_t head_ = 0;      ///< released position (mirror of control_->consumer.head)
  std::uint64_t peek_pos_ = 0;  ///< end of peeked records, >= head_
  std::uint64_t peeked_records_ = 0;
};

// ---------------------------------------------------------------- inline hot path

inline Result<std::optional<std::span<const std::byte>>> RingConsumer::try_peek() {
  const std::uintptr_t me = guard_.enter_short(kGuardName);
  auto r = peek_unguarded();
  guard_.leave_short(me, kGuardName);
  return r;
}

inline const std::byte* RingConsumer::peek_fast(std::uint32_t& length,
                                                std::uint64_t& word) const noexcept {
  std::byte* slot = at(peek_pos_);
  // [spsc.P'] acquire: pairs with the producer's [spsc.P]; a current-lap
  // header makes its payload (and the batch after it) visible.
  word = detail::header_at(slot).load(std::memory_order_acquire);
  // One compare for "a data record of the current lap"; the bounds below are
  // check_record()'s Data case, so any header this path accepts peek_slow()
  // would accept too, and everything else goes there.
  if (static_cast<std::uint32_t>(word >> 32) != (ring::kRecordData | lap(peek_pos_) << 8))
    return nullptr;
  length = static_cast<std::uint32_t>(word);
  const std::uint64_t size = ring::record_size(length);
  if (length > max_payload_ || (peek_pos_ & mask_) + size > capacity_ ||
      peek_pos_ + size - head_ > capacity_) [[unlikely]]
    return nullptr;
  return slot + ring::kRecordHeader;
}

inline Result<std::optional<std::span<const std::byte>>> RingConsumer::peek_unguarded() {
  std::uint32_t length = 0;
  std::uint64_t word = 0;
  if (const std::byte* payload = peek_fast(length, word); payload != nullptr) [[likely]] {
    peek_pos_ += ring::record_size(length);
    ++peeked_records_;
    return std::optional<std::span<const std::byte>>{std::span<const std::byte>(payload, length)};
  }
  // Empty, answered inline: a spinning caller then tests a result built in
  // registers instead of reloading one that an out-of-line call stored.
  if (ring::is_vacant(word, lap(peek_pos_))) return std::optional<std::span<const std::byte>>{};
  return peek_slow();
}

inline Result<std::optional<std::size_t>> RingConsumer::try_pop(std::span<std::byte> out) {
  const std::uintptr_t me = guard_.enter_short(kGuardName);
  std::uint32_t length = 0;
  std::uint64_t word = 0;
  if (peeked_records_ == 0) [[likely]] {
    if (const std::byte* payload = peek_fast(length, word);
        payload != nullptr && length <= out.size()) [[likely]] {
      detail::copy_payload(out.data(), payload, length);
      // peek and release in one step: no peek count kept in the handle.
      head_ = peek_pos_ = peek_pos_ + ring::record_size(length);
      publish_head(1);
      guard_.leave_short(me, kGuardName);
      return std::optional<std::size_t>{length};
    }
    // Empty, answered inline (see peek_unguarded).
    if (ring::is_vacant(word, lap(peek_pos_))) {
      guard_.leave_short(me, kGuardName);
      return std::optional<std::size_t>{};
    }
  }
  auto r = pop_slow(out);
  guard_.leave_short(me, kGuardName);
  return r;
}

inline void RingConsumer::release() noexcept {
  const std::uintptr_t me = guard_.enter_short(kGuardName);
  release_unguarded();
  guard_.leave_short(me, kGuardName);
}

inline void RingConsumer::release_unguarded() noexcept {
  if (peek_pos_ == head_) return;
  head_ = peek_pos_;
  const std::uint64_t count = peeked_records_;
  peeked_records_ = 0;
  publish_head(count);
}

inline void RingConsumer::publish_head(std::uint64_t count) noexcept {
  crash_point(2);  // RingCrashPoint::ReleaseBeforeHead
  // [spsc.C] release: frees the records' bytes; pairs with [spsc.C'] in the
  // producer (which reads head only when the ring looks full).
  control_->consumer.head.store(head_, std::memory_order_release);
  crash_point(3);  // RingCrashPoint::ReleaseAfterHead
  // Our own line, written only by us: a load and a store, no copy in the handle.
  auto& records = control_->consumer.records;
  records.store(records.load(std::memory_order_relaxed) + count,
                std::memory_order_relaxed);  // statistics only
  // [spsc.D] light barrier, then the producer's flag from our own line: pairs
  // with [spsc.D'] (the producer's flag store and membarrier in reserve()).
  light_barrier();
  if (control_->consumer.producer_parked.load(std::memory_order_relaxed) != 0) [[unlikely]]
    wake_producer();
}

template <class F>
Result<std::size_t> RingConsumer::drain(F&& f, std::size_t max) {
  const detail::EndpointGuard::Scope scope(guard_, "an SPSC endpoint");
  std::size_t n = 0;
  while (n < max) {
    auto r = peek_unguarded();
    if (!r) {
      release_unguarded();
      return std::unexpected(std::move(r.error()));
    }
    if (!*r) break;
    f(**r);
    ++n;
  }
  release_unguarded();
  return n;
}

}  // namespace shm
