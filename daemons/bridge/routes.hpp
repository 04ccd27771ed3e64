// The two routes of shm-bridge. Each runs in the calling thread until `stop`
// is set (SIGTERM / SIGINT) or a failure ends it.
//
//  - export: a local SpscRing or Channel (read as its consumer) -> an egress segment
//    (sequence, window, cumulative ack, retries, generation fence: the egress
//    library) -> JetStream publish on a subject, message id
//    "<egress incarnation>-<sequence>".
//  - import: a durable JetStream pull consumer -> a local SpscRing or Channel
//    (written as its producer), acknowledged to JetStream after the local
//    commit.
//
// The local segment's kind is read from its header (local_endpoint.hpp).
//
// Both keep their crash-recovery state in a bridge_state segment (state.hpp).
#pragma once

#include "bridge/failure.hpp"
#include "bridge/nats_link.hpp"
#include "bridge/route_status.hpp"

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace shm::bridge {

// One log line: level, event, then logfmt fields (already formatted).
using LogFn =
    std::function<void(std::string_view level, std::string_view event, const std::string& fields)>;

struct CommonOptions {
  ConnectionOptions connection;
  std::string root;                   // LIBSHM_ROOT of the local segments (empty: default)
  std::string subject;                // the JetStream subject
  std::string state;                  // the bridge_state segment (empty: derived)
  std::string create_stream;          // create this stream for the subject when none captures it
  std::uint32_t stream_replicas = 1;  // of the stream created (a JetStream cluster: up to 5)
  // create_stream names a stream that exists without capturing the subject:
  // add the subject to it (else exit 5).
  bool add_subject = false;
  std::uint64_t create_ring = 0;  // bytes: create the local ring when missing (0: it must exist)
  // The largest payload: create the local channel when missing (0: it must
  // exist). Excludes create_ring.
  std::uint64_t create_channel = 0;
  // Failing this long (publishes or fetches refused, or the connection
  // down): `stalled` on /status.
  std::uint32_t stall_after_s = 30;
};

struct ExportOptions {
  CommonOptions common;
  std::string source;  // the SpscRing, Channel or relay the application writes
  std::string egress;  // the egress segment (created when missing)
  std::uint32_t egress_capacity = 4096;
  std::uint32_t max_message = 4096;  // the egress slot size: the largest record
  std::uint32_t window = 256;        // publishes awaiting their ack at most
  std::uint32_t publish_timeout_ms = 2000;
  // A topic source: the bridge's subscription waits for the egress (Block:
  // the publisher waits for the bridge) or keeps the newest (DropOldest: the
  // bridge misses samples, counted, and the publisher never waits for it).
  bool topic_drop_oldest = false;
};

struct ImportOptions {
  CommonOptions common;
  std::string dest;     // the SpscRing or Channel local readers consume
  std::string durable;  // the durable consumer's name
  std::uint32_t batch = 256;
  std::uint32_t ack_wait_ms = 30000;
  // A gap in an export's message ids (messages a stream limit or a purge
  // removed before the import received them): stop the route (exit 8), or
  // log it and go on.
  bool stop_on_gap = true;
};

// The state segment's name: --state, or "<ring>-bridge-export" / "-import".
[[nodiscard]] std::string state_name(const ExportOptions& o);
[[nodiscard]] std::string state_name(const ImportOptions& o);

// The exit code (kExitOk after a stop) with the failure already logged.
// `live` receives the route's live figures (status_page.hpp).
[[nodiscard]] int run_export(const ExportOptions& o, const std::atomic<bool>& stop,
                             const LogFn& log, RouteStatus& live);
[[nodiscard]] int run_import(const ImportOptions& o, const std::atomic<bool>& stop,
                             const LogFn& log, RouteStatus& live);

}  // namespace shm::bridge
