// Cross-process SpscRing benchmarks: producer and consumer are separate
// processes (fork, no exec), pinned to two different CPUs, each attaching to
// the ring by name as an independent process would.
//
//   Throughput (one way, fixed-size messages, 8/64/1024/4096 B by default):
//     ring spin          try_push / try_pop, pause while full/empty
//     ring spin, batch B try_reserve x B + one commit / try_peek x B + one release
//                        (same copies; isolates the per-commit/per-release cost)
//     ring blocking      push / pop with a timeout (spin, then park on the futex)
//     reference ring     a minimal SPSC ring of fixed-size slots, cached indices,
//                        no checks (written here: the upper bound for a ring)
//     in-record floor    the ring's own protocol (header word written last, a
//                        terminator, head stored per message) in fixed slots,
//                        with no checks: what the protocol costs by itself
//     message_queue      boost::interprocess::message_queue send / receive
//     pipe               one write(2) / read(2) of the message each
//     iceoryx            iceoryx 2.0 untyped publisher / subscriber (loan, copy
//                        in, publish / take, copy out, release; the publisher
//                        waits for a full subscriber queue, nothing is dropped),
//                        when built with iceoryx; the harness runs iox-roudi
//   Ping-pong RTT (64 B; two channels, one each way):
//     cache line         two processes bouncing a counter in one shared 64-byte line
//     ring spin, reference ring, ring blocking, message_queue, pipe, iceoryx
//   Ping-pong RTT with an idle gap between pings (default 1 ms, so the echo side
//   has parked in the kernel before each ping): ring blocking, message_queue, pipe.
//
// Every message carries its sequence number in its first and last 8 bytes and
// the receiver checks it (--smoke: every byte). Cases are interleaved run by
// run (harness Comparison); ratios are taken within a round, then the median
// and p10/p90 over rounds are reported. Output: Markdown on stdout, progress
// on stderr.
#include "harness/harness.hpp"
#include "harness/result.hpp"
#include "harness/stream.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"

#ifndef LIBSHM_BENCH_ICEORYX
#define LIBSHM_BENCH_ICEORYX 0
#endif
#if LIBSHM_BENCH_ICEORYX
#include "peers/iceoryx_peer.hpp"
#endif

#include <fmt/format.h>
#include <boost/interprocess/ipc/message_queue.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace {

namespace bip = boost::interprocess;
using namespace shm::bench;
using namespace std::chrono_literals;

constexpr auto kBlockingTimeout = std::chrono::seconds(5);

// ---------------------------------------------------------------- options

constexpr std::string_view kUsage =
    R"(xproc_ring: cross-process SpscRing benchmarks with same-run baselines

usage: xproc_ring [--quick | --smoke] [options]

  --quick            3 rounds of 150 ms per case (about 20 s in total)
  (default)          7 rounds of 500 ms per case (a few minutes)
  --smoke            1 round of a few ms per case, every byte verified; checks
                     that messages arrive intact, asserts nothing about speed
  --reps N           rounds (each round runs every case once, interleaved)
  --duration-ms D    measured time per case and round
  --warmup-ms W      unmeasured time before it (default: duration / 5)
  --sizes LIST       throughput message sizes (default 8,64,1024,4096)
  --rtt-size N       ping-pong message size (default 64)
  --gap-us G         idle gap between pings in the parked-RTT comparison (default 500)
  --ring-bytes N     ring capacity (default 262144, smoke 16384); message_queue and pipe get
                     the same number of messages / bytes
  --batch B          records per commit in the batch case (default 32)
  --cpus A,B         this process on A, the peer on B (default: first two allowed)
  --no-iceoryx       leave the iceoryx cases out (they need iox-roudi; only in builds
                     made with iceoryx installed)
  --only WHAT        throughput | rtt | parked (repeatable as a comma list)
                     (environment LIBSHM_BENCH_CASES="ring spin,pipe": only these cases,
                     in every harness; ratios needing another case are left out)
  --csv FILE         also write every per-round value to FILE
  --check-targets    exit 3 when a target ratio is missed
)";

struct Options {
  int reps = 7;
  std::uint64_t duration_ns = 500'000'000;
  std::uint64_t warmup_ns = 100'000'000;
  std::vector<std::size_t> sizes{8, 64, 1024, 4096};
  std::size_t rtt_size = 64;
  std::uint64_t gap_ns = 1'000'000;
  std::uint64_t ring_bytes = 256 * 1024;
  std::size_t batch = 32;
  CpuPair cpus;
  bool smoke = false;
  bool throughput = true, rtt = true, parked = true;
  bool iceoryx = LIBSHM_BENCH_ICEORYX != 0;
  std::string csv;
  bool check_targets = false;
  std::size_t max_samples = 1'000'000;
  // Each run goes on past its duration until it has this many messages /
  // samples (a loaded machine must still produce numbers, and smoke data).
  std::uint64_t min_count = 100;

