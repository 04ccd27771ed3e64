#include "common/scale.hpp"
#include "common/temp_root.hpp"
#include "common/text.hpp"
#include "shm/segment/kind.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/layout.hpp"
#include "shm/spsc/producer.hpp"
#include "shm/testing/ring_crash.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

using namespace std::chrono_literals;
#include <vector>

namespace shm {
namespace {

using namespace std::chrono_literals;

using test::bytes;
using test::str;

// Waits (up to a generous deadline) until a blocking call on the ring has
// announced that it is going to sleep (`flag`: consumer_parked or
// producer_parked), so what follows must wake it: a test that acted before
// the park would pass without exercising the wake at all. False on timeout.
bool wait_until_parked(const Segment& seg, std::string_view flag) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < deadline) {
    Node n;
    kSpscRingDescriptor.describe(seg, n);
    const Node* f = n.find(flag);
    if (f != nullptr && std::get<bool>(f->value())) return true;
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

// The ring's control block (waiters: the futex words a wake bumps).
const ring::RingControl& control(const Segment& seg) {
  return *reinterpret_cast<const ring::RingControl*>(seg.data().data());
}

class SpscRingTest : public ::testing::Test {
 protected:
  test::TempRoot root_;
};

TEST_F(SpscRingTest, PushThenPopReturnsTheSameRecordsInOrder) {
  auto p = RingProducer::create("r", {.capacity_bytes = 1024});
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

// The ring exactly full, one record popped, the rest peeked across the lap
// boundary: the next peek must find the ring empty, not hand back the
// previous lap's record at the peek position (a lap read from the released
// position instead of the peek position did; a mutant the suite missed).
TEST_F(SpscRingTest, PeeksAcrossALapOfAnExactlyFullRingEndEmpty) {
  auto p = RingProducer::create("r", {.capacity_bytes = 1024});
  ASSERT_TRUE(p) << p.error().what();
  auto c = RingConsumer::open("r");
  ASSERT_TRUE(c) << c.error().what();
  std::array<std::byte, 56> rec{};  // 8-byte header + 56: 64 bytes a record, 16 fill 1 KiB
  for (int lap = 0; lap < 3; ++lap) {
    int pushed = 0;
    for (;; ++pushed) {
      rec.fill(static_cast<std::byte>(lap * 16 + pushed));
      auto ok = p->try_push(rec);
      ASSERT_TRUE(ok) << ok.error().what();
      if (!*ok) break;
    }
    ASSERT_EQ(pushed, 16) << "lap " << lap << ": 16 records of 64 bytes fill 1 KiB";
    std::array<std::byte, 64> out{};
    auto first = c->try_pop(out);
    ASSERT_TRUE(first && *first);
    EXPECT_EQ(out[0], static_cast<std::byte>(lap * 16));
    for (int i = 1; i < 16; ++i) {
      auto r = c->try_peek();
      ASSERT_TRUE(r && *r) << "lap " << lap << ", peek " << i;
      EXPECT_EQ((**r)[0], static_cast<std::byte>(lap * 16 + i));
    }
    auto again = c->try_peek();
    ASSERT_TRUE(again) << again.error().what();
    EXPECT_FALSE(*again) << "lap " << lap << ": a stale record of the previous lap";
    c->release();
  }
}

// try_pop and pop copy one record and release. With earlier peeks not yet
// released, try_pop used to release them unseen and pop to deliver the first
// of them a second time; both are refused now, and nothing is lost or repeated.
TEST_F(SpscRingTest, PopWithPeeksOutstandingIsRefusedAndLosesNothing) {
  auto p = RingProducer::create("r", {.capacity_bytes = 1024});
  ASSERT_TRUE(p) << p.error().what();
  auto c = RingConsumer::open("r");
  ASSERT_TRUE(c) << c.error().what();
  for (const char* rec : {"a", "b", "c"}) ASSERT_TRUE(*p->try_push(bytes(rec)));
  auto peeked = c->try_peek();
  ASSERT_TRUE(peeked && *peeked);
  EXPECT_EQ(str(**peeked), "a");

  std::array<std::byte, 16> out{};
  const auto refused = [](const auto& r, const char* op) {
    ASSERT_FALSE(r) << op << " went ahead with a peek outstanding";
    EXPECT_EQ(r.error().code, Errc::InvalidArgument) << op;
    EXPECT_NE(r.error().message.find(std::string(op) + " with 1 peeked record(s) not released"),
              std::string::npos)
        << r.error().message;
  };
  refused(c->try_pop(out), "try_pop");
  refused(c->pop(out, 0ms), "pop");

  c->unpeek();
  std::vector<std::string> got;
  for (int i = 0; i < 2; ++i) {
    auto n = i == 0 ? c->try_pop(out) : c->pop(out, 0ms);
    ASSERT_TRUE(n && *n) << i;
    got.emplace_back(reinterpret_cast<const char*>(out.data()), **n);
  }
  auto last = c->drain(
      [&](std::span<const std::byte> rec) {
        got.emplace_back(reinterpret_cast<const char*>(rec.data()), rec.size());
      },
      10);
  ASSERT_TRUE(last) << last.error().what();
  EXPECT_EQ(*last, 1u);
  EXPECT_EQ(got, (std::vector<std::string>{"a", "b", "c"}));
}

TEST_F(SpscRingTest, WrapsWithPaddingRecordAcrossManyLaps) {
  auto p = RingProducer::create("r", {.capacity_bytes = 256});
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

// Every payload length up to 40 bytes, each byte distinct, across many laps of
// a small ring (so records meet padding at every offset): the inline copy of
// small payloads (two overlapping words) and the fast paths of push and pop
// must hand back exactly the bytes pushed, as the peek path does.
TEST_F(SpscRingTest, EverySmallLengthRoundTripsByteForByteThroughPushPopAndPeek) {
  auto p = RingProducer::create("r", {.capacity_bytes = 512});
  auto c = RingConsumer::open("r");
  ASSERT_TRUE(p && c);
  std::vector<std::byte> out(64, std::byte{0xEE});
  std::uint64_t round = 0;
  for (int lap = 0; lap < 300; ++lap) {
    for (std::size_t n = 0; n <= 40; ++n, ++round) {
      std::vector<std::byte> msg(n);
      for (std::size_t i = 0; i < n; ++i)
        msg[i] = std::byte(static_cast<unsigned>(round * 7 + i * 13 + 1));
      auto ok = p->try_push(msg);
      ASSERT_TRUE(ok && *ok) << "length " << n << " lap " << lap;
      if (round % 2 == 0) {
        std::fill(out.begin(), out.end(), std::byte{0xEE});
        auto r = c->try_pop(std::span(out.data(), n));  // an out buffer of exactly n bytes
        ASSERT_TRUE(r && *r) << "length " << n << " lap " << lap;
        ASSERT_EQ(**r, n);
        EXPECT_TRUE(std::equal(msg.begin(), msg.end(), out.begin()))
            << "length " << n << " lap " << lap;
        EXPECT_EQ(out[n], std::byte{0xEE}) << "wrote past the payload, length " << n;
      } else {
        auto r = c->try_peek();
        ASSERT_TRUE(r && *r) << "length " << n << " lap " << lap;
        ASSERT_EQ((*r)->size(), n);
        EXPECT_TRUE(std::equal(msg.begin(), msg.end(), (*r)->begin()))
            << "length " << n << " lap " << lap;
        c->release();
      }
    }
  }
  auto empty = c->try_pop(out);
  ASSERT_TRUE(empty);
  EXPECT_FALSE(*empty);
}

TEST_F(SpscRingTest, TooLargeRecordIsRejectedWithLimitInMessage) {
  auto p = RingProducer::create("r", {.capacity_bytes = 256});
  ASSERT_TRUE(p);
  auto r = p->try_reserve(p->max_payload() + 1);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::TooLarge);
  EXPECT_NE(r.error().message.find(std::to_string(p->max_payload())), std::string::npos);
}

// The guard is on in every build (nothing in it depends on NDEBUG): a second
// scope on a busy endpoint aborts, and a closed scope leaves it idle.
TEST(EndpointGuardTest, ASecondScopeOnABusyEndpointAbortsInEveryBuild) {
  detail::EndpointGuard guard;
  { const detail::EndpointGuard::Scope first(guard, "an SPSC endpoint"); }
  { const detail::EndpointGuard::Scope again(guard, "an SPSC endpoint"); }
  EXPECT_DEATH(
      {
        const detail::EndpointGuard::Scope inside(guard, "an SPSC endpoint");
        const detail::EndpointGuard::Scope second(guard, "an SPSC endpoint");
      },
      "an SPSC endpoint is used by two threads at once");
}

// A short call (try_push, try_pop, commit, release...) as the ring makes it.
struct ShortCall {
  explicit ShortCall(detail::EndpointGuard& g) : guard(g), me(g.enter_short("an SPSC endpoint")) {}
  ~ShortCall() { guard.leave_short(me, "an SPSC endpoint"); }
  ShortCall(const ShortCall&) = delete;
  ShortCall& operator=(const ShortCall&) = delete;
  detail::EndpointGuard& guard;
  std::uintptr_t me;
};

// The short calls make no store while one thread keeps using the endpoint.
// Two threads in short calls at once are caught when the first one leaves:
// it finds that the second took the endpoint over meanwhile.
TEST(EndpointGuardTest, AShortCallFindingAtItsEndThatAnotherThreadEnteredAborts) {
  detail::EndpointGuard guard;
  EXPECT_DEATH(
      {
        const ShortCall first(guard);
        std::thread([&guard] { const ShortCall second(guard); }).join();
      },
      "an SPSC endpoint is used by two threads at once");
}

// A short call entering while a Scope (a wait, a drain) is inside aborts at
// once, on the same thread (a callback) or another one.
TEST(EndpointGuardTest, AShortCallInsideAWaitOrADrainAbortsAtOnce) {
  detail::EndpointGuard guard;
  EXPECT_DEATH(
      {
        const detail::EndpointGuard::Scope draining(guard, "an SPSC endpoint");
        const ShortCall callback(guard);
      },
      "an SPSC endpoint is used by two threads at once");
  EXPECT_DEATH(
      {
        const detail::EndpointGuard::Scope waiting(guard, "an SPSC endpoint");
        std::thread([&guard] { const ShortCall other(guard); }).join();
      },
      "an SPSC endpoint is used by two threads at once");
}

// Handing an endpoint from thread to thread, one call at a time, is allowed
// with both kinds of call, in any order.
TEST(EndpointGuardTest, ThreadsTakingTurnsOnAnEndpointPass) {
  detail::EndpointGuard guard;
  EXPECT_EXIT(
      {
        for (int round = 0; round < 3; ++round) {
          { const ShortCall here(guard); }
          std::thread([&guard] {
            { const ShortCall there(guard); }
            { const detail::EndpointGuard::Scope there_long(guard, "an SPSC endpoint"); }
            { const ShortCall there_again(guard); }
          }).join();
          { const detail::EndpointGuard::Scope here_long(guard, "an SPSC endpoint"); }
        }
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// drain() and try_push_batch() take the guard once for the whole batch (not
// once per record): a drain callback that calls its own consumer is inside
// the endpoint and is refused like a second thread, before it can release
// the records of the batch under the drain's feet.
TEST_F(SpscRingTest, DrainHoldsTheGuardForTheWholeBatch) {
  auto p = RingProducer::create("r", {.capacity_bytes = 1024});
  auto c = RingConsumer::open("r");
  ASSERT_TRUE(p && c);
  ASSERT_TRUE(*p->try_push(bytes("a")));
  ASSERT_TRUE(*p->try_push(bytes("b")));
  EXPECT_DEATH((void)c->drain([&](std::span<const std::byte>) { c->release(); }, 10),
               "an SPSC endpoint is used by two threads at once \\(or called again from inside "
               "one of its own callbacks\\)");
  // The guard is idle again after a drain: both records, once each.
  std::vector<std::string> got;
  auto n = c->drain(
      [&](std::span<const std::byte> rec) {
        got.emplace_back(reinterpret_cast<const char*>(rec.data()), rec.size());
      },
      10);
  ASSERT_TRUE(n) << n.error().what();
  EXPECT_EQ(got, (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(*c->try_peek());
  std::string big(8, 'x');
  const std::vector<std::span<const std::byte>> batch(3, bytes(big));
  ASSERT_EQ(*p->try_push_batch(batch), 3u);
  ASSERT_TRUE(*p->try_push(bytes("after")));  // the batch left the producer's guard idle
  EXPECT_EQ(*c->drain([](std::span<const std::byte>) {}, 10), 4u);
}

// Move-assigning over live endpoints detaches their attachments while the old
// mapping is still there (the attachment writes into it), so the old ring's
// roles are free for the next attacher, and the moved handles work on theirs.
TEST_F(SpscRingTest, MoveAssignOverLiveEndpointsDetachesBeforeUnmapping) {
  auto px = RingProducer::create("x", {.capacity_bytes = 1024});
  auto cx = RingConsumer::open("x");
  auto py = RingProducer::create("y", {.capacity_bytes = 1024});
  auto cy = RingConsumer::open("y");
  ASSERT_TRUE(px && cx && py && cy);
  ASSERT_EQ(RingProducer::open("x").error().code, Errc::RoleTaken);

  *px = std::move(*py);
  *cx = std::move(*cy);

  auto px2 = RingProducer::open("x");
  ASSERT_TRUE(px2) << "the old producer slot is still held: " << px2.error().what();
  auto cx2 = RingConsumer::open("x");
  ASSERT_TRUE(cx2) << "the old consumer slot is still held: " << cx2.error().what();
  EXPECT_EQ(px->segment().name(), "y");
  EXPECT_EQ(cx->segment().name(), "y");
  ASSERT_TRUE(*px->try_push(bytes("moved")));
  std::vector<std::byte> out(16);
  auto n = cx->try_pop(out);
  ASSERT_TRUE(n && *n);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(out.data()), **n), "moved");
  ASSERT_TRUE(*px2->try_push(bytes("x")));
  EXPECT_TRUE(*cx2->try_pop(out));
}

// The blocking calls hold the guard for their whole wait: a second thread that
// enters a consumer parked in peek() (or a producer parked in reserve()) is
// caught, not let in beside it.
TEST_F(SpscRingTest, SecondThreadOnAnEndpointParkedInAWaitAbortsInEveryBuild) {
  auto p = RingProducer::create("r", {.capacity_bytes = 256});
  auto c = RingConsumer::open("r");
  ASSERT_TRUE(p && c);
  EXPECT_DEATH(
      {
        std::thread t([&c = *c] { (void)c.peek(30s); });
        if (wait_until_parked(p->segment(), "consumer_parked")) (void)c->try_peek();
        t.join();  // reached only if the guard let the second thread in
      },
      "an SPSC endpoint is used by two threads at once");
  const std::string rec(56, 'x');  // 64-byte records: 4 fill the ring
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(*p->try_push(bytes(rec)));
  EXPECT_DEATH(
      {
        std::thread t([&p = *p, &rec] { (void)p.push(bytes(rec), 30s); });
        if (wait_until_parked(c->segment(), "producer_parked")) (void)p->try_push(bytes(rec));
        t.join();
      },
      "an SPSC endpoint is used by two threads at once");
}

TEST_F(SpscRingTest, BlockingConsumerWakesForProducerThread) {
  auto p = RingProducer::create("r", {.capacity_bytes = 4096});
  auto c = RingConsumer::open("r");
  ASSERT_TRUE(p && c);
  const std::uint32_t signals = control(p->segment()).waiters.data_signal.load();
  std::thread t([&] {
    EXPECT_TRUE(wait_until_parked(p->segment(), "consumer_parked")) << "the consumer never parked";
    ASSERT_TRUE(*p->try_push(bytes("late")));
  });
  auto r = c->peek(30s);
  t.join();
  ASSERT_TRUE(r && *r);
  EXPECT_EQ(str(**r), "late");
  // A consumer that was never woken still finds the record when its timeout
  // ends: the outcome alone does not prove the wake, the futex word does.
  EXPECT_GT(control(p->segment()).waiters.data_signal.load(), signals) << "the push issued no wake";
}

}  // namespace
}  // namespace shm

namespace shm {
namespace {

class SpscRingSemanticsTest : public ::testing::Test {
 protected:
  test::TempRoot root_;
};

TEST_F(SpscRingSemanticsTest, ReservationsAreInvisibleUntilCommit) {
  auto p = RingProducer::create("r", {.capacity_bytes = 1024});
  auto c = RingConsumer::open("r");
  ASSERT_TRUE(p && c);
  auto r = p->try_reserve(10);
  ASSERT_TRUE(r && *r);
  std::memset((*r)->data(), 'x', 10);
  EXPECT_FALSE(*c->try_peek());
  p->commit();
  auto got = c->try_peek();
  ASSERT_TRUE(got && *got);
  EXPECT_EQ((*got)->size(), 10u);
}

TEST_F(SpscRingSemanticsTest, AbandonedReservationIsNeverPublished) {
  auto p = RingProducer::create("r", {.capacity_bytes = 1024});
  auto c = RingConsumer::open("r");
  ASSERT_TRUE(p && c);
  ASSERT_TRUE(*p->try_reserve(10));
  p->abandon();
  p->commit();
  EXPECT_FALSE(*c->try_peek());
  ASSERT_TRUE(*p->try_push(std::as_bytes(std::span("ok", 2))));
  auto got = c->try_peek();
  ASSERT_TRUE(got && *got);
  EXPECT_EQ((*got)->size(), 2u);
}

TEST_F(SpscRingSemanticsTest, BatchPeekReleasesAllAtOnceAndUnpeekRewinds) {
  auto p = RingProducer::create("r", {.capacity_bytes = 1024});
  auto c = RingConsumer::open("r");
  ASSERT_TRUE(p && c);
  std::vector<std::string> recs = {"a", "bb", "ccc"};
  std::vector<std::span<const std::byte>> spans;
  for (auto& s : recs) spans.push_back(std::as_bytes(std::span(s)));
  ASSERT_EQ(*p->try_push_batch(spans), 3u);
  ASSERT_EQ((**c->try_peek()).size(), 1u);
  ASSERT_EQ((**c->try_peek()).size(), 2u);
  c->unpeek();
  ASSERT_EQ((**c->try_peek()).size(), 1u);
  std::size_t seen = 0;
  auto n = c->drain([&](std::span<const std::byte> rec) { seen += rec.size(); }, 10);
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, 2u);  // the two after the one already peeked
  EXPECT_EQ(seen, 5u);
  EXPECT_FALSE(*c->try_peek());
  EXPECT_EQ(c->released_position(), p->published_position());
}

TEST_F(SpscRingSemanticsTest, FullRingRefusesThenAcceptsAfterRelease) {
  auto p = RingProducer::create("r", {.capacity_bytes = 256});
  auto c = RingConsumer::open("r");
  ASSERT_TRUE(p && c);
  std::string rec(56, 'x');  // 64-byte records: exactly 4 fit
  int pushed = 0;
  while (*p->try_push(std::as_bytes(std::span(rec)))) ++pushed;
  EXPECT_EQ(pushed, 4);
  ASSERT_TRUE(*c->try_peek());
  c->release();
  EXPECT_TRUE(*p->try_push(std::as_bytes(std::span(rec))));
}

TEST_F(SpscRingSemanticsTest, BlockingPushTimesOutOnFullRingAndPopTimesOutWhenEmpty) {
  auto p = RingProducer::create("r", {.capacity_bytes = 128});
  auto c = RingConsumer::open("r");
  ASSERT_TRUE(p && c);
  std::string rec(56, 'x');
  while (*p->try_push(std::as_bytes(std::span(rec)))) {
  }
  auto pushed = p->push(std::as_bytes(std::span(rec)), 20ms);
  ASSERT_TRUE(pushed);
  EXPECT_FALSE(*pushed);
  std::vector<std::byte> out(64);
  for (;;) {
    auto r = c->try_pop(out);
    ASSERT_TRUE(r);
    if (!*r) break;
  }
  auto popped = c->pop(out, 20ms);
  ASSERT_TRUE(popped);
  EXPECT_FALSE(*popped);
}

TEST_F(SpscRingSemanticsTest, BlockingProducerWakesWhenConsumerThreadFreesSpace) {
  auto p = RingProducer::create("r", {.capacity_bytes = 128});
  auto c = RingConsumer::open("r");
  ASSERT_TRUE(p && c);
  std::string rec(56, 'x');
  while (*p->try_push(std::as_bytes(std::span(rec)))) {
  }
  const std::uint32_t signals = control(p->segment()).waiters.space_signal.load();
  std::thread t([&] {
    EXPECT_TRUE(wait_until_parked(c->segment(), "producer_parked")) << "the producer never parked";
    ASSERT_TRUE(*c->try_peek());
    c->release();
  });
  auto pushed = p->push(std::as_bytes(std::span(rec)), 30s);
  t.join();
  ASSERT_TRUE(pushed);
  EXPECT_TRUE(*pushed);
  EXPECT_GT(control(p->segment()).waiters.space_signal.load(), signals)
      << "the release issued no wake";
}

TEST_F(SpscRingSemanticsTest, PopIntoSmallBufferIsTooLargeAndKeepsRecord) {
  auto p = RingProducer::create("r", {.capacity_bytes = 1024});
  auto c = RingConsumer::open("r");
  ASSERT_TRUE(p && c);
  ASSERT_TRUE(*p->try_push(std::as_bytes(std::span("0123456789", 10))));
  std::vector<std::byte> small(4), big(16);
  auto r = c->try_pop(small);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::TooLarge);
  auto ok = c->try_pop(big);
  ASSERT_TRUE(ok && *ok);
  EXPECT_EQ(**ok, 10u);
}

TEST_F(SpscRingSemanticsTest, TwoThreadsStreamManyRecordsInOrder) {
  auto p = RingProducer::create("r", {.capacity_bytes = 4096});
  auto c = RingConsumer::open("r");
  ASSERT_TRUE(p && c);
  constexpr std::uint64_t kCount = 200'000;
  std::thread producer([&] {
    for (std::uint64_t i = 0; i < kCount; ++i) {
      const std::size_t n = 9 + i % 200;
      auto r = p->reserve(n, 10s);
      ASSERT_TRUE(r && *r);
      std::memset((*r)->data(), static_cast<int>(i & 0xff), n);
      std::memcpy((*r)->data(), &i, sizeof i);
      p->commit();
    }
  });
  for (std::uint64_t i = 0; i < kCount; ++i) {
    auto r = c->peek(10s);
    ASSERT_TRUE(r && *r) << i;
    std::uint64_t seq = 0;
    std::memcpy(&seq, (*r)->data(), sizeof seq);
    ASSERT_EQ(seq, i);
    ASSERT_EQ((*r)->size(), 9 + i % 200);
    ASSERT_EQ(static_cast<unsigned char>((**r)[(*r)->size() - 1]), (i & 0xff)) << i;
    c->release();
  }
  producer.join();
}

TEST_F(SpscRingSemanticsTest, ProducerTakeoverContinuesFromPublishedTail) {
  auto c = RingConsumer::create("r", {.capacity_bytes = 1024});
  ASSERT_TRUE(c);
  {
    auto p = RingProducer::open("r");
    ASSERT_TRUE(p);
    ASSERT_TRUE(*p->try_push(std::as_bytes(std::span("one", 3))));
    ASSERT_TRUE(*p->try_reserve(7));  // never committed
  }
  auto p2 = RingProducer::open("r");
  ASSERT_TRUE(p2);
  ASSERT_TRUE(*p2->try_push(std::as_bytes(std::span("two", 3))));
  EXPECT_EQ((**c->try_peek()).size(), 3u);
  auto second = c->try_peek();
  ASSERT_TRUE(second && *second);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*second)->data()), 3), "two");
}

