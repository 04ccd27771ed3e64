// Cross-process Topic benchmarks (issue 39): one publisher process (pinned to
// one CPU) and 1 or 4 subscriber processes (pinned together to another CPU),
// each attaching by name as an independent process would. Three transports,
// interleaved case by case in every round (harness Comparison):
//
//   topic     libshm Topic: try_loan, stamp in place, try_publish (every
//             subscriber Block: nothing is dropped) / try_receive, read in
//             place, drop the Sample
//   iceoryx   iceoryx 2.0 untyped publisher / subscribers, zero copy (loan,
//             stamp in place, publish / take, read in place, release); the
//             publisher waits for a full queue (nothing dropped); the harness
//             runs iox-roudi with memory pools sized for these payloads
//   rings     what a user does today: one SpscRing per subscriber and the
//             publisher copies every sample into each (try_push); each
//             subscriber reads its ring in place (try_peek, release)
//
// Latency (paced): the publisher publishes sample k once every subscriber has
// checked k - 1; one-way latency is the publish call's start (the payload is
// written) -> the subscriber holding the sample, CLOCK_MONOTONIC on both
// sides; the payload is checked after the time is taken. Publisher cost: the
// publisher's time per sample from loan (rings: the stamp of its own buffer)
// to the publish's return, in the same paced run.
// Throughput: the publisher publishes as fast as the queues allow; each
// subscriber counts the samples it checked in its measured window; the rate
// is the slowest subscriber's.
//
// Every sample carries its sequence number in its first and last 8 bytes and
// every subscriber checks it (--smoke: every byte). With more than one
// subscriber the subscribers share one CPU: a subscriber with nothing queued
// yields (sched_yield) instead of spinning, in every transport.
#include "harness/harness.hpp"
#include "harness/result.hpp"
#include "harness/stream.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"
#include "shm/topic/topic.hpp"

#ifndef LIBSHM_BENCH_ICEORYX
#define LIBSHM_BENCH_ICEORYX 0
#endif
#if LIBSHM_BENCH_ICEORYX
#include "peers/iceoryx_peer.hpp"
#endif

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <sched.h>
#include <unistd.h>

namespace {

using namespace shm::bench;

constexpr std::size_t kMaxSubscribers = 8;

constexpr std::string_view kUsage =
    R"(xproc_topic: cross-process Topic benchmarks against iceoryx and per-subscriber rings

usage: xproc_topic [--quick | --smoke] [options]

  --quick            3 rounds, 1000 latency samples, 100 ms of throughput per case
  (default)          5 rounds, 2000 latency samples, 200 ms of throughput per case
  --smoke            1 round of a few samples per case, every byte verified;
                     asserts nothing about speed
  --reps N           rounds (each round runs every case once, interleaved)
  --sizes LIST       payload sizes (default 64,4096,65536,1048576)
  --subscribers LIST subscriber counts (default 1,4; at most 8)
  --samples N        latency samples per subscriber per case (after 10% warm-up)
  --duration-ms D    measured throughput time per case (after D/4 of warm-up)
  --queue Q          queue depth per subscriber (default 16): the topic's
                     queue_depth, iceoryx's queueCapacity, each ring holds >= Q
  --only WHAT        latency | throughput
  --no-iceoryx       leave iceoryx out (it needs iox-roudi)
  --cpus A,B         the publisher on A, every subscriber on B
  --csv FILE         also write every per-round value to FILE
  --check-targets    exit 3 when a target ratio is missed
)";

struct Options {
  RunOptions run;
  std::vector<std::size_t> sizes{64, 4096, 65536, 1048576};
  std::vector<std::size_t> subscribers{1, 4};
  std::size_t samples = 2000;
  std::size_t warm = 200;
  std::uint64_t duration_ns = 200'000'000;
  std::uint64_t warmup_ns = 50'000'000;
  std::uint64_t min_count = 200;  // throughput: at least this many samples
  std::uint64_t queue = 16;
  bool latency = true, throughput = true;
  bool iceoryx = LIBSHM_BENCH_ICEORYX != 0;
  CpuPair cpus;