  [[nodiscard]] std::chrono::milliseconds run_limit() const {
    return std::chrono::milliseconds((warmup_ns + duration_ns) / 1'000'000 + 20'000);
  }
  // Kills the harness (SIGALRM) if a run blocks for good in a baseline.
  [[nodiscard]] std::chrono::seconds watchdog_limit() const {
    return std::chrono::duration_cast<std::chrono::seconds>(run_limit()) + std::chrono::seconds(10);
  }
};

Options parse_options(int argc, char** argv) {
  Args args(argc, argv);
  Options o;
  const bool quick = args.flag("--quick");
  o.smoke = args.flag("--smoke");
  if (quick) {
    o.reps = 3;
    o.duration_ns = 150'000'000;
  }
  if (o.smoke) {
    o.reps = 1;
    o.duration_ns = 5'000'000;
    o.max_samples = 20'000;
    o.min_count = 200;
    o.ring_bytes = 16 * 1024;  // wraps often even with few messages
  }
  o.reps = args.int_value("--reps", o.reps);
  o.duration_ns = static_cast<std::uint64_t>(
      args.double_value("--duration-ms", static_cast<double>(o.duration_ns) / 1e6) * 1e6);
  o.warmup_ns = static_cast<std::uint64_t>(
      args.double_value("--warmup-ms", static_cast<double>(o.duration_ns) / 5e6) * 1e6);
  o.sizes = parse_sizes(args.value("--sizes", "8,64,1024,4096"));
  o.rtt_size = static_cast<std::size_t>(args.int_value("--rtt-size", 64));
  o.gap_ns =
      static_cast<std::uint64_t>(args.double_value("--gap-us", o.smoke ? 200.0 : 500.0) * 1e3);
  o.ring_bytes = static_cast<std::uint64_t>(
      args.double_value("--ring-bytes", static_cast<double>(o.ring_bytes)));
  o.batch = static_cast<std::size_t>(args.int_value("--batch", 32));
  o.cpus = choose_cpus(args.value("--cpus", ""));
  o.csv = args.value("--csv", "");
  o.check_targets = args.flag("--check-targets");
  if (args.flag("--no-iceoryx")) o.iceoryx = false;
  const std::string only = args.value("--only", "");
  if (!only.empty()) {
    o.throughput = only.find("throughput") != std::string::npos;
    o.rtt = only.find("rtt") != std::string::npos;
    o.parked = only.find("parked") != std::string::npos;
  }
  args.finish(kUsage);
  if (o.reps < 1) throw BenchError("--reps must be at least 1");
  if (o.batch < 1) throw BenchError("--batch must be at least 1");
  const std::uint64_t max_payload = shm::ring::max_payload_for(o.ring_bytes);
  for (std::size_t s : o.sizes) {
    if (s < 8 || s > max_payload)
      throw BenchError(fmt::format("message size {} outside [8, {}] (ring of {} bytes)", s,
                                   max_payload, o.ring_bytes));
  }
  if (o.rtt_size < 8 || o.rtt_size > max_payload)
    throw BenchError(fmt::format("--rtt-size {} outside [8, {}]", o.rtt_size, max_payload));
  return o;
}

// ---------------------------------------------------------------- transports
//
// A channel is created in the parent before the fork; each process then takes
// the end it needs: sender() (send(span) / flush()) or receiver()
// (recv(span) filling exactly span.size() bytes). Failures throw BenchError.

enum class Mode { Spin, Blocking };

std::string unique_name(std::string_view what) {
  static int counter = 0;
  return fmt::format("xr-{}-{}-{}", what, ::getpid(), counter++);
}

// Count of futex wakes issued on a ring's data signal (the consumer had parked).
std::uint64_t data_wakes(const shm::detail::RingEndpoint& e) {
  const auto* control = reinterpret_cast<const shm::ring::RingControl*>(e.segment().data().data());
  return control->waiters.data_signal.load(std::memory_order_relaxed);
}

class RingSender {
 public:
  RingSender(shm::RingProducer p, Mode mode, std::size_t batch, std::chrono::milliseconds limit)
      : p_(std::move(p)), mode_(mode), batch_(batch), deadline_(limit) {
    prefault(p_.segment().data().subspan(shm::ring::kBufferOffset), true);
  }
  // The spin path inline, as the reference rings' are; the others out of
  // line (a call per message with six saved registers is stores the
  // reference rings do not make).
  [[gnu::always_inline]] void send(std::span<const std::byte> m) {
    if (batch_ > 1 || mode_ == Mode::Blocking) [[unlikely]]
      return send_other(m);
    while (!value_or_throw(p_.try_push(m), "try_push")) [[unlikely]] wait_a_little();
  }
  void flush() noexcept { p_.commit(); }
  [[nodiscard]] std::uint64_t wakes() const { return data_wakes(p_); }

 private:
  [[gnu::noinline]] void send_other(std::span<const std::byte> m) {
    if (batch_ > 1) return send_batched(m);
    if (!value_or_throw(p_.push(m, kBlockingTimeout), "push"))
      throw BenchError("push: timed out (consumer gone?)");
  }
  void send_batched(std::span<const std::byte> m) {
    for (;;) {
      auto r = value_or_throw(p_.try_reserve(m.size()), "try_reserve");
      if (r) {
        std::memcpy(r->data(), m.data(), m.size());
        if (++pending_ == batch_) flush_batch();
        return;
      }
      flush_batch();
      wait_a_little();
    }
  }
  void flush_batch() noexcept {
    p_.commit();
    pending_ = 0;
  }
  [[gnu::noinline]] void wait_a_little() {
    spin_pause();
    if (deadline_.expired_every()) throw BenchError("ring stayed full past the run limit");
  }

  shm::RingProducer p_;
  Mode mode_;
  std::size_t batch_;
  std::size_t pending_ = 0;
  Deadline deadline_;
};

class RingReceiver {
 public:
  RingReceiver(shm::RingConsumer c, Mode mode, std::size_t batch, std::chrono::milliseconds limit)
      : c_(std::move(c)), mode_(mode), batch_(batch), deadline_(limit) {
    c_.segment().prefault();
  }
  // The spin path inline (see RingSender::send).
  [[gnu::always_inline]] void recv(std::span<std::byte> out) {
    if (batch_ > 1 || mode_ == Mode::Blocking) [[unlikely]]
      return recv_other(out);
    std::optional<std::size_t> n;
    while (!(n = value_or_throw(c_.try_pop(out), "try_pop"))) [[unlikely]] wait_a_little();
    if (*n != out.size()) [[unlikely]]
      wrong_size(*n, out.size());
  }
  [[nodiscard]] std::uint64_t wakes() const { return data_wakes(c_); }

