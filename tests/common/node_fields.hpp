// Reads one field of a describe() tree, failing the test when it is missing or
// of another type.
#pragma once

#include "shm/segment/describe.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string_view>
#include <variant>

namespace shm::test {

[[nodiscard]] inline std::uint64_t u64(const Node& n, std::string_view key) {
  const Node* f = n.find(key);
  if (f == nullptr) {
    ADD_FAILURE() << "no member " << key;
    return ~0ull;
  }
  if (const auto* v = std::get_if<std::uint64_t>(&f->value())) return *v;
  ADD_FAILURE() << key << " is not a u64";
  return ~0ull;
}

}  // namespace shm::test
