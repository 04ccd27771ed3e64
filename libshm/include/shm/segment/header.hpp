/// @file
/// The handshake header: the first kHeaderSize bytes (20 KiB) of every segment file.
///
/// Immutable part (magic .. params) is written once by the creator before the
/// segment is published, and covered by header_crc. The mutable part (state,
/// counters, the observation ring and the attachment table) is shared atomics.
/// docs/segment.md explains the protocol.
#pragma once

#include "shm/segment/kind_ids.hpp"
#include "shm/segment/layout.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace shm {

/// The first word of every segment file: "LIBSHM1\0" read little-endian.
inline constexpr std::uint64_t kSegmentMagic = 0x0031'4d48'5342'494cull;
/// The header's layout version; open refuses another major.
///
/// 2: 264 attachment slots (was 32) and a 20 KiB header (was 4 KiB). A segment
/// of layout 1 is refused with VersionMismatch before anything past the version
/// word is read.
inline constexpr std::uint16_t kLayoutMajor = 2;
/// Minor layout version: informational, open does not compare it.
inline constexpr std::uint16_t kLayoutMinor = 0;
/// Size of the kind's parameter block in the header (SegmentHeader::params).
inline constexpr std::size_t kParamBytes = 256;
/// Slots [0, kExclusiveSlots) belong to exclusive roles (slot == role id); the
/// rest, kSharedSlots of them, are shared by non-exclusive roles. One slot per
/// attached handle (not per process): a process with two handles holds two.
inline constexpr std::size_t kExclusiveSlots = 8;
/// Slots shared by non-exclusive roles: at most this many such handles at a time.
inline constexpr std::size_t kSharedSlots = 256;
/// Size of the attachment table (SegmentHeader::slots).
inline constexpr std::size_t kMaxAttachments = kExclusiveSlots + kSharedSlots;
/// Entries of the observation ring (SegmentHeader::events); older events are overwritten.
inline constexpr std::size_t kEventRingSize = 32;

/// SegmentHeader::state. Openers wait while it reads Initializing.
enum class SegmentState : std::uint32_t {
  Initializing = 1,  ///< the creator is still writing the header and data area
  Ready = 2          ///< everything the creator wrote is published (release store [R])
};
/// The enumerator's name, for logs and tool output.
[[nodiscard]] std::string_view to_string(SegmentState v) noexcept;

/// SegmentHeader::flags bits.
enum class SegmentFlags : std::uint16_t {
  None = 0,      ///< no flag
  Ephemeral = 1  ///< the sidecar may remove it once no live process holds it
};
/// The enumerator's name, for logs and tool output.
[[nodiscard]] std::string_view to_string(SegmentFlags v) noexcept;

/// AttachmentSlot::state.
enum class SlotState : std::uint32_t {
  Free = 0,     ///< nobody holds the slot
  Attached = 1  ///< a holder attached; its kernel lock tells whether it is alive or dead
};
/// The enumerator's name, for logs and tool output.
[[nodiscard]] std::string_view to_string(SlotState v) noexcept;

/// One attachment. Written only by the process holding the slot's OFD lock
/// (or by a taker-over after it has won the lock); read by anyone.
struct alignas(64) AttachmentSlot {
  std::atomic<std::uint32_t> state;           ///< SlotState
  std::atomic<std::uint32_t> role;            ///< kind-defined role id
  std::atomic<std::int32_t> pid;              ///< the holder's process id
  std::atomic<std::uint32_t> generation;      ///< +1 per attach: (slot, generation) names an owner
  std::atomic<std::uint64_t> start_time;      ///< of pid, /proc ticks: survives pid reuse
  std::atomic<std::uint64_t> attach_time_ns;  ///< when the holder attached, realtime ns
  /// Monotonic ns, refreshed by blocking waits; shown, decides nothing.
  std::atomic<std::uint64_t> heartbeat_ns;
};

/// EventEntry::type: what happened to the segment.
enum class EventType : std::uint32_t {
  Created = 1,  ///< the creator published the segment
  Attached,     ///< a handle attached to a free slot (detail: role)
  Detached,     ///< a handle detached and freed its slot
  Takeover,     ///< a handle attached to a slot whose holder was dead (detail: role)
  Fault,        ///< the structure was marked faulted (detail: kind-defined cause)
  Reclaimed,    ///< a dead holder's slot was reclaimed and freed
};

