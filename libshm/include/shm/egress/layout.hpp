// The binary layout of an egress segment (kind 7). Everything here lives in the
// mapping and is shared by every attached process; the state machine is in
// egress/core.hpp, the process-local handles in egress/egress.hpp.
//
// Protocol note.
//
// Data area (after the kHeaderSize header), offsets from egress::geometry():
//   Control                   mutex + seqlock, delivery state, statistics,
//                             journal, wake-up words (one 128-byte block each)
//   Record  [capacity]        one per retained sequence: record of sequence s
//                             is records[s % capacity]
//   payload [capacity][slot_bytes]  the payload pool, sized at create
//
// Ownership. Every field of Control and Record is written only by the holder
// of the robust mutex, with relaxed loads and stores (the mutex orders them
// between holders: no read-modify-write is needed). Unlocked readers (shmctl,
// metrics, projections of another process) read relaxed, framed by the
// seqlock `version` (odd while a holder mutates; [egress.V1]/[egress.V2] in
// core.cpp, [egress.V1']/[egress.V2'] in the readers). Payload bytes are read
// and written only under the mutex.
//
// Primary state: generation, next_sequence, acked_next, the records' fields
// and the retry reader. Derived state (recomputed by repair from the records):
// head, pending_hint, the four counts and next_due.
//
// Crash consistency. A holder killed inside an operation leaves the mutex
// EOWNERDEAD; the next locker repairs with the journal: single-record
// operations (enqueue, claim, fail, retry_now, pop_dead_letter) write an undo
// image first and are rolled back; multi-record operations (ack, retry_due,
// reconnect) are idempotent given their argument and are rolled forward. Then
// every derived field is recomputed and every reader's change counter moves
// (an observer re-reads everything once). So after a crash the state is the
// one before or the one after the interrupted operation, never in between.
//
// Wake-ups. `claim_word` and `space_word` are futex words (non-private futex,
// any process). A waiter announces itself (`*_waiters`, under the mutex) and
// reads the word before unlocking; a waker that changes what the waiter waits
// for bumps the word under the mutex and, after unlocking, issues FUTEX_WAKE
// only when a waiter is announced. The waiter's futex_wait(word, seen) then
// returns at once if the bump came after its read. A no-op or stale transition
// bumps nothing and wakes nobody.
#pragma once

#include "shm/platform/robust_mutex.hpp"
#include "shm/segment/header.hpp"
#include "shm/segment/kind_ids.hpp"
#include "shm/segment/layout.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace shm::egress {

inline constexpr std::uint32_t kMaxCapacity = 1u << 24;
inline constexpr std::uint32_t kMaxSlotBytes = 1u << 20;
inline constexpr std::uint64_t kNoDue = ~std::uint64_t{0};

enum class RecordState : std::uint32_t {
  Free = 0,
  Pending = 1,
  Inflight = 2,
  Parked = 3,    // failed, waiting for its backoff to elapse
  Terminal = 4,  // retry budget exhausted: in the dead-letter list
};
inline constexpr std::uint32_t kRecordStates = 5;

// The four readers of the specification, in the order of Control::reader_versions.
enum class Reader : std::uint8_t { Pending = 0, Inflight = 1, AckedThrough = 2, Retry = 3 };
inline constexpr std::size_t kReaders = 4;

struct Record {
  std::atomic<std::uint32_t> state;    // RecordState
  std::atomic<std::uint32_t> attempt;  // sends so far (a claim adds one)
  std::atomic<std::uint32_t> length;   // payload bytes, <= slot_bytes
  std::uint32_t reserved0;
  std::atomic<std::uint64_t> sequence;
  std::atomic<std::uint64_t> generation;  // of the envelope
  std::atomic<std::uint64_t> enqueue_ns;  // the caller's clock at enqueue
  std::atomic<std::uint64_t> due_ns;      // Parked: when it may be scheduled again
  std::atomic<std::uint64_t> backoff_ns;  // Parked / Terminal: the backoff of its last failure
};

// Undo / redo journal (see the protocol note).
enum class JournalOp : std::uint32_t {
  None = 0,
  Enqueue = 1,         // undo: free records[arg % capacity], next_sequence = arg
  Claim = 2,           // undo: record image
  Fail = 3,            // undo: record image + retry image
  RetryNow = 4,        // undo: record image + retry image
  TakeDeadLetter = 5,  // undo: record image + retry image
  Ack = 6,             // redo: ack through arg
  RetryDue = 7,        // redo: schedule every parked record due at arg
  Reconnect = 8,       // redo: reconnect to generation arg
};
[[nodiscard]] std::string_view to_string(JournalOp v) noexcept;

struct RetryImage {
  std::atomic<std::uint32_t> valid;
  std::atomic<std::uint32_t> exhausted;
  std::atomic<std::uint32_t> attempt;
  std::uint32_t reserved0;
  std::atomic<std::uint64_t> sequence;
  std::atomic<std::uint64_t> backoff_ns;
};

struct Journal {
  std::atomic<std::uint32_t> op;  // JournalOp; stored after the images (the commit point)
  std::uint32_t reserved0;
  std::atomic<std::uint64_t> arg;
  std::atomic<std::uint32_t> record_state;
  std::atomic<std::uint32_t> record_attempt;
  std::atomic<std::uint64_t> record_due_ns;
  std::atomic<std::uint64_t> record_backoff_ns;
  RetryImage retry;
};

