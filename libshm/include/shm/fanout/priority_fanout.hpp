/// @file
/// PriorityFanout: a tiered work queue with O(1) priority selection across
/// processes. K <= 64 MpmcRings (one per priority, priority 0 the lowest) and a
/// 64-bit bitmap of non-empty priorities; K+1 files (fanout/layout.hpp)
/// created and opened as one object. The bitmap is a hint, the rings are the truth.
///
/// Submit: push into ring p, then make sure bit p is set (a seq_cst load, and a
/// fetch_or only when the bit is clear). Pop: load the bitmap, take the
/// highest set bit (one count-leading-zeros), pop from that ring; when the ring
/// looks empty after the pop, clear its bit. A pop that finds the ring empty
/// (a stale bit) clears the bit too and moves on to the next lower priority;
/// a priority found empty is not tried again in the same call, so a call makes
/// at most K attempts. Every clear (fetch_and) re-checks the ring
/// and sets the bit again if a push has claimed a cell meanwhile. Races (all benign):
///  - a push whose bit is not set yet is missed by a concurrent pop (the next
///    pop sees it: the pusher sets the bit before submit() returns);
///  - a clear racing a push never strands an item: [fanout.B1]/[fanout.B2] in the code are a
///    Dekker pair, so either the pusher sees the clear and sets the bit, or the
///    clearer sees the pushed claim and sets it back;
///  - a bit left set over an empty ring (a stale bit) costs one failed pop and
///    is counted in `stale_retries`.
/// Invariant checked by `verify`: every non-empty ring has its bit set or a
/// push in flight.
///
/// Crashes. A submitter killed mid-push and a drainer killed mid-pop are
/// handled by the rings (see mpmc_ring.hpp): a drainer killed between popping
/// and returning loses at most the one item it had popped (the at-most-once
/// pops); the rings stay consistent and the dead handle's cells are
/// repaired. The at-least-once take (try_take_highest / take_highest, then
/// release) loses nothing: a consumer killed between its take and release
/// leaves the item in its ring (repair marks it an orphan) and the next
/// consumer of that ring takes it again before newer items. A submitter killed
/// between its push and setting the bit leaves a non-empty ring with a clear
/// bit (a stranded item). Three things set such a bit again (resurface): the
/// kind's reclaim of the dead attacher (sidecar, shmctl reclaim), every open of
/// a handle, and a pop_highest() that finds the bitmap empty before it
/// sleeps (one look at each ring's positions per park round, so a parked
/// drainer finds the item within kMaxParkNs even with no sidecar).
///
/// Handles. The type says what a handle may do: a FanoutProducer only submits,
/// a FanoutConsumer only pops and takes (a pop on a producer does not compile), a
/// PriorityFanout is a peer that does both (a worker that re-queues). Each has
/// create() and open(); the attachment tables show the role (submitter,
/// drainer, peer). One thread at a time per handle: a second thread that
/// enters a handle while another is inside (a blocking pop included) is
/// refused with an abort naming the misuse (shm/platform/endpoint_guard.hpp),
/// in every build. Open one handle per thread. Each handle attaches one slot
/// to the bitmap and to every ring: at most 256 handles per fanout at once
/// (per handle, not per process). Full and Empty are
/// ordinary outcomes; errors: PriorityOutOfBounds, TooLarge, ParamMismatch
/// ("priorities: segment has 8, caller expects 4"), Corrupt, open errors.
#pragma once

#include "shm/fanout/layout.hpp"
#include "shm/mpmc/mpmc_ring.hpp"
#include "shm/platform/endpoint_guard.hpp"

#include <atomic>
#include <bit>
#include <chrono>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace shm {
namespace detail {
/// Test-only crash points (shm/testing/fanout_crash.hpp, not installed): false
/// unless a test installed a hook; fanout_crash_point() calls it.
extern std::atomic<bool> fanout_crash_armed;
inline constexpr std::uint8_t kCrashSubmitAfterRingCommit = 0;  ///< FanoutCrashPoint's value
void fanout_crash_point(std::uint8_t point) noexcept;
struct WaitSetAccess;  // the WaitSet reads a member's state (shm/waitset/waitset.hpp)
}  // namespace detail

