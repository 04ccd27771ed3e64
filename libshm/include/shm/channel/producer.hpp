/// @file
/// The producing end of a Channel (move-only; one per channel lifetime: the
/// attachment table refuses a second live producer with Errc::RoleTaken, and a
/// channel whose producer is gone cannot get a new one).
///
/// SendStatus outcomes. Back-pressure is not an error: SendStatus::RingFull (the
/// descriptor ring is full) and SendStatus::PageQuotaExhausted (rotation needs a
/// slot the consumer has not released yet) are ordinary outcomes and change
/// nothing in the channel. A payload larger than an empty page is TooLarge.
/// After create, no operation allocates on the heap (error paths aside).
#pragma once

#include "shm/channel/endpoint.hpp"
#include "shm/platform/page_crc.hpp"

#include <cassert>
#include <chrono>
#include <cstring>
#include <span>
#include <utility>

namespace shm::detail {
struct WaitSetAccess;  // the WaitSet reads a member's state (shm/waitset/waitset.hpp)
}  // namespace shm::detail

namespace shm {

/// Whether a send or a reservation was admitted; refusals are back-pressure.
enum class SendStatus : std::uint8_t {
  Ok,                  ///< admitted (or, for a reservation, space reserved)
  RingFull,            ///< the descriptor ring is full: the consumer is behind
  PageQuotaExhausted,  ///< all P page slots are outstanding: the consumer is behind
};
/// "ok", "ring full" or "page quota exhausted", for messages and tools.
[[nodiscard]] std::string_view to_string(SendStatus a) noexcept;

/// What an admitted payload is called from now on.
struct SendOutcome {
  SendStatus status = SendStatus::RingFull;  ///< Ok, or why it was refused
  std::uint64_t sequence = 0;                ///< when Ok: the payload's sequence
  std::uint64_t epoch = 0;                   ///< when Ok: the page epoch it was admitted to

  /// status == Ok.
  [[nodiscard]] bool admitted() const noexcept { return status == SendStatus::Ok; }
  /// admitted().
  explicit operator bool() const noexcept { return admitted(); }
  /// The generation its descriptor carries: the epoch truncated to 32 bits.
  [[nodiscard]] std::uint32_t generation() const noexcept {
    return static_cast<std::uint32_t>(epoch);
  }
};

class ChannelProducer;

/// Writable bytes in the active page (zero copy), owned until committed or
/// abandoned (move-only). Nothing is visible to the consumer until commit().
/// A reservation that is destroyed without commit() is abandoned: an exception
/// or an early return between reserve and commit leaves the producer free to
/// reserve again. A refused reservation (status RingFull / PageQuotaExhausted)
/// owns nothing. Like the lease on the consumer side, a reservation points back
/// at its producer: commit or drop it before the producer is moved or destroyed.
class Reservation {
 public:
  SendStatus status = SendStatus::RingFull;  ///< Ok: bytes reserved; else why it was refused

  /// Refused (RingFull) and owning nothing.
  Reservation() = default;
  /// Takes over `o`'s bytes; `o` owns nothing afterwards.
  Reservation(Reservation&& o) noexcept
      : status(o.status),
        owner_(std::exchange(o.owner_, nullptr)),
        bytes_(std::exchange(o.bytes_, {})) {}
  /// Abandons what this one owns, then takes over `o`'s bytes.
  Reservation& operator=(Reservation&& o) noexcept {
    if (this != &o) {
      abandon();
      status = o.status;
      owner_ = std::exchange(o.owner_, nullptr);
      bytes_ = std::exchange(o.bytes_, {});
    }
    return *this;
  }
  /// Not copyable: one owner per reservation.
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;
  ~Reservation() { abandon(); }

  /// status == Ok (still true after commit(); pending() tells whether it still owns bytes).
  explicit operator bool() const noexcept { return status == SendStatus::Ok; }
  /// True from an Ok reserve until commit() or abandon(): bytes() is writable.
  [[nodiscard]] bool pending() const noexcept { return owner_ != nullptr; }
  /// The reserved bytes while pending; empty once committed or abandoned.
  [[nodiscard]] std::span<std::byte> bytes() const noexcept { return bytes_; }

