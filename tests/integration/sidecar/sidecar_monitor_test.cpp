// The sidecar's Monitor driven step by step (do_work()) against real processes:
// deaths (kill -9) and what each kind's reclaim does about them (a ring's
// slot, a ledger's tickets, a channel's terminal state), stuck processes
// (SIGSTOP), files that are not segments or change under it, discovery,
// ephemeral collection, /status and metrics of every kind, the instance lock.
#include "common/subprocess.hpp"
#include "common/temp_root.hpp"
#include "helpers/channel/channel_payload.hpp"

#include "sidecar/instance_lock.hpp"
#include "sidecar/metrics.hpp"
#include "sidecar/monitor.hpp"
#include "sidecar/status.hpp"

#include "shm/channel/consumer.hpp"
#include "shm/egress/egress.hpp"
#include "shm/fanout/priority_fanout.hpp"
#include "shm/ledger/ledger.hpp"
#include "shm/mpmc/mpmc_ring.hpp"
#include "shm/platform/clock.hpp"
#include "shm/relay/relay.hpp"
#include "shm/segment/kind.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/layout.hpp"
#include "shm/spsc/producer.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

namespace shm::sidecar {
namespace {

using namespace std::chrono_literals;
using test::Subprocess;

class SidecarMonitor : public ::testing::Test {
 protected:
  test::TempRoot root;
  std::vector<std::string> lines;
  Logger log{[this](std::string_view l) { lines.emplace_back(l); }, Logger::Format::Logfmt,
             Level::Debug};

  MonitorOptions options(std::chrono::milliseconds stuck_after = 150ms) const {
    MonitorOptions o;
    o.root = root.path();
    o.stuck_after = stuck_after;
    o.rescan_every = 1h;  // discovery must come from inotify unless a test says otherwise
    return o;
  }

  // Lines with event=EVENT that contain every one of `parts`.
  std::size_t count(std::string_view event,
                    std::initializer_list<std::string_view> parts = {}) const {
    const std::string tag = fmt::format("event={} ", event);
    return static_cast<std::size_t>(
        std::count_if(lines.begin(), lines.end(), [&](const std::string& l) {
          if (l.find(tag) == std::string::npos) return false;
          return std::all_of(parts.begin(), parts.end(),
                             [&](std::string_view p) { return l.find(p) != std::string::npos; });
        }));
  }
  std::string log_text() const {
    std::string out;
    for (const auto& l : lines) out += l + "\n";
    return out;
  }

  // A helper process holding `role` of ring `name`; waits until attached.
  Subprocess attacher(const std::string& name, const std::string& role,
                      std::vector<std::string> extra = {}) {
    std::vector<std::string> argv{test::helper_path("sidecar_attacher"), name, role};
    argv.insert(argv.end(), extra.begin(), extra.end());
    Subprocess p(argv);
    const std::string line = fmt::format("attached {}", role == "producer" ? 0 : 1);
    EXPECT_TRUE(p.wait_for_line(line, 30s)) << "helper output: " << p.output();
    return p;
  }

  static void write_file(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary);
    f << bytes;
  }

  struct Holder {
    Subprocess process;
    Owner owner;
  };
  // A helper process holding `count` tickets of `bytes` in pool "p" of ledger
  // `name` until it is killed.
  static Holder ledger_holder(const std::string& name, int count, std::int64_t bytes) {
    Subprocess p({test::helper_path("ledger_worker"), "hold", name, "p", std::to_string(count),
                  std::to_string(bytes)});
    EXPECT_TRUE(p.wait_for_line("ready", 20s)) << p.output();
    unsigned n = 0, slot = 0, generation = 0;
    long long total = 0;
    EXPECT_EQ(std::sscanf(p.output().c_str(), "held %u %lld %u %u", &n, &total, &slot, &generation),
              4)
        << p.output();
    return Holder{std::move(p), Owner{slot, generation}};
  }

