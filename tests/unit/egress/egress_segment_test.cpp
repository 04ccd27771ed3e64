// The egress segment handles in one process (threads, one fork): the
// transport's attach and fence, and the futex wake-ups: who wakes a parked
// claimer or a producer blocked on a full pool, and that no-op and stale
// transitions wake nobody.
#include "common/temp_root.hpp"
#include "common/text.hpp"
#include "shm/egress/egress.hpp"
#include "shm/segment/kind.hpp"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <optional>
#include <span>
#include <thread>
#include <vector>

namespace shm {
namespace {

using namespace std::chrono_literals;
using egress::ClaimStatus;

using test::bytes;

// Polls `cond` for up to 20 s.
template <class F>
bool eventually(F&& cond) {
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

EgressParams small(std::uint32_t capacity, std::uint32_t window) {
  EgressParams p;
  p.max_payloads = capacity;
  p.slot_bytes = 16;
  p.inflight_limit = window;
  p.retry_budget = 2;
  p.retry_base = 20ms;
  p.retry_ceiling = 1s;
  return p;
}

class EgressSegmentTest : public ::testing::Test {
 protected:
  test::TempRoot root_;
};

TEST_F(EgressSegmentTest, ParkedClaimerIsWokenByEnqueueButNotByNoOpOrStaleTransitions) {
  auto e = Egress::create("wake", small(8, 4));
  ASSERT_TRUE(e);
  auto t = EgressTransport::open("wake");
  ASSERT_TRUE(t);
  const std::uint64_t g = t->generation();
  std::atomic<bool> done{false};
  egress::ClaimOutcome got;
  std::thread claimer([&] {
    std::vector<std::byte> buf;
    auto r = t->claim(buf, 30s);
    if (r) got = *r;
    done = true;
  });
  ASSERT_TRUE(eventually([&] { return e->wake_counters().claim_waiters == 1; }));
  const EgressWakeCounters before = e->wake_counters();
  const auto versions = e->projection()->reader_versions;
  // Stale, refused and no-op transitions.
  EXPECT_EQ(e->ack(g + 5, 0)->status, egress::AckStatus::StaleGeneration);
  EXPECT_EQ(e->ack(g, 0)->status, egress::AckStatus::Refused);  // nothing enqueued yet
  EXPECT_EQ(e->reconnect(g)->status, egress::ReconnectStatus::Refused);
  EXPECT_EQ(e->retry_due(g + 1, 0)->status, egress::RetryStatus::StaleGeneration);
  EXPECT_EQ(e->retry_due(g, ~std::uint64_t{0} - 1)->scheduled, 0u);
  EXPECT_EQ(e->fail(g, 0, 0)->status, egress::FailStatus::UnknownSequence);
  std::vector<std::byte> buf;
  EXPECT_EQ(e->claim(g - 1, buf)->status, ClaimStatus::StaleGeneration);
  EXPECT_EQ(e->wake_counters().claim_word, before.claim_word);
  EXPECT_EQ(e->projection()->reader_versions, versions);
  EXPECT_FALSE(done.load());
  // A real transition wakes it.
  ASSERT_TRUE(e->try_enqueue(bytes("hello")));
  claimer.join();
  EXPECT_EQ(got.status, ClaimStatus::Claimed);
  EXPECT_EQ(got.envelope.sequence, 0u);
  EXPECT_NE(e->wake_counters().claim_word, before.claim_word);
}

TEST_F(EgressSegmentTest, AckThatReopensTheWindowWakesTheParkedClaimer) {
  auto e = Egress::create("window", small(8, 1));
  auto t = EgressTransport::open("window");
  ASSERT_TRUE(e && t);
  ASSERT_TRUE(e->try_enqueue(bytes("a")));
  ASSERT_TRUE(e->try_enqueue(bytes("b")));
  std::vector<std::byte> buf;
  ASSERT_EQ(t->try_claim(buf)->status, ClaimStatus::Claimed);
  ASSERT_EQ(t->try_claim(buf)->status, ClaimStatus::WindowFull);
  egress::ClaimOutcome got;
  std::string payload;
  std::thread claimer([&] {
    std::vector<std::byte> b;
    auto r = t->claim(b, 30s);
    if (r) got = *r;
    payload.assign(reinterpret_cast<const char*>(b.data()), b.size());
  });
  ASSERT_TRUE(eventually([&] { return e->wake_counters().claim_waiters == 1; }));
  auto ack = e->ack(t->generation(), 0);
  ASSERT_TRUE(ack);
  EXPECT_TRUE(ack->reopened_window);
  claimer.join();
  EXPECT_EQ(got.status, ClaimStatus::Claimed);
  EXPECT_EQ(got.envelope.sequence, 1u);
  EXPECT_EQ(payload, "b");
}

TEST_F(EgressSegmentTest, BackoffExpiryWakesTheParkedClaimer) {
  auto e = Egress::create("backoff", small(8, 4));
  auto t = EgressTransport::open("backoff");
  ASSERT_TRUE(e && t);
  ASSERT_TRUE(e->try_enqueue(bytes("a")));
  std::vector<std::byte> buf;
  ASSERT_EQ(t->try_claim(buf)->status, ClaimStatus::Claimed);
  auto f = t->fail(0);
  ASSERT_TRUE(f);
  ASSERT_EQ(f->status, egress::FailStatus::Retrying);
  EXPECT_EQ(f->record.backoff_ns, 20'000'000u);
  // Nothing else happens: only the due time (kept in the segment) can end the wait.
  auto r = t->claim(buf, 30s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, ClaimStatus::Claimed);
  EXPECT_EQ(r->envelope.attempt, 2u);
}

// The non-blocking try_claim schedules a parked record once its backoff has
// elapsed (it checks the due time kept in the segment before claiming).
TEST_F(EgressSegmentTest, TryClaimReturnsAParkedRecordOnceItsBackoffElapsed) {
  auto e = Egress::create("poll", small(8, 4));
  auto t = EgressTransport::open("poll");
  ASSERT_TRUE(e && t);
  ASSERT_TRUE(e->try_enqueue(bytes("a")));
  std::vector<std::byte> buf;
  ASSERT_EQ(t->try_claim(buf)->status, ClaimStatus::Claimed);
  ASSERT_EQ(t->fail(0)->status, egress::FailStatus::Retrying);
  std::optional<egress::ClaimOutcome> got;
  EXPECT_TRUE(eventually([&] {
    auto c = t->try_claim(buf);
    if (c && c->status == ClaimStatus::Claimed) got = *c;
    return got.has_value();
  })) << "try_claim never returned the parked record";
  ASSERT_TRUE(got);
  EXPECT_EQ(got->envelope.sequence, 0u);
  EXPECT_EQ(got->envelope.attempt, 2u);
  EXPECT_EQ(e->projection()->parked, 0u);
}

// The batch calls: one lock and one wake-up per batch, the same outcomes as
// the single calls in a row.
TEST_F(EgressSegmentTest, BatchEnqueueAndClaimAreTheSingleCallsInARowUnderOneLock) {
  auto e = Egress::create("batch", small(6, 4));
  auto t = EgressTransport::open("batch");
  ASSERT_TRUE(e && t);
  const std::vector<std::span<const std::byte>> spans{bytes("r0"), bytes("r1"), bytes("r2"),
                                                      bytes("r3"), bytes("r4")};
  const auto same = [](std::span<const std::byte> a, std::span<const std::byte> b) {
    return std::ranges::equal(a, b);
  };

  // A payload too large refuses the whole batch.
  const std::vector<std::byte> big(17, std::byte{1});
  std::vector<std::span<const std::byte>> with_big{spans[0], big};
  auto refused = e->try_enqueue_batch(with_big);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::TooLarge);
  EXPECT_NE(refused.error().message.find("payload 1 of the batch"), std::string::npos)
      << refused.error().message;
  EXPECT_EQ(e->projection()->next_sequence, 0u);

  const std::uint32_t word = e->wake_counters().claim_word;
  auto first = e->try_enqueue_batch(spans);
  ASSERT_TRUE(first) << first.error().what();
  EXPECT_EQ(first->enqueued, 5u);
  EXPECT_EQ(first->first_sequence, 0u);
  EXPECT_EQ(e->wake_counters().claim_word, word + 1) << "one wake-up per batch";
  // The pool holds 6: of the next three, one fits.
  auto second = e->try_enqueue_batch(std::span(spans).first(3));  // r0, r1, r2
  ASSERT_TRUE(second);
  EXPECT_EQ(second->enqueued, 1u);
  EXPECT_EQ(second->first_sequence, 5u);
  auto none = e->try_enqueue_batch(std::span(spans).first(1));
  ASSERT_TRUE(none);
  EXPECT_EQ(none->enqueued, 0u);

  // Claims stop at the window (4), then at the end of what is pending.
  std::vector<egress::Envelope> got;
  std::vector<std::byte> buf;
  auto c1 = t->try_claim_batch(10, got, buf);
  ASSERT_TRUE(c1);
  EXPECT_EQ(c1->claimed, 4u);
  EXPECT_EQ(c1->status, ClaimStatus::WindowFull);
  ASSERT_EQ(got.size(), 4u);
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].sequence, i);
    EXPECT_EQ(got[i].attempt, 1u);
    EXPECT_EQ(got[i].generation, t->generation());
    EXPECT_TRUE(same(got[i].payload, spans[i])) << i;
  }
  ASSERT_EQ(t->ack(3)->status, egress::AckStatus::Advanced);
  auto c2 = t->try_claim_batch(1, got, buf);
  ASSERT_TRUE(c2);
  EXPECT_EQ(c2->claimed, 1u);
  EXPECT_EQ(c2->status, ClaimStatus::Claimed);  // as many as asked
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].sequence, 4u);
  auto c3 = t->try_claim_batch(10, got, buf);
  ASSERT_TRUE(c3);
  EXPECT_EQ(c3->claimed, 1u);
  EXPECT_EQ(c3->status, ClaimStatus::Empty);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].sequence, 5u);
  EXPECT_TRUE(same(got[0].payload, spans[0]));
  EXPECT_TRUE(e->verify()->empty());

  // A fenced transport claims nothing and learns the generation in force.
  auto t2 = EgressTransport::open("batch");
  ASSERT_FALSE(t2);  // the slot is held
  ASSERT_EQ(e->reconnect(t->generation() + 1)->status, egress::ReconnectStatus::Advanced);
  auto stale = t->try_claim_batch(10, got, buf);
  ASSERT_TRUE(stale);
  EXPECT_EQ(stale->claimed, 0u);
  EXPECT_EQ(stale->status, ClaimStatus::StaleGeneration);
  EXPECT_EQ(stale->current_generation, t->generation() + 1);
  EXPECT_TRUE(got.empty());
}

