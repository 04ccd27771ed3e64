// WaitSet across processes: every member kind (ring and channel, consumer and
// producer) x every reason (data, room, peer died, faulted, closed), made by a
// peer in another process (tests/helpers/waitset/waitset_peer.cpp) while the
// set is parked; a lost-wake stress; fd() in poll(); close() and destruction
// while another thread waits.
//
// Wake-ups that a peer's publish must deliver run with a liveness interval
// of 10 s, so only a real futex wake returns within test::kWakeBound. Deaths
// and scribbles wake nobody: the set sees them at its next liveness slice
// (20 ms here), also well within the bound.
#include "common/subprocess.hpp"
#include "common/temp_root.hpp"
#include "common/wake_probe.hpp"
#include "shm/channel/consumer.hpp"
#include "shm/channel/producer.hpp"
#include "shm/egress/egress.hpp"
#include "shm/egress/layout.hpp"
#include "shm/fanout/priority_fanout.hpp"
#include "shm/mpmc/layout.hpp"
#include "shm/mpmc/mpmc_ring.hpp"
#include "shm/relay/layout.hpp"
#include "shm/relay/relay.hpp"
#include "shm/segment/header.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"
#include "shm/topic/layout.hpp"
#include "shm/topic/topic.hpp"
#include "shm/waitset/waitset.hpp"

#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <csignal>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace shm::waitset_process_test {
namespace {

using namespace std::chrono_literals;
using test::Subprocess;

constexpr std::uint64_t kDataOffset = kHeaderSize;  // the data area follows the header
// A ring's buffer follows its control block (3 lines of 128 bytes).
constexpr std::uint64_t kRingBuffer = kDataOffset + 3 * 128;
constexpr std::uint64_t kRingHead = kDataOffset + 128;
// A channel's terminal word: the fifth line of its control block.
constexpr std::uint64_t kChannelTerminal = kDataOffset + 4 * 128;

std::span<const std::byte> bytes(const char* s) {
  return std::as_bytes(std::span<const char>(s, std::char_traits<char>::length(s)));
}

ChannelParams tiny_channel() {
  return ChannelParams{.pages = 2, .page_bytes = 64, .descriptors_per_page = 2, .ring_cells = 2};
}

// One waiting end of each kind, as the peer-death and scribble tests run them
// through the same event: a ring and a channel consumer (waiting for data) and
// a ring and a channel producer, both full (waiting for room). attach(set, i,
// tag) attaches the i-th: 0 ring consumer "rc", 1 ring producer "rp", 2
// channel consumer "cc", 3 channel producer "cp".
struct FourEnds {
  Result<RingConsumer> rc = RingConsumer::create("rc", {.capacity_bytes = 1024});
  Result<RingProducer> rp = RingProducer::create("rp", {.capacity_bytes = 64});
  Result<ChannelConsumer> cc = ChannelConsumer::create("cc", tiny_channel());
  Result<ChannelProducer> cp = ChannelProducer::create("cp", tiny_channel());

  [[nodiscard]] bool created() const { return rc && rp && cc && cp; }
  void fill_producers() {
    while (*rp->try_push(bytes("12345678"))) {
    }
    while (cp->try_send(bytes("12345678"))->status == SendStatus::Ok) {
    }
  }
  [[nodiscard]] Result<void> attach(WaitSet& set, std::size_t i, std::uint64_t tag) {
    switch (i) {
      case 0:
        return set.attach(*rc, tag);
      case 1:
        return set.attach(*rp, tag, 8);
      case 2:
        return set.attach(*cc, tag);
      default:
        return set.attach(*cp, tag, 8);
    }
  }
};

class WaitSetProcessTest : public ::testing::Test {
 protected:
  Subprocess peer(const std::string& role, const std::string& name,
                  std::vector<std::string> steps) {
    std::vector<std::string> argv{test::helper_path("waitset_peer"), role, name};
    argv.insert(argv.end(), steps.begin(), steps.end());
    return Subprocess(argv);
  }
  static WaitSet make_set(std::chrono::milliseconds liveness) {
    auto set = WaitSet::make({.liveness_interval = liveness});
    EXPECT_TRUE(set) << set.error().what();
    return std::move(*set);
  }
  void go() { std::ofstream(go_).put('1'); }

  // Parks `set` on a thread, runs `change`, and expects the wait to return
  // within the bound with `want` among the ready members.
  void expect_wake(WaitSet& set, ReadyEvent want, const std::function<void()>& change) {
    std::vector<ReadyEvent> got;
    WaitStatus status = WaitStatus::TimedOut;
    const std::uint64_t parks = set.snapshot().parks;
    const auto probe = test::probe_wake(
        [&] {
          auto r = set.wait(10s);
          ASSERT_TRUE(r) << r.error().what();
          status = r->status;
          got.assign(r->ready.begin(), r->ready.end());
        },
        [&] { return set.snapshot().parks > parks; }, change);
    test::expect_woken(probe);
    ASSERT_EQ(status, WaitStatus::Ready) << to_string(status);
    bool found = false;
    for (const auto& e : got) found = found || (e.tag == want.tag && e.reason == want.reason);
    std::string seen;
    for (const auto& e : got)
      seen += std::to_string(e.tag) + ":" + std::string(to_string(e.reason)) + " ";
    EXPECT_TRUE(found) << "wanted " << want.tag << ":" << to_string(want.reason) << ", got "
                       << seen;
  }

  test::TempRoot root_;
  std::string go_ = root_.file("go");
};

// ---------------------------------------------------------------- data and room

TEST_F(WaitSetProcessTest, RingConsumerWakesForARecordPushedByAnotherProcess) {
  auto c = RingConsumer::create("ring", {.capacity_bytes = 1024});
  ASSERT_TRUE(c);
  auto set = make_set(10s);
  ASSERT_TRUE(set.attach(*c, 1));
  auto p = peer("ring-producer", "ring", {"go:" + go_, "push:hello"});
  ASSERT_TRUE(p.wait_for_line("READY", 30s)) << p.output();
  expect_wake(set, {1, ReadyReason::Data}, [&] { go(); });
  std::byte buf[16];
  auto r = c->try_pop(buf);
  ASSERT_TRUE(r && *r);
  EXPECT_EQ(**r, 5u);
  EXPECT_EQ(p.wait(10s), 0) << p.output();
}

TEST_F(WaitSetProcessTest, RingProducerWakesForRoomFreedByAnotherProcess) {
  auto prod = RingProducer::create("ring", {.capacity_bytes = 64});
  ASSERT_TRUE(prod);
  while (*prod->try_push(bytes("12345678"))) {
  }
  auto set = make_set(10s);
  ASSERT_TRUE(set.attach(*prod, 2, 8));
  auto c = peer("ring-consumer", "ring", {"go:" + go_, "pop"});
  ASSERT_TRUE(c.wait_for_line("READY", 30s)) << c.output();
  expect_wake(set, {2, ReadyReason::Room}, [&] { go(); });
  auto pushed = prod->try_push(bytes("12345678"));
  ASSERT_TRUE(pushed);
  EXPECT_TRUE(*pushed);
  EXPECT_EQ(c.wait(10s), 0) << c.output();
}

TEST_F(WaitSetProcessTest, ChannelConsumerWakesForAPayloadSentByAnotherProcess) {
  auto cons = ChannelConsumer::create("chan", tiny_channel());
  ASSERT_TRUE(cons) << cons.error().what();
  auto set = make_set(10s);
  ASSERT_TRUE(set.attach(*cons, 3));
  auto p = peer("channel-producer", "chan", {"go:" + go_, "send:hello", "sleep:200"});
  ASSERT_TRUE(p.wait_for_line("READY", 30s)) << p.output();
  expect_wake(set, {3, ReadyReason::Data}, [&] { go(); });
  std::byte buf[64];
  auto r = cons->try_receive_into(buf);
  ASSERT_TRUE(r) << r.error().what();
  EXPECT_EQ(r->status, ReceiveStatus::Received);
  EXPECT_EQ(p.wait(10s), 0) << p.output();
}

TEST_F(WaitSetProcessTest, ChannelProducerWakesForRoomFreedByAnotherProcess) {
  auto prod = ChannelProducer::create("chan", tiny_channel());
  ASSERT_TRUE(prod) << prod.error().what();
  while (prod->try_send(bytes("12345678"))->status == SendStatus::Ok) {
  }
  auto set = make_set(10s);
  ASSERT_TRUE(set.attach(*prod, 4, 8));
  auto c = peer("channel-consumer", "chan", {"go:" + go_, "receive", "sleep:200"});
  ASSERT_TRUE(c.wait_for_line("READY", 30s)) << c.output();
  expect_wake(set, {4, ReadyReason::Room}, [&] { go(); });
  auto sent = prod->try_send(bytes("12345678"));
  ASSERT_TRUE(sent);
  EXPECT_EQ(sent->status, SendStatus::Ok);
  EXPECT_EQ(c.wait(10s), 0) << c.output();
}

// The other way a channel producer waits: the page quota. Room comes back
// when the consumer crosses into the next page and releases the oldest one
// ([chan.E]), not when it merely gives a payload back.
TEST_F(WaitSetProcessTest, ChannelProducerWakesWhenTheConsumerReleasesAPage) {
  auto prod = ChannelProducer::create(
      "chan", {.pages = 2, .page_bytes = 64, .descriptors_per_page = 8, .ring_cells = 64});
  ASSERT_TRUE(prod) << prod.error().what();
  const char payload[] = "0123456789abcdef0123456";  // 24 bytes: two fill a page
  SendStatus last = SendStatus::Ok;
  int sent = 0;
  while ((last = prod->try_send(bytes(payload))->status) == SendStatus::Ok) ++sent;
  ASSERT_EQ(last, SendStatus::PageQuotaExhausted);
  ASSERT_EQ(sent, 4);
  auto set = make_set(10s);
  ASSERT_TRUE(set.attach(*prod, 6, 24));
  auto r = set.wait(0ns);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, WaitStatus::TimedOut);
  // Two receives give payloads back (each wakes the parked set, which finds
  // no room yet); the third is the first of the second page: page 0 is
  // released and the set has room.
  auto c = peer("channel-consumer", "chan",
                {"go:" + go_, "receive", "receive", "sleep:50", "receive", "sleep:200"});
  ASSERT_TRUE(c.wait_for_line("READY", 30s)) << c.output();
  std::vector<ReadyEvent> got;
  const auto probe = test::probe_wake(
      [&] {
        auto w = set.wait(10s);
        ASSERT_TRUE(w);
        got.assign(w->ready.begin(), w->ready.end());
      },
      [&] { return set.snapshot().parks > 0; }, [&] { go(); });
  EXPECT_FALSE(probe.returned_early);
  ASSERT_GE(probe.latency.count(), 50) << "room before the page was released";
  EXPECT_LE(probe.latency, 50ms + test::kWakeBound);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].reason, ReadyReason::Room);
  auto ok = prod->try_send(bytes(payload));
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, SendStatus::Ok);
  EXPECT_EQ(c.wait(10s), 0) << c.output();
}

