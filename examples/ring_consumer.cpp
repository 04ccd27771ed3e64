// ring_consumer: reads the messages of ring_producer from an SpscRing and
// verifies every one: sequence continuity (nothing lost, nothing duplicated)
// and the CRC32C of its payload (nothing corrupted). Exits 1 on any error.
//
//   ring_consumer --name demo --create --count 1000000 &
//   ring_producer --name demo --count 1000000 --min-size 1 --max-size 4096
//
// Records are read in place (zero copy): try_peek() returns a view into the
// ring, release() hands the space back to the producer. Releasing in batches
// saves stores on the shared cache line.
#include "ring_message.hpp"

#include <shm/platform/crc32c.hpp>
#include <shm/spsc/consumer.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>

namespace {

struct Options {
  std::string name = "demo-ring";
  std::string root;         // empty: $LIBSHM_ROOT or /dev/shm/libshm
  std::uint64_t count = 0;  // 0: whatever the producer says at end of stream
  std::uint64_t capacity = 0;
  std::uint32_t batch = 64;
  bool spin = false;
  bool create = false;
  bool unlink = false;
  double timeout_s = 10;
  bool check_sizes = false;  // --size or --min-size/--max-size given
  std::size_t min_size = 0;
  std::size_t max_size = 0;
};

constexpr std::uint64_t kDefaultCapacity = 4ull << 20;

struct Tally {
  std::uint64_t received = 0;  // data messages (not the end-of-stream record)
  std::uint64_t payload_bytes = 0;
  std::uint64_t lost = 0;        // sequence numbers skipped
  std::uint64_t duplicated = 0;  // sequence numbers seen again (or going backwards)
  std::uint64_t corrupt = 0;     // CRC mismatch or a record shorter than a header
  [[nodiscard]] std::uint64_t errors() const { return lost + duplicated + corrupt; }
};

// Checks one record against the message we expect next. Returns true at end of stream.
bool verify(std::span<const std::byte> record, const Options& opt, std::uint64_t& expected,
            Tally& t) {
  example::MessageHeader h{};
  if (record.size() < sizeof h) {
    if (t.corrupt++ < 10)
      fmt::print(stderr,
                 "ring_consumer: record of {} bytes after seq {} is shorter than a header\n",
                 record.size(), expected);
    return false;
  }
  std::memcpy(&h, record.data(), sizeof h);
  const auto body = record.subspan(sizeof h);
  const bool last = (h.flags & example::kEndOfStream) != 0;
  if (shm::crc32c(body) != h.crc) {
    if (t.corrupt++ < 10)
      fmt::print(stderr, "ring_consumer: seq {}: CRC32C mismatch ({} payload bytes)\n", h.seq,
                 body.size());
  } else if (opt.check_sizes && !last &&
             body.size() != example::payload_size(h.seq, opt.min_size, opt.max_size)) {
    if (t.corrupt++ < 10)
      fmt::print(stderr, "ring_consumer: seq {}: payload of {} bytes, the producer sends {}\n",
                 h.seq, body.size(), example::payload_size(h.seq, opt.min_size, opt.max_size));
  }
  if (h.seq > expected) {
    if (t.lost == 0)
      fmt::print(stderr, "ring_consumer: expected seq {}, got {}: {} lost\n", expected, h.seq,
                 h.seq - expected);
    t.lost += h.seq - expected;
  } else if (h.seq < expected) {
    if (t.duplicated++ == 0)
      fmt::print(stderr, "ring_consumer: expected seq {}, got {} again\n", expected, h.seq);
    return last;
  }
  expected = h.seq + 1;
  if (last) {
    expected = h.seq;  // the end record carries the number of data messages
    return true;
  }
  ++t.received;
  t.payload_bytes += body.size();
  return false;
}

int run(const Options& opt) {
  using Clock = std::chrono::steady_clock;
  const auto timeout = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(opt.timeout_s));

