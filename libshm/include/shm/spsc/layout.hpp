// SpscRing: variable-length records in a power-of-two byte ring shared by one
// producer process and one consumer process. Layout version 2 (see
// kLayoutVersion; version 1 published through a `tail` word and is refused).
//
// Publication inside the record. Positions are 64-bit byte counts that only
// grow; index = pos & (capacity - 1), lap = pos >> log2(capacity). A record is
// an 8-byte header word then the payload, padded to 8 bytes. The header word
// is one 64-bit atomic: bits 0..31 the length, 32..39 the type ('D' data, 'P'
// padding), 40..63 the low 24 bits of the record's lap. A record that would
// straddle the buffer end is preceded by a padding record filling the rest.
//
// What one message touches (steady state, no park):
//   producer: the record's own lines (payload, then the 8-byte terminator
//     word after the batch, then the header word, written LAST with release
//     [spsc.P]), then its own control line (`records`, and a load of
//     `consumer_parked` on that same line). The `tail` hint is stored only
//     when the tail crosses a multiple of capacity / 8.
//   consumer: the record's lines (header word loaded with acquire [spsc.P'],
//     payload), then its own control line (`head` with release [spsc.C],
//     `records`, and a load of `producer_parked` on that same line).
//   Neither side reads the other's control line per message: the producer
//   reloads `head` with acquire [spsc.C'] only when its cached head says the
//   ring is full; the consumer never reads `tail` (a hint for takeover and
//   tools). No locked instruction runs per message.
//   Why the stores per message are counted: while the consumer polls the
//   line the producer writes, each store to it waits for the line to come
//   back, and every later store of the producer (its own counters, its
//   stack) waits behind it in the store buffer. Small messages are bound by
//   how many stores a message makes, so the steady state of try_push makes
//   five: payload, terminator, header, one position and one counter (the
//   endpoint guard only reads in a short call; the counters live only on
//   the control line, with no copy in the handle).
//
// Slot states. The consumer polls the header word at its peek position P:
//   0            -> empty: the producer's terminator (or the zero-filled file)
//   lap(P) - 1   -> empty: the header of the record at P - capacity, consumed
//                   or not, which the producer has not overwritten yet
//   lap(P)       -> a record, checked (type, length against max_payload, the
//                   buffer end and head + capacity): Corrupt if impossible
//   anything else-> Corrupt
// Why a stale header never looks valid: a commit ending at position E first
// stores 0 at E (the terminator) when E + 8 - head <= capacity; otherwise
// E == head + capacity and the word at E's index is the header of the record
// at head, one lap older. Consumed space is never rewritten by the consumer:
// returning it is the one store of `head`. Payload bytes of an older lap are
// never at a position the consumer polls: every position it polls is either
// a record boundary of the current chain or a batch end (terminator).
//
// Batches. In a batch of reservations only the FIRST header (at the published
// end) is held back; later headers are stored relaxed at reserve time. They
// are unreachable until commit stores the first one with release, so a batch
// becomes visible at once, and everything written before that store
// (payloads, later headers, the terminator) happens-before the consumer's
// acquire load of it.
//
// Blocking (spin, then futex). A side that waits sets the peer's parked flag,
// which lives on the PEER's own control line (`consumer_parked` on the
// producer's line, `producer_parked` on the consumer's line), with a seq_cst
// store, then issues the heavy half of an asymmetric barrier
// (membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED), [spsc.D']), then re-checks the
// ring and sleeps on its futex word. The waker, after its publishing store,
// issues the light half (a compiler barrier, [spsc.D]) and loads the flag from
// its own line: either the waiter's re-check sees the store, or the waker's
// load sees the flag. The Dekker cost is paid only around a park. A process
// whose membarrier registration failed uses a seq_cst fence as its light half
// (and, as a waiter, caps each sleep at 1 ms), so mixing such processes with
// others never loses a wake. The first round of each park skips the heavy
// half (it costs tens of microseconds on a VM, more than a waking peer takes
// to answer) and bounds its sleep to 200 us instead: a wake missed in that
// round costs at most that sleep; later rounds pair in full.
//
// Crash cases.
//   producer killed before or during commit, before the first header's store:
//     nothing of the batch is reachable; later headers it stored lie beyond
//     the chain and are overwritten (the next commit's terminator covers the
//     one position the consumer will poll).
//   producer killed after the first header's store (or any time between two
//     stores of the lazy `tail` hint): the records are published; a new
//     producer walks the chain from max(head, tail hint) to the first empty
//     slot and continues there. The hint lags the tail by less than
//     capacity / 8, so that walk is short.
//   consumer killed between peek and release: `head` did not move; the next
//     consumer reads the records again (at-least-once).
//   consumer killed while returning consumed space: the return is the single
//     store of `head` (then a statistics counter): before it, at-least-once
//     as above; after it, the records are gone and the counter may lag.
//   a side killed while parked: its flag stays set; the peer's next publish
//     clears it and issues one needless wake.
// Every position and header read from the mapping is checked against the
// ring's bounds (Errc::Corrupt, never an out-of-bounds access).
#pragma once

