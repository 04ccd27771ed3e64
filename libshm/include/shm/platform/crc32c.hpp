/// @file
/// CRC32C (Castagnoli). Uses the SSE4.2 crc32 instruction when the CPU has it
/// (checked once at run time), a slicing table otherwise. Both paths give the
/// same value; tests check them against the RFC 3720 vectors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace shm {

/// Continues a CRC: crc32c(b, crc32c(a)) == crc32c(a ++ b). Start with 0.
[[nodiscard]] std::uint32_t crc32c(const void* data, std::size_t size,
                                   std::uint32_t crc = 0) noexcept;

/// crc32c() of `bytes`, continuing `crc`.
[[nodiscard]] inline std::uint32_t crc32c(std::span<const std::byte> bytes,
                                          std::uint32_t crc = 0) noexcept {
  return crc32c(bytes.data(), bytes.size(), crc);
}

namespace detail {
[[nodiscard]] std::uint32_t crc32c_table(const void* data, std::size_t size,
                                         std::uint32_t crc) noexcept;
[[nodiscard]] std::uint32_t crc32c_hw(const void* data, std::size_t size,
                                      std::uint32_t crc) noexcept;
[[nodiscard]] bool crc32c_hw_available() noexcept;
}  // namespace detail

}  // namespace shm