  /// Publishes the reservation (all of it, or its first `used` bytes): CRC32C,
  /// page release [chan.P], descriptor, ring release [chan.R]. Afterwards the
  /// reservation is empty. Errc::InvalidArgument (and an assert in debug
  /// builds) when nothing is pending (refused, committed or abandoned), when
  /// `used` exceeds the reservation, or when finish() dropped it.
  [[nodiscard]] Result<SendOutcome> commit() { return commit(bytes_.size()); }
  /// As commit(), publishing only the first `used` bytes (<= bytes().size()).
  [[nodiscard]] Result<SendOutcome> commit(std::size_t used);
  /// Drops the reservation; nothing becomes visible. Idempotent; the destructor calls it.
  inline void abandon() noexcept;

 private:
  friend class ChannelProducer;
  Reservation(ChannelProducer* owner, std::span<std::byte> bytes) noexcept
      : status(SendStatus::Ok), owner_(owner), bytes_(bytes) {}
  explicit Reservation(SendStatus refused) noexcept : status(refused) {}

  ChannelProducer* owner_ = nullptr;
  std::span<std::byte> bytes_;
};

/// The producing end of a Channel: reserve and commit in place, or copy in
/// with try_send / send, then finish(). From its endpoint base: segment(),
/// attachment(), the geometry (pages() ... max_payload()), state(), fault(),
/// snapshot(), heartbeat().
class ChannelProducer : public detail::ChannelEndpoint {
 public:
  /// Attached to nothing: only assignment is valid.
  ChannelProducer() = default;
  /// Takes over the attachment (never with a Reservation alive: it points back here).
  ChannelProducer(ChannelProducer&&) noexcept = default;
  /// Detaches this producer, then takes over `other`'s attachment.
  ChannelProducer& operator=(ChannelProducer&&) noexcept = default;
  ~ChannelProducer() = default;

  /// Creates the channel segment and attaches as its producer.
  [[nodiscard]] static Result<ChannelProducer> create(std::string_view name,
                                                      const ChannelParams& params,
                                                      const CreateOptions& options = {});
  /// Opens a channel (created by the consumer, say) and attaches as its producer.
  [[nodiscard]] static Result<ChannelProducer> open(std::string_view name,
                                                    const ChannelParams& expected = {},
                                                    const OpenOptions& options = {});
  /// Adopts a segment opened or created already (open_channel,
  /// create_channel) and attaches as its producer; KindMismatch / SizeMismatch
  /// when it is not a channel.
  [[nodiscard]] static Result<ChannelProducer> attach(Segment segment);

  /// @name Sending
  /// Every call below takes the endpoint guard (one thread at a time, aborts
  /// otherwise), and so do Reservation::commit() and abandon(); a blocking
  /// reserve or send holds it while it waits.
  ///@{

  /// Reserves n bytes in the active page, rotating to a fresh page when the
  /// active one is out of bytes or descriptor cells (ADR-0010). Refusals
  /// (RingFull, PageQuotaExhausted) mutate nothing.
  [[nodiscard]] Result<Reservation> try_reserve(std::size_t n);
  /// Blocking reserve: spins, then parks until room appears or `timeout`
  /// passes; on timeout the status says what was missing.
  [[nodiscard]] Result<Reservation> reserve(std::size_t n, std::chrono::nanoseconds timeout);
  // Commit or abandon through the Reservation (see above); one at a time.

  /// Copying convenience: try_reserve, copy `payload`, commit. A refusal
  /// (RingFull, PageQuotaExhausted) is the outcome's status.
  [[nodiscard]] Result<SendOutcome> try_send(std::span<const std::byte> payload);
  /// As try_send, waiting as reserve() does; on timeout the status says what was missing.
  [[nodiscard]] Result<SendOutcome> send(std::span<const std::byte> payload,
                                         std::chrono::nanoseconds timeout);

