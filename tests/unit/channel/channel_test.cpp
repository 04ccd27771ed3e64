// Channel (ADR-0010) in one process: rotation, quota, seams, reuse, every
// terminal fault, blocking, and a differential oracle. Multi-process
// behaviour (kill -9 at fault points, zero allocation) is in
// tests/integration/channel/channel_process_test.cpp.
#include "shm/testing/channel.hpp"
#include "common/scale.hpp"
#include "common/temp_root.hpp"
#include "common/text.hpp"
#include "helpers/channel/channel_payload.hpp"
#include "shm/spsc/layout.hpp"

#include <gtest/gtest.h>

#include <array>
#include <deque>
#include <new>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace shm {
namespace {

using namespace std::chrono_literals;
using detail::ChannelTesting;

using test::bytes;
using test::str;

class ChannelTest : public ::testing::Test {
 protected:
  struct Pair {
    ChannelProducer producer;
    ChannelConsumer consumer;
  };
  static Pair make(const ChannelParams& params, std::uint64_t first_epoch = 0) {
    if (first_epoch == 0) {
      auto seg = create_channel("ch", params);
      EXPECT_TRUE(seg) << seg.error().what();
    } else {
      auto seg = detail::create_channel_for_test("ch", params, {.first_epoch = first_epoch});
      EXPECT_TRUE(seg) << seg.error().what();
    }
    auto p = ChannelProducer::open("ch");
    EXPECT_TRUE(p) << p.error().what();
    auto c = ChannelConsumer::open("ch");
    EXPECT_TRUE(c) << c.error().what();
    return Pair{std::move(*p), std::move(*c)};
  }
  static SendOutcome send(ChannelProducer& p, const std::string& s) {
    auto r = p.try_send(bytes(s));
    EXPECT_TRUE(r) << r.error().what();
    return r ? *r : SendOutcome{};
  }
  // Receives one payload and gives it back; returns its text.
  static std::string take(ChannelConsumer& c, std::uint64_t* sequence = nullptr,
                          std::uint64_t* epoch = nullptr) {
    auto r = c.try_receive();
    EXPECT_TRUE(r) << r.error().what();
    if (!r) return "<error>";
    EXPECT_EQ(r->status, ReceiveStatus::Received);
    if (!*r) return "<none>";
    if (sequence) *sequence = r->lease.sequence();
    if (epoch) *epoch = r->lease.epoch();
    return str(r->lease.bytes());
  }
  static channel::View view_of(const ChannelProducer& p) { return ChannelTesting::view(p); }
  // Waits (up to a generous deadline) until a blocking call announced it is
  // going to sleep (`flag`: waiters.consumer_parked or producer_parked), so
  // what follows must wake it: acting before the park would pass without
  // exercising the wake. False on timeout.
  static bool wait_until_parked(const std::atomic<std::uint32_t>& flag) {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (std::chrono::steady_clock::now() < deadline) {
      if (flag.load() != 0) return true;
      std::this_thread::sleep_for(1ms);
    }
    return false;
  }

  test::TempRoot root_;
};

// ---------------------------------------------------------------- parameters

TEST_F(ChannelTest, CreateRejectsInvalidParametersNamingTheField) {
  const ChannelParams good{
      .pages = 4, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 16};
  struct Case {
    ChannelParams params;
    std::string needle;
  };
  std::vector<Case> cases;
  auto bad = good;
  bad.pages = 3;
  cases.push_back({bad, "pages 3 must be a power of two"});
  bad = good;
  bad.pages = 1;
  cases.push_back({bad, "pages 1"});
  bad = good;
  bad.page_bytes = 100;
  cases.push_back({bad, "page_bytes 100 must be a multiple of 8"});
  bad = good;
  bad.descriptors_per_page = 0;
  cases.push_back({bad, "descriptors_per_page 0"});
  bad = good;
  bad.ring_cells = 12;
  cases.push_back({bad, "ring_cells 12"});
  for (const auto& c : cases) {
    auto p = ChannelProducer::create("bad", c.params);
    ASSERT_FALSE(p);
    EXPECT_EQ(p.error().code, Errc::InvalidArgument);
    EXPECT_NE(p.error().message.find(c.needle), std::string::npos) << p.error().message;
  }
}

TEST_F(ChannelTest, OpenChecksEveryParameterAgainstTheSegment) {
  const ChannelParams params{
      .pages = 4, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 16};
  ASSERT_TRUE(create_channel("ch", params));
  auto wrong = params;
  wrong.pages = 8;
  auto c = ChannelConsumer::open("ch", wrong);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, Errc::ParamMismatch);
  EXPECT_NE(c.error().message.find("pages: segment has 4, caller expects 8"), std::string::npos)
      << c.error().message;
  auto c2 = ChannelConsumer::open("ch", {.page_bytes = 512});
  ASSERT_FALSE(c2);
  EXPECT_NE(c2.error().message.find("page_bytes: segment has 256, caller expects 512"),
            std::string::npos);
  auto c3 = ChannelConsumer::open("ch", {.descriptors_per_page = 9});
  ASSERT_FALSE(c3);
  EXPECT_NE(c3.error().message.find("descriptors_per_page: segment has 8, caller expects 9"),
            std::string::npos);
  auto c4 = ChannelConsumer::open("ch", {.ring_cells = 32});
  ASSERT_FALSE(c4);
  EXPECT_NE(c4.error().message.find("ring_cells: segment has 16, caller expects 32"),
            std::string::npos);
  EXPECT_TRUE(ChannelConsumer::open("ch", params));
}

TEST_F(ChannelTest, OpenRefusesASegmentOfAnotherKind) {
  ASSERT_TRUE(create_ring("ring", {.capacity_bytes = 1024}));
  auto c = ChannelConsumer::open("ring");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, Errc::KindMismatch);
  EXPECT_NE(c.error().message.find("segment has spsc_ring (1), caller expects channel (2)"),
            std::string::npos)
      << c.error().message;
}

TEST_F(ChannelTest, RolesAreExclusive) {
  auto [p, c] = make({.pages = 2, .page_bytes = 64, .descriptors_per_page = 4, .ring_cells = 8});
  auto p2 = ChannelProducer::open("ch");
  ASSERT_FALSE(p2);
  EXPECT_EQ(p2.error().code, Errc::RoleTaken);
  auto c2 = ChannelConsumer::open("ch");
  ASSERT_FALSE(c2);
  EXPECT_EQ(c2.error().code, Errc::RoleTaken);
}

// ---------------------------------------------------------------- basic flow

TEST_F(ChannelTest, SendThenReceiveReturnsTheSamePayloadsInOrder) {
  auto [p, c] =
      make({.pages = 4, .page_bytes = 1024, .descriptors_per_page = 16, .ring_cells = 64});
  for (int i = 0; i < 10; ++i) {
    const SendOutcome o = send(p, "msg" + std::to_string(i));
    ASSERT_TRUE(o.admitted());
    EXPECT_EQ(o.sequence, static_cast<std::uint64_t>(i));
    EXPECT_EQ(o.epoch, 0u);
  }
  for (int i = 0; i < 10; ++i) {
    std::uint64_t seq = 99;
    EXPECT_EQ(take(c, &seq), "msg" + std::to_string(i));
    EXPECT_EQ(seq, static_cast<std::uint64_t>(i));
  }
  auto r = c.try_receive();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, ReceiveStatus::Empty);
}

TEST_F(ChannelTest, LeaseIsAZeroCopyViewIntoThePage) {
  auto [p, c] = make({.pages = 2, .page_bytes = 256, .descriptors_per_page = 4, .ring_cells = 8});
  send(p, "zero-copy");
  auto r = c.try_receive();
  ASSERT_TRUE(r && *r);
  const channel::View v = ChannelTesting::view(c);  // the consumer's own mapping
  EXPECT_EQ(r->lease.data(), v.arena(0)) << "the lease points into slot 0's arena";
  EXPECT_EQ(r->lease.size(), 9u);
  EXPECT_EQ(r->lease.generation(), 0u);
}

