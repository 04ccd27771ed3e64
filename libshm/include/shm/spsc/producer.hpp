/// @file
/// The producing end of an SpscRing (move-only; one per ring, enforced by the
/// attachment table: a second live producer gets Errc::RoleTaken).
#pragma once

#include "shm/spsc/endpoint.hpp"

#include <chrono>
#include <cstring>
#include <optional>
#include <span>

namespace shm::detail {
struct WaitSetAccess;  // the WaitSet reads a member's state (shm/waitset/waitset.hpp)
}  // namespace shm::detail

namespace shm {

/// The producing end of an SpscRing: reserve and commit in place, or copy in
/// with try_push / push. One thread at a time (the endpoint guard aborts a
/// concurrent use). Also: segment(), attachment(), capacity_bytes(),
/// max_payload(), heartbeat().
class RingProducer : public detail::RingEndpoint {
 public:
  /// Attached to nothing: only assignment is valid.
  RingProducer() = default;
  /// Takes over the attachment and any open reservation.
  RingProducer(RingProducer&&) noexcept = default;
  /// Detaches this producer, then takes over `other`'s attachment.
  RingProducer& operator=(RingProducer&&) noexcept = default;

  /// Creates the ring segment and attaches as its producer.
  [[nodiscard]] static Result<RingProducer> create(std::string_view name, const RingParams& params,
                                                   const CreateOptions& options = {});
  /// Opens an existing ring and attaches as its producer (taking over a dead one).
  [[nodiscard]] static Result<RingProducer> open(std::string_view name,
                                                 const RingParams& expected = {},
                                                 const OpenOptions& options = {});
  /// Adopts a segment opened or created already (open_ring, create_ring) and
  /// attaches as its producer; KindMismatch / SizeMismatch when it is not a ring.
  [[nodiscard]] static Result<RingProducer> attach(Segment segment);

  /// Reserves room for an n-byte record past every earlier reservation; nullopt
  /// when the ring is full. Nothing is visible to the consumer until commit().
  [[nodiscard]] Result<std::optional<std::span<std::byte>>> try_reserve(std::size_t n);
  /// Blocking reserve: spins, then parks until space appears or `timeout` passes.
  [[nodiscard]] Result<std::optional<std::span<std::byte>>> reserve(
      std::size_t n, std::chrono::nanoseconds timeout);
  /// Publishes every record reserved since the last commit: one release store
  /// of the first record's header (see the protocol note in layout.hpp).
  void commit() noexcept;
  /// Drops every reservation made since the last commit.
  void abandon() noexcept {
    reserved_ = tail_;
    pending_records_ = 0;
    first_header_ = 0;
  }

  /// @name Copying conveniences
  /// Reserve, copy and commit one record; TooLarge beyond max_payload().
  ///@{

  /// Publishes a copy of `record`; false when the ring is full.
  /// Its steady state is inline in the caller (always_inline: a call would
  /// save registers, stores that wait in the store buffer behind the record
  /// line's transfer); everything else is one call to push_slow().
  [[nodiscard, gnu::always_inline]] Result<bool> try_push(std::span<const std::byte> record);
  /// As try_push, waiting as reserve() does; false when `timeout` passed first.
  [[nodiscard]] Result<bool> push(std::span<const std::byte> record,
                                  std::chrono::nanoseconds timeout);
  ///@}
  /// Pushes records in order until one does not fit; one commit for all.
  /// Returns how many were pushed. The endpoint guard is taken once for the
  /// whole batch, not once per record: the cheapest way to publish many.
  [[nodiscard]] Result<std::size_t> try_push_batch(
      std::span<const std::span<const std::byte>> records);

  /// Byte position of the end of the last committed record (only grows).
  [[nodiscard]] std::uint64_t published_position() const noexcept { return tail_; }
  /// Positions and counters now (never blocks; `tail` is this producer's own).
  [[nodiscard]] RingSnapshot snapshot() const noexcept { return snapshot_at(tail_); }

