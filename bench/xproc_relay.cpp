// RelayCell benchmarks (issue 13), every case against an SpscRing baseline in
// the same run, cases interleaved round by round (harness Comparison), ratios
// taken inside a round and summarised as median (p10–p90) over rounds.
//
//  1. Uncontended write, one process pinned to one CPU: `write` of an 8-byte
//     `sum` value and of a 64-byte `lww` value (16-byte timestamp + writer id,
//     48 bytes of payload) into a keyed relay whose 1024 keys are all open
//     (every write merges and changes the value: the steady state of a
//     conflating relay), against `RingProducer::try_push` of the same bytes.
//     Both sides time batches of writes and pushes only; the ring is emptied
//     between batches, untimed. Target: relay / ring <= 1.5x per op.
//     Peers (issue 38): a Boost.Interprocess unordered_map in managed shared
//     memory behind interprocess_mutex, and behind a robust process-shared
//     pthread mutex, doing the same keyed sum and lww writes over the same
//     keys (target: relay <= 0.5x the interprocess_mutex map).
//
//  2. Overload, two processes: a writer process (pinned to the peer CPU)
//     publishes lww prices for 10,000 keys at --rate ops/s; the reader (this
//     process) drains 100x slower (--rate / 100 entries/s). The same stream
//     goes once through a relay (Keys high water 10,000, Conflate) and once
//     through a ring sized to hold all of it. Measured: the bytes the reader
//     has not consumed yet (relay: value bytes pending; ring: payload bytes
//     pending), the peak pending keys, and the staleness of what the reader
//     sees (drain time minus the write time of the newest value in each drain).
//     Target: relay memory bounded by the keys (peak <= 10,000 x 64 B).
#include "harness/harness.hpp"
#include "shm/relay/relay.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <pthread.h>
#include <time.h>

#include <boost/interprocess/allocators/allocator.hpp>
#include <boost/interprocess/managed_shared_memory.hpp>
#include <boost/interprocess/sync/interprocess_mutex.hpp>
#include <boost/interprocess/sync/scoped_lock.hpp>
#include <boost/unordered_map.hpp>

namespace {

using namespace shm::bench;
using namespace std::chrono_literals;

constexpr std::string_view kUsage =
    R"(xproc_relay: RelayCell write cost and 100x overload against SpscRing, same run

usage: xproc_relay [--quick | --smoke] [options]

  --quick            3 rounds, 400000 writes per write run, 0.5 s per overload run
  (default)          7 rounds, 2000000 writes per write run, 1 s per overload run
  --smoke            1 round of tiny runs; checks the data, asserts nothing about speed
  --reps N           rounds (each round runs every case once, interleaved)
  --ops N            writes (pushes) per write run
  --seconds S        duration of one overload run
  --rate N           writer ops/s in the overload runs (the reader drains N/100 per s)
  --keys N           keys in the overload runs (default 10000)
  --cpus A,B         reader/writer CPUs (default: the first two allowed)
  --csv FILE         also write every per-round value to FILE
  --check-targets    exit 3 when a target ratio is missed
)";

struct Options {
  RunOptions run;
  std::uint64_t ops = 2'000'000;
  double seconds = 1.0;
  std::uint64_t rate = 200'000;
  std::uint32_t keys = 10'000;
  CpuPair cpus;
};

Options parse_options(int argc, char** argv) {
  Args args(argc, argv);
  Options o;
  o.run = parse_run_options(args, 7, 3);
  if (o.run.quick) {
    o.ops = 400'000;
    o.seconds = 0.5;
  }
  if (o.run.smoke) {
    o.ops = 20'000;
    o.seconds = 0.2;
    o.rate = 50'000;
    o.keys = 1000;
  }
  o.ops = static_cast<std::uint64_t>(args.double_value("--ops", static_cast<double>(o.ops)));
  o.seconds = args.double_value("--seconds", o.seconds);
  o.rate = static_cast<std::uint64_t>(args.double_value("--rate", static_cast<double>(o.rate)));
  o.keys = static_cast<std::uint32_t>(args.int_value("--keys", static_cast<int>(o.keys)));
  o.cpus = choose_cpus(args.value("--cpus", ""));
  args.finish(kUsage);
  if (o.ops < 1024 || o.ops > (1ull << 30)) throw BenchError("--ops must be in [1024, 2^30]");
  if (o.seconds <= 0 || o.seconds > 30) throw BenchError("--seconds must be in (0, 30]");
  if (o.rate < 100 || o.rate > 20'000'000) throw BenchError("--rate must be in [100, 2e7]");
  if (o.keys < 16 || o.keys > (1u << 20)) throw BenchError("--keys must be in [16, 2^20]");
  if (static_cast<double>(o.rate) * o.seconds * 1.5 * 80 > 2e9)
    throw BenchError("--rate x --seconds: the baseline ring would exceed 2 GB");
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
  return fmt::format("xproc-relay-{}-{}", what, counter++);
}