TEST_F(WaitSetProcessTest, ChannelConsumerReportsClosedWhenTheProducerFinishes) {
  auto cons = ChannelConsumer::create("chan", tiny_channel());
  ASSERT_TRUE(cons);
  auto set = make_set(10s);
  ASSERT_TRUE(set.attach(*cons, 5));
  auto p = peer("channel-producer", "chan", {"go:" + go_, "finish"});
  ASSERT_TRUE(p.wait_for_line("READY", 30s)) << p.output();
  expect_wake(set, {5, ReadyReason::Closed}, [&] { go(); });
  EXPECT_EQ(p.wait(10s), 0) << p.output();
}

// ---------------------------------------------------------------- peer died

TEST_F(WaitSetProcessTest, EachMemberReportsItsPeerKilled) {
  FourEnds ends;
  ASSERT_TRUE(ends.created());
  ends.fill_producers();
  struct Case {
    std::uint64_t tag;
    const char* role;
    const char* name;
  };
  // In FourEnds' order: each end's peer.
  const std::vector<Case> cases{{11, "ring-producer", "rc"},
                                {12, "ring-consumer", "rp"},
                                {13, "channel-producer", "cc"},
                                {14, "channel-consumer", "cp"}};
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& k = cases[i];
    SCOPED_TRACE(k.role);
    auto set = make_set(20ms);
    ASSERT_TRUE(ends.attach(set, i, k.tag));
    auto p = peer(k.role, k.name, {"go:" + go_, "die"});
    ASSERT_TRUE(p.wait_for_line("READY", 30s)) << p.output();
    expect_wake(set, {k.tag, ReadyReason::PeerDied}, [&] { go(); });
    EXPECT_EQ(p.wait(10s), 128 + SIGKILL);
    std::filesystem::remove(go_);
  }
}

TEST_F(WaitSetProcessTest, APeerThatDetachesCleanlyIsNotReportedDead) {
  auto c = RingConsumer::create("ring", {.capacity_bytes = 1024});
  ASSERT_TRUE(c);
  auto set = make_set(5ms);
  ASSERT_TRUE(set.attach(*c, 1));
  auto p = peer("ring-producer", "ring", {});
  EXPECT_EQ(p.wait(30s), 0) << p.output();
  auto r = set.wait(100ms);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, WaitStatus::TimedOut);
  EXPECT_GT(set.snapshot().probes, 0u);
}

// ---------------------------------------------------------------- faulted

TEST_F(WaitSetProcessTest, EachMemberReportsAStructureScribbledByAnotherProcess) {
  FourEnds ends;
  ASSERT_TRUE(ends.created());
  ends.fill_producers();
  const std::string faulted = "poke:" + std::to_string(kChannelTerminal) + ":544C5546";
  struct Case {
    std::uint64_t tag;
    const char* role;
    const char* name;
    std::string poke;
  };
  const std::vector<Case> cases{
      // a header word of no type at the consumer's peek position
      {21, "ring-producer", "rc", "poke:" + std::to_string(kRingBuffer) + ":FFFFFFFFFFFFFFFF"},
      // a head that is not on a record boundary
      {22, "ring-consumer", "rp", "poke:" + std::to_string(kRingHead) + ":3"},
      // the terminal word FAULTED, stored by no library call
      {23, "channel-producer", "cc", faulted},
      {24, "channel-consumer", "cp", faulted}};
  for (std::size_t i = 0; i < cases.size(); ++i) {  // in FourEnds' order
    const Case& k = cases[i];
    SCOPED_TRACE(k.role);
    auto set = make_set(20ms);
    ASSERT_TRUE(ends.attach(set, i, k.tag));
    auto p = peer(k.role, k.name, {"go:" + go_, k.poke, "sleep:300"});
    ASSERT_TRUE(p.wait_for_line("READY", 30s)) << p.output();
    expect_wake(set, {k.tag, ReadyReason::Faulted}, [&] { go(); });
    EXPECT_EQ(p.wait(10s), 0) << p.output();
    std::filesystem::remove(go_);
  }
}

// ---------------------------------------------------------------- fd()

TEST_F(WaitSetProcessTest, FdBecomesReadableWhenAnotherProcessPushes) {
  auto c = RingConsumer::create("ring", {.capacity_bytes = 1024});
  ASSERT_TRUE(c);
  // The peer attaches first: a producer's attach wakes a parked consumer
  // (the takeover wake), which would make the descriptor readable early.
  auto p = peer("ring-producer", "ring", {"go:" + go_, "push:hello"});
  ASSERT_TRUE(p.wait_for_line("READY", 30s)) << p.output();
  auto set = make_set(10s);
  ASSERT_TRUE(set.attach(*c, 1));
  auto fd = set.fd();
  ASSERT_TRUE(fd) << fd.error().what();
  pollfd pfd{*fd, POLLIN, 0};
  ASSERT_EQ(::poll(&pfd, 1, 0), 1) << "fd() starts readable: the first wait() arms it";
  auto r = set.wait(0ns);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, WaitStatus::TimedOut);
  EXPECT_EQ(::poll(&pfd, 1, 20), 0) << "readable with nothing ready";
  const auto changed = std::chrono::steady_clock::now();
  go();
  // Readable, then wait(0) has the record (a spurious readiness would
  // return TimedOut and re-arm: look again).
  bool ready = false;
  while (!ready && std::chrono::steady_clock::now() - changed < 10s) {
    ASSERT_EQ(::poll(&pfd, 1, 10'000), 1);
    r = set.wait(0ns);
    ASSERT_TRUE(r);
    ready = r->status == WaitStatus::Ready;
  }
  ASSERT_TRUE(ready);
  EXPECT_LE(std::chrono::steady_clock::now() - changed, test::kWakeBound);
  EXPECT_EQ(r->ready[0].reason, ReadyReason::Data);
  EXPECT_GE(set.snapshot().fd_signals, 1u);
  std::byte buf[16];
  ASSERT_TRUE(c->try_pop(buf));
  // A wait() that found something leaves the descriptor readable; the next
  // finds nothing and re-arms; the descriptor goes quiet.
  EXPECT_EQ(::poll(&pfd, 1, 0), 1);
  r = set.wait(0ns);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, WaitStatus::TimedOut);
  EXPECT_EQ(::poll(&pfd, 1, 50), 0);
  EXPECT_EQ(p.wait(10s), 0) << p.output();
}