 private:
  friend struct detail::WaitSetAccess;
  [[nodiscard]] static Result<RingProducer> adopt(Segment segment);
  /// try_reserve() and commit() for a caller that already holds the endpoint
  /// guard (the batch paths take it once, not once per record).
  [[nodiscard]] Result<std::optional<std::span<std::byte>>> reserve_unguarded(std::size_t n);
  /// The steady state of a reservation, inline: the payload of a new n-byte
  /// record when it fits before the buffer end and within the cached head,
  /// else nullptr (reserve_slow() then pads, refreshes head, or says TooLarge).
  [[nodiscard]] std::byte* reserve_fast(std::size_t n) noexcept;
  [[nodiscard]] Result<std::optional<std::span<std::byte>>> reserve_slow(std::size_t n);
  void commit_unguarded() noexcept;
  /// try_push() past its inline path (guard held): a batch open, padding, a
  /// refresh of head, a full ring or TooLarge.
  [[nodiscard]] Result<bool> push_slow(std::span<const std::byte> record);
  /// After a publish of `count` records ending at tail_ (the header's release
  /// store done): the records counter, the lazy `tail` hint, then the
  /// consumer's parked flag.
  [[gnu::always_inline]] void after_publish(std::uint64_t old_tail, std::uint64_t count) noexcept;
  void publish_hint() noexcept;
  [[nodiscard]] Result<bool> refresh_head(std::uint64_t need_end);
  void wake_consumer() noexcept;
  /// Stores the header of the record at `pos`, or holds it back for commit()
  /// when it is the first of the batch (at the published end).
  void put_header(std::uint64_t pos, std::uint64_t word) noexcept {
    if (pos == tail_)
      first_header_ = word;
    else
      // relaxed: unreachable until commit's release store of the first header.
      detail::header_at(at(pos)).store(word, std::memory_order_relaxed);
  }

