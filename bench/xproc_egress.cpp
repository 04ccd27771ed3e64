// Egress benchmarks (issue 15), in one process pinned to one CPU, cases
// interleaved round by round (harness Comparison), ratios taken inside a round
// and summarised as median (p10–p90) over rounds.
//
//  1. Per message at window 64: `try_enqueue` + `try_claim` + `ack` of a
//     64-byte payload (producer handle and transport in this process; the
//     window is kept full: each message enqueued and claimed acknowledges the
//     one 63 before it), against SpscRing `try_push` + `try_pop` of the same
//     payload with 64 records kept in the ring. Target: egress / ring <= 2x.
//
//     The same in batches of 64: try_enqueue_batch, try_claim_batch, one ack
//     per batch (three lock round trips per 64 messages). Same target.
//
//  2. Reconnect with 10,000 in flight: 10,000 payloads enqueued and claimed
//     (window 10,000), then (a) `reconnect(generation + 1)` called directly,
//     and (b) a replacement transport attaching after the old one detached
//     (attach performs the reconnect), each timed alone. Every record is then
//     checked to be pending again under the new generation.
//
// The egress sits in shared memory and every call takes its robust mutex;
// the ring is the lock-free floor for moving the same bytes.
#include "harness/harness.hpp"
#include "shm/egress/egress.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <time.h>

namespace {

using namespace shm::bench;
using namespace std::chrono_literals;

constexpr std::string_view kUsage =
    R"(xproc_egress: egress per-message cost and reconnect cost, with an SpscRing baseline

usage: xproc_egress [--quick | --smoke] [options]

  --quick            3 rounds, 200000 messages per run
  (default)          7 rounds, 1000000 messages per run
  --smoke            1 round of tiny runs; checks the data, asserts nothing about speed
  --reps N           rounds (each round runs every case once, interleaved)
  --messages N       messages per per-message run
  --inflight N       records in flight for the reconnect runs (default 10000)
  --cpu C            the CPU to pin to (default: the first allowed)
  --csv FILE         also write every per-round value to FILE
  --check-targets    exit 3 when a target ratio is missed
)";

constexpr std::size_t kPayload = 64;
constexpr std::uint32_t kWindow = 64;

struct Options {
  RunOptions run;
  std::uint64_t messages = 1'000'000;
  std::uint32_t inflight = 10'000;
  int cpu = 0;
};

Options parse_options(int argc, char** argv) {
  Args args(argc, argv);
  Options o;
  o.run = parse_run_options(args, 7, 3);
  if (o.run.quick) o.messages = 200'000;
  if (o.run.smoke) {
    o.messages = 5'000;
    o.inflight = 1'000;
  }
  o.messages =
      static_cast<std::uint64_t>(args.double_value("--messages", static_cast<double>(o.messages)));
  o.inflight =
      static_cast<std::uint32_t>(args.int_value("--inflight", static_cast<int>(o.inflight)));
  o.cpu = args.int_value("--cpu", allowed_cpus().front());
  args.finish(kUsage);
  if (o.messages < 2 * kWindow || o.messages > (1ull << 32))
    throw BenchError("--messages must be in [128, 2^32]");
  if (o.inflight < 1 || o.inflight > (1u << 20))
    throw BenchError("--inflight must be in [1, 2^20]");
  return o;
}

// CPU time of the calling thread: on a loaded machine the wall time of a
// pinned loop includes preemption by other processes; this does not.
std::uint64_t thread_cpu_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

std::string fresh_name(std::string_view what) {
  static int counter = 0;
  return fmt::format("xproc-egress-{}-{}", what, counter++);
}

void stamp(std::span<std::byte> p, std::uint64_t i) {
  std::memcpy(p.data(), &i, 8);
  std::memset(p.data() + 8, static_cast<int>(i & 0xff), p.size() - 8);
}

std::uint64_t seq_of(std::span<const std::byte> p) {
  std::uint64_t i = 0;
  std::memcpy(&i, p.data(), 8);
  return i;
}

const TickClock& tick_clock() {
  static const TickClock clock;
  return clock;
}

// ---------------------------------------------------------------- 1. per message