// ---------------------------------------------------------------- 1. uncontended write

constexpr std::uint32_t kWriteKeys = 1024;
constexpr std::size_t kBatch = 4096;  // ops timed per batch (the ring holds a batch)
constexpr std::size_t kLwwPayload = 48;

// The value of op `i`: sum adds 1 (never the identity), lww carries a rising
// timestamp (every write wins and changes the value).
void make_value(std::span<std::byte> out, std::uint64_t i, bool lww) {
  if (!lww) {
    const std::uint64_t one = 1;
    std::memcpy(out.data(), &one, 8);
    return;
  }
  const std::uint64_t ts = i + 1, writer = 7;
  std::memcpy(out.data(), &ts, 8);
  std::memcpy(out.data() + 8, &writer, 8);
  std::memset(out.data() + 16, static_cast<int>(i & 0xff), out.size() - 16);
}

Measurement relay_write_run(const Options& o, bool lww) {
  const std::string name = fresh_name("write");
  shm::RelayConfig cfg;
  cfg.policy = lww ? shm::policy::kLww : shm::policy::kSum;
  cfg.value_bytes = lww ? 16 + kLwwPayload : 8;
  cfg.max_entries = kWriteKeys * 2;
  cfg.backpressure = {shm::Dimension::Keys, kWriteKeys * 2, kWriteKeys, shm::Overflow::Block};
  auto w = shm::RelayWriter::create(name, cfg);
  if (!w) throw BenchError(w.error().what());
  (void)shm::Segment::unlink(name);
  prefault(w->segment().data(), true);
  std::vector<std::byte> value(cfg.value_bytes);
  std::uint64_t i = 0;
  // Warm-up: opens every key (Appended), then merges.
  for (; i < 4 * kWriteKeys; ++i) {
    make_value(value, i, lww);
    auto r = w->write(i % kWriteKeys, value, 0ns);
    if (!r) throw BenchError(r.error().what());
  }
  static const TickClock clock;  // calibrated once
  std::uint64_t ticks = 0, cpu = 0, merged = 0;
  const std::uint64_t end = i + o.ops;
  while (i < end) {
    const std::uint64_t batch_end = std::min<std::uint64_t>(end, i + kBatch);
    const std::uint64_t c0 = thread_cpu_ns();
    const std::uint64_t t0 = TickClock::ticks();
    for (; i < batch_end; ++i) {
      make_value(value, i, lww);
      auto r = w->write(i % kWriteKeys, value, 0ns);
      if (!r) throw BenchError(r.error().what());
      merged += r->status == shm::WriteStatus::Merged ? 1 : 0;
    }
    ticks += TickClock::ticks() - t0;
    cpu += thread_cpu_ns() - c0;
  }
  if (merged != o.ops)
    throw BenchError(fmt::format("{} of {} writes merged (every one should)", merged, o.ops));
  const shm::RelaySnapshot s = w->snapshot();
  if (s.pending_keys != kWriteKeys) throw BenchError("the relay lost a key");
  if (!lww && s.writes != end) throw BenchError("the relay's write counter disagrees");
  return Measurement()
      .set("ns_op", clock.to_ns(ticks) / static_cast<double>(o.ops))
      .set("cpu_ns_op", static_cast<double>(cpu) / static_cast<double>(o.ops));
}

