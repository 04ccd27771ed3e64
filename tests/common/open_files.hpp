// Tests that hold hundreds of handles need more descriptors than a default
// soft limit of 1024 may give: every handle holds two per segment it maps.
#pragma once

#include <sys/resource.h>
#include <cstdint>

namespace shm::test {

// Raises the soft RLIMIT_NOFILE to at least `needed` (capped by the hard
// limit); returns the soft limit in force afterwards.
inline std::uint64_t raise_open_files_limit(std::uint64_t needed) {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < needed) {
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= needed ? needed : rl.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &rl);
    (void)::getrlimit(RLIMIT_NOFILE, &rl);
  }
  return rl.rlim_cur;
}

}  // namespace shm::test
