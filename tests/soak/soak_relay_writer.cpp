// Soak relay writer: writes ops 0, 1, 2, ... of writer --id to the raw_fifo
// relay --relay (Spill overflow, pages in --spill-dir), journalling each op
// before its write and its acknowledgement after it, so a restart after
// kill -9 neither repeats nor skips an op and knows which ops the relay
// acknowledged (soak_relay.hpp, the loop in soak_producer_loop.hpp). Throttled to --rate ops per
// second; a write that times out (the spill fell back to Block) wrote nothing and is retried.
// SIGTERM: finish the current op, log "X <next>", exit 0.
//
//   test_soak_relay_writer --relay NAME --spill-dir DIR --id N --journal PATH --log PATH
//                          [--rate R]
#include "soak_producer_loop.hpp"
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
  if (!process_log.ok()) return soak::usage_error(kProgram, "cannot open the log");

  auto attached = soak::attach_relay<shm::RelayWriter>(name, spill_dir);
  if (!attached) return process_log.violation(attached.error().what());
  shm::RelayWriter w = std::move(*attached);

  // A write that times out (the spill fell back to Block) wrote nothing: again.
  auto send = [&](std::uint64_t seq) -> soak::SendOutcome {
    const soak::RelayOp op = soak::relay_op(id, seq);
    while (g_stop == 0) {
      auto r = w.write(id, std::as_bytes(std::span(&op, 1)), std::chrono::milliseconds(50));
      if (!r) return std::unexpected(fmt::format("write {}: {}", seq, r.error().what()));
      if (r->status == shm::WriteStatus::Appended) return true;
      if (r->status != shm::WriteStatus::TimedOut)
        return std::unexpected(fmt::format("write {}: outcome {}", seq, shm::to_string(r->status)));
    }
    return false;
  };
  return soak::run_journalled_producer(process_log, kProgram, journal_path, rate, true, send,
                                       [](std::uint64_t) {});
}
