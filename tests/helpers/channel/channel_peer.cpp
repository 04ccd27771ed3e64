// A channel endpoint carrying self-checking records (common/ring_record.hpp:
// sequence + CRC32C) in its own process, for the shm-bridge tests.
//
//   channel_peer produce NAME COUNT [--start S] [--min B] [--max B] [--tail-when FILE]
//       sends records S..S+COUNT-1 (blocking), prints "DONE <count>"; with
//       --tail-when, then waits for FILE to exist and sends record S+COUNT
//       ("TAIL <seq>"). Finishes the channel at the end. A channel carries
//       one producer lifetime, so the tail record comes from the same process.
//   channel_peer consume NAME COUNT [--start S] [--min B] [--max B]
//       receives COUNT records, verifying each; prints "FIRST <seq>" and
//       "OK <count> <last>". When the channel ends (End, ProducerDied: its
//       producer, an import bridge, stopped or died) it reopens the name
//       until a new incarnation is there ("REOPENED <incarnation>") and
//       goes on: records must continue across incarnations.
//
// Exit codes: 0 ok, 2 usage, 3 library error, 4 verification failure.
#include "common/ring_record.hpp"
#include "shm/channel/consumer.hpp"
#include "shm/channel/producer.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
namespace rr = shm::test::ring_record;

namespace {

struct Args {
  std::string mode, name, tail_when;
  std::vector<std::string> pos;
  std::uint64_t start = 0, min = 1, max = 4096;
  bool has_start = false;
};

[[noreturn]] void die(int code, const std::string& msg) {
  std::fprintf(stderr, "channel_peer: %s\n", msg.c_str());
  std::fflush(stdout);
  std::_Exit(code);
}

void say(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

void send(shm::ChannelProducer& p, std::uint64_t seq, const Args& a, std::vector<std::byte>& buf) {
  buf.resize(rr::size_for(seq, a.min, a.max));
  rr::fill(seq, buf);
  auto r = p.send(buf, 30s);
  if (!r) die(3, fmt::format("send {}: {}", seq, r.error().what()));
  if (!*r) die(3, fmt::format("send {}: {} for 30 s", seq, to_string(r->status)));
}

void produce(const Args& a) {
  std::optional<shm::ChannelProducer> p;
  for (int i = 0; i < 500 && !p; ++i) {
    auto o = shm::ChannelProducer::open(a.name);
    if (o) {
      p.emplace(std::move(*o));
    } else {
      if (o.error().code != shm::Errc::NotFound) die(3, "open producer: " + o.error().what());
      std::this_thread::sleep_for(10ms);
    }
  }
  if (!p) die(3, "channel never appeared");
  const std::uint64_t count = std::stoull(a.pos.at(0));
  std::vector<std::byte> buf;
  for (std::uint64_t seq = a.start; seq < a.start + count; ++seq) send(*p, seq, a, buf);
  say(fmt::format("DONE {}", count));
  if (!a.tail_when.empty()) {
    const auto deadline = std::chrono::steady_clock::now() + 120s;
    while (!std::filesystem::exists(a.tail_when)) {
      if (std::chrono::steady_clock::now() > deadline) die(3, "no " + a.tail_when + " for 120 s");
      std::this_thread::sleep_for(10ms);
    }
    send(*p, a.start + count, a, buf);
    say(fmt::format("TAIL {}", a.start + count));
  }
  if (auto ok = p->finish(); !ok) die(3, "finish: " + ok.error().what());
}

// Opens the channel as its consumer, waiting for it to appear, and for an
// incarnation other than `not_this` (0: any).
std::unique_ptr<shm::ChannelConsumer> open_consumer(const std::string& name,
                                                    std::uint64_t not_this) {
  for (int i = 0; i < 3000; ++i) {
    auto c = shm::ChannelConsumer::open(name);
    if (c) {
      if (c->segment().header().incarnation != not_this)
        return std::make_unique<shm::ChannelConsumer>(std::move(*c));
    } else if (c.error().code != shm::Errc::NotFound) {
      die(3, "open consumer: " + c.error().what());
    }
    std::this_thread::sleep_for(10ms);
  }
  die(3, "no (new) channel appeared for 30 s");
}

void consume(const Args& a) {
  auto c = open_consumer(a.name, 0);
  const std::uint64_t count = std::stoull(a.pos.at(0));
  std::uint64_t expected = 0;
  bool first = true;
  for (std::uint64_t i = 0; i < count;) {
    auto r = c->receive(30s);
    const bool ended = (!r && r.error().code == shm::Errc::ProducerDied) ||
                       (r && r->status == shm::ReceiveStatus::End);
    if (ended) {
      const std::uint64_t old = c->segment().header().incarnation;
      c.reset();
      c = open_consumer(a.name, old);
      say(fmt::format("REOPENED {}", c->segment().header().incarnation));
      continue;
    }
    if (!r) die(3, "receive: " + r.error().what());
    if (!*r) die(4, fmt::format("no record for 30 s after {} records", i));
    const std::uint64_t hint = first ? (a.has_start ? a.start : UINT64_MAX) : expected;
    const auto seq = rr::check(r->lease.bytes(), a.min, a.max, hint);
    if (!seq) die(4, fmt::format("record {} failed verification: {}", i, seq.error()));
    if (first) {
      say(fmt::format("FIRST {}", *seq));
      expected = *seq;
      first = false;
    }
    if (*seq != expected)
      die(4, fmt::format("sequence gap/duplicate: got {}, expected {}", *seq, expected));
    ++expected;
    ++i;
    r->lease.release();
  }
  say(fmt::format("OK {} {}", count, expected - 1));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) die(2, "usage: channel_peer MODE NAME ARGS... (see the source)");
  Args a;
  a.mode = argv[1];
  a.name = argv[2];
  for (int i = 3; i < argc; ++i) {
    const std::string s = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) die(2, s + " needs a value");
      return argv[++i];
    };
    if (s == "--start") {
      a.start = std::stoull(next());
      a.has_start = true;
    } else if (s == "--min") {
      a.min = std::stoull(next());
    } else if (s == "--max") {
      a.max = std::stoull(next());
    } else if (s == "--tail-when") {
      a.tail_when = next();
    } else {
      a.pos.push_back(s);
    }
  }
  if (a.mode == "produce")
    produce(a);
  else if (a.mode == "consume")
    consume(a);
  else
    die(2, "unknown mode " + a.mode);
  return 0;
}
