// The kind id of every segment kind, in one place. A kind id is part of the
// file format (the header's `kind` field): an id is never reused or
// renumbered; a new kind takes the next free number and is added to kAllKindIds.
#pragma once

#include <array>
#include <cstdint>

namespace shm {

using KindId = std::uint16_t;

inline constexpr KindId kSpscRingKind = 1;
inline constexpr KindId kChannelKind = 2;
inline constexpr KindId kMpmcRingKind = 3;
inline constexpr KindId kFanoutBitmapKind = 4;
inline constexpr KindId kLedgerKind = 5;
inline constexpr KindId kRelayKind = 6;
inline constexpr KindId kEgressKind = 7;
// Not a segment: the kind of a relay's spill page file (shm/spill/page.hpp).
inline constexpr KindId kSpillPageKind = 8;
// The state segment of an shm-bridge route (daemons/bridge/state.hpp): the
// bridge's crash-recovery intents and its last applied stream sequence.
inline constexpr KindId kBridgeStateKind = 9;

inline constexpr std::array kAllKindIds{kSpscRingKind,     kChannelKind,   kMpmcRingKind,
                                        kFanoutBitmapKind, kLedgerKind,    kRelayKind,
                                        kEgressKind,       kSpillPageKind, kBridgeStateKind};

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