/// The K + 1 segments of a fanout, created or opened and not attached
/// (create_fanout, open_fanout below); a handle's attach() adopts them.
struct FanoutSegments {
  std::string base;            ///< the fanout's name, the prefix of its K + 1 files
  Segment bitmap;              ///< `<base>.bitmap`
  std::vector<Segment> rings;  ///< `<base>.prio<i>`, by priority
};

/// An item popped (at-most-once) and copied out.
struct Popped {
  std::uint32_t priority;  ///< the ring it came from
  std::size_t size;        ///< payload bytes copied into the caller's buffer
};

/// What a fanout handle's snapshot() reads: the bitmap, the counters and each
/// priority's ring, relaxed loads, never waiting for another handle.
struct FanoutSnapshot {
  std::uint32_t priorities = 0;     ///< K: rings, priority 0 the lowest
  std::uint64_t ring_cells = 0;     ///< per priority
  std::uint64_t slot_bytes = 0;     ///< the largest payload
  std::uint64_t bitmap = 0;         ///< bit p: priority p may be non-empty (a hint)
  std::uint64_t stale_retries = 0,  ///< pops that found a set bit over an empty ring
      parks = 0,                    ///< pop_highest() went to wait
      wakeups = 0;                  ///< futex wakes issued to drainers
  std::vector<MpmcSnapshot> rings;  ///< by priority
};

/// An item taken (at-least-once) and not released yet: a view into its ring
/// cell, valid until PriorityFanout::release().
struct Taken {
  std::uint32_t priority;              ///< the ring it is in
  std::span<const std::byte> payload;  ///< the item, in place (read-only)
};

/// A peer handle on a fanout: submits, pops and takes (see the file comment).
/// FanoutProducer and FanoutConsumer are the same handle with one side's calls.
class PriorityFanout {
 public:
  /// Attached to nothing: only assignment is valid.
  PriorityFanout() = default;
  /// Takes over the attachments (and any outstanding take).
  PriorityFanout(PriorityFanout&&) noexcept = default;
  /// Detaches from the bitmap before its old mapping goes away (the attachment
  /// writes into it); a defaulted one would unmap first, in member order.
  PriorityFanout& operator=(PriorityFanout&& other) noexcept {
    if (this != &other) {
      attachment_.detach();
      segment_ = std::move(other.segment_);
      attachment_ = std::move(other.attachment_);
      control_ = std::exchange(other.control_, nullptr);
      rings_ = std::move(other.rings_);  // each ring detaches before it unmaps
      k_ = std::exchange(other.k_, 0);
      slot_ = other.slot_;
      taken_ = std::exchange(other.taken_, kNoTake);
      base_ = std::move(other.base_);
      guard_ = std::move(other.guard_);
    }
    return *this;
  }
  PriorityFanout(const PriorityFanout&) = delete;
  PriorityFanout& operator=(const PriorityFanout&) = delete;
  ~PriorityFanout() = default;

  /// Creates the K ring files, then the bitmap file (the bitmap is published
  /// last, so an opener that finds it finds all rings); removes what it created
  /// on failure. Attaches as a peer.
  [[nodiscard]] static Result<PriorityFanout> create(std::string_view base,
                                                     const FanoutParams& params,
                                                     const CreateOptions& options = {});
  /// Opens the bitmap and the K rings; a different K, ring capacity or slot size
  /// than `expected` is ParamMismatch naming both values (0 = accept any).
  /// Attaches as a peer.
  [[nodiscard]] static Result<PriorityFanout> open(std::string_view base,
                                                   const FanoutParams& expected,
                                                   const OpenOptions& options = {});
  /// Adopts the segments of create_fanout / open_fanout and attaches as a
  /// peer; KindMismatch, ParamMismatch (a ring re-created on its own) or
  /// SizeMismatch when they are not one fanout.
  [[nodiscard]] static Result<PriorityFanout> attach(FanoutSegments segments);
  /// Removes the bitmap and every `<base>.prio<i>` file; NotFound when none existed.
  [[nodiscard]] static Result<void> unlink(std::string_view base, const std::string& root = {});