// What describe() says of a ring (the numbers shmctl and the sidecar show).
std::uint64_t described(const Segment& seg, std::string_view key) {
  Node n;
  kSpscRingDescriptor.describe(seg, n);
  const Node* f = n.find(key);
  if (f == nullptr) {
    ADD_FAILURE() << "describe() has no " << key;
    return 0;
  }
  return std::get<std::uint64_t>(f->value());
}

// The producer stores its `tail` hint only when the tail crosses a multiple
// of capacity / 8 (128 bytes here), never per message; what the tools show
// comes from the chain and the counters, which stay exact.
TEST_F(SpscRingSemanticsTest, TailHintIsStoredLazilyAndTheCountersStayExact) {
  auto p = RingProducer::create("r", {.capacity_bytes = 1024});
  ASSERT_TRUE(p);
  auto c = RingConsumer::open("r");
  ASSERT_TRUE(c);
  const Segment& seg = p->segment();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(*p->try_push(bytes("12345678")));  // 3 x 16 bytes
  EXPECT_EQ(control(seg).producer.tail.load(), 0u) << "a hint stored per message";
  EXPECT_EQ(described(seg, "tail_hint"), 0u);
  EXPECT_EQ(described(seg, "tail"), 48u);
  EXPECT_EQ(described(seg, "depth_records"), 3u);
  EXPECT_EQ(described(seg, "records_pushed"), 3u);
  std::array<std::byte, 16> out{};
  ASSERT_TRUE(*c->try_pop(out));
  ASSERT_TRUE(*c->try_pop(out));
  EXPECT_EQ(described(seg, "records_popped"), 2u);
  EXPECT_EQ(described(seg, "head"), 32u);
  // The push ending at 128 crosses the stride: the hint is that commit's
  // tail; the next push (to 144) stores nothing.
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(*p->try_push(bytes("12345678")));  // ends at 144
  EXPECT_EQ(control(seg).producer.tail.load(), 128u);
  EXPECT_EQ(described(seg, "records_pushed"), 9u);
  // A batch counts every record it publishes.
  ASSERT_TRUE(*p->try_reserve(8));
  ASSERT_TRUE(*p->try_reserve(8));
  p->commit();
  EXPECT_EQ(described(seg, "records_pushed"), 11u);
  EXPECT_EQ(described(seg, "tail"), 176u);
  EXPECT_EQ(control(seg).producer.tail.load(), 128u);
  EXPECT_TRUE(kSpscRingDescriptor.verify(seg).empty());
}

