// The ledger block of scripts/soak.sh (test_soak_ledger_worker,
// test_soak_ledger_checker, test_soak_ledger_verify): W worker processes
// reserve/commit/replace/release at random on one shared Ledger and admit on
// its token buckets; a checker samples it read-only the whole time.
//
// The limits are tight on purpose, so that every scope refuses now and then:
// 3 workers holding up to 48 tickets of ~1 KiB each want more than the ticket
// table, the global budget, their pool accounts and the categories hold; the
// ordinary categories together may exceed the ordinary partition, and ordinary
// plus control the global budget; the "bursty" bucket refills slower than the
// workers ask.
//
// Each worker incarnation opens two pools of its own ("w<id>.<pid>.a" with a
// data and a control account, "w<id>.<pid>.b" with one account for every
// category), so nobody else charges them: after every few operations the
// worker compares its pools' accounts with the tickets it holds (a model of
// its own), which catches a leaked or lost charge at once. A killed worker's
// tickets and pools are left to the sidecar's reclaim (or to the next attacher
// of its slot).
//
// Logs (formats common to every kind in soak_logs.hpp):
//   worker:   S <pid> <realtime_ns> <pool_a> <pool_b>
//             F <realtime_ns>                  first operation done
//             X <ops> <reserves> <rejections>  released everything, closed its pools
//             V <message>                      a model mismatch or an unexpected error
//   checker:  S <pid> <realtime_ns>
//             F <realtime_ns>                  first sample taken
//             P <samples> <verified> <busy> <in progress>
//                                              progress, every 256 samples
//             X <samples> <verified> <violations> <busy> <in progress>
//                                              verified: snapshots checked against
//                                              the tickets; busy / in progress:
//                                              snapshots skipped, by reason
//             V <message>                      an account outside its limit, a
//                                              derived counter that disagrees
//                                              with the ticket table, ...
#pragma once

#include "shm/ledger/ledger.hpp"
#include "soak_common.hpp"

#include <string>

namespace soak {

inline constexpr std::int64_t kKiB = 1024;

inline shm::LedgerConfig ledger_config() {
  shm::LedgerConfig cfg;
  cfg.params.global_limit = 96 * kKiB;
  cfg.params.control_reserve = 16 * kKiB;
  cfg.params.max_tickets = 128;
  cfg.params.max_categories = 8;
  cfg.params.max_pools = 64;
  cfg.params.max_buckets = 4;
  cfg.categories = {{"frames", 56 * kKiB, shm::Partition::Ordinary},
                    {"meta", 40 * kKiB, shm::Partition::Ordinary},
                    {"control", 24 * kKiB, shm::Partition::Control}};
  cfg.buckets = {{"ops", 2000, 64}, {"bursty", 40, 8}};
  return cfg;
}

// Opens the ledger, creating it (ephemeral) when it does not exist yet;
// retries while attachment slots of dead workers wait for reclaim.
inline shm::Result<shm::Ledger> attach_ledger(const std::string& name) {
  return open_or_create(
      [&] { return shm::Ledger::open(name); },
      [&](const shm::CreateOptions& co) { return shm::Ledger::create(name, ledger_config(), co); });
}

}  // namespace soak