// ---------------------------------------------------------------- close, destroy

TEST_F(WaitSetProcessTest, CloseFromAnotherThreadEndsAWait) {
  auto c = RingConsumer::create("ring", {.capacity_bytes = 1024});
  ASSERT_TRUE(c);
  auto set = make_set(10s);
  ASSERT_TRUE(set.attach(*c, 1));
  WaitStatus status = WaitStatus::TimedOut;
  const auto probe = test::probe_wake(
      [&] {
        auto r = set.wait(10s);
        ASSERT_TRUE(r);
        status = r->status;
      },
      [&] { return set.snapshot().parks > 0; }, [&] { set.close(); });
  test::expect_woken(probe);
  EXPECT_EQ(status, WaitStatus::Closed);
  auto again = set.wait(0ns);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, WaitStatus::Closed);
}

TEST_F(WaitSetProcessTest, DestroyingTheSetEndsAWaitInAnotherThread) {
  auto c = RingConsumer::create("ring", {.capacity_bytes = 1024});
  ASSERT_TRUE(c);
  auto set = std::make_unique<WaitSet>(make_set(10s));
  ASSERT_TRUE(set->attach(*c, 1));
  std::atomic<bool> parked{false};
  WaitStatus status = WaitStatus::TimedOut;
  WaitSet* raw = set.get();
  const auto probe = test::probe_wake(
      [&] {
        auto r = raw->wait(10s);
        ASSERT_TRUE(r);
        status = r->status;
      },
      [&] { return parked.exchange(raw->snapshot().parks > 0) || raw->snapshot().parks > 0; },
      [&] { set.reset(); });
  test::expect_woken(probe);
  EXPECT_EQ(status, WaitStatus::Closed);
  // The ring is untouched: its producer can still push and it can still pop.
  auto p = RingProducer::open("ring");
  ASSERT_TRUE(p);
  ASSERT_TRUE(p->try_push(bytes("x")));
  std::byte buf[4];
  auto r = c->try_pop(buf);
  ASSERT_TRUE(r && *r);
}

// ---------------------------------------------------------------- the example

// examples/waitset_service: one thread, a Boost.Asio loop on fd(), two rings
// fed by two ring_producer processes, a relay fed by a writer process and an
// egress fed by a producer process, stopped by SIGTERM with everything taken.
TEST_F(WaitSetProcessTest, ServiceExampleServesTwoRingsARelayAndAnEgressAndStopsOnSigterm) {
#if !SHM_EXPECT_EXAMPLES
  GTEST_SKIP() << "LIBSHM_BUILD_EXAMPLES is OFF";
#endif
  Subprocess service({test::bin_path("waitset_service"), "--create", "--rings", "wa,wb",
                      "--capacity", "65536", "--relay", "wr", "--egress", "we"});
  ASSERT_TRUE(service.wait_for_line("serving 4 endpoints", 30s)) << service.output();
  Subprocess a({test::bin_path("ring_producer"), "--name", "wa", "--count", "2000"});
  Subprocess b({test::bin_path("ring_producer"), "--name", "wb", "--count", "3000"});
  std::vector<std::string> writes, enqueues;
  for (int i = 0; i < 40; ++i) {
    writes.push_back("write:" + std::to_string(i));
    enqueues.push_back("enqueue:e" + std::to_string(i));
  }
  auto w = peer("relay-writer", "wr", writes);
  auto e = peer("egress-producer", "we", enqueues);
  ASSERT_EQ(a.wait(60s), 0) << a.output();
  ASSERT_EQ(b.wait(60s), 0) << b.output();
  ASSERT_EQ(w.wait(60s), 0) << w.output();
  ASSERT_EQ(e.wait(60s), 0) << e.output();
  // The producers' last records are taken once the loop has run; then stop it.
  std::this_thread::sleep_for(200ms);
  service.kill(SIGTERM);
  ASSERT_EQ(service.wait(30s), 0) << service.output();
  // ring_producer ends its stream with one more record (end of stream).
  EXPECT_NE(service.output().find("wa: 2001 taken"), std::string::npos) << service.output();
  EXPECT_NE(service.output().find("wb: 3001 taken"), std::string::npos) << service.output();
  EXPECT_NE(service.output().find("wr: 40 taken"), std::string::npos) << service.output();
  EXPECT_NE(service.output().find("we: 40 taken"), std::string::npos) << service.output();
  EXPECT_NE(service.output().find("signal 15: stopping"), std::string::npos) << service.output();
}

// ---------------------------------------------------------------- topic subscriber

TopicParams small_topic(std::uint64_t queue_depth = 4) {
  return TopicParams{.max_sample_bytes = 64,
                     .chunks = 8 + 3 * (queue_depth + 2),
                     .queue_depth = queue_depth,
                     .history = 0,
                     .max_held = 2};
}

TEST_F(WaitSetProcessTest, TopicSubscriberWakesForASamplePublishedByAnotherProcess) {
  auto sub = TopicSubscriber::create("topic", small_topic(), TopicOverflow::DropOldest);
  ASSERT_TRUE(sub) << sub.error().what();
  auto set = make_set(10s);
  ASSERT_TRUE(set.attach(*sub, 31));
  auto p = peer("topic-publisher", "topic", {"go:" + go_, "publish:hello", "sleep:200"});
  ASSERT_TRUE(p.wait_for_line("READY", 30s)) << p.output();
  expect_wake(set, {31, ReadyReason::Data}, [&] { go(); });
  auto s = sub->try_receive();
  ASSERT_TRUE(s) << s.error().what();
  ASSERT_TRUE(*s);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*s)->bytes().data()), (*s)->bytes().size()),
            "hello");
  EXPECT_EQ(p.wait(10s), 0) << p.output();
}

TEST_F(WaitSetProcessTest, TopicSubscriberReportsItsPublisherKilled) {
  auto sub = TopicSubscriber::create("topic", small_topic(), TopicOverflow::DropOldest);
  ASSERT_TRUE(sub) << sub.error().what();
  auto set = make_set(20ms);
  ASSERT_TRUE(set.attach(*sub, 32));
  auto p = peer("topic-publisher", "topic", {"go:" + go_, "die"});
  ASSERT_TRUE(p.wait_for_line("READY", 30s)) << p.output();
  expect_wake(set, {32, ReadyReason::PeerDied}, [&] { go(); });
  EXPECT_EQ(p.wait(10s), 128 + SIGKILL);
  // A new publisher takes the role over: no longer dead, and its sample wakes the set.
  std::filesystem::remove(go_);
  auto next = peer("topic-publisher", "topic", {"go:" + go_, "publish:again", "sleep:200"});
  ASSERT_TRUE(next.wait_for_line("READY", 30s)) << next.output();
  auto r = set.wait(0ns);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, WaitStatus::TimedOut);
  expect_wake(set, {32, ReadyReason::Data}, [&] { go(); });
  EXPECT_EQ(next.wait(10s), 0) << next.output();
}

TEST_F(WaitSetProcessTest, TopicSubscriberReportsItsRecordScribbledByAnotherProcess) {
  const TopicParams params = small_topic();
  auto sub = TopicSubscriber::create("topic", params, TopicOverflow::DropOldest);
  ASSERT_TRUE(sub) << sub.error().what();
  const topic::Geometry g = topic::geometry_for(topic::block_for(params));
  const std::uint64_t record =
      kDataOffset + g.records + (sub->attachment().slot() - kExclusiveSlots) * g.record_stride;
  auto set = make_set(20ms);
  ASSERT_TRUE(set.attach(*sub, 33));
  // The record's active and generation words zeroed: no longer this handle's.
  auto p = peer("topic-publisher", "topic",
                {"go:" + go_, "poke:" + std::to_string(record) + ":0", "sleep:300"});
  ASSERT_TRUE(p.wait_for_line("READY", 30s)) << p.output();
  expect_wake(set, {33, ReadyReason::Faulted}, [&] { go(); });
  EXPECT_EQ(p.wait(10s), 0) << p.output();
}

// ---------------------------------------------------------------- relay

// A FIFO relay of 8 entries that blocks writers at 4 pending (high water)
// until a take brings it to 1 (low water).
RelayConfig small_relay() {
  RelayConfig c;
  c.policy = policy::kRawFifo;
  c.value_bytes = 8;
  c.max_entries = 8;
  c.backpressure = Backpressure{Dimension::Count, 4, 1, Overflow::Block};
  return c;
}

// The relay's `faulted` word (Control starts the data area), as a 4-byte poke.
std::string relay_fault_poke() {
  return "poke32:" + std::to_string(kDataOffset + offsetof(relay::Control, faulted)) + ":1";
}

