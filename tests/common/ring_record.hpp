// Self-checking test records: the size and every byte of record `seq` follow
// from `seq`, records of 12+ bytes carry seq and a CRC32C, so a consumer can
// detect loss, duplication, reordering and corruption of any byte.
#pragma once

#include "shm/platform/crc32c.hpp"

#include <cstdint>
#include <cstring>
#include <expected>
#include <span>
#include <string>

namespace shm::test::ring_record {

[[nodiscard]] constexpr std::uint64_t mix(std::uint64_t x) noexcept {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

[[nodiscard]] constexpr std::size_t size_for(std::uint64_t seq, std::uint64_t min,
                                             std::uint64_t max) noexcept {
  return static_cast<std::size_t>(min + mix(seq) % (max - min + 1));
}

inline void fill(std::uint64_t seq, std::span<std::byte> out) {
  std::memset(out.data(), static_cast<int>(mix(seq) & 0xff), out.size());
  if (out.size() >= 12) {
    std::memcpy(out.data(), &seq, 8);
    const std::uint32_t crc = crc32c(out.data(), out.size() - 4);
    std::memcpy(out.data() + out.size() - 4, &crc, 4);
  }
}

// The record's sequence number, or what is wrong with it. Short records
// (< 12 bytes) carry no sequence: the caller passes `expected` to check them.
[[nodiscard]] inline std::expected<std::uint64_t, std::string> check(
    std::span<const std::byte> rec, std::uint64_t min, std::uint64_t max,
    std::uint64_t expected = UINT64_MAX) {
  std::uint64_t seq = expected;
  if (rec.size() >= 12) {
    std::memcpy(&seq, rec.data(), 8);
    std::uint32_t crc = 0;
    std::memcpy(&crc, rec.data() + rec.size() - 4, 4);
    if (crc != crc32c(rec.data(), rec.size() - 4))
      return std::unexpected("checksum mismatch in record claiming seq " + std::to_string(seq));
  } else {
    if (seq == UINT64_MAX) return std::unexpected("short record without an expected sequence");
    const auto b = static_cast<std::byte>(mix(seq) & 0xff);
    for (std::byte x : rec)
      if (x != b) return std::unexpected("corrupt byte in short record " + std::to_string(seq));
  }
  if (rec.size() != size_for(seq, min, max))
    return std::unexpected("record " + std::to_string(seq) + " has " + std::to_string(rec.size()) +
                           " bytes, expected " + std::to_string(size_for(seq, min, max)));
  return seq;
}

}  // namespace shm::test::ring_record
