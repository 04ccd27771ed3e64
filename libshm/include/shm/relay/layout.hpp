/// @file
/// RelayCell segment layout (kind 6, "relay"): a conflating relay. Any number
/// of writer processes merge ops into a hot head under a merge policy
/// (policy.hpp); one reader process drains merged entries when it has credit.
/// The handles that act on it are RelayWriter and RelayReader (relay.hpp).
///
/// Protocol. Everything that changes the head runs under one robust
/// process-shared mutex (Control::mutex). The head is a pool of `capacity`
/// entries of fixed stride (entry_stride(): EntryHead, the merge word's
/// second half, two value buffers):
///   - the entry table is the source of truth: each entry's state (Free,
///     Pending, InHand), key, value, first/last op sequence, op count and its
///     order stamp (monotonic, assigned when the entry is created);
///   - everything else is derived and rebuilt by repair: the pending list
///     (prev/next, oldest first = drain order), the free list, the open
///     addressing key index (2 x capacity u32 cells, linear probing,
///     backward-shift delete; a cell holds entry + 1, 0 = empty) and the
///     projections (depth, bytes, pending_keys, pending_ops, in_hand, oldest_ns).
/// A keyed write finds the key's open entry through the index and merges into
/// it, or takes a free entry and appends it to the pending list. A raw_fifo
/// write always appends a new entry. The reader's take() moves up to `credit`
/// entries from the list head to InHand (unlinked, unindexed: later writes to
/// the same key open a new entry), copies them out, then commit() frees them.
/// A reader killed between take and commit leaves InHand entries; the next
/// reader's attach (or the sidecar's reclaim of the dead reader) returns them
/// to the pending list, in their old order, sealed (never merged into again,
/// delivered with the same sequences: at-least-once, dedup by first_seq).
///
/// Crash safety. A merge is a multi-word in-place update of a value: the
/// writer fills the intent record (entry, new value, len, last_seq, op_count),
/// stores intent_state = Merge, applies, stores intent_state = None. A writer
/// killed anywhere leaves the next locker EOWNERDEAD: repair rolls a valid
/// intent forward (the entry ends with the new value) or ignores an unfinished
/// one (the entry keeps the old value): never a torn value. A new entry is
/// filled while Free and published by its state store; a free is one state
/// store. The two other multi-entry changes use the same record: a commit
/// (intent Commit: repair frees every InHand entry, so a commit is all or
/// nothing) and a DropOldest write (intent DropAppend, holding the op: repair
/// drops the oldest if it is still there and appends the op if it is not
/// yet), so a kill leaves the state before or after, never the oldest dropped
/// without the op that displaced it.
/// Repair then rebuilds the derived state from the entry table. Damage that
/// cannot come from a crash (a state, length or index out of range) marks the
/// relay faulted: every later operation fails with Corrupt.
///
/// Delivered-value memory. For a keyed, associative, idempotent policy (keep_latest,
/// lww, max, min, bit_or) the segment keeps, per key, the value last given
/// to the reader (`remembered` MemSlots after the key index, with their own
/// key index of memory_index_capacity() cells, derived like the head's). A
/// take folds each entry it hands out into its key's slot (a sealed page's
/// entries too, for a commutative policy, when the page is recorded; a
/// keep_latest key is forgotten when its entry goes to a page or is
/// delivered again). A write to a key with no open entry whose op, folded
/// into the remembered value, leaves it as it is changes nothing (Unchanged);
/// otherwise its new entry starts from that fold. A new key takes a free
/// slot or evicts one by CLOCK (second chance; Counters::forgotten). Each
/// slot change is one intent (HeadIntent::Remember: slot, key, value, len),
/// rolled forward by repair; a free is one state store; forgetting is always
/// safe (a write is then judged as if the key had never been delivered).
///
/// Lock-free merge path (docs/relay.md). For sum, max, min and (8-byte
/// values) bit_or, an entry's value lives in its merge word {ctl, value},
/// 16-aligned at EntryHead::ctl, changed only by a 16-byte compare-exchange;
/// op_count and last_seq are its bases (base_gen: the word generation they
/// belong to) and ctl counts the ops and the last sequence past them. A
/// write to an open key folds its op into the word with no mutex (sequence
/// by fetch_add of next_seq). Whoever ends an entry's openness (take, seal,
/// DropOldest, repair) closes it first, then bumps the generation and folds
/// the word into the bases, inside the rebase record (Control::rebase_*),
/// rolled forward by repair when the word shows the new generation.
///
/// Copy merges (lww, keep_latest; docs/relay.md). Each entry has two value
/// buffers after the word's second half (entry_stride()); for these policies
/// that half is the copy control {buffer:1, claimed:1, owner slot:16 at bit
/// 8, owner's slot generation:32 at bit 32} (kCopy...). A write to an open
/// key of the same length reads the current buffer (framed by the word),
/// claims the word (one CAS naming its attachment slot), writes its value
/// into the other buffer, then publishes it with one CAS that also moves the
/// op count and last sequence. A writer killed holding a claim leaves the
/// current buffer whole: the mutex holder that needs the entry waits for a
/// live claimer and undoes a dead one's claim (kernel-exact: the slot's
/// lock and generation). Whoever closes an entry rebases it, which also
/// copies a value in the second buffer back to the first, so everything
/// under the mutex reads the first buffer.
///
/// Unlocked readers (snapshot(), shmctl, sidecar metrics, verify) read the
/// atomics with relaxed loads framed by the seqlock `version` (odd while a
/// holder mutates): [relay.V1]/[relay.V2] in begin_write/end_write pair with
/// [relay.V1']/[relay.V2'] in the readers. Fields only the mutex holder reads
/// and writes (values, intent bytes) are plain bytes.
///
/// Wake-ups. Writers parked by the Block overflow wait on `space_word`; the
/// side that makes room (a drain below low water, a retune, a commit that
/// frees entries) bumps it and wakes them only when `writers_waiting` is set.
/// The reader waits on `data_word`; a write that changes the head bumps it and
/// wakes only when `reader_waiting` is set. A write that changes nothing
/// touches neither.
#pragma once