  [[nodiscard]] bool smoke() const { return run.smoke; }
  [[nodiscard]] std::chrono::milliseconds run_limit() const {
    return std::chrono::milliseconds((warmup_ns + duration_ns) / 1'000'000 + 30'000);
  }
  [[nodiscard]] std::chrono::seconds watchdog_limit() const {
    return std::chrono::duration_cast<std::chrono::seconds>(run_limit()) + std::chrono::seconds(10);
  }
};

Options parse_options(int argc, char** argv) {
  Args args(argc, argv);
  Options o;
  o.run = parse_run_options(args, 5, 3);
  if (o.run.quick) {
    o.samples = 1000;
    o.duration_ns = 100'000'000;
  }
  if (o.run.smoke) {  // every byte stamped and checked, at -O0 in the test lane
    o.samples = 8;
    o.duration_ns = 1'000'000;
    o.min_count = 8;
  }
  o.sizes = parse_sizes(args.value("--sizes", "64,4096,65536,1048576"));
  o.subscribers = parse_sizes(args.value("--subscribers", "1,4"));
  o.samples = static_cast<std::size_t>(args.int_value("--samples", static_cast<int>(o.samples)));
  o.duration_ns = static_cast<std::uint64_t>(
      args.double_value("--duration-ms", static_cast<double>(o.duration_ns) / 1e6) * 1e6);
  o.warmup_ns = o.duration_ns / 4;
  o.queue = static_cast<std::uint64_t>(args.int_value("--queue", 16));
  const std::string only = args.value("--only", "");
  if (!only.empty()) {
    o.latency = only.find("latency") != std::string::npos;
    o.throughput = only.find("throughput") != std::string::npos;
  }
  if (args.flag("--no-iceoryx")) o.iceoryx = false;
  o.cpus = choose_cpus(args.value("--cpus", ""));
  args.finish(kUsage);
  o.warm = std::max<std::size_t>(o.samples / 10, 2);
  for (std::size_t s : o.sizes)
    if (s < 16) throw BenchError(fmt::format("size {}: at least 16 bytes", s));
  for (std::size_t n : o.subscribers)
    if (n > kMaxSubscribers)
      throw BenchError(fmt::format("{} subscribers: at most {}", n, kMaxSubscribers));
  if (o.queue < 2 || o.queue > 4096) throw BenchError("--queue must be in [2, 4096]");
  if (o.samples < 1) throw BenchError("--samples must be at least 1");
  return o;
}

std::string size_label(std::size_t s) {
  if (s >= (1u << 20) && s % (1u << 20) == 0) return fmt::format("{} MiB", s >> 20);
  if (s >= 1024 && s % 1024 == 0) return fmt::format("{} KiB", s >> 10);
  return fmt::format("{} B", s);
}

std::string unique_name(std::string_view what) {
  static int counter = 0;
  return fmt::format("xt-{}-{}-{}", what, ::getpid(), counter++);
}

// The wait of a side that found nothing to do: a pause when it has its CPU to
// itself, a yield when subscribers share one (the others may have work).
class Waiter {
 public:
  Waiter(bool yield, std::chrono::milliseconds limit, std::string_view what)
      : yield_(yield), deadline_(limit), what_(what) {}
  void wait() {
    if (yield_)
      ::sched_yield();
    else
      spin_pause();
    if (deadline_.expired_every())
      throw BenchError(fmt::format("{}: no progress past the run limit", what_));
  }

 private:
  bool yield_;
  Deadline deadline_;
  std::string_view what_;
};

// ---------------------------------------------------------------- transports
//
// A channel is made in the harness process before any fork. The publisher's
// end: prepare(size) -> the writable payload, commit() publishes it. A
// subscriber's end: try_take() -> the sample in place or nullopt, release().

class TopicChannel {
 public:
  TopicChannel(const Options& o, std::size_t size, std::size_t subscribers)
      : name_(unique_name("topic")), limit_(o.run_limit()) {
    constexpr std::uint64_t kHeld = 2;
    const shm::TopicParams params{.max_sample_bytes = size,
                                  .chunks = 8 + subscribers * (o.queue + kHeld),
                                  .queue_depth = o.queue,
                                  .history = 0,
                                  .max_held = kHeld};
    (void)value_or_throw(shm::create_topic(name_, params), "create_topic");
  }
  TopicChannel(const TopicChannel&) = delete;
  TopicChannel& operator=(const TopicChannel&) = delete;
  ~TopicChannel() { (void)shm::Segment::unlink(name_); }

