// Micro-benchmarks of the Topic in one process and on one CPU: what its calls
// cost with no other core involved (no cache line moves between CPUs), the
// floor under bench/xproc_topic.cpp's cross-process figures.
//
//   BM_Topic_LoanPublish/N     try_loan(64) + try_publish with N Block
//                              subscribers (manual time: only these two calls;
//                              each subscriber then receives and drops the
//                              sample, untimed)
//   BM_Topic_ReceiveRelease/N  try_receive + the Sample's release, per
//                              subscriber (manual time: only these; the
//                              publish before them untimed)
#include "harness/harness.hpp"
#include "shm/topic/topic.hpp"

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct TopicFixture {
  std::string name;
  shm::TopicPublisher pub;
  std::vector<shm::TopicSubscriber> subs;
};

std::optional<TopicFixture> make_topic(benchmark::State& state, std::size_t subscribers) {
  static int counter = 0;
  TopicFixture f;
  f.name = fmt::format("micro-topic-{}", counter++);
  const shm::CreateOptions create{.root = shm::bench::process_scratch_root().path()};
  const shm::OpenOptions open{.root = create.root};
  auto pub = shm::TopicPublisher::create(
      f.name,
      {.max_sample_bytes = 64, .chunks = 64, .queue_depth = 16, .history = 0, .max_held = 2},
      create);
  if (!pub) {
    state.SkipWithError(pub.error().what().c_str());
    return std::nullopt;
  }
  f.pub = std::move(*pub);
  for (std::size_t i = 0; i < subscribers; ++i) {
    auto s = shm::TopicSubscriber::open(f.name, shm::TopicOverflow::Block, {}, open);
    if (!s) {
      state.SkipWithError(s.error().what().c_str());
      return std::nullopt;
    }
    f.subs.push_back(std::move(*s));
  }
  return f;
}

// One sample through: loan, publish, every subscriber receives and drops it.
// Returns the ns of the publisher's calls and of the subscribers' calls.
bool one_sample(benchmark::State& state, TopicFixture& f, double& pub_ns, double& sub_ns) {
  const auto t0 = Clock::now();
  auto loan = f.pub.try_loan(64);
  if (!loan || !*loan) {
    state.SkipWithError("try_loan gave no chunk");
    return false;
  }
  auto out = f.pub.try_publish(std::move(**loan));
  const auto t1 = Clock::now();
  if (!out || out->status != shm::PublishStatus::Published) {
    state.SkipWithError("try_publish did not publish");
    return false;
  }
  for (auto& s : f.subs) {
    auto got = s.try_receive();
    if (!got || !*got) {
      state.SkipWithError("try_receive gave no sample");
      return false;
    }
    benchmark::DoNotOptimize((*got)->bytes().data());
  }  // each Sample is released here
  const auto t2 = Clock::now();
  pub_ns = std::chrono::duration<double, std::nano>(t1 - t0).count();
  sub_ns = std::chrono::duration<double, std::nano>(t2 - t1).count();
  return true;
}

void BM_Topic_LoanPublish(benchmark::State& state) {
  auto f = make_topic(state, static_cast<std::size_t>(state.range(0)));
  if (!f) return;
  for (auto _ : state) {
    double pub_ns = 0, sub_ns = 0;
    if (!one_sample(state, *f, pub_ns, sub_ns)) return;
    state.SetIterationTime(pub_ns / 1e9);
  }
}
BENCHMARK(BM_Topic_LoanPublish)->Arg(1)->Arg(4)->UseManualTime();

void BM_Topic_ReceiveRelease(benchmark::State& state) {
  auto f = make_topic(state, static_cast<std::size_t>(state.range(0)));
  if (!f) return;
  for (auto _ : state) {
    double pub_ns = 0, sub_ns = 0;
    if (!one_sample(state, *f, pub_ns, sub_ns)) return;
    state.SetIterationTime(sub_ns / static_cast<double>(f->subs.size()) / 1e9);
  }
}
BENCHMARK(BM_Topic_ReceiveRelease)->Arg(1)->Arg(4)->UseManualTime();

}  // namespace