  /// Pushes into ring `priority`, then sets its bit: true, or false when that
  /// ring is full (back-pressure, not an error).
  [[nodiscard]] Result<bool> try_submit(std::uint32_t priority, std::span<const std::byte> payload);
  /// Blocking submit: waits up to `timeout` for room in ring `priority`.
  [[nodiscard]] Result<bool> submit(std::uint32_t priority, std::span<const std::byte> payload,
                                    std::chrono::nanoseconds timeout);
  /// Pops from the highest non-empty priority: {priority, size}, or nullopt
  /// when every ring looked empty (each priority is tried at most once per call).
  [[nodiscard]] Result<std::optional<Popped>> try_pop_highest(std::span<std::byte> out);
  /// Blocking pop: spins briefly, then parks on the bitmap's epoch word until
  /// a submit wakes it or `timeout` passes (an idle drainer burns no CPU).
  [[nodiscard]] Result<std::optional<Popped>> pop_highest(std::span<std::byte> out,
                                                          std::chrono::nanoseconds timeout);
  /// At-least-once take: takes the highest-priority item in place (zero copy)
  /// and keeps it until release(). A handle that dies in between does not lose
  /// it: the ring's repair keeps it, and the next consumer of that ring takes
  /// it again before newer items (see "Crashes" above and docs/fanout.md). One
  /// outstanding take per handle; nullopt when every ring looked empty.
  [[nodiscard]] Result<std::optional<Taken>> try_take_highest();
  /// Blocking take: as pop_highest() (spin, then park on the bitmap).
  [[nodiscard]] Result<std::optional<Taken>> take_highest(std::chrono::nanoseconds timeout);
  /// Releases the item of the last take: it is consumed now.
  void release() noexcept;

  /// Pops from one priority only (dedicated workers); the bitmap is not
  /// consulted (only its bit cleared when the pop emptied the ring).
  [[nodiscard]] Result<std::optional<std::size_t>> try_pop_priority(std::uint32_t priority,
                                                                    std::span<std::byte> out);
  /// Blocking try_pop_priority: spins briefly, then parks on that ring until
  /// an item arrives or `timeout` passes (then nullopt).
  [[nodiscard]] Result<std::optional<std::size_t>> pop_priority(std::uint32_t priority,
                                                                std::span<std::byte> out,
                                                                std::chrono::nanoseconds timeout);

  /// The bitmap as it is now: a HINT for observability and short-circuits. An
  /// empty ring may briefly keep its bit, a just-pushed item may briefly lack it.
  [[nodiscard]] std::uint64_t active_priorities() const noexcept;
  /// The bitmap, counters and every ring's positions now (never blocks).
  [[nodiscard]] FanoutSnapshot snapshot() const;

  /// K: the number of priorities (rings), 1 to 64.
  [[nodiscard]] std::uint32_t priorities() const noexcept { return k_; }
  /// Cells per ring (every ring has the same).
  [[nodiscard]] std::uint64_t ring_cells() const noexcept;
  /// Bytes per cell: the largest payload.
  [[nodiscard]] std::uint64_t slot_bytes() const noexcept;
  /// The fanout's name, the prefix of its files.
  [[nodiscard]] const std::string& base() const noexcept { return base_; }
  /// The `<base>.bitmap` segment this handle keeps mapped.
  [[nodiscard]] const Segment& bitmap_segment() const noexcept { return segment_; }
  /// This handle's attachment to the bitmap segment (its slot: its drainer waiter bit).
  [[nodiscard]] const Attachment& attachment() const noexcept { return attachment_; }
  /// The ring of `priority` (std::out_of_range beyond priorities() - 1).
  [[nodiscard]] const MpmcRing& ring(std::uint32_t priority) const { return rings_.at(priority); }
  /// Repairs cells of every ring held by dead handles now (normally automatic).
  [[nodiscard]] mpmc::RepairReport repair() const;
  /// "Alive and making progress" for the sidecar and shmctl: stamps the bitmap's
  /// and every ring's attachment. The blocking calls do it while they park; a
  /// handle that never parks (a throttled submitter) calls it now and then.
  void heartbeat() noexcept;

