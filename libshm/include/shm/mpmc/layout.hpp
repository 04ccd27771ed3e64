// MpmcRing segment layout: a bounded multi-producer multi-consumer ring of
// fixed-size cells with per-cell sequence numbers (Vyukov), shared by any
// number of processes. The handle that acts on it is MpmcRing (mpmc_ring.hpp).
//
// Protocol. `tail` and `head` are 64-bit positions that only grow; cell index
// = pos & (capacity - 1). Cell i starts with seq = i. For position p:
//   seq == p            the cell is free for the producer of p
//   seq == p + 1        the producer of p published it (payload + length)
//   seq == (p+1)|TOMB   a tombstone: published without an item (a cancelled
//                       reservation, or repaired after its producer died)
//   seq == p + capacity the consumer of p released it: free for p + capacity
// A producer claims p by CAS tail p -> p+1 after seeing seq == p, writes the
// payload, then release-stores seq = p+1. A consumer claims p by CAS head p ->
// p+1 after seeing seq == p+1, copies, then release-stores seq = p+capacity.
//
// Crash safety. Before each claiming CAS a handle stores its intent (p+1) in
// the intent word of its attachment slot. A process killed between a claim and
// the matching publish/release leaves one cell held; the kernel drops its OFD
// lock, so anyone can prove the holder dead: every slot whose intent names the
// held position is dead (or free). Repair then publishes a tombstone for a dead
// producer's cell (consumers skip it) or releases a dead consumer's cell (its
// item is lost: "at most the item it had popped"), except for a kept take.
//
// Kept takes (at-least-once). A consumer that takes with try_take() stores its
// intent with kKeepIntent set. Repair of such a cell whose holders are all
// dead does not release it: it marks it an orphan, seq = (p+1)|kOrphan
// ([mpmc.O] acq_rel CAS), and counts it in consumer.orphans (release). Every
// claim_pop() first looks at consumer.orphans (acquire, pairs with [mpmc.O]):
// when not 0 it scans [head - capacity, head) for an orphan and adopts it:
// intent (q+1)|kKeepIntent, then CAS seq (q+1)|kOrphan -> q+1 ([mpmc.A]
// acq_rel), then decrements the count. The adopter then holds the cell like
// any claim (released by release(); if it dies too, repair orphans it again).
// An orphan is never released by anyone else: producers see the ring full
// in front of it and consumers see it empty behind it until it is adopted. Repair runs when a
// handle opens (including a takeover of the dead slot), when a blocked side has seen the same held
// cell for kStuckGraceNs, and in the kind's reclaim (sidecar).
//
// Validation. Every sequence, length and position read from the mapping is
// classified against the only states the protocol can produce; anything else
// is Errc::Corrupt naming the cell, its value and what was expected, never a
// spin or an out-of-bounds access.
#pragma once

#include "shm/error.hpp"
#include "shm/mpmc/parked_set.hpp"
#include "shm/segment/header.hpp"
#include "shm/segment/kind_ids.hpp"
#include "shm/segment/layout.hpp"
#include "shm/segment/segment.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace shm {

struct MpmcParams {
  std::uint64_t ring_cells = 0;  // a power of two in [2, 2^30]; 0 on open = accept any
  std::uint64_t slot_bytes = 0;  // largest payload in bytes, [1, 1 MiB]; 0 on open = accept any
};