  static std::size_t events_of(const Segment& seg, EventType type, std::uint32_t slot) {
    const auto events = seg.events();
    return static_cast<std::size_t>(
        std::count_if(events.begin(), events.end(),
                      [&](const EventInfo& e) { return e.type == type && e.slot == slot; }));
  }
};

Segment make_ring(const std::string& name, std::uint64_t capacity = 4096, bool ephemeral = false) {
  CreateOptions co;
  co.ephemeral = ephemeral;
  auto seg = create_ring(name, RingParams{capacity}, co);
  EXPECT_TRUE(seg.has_value()) << (seg ? "" : seg.error().what());
  return std::move(*seg);
}

TEST_F(SidecarMonitor, DetectsKilledAttacherWithinOneCycleAndReclaimsItsSlot) {
  Segment ring = make_ring("orders");
  Subprocess consumer = attacher("orders", "consumer");
  Monitor m(options(), log);
  m.do_work();
  const SegmentView* v = m.find("orders");
  ASSERT_NE(v, nullptr) << log_text();
  EXPECT_TRUE(v->up);
  EXPECT_EQ(v->alive, 1u);
  EXPECT_EQ(v->dead, 0u);

  consumer.kill(SIGKILL);
  ASSERT_EQ(consumer.wait(30s), 128 + SIGKILL);
  m.do_work();

  EXPECT_EQ(m.stats().deaths, 1u) << log_text();
  EXPECT_EQ(m.stats().reclaims, 1u) << log_text();
  EXPECT_EQ(count("attacher_dead", {"segment=orders", "slot=1", "role=consumer",
                                    fmt::format("pid={}", consumer.pid())}),
            1u)
      << log_text();
  // The kind's reclaim ran (its action line is logged) and the slot is free.
  EXPECT_EQ(count("attacher_reclaimed", {"segment=orders", "ring positions kept"}), 1u)
      << log_text();
  v = m.find("orders");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->alive, 0u);
  EXPECT_EQ(v->dead, 0u);
  EXPECT_EQ(ring.liveness(1), Liveness::Free);
  const auto events = ring.events();
  EXPECT_TRUE(std::any_of(events.begin(), events.end(), [](const EventInfo& e) {
    return e.type == EventType::Reclaimed && e.slot == 1;
  })) << "no Reclaimed event for slot 1 in the segment's observation ring";

  // The death is counted once, not once per cycle.
  m.do_work();
  EXPECT_EQ(m.stats().deaths, 1u);
  // And the role can be taken again by a new consumer.
  Subprocess again = attacher("orders", "consumer");
  m.do_work();
  EXPECT_EQ(m.find("orders")->alive, 1u);
}

