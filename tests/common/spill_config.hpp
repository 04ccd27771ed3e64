// The small spill relay several tests build: raw_fifo, 8 entries of 8 bytes,
// Spill at 6 pending (back under at 2), replays deduplicated by first_seq,
// pages in `dir` (docs/spill.md). Tests change what they need on the copy.
#pragma once

#include "shm/relay/relay.hpp"

#include <string>

namespace shm::test {

[[nodiscard]] inline RelayConfig small_spill_fifo(const std::string& dir) {
  RelayConfig cfg;
  cfg.policy = policy::kRawFifo;
  cfg.max_entries = 8;
  cfg.value_bytes = 8;
  cfg.backpressure = Backpressure{Dimension::Count, 6, 2, Overflow::Spill};
  cfg.spill_dedup = true;
  cfg.spill.enabled = true;
  cfg.spill.dir = dir;
  return cfg;
}

}  // namespace shm::test
