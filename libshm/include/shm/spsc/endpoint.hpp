/// @file
/// State shared by RingProducer and RingConsumer: the segment they keep mapped,
/// their attachment, and the validated geometry of the ring.
#pragma once

#include "shm/platform/endpoint_guard.hpp"
#include "shm/platform/short_bytes.hpp"
#include "shm/segment/segment.hpp"
#include "shm/spsc/layout.hpp"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstdint>
#include <cstring>
#include <string>

namespace shm {

/// What a ring handle's snapshot() reads: positions and counters, with relaxed
/// and acquire loads, never waiting for the other side (a value, not a lock).
struct RingSnapshot {
  std::uint64_t capacity_bytes = 0;  ///< the ring's buffer
  std::uint64_t max_payload = 0;     ///< the largest record's payload, bytes
  /// @name Byte positions (they only grow)
  /// `tail` is exact from the producer's handle; from the consumer's, the
  /// larger of what it has peeked and the producer's lazy hint.
  ///@{
  std::uint64_t head = 0;  ///< the consumer's released position
  std::uint64_t tail = 0;  ///< the producer's published position
  ///@}
  std::uint64_t used_bytes = 0;        ///< tail - head
  std::uint64_t records_pushed = 0;    ///< records published (counter)
  std::uint64_t records_released = 0;  ///< records the consumer released (counter)
};

}  // namespace shm

namespace shm::detail {

[[nodiscard]] std::string too_large_message(std::size_t n, std::uint64_t max_payload);

/// The header word of the record at `p` (8-byte aligned inside the mapping).
[[nodiscard]] inline std::atomic_ref<std::uint64_t> header_at(std::byte* p) noexcept {
  return std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(p));
}

/// Test-only crash points (libshm/testing/shm/testing/ring_crash.hpp names
/// them); nullptr outside the crash tests, so each costs one load of a member
/// of the handle and a predictable branch.
using RingCrashHook = void (*)(std::uint8_t point);
struct RingTestAccess;

class RingEndpoint {
 public:
  /// How the endpoint guard names a ring's endpoints when it aborts.
  static constexpr const char* kGuardName = "an SPSC endpoint";
  [[nodiscard]] const Segment& segment() const noexcept { return segment_; }
  [[nodiscard]] const Attachment& attachment() const noexcept { return attachment_; }
  [[nodiscard]] std::uint64_t capacity_bytes() const noexcept { return capacity_; }
  [[nodiscard]] std::uint64_t max_payload() const noexcept { return max_payload_; }
  /// Refreshes this endpoint's heartbeat in the attachment table (no syscall).
  void heartbeat() noexcept { attachment_.heartbeat(); }

 protected:
  friend struct RingTestAccess;

  RingEndpoint() = default;
  RingEndpoint(RingEndpoint&&) noexcept = default;
  /// Detaches before the old mapping goes away (the attachment writes into it);
  /// a defaulted move assignment would unmap first, in member order.
  RingEndpoint& operator=(RingEndpoint&& other) noexcept;
  ~RingEndpoint() = default;
  [[nodiscard]] static Result<void> bind(RingEndpoint& e, Segment segment, const RoleSpec& role);
  /// The snapshot with `tail` as the handle knows it.
  [[nodiscard]] RingSnapshot snapshot_at(std::uint64_t tail) const noexcept {
    RingSnapshot s;
    s.capacity_bytes = capacity_;
    s.max_payload = max_payload_;
    // acquire: pairs with [spsc.C], the consumer's release store of head.
    s.head = control_->consumer.head.load(std::memory_order_acquire);
    s.tail = std::max(tail, s.head);
    s.used_bytes = s.tail - s.head;
    // relaxed: statistics counters, each written by its own side only.
    s.records_pushed = control_->producer.records.load(std::memory_order_relaxed);
    s.records_released = control_->consumer.records.load(std::memory_order_relaxed);
    return s;
  }

  [[nodiscard]] std::byte* at(std::uint64_t pos) const noexcept { return buffer_ + (pos & mask_); }
  [[nodiscard]] std::uint32_t lap(std::uint64_t pos) const noexcept {
    return ring::lap_of(pos, capacity_log2_);
  }
  /// The light half of the asymmetric barrier ([spsc.D]): orders the caller's
  /// publishing store before its load of the peer's parked flag. A compiler
  /// barrier when this process is registered for membarrier (the waiter's
  /// membarrier then serialises us), else a full fence.
  void light_barrier() const noexcept {
    if (registered_) [[likely]]
      std::atomic_signal_fence(std::memory_order_seq_cst);
    else
      std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  void crash_point(std::uint8_t point) const noexcept {
    if (crash_hook_ != nullptr) [[unlikely]]
      crash_hook_(point);
  }

  Segment segment_;
  Attachment attachment_;
  ring::RingControl* control_ = nullptr;
  std::byte* buffer_ = nullptr;
  std::uint64_t capacity_ = 0;
  std::uint64_t mask_ = 0;
  std::uint64_t max_payload_ = 0;
  unsigned capacity_log2_ = 0;
  bool registered_ = false;  ///< membarrier(REGISTER_GLOBAL_EXPEDITED) succeeded in this process
  RingCrashHook crash_hook_ = nullptr;
  EndpointGuard guard_;
};

inline RingEndpoint& RingEndpoint::operator=(RingEndpoint&& other) noexcept {
  if (this != &other) {
    attachment_.detach();
    attachment_ = std::move(other.attachment_);
    segment_ = std::move(other.segment_);
    control_ = other.control_;
    buffer_ = other.buffer_;
    capacity_ = other.capacity_;
    mask_ = other.mask_;
    max_payload_ = other.max_payload_;
    capacity_log2_ = other.capacity_log2_;
    registered_ = other.registered_;
    crash_hook_ = other.crash_hook_;
    guard_ = std::move(other.guard_);
  }
  return *this;
}

}  // namespace shm::detail