  std::uint64_t tail_ = 0;             ///< published position (control_->producer.tail is its hint)
  std::uint64_t reserved_ = 0;         ///< end of reservations, >= tail_
  std::uint64_t cached_head_ = 0;      ///< consumer's head as last read; refreshed when full
  std::uint64_t pending_records_ = 0;  ///< records reserved since the last commit
  std::uint64_t first_header_ = 0;     ///< the batch's first header, stored by commit()
};

// ---------------------------------------------------------------- inline hot path

inline Result<std::optional<std::span<std::byte>>> RingProducer::try_reserve(std::size_t n) {
  const std::uintptr_t me = guard_.enter_short(kGuardName);
  auto r = reserve_unguarded(n);
  guard_.leave_short(me, kGuardName);
  return r;
}

inline std::byte* RingProducer::reserve_fast(std::size_t n) noexcept {
  const std::uint64_t need = ring::record_size(n);
  if (n > max_payload_ || (reserved_ & mask_) + need > capacity_ ||
      reserved_ + need - cached_head_ > capacity_) [[unlikely]]
    return nullptr;
  put_header(reserved_,
             ring::header_word(static_cast<std::uint32_t>(n), ring::kRecordData, lap(reserved_)));
  std::byte* payload = at(reserved_) + ring::kRecordHeader;
  reserved_ += need;
  ++pending_records_;
  return payload;
}

inline Result<std::optional<std::span<std::byte>>> RingProducer::reserve_unguarded(std::size_t n) {
  if (std::byte* payload = reserve_fast(n); payload != nullptr) [[likely]]
    return std::optional<std::span<std::byte>>{std::span<std::byte>(payload, n)};
  return reserve_slow(n);
}

inline void RingProducer::commit() noexcept {
  const std::uintptr_t me = guard_.enter_short(kGuardName);
  commit_unguarded();
  guard_.leave_short(me, kGuardName);
}

inline void RingProducer::commit_unguarded() noexcept {
  if (reserved_ == tail_) return;
  // The terminator: the word the consumer polls after this batch reads empty.
  // With no 8 bytes of room (reserved_ == cached_head_ + capacity) that word
  // is the header of the record at cached_head_, one lap older: empty too.
  // relaxed: ordered before the consumer's reads by [spsc.P] below.
  if (reserved_ + ring::kRecordHeader - cached_head_ <= capacity_)
    detail::header_at(at(reserved_)).store(0, std::memory_order_relaxed);
  crash_point(0);  // RingCrashPoint::CommitBeforePublish
  // [spsc.P] release: publishes the batch (payloads, later headers, the
  // terminator); pairs with [spsc.P'] in RingConsumer::try_peek().
  detail::header_at(at(tail_)).store(first_header_, std::memory_order_release);
  crash_point(1);  // RingCrashPoint::CommitAfterPublish
  const std::uint64_t old_tail = tail_;
  const std::uint64_t count = pending_records_;
  tail_ = reserved_;
  pending_records_ = 0;
  first_header_ = 0;
  after_publish(old_tail, count);
}

inline void RingProducer::after_publish(std::uint64_t old_tail, std::uint64_t count) noexcept {
  // The counter lives on our own line and only we write it: a load and a
  // store, no copy in the handle (each store a message makes waits in the
  // store buffer behind the record line's transfer; see the protocol note).
  auto& records = control_->producer.records;
  records.store(records.load(std::memory_order_relaxed) + count,
                std::memory_order_relaxed);  // statistics only
  // The hint is stored lazily: when the tail crosses a multiple of
  // capacity / 8 (a new producer walks the chain from it, so a lagging hint
  // costs that walk at most a ring, never a record).
  if (((old_tail ^ tail_) >> (capacity_log2_ - 3)) != 0) [[unlikely]]
    publish_hint();
  // [spsc.D] light barrier, then the consumer's flag from our own line: pairs
  // with [spsc.D'] (the consumer's flag store and membarrier in peek()).
  light_barrier();
  if (control_->producer.consumer_parked.load(std::memory_order_relaxed) != 0) [[unlikely]]
    wake_consumer();
}

inline void RingProducer::publish_hint() noexcept {
  // release: a hint for a new producer and the tools, after the headers it
  // covers; pairs with their acquire loads.
  control_->producer.tail.store(tail_, std::memory_order_release);
}

inline Result<bool> RingProducer::try_push(std::span<const std::byte> record) {
  const std::uintptr_t me = guard_.enter_short(kGuardName);
  const std::size_t n = record.size();
  const std::uint64_t need = ring::record_size(n);
  const std::uint64_t pos = tail_;
  // The steady state, one record and nothing else in flight: no batch open,
  // the record fits before the buffer end and, with the terminator after it,
  // within the cached head. Everything else (padding, a refresh of head, a
  // reservation pending) takes the general path below.
  if (reserved_ == pos && n <= max_payload_ && (pos & mask_) + need <= capacity_ &&
      pos + need + ring::kRecordHeader - cached_head_ <= capacity_) [[likely]] {
    std::byte* slot = at(pos);
    detail::copy_payload(slot + ring::kRecordHeader, record.data(), n);
    // relaxed: the terminator, ordered before the consumer's reads by [spsc.P].
    detail::header_at(at(pos + need)).store(0, std::memory_order_relaxed);
    crash_point(0);  // RingCrashPoint::CommitBeforePublish
    // [spsc.P] release: publishes the record and the terminator.
    detail::header_at(slot).store(
        ring::header_word(static_cast<std::uint32_t>(n), ring::kRecordData, lap(pos)),
        std::memory_order_release);
    crash_point(1);  // RingCrashPoint::CommitAfterPublish
    tail_ = reserved_ = pos + need;
    after_publish(pos, 1);
    guard_.leave_short(me, kGuardName);
    return true;
  }
  auto r = push_slow(record);
  guard_.leave_short(me, kGuardName);
  return r;
}

}  // namespace shm
