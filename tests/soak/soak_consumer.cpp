// Soak consumer: reads one SpscRing, checks every record (magic, length, CRC,
// producer id) and logs each batch as runs of consecutive sequence numbers
// BEFORE releasing it, so whatever this process released is in its log, and a
// kill between log and release only repeats the batch in hand (at-least-once).
// SIGTERM: drain what is published, log "X <count>", exit 0.
//
//   test_soak_consumer --ring NAME --id N --log PATH [--batch-max K] [--hold-us US]
// --hold-us pauses between logging a batch and releasing it (as if processing
// it), widening the window in which a kill leaves a batch in hand.
#include "soak_process.hpp"

#include "shm/spsc/consumer.hpp"

#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <random>
#include <thread>

using soak::g_stop;

int main(int argc, char** argv) {
  constexpr std::string_view kProgram = "test_soak_consumer";
  const auto opts = soak::Options::parse(argc, argv, kProgram,
                                         {"--ring", "--id", "--log", "--batch-max", "--hold-us"});
  if (!opts) return 2;
  const std::string ring = opts->str("--ring"), log_path = opts->str("--log");
  const std::uint32_t id = opts->u32("--id", 0);
  const std::uint64_t batch_max = opts->u64("--batch-max", 32);
  const std::uint64_t hold_us = opts->u64("--hold-us", 0);
  if (ring.empty() || log_path.empty() || batch_max == 0)
    return soak::usage_error(kProgram, "need --ring and --log; --batch-max > 0");
  soak::stop_on_term_signals();
  const soak::ProcessLog process_log(log_path, kProgram, id);
  if (!process_log.ok()) return 2;
  const int log = process_log.fd();
  auto violation = [&](std::string_view what) { return process_log.violation(what); };

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
