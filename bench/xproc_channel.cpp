// Cross-process Channel (ADR-0010) throughput against the foundation's
// SpscRing in the same run: producer and consumer are separate processes
// (fork, no exec), pinned to two CPUs, each attaching by name.
//
//   Cases per message size (64 B and 1 KiB by default):
//     ring spin        RingProducer::try_push / RingConsumer::try_pop (copy out)
//     channel spin     ChannelProducer::try_send / try_receive_into (copy out,
//                      CRC checked in the same pass): the counterpart of try_pop
//     channel lease    try_send / try_receive (zero copy), then the lease is
//                      copied out and given back (two passes over the payload)
//     ring blocking    push / pop with a timeout (spin, then futex park)
//     channel blocking send / receive_into with a timeout
//     ... coalesced    the same two channel cases with receive coalescing
//                      (ChannelConsumer::set_coalescing: --coalesce N payloads
//                      or --coalesce-us U microseconds, 256 / 20 by default)
//   Channel pages are sized for a rotation every --events-per-page messages
//   (1000). Both transports get the same in-flight byte budget: the ring's
//   capacity is the smallest power of two >= the P pages.
//   The channel additionally computes CRC32C of every payload on both sides
//   (that is part of what is measured).
//
// Every message carries its sequence number in its first and last 8 bytes and
// the receiver checks it (--smoke: every byte). Cases are interleaved run by
// run (harness Comparison); the per-event cost ratio channel/ring is taken
// within a round, then its median and p10/p90 over rounds are reported
// (target: <= 1.10). Output: Markdown on stdout, progress on stderr.
#include "harness/harness.hpp"
#include "harness/stream.hpp"
#include "shm/channel/consumer.hpp"
#include "shm/channel/producer.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"

#include <fmt/format.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

using namespace shm::bench;
using namespace std::chrono_literals;

constexpr auto kBlockingTimeout = std::chrono::seconds(5);

constexpr std::string_view kUsage =
    R"(xproc_channel: cross-process Channel vs SpscRing throughput (same run)

usage: xproc_channel [--quick | --smoke] [options]

  --quick              3 rounds of 150 ms per case
  (default)            9 rounds of 400 ms per case
  --smoke              1 round of a few ms per case, every byte verified
  --reps N             rounds (each runs every case once, interleaved)
  --duration-ms D      measured time per case and round
  --warmup-ms W        unmeasured time before it (default: duration / 5)
  --sizes LIST         message sizes (default 64,1024)
  --events-per-page E  messages per channel page: rotation period (default 1000)
  --pages P            channel page slots (default 4)
  --cpus A,B           this process on A, the peer on B (default: first two allowed)
  --no-blocking        only the spin cases
  --coalesce N         the coalesced cases' batch (default 256 payloads)
  --coalesce-us U      ... and their delay bound (default 20 microseconds)
  --csv FILE           also write every per-round value to FILE
  --check-targets      exit 3 when the 1.10 per-event cost target is missed
)";

struct Options {
  RunOptions run;
  std::uint64_t duration_ns = 400'000'000;
  std::uint64_t warmup_ns = 80'000'000;
  std::vector<std::size_t> sizes{64, 1024};
  std::uint32_t events_per_page = 1000;
  std::uint32_t pages = 4;
  CpuPair cpus;
  bool blocking = true;
  shm::Coalescing coalescing{.descriptors = 256, .max_delay = std::chrono::microseconds(20)};
  std::uint64_t min_count = 100;
  bool smoke = false;  // run.smoke, where harness/stream.hpp reads it (o.smoke)

