// RelayCell segment layout (kind 6, "relay"): a conflating relay. Any number
// of writer processes merge ops into a hot head under a merge policy
// (policy.hpp); one reader process drains merged entries when it has credit.
// The handles that act on it are RelayWriter and RelayReader (relay.hpp).
//
// Protocol. Everything that changes the head runs under one robust
// process-shared mutex (Control::mutex). The head is a pool of `capacity`
// entries of fixed stride (EntryHead + value_bytes bytes, rounded to 8):
//   - the entry table is the source of truth: each entry's state (Free,
//     Pending, InHand), key, value, first/last op sequence, op count and its
//     order stamp (monotonic, assigned when the entry is created);
//   - everything else is derived and rebuilt by repair: the pending list
//     (prev/next, oldest first = drain order), the free list, the open
//     addressing key index (2 x capacity u32 cells, linear probing,
//     backward-shift delete; a cell holds entry + 1, 0 = empty) and the
//     projections (depth, bytes, pending_keys, pending_ops, in_hand, oldest_ns).
// A keyed write finds the key's open entry through the index and merges into
// it, or takes a free entry and appends it to the pending list. A raw_fifo
// write always appends a new entry. The reader's take() moves up to `credit`
// entries from the list head to InHand (unlinked, unindexed: later writes to
// the same key open a new entry), copies them out, then commit() frees them.
// A reader killed between take and commit leaves InHand entries; the next
// reader's attach (or the sidecar's reclaim of the dead reader) returns them
// to the pending list, in their old order, sealed (never merged into again,
// delivered with the same sequences: at-least-once, dedup by first_seq).
//
// Crash safety. A merge is a multi-word in-place update of a value: the
// writer fills the intent record (entry, new value, len, last_seq, op_count),
// stores intent_state = Merge, applies, stores intent_state = None. A writer
// killed anywhere leaves the next locker EOWNERDEAD: repair rolls a valid
// intent forward (the entry ends with the new value) or ignores an unfinished
// one (the entry keeps the old value): never a torn value. A new entry is
// filled while Free and published by its state store; a free is one state
// store. The two other multi-entry changes use the same record: a commit
// (intent Commit: repair frees every InHand entry, so a commit is all or
// nothing) and a DropOldest write (intent DropAppend, holding the op: repair
// drops the oldest if it is still there and appends the op if it is not
// yet), so a kill leaves the state before or after, never the oldest dropped
// without the op that displaced it.
// Repair then rebuilds the derived state from the entry table. Damage that
// cannot come from a crash (a state, length or index out of range) marks the
// relay faulted: every later operation fails with Corrupt.
//
// Unlocked readers (snapshot(), shmctl, sidecar metrics, verify) read the
// atomics with relaxed loads framed by the seqlock `version` (odd while a
// holder mutates): [relay.V1]/[relay.V2] in begin_write/end_write pair with
// [relay.V1']/[relay.V2'] in the readers. Fields only the mutex holder reads
// and writes (values, intent bytes) are plain bytes.
//
// Wake-ups. Writers parked by the Block overflow wait on `space_word`; the
// side that makes room (a drain below low water, a retune, a commit that
// frees entries) bumps it and wakes them only when `writers_waiting` is set.
// The reader waits on `data_word`; a write that changes the head bumps it and
// wakes only when `reader_waiting` is set. A write that changes nothing
// touches neither.
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

inline constexpr std::uint32_t kMinCapacity = 1;
inline constexpr std::uint32_t kMaxCapacity = 1u << 22;
inline constexpr std::uint32_t kMaxValueSize = 256;
inline constexpr std::size_t kEventRing = 64;
inline constexpr std::uint32_t kNone = 0xFFFF'FFFFu;  // "no entry" in list links

// Role ids: one reader (exclusive, slot 0), any number of writers.
inline constexpr RoleSpec kReaderRole{0, true, "reader"};
inline constexpr RoleSpec kWriterRole{1, false, "writer"};

