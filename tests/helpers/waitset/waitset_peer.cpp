// The other side of a WaitSet member, in its own process, driven by
// tests/integration/waitset/waitset_process_test.cpp.
//
//   waitset_peer ROLE NAME STEP...
// ROLE: ring-producer | ring-consumer | channel-producer | channel-consumer |
//       topic-publisher | relay-writer | relay-reader | egress-producer |
//       egress-transport | mpmc-producer | mpmc-consumer | fanout-producer
// (opened by NAME; prints "READY" once attached), then each STEP in order:
//   go:FILE        wait until FILE exists
//   sleep:MS       sleep
//   push:TEXT      ring or MPMC producer: push TEXT (waits for room)
//   pop            ring or MPMC consumer: pop one record (waits for one)
//   reserve        MPMC producer: claim a cell and keep it (no commit);
//                  prints "RESERVED"
//   peek           MPMC consumer: claim an item and keep it (no release);
//                  prints "PEEKED"
//   submit:P:TEXT  fanout producer: submit TEXT at priority P (waits for room)
//   submit-crash:P:TEXT fanout producer: submit, and stop between its ring
//                  commit and its bitmap bit (the crash hook); prints
//                  "CRASH-POINT" and waits there to be killed
//   send:TEXT      channel producer: send TEXT (waits for room)
//   receive        channel consumer: receive one payload (waits for one)
//   finish         channel producer: finish() the stream
//   publish:TEXT   topic publisher: loan and publish TEXT (waits for a chunk
//                  and for Block subscribers' room)
//   write:KEY      relay writer: write the 8-byte value 1 under KEY (waits
//                  for room under Block)
//   take:N[:MS]    relay reader: take up to N entries (after waiting up to
//                  10 s for one), hold them MS ms (default 0), commit them
//   enqueue:TEXT   egress producer: enqueue TEXT (waits for room)
//   reconnect      egress producer: reconnect at the next generation (fences
//                  the transport)
//   claim-ack      egress transport: claim one record (waits for one), ack it
//   die            SIGKILL itself (no detach, no wake owed)
//   stress:N:SEED  ring producer, topic publisher or relay writer: push /
//                  publish / write N 8-byte records (their index), with
//                  random pauses (none, a spin, or up to 200 us of sleep);
//                  relay reader: take and commit N entries, one take of up
//                  to 3 at a time, with the same pauses; MPMC or fanout
//                  producer: SEED << 32 | index (the fanout at priority
//                  index % 2), with the same pauses; MPMC consumer: pop N
//                  8-byte records, each its index, with the same pauses
//   poke:OFFSET:HEX write the 8-byte value HEX at byte OFFSET of the
//                  segment file (a hostile or buggy process; no wake)
//   poke32:OFFSET:HEX the same with a 4-byte value
// After the steps it prints "DONE" and exits 0 (detaching cleanly).
// Exit codes: 2 usage, 3 library error.
#include "shm/channel/consumer.hpp"
#include "shm/channel/producer.hpp"
#include "shm/egress/egress.hpp"
#include "shm/fanout/priority_fanout.hpp"
#include "shm/mpmc/mpmc_ring.hpp"
#include "shm/platform/cpu_relax.hpp"
#include "shm/relay/relay.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"
#include "shm/testing/fanout_crash.hpp"
#include "shm/topic/topic.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

[[noreturn]] void die(int code, const std::string& msg) {
  std::fprintf(stderr, "waitset_peer: %s\n", msg.c_str());
  std::_Exit(code);
}

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