// An egress for the per-message runs (window kWindow, pool 4 * kWindow), its
// transport attached, the name already unlinked, the pages prefaulted.
std::pair<shm::Egress, shm::EgressTransport> window_egress(const std::string& name) {
  shm::EgressParams params;
  params.max_payloads = 4 * kWindow;
  params.slot_bytes = kPayload;
  params.inflight_limit = kWindow;
  auto producer = shm::Egress::create(name, params);
  if (!producer) throw BenchError(producer.error().what());
  auto transport = shm::EgressTransport::open(name);
  if (!transport) throw BenchError(transport.error().what());
  (void)shm::Segment::unlink(name);
  prefault(producer->segment().data(), true);
  return {std::move(*producer), std::move(*transport)};
}

Measurement egress_message_run(const Options& o) {
  auto [producer, transport] = window_egress(fresh_name("window"));
  std::array<std::byte, kPayload> payload{};
  std::vector<std::byte> claimed;
  claimed.reserve(kPayload);
  std::uint64_t first_seq = 0;
  // One message: enqueue, claim it (the window has room), then acknowledge
  // the one kWindow - 1 before it, so kWindow stay in flight.
  auto one = [&](std::uint64_t i) {
    stamp(payload, i);
    auto e = producer.try_enqueue(payload);
    if (!e || e->status != shm::egress::EnqueueStatus::Enqueued)
      throw BenchError("enqueue refused with room in the pool");
    if (i == 0) first_seq = e->sequence;
    auto c = transport.try_claim(claimed);
    if (!c || c->status != shm::egress::ClaimStatus::Claimed)
      throw BenchError("claim refused with room in the window");
    if (c->envelope.sequence != e->sequence || seq_of(c->envelope.payload) != i)
      throw BenchError("claimed the wrong record");
    if (i + 1 >= kWindow) {
      auto a = transport.ack(first_seq + i + 1 - kWindow);
      if (!a || a->status != shm::egress::AckStatus::Advanced || a->removed != 1)
        throw BenchError("cumulative ack did not remove exactly one record");
    }
  };
  std::uint64_t i = 0;
  for (; i < 4 * kWindow; ++i) one(i);  // warm-up: the window is full from here
  const std::uint64_t c0 = thread_cpu_ns();
  const std::uint64_t t0 = TickClock::ticks();
  for (const std::uint64_t end = i + o.messages; i < end; ++i) one(i);
  const double ns = tick_clock().to_ns(TickClock::ticks() - t0);
  const auto cpu = static_cast<double>(thread_cpu_ns() - c0);
  const auto p = producer.projection();
  if (!p || p->inflight != kWindow - 1 || p->pending != 0)
    throw BenchError("the window did not end with 63 in flight");
  return Measurement()
      .set("ns_msg", ns / static_cast<double>(o.messages))
      .set("cpu_ns_msg", cpu / static_cast<double>(o.messages));
}

// The same traffic in batches of kWindow: one try_enqueue_batch of 64
// payloads, one try_claim_batch of up to 64 (the window), one cumulative ack
// of the batch: three lock round trips per 64 messages instead of per one.
Measurement egress_batch_run(const Options& o) {
  auto [producer, transport] = window_egress(fresh_name("batch"));
  std::vector<std::array<std::byte, kPayload>> payloads(kWindow);
  std::vector<std::span<const std::byte>> spans(payloads.begin(), payloads.end());
  std::vector<shm::egress::Envelope> claimed;
  std::vector<std::byte> buffer;
  claimed.reserve(kWindow);
  buffer.reserve(kWindow * kPayload);
  std::uint64_t next_seq = 0;
  auto batch = [&](std::uint64_t i) {
    for (std::uint32_t k = 0; k < kWindow; ++k) stamp(payloads[k], i + k);
    auto e = producer.try_enqueue_batch(spans);
    if (!e || e->enqueued != kWindow || e->first_sequence != next_seq)
      throw BenchError("batch enqueue refused with room in the pool");
    auto c = transport.try_claim_batch(kWindow, claimed, buffer);
    if (!c || c->claimed != kWindow) throw BenchError("batch claim short with room in the window");
    for (std::uint32_t k = 0; k < kWindow; ++k)
      if (claimed[k].sequence != next_seq + k || seq_of(claimed[k].payload) != i + k)
        throw BenchError("claimed the wrong record");
    auto a = transport.ack(next_seq + kWindow - 1);
    if (!a || a->status != shm::egress::AckStatus::Advanced || a->removed != kWindow)
      throw BenchError("cumulative ack did not remove the batch");
    next_seq += kWindow;
  };
  std::uint64_t i = 0;
  for (; i < 4 * kWindow; i += kWindow) batch(i);
  const std::uint64_t messages = o.messages / kWindow * kWindow;
  const std::uint64_t c0 = thread_cpu_ns();
  const std::uint64_t t0 = TickClock::ticks();
  for (const std::uint64_t end = i + messages; i < end; i += kWindow) batch(i);
  const double ns = tick_clock().to_ns(TickClock::ticks() - t0);
  const auto cpu = static_cast<double>(thread_cpu_ns() - c0);
  return Measurement()
      .set("ns_msg", ns / static_cast<double>(messages))
      .set("cpu_ns_msg", cpu / static_cast<double>(messages));
}

