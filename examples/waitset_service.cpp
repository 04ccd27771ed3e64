// waitset_service: one thread serves two rings and a channel through a
// Boost.Asio event loop. The loop watches WaitSet::fd() with a
// posix::stream_descriptor, and SIGTERM / SIGINT with a signal_set; on a
// signal it stops cleanly (detaches, then exits 0).
//
//   waitset_service --create --rings orders,quotes --channel audit &
//   ring_producer --name orders --count 1000 &
//   ring_producer --name quotes --count 1000 &
//   kill -TERM %1
//
// It counts what it takes per endpoint and prints the counts at the end.
// The relay and the egress transport are not WaitSet members yet
// (docs/waitset.md, "Limits"): a service that needs them waits on them in
// their own threads.
#include <shm/channel/consumer.hpp>
#include <shm/spsc/consumer.hpp>
#include <shm/waitset/waitset.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/signal_set.hpp>

#include <csignal>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

namespace {

struct Options {
  std::vector<std::string> rings{"orders", "quotes"};
  std::string channel;  // empty: none
  std::uint64_t capacity = 1 << 20;
  bool create = false;
};

// The endpoints and what was taken from each (tag = index).
struct Service {
  std::deque<shm::RingConsumer> rings;  // a deque: members must not move
  std::deque<shm::ChannelConsumer> channels;
  std::vector<std::string> names;
  std::vector<std::uint64_t> taken;
  bool failed = false;

  // Takes what a ready member has; false when the member is done for good.
  bool serve(const shm::ReadyEvent& e) {
    if (e.reason != shm::ReadyReason::Data) {
      fmt::print("{}: {}\n", names[e.tag], shm::to_string(e.reason));
      failed = failed || e.reason == shm::ReadyReason::Faulted;
      return false;
    }
    std::byte buf[1 << 16];
    if (e.tag < rings.size()) {
      auto& ring = rings[e.tag];
      for (;;) {
        auto r = ring.try_peek();
        if (!r || !*r) break;
        ring.release();
        ++taken[e.tag];
      }
      return true;
    }
    auto& channel = channels[e.tag - rings.size()];
    for (;;) {
      auto r = channel.try_receive_into(buf);
      if (!r || r->status != shm::ReceiveStatus::Received) break;
      ++taken[e.tag];
    }
    return true;
  }
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"one thread serving rings and a channel through Boost.Asio and a WaitSet"};
  app.add_option("--rings", o.rings, "ring names (comma separated)")->delimiter(',');
  app.add_option("--channel", o.channel, "a channel name (optional)");
  app.add_option("--capacity", o.capacity, "ring capacity in bytes, with --create");
  app.add_flag("--create", o.create, "create the rings and the channel");
  CLI11_PARSE(app, argc, argv);

  auto set = shm::WaitSet::make();
  if (!set) {
    fmt::print(stderr, "{}\n", set.error().what());
    return 1;
  }
  Service s;
  for (const auto& name : o.rings) {
    auto c = o.create ? shm::RingConsumer::create(name, {.capacity_bytes = o.capacity})
                      : shm::RingConsumer::open(name);
    if (!c) {
      fmt::print(stderr, "{}\n", c.error().what());
      return 1;
    }
    s.rings.push_back(std::move(*c));
    s.names.push_back(name);
  }
  if (!o.channel.empty()) {
    auto params = shm::ChannelParams::for_payload(4096);
    auto c = o.create && params ? shm::ChannelConsumer::create(o.channel, *params)
                                : shm::ChannelConsumer::open(o.channel);
    if (!c) {
      fmt::print(stderr, "{}\n", c.error().what());
      return 1;
    }
    s.channels.push_back(std::move(*c));
    s.names.push_back(o.channel);
  }
  s.taken.assign(s.names.size(), 0);
  for (std::uint64_t tag = 0; tag < s.rings.size(); ++tag)
    if (auto ok = set->attach(s.rings[tag], tag); !ok) return 1;
  for (std::uint64_t i = 0; i < s.channels.size(); ++i)
    if (auto ok = set->attach(s.channels[i], s.rings.size() + i); !ok) return 1;

  auto fd = set->fd();
  if (!fd) {
    fmt::print(stderr, "{}\n", fd.error().what());
    return 1;
  }
  boost::asio::io_context io;
  // The descriptor belongs to the set: release() it before the stream's
  // destructor would close it.
  boost::asio::posix::stream_descriptor ready(io, *fd);
  boost::asio::signal_set signals(io, SIGTERM, SIGINT);
  std::function<void()> arm = [&] {
    ready.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                     [&](const boost::system::error_code& ec) {
                       if (ec) return;
                       auto r = set->wait(std::chrono::nanoseconds::zero());
                       if (!r) {
                         fmt::print(stderr, "{}\n", r.error().what());
                         s.failed = true;
                         io.stop();
                         return;
                       }
                       for (const auto& e : r->ready)
                         if (!s.serve(e)) (void)set->detach(e.tag);
                       if (r->status != shm::WaitStatus::Closed) arm();
                     });
  };
  arm();
  signals.async_wait([&](const boost::system::error_code&, int sig) {
    fmt::print("signal {}: stopping\n", sig);
    ready.cancel();
    io.stop();
  });
  fmt::print("serving {} endpoints\n", s.names.size());
  std::fflush(stdout);
  io.run();
  (void)ready.release();
  for (std::size_t i = 0; i < s.names.size(); ++i)
    fmt::print("{}: {} taken\n", s.names[i], s.taken[i]);
  return s.failed ? 1 : 0;
}