// Writes until the relay is full (Block answers TimedOut at once).
void fill_relay(RelayWriter& w) {
  for (std::uint64_t k = 0;; ++k) {
    auto r = w.try_write(k, std::as_bytes(std::span(&k, 1)));
    ASSERT_TRUE(r) << r.error().what();
    if (r->status == WriteStatus::TimedOut) return;
    ASSERT_EQ(r->status, WriteStatus::Appended);
  }
}

TEST_F(WaitSetProcessTest, RelayReaderWakesForAWriteByAnotherProcess) {
  auto reader = RelayReader::create("relay", small_relay());
  ASSERT_TRUE(reader) << reader.error().what();
  auto set = make_set(10s);
  ASSERT_TRUE(set.attach(*reader, 41));
  auto idle = set.wait(0ns);
  ASSERT_TRUE(idle);
  EXPECT_EQ(idle->status, WaitStatus::TimedOut);
  auto w = peer("relay-writer", "relay", {"go:" + go_, "write:7", "sleep:200"});
  ASSERT_TRUE(w.wait_for_line("READY", 30s)) << w.output();
  expect_wake(set, {41, ReadyReason::Data}, [&] { go(); });
  auto got = reader->take(8);
  ASSERT_TRUE(got) << got.error().what();
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].key, 7u);
  ASSERT_TRUE(reader->commit());
  // Level-triggered: nothing is left to take.
  auto after = set.wait(0ns);
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, WaitStatus::TimedOut);
  EXPECT_EQ(w.wait(10s), 0) << w.output();
}

TEST_F(WaitSetProcessTest, RelayWriterWakesForRoomFreedByAnotherProcess) {
  auto writer = RelayWriter::create("relay", small_relay());
  ASSERT_TRUE(writer) << writer.error().what();
  fill_relay(*writer);
  auto set = make_set(10s);
  auto too_large = set.attach(*writer, 43, 9);
  ASSERT_FALSE(too_large);
  EXPECT_EQ(too_large.error().code, Errc::TooLarge);
  ASSERT_TRUE(set.attach(*writer, 42, 8));
  auto full = set.wait(0ns);
  ASSERT_TRUE(full);
  EXPECT_EQ(full->status, WaitStatus::TimedOut);
  // The take brings the level from 4 to 0 (low water 1): is_full clears.
  auto r = peer("relay-reader", "relay", {"go:" + go_, "take:8", "sleep:200"});
  ASSERT_TRUE(r.wait_for_line("READY", 30s)) << r.output();
  expect_wake(set, {42, ReadyReason::Room}, [&] { go(); });
  const std::uint64_t v = 99;
  auto wrote = writer->try_write(99, std::as_bytes(std::span(&v, 1)));
  ASSERT_TRUE(wrote) << wrote.error().what();
  EXPECT_EQ(wrote->status, WriteStatus::Appended);
  EXPECT_EQ(r.wait(10s), 0) << r.output();
}

// Every entry in the reader's hands: the level is low, but no entry is free
// until the reader's commit. The take wakes the set (is_full clears), which
// finds no room and parks again; the commit 100 ms later is what makes room.
TEST_F(WaitSetProcessTest, RelayWriterWakesWhenTheReaderCommitsInAnotherProcess) {
  RelayConfig config = small_relay();
  config.backpressure = Backpressure{Dimension::Count, 8, 7, Overflow::Block};
  auto writer = RelayWriter::create("relay", config);
  ASSERT_TRUE(writer) << writer.error().what();
  fill_relay(*writer);
  auto set = make_set(10s);
  ASSERT_TRUE(set.attach(*writer, 44, 8));
  auto r = peer("relay-reader", "relay", {"go:" + go_, "take:8:100", "sleep:200"});
  ASSERT_TRUE(r.wait_for_line("READY", 30s)) << r.output();
  std::vector<ReadyEvent> got;
  const auto probe = test::probe_wake(
      [&] {
        auto w = set.wait(10s);
        ASSERT_TRUE(w) << w.error().what();
        got.assign(w->ready.begin(), w->ready.end());
      },
      [&] { return set.snapshot().parks > 0; }, [&] { go(); });
  EXPECT_FALSE(probe.returned_early);
  ASSERT_GE(probe.latency.count(), 100) << "room before the reader committed";
  EXPECT_LE(probe.latency, 100ms + test::kWakeBound);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].reason, ReadyReason::Room);
  EXPECT_EQ(r.wait(10s), 0) << r.output();
}

TEST_F(WaitSetProcessTest, RelayWriterReportsItsReaderKilled) {
  auto writer = RelayWriter::create("relay", small_relay());
  ASSERT_TRUE(writer) << writer.error().what();
  fill_relay(*writer);
  auto set = make_set(20ms);
  ASSERT_TRUE(set.attach(*writer, 45, 8));
  auto r = peer("relay-reader", "relay", {"go:" + go_, "die"});
  ASSERT_TRUE(r.wait_for_line("READY", 30s)) << r.output();
  expect_wake(set, {45, ReadyReason::PeerDied}, [&] { go(); });
  EXPECT_EQ(r.wait(10s), 128 + SIGKILL);
}

TEST_F(WaitSetProcessTest, RelayReaderAndWriterReportTheRelayFaultedByAnotherProcess) {
  {
    SCOPED_TRACE("reader");
    auto reader = RelayReader::create("rf", small_relay());
    ASSERT_TRUE(reader) << reader.error().what();
    auto set = make_set(20ms);
    ASSERT_TRUE(set.attach(*reader, 46));
    auto w = peer("relay-writer", "rf", {"go:" + go_, relay_fault_poke(), "sleep:300"});
    ASSERT_TRUE(w.wait_for_line("READY", 30s)) << w.output();
    expect_wake(set, {46, ReadyReason::Faulted}, [&] { go(); });
    EXPECT_EQ(w.wait(10s), 0) << w.output();
    auto taken = reader->take(1);
    ASSERT_FALSE(taken);
    EXPECT_EQ(taken.error().code, Errc::Faulted);
  }
  std::filesystem::remove(go_);
  {
    SCOPED_TRACE("writer");
    auto writer = RelayWriter::create("wf", small_relay());
    ASSERT_TRUE(writer) << writer.error().what();
    fill_relay(*writer);
    auto set = make_set(20ms);
    ASSERT_TRUE(set.attach(*writer, 47, 8));
    auto r = peer("relay-reader", "wf", {"go:" + go_, relay_fault_poke(), "sleep:300"});
    ASSERT_TRUE(r.wait_for_line("READY", 30s)) << r.output();
    expect_wake(set, {47, ReadyReason::Faulted}, [&] { go(); });
    EXPECT_EQ(r.wait(10s), 0) << r.output();
  }
}

// ---------------------------------------------------------------- egress

// A pool of 2 slots of 16 bytes; a failed record waits 60 ms (then 120, ...).
EgressParams small_egress() {
  return EgressParams{.max_payloads = 2,
                      .slot_bytes = 16,
                      .inflight_limit = 2,
                      .retry_budget = 3,
                      .retry_base = std::chrono::milliseconds(60),
                      .retry_ceiling = std::chrono::seconds(1)};
}

// The egress's `faulted` word (Control starts the data area), as a 4-byte poke.
std::string egress_fault_poke() {
  return "poke32:" +
         std::to_string(kDataOffset + offsetof(egress::Control, lock) +
                        offsetof(egress::Control::Lock, faulted)) +
         ":1";
}

void fill_egress(Egress& e) {
  for (;;) {
    auto r = e.try_enqueue(bytes("12345678"));
    ASSERT_TRUE(r) << r.error().what();
    if (r->status == egress::EnqueueStatus::Full) return;
  }
}

TEST_F(WaitSetProcessTest, EgressTransportWakesForAPayloadEnqueuedByAnotherProcess) {
  auto t = EgressTransport::create("eg", small_egress());
  ASSERT_TRUE(t) << t.error().what();
  auto set = make_set(10s);
  ASSERT_TRUE(set.attach(*t, 51));
  auto idle = set.wait(0ns);
  ASSERT_TRUE(idle);
  EXPECT_EQ(idle->status, WaitStatus::TimedOut);
  auto p = peer("egress-producer", "eg", {"go:" + go_, "enqueue:hello", "sleep:200"});
  ASSERT_TRUE(p.wait_for_line("READY", 30s)) << p.output();
  expect_wake(set, {51, ReadyReason::Data}, [&] { go(); });
  std::vector<std::byte> payload;
  auto c = t->try_claim(payload);
  ASSERT_TRUE(c) << c.error().what();
  EXPECT_EQ(c->status, egress::ClaimStatus::Claimed);
  EXPECT_EQ(payload.size(), 5u);
  // Level-triggered: the one record is in flight, nothing else to claim.
  auto after = set.wait(0ns);
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, WaitStatus::TimedOut);
  // The set's +1 in claim_waiters is taken back when a wait returns.
  EXPECT_EQ(t->egress().wake_counters().claim_waiters, 0u);
  EXPECT_EQ(p.wait(10s), 0) << p.output();
}