Measurement ring_push_run(const Options& o, bool lww) {
  const std::string name = fresh_name("ring");
  const std::size_t size = lww ? 16 + kLwwPayload : 8;
  auto p = shm::RingProducer::create(name, {.capacity_bytes = 1u << 20});
  if (!p) throw BenchError(p.error().what());
  auto c = shm::RingConsumer::open(name, {.capacity_bytes = 1u << 20});
  if (!c) throw BenchError(c.error().what());
  (void)shm::Segment::unlink(name);
  prefault(p->segment().data(), true);
  std::vector<std::byte> value(size), out(size);
  static const TickClock clock;
  std::uint64_t ticks = 0, cpu = 0, i = 0, popped = 0;
  auto empty_ring = [&] {
    for (;;) {
      auto r = c->try_pop(out);
      if (!r) throw BenchError(r.error().what());
      if (!*r) break;
      ++popped;
    }
  };
  for (; i < 4 * kWriteKeys; ++i) {  // the same warm-up as the relay
    make_value(value, i, lww);
    if (!p->try_push(value).value_or(false)) throw BenchError("warm-up push refused");
    if (i % kBatch == kBatch - 1) empty_ring();
  }
  empty_ring();
  const std::uint64_t end = i + o.ops;
  while (i < end) {
    const std::uint64_t batch_end = std::min<std::uint64_t>(end, i + kBatch);
    const std::uint64_t c0 = thread_cpu_ns();
    const std::uint64_t t0 = TickClock::ticks();
    for (; i < batch_end; ++i) {
      make_value(value, i, lww);
      auto r = p->try_push(value);
      if (!r || !*r) throw BenchError("try_push refused inside a batch");
    }
    ticks += TickClock::ticks() - t0;
    cpu += thread_cpu_ns() - c0;
    empty_ring();
  }
  if (popped != end) throw BenchError("the ring lost a record");
  return Measurement()
      .set("ns_op", clock.to_ns(ticks) / static_cast<double>(o.ops))
      .set("cpu_ns_op", static_cast<double>(cpu) / static_cast<double>(o.ops));
}

// The peer a user would write instead (issue 38): a Boost.Interprocess
// boost::unordered_map in a managed shared-memory segment, behind a
// boost::interprocess::interprocess_mutex, or behind a pthread mutex made
// robust and process-shared (what survives a holder's kill -9, as the
// relay's does), doing the same keyed writes over the same 1024 keys: sum
// adds, lww keeps the larger (timestamp, writer) and copies the 64 bytes.
namespace bip = boost::interprocess;
using Price = std::array<std::byte, 16 + kLwwPayload>;
template <class V>
using ShmMap = boost::unordered_map<
    std::uint64_t, V, boost::hash<std::uint64_t>, std::equal_to<std::uint64_t>,
    bip::allocator<std::pair<const std::uint64_t, V>, bip::managed_shared_memory::segment_manager>>;

struct RobustMutex {
  pthread_mutex_t m;
  RobustMutex() {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&m, &a);
    pthread_mutexattr_destroy(&a);
  }
  void lock() {
    if (pthread_mutex_lock(&m) == EOWNERDEAD) pthread_mutex_consistent(&m);
  }
  void unlock() { pthread_mutex_unlock(&m); }
};

template <class Mutex, class V>
Measurement boost_map_run(const Options& o, bool lww) {
  const std::string name = fresh_name("boost");
  bip::shared_memory_object::remove(name.c_str());
  bip::managed_shared_memory seg(bip::create_only, name.c_str(), 8u << 20);
  bip::shared_memory_object::remove(name.c_str());  // unlinked; the mapping stays
  auto* mutex = seg.construct<Mutex>("mutex")();
  auto* map =
      seg.construct<ShmMap<V>>("map")(kWriteKeys * 2, boost::hash<std::uint64_t>(),
                                      std::equal_to<std::uint64_t>(), seg.get_segment_manager());
  std::vector<std::byte> value(lww ? 16 + kLwwPayload : 8);
  std::uint64_t changed = 0;
  auto write = [&](std::uint64_t key) {
    std::lock_guard<Mutex> hold(*mutex);
    if constexpr (std::is_same_v<V, std::uint64_t>) {
      std::uint64_t add = 0;
      std::memcpy(&add, value.data(), 8);
      (*map)[key] += add;
      ++changed;
    } else {
      auto [it, fresh] = map->try_emplace(key);
      V& cur = it->second;
      std::uint64_t ts = 0, cur_ts = 0, wr = 0, cur_wr = 0;
      std::memcpy(&ts, value.data(), 8);
      std::memcpy(&wr, value.data() + 8, 8);
      std::memcpy(&cur_ts, cur.data(), 8);
      std::memcpy(&cur_wr, cur.data() + 8, 8);
      if (fresh || ts > cur_ts || (ts == cur_ts && wr > cur_wr)) {
        std::memcpy(cur.data(), value.data(), cur.size());
        ++changed;
      }
    }
  };
  std::uint64_t i = 0;
  for (; i < 4 * kWriteKeys; ++i) {  // the same warm-up as the relay
    make_value(value, i, lww);
    write(i % kWriteKeys);
  }
  static const TickClock clock;
  std::uint64_t ticks = 0, cpu = 0;
  changed = 0;
  const std::uint64_t end = i + o.ops;
  while (i < end) {
    const std::uint64_t batch_end = std::min<std::uint64_t>(end, i + kBatch);
    const std::uint64_t c0 = thread_cpu_ns();
    const std::uint64_t t0 = TickClock::ticks();
    for (; i < batch_end; ++i) {
      make_value(value, i, lww);
      write(i % kWriteKeys);
    }
    ticks += TickClock::ticks() - t0;
    cpu += thread_cpu_ns() - c0;
  }
  if (changed != o.ops || map->size() != kWriteKeys)
    throw BenchError("the Boost map peer did not change every key as the relay does");
  return Measurement()
      .set("ns_op", clock.to_ns(ticks) / static_cast<double>(o.ops))
      .set("cpu_ns_op", static_cast<double>(cpu) / static_cast<double>(o.ops));
}