// A producer that goes away between two hint stores leaves records past the
// hint: the next producer walks to their end and continues there.
TEST_F(SpscRingSemanticsTest, ANewProducerContinuesPastALaggingHint) {
  auto c = RingConsumer::create("r", {.capacity_bytes = 1024});
  ASSERT_TRUE(c);
  {
    auto p = RingProducer::open("r");
    ASSERT_TRUE(p);
    for (const char* s : {"a", "bb", "ccc", "dddd", "eeeee"}) ASSERT_TRUE(*p->try_push(bytes(s)));
    ASSERT_EQ(control(p->segment()).producer.tail.load(), 0u);
  }
  auto p2 = RingProducer::open("r");
  ASSERT_TRUE(p2);
  EXPECT_EQ(p2->published_position(), 80u);
  ASSERT_TRUE(*p2->try_push(bytes("after")));
  std::vector<std::string> got;
  std::array<std::byte, 16> out{};
  for (;;) {
    auto r = c->try_pop(out);
    ASSERT_TRUE(r) << r.error().what();
    if (!*r) break;
    got.emplace_back(reinterpret_cast<const char*>(out.data()), **r);
  }
  EXPECT_EQ(got, (std::vector<std::string>{"a", "bb", "ccc", "dddd", "eeeee", "after"}));
}

