// Cross-process WaitSet benchmarks (issue 40). A producer process pinned to
// one CPU, the consumer (this process: every thread of it) pinned to another.
// Each comparison runs its cases interleaved, round by round (the harness's
// Comparison: round k starts with case k mod n); a ratio is taken inside a
// round and summarised over rounds (median, p10-p90).
//
// 1. Wake latency. The producer pushes an 8-byte CLOCK_MONOTONIC stamp after
//    an idle gap (1 ms by default, so the consumer has parked in the kernel);
//    the consumer measures stamp -> the record in hand:
//      blocking peek      one RingConsumer::peek(forever) on its own ring (the baseline)
//      WaitSet, N rings   one wait(forever) over N ring consumers (64 by default);
//                         the producer writes to member i mod N
//      WaitSet fd, epoll  the same set through fd() in epoll_wait, then wait(0)
// 2. Serving N rings (64 by default): one thread waiting on all of them
//    through a set and draining each ready ring with try_pop, against N
//    threads each blocking in pop() on its own ring. The producer writes
//    8-byte records to ring i mod N, as fast as it can (100% load) or paced
//    at a fixed rate (1% load: --light-percent of the median rate the N
//    threads reached at 100% in this run). Measured: messages per second
//    (first push to last record taken) and the consumer process's CPU
//    seconds (getrusage, every thread) per run and per message.
//
//   xproc_waitset [--reps 5] [--samples 1000] [--gap-us 1000] [--members 64]
//                 [--messages 262144] [--light-ms 1000] [--light-percent 1]
//                 [--cpus A,B] [--quick] [--smoke] [--csv FILE] [--check-targets]
#include "harness/harness.hpp"
#include "shm/platform/clock.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"
#include "shm/waitset/waitset.hpp"

#include <fmt/format.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using shm::bench::BenchError;
using shm::bench::Comparison;
using shm::bench::Goal;
using shm::bench::Measurement;
using shm::bench::MetricSpec;
using shm::bench::Target;

constexpr std::string_view kUsage =
    "xproc_waitset [--reps N] [--samples N] [--gap-us US] [--members N] [--messages N]\n"
    "              [--light-ms MS] [--light-percent P] [--cpus A,B] [--quick] [--smoke]\n"
    "              [--csv FILE] [--check-targets]";

struct Options {
  shm::bench::RunOptions run;
  int samples = 1000;
  int gap_us = 1000;
  int members = 64;
  std::uint64_t messages = 262144;
  int light_ms = 1000;
  double light_percent = 1.0;
  shm::bench::CpuPair cpus;
};

Options parse_options(int argc, char** argv) {
  shm::bench::Args args(argc, argv);
  Options o;
  o.run = shm::bench::parse_run_options(args, 5, 1);
  if (o.run.quick) {
    o.samples = 500;
    o.messages = 65536;
    o.light_ms = 500;
  }
  if (o.run.smoke) {
    o.samples = 50;
    o.members = 8;
    o.messages = 4096;
    o.light_ms = 100;
  }
  o.samples = args.int_value("--samples", o.samples);
  o.gap_us = args.int_value("--gap-us", o.gap_us);
  o.members = args.int_value("--members", o.members);
  o.messages =
      static_cast<std::uint64_t>(args.double_value("--messages", static_cast<double>(o.messages)));
  o.light_ms = args.int_value("--light-ms", o.light_ms);
  o.light_percent = args.double_value("--light-percent", o.light_percent);
  o.cpus = shm::bench::choose_cpus(args.value("--cpus", ""));
  args.finish(kUsage);
  if (o.members < 1 || o.members > static_cast<int>(shm::WaitSet::kMaxMembers))
    throw BenchError(fmt::format("--members must be in [1, {}]", shm::WaitSet::kMaxMembers));
  if (o.samples < 1 || o.messages < 1 || o.light_ms < 1 || o.light_percent <= 0)
    throw BenchError("--samples, --messages, --light-ms and --light-percent must be positive");
  return o;
}

std::string ring_name(int i) {
  return fmt::format("wsb{}", i);
}

std::vector<shm::RingConsumer> make_rings(int n) {
  std::vector<shm::RingConsumer> c;
  for (int i = 0; i < n; ++i) {
    (void)shm::Segment::unlink(ring_name(i));  // left by the previous case
    auto r = shm::RingConsumer::create(ring_name(i), {.capacity_bytes = 16384});
    if (!r) throw BenchError(r.error().what());
    c.push_back(std::move(*r));
  }
  return c;
}

std::vector<shm::RingProducer> open_rings(int n) {
  std::vector<shm::RingProducer> p;
  for (int i = 0; i < n; ++i) {
    auto r = shm::RingProducer::open(ring_name(i));
    if (!r) throw BenchError(r.error().what());
    p.push_back(std::move(*r));
  }
  return p;
}

std::uint64_t take(shm::RingConsumer& c) {
  std::uint64_t v = 0;
  auto r = c.try_pop(std::as_writable_bytes(std::span(&v, 1)));
  if (!r || !*r) throw BenchError("ready ring had no record");
  return v;
}

