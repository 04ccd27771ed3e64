// A ring endpoint in its own process, driven by the multi-process tests.
//
//   ring_peer produce NAME COUNT [--start S] [--min B] [--max B]
//       pushes records S..S+COUNT-1 (blocking), prints "DONE <count>"
//   ring_peer consume NAME COUNT [--min B] [--max B] [--report-every K] [--patience S]
//       pops COUNT records, verifying each; prints "FIRST <seq>", every K
//       records "REL <seq>" (after releasing it), and "OK <count> <last>";
//       gives up (exit 4) after S seconds without a record (default 30)
//   ring_peer produce-then-hang NAME COUNT PARTIAL_BYTES
//       pushes COUNT records, reserves one more, writes PARTIAL_BYTES of it,
//       prints "RESERVED" and sleeps (the test kill -9's it before commit)
//   ring_peer consume-then-hang NAME COUNT
//       consumes COUNT records, peeks one more, prints "PEEKED <seq>", sleeps
//   ring_peer hold-producer NAME
//       attaches as producer, prints "ATTACHED", sleeps
//   ring_peer push-after NAME DELAY_MS
//       sleeps, then pushes record 0, prints "PUSHED"
//   ring_peer crash-commit NAME COUNT POINT BATCH
//       pushes COUNT records, then reserves BATCH more (COUNT..) and commits
//       them with a crash hook at POINT (0 CommitBeforePublish, 1
//       CommitAfterPublish): prints "AT <point>" there and sleeps
//   ring_peer crash-release NAME COUNT POINT BATCH
//       consumes COUNT records, peeks BATCH more and releases them with a
//       crash hook at POINT (2 ReleaseBeforeHead, 3 ReleaseAfterHead)
//
// Exit codes: 0 ok, 2 usage, 3 library error, 4 verification failure.
#include "common/ring_record.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"
#include "shm/testing/ring_crash.hpp"

#include <fmt/format.h>

#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
namespace rr = shm::test::ring_record;