  [[nodiscard]] std::chrono::milliseconds run_limit() const {
    return std::chrono::milliseconds((warmup_ns + duration_ns) / 1'000'000 + 20'000);
  }
  [[nodiscard]] std::chrono::seconds watchdog_limit() const {
    return std::chrono::duration_cast<std::chrono::seconds>(run_limit()) + std::chrono::seconds(10);
  }
};

Options parse_options(int argc, char** argv) {
  Args args(argc, argv);
  Options o;
  o.run = parse_run_options(args, 9, 3);
  if (o.run.quick) o.duration_ns = 150'000'000;
  o.smoke = o.run.smoke;
  if (o.smoke) {
    o.duration_ns = 5'000'000;
    o.min_count = 5'000;  // enough for a few rotations
  }
  o.duration_ns = static_cast<std::uint64_t>(
      args.double_value("--duration-ms", static_cast<double>(o.duration_ns) / 1e6) * 1e6);
  o.warmup_ns = static_cast<std::uint64_t>(
      args.double_value("--warmup-ms", static_cast<double>(o.duration_ns) / 5e6) * 1e6);
  o.sizes = parse_sizes(args.value("--sizes", "64,1024"));
  o.events_per_page = static_cast<std::uint32_t>(args.int_value("--events-per-page", 1000));
  o.pages = static_cast<std::uint32_t>(args.int_value("--pages", 4));
  o.cpus = choose_cpus(args.value("--cpus", ""));
  o.blocking = !args.flag("--no-blocking");
  o.coalescing.descriptors = static_cast<std::uint32_t>(
      args.int_value("--coalesce", static_cast<int>(o.coalescing.descriptors)));
  o.coalescing.max_delay = std::chrono::microseconds(args.int_value("--coalesce-us", 20));
  args.finish(kUsage);
  if (o.events_per_page < 1) throw BenchError("--events-per-page must be at least 1");
  if (!std::has_single_bit(o.pages) || o.pages < 2)
    throw BenchError("--pages must be a power of two >= 2");
  for (std::size_t s : o.sizes)
    if (s < 16 || s > (1u << 20))
      throw BenchError(fmt::format("message size {} outside [16, 1 MiB]", s));
  return o;
}

// ---------------------------------------------------------------- helpers

template <class T>
T value_or_throw(shm::Result<T> r, std::string_view what) {
  if (!r) throw BenchError(fmt::format("{}: {}", what, r.error().what()));
  return std::move(*r);
}

std::string unique_name(std::string_view what) {
  static int counter = 0;
  return fmt::format("xc-{}-{}-{}", what, ::getpid(), counter++);
}

enum class Mode { Spin, Blocking, Lease };

// Channel geometry for a message size: a page holds events_per_page messages.
shm::ChannelParams channel_params(const Options& o, std::size_t size) {
  const std::uint64_t page = shm::round_up(size, shm::page::kPayloadAlign) * o.events_per_page;
  const std::uint64_t in_flight = std::uint64_t{o.pages} * o.events_per_page;
  return {.pages = o.pages,
          .page_bytes = page,
          .descriptors_per_page = o.events_per_page,
          .ring_cells = static_cast<std::uint32_t>(std::bit_ceil(in_flight))};
}
// The ring's capacity: the same in-flight bytes as the channel's pool.
std::uint64_t ring_bytes(const Options& o, std::size_t size) {
  const std::uint64_t records = std::uint64_t{o.pages} * o.events_per_page;
  return std::bit_ceil(records * shm::ring::record_size(size));
}

// ---------------------------------------------------------------- transports

class RingTx {
 public:
  RingTx(shm::RingProducer p, Mode mode, std::chrono::milliseconds limit)
      : p_(std::move(p)), mode_(mode), deadline_(limit) {
    prefault(p_.segment().data().subspan(shm::ring::kBufferOffset), true);
  }
  void send(std::span<const std::byte> m) {
    if (mode_ == Mode::Blocking) {
      if (!value_or_throw(p_.push(m, kBlockingTimeout), "push")) throw BenchError("push timed out");
      return;
    }
    while (!value_or_throw(p_.try_push(m), "try_push")) wait_a_little();
  }
  void finish() {}

 private:
  void wait_a_little() {
    spin_pause();
    if (deadline_.expired_every()) throw BenchError("ring stayed full past the run limit");
  }
  shm::RingProducer p_;
  Mode mode_;
  Deadline deadline_;
};

class RingRx {
 public:
  RingRx(shm::RingConsumer c, Mode mode, std::chrono::milliseconds limit)
      : c_(std::move(c)), mode_(mode), deadline_(limit) {
    c_.segment().prefault();
  }
  void recv(std::span<std::byte> out) {
    std::optional<std::size_t> n;
    if (mode_ == Mode::Blocking) {
      n = value_or_throw(c_.pop(out, kBlockingTimeout), "pop");
      if (!n) throw BenchError("pop timed out");
    } else {
      while (!(n = value_or_throw(c_.try_pop(out), "try_pop"))) wait_a_little();
    }
    if (*n != out.size())
      throw BenchError(fmt::format("record of {} bytes, expected {}", *n, out.size()));
  }

 private:
  void wait_a_little() {
    spin_pause();
    if (deadline_.expired_every()) throw BenchError("ring stayed empty past the run limit");
  }
  shm::RingConsumer c_;
  Mode mode_;
  Deadline deadline_;
};

class RingTransport {
 public:
  RingTransport(const Options& o, std::size_t size, Mode mode)
      : name_(unique_name("ring")), mode_(mode), limit_(o.run_limit()) {
    (void)value_or_throw(shm::create_ring(name_, {.capacity_bytes = ring_bytes(o, size)}),
                         "create_ring");
  }
  RingTransport(const RingTransport&) = delete;
  RingTransport& operator=(const RingTransport&) = delete;
  ~RingTransport() { (void)shm::Segment::unlink(name_); }
  [[nodiscard]] RingTx sender() const {
    return {value_or_throw(shm::RingProducer::open(name_), "open producer"), mode_, limit_};
  }
  [[nodiscard]] RingRx receiver() const {
    return {value_or_throw(shm::RingConsumer::open(name_), "open consumer"), mode_, limit_};
  }