#include "shm/platform/robust_mutex.hpp"
#include "shm/segment/kind_ids.hpp"
#include "shm/segment/layout.hpp"
#include "shm/segment/segment.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace shm::relay {

inline constexpr std::uint32_t kMinCapacity = 1;         ///< fewest entries in the pool
inline constexpr std::uint32_t kMaxCapacity = 1u << 22;  ///< most entries in the pool
inline constexpr std::uint32_t kMaxValueSize = 256;      ///< largest value_bytes
inline constexpr std::size_t kEventRing = 64;            ///< entries of the relay's event ring
inline constexpr std::uint32_t kNone = 0xFFFF'FFFFu;     ///< "no entry" in list links

/// @name Roles
/// One reader (exclusive, slot 0), any number of writers.
///@{
inline constexpr RoleSpec kReaderRole{0, true, "reader"};   ///< the one RelayReader
inline constexpr RoleSpec kWriterRole{1, false, "writer"};  ///< a RelayWriter
///@}

/// EntryHead::state.
enum class EntryState : std::uint32_t {
  Free = 0,     ///< on the free list
  Pending = 1,  ///< on the pending list, waiting for the reader
  InHand = 2    ///< taken by the reader, not committed yet
};
/// The enumerator's name, for logs and tool output.
[[nodiscard]] std::string_view to_string(EntryState v) noexcept;
/// @name Entry flags
/// EntryHead::flags. An entry with any of them is closed to merges (not in
/// the key index): a write to its key opens a new entry.
///@{
inline constexpr std::uint32_t kSealed = 1;    ///< returned by a dead reader (delivered again)
inline constexpr std::uint32_t kSpilling = 2;  ///< in the page a seal is writing (SpillArea::seal)
inline constexpr std::uint32_t kClosed = 4;    ///< was in a seal that was rolled back
inline constexpr std::uint32_t kEntryFlags = kSealed | kSpilling | kClosed;  ///< every flag
///@}
/// True when `flags` close the entry to merges.
[[nodiscard]] constexpr bool closed_to_merges(std::uint32_t flags) noexcept {
  return (flags & kEntryFlags) != 0;
}

/// Immutable parameters (the header's parameter block).
struct ParamBlock {
  std::uint32_t value_bytes;     ///< largest value in bytes, [1, kMaxValueSize]
  std::uint32_t capacity;        ///< entries in the pool, [kMinCapacity, kMaxCapacity]
  std::uint32_t index_capacity;  ///< key index cells: the power of two >= 2 x capacity
  std::uint32_t remembered;      ///< slots of the delivered-value memory, [0, kMaxCapacity]
};
static_assert(std::is_trivially_copyable_v<ParamBlock> && sizeof(ParamBlock) == 16);

