// PriorityFanout across real processes: producers and consumers are separate
// executables (test_fanout_producer / test_fanout_consumer) sharing the K+1
// files and a "seen" table that records every delivery.
#include "shm/fanout/priority_fanout.hpp"
#include "common/mpmc_probe.hpp"
#include "common/scale.hpp"
#include "common/subprocess.hpp"
#include "common/temp_root.hpp"
#include "helpers/fanout/fanout_items.hpp"
#include "shm/segment/kind.hpp"
#include "shm/testing/fanout_crash.hpp"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <array>
#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace shm {
namespace {

using namespace std::chrono_literals;
using test::Subprocess;

class PriorityFanoutProcessTest : public ::testing::Test {
 protected:
  void create(const FanoutParams& params, std::uint64_t producers, std::uint64_t per_producer) {
    auto f = PriorityFanout::create("jobs", params);
    ASSERT_TRUE(f) << f.error().what();
    auto s = test::SeenTable::map(seen_path_, true, producers, per_producer);
    ASSERT_TRUE(s) << s.error().what();
    seen_ = std::make_unique<test::SeenTable>(std::move(*s));
  }
  std::unique_ptr<Subprocess> producer(std::uint64_t id, std::uint64_t count, bool hold = false) {
    std::vector<std::string> argv{test::helper_path("fanout_producer"), "jobs", std::to_string(id),
                                  std::to_string(count)};
    if (hold) argv.emplace_back("hold");
    return std::make_unique<Subprocess>(std::move(argv));
  }
  std::unique_ptr<Subprocess> consumer(const char* mode = "drain",
                                       std::optional<std::uint64_t> hold_at = std::nullopt) {
    std::vector<std::string> argv{test::helper_path("fanout_consumer"), "jobs", seen_path_, mode};
    if (hold_at) argv.push_back(std::to_string(*hold_at));
    auto c = std::make_unique<Subprocess>(std::move(argv));
    EXPECT_TRUE(c->wait_for_line("started", 30s)) << c->output();
    return c;
  }
  // The two numbers of a helper's "holding ..." line, parsed with `format`.
  static std::optional<std::pair<std::uint64_t, std::uint64_t>> holding(const std::string& out,
                                                                        const char* format) {
    const auto at = out.find("holding ");
    unsigned a = 0;
    unsigned long long b = 0;
    if (at == std::string::npos || std::sscanf(out.c_str() + at, format, &a, &b) != 2)
      return std::nullopt;
    return std::make_pair(std::uint64_t{a}, std::uint64_t{b});
  }
  // Every ring and the bitmap verify clean (after their dead handles were repaired).
  void expect_healthy() {
    auto f = PriorityFanout::open("jobs", {.priorities = 0, .ring_cells = 0, .slot_bytes = 0});
    ASSERT_TRUE(f) << f.error().what();
    EXPECT_EQ(kFanoutBitmapDescriptor.verify(f->bitmap_segment()), std::vector<std::string>{});
    for (std::uint32_t p = 0; p < f->priorities(); ++p)
      EXPECT_EQ(kMpmcRingDescriptor.verify(f->ring(p).segment()), std::vector<std::string>{}) << p;
  }
  std::uint64_t ring_counter(const char* key) {
    auto f = PriorityFanout::open("jobs", {.priorities = 0, .ring_cells = 0, .slot_bytes = 0});
    EXPECT_TRUE(f);
    std::uint64_t sum = 0;
    for (std::uint32_t p = 0; f && p < f->priorities(); ++p) {
      Node n;
      kMpmcRingDescriptor.describe(f->ring(p).segment(), n);
      sum += std::get<std::uint64_t>(n.find(key)->value());
    }
    return sum;
  }

