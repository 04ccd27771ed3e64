// Micro-benchmarks of SpscRing operations in one process (producer and
// consumer handles on the same ring, same thread): the cost of the operations
// themselves, without any cross-core traffic. Every benchmark creates its ring
// under a private LIBSHM_ROOT in /dev/shm and pre-faults it before timing.
//
// Baselines in the same binary: one seq_cst fence (each commit() and release()
// issues one, see [D1]/[D2] in shm/spsc/producer.hpp / consumer.hpp) and
// boost::lockfree::spsc_queue with fixed-size elements (in-process, no
// variable-length records, no shared-memory checks).
#include "harness/harness.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"

#include <benchmark/benchmark.h>
#include <boost/lockfree/spsc_queue.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace {

using shm::RingConsumer;
using shm::RingProducer;

constexpr std::uint64_t kCapacity = 64 * 1024;

struct Ring {
  RingProducer producer;
  RingConsumer consumer;
};

// Creates a fresh ring; on failure reports it through `state` and returns null.
std::unique_ptr<Ring> make_ring(benchmark::State& state, std::uint64_t capacity = kCapacity) {
  static int counter = 0;
  const std::string name = "micro-" + std::to_string(counter++);
  const shm::CreateOptions create{.root = shm::bench::process_scratch_root().path()};
  const shm::OpenOptions open{.root = shm::bench::process_scratch_root().path()};
  auto p = RingProducer::create(name, {.capacity_bytes = capacity}, create);
  if (!p) {
    state.SkipWithError(p.error().what().c_str());
    return nullptr;
  }
  auto c = RingConsumer::open(name, {.capacity_bytes = capacity}, open);
  if (!c) {
    state.SkipWithError(c.error().what().c_str());
    return nullptr;
  }
  // The handles keep the mapping; the name is not needed any more.
  (void)shm::Segment::unlink(name, shm::bench::process_scratch_root().path());
  auto data = p->segment().data();
  shm::bench::prefault(data.subspan(shm::ring::kBufferOffset), true);
  return std::make_unique<Ring>(Ring{std::move(*p), std::move(*c)});
}

std::vector<std::byte> payload(std::size_t n) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>(i * 7 + 1);
  return v;
}

void set_counters(benchmark::State& state, std::size_t records_per_iteration, std::size_t size) {
  const auto items = static_cast<std::int64_t>(state.iterations()) *
                     static_cast<std::int64_t>(records_per_iteration);
  state.SetItemsProcessed(items);
  state.SetBytesProcessed(items * static_cast<std::int64_t>(size));
}