TEST_F(SidecarMonitor, ReleasesTheLedgerTicketsOfAKilledHolderWithinOneCycle) {
  LedgerConfig cfg;
  cfg.params = {100'000, 0, 64, 4, 4, 0};
  cfg.categories = {{"a", 100'000, Partition::Ordinary}};
  auto l = Ledger::create("budget", cfg);
  ASSERT_TRUE(l) << l.error().what();
  auto pool = l->open_pool({"p", {{"all", 100'000, {}}}, 0});
  ASSERT_TRUE(pool) << pool.error().what();
  ASSERT_TRUE(l->reserve(*pool, CategoryId{0}, 100)->has_value());
  Holder a = ledger_holder("budget", 5, 40);
  Holder b = ledger_holder("budget", 3, 70);
  Monitor m(options(), log);
  m.do_work();
  ASSERT_NE(m.find("budget"), nullptr) << log_text();
  EXPECT_EQ(m.find("budget")->alive, 3u);
  EXPECT_EQ(m.stats().deaths, 0u);

  a.process.kill(SIGKILL);
  ASSERT_EQ(a.process.wait(30s), 128 + SIGKILL);
  m.do_work();

  EXPECT_EQ(m.stats().deaths, 1u) << log_text();
  EXPECT_EQ(m.stats().reclaims, 1u) << log_text();
  EXPECT_EQ(m.stats().reclaim_failures, 0u) << log_text();
  EXPECT_EQ(count("attacher_reclaimed",
                  {"segment=budget", fmt::format("slot={} ", a.owner.slot), "role=member",
                   fmt::format("pid={}", a.process.pid()), "released 5 tickets (200 bytes)"}),
            1u)
      << log_text();
  // Exactly the dead holder's charges went; ours and the live holder's stay.
  auto s = l->snapshot();
  ASSERT_TRUE(s) << s.error().what();
  EXPECT_EQ(s->global.used, 100 + 210);
  EXPECT_EQ(s->live_tickets, 1u + 3u);
  EXPECT_EQ(s->stats.reclaimed_tickets, 5u);
  auto tickets = l->tickets();
  ASSERT_TRUE(tickets);
  std::size_t of_b = 0;
  for (const TicketInfo& t : *tickets) {
    EXPECT_NE(t.owner, a.owner);
    if (t.owner == b.owner) ++of_b;
  }
  EXPECT_EQ(of_b, 3u);
  auto problems = l->verify();
  ASSERT_TRUE(problems);
  EXPECT_TRUE(problems->empty()) << problems->front();
  // The slot is free and the event is in the segment's observation ring.
  EXPECT_EQ(l->segment().liveness(a.owner.slot), Liveness::Free);
  EXPECT_EQ(l->segment().liveness(b.owner.slot), Liveness::Alive);
  EXPECT_EQ(events_of(l->segment(), EventType::Reclaimed, a.owner.slot), 1u);
  const SegmentView* v = m.find("budget");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->alive, 2u);
  EXPECT_EQ(v->dead, 0u);

  m.do_work();  // nothing more to do
  EXPECT_EQ(m.stats().reclaims, 1u);
  EXPECT_EQ(l->snapshot()->global.used, 100 + 210);
}

TEST_F(SidecarMonitor, MarksAChannelFaultedWhenItsProducerIsKilledMidStreamAndTheConsumerLearnsIt) {
  constexpr std::size_t kMaxLen = 40;  // channel_producer_step's fault-mode payloads
  ASSERT_TRUE(create_channel(
      "feed", {.pages = 4, .page_bytes = 1024, .descriptors_per_page = 4, .ring_cells = 32}));
  auto c = ChannelConsumer::open("feed");
  ASSERT_TRUE(c) << c.error().what();
  // Five payloads committed, a sixth reserved and half written: mid-stream.
  Subprocess producer(
      {test::helper_path("channel_producer_step"), "feed", "fault", "reserve-commit", "5"});
  ASSERT_TRUE(producer.wait_for_line("at reserve-commit", 20s)) << producer.output();
  Monitor m(options(), log);
  m.do_work();
  ASSERT_NE(m.find("feed"), nullptr) << log_text();
  EXPECT_EQ(m.find("feed")->alive, 2u);

  producer.kill(SIGKILL);
  ASSERT_EQ(producer.wait(30s), 128 + SIGKILL);
  // Nobody has looked yet: the terminal word is still OPEN.
  ASSERT_EQ(c->state(), ChannelState::Open);
  m.do_work();

  EXPECT_EQ(m.stats().deaths, 1u) << log_text();
  EXPECT_EQ(m.stats().reclaims, 1u) << log_text();
  EXPECT_EQ(c->state(), ChannelState::Faulted) << log_text();
  EXPECT_EQ(c->fault(), ChannelFault::ProducerDied);
  EXPECT_EQ(count("attacher_reclaimed",
                  {"segment=feed", "role=producer", fmt::format("pid={}", producer.pid()),
                   "marked FAULTED (producer died)", "drains 5 published"}),
            1u)
      << log_text();
  const Segment& seg = c->segment();
  EXPECT_EQ(events_of(seg, EventType::Fault, 0), 1u);
  EXPECT_EQ(events_of(seg, EventType::Reclaimed, 0), 1u);
  EXPECT_EQ(seg.liveness(0), Liveness::Free);

  // The consumer drains what was published, then gets the typed error.
  for (std::uint64_t seq = 0; seq < 5; ++seq) {
    auto r = c->try_receive();
    ASSERT_TRUE(r) << "payload " << seq << ": " << r.error().what();
    ASSERT_EQ(r->status, ReceiveStatus::Received) << "payload " << seq;
    EXPECT_EQ(r->lease.sequence(), seq);
    EXPECT_TRUE(
        test::check_channel_payload(r->lease.bytes(), seq, test::channel_length(seq, kMaxLen)))
        << "payload " << seq << " damaged";
  }
  for (int i = 0; i < 2; ++i) {  // terminal: repeated
    auto end = c->try_receive();
    ASSERT_FALSE(end) << "expected ProducerDied, got " << to_string(end->status);
    EXPECT_EQ(end.error().code, Errc::ProducerDied) << end.error().what();
    EXPECT_NE(end.error().message.find("the producer died without finish()"), std::string::npos)
        << end.error().message;
  }
}

TEST_F(SidecarMonitor, StatusShowsMpmcAndFanoutSegmentsWithTheirCounters) {
  auto ring = MpmcRing::create("jobs", {.ring_cells = 8, .slot_bytes = 64});
  ASSERT_TRUE(ring) << ring.error().what();
  const std::vector<std::byte> item(16, std::byte{3});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(ring->try_push(item).value_or(false));
  std::array<std::byte, 64> out{};
  auto popped = ring->try_pop(out);
  ASSERT_TRUE(popped && *popped);

  auto fan = PriorityFanout::create("work", {.priorities = 4, .ring_cells = 16, .slot_bytes = 48});
  ASSERT_TRUE(fan) << fan.error().what();
  ASSERT_TRUE(fan->try_submit(3, item).value_or(false));
  ASSERT_TRUE(fan->try_submit(3, item).value_or(false));
  ASSERT_TRUE(fan->try_submit(0, item).value_or(false));
  auto drained = fan->try_pop_highest(out);
  ASSERT_TRUE(drained && *drained);
  EXPECT_EQ((*drained)->priority, 3u);

  Monitor m(options(), log);
  m.do_work();
  const nlohmann::ordered_json status = status_json(m, realtime_ns());
  auto segment = [&](const std::string& name) -> const nlohmann::ordered_json* {
    for (const auto& s : status["segments"])
      if (s["name"] == name) return &s;
    return nullptr;
  };

  const auto* jobs = segment("jobs");
  ASSERT_NE(jobs, nullptr) << status.dump(2);
  EXPECT_EQ((*jobs)["up"], true);
  EXPECT_EQ((*jobs)["kind"], "mpmc_ring");
  EXPECT_EQ((*jobs)["attachers"]["alive"], 1);
  EXPECT_EQ((*jobs)["detail"]["depth"], 2) << jobs->dump(2);
  EXPECT_EQ((*jobs)["detail"]["pushed"], 3);
  EXPECT_EQ((*jobs)["detail"]["popped"], 1);

  const auto* bitmap = segment("work.bitmap");
  ASSERT_NE(bitmap, nullptr) << status.dump(2);
  EXPECT_EQ((*bitmap)["up"], true);
  EXPECT_EQ((*bitmap)["kind"], "fanout_bitmap");
  EXPECT_EQ((*bitmap)["attachers"]["alive"], 1);
  EXPECT_EQ((*bitmap)["detail"]["priorities"], 4) << bitmap->dump(2);
  EXPECT_EQ((*bitmap)["detail"]["depth_total"], 2);
  EXPECT_EQ((*bitmap)["detail"]["submitted_total"], 3);
  EXPECT_EQ((*bitmap)["detail"]["drained_total"], 1);
  EXPECT_EQ((*bitmap)["detail"]["active_count"], 2);
  // Each priority's ring is a segment of its own.
  for (std::uint32_t p = 0; p < 4; ++p) {
    const auto* r = segment(fanout::ring_name("work", p));
    ASSERT_NE(r, nullptr) << fanout::ring_name("work", p) << "\n" << status.dump(2);
    EXPECT_EQ((*r)["kind"], "mpmc_ring");
    EXPECT_EQ((*r)["detail"]["depth"], p == 0 || p == 3 ? 1 : 0);  // 3: two in, one out
  }

  const std::string text = render_metrics(m, 0);
  EXPECT_NE(text.find("libshm_mpmc_ring_pushed_total{segment=\"jobs\"} 3\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("libshm_mpmc_ring_depth{segment=\"jobs\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("libshm_fanout_bitmap_submitted_total{segment=\"work.bitmap\"} 3\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("libshm_fanout_bitmap_drained_total{segment=\"work.bitmap\"} 1\n"),
            std::string::npos)
      << text;
}

// Stuck is alive, with work waiting, and no progress for stuck_after: a
// consumer that works without ever waiting in the library (so it never
// refreshes its heartbeat) is not stuck; SIGSTOPped with records waiting it
// is, within stuck_after; resumed, it is not any more. Never dead.
TEST_F(SidecarMonitor, StoppedProcessWithWorkWaitingIsReportedStuckButNeverDead) {
  Subprocess consumer = attacher("paused", "consumer", {"--create", "4096", "--work-ms", "5"});
  auto producer = RingProducer::open("paused");
  ASSERT_TRUE(producer) << producer.error().what();
  const std::vector<std::byte> rec(16, std::byte{0x11});
  // 500 ms: a loaded runner's scheduling gap must not pass for a stall.
  Monitor m(options(500ms), log);
  // Runs cycles, pushing a record each, until `done` holds or a generous
  // deadline passes. The assertions below are on what the cycles saw, never
  // on how long it took.
  const auto cycle_until = [&](auto done) {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    for (;;) {
      (void)producer->try_push(rec);
      m.do_work();
      if (done() || std::chrono::steady_clock::now() >= deadline) return done();
      std::this_thread::sleep_for(5ms);  // a polling pace, not a synchronisation
    }
  };
  const auto consumer_view = [&m]() -> const AttacherView* {
    const SegmentView* v = m.find("paused");
    if (v == nullptr) return nullptr;
    for (const AttacherView& a : v->attachers)
      if (a.role == "consumer") return &a;
    return nullptr;
  };
  // Working for 10 x stuck_after: never stuck, though its heartbeat ages.
  const auto working_until = std::chrono::steady_clock::now() + 5s;
  ASSERT_TRUE(cycle_until([&] {
    return std::chrono::steady_clock::now() >= working_until || m.stats().stuck_detections > 0;
  }));
  EXPECT_EQ(m.stats().stuck_detections, 0u) << "a working consumer was reported stuck\n"
                                            << log_text();
  ASSERT_NE(consumer_view(), nullptr);
  EXPECT_GE(consumer_view()->heartbeat_age_ms, 1000u) << "the helper never heartbeats";
  EXPECT_EQ(m.find("paused")->alive, 2u);
  EXPECT_EQ(m.find("paused")->stuck, 0u);

  consumer.kill(SIGSTOP);
  ASSERT_TRUE(cycle_until([&] { return m.stats().stuck_detections > 0; }))
      << "a stopped consumer with records waiting was never reported stuck\n"
      << log_text();
  m.do_work();  // one more cycle: still stuck, reported once, never dead
  const SegmentView* v = m.find("paused");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->alive, 1u) << "alive, stuck and dead partition the attachers";
  EXPECT_EQ(v->stuck, 1u);
  EXPECT_EQ(v->dead, 0u);
  ASSERT_NE(consumer_view(), nullptr);
  EXPECT_TRUE(consumer_view()->stuck);
  EXPECT_EQ(consumer_view()->liveness, Liveness::Alive);
  // Stuck means stalled longer than stuck_after (500 ms) in nanoseconds; the
  // stall is shown in whole milliseconds, rounded down.
  EXPECT_GE(consumer_view()->stalled_ms, 500u);
  EXPECT_EQ(m.stats().stuck_detections, 1u) << log_text();
  EXPECT_EQ(m.stats().deaths, 0u) << log_text();
  EXPECT_EQ(count("attacher_stuck",
                  {"segment=paused", "role=consumer", fmt::format("pid={}", consumer.pid())}),
            1u)
      << log_text();
  // /status and /metrics count the same partition.
  const std::string text = render_metrics(m, 0);
  EXPECT_NE(text.find("libshm_segment_attachers{segment=\"paused\",state=\"alive\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("libshm_segment_attachers{segment=\"paused\",state=\"stuck\"} 1\n"),
            std::string::npos)
      << text;
  const nlohmann::ordered_json status = status_json(m, realtime_ns());
  for (const auto& seg : status["segments"])
    if (seg["name"] == "paused") {
      EXPECT_EQ(seg["attachers"]["alive"], 1) << seg.dump();
      EXPECT_EQ(seg["attachers"]["stuck"], 1) << seg.dump();
    }

  consumer.kill(SIGCONT);
  ASSERT_TRUE(cycle_until([&] { return m.find("paused")->stuck == 0; }))
      << "a resumed consumer stayed stuck\n"
      << log_text();
  EXPECT_FALSE(consumer_view()->stuck);
  EXPECT_EQ(count("attacher_unstuck", {"segment=paused"}), 1u) << log_text();
  EXPECT_EQ(m.stats().deaths, 0u) << log_text();
}

// The audit's cases, with handles that never wait in the library: a ring
// producer and consumer, a relay writer and reader, an egress producer and
// transport, each working on its own thread. None is stuck while it works;
// when the reading side stops with work waiting, it is (within
// stuck_after), and when it resumes, it is not. A producer is never stuck.
TEST_F(SidecarMonitor, WorkingHandlesAreNeverStuckAndStoppedReadersAre) {
  auto ring_producer = RingProducer::create("ring", RingParams{4096});
  ASSERT_TRUE(ring_producer) << ring_producer.error().what();
  auto ring_consumer = RingConsumer::open("ring");
  ASSERT_TRUE(ring_consumer) << ring_consumer.error().what();
  RelayConfig rc;
  rc.policy = policy::kSum;
  rc.max_entries = 64;
  rc.backpressure = Backpressure{Dimension::Count, 64, 8, Overflow::Conflate};
  auto relay_writer = RelayWriter::create("relay", rc);
  ASSERT_TRUE(relay_writer) << relay_writer.error().what();
  auto relay_reader = RelayReader::open("relay");
  ASSERT_TRUE(relay_reader) << relay_reader.error().what();
  EgressParams ep;
  ep.max_payloads = 64;
  ep.inflight_limit = 8;
  auto egress = Egress::create("egress", ep);
  ASSERT_TRUE(egress) << egress.error().what();
  auto transport = EgressTransport::open("egress");
  ASSERT_TRUE(transport) << transport.error().what();

  std::atomic<bool> stop{false}, readers_paused{false};
  std::vector<std::thread> workers;
  auto every = [&](std::chrono::milliseconds period, auto&& round, bool reader) {
    workers.emplace_back([&, period, round, reader]() mutable {
      while (!stop.load()) {
        if (!reader || !readers_paused.load()) round();
        std::this_thread::sleep_for(period);
      }
    });
  };
  const std::vector<std::byte> rec(16, std::byte{0x22});
  std::uint64_t key = 0;
  every(
      8ms, [&] { (void)ring_producer->try_push(rec); }, false);
  every(
      20ms, [&] { (void)ring_consumer->drain([](std::span<const std::byte>) {}, 1u << 20); }, true);
  every(
      5ms, [&] { (void)relay_writer->write(++key % 16, u64_value(1), 0ns); }, false);
  every(
      20ms, [&] { (void)relay_reader->drain(1024, [](const RelayEntry&) {}); }, true);
  every(
      3ms, [&] { (void)egress->try_enqueue(rec); }, false);
  every(
      3ms,
      [&] {
        std::vector<std::byte> buf;
        auto c = transport->try_claim(buf);
        if (c && c->status == egress::ClaimStatus::Claimed)
          (void)transport->ack(c->envelope.sequence);
      },
      true);

  // 500 ms: a loaded runner's scheduling gap must not pass for a stall.
  Monitor m(options(500ms), log);
  const auto cycle_for = [&](std::chrono::milliseconds span) {
    const auto until = std::chrono::steady_clock::now() + span;
    while (std::chrono::steady_clock::now() < until) {
      m.do_work();
      std::this_thread::sleep_for(10ms);
    }
  };
  const auto cycle_until = [&](auto done) {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    for (;;) {
      m.do_work();
      if (done() || std::chrono::steady_clock::now() >= deadline) return done();
      std::this_thread::sleep_for(10ms);
    }
  };
  cycle_for(5s);  // 10 x stuck_after
  EXPECT_EQ(m.stats().stuck_detections, 0u) << "a working handle was reported stuck\n"
                                            << log_text();
  for (const char* name : {"ring", "relay", "egress"}) {
    ASSERT_NE(m.find(name), nullptr) << name;
    EXPECT_EQ(m.find(name)->alive, 2u) << name;
    EXPECT_EQ(m.find(name)->stuck, 0u) << name;
  }

  readers_paused = true;  // the writers go on: work waits for the readers
  const bool all_stuck = cycle_until([&] {
    return m.find("ring")->stuck == 1 && m.find("relay")->stuck == 1 &&
           m.find("egress")->stuck == 1;
  });
  EXPECT_TRUE(all_stuck) << log_text();
  EXPECT_EQ(count("attacher_stuck", {"segment=ring", "role=consumer"}), 1u) << log_text();
  EXPECT_EQ(count("attacher_stuck", {"segment=relay", "role=reader"}), 1u) << log_text();
  EXPECT_EQ(count("attacher_stuck", {"segment=egress", "role=transport"}), 1u) << log_text();
  EXPECT_EQ(count("attacher_stuck", {"role=producer"}), 0u) << log_text();
  EXPECT_EQ(count("attacher_stuck", {"role=writer"}), 0u) << log_text();

  readers_paused = false;
  EXPECT_TRUE(cycle_until([&] {
    return m.find("ring")->stuck == 0 && m.find("relay")->stuck == 0 &&
           m.find("egress")->stuck == 0;
  })) << log_text();
  stop = true;
  for (std::thread& t : workers) t.join();
}

TEST_F(SidecarMonitor, DiscoversSegmentCreatedAfterStartWithinOneCycle) {
  Monitor m(options(), log);
  m.do_work();
  EXPECT_TRUE(m.snapshot().empty());
  ASSERT_GE(m.wake_fd(), 0) << "inotify unavailable";
  Segment late = make_ring("late");
  m.do_work();  // rescan_every is an hour: this is inotify's doing
  ASSERT_NE(m.find("late"), nullptr) << log_text();
  EXPECT_TRUE(m.find("late")->up);
  EXPECT_EQ(m.find("late")->kind, "spsc_ring");
  EXPECT_EQ(count("segment_discovered", {"segment=late", "kind=spsc_ring"}), 1u) << log_text();

  ASSERT_TRUE(late.unlink());
  m.do_work();
  EXPECT_EQ(m.find("late"), nullptr);
  EXPECT_EQ(count("segment_removed", {"segment=late"}), 1u) << log_text();
}

TEST_F(SidecarMonitor, DiscoversNewSegmentByRescanWithoutInotify) {
  MonitorOptions o = options();
  o.use_inotify = false;
  o.rescan_every = 0ms;
  Monitor m(o, log);
  EXPECT_EQ(m.wake_fd(), -1);
  m.do_work();
  Segment late = make_ring("polled");
  m.do_work();
  ASSERT_NE(m.find("polled"), nullptr) << log_text();
}

TEST_F(SidecarMonitor, SurvivesFilesThatAreNotValidSegmentsAndLogsEachOnce) {
  Segment good = make_ring("good");
  write_file(root.file("garbage"), std::string(8192, 'x'));
  write_file(root.file("short"), std::string(100, '\0'));
  { Segment bad = make_ring("badcrc"); }
  {  // flip one byte of the immutable header: the CRC no longer matches
    const int fd = ::open(root.file("badcrc").c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    const char x = 0x7f;
    ASSERT_EQ(::pwrite(fd, &x, 1, 80), 1);
    ::close(fd);
  }
  write_file(root.file("bad name"), "not a segment");
  std::filesystem::create_directory(root.file("subdir"));
  std::filesystem::create_symlink(root.file("good"), root.file("link"));

  Monitor m(options(), log);
  m.do_work();
  m.do_work();
  ASSERT_NE(m.find("good"), nullptr);
  EXPECT_TRUE(m.find("good")->up);
  const std::map<std::string, std::string> expected{{"garbage", "BadMagic"},
                                                    {"short", "Truncated"},
                                                    {"badcrc", "HeaderCorrupt"},
                                                    {"bad name", "InvalidName"},
                                                    {"link", "NotRegularFile"}};
  for (const auto& [name, code] : expected) {
    const SegmentView* v = m.find(name);
    ASSERT_NE(v, nullptr) << name;
    EXPECT_FALSE(v->up) << name;
    EXPECT_NE(v->error.find(code), std::string::npos) << name << ": " << v->error;
    EXPECT_EQ(count("segment_unreadable", {name}), 1u) << name << " logged once\n" << log_text();
  }
  EXPECT_EQ(m.find("subdir"), nullptr);
}

TEST_F(SidecarMonitor, SurvivesSegmentTruncatedUnderIt) {
  Segment ring = make_ring("shrinks", 1 << 16);
  Monitor m(options(), log);
  m.do_work();
  ASSERT_TRUE(m.find("shrinks")->up);
  ASSERT_EQ(::truncate(root.file("shrinks").c_str(), 100), 0);
  m.do_work();  // must not touch the lost pages (SIGBUS)
  m.do_work();
  EXPECT_EQ(count("segment_truncated", {"segment=shrinks", "file_bytes=100"}), 1u) << log_text();
  const SegmentView* v = m.find("shrinks");
  ASSERT_NE(v, nullptr);
  EXPECT_FALSE(v->up);
  EXPECT_NE(v->error.find("Truncated"), std::string::npos) << v->error;
}

TEST_F(SidecarMonitor, SurvivesASegmentThatShrinksBetweenItsChecksAndItsReads) {
  Segment ring = make_ring("shrinking", 1 << 16);
  MonitorOptions o = options();
  bool shrunk = false;
  // The file shrinks after the size check of the cycle and before the data
  // pages are read (describe): those reads fault, and must not kill us. The
  // header stays (it spans several pages, which the slot table is read from).
  o.before_reading = [&](const std::string& name) {
    if (name != "shrinking" || shrunk) return;
    shrunk = true;
    EXPECT_EQ(::truncate(root.file("shrinking").c_str(), static_cast<off_t>(kHeaderSize)), 0);
  };
  Monitor m(o, log);
  m.do_work();
  ASSERT_TRUE(shrunk);
  EXPECT_EQ(
      count("segment_truncated", {"segment=shrinking", "the file shrank while it was being read"}),
      1u)
      << log_text();
  EXPECT_EQ(m.find("shrinking"), nullptr) << "a view built from zeros is not shown";
  m.do_work();  // rediscovered as what it is now: too short to be a segment
  const SegmentView* v = m.find("shrinking");
  ASSERT_NE(v, nullptr);
  EXPECT_FALSE(v->up);
  EXPECT_NE(v->error.find("Truncated"), std::string::npos) << v->error;
}

TEST_F(SidecarMonitor, SurvivesSegmentDeletedOrReplacedUnderIt) {
  Segment gone = make_ring("gone");
  Segment swapped = make_ring("swapped");
  const std::uint64_t old_incarnation = swapped.header().incarnation;
  Monitor m(options(), log);
  m.do_work();
  ASSERT_NE(m.find("gone"), nullptr);
  ASSERT_TRUE(gone.unlink());
  ASSERT_TRUE(swapped.unlink());
  Segment replacement = make_ring("swapped");
  m.do_work();
  EXPECT_EQ(m.find("gone"), nullptr);
  EXPECT_EQ(count("segment_removed", {"segment=gone"}), 1u) << log_text();
  const SegmentView* v = m.find("swapped");
  ASSERT_NE(v, nullptr) << log_text();
  EXPECT_TRUE(v->up);
  EXPECT_EQ(v->incarnation, fmt::format("{:016x}", replacement.header().incarnation));
  EXPECT_NE(v->incarnation, fmt::format("{:016x}", old_incarnation));
}

TEST_F(SidecarMonitor, SurvivesHeaderScribbledAfterDiscovery) {
  Segment ring = make_ring("scribbled");
  Monitor m(options(), log);
  m.do_work();
  ASSERT_TRUE(m.find("scribbled")->up);
  const int fd = ::open(root.file("scribbled").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const std::uint64_t junk = 0xdeadbeefdeadbeefull;
  ASSERT_EQ(::pwrite(fd, &junk, sizeof junk, 0), static_cast<ssize_t>(sizeof junk));
  ::close(fd);
  m.do_work();
  EXPECT_EQ(count("segment_corrupt", {"segment=scribbled", "magic"}), 1u) << log_text();
  ASSERT_NE(m.find("scribbled"), nullptr);
  EXPECT_FALSE(m.find("scribbled")->up);
  EXPECT_NE(m.find("scribbled")->error.find("BadMagic"), std::string::npos);
}

TEST_F(SidecarMonitor, UnknownKindIsObservedButItsDeadAreNotReclaimed) {
  KindSpec alien;
  alien.kind = 4242;
  alien.kind_name = "alien";
  alien.fingerprint = 1;
  alien.data_size = 4096;
  // A non-empty parameter block: Segment::create memcpy()s it, and an empty
  // span's null data() is undefined behaviour there (UBSan flags it).
  const std::uint64_t alien_params = 7;
  alien.params = std::as_bytes(std::span(&alien_params, 1));
  auto seg = Segment::create("alien", alien, CreateOptions{}, nullptr);
  ASSERT_TRUE(seg) << seg.error().what();
  // A child attaches and dies without detaching (its kernel lock goes with it).
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto s = Segment::open_any("alien", OpenOptions{});
    if (!s) ::_exit(1);
    auto a = s->attach(RoleSpec{0, true, "pilot"});
    ::_exit(a ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  Monitor m(options(), log);
  m.do_work();
  m.do_work();
  const SegmentView* v = m.find("alien");
  ASSERT_NE(v, nullptr);
  EXPECT_TRUE(v->up);
  EXPECT_EQ(v->kind, "unknown");
  EXPECT_FALSE(v->kind_known);
  EXPECT_EQ(v->dead, 1u);
  EXPECT_EQ(count("unknown_kind", {"segment=alien", "kind_id=4242"}), 1u) << log_text();
  EXPECT_EQ(count("attacher_dead", {"segment=alien"}), 1u) << log_text();
  EXPECT_EQ(count("reclaim_skipped", {"segment=alien", "unknown kind"}), 1u) << log_text();
  EXPECT_EQ(m.stats().reclaims, 0u);
  EXPECT_EQ(seg->liveness(0), Liveness::Dead);
}

TEST_F(SidecarMonitor, CollectsEphemeralSegmentOnceEveryAttacherIsDead) {
  MonitorOptions o = options();
  o.gc_ephemeral = true;
  Subprocess producer = attacher("temp", "producer", {"--create", "4096", "--ephemeral"});
  Subprocess consumer = attacher("temp", "consumer");
  Monitor m(o, log);
  m.do_work();
  ASSERT_NE(m.find("temp"), nullptr);

  consumer.kill(SIGKILL);
  consumer.wait(30s);
  m.do_work();  // one attacher still alive: reclaimed, never collected
  EXPECT_EQ(m.stats().reclaims, 1u) << log_text();
  EXPECT_TRUE(std::filesystem::exists(root.file("temp")));
  EXPECT_EQ(m.stats().collected, 0u);

  producer.kill(SIGKILL);
  producer.wait(30s);
  m.do_work();
  EXPECT_FALSE(std::filesystem::exists(root.file("temp"))) << log_text();
  EXPECT_EQ(m.stats().collected, 1u);
  EXPECT_EQ(count("segment_collected", {"segment=temp"}), 1u) << log_text();
  EXPECT_EQ(m.find("temp"), nullptr);
}

TEST_F(SidecarMonitor, NeverCollectsUnlessAskedOrWithoutTheEphemeralFlag) {
  Segment kept = make_ring("kept", 4096, /*ephemeral=*/false);
  Segment eph = make_ring("eph", 4096, /*ephemeral=*/true);
  {
    Subprocess p = attacher("kept", "producer");
    Subprocess q = attacher("eph", "producer");
  }  // both killed (destructor: SIGKILL)
  MonitorOptions with_gc = options();
  with_gc.gc_ephemeral = true;
  {
    Monitor off(options(), log);
    off.do_work();
    EXPECT_TRUE(std::filesystem::exists(root.file("eph")))
        << "collected although --gc-ephemeral is off";
  }
  Monitor on(with_gc, log);
  on.do_work();
  EXPECT_TRUE(std::filesystem::exists(root.file("kept"))) << log_text();
  EXPECT_FALSE(std::filesystem::exists(root.file("eph"))) << log_text();
}

TEST_F(SidecarMonitor, ExportsTheKindsGaugesAsMetrics) {
  auto p = RingProducer::create("depth", RingParams{4096});
  ASSERT_TRUE(p) << p.error().what();
  const std::vector<std::byte> rec(40, std::byte{1});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(p->try_push(rec).value_or(false));
  Monitor m(options(), log);
  m.do_work();
  const std::string text = render_metrics(m, 0);
  EXPECT_NE(text.find("# TYPE libshm_spsc_ring_depth_records gauge\n"), std::string::npos) << text;
  EXPECT_NE(text.find("libshm_spsc_ring_depth_records{segment=\"depth\"} 3\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("libshm_spsc_ring_records_pushed_total{segment=\"depth\"} 3\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("libshm_segment_attachers{segment=\"depth\",state=\"alive\"} 1\n"),
            std::string::npos)
      << text;
}

TEST_F(SidecarMonitor, SecondInstanceOnTheSameRootIsRefusedWithTheHolderNamed) {
  auto first = InstanceLock::acquire(root.path());
  ASSERT_TRUE(first) << first.error().what();
  auto second = InstanceLock::acquire(root.path());
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, Errc::RoleTaken);
  EXPECT_NE(second.error().message.find("another shm-sidecar already monitors " + root.path()),
            std::string::npos)
      << second.error().message;
  EXPECT_NE(second.error().message.find(fmt::format("pid {}", ::getpid())), std::string::npos)
      << second.error().message;
  EXPECT_NE(second.error().message.find(".libshm-sidecar.lock"), std::string::npos);
  first = InstanceLock{};  // released: the next one gets it
  EXPECT_TRUE(InstanceLock::acquire(root.path()));
}

}  // namespace
}  // namespace shm::sidecar