  test::TempRoot root_;
  std::string seen_path_ = root_.file("seen.table");
  std::unique_ptr<test::SeenTable> seen_;
};

TEST_F(PriorityFanoutProcessTest, FourProducersTwoConsumersExchangeAMillionItemsExactlyOnce) {
  constexpr std::uint64_t kProducers = 4;
  const std::uint64_t per_producer = test::scaled(250'000);
  create({.priorities = 4, .ring_cells = 4096, .slot_bytes = 48}, kProducers, per_producer);
  auto c1 = consumer();
  auto c2 = consumer();
  std::vector<std::unique_ptr<Subprocess>> producers;
  for (std::uint64_t i = 0; i < kProducers; ++i) producers.push_back(producer(i, per_producer));
  for (auto& p : producers) ASSERT_EQ(p->wait(300s), 0) << p->output();
  seen_->header().producers_done.store(1);
  ASSERT_EQ(c1->wait(120s), 0) << c1->output();
  ASSERT_EQ(c2->wait(120s), 0) << c2->output();
  const std::uint64_t total = kProducers * per_producer;
  EXPECT_EQ(seen_->header().delivered.load(), total);
  std::uint64_t once = 0;
  for (std::uint64_t i = 0; i < total; ++i) once += seen_->slot(i).load() == 1 ? 1 : 0;
  EXPECT_EQ(once, total) << "every item delivered exactly once";
  expect_healthy();
}

// Seventy-two producer processes hold their handles at once (slots 8 to 79 of
// the bitmap and of each ring: more than the old 24, across the first 64-bit
// word of the waiter sets): the rings are too small for their items, so every
// producer stays attached, parked on a full ring, until consumers start.
TEST_F(PriorityFanoutProcessTest, SeventyTwoProducerProcessesAttachAtOnceAndEveryItemArrives) {
  constexpr std::uint64_t kProducers = 72, kPerProducer = 5;  // 5 > the 4 cells of both rings
  create({.priorities = 2, .ring_cells = 2, .slot_bytes = 48}, kProducers, kPerProducer);
  std::vector<std::unique_ptr<Subprocess>> producers;
  for (std::uint64_t i = 0; i < kProducers; ++i) producers.push_back(producer(i, kPerProducer));
  for (auto& p : producers) ASSERT_TRUE(p->wait_for_line("started", 60s)) << p->output();
  // All attached at once: nobody can finish before the consumers start.
  for (const char* name : {"jobs.bitmap", "jobs.prio0", "jobs.prio1"}) {
    auto seg = Segment::open_any(name, {.read_only = true});
    ASSERT_TRUE(seg) << seg.error().what();
    std::uint64_t alive = 0;
    for (const SlotInfo& s : seg->slots()) alive += s.liveness == Liveness::Alive ? 1 : 0;
    EXPECT_EQ(alive, kProducers) << name;
  }
  auto c1 = consumer();
  auto c2 = consumer();
  for (auto& p : producers) ASSERT_EQ(p->wait(120s), 0) << p->output();
  seen_->header().producers_done.store(1);
  ASSERT_EQ(c1->wait(120s), 0) << c1->output();
  ASSERT_EQ(c2->wait(120s), 0) << c2->output();
  const std::uint64_t total = kProducers * kPerProducer;
  EXPECT_EQ(seen_->header().delivered.load(), total);
  std::uint64_t once = 0;
  for (std::uint64_t i = 0; i < total; ++i) once += seen_->slot(i).load() == 1 ? 1 : 0;
  EXPECT_EQ(once, total) << "every item delivered exactly once";
  expect_healthy();
}

TEST_F(PriorityFanoutProcessTest, OneConsumerDrainsAQuiescentQueueStrictlyByPriority) {
  // The producers exit before the consumer starts: the items live on in the files.
  constexpr std::uint64_t kProducers = 4, kPerProducer = 1000;
  create({.priorities = 8, .ring_cells = 1024, .slot_bytes = 48}, kProducers, kPerProducer);
  std::vector<std::unique_ptr<Subprocess>> producers;
  for (std::uint64_t i = 0; i < kProducers; ++i) producers.push_back(producer(i, kPerProducer));
  for (auto& p : producers) ASSERT_EQ(p->wait(120s), 0) << p->output();
  auto c = consumer("ordered");
  ASSERT_EQ(c->wait(120s), 0) << c->output();
  EXPECT_NE(c->output().find("ordered 4000"), std::string::npos) << c->output();
  expect_healthy();
}

TEST_F(PriorityFanoutProcessTest, ConsumerKilledHoldingAPoppedItemLosesExactlyThatItem) {
  constexpr std::uint64_t kProducers = 2, kKills = 3;
  const std::uint64_t per_producer = test::scaled(100'000);
  create({.priorities = 4, .ring_cells = 256, .slot_bytes = 48}, kProducers, per_producer);
  const std::uint64_t total = kProducers * per_producer;
  auto steady = consumer();
  // Victim k drains with the others until k/(kKills+1) of the stream is
  // delivered, then pops one more item and holds it (never marked seen). They
  // all start before the producers, so each reaches its mark mid-stream.
  std::vector<std::unique_ptr<Subprocess>> victims;
  for (std::uint64_t k = 1; k <= kKills; ++k)
    victims.push_back(consumer("hold", total * k / (kKills + 1)));
  std::vector<std::unique_ptr<Subprocess>> producers;
  for (std::uint64_t i = 0; i < kProducers; ++i) producers.push_back(producer(i, per_producer));
  std::vector<std::uint64_t> held;  // seen-table indices of the items the victims died holding
  for (auto& victim : victims) {
    ASSERT_TRUE(victim->wait_for_text("until killed", 60s))
        << "the victim never held a popped item: " << victim->output();
    const auto item = holding(victim->output(), "holding producer %u seq %llu");
    ASSERT_TRUE(item) << victim->output();
    const std::uint64_t index = item->first * per_producer + item->second;
    ASSERT_EQ(seen_->slot(index).load(), 0u)
        << "the item in the victim's hand is already delivered: it holds nothing to lose";
    victim->kill(SIGKILL);
    ASSERT_EQ(victim->wait(10s), 128 + SIGKILL) << victim->output();
    held.push_back(index);
  }
  for (auto& p : producers) ASSERT_EQ(p->wait(300s), 0) << p->output();
  seen_->header().producers_done.store(1);
  ASSERT_EQ(steady->wait(120s), 0) << steady->output();
  std::vector<std::uint64_t> missing;
  std::uint64_t duplicated = 0;
  for (std::uint64_t i = 0; i < total; ++i) {
    const std::uint8_t n = seen_->slot(i).load();
    if (n == 0) missing.push_back(i);
    duplicated += n > 1 ? 1 : 0;
  }
  EXPECT_EQ(duplicated, 0u);
  std::sort(held.begin(), held.end());
  EXPECT_EQ(missing, held) << "exactly the items the killed consumers held are lost";
  EXPECT_EQ(ring_counter("lost_pops"), 0u) << "they were popped (released): the rings lost nothing";
  expect_healthy();
}

TEST_F(PriorityFanoutProcessTest, ProducerKilledHoldingAClaimedCellLeavesADeliveredPrefix) {
  constexpr std::uint64_t kProducers = 3;
  const std::uint64_t per_producer = test::scaled(100'000);
  create({.priorities = 4, .ring_cells = 256, .slot_bytes = 48}, kProducers, per_producer);
  auto c1 = consumer();
  auto c2 = consumer();
  // Producer 0 submits half its items, then claims a cell for the next one
  // and never publishes it.
  std::vector<std::unique_ptr<Subprocess>> producers;
  producers.push_back(producer(0, per_producer / 2, true));
  for (std::uint64_t i = 1; i < kProducers; ++i) producers.push_back(producer(i, per_producer));
  ASSERT_TRUE(producers[0]->wait_for_text("until killed", 60s))
      << "the victim never claimed a cell: " << producers[0]->output();
  const auto claim = holding(producers[0]->output(), "holding priority %u seq %llu");
  ASSERT_TRUE(claim) << producers[0]->output();
  const std::uint64_t in_flight = claim->second;
  {
    auto ring = open_mpmc_ring(fmt::format("jobs.prio{}", claim->first));
    ASSERT_TRUE(ring) << ring.error().what();
    EXPECT_TRUE(test::claimed_by(*ring, producers[0]->pid(), mpmc::Side::Push))
        << "the victim holds no claimed, unpublished cell";
  }
  producers[0]->kill(SIGKILL);
  ASSERT_EQ(producers[0]->wait(10s), 128 + SIGKILL);
  for (std::size_t i = 1; i < producers.size(); ++i)
    ASSERT_EQ(producers[i]->wait(300s), 0) << producers[i]->output();
  seen_->header().producers_done.store(1);
  ASSERT_EQ(c1->wait(120s), 0) << c1->output();
  ASSERT_EQ(c2->wait(120s), 0) << c2->output();
  // The killed producer's items form a prefix: everything it submitted before
  // the claimed cell was delivered; the claimed item never was.
  for (std::uint64_t i = 0; i < per_producer; ++i)
    ASSERT_EQ(seen_->slot(i).load(), i < in_flight ? 1u : 0u) << i;
  for (std::uint64_t i = per_producer; i < kProducers * per_producer; ++i)
    ASSERT_EQ(seen_->slot(i).load(), 1) << i;
  EXPECT_EQ(ring_counter("abandoned_pushes"), 1u) << "the claimed cell was repaired (tombstone)";
  expect_healthy();
}

TEST_F(PriorityFanoutProcessTest, ReclaimClearsTheWaiterBitOfADrainerKilledWhileParked) {
  const FanoutParams params{.priorities = 4, .ring_cells = 16, .slot_bytes = 48};
  auto f = PriorityFanout::create("jobs", params);
  ASSERT_TRUE(f) << f.error().what();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // a drainer that parks on the empty fanout
    auto d = FanoutConsumer::open("jobs", params);
    std::array<std::byte, 48> out{};
    if (d) (void)d->pop_highest(out, 60s);
    ::_exit(d ? 0 : 1);
  }
  const auto* ctl = reinterpret_cast<const fanout::Control*>(f->bitmap_segment().data().data());
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (ctl->hot.waiters.parked() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  ASSERT_NE(ctl->hot.waiters.parked(), 0u) << "the drainer never parked";
  std::optional<SlotInfo> dead;
  for (const SlotInfo& s : f->bitmap_segment().slots())
    if (s.pid == child) dead = s;
  ASSERT_TRUE(dead);
  ::kill(child, SIGKILL);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  ASSERT_EQ(ctl->hot.waiters.parked(), 1u);
  ASSERT_TRUE(ctl->hot.waiters.has(dead->index)) << "a dead drainer's bit stays set";
  ASSERT_EQ(ctl->hot.waiters.count.load(), 1u);

  auto seg = Segment::open_any("jobs.bitmap", OpenOptions{});  // writable, as the sidecar
  ASSERT_TRUE(seg) << seg.error().what();
  auto done = reclaim_dead_attacher(*seg, kFanoutBitmapDescriptor, *dead);
  ASSERT_TRUE(done) << done.error().what();
  ASSERT_EQ(done->status, ReclaimStatus::Reclaimed);
  ASSERT_EQ(done->actions.size(), 1u);
  EXPECT_NE(done->actions[0].find("cleared its waiter bit"), std::string::npos) << done->actions[0];
  EXPECT_EQ(ctl->hot.waiters.parked(), 0u) << "submitters would keep waking a drainer that is gone";
  EXPECT_EQ(ctl->hot.waiters.count.load(), 0u) << "the count follows the cleared bit";
}

// ---------------------------------------------------------------- stranded items

// The write end of the pipe a crashing submitter reports on (one per child).
int g_crash_fd = -1;

// Forks a submitter that stops at SubmitAfterRingCommit (its item published in
// ring `priority`, the bitmap bit not set), reports it on a pipe and sleeps
// until killed. Returns its pid once it is there (-1 if it never got there).
pid_t submitter_stopped_after_commit(const FanoutParams& params, std::uint32_t priority,
                                     std::string_view payload) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const pid_t child = ::fork();
  if (child < 0) return -1;
  if (child == 0) {
    ::close(fds[0]);
    g_crash_fd = fds[1];
    test_hooks::set_fanout_crash_hook([](test_hooks::FanoutCrashPoint point) {
      if (point != test_hooks::FanoutCrashPoint::SubmitAfterRingCommit) return;
      const char c = 'x';
      (void)!::write(g_crash_fd, &c, 1);
      for (;;) ::pause();
    });
    auto s = FanoutProducer::open("jobs", params);
    if (!s) ::_exit(2);
    (void)s->try_submit(priority, std::as_bytes(std::span(payload)));
    ::_exit(3);  // the hook never returned: not reached
  }
  ::close(fds[1]);
  pollfd pfd{fds[0], POLLIN, 0};
  char c = 0;
  const bool there = ::poll(&pfd, 1, 30'000) == 1 && ::read(fds[0], &c, 1) == 1;
  ::close(fds[0]);
  if (!there) {
    ::kill(child, SIGKILL);
    (void)::waitpid(child, nullptr, 0);
    return -1;
  }
  return child;
}

// Polls for a forked child's exit: its wait status, or nullopt (the child is
// then killed and reaped) when it has not exited within `limit`.
std::optional<int> exit_within(pid_t child, std::chrono::seconds limit) {
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (::waitpid(child, &status, WNOHANG) == child) return status;
    std::this_thread::sleep_for(1ms);
  }
  ::kill(child, SIGKILL);
  (void)::waitpid(child, nullptr, 0);
  return std::nullopt;
}

// A submitter killed -9 between its ring commit and its bitmap bit leaves a
// non-empty ring with its bit clear. The kind's reclaim of the dead attacher
// (what the sidecar runs) sets the bit again, and the item drains.
TEST_F(PriorityFanoutProcessTest, ReclaimOfASubmitterKilledBeforeItsBitResurfacesTheItem) {
  const FanoutParams params{.priorities = 4, .ring_cells = 16, .slot_bytes = 48};
  auto f = PriorityFanout::create("jobs", params);
  ASSERT_TRUE(f) << f.error().what();
  const pid_t child = submitter_stopped_after_commit(params, 2, "stranded");
  ASSERT_GT(child, 0) << "the submitter never reached its crash point";
  std::optional<SlotInfo> dead;
  for (const SlotInfo& s : f->bitmap_segment().slots())
    if (s.pid == child) dead = s;
  ASSERT_TRUE(dead);
  ::kill(child, SIGKILL);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);

  std::array<std::byte, 48> out{};
  auto none = f->try_pop_highest(out);
  ASSERT_TRUE(none) << none.error().what();
  ASSERT_FALSE(*none) << "the item should be stranded: its ring's bit is clear";
  ASSERT_EQ(f->active_priorities(), 0u);
  ASSERT_EQ(f->ring(2).size_hint(), 1u);
  const auto bad = kFanoutBitmapDescriptor.verify(f->bitmap_segment());
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_NE(bad[0].find("priority 2: ring holds 1 item(s) but its bitmap bit is clear"),
            std::string::npos)
      << bad[0];

  auto seg = Segment::open_any("jobs.bitmap", OpenOptions{});  // writable, as the sidecar
  ASSERT_TRUE(seg) << seg.error().what();
  auto done = reclaim_dead_attacher(*seg, kFanoutBitmapDescriptor, *dead);
  ASSERT_TRUE(done) << done.error().what();
  ASSERT_EQ(done->status, ReclaimStatus::Reclaimed);
  ASSERT_EQ(done->actions.size(), 1u);
  EXPECT_NE(done->actions[0].find("priority 2: ring holds 1 item(s) with its bitmap bit clear"),
            std::string::npos)
      << done->actions[0];
  EXPECT_EQ(f->active_priorities(), 0b0100u);
  EXPECT_EQ(kFanoutBitmapDescriptor.verify(f->bitmap_segment()), std::vector<std::string>{});
  auto d = f->try_pop_highest(out);
  ASSERT_TRUE(d && *d);
  EXPECT_EQ((*d)->priority, 2u);
  EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(out.data()), (*d)->size), "stranded");
}

