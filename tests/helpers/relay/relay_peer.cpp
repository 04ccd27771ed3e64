// A relay writer or reader in its own process, for tests/integration/relay/.
//
//   test_relay_peer crash NAME POINT
//       Runs the operation that reaches crash point POINT (an index of
//       test_hooks::RelayCrashPoint) with the test-only hook installed; the
//       hook prints "inside" and sleeps until the process is killed -9. The
//       relay must hold keys 1 (0xAA) and 3 (0xCC), 64-byte keep_latest values,
//       capacity 8, high water 5, DropOldest, and no live reader. The merge
//       points write 40 bytes of 0xBB over key 1.
//   test_relay_peer writer NAME ID COUNT LOG
//       Writes ops START..COUNT-1 of writer ID (see op_for()); before each
//       write appends "t I" to LOG, after the write is acknowledged "a I". On
//       start it resumes after the highest "t" in LOG (an op tried but not
//       acknowledged is never retried: it landed once or not at all). Prints
//       "started", then "done" and exits 0.
//   test_relay_peer reader NAME LOG SEED [final]
//       Drains with a random credit schedule, appending one line per entry
//       ("e KEY FIRST LAST COUNT VALUE CHECK", CHECK the XOR of the five) to LOG before it commits.
//       With "final": drains until the head is empty, prints "drained" and exits; otherwise runs
//       until killed. Prints "started" after attaching.
//   test_relay_peer lww NAME ID COUNT KEYS [PAYLOAD]
//       Writes COUNT lww ops of writer ID over keys 0..KEYS-1 whose
//       timestamps jump back and forth (lww_op()), so many are older than
//       what the reader already has; prints "done" and exits 0. The payload
//       is the op number (u64), then PAYLOAD - 8 bytes (default 0) each equal
//       to the op number's low byte (a torn value shows).
//   test_relay_peer open NAME
//       Opens a writer and prints "opened" or "error: <code>: <message>".
//   test_relay_peer records NAME COUNT MIN MAX
//       Writes the self-checking records 0..COUNT-1 of common/ring_record.hpp
//       (MIN..MAX bytes) as raw_fifo ops, each waiting while the relay blocks;
//       prints "DONE <count> spilled=<pages sealed>" and exits 0. A write that
//       is neither appended nor merged is an error (exit 1).
#include "common/ring_record.hpp"
#include "shm/relay/relay.hpp"
#include "shm/testing/relay_crash.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace shm;
using namespace std::chrono_literals;

[[noreturn]] void die(const std::string& what) {
  std::printf("error: %s\n", what.c_str());
  std::fflush(stdout);
  std::exit(1);
}

template <class T>
T must(Result<T> r, const char* what) {
  if (!r) die(fmt::format("{}: {}", what, r.error().what()));
  if constexpr (!std::is_void_v<T>) return std::move(*r);
}

[[noreturn]] void sleep_forever() {
  for (;;) std::this_thread::sleep_for(1s);
}

void say(const char* line) {
  std::printf("%s\n", line);
  std::fflush(stdout);
}

std::atomic<int> g_stop_at{-1};

void stop_at(test_hooks::RelayCrashPoint point) {
  if (static_cast<int>(point) != g_stop_at.load()) return;
  say("inside");
  sleep_forever();
}

std::vector<std::byte> bytes64(unsigned char b) {
  return std::vector<std::byte>(64, static_cast<std::byte>(b));
}

int run_crash(const std::string& name, int point) {
  using P = test_hooks::RelayCrashPoint;
  const auto p = static_cast<P>(point);
  if (p == P::TakeMidEntries || p == P::CommitMidEntries) {
    RelayReader r = must(RelayReader::open(name), "open reader");
    g_stop_at = point;
    test_hooks::set_relay_crash_hook(stop_at);
    auto got = must(r.take(10), "take");
    (void)got;
    must(r.commit(), "commit");
    die("the reader returned without reaching the crash point");
  }
  RelayWriter w = must(RelayWriter::open(name), "open writer");
  if (p == P::DropOldestFreed)
    for (unsigned char k = 4; k <= 6; ++k)
      must(w.write(k, bytes64(k * 0x11), shm::forever), "fill");
  g_stop_at = point;
  test_hooks::set_relay_crash_hook(stop_at);
  switch (p) {
    case P::MergeIntentFilling:
    case P::MergeIntentValid:
    case P::MergeMidValue:
    case P::MergeApplied:
      // 40 bytes over 64: another length takes the mutex path's merge (a
      // same-length keep_latest write is a copy merge, with no crash point).
      (void)w.write(1, std::vector<std::byte>(40, std::byte{0xBB}), shm::forever);
      break;
    case P::AppendFilled:
    case P::AppendPublished:
      (void)w.write(2, bytes64(0x22), shm::forever);
      break;
    case P::DropOldestFreed:
      (void)w.write(8, bytes64(0x88), shm::forever);
      break;
    default:
      break;
  }
  die("the writer returned without reaching the crash point");
}

// Writer ID's op I: key and 8-byte value for the relay's policy.
std::pair<std::uint64_t, std::uint64_t> op_for(PolicyId policy, std::uint64_t id, std::uint64_t i) {
  if (policy == policy::kRawFifo) return {id, (id << 32) | i};
  if (policy == policy::kSum) return {i % 8, 1 + (id * 7 + i) % 5};
  return {i % 8, i * 4 + id};  // max: grows with i
}