 protected:
  /// The role a handle attaches under: its bitmap slot and its ring slots.
  struct Roles {
    const RoleSpec& bitmap;  ///< on the bitmap segment
    const RoleSpec& ring;    ///< on every ring
  };
  /// create / open / attach for every handle type, under `roles`;
  /// attach_checked() first checks segments it was given.
  [[nodiscard]] static Result<PriorityFanout> create_with(std::string_view base,
                                                          const FanoutParams& params,
                                                          const CreateOptions& options,
                                                          Roles roles);
  /// open() under `roles`.
  [[nodiscard]] static Result<PriorityFanout> open_with(std::string_view base,
                                                        const FanoutParams& expected,
                                                        const OpenOptions& options, Roles roles);
  /// attach() under `roles`.
  [[nodiscard]] static Result<PriorityFanout> attach_checked(FanoutSegments segments, Roles roles);

 private:
  friend struct detail::WaitSetAccess;
  [[nodiscard]] static Result<PriorityFanout> adopt(Result<FanoutSegments> segments, Roles roles);
  [[nodiscard]] static Result<PriorityFanout> bind(std::string_view base, Segment bitmap,
                                                   std::vector<MpmcRing> rings,
                                                   const RoleSpec& role);
  /// try_pop_highest() without the thread guard (pop_highest() holds it).
  [[nodiscard]] Result<std::optional<Popped>> pop_once(std::span<std::byte> out);
  [[nodiscard]] Result<std::optional<Taken>> take_once();
  /// The highest-first walk shared by pops and takes: pop(ring) claims from
  /// one ring (Result<bool>: false when it looked empty); returns the priority
  /// it claimed from, or nullopt when every ring looked empty.
  template <class Pop>
  [[nodiscard]] Result<std::optional<std::uint32_t>> highest(Pop&& pop);
  /// Parks until attempt() returns a value, an error, or the deadline passes.
  template <class R, class Attempt>
  [[nodiscard]] R park_until(std::chrono::nanoseconds timeout, Attempt&& attempt);
  [[nodiscard]] std::unexpected<Error> out_of_bounds(std::uint32_t priority) const;
  [[nodiscard]] std::unexpected<Error> bit_out_of_range(std::uint64_t bitmap) const;
  void announce(std::uint32_t priority) noexcept;
  /// Clears bit `priority`, then sets it again if a push has claimed a cell of
  /// that ring meanwhile ([fanout.B2]/[fanout.C]); clear_stale() also counts a stale retry.
  void clear_bit(std::uint32_t priority) noexcept;
  void clear_stale(std::uint32_t priority) noexcept;
  void wake_drainers() noexcept;
  /// Sets the bit of every ring that holds claimed items while its bit is
  /// clear (a submitter died between its ring commit and its bit): true when
  /// it set one. K seq_cst loads; see pop_highest() and bind().
  bool resurface() noexcept;

  Segment segment_;  ///< `<base>.bitmap`
  Attachment attachment_;
  fanout::Control* control_ = nullptr;
  std::vector<MpmcRing> rings_;
  std::uint32_t k_ = 0;
  std::uint32_t slot_ = 0;         ///< this handle's attachment slot (its drainer waiter bit)
  std::uint32_t taken_ = kNoTake;  ///< the ring of the outstanding take, or kNoTake
  static constexpr std::uint32_t kNoTake = ~0u;
  std::string base_;
  detail::EndpointGuard guard_;  ///< one thread at a time (see the note at the top)
};

namespace detail {
/// What both one-sided fanout handles expose: the accessors, no submit, no pop.
class FanoutSide : protected PriorityFanout {
 public:
  using PriorityFanout::active_priorities;
  using PriorityFanout::attachment;
  using PriorityFanout::base;
  using PriorityFanout::bitmap_segment;
  using PriorityFanout::heartbeat;
  using PriorityFanout::priorities;
  using PriorityFanout::repair;
  using PriorityFanout::ring;
  using PriorityFanout::ring_cells;
  using PriorityFanout::slot_bytes;
  using PriorityFanout::snapshot;

