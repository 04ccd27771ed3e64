/// @file
/// MpmcRing: process-local handles (move-only) on a bounded multi-producer
/// multi-consumer ring of fixed-size cells shared by any number of processes.
/// The shared layout and its protocol are described in mpmc/layout.hpp.
///
/// Handles. The type says what a handle may do: an MpmcProducer only pushes,
/// an MpmcConsumer only pops (a consumer call on a producer does not compile),
/// and an MpmcRing is a peer that does both (a worker that re-queues). Each
/// kind has create() and open(); the attachment table shows the role
/// (producer, consumer, peer).
///
/// Slots. Every handle attaches to one shared slot of the segment's attachment
/// table (kSharedSlots = 256 handles per ring at once; the 257th gets
/// Errc::NoFreeSlot): the limit is per handle, not per process. The
/// slot gives the kernel liveness (OFD lock) that makes a crashed process's
/// half-done push or pop repairable, and lets the sidecar and shmctl see who
/// uses the ring.
///
/// Threads. A handle is used by one thread at a time (open one handle per
/// thread; it is cheap). A second thread that enters a handle while another
/// is inside (a blocking push or pop included, and between try_reserve() and
/// commit(), or try_peek() and release(), each call on its own) is refused
/// with an abort naming the misuse, in every build
/// (shm/platform/endpoint_guard.hpp).
///
/// Outcomes. Full and Empty are ordinary outcomes (false / nullopt); errors are
/// TooLarge (payload or buffer), Corrupt (an impossible sequence, length or
/// position in the mapping) and the open/attach errors.
///
/// Dead peers. A producer killed between claiming a cell and publishing it
/// leaves that cell "claimed, unpublished": consumers stop in front of it —
/// try_pop() returns nullopt (never spins), pop(timeout) waits and times out —
/// until it is repaired, which happens when (a) a blocked/polling handle has seen
/// the same held cell for 1 ms and every slot that may hold it is dead, (b) any
/// handle opens the ring, or (c) the sidecar reclaims the dead slot. The repair
/// publishes a tombstone that consumers skip. A consumer killed between claiming
/// and releasing a cell loses that one item; repair releases the cell so
/// producers can reuse it. While the holder is alive (e.g. SIGSTOPped) nothing
/// is repaired: consumers see Empty and producers Full behind it. `verify`
/// reports a held cell whose holder is dead, naming the slot, pid and position.
#pragma once

#include "shm/mpmc/layout.hpp"
#include "shm/platform/clock.hpp"
#include "shm/platform/endpoint_guard.hpp"
#include "shm/platform/short_bytes.hpp"

#include <atomic>
#include <cassert>
#include <chrono>
#include <cstring>
#include <optional>
#include <span>

namespace shm {

namespace detail {
inline constexpr const char* kMpmcGuardName = "an MpmcRing handle";
struct WaitSetAccess;  // the WaitSet reads a member's state (shm/waitset/waitset.hpp)
}  // namespace detail

/// What an MPMC handle's snapshot() reads: positions and counters, relaxed
/// loads, never waiting for another handle (a hint under concurrency).
struct MpmcSnapshot {
  std::uint64_t ring_cells = 0;        ///< cells in the ring
  std::uint64_t slot_bytes = 0;        ///< the largest payload
  std::uint64_t head = 0;              ///< positions claimed by pops (they only grow)
  std::uint64_t tail = 0;              ///< positions claimed by pushes
  std::uint64_t depth = 0;             ///< tail - head: items published or in flight
  std::uint64_t orphans = 0;           ///< kept items of dead takers waiting for adoption
  std::uint64_t abandoned_pushes = 0,  ///< tombstones written for dead producers
      lost_pops = 0,                   ///< cells released for dead consumers
      tombstones_skipped = 0,          ///< tombstones consumed by consumers
      cancelled_pushes = 0,            ///< reservations cancelled by their producer
      parks = 0,                       ///< times a handle went to wait
      wakeups = 0,                     ///< futex wakes issued
      adopted = 0;                     ///< orphans adopted by a consumer
};

/// A peer handle: pushes and pops. MpmcProducer and MpmcConsumer (below) are
/// the same handle with only one side's calls.
class MpmcRing {
 public:
  /// Attached to nothing: only assignment is valid.
  MpmcRing() = default;
  /// Takes over the attachment (and any outstanding reservation or peek).
  MpmcRing(MpmcRing&&) noexcept = default;
  /// Detaches this handle's attachment while its mapping is still there, then
  /// takes the other's: the order of the destructor (attachment_, then
  /// segment_). A defaulted one would unmap first and detach into freed memory.
  MpmcRing& operator=(MpmcRing&& other) noexcept;
  MpmcRing(const MpmcRing&) = delete;
  MpmcRing& operator=(const MpmcRing&) = delete;
  ~MpmcRing() = default;