 private:
  std::string name_;
  Mode mode_;
  std::chrono::milliseconds limit_;
};

class ChannelTx {
 public:
  ChannelTx(shm::ChannelProducer p, Mode mode, std::chrono::milliseconds limit)
      : p_(std::move(p)), mode_(mode), deadline_(limit) {
    p_.segment().prefault();
  }
  void send(std::span<const std::byte> m) {
    if (mode_ == Mode::Blocking) {
      if (!value_or_throw(p_.send(m, kBlockingTimeout), "send")) throw BenchError("send timed out");
      return;
    }
    while (!value_or_throw(p_.try_send(m), "try_send")) wait_a_little();
  }
  void finish() {
    if (auto ok = p_.finish(); !ok) throw BenchError("finish: " + ok.error().what());
  }
  [[nodiscard]] std::uint64_t rotations() const { return p_.active_epoch(); }

 private:
  void wait_a_little() {
    spin_pause();
    if (deadline_.expired_every()) throw BenchError("channel stayed full past the run limit");
  }
  shm::ChannelProducer p_;
  Mode mode_;
  Deadline deadline_;
};

class ChannelRx {
 public:
  ChannelRx(shm::ChannelConsumer c, Mode mode, std::chrono::milliseconds limit)
      : c_(std::move(c)), mode_(mode), deadline_(limit) {
    c_.segment().prefault();
  }
  void recv(std::span<std::byte> out) {
    if (mode_ == Mode::Lease) return recv_lease(out);
    for (;;) {
      auto r = value_or_throw(mode_ == Mode::Blocking ? c_.receive_into(out, kBlockingTimeout)
                                                      : c_.try_receive_into(out),
                              "receive_into");
      if (r.status == shm::ReceiveStatus::Received) {
        if (r.size != out.size())
          throw BenchError(fmt::format("payload of {} bytes, expected {}", r.size, out.size()));
        return;
      }
      if (r.status == shm::ReceiveStatus::End) throw BenchError("stream ended early");
      if (mode_ == Mode::Blocking) throw BenchError("receive timed out");
      wait_a_little();
    }
  }

 private:
  void recv_lease(std::span<std::byte> out) {
    for (;;) {
      auto r = value_or_throw(c_.try_receive(), "try_receive");
      if (r.status == shm::ReceiveStatus::Received) {
        if (r.lease.size() != out.size())
          throw BenchError(
              fmt::format("payload of {} bytes, expected {}", r.lease.size(), out.size()));
        std::memcpy(out.data(), r.lease.data(), out.size());
        return;  // the lease is given back here
      }
      if (r.status == shm::ReceiveStatus::End) throw BenchError("stream ended early");
      wait_a_little();
    }
  }
  void wait_a_little() {
    spin_pause();
    if (deadline_.expired_every()) throw BenchError("channel stayed empty past the run limit");
  }

  shm::ChannelConsumer c_;
  Mode mode_;
  Deadline deadline_;
};

class ChannelTransport {
 public:
  ChannelTransport(const Options& o, std::size_t size, Mode mode,
                   const shm::Coalescing& coalescing = {})
      : name_(unique_name("chan")), mode_(mode), limit_(o.run_limit()), coalescing_(coalescing) {
    (void)value_or_throw(shm::create_channel(name_, channel_params(o, size)), "create_channel");
  }
  ChannelTransport(const ChannelTransport&) = delete;
  ChannelTransport& operator=(const ChannelTransport&) = delete;
  ~ChannelTransport() { (void)shm::Segment::unlink(name_); }
  [[nodiscard]] ChannelTx sender() const {
    return {value_or_throw(shm::ChannelProducer::open(name_), "open producer"), mode_, limit_};
  }
  [[nodiscard]] ChannelRx receiver() const {
    auto c = value_or_throw(shm::ChannelConsumer::open(name_), "open consumer");
    if (auto ok = c.set_coalescing(coalescing_); !ok)
      throw BenchError("set_coalescing: " + ok.error().what());
    return {std::move(c), mode_, limit_};
  }