  class Tx {
   public:
    Tx(const std::string& name, std::chrono::milliseconds limit)
        : p_(value_or_throw(shm::TopicPublisher::open(name), "open publisher")),
          waiter_(false, limit, "topic publisher") {}
    std::span<std::byte> prepare(std::size_t size) {
      for (;;) {
        auto r = value_or_throw(p_.try_loan(size), "try_loan");
        if (r) {
          loan_ = std::move(*r);
          return loan_.bytes();
        }
        waiter_.wait();  // the pool is empty: subscribers still hold or queue it
      }
    }
    void commit() {
      // Full (a Block subscriber's queue is full) leaves the loan with us.
      while (value_or_throw(p_.try_publish(std::move(loan_)), "try_publish").status !=
             shm::PublishStatus::Published)
        waiter_.wait();
    }

   private:
    shm::TopicPublisher p_;
    shm::LoanedSample loan_;  // dropped before p_
    Waiter waiter_;
  };

  class Rx {
   public:
    Rx(const std::string& name, bool yield, std::chrono::milliseconds limit)
        : s_(value_or_throw(shm::TopicSubscriber::open(name, shm::TopicOverflow::Block),
                            "open subscriber")),
          waiter_(yield, limit, "topic subscriber") {}
    std::optional<std::span<const std::byte>> try_take() {
      auto r = value_or_throw(s_.try_receive(), "try_receive");
      if (!r) return std::nullopt;
      held_ = std::move(*r);
      return held_.bytes();
    }
    void release() { held_.release(); }
    Waiter& waiter() { return waiter_; }

   private:
    shm::TopicSubscriber s_;
    shm::Sample held_;  // dropped before s_
    Waiter waiter_;
  };

  [[nodiscard]] std::unique_ptr<Tx> tx() const { return std::make_unique<Tx>(name_, limit_); }
  [[nodiscard]] std::unique_ptr<Rx> rx(std::size_t /*i*/, bool yield) const {
    return std::make_unique<Rx>(name_, yield, limit_);
  }

 private:
  std::string name_;
  std::chrono::milliseconds limit_;
};

// One SpscRing per subscriber, each of at least `queue` records; the
// publisher stamps its own buffer and copies it into every ring.
class RingsChannel {
 public:
  RingsChannel(const Options& o, std::size_t size, std::size_t subscribers)
      : size_(size), limit_(o.run_limit()) {
    const std::uint64_t capacity = std::bit_ceil(
        std::max<std::uint64_t>(o.queue * shm::ring::record_size(size), 2 * size + 64));
    for (std::size_t i = 0; i < subscribers; ++i) {
      names_.push_back(unique_name("ring"));
      (void)value_or_throw(shm::create_ring(names_.back(), {.capacity_bytes = capacity}),
                           "create_ring");
    }
  }
  RingsChannel(const RingsChannel&) = delete;
  RingsChannel& operator=(const RingsChannel&) = delete;
  ~RingsChannel() {
    for (const auto& n : names_) (void)shm::Segment::unlink(n);
  }

  class Tx {
   public:
    Tx(const std::vector<std::string>& names, std::size_t size, std::chrono::milliseconds limit)
        : buf_(size), waiter_(false, limit, "ring publisher") {
      prefault(buf_, true);
      for (const auto& n : names) {
        p_.push_back(value_or_throw(shm::RingProducer::open(n), "open producer"));
        prefault(p_.back().segment().data(), true);
      }
    }
    std::span<std::byte> prepare(std::size_t /*size*/) { return buf_; }
    void commit() {
      for (auto& p : p_)
        while (!value_or_throw(p.try_push(buf_), "try_push")) waiter_.wait();
    }