namespace {

struct Args {
  std::string mode, name;
  std::vector<std::string> pos;
  std::uint64_t start = 0, min = 1, max = 4096, report_every = 0, patience_s = 30;
  bool has_start = false;
};

[[noreturn]] void die(int code, const std::string& msg) {
  std::fprintf(stderr, "ring_peer: %s\n", msg.c_str());
  std::fflush(stdout);
  std::_Exit(code);
}

void say(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

template <class T>
T must(shm::Result<T> r, const char* what) {
  if (!r) die(3, fmt::format("{}: {}", what, r.error().what()));
  return std::move(*r);
}

shm::RingProducer open_producer(const std::string& name) {
  // The ring may not exist yet when both peers start together.
  for (int i = 0; i < 500; ++i) {
    auto p = shm::RingProducer::open(name);
    if (p) return std::move(*p);
    if (p.error().code != shm::Errc::NotFound) die(3, "open producer: " + p.error().what());
    std::this_thread::sleep_for(10ms);
  }
  die(3, "ring never appeared");
}

shm::RingConsumer open_consumer(const std::string& name) {
  for (int i = 0; i < 500; ++i) {
    auto c = shm::RingConsumer::open(name);
    if (c) return std::move(*c);
    if (c.error().code != shm::Errc::NotFound) die(3, "open consumer: " + c.error().what());
    std::this_thread::sleep_for(10ms);
  }
  die(3, "ring never appeared");
}

void produce(const Args& a) {
  auto p = open_producer(a.name);
  const std::uint64_t count = std::stoull(a.pos.at(0));
  std::vector<std::byte> scratch(a.max);
  for (std::uint64_t seq = a.start; seq < a.start + count; ++seq) {
    const std::size_t n = rr::size_for(seq, a.min, a.max);
    auto r = must(p.reserve(n, 30s), "reserve");
    if (!r) die(3, "reserve timed out: consumer stalled for 30 s");
    rr::fill(seq, *r);
    p.commit();
  }
  say(fmt::format("DONE {}", count));
}

void consume(const Args& a) {
  auto c = open_consumer(a.name);
  const std::uint64_t count = std::stoull(a.pos.at(0));
  std::uint64_t expected = 0;
  bool first = true;
  for (std::uint64_t i = 0; i < count; ++i) {
    auto r = must(c.peek(std::chrono::seconds(a.patience_s)), "peek");
    if (!r) die(4, fmt::format("no record for {} s after {} records", a.patience_s, i));
    // Records shorter than 12 bytes carry no sequence number: they are
    // checked against the one expected (known once the first record is seen,
    // or from --start).
    const std::uint64_t hint = first ? (a.has_start ? a.start : UINT64_MAX) : expected;
    const auto seq = rr::check(*r, a.min, a.max, hint);
    if (!seq) die(4, fmt::format("record {} failed verification: {}", i, seq.error()));
    if (first) {
      say(fmt::format("FIRST {}", *seq));
      expected = *seq;
      first = false;
    }
    if (*seq != expected)
      die(4, fmt::format("sequence gap/duplicate: got {}, expected {}", *seq, expected));
    ++expected;
    c.release();
    if (a.report_every != 0 && (*seq + 1) % a.report_every == 0) say(fmt::format("REL {}", *seq));
  }
  say(fmt::format("OK {} {}", count, expected - 1));
}

void produce_then_hang(const Args& a) {
  auto p = open_producer(a.name);
  const std::uint64_t count = std::stoull(a.pos.at(0));
  const std::uint64_t partial = std::stoull(a.pos.at(1));
  for (std::uint64_t seq = 0; seq < count; ++seq) {
    auto r = must(p.reserve(rr::size_for(seq, a.min, a.max), 30s), "reserve");
    if (!r) die(3, "reserve timed out");
    rr::fill(seq, *r);
    p.commit();
  }
  auto r = must(p.reserve(a.max, 30s), "reserve");
  if (!r) die(3, "reserve timed out");
  std::memset(r->data(), 0xEE, std::min<std::size_t>(partial, r->size()));
  say("RESERVED");
  for (;;) ::pause();
}

void consume_then_hang(const Args& a) {
  auto c = open_consumer(a.name);
  const std::uint64_t count = std::stoull(a.pos.at(0));
  for (std::uint64_t i = 0; i < count; ++i) {
    auto r = must(c.peek(30s), "peek");
    if (!r) die(4, "stalled");
    c.release();
  }
  auto r = must(c.peek(30s), "peek");
  if (!r) die(4, "stalled");
  const auto seq = rr::check(*r, a.min, a.max);
  if (!seq) die(4, seq.error());
  say(fmt::format("PEEKED {}", *seq));
  for (;;) ::pause();
}

void hold_producer(const Args& a) {
  auto p = open_producer(a.name);
  say("ATTACHED");
  for (;;) ::pause();
}

void push_after(const Args& a) {
  auto p = open_producer(a.name);
  std::this_thread::sleep_for(std::chrono::milliseconds(std::stoll(a.pos.at(0))));
  auto r = must(p.reserve(rr::size_for(0, a.min, a.max), 5s), "reserve");
  if (!r) die(3, "reserve timed out");
  rr::fill(0, *r);
  p.commit();
  say("PUSHED");
}

// The crash hook: stops the process at the point the test asked for.
int g_crash_point = -1;
void stop_here(shm::test_hooks::RingCrashPoint point) {
  if (static_cast<int>(point) != g_crash_point) return;
  say(fmt::format("AT {}", g_crash_point));
  for (;;) ::pause();
}

void crash_commit(const Args& a) {
  auto p = open_producer(a.name);
  const std::uint64_t count = std::stoull(a.pos.at(0));
  g_crash_point = std::stoi(a.pos.at(1));
  const std::uint64_t batch = std::stoull(a.pos.at(2));
  for (std::uint64_t seq = 0; seq < count; ++seq) {
    auto r = must(p.reserve(rr::size_for(seq, a.min, a.max), 30s), "reserve");
    if (!r) die(3, "reserve timed out");
    rr::fill(seq, *r);
    p.commit();
  }
  for (std::uint64_t seq = count; seq < count + batch; ++seq) {
    auto r = must(p.reserve(rr::size_for(seq, a.min, a.max), 30s), "reserve");
    if (!r) die(3, "the batch did not fit within 30 s");
    rr::fill(seq, *r);
  }
  shm::test_hooks::set_ring_crash_hook(p, stop_here);
  p.commit();
  die(4, "commit() went past the crash point");
}

void crash_release(const Args& a) {
  auto c = open_consumer(a.name);
  const std::uint64_t count = std::stoull(a.pos.at(0));
  g_crash_point = std::stoi(a.pos.at(1));
  const std::uint64_t batch = std::stoull(a.pos.at(2));
  for (std::uint64_t i = 0; i < count; ++i) {
    auto r = must(c.peek(30s), "peek");
    if (!r) die(4, "stalled");
    c.release();
  }
  for (std::uint64_t i = 0; i < batch; ++i) {
    auto r = must(c.peek(30s), "peek");
    if (!r) die(4, "stalled");
  }
  shm::test_hooks::set_ring_crash_hook(c, stop_here);
  c.release();
  die(4, "release() went past the crash point");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) die(2, "usage: ring_peer MODE NAME ARGS... (see the source)");
  Args a;
  a.mode = argv[1];
  a.name = argv[2];
  for (int i = 3; i < argc; ++i) {
    const std::string s = argv[i];
    auto next = [&]() -> std::uint64_t {
      if (i + 1 >= argc) die(2, s + " needs a value");
      return std::stoull(argv[++i]);
    };
    if (s == "--start") {
      a.start = next();
      a.has_start = true;
    } else if (s == "--min")
      a.min = next();
    else if (s == "--max")
      a.max = next();
    else if (s == "--report-every")
      a.report_every = next();
    else if (s == "--patience")
      a.patience_s = next();
    else
      a.pos.push_back(s);
  }
  if (a.mode == "produce")
    produce(a);
  else if (a.mode == "consume")
    consume(a);
  else if (a.mode == "produce-then-hang")
    produce_then_hang(a);
  else if (a.mode == "consume-then-hang")
    consume_then_hang(a);
  else if (a.mode == "hold-producer")
    hold_producer(a);
  else if (a.mode == "crash-commit")
    crash_commit(a);
  else if (a.mode == "crash-release")
    crash_release(a);
  else if (a.mode == "push-after")
    push_after(a);
  else
    die(2, "unknown mode " + a.mode);
  return 0;
}
