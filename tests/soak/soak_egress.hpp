// The egress block of scripts/soak.sh (test_soak_egress_sender,
// test_soak_egress_transport, test_soak_egress_verify): one Egress segment
// (docs/egress.md), N sender processes enqueueing numbered messages and one
// transport process that claims them, "delivers" them into its log and
// acknowledges cumulatively, late, partly and now and then out of order, and
// fails some sends (a send error, or an acknowledgement that never came), so
// the window fills, records park and are retried, and a killed transport's
// successor replays what was in flight under a new generation. Every one of
// them is killed -9 and restarted at random.
//
// Message: sender W's message S is a soak record (soak_common.hpp: magic,
// producer = W, sequence = S, length, CRC32C, body), at most kEgressSlotBytes.
//
// Sender journal and log: the journalled loop of soak_producer_loop.hpp with
// acknowledgements (S <pid> <ns> <next> <in_doubt|->, F, X <next>): message S
// was enqueued (Enqueued outcome) unless it is the one in doubt, which landed
// once or not at all. After X the sender logs "Q <full_waits>": how many
// messages found the pool full and waited for space (back-pressure).
//
// Transport log (one write(2) per line):
//   S <pid> <realtime_ns> <generation> <replayed> <acked_through|-> <next_sequence>
//                                      attached: the generation it captured,
//                                      the records its attach replayed, the
//                                      watermark and sequence it found
//   G <claim> <ack>                    the fence, tried at attach when
//                                      generation > 1: a claim and an ack
//                                      with generation - 1 (outcome names;
//                                      both must be stale_generation)
//   I <sender> <msg> <egress_seq> <generation> <attempt>
//                                      delivered (logged before any ack)
//   C <egress_seq> <reason>            a claimed payload failed its checks
//   T <egress_seq> <attempt> <delivered 0|1> <outcome>
//                                      fail() after a send error (0: not
//                                      delivered) or an ack that never came
//                                      (1: delivered, its ack "lost")
//   A <through> <outcome>              an acknowledgement, after it returned
//   W <inflight>                       a claim found the window full
//   F <realtime_ns>                    first delivery of this incarnation
//   P <next_sequence> <acked_through|-> <pending> <inflight> <parked> <terminal>
//                                      the projection after the final drain
//   X <deliveries> <claims> <window_full> <fails> <acks_advanced> <acks_unchanged>
//                                      drained and stopped (SIGTERM)
//   V <message>
#pragma once

#include "soak_common.hpp"

#include "shm/egress/egress.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

namespace soak {

inline constexpr std::uint32_t kEgressCapacity = 256;
inline constexpr std::uint32_t kEgressSlotBytes = kHeaderBytes + kMaxBody;  // the largest record
inline constexpr std::uint32_t kEgressWindow = 32;
// Send errors and lost acks fail only records on their first or second
// attempt; replays and go-back-N timeouts add a few more. No record comes
// near this budget: the transport checks that every fail is Retrying below it
// (and Exhausted at it), the verifier that none was exhausted.
inline constexpr std::uint32_t kEgressRetryBudget = 64;

[[nodiscard]] inline shm::EgressParams egress_params() {
  shm::EgressParams p;
  p.max_payloads = kEgressCapacity;
  p.slot_bytes = kEgressSlotBytes;
  p.inflight_limit = kEgressWindow;
  p.retry_budget = kEgressRetryBudget;
  p.retry_base = std::chrono::milliseconds(2);
  p.retry_ceiling = std::chrono::milliseconds(50);
  return p;
}

// A sender's handle (role "producer"), creating the egress (ephemeral) when
// it does not exist yet.
inline shm::Result<shm::Egress> attach_egress_sender(const std::string& name) {
  return open_or_create(
      [&] { return shm::Egress::open(name); },
      [&](const shm::CreateOptions& co) { return shm::Egress::create(name, egress_params(), co); });
}

// The transport (exclusive role), creating the egress first when needed.
// RoleTaken is retried (about 10 s): a killed transport's slot stays locked
// until the kernel drops it or the sidecar reclaims it.
inline shm::Result<shm::EgressTransport> attach_egress_transport(const std::string& name) {
  for (int attempt = 0;; ++attempt) {
    auto t = open_or_create([&] { return shm::EgressTransport::open(name); },
                            [&](const shm::CreateOptions& co) -> shm::Result<shm::EgressTransport> {
                              auto e = shm::Egress::create(name, egress_params(), co);
                              if (!e) return std::unexpected(e.error());
                              return shm::EgressTransport::open(name);
                            });
    if (t || t.error().code != shm::Errc::RoleTaken || attempt > 1000) return t;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace soak