   private:
    std::vector<std::byte> buf_;
    std::vector<shm::RingProducer> p_;
    Waiter waiter_;
  };

  class Rx {
   public:
    Rx(const std::string& name, bool yield, std::chrono::milliseconds limit)
        : c_(value_or_throw(shm::RingConsumer::open(name), "open consumer")),
          waiter_(yield, limit, "ring subscriber") {}
    std::optional<std::span<const std::byte>> try_take() {
      return value_or_throw(c_.try_peek(), "try_peek");
    }
    void release() { c_.release(); }
    Waiter& waiter() { return waiter_; }

   private:
    shm::RingConsumer c_;
    Waiter waiter_;
  };

  [[nodiscard]] std::unique_ptr<Tx> tx() const {
    return std::make_unique<Tx>(names_, size_, limit_);
  }
  [[nodiscard]] std::unique_ptr<Rx> rx(std::size_t i, bool yield) const {
    return std::make_unique<Rx>(names_[i], yield, limit_);
  }

 private:
  std::size_t size_;
  std::chrono::milliseconds limit_;
  std::vector<std::string> names_;
};

#if LIBSHM_BENCH_ICEORYX
// The chunk sizes of the RouDi config this harness writes: each payload size
// plus room for iceoryx's chunk header, enough chunks for 8 subscribers'
// queues of 64 and their held samples.
std::vector<std::pair<std::size_t, std::size_t>> iceoryx_pools(const Options& o) {
  std::vector<std::pair<std::size_t, std::size_t>> pools;
  const std::size_t count = kMaxSubscribers * (o.queue + 2) + 16;
  for (std::size_t s : o.sizes) pools.emplace_back((s + 1024 + 63) / 64 * 64, count);
  std::sort(pools.begin(), pools.end());
  pools.erase(std::unique(pools.begin(), pools.end(),
                          [](const auto& a, const auto& b) { return a.first == b.first; }),
              pools.end());
  return pools;
}

class IceoryxChannel {
 public:
  IceoryxChannel(const Options& o, std::size_t /*size*/, std::size_t /*subscribers*/)
      : topic_(unique_name("iox")), queue_(o.queue), limit_(o.run_limit()) {}

  class Tx {
   public:
    Tx(const std::string& topic, std::chrono::milliseconds limit) : s_(topic, limit) {}
    std::span<std::byte> prepare(std::size_t size) { return loaned_ = s_.loan(size); }
    void commit() { s_.publish(loaned_); }

   private:
    iceoryx::Sender s_;
    std::span<std::byte> loaned_;
  };

  class Rx {
   public:
    Rx(const std::string& topic, std::size_t queue, bool yield, std::chrono::milliseconds limit)
        : r_(topic, queue, limit), waiter_(yield, limit, "iceoryx subscriber") {
      r_.wait_subscribed(limit);
    }
    std::optional<std::span<const std::byte>> try_take() {
      auto t = r_.try_take();
      if (t) taken_ = *t;
      return t;
    }
    void release() { r_.release(taken_); }
    Waiter& waiter() { return waiter_; }

   private:
    iceoryx::Receiver r_;
    std::span<const std::byte> taken_;
    Waiter waiter_;
  };

  [[nodiscard]] std::unique_ptr<Tx> tx() const { return std::make_unique<Tx>(topic_, limit_); }
  [[nodiscard]] std::unique_ptr<Rx> rx(std::size_t /*i*/, bool yield) const {
    return std::make_unique<Rx>(topic_, queue_, yield, limit_);
  }