TEST_F(ChannelTest, ReserveWriteCommitPublishesOnlyTheCommittedBytes) {
  auto [p, c] = make({.pages = 2, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 8});
  auto r = p.try_reserve(64);
  ASSERT_TRUE(r && *r) << (r ? "" : r.error().what());
  std::memcpy(r->bytes().data(), "partial", 7);
  auto peek = c.try_receive();
  ASSERT_TRUE(peek);
  EXPECT_EQ(peek->status, ReceiveStatus::Empty) << "nothing is visible before commit";
  const auto o = r->commit(7);
  ASSERT_TRUE(o) << o.error().what();
  EXPECT_TRUE(o->admitted());
  EXPECT_FALSE(r->pending());
  EXPECT_TRUE(r->bytes().empty()) << "a committed reservation exposes no bytes";
  EXPECT_EQ(take(c), "partial");
  // An abandoned reservation leaves no trace and its bytes are reused.
  auto r2 = p.try_reserve(32);
  ASSERT_TRUE(r2 && *r2);
  std::byte* where = r2->bytes().data();
  r2->abandon();
  EXPECT_TRUE(r2->bytes().empty());
  auto r3 = p.try_reserve(8);
  ASSERT_TRUE(r3 && *r3);
  EXPECT_EQ(r3->bytes().data(), where);
  std::memcpy(r3->bytes().data(), "after", 5);
  ASSERT_TRUE(r3->commit(5));
  std::uint64_t seq = 0;
  EXPECT_EQ(take(c, &seq), "after");
  EXPECT_EQ(seq, 1u) << "the abandoned reservation used no sequence";
}

TEST_F(ChannelTest, ReceiveIntoCopiesThePayloadOutAndGivesItBack) {
  auto [p, c] = make({.pages = 2, .page_bytes = 64, .descriptors_per_page = 2, .ring_cells = 8});
  send(p, "first");
  send(p, "second");
  send(p, "third");  // epoch 1
  std::array<std::byte, 16> out{};
  auto small = c.try_receive_into(std::span(out).first(3));
  ASSERT_FALSE(small);
  EXPECT_EQ(small.error().code, Errc::TooLarge);
  EXPECT_NE(small.error().message.find("payload of 5 bytes (sequence 0) does not fit the 3-byte"),
            std::string::npos)
      << small.error().message;
  EXPECT_EQ(c.state(), ChannelState::Open) << "a small buffer is not a fault";
  for (const std::string want : {"first", "second", "third"}) {
    auto r = c.try_receive_into(out);
    ASSERT_TRUE(r) << r.error().what();
    ASSERT_EQ(r->status, ReceiveStatus::Received);
    EXPECT_EQ(str(std::span(out).first(r->size)), want);
  }
  EXPECT_FALSE(c.lease_held()) << "nothing is on loan after a copy";
  EXPECT_EQ(c.next_sequence(), 3u);
  auto empty = c.try_receive_into(out);
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->status, ReceiveStatus::Empty);
  ASSERT_TRUE(p.finish());
  auto end = c.receive_into(out, 5s);
  ASSERT_TRUE(end) << end.error().what();
  EXPECT_EQ(end->status, ReceiveStatus::End);
}

TEST_F(ChannelTest, ReceiveIntoRefusesWhileALeaseIsHeld) {
  auto [p, c] = make({.pages = 2, .page_bytes = 64, .descriptors_per_page = 2, .ring_cells = 8});
  send(p, "a");
  send(p, "b");
  auto lease = c.try_receive();
  ASSERT_TRUE(lease && *lease);
  std::array<std::byte, 8> out{};
#ifdef NDEBUG
  auto r = c.try_receive_into(out);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::InvalidArgument);
#else
  EXPECT_DEATH((void)c.try_receive_into(out), "lease is held");
#endif
  lease->lease.release();
  auto r2 = c.try_receive_into(out);
  ASSERT_TRUE(r2 && *r2);
  EXPECT_EQ(r2->sequence, 1u);
}

TEST_F(ChannelTest, SecondReservationWhileOneIsOutstandingIsRefused) {
  auto [p, c] = make({.pages = 2, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 8});
  auto held = p.try_reserve(8);
  ASSERT_TRUE(held && *held);
#ifdef NDEBUG
  auto again = p.try_reserve(8);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, Errc::InvalidArgument);
  EXPECT_NE(again.error().message.find("reservation is outstanding"), std::string::npos);
#else
  EXPECT_DEATH((void)p.try_reserve(8), "reservation is outstanding");
#endif
}

TEST_F(ChannelTest, ZeroLengthPayloadsUseACellButNoBytes) {
  auto [p, c] = make({.pages = 2, .page_bytes = 64, .descriptors_per_page = 3, .ring_cells = 8});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(send(p, "").epoch, 0u);
  EXPECT_EQ(send(p, "").epoch, 1u) << "the fourth needs a fresh page: cells ran out";
  for (int i = 0; i < 4; ++i) EXPECT_EQ(take(c), "");
}

TEST_F(ChannelTest, TooLargePayloadIsRejectedWithTheLimit) {
  auto [p, c] = make({.pages = 2, .page_bytes = 128, .descriptors_per_page = 4, .ring_cells = 8});
  auto r = p.try_send(bytes(std::string(129, 'x')));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::TooLarge);
  EXPECT_NE(r.error().message.find("129 bytes exceeds an empty page (128 bytes)"),
            std::string::npos)
      << r.error().message;
  send(p, "a");
  const SendOutcome full = send(p, std::string(128, 'y'));
  EXPECT_TRUE(full.admitted()) << "a payload of exactly one page fits a fresh page";
  EXPECT_EQ(full.epoch, 1u);
  EXPECT_EQ(take(c), "a");
  EXPECT_EQ(take(c), std::string(128, 'y'));
}

// ---------------------------------------------------------------- rotation

TEST_F(ChannelTest, RotatesWhenThePageRunsOutOfBytes) {
  auto [p, c] = make({.pages = 4, .page_bytes = 256, .descriptors_per_page = 64, .ring_cells = 64});
  const std::string payload(100, 'b');  // 104 bytes with alignment: two per page
  std::vector<std::uint64_t> epochs;
  for (int i = 0; i < 6; ++i) epochs.push_back(send(p, payload).epoch);
  EXPECT_EQ(epochs, (std::vector<std::uint64_t>{0, 0, 1, 1, 2, 2}));
  const channel::View v = view_of(p);
  EXPECT_EQ(v.control->stats.rotations.load(), 2u);
  EXPECT_EQ(v.control->producer.active_epoch.load(), 2u);
  EXPECT_EQ(v.slot_header(0)->binding.state.load(), page::kSealed);
  EXPECT_EQ(v.slot_header(1)->binding.state.load(), page::kSealed);
  EXPECT_EQ(v.slot_header(2)->binding.state.load(), page::kOpen);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(take(c), payload);
}

TEST_F(ChannelTest, RotatesWhenThePageRunsOutOfDescriptorCells) {
  auto [p, c] = make({.pages = 4, .page_bytes = 4096, .descriptors_per_page = 3, .ring_cells = 64});
  std::vector<std::uint64_t> epochs;
  for (int i = 0; i < 7; ++i) epochs.push_back(send(p, "x").epoch);
  EXPECT_EQ(epochs, (std::vector<std::uint64_t>{0, 0, 0, 1, 1, 1, 2}));
  const channel::View v = view_of(p);
  EXPECT_EQ(v.slot_header(0)->publication.published.load(), 3u);
  EXPECT_LT(v.slot_header(0)->publication.used_bytes.load(), 4096u) << "bytes were left over";
}

TEST_F(ChannelTest, SequencesStayContinuousAcrossSeamsAndGenerationsAdvance) {
  auto [p, c] = make({.pages = 4, .page_bytes = 128, .descriptors_per_page = 3, .ring_cells = 64});
  for (std::uint64_t i = 0; i < 20; ++i) {
    const SendOutcome o = send(p, std::string(i % 50, 's'));
    ASSERT_TRUE(o.admitted());
    EXPECT_EQ(o.sequence, i);
    std::uint64_t seq = 0, epoch = 0;
    EXPECT_EQ(take(c, &seq, &epoch), std::string(i % 50, 's'));
    EXPECT_EQ(seq, i);
    EXPECT_EQ(epoch, o.epoch);
    EXPECT_EQ(c.current_epoch(), o.epoch);
  }
  EXPECT_GE(p.active_epoch(), 5u);
  // Each page's first sequence continues the previous page's last.
  const channel::View v = view_of(p);
  const std::uint64_t e = p.active_epoch();
  const auto* prev = v.slot_header((e - 1) & 3);
  const auto* cur = v.slot_header(e & 3);
  EXPECT_EQ(cur->binding.first_sequence.load(),
            prev->binding.first_sequence.load() + prev->publication.published.load());
}