// A failed record is claimable again at its due time, which no one wakes
// for: the set bounds its sleep by it, as the transport's own claim does.
TEST_F(WaitSetProcessTest, EgressTransportWakesWhenAFailedRecordIsDue) {
  auto t = EgressTransport::create("eg", small_egress());
  ASSERT_TRUE(t) << t.error().what();
  auto p = Egress::open("eg");
  ASSERT_TRUE(p) << p.error().what();
  ASSERT_EQ(p->try_enqueue(bytes("x"))->status, egress::EnqueueStatus::Enqueued);
  std::vector<std::byte> payload;
  auto c = t->try_claim(payload);
  ASSERT_TRUE(c && c->status == egress::ClaimStatus::Claimed);
  auto set = make_set(10s);
  ASSERT_TRUE(set.attach(*t, 52));
  ASSERT_TRUE(t->fail(c->envelope.sequence));  // parked for 60 ms
  const auto failed = std::chrono::steady_clock::now();
  auto r = set.wait(10s);
  const auto waited = std::chrono::steady_clock::now() - failed;
  ASSERT_TRUE(r) << r.error().what();
  ASSERT_EQ(r->status, WaitStatus::Ready);
  ASSERT_EQ(r->ready.size(), 1u);
  EXPECT_EQ(r->ready[0].reason, ReadyReason::Data);
  EXPECT_GE(waited, 55ms) << "ready before the backoff elapsed";
  EXPECT_LE(waited, 60ms + test::kWakeBound);
  auto again = t->try_claim(payload);
  ASSERT_TRUE(again) << again.error().what();
  EXPECT_EQ(again->status, egress::ClaimStatus::Claimed);
}

TEST_F(WaitSetProcessTest, EgressTransportReportsClosedWhenFencedByAnotherProcess) {
  auto t = EgressTransport::create("eg", small_egress());
  ASSERT_TRUE(t) << t.error().what();
  auto set = make_set(10s);
  ASSERT_TRUE(set.attach(*t, 53));
  auto p = peer("egress-producer", "eg", {"go:" + go_, "reconnect", "sleep:200"});
  ASSERT_TRUE(p.wait_for_line("READY", 30s)) << p.output();
  expect_wake(set, {53, ReadyReason::Closed}, [&] { go(); });
  std::vector<std::byte> payload;
  auto c = t->try_claim(payload);
  ASSERT_TRUE(c) << c.error().what();
  EXPECT_EQ(c->status, egress::ClaimStatus::StaleGeneration);
  EXPECT_EQ(p.wait(10s), 0) << p.output();
}

TEST_F(WaitSetProcessTest, EgressSenderWakesForRoomWhenAnotherProcessAcks) {
  auto e = Egress::create("eg", small_egress());
  ASSERT_TRUE(e) << e.error().what();
  fill_egress(*e);
  auto set = make_set(10s);
  auto too_large = set.attach(*e, 55, 17);
  ASSERT_FALSE(too_large);
  EXPECT_EQ(too_large.error().code, Errc::TooLarge);
  ASSERT_TRUE(set.attach(*e, 54, 8));
  auto full = set.wait(0ns);
  ASSERT_TRUE(full);
  EXPECT_EQ(full->status, WaitStatus::TimedOut);
  auto t = peer("egress-transport", "eg", {"go:" + go_, "claim-ack", "sleep:200"});
  ASSERT_TRUE(t.wait_for_line("READY", 30s)) << t.output();
  expect_wake(set, {54, ReadyReason::Room}, [&] { go(); });
  auto r = e->try_enqueue(bytes("12345678"));
  ASSERT_TRUE(r) << r.error().what();
  EXPECT_EQ(r->status, egress::EnqueueStatus::Enqueued);
  EXPECT_EQ(e->wake_counters().space_waiters, 0u);
  EXPECT_EQ(t.wait(10s), 0) << t.output();
}

TEST_F(WaitSetProcessTest, EgressSenderReportsItsTransportKilled) {
  auto e = Egress::create("eg", small_egress());
  ASSERT_TRUE(e) << e.error().what();
  fill_egress(*e);
  auto set = make_set(20ms);
  ASSERT_TRUE(set.attach(*e, 56, 8));
  auto t = peer("egress-transport", "eg", {"go:" + go_, "die"});
  ASSERT_TRUE(t.wait_for_line("READY", 30s)) << t.output();
  expect_wake(set, {56, ReadyReason::PeerDied}, [&] { go(); });
  EXPECT_EQ(t.wait(10s), 128 + SIGKILL);
}

TEST_F(WaitSetProcessTest, EgressTransportAndSenderReportTheEgressFaultedByAnotherProcess) {
  {
    SCOPED_TRACE("transport");
    auto t = EgressTransport::create("ef", small_egress());
    ASSERT_TRUE(t) << t.error().what();
    auto set = make_set(20ms);
    ASSERT_TRUE(set.attach(*t, 57));
    auto p = peer("egress-producer", "ef", {"go:" + go_, egress_fault_poke(), "sleep:300"});
    ASSERT_TRUE(p.wait_for_line("READY", 30s)) << p.output();
    expect_wake(set, {57, ReadyReason::Faulted}, [&] { go(); });
    EXPECT_EQ(p.wait(10s), 0) << p.output();
    std::vector<std::byte> payload;
    auto c = t->try_claim(payload);
    ASSERT_FALSE(c);
    EXPECT_EQ(c.error().code, Errc::Faulted);
  }
  std::filesystem::remove(go_);
  {
    SCOPED_TRACE("sender");
    auto e = Egress::create("sf", small_egress());
    ASSERT_TRUE(e) << e.error().what();
    fill_egress(*e);
    auto set = make_set(20ms);
    ASSERT_TRUE(set.attach(*e, 58, 8));
    auto t = peer("egress-transport", "sf", {"go:" + go_, egress_fault_poke(), "sleep:300"});
    ASSERT_TRUE(t.wait_for_line("READY", 30s)) << t.output();
    expect_wake(set, {58, ReadyReason::Faulted}, [&] { go(); });
    EXPECT_EQ(t.wait(10s), 0) << t.output();
  }
}

// ---------------------------------------------------------------- lost-wake stress

// Three producer processes push 5000 records each with random pauses (none,
// a spin, a sleep of up to 200 us) into small rings, so both sides park and
// wake thousands of times; the set drains them all in order. The liveness
// slice is 10 s: a wake lost by the set shows as a wait of 1 s or more (its
// deadline's final check would find the record and hide the loss).
TEST_F(WaitSetProcessTest, NoWakeIsLostUnderRandomizedRacesAcrossProcesses) {
  constexpr int kRings = 3;
  constexpr std::uint64_t kRecords = 5000;
  std::vector<RingConsumer> rings;
  auto set = make_set(10s);
  std::vector<Subprocess> peers;
  for (int i = 0; i < kRings; ++i) {
    auto c = RingConsumer::create("s" + std::to_string(i), {.capacity_bytes = 256});
    ASSERT_TRUE(c);
    rings.push_back(std::move(*c));
  }
  for (int i = 0; i < kRings; ++i) ASSERT_TRUE(set.attach(rings[i], i));
  for (int i = 0; i < kRings; ++i) {
    peers.push_back(
        peer("ring-producer", "s" + std::to_string(i),
             {"go:" + go_, "stress:" + std::to_string(kRecords) + ":" + std::to_string(1234 + i)}));
    ASSERT_TRUE(peers.back().wait_for_line("READY", 30s)) << peers.back().output();
  }
  go();
  std::vector<std::uint64_t> next(kRings, 0);
  std::uint64_t done = 0;
  const auto start = std::chrono::steady_clock::now();
  while (done < kRings * kRecords) {
    const auto before = std::chrono::steady_clock::now();
    auto r = set.wait(2s);
    ASSERT_TRUE(r) << r.error().what();
    ASSERT_EQ(r->status, WaitStatus::Ready)
        << "a wake was lost: " << done << " records taken, next " << next[0] << "/" << next[1]
        << "/" << next[2];
    ASSERT_LT(std::chrono::steady_clock::now() - before, 1s)
        << "a wake was lost (found at the deadline): " << done << " records taken";
    std::vector<ReadyEvent> events(r->ready.begin(), r->ready.end());
    for (const auto& e : events) {
      ASSERT_EQ(e.reason, ReadyReason::Data);
      for (;;) {
        std::uint64_t v = 0;
        auto got = rings[e.tag].try_pop(std::as_writable_bytes(std::span(&v, 1)));
        ASSERT_TRUE(got) << got.error().what();
        if (!*got) break;
        ASSERT_EQ(v, next[e.tag]) << "ring " << e.tag;
        ++next[e.tag];
        ++done;
      }
    }
  }
  for (auto& p : peers) EXPECT_EQ(p.wait(10s), 0) << p.output();
  EXPECT_GT(set.snapshot().parks, 0u);
  std::printf("stress: %llu records in %lld ms, %llu parks\n",
              static_cast<unsigned long long>(done),
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                         std::chrono::steady_clock::now() - start)
                                         .count()),
              static_cast<unsigned long long>(set.snapshot().parks));
}

