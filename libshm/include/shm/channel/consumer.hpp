/// @file
/// The consuming end of a Channel (move-only; one per channel).
///
/// try_receive() hands out a ChannelLease: a zero-copy view of the next payload
/// inside its page, with its sequence and epoch. The lease must be given back
/// (release(), or its destructor) before the consumer receives again: receiving
/// with a lease held is refused (Errc::InvalidArgument, and an assert in debug
/// builds). That rule is what makes page reuse safe: the consumer releases an
/// epoch (released_epoch [chan.E]) only inside a receive, so no lease can point into
/// a page the producer is about to rebind. Do not move a consumer while one of
/// its leases is alive (the lease points back at it).
///
/// Outcomes: Received (a lease), Empty (nothing published yet: back-pressure,
/// not an error), End (the producer finished and everything it published was
/// committed). Every integrity violation is a terminal error (Errc::Corrupt)
/// that marks the channel FAULTED; a producer that is gone without finishing is
/// Errc::ProducerDied once everything it published has been received; later
/// calls repeat the terminal error. The "is the producer alive" probe is a
/// syscall, so it only runs when the channel looks empty: in receive() before
/// parking and at least every kLivenessSlice while parked, in try_receive() at
/// most once per kProbeInterval.
///
/// Receive coalescing (off by default; set_coalescing()): like a network
/// card's interrupt moderation (rx-frames / rx-usecs), a consumer may leave a
/// few waiting payloads alone until `descriptors` of them have gathered or
/// `max_delay` has passed since it first saw them. While it waits it reads no
/// descriptor, cell or payload line, so the producer fills whole cache lines
/// undisturbed; without it, a consumer that keeps up reads every line the
/// producer is about to write next, and both sides pay a cache-line transfer
/// per line per message (bench/RESULTS.md, Channel). Coalescing trades up to
/// max_delay of latency for that throughput. A finished or faulted stream and
/// a blocking receive about to park are never held back; the last payloads of
/// a producer that died wait at most until the next liveness probe.
///
/// A consumer that dies may be replaced: open() resumes at the first payload
/// whose lease was not given back (at-least-once for the lease in hand).
#pragma once

#include "shm/channel/endpoint.hpp"
#include "shm/platform/page_crc.hpp"

#include <cassert>
#include <chrono>
#include <cstring>
#include <optional>
#include <span>
#include <utility>

namespace shm::detail {
struct WaitSetAccess;  // the WaitSet reads a member's state (shm/waitset/waitset.hpp)
}  // namespace shm::detail

namespace shm {

class ChannelConsumer;

/// What a receive found (terminal problems are errors, not statuses).
enum class ReceiveStatus : std::uint8_t {
  Received,  ///< a payload
  Empty,     ///< nothing published yet: back-pressure, not an error
  End        ///< the producer finished and everything it published was received
};
/// "received", "empty" or "end", for messages and tools.
[[nodiscard]] std::string_view to_string(ReceiveStatus s) noexcept;

/// A payload on loan from its page (move-only). Valid until released: after
/// release() (or a move out of it) the lease is empty, like a default one:
/// bytes() is empty, data() is null, sequence() and epoch() are 0. The bytes
/// of a released payload may belong to another epoch at any moment (the slot
/// is rebound once the consumer moves past its page), so they are not exposed.
/// release() takes the consumer's endpoint guard: give a lease back from the
/// thread that uses the consumer (or one that takes turns with it).
class ChannelLease {
 public:
  /// Empty: holds nothing.
  ChannelLease() = default;
  /// Takes over `o`'s payload; `o` is empty afterwards.
  ChannelLease(ChannelLease&& o) noexcept
      : owner_(std::exchange(o.owner_, nullptr)),
        data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        sequence_(std::exchange(o.sequence_, 0)),
        epoch_(std::exchange(o.epoch_, 0)) {}
  /// Gives back what this lease holds, then takes over `o`'s payload.
  ChannelLease& operator=(ChannelLease&& o) noexcept {
    if (this != &o) {
      release();
      owner_ = std::exchange(o.owner_, nullptr);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      sequence_ = std::exchange(o.sequence_, 0);
      epoch_ = std::exchange(o.epoch_, 0);
    }
    return *this;
  }
  ChannelLease(const ChannelLease&) = delete;
  ChannelLease& operator=(const ChannelLease&) = delete;
  ~ChannelLease() { release(); }