TEST_F(ChannelTest, PageQuotaExhaustedMutatesNothingThenAdmitsOnceTheConsumerCrossesTheSeam) {
  auto [p, c] = make({.pages = 2, .page_bytes = 64, .descriptors_per_page = 2, .ring_cells = 16});
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(send(p, "p" + std::to_string(i)).admitted());
  EXPECT_EQ(p.active_epoch(), 1u);
  const channel::View v = view_of(p);
  // Snapshot everything a refusal could touch: ring, both pages, positions.
  std::byte* ring_begin = reinterpret_cast<std::byte*>(v.ring);
  const std::vector<std::byte> before(ring_begin, v.slot(0) + 2 * v.params.slot_stride);
  const std::uint64_t tail = v.control->producer.tail.load();
  const std::uint64_t active = v.control->producer.active_epoch.load();
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto r = p.try_send(bytes("refused"));
    ASSERT_TRUE(r) << r.error().what();
    EXPECT_EQ(r->status, SendStatus::PageQuotaExhausted);
  }
  const std::vector<std::byte> after(ring_begin, v.slot(0) + 2 * v.params.slot_stride);
  EXPECT_EQ(before, after) << "a refused rotation changes no page or ring byte";
  EXPECT_EQ(v.control->producer.tail.load(), tail);
  EXPECT_EQ(v.control->producer.active_epoch.load(), active);
  EXPECT_EQ(v.slot_header(1)->binding.state.load(), page::kOpen) << "the active page stays open";
  EXPECT_EQ(v.control->stats.quota_refusals.load(), 3u);
  // The consumer drains epoch 0 and crosses into epoch 1: slot 0 is released.
  EXPECT_EQ(take(c), "p0");
  EXPECT_EQ(take(c), "p1");
  EXPECT_EQ(v.control->release.released_epoch.load(), 0u)
      << "nothing is released before the first descriptor of epoch 1";
  auto still = p.try_send(bytes("refused"));
  ASSERT_TRUE(still);
  EXPECT_EQ(still->status, SendStatus::PageQuotaExhausted);
  EXPECT_EQ(take(c), "p2");
  EXPECT_EQ(v.control->release.released_epoch.load(), 1u);
  const SendOutcome ok = send(p, "admitted");
  EXPECT_TRUE(ok.admitted());
  EXPECT_EQ(ok.epoch, 2u);
  EXPECT_EQ(take(c), "p3");
  EXPECT_EQ(take(c), "admitted");
}

TEST_F(ChannelTest, RefusedRotationLeavesTheActivePageUsableForSmallerPayloads) {
  auto [p, c] = make({.pages = 2, .page_bytes = 64, .descriptors_per_page = 8, .ring_cells = 16});
  send(p, std::string(60, 'a'));  // epoch 0: 64 bytes used
  send(p, std::string(40, 'b'));  // epoch 1: 40 of 64
  auto big = p.try_send(bytes(std::string(30, 'c')));
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, SendStatus::PageQuotaExhausted);
  const SendOutcome small = send(p, std::string(16, 'd'));
  EXPECT_TRUE(small.admitted());
  EXPECT_EQ(small.epoch, 1u);
}

TEST_F(ChannelTest, SlotIsReboundInPlaceAfterItsEpochIsReleased) {
  auto [p, c] = make({.pages = 2, .page_bytes = 64, .descriptors_per_page = 2, .ring_cells = 16});
  const channel::View v = view_of(p);
  const std::byte* arena0 = ChannelTesting::view(c).arena(0);  // the consumer's own mapping
  for (int i = 0; i < 4; ++i) send(p, "e" + std::to_string(i));
  for (int i = 0; i < 3; ++i) take(c);  // crosses into epoch 1: releases epoch 0
  const SendOutcome o = send(p, "reused");
  ASSERT_EQ(o.epoch, 2u);
  const page::SlotHeader* h = v.slot_header(0);
  EXPECT_EQ(h->binding.epoch.load(), 2u);
  EXPECT_EQ(h->binding.generation.load(), 2u);
  EXPECT_EQ(h->binding.first_sequence.load(), 4u);
  EXPECT_EQ(h->binding.state.load(), page::kOpen);
  EXPECT_EQ(h->publication.published.load(), 1u);
  take(c);
  auto r = c.try_receive();
  ASSERT_TRUE(r && *r);
  EXPECT_EQ(r->lease.data(), arena0) << "epoch 2 reuses slot 0's memory";
  EXPECT_EQ(r->lease.generation(), 2u);
}

TEST_F(ChannelTest, GenerationTagWrapsAtTwoToTheThirtyTwoWithASmallPool) {
  const std::uint64_t start = (1ull << 32) - 3;
  auto [p, c] =
      make({.pages = 2, .page_bytes = 64, .descriptors_per_page = 2, .ring_cells = 8}, start);
  std::vector<std::uint32_t> generations;
  for (std::uint64_t i = 0; i < 16; ++i) {
    const SendOutcome o = send(p, "w" + std::to_string(i));
    ASSERT_TRUE(o.admitted()) << "at " << i;
    EXPECT_EQ(o.epoch, start + i / 2);
    auto r = c.try_receive();
    ASSERT_TRUE(r && *r) << (r ? "empty" : r.error().what());
    EXPECT_EQ(str(r->lease.bytes()), "w" + std::to_string(i));
    EXPECT_EQ(r->lease.sequence(), i);
    EXPECT_EQ(r->lease.epoch(), o.epoch);
    if (generations.empty() || generations.back() != r->lease.generation())
      generations.push_back(r->lease.generation());
  }
  EXPECT_EQ(generations, (std::vector<std::uint32_t>{0xFFFFFFFDu, 0xFFFFFFFEu, 0xFFFFFFFFu, 0u, 1u,
                                                     2u, 3u, 4u}));
  EXPECT_GT(c.current_epoch(), 1ull << 32);
}

// ---------------------------------------------------------------- terminal faults

class ChannelFaultTest : public ChannelTest {
 protected:
  static void expect_fault(ChannelConsumer& c, Errc code, ChannelFault fault,
                           const std::string& needle) {
    auto r = c.try_receive();
    ASSERT_FALSE(r) << "expected a terminal error, got " << (r ? to_string(r->status) : "");
    EXPECT_EQ(r.error().code, code) << r.error().what();
    EXPECT_NE(r.error().message.find(needle), std::string::npos) << r.error().message;
    EXPECT_EQ(c.state(), ChannelState::Faulted);
    EXPECT_EQ(c.fault(), fault);
    // Terminal: the same error again, never a skip to the next payload.
    auto again = c.try_receive();
    ASSERT_FALSE(again);
    EXPECT_EQ(again.error().code, code);
  }
};

TEST_F(ChannelFaultTest, StaleDescriptorFailsIdentityTerminally) {
  auto [p, c] = make({.pages = 2, .page_bytes = 64, .descriptors_per_page = 2, .ring_cells = 16});
  for (int i = 0; i < 4; ++i) send(p, "e" + std::to_string(i));
  for (int i = 0; i < 3; ++i) take(c);
  send(p, "epoch2");  // slot 0 now holds epoch 2
  take(c);            // e3
  take(c);            // epoch2 (sequence 4): the consumer is in epoch 2
  // Replay a descriptor of epoch 0 (generation 0, slot 0) as the next one.
  ChannelTesting::push_descriptor(p, {5, 0, 0});
  expect_fault(c, Errc::Corrupt, ChannelFault::GenerationMismatch, "generation mismatch");
  // The producer sees the fault too.
  auto s = p.try_send(bytes("after"));
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, Errc::Faulted);
  EXPECT_NE(s.error().message.find("generation mismatch"), std::string::npos) << s.error().message;
}

TEST_F(ChannelFaultTest, DescriptorForAnEpochWhoseSlotIsNotBoundYetFailsIdentity) {
  auto [p, c] = make({.pages = 4, .page_bytes = 64, .descriptors_per_page = 2, .ring_cells = 16});
  send(p, "a");
  take(c);
  // Claims epoch 1 (generation 1) before the producer rotated: slot 1 is unbound.
  ChannelTesting::push_descriptor(p, {1, 1, 0});
  expect_fault(c, Errc::Corrupt, ChannelFault::GenerationMismatch, "slot 1 is bound to epoch 0");
}

TEST_F(ChannelFaultTest, RecycledSlotWithAnotherGenerationFailsIdentity) {
  auto [p, c] = make({.pages = 2, .page_bytes = 64, .descriptors_per_page = 2, .ring_cells = 16});
  const channel::View v = view_of(p);
  send(p, "a");
  // Simulate a slot rebound under the consumer: the binding no longer matches.
  v.slot_header(0)->binding.generation.store(2);
  v.slot_header(0)->binding.epoch.store(2);
  expect_fault(c, Errc::Corrupt, ChannelFault::GenerationMismatch, "slot binding changed");
}

