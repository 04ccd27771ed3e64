#include "shm/published_page_crc.hpp"

#include "shm/platform/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace shm::page {
namespace {

constexpr std::uint32_t kPolyReflected = 0x82F63B78u;  // CRC32C (Castagnoli), reflected
constexpr std::size_t kLane = 64;                      // bytes per lane
constexpr std::size_t kBlock = 3 * kLane;

// The raw register (no pre/post inversion) after feeding `bytes` zero bytes,
// starting from `reg`.
constexpr std::uint32_t feed_zeros(std::uint32_t reg, std::size_t bytes) noexcept {
  for (std::size_t i = 0; i < 8 * bytes; ++i)
    reg = (reg & 1u) != 0 ? (reg >> 1) ^ kPolyReflected : reg >> 1;
  return reg;
}

// shift(x) = feed_zeros(x, kLane), decomposed by byte of x (linearity).
struct ShiftTable {
  std::array<std::array<std::uint32_t, 256>, 4> t{};
};

constexpr ShiftTable make_shift_table() noexcept {
  ShiftTable s;
  for (std::uint32_t k = 0; k < 4; ++k)
    for (std::uint32_t b = 0; b < 256; ++b) s.t[k][b] = feed_zeros(b << (8 * k), kLane);
  return s;
}

constexpr ShiftTable kShift = make_shift_table();

[[nodiscard]] inline std::uint32_t shift_lane(std::uint32_t x) noexcept {
  return kShift.t[0][x & 0xFFu] ^ kShift.t[1][(x >> 8) & 0xFFu] ^ kShift.t[2][(x >> 16) & 0xFFu] ^
         kShift.t[3][x >> 24];
}

// The table's own check of the linearity step: a zero block after a register
// equals the shifted register (evaluated at compile time).
static_assert(feed_zeros(0x12345678u, kLane) ==
              (kShift.t[0][0x78] ^ kShift.t[1][0x56] ^ kShift.t[2][0x34] ^ kShift.t[3][0x12]));

[[nodiscard]] inline std::uint64_t load64(const unsigned char* p) noexcept {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

#if defined(__x86_64__)
template <bool kCopy>
__attribute__((target("sse4.2"))) std::uint32_t lanes_hw(unsigned char* dst,
                                                         const unsigned char* src,
                                                         std::size_t size) noexcept {
  std::uint64_t reg = 0xFFFFFFFFu;  // raw register of crc32c with initial value 0
  while (size >= kBlock) {
    std::uint64_t a = reg, b = 0, c = 0;
    for (std::size_t i = 0; i < kLane; i += 8) {
      const std::uint64_t wa = load64(src + i);
      const std::uint64_t wb = load64(src + kLane + i);
      const std::uint64_t wc = load64(src + 2 * kLane + i);
      if constexpr (kCopy) {
        std::memcpy(dst + i, &wa, 8);
        std::memcpy(dst + kLane + i, &wb, 8);
        std::memcpy(dst + 2 * kLane + i, &wc, 8);
      }
      a = _mm_crc32_u64(a, wa);
      b = _mm_crc32_u64(b, wb);
      c = _mm_crc32_u64(c, wc);
    }
    reg = shift_lane(shift_lane(static_cast<std::uint32_t>(a)) ^ static_cast<std::uint32_t>(b)) ^
          static_cast<std::uint32_t>(c);
    src += kBlock;
    if constexpr (kCopy) dst += kBlock;
    size -= kBlock;
  }
  while (size >= 8) {
    const std::uint64_t w = load64(src);
    if constexpr (kCopy) std::memcpy(dst, &w, 8);
    reg = _mm_crc32_u64(reg, w);
    src += 8;
    if constexpr (kCopy) dst += 8;
    size -= 8;
  }
  auto r32 = static_cast<std::uint32_t>(reg);
  while (size-- > 0) {
    if constexpr (kCopy) *dst++ = *src;
    r32 = _mm_crc32_u8(r32, *src++);
  }
  return ~r32;
}

const bool kHardware = detail::crc32c_hw_available();
#endif

}  // namespace

std::uint32_t checksum(const void* data, std::size_t size) noexcept {
#if defined(__x86_64__)
  if (kHardware) return lanes_hw<false>(nullptr, static_cast<const unsigned char*>(data), size);
#endif
  return crc32c(data, size);
}

std::uint32_t copy_checksum(void* dst, const void* src, std::size_t size) noexcept {
#if defined(__x86_64__)
  if (kHardware)
    return lanes_hw<true>(static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src),
                          size);
#endif
  if (size != 0) std::memcpy(dst, src, size);
  return crc32c(dst, size);
}

}  // namespace shm::page
