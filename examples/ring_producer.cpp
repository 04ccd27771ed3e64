// ring_producer: streams sequence-numbered, CRC32C-checked messages into an
// SpscRing; ring_consumer (the other process) verifies them.
//
//   ring_consumer --name demo --create --count 1000000 &
//   ring_producer --name demo --count 1000000 --min-size 1 --max-size 4096
//
// Either side may create the ring (--create); the other opens it, waiting up to
// --timeout for it to appear. Records are written in place (zero copy):
// try_reserve() hands out ring memory, commit() publishes it.
#include "ring_message.hpp"

#include <shm/platform/crc32c.hpp>
#include <shm/spsc/producer.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>

namespace {

struct Options {
  std::string name = "demo-ring";
  std::string root;  // empty: $LIBSHM_ROOT or /dev/shm/libshm
  std::uint64_t count = 1'000'000;
  std::size_t size = 64;
  std::size_t min_size = 0;
  std::size_t max_size = 0;
  bool mixed = false;  // --min-size/--max-size given
  std::uint64_t capacity = 0;
  std::uint32_t batch = 1;
  bool spin = false;
  bool create = false;
  bool unlink = false;
  double timeout_s = 10;
};

constexpr std::uint64_t kDefaultCapacity = 4ull << 20;

int run(const Options& opt) {
  using Clock = std::chrono::steady_clock;
  const auto timeout = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(opt.timeout_s));
  const std::size_t min_size = opt.mixed ? opt.min_size : opt.size;
  const std::size_t max_size = opt.mixed ? opt.max_size : opt.size;

  auto producer = example::create_or_open<shm::RingProducer>(
      opt.name, opt.create, opt.create && opt.capacity == 0 ? kDefaultCapacity : opt.capacity,
      opt.root, std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
  if (!producer) {
    fmt::print(stderr, "ring_producer: cannot {} ring '{}': {}\n", opt.create ? "create" : "open",
               opt.name, producer.error().what());
    return example::kExitRingError;
  }
  if (sizeof(example::MessageHeader) + max_size > producer->max_payload()) {
    fmt::print(stderr,
               "ring_producer: messages of up to {} bytes (+{} header) do not fit ring '{}' "
               "(capacity {}, largest record {}); use a larger --capacity\n",
               max_size, sizeof(example::MessageHeader), opt.name, producer->capacity_bytes(),
               producer->max_payload());
    return example::kExitUsage;
  }
  fmt::print(
      "ring_producer: {} ring '{}' ({} bytes), sending {} messages of {}..{} bytes ({}, "
      "commit every {})\n",
      opt.create ? "created" : "opened", opt.name, producer->capacity_bytes(), opt.count, min_size,
      max_size, opt.spin ? "spin" : "blocking", opt.batch);
  std::fflush(stdout);

  std::uint64_t payload_bytes = 0;
  std::uint32_t uncommitted = 0;
  const auto start = Clock::now();
  // seq == count is the end-of-stream record.
  for (std::uint64_t seq = 0; seq <= opt.count; ++seq) {
    const bool last = seq == opt.count;
    const std::size_t payload = last ? 0 : example::payload_size(seq, min_size, max_size);
    const std::size_t n = sizeof(example::MessageHeader) + payload;

    auto slot = producer->try_reserve(n);
    if (slot && !*slot) {
      // Full. Publish what we hold first: uncommitted records are invisible to
      // the consumer, so waiting on them would wait forever.
      producer->commit();
      uncommitted = 0;
      if (opt.spin) {
        slot =
            example::spin_until([&] { return producer->try_reserve(n); }, Clock::now() + timeout);
      } else {
        slot = producer->reserve(n, timeout);  // spins briefly, then sleeps on a futex
      }
    }
    if (!slot) {
      fmt::print(stderr, "ring_producer: reserve failed at message {}: {}\n", seq,
                 slot.error().what());
      return example::kExitRingError;
    }
    if (!*slot) {
      fmt::print(stderr,
                 "ring_producer: ring still full after {} s at message {} (is the "
                 "consumer running?)\n",
                 opt.timeout_s, seq);
      return example::kExitRingError;
    }

    // Write the payload straight into the ring, then the header with its CRC.
    std::span<std::byte> record = **slot;
    std::span<std::byte> body = record.subspan(sizeof(example::MessageHeader));
    example::fill_payload(body, seq);
    const example::MessageHeader header{seq, shm::crc32c(body), last ? example::kEndOfStream : 0};
    std::memcpy(record.data(), &header, sizeof header);
    payload_bytes += payload;

    if (++uncommitted >= opt.batch || last) {
      producer->commit();  // one release store publishes every record since the last commit
      uncommitted = 0;
    }
    if (seq % 65536 == 0) producer->heartbeat();  // "alive and making progress" for shmctl
  }
  const auto elapsed = Clock::now() - start;

  fmt::print("ring_producer: sent {} messages, {} payload bytes in {:.3f} s: {}\n", opt.count,
             payload_bytes, std::chrono::duration<double>(elapsed).count(),
             example::throughput(opt.count, payload_bytes, elapsed));
  if (opt.unlink) {
    if (auto ok = shm::Segment::unlink(opt.name, opt.root); !ok)
      fmt::print(stderr, "ring_producer: unlink: {}\n", ok.error().what());
  }
  return example::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{"Streams sequence-numbered, CRC32C-checked messages into a libshm SpscRing."};
  app.add_option("--name", opt.name, "Ring name")->capture_default_str();
  app.add_option("--root", opt.root,
                 "Segment directory (default: $LIBSHM_ROOT or /dev/shm/libshm)");
  app.add_option("--count", opt.count, "Messages to send")->capture_default_str();
  auto* size =
      app.add_option("--size", opt.size, "Fixed payload size in bytes")->capture_default_str();
  auto* min_size = app.add_option("--min-size", opt.min_size, "Mixed sizes: smallest payload");
  auto* max_size = app.add_option("--max-size", opt.max_size, "Mixed sizes: largest payload");
  min_size->needs(max_size);
  max_size->excludes(size);
  app.add_option("--capacity", opt.capacity,
                 "Ring bytes, a power of two (with --create; default 4MiB). When opening: the "
                 "capacity to expect (default: any)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--batch", opt.batch, "Commit every N records")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  auto* spin = app.add_flag("--spin", opt.spin, "Busy-poll when the ring is full (no syscalls)");
  bool blocking = true;  // the default; the flag documents it
  app.add_flag("--blocking", blocking, "Sleep on the ring's futex when full (the default)")
      ->excludes(spin);
  app.add_flag("--create", opt.create, "Create the ring (else open it, waiting up to --timeout)");
  app.add_flag("--unlink", opt.unlink, "Remove the ring's name when done");
  app.add_option("--timeout", opt.timeout_s,
                 "Seconds to wait for the ring to appear, and for room in a full ring")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? example::kExitOk : example::kExitUsage;
  }
  opt.mixed = max_size->count() > 0;
  if (opt.mixed && opt.min_size > opt.max_size) {
    fmt::print(stderr, "ring_producer: --min-size {} is larger than --max-size {}\n", opt.min_size,
               opt.max_size);
    return example::kExitUsage;
  }
  return run(opt);
}
