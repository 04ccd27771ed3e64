// Soak relay reader: the one reader of the relay --relay. Takes up to a
// random credit of entries, checks each (value, key), logs the whole take
// ("I" lines, one write) before committing it and "D" after, so a kill -9
// between the two leaves entries the next reader gets again (soak_relay.hpp).
// Now and then it stops reading for --pause-ms so that the writers fill the
// head past high water and the relay spills pages to disk, which the reader
// then drains back (cold pages first, in order).
// SIGTERM (the writers are stopped by then): drain until the head and the
// cold pages are empty, log the relay's spill counters ("P") and
// "X <count>", exit 0.
//
//   test_soak_relay_reader --relay NAME --spill-dir DIR --log PATH [--max-credit N]
//                          [--pause-ms MS] [--pause-every-ms MS]
#include "soak_pauses.hpp"
#include "soak_process.hpp"
#include "soak_relay.hpp"

#include <fmt/format.h>

#include <chrono>
#include <random>
#include <thread>

using soak::g_stop;

int main(int argc, char** argv) {
  constexpr std::string_view kProgram = "test_soak_relay_reader";
  const auto opts = soak::Options::parse(
      argc, argv, kProgram,
      {"--relay", "--spill-dir", "--log", "--max-credit", "--pause-ms", "--pause-every-ms"});
  if (!opts) return 2;
  const std::string name = opts->str("--relay"), spill_dir = opts->str("--spill-dir"),
                    log_path = opts->str("--log");
  const std::uint64_t max_credit = opts->u64("--max-credit", 32);
  const std::uint64_t pause_ms = opts->u64("--pause-ms", 300);
  const std::uint64_t pause_every_ms = opts->u64("--pause-every-ms", 1500);
  if (name.empty() || spill_dir.empty() || log_path.empty() || max_credit == 0)
    return soak::usage_error(kProgram, "need --relay, --spill-dir, --log; --max-credit > 0");
  soak::stop_on_term_signals();
  const soak::ProcessLog process_log(log_path, kProgram, 0);
  if (!process_log.ok()) return 2;
  const int log = process_log.fd();
  auto violation = [&](std::string_view what) { return process_log.violation(what); };

  auto attached = soak::attach_relay<shm::RelayReader>(name, spill_dir);
  if (!attached) return violation(attached.error().what());
  shm::RelayReader r = std::move(*attached);
  if (!soak::append(log, fmt::format("\nS {} {}\n", ::getpid(), soak::realtime_ns())))
    return violation("log write failed");

  std::mt19937_64 rng(soak::mix(soak::realtime_ns() ^ static_cast<std::uint64_t>(::getpid())));
  std::uint64_t total = 0;
  bool first = true;
  // One take: logged, then committed. Returns the number of entries, or -1
  // after a violation was logged.
  auto take_one = [&]() -> std::int64_t {
    auto got = r.take(1 + rng() % max_credit);
    if (!got) return violation(fmt::format("take: {}", got.error().what())), -1;
    if (got->empty()) return 0;
    std::string lines;
    for (const shm::RelayEntry& e : *got) {
      soak::RelayOp op{};
      std::string_view why;
      if (e.value.size() != sizeof op) {
        why = "size";
      } else {
        std::memcpy(&op, e.value.data(), sizeof op);
        if (op.check != soak::mix(op.tag))
          why = "check";
        else if (op.tag >> 40 != e.key)
          why = "key";
        else if (e.op_count != 1 || e.first_seq != e.last_seq)
          why = "ops";
      }
      lines += why.empty()
                   ? fmt::format("I {} {} {} {} {}\n", op.tag >> 40, op.tag & ((1ull << 40) - 1),
                                 e.first_seq, e.page_id, e.redelivered ? 1 : 0)
                   : fmt::format("C {} {} {}\n", why, e.key, e.first_seq);
    }
    if (first) {
      lines += fmt::format("F {}\n", soak::realtime_ns());
      first = false;
    }
    if (!soak::append(log, lines)) return violation("log write failed"), -1;
    if ((rng() & 15u) == 0)  // a kill here: logged, not committed (delivered again)
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
    if (auto c = r.commit(); !c) return violation(fmt::format("commit: {}", c.error().what())), -1;
    if (!soak::append(log, "D\n")) return violation("log write failed"), -1;
    total += got->size();
    return static_cast<std::int64_t>(got->size());
  };

  soak::RandomPauses pauses(rng, pause_every_ms, pause_ms);
  while (g_stop == 0) {
    const std::int64_t n = take_one();
    if (n < 0) return 1;
    if (n == 0) {
      if (auto wt = r.wait(std::chrono::milliseconds(50)); !wt)
        return violation(fmt::format("wait: {}", wt.error().what()));
    }
    pauses.maybe_pause();  // away: the writers fill the head and spill
  }
  // The writers are stopped: drain the head and every cold page.
  for (;;) {
    const std::int64_t n = take_one();
    if (n < 0) return 1;
    if (n != 0) continue;
    const shm::RelaySnapshot s = r.snapshot();
    if (s.consistent && s.depth == 0 && s.in_hand == 0 && s.cold_pages == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const shm::RelaySnapshot s = r.snapshot();
  soak::append(log, fmt::format("P {} {} {} {} {} {} {} {} {} {}\nX {}\n", s.pages_sealed,
                                s.pages_acked, s.entries_spilled, s.spill_fallbacks,
                                s.seals_rolled_forward, s.seals_rolled_back, s.blocked,
                                s.pages_expired, s.pages_refused, s.pages_rebuilt, total));
  return 0;
}