Comparison write_comparison(const Options& o) {
  Comparison c(fmt::format("Uncontended write, one process on CPU {} ({} ops per run, "
                           "{} keys open, timed in batches of {})",
                           o.cpus.self, o.ops, kWriteKeys, kBatch),
               {MetricSpec{"ns_op", "ns/op (wall)", 1.0, 1},
                MetricSpec{"cpu_ns_op", "ns/op (thread CPU time)", 1.0, 1}});
  c.add_case("relay sum write 8 B", [&o] { return relay_write_run(o, false); });
  c.add_case("ring try_push 8 B", [&o] { return ring_push_run(o, false); });
  c.add_case("relay lww write 64 B", [&o] { return relay_write_run(o, true); });
  c.add_case("ring try_push 64 B", [&o] { return ring_push_run(o, true); });
  c.add_case("boost map sum 8 B",
             [&o] { return boost_map_run<bip::interprocess_mutex, std::uint64_t>(o, false); });
  c.add_case("boost map lww 64 B",
             [&o] { return boost_map_run<bip::interprocess_mutex, Price>(o, true); });
  c.add_case("boost map robust sum 8 B",
             [&o] { return boost_map_run<RobustMutex, std::uint64_t>(o, false); });
  c.add_case("boost map robust lww 64 B",
             [&o] { return boost_map_run<RobustMutex, Price>(o, true); });
  c.add_ratio({"relay sum write / ring try_push, 8 B (ns/op)", "relay sum write 8 B", "ns_op",
               "ring try_push 8 B", "ns_op", Target{Goal::AtMost, 1.5}});
  c.add_ratio({"relay lww write / ring try_push, 64 B (ns/op)", "relay lww write 64 B", "ns_op",
               "ring try_push 64 B", "ns_op", Target{Goal::AtMost, 1.5}});
  c.add_ratio({"same, 8 B, on thread CPU time", "relay sum write 8 B", "cpu_ns_op",
               "ring try_push 8 B", "cpu_ns_op", std::nullopt});
  c.add_ratio({"same, 64 B, on thread CPU time", "relay lww write 64 B", "cpu_ns_op",
               "ring try_push 64 B", "cpu_ns_op", std::nullopt});
  // The peer a user would write instead (issue 38's target: relay <= 0.5x it).
  c.add_ratio({"relay sum write / boost map sum, 8 B (ns/op)", "relay sum write 8 B", "ns_op",
               "boost map sum 8 B", "ns_op", Target{Goal::AtMost, 0.5}});
  c.add_ratio({"relay lww write / boost map lww, 64 B (ns/op)", "relay lww write 64 B", "ns_op",
               "boost map lww 64 B", "ns_op", Target{Goal::AtMost, 0.5}});
  c.add_ratio({"boost map sum / ring try_push, 8 B (ns/op)", "boost map sum 8 B", "ns_op",
               "ring try_push 8 B", "ns_op", std::nullopt});
  c.add_ratio({"boost map lww / ring try_push, 64 B (ns/op)", "boost map lww 64 B", "ns_op",
               "ring try_push 64 B", "ns_op", std::nullopt});
  c.add_ratio({"boost map robust sum / ring try_push, 8 B (ns/op)", "boost map robust sum 8 B",
               "ns_op", "ring try_push 8 B", "ns_op", std::nullopt});
  c.add_ratio({"boost map robust lww / ring try_push, 64 B (ns/op)", "boost map robust lww 64 B",
               "ns_op", "ring try_push 64 B", "ns_op", std::nullopt});
  c.add_ratio({"relay sum write / boost map robust sum, 8 B (ns/op)", "relay sum write 8 B",
               "ns_op", "boost map robust sum 8 B", "ns_op", std::nullopt});
  c.add_ratio({"relay lww write / boost map robust lww, 64 B (ns/op)", "relay lww write 64 B",
               "ns_op", "boost map robust lww 64 B", "ns_op", std::nullopt});
  return c;
}