enum class EntryState : std::uint32_t { Free = 0, Pending = 1, InHand = 2 };
[[nodiscard]] std::string_view to_string(EntryState v) noexcept;
// EntryHead::flags. An entry with any of them is closed to merges (not in
// the key index): a write to its key opens a new entry.
inline constexpr std::uint32_t kSealed = 1;    // returned by a dead reader (delivered again)
inline constexpr std::uint32_t kSpilling = 2;  // in the page a seal is writing (SpillArea::seal)
inline constexpr std::uint32_t kClosed = 4;    // was in a seal that was rolled back
inline constexpr std::uint32_t kEntryFlags = kSealed | kSpilling | kClosed;
[[nodiscard]] constexpr bool closed_to_merges(std::uint32_t flags) noexcept {
  return (flags & kEntryFlags) != 0;
}

// Immutable parameters (the header's parameter block).
struct ParamBlock {
  std::uint32_t value_bytes;     // largest value in bytes, [1, kMaxValueSize]
  std::uint32_t capacity;        // entries in the pool, [kMinCapacity, kMaxCapacity]
  std::uint32_t index_capacity;  // key index cells: the power of two >= 2 x capacity
  std::uint32_t reserved;
};
static_assert(std::is_trivially_copyable_v<ParamBlock> && sizeof(ParamBlock) == 16);

// One entry of the pool; `value_bytes` bytes of value follow (stride: entry_stride()).
struct EntryHead {
  std::atomic<std::uint32_t> state;  // EntryState; the publishing store of a new entry
  std::atomic<std::uint32_t> flags;  // kSealed
  std::atomic<std::uint32_t> len;    // value bytes in use, <= value_bytes
  std::atomic<std::uint32_t> prev;   // derived: pending list, or kNone
  std::atomic<std::uint32_t> next;   // derived: pending list or free list, or kNone
  std::atomic<std::uint32_t> reserved;
  std::atomic<std::uint64_t> key;
  std::atomic<std::uint64_t> first_seq;   // sequence of the first op merged in
  std::atomic<std::uint64_t> last_seq;    // sequence of the last op merged in
  std::atomic<std::uint64_t> op_count;    // ops merged in (1 for raw_fifo)
  std::atomic<std::uint64_t> order;       // creation stamp: the drain order
  std::atomic<std::uint64_t> created_ns;  // monotonic time of the first op (age, staleness)
};
static_assert(sizeof(EntryHead) == 72 && alignof(EntryHead) == 8);
static_assert(std::is_standard_layout_v<EntryHead>);

[[nodiscard]] constexpr std::uint64_t entry_stride(std::uint32_t value_bytes) noexcept {
  return round_up(sizeof(EntryHead) + value_bytes, 8);
}

enum class EventKind : std::uint32_t {
  Dropped = 1,    // DropNewest refused an op (count = 1)
  DroppedOldest,  // DropOldest discarded the oldest entry (count = its ops)
  FullSet,        // is_full rose at high water (count = level)
  FullCleared,    // is_full cleared at low water (count = level)
  Retuned,        // backpressure limits changed (count = new high water)
  Reconfigured,   // the merge policy was swapped (count = new policy id)
  Repaired,       // a locker repaired after a holder died (count = 1 if an intent rolled forward)
  Returned,       // entries a dead reader held were returned (count = entries)
  Spilled,        // a page was sealed (key = page id, count = entries)
  PageAcked,      // the reader acknowledged a page; its file is removed (key = page id,
                  // count = records of the last commit, 0 when a repair finished it)
  PageRefused,    // a page file failed validation and was moved aside (key = page id)
  SpillFallback,  // spill impossible (bound, manifest full, an I/O error): blocked instead
  NoSpace,        // the filesystem cannot hold a page (statvfs preflight / ENOSPC)
  PageExpired,    // Ttl retention removed an unacknowledged page (key = page id, count = ops)
};

// One entry of the relay's event ring, written under the mutex.
struct Event {
  std::atomic<std::uint64_t> number;  // event number + 1 (0 = empty)
  std::atomic<std::uint64_t> time_ns;
  std::atomic<std::uint64_t> key;
  std::atomic<std::uint64_t> count;
  std::atomic<std::uint32_t> kind;  // EventKind
  std::atomic<std::uint32_t> reserved;
};
static_assert(sizeof(Event) == 40);