/// One entry of the pool; `value_bytes` bytes of value follow (stride: entry_stride()).
struct EntryHead {
  std::atomic<std::uint32_t> state;  ///< EntryState; the publishing store of a new entry
  std::atomic<std::uint32_t> flags;  ///< kSealed, kSpilling, kClosed bits
  std::atomic<std::uint32_t> len;    ///< value bytes in use, <= value_bytes
  std::atomic<std::uint32_t> prev;   ///< derived: pending list, or kNone
  std::atomic<std::uint32_t> next;   ///< derived: pending list or free list, or kNone
  /// The merge word's generation the bases (op_count, last_seq) belong to
  /// (the lock-free merge path below); stored after them, release.
  std::atomic<std::uint32_t> base_gen;
  std::atomic<std::uint64_t> key;         ///< the key ops were written under
  std::atomic<std::uint64_t> first_seq;   ///< sequence of the first op merged in
  std::atomic<std::uint64_t> last_seq;    ///< sequence of the last op merged in
  std::atomic<std::uint64_t> op_count;    ///< ops merged in (1 for raw_fifo)
  std::atomic<std::uint64_t> order;       ///< creation stamp: the drain order
  std::atomic<std::uint64_t> created_ns;  ///< monotonic time of the first op (age, staleness)
  std::atomic<std::uint64_t> reserved;    ///< zero
  /// The merge word's control half: gen:32 | ops:12 | rseq:20 (kWordOps...).
  /// With the value's first 8 bytes, which follow it, it is one 16-byte,
  /// 16-aligned word changed only by a 16-byte compare-exchange (the
  /// lock-free merge path in the protocol note).
  std::atomic<std::uint64_t> ctl;
};
static_assert(sizeof(EntryHead) == 88 && alignof(EntryHead) == 8);
static_assert(offsetof(EntryHead, ctl) % 16 == 0 &&
              offsetof(EntryHead, ctl) + 8 == sizeof(EntryHead));

/// @name The merge word's control half (EntryHead::ctl)
///@{
inline constexpr unsigned kWordGenShift = 32;  ///< gen: bumped by every close, rebase, creation
inline constexpr unsigned kWordOpsShift = 20;  ///< ops merged into the word since the bases
inline constexpr std::uint64_t kWordOpsMax = 0xFFF;     ///< most ops the word holds
inline constexpr std::uint64_t kWordRseqMax = 0xFFFFF;  ///< largest sequence past the base last_seq
///@}
/// @name The copy control (the word's second half for lww and keep_latest)
///@{
inline constexpr std::uint64_t kCopyBuffer = 1;   ///< the buffer holding the value (0 or 1)
inline constexpr std::uint64_t kCopyClaimed = 2;  ///< a writer is filling the other buffer
inline constexpr unsigned kCopyOwnerShift = 8;    ///< the claimer's attachment slot (16 bits)
inline constexpr unsigned kCopyGenShift = 32;     ///< the claimer's slot generation (32 bits)
///@}
static_assert(std::is_standard_layout_v<EntryHead>);

/// One slot of the delivered-value memory (MemSlot + value_bytes bytes of
/// value, stride memory_stride()): the last value the reader was given for
/// `key` (see "Delivered-value memory" in the protocol note).
struct MemSlot {
  std::atomic<std::uint32_t> state;     ///< 0 free, 1 remembers `key`; the publishing store
  std::atomic<std::uint32_t> ref;       ///< CLOCK bit: set when the key is delivered again
  std::atomic<std::uint32_t> len;       ///< value bytes in use, <= value_bytes
  std::atomic<std::uint32_t> reserved;  ///< zero
  std::atomic<std::uint64_t> key;       ///< the key remembered
};
static_assert(sizeof(MemSlot) == 24 && alignof(MemSlot) == 8);

/// Bytes per memory slot: MemSlot plus `value_bytes`, rounded up to 8.
[[nodiscard]] constexpr std::uint64_t memory_stride(std::uint32_t value_bytes) noexcept {
  return round_up(sizeof(MemSlot) + value_bytes, 8);
}
/// Cells of the memory's key index: the power of two >= 2 x remembered (0 without a memory).
[[nodiscard]] constexpr std::uint32_t memory_index_capacity(std::uint32_t remembered) noexcept {
  if (remembered == 0) return 0;
  std::uint32_t n = 2;
  while (n < 2 * remembered) n *= 2;
  return n;
}

/// Bytes of one value buffer of an entry: `value_bytes` rounded up to 8.
[[nodiscard]] constexpr std::uint64_t buffer_stride(std::uint32_t value_bytes) noexcept {
  return round_up(value_bytes, 8);
}
/// Bytes per entry: EntryHead, the merge word's second half (8 bytes), then
/// two value buffers (the copy merge of lww and keep_latest), rounded up to
/// 16 (the merge word {ctl, value} is 16-aligned). The other policies keep
/// their value at the word's second half and use only what fits there and
/// after it.
[[nodiscard]] constexpr std::uint64_t entry_stride(std::uint32_t value_bytes) noexcept {
  return round_up(sizeof(EntryHead) + 8 + 2 * buffer_stride(value_bytes), 16);
}

/// Event::kind: what happened; Event::key and Event::count say more.
enum class EventKind : std::uint32_t {
  Dropped = 1,    ///< DropNewest refused an op (count = 1)
  DroppedOldest,  ///< DropOldest discarded the oldest entry (count = its ops)
  FullSet,        ///< is_full rose at high water (count = level)
  FullCleared,    ///< is_full cleared at low water (count = level)
  Retuned,        ///< backpressure limits changed (count = new high water)
  Reconfigured,   ///< the merge policy was swapped (count = new policy id)
  Repaired,       ///< a locker repaired after a holder died (count = 1 if an intent rolled forward)
  Returned,       ///< entries a dead reader held were returned (count = entries)
  Spilled,        ///< a page was sealed (key = page id, count = entries)
  PageAcked,      ///< the reader acknowledged a page; its file is removed (key = page id,
                  ///< count = records of the last commit, 0 when a repair finished it)
  PageRefused,    ///< a page file failed validation and was moved aside (key = page id)
  SpillFallback,  ///< spill impossible (bound, manifest full, an I/O error): blocked instead
  NoSpace,        ///< the filesystem cannot hold a page (statvfs preflight / ENOSPC)
  PageExpired,    ///< Ttl retention removed an unacknowledged page (key = page id, count = ops)
};