TEST_F(ChannelFaultTest, SequenceGapIsTerminal) {
  auto [p, c] = make({.pages = 2, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 16});
  send(p, "a");
  take(c);
  ChannelTesting::push_descriptor(p, {2, 0, 1});  // expected sequence 1
  expect_fault(c, Errc::Corrupt, ChannelFault::SequenceGap, "expects sequence 1");
}

TEST_F(ChannelFaultTest, CountShortfallIsDetectedAtTheSeam) {
  auto [p, c] = make({.pages = 4, .page_bytes = 256, .descriptors_per_page = 2, .ring_cells = 16});
  send(p, "described");
  // The second cell of epoch 0 is published to the page but never reaches the ring.
  (void)ChannelTesting::publish_without_descriptor(p, bytes("orphan"));
  send(p, "next-epoch");  // rotates: the page of epoch 0 is sealed with 2 published
  EXPECT_EQ(take(c), "described");
  expect_fault(c, Errc::Corrupt, ChannelFault::CountShortfall,
               "epoch 0 committed 1 payloads but its sealed page published 2");
}

TEST_F(ChannelFaultTest, CountShortfallAtTheEndOfAStream) {
  auto [p, c] = make({.pages = 4, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 16});
  send(p, "one");
  (void)ChannelTesting::publish_without_descriptor(p, bytes("orphan"));
  ASSERT_TRUE(p.finish());
  EXPECT_EQ(take(c), "one");
  expect_fault(c, Errc::Corrupt, ChannelFault::CountShortfall,
               "end of stream: epoch 0 committed 1 payloads but its page published 2");
}

TEST_F(ChannelFaultTest, CorruptedPayloadFailsItsChecksum) {
  auto [p, c] = make({.pages = 2, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 16});
  send(p, "intact");
  send(p, "damaged");
  view_of(p).arena(0)[8 + 3] ^= std::byte{0x20};
  EXPECT_EQ(take(c), "intact");
  expect_fault(c, Errc::Corrupt, ChannelFault::ChecksumMismatch, "CRC32C");
}

TEST_F(ChannelFaultTest, CorruptedPayloadFailsItsChecksumWhenCopiedOutToo) {
  auto [p, c] = make({.pages = 2, .page_bytes = 2048, .descriptors_per_page = 8, .ring_cells = 16});
  send(p, std::string(1000, 'k'));  // long enough for the vector checksum path
  view_of(p).arena(0)[999] ^= std::byte{0x01};
  std::vector<std::byte> out(1024);
  auto r = c.try_receive_into(out);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::Corrupt);
  EXPECT_NE(r.error().message.find("CRC32C"), std::string::npos) << r.error().message;
  EXPECT_EQ(c.fault(), ChannelFault::ChecksumMismatch);
  auto again = c.try_receive_into(out);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, Errc::Corrupt);
}

TEST_F(ChannelFaultTest, DescriptorBeyondThePageIsOutOfBounds) {
  auto [p, c] = make({.pages = 2, .page_bytes = 256, .descriptors_per_page = 4, .ring_cells = 16});
  ChannelTesting::push_descriptor(p, {0, 0, 1000});
  expect_fault(c, Errc::Corrupt, ChannelFault::DescriptorOutOfBounds, "cell index beyond the page");
}

TEST_F(ChannelFaultTest, DescriptorOfAnUnpublishedCellIsOutOfBounds) {
  auto [p, c] = make({.pages = 2, .page_bytes = 256, .descriptors_per_page = 4, .ring_cells = 16});
  ChannelTesting::push_descriptor(p, {0, 0, 0});  // nothing published in the page
  expect_fault(c, Errc::Corrupt, ChannelFault::DescriptorOutOfBounds, "unpublished cell");
}

TEST_F(ChannelFaultTest, CellLengthBeyondTheArenaIsOutOfBounds) {
  auto [p, c] = make({.pages = 2, .page_bytes = 256, .descriptors_per_page = 4, .ring_cells = 16});
  send(p, "abc");
  view_of(p).cells(0)[0].length = 1u << 30;
  expect_fault(c, Errc::Corrupt, ChannelFault::DescriptorOutOfBounds, "outside the arena");
}

TEST_F(ChannelFaultTest, CorruptTerminalWordIsTerminal) {
  auto [p, c] = make({.pages = 2, .page_bytes = 256, .descriptors_per_page = 4, .ring_cells = 16});
  view_of(p).control->terminal.word.store(0x12345678u);
  expect_fault(c, Errc::Corrupt, ChannelFault::CorruptTerminal, "0x12345678");
}

TEST_F(ChannelFaultTest, ImpossibleTailIsCorruptState) {
  auto [p, c] = make({.pages = 2, .page_bytes = 256, .descriptors_per_page = 4, .ring_cells = 16});
  view_of(p).control->producer.tail.store(1000);
  expect_fault(c, Errc::Corrupt, ChannelFault::CorruptState, "producer tail 1000 is impossible");
}

TEST_F(ChannelFaultTest, ImpossibleReleasedEpochStopsTheProducer) {
  auto [p, c] = make({.pages = 2, .page_bytes = 64, .descriptors_per_page = 1, .ring_cells = 16});
  send(p, "a");
  send(p, "b");  // epoch 1
  view_of(p).control->release.released_epoch.store(77);
  auto r = p.try_send(bytes("c"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::Corrupt);
  EXPECT_NE(r.error().message.find("released_epoch 77"), std::string::npos) << r.error().message;
  EXPECT_EQ(p.fault(), ChannelFault::CorruptState);
}

// ---------------------------------------------------------------- leases, end, producer gone

TEST_F(ChannelTest, ReceivingWithALeaseHeldIsRefused) {
  auto [p, c] = make({.pages = 2, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 16});
  send(p, "a");
  send(p, "b");
  auto first = c.try_receive();
  ASSERT_TRUE(first && *first);
#ifdef NDEBUG
  auto second = c.try_receive();
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, Errc::InvalidArgument);
  EXPECT_NE(second.error().message.find("lease of sequence 0 is still held"), std::string::npos)
      << second.error().message;
#else
  EXPECT_DEATH((void)c.try_receive(), "lease is held");
#endif
  first->lease.release();
  EXPECT_FALSE(first->lease.held());
  EXPECT_EQ(take(c), "b");
}

// A released lease is empty: the page behind it may be rebound at any time
// once the consumer moves on, so its bytes must not stay reachable.
TEST_F(ChannelTest, ReleasedLeaseExposesNoBytes) {
  auto [p, c] = make({.pages = 2, .page_bytes = 64, .descriptors_per_page = 1, .ring_cells = 16});
  send(p, "first");
  auto r = c.try_receive();
  ASSERT_TRUE(r && *r);
  ChannelLease lease = std::move(r->lease);
  EXPECT_FALSE(r->lease.held());
  EXPECT_TRUE(r->lease.bytes().empty()) << "a moved-from lease exposes no bytes";
  EXPECT_EQ(r->lease.data(), nullptr);
  ASSERT_EQ(str(lease.bytes()), "first");
  lease.release();
  EXPECT_FALSE(lease.held());
  EXPECT_TRUE(lease.bytes().empty()) << "a released lease exposes no bytes";
  EXPECT_EQ(lease.data(), nullptr);
  EXPECT_EQ(lease.size(), 0u);
  EXPECT_EQ(lease.sequence(), 0u);
  EXPECT_EQ(lease.epoch(), 0u);
  lease.release();  // idempotent
  EXPECT_EQ(c.next_sequence(), 1u) << "released once";
}

// A reservation dropped without commit (here: an exception between reserve
// and commit) is abandoned by its destructor: the producer reserves again.
TEST_F(ChannelTest, ReservationDroppedWithoutCommitLeavesTheProducerFree) {
  auto [p, c] = make({.pages = 2, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 16});
  EXPECT_THROW(
      {
        auto r = p.try_reserve(16);
        ASSERT_TRUE(r && *r);
        EXPECT_TRUE(r->pending());
        std::memcpy(r->bytes().data(), "half", 4);
        throw std::runtime_error("the writer failed before commit()");
      },
      std::runtime_error);
  EXPECT_FALSE(p.has_reservation()) << "the dropped reservation was abandoned";
  EXPECT_EQ(send(p, "next").sequence, 0u) << "the abandoned reservation used no sequence";
  EXPECT_EQ(take(c), "next");
  // A moved reservation is owned by its new holder; the old one is empty.
  auto r = p.try_reserve(8);
  ASSERT_TRUE(r && *r);
  Reservation moved = std::move(*r);
  EXPECT_FALSE(r->pending());
  EXPECT_TRUE(r->bytes().empty());
  EXPECT_TRUE(moved.pending());
  std::memcpy(moved.bytes().data(), "m", 1);
  auto o = moved.commit(1);
  ASSERT_TRUE(o) << o.error().what();
  EXPECT_EQ(o->sequence, 1u);
  EXPECT_TRUE(moved.bytes().empty()) << "a committed reservation exposes no bytes";
  EXPECT_EQ(take(c), "m");
}

