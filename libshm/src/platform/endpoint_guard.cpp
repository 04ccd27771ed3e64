#include "shm/platform/endpoint_guard.hpp"

#include <cstdio>
#include <cstdlib>

namespace shm::detail {

void endpoint_used_concurrently(const char* what) noexcept {
  std::fprintf(stderr,
               "libshm: %s is used by two threads at once (or called again from inside "
               "one of its own callbacks)\n",
               what);
  std::abort();
}

}  // namespace shm::detail