Measurement ring_message_run(const Options& o) {
  const std::string name = fresh_name("ring");
  auto p = shm::RingProducer::create(name, {.capacity_bytes = 1u << 16});
  if (!p) throw BenchError(p.error().what());
  auto c = shm::RingConsumer::open(name, {.capacity_bytes = 1u << 16});
  if (!c) throw BenchError(c.error().what());
  (void)shm::Segment::unlink(name);
  prefault(p->segment().data(), true);
  std::array<std::byte, kPayload> payload{}, out{};
  std::uint64_t expect = 0;
  auto one = [&](std::uint64_t i) {
    stamp(payload, i);
    if (!p->try_push(payload).value_or(false)) throw BenchError("try_push refused");
    if (i + 1 >= kWindow) {
      auto r = c->try_pop(out);
      if (!r || !*r || seq_of(out) != expect++) throw BenchError("try_pop lost a record");
    }
  };
  std::uint64_t i = 0;
  for (; i < 4 * kWindow; ++i) one(i);
  const std::uint64_t c0 = thread_cpu_ns();
  const std::uint64_t t0 = TickClock::ticks();
  for (const std::uint64_t end = i + o.messages; i < end; ++i) one(i);
  const double ns = tick_clock().to_ns(TickClock::ticks() - t0);
  const auto cpu = static_cast<double>(thread_cpu_ns() - c0);
  return Measurement()
      .set("ns_msg", ns / static_cast<double>(o.messages))
      .set("cpu_ns_msg", cpu / static_cast<double>(o.messages));
}

Comparison message_comparison(const Options& o) {
  Comparison c(fmt::format("Per message, window {}, {} B payload, one process on CPU {} "
                           "({} messages per run)",
                           kWindow, kPayload, o.cpu, o.messages),
               {MetricSpec{"ns_msg", "ns/message (wall)", 1.0, 1},
                MetricSpec{"cpu_ns_msg", "ns/message (thread CPU time)", 1.0, 1}});
  c.add_case("egress enqueue + claim + ack", [&o] { return egress_message_run(o); });
  c.add_case("egress batches of 64", [&o] { return egress_batch_run(o); });
  c.add_case("ring try_push + try_pop", [&o] { return ring_message_run(o); });
  c.add_ratio({"egress / ring (ns per message)", "egress enqueue + claim + ack", "ns_msg",
               "ring try_push + try_pop", "ns_msg", Target{Goal::AtMost, 2.0}});
  c.add_ratio({"same, on thread CPU time", "egress enqueue + claim + ack", "cpu_ns_msg",
               "ring try_push + try_pop", "cpu_ns_msg", std::nullopt});
  c.add_ratio({"egress batches of 64 / ring (ns per message)", "egress batches of 64", "ns_msg",
               "ring try_push + try_pop", "ns_msg", Target{Goal::AtMost, 2.0}});
  c.add_ratio({"same, on thread CPU time", "egress batches of 64", "cpu_ns_msg",
               "ring try_push + try_pop", "cpu_ns_msg", std::nullopt});
  return c;
}

// ---------------------------------------------------------------- 2. reconnect

