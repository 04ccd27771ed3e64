// Cross-process WaitSet wake latency: a producer process (pinned to one CPU)
// pushes an 8-byte CLOCK_MONOTONIC stamp into a ring after an idle gap (1 ms
// by default, so the consumer has parked in the kernel), and the consumer
// process (pinned to another) measures stamp -> the record in hand:
//
//   blocking peek      one RingConsumer::peek(forever) on its own ring (the baseline)
//   WaitSet, N rings   one wait(forever) over N ring consumers (64 by default);
//                      the producer writes to member i mod N
//   WaitSet fd, epoll  the same set through fd() in epoll_wait, then wait(0)
//
// Cases run one after another, round by round (--rounds); each round's
// p50/p99 and the set / baseline ratio of p50 are printed as Markdown.
//
//   xproc_waitset [--samples 2000] [--gap-us 1000] [--members 64] [--rounds 3] [--cpus A,B]
//   xproc_waitset --quick    1 round of 500 samples
//   xproc_waitset --smoke    1 round of 50 samples, 8 members (ctest: keeps it running)
#include "harness/harness.hpp"
#include "shm/platform/clock.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"
#include "shm/waitset/waitset.hpp"

#include <fmt/format.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using shm::bench::BenchError;

struct Args {
  int samples = 2000;
  int gap_us = 1000;
  int members = 64;
  int rounds = 3;
  std::string cpus;
};

enum class Mode { Blocking, Set, SetFd };

std::string ring_name(int i) {
  return fmt::format("wsb{}", i);
}

// The producer: `samples` stamps, one per gap, into ring i mod rings.
int produce(int rings, int samples, int gap_us) {
  std::vector<shm::RingProducer> p;
  for (int i = 0; i < rings; ++i) {
    auto r = shm::RingProducer::open(ring_name(i));
    if (!r) throw BenchError(r.error().what());
    p.push_back(std::move(*r));
  }
  for (int s = 0; s < samples; ++s) {
    std::this_thread::sleep_for(std::chrono::microseconds(gap_us));
    const std::uint64_t stamp = shm::bench::now_ns();
    auto ok = p[static_cast<std::size_t>(s % rings)].push(std::as_bytes(std::span(&stamp, 1)), 1s);
    if (!ok || !*ok) throw BenchError("push failed");
  }
  return 0;
}

std::uint64_t take(shm::RingConsumer& c) {
  std::uint64_t stamp = 0;
  auto r = c.try_pop(std::as_writable_bytes(std::span(&stamp, 1)));
  if (!r || !*r) throw BenchError("ready ring had no record");
  return stamp;
}

std::vector<double> run(Mode mode, const Args& a, const shm::bench::CpuPair& cpus) {
  const int rings = mode == Mode::Blocking ? 1 : a.members;
  std::vector<shm::RingConsumer> c;
  for (int i = 0; i < rings; ++i) {
    (void)shm::Segment::unlink(ring_name(i));  // left by the previous case
    auto r = shm::RingConsumer::create(ring_name(i), {.capacity_bytes = 4096});
    if (!r) throw BenchError(r.error().what());
    c.push_back(std::move(*r));
  }
  auto set = shm::WaitSet::make({.max_members = static_cast<std::size_t>(rings)});
  if (!set) throw BenchError(set.error().what());
  int epoll = -1;
  if (mode != Mode::Blocking) {
    for (int i = 0; i < rings; ++i)
      if (!set->attach(c[static_cast<std::size_t>(i)], static_cast<std::uint64_t>(i)))
        throw BenchError("attach");
  }
  if (mode == Mode::SetFd) {
    auto fd = set->fd();
    if (!fd) throw BenchError(fd.error().what());
    epoll = ::epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    if (::epoll_ctl(epoll, EPOLL_CTL_ADD, *fd, &ev) != 0) throw BenchError("epoll_ctl");
  }
  auto peer =
      shm::bench::Peer::fork_pinned(cpus.peer, [&] { return produce(rings, a.samples, a.gap_us); });
  std::vector<double> lat;
  lat.reserve(static_cast<std::size_t>(a.samples));
  while (static_cast<int>(lat.size()) < a.samples) {
    if (mode == Mode::Blocking) {
      auto r = c[0].peek(shm::forever);
      if (!r || !*r) throw BenchError("peek");
      std::uint64_t stamp = 0;
      std::memcpy(&stamp, (*r)->data(), sizeof stamp);
      lat.push_back(static_cast<double>(shm::bench::now_ns() - stamp));
      c[0].release();
      continue;
    }
    if (mode == Mode::SetFd) {
      epoll_event ev{};
      if (::epoll_wait(epoll, &ev, 1, 10'000) != 1) throw BenchError("epoll_wait timed out");
    }
    auto r = set->wait(mode == Mode::SetFd ? 0ns : shm::forever);
    if (!r) throw BenchError(r.error().what());
    const std::uint64_t now = shm::bench::now_ns();
    for (const auto& e : r->ready) lat.push_back(static_cast<double>(now - take(c[e.tag])));
  }
  if (peer.wait(10s) != 0) throw BenchError("producer failed");
  if (epoll >= 0) ::close(epoll);
  return lat;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--smoke") {
      a.rounds = 1;
      a.samples = 50;
      a.members = 8;
      continue;
    }
    if (k == "--quick") {
      a.rounds = 1;
      a.samples = 500;
      continue;
    }
    if (i + 1 >= argc) {
      fmt::print(stderr, "xproc_waitset: unknown argument or missing value: '{}'\n", k);
      return 2;
    }
    const std::string v = argv[++i];
    if (k == "--samples")
      a.samples = std::stoi(v);
    else if (k == "--gap-us")
      a.gap_us = std::stoi(v);
    else if (k == "--members")
      a.members = std::stoi(v);
    else if (k == "--rounds")
      a.rounds = std::stoi(v);
    else if (k == "--cpus")
      a.cpus = v;
    else {
      fmt::print(stderr, "xproc_waitset: unknown option '{}'\n", k);
      return 2;
    }
  }
  shm::bench::ScratchRoot root;
  const auto cpus = shm::bench::choose_cpus(a.cpus);
  (void)shm::bench::pin_to_cpu(cpus.self);
  fmt::print("| round | case | p50 us | p99 us | p50 / blocking |\n|---|---|---|---|---|\n");
  try {
    for (int round = 0; round < a.rounds; ++round) {
      double base = 0;
      for (Mode m : {Mode::Blocking, Mode::Set, Mode::SetFd}) {
        auto lat = run(m, a, cpus);
        const double p50 = shm::bench::percentile<double>(lat, 0.50) / 1000.0;
        const double p99 = shm::bench::percentile<double>(lat, 0.99) / 1000.0;
        if (m == Mode::Blocking) base = p50;
        const std::string name = m == Mode::Blocking ? "blocking peek, 1 ring"
                                 : m == Mode::Set
                                     ? fmt::format("WaitSet wait, {} rings", a.members)
                                     : fmt::format("WaitSet fd() in epoll, {} rings", a.members);
        fmt::print("| {} | {} | {:.1f} | {:.1f} | {:.2f} |\n", round, name, p50, p99, p50 / base);
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "xproc_waitset: {}\n", e.what());
    return 1;
  }
  return 0;
}