/// One entry of the relay's event ring, written under the mutex.
struct Event {
  std::atomic<std::uint64_t> number;    ///< event number + 1 (0 = empty)
  std::atomic<std::uint64_t> time_ns;   ///< when, realtime ns
  std::atomic<std::uint64_t> key;       ///< a key or page id (see EventKind)
  std::atomic<std::uint64_t> count;     ///< how many (see EventKind)
  std::atomic<std::uint32_t> kind;      ///< EventKind
  std::atomic<std::uint32_t> reserved;  ///< zero
};
static_assert(sizeof(Event) == 40);

/// Lifetime counters of the hot head, written under the mutex; never reset.
struct Counters {
  std::atomic<std::uint64_t> writes;        ///< write calls that reached the head
  std::atomic<std::uint64_t> appended;      ///< ops that opened a new entry
  std::atomic<std::uint64_t> merged;        ///< ops merged into an open entry (conflated)
  std::atomic<std::uint64_t> unchanged;     ///< ops that changed nothing
  std::atomic<std::uint64_t> dropped;       ///< ops lost to DropNewest / DropOldest
  std::atomic<std::uint64_t> conflated;     ///< ops folded into another op (== merged)
  std::atomic<std::uint64_t> blocked;       ///< writes that parked (Block)
  std::atomic<std::uint64_t> timed_out;     ///< parked writes that gave up
  std::atomic<std::uint64_t> refused_full;  ///< writes refused: no free entry
  std::atomic<std::uint64_t> drained;       ///< entries delivered to the reader
  std::atomic<std::uint64_t> drained_ops;   ///< ops those entries carried
  std::atomic<std::uint64_t> returned;      ///< entries returned from a dead reader
  std::atomic<std::uint64_t> repairs;       ///< EOWNERDEAD repairs
  std::atomic<std::uint64_t> retunes;       ///< backpressure changes
  std::atomic<std::uint64_t> reconfigures;  ///< policy swaps
  std::atomic<std::uint64_t> notifies;      ///< writes that signalled the reader's data word
  std::atomic<std::uint64_t> events;        ///< next event number
  std::atomic<std::uint64_t> forgotten;     ///< keys the delivered-value memory evicted (CLOCK)
  std::atomic<std::uint64_t> remembered_unchanged;  ///< writes found Unchanged by the memory
};

/// What the head intent holds (Control::intent_state). Each is stored after
/// its fields and cleared when the change is complete; a holder killed in
/// between leaves the next locker (EOWNERDEAD) to roll it forward.
enum class HeadIntent : std::uint32_t {
  None = 0,        ///< no change in progress
  Merge = 1,       ///< entry intent_entry gets intent_value / len / last_seq / op_count
  Commit = 2,      ///< the reader's commit: every InHand entry is freed
  DropAppend = 3,  ///< DropOldest: entry intent_entry is dropped and the op (key intent_op_count,
                   ///< intent_value / len, sequence intent_last_seq) appended
  Remember = 4,    ///< memory slot intent_entry remembers key intent_last_seq: intent_value / len
};
/// The enumerator's name, for logs and tool output.
[[nodiscard]] std::string_view to_string(HeadIntent v) noexcept;
/// The largest valid HeadIntent value (repair refuses a larger one as damage).
inline constexpr std::uint32_t kLastHeadIntent = static_cast<std::uint32_t>(HeadIntent::Remember);

