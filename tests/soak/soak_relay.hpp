// The relay block of scripts/soak.sh (test_soak_relay_writer,
// test_soak_relay_reader, test_soak_relay_verify): one raw_fifo RelayCell
// whose overflow is Spill (docs/relay.md, docs/spill.md), N writer processes
// and one reader, every one of them killed -9 and restarted at random.
//
// The relay: raw_fifo (every op is an entry, in arrival order), spill_dedup
// (raw_fifo is not idempotent: the reader deduplicates replays by first_seq),
// a small head (kCapacity entries, Spill at kHighWater) and small pages
// (kPageRecords records), so a reader that pauses for a few hundred ms makes
// the writers seal pages, and the reader drains them back. The spill
// directory is --spill-dir (never /dev/shm).
//
// Op: writer W's op S is written with key W and the 16-byte value
// {tag = W << 40 | S, check = mix(tag)} (soak_common.hpp's mix).
//
// Writer journal (soak_common.hpp's JournalEntry, first == last == S, and
// tail_before used as the "acknowledged" flag): before writing S the writer
// journals {S, 0}; when the write returned Appended it journals {S, 1}. A
// restarted writer continues at S + 1 either way; S is "in doubt" (landed
// once or not at all) only when its entry says 0. So every op the relay
// acknowledged is known, and none is written twice.
//
// The guarantee checked (docs/relay.md "What a crash leaves behind",
// docs/spill.md "Crash semantics" and "Replay and dedup"): every acknowledged
// op is delivered; an op is delivered again only as a replay of the same
// entry (same first_seq, flagged redelivered) that a killed reader had taken
// and not committed; first_seq grows strictly over the first deliveries, so
// a reader that drops every first_seq at or below the last one it applied
// applies every op exactly once.
//
// Logs (one write(2) per line group; formats common to every kind in soak_logs.hpp):
//   writer:  S <pid> <realtime_ns> <next_seq> <in_doubt_seq|->
//            F <realtime_ns>                first op acknowledged
//            X <next_seq>                   clean stop: 0..next_seq-1 written
//                                           (acknowledged unless in doubt)
//            V <message>
//   reader:  S <pid> <realtime_ns>
//            I <writer> <seq> <first_seq> <page_id> <redelivered 0|1>
//                                           one entry of a take, logged (the
//                                           whole take in one write) before
//                                           its commit
//            D                              the take before it was committed
//            F <realtime_ns>                first take of this incarnation
//            C <reason> <key> <first_seq>   an entry failed its checks
//            P <pages_sealed> <pages_acked> <entries_spilled> <spill_fallbacks>
//              <seals_rolled_forward> <seals_rolled_back> <blocked>
//              <pages_expired> <pages_refused> <pages_rebuilt>
//                                           the relay's counters at the clean stop
//            X <entries_this_incarnation>   drained (head and cold pages
//                                           empty) and stopped (SIGTERM)
//            V <message>
#pragma once

#include "soak_common.hpp"

#include "shm/relay/relay.hpp"
#include "shm/spill/page.hpp"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <thread>

namespace soak {

inline constexpr std::uint32_t kRelayCapacity = 256;
inline constexpr std::uint32_t kRelayHighWater = 192;
inline constexpr std::uint32_t kRelayLowWater = 64;
inline constexpr std::uint32_t kRelayValueSize = 16;
inline constexpr std::uint64_t kRelayPageRecords = 256;

struct RelayOp {
  std::uint64_t tag;    // writer << 40 | seq
  std::uint64_t check;  // mix(tag)
};
static_assert(sizeof(RelayOp) == kRelayValueSize);

[[nodiscard]] inline RelayOp relay_op(std::uint64_t writer, std::uint64_t seq) noexcept {
  const std::uint64_t tag = writer << 40 | seq;
  return {tag, mix(tag)};
}

// The config every soak relay process creates or expects.
[[nodiscard]] inline shm::RelayConfig relay_config(const std::string& spill_dir) {
  shm::RelayConfig cfg;
  cfg.policy = shm::policy::kRawFifo;
  cfg.value_bytes = kRelayValueSize;
  cfg.max_entries = kRelayCapacity;
  cfg.backpressure = {shm::Dimension::Count, kRelayHighWater, kRelayLowWater, shm::Overflow::Spill};
  cfg.spill_dedup = true;
  cfg.spill.enabled = true;
  cfg.spill.dir = spill_dir;
  cfg.spill.page_size =
      shm::spill::kPageHeaderSize + kRelayPageRecords * shm::spill::record_stride(kRelayValueSize);
  return cfg;
}

// Opens the relay, creating it (ephemeral) when it does not exist yet.
// Handle: shm::RelayWriter or shm::RelayReader. The reader's role is
// exclusive: RoleTaken is retried (about 10 s) too, since the slot of a killed
// reader stays locked while the sidecar reclaims it.
template <class Handle>
shm::Result<Handle> attach_relay(const std::string& name, const std::string& spill_dir) {
  const shm::RelayConfig cfg = relay_config(spill_dir);
  for (int attempt = 0;; ++attempt) {
    auto h =
        open_or_create([&] { return Handle::open(name); },
                       [&](const shm::CreateOptions& co) { return Handle::create(name, cfg, co); });
    if (h || h.error().code != shm::Errc::RoleTaken || attempt > 1000) return h;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace soak