std::span<const std::byte> bytes(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

template <class T>
T need(shm::Result<T> r) {
  if (!r) die(3, r.error().what());
  return std::move(*r);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  if (argc < 3) die(2, "usage: waitset_peer ROLE NAME STEP...");
  const std::string role = argv[1];
  const std::string name = argv[2];
  std::optional<shm::RingProducer> rp;
  std::optional<shm::RingConsumer> rc;
  std::optional<shm::ChannelProducer> cp;
  std::optional<shm::ChannelConsumer> cc;
  std::optional<shm::TopicPublisher> tp;
  std::optional<shm::RelayWriter> rw;
  std::optional<shm::RelayReader> rr;
  std::optional<shm::Egress> ep;
  std::optional<shm::EgressTransport> et;
  std::optional<shm::MpmcProducer> mp;
  std::optional<shm::MpmcConsumer> mc;
  std::optional<shm::FanoutProducer> fp;
  std::string topic_path;
  if (role == "ring-producer")
    rp.emplace(need(shm::RingProducer::open(name)));
  else if (role == "ring-consumer")
    rc.emplace(need(shm::RingConsumer::open(name)));
  else if (role == "channel-producer")
    cp.emplace(need(shm::ChannelProducer::open(name)));
  else if (role == "channel-consumer")
    cc.emplace(need(shm::ChannelConsumer::open(name)));
  else if (role == "topic-publisher") {
    shm::Segment seg = need(shm::open_topic(name));
    topic_path = seg.path();
    tp.emplace(need(shm::TopicPublisher::attach(std::move(seg))));
  } else if (role == "relay-writer")
    rw.emplace(need(shm::RelayWriter::open(name)));
  else if (role == "relay-reader")
    rr.emplace(need(shm::RelayReader::open(name)));
  else if (role == "egress-producer")
    ep.emplace(need(shm::Egress::open(name)));
  else if (role == "egress-transport")
    et.emplace(need(shm::EgressTransport::open(name)));
  else if (role == "mpmc-producer")
    mp.emplace(need(shm::MpmcProducer::open(name)));
  else if (role == "mpmc-consumer")
    mc.emplace(need(shm::MpmcConsumer::open(name)));
  else if (role == "fanout-producer")
    fp.emplace(need(shm::FanoutProducer::open(name, shm::FanoutParams{0, 0, 0})));
  else
    die(2, "unknown role " + role);
  const std::string path = mp   ? mp->segment().path()
                           : mc ? mc->segment().path()
                           : fp ? fp->bitmap_segment().path()
                           : tp ? topic_path
                           : ep ? ep->segment().path()
                           : et ? et->egress().segment().path()
                           : rw ? rw->segment().path()
                           : rr ? rr->segment().path()
                           : rp ? rp->segment().path()
                           : rc ? rc->segment().path()
                           : cp ? cp->segment().path()
                                : cc->segment().path();
  // Publishes `payload` (waiting for a chunk and for Block subscribers).
  auto publish = [&](std::span<const std::byte> payload) {
    auto loan = need(tp->loan(payload.size(), 10s));
    if (!loan) die(3, "loan timed out");
    std::memcpy(loan->bytes().data(), payload.data(), payload.size());
    if (need(tp->publish(std::move(*loan), 10s)).status != shm::PublishStatus::Published)
      die(3, "publish refused");
  };
  // Writes `value` under `key` (waiting for room under Block).
  auto write = [&](std::uint64_t key, std::uint64_t value) {
    auto w = need(rw->write(key, std::as_bytes(std::span(&value, 1)), 10s));
    if (w.status == shm::WriteStatus::TimedOut) die(3, "relay write timed out");
  };
  // Takes up to `credit` entries (waiting for one) and commits them.
  auto take = [&](std::size_t credit, int hold_ms) -> std::size_t {
    if (!need(rr->wait(10s))) die(3, "relay wait timed out");
    const std::size_t n = need(rr->take(credit)).size();
    std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
    if (auto ok = rr->commit(); !ok) die(3, ok.error().what());
    return n;
  };
  say("READY");
  for (int i = 3; i < argc; ++i) {
    const std::string step = argv[i];
    const auto colon = step.find(':');
    const std::string verb = step.substr(0, colon);
    const std::string arg = colon == std::string::npos ? "" : step.substr(colon + 1);
    if (verb == "go") {
      while (!std::filesystem::exists(arg)) ::usleep(200);
    } else if (verb == "sleep") {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::stoi(arg)));
    } else if (verb == "push" && rp) {
      if (!need(rp->push(bytes(arg), 10s))) die(3, "push timed out");
    } else if (verb == "pop" && rc) {
      std::byte buf[4096];
      if (!need(rc->pop(buf, 10s))) die(3, "pop timed out");
    } else if (verb == "push" && mp) {
      if (!need(mp->push(bytes(arg), 10s))) die(3, "push timed out");
    } else if (verb == "pop" && mc) {
      std::byte buf[4096];
      if (!need(mc->pop(buf, 10s))) die(3, "pop timed out");
    } else if (verb == "reserve" && mp) {
      if (!need(mp->try_reserve())) die(3, "reserve: full");
      say("RESERVED");
    } else if (verb == "peek" && mc) {
      if (!need(mc->try_peek())) die(3, "peek: empty");
      say("PEEKED");
    } else if ((verb == "submit" || verb == "submit-crash") && fp) {
      const auto sep = arg.find(':');
      const auto priority = static_cast<std::uint32_t>(std::stoul(arg.substr(0, sep)));
      if (verb == "submit-crash")
        shm::test_hooks::set_fanout_crash_hook([](shm::test_hooks::FanoutCrashPoint) {
          say("CRASH-POINT");
          for (;;) ::pause();
        });
      if (!need(fp->submit(priority, bytes(arg.substr(sep + 1)), 10s))) die(3, "submit timed out");
    } else if (verb == "send" && cp) {
      if (need(cp->send(bytes(arg), 10s)).status != shm::SendStatus::Ok) die(3, "send refused");
    } else if (verb == "receive" && cc) {
      std::byte buf[4096];
      if (need(cc->receive_into(buf, 10s)).status != shm::ReceiveStatus::Received)
        die(3, "receive got nothing");
    } else if (verb == "finish" && cp) {
      if (auto ok = cp->finish(); !ok) die(3, ok.error().what());
    } else if (verb == "publish" && tp) {
      publish(bytes(arg));
    } else if (verb == "write" && rw) {
      write(std::stoull(arg), 1);
    } else if (verb == "take" && rr) {
      const auto sep = arg.find(':');
      const int hold = sep == std::string::npos ? 0 : std::stoi(arg.substr(sep + 1));
      if (take(std::stoull(arg.substr(0, sep)), hold) == 0) die(3, "relay take got nothing");
    } else if (verb == "enqueue" && ep) {
      if (need(ep->enqueue(bytes(arg), 10s)).status != shm::egress::EnqueueStatus::Enqueued)
        die(3, "enqueue timed out");
    } else if (verb == "reconnect" && ep) {
      const std::uint64_t g = need(ep->projection()).generation;
      (void)need(ep->reconnect(g + 1));
    } else if (verb == "claim-ack" && et) {
      std::vector<std::byte> payload;
      const auto c = need(et->claim(payload, 10s));
      if (c.status != shm::egress::ClaimStatus::Claimed) die(3, "claim got nothing");
      (void)need(et->ack(c.envelope.sequence));
    } else if (verb == "die") {
      ::raise(SIGKILL);
    } else if (verb == "stress" && mc) {
      const auto sep = arg.find(':');
      const std::uint64_t n = std::stoull(arg.substr(0, sep));
      std::mt19937_64 rng(std::stoull(arg.substr(sep + 1)));
      for (std::uint64_t k = 0; k < n; ++k) {
        std::uint64_t v = 0;
        const auto got = need(mc->pop(std::as_writable_bytes(std::span(&v, 1)), 10s));
        if (!got) die(3, "stress pop timed out");
        if (v != k) die(3, "stress pop: got " + std::to_string(v) + ", want " + std::to_string(k));
        if (rng() % 4 >= 2) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200));
      }
    } else if (verb == "stress" && (mp || fp)) {
      const auto sep = arg.find(':');
      const std::uint64_t n = std::stoull(arg.substr(0, sep));
      const std::uint64_t seed = std::stoull(arg.substr(sep + 1));
      std::mt19937_64 rng(seed);
      for (std::uint64_t k = 0; k < n; ++k) {
        const std::uint64_t v = seed << 32 | k;
        const auto payload = std::as_bytes(std::span(&v, 1));
        const bool ok = mp ? need(mp->push(payload, 10s))
                           : need(fp->submit(static_cast<std::uint32_t>(k % 2), payload, 10s));
        if (!ok) die(3, "stress push timed out");
        switch (rng() % 4) {
          case 0:
            break;
          case 1:
            for (int s = static_cast<int>(rng() % 2000); s > 0; --s) shm::detail::cpu_relax();
            break;
          default:
            std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200));
        }
      }
    } else if (verb == "stress" && (rp || tp || rw || rr)) {
      const auto sep = arg.find(':');
      const std::uint64_t n = std::stoull(arg.substr(0, sep));
      std::mt19937_64 rng(std::stoull(arg.substr(sep + 1)));
      for (std::uint64_t k = 0; k < n;) {
        if (rr) {
          k += take(3, 0);
          continue;  // no pause: the set's side pauses
        }
        if (tp)
          publish(std::as_bytes(std::span(&k, 1)));
        else if (rw)
          write(0, k);
        else if (!need(rp->push(std::as_bytes(std::span(&k, 1)), 10s)))
          die(3, "stress push timed out");
        ++k;
        switch (rng() % 4) {
          case 0:
            break;
          case 1:
            for (int s = static_cast<int>(rng() % 2000); s > 0; --s) shm::detail::cpu_relax();
            break;
          default:
            std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200));
        }
      }
    } else if (verb == "poke" || verb == "poke32") {
      const auto sep = arg.find(':');
      const auto offset = static_cast<off_t>(std::stoull(arg.substr(0, sep)));
      const std::uint64_t value = std::stoull(arg.substr(sep + 1), nullptr, 16);
      const std::uint32_t value32 = static_cast<std::uint32_t>(value);
      const void* data = verb == "poke" ? static_cast<const void*>(&value) : &value32;
      const std::size_t size = verb == "poke" ? sizeof value : sizeof value32;
      const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0 || ::pwrite(fd, data, size, offset) != static_cast<ssize_t>(size))
        die(3, "poke " + path + ": " + std::strerror(errno));
      ::close(fd);
    } else {
      die(2, "step " + step + " does not fit role " + role);
    }
  }
  say("DONE");
  return 0;
}
