// Soak relay writer: writes ops 0, 1, 2, ... of writer --id to the raw_fifo
// relay --relay (Spill overflow, pages in --spill-dir), journalling each op
// before its write and its acknowledgement after it, so a restart after
// kill -9 neither repeats nor skips an op and knows which ops the relay
// acknowledged (soak_relay.hpp). Throttled to --rate ops per second; a write
// that times out (the spill fell back to Block) wrote nothing and is retried.
// SIGTERM: finish the current op, log "X <next>", exit 0.
//
//   test_soak_relay_writer --relay NAME --spill-dir DIR --id N --journal PATH --log PATH
//                          [--rate R]
#include "soak_process.hpp"
#include "soak_relay.hpp"

#include <fmt/format.h>

#include <chrono>
#include <thread>

using soak::g_stop;

int main(int argc, char** argv) {
  constexpr std::string_view kProgram = "test_soak_relay_writer";
  const auto opts = soak::Options::parse(
      argc, argv, kProgram, {"--relay", "--spill-dir", "--id", "--journal", "--log", "--rate"});
  if (!opts) return 2;
  const std::string name = opts->str("--relay"), spill_dir = opts->str("--spill-dir"),
                    journal_path = opts->str("--journal"), log_path = opts->str("--log");
  const std::uint32_t id = opts->u32("--id", 0);
  const std::uint64_t rate = opts->u64("--rate", 2000);
  if (name.empty() || spill_dir.empty() || journal_path.empty() || log_path.empty() || rate == 0)
    return soak::usage_error(kProgram, "need --relay, --spill-dir, --journal, --log; --rate > 0");
  soak::stop_on_term_signals();
  const soak::ProcessLog process_log(log_path, kProgram, id);
  const int journal = ::open(journal_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (!process_log.ok() || journal < 0)
    return soak::usage_error(kProgram, "cannot open the log or the journal");
  const int log = process_log.fd();
  auto violation = [&](std::string_view what) { return process_log.violation(what); };

  auto attached = soak::attach_relay<shm::RelayWriter>(name, spill_dir);
  if (!attached) return violation(attached.error().what());
  shm::RelayWriter w = std::move(*attached);

  // The journalled op is never written again: acknowledged (flag 1) or in
  // doubt (flag 0: landed once or not at all).
  std::uint64_t next = 0, counter = 0;
  std::string doubt = "-";
  if (auto e = soak::read_journal(journal)) {
    next = e->first + 1;
    if (e->tail_before == 0) doubt = std::to_string(e->first);
    counter = e->counter + 1;
  }
  soak::append(log, fmt::format("\nS {} {} {} {}\n", ::getpid(), soak::realtime_ns(), next, doubt));

  const auto start = std::chrono::steady_clock::now();
  const std::uint64_t start_seq = next;
  bool first = true;
  while (g_stop == 0) {
    const soak::RelayOp op = soak::relay_op(id, next);
    if (!soak::write_journal(journal, soak::JournalEntry{counter++, 0, next, next, 0, 0}))
      return violation("journal write failed");
    bool written = false;
    while (!written && g_stop == 0) {
      auto r = w.write(id, std::as_bytes(std::span(&op, 1)), std::chrono::milliseconds(50));
      if (!r) return violation(fmt::format("write {}: {}", next, r.error().what()));
      if (r->outcome == shm::WriteOutcome::TimedOut) continue;  // nothing written: again
      if (r->outcome != shm::WriteOutcome::Appended)
        return violation(fmt::format("write {}: outcome {}", next, shm::to_string(r->outcome)));
      written = true;
    }
    if (!written) break;  // stopped while the relay blocked: `next` was not written
    if (!soak::write_journal(journal, soak::JournalEntry{counter++, 1, next, next, 0, 0}))
      return violation("journal write failed");
    ++next;
    if (first) {
      soak::append(log, fmt::format("F {}\n", soak::realtime_ns()));
      first = false;
    }
    // Throttle: never ahead of `rate` ops per second since start.
    const auto due = start + std::chrono::nanoseconds((next - start_seq) * 1'000'000'000ull / rate);
    if (due > std::chrono::steady_clock::now()) std::this_thread::sleep_until(due);
  }
  soak::append(log, fmt::format("X {}\n", next));
  return 0;
}
