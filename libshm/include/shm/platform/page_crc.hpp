/// @file
/// Payload checksums of published pages: CRC32C (the same value as
/// shm::crc32c), computed three lanes at a time so the crc32 instruction's
/// latency overlaps, and optionally fused with the copy into the page so the
/// payload is read once. The channel computes one per admitted payload and
/// checks one per received payload, so this sits on both hot paths.
///
/// Method. The CRC register update is linear over GF(2): the register after
/// A||B equals shift_|B|(register after A) XOR (register of B from zero). A
/// block of three 64-byte lanes is therefore three independent crc32 chains
/// joined with two constant shifts (four table lookups each). Lengths below
/// one block, and the tail after the last block, use a single chain. From 512
/// bytes on, CPUs with AVX-512 VPCLMULQDQ fold 64-256 bytes per step with
/// carry-less multiplies instead (see libshm/src/platform/page_crc.cpp). Every path
/// returns exactly crc32c(); the unit tests compare them for every length.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shm::page {

/// crc32c(data, size), faster for payloads of a few hundred bytes and more.
[[nodiscard]] std::uint32_t checksum(const void* data, std::size_t size) noexcept;

/// Copies `size` bytes from `src` to `dst` (no overlap) and returns
/// crc32c(src, size), reading the source once.
[[nodiscard]] std::uint32_t copy_checksum(void* dst, const void* src, std::size_t size) noexcept;

}  // namespace shm::page
