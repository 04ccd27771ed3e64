// Cross-process PriorityFanout drain throughput: a queue pre-filled with N
// 48-byte jobs over 4 priorities is drained by 1 or 2 consumer processes (fork,
// no exec, each pinned to its own CPU, each opening the fanout by name as an
// independent process would), started together at a gate; throughput = N /
// (last consumer done - gate). Every job carries its sequence number and
// priority; consumers check them (--smoke: every byte) and the total count.
//
// Baseline in the same run: the cross-process analogue of the in-process
// textbook queue, a PTHREAD_PROCESS_SHARED mutex + a binary max-heap of
// std::pair<std::uint8_t, std::uint32_t> in a shared mapping, the 48-byte job
// stored next to it (copied out after the pop, outside the lock).
//
// Cases are interleaved run by run (harness Comparison); ratios are taken
// within a round, then the median and p10/p90 over rounds are reported.
#include "harness/harness.hpp"
#include "shm/fanout/priority_fanout.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <pthread.h>

namespace {

using namespace shm::bench;
using namespace std::chrono_literals;

constexpr std::uint32_t kPriorities = 4;
constexpr std::size_t kPayload = 48;
constexpr int kMaxConsumers = 2;

constexpr std::string_view kUsage =
    R"(xproc_fanout: cross-process PriorityFanout drain throughput with a same-run baseline

usage: xproc_fanout [--quick | --smoke] [options]

  --quick            3 rounds, 100000 jobs per run
  (default)          7 rounds, 400000 jobs per run
  --smoke            1 round of 5000 jobs, every byte verified; asserts nothing about speed
  --reps N           rounds (each round runs every case once, interleaved)
  --jobs N           jobs pre-filled per run
  --cpus A,B         consumer CPUs (default: the first two allowed)
  --csv FILE         also write every per-round value to FILE
  --check-targets    exit 3 when a target ratio is missed
)";

struct Options {
  RunOptions run;
  std::uint64_t jobs = 400'000;
  CpuPair cpus;
  [[nodiscard]] std::chrono::milliseconds run_limit() const { return 120s; }
};

Options parse_options(int argc, char** argv) {
  Args args(argc, argv);
  Options o;
  o.run = parse_run_options(args, 7, 3);
  if (o.run.quick) o.jobs = 100'000;
  if (o.run.smoke) o.jobs = 5'000;
  o.jobs = static_cast<std::uint64_t>(args.double_value("--jobs", static_cast<double>(o.jobs)));
  o.cpus = choose_cpus(args.value("--cpus", ""));
  args.finish(kUsage);
  if (o.jobs == 0 || o.jobs > (1u << 26)) throw BenchError("--jobs must be in [1, 2^26]");
  return o;
}

std::uint8_t priority_of(std::uint64_t seq) {
  std::uint64_t x = (seq + 1) * 0x9e3779b97f4a7c15ull;
  x ^= x >> 29;
  return static_cast<std::uint8_t>(x % kPriorities);
}

struct Job {
  std::uint64_t seq;
  std::uint32_t priority;
  std::uint8_t body[kPayload - 12];
};
static_assert(sizeof(Job) == kPayload);

Job make_job(std::uint64_t seq) {
  Job j{seq, priority_of(seq), {}};
  for (std::size_t i = 0; i < sizeof j.body; ++i) j.body[i] = static_cast<std::uint8_t>(seq + i);
  return j;
}

bool job_ok(const Job& j, std::uint32_t priority, std::uint64_t jobs, bool every_byte) {
  if (j.seq >= jobs || j.priority != priority || priority != priority_of(j.seq)) return false;
  if (!every_byte) return true;
  const Job expect = make_job(j.seq);
  return std::memcmp(&j, &expect, sizeof j) == 0;
}

// Lives in an anonymous shared mapping, fresh for every run.
struct Control {
  StartGate gate;
  std::atomic<std::uint64_t> start_ns[kMaxConsumers];
  std::atomic<std::uint64_t> end_ns[kMaxConsumers];
  std::atomic<std::uint64_t> count[kMaxConsumers];
};

struct Env {
  const Options& o;
  SharedBlock<Control>& control;
};

