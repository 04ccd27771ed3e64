// The integer limits the ledger tests push against.
#pragma once

#include <cstdint>
#include <limits>

namespace shm::test {

inline constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
__extension__ using i128 = __int128;  // exact products and sums of int64 operands

}  // namespace shm::test