// try_push with reservations open takes the general path: its record joins
// the batch, and the batch and it become visible together, in order.
TEST_F(SpscRingSemanticsTest, TryPushWithAReservationOpenPublishesBothInOrder) {
  auto p = RingProducer::create("r", {.capacity_bytes = 1024});
  ASSERT_TRUE(p);
  auto c = RingConsumer::open("r");
  ASSERT_TRUE(c);
  auto first = p->try_reserve(3);
  ASSERT_TRUE(first && *first);
  std::memcpy((*first)->data(), "abc", 3);
  {
    auto none = c->try_peek();
    ASSERT_TRUE(none);
    EXPECT_FALSE(*none);
  }
  ASSERT_TRUE(*p->try_push(bytes("def")));
  auto a = c->try_peek();
  ASSERT_TRUE(a && *a);
  EXPECT_EQ(str(**a), "abc");
  auto b = c->try_peek();
  ASSERT_TRUE(b && *b);
  EXPECT_EQ(str(**b), "def");
  c->release();
  EXPECT_EQ(described(p->segment(), "records_pushed"), 2u);
  EXPECT_EQ(described(p->segment(), "records_popped"), 2u);
}

// A ring filled to exactly its capacity has no room for the terminator: the
// word after the last record is the header of the first one, a lap older. It
// must read empty, and the ring goes on once space is released.
TEST_F(SpscRingSemanticsTest, ExactlyFullRingReadsEmptyAfterItsLastRecord) {
  auto p = RingProducer::create("r", {.capacity_bytes = 64});
  auto c = RingConsumer::open("r");
  ASSERT_TRUE(p && c);
  for (int round = 0; round < 5; ++round) {
    for (char i = 0; i < 4; ++i) {  // 4 records of 16 bytes = 64
      const std::string rec(8, static_cast<char>('a' + i + round));
      ASSERT_TRUE(*p->try_push(bytes(rec))) << round << " " << int{i};
    }
    EXPECT_FALSE(*p->try_push(bytes("x"))) << "a full ring accepted more";
    for (char i = 0; i < 4; ++i) {
      auto r = c->try_peek();
      ASSERT_TRUE(r && *r) << round << " " << int{i};
      EXPECT_EQ(str(**r), std::string(8, static_cast<char>('a' + i + round)));
    }
    auto none = c->try_peek();
    ASSERT_TRUE(none) << none.error().what();
    EXPECT_FALSE(*none) << "round " << round << ": the previous lap's header read as a record";
    c->release();
  }
}

