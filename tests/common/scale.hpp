// Iteration counts for stress tests: full size in the normal lane, smaller
// under sanitizers (ASan ~2-3x, TSan ~5-15x slower), so every lane stays bounded.
#pragma once

#include <cstdint>

namespace shm::test {

#if defined(__SANITIZE_THREAD__)
inline constexpr std::uint64_t kScaleDivisor = 20;
#elif defined(__SANITIZE_ADDRESS__)
inline constexpr std::uint64_t kScaleDivisor = 5;
#else
inline constexpr std::uint64_t kScaleDivisor = 1;
#endif

[[nodiscard]] constexpr std::uint64_t scaled(std::uint64_t n) noexcept {
  return n / kScaleDivisor > 0 ? n / kScaleDivisor : 1;
}

}  // namespace shm::test