struct Counters {
  std::atomic<std::uint64_t> writes;        // write calls that reached the head
  std::atomic<std::uint64_t> appended;      // ops that opened a new entry
  std::atomic<std::uint64_t> merged;        // ops merged into an open entry (conflated)
  std::atomic<std::uint64_t> unchanged;     // ops that changed nothing
  std::atomic<std::uint64_t> dropped;       // ops lost to DropNewest / DropOldest
  std::atomic<std::uint64_t> conflated;     // ops folded into another op (== merged)
  std::atomic<std::uint64_t> blocked;       // writes that parked (Block)
  std::atomic<std::uint64_t> timed_out;     // parked writes that gave up
  std::atomic<std::uint64_t> refused_full;  // writes refused: no free entry
  std::atomic<std::uint64_t> drained;       // entries delivered to the reader
  std::atomic<std::uint64_t> drained_ops;   // ops those entries carried
  std::atomic<std::uint64_t> returned;      // entries returned from a dead reader
  std::atomic<std::uint64_t> repairs;       // EOWNERDEAD repairs
  std::atomic<std::uint64_t> retunes;       // backpressure changes
  std::atomic<std::uint64_t> reconfigures;  // policy swaps
  std::atomic<std::uint64_t> notifies;      // writes that signalled the reader's data word
  std::atomic<std::uint64_t> events;        // next event number
};

// What the head intent holds (Control::intent_state). Each is stored after
// its fields and cleared when the change is complete; a holder killed in
// between leaves the next locker (EOWNERDEAD) to roll it forward.
enum class HeadIntent : std::uint32_t {
  None = 0,
  Merge = 1,       // entry intent_entry gets intent_value / len / last_seq / op_count
  Commit = 2,      // the reader's commit: every InHand entry is freed
  DropAppend = 3,  // DropOldest: entry intent_entry is dropped and the op (key intent_op_count,
                   // intent_value / len, sequence intent_last_seq) appended
};
[[nodiscard]] std::string_view to_string(HeadIntent v) noexcept;
inline constexpr std::uint32_t kLastHeadIntent = static_cast<std::uint32_t>(HeadIntent::DropAppend);

struct Control {
  ::shm::detail::RobustMutex mutex;
  std::atomic<std::uint32_t> version;  // seqlock: odd while a holder mutates
  std::atomic<std::uint32_t> faulted;  // 1: damage found; every operation fails
  // ---- configuration (changed under the mutex; read by every op) ----
  std::atomic<std::uint32_t> policy;        // PolicyId
  std::atomic<std::uint32_t> policy_flags;  // MergeFlags bits the creator declared
  std::atomic<std::uint32_t> overflow;      // Overflow
  std::atomic<std::uint32_t> dimension;     // Dimension
  std::atomic<std::uint32_t> egress;        // EgressOrder
  std::atomic<std::uint32_t> spill_dedup;   // 1: spill replay dedups (declared)
  std::atomic<std::uint64_t> high_water;
  std::atomic<std::uint64_t> low_water;
  // ---- projections (O(1) per write) ----
  std::atomic<std::uint64_t> depth;         // pending entries
  std::atomic<std::uint64_t> bytes;         // value bytes of pending entries
  std::atomic<std::uint64_t> pending_keys;  // pending entries open for merging (keyed policies)
  std::atomic<std::uint64_t> pending_ops;   // ops carried by pending entries (lag)
  std::atomic<std::uint64_t> in_hand;       // entries taken by the reader, not committed
  std::atomic<std::uint64_t> oldest_ns;     // created_ns of the oldest pending entry, 0 if none
  std::atomic<std::uint32_t> is_full;       // hysteresis: set at high water, cleared at low
  std::atomic<std::uint32_t> is_draining;   // the reader holds entries (take .. commit)
  // ---- derived links ----
  std::atomic<std::uint32_t> head;  // oldest pending entry, or kNone
  std::atomic<std::uint32_t> tail;  // newest pending entry, or kNone
  std::atomic<std::uint32_t> free_head;
  std::atomic<std::uint32_t> reserved0;
  std::atomic<std::uint64_t> next_seq;    // op sequences start at 1
  std::atomic<std::uint64_t> next_order;  // entry order stamps start at 1
  Counters counters;
  // ---- futex words, each on its own cache line ----
  alignas(kFalseSharingRange) std::atomic<std::uint32_t> space_word;
  std::atomic<std::uint32_t> writers_waiting;
  alignas(kFalseSharingRange) std::atomic<std::uint32_t> data_word;
  std::atomic<std::uint32_t> reader_waiting;
  // ---- the head intent (see the protocol; HeadIntent says which) ----
  alignas(kFalseSharingRange) std::atomic<std::uint32_t> intent_state;  // HeadIntent
  std::atomic<std::uint32_t> intent_entry;  // Merge: the entry; DropAppend: the oldest, dropped
  std::atomic<std::uint32_t> intent_len;
  std::atomic<std::uint32_t> intent_reserved;
  std::atomic<std::uint64_t> intent_last_seq;  // Merge: the entry's; DropAppend: the op's sequence
  std::atomic<std::uint64_t> intent_op_count;  // Merge: the entry's; DropAppend: the op's key
  unsigned char intent_value[kMaxValueSize];   // under the mutex only
  alignas(kFalseSharingRange) Event events[kEventRing];
};
static_assert(std::is_standard_layout_v<Control>);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(offsetof(Control, space_word) % kFalseSharingRange == 0);
static_assert(offsetof(Control, data_word) % kFalseSharingRange == 0);

