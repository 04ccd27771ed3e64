// The value of a Result a test cannot go on without.
#pragma once

#include "shm/error.hpp"

#include <stdexcept>
#include <utility>

namespace shm::test {

// Throws (gtest then fails the test with the error's text) when `r` holds an
// error; else moves its value out.
template <class T>
T must(Result<T> r) {
  if (!r) throw std::runtime_error(r.error().what());
  return std::move(*r);
}

}  // namespace shm::test