 protected:
  FanoutSide() = default;
  explicit FanoutSide(PriorityFanout&& f) noexcept : PriorityFanout(std::move(f)) {}
};
}  // namespace detail

/// The submitting side of a fanout: PriorityFanout without the pop and take calls.
class FanoutProducer : public detail::FanoutSide {
 public:
  /// Attached to nothing: only assignment is valid.
  FanoutProducer() = default;
  /// As PriorityFanout::create, attached as a submitter.
  [[nodiscard]] static Result<FanoutProducer> create(std::string_view base,
                                                     const FanoutParams& params,
                                                     const CreateOptions& options = {});
  /// As PriorityFanout::open, attached as a submitter.
  [[nodiscard]] static Result<FanoutProducer> open(std::string_view base,
                                                   const FanoutParams& expected,
                                                   const OpenOptions& options = {});
  /// As PriorityFanout::attach, attached as a submitter.
  [[nodiscard]] static Result<FanoutProducer> attach(FanoutSegments segments);

  using PriorityFanout::submit;
  using PriorityFanout::try_submit;

 private:
  explicit FanoutProducer(PriorityFanout&& f) noexcept : FanoutSide(std::move(f)) {}
};

/// The popping side of a fanout: PriorityFanout without the submit calls.
class FanoutConsumer : public detail::FanoutSide {
 public:
  /// Attached to nothing: only assignment is valid.
  FanoutConsumer() = default;
  /// As PriorityFanout::create, attached as a drainer.
  [[nodiscard]] static Result<FanoutConsumer> create(std::string_view base,
                                                     const FanoutParams& params,
                                                     const CreateOptions& options = {});
  /// As PriorityFanout::open, attached as a drainer.
  [[nodiscard]] static Result<FanoutConsumer> open(std::string_view base,
                                                   const FanoutParams& expected,
                                                   const OpenOptions& options = {});
  /// As PriorityFanout::attach, attached as a drainer.
  [[nodiscard]] static Result<FanoutConsumer> attach(FanoutSegments segments);

  using PriorityFanout::pop_highest;
  using PriorityFanout::pop_priority;
  using PriorityFanout::release;
  using PriorityFanout::take_highest;
  using PriorityFanout::try_pop_highest;
  using PriorityFanout::try_pop_priority;
  using PriorityFanout::try_take_highest;

 private:
  friend struct detail::WaitSetAccess;
  explicit FanoutConsumer(PriorityFanout&& f) noexcept : FanoutSide(std::move(f)) {}
};

/// The setup helpers (docs/idioms.md, "Lifecycle"): create_fanout makes the
/// K ring segments and then the bitmap (removing what it made on failure),
/// open_fanout opens the bitmap and its rings (checking that each ring is the
/// one the bitmap was created with); neither attaches. A handle's
/// attach(segments) adopts the result; X::create / X::open do both in one step.
[[nodiscard]] Result<FanoutSegments> create_fanout(std::string_view base,
                                                   const FanoutParams& params,
                                                   const CreateOptions& options = {});
/// Opens fanout `base` (see create_fanout); a field of `expected` that differs
/// is ParamMismatch naming both values (0 = accept any).
[[nodiscard]] Result<FanoutSegments> open_fanout(std::string_view base,
                                                 const FanoutParams& expected,
                                                 const OpenOptions& options = {});

/// PriorityFanout: the bitmap segment's layout and the checks of a fanout's
/// segments (docs/fanout.md); the handles are shm::PriorityFanout,
/// shm::FanoutProducer and shm::FanoutConsumer.
namespace fanout {
/// What attach(FanoutSegments) checks: kinds, layouts, parameters, sizes and
/// that every ring is the bitmap's own.
[[nodiscard]] Result<void> check_adopted(const FanoutSegments& segments);
}  // namespace fanout

namespace detail {
inline constexpr const char* kFanoutGuardName = "a PriorityFanout handle";
}  // namespace detail

// ---------------------------------------------------------------- inline hot paths