  auto consumer = example::create_or_open<shm::RingConsumer>(
      opt.name, opt.create, opt.create && opt.capacity == 0 ? kDefaultCapacity : opt.capacity,
      opt.root, std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
  if (!consumer) {
    fmt::print(stderr, "ring_consumer: cannot {} ring '{}': {}\n", opt.create ? "create" : "open",
               opt.name, consumer.error().what());
    return example::kExitRingError;
  }
  fmt::print("ring_consumer: {} ring '{}' ({} bytes), receiving ({}, release every {})\n",
             opt.create ? "created" : "opened", opt.name, consumer->capacity_bytes(),
             opt.spin ? "spin" : "blocking", opt.batch);
  std::fflush(stdout);

  Tally t;
  std::uint64_t expected = 0;
  std::uint32_t unreleased = 0;
  bool done = false;
  Clock::time_point start{};
  while (!done) {
    auto rec = consumer->try_peek();
    if (rec && !*rec) {
      // Empty. Hand back what we have read before waiting, so a producer
      // blocked on a full ring can go on.
      consumer->release();
      unreleased = 0;
      if (opt.spin) {
        rec = example::spin_until([&] { return consumer->try_peek(); }, Clock::now() + timeout);
      } else {
        rec = consumer->peek(timeout);  // spins briefly, then sleeps on a futex
      }
    }
    if (!rec) {
      // The ring itself is damaged (Errc::Corrupt names what): fail closed.
      fmt::print(stderr, "ring_consumer: after seq {}: {}\n", expected, rec.error().what());
      return example::kExitRingError;
    }
    if (!*rec) {
      fmt::print(stderr,
                 "ring_consumer: no message for {} s after seq {} (is the producer "
                 "running?)\n",
                 opt.timeout_s, expected);
      return example::kExitRingError;
    }
    if (t.received == 0) start = Clock::now();
    done = verify(**rec, opt, expected, t);  // the span is valid until release()
    if (++unreleased >= opt.batch || done) {
      consumer->release();
      unreleased = 0;
    }
    if (t.received % 65536 == 0) consumer->heartbeat();
  }
  const auto elapsed = Clock::now() - start;

  fmt::print("ring_consumer: received {} messages, {} payload bytes in {:.3f} s: {}\n", t.received,
             t.payload_bytes, std::chrono::duration<double>(elapsed).count(),
             example::throughput(t.received, t.payload_bytes, elapsed));
  bool ok = t.errors() == 0;
  if (opt.count != 0 && expected != opt.count) {
    fmt::print(stderr, "ring_consumer: the producer sent {} messages, expected {}\n", expected,
               opt.count);
    ok = false;
  }
  fmt::print("ring_consumer: verification {}: {} lost, {} duplicated, {} corrupt\n",
             ok ? "OK" : "FAILED", t.lost, t.duplicated, t.corrupt);
  if (opt.unlink) {
    if (auto r = shm::Segment::unlink(opt.name, opt.root); !r)
      fmt::print(stderr, "ring_consumer: unlink: {}\n", r.error().what());
  }
  return ok ? example::kExitOk : example::kExitVerifyFailed;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{"Reads and verifies ring_producer's messages from a libshm SpscRing."};
  app.add_option("--name", opt.name, "Ring name")->capture_default_str();
  app.add_option("--root", opt.root,
                 "Segment directory (default: $LIBSHM_ROOT or /dev/shm/libshm)");
  app.add_option("--count", opt.count,
                 "Messages to expect (default: the count announced at end of stream)");
  app.add_option("--capacity", opt.capacity,
                 "Ring bytes, a power of two (with --create; default 4MiB). When opening: the "
                 "capacity to expect (default: any)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--batch", opt.batch, "Release every N records")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  auto* spin = app.add_flag("--spin", opt.spin, "Busy-poll when the ring is empty (no syscalls)");
  bool blocking = true;  // the default; the flag documents it
  app.add_flag("--blocking", blocking, "Sleep on the ring's futex when empty (the default)")
      ->excludes(spin);
  app.add_flag("--create", opt.create, "Create the ring (else open it, waiting up to --timeout)");
  app.add_flag("--unlink", opt.unlink, "Remove the ring's name when done");
  app.add_option("--timeout", opt.timeout_s,
                 "Seconds to wait for the ring to appear, and for each message")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  // Optional: the producer's size options, to check every payload's exact size.
  auto* size = app.add_option("--size", opt.min_size, "Check: fixed payload size of the producer");
  auto* min_size = app.add_option("--min-size", opt.min_size, "Check: producer's --min-size");
  auto* max_size = app.add_option("--max-size", opt.max_size, "Check: producer's --max-size");
  min_size->needs(max_size)->excludes(size);
  max_size->excludes(size);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? example::kExitOk : example::kExitUsage;
  }
  opt.check_sizes = size->count() + max_size->count() > 0;
  if (size->count() > 0) opt.max_size = opt.min_size;
  if (opt.check_sizes && opt.min_size > opt.max_size) {
    fmt::print(stderr, "ring_consumer: --min-size {} is larger than --max-size {}\n", opt.min_size,
               opt.max_size);
    return example::kExitUsage;
  }
  return run(opt);
}
