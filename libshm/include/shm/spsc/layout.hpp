// SpscRing: variable-length records in a power-of-two byte ring shared by one
// producer process and one consumer process.
//
// Protocol. Positions are 64-bit byte counts that only grow; index = pos & mask.
// A record is an 8-byte header {length, type} followed by the payload, padded
// to 8 bytes. A record that would straddle the end is preceded by a padding
// record filling the rest of the buffer. The producer writes records past
// `tail` (invisible to the consumer), then publishes them all with one release
// store of `tail` — the length of every record is therefore published last,
// and a producer killed between reserve and commit exposes nothing. The
// consumer reads records in [head, tail) and frees them with one release store
// of `head`. Each side caches the other's position and re-reads it only when
// the ring looks full/empty. Every position and length read from the mapping
// is checked against the ring's bounds (Errc::Corrupt, never an out-of-bounds
// access).
//
// Blocking. A waiter sets its "parked" flag, issues a seq_cst fence, re-checks,
// and sleeps on a futex word; the other side, after its publishing store,
// issues a seq_cst fence and wakes only if the flag is set (Dekker pairing).
#pragma once

#include "shm/error.hpp"
#include "shm/segment/kind_ids.hpp"
#include "shm/segment/layout.hpp"
#include "shm/segment/segment.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace shm {

struct RingParams {
  std::uint64_t capacity = 0;  // bytes, a power of two in [64, 2^40]; 0 on open = accept any
};

namespace ring {

inline constexpr std::uint32_t kRecordData = 0x44;     // 'D'
inline constexpr std::uint32_t kRecordPadding = 0x50;  // 'P'
inline constexpr std::size_t kRecordHeader = 8;
inline constexpr std::size_t kRecordAlign = 8;
inline constexpr std::uint64_t kMinCapacity = 64;
inline constexpr std::uint64_t kMaxCapacity = 1ull << 40;

struct RecordHeader {
  std::uint32_t length;  // payload bytes (data) or whole record bytes (padding)
  std::uint32_t type;    // kRecordData or kRecordPadding
};
static_assert(sizeof(RecordHeader) == kRecordHeader);

// Role ids in the attachment table (exclusive: slot == id).
inline constexpr RoleSpec kProducerRole{0, true, "producer"};
inline constexpr RoleSpec kConsumerRole{1, true, "consumer"};
inline constexpr RoleSpec kObserverRole{2, false, "observer"};

// The control block at the start of the segment's data area.
struct RingControl {
  struct alignas(kFalseSharingRange) Producer {
    std::atomic<std::uint64_t> tail;     // producer-owned: end of published records
    std::atomic<std::uint64_t> records;  // producer-owned: records published (counter)
  } producer;
  struct alignas(kFalseSharingRange) Consumer {
    std::atomic<std::uint64_t> head;     // consumer-owned: end of released records
    std::atomic<std::uint64_t> records;  // consumer-owned: records released (counter)
  } consumer;
  // Written only around a park: read on every commit/release, rarely written.
  struct alignas(kFalseSharingRange) Waiters {
    std::atomic<std::uint32_t> data_signal;  // futex: bumped by the producer to wake the consumer
    std::atomic<std::uint32_t> consumer_parked;  // set by a consumer about to sleep
    std::atomic<std::uint32_t> space_signal;  // futex: bumped by the consumer to wake the producer
    std::atomic<std::uint32_t> producer_parked;  // set by a producer about to sleep
  } waiters;
};

static_assert(std::is_standard_layout_v<RingControl>);
static_assert(offsetof(RingControl, consumer) == kFalseSharingRange);
static_assert(offsetof(RingControl, waiters) == 2 * kFalseSharingRange);
static_assert(sizeof(RingControl) == 3 * kFalseSharingRange);

inline constexpr std::size_t kBufferOffset = sizeof(RingControl);

inline constexpr std::uint64_t kFingerprint = layout_fingerprint(
    {kHeaderFingerprint, sizeof(RingControl), offsetof(RingControl, consumer),
     offsetof(RingControl, waiters), sizeof(RecordHeader), kRecordAlign, kFalseSharingRange});

// The parameter block stored in the header.
struct ParamBlock {
  std::uint64_t capacity;
  std::uint64_t max_payload;
};

[[nodiscard]] constexpr std::uint64_t max_payload_for(std::uint64_t capacity) noexcept {
  // Any record of at most capacity/2 bytes fits after at most one padding record.
  return capacity / 2 - kRecordHeader;
}
[[nodiscard]] constexpr std::uint64_t record_size(std::uint64_t payload) noexcept {
  return kRecordHeader + round_up(payload, kRecordAlign);
}

// The invariants that both the endpoints (at attach, on every record) and the
// kind's verify() check: one predicate each, so the two cannot drift apart.

// Both positions fall on record boundaries.
[[nodiscard]] constexpr bool positions_aligned(std::uint64_t head, std::uint64_t tail) noexcept {
  return head % kRecordAlign == 0 && tail % kRecordAlign == 0;
}
// head <= tail <= head + capacity.
[[nodiscard]] constexpr bool positions_in_range(std::uint64_t head, std::uint64_t tail,
                                                std::uint64_t capacity) noexcept {
  return tail >= head && tail - head <= capacity;
}

// What a record header written by the producer (possibly buggy or hostile)
// turns out to be, checked at buffer offset `offset` with `available` bytes
// published before the tail.
enum class RecordCheck : std::uint8_t {
  Data,        // a data record of record_size(length) bytes that fits
  Padding,     // padding up to the buffer end
  BadPadding,  // padding whose length is not the rest of the buffer, or beyond the tail
  BadType,     // neither data nor padding
  BadLength,   // a data record longer than max_payload, the tail or the buffer end
};
[[nodiscard]] constexpr RecordCheck check_record(const RecordHeader& rec, std::uint64_t offset,
                                                 std::uint64_t available, std::uint64_t capacity,
                                                 std::uint64_t max_payload) noexcept {
  if (rec.type == kRecordPadding)
    return rec.length != capacity - offset || rec.length > available ? RecordCheck::BadPadding
                                                                     : RecordCheck::Padding;
  if (rec.type != kRecordData) return RecordCheck::BadType;
  const std::uint64_t size = record_size(rec.length);
  if (rec.length > max_payload || size > available || offset + size > capacity)
    return RecordCheck::BadLength;
  return RecordCheck::Data;
}

[[nodiscard]] Result<void> validate(const RingParams& params);
// The KindSpec for create (params exact) or open (capacity 0 = any).
[[nodiscard]] KindSpec kind_spec(const RingParams& params, ParamBlock& storage);

}  // namespace ring

// Creates a ring segment (no attachment). Mostly useful to tools and tests;
// RingProducer::create() creates and attaches in one step.
[[nodiscard]] Result<Segment> create_ring(std::string_view name, const RingParams& params,
                                          const CreateOptions& options = {});
[[nodiscard]] Result<Segment> open_ring(std::string_view name, const RingParams& expected = {},
                                        const OpenOptions& options = {});

}  // namespace shm