// The same crash with a drainer already parked in pop_highest() and no
// sidecar: before each sleep the drainer that finds the bitmap empty looks at
// every ring once, so it drains the item (today's bound: one park round,
// kMaxParkNs) instead of sleeping until its timeout.
TEST_F(PriorityFanoutProcessTest, ParkedDrainerDrainsAnItemStrandedByAKilledSubmitter) {
  const FanoutParams params{.priorities = 4, .ring_cells = 16, .slot_bytes = 48};
  auto f = PriorityFanout::create("jobs", params);
  ASSERT_TRUE(f) << f.error().what();
  const pid_t drainer = ::fork();
  ASSERT_GE(drainer, 0);
  if (drainer == 0) {  // exit 0: drained the stranded item; 1: timed out; 2: anything else
    auto d = FanoutConsumer::open("jobs", params);
    if (!d) ::_exit(2);
    std::array<std::byte, 48> out{};
    auto r = d->pop_highest(out, 60s);
    if (!r) ::_exit(2);
    if (!*r) ::_exit(1);
    const std::string_view got(reinterpret_cast<const char*>(out.data()), (*r)->size);
    ::_exit((*r)->priority == 1 && got == "stranded" ? 0 : 2);
  }
  const auto* ctl = reinterpret_cast<const fanout::Control*>(f->bitmap_segment().data().data());
  const auto parked_by = std::chrono::steady_clock::now() + 20s;
  while (ctl->hot.waiters.parked() == 0 && std::chrono::steady_clock::now() < parked_by)
    std::this_thread::sleep_for(1ms);
  ASSERT_NE(ctl->hot.waiters.parked(), 0u) << "the drainer never parked";

  const pid_t child = submitter_stopped_after_commit(params, 1, "stranded");
  ASSERT_GT(child, 0) << "the submitter never reached its crash point";
  ::kill(child, SIGKILL);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);

  // Poll for the drainer's exit with a deadline far below its 60 s timeout.
  const auto status = exit_within(drainer, 20s);
  ASSERT_TRUE(status) << "the parked drainer did not drain the stranded item within 20 s";
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 0) << "1: timed out, 2: error or wrong item";
  EXPECT_EQ(f->ring(1).size_hint(), 0u);
}