namespace mpmc {

inline constexpr std::uint64_t kMinCapacity = 2;
inline constexpr std::uint64_t kMaxCapacity = 1ull << 30;
inline constexpr std::uint64_t kMaxSlotSize = 1ull << 20;
inline constexpr std::uint64_t kMaxCellBytes = 1ull << 40;  // capacity * stride
inline constexpr std::size_t kCellHeader = 16;
inline constexpr std::size_t kCellAlign = 64;  // a cell never shares a cache line with another
inline constexpr std::uint64_t kTombstone = 1ull << 63;
inline constexpr std::uint64_t kOrphan = 1ull << 62;      // cell seq: kept item of a dead taker
inline constexpr std::uint64_t kKeepIntent = 1ull << 62;  // pop intent: a kept take (try_take)
inline constexpr std::uint64_t kNoIntent = 0;
// A held cell is repaired only after it stayed held this long in one handle's view.
inline constexpr std::uint64_t kStuckGraceNs = 1'000'000;

// Role ids (non-exclusive: handles take any of the shared attachment slots),
// shown in the attachment table: MpmcProducer, MpmcConsumer, MpmcRing (a peer).
inline constexpr RoleSpec kProducerRole{0, false, "producer"};
inline constexpr RoleSpec kConsumerRole{1, false, "consumer"};
inline constexpr RoleSpec kPeerRole{2, false, "peer"};

// The first kCellHeader bytes of every cell; the payload follows.
struct Cell {
  std::atomic<std::uint64_t> seq;     // see the protocol above
  std::atomic<std::uint32_t> length;  // payload bytes; written before the publishing seq store
  std::uint32_t reserved;
};
static_assert(std::is_standard_layout_v<Cell>);
static_assert(sizeof(Cell) == kCellHeader);
static_assert(offsetof(Cell, length) == 8);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

// The control block at the start of the data area.
struct Control {
  struct alignas(kFalseSharingRange) Producer {
    std::atomic<std::uint64_t> tail;  // next position to claim; CAS by producers
  } producer;
  struct alignas(kFalseSharingRange) Consumer {
    std::atomic<std::uint64_t> head;  // next position to claim; CAS by consumers
    // Kept cells of dead takers waiting for adoption: read by every claim, so
    // it sits on the line every claim's CAS owns anyway; written by repair
    // and adoption only.
    std::atomic<std::uint64_t> orphans;
  } consumer;
  // Read on every push/pop (the two counts), written only around a park.
  struct alignas(kFalseSharingRange) Waiters {
    std::atomic<std::uint32_t> data_signal;   // futex: bumped to wake waiting consumers
    std::atomic<std::uint32_t> space_signal;  // futex: bumped to wake waiting producers
    ParkedSet consumers_waiting;              // slots of parked consumers
    ParkedSet producers_waiting;              // slots of parked producers
  } waiters;
  // Statistics, written on slow paths only.
  struct alignas(kFalseSharingRange) Stats {
    std::atomic<std::uint64_t> abandoned_pushes;    // tombstones written for dead producers
    std::atomic<std::uint64_t> lost_pops;           // cells released for dead consumers
    std::atomic<std::uint64_t> tombstones_skipped;  // tombstones consumed by consumers
    std::atomic<std::uint64_t> cancelled_pushes;    // reservations cancelled by their producer
    std::atomic<std::uint64_t> parks;               // times a handle went to wait
    std::atomic<std::uint64_t> wakeups;             // futex wakes issued
    std::atomic<std::uint64_t> adopted;             // orphans adopted by a consumer (statistics)
  } stats;
  // One per attachment slot, written only by the slot's holder (repair clears
  // a dead holder's with CAS). Value = claimed position + 1; 0 = none.
  struct alignas(kFalseSharingRange) Intent {
    std::atomic<std::uint64_t> push;
    std::atomic<std::uint64_t> pop;
  } intents[kMaxAttachments];
};
static_assert(std::is_standard_layout_v<Control>);
static_assert(offsetof(Control, consumer) == 1 * kFalseSharingRange);
static_assert(offsetof(Control, waiters) == 2 * kFalseSharingRange);
static_assert(offsetof(Control, stats) == 3 * kFalseSharingRange);
static_assert(offsetof(Control, intents) == 4 * kFalseSharingRange);
static_assert(sizeof(Control::Intent) == kFalseSharingRange);
static_assert(offsetof(Control::Waiters, consumers_waiting) == 8);
static_assert(sizeof(Control::Waiters) == kFalseSharingRange, "the waiter sets fit one block");
static_assert(sizeof(Control) == (4 + kMaxAttachments) * kFalseSharingRange);

inline constexpr std::size_t kCellsOffset = sizeof(Control);
static_assert(kCellsOffset % kCellAlign == 0);

inline constexpr std::uint64_t kFingerprint = layout_fingerprint(
    {kHeaderFingerprint, 0x4d504d43 /* "MPMC" */, sizeof(Control), offsetof(Control, consumer),
     offsetof(Control, waiters), offsetof(Control, stats), offsetof(Control, intents),
     sizeof(Control::Intent), sizeof(Cell), offsetof(Cell, length), kCellAlign, kTombstone,
     kFalseSharingRange, kOrphan, offsetof(Control::Consumer, orphans),
     offsetof(Control::Waiters, consumers_waiting), offsetof(Control::Waiters, producers_waiting),
     sizeof(ParkedSet)});

// The parameter block stored in the header.
struct ParamBlock {
  std::uint64_t capacity;
  std::uint64_t slot_bytes;
  std::uint64_t stride;  // bytes per cell, derived: round_up(kCellHeader + slot_bytes, kCellAlign)
};
static_assert(sizeof(ParamBlock) <= kParamBytes);

[[nodiscard]] constexpr std::uint64_t stride_for(std::uint64_t slot_bytes) noexcept {
  return round_up(kCellHeader + slot_bytes, kCellAlign);
}
[[nodiscard]] constexpr std::uint64_t data_size_for(std::uint64_t capacity,
                                                    std::uint64_t slot_bytes) noexcept {
  return kCellsOffset + capacity * stride_for(slot_bytes);
}

[[nodiscard]] Result<void> validate(const MpmcParams& params);
// The KindSpec for create (params exact) or open (0 fields = any).
[[nodiscard]] KindSpec kind_spec(const MpmcParams& params, ParamBlock& storage);

// The validated geometry of a mapped ring: what handles, the kind descriptor
// and repair act on.
struct View {
  Control* control = nullptr;
  std::byte* cells = nullptr;
  std::uint64_t capacity = 0;
  std::uint64_t mask = 0;
  std::uint64_t slot_bytes = 0;
  std::uint64_t stride = 0;