  /// The payload, inside its page (read-only); empty once given back.
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  /// The payload's first byte; null once given back.
  [[nodiscard]] const std::byte* data() const noexcept { return data_; }
  /// The payload's length in bytes; 0 once given back.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// The payload's sequence (from 0, one per payload sent).
  [[nodiscard]] std::uint64_t sequence() const noexcept { return sequence_; }
  /// The epoch of the page that holds it.
  [[nodiscard]] std::uint64_t epoch() const noexcept { return epoch_; }
  /// The generation its descriptor carried: the epoch truncated to 32 bits.
  [[nodiscard]] std::uint32_t generation() const noexcept {
    return static_cast<std::uint32_t>(epoch_);
  }
  /// True until given back.
  [[nodiscard]] bool held() const noexcept { return owner_ != nullptr; }
  /// held().
  explicit operator bool() const noexcept { return held(); }
  /// Gives the payload back (idempotent): the consumer may advance past it,
  /// and this lease becomes empty.
  inline void release() noexcept;

 private:
  friend class ChannelConsumer;
  ChannelLease(ChannelConsumer* owner, const std::byte* data, std::size_t size,
               std::uint64_t sequence, std::uint64_t epoch) noexcept
      : owner_(owner), data_(data), size_(size), sequence_(sequence), epoch_(epoch) {}

  ChannelConsumer* owner_ = nullptr;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::uint64_t sequence_ = 0;
  std::uint64_t epoch_ = 0;
};

/// A receive's outcome: a lease on the payload when Received.
struct Received {
  ReceiveStatus status = ReceiveStatus::Empty;  ///< what the receive found
  ChannelLease lease;                           ///< when Received

  /// status == Received.
  explicit operator bool() const noexcept { return status == ReceiveStatus::Received; }
};

/// A payload copied out (receive_into): already given back.
struct Copied {
  ReceiveStatus status = ReceiveStatus::Empty;  ///< what the receive found
  std::size_t size = 0;                         ///< when Received: bytes written to the buffer
  std::uint64_t sequence = 0;                   ///< when Received
  std::uint64_t epoch = 0;                      ///< when Received

  /// status == Received.
  explicit operator bool() const noexcept { return status == ReceiveStatus::Received; }
};

/// See "Receive coalescing" in the file comment. descriptors == 1 (the default) turns it off.
/// At most min(ring capacity, (P - 1) x descriptors per page) can ever wait at
/// once, so `descriptors` is refused above that; with payloads so large that a
/// page fills by bytes first, fewer can, and every batch then waits max_delay:
/// choose N below what P - 1 pages hold.
struct Coalescing {
  std::uint32_t descriptors = 1;          ///< deliver once this many wait: [1, see above]
  std::chrono::nanoseconds max_delay{0};  ///< ... or once the first waited this long: [0, 1 s]
};

/// The consuming end of a Channel: leases (try_receive / receive) or copies
/// (try_receive_into / receive_into), in sequence order, every payload
/// checked. From its endpoint base: segment(), attachment(), the geometry
/// (pages() ... max_payload()), state(), fault(), snapshot(), heartbeat().
class ChannelConsumer : public detail::ChannelEndpoint {
 public:
  /// A parked consumer re-probes the producer's liveness this often.
  static constexpr std::chrono::milliseconds kLivenessSlice{20};
  /// try_receive() on an empty channel probes liveness at most this often.
  static constexpr std::chrono::milliseconds kProbeInterval{1};

  /// Attached to nothing: only assignment is valid.
  ChannelConsumer() = default;
  /// Takes over the attachment (never with a lease alive: it points back here).
  ChannelConsumer(ChannelConsumer&&) noexcept = default;
  /// Detaches this consumer, then takes over `other`'s attachment.
  ChannelConsumer& operator=(ChannelConsumer&&) noexcept = default;
  ~ChannelConsumer() = default;

