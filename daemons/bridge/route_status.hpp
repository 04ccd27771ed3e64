// What one running route knows of itself that its state segment does not
// hold: whether it is up and connected, the payload bytes it moved, and how
// far behind it is. Written by the route's thread, read by the HTTP
// endpoint's threads (status.hpp); each figure is independent of the others,
// so relaxed atomics suffice: a reader may see one figure a step ahead of
// another, never a torn one.
#pragma once

#include <atomic>
#include <cstdint>

namespace shm::bridge {

struct RouteStatus {
  std::atomic<bool> ready{false};      // printed READY, not stopped yet
  std::atomic<bool> connected{false};  // the NATS connection is up
  // Payload bytes moved since this process started (export: ring -> egress;
  // import: JetStream -> ring). The state segment's `moved` counts records
  // over every run.
  std::atomic<std::uint64_t> bytes_moved{0};
  // Export: records taken into the egress and not yet stored by JetStream.
  std::atomic<std::uint64_t> egress_backlog{0};
  // Import: messages of the stream after the last one applied, as JetStream
  // reported with that message (its pending count for the consumer).
  std::atomic<std::uint64_t> stream_pending{0};
};

}  // namespace shm::bridge