 private:
  [[gnu::noinline]] void recv_other(std::span<std::byte> out) {
    if (batch_ > 1) return recv_batched(out);
    const std::optional<std::size_t> n = value_or_throw(c_.pop(out, kBlockingTimeout), "pop");
    if (!n) throw BenchError("pop: timed out (producer gone?)");
    if (*n != out.size()) wrong_size(*n, out.size());
  }
  [[noreturn, gnu::noinline, gnu::cold]] static void wrong_size(std::size_t n, std::size_t want) {
    throw BenchError(fmt::format("record of {} bytes, expected {}", n, want));
  }
  void recv_batched(std::span<std::byte> out) {
    for (;;) {
      auto r = value_or_throw(c_.try_peek(), "try_peek");
      if (r) {
        if (r->size() != out.size())
          throw BenchError(fmt::format("record of {} bytes, expected {}", r->size(), out.size()));
        std::memcpy(out.data(), r->data(), out.size());
        if (++peeked_ == batch_) release_batch();
        return;
      }
      release_batch();
      wait_a_little();
    }
  }
  void release_batch() noexcept {
    c_.release();
    peeked_ = 0;
  }
  [[gnu::noinline]] void wait_a_little() {
    spin_pause();
    if (deadline_.expired_every()) throw BenchError("ring stayed empty past the run limit");
  }

  shm::RingConsumer c_;
  Mode mode_;
  std::size_t batch_;
  std::size_t peeked_ = 0;
  Deadline deadline_;
};

class RingChannel {
 public:
  RingChannel(const Options& o, Mode mode, std::size_t batch)
      : name_(unique_name("ring")), mode_(mode), batch_(batch), limit_(o.run_limit()) {
    (void)value_or_throw(shm::create_ring(name_, {.capacity_bytes = o.ring_bytes}), "create_ring");
  }
  RingChannel(const RingChannel&) = delete;
  RingChannel& operator=(const RingChannel&) = delete;
  ~RingChannel() { (void)shm::Segment::unlink(name_); }

  [[nodiscard]] RingSender sender() const {
    return {value_or_throw(shm::RingProducer::open(name_), "open producer"), mode_, batch_, limit_};
  }
  [[nodiscard]] RingReceiver receiver() const {
    return {value_or_throw(shm::RingConsumer::open(name_), "open consumer"), mode_, batch_, limit_};
  }

 private:
  std::string name_;
  Mode mode_;
  std::size_t batch_;
  std::chrono::milliseconds limit_;
};

class QueueEnd {
 public:
  explicit QueueEnd(const std::string& name) : q_(bip::open_only, name.c_str()) {}
  void send(std::span<const std::byte> m) { q_.send(m.data(), m.size(), 0); }
  void flush() noexcept {}
  void recv(std::span<std::byte> out) {
    bip::message_queue::size_type got = 0;
    unsigned priority = 0;
    q_.receive(out.data(), out.size(), got, priority);
    if (got != out.size())
      throw BenchError(fmt::format("message of {} bytes, expected {}", got, out.size()));
  }

 private:
  bip::message_queue q_;
};

class QueueChannel {
 public:
  QueueChannel(const Options& o, std::size_t size) : name_(unique_name("mq")) {
    bip::message_queue::remove(name_.c_str());
    const auto messages = std::max<std::uint64_t>(1, o.ring_bytes / shm::ring::record_size(size));
    try {
      q_.emplace(bip::create_only, name_.c_str(), messages, size);
    } catch (const bip::interprocess_exception& e) {
      throw BenchError(fmt::format("message_queue {}: {}", name_, e.what()));
    }
  }
  QueueChannel(const QueueChannel&) = delete;
  QueueChannel& operator=(const QueueChannel&) = delete;
  ~QueueChannel() { bip::message_queue::remove(name_.c_str()); }
  [[nodiscard]] std::unique_ptr<QueueEnd> sender() const {
    return std::make_unique<QueueEnd>(name_);
  }
  [[nodiscard]] std::unique_ptr<QueueEnd> receiver() const {
    return std::make_unique<QueueEnd>(name_);
  }

 private:
  std::string name_;
  std::optional<bip::message_queue> q_;
};

class PipeEnd {
 public:
  explicit PipeEnd(int fd) : fd_(fd) {}
  void send(std::span<const std::byte> m) {
    std::size_t done = 0;
    while (done < m.size()) {
      const ssize_t n = ::write(fd_, m.data() + done, m.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw BenchError(fmt::format("pipe write: {}", std::strerror(errno)));
      done += static_cast<std::size_t>(n);
    }
  }
  void flush() noexcept {}
  void recv(std::span<std::byte> out) {
    std::size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::read(fd_, out.data() + done, out.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        throw BenchError(n == 0 ? std::string("pipe closed")
                                : fmt::format("pipe read: {}", std::strerror(errno)));
      done += static_cast<std::size_t>(n);
    }
  }

 private:
  int fd_;
};

class PipeChannel {
 public:
  PipeChannel(const Options& o, std::size_t /*size*/) {
    if (::pipe2(fds_, O_CLOEXEC) != 0)
      throw BenchError(fmt::format("pipe2: {}", std::strerror(errno)));
    // Same byte capacity as the ring where the kernel allows it (pipe-max-size).
    (void)::fcntl(fds_[1], F_SETPIPE_SZ, static_cast<int>(o.ring_bytes));
  }
  PipeChannel(const PipeChannel&) = delete;
  PipeChannel& operator=(const PipeChannel&) = delete;
  ~PipeChannel() {
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  [[nodiscard]] std::unique_ptr<PipeEnd> sender() const {
    return std::make_unique<PipeEnd>(fds_[1]);
  }
  [[nodiscard]] std::unique_ptr<PipeEnd> receiver() const {
    return std::make_unique<PipeEnd>(fds_[0]);
  }

 private:
  int fds_[2] = {-1, -1};
};

// The reference: a minimal SPSC ring of fixed-size slots with cached indices
// and no checks at all (rigtorp-style), in an anonymous shared mapping made
// before the fork. The upper bound for a ring on this machine; it carries the
// same messages and the receiver runs the same payload checks.
class RefRing {
 public:
  struct alignas(128) Index {
    std::atomic<std::uint64_t> value{0};
  };
  struct Shared {
    Index head;  // consumer-owned
    Index tail;  // producer-owned
  };
  static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