  /// Opens a channel and attaches as its consumer (resuming a dead predecessor).
  [[nodiscard]] static Result<ChannelConsumer> open(std::string_view name,
                                                    const ChannelParams& expected = {},
                                                    const OpenOptions& options = {});
  /// Creates the channel and attaches as its consumer (for a consumer that starts first).
  [[nodiscard]] static Result<ChannelConsumer> create(std::string_view name,
                                                      const ChannelParams& params,
                                                      const CreateOptions& options = {});
  /// Adopts a segment opened or created already (open_channel,
  /// create_channel) and attaches as its consumer; KindMismatch / SizeMismatch
  /// when it is not a channel.
  [[nodiscard]] static Result<ChannelConsumer> attach(Segment segment);

  /// The next payload on loan (Received), Empty, or End; Corrupt /
  /// ProducerDied are terminal errors, InvalidArgument while a lease is held.
  /// Never blocks.
  [[nodiscard]] Result<Received> try_receive();
  /// Blocking receive: spins, then parks until a payload, the end of the stream
  /// or a terminal outcome arrives, or `timeout` passes (then Empty).
  [[nodiscard]] Result<Received> receive(std::chrono::nanoseconds timeout);

  /// @name Copying variants
  /// The payload is copied into `out` while its CRC32C is checked (one pass)
  /// and given back at once. A payload larger than `out` is Errc::TooLarge
  /// and stays in the channel. The same checks as above; a checksum failure
  /// is terminal (what was written to `out` is garbage).
  ///@{

  /// As try_receive, copying (never blocks).
  [[nodiscard]] Result<Copied> try_receive_into(std::span<std::byte> out);
  /// As receive, copying: waits up to `timeout` (then Empty).
  [[nodiscard]] Result<Copied> receive_into(std::span<std::byte> out,
                                            std::chrono::nanoseconds timeout);
  ///@}

  /// Sets receive coalescing (see the file comment).
  /// Errc::InvalidArgument when a field is outside its range (nothing changes then).
  [[nodiscard]] Result<void> set_coalescing(const Coalescing& c);
  /// The coalescing in force.
  [[nodiscard]] const Coalescing& coalescing() const noexcept { return coalescing_; }

  /// True while a lease from this consumer is not given back (receives are refused).
  [[nodiscard]] bool lease_held() const noexcept { return lease_held_; }
  /// The sequence the next payload must carry (== payloads committed).
  [[nodiscard]] std::uint64_t next_sequence() const noexcept { return head_; }
  /// The epoch of the page being consumed (from 0).
  [[nodiscard]] std::uint64_t current_epoch() const noexcept { return epoch_; }
  /// Payloads committed (given back) in the current epoch.
  [[nodiscard]] std::uint64_t committed_in_epoch() const noexcept { return committed_; }

 private:
  friend struct detail::WaitSetAccess;
  friend class ChannelLease;
  friend class detail::ChannelTesting;