// ---------------------------------------------------------------- 1. wake latency

enum class Mode { Blocking, Set, SetFd };

// The producer: `samples` stamps, one per gap, into ring i mod rings.
int produce_stamps(int rings, int samples, int gap_us) {
  auto p = open_rings(rings);
  for (int s = 0; s < samples; ++s) {
    std::this_thread::sleep_for(std::chrono::microseconds(gap_us));
    const std::uint64_t stamp = shm::bench::now_ns();
    auto ok = p[static_cast<std::size_t>(s % rings)].push(std::as_bytes(std::span(&stamp, 1)), 1s);
    if (!ok || !*ok) throw BenchError("push failed");
  }
  return 0;
}

Measurement latency_run(Mode mode, const Options& o) {
  const int rings = mode == Mode::Blocking ? 1 : o.members;
  auto c = make_rings(rings);
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
  auto peer = shm::bench::Peer::fork_pinned(
      o.cpus.peer, [&] { return produce_stamps(rings, o.samples, o.gap_us); });
  std::vector<double> lat;
  lat.reserve(static_cast<std::size_t>(o.samples));
  while (static_cast<int>(lat.size()) < o.samples) {
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
  return Measurement()
      .set("p50_us", shm::bench::percentile<double>(lat, 0.50) / 1000.0)
      .set("p99_us", shm::bench::percentile<double>(lat, 0.99) / 1000.0);
}

// ---------------------------------------------------------------- 2. serving N rings

// The producer: record s (its value is s) into ring s mod rings, as fast as
// the rings take them (rate 0) or at `rate` records per second.
int produce_load(int rings, std::uint64_t messages, double rate) {
  auto p = open_rings(rings);
  timespec start{};
  ::clock_gettime(CLOCK_MONOTONIC, &start);
  const std::uint64_t start_ns =
      static_cast<std::uint64_t>(start.tv_sec) * 1'000'000'000ull + start.tv_nsec;
  for (std::uint64_t s = 0; s < messages; ++s) {
    if (rate > 0) {
      const auto at = start_ns + static_cast<std::uint64_t>(static_cast<double>(s) * 1e9 / rate);
      const timespec ts{static_cast<time_t>(at / 1'000'000'000ull),
                        static_cast<long>(at % 1'000'000'000ull)};
      while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
      }
    }
    auto ok = p[s % static_cast<std::uint64_t>(rings)].push(std::as_bytes(std::span(&s, 1)), 10s);
    if (!ok || !*ok) throw BenchError("push failed");
  }
  return 0;
}

double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// One thread and a set (`with_set`), or one thread per ring blocking in pop().
Measurement serve_run(bool with_set, const Options& o, std::uint64_t messages, double rate) {
  const int rings = o.members;
  auto c = make_rings(rings);
  const auto quota = [&](int i) {
    const auto n = static_cast<std::uint64_t>(rings);
    return messages / n + (static_cast<std::uint64_t>(i) < messages % n ? 1 : 0);
  };
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  auto set = shm::WaitSet::make({.max_members = static_cast<std::size_t>(rings)});
  if (!set) throw BenchError(set.error().what());
  if (with_set) {
    for (int i = 0; i < rings; ++i)
      if (!set->attach(c[static_cast<std::size_t>(i)], static_cast<std::uint64_t>(i)))
        throw BenchError("attach");
  } else {
    for (int i = 0; i < rings; ++i)
      threads.emplace_back([&, i] {
        shm::RingConsumer& ring = c[static_cast<std::size_t>(i)];
        const std::uint64_t n = quota(i);
        for (std::uint64_t k = 0; k < n; ++k) {
          std::uint64_t v = 0;
          auto r = ring.pop(std::as_writable_bytes(std::span(&v, 1)), 20s);
          if (!r || !*r || v % static_cast<std::uint64_t>(rings) != static_cast<std::uint64_t>(i)) {
            failed = true;
            return;
          }
        }
      });
    std::this_thread::sleep_for(20ms);  // every thread parked before the clock starts
  }
  const double cpu0 = cpu_seconds();
  const std::uint64_t t0 = shm::bench::now_ns();
  auto peer = shm::bench::Peer::fork_pinned(o.cpus.peer,
                                            [&] { return produce_load(rings, messages, rate); });
  if (with_set) {
    std::uint64_t got = 0;
    while (got < messages) {
      auto r = set->wait(20s);
      if (!r) throw BenchError(r.error().what());
      if (r->status != shm::WaitStatus::Ready) throw BenchError("set wait timed out");
      for (const auto& e : r->ready) {
        shm::RingConsumer& ring = c[e.tag];
        for (;;) {
          std::uint64_t v = 0;
          auto p = ring.try_pop(std::as_writable_bytes(std::span(&v, 1)));
          if (!p) throw BenchError(p.error().what());
          if (!*p) break;
          if (v % static_cast<std::uint64_t>(rings) != e.tag) throw BenchError("wrong ring");
          ++got;
        }
      }
    }
  } else {
    for (auto& t : threads) t.join();
    if (failed) throw BenchError("a blocking consumer thread failed");
  }
  const std::uint64_t t1 = shm::bench::now_ns();
  const double cpu = cpu_seconds() - cpu0;
  if (peer.wait(10s) != 0) throw BenchError("producer failed");
  const double secs = static_cast<double>(t1 - t0) / 1e9;
  return Measurement()
      .set("msg_s", static_cast<double>(messages) / secs)
      .set("cpu_s", cpu)
      .set("cpu_us", cpu * 1e6 / static_cast<double>(messages));
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  return shm::bench::percentile<double>(v, 0.5);
}

int run(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  shm::bench::ScratchRoot root;
  const std::string n = std::to_string(o.members);
  const std::string threads_case = n + " threads, pop() each";
  const std::string set_case = "1 thread, WaitSet of " + n;
  // The 100% rates of the threads' case, for the paced comparison's rate.
  auto full_rates = std::make_shared<std::vector<double>>();

  std::vector<std::function<Comparison()>> comparisons;
  comparisons.emplace_back([&] {
    Comparison c(
        fmt::format("wake latency after a {} us idle gap, {} samples per run", o.gap_us, o.samples),
        {MetricSpec{"p50_us", "p50 µs", 1.0, 1}, MetricSpec{"p99_us", "p99 µs", 1.0, 1}});
    c.add_case("blocking peek, 1 ring", [&] { return latency_run(Mode::Blocking, o); });
    c.add_case("WaitSet wait, " + n + " rings", [&] { return latency_run(Mode::Set, o); });
    c.add_case("WaitSet fd() in epoll, " + n + " rings",
               [&] { return latency_run(Mode::SetFd, o); });
    c.add_ratio({"set / blocking p50", "WaitSet wait, " + n + " rings", "p50_us",
                 "blocking peek, 1 ring", "p50_us", Target{Goal::AtMost, 1.2}});
    c.add_ratio({"set / blocking p99", "WaitSet wait, " + n + " rings", "p99_us",
                 "blocking peek, 1 ring", "p99_us", std::nullopt});
    c.add_ratio({"fd() in epoll / blocking p50", "WaitSet fd() in epoll, " + n + " rings", "p50_us",
                 "blocking peek, 1 ring", "p50_us", std::nullopt});
    c.add_ratio({"fd() in epoll / blocking p99", "WaitSet fd() in epoll, " + n + " rings", "p99_us",
                 "blocking peek, 1 ring", "p99_us", std::nullopt});
    return c;
  });
  const std::vector<MetricSpec> serve_metrics{MetricSpec{"msg_s", "kmsg/s", 1e-3, 1},
                                              MetricSpec{"cpu_s", "consumer CPU s", 1.0, 3},
                                              MetricSpec{"cpu_us", "CPU µs/msg", 1.0, 2}};
  const auto add_serve_ratios = [&](Comparison& c, const std::string& load) {
    c.add_ratio(
        {"set / threads msg/s, " + load, set_case, "msg_s", threads_case, "msg_s", std::nullopt});
    c.add_ratio(
        {"set / threads CPU s, " + load, set_case, "cpu_s", threads_case, "cpu_s", std::nullopt});
  };
  comparisons.emplace_back([&] {
    Comparison c(fmt::format("serving {} rings at 100% load ({} messages per run, the producer "
                             "as fast as the rings take them)",
                             o.members, o.messages),
                 serve_metrics);
    c.add_case(threads_case, [&, full_rates] {
      Measurement m = serve_run(false, o, o.messages, 0);
      full_rates->push_back(*m.get("msg_s"));
      return m;
    });
    c.add_case(set_case, [&] { return serve_run(true, o, o.messages, 0); });
    add_serve_ratios(c, "100%");
    return c;
  });
  comparisons.emplace_back([&, full_rates] {
    const double rate = median(*full_rates) * o.light_percent / 100.0;
    const auto messages =
        std::max<std::uint64_t>(1, static_cast<std::uint64_t>(rate * o.light_ms / 1000.0));
    Comparison c(fmt::format("serving {} rings at {}% load ({:.0f} msg/s, {}% of the threads' "
                             "median 100% rate; {} messages per run)",
                             o.members, o.light_percent, rate, o.light_percent, messages),
                 serve_metrics);
    c.add_case(threads_case, [&, rate, messages] { return serve_run(false, o, messages, rate); });
    c.add_case(set_case, [&, rate, messages] { return serve_run(true, o, messages, rate); });
    add_serve_ratios(c, fmt::format("{}%", o.light_percent));
    return c;
  });
  return shm::bench::run_report(
      {.program = "xproc_waitset",
       .options = o.run,
       .setup = fmt::format("- consumer (every thread of this process) pinned to CPU {}, producer "
                            "process to CPU {}; {} rings of 16 KiB, 8-byte records; rounds {}",
                            o.cpus.self, o.cpus.peer, o.members, o.run.reps),
       .pin_cpu = o.cpus.self,
       .targets_table = true,
       .smoke_ok = "every record of every case arrived, each in its own ring"},
      argc, argv, comparisons);
}

}  // namespace

int main(int argc, char** argv) {
  return shm::bench::guarded_main("xproc_waitset", argc, argv, run);
}