inline void PriorityFanout::announce(std::uint32_t priority) noexcept {
  const std::uint64_t bit = std::uint64_t{1} << priority;
  auto& hot = control_->hot;
  // [fanout.B1] seq_cst: follows the ring's seq_cst claim [mpmc.T]; Dekker pair with a
  // clearer's [fanout.B2] fetch_and + [fanout.C] tail load: either this load sees the clear
  // (and we set the bit) or the clearer sees our claim (and sets it back).
  if ((hot.bitmap.load(std::memory_order_seq_cst) & bit) == 0) [[unlikely]]
    hot.bitmap.fetch_or(bit, std::memory_order_seq_cst);
  // [fanout.D1] seq_cst (the loads in ParkedSet::any()): Dekker pair with a parking
  // drainer's [fanout.D] (its count and waiter bit) + [fanout.D2] (its bitmap load):
  // either it sees the bit or we see it waiting.
  if (hot.waiters.any()) [[unlikely]]
    wake_drainers();
}

inline Result<bool> PriorityFanout::try_submit(std::uint32_t priority,
                                               std::span<const std::byte> payload) {
  const detail::EndpointGuard::Scope scope(guard_, detail::kFanoutGuardName);
  if (priority >= k_) [[unlikely]]
    return out_of_bounds(priority);
  auto r = rings_[priority].try_push(payload);
  if (!r || !*r) return r;
  if (detail::fanout_crash_armed.load(std::memory_order_relaxed)) [[unlikely]]
    detail::fanout_crash_point(detail::kCrashSubmitAfterRingCommit);
  announce(priority);
  return true;
}

inline Result<std::optional<Popped>> PriorityFanout::try_pop_highest(std::span<std::byte> out) {
  const detail::EndpointGuard::Scope scope(guard_, detail::kFanoutGuardName);
  return pop_once(out);
}

template <class Pop>
inline Result<std::optional<std::uint32_t>> PriorityFanout::highest(Pop&& pop) {
  // Priorities found empty during this call. Every round either returns or
  // adds to `tried` a bit of `bm`, which excludes `tried`: at most K rounds,
  // then `bm` is 0. (The specification's bound of 2K attempts cannot be
  // reached and is not kept; a clear that a claim sets back, see clear_bit(),
  // is not retried in the same call.)
  std::uint64_t tried = 0;
  for (;;) {
    // Relaxed is enough: the bitmap only chooses a ring; the ring's own
    // acquire/CAS protocol decides what is there.
    const std::uint64_t bm = control_->hot.bitmap.load(std::memory_order_relaxed) & ~tried;
    if (bm == 0) return std::optional<std::uint32_t>{};
    const auto p = static_cast<std::uint32_t>(63 - std::countl_zero(bm));
    if (p >= k_) [[unlikely]]
      return bit_out_of_range(bm);
    Result<bool> r = pop(rings_[p]);
    if (!r) return std::unexpected(std::move(r.error()));
    if (*r) {
      // The ring looks empty now: clear its bit at once (the specification's
      // "if ring now empty, fetch_and"), so the next pop does not pay a
      // failed pop for it.
      if (rings_[p].popped_last()) clear_bit(p);
      return std::optional<std::uint32_t>{p};
    }
    clear_stale(p);
    tried |= std::uint64_t{1} << p;
  }
}

inline Result<std::optional<Popped>> PriorityFanout::pop_once(std::span<std::byte> out) {
  std::size_t size = 0;
  auto p = highest([&](MpmcRing& ring) -> Result<bool> {
    auto r = ring.try_pop(out);
    if (!r) return std::unexpected(std::move(r.error()));
    if (*r) size = **r;
    return r->has_value();
  });
  if (!p) return std::unexpected(std::move(p.error()));
  if (!*p) return std::optional<Popped>{};
  return std::optional<Popped>{Popped{**p, size}};
}

inline Result<std::optional<std::size_t>> PriorityFanout::try_pop_priority(
    std::uint32_t priority, std::span<std::byte> out) {
  const detail::EndpointGuard::Scope scope(guard_, detail::kFanoutGuardName);
  if (priority >= k_) [[unlikely]]
    return out_of_bounds(priority);
  auto r = rings_[priority].try_pop(out);
  if (r && *r && rings_[priority].popped_last()) clear_bit(priority);
  return r;
}

}  // namespace shm
