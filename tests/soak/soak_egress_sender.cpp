// Soak egress sender: enqueues messages 0, 1, 2, ... of sender --id (soak
// records carrying their CRC) into the egress --egress, journalling each
// before its enqueue and its Enqueued outcome after it, so a restart after
// kill -9 neither repeats nor skips a message and knows which ones the
// egress took (soak_egress.hpp, the loop in soak_producer_loop.hpp).
// Throttled to --rate messages per second; a full pool (the transport is slow,
// paused or dead) makes the enqueue wait (50 ms at a time) for an
// acknowledgement to free space; "Q" counts the messages that found it full.
// SIGTERM: finish the current message, log "X <next>" and "Q <full_waits>", exit 0.
//
//   test_soak_egress_sender --egress NAME --id N --journal PATH --log PATH [--rate R]
#include "soak_egress.hpp"
#include "soak_producer_loop.hpp"

#include <fmt/format.h>

#include <chrono>
#include <vector>

using soak::g_stop;

int main(int argc, char** argv) {
  constexpr std::string_view kProgram = "test_soak_egress_sender";
  const auto opts = soak::Options::parse(argc, argv, kProgram,
                                         {"--egress", "--id", "--journal", "--log", "--rate"});
  if (!opts) return 2;
  const std::string name = opts->str("--egress"), journal_path = opts->str("--journal"),
                    log_path = opts->str("--log");
  const std::uint32_t id = opts->u32("--id", 0);
  const std::uint64_t rate = opts->u64("--rate", 1000);
  if (name.empty() || journal_path.empty() || log_path.empty() || rate == 0)
    return soak::usage_error(kProgram, "need --egress, --journal, --log; --rate > 0");
  soak::stop_on_term_signals();
  const soak::ProcessLog process_log(log_path, kProgram, id);
  if (!process_log.ok()) return soak::usage_error(kProgram, "cannot open the log");

  auto attached = soak::attach_egress_sender(name);
  if (!attached) return process_log.violation(attached.error().what());
  shm::Egress egress = std::move(*attached);

  std::vector<std::byte> record;
  std::uint64_t full_waits = 0;
  auto send = [&](std::uint64_t seq) -> soak::SendOutcome {
    record.resize(soak::record_length(id, seq));
    soak::fill_record(record, id, seq);
    auto r = egress.try_enqueue(record);
    if (!r) return std::unexpected(fmt::format("enqueue {}: {}", seq, r.error().what()));
    if (r->status == shm::egress::EnqueueStatus::Enqueued) return true;
    ++full_waits;  // Full: nothing was enqueued; wait for an ack to free space
    while (g_stop == 0) {
      r = egress.enqueue(record, std::chrono::milliseconds(50));
      if (!r) return std::unexpected(fmt::format("enqueue {}: {}", seq, r.error().what()));
      if (r->status == shm::egress::EnqueueStatus::Enqueued) return true;
    }
    return false;
  };
  const int rc = soak::run_journalled_producer(process_log, kProgram, journal_path, rate, true,
                                               send, [](std::uint64_t) {});
  if (rc == 0) (void)soak::append(process_log.fd(), fmt::format("Q {}\n", full_waits));
  return rc;
}