TEST_F(ChannelTest, CommitOfAReservationThatIsNotPendingIsRefused) {
  auto [p, c] = make({.pages = 2, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 16});
  auto r = p.try_reserve(8);
  ASSERT_TRUE(r && *r);
  ASSERT_TRUE(r->commit(0));
#ifdef NDEBUG
  auto again = r->commit();
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, Errc::InvalidArgument);
  EXPECT_NE(again.error().message.find("not pending"), std::string::npos) << again.error().message;
#else
  EXPECT_DEATH((void)r->commit(), "not pending");
#endif
  EXPECT_EQ(take(c), "");
}

// commit(), abandon() (a reservation's destructor included) and a lease's
// release() act on their endpoint: they take its guard like every other call,
// so another thread inside the endpoint meanwhile is caught (here simulated by
// occupying the guard).
TEST_F(ChannelTest, CommitAbandonAndLeaseReleaseTakeTheEndpointGuard) {
  auto [p, c] = make({.pages = 2, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 16});
  constexpr const char* kBusy = "a channel endpoint is used by two threads at once";
  {
    auto r = p.try_reserve(8);
    ASSERT_TRUE(r && *r);
    EXPECT_DEATH(
        {
          const auto inside = ChannelTesting::occupy(p);
          (void)r->commit();
        },
        kBusy);
    EXPECT_DEATH(
        {
          const auto inside = ChannelTesting::occupy(p);
          r->abandon();
        },
        kBusy);
    ASSERT_TRUE(r->commit(1));
  }
  auto got = c.try_receive();
  ASSERT_TRUE(got && *got);
  EXPECT_DEATH(
      {
        const auto inside = ChannelTesting::occupy(c);
        got->lease.release();
      },
      kBusy);
  got->lease.release();
}

// A blocking send holds the producer's guard while it waits, so a second
// thread that enters the producer meanwhile is caught, not let in.
TEST_F(ChannelTest, SecondThreadOnAProducerParkedInSendAbortsInEveryBuild) {
  auto [p, c] = make({.pages = 2, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 2});
  send(p, "a");
  send(p, "b");  // the ring is full: the next send parks
  const channel::View v = view_of(p);
  EXPECT_DEATH(
      {
        std::thread t([&p = p] { (void)p.send(bytes("c"), 30s); });
        if (wait_until_parked(v.control->waiters.producer_parked)) (void)p.try_send(bytes("d"));
        t.join();  // reached only if the guard let the second thread in
      },
      "a channel endpoint is used by two threads at once");
}

// Move-assigning over live endpoints detaches their attachments while the old
// mapping is still there, so the old channel's roles are free for the next
// attacher, and the moved handles work on theirs.
TEST_F(ChannelTest, MoveAssignOverLiveEndpointsDetachesBeforeUnmapping) {
  const ChannelParams params{
      .pages = 2, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 8};
  auto [p, c] = make(params);
  ASSERT_TRUE(create_channel("other", params));
  auto p2 = ChannelProducer::open("other");
  auto c2 = ChannelConsumer::open("other");
  ASSERT_TRUE(p2 && c2);
  ASSERT_EQ(ChannelProducer::open("ch").error().code, Errc::RoleTaken);

  p = std::move(*p2);
  c = std::move(*c2);

  // A channel carries one producer lifetime: the released producer slot is
  // seen as a producer that left (not RoleTaken, a slot still held).
  auto again_p = ChannelProducer::open("ch");
  ASSERT_FALSE(again_p);
  EXPECT_EQ(again_p.error().code, Errc::ProducerDied) << again_p.error().what();
  auto again_c = ChannelConsumer::open("ch");
  ASSERT_TRUE(again_c) << "the old consumer slot is still held: " << again_c.error().what();
  EXPECT_EQ(p.segment().name(), "other");
  EXPECT_TRUE(send(p, "moved").admitted());
  EXPECT_EQ(take(c), "moved");
}

TEST_F(ChannelTest, FinishEndsTheStreamAfterEverythingIsReceived) {
  auto [p, c] = make({.pages = 2, .page_bytes = 64, .descriptors_per_page = 2, .ring_cells = 16});
  send(p, "x");
  send(p, "y");
  send(p, "z");
  ASSERT_TRUE(p.finish());
  ASSERT_TRUE(p.finish()) << "finish is idempotent";
  EXPECT_EQ(p.state(), ChannelState::Clean);
  EXPECT_EQ(take(c), "x");
  EXPECT_EQ(take(c), "y");
  EXPECT_EQ(take(c), "z");
  for (int i = 0; i < 2; ++i) {
    auto r = c.try_receive();
    ASSERT_TRUE(r) << r.error().what();
    EXPECT_EQ(r->status, ReceiveStatus::End);
  }
  const channel::View v = view_of(p);
  EXPECT_EQ(v.control->release.released_epoch.load(), 2u)
      << "the final epoch is released at the end";
  auto s = p.try_send(bytes("late"));
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, Errc::InvalidArgument);
  EXPECT_NE(s.error().message.find("finished"), std::string::npos);
}

TEST_F(ChannelTest, FinishAfterAnAbandonedRotationEndsCleanly) {
  auto [p, c] = make({.pages = 4, .page_bytes = 64, .descriptors_per_page = 1, .ring_cells = 16});
  send(p, "only");
  auto r = p.try_reserve(8);  // rotates into epoch 1, then abandoned
  ASSERT_TRUE(r && *r);
  r->abandon();
  ASSERT_TRUE(p.finish());
  EXPECT_EQ(take(c), "only");
  auto end = c.try_receive();
  ASSERT_TRUE(end) << end.error().what();
  EXPECT_EQ(end->status, ReceiveStatus::End);
}

TEST_F(ChannelTest, ProducerThatDetachesWithoutFinishIsReportedAfterTheDrain) {
  auto [p, c] = make({.pages = 2, .page_bytes = 64, .descriptors_per_page = 2, .ring_cells = 16});
  send(p, "a");
  send(p, "b");
  p = ChannelProducer();  // detaches without finish()
  EXPECT_EQ(take(c), "a");
  EXPECT_EQ(take(c), "b");
  auto r = c.receive(5s);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::ProducerDied);
  EXPECT_NE(r.error().message.find("detached without finish(); all 2 payloads"), std::string::npos)
      << r.error().message;
  EXPECT_EQ(c.fault(), ChannelFault::ProducerDied);
  auto again = c.try_receive();
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, Errc::ProducerDied);
}

TEST_F(ChannelTest, ConsumerWaitsForAProducerThatHasNotAttachedYet) {
  auto c = ChannelConsumer::create(
      "ch", {.pages = 2, .page_bytes = 64, .descriptors_per_page = 2, .ring_cells = 8});
  ASSERT_TRUE(c) << c.error().what();
  auto r = c->receive(30ms);
  ASSERT_TRUE(r) << r.error().what();
  EXPECT_EQ(r->status, ReceiveStatus::Empty) << "no producer yet is not a dead producer";
  auto p = ChannelProducer::open("ch");
  ASSERT_TRUE(p) << p.error().what();
  send(*p, "late start");
  EXPECT_EQ(take(*c), "late start");
}

TEST_F(ChannelTest, ANewProducerCannotContinueAChannelWhoseProducerLeft) {
  auto [p, c] = make({.pages = 2, .page_bytes = 64, .descriptors_per_page = 2, .ring_cells = 16});
  send(p, "a");
  p = ChannelProducer();
  auto again = ChannelProducer::open("ch");
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, Errc::ProducerDied);
  EXPECT_NE(again.error().message.find("one producer lifetime"), std::string::npos);
}

TEST_F(ChannelTest, ConsumerReopenedResumesAtTheFirstUncommittedPayload) {
  {
    auto seg = create_channel(
        "ch", {.pages = 4, .page_bytes = 64, .descriptors_per_page = 2, .ring_cells = 16});
    ASSERT_TRUE(seg);
  }
  auto p = ChannelProducer::open("ch");
  ASSERT_TRUE(p);
  for (int i = 0; i < 7; ++i) send(*p, "r" + std::to_string(i));
  {
    auto c = ChannelConsumer::open("ch");
    ASSERT_TRUE(c);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(take(*c), "r" + std::to_string(i));
    auto held = c->try_receive();  // r3 in hand when the consumer goes away
    ASSERT_TRUE(held && *held);
    // Simulate death while holding the lease: it is never given back (moved
    // into storage that is never destroyed; no heap, nothing leaks).
    alignas(ChannelLease) static std::byte limbo[sizeof(ChannelLease)];
    new (limbo) ChannelLease(std::move(held->lease));
  }
  auto c = ChannelConsumer::open("ch");
  ASSERT_TRUE(c) << c.error().what();
  EXPECT_EQ(c->next_sequence(), 3u) << "the payload in hand is delivered again";
  for (int i = 3; i < 7; ++i) EXPECT_EQ(take(*c), "r" + std::to_string(i));
}