/// The control block at the start of the data area: the mutex, the relay's
/// configuration, its projections and links, and the head intent.
struct Control {
  ::shm::detail::RobustMutex mutex;    ///< robust, process-shared; EOWNERDEAD triggers repair
  std::atomic<std::uint32_t> version;  ///< seqlock: odd while a holder mutates
  std::atomic<std::uint32_t> faulted;  ///< 1: damage found; every operation fails
  /// @name Configuration (changed under the mutex; read by every op)
  ///@{
  std::atomic<std::uint32_t> policy;        ///< PolicyId
  std::atomic<std::uint32_t> policy_flags;  ///< MergeFlags bits the creator declared
  std::atomic<std::uint32_t> overflow;      ///< Overflow
  std::atomic<std::uint32_t> dimension;     ///< Dimension
  std::atomic<std::uint32_t> egress;        ///< EgressOrder
  std::atomic<std::uint32_t> spill_dedup;   ///< 1: spill replay dedups (declared)
  std::atomic<std::uint64_t> high_water;    ///< is_full sets when the dimension's level reaches it
  std::atomic<std::uint64_t> low_water;     ///< is_full clears when the level falls to it
  ///@}
  /// @name Projections (O(1) per write)
  ///@{
  std::atomic<std::uint64_t> depth;         ///< pending entries
  std::atomic<std::uint64_t> bytes;         ///< value bytes of pending entries
  std::atomic<std::uint64_t> pending_keys;  ///< pending entries open for merging (keyed policies)
  std::atomic<std::uint64_t> pending_ops;   ///< ops carried by pending entries (lag)
  std::atomic<std::uint64_t> in_hand;       ///< entries taken by the reader, not committed
  std::atomic<std::uint64_t> oldest_ns;     ///< created_ns of the oldest pending entry, 0 if none
  std::atomic<std::uint32_t> is_full;       ///< hysteresis: set at high water, cleared at low
  std::atomic<std::uint32_t> is_draining;   ///< the reader holds entries (take .. commit)
  std::atomic<std::uint64_t> remembered;    ///< memory slots in use (derived)
  ///@}
  /// @name Derived links
  ///@{
  std::atomic<std::uint32_t> head;           ///< oldest pending entry, or kNone
  std::atomic<std::uint32_t> tail;           ///< newest pending entry, or kNone
  std::atomic<std::uint32_t> free_head;      ///< first entry of the free list, or kNone
  std::atomic<std::uint32_t> remember_hand;  ///< the memory's CLOCK hand (next slot to look at)
  std::atomic<std::uint64_t> next_seq;       ///< op sequences start at 1
  std::atomic<std::uint64_t> next_order;     ///< entry order stamps start at 1
  ///@}
  Counters counters;  ///< lifetime counters
  /// @name Futex words, each on its own cache line
  ///@{
  alignas(kFalseSharingRange) std::atomic<std::uint32_t> space_word;  ///< bumped when room is made
  std::atomic<std::uint32_t> writers_waiting;  ///< nonzero: a writer may be parked on space_word
  /// Bumped by a write that changes the head.
  alignas(kFalseSharingRange) std::atomic<std::uint32_t> data_word;
  std::atomic<std::uint32_t> reader_waiting;  ///< nonzero: the reader may be parked on data_word
  ///@}
  /// @name The head intent (see the protocol; HeadIntent says which)
  ///@{
  alignas(kFalseSharingRange) std::atomic<std::uint32_t> intent_state;  ///< HeadIntent
  std::atomic<std::uint32_t> intent_entry;  ///< Merge: the entry; DropAppend: the oldest, dropped
  std::atomic<std::uint32_t> intent_len;    ///< bytes of intent_value in use
  std::atomic<std::uint32_t> intent_reserved;  ///< zero
  /// Merge: the entry's last_seq; DropAppend: the op's sequence.
  std::atomic<std::uint64_t> intent_last_seq;
  std::atomic<std::uint64_t> intent_op_count;  ///< Merge: the entry's; DropAppend: the op's key
  /// @name The rebase record (the lock-free merge path): a fold of an
  /// entry's merge word into its bases, valid while rebase_state is 1.
  ///@{
  std::atomic<std::uint32_t> rebase_state;     ///< 1: entry rebase_entry is being rebased
  std::atomic<std::uint32_t> rebase_entry;     ///< the entry
  std::atomic<std::uint64_t> rebase_gen;       ///< the word's generation after the rebase
  std::atomic<std::uint64_t> rebase_op_count;  ///< the entry's op_count after it
  std::atomic<std::uint64_t> rebase_last_seq;  ///< the entry's last_seq after it
  ///@}
  unsigned char intent_value[kMaxValueSize];  ///< under the mutex only
  ///@}
  /// Unchanged writes judged by the lock-free merge path (no mutex): added
  /// to writes and unchanged on read.
  alignas(kFalseSharingRange) std::atomic<std::uint64_t> fast_unchanged;
  /// The event ring: event n is in events[n % kEventRing].
  alignas(kFalseSharingRange) Event events[kEventRing];
};
static_assert(std::is_standard_layout_v<Control>);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(offsetof(Control, space_word) % kFalseSharingRange == 0);
static_assert(offsetof(Control, data_word) % kFalseSharingRange == 0);