#include "shm/error.hpp"
#include "shm/segment/kind_ids.hpp"
#include "shm/segment/layout.hpp"
#include "shm/segment/segment.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace shm {

struct RingParams {
  std::uint64_t capacity_bytes = 0;  // a power of two in [64, 2^40]; 0 on open = accept any
};

namespace ring {

// The ring's own layout version (the segment header's layout version covers
// the header only). Part of kFingerprint; open_ring() names both versions when
// it meets a segment of an older one.
inline constexpr std::uint32_t kLayoutVersion = 2;

inline constexpr std::uint32_t kRecordData = 0x44;     // 'D'
inline constexpr std::uint32_t kRecordPadding = 0x50;  // 'P'
inline constexpr std::size_t kRecordHeader = 8;
inline constexpr std::size_t kRecordAlign = 8;
inline constexpr std::uint64_t kMinCapacity = 64;
inline constexpr std::uint64_t kMaxCapacity = 1ull << 40;
inline constexpr std::uint32_t kLapBits = 24;
inline constexpr std::uint32_t kLapMask = (1u << kLapBits) - 1;

// The header word, unpacked: `tag` = type | lap << 8.
struct RecordHeader {
  std::uint32_t length;  // payload bytes (data) or whole record bytes (padding)
  std::uint32_t tag;     // kRecordData or kRecordPadding, plus the lap in bits 8..31
  [[nodiscard]] constexpr std::uint32_t type() const noexcept { return tag & 0xFFu; }
  [[nodiscard]] constexpr std::uint32_t lap() const noexcept { return tag >> 8; }
};
static_assert(sizeof(RecordHeader) == kRecordHeader);

[[nodiscard]] constexpr std::uint32_t lap_of(std::uint64_t pos, unsigned capacity_log2) noexcept {
  return static_cast<std::uint32_t>(pos >> capacity_log2) & kLapMask;
}
[[nodiscard]] constexpr std::uint64_t header_word(std::uint32_t length, std::uint32_t type,
                                                  std::uint32_t lap) noexcept {
  return std::uint64_t{length} | (std::uint64_t{type | (lap & kLapMask) << 8} << 32);
}
[[nodiscard]] constexpr RecordHeader unpack(std::uint64_t word) noexcept {
  return RecordHeader{static_cast<std::uint32_t>(word), static_cast<std::uint32_t>(word >> 32)};
}

// What the header word at a polled position P says (see the protocol note).
enum class SlotState : std::uint8_t {
  Empty,    // 0: a terminator or never written
  Stale,    // a header of lap(P) - 1: the record at P - capacity
  Current,  // a header of lap(P): a record, still to be checked
  Foreign,  // anything else: impossible for a correct producer
};
[[nodiscard]] std::string_view to_string(SlotState v) noexcept;
[[nodiscard]] constexpr SlotState classify_slot(std::uint64_t word, std::uint32_t lap) noexcept {
  if (word == 0) return SlotState::Empty;
  const RecordHeader h = unpack(word);
  if (h.type() != kRecordData && h.type() != kRecordPadding) return SlotState::Foreign;
  if (h.lap() == lap) return SlotState::Current;
  if (h.lap() == ((lap - 1) & kLapMask)) return SlotState::Stale;
  return SlotState::Foreign;
}

// Empty or Stale: nothing to read at P yet (the consumer's answer is "empty").
[[nodiscard]] constexpr bool is_vacant(std::uint64_t word, std::uint32_t lap) noexcept {
  const SlotState state = classify_slot(word, lap);
  return state == SlotState::Empty || state == SlotState::Stale;
}

// Role ids in the attachment table (exclusive: slot == id).
inline constexpr RoleSpec kProducerRole{0, true, "producer"};
inline constexpr RoleSpec kConsumerRole{1, true, "consumer"};
inline constexpr RoleSpec kObserverRole{2, false, "observer"};

// The control block at the start of the segment's data area. Each side writes
// its own line on every commit/release and reads it back (its parked flag);
// the peer writes that flag only around a park.
struct RingControl {
  struct alignas(kFalseSharingRange) Producer {
    // producer-owned hint: the end of the records published by the last
    // commit that crossed a multiple of capacity / 8, stored after their
    // headers. The consumer never reads it; a new producer and the tools
    // start their chain walk from it.
    std::atomic<std::uint64_t> tail;
    std::atomic<std::uint64_t> records;  // producer-owned: records published (counter)
    // written by a consumer about to sleep; read (relaxed, after [spsc.D]) and
    // cleared by the producer.
    std::atomic<std::uint32_t> consumer_parked;
  } producer;
  struct alignas(kFalseSharingRange) Consumer {
    std::atomic<std::uint64_t> head;     // consumer-owned: end of released records
    std::atomic<std::uint64_t> records;  // consumer-owned: records released (counter)
    // written by a producer about to sleep; read and cleared by the consumer.
    std::atomic<std::uint32_t> producer_parked;
  } consumer;
  // The futex words, touched only around a park.
  struct alignas(kFalseSharingRange) Waiters {
    std::atomic<std::uint32_t> data_signal;   // bumped by the producer to wake the consumer
    std::atomic<std::uint32_t> space_signal;  // bumped by the consumer to wake the producer
  } waiters;
};

static_assert(std::is_standard_layout_v<RingControl>);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(offsetof(RingControl, consumer) == kFalseSharingRange);
static_assert(offsetof(RingControl, waiters) == 2 * kFalseSharingRange);
static_assert(offsetof(RingControl::Producer, consumer_parked) == 16);
static_assert(offsetof(RingControl::Consumer, producer_parked) == 16);
static_assert(sizeof(RingControl) == 3 * kFalseSharingRange);

inline constexpr std::size_t kBufferOffset = sizeof(RingControl);

inline constexpr std::uint64_t kFingerprint = layout_fingerprint(
    {kHeaderFingerprint, kLayoutVersion, sizeof(RingControl), offsetof(RingControl, consumer),
     offsetof(RingControl, waiters), offsetof(RingControl::Producer, consumer_parked),
     offsetof(RingControl::Consumer, producer_parked), sizeof(RecordHeader), kRecordAlign, kLapBits,
     kFalseSharingRange});

// Layout version 1 (tail-published, parked flags in a shared third line).
// Kept to recognise such a segment: open refuses it naming both versions, and
// `shmctl inspect` describes it read-only.
namespace v1 {
inline constexpr std::uint32_t kLayoutVersion = 1;
inline constexpr std::uint64_t kFingerprint =
    layout_fingerprint({kHeaderFingerprint, 3 * kFalseSharingRange, kFalseSharingRange,
                        2 * kFalseSharingRange, kRecordHeader, kRecordAlign, kFalseSharingRange});
}  // namespace v1

// The parameter block stored in the header.
struct ParamBlock {
  std::uint64_t capacity;
  std::uint64_t max_payload;
};

// The largest payload the header word's 32-bit length field can carry, for a
// data record and for the padding record before it: a record of
// record_size(kMaxRecordPayload) = 2^32 bytes needs padding of less than 2^32
// bytes. It is max_payload_for(2^33): rings of 16 GiB and more are capped here.
inline constexpr std::uint64_t kMaxRecordPayload = (1ull << 32) - kRecordHeader;
// What max_payload_for gave before the cap (a segment created by an older build
// stores it; it is accepted, and the endpoint applies the cap).
[[nodiscard]] constexpr std::uint64_t uncapped_max_payload_for(std::uint64_t capacity) noexcept {
  return capacity / 2 - kRecordHeader;
}
[[nodiscard]] constexpr std::uint64_t max_payload_for(std::uint64_t capacity) noexcept {
  // Any record of at most capacity/2 bytes fits after at most one padding
  // record; no record is longer than the length field holds.
  return std::min(uncapped_max_payload_for(capacity), kMaxRecordPayload);
}
// A stored max_payload this build accepts for `capacity`.
[[nodiscard]] constexpr bool max_payload_matches(std::uint64_t stored,
                                                 std::uint64_t capacity) noexcept {
  return stored == max_payload_for(capacity) || stored == uncapped_max_payload_for(capacity);
}
[[nodiscard]] constexpr std::uint64_t record_size(std::uint64_t payload) noexcept {
  return kRecordHeader + round_up(payload, kRecordAlign);
}
static_assert(record_size(kMaxRecordPayload) == 1ull << 32);
static_assert(max_payload_for(1ull << 33) == kMaxRecordPayload);

// A position read from the mapping falls on a record boundary.
[[nodiscard]] constexpr bool position_aligned(std::uint64_t pos) noexcept {
  return pos % kRecordAlign == 0;
}

// What a current-lap record header written by the producer (possibly buggy or
// hostile) turns out to be, checked at buffer offset `offset` with
// `available` bytes the producer may have written there (up to head + capacity).
enum class RecordCheck : std::uint8_t {
  Data,        // a data record of record_size(length) bytes that fits
  Padding,     // padding up to the buffer end
  BadPadding,  // padding whose length is not the rest of the buffer, or beyond the limit
  BadType,     // neither data nor padding
  BadLength,   // a data record longer than max_payload, the limit or the buffer end
};
[[nodiscard]] std::string_view to_string(RecordCheck v) noexcept;
[[nodiscard]] constexpr RecordCheck check_record(const RecordHeader& rec, std::uint64_t offset,
                                                 std::uint64_t available, std::uint64_t capacity,
                                                 std::uint64_t max_payload) noexcept {
  if (rec.type() == kRecordPadding)
    return rec.length != capacity - offset || rec.length > available ? RecordCheck::BadPadding
                                                                     : RecordCheck::Padding;
  if (rec.type() != kRecordData) return RecordCheck::BadType;
  const std::uint64_t size = record_size(rec.length);
  if (rec.length > max_payload || size > available || offset + size > capacity)
    return RecordCheck::BadLength;
  return RecordCheck::Data;
}

[[nodiscard]] Result<void> validate(const RingParams& params);
// The KindSpec for create (params exact) or open (capacity 0 = any).
[[nodiscard]] KindSpec kind_spec(const RingParams& params, ParamBlock& storage);
// The segment's size against its own capacity (SizeMismatch).
[[nodiscard]] Result<void> check_geometry(const Segment& seg);
// What attach(Segment) checks of a segment it is given: kind, layout,
// parameters and size.
[[nodiscard]] Result<void> check_adopted(const Segment& seg);

}  // namespace ring

// The setup helpers (docs/idioms.md, "Lifecycle"): create_ring makes the
// segment and open_ring opens it, neither attaches; RingProducer/RingConsumer
// ::attach(segment) adopts the result. X::create / X::open do both in one step.
[[nodiscard]] Result<Segment> create_ring(std::string_view name, const RingParams& params,
                                          const CreateOptions& options = {});
[[nodiscard]] Result<Segment> open_ring(std::string_view name, const RingParams& expected = {},
                                        const OpenOptions& options = {});

}  // namespace shm

// to_string of the enums above is reachable as shm::to_string too.
namespace shm {
using ring::to_string;
}  // namespace shm