// ---- the spill store (docs/spill.md; the page format is shm/spill/page.hpp) ----
//
// The manifest lives here, in the relay segment, under the relay mutex: the
// recording of a sealed page and the freeing of its entries from the hot head
// are one critical section, so they commit together. It is rebuilt from the spill
// directory when the segment is created (the hot head is RAM and lost with the
// machine; sealed pages are not).
//
// The spill intent. Three changes of a page (acknowledge, Ttl expiry,
// refusal) run under the mutex inside one intent: store intent_page,
// intent_last_order (a refusal's reason) and intent_count (the low 32 bits of
// the change's counter, pages_acked / pages_expired / pages_refused, before
// it is bumped),
// then intent_state (SpillIntent, a release store: the record is complete
// before it says valid); make the change; bump the counter; clear the intent.
// A holder killed anywhere in it leaves EOWNERDEAD, and repair finishes or
// undoes the change and bumps the counter only if it still holds the recorded
// value: the holder bumps it at most once per intent, so the value is either
// the recorded one (not counted yet) or one more, which differs in the low 32
// bits: every counter is exact across a kill at any point, never skipped,
// never doubled.
//
// Seal (a writer; the file I/O outside the relay mutex). 1. Under the relay
// mutex: choose the oldest pending entries and copy them into the page
// buffer; take seal_mutex (try-lock: free, since no seal is in flight);
// record {seal_page, seal_count, seal_counts} (the low 32 bits of
// pages_sealed, entries_spilled and ops_spilled before the seal) then
// seal_state = 1
// (release); flag the entries kSpilling (closed to merges: out of the key
// index, a write to their key opens a new entry); unlock the relay mutex.
// 2. Holding seal_mutex alone: write and seal the page file (content, flush,
// header, flush, rename, fsync dir). Meanwhile the other writers go on into
// the free entries and park only when none is left; the reader delivers
// nothing newer than the spilling entries (it waits for the page). 3. Under
// the relay mutex again: fill a free manifest slot and publish it (state
// Sealed: the commit point); free the entries; count (pages_sealed,
// entries_spilled, ops_spilled, the Spilled event); seal_state = 0; unlock
// seal_mutex; wake the reader and parked writers. A failed write (NoSpace,
// I/O) reopens the entries (kClosed: still closed to merges) and falls back
// to Block. Lock order: a holder of the relay mutex only ever try-locks
// seal_mutex, so the sealer may block on the relay mutex in step 3.
// A dead sealer: whoever holds the relay mutex and needs the seal to end (a
// writer with no free entry left, the reader at a spilling head or in wait, a reader's
// open, the OwnerDied repair, the reclaim of a dead writer) try-locks
// seal_mutex: Busy means the sealer lives;
// OwnerDied means it died (in step 2, or holding both in step 1 or 3). The
// reaper rolls the seal forward when the manifest holds the page (frees the
// kSpilling entries; counts each of the three counters unless its recorded
// low 32 bits show the sealer did)
// and back otherwise (removes page-N.tmp / page-N.spill; the entries stay
// pending, kClosed); then it rebuilds the derived structures and counts a
// repair.
//
// Drain (the reader): the oldest sealed page goes first when its first order
// is older than the hot head's oldest entry. The reader reads and validates
// the file outside the mutex (then, locked again, checks that the page is
// still the oldest sealed one and matches its slot: only the reader
// acknowledges, expires or refuses a sealed page, and page ids are never
// reused), delivers up to `credit` records from the egress cursor
// (cursor_page, cursor_record), and on commit advances the cursor; the last
// record's commit acknowledges the page inside the Ack intent: slot state
// Acked (the commit point), pages_acked; then, outside the mutex, unlink and
// fsync dir; then, locked, slot Free.
// Ttl expiry does the same inside the Expire intent: slot Acked, pages_expired
// (and the PageExpired event, which names the ops lost), unlink, slot Free.
// Repair of either: a slot still Sealed means the change never happened
// (nothing counted); an Acked or freed slot is counted if the holder did not.
// An Acked slot found later (a reader killed in between, or an unlink that
// failed) is finished by whoever sees it. Records taken and not committed are
// delivered again (taken_record marks how far delivery went: `redelivered`).
//
// Refusal (the reader found a sealed page's file invalid) runs inside the
// Refuse intent: move the file aside into refused/, slot Acked, pages_refused
// (and the PageRefused event), slot Free. The judgement is made before the
// intent opens, so repair always rolls it forward: moves the file aside if it
// is still there, counts it if the holder did not, frees the slot.
inline constexpr std::uint32_t kManifestSlots = 64;
inline constexpr std::uint32_t kSpillDirBytes = 256;
enum class SlotState : std::uint32_t { Free = 0, Sealed = 1, Acked = 2 };
[[nodiscard]] std::string_view to_string(SlotState v) noexcept;
// SpillArea::intent_state; its counter: pages_acked, pages_expired, pages_refused.
// Seal (1) is not an intent state any more (a seal keeps its own record,
// seal_state): a repair refuses it as damage.
enum class SpillIntent : std::uint32_t { None = 0, Seal = 1, Ack = 2, Expire = 3, Refuse = 4 };
[[nodiscard]] std::string_view to_string(SpillIntent v) noexcept;
inline constexpr std::uint32_t kLastSpillIntent = 4;
enum class SpillMode : std::uint32_t { AppendCompact = 0, CompactOnWrite = 1 };
enum class RetentionKind : std::uint32_t { UnboundedLog = 0, BoundedDisk = 1, Ttl = 2 };
enum class Rehydrate : std::uint32_t { Sequential = 0, Parallel = 1 };
[[nodiscard]] std::string_view to_string(Rehydrate v) noexcept;

