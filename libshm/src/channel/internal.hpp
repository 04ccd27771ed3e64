// Private to the channel's sources: the spin budget of its blocking calls and
// the invariant predicates that both the hot paths and the kind's verify()
// evaluate.
#pragma once

#include <algorithm>
#include <cstdint>

namespace shm::channel::internal {

// Attempts of ChannelProducer::reserve() and ChannelConsumer::receive*()
// before they park.
inline constexpr int kSpins = 4096;

// Whether ring positions (consumer head, producer tail) are possible for a
// descriptor ring of `ring_cells`: head <= tail <= head + ring_cells.
[[nodiscard]] constexpr bool ring_positions_possible(std::uint64_t head, std::uint64_t tail,
                                                     std::uint64_t ring_cells) noexcept {
  return head <= tail && tail - head <= ring_cells;
}

// Whether the epochs are possible for `pages` slots: released is at most one
// past active (end of stream), and fewer than `pages` epochs are live.
[[nodiscard]] constexpr bool epochs_possible(std::uint64_t released, std::uint64_t active,
                                             std::uint64_t pages) noexcept {
  return released <= active + 1 && active - std::min(active, released) < pages;
}

}  // namespace shm::channel::internal