// ---------------------------------------------------------------- 2. overload

constexpr std::size_t kPrice = 16 + kLwwPayload;  // lww value: timestamp, writer, payload

struct Control {
  StartGate gate;
  std::atomic<std::uint64_t> start_ns{0};
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> written{0};
};

// The writer: paced at `rate` ops/s from start_ns, key = op mod keys, the
// value's timestamp the write time (now_ns, so the reader can age it).
template <class Write>
int writer_body(const Options& o, Control& ctl, Write&& write) {
  if (!ctl.gate.arrive_and_wait(2, 30s)) throw BenchError("start gate timed out");
  std::array<std::byte, kPrice> v{};
  const std::uint64_t writer = 1;
  std::memcpy(v.data() + 8, &writer, 8);
  const std::uint64_t t0 = ctl.start_ns.load();
  while (now_ns() < t0) spin_pause();
  std::uint64_t n = 0;
  Deadline limit(std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(o.seconds + 30)));
  while (!ctl.stop.load(std::memory_order_relaxed)) {
    const std::uint64_t now = now_ns();
    const auto due = static_cast<std::uint64_t>(static_cast<double>(now - t0) *
                                                static_cast<double>(o.rate) / 1e9);
    if (n >= due) {
      spin_pause();
      if (limit.expired_every()) throw BenchError("the reader never stopped the writer");
      continue;
    }
    for (; n < due; ++n) {
      const std::uint64_t ts = now_ns();
      std::memcpy(v.data(), &ts, 8);
      std::memset(v.data() + 16, static_cast<int>(n & 0xff), kLwwPayload);
      write(n % o.keys, std::span<const std::byte>(v));
    }
    ctl.written.store(n, std::memory_order_relaxed);
  }
  ctl.written.store(n, std::memory_order_relaxed);
  return 0;
}

struct ReaderStats {
  std::vector<double> stale_ms;
  std::uint64_t drained = 0;
  std::uint64_t peak_bytes = 0;
  std::uint64_t peak_keys = 0;
};

// The most one take may ask for: a quarter of the keys.
std::uint64_t max_credit(const Options& o) {
  return std::max<std::uint64_t>(1, o.keys / 4);
}

// The reader's pace: drains up to rate/100 x elapsed entries, in ticks of 1 ms.
template <class Drain, class Sample>
ReaderStats reader_loop(const Options& o, Control& ctl, Drain&& drain, Sample&& sample) {
  if (!ctl.gate.arrive_and_wait(2, 30s)) throw BenchError("start gate timed out");
  ReaderStats st;
  const std::uint64_t t0 = ctl.start_ns.load();
  while (now_ns() < t0) spin_pause();
  const auto run_ns = static_cast<std::uint64_t>(o.seconds * 1e9);
  const double per_ns = static_cast<double>(o.rate) / 100.0 / 1e9;
  for (;;) {
    const std::uint64_t now = now_ns();
    if (now - t0 >= run_ns) break;
    const auto due = static_cast<std::uint64_t>(static_cast<double>(now - t0) * per_ns);
    if (due > st.drained) {
      std::uint64_t newest = 0;
      // At most a quarter of the keys per take (a reader delayed by a busy
      // machine catches up over several ticks): the relay's capacity leaves
      // that much room above the key count (relay_overload_run).
      st.drained += drain(std::min(due - st.drained, max_credit(o)), newest);
      const std::uint64_t after = now_ns();
      if (newest != 0 && after > newest)
        st.stale_ms.push_back(static_cast<double>(after - newest) / 1e6);
    }
    sample(st);
    std::this_thread::sleep_for(1ms);  // the reader's pacing, not a synchronisation
  }
  ctl.stop.store(true);
  return st;
}