  /// Ends the stream: seals the active page and stores CLEAN. Idempotent.
  [[nodiscard]] Result<void> finish();
  ///@}

  /// The epoch of the active page (from 0).
  [[nodiscard]] std::uint64_t active_epoch() const noexcept { return page_.epoch(); }
  /// The sequence the next admitted payload gets (== payloads admitted).
  [[nodiscard]] std::uint64_t next_sequence() const noexcept { return page_.next_sequence(); }
  /// Descriptors published so far (the ring's tail).
  [[nodiscard]] std::uint64_t published_descriptors() const noexcept { return tail_; }
  /// True while a Reservation is outstanding (not committed or abandoned).
  [[nodiscard]] bool has_reservation() const noexcept { return reserving_; }

 private:
  friend struct detail::WaitSetAccess;
  friend class detail::ChannelTesting;
  friend class Reservation;

  /// try_reserve() / reserve() inside a guard scope the caller holds.
  [[nodiscard]] Result<Reservation> reserve_once(std::size_t n);
  [[nodiscard]] Result<Reservation> reserve_waiting(std::size_t n,
                                                    std::chrono::nanoseconds timeout);
  /// Reservation::commit() / abandon(): take the guard, then act.
  [[nodiscard]] Result<SendOutcome> commit_reservation(std::size_t used);
  void abandon_reservation() noexcept;
  /// Publishes the reservation's first `used` bytes, whose CRC32C is `crc`.
  SendOutcome publish(std::size_t used, std::uint32_t crc) noexcept;
  // Rotation, one step per function (tests stop a helper between them).
  [[nodiscard]] Result<bool> rotate();        ///< false: PageQuotaExhausted
  [[nodiscard]] Result<bool> quota_allows();  ///< [chan.A]
  void seal_active() noexcept;                ///< [chan.S]
  void rebind_next() noexcept;                ///< slot (active + 1) mod P, active += 1
  [[nodiscard]] Result<bool> refresh_head();
  [[nodiscard]] std::unexpected<Error> not_open();
  [[nodiscard]] std::unexpected<Error> too_large(std::size_t n) const;
  [[nodiscard]] std::unexpected<Error> reservation_misuse(std::size_t used) const;
  /// Binds the producer role on a segment just created or opened, then resume().
  [[nodiscard]] static Result<ChannelProducer> adopt(Result<Segment> seg);
  [[nodiscard]] Result<void> resume();

