// A buggy or hostile process can write anything into the mapping. Every
// position and length the ring reads from it is checked: Errc::Corrupt, never
// a crash or an out-of-bounds access (ASan checks the latter).
#include "common/temp_root.hpp"
#include "common/text.hpp"
#include "shm/segment/kind.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace shm {
namespace {

using ::testing::HasSubstr;

using test::bytes;

class SpscRingCorruptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto p = RingProducer::create("r", {.capacity_bytes = 1024});
    ASSERT_TRUE(p);
    producer_ = std::move(*p);
    auto c = RingConsumer::open("r");
    ASSERT_TRUE(c);
    consumer_ = std::move(*c);
    auto s = open_ring("r");
    ASSERT_TRUE(s);
    raw_ = std::move(*s);
  }
  ring::RingControl& control() { return *reinterpret_cast<ring::RingControl*>(raw_.data().data()); }
  std::byte* buffer() { return raw_.data().data() + ring::kBufferOffset; }
  std::vector<std::string> verify() { return kSpscRingDescriptor.verify(raw_); }

  test::TempRoot root_;
  RingProducer producer_;
  RingConsumer consumer_;
  Segment raw_;  // a third mapping, playing the hostile writer
};

TEST_F(SpscRingCorruptTest, TailHintMoreThanARingAheadRefusesAttach) {
  control().producer.tail.store(1u << 20);
  producer_ = RingProducer();
  consumer_ = RingConsumer();
  auto p = RingProducer::open("r");
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().code, Errc::Corrupt);
  EXPECT_THAT(p.error().message, HasSubstr("tail 1048576 are impossible"));
  auto c = RingConsumer::open("r");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, Errc::Corrupt);
  EXPECT_FALSE(verify().empty());
}

TEST_F(SpscRingCorruptTest, UnalignedHeadRefusesAttach) {
  control().consumer.head.store(13);
  consumer_ = RingConsumer();
  auto c = RingConsumer::open("r");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, Errc::Corrupt);
  EXPECT_THAT(c.error().message, HasSubstr("head 13"));
}

TEST_F(SpscRingCorruptTest, HeaderOfAnotherLapIsCorrupt) {
  // Lap 5 at position 0: neither empty, nor lap 0, nor the previous lap.
  detail::header_at(buffer()).store(ring::header_word(3, ring::kRecordData, 5));
  auto r = consumer_.try_peek();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::Corrupt);
  EXPECT_THAT(r.error().message, HasSubstr("neither empty nor of lap 0 or 16777215"));
  std::byte out[16];
  auto popped = consumer_.try_pop(out);  // the inline "empty" answer must not take it
  ASSERT_FALSE(popped);
  EXPECT_EQ(popped.error().code, Errc::Corrupt);
  EXPECT_THAT(popped.error().message, HasSubstr("neither empty nor of lap 0 or 16777215"));
  EXPECT_THAT(verify(), ::testing::Contains(HasSubstr("neither empty nor of lap 0")));
}

TEST_F(SpscRingCorruptTest, HeaderOfThePreviousLapReadsEmpty) {
  // The header of the record one lap back (not yet overwritten) is no record.
  std::byte out[16];
  for (const std::uint32_t type : {ring::kRecordData, ring::kRecordPadding}) {
    SCOPED_TRACE(type);
    detail::header_at(buffer()).store(ring::header_word(3, type, ring::kLapMask));
    auto r = consumer_.try_peek();
    ASSERT_TRUE(r);
    EXPECT_FALSE(*r);
    auto popped = consumer_.try_pop(out);
    ASSERT_TRUE(popped);
    EXPECT_FALSE(*popped);
    EXPECT_TRUE(verify().empty());
  }
  // And a foreign type of the previous lap is still Corrupt, for both calls.
  detail::header_at(buffer()).store(ring::header_word(3, 0x51, ring::kLapMask));
  auto r = consumer_.try_peek();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::Corrupt);
  auto popped = consumer_.try_pop(out);
  ASSERT_FALSE(popped);
  EXPECT_EQ(popped.error().code, Errc::Corrupt);
}

TEST_F(SpscRingCorruptTest, GarbageRecordLengthIsCorruptNotAnOverread) {
  ASSERT_TRUE(*producer_.try_push(bytes("hello")));
  const std::uint32_t huge = 0x7fffffff;
  std::memcpy(buffer(), &huge, sizeof huge);
  auto r = consumer_.try_peek();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::Corrupt);
  EXPECT_THAT(r.error().message, HasSubstr("record length 2147483647"));
  EXPECT_THAT(verify(), ::testing::Contains(HasSubstr("length 2147483647")));
}

TEST_F(SpscRingCorruptTest, RecordCrossingTheBufferEndIsCorrupt) {
  const std::string big(288, 'b');  // 296-byte records
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(*producer_.try_push(bytes(big)));
    ASSERT_TRUE(*consumer_.try_peek());
  }
  consumer_.release();
  ASSERT_TRUE(*producer_.try_push(bytes("hello")));  // at offset 592
  const std::uint32_t len = 480;                     // within max_payload, past the buffer end
  std::memcpy(buffer() + 592, &len, sizeof len);
  auto r = consumer_.try_peek();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::Corrupt);
  EXPECT_THAT(r.error().message, HasSubstr("record length 480"));
}

TEST_F(SpscRingCorruptTest, UnknownRecordTypeIsCorrupt) {
  ASSERT_TRUE(*producer_.try_push(bytes("hello")));
  const std::uint32_t type = 0xabcd;
  std::memcpy(buffer() + 4, &type, sizeof type);
  auto r = consumer_.try_peek();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::Corrupt);
  EXPECT_THAT(r.error().message, HasSubstr("record header 0x0000abcd00000005"));
}

TEST_F(SpscRingCorruptTest, WrongPaddingLengthIsCorrupt) {
  ASSERT_TRUE(*producer_.try_push(bytes("hello")));
  const ring::RecordHeader pad{8, ring::kRecordPadding};  // must fill to the end
  std::memcpy(buffer(), &pad, sizeof pad);
  auto r = consumer_.try_peek();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::Corrupt);
  EXPECT_THAT(r.error().message, HasSubstr("padding"));
}

TEST_F(SpscRingCorruptTest, HeadBeyondTailIsCorruptForProducer) {
  // Fill so that the producer must refresh head, then poison head.
  std::string rec(100, 'x');
  while (*producer_.try_push(bytes(rec))) {
  }
  control().consumer.head.store(1u << 30);
  auto r = producer_.try_push(bytes(rec));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::Corrupt);
  EXPECT_THAT(r.error().message, HasSubstr("consumer head 1073741824"));
}

TEST_F(SpscRingCorruptTest, ImpossiblePositionsRefuseAttach) {
  control().consumer.head.store(64);
  control().producer.tail.store(64 + 2048);  // the hint two rings ahead of head
  auto c = RingConsumer::open("r");
  // The live consumer still holds the role; a fresh process would see Corrupt.
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, Errc::RoleTaken);
  consumer_ = RingConsumer();
  c = RingConsumer::open("r");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, Errc::Corrupt);
  EXPECT_THAT(c.error().message, HasSubstr("impossible"));
}

TEST_F(SpscRingCorruptTest, VerifyAndDumpOfHealthyRingAgree) {
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(*producer_.try_push(bytes("r" + std::to_string(i))));
  EXPECT_TRUE(verify().empty());
  const auto records = kSpscRingDescriptor.dump(raw_, 3);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(records[2].data()), records[2].size()), "r2");
}

}  // namespace
}  // namespace shm
