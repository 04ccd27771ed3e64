// The fanout block of scripts/soak.sh (test_soak_fanout_producer,
// test_soak_fanout_consumer, test_soak_fanout_verify): one PriorityFanout
// (K MpmcRings + the bitmap) shared by N producer and M consumer processes.
//
// Items are shm::test::FanoutItem (fanout_items.hpp): (producer, seq,
// priority) and a body derived from them; the priority is a function of
// (producer, seq), so a consumer can tell an item routed to the wrong ring.
//
// Producer journal (soak_common.hpp's JournalEntry, first == last == the
// sequence number): before submitting s the producer journals s; a restarted
// producer continues at s + 1. So s is the only item "in doubt" at a producer
// kill: a push killed before its claim never happened, one killed between
// claim and publish is repaired into a tombstone (MpmcRing: "claimed,
// unpublished" cells are skipped), one that completed is published once.
// Never repeated.
//
// Logs (one write(2) per line group; formats common to every kind in soak_logs.hpp):
//   producer:  S <pid> <realtime_ns> <next_seq> <in_doubt_seq|->
//              F <realtime_ns>                first item submitted
//              X <next_seq>                   clean stop: 0..next_seq-1 submitted
//              V <message>
//   consumer:  S <pid> <realtime_ns>
//              I <producer> <seq> <priority>  one item, logged after it was
//                                             popped, before the next pop: a
//                                             kill in between loses this one
//                                             item (the documented MpmcRing loss)
//              F <realtime_ns>                first item of this incarnation
//              C <reason> <producer> <seq> <priority>  an item failed its checks
//              X <items_this_incarnation>     drained and stopped (SIGTERM)
//              V <message>
#pragma once

#include "fanout_items.hpp"
#include "soak_common.hpp"

#include "shm/priority_fanout.hpp"

#include <string>

namespace soak {

// Opens the fanout, creating it (ephemeral) when it does not exist yet. Both
// sides may create: whoever comes first. Retries while another process is
// creating it (rings present, bitmap not yet) and while attachment slots of
// dead handles wait for reclaim.
inline shm::Result<shm::PriorityFanout> attach_fanout(const std::string& base,
                                                      const shm::FanoutParams& params,
                                                      shm::FanoutRole role) {
  return open_or_create([&] { return shm::PriorityFanout::open(base, params, {}, role); },
                        [&](const shm::CreateOptions& co) {
                          return shm::PriorityFanout::create(base, params, co, role);
                        });
}

}  // namespace soak