TEST_F(EgressSegmentTest, ProducerBlockedOnAFullPoolIsWokenByAnAck) {
  auto e = Egress::create("full", small(2, 2));
  auto t = EgressTransport::open("full");
  ASSERT_TRUE(e && t);
  ASSERT_EQ(e->try_enqueue(bytes("a"))->status, egress::EnqueueStatus::Enqueued);
  ASSERT_EQ(e->try_enqueue(bytes("b"))->status, egress::EnqueueStatus::Enqueued);
  ASSERT_EQ(e->try_enqueue(bytes("c"))->status, egress::EnqueueStatus::Full);  // a value
  egress::EnqueueOutcome got;
  std::thread producer([&] {
    auto r = e->enqueue(bytes("c"), 30s);
    if (r) got = *r;
  });
  ASSERT_TRUE(eventually([&] { return e->wake_counters().space_waiters == 1; }));
  std::vector<std::byte> buf;
  ASSERT_EQ(t->try_claim(buf)->status, ClaimStatus::Claimed);
  ASSERT_EQ(t->ack(0)->status, egress::AckStatus::Advanced);
  producer.join();
  EXPECT_EQ(got.status, egress::EnqueueStatus::Enqueued);
  EXPECT_EQ(got.sequence, 2u);
}

TEST_F(EgressSegmentTest, ReconnectFencesTheOldTransportAndANewOneResumesAtTheWatermark) {
  auto e = Egress::create("fence", small(8, 4));
  ASSERT_TRUE(e);
  for (const char* p : {"a", "b", "c"}) ASSERT_TRUE(e->try_enqueue(bytes(p)));
  {
    auto t = EgressTransport::open("fence");
    ASSERT_TRUE(t);
    EXPECT_EQ(t->generation(), 1u);
    auto second = EgressTransport::open("fence");
    ASSERT_FALSE(second);
    EXPECT_EQ(second.error().code, Errc::RoleTaken);
    std::vector<std::byte> buf;
    ASSERT_EQ(t->try_claim(buf)->status, ClaimStatus::Claimed);
    ASSERT_EQ(t->try_claim(buf)->status, ClaimStatus::Claimed);
    ASSERT_EQ(t->ack(0)->status, egress::AckStatus::Advanced);
    // An operator (or a test) reconnects: the live transport is fenced.
    ASSERT_EQ(e->reconnect(5)->status, egress::ReconnectStatus::Advanced);
    EXPECT_TRUE(t->fenced());
    EXPECT_EQ(t->ack(1)->status, egress::AckStatus::StaleGeneration);
    EXPECT_EQ(t->try_claim(buf)->status, ClaimStatus::StaleGeneration);
  }
  auto t2 = EgressTransport::open("fence");
  ASSERT_TRUE(t2);
  EXPECT_EQ(t2->generation(), 6u);  // a transport attached before: reconnect
  auto p = e->projection(true);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->acked_through, 0u);
  EXPECT_EQ(p->next_sequence, 3u);
  EXPECT_EQ(p->pending, 2u);
  for (const auto& r : p->records) EXPECT_EQ(r.generation, 6u);
}