  RefRing(const Options& o, std::size_t size)
      : slot_(round_up8(size)),
        slots_(std::bit_floor(std::max<std::uint64_t>(2, o.ring_bytes / slot_))),
        bytes_(sizeof(Shared) + slots_ * slot_),
        base_(static_cast<std::byte*>(map_shared_anonymous(bytes_))),
        limit_(o.run_limit()) {
    new (base_) Shared{};
    prefault(std::span(base_, bytes_), true);
  }
  RefRing(const RefRing&) = delete;
  RefRing& operator=(const RefRing&) = delete;
  ~RefRing() { unmap(base_, bytes_); }

  class End {
   public:
    End(const RefRing& r, std::chrono::milliseconds limit) : r_(r), deadline_(limit) {}
    void send(std::span<const std::byte> m) {
      if (tail_ - cached_head_ == r_.slots_) {
        // acquire: pairs with the receiver's release store of head.
        while ((cached_head_ = r_.shared().head.value.load(std::memory_order_acquire)) +
                   r_.slots_ ==
               tail_)
          wait_a_little();
      }
      std::memcpy(r_.slot(tail_), m.data(), m.size());
      // release: publishes the slot; pairs with the receiver's acquire load.
      r_.shared().tail.value.store(++tail_, std::memory_order_release);
    }
    void flush() noexcept {}
    void recv(std::span<std::byte> out) {
      if (head_ == cached_tail_) {
        // acquire: pairs with the sender's release store of tail.
        while ((cached_tail_ = r_.shared().tail.value.load(std::memory_order_acquire)) == head_)
          wait_a_little();
      }
      std::memcpy(out.data(), r_.slot(head_), out.size());
      // release: frees the slot; pairs with the sender's acquire load.
      r_.shared().head.value.store(++head_, std::memory_order_release);
    }

   private:
    void wait_a_little() {
      spin_pause();
      if (deadline_.expired_every()) throw BenchError("reference ring: peer gone");
    }
    const RefRing& r_;
    Deadline deadline_;
    std::uint64_t head_ = 0, tail_ = 0, cached_head_ = 0, cached_tail_ = 0;
  };

  [[nodiscard]] std::unique_ptr<End> sender() const { return std::make_unique<End>(*this, limit_); }
  [[nodiscard]] std::unique_ptr<End> receiver() const {
    return std::make_unique<End>(*this, limit_);
  }

 private:
  static std::uint64_t round_up8(std::size_t n) { return (n + 7) / 8 * 8; }
  [[nodiscard]] Shared& shared() const { return *reinterpret_cast<Shared*>(base_); }
  [[nodiscard]] std::byte* slot(std::uint64_t i) const {
    return base_ + sizeof(Shared) + (i & (slots_ - 1)) * slot_;
  }

  std::uint64_t slot_;
  std::uint64_t slots_;
  std::size_t bytes_;
  std::byte* base_;
  std::chrono::milliseconds limit_;
};

// The ring's own protocol and nothing else: slots of an 8-byte header word
// (length | lap << 32, stored last with release) and the payload, a
// terminator (0) stored in the next slot's header before each publish, the
// receiver polling the header word, one release store of head per message,
// the sender reading head only when its cached copy says full. Fixed-size
// slots, no checks, no endpoint guard, no counters, no parked flags: the
// floor for publication inside the record on this machine, beside the
// reference ring's index protocol. The receiver runs the same payload checks.
class InRecordRing {
 public:
  InRecordRing(const Options& o, std::size_t size)
      : slot_(8 + (size + 7) / 8 * 8),
        slots_(std::bit_floor(std::max<std::uint64_t>(4, o.ring_bytes / slot_))),
        bytes_(sizeof(RefRing::Index) + slots_ * slot_),
        base_(static_cast<std::byte*>(map_shared_anonymous(bytes_))),
        limit_(o.run_limit()) {
    new (base_) RefRing::Index{};
    prefault(std::span(base_, bytes_), true);
  }
  InRecordRing(const InRecordRing&) = delete;
  InRecordRing& operator=(const InRecordRing&) = delete;
  ~InRecordRing() { unmap(base_, bytes_); }

  class End {
   public:
    End(const InRecordRing& r, std::chrono::milliseconds limit) : r_(r), deadline_(limit) {}
    void send(std::span<const std::byte> m) {
      // One slot stays free: the terminator goes into the slot after this
      // one, whose previous occupant must have been consumed.
      if (tail_ + 1 - cached_head_ >= r_.slots_) {
        // acquire: pairs with the receiver's release store of head.
        while (tail_ + 1 - (cached_head_ = r_.head().value.load(std::memory_order_acquire)) >=
               r_.slots_)
          wait_a_little();
      }
      std::byte* slot = r_.slot(tail_);
      std::memcpy(slot + 8, m.data(), m.size());
      // relaxed: ordered before the receiver's reads by the release below.
      header(r_.slot(tail_ + 1)).store(0, std::memory_order_relaxed);
      // release: publishes the payload and the terminator.
      header(slot).store(r_.word(tail_, m.size()), std::memory_order_release);
      ++tail_;
    }
    void flush() noexcept {}
    void recv(std::span<std::byte> out) {
      std::byte* slot = r_.slot(head_);
      const std::uint64_t want = r_.word(head_, out.size());
      // acquire: pairs with the sender's release store of the header.
      while (header(slot).load(std::memory_order_acquire) != want) wait_a_little();
      std::memcpy(out.data(), slot + 8, out.size());
      // release: frees the slot; pairs with the sender's acquire load.
      r_.head().value.store(++head_, std::memory_order_release);
    }

   private:
    static std::atomic_ref<std::uint64_t> header(std::byte* p) {
      return std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(p));
    }
    void wait_a_little() {
      spin_pause();
      if (deadline_.expired_every()) throw BenchError("in-record ring: peer gone");
    }
    const InRecordRing& r_;
    Deadline deadline_;
    std::uint64_t head_ = 0, tail_ = 0, cached_head_ = 0;
  };

