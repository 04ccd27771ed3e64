// Reads an MpmcRing's shared state to tell whether a given process holds a
// claimed cell right now: the kill tests assert it before their kill -9, so
// they prove the victim died holding something (not merely alive).
#pragma once

#include "shm/mpmc/mpmc_ring.hpp"

#include <sys/types.h>
#include <optional>

namespace shm::test {

// The position the handle of process `pid` has claimed on `side` and not yet
// published (Push) or released (Pop), or nullopt. A claim is: the slot's
// intent names pos, the shared tail/head moved past pos, and the cell still
// has its claimed sequence (Push: pos, not published; Pop: pos + 1, the item
// not released).
inline std::optional<std::uint64_t> claimed_by(const Segment& segment, pid_t pid, mpmc::Side side) {
  const auto v = mpmc::view(segment);
  if (!v) return std::nullopt;
  for (const SlotInfo& s : segment.slots()) {
    if (s.pid != pid) continue;
    const auto& intent = v->control->intents[s.index];
    const std::uint64_t w = (side == mpmc::Side::Push ? intent.push : intent.pop).load();
    if (w == mpmc::kNoIntent) continue;
    const std::uint64_t pos = w - 1;
    const std::uint64_t seq = v->cell(pos).seq.load();
    if (side == mpmc::Side::Push && v->control->producer.tail.load() > pos && seq == pos)
      return pos;
    if (side == mpmc::Side::Pop && v->control->consumer.head.load() > pos && seq == pos + 1)
      return pos;
  }
  return std::nullopt;
}

}  // namespace shm::test
