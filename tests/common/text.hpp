// Small conversions and checks the tests share: a string as payload bytes and
// back, substring search, an error's code and message.
#pragma once

#include "shm/error.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace shm::test {

// The bytes of `s` (no terminator); valid while `s` is.
[[nodiscard]] inline std::span<const std::byte> bytes(std::string_view s) noexcept {
  return std::as_bytes(std::span(s.data(), s.size()));
}

[[nodiscard]] inline std::string str(std::span<const std::byte> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

[[nodiscard]] inline bool contains(std::string_view haystack, std::string_view needle) noexcept {
  return haystack.find(needle) != std::string_view::npos;
}

// `r` failed with `code` and a message containing `fragment`.
template <class T>
void expect_error(const Result<T>& r, Errc code, std::string_view fragment) {
  ASSERT_FALSE(r) << "expected " << to_string(code) << " containing '" << fragment << "'";
  EXPECT_EQ(r.error().code, code) << r.error().what();
  EXPECT_TRUE(contains(r.error().message, fragment)) << r.error().what();
}

}  // namespace shm::test
