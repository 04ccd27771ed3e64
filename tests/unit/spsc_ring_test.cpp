#include "common/temp_root.hpp"
#include "shm/ring_consumer.hpp"
#include "shm/ring_producer.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace shm {
namespace {

using namespace std::chrono_literals;

std::span<const std::byte> bytes(const std::string& s) { return std::as_bytes(std::span(s)); }
std::string str(std::span<const std::byte> b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

class SpscRingTest : public ::testing::Test {
 protected:
  test::TempRoot root_;
};

TEST_F(SpscRingTest, PushThenPopReturnsTheSameRecordsInOrder) {
  auto p = RingProducer::create("r", {.capacity = 1024});
  ASSERT_TRUE(p) << p.error().what();
  auto c = RingConsumer::open("r");
  ASSERT_TRUE(c) << c.error().what();
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(*p->try_push(bytes("rec" + std::to_string(i))));
  for (int i = 0; i < 10; ++i) {
    auto r = c->try_peek();
    ASSERT_TRUE(r && *r);
    EXPECT_EQ(str(**r), "rec" + std::to_string(i));
    c->release();
  }
  auto r = c->try_peek();
  ASSERT_TRUE(r);
  EXPECT_FALSE(*r);
}

TEST_F(SpscRingTest, WrapsWithPaddingRecordAcrossManyLaps) {
  auto p = RingProducer::create("r", {.capacity = 256});
  auto c = RingConsumer::open("r");
  ASSERT_TRUE(p && c);
  std::uint64_t sent = 0, got = 0;
  std::vector<std::byte> buf(256);
  for (int lap = 0; lap < 2000; ++lap) {
    const std::size_t n = (lap * 37) % (p->max_payload() + 1);
    std::string s(n, static_cast<char>('a' + lap % 26));
    auto ok = p->try_push(bytes(s));
    ASSERT_TRUE(ok) << ok.error().what();
    if (*ok) ++sent;
    auto r = c->try_pop(buf);
    ASSERT_TRUE(r) << r.error().what();
    if (*r) {
      ++got;
      ASSERT_EQ(**r, n);
      EXPECT_EQ(std::memcmp(buf.data(), s.data(), n), 0);
    }
  }
  EXPECT_EQ(sent, got);
}

TEST_F(SpscRingTest, TooLargeRecordIsRejectedWithLimitInMessage) {
  auto p = RingProducer::create("r", {.capacity = 256});
  ASSERT_TRUE(p);
  auto r = p->try_reserve(p->max_payload() + 1);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::TooLarge);
  EXPECT_NE(r.error().message.find(std::to_string(p->max_payload())), std::string::npos);
}

TEST_F(SpscRingTest, BlockingConsumerWakesForProducerThread) {
  auto p = RingProducer::create("r", {.capacity = 4096});
  auto c = RingConsumer::open("r");
  ASSERT_TRUE(p && c);
  std::thread t([&] {
    std::this_thread::sleep_for(50ms);
    ASSERT_TRUE(*p->try_push(bytes("late")));
  });
  auto r = c->peek(5s);
  t.join();
  ASSERT_TRUE(r && *r);
  EXPECT_EQ(str(**r), "late");
}

}  // namespace
}  // namespace shm
