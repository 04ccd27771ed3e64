// channel_consumer: receives the messages channel_producer sends through a
// Channel and checks each one (sequence and content). Payloads are read in
// place: receive() lends a view into the page, which is given back when the
// lease goes out of scope.
//
//   channel_consumer --name demo --create &
//   channel_producer --name demo --count 1000000
//
// Exit status: 0 the stream ended cleanly (the producer called finish() and
// everything it published arrived), 3 the producer died or left without
// finishing (everything it published was still delivered), 4 the channel is
// corrupt or faulted, 1 other errors, 2 usage.
#include <shm/channel/consumer.hpp>

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
  bool create = false;
  std::uint32_t pages = 4;
  std::uint64_t page_bytes = 256 * 1024;
  std::uint32_t descriptors = 4096;
  std::uint32_t ring = 16384;
  double timeout_s = 10;
  std::uint32_t coalesce = 1;      // receive coalescing: payloads (1: off)
  std::uint32_t coalesce_us = 20;  // ... and its delay bound
  bool quiet = false;
};

bool check(std::span<const std::byte> m, std::uint64_t seq) {
  std::uint64_t stamped = 0;
  if (m.size() < sizeof stamped) return false;
  std::memcpy(&stamped, m.data(), sizeof stamped);
  if (stamped != seq) return false;
  for (std::size_t i = sizeof seq; i < m.size(); ++i)
    if (m[i] != static_cast<std::byte>(seq + i)) return false;
  return true;
}

shm::Result<shm::ChannelConsumer> attach(const Options& o) {
  const shm::ChannelParams params{.pages = o.pages,
                                  .page_bytes = o.page_bytes,
                                  .descriptors_per_page = o.descriptors,
                                  .ring_cells = o.ring};
  if (o.create) return shm::ChannelConsumer::create(o.name, params, {.root = o.root});
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(o.timeout_s);
  for (;;) {
    auto c = shm::ChannelConsumer::open(o.name, {}, {.root = o.root});
    if (c || c.error().code != shm::Errc::NotFound || std::chrono::steady_clock::now() >= deadline)
      return c;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int run(const Options& o) {
  using Clock = std::chrono::steady_clock;
  const auto timeout = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(o.timeout_s));
  auto consumer = attach(o);
  if (!consumer) {
    fmt::print(stderr, "channel_consumer: {}\n", consumer.error().what());
    return 1;
  }
  if (auto ok = consumer->set_coalescing(
          {.descriptors = o.coalesce, .max_delay = std::chrono::microseconds(o.coalesce_us)});
      !ok) {
    fmt::print(stderr, "channel_consumer: {}\n", ok.error().what());
    return 1;
  }
  if (!o.quiet)
    fmt::print("channel_consumer: channel '{}' ({} pages of {} bytes), waiting for messages\n",
               o.name, consumer->pages(), consumer->page_bytes());
  std::fflush(stdout);
  std::uint64_t received = 0, bytes = 0;
  std::optional<Clock::time_point> start;
  for (;;) {
    auto r = consumer->receive(timeout);
    if (!r) {
      const shm::Errc code = r.error().code;
      fmt::print(stderr, "channel_consumer: after {} messages: {}\n", received, r.error().what());
      return code == shm::Errc::ProducerDied                              ? 3
             : (code == shm::Errc::Corrupt || code == shm::Errc::Faulted) ? 4
                                                                          : 1;
    }
    if (r->status == shm::ReceiveStatus::End) break;
    if (r->status == shm::ReceiveStatus::Empty) {
      fmt::print(stderr,
                 "channel_consumer: nothing for {} s after {} messages (producer alive "
                 "but idle)\n",
                 o.timeout_s, received);
      return 1;
    }
    if (!start) start = Clock::now();
    const shm::ChannelLease& lease = r->lease;  // a view into the page: no copy
    if (!check(lease.bytes(), lease.sequence())) {
      fmt::print(stderr, "channel_consumer: message {} (epoch {}) has unexpected content\n",
                 lease.sequence(), lease.epoch());
      return 4;
    }
    ++received;
    bytes += lease.size();
    if (received % 65536 == 0) consumer->heartbeat();
  }  // each lease is given back at the end of its iteration
  const double seconds = start ? std::chrono::duration<double>(Clock::now() - *start).count() : 0;
  fmt::print(
      "channel_consumer: stream ended cleanly: {} messages, {} bytes, {} page epochs, "
      "{:.2f} M/s\n",
      received, bytes, consumer->current_epoch(),
      seconds > 0 ? static_cast<double>(received) / seconds / 1e6 : 0.0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Receives and checks messages from a libshm Channel"};
  app.add_option("--name", o.name, "channel segment name");
  app.add_option("--root", o.root, "segment directory (default $LIBSHM_ROOT or /dev/shm/libshm)");
  app.add_flag("--create", o.create, "create the channel (else open it)");
  app.add_option("--pages", o.pages, "page slots P (power of two >= 2), with --create");
  app.add_option("--page-bytes", o.page_bytes, "bytes per page, with --create");
  app.add_option("--descriptors", o.descriptors, "descriptor cells per page, with --create");
  app.add_option("--ring", o.ring, "descriptor ring cells (power of two), with --create");
  app.add_option("--timeout", o.timeout_s, "seconds to wait for the channel / a message");
  app.add_option("--coalesce", o.coalesce,
                 "receive coalescing: wait for this many payloads (default 1: off)");
  app.add_option("--coalesce-us", o.coalesce_us, "... or this many microseconds (default 20)");
  app.add_flag("--quiet", o.quiet, "only the final line");
  CLI11_PARSE(app, argc, argv);
  return run(o);
}
