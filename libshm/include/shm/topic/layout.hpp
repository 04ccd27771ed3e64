/// @file
/// Topic segment layout: one publisher, up to kSharedSlots subscribers, each
/// receiving every sample, zero copy. The handles that act on it are
/// TopicPublisher and TopicSubscriber (topic.hpp); docs/topic.md has the
/// protocol and the crash table.
///
/// Protocol. The data area holds, in order: Control, the chunk table
/// (ChunkMeta per chunk), the free stack (chunk indices), the history ring,
/// one SubscriberRecord per shared attachment slot (its queue and its held
/// list follow its head), then the chunks' payloads (page-aligned, `stride`
/// bytes each). Every structural change (loan, publish, receive, release,
/// attach, detach, repair) runs under Control::lock.mutex, a robust
/// process-shared mutex; payload bytes are written and read outside it (a
/// loaned chunk has one writer, a published chunk is read-only until its
/// last reference goes).
///
/// Source of truth and derived state. The references to chunk c are: a
/// publisher loan naming c, an entry of a valid subscriber's queue in [head,
/// tail) or of its held list naming c, and a history entry naming c. A
/// record is valid when it is active and its attachment slot is attached,
/// alive and of the generation the record names. ChunkMeta::refs and the
/// free stack are derived from those references: a holder killed at any
/// store under the mutex (the next locker gets OwnerDied), a dead holder
/// found on attach or by the kind's reclaim, all end in repair: invalid
/// records are dropped, refs and the free stack recomputed. So a chunk held
/// by a dead process always comes back, and never twice.
///
/// Missed samples. A DropOldest subscriber whose queue is full loses its
/// oldest entry: the publisher advances its head. `received` counts
/// receives, so missed = head - received exactly, with no extra store.
///
/// Memory orders. Everything under the mutex is ordered by it; stores are
/// relaxed ([topic.M]: the mutex unlock/lock pair publishes them) except the
/// queue positions (seq_cst, [topic.Q]): lock-free readers (a waiting
/// subscriber's spin, snapshot) read them, and a parked waiter's announce
/// and re-check form a Dekker pair with them ([topic.W]).
#pragma once

#include "shm/error.hpp"
#include "shm/platform/robust_mutex.hpp"
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

/// The parameters of a topic segment (0 on open = accept what the segment has).
struct TopicParams {
  std::uint64_t max_sample_bytes = 0;  ///< largest sample, bytes, [1, 1 GiB]
  std::uint64_t chunks = 0;            ///< samples the pool holds, [1, 2^20]
  std::uint64_t queue_depth = 0;       ///< per subscriber, samples waiting, [1, 4096]
  std::uint64_t history = 0;           ///< samples a late joiner receives, [0, queue_depth]
  std::uint64_t max_held = 0;          ///< samples one subscriber may hold at once, [1, 1024]
};