  /// Where the channel stands for a receive: a descriptor waits at head_
  /// (Ready), nothing yet (Empty), or the stream ended cleanly (End). Never
  /// consumes; terminal problems are errors. `probe_producer` allows the
  /// liveness syscall when the channel looks empty.
  enum class Wait : std::uint8_t { Ready, Empty, End };
  /// Whether a refresh of the tail may leave a partial batch waiting (coalescing).
  enum class Batch : std::uint8_t { MayHold, Flush };
  [[nodiscard]] Result<Wait> ready(bool probe_producer, Batch batch);
  [[nodiscard]] Result<Wait> on_empty(bool probe_producer);
  [[nodiscard]] Result<Wait> clean_end();
  [[nodiscard]] std::unexpected<Error> producer_died();
  /// try_receive() once the cached tail is exhausted.
  [[nodiscard]] Result<Wait> ready_slow();
  /// Validates the descriptor at head_ (requires head_ < cached_tail_) up to
  /// the payload checksum; returns its cell.
  [[nodiscard]] Result<page::Cell> check_next(channel::Descriptor& d);
  /// Takes the payload at head_: as a lease, or copied into `out`.
  [[nodiscard]] Result<Received> next();
  [[nodiscard]] Result<Copied> next_into(std::span<std::byte> out);
  /// The non-blocking path shared by try_receive() and try_receive_into().
  template <class T, class Take>
  [[nodiscard]] Result<T> try_with(Take take);
  /// The blocking loop shared by receive() and receive_into().
  template <class T, class Take>
  [[nodiscard]] Result<T> receive_with(std::chrono::nanoseconds timeout, Take take);
  [[nodiscard]] std::optional<Error> refuse() const;
  /// True when a descriptor waits at head_ (and, with Batch::MayHold, coalescing lets it go).
  [[nodiscard]] Result<bool> refresh_tail(Batch batch = Batch::Flush);
  [[nodiscard]] bool holds(std::uint64_t tail) noexcept;
  [[nodiscard]] Result<void> cross_seam(const channel::Descriptor& d);
  [[nodiscard]] Result<void> refresh_published(const channel::Descriptor& d);
  [[nodiscard]] std::unexpected<Error> reject(ChannelFault fault, const channel::Descriptor& d,
                                              const char* what);
  [[nodiscard]] std::unexpected<Error> fault_here(ChannelFault fault, const std::string& detail);
  [[nodiscard]] std::unexpected<Error> terminal(std::unexpected<Error> e);
  [[nodiscard]] std::unexpected<Error> lease_misuse() const;
  [[nodiscard]] std::string too_small_message(std::size_t length, std::size_t room) const;
  [[nodiscard]] bool probe_due() noexcept;
  /// Binds the consumer role on a segment just created or opened, then resume().
  [[nodiscard]] static Result<ChannelConsumer> adopt(Result<Segment> seg);
  [[nodiscard]] Result<void> resume();
  void bind_epoch(std::uint64_t epoch) noexcept;
  void give_back() noexcept;
  /// ChannelLease::release(): give_back() under the endpoint guard.
  void release_lease() noexcept;

