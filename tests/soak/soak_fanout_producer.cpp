// Soak fanout producer: submits items 0, 1, 2, ... of producer --id to the
// PriorityFanout --fanout, each at the priority its (producer, seq) picks,
// journalling each sequence number before its submit so a restart after
// kill -9 neither repeats nor skips one (soak_fanout.hpp, the loop in
// soak_producer_loop.hpp). Throttled to --rate items per second; a full ring
// is waited for (never dropped). SIGTERM: finish the current item, log
// "X <next>", exit 0.
//
//   test_soak_fanout_producer --fanout BASE --id N --journal PATH --log PATH
//                             [--priorities K] [--capacity CELLS] [--rate R]
#include "soak_fanout.hpp"
#include "soak_producer_loop.hpp"

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
  if (!process_log.ok()) return soak::usage_error(kProgram, "cannot open the log");

  auto attached = soak::attach_fanout<shm::FanoutProducer>(base, params);
  if (!attached) return process_log.violation(attached.error().what());
  shm::FanoutProducer f = std::move(*attached);

  // A full ring is waited for (the consumers are away), never dropped.
  auto send = [&](std::uint64_t seq) -> soak::SendOutcome {
    const std::uint32_t prio = shm::test::item_priority(id, seq, f.priorities());
    const shm::test::FanoutItem item = shm::test::make_item(id, seq, prio);
    while (g_stop == 0) {
      auto ok = f.submit(prio, std::as_bytes(std::span(&item, 1)), std::chrono::milliseconds(50));
      if (!ok) return std::unexpected(fmt::format("submit {}: {}", seq, ok.error().what()));
      if (*ok) return true;
    }
    return false;
  };
  return soak::run_journalled_producer(process_log, kProgram, journal_path, rate, false, send,
                                       [&](std::uint64_t next) {
                                         if ((next & 255u) == 0) f.heartbeat();
                                       });
}