TEST_F(ChannelTest, ConsumerReopenedMidEpochContinuesAcrossSeams) {
  auto seg = create_channel(
      "ch", {.pages = 4, .page_bytes = 64, .descriptors_per_page = 2, .ring_cells = 16});
  ASSERT_TRUE(seg);
  auto p = ChannelProducer::open("ch");
  ASSERT_TRUE(p);
  for (int i = 0; i < 7; ++i) send(*p, "r" + std::to_string(i));
  {
    auto c = ChannelConsumer::open("ch");
    ASSERT_TRUE(c);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(take(*c), "r" + std::to_string(i));
  }
  auto c = ChannelConsumer::open("ch");
  ASSERT_TRUE(c) << c.error().what();
  EXPECT_EQ(c->current_epoch(), 1u);
  EXPECT_EQ(c->committed_in_epoch(), 1u);
  for (int i = 3; i < 7; ++i) EXPECT_EQ(take(*c), "r" + std::to_string(i));
  ASSERT_TRUE(p->finish());
  auto end = c->try_receive();
  ASSERT_TRUE(end) << end.error().what();
  EXPECT_EQ(end->status, ReceiveStatus::End);
}

// ---------------------------------------------------------------- back-pressure and blocking

TEST_F(ChannelTest, RingFullIsBackPressureThatMutatesNothing) {
  auto [p, c] = make({.pages = 2, .page_bytes = 4096, .descriptors_per_page = 64, .ring_cells = 4});
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(send(p, "f").admitted());
  const channel::View v = view_of(p);
  const auto published = v.slot_header(0)->publication.published.load();
  auto r = p.try_send(bytes("g"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, SendStatus::RingFull);
  EXPECT_EQ(v.slot_header(0)->publication.published.load(), published);
  EXPECT_EQ(v.control->stats.ring_full.load(), 1u);
  EXPECT_EQ(take(c), "f");
  EXPECT_TRUE(send(p, "g").admitted());
}

TEST_F(ChannelTest, RingFullIsReportedBeforeARotation) {
  auto [p, c] = make({.pages = 2, .page_bytes = 64, .descriptors_per_page = 2, .ring_cells = 2});
  send(p, "a");
  send(p, "b");
  auto r = p.try_send(bytes("c"));  // page full too; the ring refusal comes first
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, SendStatus::RingFull);
  EXPECT_EQ(p.active_epoch(), 0u) << "no rotation for an event that could not be admitted";
}

TEST_F(ChannelTest, BlockingReceiveWakesWhenTheProducerThreadSends) {
  auto [p, c] = make({.pages = 2, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 16});
  const channel::View v = view_of(p);
  const std::uint32_t signals = v.control->waiters.data_signal.load();
  std::thread t([&p = p, &v] {
    EXPECT_TRUE(wait_until_parked(v.control->waiters.consumer_parked)) << "never parked";
    auto r = p.try_send(bytes("late"));
    ASSERT_TRUE(r && *r);
  });
  auto r = c.receive(30s);
  t.join();
  ASSERT_TRUE(r && *r) << (r ? to_string(r->status) : r.error().what());
  EXPECT_EQ(str(r->lease.bytes()), "late");
  // A parked consumer also wakes every kLivenessSlice, so the outcome alone
  // does not prove the wake: the futex word the send bumps does.
  EXPECT_GT(v.control->waiters.data_signal.load(), signals) << "the send issued no wake";
}

TEST_F(ChannelTest, BlockingReceiveTimesOutAsEmpty) {
  auto [p, c] = make({.pages = 2, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 16});
  auto r = c.receive(20ms);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, ReceiveStatus::Empty);
}

TEST_F(ChannelTest, BlockingSendWaitsForTheQuotaAndTimesOutWithTheReason) {
  auto [p, c] = make({.pages = 2, .page_bytes = 64, .descriptors_per_page = 1, .ring_cells = 16});
  send(p, "0");
  send(p, "1");
  auto timed_out = p.send(bytes("2"), 20ms);
  ASSERT_TRUE(timed_out);
  EXPECT_EQ(timed_out->status, SendStatus::PageQuotaExhausted);
  const channel::View v = view_of(p);
  const std::uint32_t signals = v.control->waiters.space_signal.load();
  std::thread t([&c = c, &v] {
    EXPECT_TRUE(wait_until_parked(v.control->waiters.producer_parked)) << "never parked";
    EXPECT_EQ(take(c), "0");
    EXPECT_EQ(take(c), "1");  // crosses into epoch 1: releases epoch 0
  });
  auto r = p.send(bytes("2"), 30s);
  t.join();
  ASSERT_TRUE(r) << r.error().what();
  EXPECT_TRUE(r->admitted());
  EXPECT_EQ(r->epoch, 2u);
  EXPECT_GT(v.control->waiters.space_signal.load(), signals) << "the release issued no wake";
}

TEST_F(ChannelTest, BlockingReceiveReturnsEndWhenTheProducerFinishes) {
  auto [p, c] = make({.pages = 2, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 16});
  const channel::View v = view_of(p);
  const std::uint32_t signals = v.control->waiters.data_signal.load();
  std::thread t([&p = p, &v] {
    EXPECT_TRUE(wait_until_parked(v.control->waiters.consumer_parked)) << "never parked";
    ASSERT_TRUE(p.finish());
  });
  auto r = c.receive(30s);
  t.join();
  ASSERT_TRUE(r) << r.error().what();
  EXPECT_EQ(r->status, ReceiveStatus::End);
  EXPECT_GT(v.control->waiters.data_signal.load(), signals) << "finish() issued no wake";
}

// The endpoint guard is on in every build (its layout and code do not depend
// on NDEBUG): a second thread entering a consumer that is parked inside a
// blocking receive is refused with an abort, in Release as in Debug.
TEST_F(ChannelTest, SecondThreadOnABusyEndpointAbortsInEveryBuild) {
  auto [p, c] = make({.pages = 2, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 16});
  const channel::View v = view_of(p);
  EXPECT_DEATH(
      {
        std::thread t([&c = c] { (void)c.receive(30s); });
        if (wait_until_parked(v.control->waiters.consumer_parked)) (void)c.try_receive();
        t.join();  // reached only if the guard let the second thread in
      },
      "a channel endpoint is used by two threads at once");
}

// ---------------------------------------------------------------- receive coalescing

TEST_F(ChannelTest, SetCoalescingRejectsOutOfRangeValuesNamingTheBound) {
  // P - 1 pages of 8 descriptors is the bound here (the ring holds 16).
  auto [p, c] = make({.pages = 2, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 16});
  struct Case {
    Coalescing value;
    const char* needle;
  };
  const Case cases[] = {
      {{.descriptors = 0, .max_delay = 1ms}, "coalescing of 0 descriptors is outside [1, 8]"},
      {{.descriptors = 9, .max_delay = 1ms}, "coalescing of 9 descriptors is outside [1, 8]"},
      {{.descriptors = 4, .max_delay = -1ns}, "coalescing delay of -1 ns is outside"},
      {{.descriptors = 4, .max_delay = 2s}, "coalescing delay of 2000000000 ns is outside"},
  };
  for (const Case& k : cases) {
    auto r = c.set_coalescing(k.value);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, Errc::InvalidArgument);
    EXPECT_NE(r.error().message.find(k.needle), std::string::npos) << r.error().message;
    EXPECT_EQ(c.coalescing().descriptors, 1u) << "a refused setting changes nothing";
  }
  ASSERT_TRUE(c.set_coalescing({.descriptors = 8, .max_delay = 1s}));
  EXPECT_EQ(c.coalescing().descriptors, 8u);
  EXPECT_EQ(c.coalescing().max_delay, 1s);

  // Here the ring is the bound: 4 pages of 8 could hold 24, the ring 16.
  auto ring_bound = ChannelConsumer::create(
      "ch2", {.pages = 4, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 16});
  ASSERT_TRUE(ring_bound) << ring_bound.error().what();
  auto r = ring_bound->set_coalescing({.descriptors = 17, .max_delay = 1ms});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("coalescing of 17 descriptors is outside [1, 16]"),
            std::string::npos)
      << r.error().message;
  EXPECT_TRUE(ring_bound->set_coalescing({.descriptors = 16, .max_delay = 1ms}));
}

