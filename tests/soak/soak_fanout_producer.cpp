// Soak fanout producer: submits items 0, 1, 2, ... of producer --id to the
// PriorityFanout --fanout, each at the priority its (producer, seq) picks,
// journalling each sequence number before its submit so a restart after
// kill -9 neither repeats nor skips one (soak_fanout.hpp). Throttled to --rate
// items per second; a full ring is waited for (never dropped). SIGTERM: finish
// the current item, log "X <next>", exit 0.
//
//   test_soak_fanout_producer --fanout BASE --id N --journal PATH --log PATH
//                             [--priorities K] [--capacity CELLS] [--rate R]
#include "soak_fanout.hpp"
#include "soak_process.hpp"

#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>

using soak::g_stop;

int main(int argc, char** argv) {
  constexpr std::string_view kProgram = "test_soak_fanout_producer";
  const auto opts = soak::Options::parse(
      argc, argv, kProgram,
      {"--fanout", "--id", "--journal", "--log", "--priorities", "--capacity", "--rate"});
  if (!opts) return 2;
  const std::string base = opts->str("--fanout"), journal_path = opts->str("--journal"),
                    log_path = opts->str("--log");
  const std::uint32_t id = opts->u32("--id", 0);
  const shm::FanoutParams params{opts->u32("--priorities", 4), opts->u64("--capacity", 1024),
                                 sizeof(shm::test::FanoutItem)};
  const std::uint64_t rate = opts->u64("--rate", 5000);
  if (base.empty() || journal_path.empty() || log_path.empty() || rate == 0)
    return soak::usage_error(kProgram, "need --fanout, --journal, --log; --rate > 0");
  soak::stop_on_term_signals();
  const soak::ProcessLog process_log(log_path, kProgram, id);
  const int journal = ::open(journal_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (!process_log.ok() || journal < 0)
    return soak::usage_error(kProgram, "cannot open the log or the journal");
  const int log = process_log.fd();
  auto violation = [&](std::string_view what) { return process_log.violation(what); };

  auto attached = soak::attach_fanout<shm::FanoutProducer>(base, params);
  if (!attached) return violation(attached.error().what());
  shm::FanoutProducer f = std::move(*attached);

  // The journalled sequence number was in flight when the last incarnation
  // died: published or not, it is never sent again.
  std::uint64_t next = 0, counter = 0;
  std::string doubt = "-";
  if (auto e = soak::read_journal(journal)) {
    next = e->first + 1;
    doubt = std::to_string(e->first);
    counter = e->counter + 1;
  }
  soak::append(log, fmt::format("\nS {} {} {} {}\n", ::getpid(), soak::realtime_ns(), next, doubt));

  const auto start = std::chrono::steady_clock::now();
  const std::uint64_t start_seq = next;
  bool first = true;
  while (g_stop == 0) {
    const std::uint32_t prio = shm::test::item_priority(id, next, f.priorities());
    const shm::test::FanoutItem item = shm::test::make_item(id, next, prio);
    if (!soak::write_journal(journal, soak::JournalEntry{counter++, 0, next, next, 0, 0}))
      return violation("journal write failed");
    bool sent = false;
    while (!sent && g_stop == 0) {
      auto ok = f.submit(prio, std::as_bytes(std::span(&item, 1)), std::chrono::milliseconds(50));
      if (!ok) return violation(fmt::format("submit {}: {}", next, ok.error().what()));
      sent = *ok;  // false: that ring is full (the consumers are away); wait on
    }
    if (!sent) break;  // stopped while the ring was full: `next` was not submitted
    ++next;
    if (first) {
      soak::append(log, fmt::format("F {}\n", soak::realtime_ns()));
      first = false;
    }
    if ((next & 255u) == 0) f.heartbeat();
    // Throttle: never ahead of `rate` items per second since start.
    const auto due = start + std::chrono::nanoseconds((next - start_seq) * 1'000'000'000ull / rate);
    if (due > std::chrono::steady_clock::now()) std::this_thread::sleep_until(due);
  }
  soak::append(log, fmt::format("X {}\n", next));
  return 0;
}
