// shm::Result in the harnesses: the value, or a BenchError naming the call.
#pragma once

#include "harness/harness.hpp"
#include "shm/error.hpp"

#include <string_view>
#include <utility>

namespace shm::bench {

// Out of line: the error path, so the checked calls in the hot loops stay small.
[[noreturn, gnu::noinline, gnu::cold]] void throw_error(std::string_view what, const shm::Error& e);

// Takes the result by reference: a copy of the Result (value or Error) per
// message would be the harness's cost, not the structure's.
template <class T>
T value_or_throw(shm::Result<T>&& r, std::string_view what) {
  if (!r) [[unlikely]]
    throw_error(what, r.error());
  return std::move(*r);
}

}  // namespace shm::bench