namespace topic {

inline constexpr std::uint64_t kMaxSampleBytes = 1ull << 30;  ///< largest max_sample_bytes
inline constexpr std::uint64_t kMaxChunks = 1ull << 20;       ///< most chunks
inline constexpr std::uint64_t kMaxQueueDepth = 4096;         ///< deepest subscriber queue
inline constexpr std::uint64_t kMaxHeld = 1024;               ///< largest max_held
inline constexpr std::uint64_t kMaxPoolBytes = 1ull << 40;    ///< chunks x stride
inline constexpr std::size_t kMaxLoans = 8;                   ///< loans the publisher holds at once
inline constexpr std::size_t kChunkAlign = 64;                ///< payload alignment and stride unit
inline constexpr std::size_t kSubscribers = kSharedSlots;     ///< subscriber records

/// @name Roles
///@{
inline constexpr RoleSpec kPublisherRole{0, true, "publisher"};     ///< a TopicPublisher
inline constexpr RoleSpec kSubscriberRole{1, false, "subscriber"};  ///< a TopicSubscriber
///@}

/// The control block at the start of the data area.
struct Control {
  /// The mutex every structural change runs under.
  struct alignas(kFalseSharingRange) Lock {
    detail::RobustMutex mutex;             ///< robust, process-shared
    std::atomic<std::uint64_t> repairs;    ///< times repair recomputed the references
    std::atomic<std::uint64_t> reclaimed;  ///< records of dead holders dropped by repair
  } lock;                                  ///< the mutex line
  /// The publisher's record; written under the mutex.
  struct alignas(kFalseSharingRange) Publisher {
    std::atomic<std::uint32_t> active;       ///< 1 while a publisher is attached
    std::atomic<std::uint32_t> generation;   ///< its attachment slot's generation
    std::atomic<std::uint32_t> incarnation;  ///< +1 per publisher attach
    std::atomic<std::uint32_t> reserved;     ///< zero
    std::atomic<std::uint64_t> next_seq;     ///< sequence number of the next publish
    std::atomic<std::uint64_t> published;    ///< samples published, every incarnation
    std::atomic<std::uint64_t> dropped;      ///< oldest entries dropped from DropOldest queues
    std::atomic<std::uint64_t> full;         ///< publishes refused: a Block subscriber was full
    std::atomic<std::uint32_t> loans[kMaxLoans];  ///< chunk + 1 of each loan; 0 = none
  } publisher;                                    ///< the publisher's record
  /// Futex words and the parked announcements ([topic.W]).
  struct alignas(kFalseSharingRange) Waiters {
    std::atomic<std::uint32_t> data_signal;  ///< bumped by a publish a subscriber waits for
    std::atomic<std::uint32_t>
        space_signal;  ///< bumped by a receive/release the publisher waits for
    std::atomic<std::uint32_t> subscribers_parked;  ///< subscribers parked (or about to)
    std::atomic<std::uint32_t> publisher_parked;  ///< 1 while the publisher is parked (or about to)
  } waiters;                                      ///< futex words
  /// The pool, the history ring's position and how many subscriber records
  /// a publish looks at; written under the mutex.
  struct alignas(kFalseSharingRange) Pool {
    std::atomic<std::uint32_t> free_count;  ///< entries of the free stack in use
    /// Derived: at least 1 + the index of every active subscriber record (an
    /// attach raises it before it activates its record, repair recomputes
    /// it); publish scans records [0, records_used) instead of all
    /// kSubscribers, each a cache line of its own.
    std::atomic<std::uint32_t> records_used;
    std::atomic<std::uint64_t> history_pos;  ///< history entries written, ever
    std::atomic<std::uint64_t> events;       ///< events recorded, ever (the next number)
  } pool;                                    ///< the pool line
};
static_assert(std::is_standard_layout_v<Control>);
static_assert(offsetof(Control, publisher) == 1 * kFalseSharingRange);
static_assert(offsetof(Control, waiters) == 2 * kFalseSharingRange);
static_assert(offsetof(Control, pool) == 3 * kFalseSharingRange);
static_assert(sizeof(Control) == 4 * kFalseSharingRange);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

/// Entries of the topic's event ring: event n is in slot n % kEventRing.
inline constexpr std::size_t kEventRing = 32;

/// What an event of the topic's ring says happened.
enum class EventKind : std::uint32_t {
  PublisherGone =
      1,           ///< a dead publisher's record dropped (key: incarnation, count: loans returned)
  SubscriberGone,  ///< a dead subscriber's record dropped (key: slot, count: samples released)
  Repaired,  ///< a locker found the mutex's owner died inside (count: chunks back in the pool)
};

/// An event as read back from the ring (the handles' events() methods).
struct EventRecord {
  std::uint64_t number = 0;   ///< the event's number; a gap: events overwritten before the read
  std::uint64_t time_ns = 0;  ///< when it happened, realtime ns
  EventKind kind{};           ///< what happened
  std::uint64_t key = 0;      ///< see EventKind
  std::uint64_t count = 0;    ///< see EventKind
};

/// One entry of the event ring, written under the mutex; readers check
/// `number` before and after reading the rest (it is 0 while being written).
struct Event {
  std::atomic<std::uint64_t> number;    ///< event number + 1 (0: empty or being written)
  std::atomic<std::uint64_t> time_ns;   ///< when, realtime ns
  std::atomic<std::uint64_t> key;       ///< see EventKind
  std::atomic<std::uint64_t> count;     ///< see EventKind
  std::atomic<std::uint32_t> kind;      ///< EventKind
  std::atomic<std::uint32_t> reserved;  ///< zero
};
static_assert(sizeof(Event) == 40);

/// One per chunk; written under the mutex.
struct ChunkMeta {
  std::atomic<std::uint32_t> refs;         ///< derived: references (see the protocol)
  std::atomic<std::uint32_t> incarnation;  ///< the publisher incarnation that published it
  std::atomic<std::uint64_t> length;       ///< sample bytes, <= max_sample_bytes
  std::atomic<std::uint64_t> seq;          ///< sequence number given by publish
  std::uint64_t reserved;                  ///< zero
};
static_assert(sizeof(ChunkMeta) == 32);

/// Head of a subscriber's record; its queue (queue_depth entries) and its held
/// list (max_held entries), each a chunk index + 1 (0 = empty), follow it.
struct alignas(kFalseSharingRange) SubscriberRecord {
  std::atomic<std::uint32_t> active;      ///< 1 while its subscriber is attached
  std::atomic<std::uint32_t> generation;  ///< its attachment slot's generation
  std::atomic<std::uint32_t> overflow;    ///< TopicOverflow
  /// 1 while its subscriber is counted in Waiters::subscribers_parked (repair
  /// takes a dead parked subscriber out of the count).
  std::atomic<std::uint32_t> parked;
  std::atomic<std::uint64_t> head;       ///< next queue position to receive ([topic.Q])
  std::atomic<std::uint64_t> tail;       ///< next queue position to fill ([topic.Q])
  std::atomic<std::uint64_t> received;   ///< samples received: missed = head - received
  std::atomic<std::uint64_t> first_seq;  ///< sequence number of the first sample queued
};
static_assert(sizeof(SubscriberRecord) == kFalseSharingRange);
static_assert(offsetof(SubscriberRecord, head) == 16);

/// The parameter block stored in the header.
struct ParamBlock {
  std::uint64_t max_sample_bytes;  ///< TopicParams::max_sample_bytes
  std::uint64_t chunks;            ///< TopicParams::chunks
  std::uint64_t queue_depth;       ///< TopicParams::queue_depth
  std::uint64_t history;           ///< TopicParams::history
  std::uint64_t max_held;          ///< TopicParams::max_held
  std::uint64_t stride;            ///< derived: round_up(max_sample_bytes, kChunkAlign)
};
static_assert(sizeof(ParamBlock) <= kParamBytes);

/// Revision 2: Control::Pool::records_used (was a reserved zero word, so a
/// segment of revision 1 would look as if no subscriber were attached); the
/// event ring (Pool::events, Geometry::events).
inline constexpr std::uint64_t kLayoutRevision = 2;
/// The segment fingerprint of this layout.
inline constexpr std::uint64_t kFingerprint = layout_fingerprint(
    {kHeaderFingerprint, 0x544f5043 /* "TOPC" */, kLayoutRevision, sizeof(Control),
     offsetof(Control, publisher), offsetof(Control, waiters), offsetof(Control, pool),
     sizeof(detail::RobustMutex), offsetof(Control::Publisher, loans), kMaxLoans, sizeof(ChunkMeta),
     sizeof(SubscriberRecord), kSubscribers, kChunkAlign, kFalseSharingRange,
     offsetof(Control::Pool, events), sizeof(Event), kEventRing});

/// Offsets of the data area's parts for a parameter block.
struct Geometry {
  std::uint64_t meta = 0;           ///< ChunkMeta[chunks]
  std::uint64_t free_stack = 0;     ///< atomic<u32>[chunks]
  std::uint64_t history = 0;        ///< atomic<u32>[history]
  std::uint64_t events = 0;         ///< Event[kEventRing]
  std::uint64_t records = 0;        ///< kSubscribers records of record_stride bytes
  std::uint64_t record_stride = 0;  ///< bytes per subscriber record (head, queue, held list)
  std::uint64_t payload = 0;        ///< chunks x stride, page-aligned
  std::uint64_t size = 0;           ///< the data area's bytes
};
/// The geometry of `p` (whose fields are assumed valid).
[[nodiscard]] constexpr Geometry geometry_for(const ParamBlock& p) noexcept {
  Geometry g;
  g.meta = sizeof(Control);
  g.free_stack = round_up(g.meta + p.chunks * sizeof(ChunkMeta), kFalseSharingRange);
  g.history = round_up(g.free_stack + p.chunks * 4, kFalseSharingRange);
  g.events = round_up(g.history + p.history * 4, kFalseSharingRange);
  g.records = round_up(g.events + kEventRing * sizeof(Event), kFalseSharingRange);
  g.record_stride =
      round_up(sizeof(SubscriberRecord) + 4 * (p.queue_depth + p.max_held), kFalseSharingRange);
  g.payload = round_up(g.records + kSubscribers * g.record_stride, kPageSize);
  g.size = g.payload + p.chunks * p.stride;
  return g;
}

/// InvalidArgument unless every field of `params` is in its range.
[[nodiscard]] Result<void> validate(const TopicParams& params);
/// The parameter block of `params` (stride derived).
[[nodiscard]] ParamBlock block_for(const TopicParams& params) noexcept;
/// The KindSpec for create (params exact) or open (0 fields = any).
[[nodiscard]] KindSpec kind_spec(const TopicParams& params, ParamBlock& storage);

/// The validated geometry of a mapped topic: what the handles, the kind
/// descriptor and repair act on.
struct View {
  Control* control = nullptr;                        ///< the control block
  ChunkMeta* meta = nullptr;                         ///< the chunk table
  std::atomic<std::uint32_t>* free_stack = nullptr;  ///< the free stack
  std::atomic<std::uint32_t>* history = nullptr;     ///< the history ring
  Event* events = nullptr;                           ///< the event ring
  std::byte* records = nullptr;                      ///< the first subscriber record
  std::byte* payload = nullptr;                      ///< the first chunk's payload
  ParamBlock p{};                                    ///< the parameters
  Geometry g{};                                      ///< the offsets