inline constexpr std::uint32_t kManifestSlots = 64;  ///< most sealed pages recorded at once
/// Room for the spill directory's path, NUL included.
inline constexpr std::uint32_t kSpillDirBytes = 256;
/// ManifestSlot::state.
enum class SlotState : std::uint32_t {
  Free = 0,    ///< records no page
  Sealed = 1,  ///< records a sealed page (the seal's commit point)
  Acked = 2    ///< acknowledged, expired or refused; its file is being removed or moved aside
};
/// The enumerator's name, for logs and tool output.
[[nodiscard]] std::string_view to_string(SlotState v) noexcept;
/// SpillArea::intent_state; its counter: pages_acked, pages_expired, pages_refused.
/// Seal (1) is not an intent state any more (a seal keeps its own record,
/// seal_state): a repair refuses it as damage.
enum class SpillIntent : std::uint32_t {
  None = 0,    ///< nothing in progress
  Seal = 1,    ///< no longer used (see above)
  Ack = 2,     ///< the reader acknowledges intent_page
  Expire = 3,  ///< Ttl retention removes intent_page
  Refuse = 4   ///< the reader moves intent_page aside
};
/// The enumerator's name, for logs and tool output.
[[nodiscard]] std::string_view to_string(SpillIntent v) noexcept;
/// The largest valid SpillIntent value.
inline constexpr std::uint32_t kLastSpillIntent = 4;
/// SpillArea::mode: how a seal lays out records (fixed at create).
enum class SpillMode : std::uint32_t {
  AppendCompact = 0,  ///< the default: one record per entry, appended in drain order
  CompactOnWrite = 1  ///< one record per key within a page where sound
};
/// SpillArea::retention: what bounds the sealed pages kept.
enum class RetentionKind : std::uint32_t {
  UnboundedLog = 0,  ///< nothing: pages stay until acknowledged
  BoundedDisk = 1,   ///< retention_bytes of page files at most
  Ttl = 2            ///< pages older than retention_ttl_ms are removed, acknowledged or not
};
/// SpillArea::rehydrate: the declared order of draining pages.
enum class Rehydrate : std::uint32_t {
  Sequential = 0,  ///< page by page
  Parallel = 1     ///< declared only: the reader still delivers pages in order
};
/// The enumerator's name, for logs and tool output.
[[nodiscard]] std::string_view to_string(Rehydrate v) noexcept;

/// One sealed page, recorded in the manifest under the relay mutex.
struct ManifestSlot {
  std::atomic<std::uint32_t> state;        ///< SlotState; the publishing store
  std::atomic<std::uint32_t> content_crc;  ///< the page file's content CRC32C
  std::atomic<std::uint64_t> page_id;      ///< the page's id (never reused)
  std::atomic<std::uint64_t> first_seq;    ///< lowest op sequence in the page
  std::atomic<std::uint64_t> last_seq;     ///< highest op sequence in the page
  std::atomic<std::uint64_t> first_order;  ///< order stamp of its first record: the drain order
  std::atomic<std::uint64_t> last_order;   ///< order stamp of its last record
  std::atomic<std::uint64_t> records;      ///< records in the page
  std::atomic<std::uint64_t> ops;          ///< ops those records carry
  std::atomic<std::uint64_t> file_bytes;   ///< size of the page file
  std::atomic<std::uint64_t> sealed_ns;    ///< realtime (Ttl)
};
static_assert(sizeof(ManifestSlot) == 80);

/// Lifetime counters of the spill store, exact across a kill (see the spill intent).
struct SpillCounters {
  std::atomic<std::uint64_t> pages_sealed;     ///< pages written and recorded
  std::atomic<std::uint64_t> entries_spilled;  ///< entries those pages took from the head
  std::atomic<std::uint64_t> ops_spilled;      ///< ops those entries carried
  std::atomic<std::uint64_t> pages_acked;      ///< pages the reader acknowledged
  std::atomic<std::uint64_t> pages_refused;    ///< failed validation, moved aside
  std::atomic<std::uint64_t> pages_expired;    ///< Ttl retention
  std::atomic<std::uint64_t> pages_rebuilt;    ///< adopted from the directory at create
  std::atomic<std::uint64_t> fallbacks;        ///< spill impossible: the write blocked instead
  std::atomic<std::uint64_t> no_space;         ///< seals refused by the statvfs preflight / ENOSPC
  std::atomic<std::uint64_t> seal_errors;      ///< other I/O errors while sealing
  std::atomic<std::uint64_t> rolled_forward;   ///< repaired seals whose page was recorded
  std::atomic<std::uint64_t> rolled_back;      ///< repaired seals whose page was not recorded
};