 private:
  std::string topic_;
  std::size_t queue_;
  std::chrono::milliseconds limit_;
};
#endif

// ---------------------------------------------------------------- runs

// Per subscriber, in the shared control block: its progress and what it measured.
struct alignas(64) SubscriberSlot {
  std::atomic<std::uint64_t> acked{0};       // samples checked so far (latency)
  std::atomic<std::uint64_t> counted{0};     // samples in its measured window
  std::atomic<std::uint64_t> elapsed_ns{0};  // length of that window
};
struct Control {
  StartGate gate;
  SubscriberSlot subs[kMaxSubscribers];
};

// Timestamps of the paced runs, in a shared mapping made before any fork:
// publish start per sample, receive per subscriber and sample, publisher cost.
class Times {
 public:
  explicit Times(std::size_t per_run)
      : n_(per_run),
        bytes_((kMaxSubscribers + 2) * n_ * sizeof(std::uint64_t)),
        base_(static_cast<std::uint64_t*>(map_shared_anonymous(bytes_))) {}
  Times(const Times&) = delete;
  Times& operator=(const Times&) = delete;
  ~Times() { unmap(base_, bytes_); }
  [[nodiscard]] std::uint64_t* sent() const { return base_; }
  [[nodiscard]] std::uint64_t* cost() const { return base_ + n_; }
  [[nodiscard]] std::uint64_t* received(std::size_t sub) const { return base_ + (2 + sub) * n_; }

 private:
  std::size_t n_;
  std::size_t bytes_;
  std::uint64_t* base_;
};

struct Env {
  const Options& o;
  SharedBlock<Control>& control;
  const Times& times;
  const TickClock& clock;
};

void finish(Peer& peer, const Options& o) {
  const int rc = peer.wait(o.run_limit());
  if (rc != 0)
    throw BenchError(
        rc < 0 ? std::string("subscriber timed out and was killed")
               : fmt::format("subscriber failed with status {} (see its message above)", rc));
}

// The next sample on `rx`, waiting as its waiter does.
template <class Rx>
[[gnu::always_inline]] inline std::span<const std::byte> take(Rx& rx) {
  std::optional<std::span<const std::byte>> s;
  while (!(s = rx.try_take())) rx.waiter().wait();
  return *s;
}

void check_size(std::span<const std::byte> s, std::size_t size) {
  if (s.size() != size)
    throw BenchError(fmt::format("sample of {} bytes, expected {}", s.size(), size));
}

// Forks the subscribers (all on the peer CPU), runs `publish` here once every
// subscriber and this process passed the start gate, and reaps them.
template <class Channel, class Subscriber, class Publish>
void run_processes(const Env& env, const Channel& ch, std::size_t n, Subscriber&& subscriber,
                   Publish&& publish) {
  const Options& o = env.o;
  const Watchdog watchdog(o.watchdog_limit());
  env.control.reset();
  std::vector<Peer> peers;
  for (std::size_t i = 0; i < n; ++i) {
    peers.push_back(Peer::fork_pinned(o.cpus.peer, [&, i]() -> int {
      auto rx = ch.rx(i, n > 1);
      if (!env.control->gate.arrive_and_wait(static_cast<std::uint32_t>(n + 1), o.run_limit()))
        throw BenchError("start gate timed out");
      subscriber(*rx, env.control->subs[i], i);
      return 0;
    }));
  }
  {
    auto tx = ch.tx();
    if (!env.control->gate.arrive_and_wait(static_cast<std::uint32_t>(n + 1), o.run_limit()))
      throw BenchError("start gate timed out");
    publish(*tx);
    for (auto& p : peers) finish(p, o);
  }
}

// Paced: sample k goes out once every subscriber checked k - 1.
template <class Channel>
Measurement latency_run(const Env& env, std::size_t size, std::size_t n, const Channel& ch) {
  const Options& o = env.o;
  const std::size_t total = o.warm + o.samples;
  const Times& t = env.times;
  run_processes(
      env, ch, n,
      [&](auto& rx, SubscriberSlot& slot, std::size_t i) {
        std::uint64_t* received = t.received(i);
        for (std::uint64_t expected = 0;; ++expected) {
          const std::span<const std::byte> s = take(rx);
          const std::uint64_t now = now_ns();  // the time first, then the checks
          if (sequence_of(s) == kStop) break;
          received[expected] = now;
          check_size(s, size);
          check(s, expected, o.smoke());
          rx.release();
          // release: the publisher's acquire sees the sample checked.
          slot.acked.store(expected + 1, std::memory_order_release);
        }
        rx.release();
      },
      [&](auto& tx) {
        Deadline deadline(o.run_limit());
        auto wait_acks = [&](std::uint64_t k) {
          for (std::size_t i = 0; i < n; ++i)
            // acquire: pairs with the subscriber's release store.
            while (env.control->subs[i].acked.load(std::memory_order_acquire) < k) {
              spin_pause();
              if (deadline.expired_every()) throw BenchError("a subscriber stopped acknowledging");
            }
        };
        for (std::uint64_t k = 0; k < total; ++k) {
          wait_acks(k);
          const std::uint64_t c0 = TickClock::ticks();
          const std::span<std::byte> m = tx.prepare(size);
          stamp(m, k, o.smoke());
          t.sent()[k] = now_ns();
          tx.commit();
          t.cost()[k] = TickClock::ticks() - c0;
        }
        wait_acks(total);
        stamp(tx.prepare(size), kStop, false);
        tx.commit();
      });
  std::vector<double> lat, cost;
  lat.reserve(n * o.samples);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t k = o.warm; k < total; ++k)
      lat.push_back(static_cast<double>(t.received(i)[k] - t.sent()[k]));
  for (std::size_t k = o.warm; k < total; ++k) cost.push_back(env.clock.to_ns(t.cost()[k]));
  const Summary l = summarize(std::move(lat));
  const Summary c = summarize(std::move(cost));
  return Measurement()
      .set("p50", l.p50)
      .set("p99", l.p99)
      .set("pub_ns", c.p50)
      .set("pub_p99", c.p99);
}