 private:
  std::string name_;
  Mode mode_;
  std::chrono::milliseconds limit_;
  shm::Coalescing coalescing_;
};

// ---------------------------------------------------------------- runs

using Control = StreamControl;

// One way: this process sends for warm-up + duration; the peer receives and
// times the measured window from its side.
template <class Transport>
Measurement throughput_run(const Options& o, SharedBlock<Control>& control, std::size_t size,
                           const Transport& t) {
  const Watchdog watchdog(o.watchdog_limit());
  control.reset();
  Control& ctl = *control;
  Peer peer = Peer::fork_pinned(o.cpus.peer, [&]() -> int {
    auto rx = t.receiver();
    std::vector<std::byte> buf(size);
    receive_stream(o, ctl, buf, [&](std::span<std::byte> b) { rx.recv(b); });
    return 0;
  });
  {
    auto tx = t.sender();
    std::vector<std::byte> buf(size);
    send_stream(o, ctl, buf, [&](std::span<const std::byte> b) { tx.send(b); });
    tx.finish();
    const int rc = peer.wait(o.run_limit());
    if (rc != 0) throw BenchError(fmt::format("consumer peer failed with status {}", rc));
  }
  const double rate = stream_rate(ctl);
  return Measurement()
      .set("msg_s", rate)
      .set("ns_msg", rate > 0 ? 1e9 / rate : 0.0)
      .set("bytes_s", rate * static_cast<double>(size));
}

const std::vector<MetricSpec> kMetrics{
    {"msg_s", "Mmsg/s", 1e-6, 2}, {"ns_msg", "ns/msg", 1, 1}, {"bytes_s", "GB/s", 1e-9, 3}};

Comparison comparison(const Options& o, SharedBlock<Control>& control, std::size_t size) {
  const shm::ChannelParams cp = channel_params(o, size);
  Comparison c(
      fmt::format("Throughput, {} B messages (producer CPU {} → consumer CPU {}); channel: "
                  "{} pages of {} B / {} descriptors (a rotation every {} messages), "
                  "ring: {} B",
                  size, o.cpus.self, o.cpus.peer, cp.pages, cp.page_bytes, cp.descriptors_per_page,
                  o.events_per_page, ring_bytes(o, size)),
      kMetrics);
  c.add_case("ring spin", [&o, &control, size] {
    RingTransport t(o, size, Mode::Spin);
    return throughput_run(o, control, size, t);
  });
  c.add_case("channel spin", [&o, &control, size] {
    ChannelTransport t(o, size, Mode::Spin);
    return throughput_run(o, control, size, t);
  });
  c.add_case("channel lease", [&o, &control, size] {
    ChannelTransport t(o, size, Mode::Lease);
    return throughput_run(o, control, size, t);
  });
  c.add_case("channel spin coalesced", [&o, &control, size] {
    ChannelTransport t(o, size, Mode::Spin, o.coalescing);
    return throughput_run(o, control, size, t);
  });
  if (o.blocking) {
    c.add_case("ring blocking", [&o, &control, size] {
      RingTransport t(o, size, Mode::Blocking);
      return throughput_run(o, control, size, t);
    });
    c.add_case("channel blocking", [&o, &control, size] {
      ChannelTransport t(o, size, Mode::Blocking);
      return throughput_run(o, control, size, t);
    });
    c.add_case("channel blocking coalesced", [&o, &control, size] {
      ChannelTransport t(o, size, Mode::Blocking, o.coalescing);
      return throughput_run(o, control, size, t);
    });
  }
  c.add_ratio({"channel spin / ring spin (ns per message)", "channel spin", "ns_msg", "ring spin",
               "ns_msg", Target{Goal::AtMost, 1.10}});
  c.add_ratio({"channel lease / ring spin (ns per message)", "channel lease", "ns_msg", "ring spin",
               "ns_msg", std::nullopt});
  c.add_ratio({"channel spin coalesced / ring spin (ns per message)", "channel spin coalesced",
               "ns_msg", "ring spin", "ns_msg", Target{Goal::AtMost, 1.10}});
  if (o.blocking)
    c.add_ratio({"channel blocking / ring blocking (ns per message)", "channel blocking", "ns_msg",
                 "ring blocking", "ns_msg", Target{Goal::AtMost, 1.10}});
  if (o.blocking)
    c.add_ratio({"channel blocking coalesced / ring blocking (ns per message)",
                 "channel blocking coalesced", "ns_msg", "ring blocking", "ns_msg",
                 Target{Goal::AtMost, 1.10}});
  return c;
}

int run(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  ScratchRoot root;
  SharedBlock<Control> control;
  std::vector<std::function<Comparison()>> comparisons;
  for (std::size_t size : o.sizes)
    comparisons.emplace_back([&o, &control, size] { return comparison(o, control, size); });
  return run_report(
      {.program = "xproc_channel",
       .options = o.run,
       .setup = fmt::format("- pinned: this process CPU {}, peer CPU {}; rounds {}, {} ms "
                            "measured + {} ms warm-up per case",
                            o.cpus.self, o.cpus.peer, o.run.reps,
                            static_cast<double>(o.duration_ns) / 1e6,
                            static_cast<double>(o.warmup_ns) / 1e6),
       .pin_cpu = o.cpus.self,
       .smoke_ok = "every case delivered its messages intact"},
      argc, argv, comparisons);
}

}  // namespace

int main(int argc, char** argv) {
  return guarded_main("xproc_channel", argc, argv, run);
}