// `setup(c)` runs in consumer c before the gate (opening, attaching) and
// returns the timed part, which drains and returns how many jobs it got.
using Drain = std::function<std::uint64_t()>;
Measurement measure(const Env& env, int consumers, const std::function<Drain(int)>& setup) {
  const Options& o = env.o;
  Control& ctl = *env.control;
  const Watchdog watchdog(std::chrono::duration_cast<std::chrono::seconds>(o.run_limit()) + 10s);
  std::vector<Peer> peers;
  const std::array<int, kMaxConsumers> cpus{o.cpus.self, o.cpus.peer};
  for (int c = 0; c < consumers; ++c)
    peers.push_back(Peer::fork_pinned(cpus[static_cast<std::size_t>(c)], [&, c] {
      const Drain drain = setup(c);
      if (!ctl.gate.arrive_and_wait(static_cast<std::uint32_t>(consumers), o.run_limit()))
        throw BenchError("start gate timed out");
      ctl.start_ns[c].store(now_ns(), std::memory_order_relaxed);
      const std::uint64_t n = drain();
      ctl.end_ns[c].store(now_ns(), std::memory_order_relaxed);
      ctl.count[c].store(n, std::memory_order_relaxed);
      return 0;
    }));
  for (auto& p : peers) {
    const int rc = p.wait(o.run_limit());
    if (rc != 0) throw BenchError(fmt::format("consumer failed with status {}", rc));
  }
  std::uint64_t start = ~0ull, end = 0, total = 0;
  for (int c = 0; c < consumers; ++c) {
    start = std::min(start, ctl.start_ns[c].load());
    end = std::max(end, ctl.end_ns[c].load());
    total += ctl.count[c].load();
  }
  if (total != o.jobs)
    throw BenchError(fmt::format("consumers drained {} jobs, {} were queued", total, o.jobs));
  return Measurement().set("jobs_s",
                           static_cast<double>(total) * 1e9 /
                               static_cast<double>(std::max<std::uint64_t>(end - start, 1)));
}

// ---------------------------------------------------------------- contender

Measurement fanout_run(const Env& env, int consumers) {
  static int counter = 0;
  const Options& o = env.o;
  env.control.reset();
  const std::string base = fmt::format("xproc-fanout-{}", counter++);
  std::uint64_t capacity = 1024;
  while (capacity < o.jobs / kPriorities * 2) capacity *= 2;  // room for an uneven split
  {
    auto f = shm::PriorityFanout::create(
        base, {.priorities = kPriorities, .ring_cells = capacity, .slot_bytes = kPayload});
    if (!f) throw BenchError(f.error().what());
    for (std::uint32_t p = 0; p < kPriorities; ++p) prefault(f->ring(p).segment().data(), true);
    for (std::uint64_t seq = 0; seq < o.jobs; ++seq) {
      const Job j = make_job(seq);
      auto ok = f->try_submit(j.priority, std::as_bytes(std::span(&j, 1)));
      if (!ok || !*ok) throw BenchError("pre-fill: submit failed");
    }
  }
  Measurement m = measure(env, consumers, [&](int) -> Drain {
    auto f = shm::FanoutConsumer::open(
        base, {.priorities = kPriorities, .ring_cells = capacity, .slot_bytes = kPayload});
    if (!f) throw BenchError(f.error().what());
    return [&o, fan = std::make_shared<shm::FanoutConsumer>(std::move(*f))]() -> std::uint64_t {
      Job j{};
      auto buf = std::as_writable_bytes(std::span(&j, 1));
      std::uint64_t n = 0;
      for (;;) {
        auto d = fan->try_pop_highest(buf);
        if (!d) throw BenchError(d.error().what());
        if (!*d) break;  // no producer: empty means drained
        if (!job_ok(j, (*d)->priority, o.jobs, o.run.smoke)) throw BenchError("job damaged");
        ++n;
      }
      return n;
    };
  });
  (void)shm::PriorityFanout::unlink(base);
  return m;
}

// ---------------------------------------------------------------- baseline

struct SharedHeap {
  pthread_mutex_t mutex;
  std::uint64_t size;
  // followed by: std::pair<uint8_t, uint32_t> heap[jobs]; Job jobs[jobs]
};