TEST_F(ChannelTest, CoalescingHoldsAPartialBatchUntilItIsComplete) {
  auto [p, c] = make({.pages = 2, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 16});
  ASSERT_TRUE(c.set_coalescing({.descriptors = 4, .max_delay = 1s}));
  for (int i = 0; i < 3; ++i) send(p, std::to_string(i));
  for (int poll = 0; poll < 100; ++poll) {
    auto r = c.try_receive();
    ASSERT_TRUE(r) << r.error().what();
    ASSERT_EQ(r->status, ReceiveStatus::Empty) << "3 of 4 waiting: held back (poll " << poll << ")";
  }
  auto copied = c.try_receive_into(std::span<std::byte>());
  ASSERT_TRUE(copied);
  EXPECT_EQ(copied->status, ReceiveStatus::Empty) << "receive_into is held back too";
  send(p, "3");
  for (int i = 0; i < 4; ++i) EXPECT_EQ(take(c), std::to_string(i));
  auto r = c.try_receive();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, ReceiveStatus::Empty);
}

TEST_F(ChannelTest, CoalescingDeliversAPartialBatchOnceTheDelayHasPassed) {
  auto [p, c] = make({.pages = 2, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 16});
  ASSERT_TRUE(c.set_coalescing({.descriptors = 8, .max_delay = 20ms}));
  send(p, "a");
  auto held = c.try_receive();  // the first sighting starts the delay
  ASSERT_TRUE(held);
  EXPECT_EQ(held->status, ReceiveStatus::Empty);
  std::this_thread::sleep_for(40ms);
  EXPECT_EQ(take(c), "a");
  // A new partial batch waits its own delay.
  send(p, "b");
  auto again = c.try_receive();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, ReceiveStatus::Empty);
  std::this_thread::sleep_for(40ms);
  EXPECT_EQ(take(c), "b");
}

TEST_F(ChannelTest, CoalescingNeverHoldsBackAFinishedStream) {
  auto [p, c] = make({.pages = 2, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 16});
  ASSERT_TRUE(c.set_coalescing({.descriptors = 8, .max_delay = 1s}));
  send(p, "x");
  send(p, "y");
  ASSERT_TRUE(p.finish());
  EXPECT_EQ(take(c), "x");
  EXPECT_EQ(take(c), "y");
  auto r = c.try_receive();
  ASSERT_TRUE(r) << r.error().what();
  EXPECT_EQ(r->status, ReceiveStatus::End);
}

TEST_F(ChannelTest, CoalescingDrainsAProducerThatLeftThenReportsIt) {
  auto [p, c] = make({.pages = 2, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 16});
  ASSERT_TRUE(c.set_coalescing({.descriptors = 8, .max_delay = 1s}));
  send(p, "a");
  p = ChannelProducer();   // detaches without finish(): the terminal word stays OPEN
  auto r = c.receive(5s);  // must not wait out the delay, let alone the timeout
  ASSERT_TRUE(r) << r.error().what();
  ASSERT_EQ(r->status, ReceiveStatus::Received);
  EXPECT_EQ(str(r->lease.bytes()), "a");
  r->lease.release();
  auto died = c.receive(5s);
  ASSERT_FALSE(died);
  EXPECT_EQ(died.error().code, Errc::ProducerDied);
}

TEST_F(ChannelTest, PollingConsumerDrainsACoalescedBatchOfAProducerThatLeft) {
  auto [p, c] = make({.pages = 2, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 16});
  ASSERT_TRUE(c.set_coalescing({.descriptors = 8, .max_delay = 1s}));
  send(p, "a");
  auto held = c.try_receive();
  ASSERT_TRUE(held) << held.error().what();
  ASSERT_EQ(held->status, ReceiveStatus::Empty) << "1 of 8 while the producer lives: held back";
  p = ChannelProducer();  // detaches without finish(): the terminal word stays OPEN
  // try_receive() never parks: the liveness probe (every kProbeInterval) must
  // find the producer gone and take the held payload. The path, not the time:
  // the delay is restarted before every poll (set_coalescing() forgets when
  // the batch was first seen), so it can never be what lets the payload go.
  const auto start = std::chrono::steady_clock::now();
  std::string got;
  while (got.empty() && std::chrono::steady_clock::now() - start < 30s) {
    ASSERT_TRUE(c.set_coalescing({.descriptors = 8, .max_delay = 1s}));
    auto r = c.try_receive();
    ASSERT_TRUE(r) << r.error().what();
    if (*r) got = str(r->lease.bytes());
  }
  EXPECT_EQ(got, "a") << "the probe never found the producer gone";
  Result<Received> died = c.try_receive();
  while (died && std::chrono::steady_clock::now() - start < 30s) died = c.try_receive();
  ASSERT_FALSE(died) << "still " << to_string(died->status);
  EXPECT_EQ(died.error().code, Errc::ProducerDied);
}

TEST_F(ChannelTest, BlockingReceiveTakesACoalescedBatchRatherThanSleepOnIt) {
  auto [p, c] = make({.pages = 2, .page_bytes = 256, .descriptors_per_page = 8, .ring_cells = 16});
  ASSERT_TRUE(c.set_coalescing({.descriptors = 8, .max_delay = 1s}));
  send(p, "only");
  // Nothing would wake a consumer parked on a batch that is already
  // published: receive() takes it before parking. The path, not the time: a
  // receive that may not wait at all (timeout 0, far below the 1 s delay)
  // still gets it; one that slept on the batch would time out as Empty.
  auto r = c.receive(0s);
  ASSERT_TRUE(r) << r.error().what();
  ASSERT_EQ(r->status, ReceiveStatus::Received) << "slept on a published batch";
  EXPECT_EQ(str(r->lease.bytes()), "only");
}

TEST_F(ChannelTest, ThreadsStreamThousandsOfPayloadsAcrossManyRotations) {
  auto [p, c] =
      make({.pages = 8, .page_bytes = 2048, .descriptors_per_page = 16, .ring_cells = 64});
  const std::uint64_t n = test::scaled(40'000);
  std::thread producer([&p = p, n] {
    std::vector<std::byte> buf(200);
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::size_t len = test::channel_length(i, 200);
      test::fill_channel_payload(std::span(buf.data(), len), i);
      auto r = p.send(std::span(buf.data(), len), 10s);
      ASSERT_TRUE(r && *r) << "at " << i;
      ASSERT_EQ(r->sequence, i);
    }
    ASSERT_TRUE(p.finish());
  });
  std::uint64_t got = 0;
  for (;;) {
    auto r = c.receive(10s);
    ASSERT_TRUE(r) << r.error().what();
    if (r->status == ReceiveStatus::End) break;
    ASSERT_EQ(r->status, ReceiveStatus::Received);
    ASSERT_EQ(r->lease.sequence(), got);
    ASSERT_TRUE(test::check_channel_payload(r->lease.bytes(), got, test::channel_length(got, 200)))
        << "payload " << got;
    ++got;
  }
  producer.join();
  EXPECT_EQ(got, n);
  EXPECT_GT(view_of(p).control->stats.rotations.load(), n / 16 - 1);
}

// ---------------------------------------------------------------- differential oracle

// The reference model of a channel driven from one thread: the safe sealed
// pages of the ADR reduced to counters, plus a deque of what was admitted.
// It predicts every outcome of every call: the admission status (Ok,
// RingFull, PageQuotaExhausted, TooLarge), the sequence and epoch of every
// admitted payload, every receive (payload, sequence, epoch, Empty, End,
// TooLarge for a short buffer), and after every call released_epoch,
// active_epoch and the statistics counters. A refusal the model does not
// predict fails the test.
class ChannelModel {
 public:
  explicit ChannelModel(const ChannelParams& p) : p_(p) {}

