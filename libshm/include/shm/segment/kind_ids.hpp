/// @file
/// The kind id of every segment kind, in one place. A kind id is part of the
/// file format (the header's `kind` field): an id is never reused or
/// renumbered; a new kind takes the next free number and is added to kAllKindIds.
#pragma once

#include <array>
#include <cstdint>

namespace shm {

/// Which structure a segment holds (SegmentHeader::kind); 0 is never a kind.
using KindId = std::uint16_t;

inline constexpr KindId kSpscRingKind = 1;      ///< one-to-one byte ring (shm/spsc)
inline constexpr KindId kChannelKind = 2;       ///< paged admission channel (shm/channel)
inline constexpr KindId kMpmcRingKind = 3;      ///< many-to-many ring (shm/mpmc)
inline constexpr KindId kFanoutBitmapKind = 4;  ///< priority fanout (shm/fanout)
inline constexpr KindId kLedgerKind = 5;        ///< counters and token buckets (shm/ledger)
inline constexpr KindId kRelayKind = 6;         ///< keyed merging relay (shm/relay)
inline constexpr KindId kEgressKind = 7;        ///< reliable sending state (shm/egress)
/// Not a segment: the kind of a relay's spill page file (shm/spill/page.hpp).
inline constexpr KindId kSpillPageKind = 8;
/// The state segment of an shm-bridge route (daemons/bridge/state.hpp): the
/// bridge's crash-recovery intents and its last applied stream sequence.
inline constexpr KindId kBridgeStateKind = 9;
inline constexpr KindId kTopicKind = 10;  ///< zero-copy publish-subscribe (shm/topic)

/// Every kind id above, checked unique and nonzero at compile time.
inline constexpr std::array kAllKindIds{
    kSpscRingKind, kChannelKind, kMpmcRingKind,  kFanoutBitmapKind, kLedgerKind,
    kRelayKind,    kEgressKind,  kSpillPageKind, kBridgeStateKind,  kTopicKind};

namespace detail {
consteval bool kind_ids_are_unique_and_nonzero() {
  for (std::size_t i = 0; i < kAllKindIds.size(); ++i) {
    if (kAllKindIds[i] == 0) return false;  // 0 is KindSpec's unset default, never a kind
    for (std::size_t j = i + 1; j < kAllKindIds.size(); ++j) {
      if (kAllKindIds[i] == kAllKindIds[j]) return false;
    }
  }
  return true;
}
}  // namespace detail

static_assert(detail::kind_ids_are_unique_and_nonzero(), "two segment kinds share a kind id");

}  // namespace shm
