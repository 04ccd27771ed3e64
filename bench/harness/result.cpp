// Benchmark harness: the error path of value_or_throw (harness/result.hpp).
#include "harness/result.hpp"

#include <fmt/format.h>

namespace shm::bench {

void throw_error(std::string_view what, const shm::Error& e) {
  throw BenchError(fmt::format("{}: {}", what, e.what()));
}

}  // namespace shm::bench
