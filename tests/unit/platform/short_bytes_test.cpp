// copy_short, copy_payload and equal_short against memcpy and memcmp: every
// length from 0 to 100 (each branch, and both sides of each libc cut-over:
// 64 bytes for copy_short and equal_short, 16 for copy_payload), at every
// alignment of a word.
#include "shm/platform/short_bytes.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <random>

namespace {

constexpr std::size_t kMaxLength = 100;
constexpr std::size_t kSlack = 16;  // guard bytes after the copy, checked untouched

using Copy = void (*)(void*, const void*, std::size_t) noexcept;

void expect_copies_like_memcpy(Copy copy) {
  std::mt19937 rng(7);
  for (std::size_t offset = 0; offset < 8; ++offset) {
    for (std::size_t n = 0; n <= kMaxLength; ++n) {
      std::array<unsigned char, kMaxLength + 8 + kSlack> src{}, dst{}, want{};
      for (auto& b : src) b = static_cast<unsigned char>(rng());
      for (std::size_t i = 0; i < dst.size(); ++i) dst[i] = want[i] = static_cast<unsigned char>(i);
      std::memcpy(want.data() + offset, src.data() + offset, n);
      copy(dst.data() + offset, src.data() + offset, n);
      ASSERT_EQ(dst, want) << "length " << n << ", offset " << offset;
    }
  }
}

TEST(ShortBytesTest, CopyShortCopiesExactlyTheBytesMemcpyWould) {
  expect_copies_like_memcpy([](void* to, const void* from, std::size_t n) noexcept {
    shm::detail::copy_short(to, from, n);
  });
}

TEST(ShortBytesTest, CopyPayloadCopiesExactlyTheBytesMemcpyWould) {
  expect_copies_like_memcpy([](void* to, const void* from, std::size_t n) noexcept {
    shm::detail::copy_payload(to, from, n);
  });
}

TEST(ShortBytesTest, EqualShortFindsADifferenceAtEveryPosition) {
  std::mt19937 rng(11);
  for (std::size_t offset = 0; offset < 8; ++offset) {
    for (std::size_t n = 0; n <= kMaxLength; ++n) {
      std::array<unsigned char, kMaxLength + 8> a{}, b{};
      for (auto& x : a) x = static_cast<unsigned char>(rng());
      b = a;
      // Bytes outside [offset, offset + n) differ: they must not count.
      if (offset > 0) b[offset - 1] = static_cast<unsigned char>(~b[offset - 1]);
      if (offset + n < b.size()) b[offset + n] = static_cast<unsigned char>(~b[offset + n]);
      ASSERT_TRUE(shm::detail::equal_short(a.data() + offset, b.data() + offset, n))
          << "length " << n << ", offset " << offset;
      for (std::size_t at = 0; at < n; ++at) {
        for (const int bit : {0x01, 0x80}) {
          b[offset + at] = static_cast<unsigned char>(b[offset + at] ^ bit);
          ASSERT_FALSE(shm::detail::equal_short(a.data() + offset, b.data() + offset, n))
              << "length " << n << ", offset " << offset << ", differing byte " << at;
          b[offset + at] = static_cast<unsigned char>(b[offset + at] ^ bit);
        }
      }
    }
  }
}

}  // namespace