TEST_F(EgressSegmentTest, TheNextTransportAfterADeadOneReconnectsAndReplaysItsWindow) {
  auto e = Egress::create("dead", small(8, 4));
  ASSERT_TRUE(e);
  for (const char* p : {"a", "b", "c"}) ASSERT_TRUE(e->try_enqueue(bytes(p)));
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto t = EgressTransport::open("dead");
    std::vector<std::byte> buf;
    if (!t || !t->try_claim(buf) || !t->try_claim(buf)) ::_exit(1);
    ::_exit(0);  // no detach: the kernel drops the slot's lock
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(e->projection()->inflight, 2u);
  auto any = Segment::open_any("dead", {});
  ASSERT_TRUE(any);
  EXPECT_EQ(any->slots()[0].liveness, Liveness::Dead);
  // The sidecar's reclaim reports the dead transport (and frees its slot).
  auto reclaimed = reclaim_dead_attacher(*any, kEgressDescriptor, any->slots()[0]);
  ASSERT_TRUE(reclaimed) << reclaimed.error().what();
  ASSERT_EQ(reclaimed->status, ReclaimStatus::Reclaimed);
  ASSERT_EQ(reclaimed->actions.size(), 1u);
  EXPECT_NE(reclaimed->actions[0].find("died at generation 1 with 2 records in flight"),
            std::string::npos)
      << reclaimed->actions[0];
  auto t = EgressTransport::open("dead");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->generation(), 2u);
  EXPECT_EQ(t->replayed(), 2u);
  auto p = e->projection();
  EXPECT_EQ(p->inflight, 0u);
  EXPECT_EQ(p->pending, 3u);
  Node n;
  kEgressDescriptor.describe(*any, n);
  EXPECT_EQ(std::get<std::uint64_t>(n.find("transport")->find("deaths")->value()), 1u);
  EXPECT_TRUE(kEgressDescriptor.verify(*any).empty());
}

// Move-assigning over a live egress handle detaches while the old mapping is
// still there (a defaulted operator= unmapped first: SIGSEGV in the detach).
TEST_F(EgressSegmentTest, MoveAssignOverALiveHandleDetachesBeforeUnmapping) {
  auto a = Egress::create("a", small(8, 4));
  ASSERT_TRUE(a) << a.error().what();
  auto b = Egress::create("b", small(8, 4));
  ASSERT_TRUE(b) << b.error().what();
  auto observer = Segment::open_any("a", {});
  ASSERT_TRUE(observer) << observer.error().what();
  ASSERT_EQ(observer->slots().size(), 1u);

  *a = std::move(*b);

  EXPECT_TRUE(observer->slots().empty()) << "the old slot is still held";
  EXPECT_EQ(a->segment().name(), "b");
  EXPECT_TRUE(Egress::open("a")) << "the freed slot is reattachable";
}

}  // namespace
}  // namespace shm