  struct Admit {
    std::optional<SendStatus> status;  // nullopt: TooLarge
    std::uint64_t sequence = 0;
    std::uint64_t epoch = 0;
  };
  // try_reserve(n) / try_send of n bytes: rotates (or refuses) like the ADR.
  Admit reserve(std::size_t n) {
    if (n > p_.page_bytes) return {};
    if (tail_ - head_ >= p_.ring_cells) {
      ++ring_full_;
      return {SendStatus::RingFull};
    }
    if (!fits(n)) {
      if (!(active_ + 1 < released_ + p_.pages)) {  // slot (active + 1) mod P still held
        ++quota_refusals_;
        return {SendStatus::PageQuotaExhausted};
      }
      ++active_;
      ++rotations_;
      used_ = 0;
      published_ = 0;
    }
    return {SendStatus::Ok, tail_, active_};
  }
  // commit(used) of the reservation just made.
  void commit(std::vector<std::byte> payload) {
    used_ += (payload.size() + 7) / 8 * 8;
    ++published_;
    queue_.push_back({tail_++, active_, std::move(payload)});
  }
  struct Entry {
    std::uint64_t sequence;
    std::uint64_t epoch;
    std::vector<std::byte> payload;
  };
  // What the next receive finds: nullptr for Empty / End (see ended()).
  // Looking at a descriptor of the next epoch crosses the seam (released_epoch
  // moves) even when the receive then fails (a short buffer).
  const Entry* look() {
    if (queue_.empty()) {
      if (finished_) released_ = active_ + 1;
      return nullptr;
    }
    const Entry& e = queue_.front();
    if (e.epoch != consumer_epoch_) {
      released_ = e.epoch;
      consumer_epoch_ = e.epoch;
    }
    return &e;
  }
  void take() {
    queue_.pop_front();
    ++head_;
  }
  void finish() { finished_ = true; }
  [[nodiscard]] bool ended() const { return finished_ && queue_.empty(); }

  std::uint64_t released_ = 0, active_ = 0;
  std::uint64_t rotations_ = 0, quota_refusals_ = 0, ring_full_ = 0;

 private:
  [[nodiscard]] bool fits(std::size_t n) const {
    return published_ < p_.descriptors_per_page && used_ + (n + 7) / 8 * 8 <= p_.page_bytes;
  }
  ChannelParams p_;
  std::uint64_t used_ = 0, published_ = 0, tail_ = 0, head_ = 0, consumer_epoch_ = 0;
  bool finished_ = false;
  std::deque<Entry> queue_;
};

TEST_F(ChannelTest, DifferentialOraclePredictsEveryOutcomeAcrossTenThousandRotations) {
  const ChannelParams params{
      .pages = 4, .page_bytes = 256, .descriptors_per_page = 6, .ring_cells = 16};
  auto [p, c] = make(params);
  const channel::View v = view_of(p);
  ChannelModel model(params);
  std::mt19937_64 rng(20260714);
  std::uint64_t ops = 0;
  // After every call: the channel's shared state is the model's.
  const auto agree = [&](const char* after) {
    SCOPED_TRACE(::testing::Message() << "after " << after << " (operation " << ops << ")");
    EXPECT_EQ(v.control->release.released_epoch.load(), model.released_);
    EXPECT_EQ(v.control->producer.active_epoch.load(), model.active_);
    EXPECT_EQ(p.active_epoch(), model.active_);
    EXPECT_EQ(v.control->stats.rotations.load(), model.rotations_);
    EXPECT_EQ(v.control->stats.quota_refusals.load(), model.quota_refusals_);
    EXPECT_EQ(v.control->stats.ring_full.load(), model.ring_full_);
    return !::testing::Test::HasFailure();
  };
  std::vector<std::byte> buf(params.page_bytes + 8);
  std::uint64_t counts[4] = {};  // Ok, RingFull, PageQuotaExhausted, TooLarge
  const auto send_one = [&] {
    ++ops;
    // Mostly small, sometimes up to a whole page (or just over), sometimes empty.
    const std::size_t len =
        rng() % 8 == 0 ? rng() % (params.page_bytes + 9) : static_cast<std::size_t>(rng() % 64);
    test::fill_channel_payload(std::span(buf.data(), len), ops);
    const ChannelModel::Admit want = model.reserve(len);
    const int how = static_cast<int>(rng() % 4);  // 0: reserve + commit part, 1: abandon, else send
    if (how >= 2) {
      auto r = p.try_send(std::span(buf.data(), len));
      if (!want.status) {
        ASSERT_FALSE(r) << "the model predicts TooLarge for " << len << " bytes";
        ASSERT_EQ(r.error().code, Errc::TooLarge) << r.error().what();
        ++counts[3];
        return;
      }
      ASSERT_TRUE(r) << r.error().what();
      ASSERT_EQ(r->status, *want.status) << "payload of " << len << " bytes";
      ++counts[static_cast<int>(r->status)];
      if (r->status != SendStatus::Ok) return;
      ASSERT_EQ(r->sequence, want.sequence);
      ASSERT_EQ(r->epoch, want.epoch);
      model.commit(std::vector<std::byte>(buf.begin(), buf.begin() + len));
      return;
    }
    auto r = p.try_reserve(len);
    if (!want.status) {
      ASSERT_FALSE(r) << "the model predicts TooLarge for " << len << " bytes";
      ASSERT_EQ(r.error().code, Errc::TooLarge) << r.error().what();
      ++counts[3];
      return;
    }
    ASSERT_TRUE(r) << r.error().what();
    ASSERT_EQ(r->status, *want.status) << "reservation of " << len << " bytes";
    ++counts[static_cast<int>(r->status)];
    if (r->status != SendStatus::Ok) return;
    if (how == 1) return;  // dropped: the destructor abandons it (the rotation stays)
    const std::size_t used = len == 0 ? 0 : rng() % (len + 1);
    std::memcpy(r->bytes().data(), buf.data(), used);
    auto o = r->commit(used);
    ASSERT_TRUE(o) << o.error().what();
    ASSERT_EQ(o->sequence, want.sequence);
    ASSERT_EQ(o->epoch, want.epoch);
    model.commit(std::vector<std::byte>(buf.begin(), buf.begin() + used));
  };
  std::vector<std::byte> out(params.page_bytes);
  const auto receive_one = [&] {
    ++ops;
    const bool copy = rng() % 3 == 0;
    const ChannelModel::Entry* want = model.look();
    if (copy) {
      // Sometimes a buffer too short for the next payload: TooLarge, and it stays.
      const std::size_t room = rng() % 4 == 0 ? rng() % 64 : out.size();
      auto r = c.try_receive_into(std::span(out.data(), room));
      if (want != nullptr && want->payload.size() > room) {
        ASSERT_FALSE(r) << "the model predicts TooLarge for a " << room << "-byte buffer";
        ASSERT_EQ(r.error().code, Errc::TooLarge) << r.error().what();
        return;
      }
      ASSERT_TRUE(r) << r.error().what();
      if (want == nullptr) {
        ASSERT_EQ(r->status, model.ended() ? ReceiveStatus::End : ReceiveStatus::Empty);
        return;
      }
      ASSERT_EQ(r->status, ReceiveStatus::Received);
      ASSERT_EQ(r->sequence, want->sequence);
      ASSERT_EQ(r->epoch, want->epoch);
      ASSERT_TRUE(std::ranges::equal(std::span(out.data(), r->size), want->payload))
          << "payload " << want->sequence;
      model.take();
      return;
    }
    auto r = c.try_receive();
    ASSERT_TRUE(r) << r.error().what();
    if (want == nullptr) {
      ASSERT_EQ(r->status, model.ended() ? ReceiveStatus::End : ReceiveStatus::Empty);
      return;
    }
    ASSERT_EQ(r->status, ReceiveStatus::Received);
    ASSERT_EQ(r->lease.sequence(), want->sequence);
    ASSERT_EQ(r->lease.epoch(), want->epoch);
    ASSERT_TRUE(std::ranges::equal(r->lease.bytes(), want->payload))
        << "payload " << want->sequence;
    model.take();
  };
  const std::uint64_t target_rotations = test::scaled(10'000);
  while (model.rotations_ < target_rotations) {
    const int burst = static_cast<int>(rng() % 12);
    for (int i = 0; i < burst; ++i) {
      ASSERT_NO_FATAL_FAILURE(send_one());
      ASSERT_TRUE(agree("a send"));
    }
    const int drain = static_cast<int>(rng() % 12);
    for (int i = 0; i < drain; ++i) {
      ASSERT_NO_FATAL_FAILURE(receive_one());
      ASSERT_TRUE(agree("a receive"));
    }
  }
  ASSERT_TRUE(p.finish());
  model.finish();
  while (!model.ended()) {
    ASSERT_NO_FATAL_FAILURE(receive_one());
    ASSERT_TRUE(agree("a receive after finish"));
  }
  ASSERT_NO_FATAL_FAILURE(receive_one());  // End: every epoch released
  ASSERT_TRUE(agree("the end"));
  EXPECT_GT(counts[0], 0u);
  EXPECT_GT(counts[1], 0u) << "the schedule exercised RingFull";
  EXPECT_GT(counts[2], 0u) << "the schedule exercised PageQuotaExhausted";
  EXPECT_GT(counts[3], 0u) << "the schedule exercised TooLarge";
}

}  // namespace
}  // namespace shm
