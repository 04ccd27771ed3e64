/// @file
/// Copies and comparisons of short byte strings whose length is known only at
/// run time (a record's payload, a relay value). Up to 64 bytes they are a few
/// fixed-size loads and stores the compiler inlines, instead of a call into
/// libc's general memcpy / memcmp, whose dispatch costs as much as the copy
/// at these sizes (a profile of the relay's merge showed memcmp and memmove at
/// a third of the write). Longer strings go to libc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace shm::detail {

/// memcpy(dst, src, n) for non-overlapping ranges. Always inlined: a call is
/// what it exists to avoid.
[[gnu::always_inline]] inline void copy_short(void* to, const void* from, std::size_t n) noexcept {
  auto* dst = static_cast<unsigned char*>(to);
  const auto* src = static_cast<const unsigned char*>(from);
  if (n >= 16) {
    if (n > 64) [[unlikely]] {
      std::memcpy(dst, src, n);
      return;
    }
    // Two (or four) overlapping 16-byte moves cover every length in [16, 64];
    // all loads happen before the stores.
    unsigned char a[16], b[16], c[16], d[16];
    std::memcpy(a, src, 16);
    std::memcpy(d, src + n - 16, 16);
    if (n > 32) {
      std::memcpy(b, src + 16, 16);
      std::memcpy(c, src + n - 32, 16);
      std::memcpy(dst + 16, b, 16);
      std::memcpy(dst + n - 32, c, 16);
    }
    std::memcpy(dst, a, 16);
    std::memcpy(dst + n - 16, d, 16);
  } else if (n >= 8) {
    // One store when n is 8 (the common word-sized value): each store a
    // message makes is a store-buffer entry (see the SPSC ring's note).
    std::uint64_t a, b;
    std::memcpy(&a, src, 8);
    std::memcpy(&b, src + n - 8, 8);
    std::memcpy(dst, &a, 8);
    if (n > 8) std::memcpy(dst + n - 8, &b, 8);
  } else if (n >= 4) {
    std::uint32_t a, b;
    std::memcpy(&a, src, 4);
    std::memcpy(&b, src + n - 4, 4);
    std::memcpy(dst, &a, 4);
    if (n > 4) std::memcpy(dst + n - 4, &b, 4);
  } else {
    for (std::size_t i = 0; i < n; ++i) dst[i] = src[i];
  }
}

/// copy_short for a payload that crosses to another core right after (the
/// SPSC ring's records, written by the producer and copied out by the
/// consumer): up to 16 bytes inline, longer ones through libc, whose memcpy
/// uses the widest vector the CPU has (one 64-byte move on AVX-512; inline
/// code can assume 16-byte moves only). Measured on the ring's 64 B round
/// trip: 30-200 ns faster than copy_short, depending on the caller's code,
/// and the same cross-process throughput; a call of about 1.7 ns more in one
/// process (bench/RESULTS.md, "The 64 B round trip and the payload copy").
[[gnu::always_inline]] inline void copy_payload(void* to, const void* from,
                                                std::size_t n) noexcept {
  if (n > 16) {
    std::memcpy(to, from, n);
    return;
  }
  copy_short(to, from, n);
}

/// memcmp(a, b, n) == 0.
[[nodiscard, gnu::always_inline]] inline bool equal_short(const void* left, const void* right,
                                                          std::size_t n) noexcept {
  const auto* a = static_cast<const unsigned char*>(left);
  const auto* b = static_cast<const unsigned char*>(right);
  if (n >= 8) {
    if (n > 64) [[unlikely]]
      return std::memcmp(a, b, n) == 0;
    // 8-byte words from the front, then the last 8 bytes (overlapping the
    // previous word when n is not a multiple of 8).
    std::uint64_t x, y, diff = 0;
    for (std::size_t i = 0; i + 8 <= n; i += 8) {
      std::memcpy(&x, a + i, 8);
      std::memcpy(&y, b + i, 8);
      diff |= x ^ y;
    }
    std::memcpy(&x, a + n - 8, 8);
    std::memcpy(&y, b + n - 8, 8);
    return (diff | (x ^ y)) == 0;
  }
  if (n >= 4) {
    std::uint32_t x1, y1, x2, y2;
    std::memcpy(&x1, a, 4);
    std::memcpy(&y1, b, 4);
    std::memcpy(&x2, a + n - 4, 4);
    std::memcpy(&y2, b + n - 4, 4);
    return ((x1 ^ y1) | (x2 ^ y2)) == 0;
  }
  for (std::size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return false;
  return true;
}

}  // namespace shm::detail
