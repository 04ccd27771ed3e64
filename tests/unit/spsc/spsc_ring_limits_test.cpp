// The record header's length field is 32 bits: no record longer than that is
// accepted, whatever the ring's capacity.
//
// A ring big enough to show it (16 GiB) cannot be created in a test: create
// reserves the whole file with posix_fallocate. So the test creates a small
// ring and grows it in place into a sparse one (params, total size, header
// CRC, ftruncate), exactly what an older build's create of a 16 GiB ring
// left behind. Nothing past the header is ever written, so the file takes no
// memory; the producer's open and try_reserve are the real code path.
#include "common/temp_root.hpp"
#include "shm/platform/crc32c.hpp"
#include "shm/segment/header.hpp"
#include "shm/segment/layout.hpp"
#include "shm/spsc/layout.hpp"
#include "shm/spsc/producer.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace shm {
namespace {

using ::testing::HasSubstr;

// Rewrites the ring `path` (capacity 64) as a sparse ring of `capacity` whose
// parameter block stores `max_payload`.
void grow_sparse(const std::string& path, std::uint64_t capacity, std::uint64_t max_payload) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << path;
  const ring::ParamBlock block{capacity, max_payload};
  ASSERT_EQ(::pwrite(fd, &block, sizeof block, offsetof(SegmentHeader, params)),
            static_cast<ssize_t>(sizeof block));
  const std::uint64_t total = kHeaderSize + round_up(ring::kBufferOffset + capacity, kPageSize);
  ASSERT_EQ(::pwrite(fd, &total, sizeof total, offsetof(SegmentHeader, total_size)),
            static_cast<ssize_t>(sizeof total));
  std::vector<char> h(offsetof(SegmentHeader, header_crc));
  ASSERT_EQ(::pread(fd, h.data(), h.size(), 0), static_cast<ssize_t>(h.size()));
  const std::uint32_t crc = crc32c(h.data(), h.size());
  ASSERT_EQ(::pwrite(fd, &crc, sizeof crc, offsetof(SegmentHeader, header_crc)),
            static_cast<ssize_t>(sizeof crc));
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(total)), 0);
  ::close(fd);
}

TEST(SpscRingLimits, MaxPayloadIsCappedByTheLengthField) {
  EXPECT_EQ(ring::max_payload_for(1ull << 33), (1ull << 32) - 8);
  EXPECT_EQ(ring::max_payload_for(1ull << 34), ring::kMaxRecordPayload);
  EXPECT_EQ(ring::max_payload_for(ring::kMaxCapacity), ring::kMaxRecordPayload);
  EXPECT_EQ(ring::max_payload_for(1024), 504u);
}

TEST(SpscRingLimits, RecordOverTheLengthFieldIsRefusedInA16GiBRing) {
  test::TempRoot root;
  {
    auto s = create_ring("big", {.capacity_bytes = 64});
    ASSERT_TRUE(s) << s.error().message;
  }
  constexpr std::uint64_t kCapacity = 1ull << 34;
  // What an older build stored: half the ring, past the 32-bit length field.
  grow_sparse(root.file("big"), kCapacity, ring::uncapped_max_payload_for(kCapacity));

  auto p = RingProducer::open("big");
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ(p->max_payload(), ring::kMaxRecordPayload);

  constexpr std::size_t kOver = (std::size_t{1} << 32) + 8;  // 4 GiB + 8
  auto r = p->try_reserve(kOver);
  ASSERT_FALSE(r) << "a record of 4 GiB + 8 was accepted: its length would be truncated";
  EXPECT_EQ(r.error().code, Errc::TooLarge);
  EXPECT_THAT(r.error().message, HasSubstr("record of 4294967304 bytes"));
  EXPECT_THAT(r.error().message, HasSubstr("maximum of 4294967288 bytes"));
  EXPECT_THAT(r.error().message, HasSubstr("32-bit length field"));

  // One byte past the cap is refused too; the cap itself is the largest record.
  auto r2 = p->try_reserve(ring::kMaxRecordPayload + 1);
  ASSERT_FALSE(r2);
  EXPECT_EQ(r2.error().code, Errc::TooLarge);
}

}  // namespace
}  // namespace shm