/// The spill store's part of the relay segment (docs/spill.md; the page
/// format is shm/spill/page.hpp).
///
/// The manifest lives here, in the relay segment, under the relay mutex: the
/// recording of a sealed page and the freeing of its entries from the hot head
/// are one critical section, so they commit together. It is rebuilt from the spill
/// directory when the segment is created (the hot head is RAM and lost with the
/// machine; sealed pages are not).
///
/// The spill intent. Three changes of a page (acknowledge, Ttl expiry,
/// refusal) run under the mutex inside one intent: store intent_page,
/// intent_last_order (a refusal's reason) and intent_count (the low 32 bits of
/// the change's counter, pages_acked / pages_expired / pages_refused, before
/// it is bumped),
/// then intent_state (SpillIntent, a release store: the record is complete
/// before it says valid); make the change; bump the counter; clear the intent.
/// A holder killed anywhere in it leaves EOWNERDEAD, and repair finishes or
/// undoes the change and bumps the counter only if it still holds the recorded
/// value: the holder bumps it at most once per intent, so the value is either
/// the recorded one (not counted yet) or one more, which differs in the low 32
/// bits: every counter is exact across a kill at any point, never skipped,
/// never doubled.
///
/// Seal (a writer; the file I/O outside the relay mutex). 1. Under the relay
/// mutex: choose the oldest pending entries and copy them into the page
/// buffer; take seal_mutex (try-lock: free, since no seal is in flight);
/// record {seal_page, seal_count, seal_counts} (the low 32 bits of
/// pages_sealed, entries_spilled and ops_spilled before the seal) then
/// seal_state = 1
/// (release); flag the entries kSpilling (closed to merges: out of the key
/// index, a write to their key opens a new entry); unlock the relay mutex.
/// 2. Holding seal_mutex alone: write and seal the page file (content, flush,
/// header, flush, rename, fsync dir). Meanwhile the other writers go on into
/// the free entries and park only when none is left; the reader delivers
/// nothing newer than the spilling entries (it waits for the page). 3. Under
/// the relay mutex again: fill a free manifest slot and publish it (state
/// Sealed: the commit point); free the entries; count (pages_sealed,
/// entries_spilled, ops_spilled, the Spilled event); seal_state = 0; unlock
/// seal_mutex; wake the reader and parked writers. A failed write (NoSpace,
/// I/O) reopens the entries (kClosed: still closed to merges) and falls back
/// to Block. Lock order: a holder of the relay mutex only ever try-locks
/// seal_mutex, so the sealer may block on the relay mutex in step 3.
/// A dead sealer: whoever holds the relay mutex and needs the seal to end (a
/// writer with no free entry left, the reader at a spilling head or in wait, a reader's
/// open, the OwnerDied repair, the reclaim of a dead writer) try-locks
/// seal_mutex: Busy means the sealer lives;
/// OwnerDied means it died (in step 2, or holding both in step 1 or 3). The
/// reaper rolls the seal forward when the manifest holds the page (frees the
/// kSpilling entries; counts each of the three counters unless its recorded
/// low 32 bits show the sealer did)
/// and back otherwise (removes page-N.tmp / page-N.spill; the entries stay
/// pending, kClosed); then it rebuilds the derived structures and counts a
/// repair.
///
/// Drain (the reader): the oldest sealed page goes first when its first order
/// is older than the hot head's oldest entry. The reader reads and validates
/// the file outside the mutex (then, locked again, checks that the page is
/// still the oldest sealed one and matches its slot: only the reader
/// acknowledges, expires or refuses a sealed page, and page ids are never
/// reused), delivers up to `credit` records from the egress cursor
/// (cursor_page, cursor_record), and on commit advances the cursor; the last
/// record's commit acknowledges the page inside the Ack intent: slot state
/// Acked (the commit point), pages_acked; then, outside the mutex, unlink and
/// fsync dir; then, locked, slot Free.
/// Ttl expiry does the same inside the Expire intent: slot Acked, pages_expired
/// (and the PageExpired event, which names the ops lost), unlink, slot Free.
/// Repair of either: a slot still Sealed means the change never happened
/// (nothing counted); an Acked or freed slot is counted if the holder did not.
/// An Acked slot found later (a reader killed in between, or an unlink that
/// failed) is finished by whoever sees it. Records taken and not committed are
/// delivered again (taken_record marks how far delivery went: `redelivered`).
///
/// Refusal (the reader found a sealed page's file invalid) runs inside the
/// Refuse intent: move the file aside into refused/, slot Acked, pages_refused
/// (and the PageRefused event), slot Free. The judgement is made before the
/// intent opens, so repair always rolls it forward: moves the file aside if it
/// is still there, counts it if the holder did not, frees the slot.
struct SpillArea {
  std::atomic<std::uint32_t> enabled;           ///< 1: this relay has a spill store
  std::atomic<std::uint32_t> mode;              ///< SpillMode
  std::atomic<std::uint32_t> retention;         ///< RetentionKind
  std::atomic<std::uint32_t> rehydrate;         ///< Rehydrate
  std::atomic<std::uint64_t> relay_id;          ///< the directory's identity (relay.id)
  std::atomic<std::uint64_t> page_bytes;        ///< target page size (header included)
  std::atomic<std::uint64_t> retention_bytes;   ///< BoundedDisk
  std::atomic<std::uint64_t> retention_ttl_ms;  ///< Ttl
  std::atomic<std::uint64_t> next_page_id;      ///< page ids start at 1
  std::atomic<std::uint64_t> cold_pages;        ///< Sealed slots
  std::atomic<std::uint64_t> cold_bytes;        ///< their file bytes
  std::atomic<std::uint64_t> cold_ops;          ///< their ops not yet acknowledged
  /// @name The egress cursor (the reader)
  ///@{
  std::atomic<std::uint64_t> cursor_page;    ///< page the reader is inside, 0 = at a page start
  std::atomic<std::uint64_t> cursor_record;  ///< records of it acknowledged
  std::atomic<std::uint64_t> taken_page;     ///< page of the last take
  std::atomic<std::uint64_t> taken_record;   ///< records delivered by it (redelivery marks)
  /// The last page of the conflated summary being delivered (0: none): until
  /// all its pages are acknowledged, a reader folds exactly the pages up to it
  /// again, so a summary delivered twice never covers more ops the second time.
  std::atomic<std::uint64_t> catch_up_page;
  ///@}
  /// @name The spill intent (see the protocol)
  ///@{
  std::atomic<std::uint32_t> intent_state;       ///< SpillIntent: what is in progress, 0 = nothing
  std::atomic<std::uint32_t> intent_count;       ///< low 32 bits of its counter before the bump
  std::atomic<std::uint64_t> intent_page;        ///< the page sealed, acknowledged or expired
  std::atomic<std::uint64_t> intent_last_order;  ///< Refuse: the reason (an Errc); else 0
  ///@}
  SpillCounters counters;              ///< lifetime counters
  char dir[kSpillDirBytes];            ///< absolute path, NUL-terminated; written once at create
  ManifestSlot slots[kManifestSlots];  ///< the manifest: one slot per sealed page
  /// @name The seal in flight
  /// See the seal protocol: its own record, since its file I/O runs outside
  /// the relay mutex while the intent above serves acknowledgements, expiries
  /// and refusals under it.
  ///@{
  std::atomic<std::uint32_t> seal_state;  ///< 0 none, 1 a seal is in flight
  std::atomic<std::uint32_t> seal_count;  ///< low 32 bits of pages_sealed before its bump
  std::atomic<std::uint64_t> seal_page;   ///< its page id
  /// Low 32 bits of entries_spilled | low 32 bits of ops_spilled << 32, before the seal's bumps.
  std::atomic<std::uint64_t> seal_counts;
  ::shm::detail::RobustMutex seal_mutex;  ///< held by the sealer from start to finish
  ///@}
};
static_assert(std::is_standard_layout_v<SpillArea>);