// Flat out for warm-up + duration (at least min_count samples), then kStop;
// the rate is the slowest subscriber's.
template <class Channel>
Measurement throughput_run(const Env& env, std::size_t size, std::size_t n, const Channel& ch) {
  const Options& o = env.o;
  run_processes(
      env, ch, n,
      [&](auto& rx, SubscriberSlot& slot, std::size_t /*i*/) {
        const std::uint64_t start = now_ns();
        std::uint64_t expected = 0, t0 = start, count0 = 0;
        bool measuring = false;
        for (;;) {
          const std::span<const std::byte> s = take(rx);
          if (sequence_of(s) == kStop) break;
          check_size(s, size);
          check(s, expected, o.smoke());
          rx.release();
          ++expected;
          if (!measuring && (expected & 15) == 0) {
            const std::uint64_t now = now_ns();
            if (now - start >= o.warmup_ns) {
              measuring = true;
              t0 = now;
              count0 = expected;
            }
          }
        }
        rx.release();
        const std::uint64_t t1 = now_ns();
        // relaxed: read by the harness after the subscriber exited.
        slot.counted.store(expected - count0, std::memory_order_relaxed);
        slot.elapsed_ns.store(t1 - t0, std::memory_order_relaxed);
      },
      [&](auto& tx) {
        const std::uint64_t end = now_ns() + o.warmup_ns + o.duration_ns;
        std::uint64_t seq = 0;
        do {
          for (int k = 0; k < 16; ++k) {
            stamp(tx.prepare(size), seq++, o.smoke());
            tx.commit();
          }
        } while (now_ns() < end || seq < o.min_count);
        stamp(tx.prepare(size), kStop, false);
        tx.commit();
      });
  double rate = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& slot = env.control->subs[i];
    const auto counted = static_cast<double>(slot.counted.load(std::memory_order_relaxed));
    const auto secs = static_cast<double>(slot.elapsed_ns.load(std::memory_order_relaxed)) / 1e9;
    const double r = secs > 0 ? counted / secs : 0.0;
    rate = i == 0 ? r : std::min(rate, r);
  }
  return Measurement().set("msg_s", rate).set("bytes_s", rate * static_cast<double>(size));
}

// ---------------------------------------------------------------- comparisons

enum class Transport { Topic, Iceoryx, Rings };