struct ManifestSlot {
  std::atomic<std::uint32_t> state;  // SlotState; the publishing store
  std::atomic<std::uint32_t> content_crc;
  std::atomic<std::uint64_t> page_id;
  std::atomic<std::uint64_t> first_seq;
  std::atomic<std::uint64_t> last_seq;
  std::atomic<std::uint64_t> first_order;
  std::atomic<std::uint64_t> last_order;
  std::atomic<std::uint64_t> records;
  std::atomic<std::uint64_t> ops;
  std::atomic<std::uint64_t> file_bytes;
  std::atomic<std::uint64_t> sealed_ns;  // realtime (Ttl)
};
static_assert(sizeof(ManifestSlot) == 80);

struct SpillCounters {
  std::atomic<std::uint64_t> pages_sealed;
  std::atomic<std::uint64_t> entries_spilled;
  std::atomic<std::uint64_t> ops_spilled;
  std::atomic<std::uint64_t> pages_acked;
  std::atomic<std::uint64_t> pages_refused;   // failed validation, moved aside
  std::atomic<std::uint64_t> pages_expired;   // Ttl retention
  std::atomic<std::uint64_t> pages_rebuilt;   // adopted from the directory at create
  std::atomic<std::uint64_t> fallbacks;       // spill impossible: the write blocked instead
  std::atomic<std::uint64_t> no_space;        // seals refused by the statvfs preflight / ENOSPC
  std::atomic<std::uint64_t> seal_errors;     // other I/O errors while sealing
  std::atomic<std::uint64_t> rolled_forward;  // repaired seals whose page was recorded
  std::atomic<std::uint64_t> rolled_back;     // repaired seals whose page was not recorded
};

