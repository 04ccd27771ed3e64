/// @file
/// State shared by ChannelProducer and ChannelConsumer: the segment they keep
/// mapped, their attachment, and the validated geometry of the channel.
#pragma once

#include "shm/channel/layout.hpp"
#include "shm/platform/endpoint_guard.hpp"
#include "shm/segment/segment.hpp"

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>

namespace shm {

/// What a channel handle's snapshot() reads: counters and positions, with
/// relaxed and acquire loads, never waiting for the other side.
struct ChannelSnapshot {
  std::uint32_t pages = 0;                  ///< P: page slots
  std::uint64_t page_bytes = 0;             ///< arena bytes per page
  std::uint32_t descriptors_per_page = 0;   ///< descriptor cells per page
  std::uint32_t ring_cells = 0;             ///< descriptor ring cells
  std::uint64_t sent = 0;                   ///< descriptors published (the producer's tail)
  std::uint64_t received = 0;               ///< descriptors given back (the consumer's head)
  std::uint64_t in_flight = 0;              ///< sent - received
  std::uint64_t active_epoch = 0;           ///< the epoch of the producer's active page
  std::uint64_t released_epoch = 0;         ///< epochs below this are released
  std::uint64_t rotations = 0;              ///< pages rotated (counter)
  std::uint64_t quota_refusals = 0;         ///< PageQuotaExhausted outcomes (counter)
  std::uint64_t ring_full = 0;              ///< RingFull outcomes (counter)
  ChannelState state = ChannelState::Open;  ///< the terminal word, decoded
  ChannelFault fault = ChannelFault::None;  ///< Faulted: the cause
};

}  // namespace shm

namespace shm::detail {

class ChannelTesting;

class ChannelEndpoint {
 public:
  friend class ChannelTesting;

  [[nodiscard]] const Segment& segment() const noexcept { return segment_; }
  [[nodiscard]] const Attachment& attachment() const noexcept { return attachment_; }
  [[nodiscard]] std::uint32_t pages() const noexcept { return view_.params.pages; }
  [[nodiscard]] std::uint64_t page_bytes() const noexcept { return view_.params.page_bytes; }
  [[nodiscard]] std::uint32_t descriptors_per_page() const noexcept {
    return view_.params.descriptors_per_page;
  }
  [[nodiscard]] std::uint32_t ring_cells() const noexcept { return view_.params.ring_cells; }
  /// The largest payload: one that fills an empty page.
  [[nodiscard]] std::uint64_t max_payload() const noexcept { return view_.params.max_payload; }
  /// The terminal state as stored in the segment now.
  [[nodiscard]] ChannelState state() const noexcept;
  /// Why the channel is FAULTED (None while it is not).
  [[nodiscard]] ChannelFault fault() const noexcept;
  /// Refreshes this endpoint's heartbeat in the attachment table (no syscall).
  void heartbeat() noexcept { attachment_.heartbeat(); }
  /// Counters and positions now (never blocks).
  [[nodiscard]] ChannelSnapshot snapshot() const noexcept;

 protected:
  ChannelEndpoint() = default;
  ChannelEndpoint(ChannelEndpoint&&) noexcept = default;
  /// Detaches before the old mapping goes away (the attachment writes into it);
  /// a defaulted move assignment would unmap first, in member order.
  ChannelEndpoint& operator=(ChannelEndpoint&& other) noexcept {
    if (this != &other) {
      attachment_.detach();
      attachment_ = std::move(other.attachment_);
      segment_ = std::move(other.segment_);
      view_ = other.view_;
      slot_mask_ = other.slot_mask_;
      ring_mask_ = other.ring_mask_;
      role_ = other.role_;
      guard_ = std::move(other.guard_);
    }
    return *this;
  }
  ~ChannelEndpoint() = default;  ///< members in reverse order: detach, then unmap

  [[nodiscard]] static Result<void> bind(ChannelEndpoint& e, Segment segment, const RoleSpec& role);

  /// Marks the channel FAULTED (first fault wins), wakes both sides and returns
  /// the error to report: errc_for(fault) with "<fault>: <detail>".
  [[nodiscard]] std::unexpected<Error> raise(ChannelFault fault, std::uint64_t epoch,
                                             std::uint64_t sequence, const std::string& detail);
  /// The error for a channel found FAULTED by someone else.
  [[nodiscard]] std::unexpected<Error> already_faulted() const;
  void wake_consumer() noexcept;
  void wake_producer() noexcept;

  [[nodiscard]] channel::ChannelControl& control() const noexcept { return *view_.control; }
  [[nodiscard]] std::byte* slot(std::uint64_t epoch) const noexcept {
    return view_.slot(epoch & slot_mask_);
  }

  Segment segment_;
  Attachment attachment_;
  channel::View view_{};
  std::uint64_t slot_mask_ = 0;  ///< pages - 1
  std::uint64_t ring_mask_ = 0;  ///< ring_cells - 1
  std::uint32_t role_ = 0;
  EndpointGuard guard_;  ///< see shm/platform/endpoint_guard.hpp
};

}  // namespace shm::detail