/// One entry of the observation ring; `seq` is a per-entry seqlock: odd while
/// being written, 2*(n+1) once event n is complete.
struct alignas(32) EventEntry {
  /// The seqlock word: 2n+1 while writing event n, 2n+2 once written.
  std::atomic<std::uint64_t> seq;
  std::atomic<std::uint64_t> time_ns;  ///< when it happened, realtime ns
  std::atomic<std::uint32_t> type;     ///< EventType
  std::atomic<std::int32_t> pid;       ///< the process that recorded it
  std::atomic<std::uint32_t> slot;     ///< the attachment slot it concerns
  std::atomic<std::uint32_t> detail;   ///< kind-defined (fault code, role, ...)
};

/// Lifetime counts of the segment, bumped relaxed by whoever does the thing; never reset.
struct SegmentCounters {
  std::atomic<std::uint64_t> attaches;   ///< attaches, takeovers included
  std::atomic<std::uint64_t> detaches;   ///< orderly detaches
  std::atomic<std::uint64_t> takeovers;  ///< attaches to a dead holder's slot
  std::atomic<std::uint64_t> faults;     ///< times the structure was marked faulted
  std::atomic<std::uint64_t> events;     ///< next event number (events recorded so far)
};

/// The first bytes of every segment file (docs/segment.md has the table).
struct SegmentHeader {
  /// @name Immutable after publication, covered by header_crc
  ///@{
  std::uint64_t magic;                       ///< kSegmentMagic
  std::uint16_t layout_major;                ///< kLayoutMajor of the creator
  std::uint16_t layout_minor;                ///< kLayoutMinor of the creator
  KindId kind;                               ///< which structure the data area holds (kind_ids.hpp)
  std::uint16_t flags;                       ///< SegmentFlags bits
  std::uint32_t header_size;                 ///< kHeaderSize of the creator
  std::uint32_t params_size;                 ///< bytes of params the kind uses
  std::uint64_t total_size;                  ///< the file's size: header plus data area
  std::uint64_t fingerprint;                 ///< layout_fingerprint of the kind's shared structs
  std::uint64_t incarnation;                 ///< random per create
  std::int32_t creator_pid;                  ///< the creating process
  std::uint32_t reserved0;                   ///< zero
  std::uint64_t creator_start_time;          ///< creator_pid's start time, /proc ticks
  std::uint64_t creation_time_ns;            ///< realtime
  alignas(8) std::byte params[kParamBytes];  ///< the kind's parameter block
  std::uint32_t header_crc;                  ///< crc32c of bytes [0, offsetof(header_crc))
  ///@}
  /// @name Mutable, shared atomics
  ///@{

  /// SegmentState; READY stored with release last by the creator.
  std::atomic<std::uint32_t> state;
  alignas(64) SegmentCounters counters;           ///< lifetime counts
  alignas(64) EventEntry events[kEventRingSize];  ///< observation ring, entry n % kEventRingSize
  alignas(64) AttachmentSlot slots[kMaxAttachments];  ///< attachment table
  ///@}
};

/// The header takes whole pages: the data area starts page-aligned.
inline constexpr std::size_t kHeaderSize = round_up(sizeof(SegmentHeader), kPageSize);
/// The bytes of the header that every layout version shares (magic and version
/// words included): open checks the file holds this much before reading the
/// version, and the whole kHeaderSize only after it matched.
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

/// Layout fingerprint of the header itself, from the facts below.
inline constexpr std::uint64_t kHeaderFingerprint =
    layout_fingerprint({kLayoutMajor, sizeof(SegmentHeader), offsetof(SegmentHeader, header_crc),
                        offsetof(SegmentHeader, counters), offsetof(SegmentHeader, events),
                        offsetof(SegmentHeader, slots), sizeof(AttachmentSlot), sizeof(EventEntry),
                        kMaxAttachments, kEventRingSize});

/// The byte of the segment file whose OFD lock marks slot `i` as held.
[[nodiscard]] constexpr std::uint64_t slot_lock_offset(std::size_t i) noexcept {
  return offsetof(SegmentHeader, slots) + i * sizeof(AttachmentSlot);
}

}  // namespace shm