  /// Subscriber record `i` (the attachment slot kExclusiveSlots + i).
  [[nodiscard]] SubscriberRecord& record(std::size_t i) const noexcept {
    return *reinterpret_cast<SubscriberRecord*>(records + i * g.record_stride);
  }
  /// Queue entries of record `i`.
  [[nodiscard]] std::atomic<std::uint32_t>* queue(std::size_t i) const noexcept {
    return reinterpret_cast<std::atomic<std::uint32_t>*>(records + i * g.record_stride +
                                                         sizeof(SubscriberRecord));
  }
  /// Held entries of record `i`.
  [[nodiscard]] std::atomic<std::uint32_t>* held(std::size_t i) const noexcept {
    return queue(i) + p.queue_depth;
  }
  /// The payload of chunk `c`.
  [[nodiscard]] std::byte* chunk(std::uint64_t c) const noexcept { return payload + c * p.stride; }
};
/// Reads the geometry of a topic segment; nullopt (the reason in `why`) when
/// its parameters or size are not self-consistent.
[[nodiscard]] std::optional<View> view(const Segment& segment, std::string* why = nullptr);

/// What repair() found and did.
struct RepairReport {
  std::uint64_t dropped_records = 0;  ///< records of dead (or gone) holders dropped
  std::uint64_t returned_chunks = 0;  ///< chunks that went back to the pool
  std::vector<std::string> actions;   ///< one line per action, for reclaim / shmctl
};
/// Under the mutex: drops every record whose holder is dead, detached or of
/// another generation (`assume_dead`: a slot the caller knows is dead
/// although its lock is held, a reclaim), then recomputes the references and
/// the free stack. Corrupt when a record names a chunk out of range.
[[nodiscard]] Result<RepairReport> repair_locked(const Segment& segment, const View& v,
                                                 std::optional<std::size_t> assume_dead);

/// Under the mutex: appends an event to the ring (the oldest is overwritten).
void record_event_locked(const View& v, EventKind kind, std::uint64_t key, std::uint64_t count);
/// The events still in the ring, oldest first, read without the mutex (an
/// entry being rewritten is left out).
[[nodiscard]] std::vector<EventRecord> read_events(const View& v);
/// The enumerator's name ("publisher_gone", ...), for logs and tool output.
[[nodiscard]] std::string_view to_string(EventKind k) noexcept;

}  // namespace topic
}  // namespace shm