// As above for topic subscribers: three publisher processes publish 5000
// samples each with random pauses to Block subscribers with 2-deep queues,
// so the publishers wait for room and the set for samples thousands of times.
TEST_F(WaitSetProcessTest, NoTopicWakeIsLostUnderRandomizedRacesAcrossProcesses) {
  constexpr int kTopics = 3;
  constexpr std::uint64_t kSamples = 5000;
  std::vector<TopicSubscriber> subs;
  auto set = make_set(10s);
  std::vector<Subprocess> peers;
  for (int i = 0; i < kTopics; ++i) {
    auto s = TopicSubscriber::create("t" + std::to_string(i), small_topic(2), TopicOverflow::Block);
    ASSERT_TRUE(s) << s.error().what();
    subs.push_back(std::move(*s));
  }
  for (int i = 0; i < kTopics; ++i) ASSERT_TRUE(set.attach(subs[i], i));
  for (int i = 0; i < kTopics; ++i) {
    peers.push_back(
        peer("topic-publisher", "t" + std::to_string(i),
             {"go:" + go_, "stress:" + std::to_string(kSamples) + ":" + std::to_string(77 + i)}));
    ASSERT_TRUE(peers.back().wait_for_line("READY", 30s)) << peers.back().output();
  }
  go();
  std::vector<std::uint64_t> next(kTopics, 0);
  std::uint64_t done = 0;
  while (done < kTopics * kSamples) {
    const auto before = std::chrono::steady_clock::now();
    auto r = set.wait(2s);
    ASSERT_TRUE(r) << r.error().what();
    ASSERT_EQ(r->status, WaitStatus::Ready)
        << "a wake was lost: " << done << " samples taken, next " << next[0] << "/" << next[1]
        << "/" << next[2];
    // A sample published during a sleep the wake did not end shows up only
    // at the deadline: not a timeout, but as lost (publishers pause <= 200 us).
    ASSERT_LT(std::chrono::steady_clock::now() - before, 1s)
        << "a wake was lost (found at the deadline): " << done << " samples taken";
    std::vector<ReadyEvent> events(r->ready.begin(), r->ready.end());
    for (const auto& e : events) {
      ASSERT_EQ(e.reason, ReadyReason::Data);
      for (;;) {
        auto got = subs[e.tag].try_receive();
        ASSERT_TRUE(got) << got.error().what();
        if (!*got) break;
        std::uint64_t v = 0;
        ASSERT_EQ((*got)->bytes().size(), sizeof v);
        std::memcpy(&v, (*got)->bytes().data(), sizeof v);
        ASSERT_EQ(v, next[e.tag]) << "topic " << e.tag;
        ++next[e.tag];
        ++done;
      }
    }
  }
  for (auto& p : peers) EXPECT_EQ(p.wait(10s), 0) << p.output();
  EXPECT_GT(set.snapshot().parks, 0u);
}

// As above for relays, both ways: two writer processes write 5000 values
// each with random pauses into two Block relays of 4 (the set reads them
// with take and commit), and the set writes 5000 values into a third relay
// of 4 that a reader process drains, so writers park for room, the set
// parks for data and for room, thousands of times each.
TEST_F(WaitSetProcessTest, NoRelayWakeIsLostUnderRandomizedRacesAcrossProcesses) {
  constexpr int kRead = 2;  // relays the set reads; the next one it writes
  constexpr std::uint64_t kValues = 5000;
  std::vector<RelayReader> readers;
  auto set = make_set(10s);
  std::vector<Subprocess> peers;
  for (int i = 0; i < kRead; ++i) {
    auto r = RelayReader::create("r" + std::to_string(i), small_relay());
    ASSERT_TRUE(r) << r.error().what();
    readers.push_back(std::move(*r));
  }
  auto writer = RelayWriter::create("rw", small_relay());
  ASSERT_TRUE(writer) << writer.error().what();
  for (int i = 0; i < kRead; ++i) ASSERT_TRUE(set.attach(readers[i], i));
  ASSERT_TRUE(set.attach(*writer, kRead, 8));
  for (int i = 0; i < kRead; ++i) {
    peers.push_back(
        peer("relay-writer", "r" + std::to_string(i),
             {"go:" + go_, "stress:" + std::to_string(kValues) + ":" + std::to_string(55 + i)}));
    ASSERT_TRUE(peers.back().wait_for_line("READY", 30s)) << peers.back().output();
  }
  peers.push_back(
      peer("relay-reader", "rw", {"go:" + go_, "stress:" + std::to_string(kValues) + ":9"}));
  ASSERT_TRUE(peers.back().wait_for_line("READY", 30s)) << peers.back().output();
  go();
  std::vector<std::uint64_t> next(kRead, 0);
  std::uint64_t read = 0, written = 0;
  while (read < kRead * kValues || written < kValues) {
    const auto before = std::chrono::steady_clock::now();
    auto r = set.wait(2s);
    ASSERT_TRUE(r) << r.error().what();
    ASSERT_EQ(r->status, WaitStatus::Ready)
        << "a wake was lost: " << read << " values read, " << written << " written";
    ASSERT_LT(std::chrono::steady_clock::now() - before, 1s)
        << "a wake was lost (found at the deadline): " << read << " read, " << written
        << " written";
    std::vector<ReadyEvent> events(r->ready.begin(), r->ready.end());
    for (const auto& e : events) {
      if (e.tag == kRead) {
        ASSERT_EQ(e.reason, ReadyReason::Room);
        while (written < kValues) {
          auto w = writer->try_write(0, std::as_bytes(std::span(&written, 1)));
          ASSERT_TRUE(w) << w.error().what();
          if (w->status == WriteStatus::TimedOut) break;
          ASSERT_EQ(w->status, WriteStatus::Appended);
          ++written;
        }
        if (written == kValues) {
          ASSERT_TRUE(set.detach(kRead));
        }
        continue;
      }
      ASSERT_EQ(e.reason, ReadyReason::Data);
      for (;;) {
        auto got = readers[e.tag].take(3);
        ASSERT_TRUE(got) << got.error().what();
        if (got->empty()) break;
        for (const RelayEntry& entry : *got) {
          std::uint64_t v = 0;
          ASSERT_EQ(entry.value.size(), sizeof v);
          std::memcpy(&v, entry.value.data(), sizeof v);
          ASSERT_EQ(v, next[e.tag]) << "relay " << e.tag;
          ++next[e.tag];
          ++read;
        }
        ASSERT_TRUE(readers[e.tag].commit());
      }
    }
  }
  for (auto& p : peers) EXPECT_EQ(p.wait(10s), 0) << p.output();
  EXPECT_GT(set.snapshot().parks, 0u);
}

// ---------------------------------------------------------------- MPMC ring and fanout

// The first cell's sequence word: the cells follow the MPMC control block.
constexpr std::uint64_t kMpmcCell0 = kDataOffset + sizeof(mpmc::Control);
// The fanout's bitmap: the first word of its bitmap segment's data area.
constexpr std::uint64_t kFanoutBitmap = kDataOffset;

MpmcParams small_mpmc(std::uint64_t cells = 8) {
  return MpmcParams{.ring_cells = cells, .slot_bytes = 16};
}
FanoutParams small_fanout() {
  return FanoutParams{.priorities = 2, .ring_cells = 4, .slot_bytes = 16};
}
// Parked drainers / consumers / producers announced in a ParkedSet: the set's
// bit must be gone once a wait() returned.
std::uint64_t parked_consumers(const MpmcConsumer& c) {
  return reinterpret_cast<const mpmc::Control*>(c.segment().data().data())
      ->waiters.consumers_waiting.parked();
}
std::uint64_t parked_producers(const MpmcProducer& p) {
  return reinterpret_cast<const mpmc::Control*>(p.segment().data().data())
      ->waiters.producers_waiting.parked();
}
std::uint64_t parked_drainers(const FanoutConsumer& f) {
  return reinterpret_cast<const fanout::Control*>(f.bitmap_segment().data().data())
      ->hot.waiters.parked();
}

