// channel_producer: streams sequence-numbered messages into a Channel (the
// rotating paged admission channel); channel_consumer (another process)
// receives and checks them.
//
//   channel_consumer --name demo --create &
//   channel_producer --name demo --count 1000000 --max-size 512
//
// Either side may create the channel (--create, with the geometry options);
// the other opens it, waiting up to --timeout for it to appear. Messages are
// written in place: try_reserve() hands out page memory, commit() publishes
// it (the library adds a CRC32C the consumer checks). When the consumer lags,
// the producer sees back-pressure (ring full / page quota exhausted) and
// waits for it with the blocking reserve().
#include <shm/channel/producer.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>

namespace {

struct Options {
  std::string name = "demo-channel";
  std::string root;
  std::uint64_t count = 1'000'000;
  std::size_t min_size = 8;
  std::size_t max_size = 256;
  bool create = false;
  std::uint32_t pages = 4;
  std::uint64_t page_bytes = 256 * 1024;
  std::uint32_t descriptors = 4096;
  std::uint32_t ring = 16384;
  double timeout_s = 10;
  std::uint64_t progress = 0;  // a progress line every this many messages (0: none)
};

// Message n: its sequence in the first 8 bytes, then bytes derived from it.
std::size_t message_size(std::uint64_t seq, const Options& o) {
  const std::size_t span = o.max_size - o.min_size + 1;
  return o.min_size + static_cast<std::size_t>((seq * 2654435761u) % span);
}
void fill(std::span<std::byte> m, std::uint64_t seq) {
  std::memcpy(m.data(), &seq, sizeof seq);
  for (std::size_t i = sizeof seq; i < m.size(); ++i) m[i] = static_cast<std::byte>(seq + i);
}

shm::Result<shm::ChannelProducer> attach(const Options& o) {
  const shm::ChannelParams params{.pages = o.pages,
                                  .page_bytes = o.page_bytes,
                                  .descriptors_per_page = o.descriptors,
                                  .ring_cells = o.ring};
  if (o.create) return shm::ChannelProducer::create(o.name, params, {.root = o.root});
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(o.timeout_s);
  for (;;) {
    auto p = shm::ChannelProducer::open(o.name, {}, {.root = o.root});
    if (p || p.error().code != shm::Errc::NotFound || std::chrono::steady_clock::now() >= deadline)
      return p;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int run(const Options& o) {
  using Clock = std::chrono::steady_clock;
  const auto timeout = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(o.timeout_s));
  auto producer = attach(o);
  if (!producer) {
    fmt::print(stderr, "channel_producer: {}\n", producer.error().what());
    return 1;
  }
  if (o.max_size > producer->max_payload()) {
    fmt::print(stderr, "channel_producer: --max-size {} exceeds a page ({} bytes)\n", o.max_size,
               producer->max_payload());
    return 2;
  }
  fmt::print(
      "channel_producer: channel '{}': {} pages of {} bytes / {} descriptors, ring {}; "
      "sending {} messages of {}..{} bytes\n",
      o.name, producer->pages(), producer->page_bytes(), producer->descriptors_per_page(),
      producer->ring_cells(), o.count, o.min_size, o.max_size);
  std::fflush(stdout);
  std::uint64_t waits = 0;
  const auto start = Clock::now();
  for (std::uint64_t seq = 0; seq < o.count; ++seq) {
    const std::size_t n = message_size(seq, o);
    auto r = producer->try_reserve(n);
    if (r && !*r) {  // back-pressure: the consumer is behind
      ++waits;
      r = producer->reserve(n, timeout);
    }
    if (!r) {
      fmt::print(stderr, "channel_producer: message {}: {}\n", seq, r.error().what());
      return 1;
    }
    if (!*r) {
      fmt::print(stderr, "channel_producer: still {} after {} s at message {} (consumer gone?)\n",
                 shm::to_string(r->status), o.timeout_s, seq);
      return 1;
    }
    fill(r->bytes(), seq);                 // written straight into the page
    if (auto sent = r->commit(); !sent) {  // an uncommitted reservation is abandoned
      fmt::print(stderr, "channel_producer: message {}: {}\n", seq, sent.error().what());
      return 1;
    }
    if (seq % 65536 == 0) producer->heartbeat();
    if (o.progress != 0 && (seq + 1) % o.progress == 0) {
      fmt::print("channel_producer: {} messages sent\n", seq + 1);
      std::fflush(stdout);
    }
  }
  if (auto ok = producer->finish(); !ok) {
    fmt::print(stderr, "channel_producer: finish: {}\n", ok.error().what());
    return 1;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  fmt::print(
      "channel_producer: sent {} messages in {:.3f} s ({:.2f} M/s), {} page epochs, "
      "{} back-pressure waits; stream finished (CLEAN)\n",
      o.count, seconds, static_cast<double>(o.count) / seconds / 1e6, producer->active_epoch() + 1,
      waits);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Streams messages into a libshm Channel (rotating paged admission)"};
  app.add_option("--name", o.name, "channel segment name");
  app.add_option("--root", o.root, "segment directory (default $LIBSHM_ROOT or /dev/shm/libshm)");
  app.add_option("--count", o.count, "messages to send");
  app.add_option("--min-size", o.min_size, "smallest message (>= 8)")
      ->check(CLI::Range(8, 1 << 30));
  app.add_option("--max-size", o.max_size, "largest message");
  app.add_flag("--create", o.create, "create the channel (else open it)");
  app.add_option("--pages", o.pages, "page slots P (power of two >= 2), with --create");
  app.add_option("--page-bytes", o.page_bytes, "bytes per page, with --create");
  app.add_option("--descriptors", o.descriptors, "descriptor cells per page, with --create");
  app.add_option("--ring", o.ring, "descriptor ring cells (power of two), with --create");
  app.add_option("--timeout", o.timeout_s, "seconds to wait for the channel / the consumer");
  app.add_option("--progress", o.progress, "print a line every N messages sent (default 0: none)");
  CLI11_PARSE(app, argc, argv);
  if (o.max_size < o.min_size) {
    fmt::print(stderr, "channel_producer: --max-size must be >= --min-size\n");
    return 2;
  }
  return run(o);
}