/// Offsets of the data area.
struct Geometry {
  std::uint64_t entries = 0;       ///< after Control
  std::uint64_t index = 0;         ///< u32 cells
  std::uint64_t memory = 0;        ///< memory slots (ParamBlock::remembered)
  std::uint64_t memory_index = 0;  ///< u32 cells (memory_index_capacity)
  std::uint64_t spill = 0;         ///< SpillArea
  std::uint64_t data_size = 0;     ///< bytes of the whole data area
};
/// The Geometry of a relay with parameters `p`.
[[nodiscard]] constexpr Geometry geometry(const ParamBlock& p) noexcept {
  Geometry g;
  g.entries = round_up(sizeof(Control), kFalseSharingRange);
  g.index = round_up(g.entries + entry_stride(p.value_bytes) * p.capacity, kFalseSharingRange);
  g.memory = round_up(g.index + std::uint64_t{4} * p.index_capacity, kFalseSharingRange);
  g.memory_index =
      round_up(g.memory + memory_stride(p.value_bytes) * p.remembered, kFalseSharingRange);
  g.spill = round_up(g.memory_index + std::uint64_t{4} * memory_index_capacity(p.remembered),
                     kFalseSharingRange);
  g.data_size = g.spill + sizeof(SpillArea);
  return g;
}

/// The segment fingerprint of this layout.
inline constexpr std::uint64_t kFingerprint =
    layout_fingerprint({5,  // 5: two value buffers per entry (the copy merge)
                        sizeof(Control),
                        sizeof(EntryHead),
                        sizeof(MemSlot),
                        sizeof(Event),
                        sizeof(Counters),
                        offsetof(Control, policy),
                        offsetof(Control, high_water),
                        offsetof(Control, depth),
                        offsetof(Control, head),
                        offsetof(Control, counters),
                        offsetof(Control, space_word),
                        offsetof(Control, data_word),
                        offsetof(Control, intent_state),
                        offsetof(Control, events),
                        offsetof(EntryHead, key),
                        offsetof(EntryHead, created_ns),
                        offsetof(EntryHead, ctl),
                        offsetof(Control, rebase_state),
                        offsetof(Control, fast_unchanged),
                        entry_stride(1),
                        kCopyOwnerShift,
                        kEventRing,
                        kMaxValueSize,
                        sizeof(SpillArea),
                        sizeof(ManifestSlot),
                        offsetof(SpillArea, cursor_page),
                        offsetof(SpillArea, counters),
                        offsetof(SpillArea, slots),
                        kManifestSlots});

}  // namespace shm::relay

// to_string of the enums above is reachable as shm::to_string too.
namespace shm {
using relay::to_string;
}  // namespace shm