TEST_F(WaitSetProcessTest, MpmcConsumerWakesForAnItemPushedByAnotherProcess) {
  auto c = MpmcConsumer::create("mq", small_mpmc());
  ASSERT_TRUE(c) << c.error().what();
  auto set = make_set(10s);
  ASSERT_TRUE(set.attach(*c, 1));
  auto p = peer("mpmc-producer", "mq", {"go:" + go_, "push:hello"});
  ASSERT_TRUE(p.wait_for_line("READY", 30s)) << p.output();
  expect_wake(set, {1, ReadyReason::Data}, [&] { go(); });
  EXPECT_EQ(parked_consumers(*c), 0u);
  std::byte buf[16];
  auto r = c->try_pop(buf);
  ASSERT_TRUE(r && *r);
  EXPECT_EQ(**r, 5u);
  EXPECT_EQ(p.wait(10s), 0) << p.output();
}

TEST_F(WaitSetProcessTest, MpmcProducerWakesForRoomFreedByAnotherProcess) {
  auto prod = MpmcProducer::create("mq", small_mpmc());
  ASSERT_TRUE(prod) << prod.error().what();
  while (*prod->try_push(bytes("12345678"))) {
  }
  auto set = make_set(10s);
  ASSERT_TRUE(set.attach(*prod, 2, 8));
  auto c = peer("mpmc-consumer", "mq", {"go:" + go_, "pop"});
  ASSERT_TRUE(c.wait_for_line("READY", 30s)) << c.output();
  expect_wake(set, {2, ReadyReason::Room}, [&] { go(); });
  EXPECT_EQ(parked_producers(*prod), 0u);
  auto pushed = prod->try_push(bytes("12345678"));
  ASSERT_TRUE(pushed);
  EXPECT_TRUE(*pushed);
  EXPECT_EQ(c.wait(10s), 0) << c.output();
}

TEST_F(WaitSetProcessTest, FanoutConsumerWakesForAnItemSubmittedByAnotherProcess) {
  auto f = FanoutConsumer::create("fq", small_fanout());
  ASSERT_TRUE(f) << f.error().what();
  auto set = make_set(10s);
  ASSERT_TRUE(set.attach(*f, 3));
  auto p = peer("fanout-producer", "fq", {"go:" + go_, "submit:1:hello"});
  ASSERT_TRUE(p.wait_for_line("READY", 30s)) << p.output();
  expect_wake(set, {3, ReadyReason::Data}, [&] { go(); });
  EXPECT_EQ(parked_drainers(*f), 0u);
  std::byte buf[16];
  auto r = f->try_pop_highest(buf);
  ASSERT_TRUE(r && *r);
  EXPECT_EQ((*r)->priority, 1u);
  EXPECT_EQ((*r)->size, 5u);
  EXPECT_EQ(p.wait(10s), 0) << p.output();
}

// fd() with the ParkedSet members: the helper sleeps on the MPMC ring's and
// the fanout's words with the set's bits up; a push and a submit by another
// process make the descriptor readable, and wait(0) reports them.
TEST_F(WaitSetProcessTest, FdBecomesReadableForAnMpmcPushAndAFanoutSubmit) {
  auto c = MpmcConsumer::create("mq", small_mpmc());
  auto f = FanoutConsumer::create("fq", small_fanout());
  ASSERT_TRUE(c && f);
  auto set = make_set(10s);
  ASSERT_TRUE(set.attach(*c, 1));
  ASSERT_TRUE(set.attach(*f, 2));
  auto fd = set.fd();
  ASSERT_TRUE(fd) << fd.error().what();
  pollfd pfd{*fd, POLLIN, 0};
  auto r = set.wait(0ns);  // arms the helper
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, WaitStatus::TimedOut);
  EXPECT_EQ(parked_consumers(*c), 1u);  // up while armed
  EXPECT_EQ(parked_drainers(*f), 1u);
  struct Case {
    std::uint64_t tag;
    const char* role;
    const char* name;
    const char* step;
  };
  for (const Case& k : {Case{1, "mpmc-producer", "mq", "push:hello"},
                        Case{2, "fanout-producer", "fq", "submit:0:hello"}}) {
    SCOPED_TRACE(k.role);
    auto p = peer(k.role, k.name, {"go:" + go_, k.step});
    ASSERT_TRUE(p.wait_for_line("READY", 30s)) << p.output();
    // Opening a handle may wake (a repair's wake, a resurface): let it settle.
    while (::poll(&pfd, 1, 20) == 1) {
      r = set.wait(0ns);
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, WaitStatus::TimedOut);
    }
    const auto changed = std::chrono::steady_clock::now();
    go();
    bool ready = false;
    while (!ready && std::chrono::steady_clock::now() - changed < 10s) {
      ASSERT_EQ(::poll(&pfd, 1, 10'000), 1);
      r = set.wait(0ns);
      ASSERT_TRUE(r);
      ready = r->status == WaitStatus::Ready;
    }
    ASSERT_TRUE(ready);
    EXPECT_LE(std::chrono::steady_clock::now() - changed, test::kWakeBound);
    ASSERT_EQ(r->ready.size(), 1u);
    EXPECT_EQ(r->ready[0].tag, k.tag);
    EXPECT_EQ(r->ready[0].reason, ReadyReason::Data);
    std::byte buf[16];
    if (k.tag == 1) {
      ASSERT_TRUE(*c->try_pop(buf));
    } else {
      ASSERT_TRUE(*f->try_pop_highest(buf));
    }
    EXPECT_EQ(p.wait(10s), 0) << p.output();
    std::filesystem::remove(go_);
  }
  ASSERT_TRUE(set.detach(1));
  EXPECT_EQ(parked_consumers(*c), 0u);
}

// The MPMC ring and the fanout have no one peer (no PeerDied): a producer
// killed between its claim and its publish holds the cell at the head, and
// the items behind it wait for its repair. The set, polling while the cell
// is held (its producer may publish without seeing the set's bit), repairs
// it once the holder is dead, as a blocked pop does, and reports the item
// behind it.
TEST_F(WaitSetProcessTest, MpmcConsumerWakesWhenAProducerKilledMidPushIsRepaired) {
  auto c = MpmcConsumer::create("mq", small_mpmc());
  ASSERT_TRUE(c) << c.error().what();
  auto set = make_set(10s);
  ASSERT_TRUE(set.attach(*c, 4));
  auto dying = peer("mpmc-producer", "mq", {"reserve", "go:" + go_, "die"});
  ASSERT_TRUE(dying.wait_for_line("RESERVED", 30s)) << dying.output();
  auto behind = peer("mpmc-producer", "mq", {"push:behind"});
  ASSERT_EQ(behind.wait(30s), 0) << behind.output();
  auto r = set.wait(0ns);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, WaitStatus::TimedOut);  // held by a live producer: nothing to take
  expect_wake(set, {4, ReadyReason::Data}, [&] { go(); });
  EXPECT_EQ(dying.wait(10s), 128 + SIGKILL);
  std::byte buf[16];
  auto got = c->try_pop(buf);
  ASSERT_TRUE(got && *got);
  EXPECT_EQ(**got, 6u);
}

// A consumer killed between its claim and its release holds a cell of a full
// ring: the producer's room comes with the repair that releases it.
TEST_F(WaitSetProcessTest, MpmcProducerWakesWhenAConsumerKilledHoldingACellIsRepaired) {
  auto prod = MpmcProducer::create("mq", small_mpmc());
  ASSERT_TRUE(prod) << prod.error().what();
  while (*prod->try_push(bytes("12345678"))) {
  }
  auto set = make_set(10s);
  ASSERT_TRUE(set.attach(*prod, 5, 8));
  auto dying = peer("mpmc-consumer", "mq", {"peek", "go:" + go_, "die"});
  ASSERT_TRUE(dying.wait_for_line("PEEKED", 30s)) << dying.output();
  expect_wake(set, {5, ReadyReason::Room}, [&] { go(); });
  EXPECT_EQ(dying.wait(10s), 128 + SIGKILL);
  auto pushed = prod->try_push(bytes("12345678"));
  ASSERT_TRUE(pushed);
  EXPECT_TRUE(*pushed);
}