  /// Creates the ring segment and attaches to it as a peer.
  [[nodiscard]] static Result<MpmcRing> create(std::string_view name, const MpmcParams& params,
                                               const CreateOptions& options = {});
  /// Opens an existing ring (0 fields of `expected` accept any value) and
  /// attaches as a peer; repairs what dead handles left held.
  [[nodiscard]] static Result<MpmcRing> open(std::string_view name, const MpmcParams& expected = {},
                                             const OpenOptions& options = {});
  /// Adopts a segment opened or created already (open_mpmc_ring,
  /// create_mpmc_ring) and attaches as a peer; KindMismatch / SizeMismatch
  /// when it is not an MPMC ring.
  [[nodiscard]] static Result<MpmcRing> attach(Segment segment);

  /// Copies `payload` into the next cell: true when pushed, false when full.
  [[nodiscard]] Result<bool> try_push(std::span<const std::byte> payload);
  /// Blocking push: spins briefly, then parks until a cell frees or `timeout` passes.
  [[nodiscard]] Result<bool> push(std::span<const std::byte> payload,
                                  std::chrono::nanoseconds timeout);
  /// Copies the oldest item into `out`: its length, or nullopt when empty. An
  /// item longer than `out` is TooLarge and stays in the ring.
  [[nodiscard]] Result<std::optional<std::size_t>> try_pop(std::span<std::byte> out);
  /// Blocking pop: spins briefly, then parks until an item arrives or
  /// `timeout` passes (then nullopt).
  [[nodiscard]] Result<std::optional<std::size_t>> pop(std::span<std::byte> out,
                                                       std::chrono::nanoseconds timeout);

  /// Zero-copy push: claims the next cell and returns its slot_bytes() bytes, or
  /// nullopt when full. Publish it with commit(n) or cancel() (a tombstone that
  /// consumers skip). Nothing is visible to consumers until then.
  [[nodiscard]] Result<std::optional<std::span<std::byte>>> try_reserve();
  /// Publishes the reserved cell with its first `n` bytes (n <= slot_bytes()).
  void commit(std::size_t n) noexcept;
  /// Publishes the reserved cell as a tombstone: consumers skip it.
  void cancel() noexcept;
  /// Zero-copy pop: claims the oldest item and returns it in place, or nullopt
  /// when empty; release() frees the cell. A process that dies in between loses
  /// that one item (repair releases the cell).
  [[nodiscard]] Result<std::optional<std::span<const std::byte>>> try_peek();
  /// Frees the cell of the item from try_peek() or try_take(): producers may reuse it.
  void release() noexcept;
  /// Zero-copy kept take (at-least-once): as try_peek(), but a handle that dies
  /// before release() does not lose the item: repair keeps it as an orphan and
  /// the next consumer of this ring (any pop, peek or take) gets it again,
  /// before newer items. One outstanding take or peek per handle.
  [[nodiscard]] Result<std::optional<std::span<const std::byte>>> try_take();

  /// Repairs cells held by dead handles now (normally automatic, see above).
  [[nodiscard]] mpmc::RepairReport repair() const;

  /// Cells in the ring (the most items it holds).
  [[nodiscard]] std::uint64_t ring_cells() const noexcept { return v_.capacity; }
  /// Bytes per cell: the largest payload.
  [[nodiscard]] std::uint64_t slot_bytes() const noexcept { return v_.slot_bytes; }
  /// tail - head as seen now: items published or in flight. A hint under concurrency.
  [[nodiscard]] std::uint64_t size_hint() const noexcept;
  /// Positions and counters now (never blocks).
  [[nodiscard]] MpmcSnapshot snapshot() const noexcept;
  /// True when some push has claimed a position no consumer has claimed yet
  /// (published or still in flight), or an orphan waits for adoption.
  /// Sequentially consistent: see PriorityFanout.
  [[nodiscard]] bool has_claimed_items() const noexcept;
  /// After a successful pop: true when no push has claimed a position after it
  /// (the ring was empty right after this pop). A hint: reads the producers'
  /// tail, not the next cell, whose line is usually cold.
  [[nodiscard]] bool popped_last() const noexcept {
    // Relaxed: a stale answer only costs a needless clear-and-recheck or a stale bit.
    return v_.control->producer.tail.load(std::memory_order_relaxed) == peeked_pos_ + 1;
  }
  /// The segment this handle keeps mapped.
  [[nodiscard]] const Segment& segment() const noexcept { return segment_; }
  /// This handle's slot in the attachment table.
  [[nodiscard]] const Attachment& attachment() const noexcept { return attachment_; }
  /// Refreshes this handle's heartbeat in the attachment table (no syscall).
  void heartbeat() noexcept { attachment_.heartbeat(); }