// A batch is one publication: none of its records is visible before commit,
// though every header after the first is already in the buffer.
TEST_F(SpscRingSemanticsTest, BatchBecomesVisibleAtOnce) {
  auto p = RingProducer::create("r", {.capacity_bytes = 256});
  auto c = RingConsumer::open("r");
  ASSERT_TRUE(p && c);
  for (int lap = 0; lap < 6; ++lap) {  // 6 batches of 96 bytes in 256: wraps, with padding
    for (int i = 0; i < 4; ++i) {
      auto r = p->try_reserve(12);
      ASSERT_TRUE(r && *r);
      std::memset((*r)->data(), 'a' + i, 12);
      auto seen = c->try_peek();
      ASSERT_TRUE(seen);
      EXPECT_FALSE(*seen) << "record visible before commit (lap " << lap << ")";
    }
    p->commit();
    for (int i = 0; i < 4; ++i) {
      auto r = c->try_peek();
      ASSERT_TRUE(r && *r) << lap << " " << i;
      EXPECT_EQ(str(**r), std::string(12, static_cast<char>('a' + i)));
    }
    EXPECT_FALSE(*c->try_peek());
    c->release();
  }
}

// Blocking on both sides, each side parking often (a 64-byte ring, records of
// one to three slots): a lost wake would leave a side asleep until its 10 s
// timeout. Once with the membarrier pairing, once with the fenced fallback.
TEST_F(SpscRingSemanticsTest, BlockingPingPongNeverLosesAWake) {
  for (const bool fenced : {false, true}) {
    SCOPED_TRACE(fenced ? "fenced wakers" : "membarrier");
    const std::string a = fenced ? "fa" : "ma", b = fenced ? "fb" : "mb";
    auto pa = RingProducer::create(a, {.capacity_bytes = 64});
    auto ca = RingConsumer::open(a);
    auto pb = RingProducer::create(b, {.capacity_bytes = 64});
    auto cb = RingConsumer::open(b);
    ASSERT_TRUE(pa && ca && pb && cb);
    if (fenced) {
      test_hooks::force_fenced_waker(*pa);
      test_hooks::force_fenced_waker(*ca);
      test_hooks::force_fenced_waker(*pb);
      test_hooks::force_fenced_waker(*cb);
    }
    const std::uint64_t count = test::scaled(2'000);
    std::atomic<bool> failed{false};
    std::thread echo([&] {
      std::array<std::byte, 24> buf{};
      for (std::uint64_t i = 0; i < count && !failed; ++i) {
        auto n = ca->pop(buf, 10s);
        if (!n || !*n) {
          failed = true;
          break;
        }
        if (!*pb->push(std::span(buf.data(), **n), 10s)) failed = true;
      }
    });
    std::array<std::byte, 24> out{}, in{};
    for (std::uint64_t i = 0; i < count && !failed; ++i) {
      const std::size_t n = 8 + (i % 3) * 8;
      std::memcpy(out.data(), &i, sizeof i);
      ASSERT_TRUE(*pa->push(std::span(out.data(), n), 10s)) << i;
      auto got = cb->pop(in, 10s);
      ASSERT_TRUE(got && *got) << "round trip " << i << ": no echo for 10 s (a lost wake?)";
      std::uint64_t seq = 0;
      std::memcpy(&seq, in.data(), sizeof seq);
      ASSERT_EQ(seq, i);
      ASSERT_EQ(**got, n);
    }
    echo.join();
    EXPECT_FALSE(failed) << "the echo side timed out (a lost wake?)";
  }
}

}  // namespace
}  // namespace shm