  [[nodiscard]] Cell& cell(std::uint64_t pos) const noexcept {
    return *reinterpret_cast<Cell*>(cells + (pos & mask) * stride);
  }
  [[nodiscard]] std::byte* payload(std::uint64_t pos) const noexcept {
    return cells + (pos & mask) * stride + kCellHeader;
  }
};
// Reads the geometry of a segment whose kind is mpmc_ring; nullopt (with the
// reason in `why`) when its parameters or size are not self-consistent.
[[nodiscard]] std::optional<View> view(const Segment& segment, std::string* why = nullptr);

enum class Side : std::uint8_t { Push, Pop };
[[nodiscard]] std::string_view to_string(Side v) noexcept;
enum class RepairStatus : std::uint8_t {
  NotHeld,     // the position is not held (anymore)
  HeldByLive,  // a live handle may hold it: in flight
  Unprovable,  // held, but no attachment's intent names it: left alone
  Repaired,    // its holder was dead: tombstoned (push), released or orphaned (pop)
};
[[nodiscard]] std::string_view to_string(RepairStatus outcome) noexcept;

struct RepairReport {
  std::uint64_t repaired_pushes = 0;  // tombstones written for dead producers
  std::uint64_t repaired_pops = 0;    // cells released (or orphaned, kept takes) for dead consumers
  std::uint64_t held_by_live = 0;     // held cells left to their live holders
  std::vector<std::string> actions;   // one line per action, for reclaim / shmctl
};

// Repairs position `pos` if it is held (claimed, not published/released) and
// every attachment slot whose intent names it is dead. `assume_dead` names a
// slot the caller knows is dead although it holds its lock (a takeover).
[[nodiscard]] RepairStatus repair_position(const Segment& segment, const View& v, Side side,
                                           std::uint64_t pos,
                                           std::optional<std::size_t> assume_dead,
                                           std::string* action = nullptr);
// Repairs what non-live slots (or only `slot`) left held; clears their waiter bits.
// What attach(Segment) checks of a segment it is given: kind, layout,
// parameters and size.
[[nodiscard]] Result<void> check_adopted(const Segment& seg);
[[nodiscard]] RepairReport repair_slots(const Segment& segment, const View& v,
                                        std::optional<std::size_t> slot = std::nullopt,
                                        std::optional<std::size_t> assume_dead = std::nullopt);

}  // namespace mpmc

// The setup helpers (docs/idioms.md, "Lifecycle"): create_mpmc_ring makes
// the segment and open_mpmc_ring opens it, neither attaches; the handles'
// attach(segment) adopts the result. X::create / X::open do both in one step.
[[nodiscard]] Result<Segment> create_mpmc_ring(std::string_view name, const MpmcParams& params,
                                               const CreateOptions& options = {});
[[nodiscard]] Result<Segment> open_mpmc_ring(std::string_view name, const MpmcParams& expected = {},
                                             const OpenOptions& options = {});

}  // namespace shm

// to_string of the enums above is reachable as shm::to_string too.
namespace shm {
using mpmc::to_string;
}  // namespace shm