 private:
  friend class PriorityFanout;
  friend struct detail::WaitSetAccess;
  friend class MpmcProducer;
  friend class MpmcConsumer;
  /// create / open / attach for every handle type: the segment (or its
  /// error) attached under `role` (mpmc::kProducerRole, kConsumerRole or
  /// kPeerRole); attach_checked() first checks a segment it was given.
  [[nodiscard]] static Result<MpmcRing> adopt(Result<Segment> seg, const RoleSpec& role);
  [[nodiscard]] static Result<MpmcRing> attach_checked(Segment segment, const RoleSpec& role);
  struct Stuck {
    mpmc::Side side = mpmc::Side::Push;
    std::uint64_t pos = ~0ull;
    std::uint64_t since_ns = 0;
  };

  [[nodiscard]] static Result<MpmcRing> bind(Segment segment, const RoleSpec& role);
  /// Called after this handle repaired a cell it was stuck behind (note_stuck):
  /// the priority fanout sets it on its rings, whose drainers sleep on the
  /// fanout's bitmap, which a ring's own wake does not reach.
  using RepairHook = void (*)(void* context, std::uint32_t tag, const MpmcRing& ring) noexcept;
  void set_repair_hook(RepairHook hook, void* context, std::uint32_t tag) noexcept {
    repair_hook_ = hook;
    repair_context_ = context;
    repair_tag_ = tag;
  }
  /// The calls' bodies, without the thread guard (the public calls hold it).
  [[nodiscard]] Result<std::optional<std::span<std::byte>>> reserve_unguarded();
  void commit_unguarded(std::size_t n) noexcept;
  void release_unguarded() noexcept;
  [[nodiscard]] Result<bool> push_unguarded(std::span<const std::byte> payload);
  [[nodiscard]] Result<std::optional<std::size_t>> pop_unguarded(std::span<std::byte> out);
  /// Claims the oldest item (an orphan first, see layout.hpp): its length, or
  /// nullopt when empty. `keep`: a kept take (kKeepIntent in the intent).
  [[nodiscard]] Result<std::optional<std::uint32_t>> claim_pop(std::size_t room, bool keep = false);
  [[nodiscard]] Result<std::optional<std::uint32_t>> adopt_orphan(std::size_t room);
  /// try_peek() (keep false) and try_take() (keep true) without the guard.
  [[nodiscard]] Result<std::optional<std::span<const std::byte>>> claim_view(bool keep);
  /// Slow paths: classify a sequence that is not the expected one. A value is
  /// the position to retry at; nullopt = full (push) / empty (pop).
  [[nodiscard]] Result<std::optional<std::uint64_t>> push_slow(std::uint64_t pos,
                                                               std::uint64_t seq);
  [[nodiscard]] Result<std::optional<std::uint64_t>> pop_slow(std::uint64_t pos, std::uint64_t seq);
  [[nodiscard]] std::unexpected<Error> corrupt_cell(std::uint64_t pos, std::uint64_t seq,
                                                    std::string_view expected) const;
  [[nodiscard]] std::unexpected<Error> corrupt_length(std::uint64_t pos, std::uint32_t len) const;
  [[nodiscard]] std::unexpected<Error> too_small(std::uint32_t len, std::size_t room) const;
  [[nodiscard]] std::unexpected<Error> too_large(std::size_t n) const;
  /// Records that `pos` looks held; repairs it once it stayed held kStuckGraceNs.
  void note_stuck(mpmc::Side side, std::uint64_t pos) noexcept;
  void wake_consumers() noexcept;
  void wake_producers() noexcept;
  /// Parks on `signal` until attempt() reports done (or an error) or the deadline.
  template <class Attempt, class Busy>
  [[nodiscard]] Result<bool> wait(std::atomic<std::uint32_t>& signal, mpmc::ParkedSet& waiting,
                                  std::chrono::steady_clock::time_point deadline, Attempt&& attempt,
                                  Busy&& busy);