struct SpillArea {
  std::atomic<std::uint32_t> enabled;           // 1: this relay has a spill store
  std::atomic<std::uint32_t> mode;              // SpillMode
  std::atomic<std::uint32_t> retention;         // RetentionKind
  std::atomic<std::uint32_t> rehydrate;         // Rehydrate
  std::atomic<std::uint64_t> relay_id;          // the directory's identity (relay.id)
  std::atomic<std::uint64_t> page_bytes;        // target page size (header included)
  std::atomic<std::uint64_t> retention_bytes;   // BoundedDisk
  std::atomic<std::uint64_t> retention_ttl_ms;  // Ttl
  std::atomic<std::uint64_t> next_page_id;      // page ids start at 1
  std::atomic<std::uint64_t> cold_pages;        // Sealed slots
  std::atomic<std::uint64_t> cold_bytes;        // their file bytes
  std::atomic<std::uint64_t> cold_ops;          // their ops not yet acknowledged
  // ---- the egress cursor (the reader) ----
  std::atomic<std::uint64_t> cursor_page;    // page the reader is inside, 0 = at a page start
  std::atomic<std::uint64_t> cursor_record;  // records of it acknowledged
  std::atomic<std::uint64_t> taken_page;     // page of the last take
  std::atomic<std::uint64_t> taken_record;   // records delivered by it (redelivery marks)
  // The last page of the conflated summary being delivered (0: none): until
  // all its pages are acknowledged, a reader folds exactly the pages up to it
  // again, so a summary delivered twice never covers more ops the second time.
  std::atomic<std::uint64_t> catch_up_page;
  // ---- the spill intent (see the protocol) ----
  std::atomic<std::uint32_t> intent_state;       // SpillIntent: what is in progress, 0 = nothing
  std::atomic<std::uint32_t> intent_count;       // low 32 bits of its counter before the bump
  std::atomic<std::uint64_t> intent_page;        // the page sealed, acknowledged or expired
  std::atomic<std::uint64_t> intent_last_order;  // Refuse: the reason (an Errc); else 0
  SpillCounters counters;
  char dir[kSpillDirBytes];  // absolute path, NUL-terminated; written once at create
  ManifestSlot slots[kManifestSlots];
  // ---- the seal in flight (see the seal protocol): its own record, since
  // its file I/O runs outside the relay mutex while the intent above serves
  // acknowledgements, expiries and refusals under it ----
  std::atomic<std::uint32_t> seal_state;  // 0 none, 1 a seal is in flight
  std::atomic<std::uint32_t> seal_count;  // low 32 bits of pages_sealed before its bump
  std::atomic<std::uint64_t> seal_page;   // its page id
  std::atomic<std::uint64_t>
      seal_counts;  // low 32 bits of entries_spilled | ops_spilled << 32, before
  ::shm::detail::RobustMutex seal_mutex;  // held by the sealer from start to finish
};
static_assert(std::is_standard_layout_v<SpillArea>);

// Offsets of the data area.
struct Geometry {
  std::uint64_t entries = 0;  // after Control
  std::uint64_t index = 0;    // u32 cells
  std::uint64_t spill = 0;    // SpillArea
  std::uint64_t data_size = 0;
};
[[nodiscard]] constexpr Geometry geometry(const ParamBlock& p) noexcept {
  Geometry g;
  g.entries = round_up(sizeof(Control), kFalseSharingRange);
  g.index = round_up(g.entries + entry_stride(p.value_bytes) * p.capacity, kFalseSharingRange);
  g.spill = round_up(g.index + std::uint64_t{4} * p.index_capacity, kFalseSharingRange);
  g.data_size = g.spill + sizeof(SpillArea);
  return g;
}

inline constexpr std::uint64_t kFingerprint = layout_fingerprint({2,  // 2: HeadIntent
                                                                  sizeof(Control),
                                                                  sizeof(EntryHead),
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
