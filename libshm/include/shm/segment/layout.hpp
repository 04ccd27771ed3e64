/// @file
/// Constants and helpers that fix the binary layout of every mapped file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace shm {

/// Producer- and consumer-owned fields are kept this far apart. Fixed (not
/// std::hardware_destructive_interference_size) because it is part of the file
/// layout; 128 covers the adjacent-line prefetcher pairing 64-byte lines.
inline constexpr std::size_t kFalseSharingRange = 128;
/// The page size files are laid out in: the header and data areas start on a page.
inline constexpr std::size_t kPageSize = 4096;

/// `v` rounded up to a multiple of `to` (`to` > 0).
[[nodiscard]] constexpr std::uint64_t round_up(std::uint64_t v, std::uint64_t to) noexcept {
  return (v + to - 1) / to * to;
}
/// True for 1, 2, 4, ...; false for 0.
[[nodiscard]] constexpr bool is_power_of_two(std::uint64_t v) noexcept {
  return v != 0 && (v & (v - 1)) == 0;
}

/// FNV-1a over a list of layout facts (sizes, offsets, alignments, version).
/// Two builds whose shared structs differ in any listed fact get different
/// fingerprints, and open() refuses the mismatch.
[[nodiscard]] constexpr std::uint64_t layout_fingerprint(
    std::initializer_list<std::uint64_t> facts) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::uint64_t f : facts) {
    for (int i = 0; i < 8; ++i) {
      h ^= (f >> (8 * i)) & 0xFFu;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

}  // namespace shm