std::string_view transport_name(Transport t) {
  return t == Transport::Topic ? "topic" : t == Transport::Iceoryx ? "iceoryx" : "rings";
}

std::string case_name(Transport t, std::size_t size, std::size_t n) {
  return fmt::format("{} {} ×{}", transport_name(t), size_label(size), n);
}

template <template <class> class Run>
Measurement run_case(const Env& env, Transport t, std::size_t size, std::size_t n) {
  switch (t) {
    case Transport::Topic: {
      TopicChannel ch(env.o, size, n);
      return Run<TopicChannel>::run(env, size, n, ch);
    }
    case Transport::Rings: {
      RingsChannel ch(env.o, size, n);
      return Run<RingsChannel>::run(env, size, n, ch);
    }
    case Transport::Iceoryx:
#if LIBSHM_BENCH_ICEORYX
      // A fresh child: iceoryx registers a process with RouDi once, and a
      // fork must not copy that registration (the subscribers fork from it
      // before it registers).
      return measure_in_child(env.o.cpus.self, env.o.run_limit(), [&env, size, n] {
        IceoryxChannel ch(env.o, size, n);
        return Run<IceoryxChannel>::run(env, size, n, ch);
      });
#else
      break;
#endif
  }
  throw BenchError("transport not built");
}

template <class C>
struct LatencyRun {
  static Measurement run(const Env& env, std::size_t size, std::size_t n, const C& ch) {
    return latency_run(env, size, n, ch);
  }
};
template <class C>
struct ThroughputRun {
  static Measurement run(const Env& env, std::size_t size, std::size_t n, const C& ch) {
    return throughput_run(env, size, n, ch);
  }
};

std::vector<Transport> transports(const Options& o) {
  std::vector<Transport> t{Transport::Topic};
  if (o.iceoryx) t.push_back(Transport::Iceoryx);
  t.push_back(Transport::Rings);
  return t;
}

std::optional<Target> at_most(double bound) {
  return Target{Goal::AtMost, bound};
}

// Every size and subscriber count in one comparison, so that the targets
// across sizes (flat latency) and counts (publisher cost) are same-round ratios.
Comparison latency_comparison(const Env& env) {
  const Options& o = env.o;
  Comparison c(
      fmt::format("One-way latency and publisher cost (publisher CPU {}, subscribers CPU {})",
                  o.cpus.self, o.cpus.peer),
      {{"p50", "latency p50 ns", 1, 0},
       {"p99", "latency p99 ns", 1, 0},
       {"pub_ns", "publisher ns/sample p50", 1, 0},
       {"pub_p99", "publisher ns/sample p99", 1, 0}});
  for (std::size_t n : o.subscribers)
    for (std::size_t size : o.sizes)
      for (Transport t : transports(o))
        c.add_case(case_name(t, size, n),
                   [&env, t, size, n] { return run_case<LatencyRun>(env, t, size, n); });
  for (std::size_t n : o.subscribers) {
    for (std::size_t size : o.sizes) {
      const std::string topic = case_name(Transport::Topic, size, n);
      if (o.iceoryx) {
        const std::string iox = case_name(Transport::Iceoryx, size, n);
        c.add_ratio({fmt::format("{} ×{}: topic / iceoryx p50", size_label(size), n), topic, "p50",
                     iox, "p50", at_most(0.25)});
        c.add_ratio({fmt::format("{} ×{}: topic / iceoryx p99", size_label(size), n), topic, "p99",
                     iox, "p99", at_most(0.25)});
      }
      const std::string rings = case_name(Transport::Rings, size, n);
      c.add_ratio({fmt::format("{} ×{}: topic / rings p50", size_label(size), n), topic, "p50",
                   rings, "p50", std::nullopt});
    }
    const std::size_t lo = o.sizes.front(), hi = o.sizes.back();
    if (hi > lo)
      for (Transport t : transports(o))
        c.add_ratio({fmt::format("×{}: {} p50 {} / {}", n, transport_name(t), size_label(hi),
                                 size_label(lo)),
                     case_name(t, hi, n), "p50", case_name(t, lo, n), "p50",
                     t == Transport::Topic ? at_most(1.5) : std::nullopt});
  }
  const std::size_t one = o.subscribers.front(), many = o.subscribers.back();
  if (many > one)
    for (std::size_t size : o.sizes)
      for (Transport t : transports(o))
        c.add_ratio({fmt::format("{}: {} publisher ns ×{} / ×{}", size_label(size),
                                 transport_name(t), many, one),
                     case_name(t, size, many), "pub_ns", case_name(t, size, one), "pub_ns",
                     t == Transport::Topic ? at_most(2.0) : std::nullopt});
  return c;
}