  Segment segment_;
  Attachment attachment_;
  mpmc::View v_{};
  mpmc::Control::Intent* intent_ = nullptr;  ///< this handle's slot's intent words
  std::uint32_t slot_ = 0;                   ///< this handle's attachment slot (its waiter bit)
  std::uint64_t reserved_pos_ = 0;           ///< claimed by try_reserve(), until commit()/cancel()
  std::uint64_t peeked_pos_ = 0;             ///< claimed by try_peek(), until release()
  bool reserved_ = false;                    ///< a try_reserve() awaits commit() or cancel()
  bool peeked_ = false;                      ///< a try_peek() or try_take() awaits release()
  bool wake_consumers_ = false;  ///< a consumer was waiting when we claimed reserved_pos_
  bool wake_producers_ = false;  ///< a producer was waiting when we claimed peeked_pos_
  Stuck stuck_{};
  RepairHook repair_hook_ = nullptr;  ///< see set_repair_hook()
  void* repair_context_ = nullptr;
  std::uint32_t repair_tag_ = 0;
  detail::EndpointGuard guard_;  ///< one thread at a time (see the note at the top)
};

namespace detail {
/// What both one-sided MPMC handles expose: the accessors, no push, no pop.
class MpmcSide : protected MpmcRing {
 public:
  using MpmcRing::attachment;
  using MpmcRing::heartbeat;
  using MpmcRing::repair;
  using MpmcRing::ring_cells;
  using MpmcRing::segment;
  using MpmcRing::size_hint;
  using MpmcRing::slot_bytes;
  using MpmcRing::snapshot;

 protected:
  MpmcSide() = default;
  explicit MpmcSide(MpmcRing&& r) noexcept : MpmcRing(std::move(r)) {}
};
}  // namespace detail

/// The pushing side of an MPMC ring: MpmcRing without the pop calls.
class MpmcProducer : public detail::MpmcSide {
 public:
  MpmcProducer() = default;
  /// Creates the ring segment and attaches as a producer.
  [[nodiscard]] static Result<MpmcProducer> create(std::string_view name, const MpmcParams& params,
                                                   const CreateOptions& options = {});
  /// Opens an existing ring and attaches as a producer (see MpmcRing::open).
  [[nodiscard]] static Result<MpmcProducer> open(std::string_view name,
                                                 const MpmcParams& expected = {},
                                                 const OpenOptions& options = {});
  /// Adopts a segment opened or created already and attaches as a producer.
  [[nodiscard]] static Result<MpmcProducer> attach(Segment segment);

  using MpmcRing::cancel;
  using MpmcRing::commit;
  using MpmcRing::push;
  using MpmcRing::try_push;
  using MpmcRing::try_reserve;

 private:
  friend struct detail::WaitSetAccess;
  explicit MpmcProducer(MpmcRing&& r) noexcept : MpmcSide(std::move(r)) {}
};

/// The popping side of an MPMC ring: MpmcRing without the push calls.
class MpmcConsumer : public detail::MpmcSide {
 public:
  MpmcConsumer() = default;
  /// Creates the ring segment and attaches as a consumer.
  [[nodiscard]] static Result<MpmcConsumer> create(std::string_view name, const MpmcParams& params,
                                                   const CreateOptions& options = {});
  /// Opens an existing ring and attaches as a consumer (see MpmcRing::open).
  [[nodiscard]] static Result<MpmcConsumer> open(std::string_view name,
                                                 const MpmcParams& expected = {},
                                                 const OpenOptions& options = {});
  /// Adopts a segment opened or created already and attaches as a consumer.
  [[nodiscard]] static Result<MpmcConsumer> attach(Segment segment);

  using MpmcRing::pop;
  using MpmcRing::popped_last;
  using MpmcRing::release;
  using MpmcRing::try_peek;
  using MpmcRing::try_pop;
  using MpmcRing::try_take;