Measurement overload_measurement(const Options& o, const ReaderStats& st, std::uint64_t written,
                                 std::uint64_t segment_bytes) {
  std::vector<double> stale = st.stale_ms;
  if (stale.empty()) throw BenchError("the reader drained nothing");
  const Summary s = summarize(stale);
  return Measurement()
      .set("peak_kib", static_cast<double>(st.peak_bytes) / 1024.0)
      .set("bound_kib", static_cast<double>(o.keys) * kPrice / 1024.0)
      .set("peak_keys", static_cast<double>(st.peak_keys))
      .set("segment_mib", static_cast<double>(segment_bytes) / (1024.0 * 1024.0))
      .set("stale_p50_ms", s.p50)
      .set("stale_max_ms", s.max)
      .set("overload", static_cast<double>(written) / static_cast<double>(st.drained));
}

Measurement relay_overload_run(const Options& o, SharedBlock<Control>& control) {
  control.reset();
  Control& ctl = *control;
  const std::string name = fresh_name("ticker");
  shm::RelayConfig cfg;
  cfg.policy = shm::policy::kLww;
  cfg.value_bytes = kPrice;
  // Every key pending, and a take's worth of them in the reader's hands: a
  // write to a key whose entry is taken opens a second entry for it. With
  // capacity = keys a write during a take could find no free entry (seen
  // once under a CI build's load: refused as Full).
  cfg.max_entries = static_cast<std::uint32_t>(o.keys + max_credit(o));
  cfg.backpressure = {shm::Dimension::Keys, o.keys, o.keys / 2, shm::Overflow::Conflate};
  auto r = shm::RelayReader::create(name, cfg);
  if (!r) throw BenchError(r.error().what());
  prefault(r->segment().data(), true);
  const Watchdog watchdog(std::chrono::seconds(static_cast<int>(o.seconds) + 60));
  Peer writer = Peer::fork_pinned(o.cpus.peer, [&] {
    auto w = shm::RelayWriter::open(name);
    if (!w) throw BenchError(w.error().what());
    return writer_body(o, ctl, [&](std::uint64_t key, std::span<const std::byte> v) {
      auto res = w->write(key, v, 0ns);
      if (!res) throw BenchError(res.error().what());
      if (res->status == shm::WriteStatus::Full || res->status == shm::WriteStatus::Dropped)
        throw BenchError("a conflating relay with room for every key refused a write");
    });
  });
  ctl.start_ns.store(now_ns() + 20'000'000);  // both sides start 20 ms from now
  std::vector<std::uint64_t> latest(o.keys, 0);
  const ReaderStats st = reader_loop(
      o, ctl,
      [&](std::uint64_t credit, std::uint64_t& newest) -> std::uint64_t {
        auto n = r->drain(credit, [&](const shm::RelayEntry& e) {
          std::uint64_t ts = 0;
          std::memcpy(&ts, e.value.data(), 8);
          if (e.key >= o.keys || ts < latest[e.key]) throw BenchError("a price went back");
          latest[e.key] = ts;
          newest = std::max(newest, ts);
        });
        if (!n) throw BenchError(n.error().what());
        return *n;
      },
      [&](ReaderStats& s) {
        const shm::RelaySnapshot snap = r->snapshot();
        s.peak_bytes = std::max(s.peak_bytes, snap.bytes);
        s.peak_keys = std::max(s.peak_keys, snap.pending_keys);
      });
  if (const int rc = writer.wait(30s); rc != 0)
    throw BenchError(fmt::format("writer failed with status {}", rc));
  (void)shm::Segment::unlink(name);
  return overload_measurement(o, st, ctl.written.load(), r->segment().data().size());
}

