#include "shm/platform/crc32c.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <numeric>
#include <string_view>
#include <vector>

namespace shm {
namespace {

// RFC 3720 (iSCSI) appendix B.4 vectors and the common "123456789" check value.
struct Vector {
  std::vector<unsigned char> data;
  std::uint32_t crc;
};

std::vector<Vector> vectors() {
  std::vector<Vector> v;
  v.push_back({std::vector<unsigned char>(32, 0x00), 0x8A9136AAu});
  v.push_back({std::vector<unsigned char>(32, 0xFF), 0x62A8AB43u});
  std::vector<unsigned char> up(32), down(32);
  std::iota(up.begin(), up.end(), 0);
  for (int i = 0; i < 32; ++i) down[i] = static_cast<unsigned char>(31 - i);
  v.push_back({up, 0x46DD794Eu});
  v.push_back({down, 0x113FDB5Cu});
  const std::string_view check = "123456789";
  v.push_back({std::vector<unsigned char>(check.begin(), check.end()), 0xE3069283u});
  v.push_back({{}, 0u});
  return v;
}

TEST(Crc32c, TableMatchesKnownVectors) {
  for (const auto& v : vectors())
    EXPECT_EQ(detail::crc32c_table(v.data.data(), v.data.size(), 0), v.crc) << v.data.size();
}

TEST(Crc32c, HardwareMatchesKnownVectorsWhenAvailable) {
  if (!detail::crc32c_hw_available()) GTEST_SKIP() << "CPU has no SSE4.2 crc32 instruction";
  for (const auto& v : vectors())
    EXPECT_EQ(detail::crc32c_hw(v.data.data(), v.data.size(), 0), v.crc) << v.data.size();
}

TEST(Crc32c, HardwareAndTableAgreeOnEveryLengthAndAlignment) {
  std::vector<unsigned char> buf(300);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<unsigned char>(i * 131 + 7);
  for (std::size_t off = 0; off < 8; ++off)
    for (std::size_t len = 0; len + off <= buf.size(); len += 13)
      EXPECT_EQ(crc32c(buf.data() + off, len), detail::crc32c_table(buf.data() + off, len, 0));
}

TEST(Crc32c, ContinuationEqualsOneShot) {
  const std::string_view s = "The quick brown fox jumps over the lazy dog";
  const std::uint32_t whole = crc32c(s.data(), s.size());
  for (std::size_t cut = 0; cut <= s.size(); ++cut)
    EXPECT_EQ(crc32c(s.data() + cut, s.size() - cut, crc32c(s.data(), cut)), whole);
}

}  // namespace
}  // namespace shm