class HeapBlock {
 public:
  explicit HeapBlock(std::uint64_t jobs)
      : jobs_(jobs),
        bytes_(sizeof(SharedHeap) + jobs * (sizeof(Entry) + sizeof(Job))),
        p_(static_cast<std::byte*>(map_shared_anonymous(bytes_))) {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutex_init(&header()->mutex, &attr);
    pthread_mutexattr_destroy(&attr);
    header()->size = 0;
  }
  HeapBlock(const HeapBlock&) = delete;
  HeapBlock& operator=(const HeapBlock&) = delete;
  ~HeapBlock() {
    pthread_mutex_destroy(&header()->mutex);
    unmap(p_, bytes_);
  }
  using Entry = std::pair<std::uint8_t, std::uint32_t>;
  SharedHeap* header() const { return reinterpret_cast<SharedHeap*>(p_); }
  Entry* heap() const { return reinterpret_cast<Entry*>(p_ + sizeof(SharedHeap)); }
  Job* jobs() const {
    return reinterpret_cast<Job*>(p_ + sizeof(SharedHeap) + jobs_ * sizeof(Entry));
  }

 private:
  std::uint64_t jobs_;
  std::size_t bytes_;
  std::byte* p_;
};

Measurement heap_run(const Env& env, int consumers) {
  const Options& o = env.o;
  env.control.reset();
  HeapBlock block(o.jobs);
  SharedHeap* h = block.header();
  for (std::uint64_t seq = 0; seq < o.jobs; ++seq) {
    const Job j = make_job(seq);
    block.jobs()[seq] = j;
    block.heap()[h->size++] = {static_cast<std::uint8_t>(j.priority),
                               static_cast<std::uint32_t>(seq)};
    std::push_heap(block.heap(), block.heap() + h->size);
  }
  return measure(env, consumers, [&](int) -> Drain {
    return [&]() -> std::uint64_t {
      Job j{};
      std::uint64_t n = 0;
      for (;;) {
        HeapBlock::Entry top;
        pthread_mutex_lock(&h->mutex);
        if (h->size == 0) {
          pthread_mutex_unlock(&h->mutex);
          break;
        }
        top = block.heap()[0];
        std::pop_heap(block.heap(), block.heap() + h->size);
        --h->size;
        pthread_mutex_unlock(&h->mutex);
        std::memcpy(&j, &block.jobs()[top.second], sizeof j);
        if (!job_ok(j, top.first, o.jobs, o.run.smoke)) throw BenchError("job damaged");
        ++n;
      }
      return n;
    };
  });
}

Comparison drain_comparison(const Env& env) {
  Comparison c(fmt::format("Cross-process drain of {} pre-filled 48-byte jobs, 4 priorities "
                           "(consumers on CPUs {} and {})",
                           env.o.jobs, env.o.cpus.self, env.o.cpus.peer),
               {MetricSpec{"jobs_s", "Mjobs/s", 1e-6, 2}});
  c.add_case("fanout, 2 consumers", [&env] { return fanout_run(env, 2); });
  c.add_case("mutex+heap, 2 consumers", [&env] { return heap_run(env, 2); });
  c.add_case("fanout, 1 consumer", [&env] { return fanout_run(env, 1); });
  c.add_case("mutex+heap, 1 consumer", [&env] { return heap_run(env, 1); });
  c.add_ratio({"fanout / mutex+heap, 2 consumers (jobs/s)", "fanout, 2 consumers", "jobs_s",
               "mutex+heap, 2 consumers", "jobs_s", Target{Goal::AtLeast, 1.0}});
  c.add_ratio({"fanout / mutex+heap, 1 consumer (jobs/s)", "fanout, 1 consumer", "jobs_s",
               "mutex+heap, 1 consumer", "jobs_s", std::nullopt});
  c.add_ratio({"fanout 2 consumers / 1 consumer (jobs/s)", "fanout, 2 consumers", "jobs_s",
               "fanout, 1 consumer", "jobs_s", std::nullopt});
  return c;
}

int run(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  ScratchRoot root;
  SharedBlock<Control> control;
  const Env env{o, control};
  return run_report({.program = "xproc_fanout",
                     .options = o.run,
                     .setup = fmt::format("- consumers pinned to CPUs {} and {}; rounds {}; {} "
                                          "jobs per run",
                                          o.cpus.self, o.cpus.peer, o.run.reps, o.jobs),
                     .smoke_ok = "every case drained its jobs intact"},
                    argc, argv, {[&env] { return drain_comparison(env); }});
}

}  // namespace

int main(int argc, char** argv) {
  return guarded_main("xproc_fanout", argc, argv, run);
}
