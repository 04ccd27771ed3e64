// The handshake header: the first kHeaderSize bytes (20 KiB) of every segment file.
//
// Immutable part (magic .. params) is written once by the creator before the
// segment is published, and covered by header_crc. The mutable part (state,
// counters, the observation ring and the attachment table) is shared atomics.
#pragma once

#include "shm/segment/kind_ids.hpp"
#include "shm/segment/layout.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace shm {

inline constexpr std::uint64_t kSegmentMagic = 0x0031'4d48'5342'494cull;  // "LIBSHM1\0" (LE)
// 2: 264 attachment slots (was 32) and a 20 KiB header (was 4 KiB). A segment
// of layout 1 is refused with VersionMismatch before anything past the version
// word is read.
inline constexpr std::uint16_t kLayoutMajor = 2;
inline constexpr std::uint16_t kLayoutMinor = 0;
inline constexpr std::size_t kParamBytes = 256;
// Slots [0, kExclusiveSlots) belong to exclusive roles (slot == role id); the
// rest, kSharedSlots of them, are shared by non-exclusive roles. One slot per
// attached handle (not per process): a process with two handles holds two.
inline constexpr std::size_t kExclusiveSlots = 8;
inline constexpr std::size_t kSharedSlots = 256;
inline constexpr std::size_t kMaxAttachments = kExclusiveSlots + kSharedSlots;
inline constexpr std::size_t kEventRingSize = 32;

enum class SegmentState : std::uint32_t { Initializing = 1, Ready = 2 };
[[nodiscard]] std::string_view to_string(SegmentState v) noexcept;

enum class SegmentFlags : std::uint16_t { None = 0, Ephemeral = 1 };
[[nodiscard]] std::string_view to_string(SegmentFlags v) noexcept;

enum class SlotState : std::uint32_t { Free = 0, Attached = 1 };
[[nodiscard]] std::string_view to_string(SlotState v) noexcept;

// One attachment. Written only by the process holding the slot's OFD lock
// (or by a taker-over after it has won the lock); read by anyone.
struct alignas(64) AttachmentSlot {
  std::atomic<std::uint32_t> state;  // SlotState
  std::atomic<std::uint32_t> role;   // kind-defined role id
  std::atomic<std::int32_t> pid;
  std::atomic<std::uint32_t> generation;      // +1 per attach: (slot, generation) names an owner
  std::atomic<std::uint64_t> start_time;      // of pid, /proc ticks: survives pid reuse
  std::atomic<std::uint64_t> attach_time_ns;  // realtime
  std::atomic<std::uint64_t> heartbeat_ns;    // monotonic; "stuck" signal, not liveness
};

enum class EventType : std::uint32_t {
  Created = 1,
  Attached,
  Detached,
  Takeover,
  Fault,
  Reclaimed,
};

// One entry of the observation ring; `seq` is a per-entry seqlock: odd while
// being written, 2*(n+1) once event n is complete.
struct alignas(32) EventEntry {
  std::atomic<std::uint64_t> seq;
  std::atomic<std::uint64_t> time_ns;  // realtime
  std::atomic<std::uint32_t> type;     // EventType
  std::atomic<std::int32_t> pid;
  std::atomic<std::uint32_t> slot;
  std::atomic<std::uint32_t> detail;  // kind-defined (fault code, role, ...)
};

struct SegmentCounters {
  std::atomic<std::uint64_t> attaches;
  std::atomic<std::uint64_t> detaches;
  std::atomic<std::uint64_t> takeovers;
  std::atomic<std::uint64_t> faults;
  std::atomic<std::uint64_t> events;  // next event number
};

struct SegmentHeader {
  // ---- immutable after publication, covered by header_crc ----
  std::uint64_t magic;
  std::uint16_t layout_major;
  std::uint16_t layout_minor;
  KindId kind;
  std::uint16_t flags;  // SegmentFlags bits
  std::uint32_t header_size;
  std::uint32_t params_size;
  std::uint64_t total_size;
  std::uint64_t fingerprint;
  std::uint64_t incarnation;  // random per create
  std::int32_t creator_pid;
  std::uint32_t reserved0;
  std::uint64_t creator_start_time;
  std::uint64_t creation_time_ns;  // realtime
  alignas(8) std::byte params[kParamBytes];
  std::uint32_t header_crc;  // crc32c of bytes [0, offsetof(header_crc))
  // ---- mutable ----
  std::atomic<std::uint32_t> state;  // SegmentState; READY stored with release last by the creator
  alignas(64) SegmentCounters counters;
  alignas(64) EventEntry events[kEventRingSize];
  alignas(64) AttachmentSlot slots[kMaxAttachments];
};

// The header takes whole pages: the data area starts page-aligned.
inline constexpr std::size_t kHeaderSize = round_up(sizeof(SegmentHeader), kPageSize);
// The bytes of the header that every layout version shares (magic and version
// words included): open checks the file holds this much before reading the
// version, and the whole kHeaderSize only after it matched.
inline constexpr std::size_t kHeaderPrefix = kPageSize;

static_assert(std::is_standard_layout_v<SegmentHeader>);
static_assert(kHeaderSize == 5 * kPageSize);
static_assert(offsetof(SegmentHeader, kind) <= kHeaderPrefix);
static_assert(offsetof(SegmentHeader, params) == 72);
static_assert(offsetof(SegmentHeader, header_crc) == 72 + kParamBytes);
static_assert(sizeof(AttachmentSlot) == 64);
static_assert(sizeof(EventEntry) == 32);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(std::atomic<std::int32_t>::is_always_lock_free);

inline constexpr std::uint64_t kHeaderFingerprint =
    layout_fingerprint({kLayoutMajor, sizeof(SegmentHeader), offsetof(SegmentHeader, header_crc),
                        offsetof(SegmentHeader, counters), offsetof(SegmentHeader, events),
                        offsetof(SegmentHeader, slots), sizeof(AttachmentSlot), sizeof(EventEntry),
                        kMaxAttachments, kEventRingSize});

// The byte of the segment file whose OFD lock marks slot `i` as held.
[[nodiscard]] constexpr std::uint64_t slot_lock_offset(std::size_t i) noexcept {
  return offsetof(SegmentHeader, slots) + i * sizeof(AttachmentSlot);
}

}  // namespace shm