// --- at-least-once drain: a consumer killed -9 between take and release

std::string text(std::span<const std::byte> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

std::uint64_t mpmc_stat(const Segment& ring, std::string_view key) {
  Node n;
  kMpmcRingDescriptor.describe(ring, n);
  const Node* f = n.find(key);
  EXPECT_NE(f, nullptr) << key;
  return f ? std::get<std::uint64_t>(f->value()) : 0;
}

// Starts test_fanout_take_hold on "jobs" and waits for its "taken ..." line.
std::unique_ptr<Subprocess> taker(const std::string& expect) {
  auto t = std::make_unique<Subprocess>(
      std::vector<std::string>{test::helper_path("fanout_take_hold"), "jobs"});
  EXPECT_TRUE(t->wait_for_line(expect, 30s)) << t->output();
  return t;
}

// The item a consumer took and had not released when it was killed stays in
// its ring; the next consumer to open the fanout takes it again, before the
// items behind it; nothing is lost and the rings verify clean.
TEST_F(PriorityFanoutProcessTest, ConsumerKilledBetweenTakeAndReleaseLosesNothing) {
  const FanoutParams params{.priorities = 4, .ring_cells = 4, .slot_bytes = 48};
  auto f = FanoutProducer::create("jobs", params);
  ASSERT_TRUE(f) << f.error().what();
  for (const char* item : {"first", "second"})
    ASSERT_TRUE(*f->try_submit(2, std::as_bytes(std::span(std::string_view(item)))));
  ASSERT_TRUE(*f->try_submit(0, std::as_bytes(std::span(std::string_view("low")))));
  auto t = taker("taken 2 first");
  t->kill(SIGKILL);
  ASSERT_EQ(t->wait(10s), 128 + SIGKILL);
  const auto held = kMpmcRingDescriptor.verify(f->ring(2).segment());
  ASSERT_EQ(held.size(), 1u);
  EXPECT_NE(held[0].find("repair keeps its item for the next consumer"), std::string::npos)
      << held[0];

  auto next = FanoutConsumer::open("jobs", params);  // its open repairs the ring: kept, not lost
  ASSERT_TRUE(next) << next.error().what();
  EXPECT_EQ(mpmc_stat(f->ring(2).segment(), "orphans"), 1u);
  EXPECT_TRUE(kMpmcRingDescriptor.verify(f->ring(2).segment()).empty())
      << kMpmcRingDescriptor.verify(f->ring(2).segment())[0];
  std::vector<std::pair<std::uint32_t, std::string>> got;
  for (;;) {
    auto r = next->try_take_highest();
    ASSERT_TRUE(r) << r.error().what();
    if (!*r) break;
    got.emplace_back((*r)->priority, text((*r)->payload));
    next->release();
  }
  EXPECT_EQ(got, (std::vector<std::pair<std::uint32_t, std::string>>{
                     {2, "first"}, {2, "second"}, {0, "low"}}));
  EXPECT_EQ(mpmc_stat(f->ring(2).segment(), "lost_pops"), 0u);
  EXPECT_EQ(mpmc_stat(f->ring(2).segment(), "orphans"), 0u);
  EXPECT_EQ(mpmc_stat(f->ring(2).segment(), "orphans_adopted"), 1u);
  // The ring is whole again: a full lap of pushes and pops goes through the cell.
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(*f->try_submit(2, std::as_bytes(std::span(std::string_view("lap")))));
    auto r = next->try_take_highest();
    ASSERT_TRUE(r && *r);
    next->release();
  }
  for (std::uint32_t p = 0; p < params.priorities; ++p)
    EXPECT_TRUE(kMpmcRingDescriptor.verify(f->ring(p).segment()).empty()) << p;
}