 private:
  friend struct detail::WaitSetAccess;
  explicit MpmcConsumer(MpmcRing&& r) noexcept : MpmcSide(std::move(r)) {}
};

// ---------------------------------------------------------------- inline hot paths

inline Result<std::optional<std::span<std::byte>>> MpmcRing::try_reserve() {
  const detail::EndpointGuard::Scope scope(guard_, detail::kMpmcGuardName);
  return reserve_unguarded();
}

inline Result<std::optional<std::span<std::byte>>> MpmcRing::reserve_unguarded() {
  assert(!reserved_ && "try_reserve() twice without commit()/cancel()");
  auto& tail = v_.control->producer.tail;
  // [mpmc.T'] acquire: pairs with [mpmc.T] of the producer that moved tail here, so the
  // cell states that producer saw are visible (stale-position checks rely on it).
  std::uint64_t pos = tail.load(std::memory_order_acquire);
  for (;;) {
    mpmc::Cell& c = v_.cell(pos);
    // [mpmc.R'] acquire: pairs with the consumer's [mpmc.R] in release(): it no longer reads the
    // cell.
    const std::uint64_t seq = c.seq.load(std::memory_order_acquire);
    if (seq == pos) [[likely]] {
      // Made visible to repair by the release half of [mpmc.T].
      intent_->push.store(pos + 1, std::memory_order_relaxed);
      // [mpmc.T] seq_cst: claims `pos`. Release: publishes the intent (pairs with
      // repair's acquire of tail). Seq_cst: Dekker pair with a parking
      // consumer's [mpmc.W] announcement (ParkedSet::announce) + [mpmc.W2] load of tail.
      // Failure order acquire: the reloaded tail is read like [mpmc.T'].
      if (tail.compare_exchange_weak(pos, pos + 1, std::memory_order_seq_cst,
                                     std::memory_order_acquire)) [[likely]] {
        // [mpmc.W1] seq_cst: second half of the Dekker pair with [mpmc.W]/[mpmc.W2].
        wake_consumers_ = v_.control->waiters.consumers_waiting.any();
        reserved_pos_ = pos;
        reserved_ = true;
        return std::optional<std::span<std::byte>>{
            std::span<std::byte>(v_.payload(pos), v_.slot_bytes)};
      }
      intent_->push.store(mpmc::kNoIntent, std::memory_order_relaxed);  // not ours after all
      continue;  // pos was reloaded by the failed CAS
    }
    auto next = push_slow(pos, seq);
    if (!next) return std::unexpected(std::move(next.error()));
    if (!*next) return std::optional<std::span<std::byte>>{};
    pos = **next;
  }
}

inline void MpmcRing::commit(std::size_t n) noexcept {
  const detail::EndpointGuard::Scope scope(guard_, detail::kMpmcGuardName);
  commit_unguarded(n);
}

inline void MpmcRing::commit_unguarded(std::size_t n) noexcept {
  assert(reserved_ && "commit() without try_reserve()");
  assert(n <= v_.slot_bytes);
  mpmc::Cell& c = v_.cell(reserved_pos_);
  c.length.store(static_cast<std::uint32_t>(n),
                 std::memory_order_relaxed);  // published by [mpmc.S]
  // [mpmc.S] release: publishes payload and length; pairs with the consumer's [mpmc.S'].
  c.seq.store(reserved_pos_ + 1, std::memory_order_release);
  reserved_ = false;
  if (wake_consumers_) [[unlikely]]
    wake_consumers();
}

inline Result<bool> MpmcRing::try_push(std::span<const std::byte> payload) {
  const detail::EndpointGuard::Scope scope(guard_, detail::kMpmcGuardName);
  return push_unguarded(payload);
}

inline Result<bool> MpmcRing::push_unguarded(std::span<const std::byte> payload) {
  if (payload.size() > v_.slot_bytes) [[unlikely]]
    return too_large(payload.size());
  auto r = reserve_unguarded();
  if (!r) return std::unexpected(std::move(r.error()));
  if (!*r) return false;
  detail::copy_short((*r)->data(), payload.data(), payload.size());
  commit_unguarded(payload.size());
  return true;
}

inline Result<std::optional<std::uint32_t>> MpmcRing::claim_pop(std::size_t room, bool keep) {
  assert(!peeked_ && "pop/peek while a peeked item is not released");
  // Acquire: pairs with repair's release increment after its [mpmc.O] mark.
  if (v_.control->consumer.orphans.load(std::memory_order_acquire) != 0) [[unlikely]] {
    auto adopted = adopt_orphan(room);
    if (!adopted || *adopted) return adopted;
  }
  const std::uint64_t keep_bit = keep ? mpmc::kKeepIntent : 0;
  auto& head = v_.control->consumer.head;
  // [mpmc.H'] acquire: pairs with [mpmc.H] of the consumer that moved head here.
  std::uint64_t pos = head.load(std::memory_order_acquire);
  for (;;) {
    mpmc::Cell& c = v_.cell(pos);
    // [mpmc.S'] acquire: pairs with the producer's [mpmc.S] in commit(): payload and length are
    // complete.
    const std::uint64_t seq = c.seq.load(std::memory_order_acquire);
    if (seq == pos + 1) [[likely]] {
      const std::uint32_t len = c.length.load(std::memory_order_relaxed);  // ordered by [mpmc.S']
      if (len > v_.slot_bytes) [[unlikely]]
        return corrupt_length(pos, len);
      if (len > room) [[unlikely]]
        return too_small(len, room);
      intent_->pop.store((pos + 1) | keep_bit, std::memory_order_relaxed);  // published by [mpmc.H]
      // [mpmc.H] seq_cst: claims `pos`; release publishes the intent (repair's acquire
      // of head pairs with it); seq_cst: Dekker pair with a parking producer's [mpmc.W]/[mpmc.W2].
      // Failure order acquire: the reloaded head is read like [mpmc.H'].
      if (head.compare_exchange_weak(pos, pos + 1, std::memory_order_seq_cst,
                                     std::memory_order_acquire)) [[likely]] {
        // [mpmc.W1] seq_cst: second half of the Dekker pair with [mpmc.W]/[mpmc.W2].
        wake_producers_ = v_.control->waiters.producers_waiting.any();
        peeked_pos_ = pos;
        peeked_ = true;
        return std::optional<std::uint32_t>{len};
      }
      intent_->pop.store(mpmc::kNoIntent, std::memory_order_relaxed);  // not ours after all
      continue;
    }
    auto next = pop_slow(pos, seq);
    if (!next) return std::unexpected(std::move(next.error()));
    if (!*next) return std::optional<std::uint32_t>{};
    pos = **next;
  }
}

inline void MpmcRing::release() noexcept {
  const detail::EndpointGuard::Scope scope(guard_, detail::kMpmcGuardName);
  release_unguarded();
}

inline void MpmcRing::release_unguarded() noexcept {
  assert(peeked_ && "release() without try_peek()");
  // [mpmc.R] release: we no longer read the cell; pairs with [mpmc.R'] of the producer of
  // peeked_pos_ + capacity.
  v_.cell(peeked_pos_).seq.store(peeked_pos_ + v_.capacity, std::memory_order_release);
  peeked_ = false;
  if (wake_producers_) [[unlikely]]
    wake_producers();
}

inline Result<std::optional<std::span<const std::byte>>> MpmcRing::claim_view(bool keep) {
  auto r = claim_pop(~std::size_t{0}, keep);
  if (!r) return std::unexpected(std::move(r.error()));
  if (!*r) return std::optional<std::span<const std::byte>>{};
  return std::optional<std::span<const std::byte>>{
      std::span<const std::byte>(v_.payload(peeked_pos_), **r)};
}

inline Result<std::optional<std::span<const std::byte>>> MpmcRing::try_peek() {
  const detail::EndpointGuard::Scope scope(guard_, detail::kMpmcGuardName);
  return claim_view(false);
}

inline Result<std::optional<std::span<const std::byte>>> MpmcRing::try_take() {
  const detail::EndpointGuard::Scope scope(guard_, detail::kMpmcGuardName);
  return claim_view(true);
}

inline Result<std::optional<std::size_t>> MpmcRing::try_pop(std::span<std::byte> out) {
  const detail::EndpointGuard::Scope scope(guard_, detail::kMpmcGuardName);
  return pop_unguarded(out);
}

inline Result<std::optional<std::size_t>> MpmcRing::pop_unguarded(std::span<std::byte> out) {
  auto r = claim_pop(out.size());
  if (!r) return std::unexpected(std::move(r.error()));
  if (!*r) return std::optional<std::size_t>{};
  const std::uint32_t len = **r;
  detail::copy_short(out.data(), v_.payload(peeked_pos_), len);
  release_unguarded();
  return std::optional<std::size_t>{len};
}

}  // namespace shm