struct Stats {
  std::atomic<std::uint64_t> enqueued;
  std::atomic<std::uint64_t> full;  // enqueue refused: the pool was full
  std::atomic<std::uint64_t> claims;
  std::atomic<std::uint64_t> acked;  // records removed by acknowledgements
  std::atomic<std::uint64_t> failures;
  std::atomic<std::uint64_t> retries;  // parked records scheduled again
  std::atomic<std::uint64_t> exhausted;
  std::atomic<std::uint64_t> reconnects;
  std::atomic<std::uint64_t> stale;  // send-side calls refused for their generation
  std::atomic<std::uint64_t> dead_letters_taken;
  std::atomic<std::uint64_t> repairs;           // EOWNERDEAD recoveries
  std::atomic<std::uint64_t> transport_deaths;  // transports found dead (reclaim or takeover)
};

struct Control {
  struct alignas(kFalseSharingRange) Lock {
    detail::RobustMutex mutex;
    std::atomic<std::uint64_t> version;  // seqlock: odd while a holder mutates
    std::atomic<std::uint32_t> faulted;  // nonzero: repair found damage; every operation fails
    std::atomic<std::uint32_t> reserved0;
  } lock;
  struct alignas(kFalseSharingRange) Delivery {
    std::atomic<std::uint64_t> generation;
    std::atomic<std::uint64_t> next_sequence;
    std::atomic<std::uint64_t> acked_next;  // acked_through + 1; 0: nothing acknowledged yet
    std::atomic<std::uint64_t> head;        // derived: lowest retained sequence (or next_sequence)
    std::atomic<std::uint64_t> pending_hint;           // derived: no pending record below it
    std::atomic<std::uint64_t> counts[kRecordStates];  // derived, by RecordState (Free unused)
    std::atomic<std::uint64_t> next_due;               // derived: earliest parked due, or kNoDue
    std::atomic<std::uint64_t> reader_versions[kReaders];
    RetryImage retry;  // the retry reader
  } state;
  alignas(kFalseSharingRange) Stats stats;
  alignas(kFalseSharingRange) Journal journal;
  struct alignas(kFalseSharingRange) Wake {
    std::atomic<std::uint32_t> claim_word;     // futex: something may be claimable
    std::atomic<std::uint32_t> claim_waiters;  // transports parked on claim_word
    std::atomic<std::uint32_t> space_word;     // futex: pool space may be free
    std::atomic<std::uint32_t> space_waiters;  // producers parked on space_word
    std::atomic<std::uint64_t> claim_wakes;    // statistics: bumps of claim_word
    std::atomic<std::uint64_t> space_wakes;    // statistics: bumps of space_word
    std::atomic<std::uint64_t> transports;     // transports ever attached
  } wake;
};

static_assert(std::is_standard_layout_v<Record> && sizeof(Record) == 56);
static_assert(std::is_standard_layout_v<RetryImage> && sizeof(RetryImage) == 32);
static_assert(std::is_standard_layout_v<Journal> && sizeof(Journal) == 72);
static_assert(std::is_standard_layout_v<Control>);
static_assert(offsetof(Control, state) == kFalseSharingRange);
static_assert(offsetof(Control, stats) == 3 * kFalseSharingRange);  // Delivery takes two blocks
static_assert(offsetof(Control, journal) == 4 * kFalseSharingRange);
static_assert(offsetof(Control, wake) == 5 * kFalseSharingRange);
static_assert(sizeof(Control) == 6 * kFalseSharingRange);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

// The parameter block stored in the header (also the core's parameters). On
// open, a zero field means "accept any".
struct ParamBlock {
  std::uint32_t capacity;        // records retained at most (the pool's slots)
  std::uint32_t slot_bytes;      // largest payload
  std::uint32_t inflight_limit;  // the unacknowledged window
  std::uint32_t retry_budget;    // retries after the first send
  std::uint64_t retry_base_ns;
  std::uint64_t retry_ceiling_ns;
};
static_assert(sizeof(ParamBlock) == 32 && std::is_trivially_copyable_v<ParamBlock>);

struct Geometry {
  std::uint64_t records = 0;  // byte offsets from the data area's start
  std::uint64_t payloads = 0;
  std::uint64_t data_size = 0;
};

[[nodiscard]] constexpr Geometry geometry(const ParamBlock& p) noexcept {
  Geometry g;
  g.records = round_up(sizeof(Control), kFalseSharingRange);
  g.payloads = round_up(g.records + std::uint64_t{p.capacity} * sizeof(Record), kFalseSharingRange);
  g.data_size = g.payloads + std::uint64_t{p.capacity} * round_up(p.slot_bytes, 8);
  return g;
}

inline constexpr std::uint64_t kFingerprint = layout_fingerprint(
    {kHeaderFingerprint, sizeof(Control), offsetof(Control, state), offsetof(Control, stats),
     offsetof(Control, journal), offsetof(Control, wake), sizeof(detail::RobustMutex),
     sizeof(Record), sizeof(Journal), sizeof(RetryImage), sizeof(Stats), sizeof(ParamBlock),
     kRecordStates, kReaders, kFalseSharingRange, 1 /* egress layout revision */});

}  // namespace shm::egress

// to_string of the enums above is reachable as shm::to_string too.
namespace shm {
using egress::to_string;
}  // namespace shm