// try_push + try_pop: both copy; one commit and one release per record.
void BM_SpscRing_TryPushTryPop(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  auto ring = make_ring(state);
  if (!ring) return;
  const auto msg = payload(size);
  std::vector<std::byte> out(size);
  for (auto _ : state) {
    auto pushed = ring->producer.try_push(msg);
    auto popped = ring->consumer.try_pop(out);
    if (!pushed || !*pushed || !popped || !*popped) [[unlikely]] {
      state.SkipWithError("try_push/try_pop failed");
      break;
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, 1, size);
}
BENCHMARK(BM_SpscRing_TryPushTryPop)->Arg(8)->Arg(64)->Arg(1024);

// Zero-copy path: try_reserve, write in place, commit; try_peek, read in place, release.
void BM_SpscRing_ReserveCommitPeekRelease(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  auto ring = make_ring(state);
  if (!ring) return;
  const auto msg = payload(size);
  std::uint64_t sum = 0;
  for (auto _ : state) {
    auto r = ring->producer.try_reserve(size);
    if (!r || !*r) [[unlikely]] {
      state.SkipWithError("try_reserve failed");
      break;
    }
    std::memcpy((*r)->data(), msg.data(), size);
    ring->producer.commit();
    auto p = ring->consumer.try_peek();
    if (!p || !*p) [[unlikely]] {
      state.SkipWithError("try_peek failed");
      break;
    }
    sum += static_cast<std::uint64_t>((**p)[0]) + static_cast<std::uint64_t>((**p)[size - 1]);
    ring->consumer.release();
  }
  benchmark::DoNotOptimize(sum);
  set_counters(state, 1, size);
}
BENCHMARK(BM_SpscRing_ReserveCommitPeekRelease)->Arg(8)->Arg(64)->Arg(1024);

// Batches: `batch` reservations and one commit, then drain() of the batch with
// one release.
void BM_SpscRing_BatchCommitDrain(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  const auto batch = static_cast<std::size_t>(state.range(1));
  auto ring = make_ring(state);
  if (!ring) return;
  const auto msg = payload(size);
  std::uint64_t sum = 0;
  for (auto _ : state) {
    for (std::size_t i = 0; i < batch; ++i) {
      auto r = ring->producer.try_reserve(size);
      if (!r || !*r) [[unlikely]] {
        state.SkipWithError("try_reserve failed");
        return;
      }
      std::memcpy((*r)->data(), msg.data(), size);
    }
    ring->producer.commit();
    auto n =
        ring->consumer.drain([&](std::span<const std::byte> rec) { sum += rec.size(); }, batch);
    if (!n || *n != batch) [[unlikely]] {
      state.SkipWithError("drain failed");
      break;
    }
  }
  benchmark::DoNotOptimize(sum);
  set_counters(state, batch, size);
}
BENCHMARK(BM_SpscRing_BatchCommitDrain)
    ->Args({8, 32})
    ->Args({64, 32})
    ->Args({1024, 32})
    ->Args({64, 256});

// The copying batch: try_push_batch() of `batch` records (one guard scope and
// one commit for all), then drain() of the batch with one release.
void BM_SpscRing_BatchPushDrain(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  const auto batch = static_cast<std::size_t>(state.range(1));
  auto ring = make_ring(state);
  if (!ring) return;
  const auto msg = payload(size);
  const std::vector<std::span<const std::byte>> records(batch, std::span<const std::byte>(msg));
  std::uint64_t sum = 0;
  for (auto _ : state) {
    auto pushed = ring->producer.try_push_batch(records);
    auto n =
        ring->consumer.drain([&](std::span<const std::byte> rec) { sum += rec.size(); }, batch);
    if (!pushed || *pushed != batch || !n || *n != batch) [[unlikely]] {
      state.SkipWithError("try_push_batch or drain failed");
      break;
    }
  }
  benchmark::DoNotOptimize(sum);
  set_counters(state, batch, size);
}
BENCHMARK(BM_SpscRing_BatchPushDrain)->Args({8, 32})->Args({64, 256});

// The blocking API on its fast path (never waits): spin-then-park bookkeeping cost.
void BM_SpscRing_BlockingPushPop(benchmark::State& state) {
  using namespace std::chrono_literals;
  const auto size = static_cast<std::size_t>(state.range(0));
  auto ring = make_ring(state);
  if (!ring) return;
  const auto msg = payload(size);
  std::vector<std::byte> out(size);
  for (auto _ : state) {
    auto pushed = ring->producer.push(msg, 1s);
    auto popped = ring->consumer.pop(out, 1s);
    if (!pushed || !*pushed || !popped || !*popped) [[unlikely]] {
      state.SkipWithError("push/pop failed");
      break;
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, 1, size);
}
BENCHMARK(BM_SpscRing_BlockingPushPop)->Arg(64);

// Setting a ring up: create + attach producer, open + attach consumer, unlink.
void BM_SpscRing_CreateOpenUnlink(benchmark::State& state) {
  const shm::CreateOptions create{.root = shm::bench::process_scratch_root().path()};
  const shm::OpenOptions open{.root = shm::bench::process_scratch_root().path()};
  for (auto _ : state) {
    auto p = RingProducer::create("micro-setup", {.capacity_bytes = kCapacity}, create);
    auto c = RingConsumer::open("micro-setup", {.capacity_bytes = kCapacity}, open);
    auto u = shm::Segment::unlink("micro-setup", shm::bench::process_scratch_root().path());
    if (!p || !c || !u) [[unlikely]] {
      state.SkipWithError("create/open/unlink failed");
      break;
    }
  }
}
BENCHMARK(BM_SpscRing_CreateOpenUnlink)->Unit(benchmark::kMicrosecond);

// ---------------------------------------------------------------- baselines

// One sequentially consistent fence (x86-64: mfence or a locked instruction).
void BM_SpscRing_Baseline_SeqCstFence(benchmark::State& state) {
  for (auto _ : state) std::atomic_thread_fence(std::memory_order_seq_cst);
}
BENCHMARK(BM_SpscRing_Baseline_SeqCstFence);

template <std::size_t N>
void BM_SpscRing_Baseline_BoostLockfreeSpsc(benchmark::State& state) {
  using Element = std::array<std::byte, N>;
  auto queue = std::make_unique<boost::lockfree::spsc_queue<Element>>(kCapacity / N);
  Element in{};
  for (std::size_t i = 0; i < N; ++i) in[i] = static_cast<std::byte>(i * 7 + 1);
  Element out{};
  for (auto _ : state) {
    if (!queue->push(in) || !queue->pop(out)) [[unlikely]] {
      state.SkipWithError("spsc_queue push/pop failed");
      break;
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, 1, N);
}
BENCHMARK(BM_SpscRing_Baseline_BoostLockfreeSpsc<8>)
    ->Name("BM_SpscRing_Baseline_BoostLockfreeSpsc/8");
BENCHMARK(BM_SpscRing_Baseline_BoostLockfreeSpsc<64>)
    ->Name("BM_SpscRing_Baseline_BoostLockfreeSpsc/64");
BENCHMARK(BM_SpscRing_Baseline_BoostLockfreeSpsc<1024>)
    ->Name("BM_SpscRing_Baseline_BoostLockfreeSpsc/1024");

}  // namespace