  [[nodiscard]] std::unique_ptr<End> sender() const { return std::make_unique<End>(*this, limit_); }
  [[nodiscard]] std::unique_ptr<End> receiver() const {
    return std::make_unique<End>(*this, limit_);
  }

 private:
  [[nodiscard]] RefRing::Index& head() const { return *reinterpret_cast<RefRing::Index*>(base_); }
  [[nodiscard]] std::byte* slot(std::uint64_t i) const {
    return base_ + sizeof(RefRing::Index) + (i & (slots_ - 1)) * slot_;
  }
  // The header of message i: its length, and its lap from 1 (a zeroed slot
  // and the previous lap's header never match).
  [[nodiscard]] std::uint64_t word(std::uint64_t i, std::size_t length) const {
    return (i / slots_ + 1) << 32 | length;
  }

  std::uint64_t slot_;
  std::uint64_t slots_;
  std::size_t bytes_;
  std::byte* base_;
  std::chrono::milliseconds limit_;
};

#if LIBSHM_BENCH_ICEORYX
// One iceoryx topic. Its subscriber queue holds as many messages as the ring
// (capped at iceoryx's 256), like message_queue. Both ends register the
// process with RouDi, so a case using it runs in_fresh_process().
class IceoryxChannel {
 public:
  IceoryxChannel(const Options& o, std::size_t size)
      : topic_(unique_name("iox")),
        queue_(std::clamp<std::uint64_t>(o.ring_bytes / shm::ring::record_size(size), 1, 256)),
        limit_(o.run_limit()) {}
  [[nodiscard]] std::unique_ptr<shm::bench::iceoryx::Sender> sender() const {
    return std::make_unique<shm::bench::iceoryx::Sender>(topic_, limit_);
  }
  [[nodiscard]] std::unique_ptr<shm::bench::iceoryx::Receiver> receiver() const {
    return std::make_unique<shm::bench::iceoryx::Receiver>(topic_, queue_, limit_);
  }

