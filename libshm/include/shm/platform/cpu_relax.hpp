/// @file
/// The pause between two attempts of a spin loop: tells the core that this is
/// a busy-wait (x86 PAUSE), so a hyper-thread sibling gets the pipeline and the
/// loop leaves the memory order machine alone. A no-op elsewhere.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace shm::detail {

inline void cpu_relax() noexcept {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

}  // namespace shm::detail