// Enqueues and claims `inflight` payloads under a fresh transport; returns
// the producer handle (the transport is left attached in `transport`).
shm::Egress fill_window(const Options& o, const std::string& name,
                        std::optional<shm::EgressTransport>& transport) {
  shm::EgressParams params;
  params.max_payloads = o.inflight;
  params.slot_bytes = kPayload;
  params.inflight_limit = o.inflight;
  auto producer = shm::Egress::create(name, params);
  if (!producer) throw BenchError(producer.error().what());
  prefault(producer->segment().data(), true);
  auto t = shm::EgressTransport::open(name);
  if (!t) throw BenchError(t.error().what());
  std::array<std::byte, kPayload> payload{};
  std::vector<std::byte> claimed;
  for (std::uint64_t i = 0; i < o.inflight; ++i) {
    stamp(payload, i);
    auto e = producer->try_enqueue(payload);
    if (!e || e->status != shm::egress::EnqueueStatus::Enqueued) throw BenchError("enqueue");
    auto c = t->try_claim(claimed);
    if (!c || c->status != shm::egress::ClaimStatus::Claimed) throw BenchError("claim");
  }
  transport.emplace(std::move(*t));
  return std::move(*producer);
}

void check_replayed(const shm::Egress& producer, const Options& o, std::uint64_t generation) {
  const auto p = producer.projection(true);
  if (!p || p->pending != o.inflight || p->inflight != 0 || p->generation != generation)
    throw BenchError("after the reconnect every record should be pending");
  for (const auto& r : p->records)
    if (r.generation != generation) throw BenchError("a pending envelope kept the old generation");
}

Measurement reconnect_run(const Options& o) {
  const std::string name = fresh_name("reconnect");
  std::optional<shm::EgressTransport> transport;
  shm::Egress producer = fill_window(o, name, transport);
  const std::uint64_t next = transport->generation() + 1;
  const std::uint64_t t0 = TickClock::ticks();
  auto r = producer.reconnect(next);
  const double ns = tick_clock().to_ns(TickClock::ticks() - t0);
  if (!r || r->status != shm::egress::ReconnectStatus::Advanced || r->replayed != o.inflight)
    throw BenchError("reconnect did not replay every record in flight");
  check_replayed(producer, o, next);
  (void)shm::Segment::unlink(name);
  return Measurement().set("us", ns / 1e3).set("ns_record", ns / static_cast<double>(o.inflight));
}

Measurement attach_run(const Options& o) {
  const std::string name = fresh_name("attach");
  std::optional<shm::EgressTransport> transport;
  shm::Egress producer = fill_window(o, name, transport);
  const std::uint64_t old = transport->generation();
  transport.reset();  // detaches: the next attach reconnects
  const std::uint64_t t0 = TickClock::ticks();
  auto t = shm::EgressTransport::open(name);
  const double ns = tick_clock().to_ns(TickClock::ticks() - t0);
  if (!t || t->generation() != old + 1 || t->replayed() != o.inflight)
    throw BenchError("the replacement transport did not reconnect over every record");
  check_replayed(producer, o, old + 1);
  (void)shm::Segment::unlink(name);
  return Measurement().set("us", ns / 1e3).set("ns_record", ns / static_cast<double>(o.inflight));
}

Comparison reconnect_comparison(const Options& o) {
  Comparison c(fmt::format("Reconnect with {} records in flight ({} B payloads, CPU {})",
                           o.inflight, kPayload, o.cpu),
               {MetricSpec{"us", "µs", 1.0, 1}, MetricSpec{"ns_record", "ns per record", 1.0, 1}});
  c.add_case("reconnect(generation + 1)", [&o] { return reconnect_run(o); });
  c.add_case("replacement transport attach", [&o] { return attach_run(o); });
  c.add_ratio({"attach / reconnect", "replacement transport attach", "us",
               "reconnect(generation + 1)", "us", std::nullopt});
  return c;
}

int run(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  ScratchRoot root;
  return run_report(
      {.program = "xproc_egress",
       .options = o.run,
       .setup = fmt::format("- one process pinned to CPU {}; rounds {}", o.cpu, o.run.reps),
       .pin_cpu = o.cpu,
       .targets_table = true,
       .smoke_ok = "every case checked its data",
       .prepare = [] { (void)tick_clock(); }},
      argc, argv,
      {[&o] { return message_comparison(o); }, [&o] { return reconnect_comparison(o); }});
}

}  // namespace

int main(int argc, char** argv) {
  return guarded_main("xproc_egress", argc, argv, run);
}