void append_line(int fd, const std::string& line) {
  if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
    die("log write failed");
}

int run_writer(const std::string& name, std::uint64_t id, std::uint64_t count,
               const std::string& log) {
  std::uint64_t start = 0;
  {
    std::ifstream in(log);
    std::string tag;
    std::uint64_t i = 0;
    while (in >> tag >> i)
      if (tag == "t") start = std::max(start, i + 1);
  }
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) die("open log");
  RelayWriter w = must(RelayWriter::open(name), "open writer");
  const PolicyId policy = w.snapshot().policy;
  say("started");
  for (std::uint64_t i = start; i < count; ++i) {
    const auto [key, value] = op_for(policy, id, i);
    append_line(fd, fmt::format("t {}\n", i));
    auto r = w.write(key, u64_value(value), 30s);
    if (!r) die(fmt::format("write {}: {}", i, r.error().what()));
    switch (r->status) {
      case WriteStatus::Appended:
      case WriteStatus::Merged:
      case WriteStatus::Unchanged:
        break;
      default:
        die(fmt::format("write {}: outcome {}", i, to_string(r->status)));
    }
    append_line(fd, fmt::format("a {}\n", i));
  }
  say("done");
  return 0;
}

int run_reader(const std::string& name, const std::string& log, unsigned seed, bool final) {
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) die("open log");
  RelayReader r = must(RelayReader::open(name), "open reader");
  say("started");
  std::mt19937 rng(seed);
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  for (;;) {
    if (std::chrono::steady_clock::now() > deadline) die("reader deadline");
    const std::size_t credit = 1 + rng() % 16;
    auto n = r.drain(credit, [&](const RelayEntry& e) {
      const std::uint64_t v = u64_of(e.value);
      append_line(
          fd, fmt::format("e {} {} {} {} {} {}\n", e.key, e.first_seq, e.last_seq, e.op_count, v,
                          e.key ^ e.first_seq ^ e.last_seq ^ e.op_count ^ v));
    });
    if (!n) die(fmt::format("drain: {}", n.error().what()));
    if (final) {
      const RelaySnapshot s = r.snapshot();
      if (*n == 0 && s.depth == 0 && s.in_hand == 0 && s.cold_pages == 0) {
        say("drained");
        return 0;
      }
      continue;
    }
    if (*n == 0) (void)must(r.wait(50ms), "wait");
    if (rng() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
  }
}

int run_lww(const std::string& name, std::uint64_t id, std::uint64_t count, std::uint64_t keys,
            std::uint64_t payload) {
  RelayWriter w = must(RelayWriter::open(name), "open writer");
  for (std::uint64_t i = 0; i < count; ++i) {
    // A timestamp that wanders: a permutation of 0..999 (so half the ops of a
    // key are older than the one before), the op number as the payload.
    const std::uint64_t ts = (i * 7919 + id * 13) % 1000;
    std::vector<std::byte> body = u64_value(i);
    body.resize(std::max<std::uint64_t>(payload, 8), static_cast<std::byte>(i & 0xFF));
    auto r = w.write(i % keys, lww_value(ts, id, body), 30s);
    if (!r) die(fmt::format("write {}: {}", i, r.error().what()));
  }
  say("done");
  return 0;
}

int run_open(const std::string& name) {
  auto w = RelayWriter::open(name);
  if (!w) {
    std::printf("error: %s\n", w.error().what().c_str());
    return 1;
  }
  say("opened");
  return 0;
}

int run_records(const std::string& name, std::uint64_t count, std::uint64_t min,
                std::uint64_t max) {
  namespace rr = shm::test::ring_record;
  auto w = must(RelayWriter::open(name), "open");
  std::vector<std::byte> buf;
  for (std::uint64_t seq = 0; seq < count; ++seq) {
    buf.resize(rr::size_for(seq, min, max));
    rr::fill(seq, buf);
    const WriteOutcome r = must(w.write(buf, shm::forever), "write");
    if (r.status != WriteStatus::Appended)
      die(fmt::format("write {}: {}", seq, to_string(r.status)));
  }
  say(fmt::format("DONE {} spilled={}", count, w.snapshot().pages_sealed).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> a(argv + 1, argv + argc);
  if (a.size() == 3 && a[0] == "crash") return run_crash(a[1], std::stoi(a[2]));
  if (a.size() == 5 && a[0] == "writer")
    return run_writer(a[1], std::stoull(a[2]), std::stoull(a[3]), a[4]);
  if ((a.size() == 4 || a.size() == 5) && a[0] == "reader")
    return run_reader(a[1], a[2], static_cast<unsigned>(std::stoul(a[3])), a.size() == 5);
  if (a.size() == 2 && a[0] == "open") return run_open(a[1]);
  if ((a.size() == 5 || a.size() == 6) && a[0] == "lww")
    return run_lww(a[1], std::stoull(a[2]), std::stoull(a[3]), std::stoull(a[4]),
                   a.size() == 6 ? std::stoull(a[5]) : 8);
  if (a.size() == 5 && a[0] == "records")
    return run_records(a[1], std::stoull(a[2]), std::stoull(a[3]), std::stoull(a[4]));
  die("usage: see the comment at the top of relay_peer.cpp");
}