// The same kill with a consumer already open and parked, its ring's bit
// already clear (the taken item was the ring's last): the kind's reclaim of
// the dead attacher (what the sidecar runs) keeps the item as an orphan, and
// the parked consumer's look at every ring before it sleeps finds it.
TEST_F(PriorityFanoutProcessTest, ParkedConsumerTakesTheItemOfAKilledTakerAfterReclaim) {
  const FanoutParams params{.priorities = 4, .ring_cells = 4, .slot_bytes = 48};
  auto f = FanoutProducer::create("jobs", params);
  ASSERT_TRUE(f) << f.error().what();
  ASSERT_TRUE(*f->try_submit(3, std::as_bytes(std::span(std::string_view("only")))));
  auto t = taker("taken 3 only");
  const Segment& ring = f->ring(3).segment();
  std::optional<SlotInfo> dead;
  for (const SlotInfo& s : ring.slots())
    if (s.pid == t->pid()) dead = s;
  ASSERT_TRUE(dead);
  ASSERT_EQ(f->active_priorities(), 0u) << "the take emptied ring 3: its bit is clear";

  const pid_t consumer = ::fork();
  ASSERT_GE(consumer, 0);
  if (consumer == 0) {  // exit 0: took "only" at priority 3; 1: timed out; 2: anything else
    auto c = FanoutConsumer::open("jobs", params);
    if (!c) ::_exit(2);
    auto r = c->take_highest(60s);
    if (!r) ::_exit(2);
    if (!*r) ::_exit(1);
    const bool ok = (*r)->priority == 3 && text((*r)->payload) == "only";
    c->release();
    ::_exit(ok ? 0 : 2);
  }
  const auto* ctl = reinterpret_cast<const fanout::Control*>(f->bitmap_segment().data().data());
  const auto parked_by = std::chrono::steady_clock::now() + 20s;
  while (ctl->hot.waiters.parked() == 0 && std::chrono::steady_clock::now() < parked_by)
    std::this_thread::sleep_for(1ms);
  ASSERT_NE(ctl->hot.waiters.parked(), 0u) << "the consumer never parked";

  t->kill(SIGKILL);
  ASSERT_EQ(t->wait(10s), 128 + SIGKILL);
  auto seg = Segment::open_any("jobs.prio3", OpenOptions{});  // writable, as the sidecar
  ASSERT_TRUE(seg) << seg.error().what();
  auto done = reclaim_dead_attacher(*seg, kMpmcRingDescriptor, *dead);
  ASSERT_TRUE(done) << done.error().what();
  ASSERT_EQ(done->status, ReclaimStatus::Reclaimed);
  ASSERT_FALSE(done->actions.empty());
  EXPECT_NE(done->actions[0].find("kept it for the next consumer"), std::string::npos)
      << done->actions[0];

  const auto status = exit_within(consumer, 20s);
  ASSERT_TRUE(status) << "the parked consumer did not take the kept item within 20 s";
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 0) << "1: timed out, 2: error or wrong item";
  EXPECT_EQ(mpmc_stat(ring, "lost_pops"), 0u);
  EXPECT_EQ(mpmc_stat(ring, "orphans_adopted"), 1u);
  EXPECT_TRUE(kMpmcRingDescriptor.verify(ring).empty());
}

}  // namespace
}  // namespace shm
