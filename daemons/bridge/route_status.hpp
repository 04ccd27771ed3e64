// What one running route knows of itself that its state segment does not
// hold: whether it is up and connected, the payload bytes it moved, how far
// behind it is, and how it is doing (moving, idle, retrying, stalled,
// disconnected; the last error with JetStream's code and text; when it last
// got something through). Written by the route's thread, read by the HTTP
// endpoint's threads (status.hpp). The figures in atomics are independent
// of each other, so relaxed atomics suffice: a reader may see one figure a
// step ahead of another, never a torn one. The texts (stream name, last
// error) sit under a mutex, written rarely.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

namespace shm::bridge {

// How a route is doing, as /status and /metrics show it.
enum class RouteCondition : std::uint8_t {
  Starting,      // not READY yet
  Moving,        // something went through in the last few seconds
  Idle,          // nothing to move, nothing failing
  Retrying,      // publishes (export) or fetches (import) are failing, for less than stall_after
  Stalled,       // failing, or disconnected, for stall_after or longer
  Disconnected,  // the NATS connection is down (for less than stall_after)
  Gap,           // the import found messages gone from the stream (in the last 10 s)
  StreamFull,    // the stream refuses new messages (a limit with discard new)
};

// Every condition, in the order /metrics lists them.
inline constexpr RouteCondition kRouteConditions[] = {
    RouteCondition::Starting, RouteCondition::Moving,     RouteCondition::Idle,
    RouteCondition::Retrying, RouteCondition::Stalled,    RouteCondition::Disconnected,
    RouteCondition::Gap,      RouteCondition::StreamFull,
};

[[nodiscard]] constexpr std::string_view to_string(RouteCondition c) noexcept {
  switch (c) {
    case RouteCondition::Starting:
      return "starting";
    case RouteCondition::Moving:
      return "moving";
    case RouteCondition::Idle:
      return "idle";
    case RouteCondition::Retrying:
      return "retrying";
    case RouteCondition::Stalled:
      return "stalled";
    case RouteCondition::Gap:
      return "gap";
    case RouteCondition::StreamFull:
      return "stream_full";
    case RouteCondition::Disconnected:
      break;
  }
  return "disconnected";
}

// Milliseconds of the system clock since the epoch (for ages on the pages).
[[nodiscard]] inline std::int64_t wall_ms() noexcept {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct RouteStatus {
  std::atomic<bool> ready{false};      // printed READY, not stopped yet
  std::atomic<bool> connected{false};  // the NATS connection is up
  // Payload bytes moved since this process started (export: ring -> egress;
  // import: JetStream -> ring). The state segment's `moved` counts records
  // over every run.
  std::atomic<std::uint64_t> bytes_moved{0};
  // Export: records taken into the egress and not yet stored by JetStream.
  std::atomic<std::uint64_t> egress_backlog{0};
  // Export: other publishers write into the route's stream, whose messages
  // interleaved with a window make it refused and retried (export_route.cpp,
  // `shared_stream`).
  std::atomic<bool> shared_stream{false};
  // Import: messages of the stream after the last one applied, as JetStream
  // reported with that message (its pending count for the consumer).
  std::atomic<std::uint64_t> stream_pending{0};
  std::atomic<RouteCondition> condition{RouteCondition::Starting};
  // wall_ms() of the last message JetStream stored (export) or the last one
  // committed locally (import); 0: none in this process yet.
  std::atomic<std::int64_t> last_success_ms{0};
  // Failures in this process: failed publish windows (export); lost
  // connections, failed reconnections, fetches and consumer re-creations
  // (import).
  std::atomic<std::uint64_t> failures{0};
  // Import: gaps found in this process, and the messages they miss.
  std::atomic<std::uint64_t> gaps{0};
  std::atomic<std::uint64_t> missing{0};

  // The texts, copied out whole.
  struct Detail {
    std::string stream;       // the JetStream stream of the route's subject
    int last_error_code = 0;  // JetStream's error code (10070, ...); 0: none or not JetStream's
    std::string last_error;   // empty: no error in this process yet
    std::int64_t last_error_ms = 0;
  };
  void set_stream(std::string stream) {
    const std::lock_guard lock(mutex_);
    detail_.stream = std::move(stream);
  }
  void set_error(int code, std::string text) {
    const std::lock_guard lock(mutex_);
    detail_.last_error_code = code;
    detail_.last_error = std::move(text);
    detail_.last_error_ms = wall_ms();
  }
  [[nodiscard]] Detail detail() const {
    const std::lock_guard lock(mutex_);
    return detail_;
  }

 private:
  mutable std::mutex mutex_;
  Detail detail_;
};

}  // namespace shm::bridge
