// ChannelParams::for_payload: the derived parameters are valid for a range of
// payload sizes, create_channel accepts them, a payload of the requested size
// is admitted, and `in_flight` such payloads fit before any back-pressure.
#include "common/temp_root.hpp"
#include "shm/channel/consumer.hpp"
#include "shm/channel/producer.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

namespace shm {
namespace {

using namespace std::chrono_literals;

struct ParamsCase {
  std::size_t max_payload;
  std::size_t in_flight;
};

const std::vector<ParamsCase>& cases() {
  static const std::vector<ParamsCase> all = {
      {1, 1},      {1, 64},     {7, 3},       {8, 4},
      {63, 64},    {64, 64},    {65, 64},     {100, 1},
      {512, 64},   {512, 1000}, {4096, 2},    {4096, 64},
      {4097, 7},   {65536, 8},  {1 << 20, 1}, {(1 << 20) + 3, 2},
      {24, 100000}};
  return all;
}

std::string label(const ParamsCase& c) {
  return std::to_string(c.max_payload) + " bytes x " + std::to_string(c.in_flight);
}

TEST(ChannelParamsForPayload, ValidAndLargeEnoughForEverySize) {
  for (const ParamsCase& c : cases()) {
    SCOPED_TRACE(label(c));
    auto p = ChannelParams::for_payload(c.max_payload, c.in_flight);
    ASSERT_TRUE(p) << p.error().what();
    EXPECT_TRUE(channel::validate(*p)) << channel::validate(*p).error().what();
    EXPECT_GE(channel::param_block(*p).max_payload, c.max_payload);
    // P - 1 pages hold in_flight payloads of max_payload, by bytes and by cells.
    const std::uint64_t per_page = p->page_bytes / page::aligned_length(c.max_payload);
    EXPECT_GE((p->pages - 1) * std::min<std::uint64_t>(per_page, p->descriptors_per_page),
              c.in_flight);
    EXPECT_GE(p->ring_cells, std::uint64_t{p->pages} * p->descriptors_per_page);
  }
}

TEST(ChannelParamsForPayload, LargestPagesAreValid) {
  // Valid, though nobody would create them here: 4 pages of 2 GiB.
  for (const ParamsCase& c : std::vector<ParamsCase>{
           {std::size_t{1} << 31, 1}, {std::size_t{1} << 30, 6}, {std::size_t{1} << 20, 6144}}) {
    SCOPED_TRACE(label(c));
    auto p = ChannelParams::for_payload(c.max_payload, c.in_flight);
    ASSERT_TRUE(p) << p.error().what();
    EXPECT_TRUE(channel::validate(*p));
    EXPECT_EQ(p->page_bytes, channel::kMaxPageBytes);
  }
}

TEST(ChannelParamsForPayload, RefusesWhatNoPageCanHold) {
  for (const ParamsCase& c : std::vector<ParamsCase>{{0, 1},
                                                     {1, 0},
                                                     {(std::size_t{1} << 31) + 1, 1},
                                                     {std::size_t{1} << 31, 4},
                                                     {std::size_t{1} << 20, 8192},
                                                     {8, (std::size_t{3} << 24) + 3}}) {
    SCOPED_TRACE(label(c));
    auto p = ChannelParams::for_payload(c.max_payload, c.in_flight);
    ASSERT_FALSE(p);
    EXPECT_EQ(p.error().code, Errc::InvalidArgument) << p.error().what();
  }
}

// Creates the channel, sends in_flight payloads of max_payload bytes without
// receiving any (every one admitted at once: no back-pressure), then
// receives and checks them all.
TEST(ChannelParamsForPayload, CreateAcceptsAndInFlightPayloadsOfThatSizeAreAdmitted) {
  test::TempRoot root;
  int n = 0;
  for (const ParamsCase& c : cases()) {
    if (c.max_payload * c.in_flight > (std::size_t{16} << 20)) continue;  // keep /dev/shm small
    SCOPED_TRACE(label(c));
    auto p = ChannelParams::for_payload(c.max_payload, c.in_flight);
    ASSERT_TRUE(p) << p.error().what();
    const std::string name = "params" + std::to_string(n++);
    auto seg = create_channel(name, *p);
    ASSERT_TRUE(seg) << seg.error().what();
    auto tx = ChannelProducer::open(name);
    ASSERT_TRUE(tx) << tx.error().what();
    auto rx = ChannelConsumer::open(name);
    ASSERT_TRUE(rx) << rx.error().what();
    const auto pattern = [&](std::size_t i) {
      std::vector<std::byte> v(c.max_payload, static_cast<std::byte>(i));
      v.back() = static_cast<std::byte>(i * 7 + 1);
      return v;
    };
    for (std::size_t i = 0; i < c.in_flight; ++i) {
      auto sent = tx->try_send(pattern(i));
      ASSERT_TRUE(sent) << sent.error().what();
      ASSERT_TRUE(sent->admitted()) << "payload " << i << ": " << to_string(sent->status);
    }
    std::vector<std::byte> out(c.max_payload);
    for (std::size_t i = 0; i < c.in_flight; ++i) {
      auto got = rx->try_receive_into(out);
      ASSERT_TRUE(got) << got.error().what();
      ASSERT_EQ(got->status, ReceiveStatus::Received) << "payload " << i;
      ASSERT_EQ(got->size, c.max_payload);
      ASSERT_TRUE(out == pattern(i)) << "payload " << i;
    }
    ASSERT_TRUE(tx->finish());
    auto end = rx->try_receive_into(out);
    ASSERT_TRUE(end) << end.error().what();
    EXPECT_EQ(end->status, ReceiveStatus::End);
  }
  EXPECT_GT(n, 10);
}

}  // namespace
}  // namespace shm