 private:
  std::string topic_;
  std::size_t queue_;
  std::chrono::milliseconds limit_;
};
#endif

// Uniform access to ends held by value or by pointer.
template <class E>
auto& end_ref(E& e) {
  if constexpr (requires { *e; }) {
    return *e;
  } else {
    return e;
  }
}

// ---------------------------------------------------------------- runs

// Lives in an anonymous shared mapping, fresh for every run.
using Control = StreamControl;

struct Env {
  const Options& o;
  SharedBlock<Control>& control;
  const TickClock& clock;
  std::vector<std::uint64_t>& samples;  // pre-faulted, o.max_samples long
};

int finish_peer(Peer& peer, const Options& o) {
  const int rc = peer.wait(o.run_limit());
  if (rc != 0)
    throw BenchError(rc < 0
                         ? std::string("peer timed out and was killed")
                         : fmt::format("peer failed with status {} (see its message above)", rc));
  return rc;
}

#if LIBSHM_BENCH_ICEORYX
// For iceoryx's registration with RouDi, which a fork must not copy.
Measurement in_fresh_process(const Env& env, const std::function<Measurement()>& run) {
  return measure_in_child(env.o.cpus.self, env.o.run_limit(), run);
}
#endif

// One way: this process sends for warmup + duration, the peer receives and
// times the measured window from its side (messages delivered per second).
template <class Channel>
Measurement throughput_run(const Env& env, std::size_t size, const Channel& ch) {
  const Options& o = env.o;
  const Watchdog watchdog(o.watchdog_limit());
  env.control.reset();
  Control& ctl = *env.control;
  Peer peer = Peer::fork_pinned(o.cpus.peer, [&]() -> int {
    auto rx = ch.receiver();
    auto& r = end_ref(rx);
    std::vector<std::byte> buf(size);
    // always_inline: the loop around the transport's call is the same for
    // every transport; inlined, as the small reference rings' are anyway.
    receive_stream(
        o, ctl, buf, [&](std::span<std::byte> b) __attribute__((always_inline)) { r.recv(b); });
    return 0;
  });
  {
    auto tx = ch.sender();
    auto& s = end_ref(tx);
    std::vector<std::byte> buf(size);
    send_stream(
        o, ctl,
        buf, [&](std::span<const std::byte> b) __attribute__((always_inline)) { s.send(b); });
    s.flush();
    finish_peer(peer, o);
  }
  const double rate = stream_rate(ctl);
  return Measurement().set("msg_s", rate).set("bytes_s", rate * static_cast<double>(size));
}

// Futex wakes issued on both rings so far (ring channels only).
template <class S, class R>
std::optional<std::uint64_t> wakes_of(const S& s, const R& r) {
  if constexpr (requires { s.wakes() + r.wakes(); })
    return s.wakes() + r.wakes();
  else
    return std::nullopt;
}

// 0.01 ... 0.99 in steps of 0.01, then the tail.
const std::vector<double>& cdf_quantiles() {
  static const std::vector<double> q = [] {
    std::vector<double> v;
    for (int i = 1; i <= 99; ++i) v.push_back(i / 100.0);
    for (double t : {0.995, 0.999, 0.9995, 0.9999}) v.push_back(t);
    return v;
  }();
  return q;
}

// RTT summary of the samples collected in one run.
Measurement rtt_measurement(const Env& env, std::size_t n, std::optional<std::uint64_t> wakes) {
  if (n == 0) throw BenchError("no RTT sample collected (duration too short?)");
  std::span<std::uint64_t> s(env.samples.data(), n);
  Measurement m;
  m.set("p50", env.clock.to_ns(static_cast<std::uint64_t>(percentile(s, 0.50))));
  m.set("p99", env.clock.to_ns(static_cast<std::uint64_t>(percentile(s, 0.99))));
  m.set("p999", env.clock.to_ns(static_cast<std::uint64_t>(percentile(s, 0.999))));
  m.set("samples", static_cast<double>(n));
  // The distribution for the CDF chart (scripts/bench.sh --plot reads it from
  // the --csv file): cdf_<q> = the q-quantile in ns.
  std::sort(s.begin(), s.end());
  for (const double q : cdf_quantiles()) {
    const auto i = std::min(n - 1, static_cast<std::size_t>(q * static_cast<double>(n)));
    m.set(fmt::format("cdf_{:.4f}", q), env.clock.to_ns(s[i]));
  }
  if (wakes) m.set("wakes_rt", static_cast<double>(*wakes) / static_cast<double>(n));
  return m;
}

// Ping-pong over two channels: this process pings on `ping` and waits for the
// echo on `pong`; the peer echoes every message back. With gap_ns > 0 this
// process busy-waits that long between a reply and the next ping.
template <class Channel>
Measurement rtt_run(const Env& env, std::size_t size, const Channel& ping, const Channel& pong,
                    std::uint64_t gap_ns) {
  const Options& o = env.o;
  const Watchdog watchdog(o.watchdog_limit());
  env.control.reset();
  Control& ctl = *env.control;
  Peer peer = Peer::fork_pinned(o.cpus.peer, [&]() -> int {
    auto rx = ping.receiver();
    auto tx = pong.sender();
    auto& r = end_ref(rx);
    auto& s = end_ref(tx);
    std::vector<std::byte> buf(size);
    prefault(buf, true);
    if (!ctl.gate.arrive_and_wait(2, o.run_limit())) throw BenchError("start gate timed out");
    for (std::uint64_t expected = 0;; ++expected) {
      r.recv(buf);
      if (sequence_of(buf) == kStop) return 0;
      check(buf, expected, o.smoke);
      s.send(buf);
      s.flush();
    }
  });
  std::size_t n = 0;
  std::uint64_t seq = 0;
  std::optional<std::uint64_t> wakes;
  {
    auto tx = ping.sender();
    auto rx = pong.receiver();
    auto& s = end_ref(tx);
    auto& r = end_ref(rx);
    std::vector<std::byte> out(size), in(size);
    prefault(out, true);
    prefault(in, true);
    stamp(out, 0, true);
    const std::uint64_t gap_ticks =
        gap_ns == 0 ? 0
                    : static_cast<std::uint64_t>(static_cast<double>(gap_ns) / env.clock.to_ns(1));
    if (!ctl.gate.arrive_and_wait(2, o.run_limit())) throw BenchError("start gate timed out");
    const std::uint64_t start = now_ns();
    const std::uint64_t warm_end = start + o.warmup_ns;
    const std::uint64_t end = warm_end + o.duration_ns;
    bool measuring = o.warmup_ns == 0;
    std::optional<std::uint64_t> wakes0;
    for (;; ++seq) {
      stamp(out, seq, o.smoke);
      const std::uint64_t t = TickClock::ticks();
      s.send(out);
      s.flush();
      r.recv(in);
      const std::uint64_t t2 = TickClock::ticks();
      check(in, seq, o.smoke);
      if (measuring) env.samples[n++] = t2 - t;
      if (gap_ticks != 0)
        while (TickClock::ticks() - t2 < gap_ticks) spin_pause();
      if (gap_ticks != 0 || (seq & 63) == 63 || n == o.max_samples) {
        const std::uint64_t now = now_ns();
        if (!measuring && now >= warm_end) {
          measuring = true;
          wakes0 = wakes_of(s, r);
        }
        if ((now >= end && n >= o.min_count) || n == o.max_samples) break;
      }
    }
    if (const auto w = wakes_of(s, r); w && wakes0) wakes = *w - *wakes0;
    stamp(out, kStop, false);
    s.send(out);
    s.flush();
    finish_peer(peer, o);
  }
  return rtt_measurement(env, n, wakes);
}

// The floor: a counter bounced in one shared cache line (no queue at all).
Measurement cacheline_run(const Env& env) {
  struct alignas(64) Line {
    std::atomic<std::uint64_t> value{0};
  };
  static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
  const Options& o = env.o;
  const Watchdog watchdog(o.watchdog_limit());
  env.control.reset();
  Control& ctl = *env.control;
  SharedBlock<Line> line;
  Peer peer = Peer::fork_pinned(o.cpus.peer, [&]() -> int {
    Deadline deadline(o.run_limit());
    if (!ctl.gate.arrive_and_wait(2, o.run_limit())) throw BenchError("start gate timed out");
    for (std::uint64_t expect = 1;; expect += 2) {
      std::uint64_t v;
      // acquire: pairs with the pinger's release store of `expect`.
      while ((v = line->value.load(std::memory_order_acquire)) != expect) {
        if (v == kStop) return 0;
        spin_pause();
        if (deadline.expired_every()) throw BenchError("cache line: pinger gone");
      }
      // release: pairs with the pinger's acquire load.
      line->value.store(expect + 1, std::memory_order_release);
    }
  });
  std::size_t n = 0;
  {
    Deadline deadline(o.run_limit());
    if (!ctl.gate.arrive_and_wait(2, o.run_limit())) throw BenchError("start gate timed out");
    const std::uint64_t start = now_ns();
    const std::uint64_t warm_end = start + o.warmup_ns;
    const std::uint64_t end = warm_end + o.duration_ns;
    bool measuring = o.warmup_ns == 0;
    for (std::uint64_t i = 0;; ++i) {
      const std::uint64_t t = TickClock::ticks();
      // release: pairs with the echo side's acquire load.
      line->value.store(2 * i + 1, std::memory_order_release);
      // acquire: pairs with the echo side's release store.
      while (line->value.load(std::memory_order_acquire) != 2 * i + 2) {
        spin_pause();
        if (deadline.expired_every()) throw BenchError("cache line: echo side gone");
      }
      const std::uint64_t t2 = TickClock::ticks();
      if (measuring) env.samples[n++] = t2 - t;
      if ((i & 63) == 63 || n == o.max_samples) {
        const std::uint64_t now = now_ns();
        measuring = measuring || now >= warm_end;
        if ((now >= end && n >= o.min_count) || n == o.max_samples) break;
      }
    }
    line->value.store(kStop, std::memory_order_release);
    finish_peer(peer, o);
  }
  return rtt_measurement(env, n, std::nullopt);
}

// ---------------------------------------------------------------- comparisons

const std::vector<MetricSpec> kThroughputMetrics{{"msg_s", "Mmsg/s", 1e-6, 2},
                                                 {"bytes_s", "GB/s", 1e-9, 3}};
const std::vector<MetricSpec> kRttMetrics{{"p50", "RTT p50 ns", 1, 0},
                                          {"p99", "RTT p99 ns", 1, 0},
                                          {"p999", "RTT p99.9 ns", 1, 0},
                                          {"samples", "samples", 1, 0},
                                          {"wakes_rt", "futex wakes per RT", 1, 3}};
const std::vector<MetricSpec> kParkedMetrics{{"p50", "RTT p50 ns", 1, 0},
                                             {"p99", "RTT p99 ns", 1, 0},
                                             {"samples", "samples", 1, 0},
                                             {"wakes_rt", "futex wakes per RT", 1, 2}};

Comparison throughput_comparison(const Env& env, std::size_t size) {
  const Options& o = env.o;
  const std::string batch = fmt::format("ring spin, batch {}", o.batch);
  Comparison c(fmt::format("Throughput, {} B messages (one way, producer CPU {} → consumer CPU {})",
                           size, o.cpus.self, o.cpus.peer),
               kThroughputMetrics);
  c.add_case("ring spin", [&env, size] {
    RingChannel ch(env.o, Mode::Spin, 1);
    return throughput_run(env, size, ch);
  });
  c.add_case(batch, [&env, size] {
    RingChannel ch(env.o, Mode::Spin, env.o.batch);
    return throughput_run(env, size, ch);
  });
  c.add_case("ring blocking", [&env, size] {
    RingChannel ch(env.o, Mode::Blocking, 1);
    return throughput_run(env, size, ch);
  });
  c.add_case("reference ring", [&env, size] {
    RefRing ch(env.o, size);
    return throughput_run(env, size, ch);
  });
  c.add_case("in-record floor", [&env, size] {
    InRecordRing ch(env.o, size);
    return throughput_run(env, size, ch);
  });
  c.add_case("message_queue", [&env, size] {
    QueueChannel ch(env.o, size);
    return throughput_run(env, size, ch);
  });
  c.add_case("pipe", [&env, size] {
    PipeChannel ch(env.o, size);
    return throughput_run(env, size, ch);
  });
#if LIBSHM_BENCH_ICEORYX
  if (o.iceoryx) {
    c.add_case("iceoryx", [&env, size] {
      return in_fresh_process(env, [&env, size] {
        IceoryxChannel ch(env.o, size);
        return throughput_run(env, size, ch);
      });
    });
    c.add_ratio(
        {"ring spin / iceoryx (msg/s)", "ring spin", "msg_s", "iceoryx", "msg_s", std::nullopt});
  }
#endif
  std::optional<Target> target;
  if (size == 64) target = Target{Goal::AtLeast, 10.0};
  c.add_ratio({"ring spin / message_queue (msg/s)", "ring spin", "msg_s", "message_queue", "msg_s",
               target});
  c.add_ratio({"ring blocking / message_queue (msg/s)", "ring blocking", "msg_s", "message_queue",
               "msg_s", target});
  c.add_ratio(
      {"ring spin / reference ring (msg/s)", "ring spin", "msg_s", "reference ring", "msg_s",
       size == 8 || size == 64 ? std::optional<Target>(Target{Goal::AtLeast, 0.8}) : std::nullopt});
  c.add_ratio({"ring spin / in-record floor (msg/s)", "ring spin", "msg_s", "in-record floor",
               "msg_s", std::nullopt});
  c.add_ratio({"in-record floor / reference ring (msg/s)", "in-record floor", "msg_s",
               "reference ring", "msg_s", std::nullopt});
  c.add_ratio({"ring spin / pipe (msg/s)", "ring spin", "msg_s", "pipe", "msg_s", std::nullopt});
  c.add_ratio(
      {"ring blocking / pipe (msg/s)", "ring blocking", "msg_s", "pipe", "msg_s", std::nullopt});
  c.add_ratio({batch + " / ring spin (msg/s)", batch, "msg_s", "ring spin", "msg_s", std::nullopt});
  return c;
}

Comparison rtt_comparison(const Env& env) {
  const Options& o = env.o;
  const std::size_t size = o.rtt_size;
  Comparison c(fmt::format("Ping-pong RTT, {} B (two channels, one each way; CPUs {} and {})", size,
                           o.cpus.self, o.cpus.peer),
               kRttMetrics);
  c.add_case("cache line (spin)", [&env] { return cacheline_run(env); });
  c.add_case("ring spin", [&env, size] {
    RingChannel ping(env.o, Mode::Spin, 1), pong(env.o, Mode::Spin, 1);
    return rtt_run(env, size, ping, pong, 0);
  });
  c.add_case("reference ring", [&env, size] {
    RefRing ping(env.o, size), pong(env.o, size);
    return rtt_run(env, size, ping, pong, 0);
  });
  c.add_case("ring blocking", [&env, size] {
    RingChannel ping(env.o, Mode::Blocking, 1), pong(env.o, Mode::Blocking, 1);
    return rtt_run(env, size, ping, pong, 0);
  });
  c.add_case("message_queue", [&env, size] {
    QueueChannel ping(env.o, size), pong(env.o, size);
    return rtt_run(env, size, ping, pong, 0);
  });
  c.add_case("pipe", [&env, size] {
    PipeChannel ping(env.o, size), pong(env.o, size);
    return rtt_run(env, size, ping, pong, 0);
  });
  const bool is64 = size == 64;
#if LIBSHM_BENCH_ICEORYX
  if (o.iceoryx) {
    c.add_case("iceoryx", [&env, size] {
      return in_fresh_process(env, [&env, size] {
        IceoryxChannel ping(env.o, size), pong(env.o, size);
        return rtt_run(env, size, ping, pong, 0);
      });
    });
    // At least 10x faster than iceoryx.
    c.add_ratio({"ring spin p50 / iceoryx p50", "ring spin", "p50", "iceoryx", "p50",
                 is64 ? std::optional<Target>(Target{Goal::AtMost, 0.1}) : std::nullopt});
  }
#endif
  c.add_ratio({"ring spin p50 / cache line p50", "ring spin", "p50", "cache line (spin)", "p50",
               is64 ? std::optional<Target>(Target{Goal::AtMost, 1.5}) : std::nullopt});
  c.add_ratio({"ring spin p50 / reference ring p50", "ring spin", "p50", "reference ring", "p50",
               std::nullopt});
  c.add_ratio({"ring spin p99 / cache line p99", "ring spin", "p99", "cache line (spin)", "p99",
               std::nullopt});
  c.add_ratio({"ring blocking p50 / pipe p50", "ring blocking", "p50", "pipe", "p50",
               is64 ? std::optional<Target>(Target{Goal::AtMost, 0.5}) : std::nullopt});
  c.add_ratio(
      {"ring blocking p99 / pipe p99", "ring blocking", "p99", "pipe", "p99", std::nullopt});
  c.add_ratio({"ring blocking p50 / ring spin p50", "ring blocking", "p50", "ring spin", "p50",
               std::nullopt});
  c.add_ratio({"ring spin p50 / message_queue p50", "ring spin", "p50", "message_queue", "p50",
               std::nullopt});
  return c;
}

Comparison parked_comparison(const Env& env) {
  const Options& o = env.o;
  const std::size_t size = o.rtt_size;
  Comparison c(fmt::format("Ping-pong RTT, {} B, {} µs idle gap before each ping (the echo side "
                           "sleeps in the kernel)",
                           size, static_cast<double>(o.gap_ns) / 1e3),
               kParkedMetrics);
  c.add_case("ring blocking", [&env, size] {
    RingChannel ping(env.o, Mode::Blocking, 1), pong(env.o, Mode::Blocking, 1);
    return rtt_run(env, size, ping, pong, env.o.gap_ns);
  });
  c.add_case("message_queue", [&env, size] {
    QueueChannel ping(env.o, size), pong(env.o, size);
    return rtt_run(env, size, ping, pong, env.o.gap_ns);
  });
  c.add_case("pipe", [&env, size] {
    PipeChannel ping(env.o, size), pong(env.o, size);
    return rtt_run(env, size, ping, pong, env.o.gap_ns);
  });
  const bool is64 = size == 64;
  c.add_ratio({"ring blocking p50 / pipe p50", "ring blocking", "p50", "pipe", "p50",
               // issue 17: after an idle gap, at most 0.8x a pipe
               is64 ? std::optional<Target>(Target{Goal::AtMost, 0.8}) : std::nullopt});
  c.add_ratio(
      {"ring blocking p99 / pipe p99", "ring blocking", "p99", "pipe", "p99", std::nullopt});
  c.add_ratio({"ring blocking p50 / message_queue p50", "ring blocking", "p50", "message_queue",
               "p50", std::nullopt});
  return c;
}

int run(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  ScratchRoot root;
  const MachineInfo machine = machine_info();
  (void)pin_to_cpu(o.cpus.self);
  const TickClock clock;
  std::vector<std::uint64_t> samples(o.max_samples, 1);  // written once: pre-faulted
  SharedBlock<Control> control;
  const Env env{o, control, clock, samples};
#if LIBSHM_BENCH_ICEORYX
  std::optional<shm::bench::iceoryx::Roudi> roudi;
  if (o.iceoryx && (o.rtt || o.throughput))
    roudi.emplace(root.path() + "/iox-roudi.log", std::chrono::seconds(20));
#endif

  std::FILE* csv = nullptr;
  if (!o.csv.empty()) {
    csv = std::fopen(o.csv.c_str(), "w");
    if (csv == nullptr) throw BenchError(fmt::format("{}: {}", o.csv, std::strerror(errno)));
  }

  fmt::print("## xproc_ring{}\n\n",
             o.smoke ? " (smoke: correctness only, timings meaningless)" : "");
  print_machine(stdout, machine, argc, argv);
  fmt::print(
      "- pinned: this process CPU {}, peer CPU {}; rounds {}, {} ms measured + {} ms warm-up "
      "per case; ring {} bytes\n",
      o.cpus.self, o.cpus.peer, o.reps, static_cast<double>(o.duration_ns) / 1e6,
      static_cast<double>(o.warmup_ns) / 1e6, o.ring_bytes);
  fmt::print("- RTT timestamps: {}, {:.1f} ns per read (one read per sample)\n", clock.source(),
             timer_cost_ns(clock));
  std::fflush(stdout);

  bool targets_met = true;
  std::vector<ComparisonResult> results;
  const auto report = [&](const Comparison& c) {
    const ComparisonResult& r = results.emplace_back(c.run(o.reps));
    print_markdown(stdout, r);
    std::fflush(stdout);
    if (csv != nullptr) append_csv(csv, r);
    targets_met = targets_met && r.all_targets_met();
  };
  if (o.rtt) report(rtt_comparison(env));
  if (o.throughput)
    for (std::size_t size : o.sizes) report(throughput_comparison(env, size));
  if (o.parked) report(parked_comparison(env));

  print_targets(stdout, results);
  fmt::print("\n- load average at end: {}\n", machine_info().load_average);
  if (csv != nullptr) std::fclose(csv);
  if (o.smoke) {
    fmt::print("\nsmoke: every case delivered its messages intact\n");
    return 0;
  }
  return o.check_targets && !targets_met ? 3 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xproc_ring: %s\n", e.what());
    return 1;
  }
}