Comparison throughput_comparison(const Env& env) {
  const Options& o = env.o;
  Comparison c(fmt::format("Throughput (publisher CPU {}, subscribers CPU {}; the slowest "
                           "subscriber's rate)",
                           o.cpus.self, o.cpus.peer),
               {{"msg_s", "k samples/s", 1e-3, 1}, {"bytes_s", "GB/s per subscriber", 1e-9, 2}});
  for (std::size_t n : o.subscribers)
    for (std::size_t size : o.sizes)
      for (Transport t : transports(o))
        c.add_case(case_name(t, size, n),
                   [&env, t, size, n] { return run_case<ThroughputRun>(env, t, size, n); });
  for (std::size_t n : o.subscribers) {
    for (std::size_t size : o.sizes) {
      const std::string topic = case_name(Transport::Topic, size, n);
      c.add_ratio(
          {fmt::format("{} ×{}: topic / rings", size_label(size), n), topic, "msg_s",
           case_name(Transport::Rings, size, n), "msg_s",
           size >= 65536 ? std::optional<Target>(Target{Goal::AtLeast, 10.0}) : std::nullopt});
      if (o.iceoryx)
        c.add_ratio({fmt::format("{} ×{}: topic / iceoryx", size_label(size), n), topic, "msg_s",
                     case_name(Transport::Iceoryx, size, n), "msg_s", std::nullopt});
    }
  }
  return c;
}

int run(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  ScratchRoot root;
#if LIBSHM_BENCH_ICEORYX
  // Before this process pins itself: RouDi's threads stay unpinned.
  std::optional<iceoryx::Roudi> roudi;
  if (o.iceoryx) {
    const std::string config = root.path() + "/roudi.toml";
    iceoryx::write_config(config, iceoryx_pools(o));
    roudi.emplace(root.path() + "/iox-roudi.log", std::chrono::seconds(20), config);
  }
#endif
  const TickClock clock;
  Times times(o.warm + o.samples);
  SharedBlock<Control> control;
  const Env env{o, control, times, clock};
  std::vector<std::function<Comparison()>> comparisons;
  if (o.latency) comparisons.emplace_back([&env] { return latency_comparison(env); });
  if (o.throughput) comparisons.emplace_back([&env] { return throughput_comparison(env); });
  const std::string setup = fmt::format(
      "- pinned: publisher CPU {}, every subscriber CPU {} (with several subscribers they share "
      "it, and one with nothing queued yields); rounds {}; latency: {} samples per subscriber "
      "after {} warm-up; throughput: {} ms after {} ms warm-up; queue depth {}; iceoryx {}",
      o.cpus.self, o.cpus.peer, o.run.reps, o.samples, o.warm,
      static_cast<double>(o.duration_ns) / 1e6, static_cast<double>(o.warmup_ns) / 1e6, o.queue,
      o.iceoryx ? "2.0 (iox-roudi started by the harness)" : "left out");
  return run_report(Report{.program = "xproc_topic",
                           .options = o.run,
                           .setup = setup,
                           .pin_cpu = o.cpus.self,
                           .targets_table = true,
                           .smoke_ok = "every sample arrived intact at every subscriber",
                           .prepare = {}},
                    argc, argv, comparisons);
}

}  // namespace

int main(int argc, char** argv) {
  return guarded_main("xproc_topic", argc, argv, run);
}