Measurement ring_overload_run(const Options& o, SharedBlock<Control>& control) {
  control.reset();
  Control& ctl = *control;
  const std::string name = fresh_name("stream");
  // Room for the whole stream (records are 64 B + a header), with margin.
  const auto need = static_cast<std::uint64_t>(static_cast<double>(o.rate) * o.seconds * 1.5 * 80);
  const std::uint64_t capacity = std::bit_ceil(std::max<std::uint64_t>(need, 1u << 16));
  auto c = shm::RingConsumer::create(name, {.capacity_bytes = capacity});
  if (!c) throw BenchError(c.error().what());
  prefault(c->segment().data(), true);
  const Watchdog watchdog(std::chrono::seconds(static_cast<int>(o.seconds) + 60));
  Peer writer = Peer::fork_pinned(o.cpus.peer, [&] {
    auto p = shm::RingProducer::open(name, {.capacity_bytes = capacity});
    if (!p) throw BenchError(p.error().what());
    return writer_body(o, ctl, [&](std::uint64_t, std::span<const std::byte> v) {
      auto res = p->try_push(v);
      if (!res) throw BenchError(res.error().what());
      if (!*res) throw BenchError("the baseline ring filled up");
    });
  });
  ctl.start_ns.store(now_ns() + 20'000'000);
  std::array<std::byte, kPrice> out{};
  const ReaderStats st = reader_loop(
      o, ctl,
      [&](std::uint64_t credit, std::uint64_t& newest) -> std::uint64_t {
        std::uint64_t n = 0;
        for (; n < credit; ++n) {
          auto got = c->try_pop(out);
          if (!got) throw BenchError(got.error().what());
          if (!*got) break;
          std::memcpy(&newest, out.data(), 8);  // FIFO: the last popped is the newest
        }
        return n;
      },
      [&](ReaderStats& s) {
        // The writer publishes its count after each burst: it may trail what
        // the reader already popped.
        const std::uint64_t written = ctl.written.load(std::memory_order_relaxed);
        const std::uint64_t pending = written > s.drained ? written - s.drained : 0;
        s.peak_bytes = std::max(s.peak_bytes, pending * kPrice);
        s.peak_keys = std::max(s.peak_keys, std::min<std::uint64_t>(pending, o.keys));
      });
  if (const int rc = writer.wait(30s); rc != 0)
    throw BenchError(fmt::format("writer failed with status {}", rc));
  (void)shm::Segment::unlink(name);
  return overload_measurement(o, st, ctl.written.load(), c->segment().data().size());
}

Comparison overload_comparison(const Options& o, SharedBlock<Control>& control) {
  Comparison c(
      fmt::format("100x overload: writer process at {} lww ops/s over {} keys (CPU {}), reader "
                  "draining {} entries/s (CPU {}), {} s per run",
                  o.rate, o.keys, o.cpus.peer, o.rate / 100, o.cpus.self, o.seconds),
      {MetricSpec{"peak_kib", "peak pending KiB", 1.0, 0},
       MetricSpec{"bound_kib", "keys x 64 B KiB", 1.0, 0},
       MetricSpec{"peak_keys", "peak pending keys", 1.0, 0},
       MetricSpec{"segment_mib", "segment MiB", 1.0, 1},
       MetricSpec{"stale_p50_ms", "staleness p50 ms", 1.0, 1},
       MetricSpec{"stale_max_ms", "staleness max ms", 1.0, 1},
       MetricSpec{"overload", "written / drained", 1.0, 0}});
  c.add_case("relay lww, Conflate", [&] { return relay_overload_run(o, control); });
  c.add_case("ring (holds the stream)", [&] { return ring_overload_run(o, control); });
  c.add_ratio({"relay peak pending bytes / (keys x 64 B)", "relay lww, Conflate", "peak_kib",
               "relay lww, Conflate", "bound_kib", Target{Goal::AtMost, 1.0}});
  c.add_ratio({"relay / ring peak pending bytes", "relay lww, Conflate", "peak_kib",
               "ring (holds the stream)", "peak_kib", std::nullopt});
  c.add_ratio({"relay / ring staleness p50", "relay lww, Conflate", "stale_p50_ms",
               "ring (holds the stream)", "stale_p50_ms", std::nullopt});
  return c;
}

int run(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  ScratchRoot root;
  SharedBlock<Control> control;
  return run_report(
      {.program = "xproc_relay",
       .options = o.run,
       .setup = fmt::format("- reader / single-process CPU {}, writer CPU {}; rounds {}",
                            o.cpus.self, o.cpus.peer, o.run.reps),
       .pin_cpu = o.cpus.self,
       .targets_table = true,
       .smoke_ok = "every case checked its data"},
      argc, argv,
      {[&o] { return write_comparison(o); },
       [&o, &control] { return overload_comparison(o, control); }});
}

}  // namespace

int main(int argc, char** argv) {
  return guarded_main("xproc_relay", argc, argv, run);
}
