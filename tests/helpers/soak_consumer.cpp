// Soak consumer: reads one SpscRing, checks every record (magic, length, CRC,
// producer id) and logs each batch as runs of consecutive sequence numbers
// BEFORE releasing it, so whatever this process released is in its log, and a
// kill between log and release only repeats the batch in hand (at-least-once).
// SIGTERM: drain what is published, log "X <count>", exit 0.
//
//   test_soak_consumer --ring NAME --id N --log PATH [--batch-max K] [--hold-us US]
// --hold-us pauses between logging a batch and releasing it (as if processing
// it), widening the window in which a kill leaves a batch in hand.
#include "soak_common.hpp"

#include "shm/ring_consumer.hpp"

#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <random>
#include <thread>

namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_term(int) {
  g_stop = 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string ring, log_path;
  std::uint32_t id = 0;
  std::uint64_t batch_max = 32;
  std::uint64_t hold_us = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view k(argv[i]);
    const char* v = argv[i + 1];
    if (k == "--ring")
      ring = v;
    else if (k == "--id")
      id = static_cast<std::uint32_t>(std::strtoul(v, nullptr, 10));
    else if (k == "--log")
      log_path = v;
    else if (k == "--batch-max")
      batch_max = std::strtoull(v, nullptr, 10);
    else if (k == "--hold-us")
      hold_us = std::strtoull(v, nullptr, 10);
    else {
      std::fprintf(stderr, "test_soak_consumer: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (ring.empty() || log_path.empty() || batch_max == 0) {
    std::fprintf(stderr, "test_soak_consumer: need --ring and --log\n");
    return 2;
  }
  struct sigaction sa {};
  sa.sa_handler = on_term;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);

  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) return 2;
  auto violation = [&](const std::string& what) {
    soak::append(log, fmt::format("\nV {}\n", what));
    std::fprintf(stderr, "test_soak_consumer %u: %s\n", id, what.c_str());
    return 1;
  };

  // Attach, waiting for the producer to create the ring.
  shm::RingConsumer c;
  for (int attempt = 0;; ++attempt) {
    auto opened = shm::RingConsumer::open(ring);
    if (opened) {
      c = std::move(*opened);
      break;
    }
    const auto code = opened.error().code;
    if (attempt > 1000 || (code != shm::Errc::NotFound && code != shm::Errc::RoleTaken))
      return violation(opened.error().what());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  soak::append(log, fmt::format("\nS {} {}\n", ::getpid(), soak::realtime_ns()));

  std::mt19937_64 rng(soak::mix(soak::realtime_ns() ^ static_cast<std::uint64_t>(::getpid())));
  std::uint64_t total = 0;
  bool first = true;
  std::string lines;
  for (;;) {
    const bool draining = g_stop != 0;
    auto r = c.peek(std::chrono::milliseconds(draining ? 0 : 50));
    if (!r) return violation(r.error().what());
    c.heartbeat();
    if (!*r) {
      if (draining) break;
      continue;
    }
    // A batch: this record and up to batch_max - 1 more already published.
    const std::uint64_t k = 1 + rng() % batch_max;
    lines.clear();
    std::optional<std::uint64_t> run_first, run_last;
    auto flush_run = [&] {
      if (run_first) lines += fmt::format("B {} {}\n", *run_first, *run_last);
      run_first.reset();
    };
    std::span<const std::byte> rec = **r;
    std::uint64_t n = 0;
    for (;;) {
      std::string why;
      if (auto seq = soak::check_record(rec, id, why)) {
        if (run_first && *seq == *run_last + 1) {
          run_last = seq;
        } else {
          flush_run();
          run_first = run_last = seq;
        }
      } else {
        flush_run();
        lines += fmt::format("C {} {}\n", run_last ? *run_last + 1 : 0, why);
      }
      if (++n == k) break;
      auto more = c.try_peek();
      if (!more) return violation(more.error().what());
      if (!*more) break;
      rec = **more;
    }
    flush_run();
    total += n;
    // Logged before release: a kill in between repeats exactly this batch.
    if (!soak::append(log, lines)) return violation("log write failed");
    if (hold_us != 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % hold_us));
    c.release();
    if (first) {
      soak::append(log, fmt::format("F {}\n", soak::realtime_ns()));
      first = false;
    }
  }
  soak::append(log, fmt::format("X {}\n", total));
  return 0;
}
