// waitset_service: one thread serves two rings, a relay (as its reader) and
// an egress (as its transport), and optionally a channel, through a
// Boost.Asio event loop. The loop watches WaitSet::fd() with a
// posix::stream_descriptor, and SIGTERM / SIGINT with a signal_set; on a
// signal it stops cleanly (detaches, then exits 0).
//
//   waitset_service --create --rings orders,quotes --relay fills --egress out &
//   ring_producer --name orders --count 1000 &
//   ring_producer --name quotes --count 1000 &
//   kill -TERM %1
//
// It counts what it takes per endpoint (records, relay entries, egress
// records claimed; an egress record is acknowledged at once, as if sent) and
// prints the counts at the end.
#include <shm/channel/consumer.hpp>
#include <shm/egress/egress.hpp>
#include <shm/relay/relay.hpp>
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
#include <optional>
#include <string>
#include <vector>

namespace {

struct Options {
  std::vector<std::string> rings{"orders", "quotes"};
  std::string channel;  // empty: none
  std::string relay;    // empty: none
  std::string egress;   // empty: none
  std::uint64_t capacity = 1 << 20;
  bool create = false;
};

// The endpoints and what was taken from each (tag = index into names).
struct Service {
  enum class Kind { Ring, Channel, Relay, Egress };
  // Deques and optionals: members must not move while attached.
  std::deque<shm::RingConsumer> rings;
  std::deque<shm::ChannelConsumer> channels;
  std::optional<shm::RelayReader> relay;
  std::optional<shm::EgressTransport> egress;
  std::vector<std::string> names;
  std::vector<Kind> kinds;
  std::vector<std::size_t> index;  // into rings / channels
  std::vector<std::uint64_t> taken;
  std::vector<std::byte> payload;  // an egress record's payload
  bool failed = false;

  std::uint64_t add(std::string name, Kind kind, std::size_t i) {
    names.push_back(std::move(name));
    kinds.push_back(kind);
    index.push_back(i);
    taken.push_back(0);
    return names.size() - 1;
  }

  // Takes what a ready member has; false when the member is done for good.
  bool serve(const shm::ReadyEvent& e) {
    if (e.reason != shm::ReadyReason::Data) {
      fmt::print("{}: {}\n", names[e.tag], shm::to_string(e.reason));
      failed = failed || e.reason == shm::ReadyReason::Faulted;
      return false;
    }
    std::uint64_t& n = taken[e.tag];
    switch (kinds[e.tag]) {
      case Kind::Ring:
        for (auto& ring = rings[index[e.tag]];;) {
          auto r = ring.try_peek();
          if (!r || !*r) break;
          ring.release();
          ++n;
        }
        break;
      case Kind::Channel:
        for (auto& channel = channels[index[e.tag]];;) {
          std::byte buf[1 << 16];
          auto r = channel.try_receive_into(buf);
          if (!r || r->status != shm::ReceiveStatus::Received) break;
          ++n;
        }
        break;
      case Kind::Relay:
        for (;;) {  // take a batch, use it, commit it
          auto got = relay->take(64);
          if (!got || got->empty()) break;
          n += got->size();
          if (!relay->commit()) return false;
        }
        break;
      case Kind::Egress:
        for (;;) {  // claim, "send", acknowledge
          auto c = egress->try_claim(payload);
          if (!c || c->status != shm::egress::ClaimStatus::Claimed) break;
          ++n;
          if (!egress->ack(c->envelope.sequence)) return false;
        }
        break;
    }
    return true;
  }
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"one thread serving rings, a relay and an egress through Boost.Asio and a WaitSet"};
  app.add_option("--rings", o.rings, "ring names (comma separated)")->delimiter(',');
  app.add_option("--channel", o.channel, "a channel name (optional)");
  app.add_option("--relay", o.relay, "a relay name, served as its reader (optional)");
  app.add_option("--egress", o.egress, "an egress name, served as its transport (optional)");
  app.add_option("--capacity", o.capacity, "ring capacity in bytes, with --create");
  app.add_flag("--create", o.create, "create the rings, the channel, the relay and the egress");
  CLI11_PARSE(app, argc, argv);

  // The endpoints outlive the set (declared first): the set touches an
  // attached egress when it is destroyed (it takes its waiter count back).
  Service s;
  auto set = shm::WaitSet::make();
  if (!set) {
    fmt::print(stderr, "{}\n", set.error().what());
    return 1;
  }
  for (const auto& name : o.rings) {
    auto c = o.create ? shm::RingConsumer::create(name, {.capacity_bytes = o.capacity})
                      : shm::RingConsumer::open(name);
    if (!c) {
      fmt::print(stderr, "{}\n", c.error().what());
      return 1;
    }
    s.rings.push_back(std::move(*c));
    (void)s.add(name, Service::Kind::Ring, s.rings.size() - 1);
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
    (void)s.add(o.channel, Service::Kind::Channel, s.channels.size() - 1);
  }
  if (!o.relay.empty()) {
    shm::RelayConfig config;  // a FIFO of 64-byte values, writers blocked when full
    config.policy = shm::policy::kRawFifo;
    config.value_bytes = 64;
    auto r = o.create ? shm::RelayReader::create(o.relay, config) : shm::RelayReader::open(o.relay);
    if (!r) {
      fmt::print(stderr, "{}\n", r.error().what());
      return 1;
    }
    s.relay.emplace(std::move(*r));
    (void)s.add(o.relay, Service::Kind::Relay, 0);
  }
  if (!o.egress.empty()) {
    auto t = o.create ? shm::EgressTransport::create(o.egress, {})
                      : shm::EgressTransport::open(o.egress);
    if (!t) {
      fmt::print(stderr, "{}\n", t.error().what());
      return 1;
    }
    s.egress.emplace(std::move(*t));
    (void)s.add(o.egress, Service::Kind::Egress, 0);
  }
  for (std::uint64_t tag = 0; tag < s.names.size(); ++tag) {
    shm::Result<void> ok;
    switch (s.kinds[tag]) {
      case Service::Kind::Ring:
        ok = set->attach(s.rings[s.index[tag]], tag);
        break;
      case Service::Kind::Channel:
        ok = set->attach(s.channels[s.index[tag]], tag);
        break;
      case Service::Kind::Relay:
        ok = set->attach(*s.relay, tag);
        break;
      case Service::Kind::Egress:
        ok = set->attach(*s.egress, tag);
        break;
    }
    if (!ok) {
      fmt::print(stderr, "{}\n", ok.error().what());
      return 1;
    }
  }

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
