// PriorityFanout files: K <= 64 MpmcRing segments `<base>.prio<i>` (priority 0
// is the lowest) plus one `<base>.bitmap` segment (kind fanout_bitmap) that
// holds the 64-bit bitmap of non-empty priorities, the drainers' futex word
// and the incarnations of the K rings it was created with.
//
// Parking. A futex waits on a 32-bit word, the bitmap is 64-bit: drainers park
// on a separate 32-bit `epoch` word next to it (same cache line, so reading it
// costs a submitter nothing), not on a half of the bitmap — a half would miss
// submits to priorities in the other half. Submitters bump `epoch` and wake
// only when the `waiters` set (a count and one bit per attachment slot of a
// parked drainer, mpmc/parked_set.hpp; same line) says a drainer may be parked.
#pragma once

#include "shm/error.hpp"
#include "shm/mpmc/layout.hpp"
#include "shm/mpmc/parked_set.hpp"
#include "shm/segment/header.hpp"
#include "shm/segment/kind_ids.hpp"
#include "shm/segment/layout.hpp"
#include "shm/segment/segment.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace shm {

struct FanoutParams {
  std::uint32_t priorities = 0;   // K in [1, 64]; 0 on open = accept any
  std::uint64_t ring_cells = 0;   // cells per priority, a power of two; 0 on open = any
  std::uint64_t slot_bytes = 48;  // largest payload in bytes; 0 on open = any
};

namespace fanout {

inline constexpr std::uint32_t kMaxPriorities = 64;

// Role ids shown in the attachment tables: FanoutProducer ("submitter"),
// FanoutConsumer ("drainer"), PriorityFanout (a peer: both).
inline constexpr RoleSpec kSubmitterRole{0, false, "submitter"};
inline constexpr RoleSpec kDrainerRole{1, false, "drainer"};
inline constexpr RoleSpec kPeerRole{2, false, "peer"};

struct Control {
  // Read by every submit and drain; written by a submit that sets a clear bit,
  // a drain that finds a stale bit, and drainers around a park.
  struct alignas(kFalseSharingRange) Hot {
    std::atomic<std::uint64_t> bitmap;  // bit i: ring i may be non-empty (a hint)
    std::atomic<std::uint32_t> epoch;   // futex word drainers park on
    std::uint32_t reserved;
    mpmc::ParkedSet waiters;  // slots of parked drainers
  } hot;
  // Statistics, written on slow paths only.
  struct alignas(kFalseSharingRange) Stats {
    std::atomic<std::uint64_t> stale_retries;  // pops that found a set bit over an empty ring
    std::atomic<std::uint64_t> parks;          // pop_highest() went to wait
    std::atomic<std::uint64_t> wakeups;        // futex wakes issued to drainers
  } stats;
  // Immutable after create: header incarnation of each `<base>.prio<i>`, so a
  // ring re-created on its own is refused instead of silently mixed in.
  struct alignas(kFalseSharingRange) Rings {
    std::uint64_t incarnation[kMaxPriorities];
  } rings;
};
static_assert(std::is_standard_layout_v<Control>);
static_assert(offsetof(Control, hot.epoch) == 8);
static_assert(offsetof(Control, hot.waiters) == 16);
static_assert(sizeof(Control::Hot) == kFalseSharingRange, "the waiter set shares the hot line");
static_assert(offsetof(Control, stats) == kFalseSharingRange);
static_assert(offsetof(Control, rings) == 2 * kFalseSharingRange);
static_assert(sizeof(Control) == 2 * kFalseSharingRange + kMaxPriorities * 8);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

inline constexpr std::uint64_t kFingerprint = layout_fingerprint(
    {kHeaderFingerprint, 0x46414e4f /* "FANO" */, sizeof(Control), offsetof(Control, hot.epoch),
     offsetof(Control, hot.waiters), offsetof(Control, stats), offsetof(Control, rings),
     kMaxPriorities, kFalseSharingRange, mpmc::kFingerprint, sizeof(mpmc::ParkedSet)});

struct ParamBlock {
  std::uint32_t priorities;
  std::uint32_t reserved;
  std::uint64_t ring_cells;
  std::uint64_t slot_bytes;
};
static_assert(sizeof(ParamBlock) == 24);

[[nodiscard]] std::string bitmap_name(std::string_view base);
[[nodiscard]] std::string ring_name(std::string_view base, std::uint32_t priority);
// The base name of a `<base>.bitmap` segment name (empty when it is not one).
[[nodiscard]] std::string base_of(std::string_view bitmap_segment_name);

[[nodiscard]] Result<void> validate(const FanoutParams& params);
// The KindSpec of the bitmap segment for create (exact) or open (0 = any).
[[nodiscard]] KindSpec kind_spec(const FanoutParams& params, ParamBlock& storage);

}  // namespace fanout
}  // namespace shm