  std::uint64_t head_ = 0;              ///< descriptors committed (mirror of control.consumer.head)
  std::uint64_t cached_tail_ = 0;       ///< producer's tail as last taken; refreshed when empty
  std::uint64_t seen_tail_ = 0;         ///< producer's tail as last read (>= cached_tail_)
  std::uint64_t epoch_ = 0;             ///< current page epoch
  std::uint32_t generation_ = 0;        ///< epoch_ as u32
  page::PageView page_{};               ///< the current epoch's slot
  std::uint64_t first_sequence_ = 0;    ///< sequence of the current page's cell 0
  std::uint64_t committed_ = 0;         ///< leases given back in the current epoch
  std::uint32_t cached_published_ = 0;  ///< current page's published count as last read
  std::uint64_t next_offset_ = 0;       ///< arena offset the next cell must have
  std::uint64_t last_probe_ns_ = 0;
  Coalescing coalescing_{};
  std::uint64_t held_since_ns_ = 0;  ///< when a partial batch was first left waiting (0: none)
  std::optional<Error> sticky_;      ///< the terminal error, repeated by later calls
  bool lease_held_ = false;
  bool ended_ = false;
};

// ---------------------------------------------------------------- inline hot path

inline Result<page::Cell> ChannelConsumer::check_next(channel::Descriptor& d) {
  std::memcpy(&d, view_.ring + (head_ & ring_mask_), sizeof d);
  if (d.generation != generation_) [[unlikely]] {
    if (auto ok = cross_seam(d); !ok) return std::unexpected(std::move(ok.error()));
  }
  // Identity before any cell or payload access: the slot must still be bound
  // to this epoch. relaxed: the binding was written before the producer's [chan.R],
  // which our acquire [chan.R'] in refresh_tail() observed.
  if (page_.header->binding.generation.load(std::memory_order_relaxed) != d.generation ||
      page_.header->binding.epoch.load(std::memory_order_relaxed) != epoch_) [[unlikely]]
    return reject(ChannelFault::GenerationMismatch, d, "slot binding changed under the epoch");
  if (d.sequence != head_) [[unlikely]]
    return reject(ChannelFault::SequenceGap, d, "descriptor sequence is not the next one");
  if (d.cell >= view_.params.descriptors_per_page) [[unlikely]]
    return reject(ChannelFault::DescriptorOutOfBounds, d, "cell index beyond the page");
  if (d.cell != d.sequence - first_sequence_) [[unlikely]]
    return reject(ChannelFault::SequenceGap, d, "cell index does not match the sequence");
  if (d.cell >= cached_published_) [[unlikely]] {
    if (auto ok = refresh_published(d); !ok) return std::unexpected(std::move(ok.error()));
  }
  const page::Cell c = page_.cell(d.cell);
  if (c.sequence_lo != static_cast<std::uint32_t>(d.sequence)) [[unlikely]]
    return reject(ChannelFault::SequenceGap, d, "cell sequence differs from the descriptor's");
  if (c.offset != next_offset_ || c.length > view_.params.page_bytes - next_offset_) [[unlikely]]
    return reject(ChannelFault::DescriptorOutOfBounds, d, "cell offset/length outside the arena");
  return c;
}

inline Result<Received> ChannelConsumer::next() {
  channel::Descriptor d;
  auto c = check_next(d);
  if (!c) return std::unexpected(std::move(c.error()));
  const std::byte* p = page_.arena + c->offset;
  if (page::checksum(p, c->length) != c->crc) [[unlikely]]
    return reject(ChannelFault::ChecksumMismatch, d, "payload CRC32C differs from the cell's");
  next_offset_ += page::aligned_length(c->length);
  lease_held_ = true;
  return Received{ReceiveStatus::Received, ChannelLease(this, p, c->length, d.sequence, epoch_)};
}

inline Result<Copied> ChannelConsumer::next_into(std::span<std::byte> out) {
  channel::Descriptor d;
  auto c = check_next(d);
  if (!c) return std::unexpected(std::move(c.error()));
  if (c->length > out.size()) [[unlikely]]
    return fail(Errc::TooLarge, too_small_message(c->length, out.size()));
  if (page::copy_checksum(out.data(), page_.arena + c->offset, c->length) != c->crc) [[unlikely]]
    return reject(ChannelFault::ChecksumMismatch, d, "payload CRC32C differs from the cell's");
  next_offset_ += page::aligned_length(c->length);
  give_back();
  return Copied{ReceiveStatus::Received, c->length, d.sequence, epoch_};
}

inline std::optional<Error> ChannelConsumer::refuse() const {
  if (lease_held_) return lease_misuse().error();
  if (sticky_) return *sticky_;
  return std::nullopt;
}

template <class T, class Take>
inline Result<T> ChannelConsumer::try_with(Take take) {
  const detail::EndpointGuard::Scope scope(guard_, "a channel endpoint");
  if (lease_held_ || sticky_ || ended_ || head_ == cached_tail_) [[unlikely]] {
    if (auto e = refuse()) return std::unexpected(std::move(*e));
    auto w = ready_slow();
    if (!w) return std::unexpected(std::move(w.error()));
    if (*w != Wait::Ready) return T{*w == Wait::End ? ReceiveStatus::End : ReceiveStatus::Empty};
  }
  return take();  // the common case returns its result in place
}

inline Result<Received> ChannelConsumer::try_receive() {
  return try_with<Received>([this] { return next(); });
}

inline Result<Copied> ChannelConsumer::try_receive_into(std::span<std::byte> out) {
  return try_with<Copied>([this, out] { return next_into(out); });
}

inline void ChannelConsumer::give_back() noexcept {
  lease_held_ = false;
  ++head_;
  ++committed_;
  // [chan.C] the descriptor slot is free for the producer; pairs with [chan.C'] in the
  // producer's refresh_head(). [chan.D2] seq_cst, with the seq_cst flag load below:
  // Dekker pairing with [chan.D2'] in ChannelProducer::reserve() (see [chan.D1]).
  control().consumer.head.store(head_, std::memory_order_seq_cst);
  if (control().waiters.producer_parked.load(std::memory_order_seq_cst) != 0) [[unlikely]]
    wake_producer();
}

inline void ChannelConsumer::release_lease() noexcept {
  const detail::EndpointGuard::Scope scope(guard_, "a channel endpoint");
  give_back();
}

inline void ChannelLease::release() noexcept {
  data_ = nullptr;
  size_ = 0;
  sequence_ = 0;
  epoch_ = 0;
  if (owner_ != nullptr) std::exchange(owner_, nullptr)->release_lease();
}

}  // namespace shm