  page::PageWriter page_;   ///< the active page
  std::uint64_t tail_ = 0;  ///< descriptors published (mirror of control.producer.tail)
  /// The consumer's head as last read; refreshed when the ring looks full.
  std::uint64_t cached_head_ = 0;
  std::uint64_t cached_released_ = 0;  ///< released_epoch as last read; refreshed when rotating
  std::uint64_t rotations_ = 0;        ///< mirror of control.stats.rotations
  std::uint64_t quota_refusals_ = 0;   ///< mirror of control.stats.quota_refusals
  std::uint64_t ring_full_ = 0;        ///< mirror of control.stats.ring_full
  std::size_t reserved_length_ = 0;    ///< bytes of the outstanding reservation
  bool reserving_ = false;             ///< a Reservation is outstanding
  bool finished_ = false;              ///< finish() ran
};

// ---------------------------------------------------------------- inline hot path

inline Result<Reservation> ChannelProducer::try_reserve(std::size_t n) {
  const detail::EndpointGuard::Scope scope(guard_, "a channel endpoint");
  return reserve_once(n);
}

inline Result<Reservation> ChannelProducer::reserve_once(std::size_t n) {
  assert(!reserving_ && "a reservation is outstanding: commit() or abandon() it first");
  // relaxed: a hint only; not_open() re-reads it with acquire before reporting.
  if (control().terminal.word.load(std::memory_order_relaxed) != channel::kTerminalOpen ||
      finished_ || reserving_) [[unlikely]]
    return not_open();
  if (n > view_.params.max_payload) [[unlikely]]
    return too_large(n);
  // Ring first: a RingFull refusal must not have rotated the page.
  if (tail_ - cached_head_ >= view_.params.ring_cells) [[unlikely]] {
    auto room = refresh_head();
    if (!room) return std::unexpected(std::move(room.error()));
    if (!*room) {
      control().stats.ring_full.store(++ring_full_, std::memory_order_relaxed);  // statistics
      return Reservation(SendStatus::RingFull);
    }
  }
  if (!page_.fits(n)) [[unlikely]] {
    auto rotated = rotate();
    if (!rotated) return std::unexpected(std::move(rotated.error()));
    if (!*rotated) return Reservation(SendStatus::PageQuotaExhausted);
    // Re-validation against the fresh page: n <= max_payload fits an empty page.
    assert(page_.fits(n));
  }
  reserving_ = true;
  reserved_length_ = n;
  return Reservation(this, std::span<std::byte>(page_.next_payload(), n));
}

inline Result<SendOutcome> ChannelProducer::commit_reservation(std::size_t used) {
  const detail::EndpointGuard::Scope scope(guard_, "a channel endpoint");
  assert(reserving_ && "commit() of a reservation that finish() dropped");
  assert(used <= reserved_length_ && "commit() of more bytes than reserved");
  if (!reserving_ || used > reserved_length_) [[unlikely]]
    return reservation_misuse(used);
  return publish(used, page::checksum(page_.next_payload(), used));
}

inline void ChannelProducer::abandon_reservation() noexcept {
  const detail::EndpointGuard::Scope scope(guard_, "a channel endpoint");
  reserving_ = false;
}

inline SendOutcome ChannelProducer::publish(std::size_t used, std::uint32_t crc) noexcept {
  reserving_ = false;
  const auto length = static_cast<std::uint32_t>(used);
  const std::uint64_t sequence = page_.next_sequence();
  const std::uint32_t cell = page_.publish(length, crc, sequence);  // [chan.P]
  const channel::Descriptor d{sequence, page_.generation(), cell};
  std::memcpy(view_.ring + (tail_ & ring_mask_), &d, sizeof d);
  ++tail_;
  // [chan.R] publishes the descriptor (and, through [chan.P] before it, the page cell
  // and payload); pairs with [chan.R'] in the consumer's refresh_tail(). [chan.D1]
  // seq_cst, with the seq_cst load of the parked flag below: Dekker pairing
  // with [chan.D1'] in ChannelConsumer::receive(), so a parking consumer either
  // sees the new tail or we see its flag (one xchg: the price of a fence).
  control().producer.tail.store(tail_, std::memory_order_seq_cst);
  if (control().waiters.consumer_parked.load(std::memory_order_seq_cst) != 0) [[unlikely]]
    wake_consumer();
  return SendOutcome{SendStatus::Ok, sequence, page_.epoch()};
}

inline Result<SendOutcome> ChannelProducer::try_send(std::span<const std::byte> payload) {
  const detail::EndpointGuard::Scope scope(guard_, "a channel endpoint");
  auto r = reserve_once(payload.size());
  if (!r) return std::unexpected(std::move(r.error()));
  if (!*r) return SendOutcome{r->status, 0, 0};
  const std::span<std::byte> to = std::exchange(r->bytes_, {});
  r->owner_ = nullptr;  // published below, not abandoned
  // One pass over the payload: copy into the page and checksum it.
  return publish(payload.size(), page::copy_checksum(to.data(), payload.data(), payload.size()));
}

// ---------------------------------------------------------------- Reservation

inline Result<SendOutcome> Reservation::commit(std::size_t used) {
  assert(owner_ != nullptr && "commit() of a reservation that is not pending");
  if (owner_ == nullptr) [[unlikely]]
    return fail(Errc::InvalidArgument,
                "commit() of a reservation that is not pending (refused, committed or abandoned)");
  bytes_ = {};
  return std::exchange(owner_, nullptr)->commit_reservation(used);
}

inline void Reservation::abandon() noexcept {
  bytes_ = {};
  if (owner_ != nullptr) std::exchange(owner_, nullptr)->abandon_reservation();
}

}  // namespace shm
