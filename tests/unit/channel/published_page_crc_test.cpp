#include "shm/platform/page_crc.hpp"
#include "shm/platform/crc32c.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace shm::page {
namespace {

TEST(PublishedPageCrcTest, MatchesTheCrc32cCheckValue) {
  const std::string s = "123456789";
  EXPECT_EQ(checksum(s.data(), s.size()), 0xE3069283u);  // RFC 3720 / iSCSI check value
  EXPECT_EQ(checksum(nullptr, 0), 0u);
}

// Covers every path: one crc32 chain, three chains, the vector folds (from
// 512 bytes, 64/256-byte strides) and their tails.
TEST(PublishedPageCrcTest, AgreesWithCrc32cForEveryLengthAndAlignment) {
  std::mt19937_64 rng(7);
  std::vector<unsigned char> buf(5000 + 16);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  for (std::size_t offset = 0; offset < 8; offset += 3) {
    for (std::size_t n = 0; n <= 1600; ++n) {
      const unsigned char* p = buf.data() + offset;
      ASSERT_EQ(checksum(p, n), crc32c(p, n)) << "length " << n << " offset " << offset;
    }
    for (std::size_t n : {4095u, 4096u, 4097u, 5000u})
      ASSERT_EQ(checksum(buf.data() + offset, n), crc32c(buf.data() + offset, n)) << n;
  }
}

TEST(PublishedPageCrcTest, CopyChecksumCopiesAndChecksumsInOnePass) {
  std::mt19937_64 rng(11);
  std::vector<unsigned char> src(3000), dst(3000 + 8);
  for (auto& b : src) b = static_cast<unsigned char>(rng());
  for (std::size_t n :
       {0u, 1u, 7u, 8u, 63u, 64u, 191u, 192u, 193u, 511u, 512u, 777u, 1024u, 2061u, 2999u}) {
    std::fill(dst.begin(), dst.end(), 0xAA);
    const std::uint32_t crc = copy_checksum(dst.data() + 1, src.data(), n);
    EXPECT_EQ(crc, crc32c(src.data(), n)) << n;
    EXPECT_EQ(std::memcmp(dst.data() + 1, src.data(), n), 0) << n;
    EXPECT_EQ(dst[0], 0xAA) << "nothing written before the destination";
    EXPECT_EQ(dst[n + 1], 0xAA) << "nothing written past the destination (" << n << ")";
  }
}

TEST(PublishedPageCrcTest, DetectsASingleFlippedBitAnywhere) {
  std::vector<unsigned char> buf(1024, 0x5A);
  const std::uint32_t good = checksum(buf.data(), buf.size());
  for (std::size_t i = 0; i < buf.size(); i += 37) {
    buf[i] ^= 0x10;
    EXPECT_NE(checksum(buf.data(), buf.size()), good) << "byte " << i;
    buf[i] ^= 0x10;
  }
}

}  // namespace
}  // namespace shm::page