// A submitter stopped (then killed) between its ring commit and its bitmap
// bit: the item is in its ring under a clear bit, and nobody wakes the
// drainers. The set's look resurfaces it, as a parked pop_highest() does, at
// its next slice (20 ms here).
TEST_F(WaitSetProcessTest, FanoutConsumerFindsAnItemWhoseSubmitterDiedBeforeItsBit) {
  auto f = FanoutConsumer::create("fq", small_fanout());
  ASSERT_TRUE(f) << f.error().what();
  auto set = make_set(20ms);
  ASSERT_TRUE(set.attach(*f, 6));
  auto dying = peer("fanout-producer", "fq", {"go:" + go_, "submit-crash:1:stranded"});
  ASSERT_TRUE(dying.wait_for_line("READY", 30s)) << dying.output();
  expect_wake(set, {6, ReadyReason::Data}, [&] {
    go();
    ASSERT_TRUE(dying.wait_for_line("CRASH-POINT", 30s)) << dying.output();
    dying.kill();
  });
  EXPECT_EQ(dying.wait(10s), 128 + SIGKILL);
  std::byte buf[16];
  auto r = f->try_pop_highest(buf);
  ASSERT_TRUE(r && *r);
  EXPECT_EQ((*r)->priority, 1u);
  EXPECT_EQ((*r)->size, 8u);
}

// A cell sequence or a bitmap no library call writes, poked by another
// process (no wake): each member reports Faulted at its next slice, and its
// own next call reports Corrupt.
TEST_F(WaitSetProcessTest, MpmcAndFanoutMembersReportTheirStructureScribbledByAnotherProcess) {
  auto c = MpmcConsumer::create("mc", small_mpmc());
  auto prod = MpmcProducer::create("mp", small_mpmc());
  auto f = FanoutConsumer::create("fq", small_fanout());
  ASSERT_TRUE(c && prod && f);
  while (*prod->try_push(bytes("12345678"))) {
  }
  {
    SCOPED_TRACE("mpmc consumer");
    auto set = make_set(20ms);
    ASSERT_TRUE(set.attach(*c, 31));
    // an empty ring's first cell: 5 is no state of position 0 (0 free, 1 published)
    auto p = peer("mpmc-producer", "mc",
                  {"go:" + go_, "poke:" + std::to_string(kMpmcCell0) + ":5", "sleep:300"});
    ASSERT_TRUE(p.wait_for_line("READY", 30s)) << p.output();
    expect_wake(set, {31, ReadyReason::Faulted}, [&] { go(); });
    EXPECT_EQ(p.wait(10s), 0) << p.output();
    std::byte buf[16];
    auto r = c->try_pop(buf);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, Errc::Corrupt);
    std::filesystem::remove(go_);
  }
  {
    SCOPED_TRACE("mpmc producer");
    auto set = make_set(20ms);
    ASSERT_TRUE(set.attach(*prod, 32, 8));
    // a full ring of 8: the first cell is position 8's, 4 is no state of it
    auto p = peer("mpmc-consumer", "mp",
                  {"go:" + go_, "poke:" + std::to_string(kMpmcCell0) + ":4", "sleep:300"});
    ASSERT_TRUE(p.wait_for_line("READY", 30s)) << p.output();
    expect_wake(set, {32, ReadyReason::Faulted}, [&] { go(); });
    EXPECT_EQ(p.wait(10s), 0) << p.output();
    auto r = prod->try_push(bytes("12345678"));
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, Errc::Corrupt);
    std::filesystem::remove(go_);
  }
  {
    SCOPED_TRACE("fanout consumer");
    auto set = make_set(20ms);
    ASSERT_TRUE(set.attach(*f, 33));
    // bit 7 of a fanout of 2 priorities
    auto p = peer("fanout-producer", "fq",
                  {"go:" + go_, "poke:" + std::to_string(kFanoutBitmap) + ":80", "sleep:300"});
    ASSERT_TRUE(p.wait_for_line("READY", 30s)) << p.output();
    expect_wake(set, {33, ReadyReason::Faulted}, [&] { go(); });
    EXPECT_EQ(p.wait(10s), 0) << p.output();
    std::byte buf[16];
    auto r = f->try_pop_highest(buf);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, Errc::Corrupt);
  }
}

// The lost-wake stress for the ParkedSet members: two producer processes
// push 3000 records each with random pauses into an MPMC ring of 4 cells,
// two submitter processes submit 3000 each into a fanout of 2 priorities of
// 4 cells, and the set pushes 3000 records into a third ring of 4 that a
// consumer process pops, so every side parks and wakes thousands of times.
// A wake is one waiter's (FUTEX_WAKE of 1), and these members' sleeps are
// bounded by 250 ms (a waiter bit cleared by a reclaim race): a lost wake
// shows as a wait of 200 ms or more, when every peer pauses 200 us at most.
TEST_F(WaitSetProcessTest, NoMpmcOrFanoutWakeIsLostUnderRandomizedRacesAcrossProcesses) {
  constexpr std::uint64_t kRecords = 3000;
  auto mq = MpmcConsumer::create("mq", small_mpmc(4));
  auto fq = FanoutConsumer::create(
      "fq", FanoutParams{.priorities = 2, .ring_cells = 4, .slot_bytes = 16});
  auto out = MpmcProducer::create("mo", small_mpmc(4));
  ASSERT_TRUE(mq && fq && out);
  auto set = make_set(10s);
  ASSERT_TRUE(set.attach(*mq, 0));
  ASSERT_TRUE(set.attach(*fq, 1));
  ASSERT_TRUE(set.attach(*out, 2, 8));
  std::vector<Subprocess> peers;
  const std::string n = std::to_string(kRecords);
  // Seeds 1, 2: MPMC producers; 3, 4: fanout submitters (the value's high half).
  for (const auto& [role, name, seed] :
       {std::tuple{"mpmc-producer", "mq", 1}, std::tuple{"mpmc-producer", "mq", 2},
        std::tuple{"fanout-producer", "fq", 3}, std::tuple{"fanout-producer", "fq", 4}}) {
    peers.push_back(peer(role, name, {"go:" + go_, "stress:" + n + ":" + std::to_string(seed)}));
    ASSERT_TRUE(peers.back().wait_for_line("READY", 30s)) << peers.back().output();
  }
  peers.push_back(peer("mpmc-consumer", "mo", {"go:" + go_, "stress:" + n + ":9"}));
  ASSERT_TRUE(peers.back().wait_for_line("READY", 30s)) << peers.back().output();
  go();
  // The next index of each producer (MPMC: in order; fanout: in order per priority).
  std::map<std::uint64_t, std::uint64_t> next{{1, 0},         {2, 0},     {3 * 2, 0},
                                              {3 * 2 + 1, 1}, {4 * 2, 0}, {4 * 2 + 1, 1}};
  std::uint64_t taken = 0, pushed = 0;
  while (taken < 4 * kRecords || pushed < kRecords) {
    const auto before = std::chrono::steady_clock::now();
    auto r = set.wait(2s);
    ASSERT_TRUE(r) << r.error().what();
    ASSERT_EQ(r->status, WaitStatus::Ready)
        << "a wake was lost: " << taken << " taken, " << pushed << " pushed";
    ASSERT_LT(std::chrono::steady_clock::now() - before, 200ms)
        << "a wake was lost (found at the sleep's bound): " << taken << " taken, " << pushed
        << " pushed";
    std::vector<ReadyEvent> events(r->ready.begin(), r->ready.end());
    for (const auto& e : events) {
      if (e.tag == 2) {
        ASSERT_EQ(e.reason, ReadyReason::Room);
        while (pushed < kRecords) {
          auto ok = out->try_push(std::as_bytes(std::span(&pushed, 1)));
          ASSERT_TRUE(ok) << ok.error().what();
          if (!*ok) break;
          ++pushed;
        }
        if (pushed == kRecords) {
          ASSERT_TRUE(set.detach(2));
        }
        continue;
      }
      ASSERT_EQ(e.reason, ReadyReason::Data);
      for (;;) {
        std::uint64_t v = 0;
        const auto buf = std::as_writable_bytes(std::span(&v, 1));
        std::uint64_t key = 0;
        if (e.tag == 0) {
          auto got = mq->try_pop(buf);
          ASSERT_TRUE(got) << got.error().what();
          if (!*got) break;
          key = v >> 32;
        } else {
          auto got = fq->try_pop_highest(buf);
          ASSERT_TRUE(got) << got.error().what();
          if (!*got) break;
          key = (v >> 32) * 2 + (*got)->priority;
        }
        ASSERT_TRUE(next.contains(key)) << v;
        ASSERT_EQ(v & 0xffffffffu, next[key]) << "producer " << (v >> 32);
        next[key] += e.tag == 0 ? 1 : 2;
        ++taken;
      }
    }
  }
  for (auto& p : peers) EXPECT_EQ(p.wait(10s), 0) << p.output();
  EXPECT_GT(set.snapshot().parks, 0u);
  std::printf("stress: %llu taken, %llu pushed, %llu parks\n",
              static_cast<unsigned long long>(taken), static_cast<unsigned long long>(pushed),
              static_cast<unsigned long long>(set.snapshot().parks));
}

}  // namespace
}  // namespace shm::waitset_process_test
