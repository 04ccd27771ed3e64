#include "bridge/status_page.hpp"

#include "bridge/state.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace shm::bridge {
namespace {

struct Counters {
  std::uint64_t moved = 0, acknowledged = 0, retries = 0, reconnects = 0, duplicates = 0,
                recovered = 0;
};

// The state segment's counters, or the error that kept them from being read.
Result<Counters> read_counters(const StatusSource& s) {
  auto seg = StateSegment::observe(s.state, s.route, s.root);
  if (!seg) return std::unexpected(seg.error());
  const StateData& d = seg->data();
  auto ld = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  return Counters{ld(d.moved),      ld(d.acknowledged), ld(d.retries),
                  ld(d.reconnects), ld(d.duplicates),   ld(d.recovered)};
}

// A Prometheus label value: backslash, double quote and newline escaped.
std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

nlohmann::json route_json(const StatusSource& s) {
  const RouteStatus& live = *s.live;
  nlohmann::json j;
  const RouteStatus::Detail detail = live.detail();
  const std::int64_t now = wall_ms();
  j["route"] = std::string(to_string(s.route));
  j["state"] = std::string(to_string(live.condition.load(std::memory_order_relaxed)));
  j["state_segment"] = s.state;
  j["root"] = s.root.empty() ? default_root() : s.root;
  j["subject"] = s.subject;
  j["stream"] = detail.stream;
  j["ready"] = live.ready.load(std::memory_order_relaxed);
  j["connected"] = live.connected.load(std::memory_order_relaxed);
  const std::int64_t success = live.last_success_ms.load(std::memory_order_relaxed);
  if (success != 0)
    j["last_success_age_seconds"] = static_cast<double>(now - success) / 1000.0;
  else
    j["last_success_age_seconds"] = nullptr;
  if (!detail.last_error.empty())
    j["last_error"] = {{"code", detail.last_error_code},
                       {"text", detail.last_error},
                       {"age_seconds", static_cast<double>(now - detail.last_error_ms) / 1000.0}};
  else
    j["last_error"] = nullptr;
  j["failures"] = live.failures.load(std::memory_order_relaxed);
  j["bytes_moved"] = live.bytes_moved.load(std::memory_order_relaxed);
  if (s.route == Route::Export) {
    j["egress_backlog"] = live.egress_backlog.load(std::memory_order_relaxed);
    j["shared_stream"] = live.shared_stream.load(std::memory_order_relaxed);
  } else {
    j["stream_pending"] = live.stream_pending.load(std::memory_order_relaxed);
    j["gaps"] = live.gaps.load(std::memory_order_relaxed);
    j["missing"] = live.missing.load(std::memory_order_relaxed);
  }
  if (auto c = read_counters(s)) {
    j["counters"] = {{"moved", c->moved},           {"acknowledged", c->acknowledged},
                     {"retries", c->retries},       {"reconnects", c->reconnects},
                     {"duplicates", c->duplicates}, {"recovered", c->recovered}};
  } else {
    j["counters"] = nullptr;
    j["counters_error"] = c.error().what();
  }
  return j;
}

daemons::HttpResponse status_json(std::span<const StatusSource> sources) {
  nlohmann::json routes = nlohmann::json::array();
  for (const StatusSource& s : sources) routes.push_back(route_json(s));
  const nlohmann::json j{{"routes", std::move(routes)}};
  return {200, "application/json",
          j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"};
}

// One sample per route for each family (one per route and condition for
// shm_bridge_route_state); HELP and TYPE once per family.
daemons::HttpResponse metrics(std::span<const StatusSource> sources) {
  struct Sample {
    std::string labels;
    std::string value;
  };
  struct Family {
    const char* name;
    const char* type;
    const char* help;
    std::vector<Sample> samples;
  };
  enum : std::size_t {
    kUp,
    kConnected,
    kBytesMoved,
    kEgressBacklog,
    kStreamPending,
    kMoved,
    kAcknowledged,
    kRetries,
    kReconnects,
    kDuplicates,
    kRecovered,
    kRouteState,
    kLastErrorCode,
    kGaps,
    kMissing,
    kLastSuccessAge,
    kLastErrorAge,
    kFailures,
  };
  std::vector<Family> families{
      {"shm_bridge_up", "gauge", "1 while the route runs (after READY)", {}},
      {"shm_bridge_connected", "gauge", "1 while the NATS connection is up", {}},
      {"shm_bridge_bytes_moved_total", "counter", "payload bytes moved by this process", {}},
      {"shm_bridge_egress_backlog",
       "gauge",
       "records in the egress not yet stored by JetStream",
       {}},
      {"shm_bridge_stream_pending",
       "gauge",
       "messages of the stream after the last one applied",
       {}},
      {"shm_bridge_moved_total", "counter", "records moved (state segment, every run)", {}},
      {"shm_bridge_acknowledged_total", "counter", "acknowledgements (state segment)", {}},
      {"shm_bridge_retries_total", "counter", "records failed and retried (state segment)", {}},
      {"shm_bridge_reconnects_total", "counter", "NATS reconnections (state segment)", {}},
      {"shm_bridge_duplicates_total",
       "counter",
       "messages dropped as already applied (state segment)",
       {}},
      {"shm_bridge_recovered_total",
       "counter",
       "intents completed after a crash (state segment)",
       {}},
      {"shm_bridge_route_state",
       "gauge",
       "the route's state, one-hot: 1 for the label condition the route is in (starting, moving, "
       "idle, retrying, stalled, disconnected, gap, stream_full), 0 for the others",
       {}},
      {"shm_bridge_last_error_code",
       "gauge",
       "JetStream error code of the route's last error (0: none, or not JetStream's)",
       {}},
      {"shm_bridge_gaps_total",
       "counter",
       "gaps in an export's message ids the import found (this process)",
       {}},
      {"shm_bridge_missing_total",
       "counter",
       "messages gone from the stream before the import received them (this process)",
       {}},
      {"shm_bridge_last_success_age_seconds",
       "gauge",
       "seconds since JetStream stored one of the export's messages or the import committed one "
       "(no sample before the first)",
       {}},
      {"shm_bridge_last_error_age_seconds",
       "gauge",
       "seconds since the route's last error (no sample before the first)",
       {}},
      {"shm_bridge_failures_total",
       "counter",
       "failures in this process: failed publish windows (export); lost connections, failed "
       "reconnections, fetches and consumer re-creations (import)",
       {}},
  };
  const std::int64_t now = wall_ms();
  const auto seconds_since = [now](std::int64_t ms) {
    return fmt::format("{:.3f}", static_cast<double>(std::max<std::int64_t>(0, now - ms)) / 1000.0);
  };
  for (const StatusSource& s : sources) {
    const RouteStatus& live = *s.live;
    const RouteStatus::Detail detail = live.detail();
    // The root too: two routes may use one ring name (so one state segment
    // name) under different roots, and a scrape refuses repeated series.
    const std::string labels =
        fmt::format("route=\"{}\",state=\"{}\",root=\"{}\"", to_string(s.route), label(s.state),
                    label(s.root.empty() ? default_root() : s.root));
    auto add = [&](std::size_t family, std::uint64_t v) {
      families[family].samples.push_back({labels, std::to_string(v)});
    };
    add(kUp, live.ready.load(std::memory_order_relaxed) ? 1 : 0);
    add(kConnected, live.connected.load(std::memory_order_relaxed) ? 1 : 0);
    add(kBytesMoved, live.bytes_moved.load(std::memory_order_relaxed));
    if (s.route == Route::Export)
      add(kEgressBacklog, live.egress_backlog.load(std::memory_order_relaxed));
    else {
      add(kStreamPending, live.stream_pending.load(std::memory_order_relaxed));
      add(kGaps, live.gaps.load(std::memory_order_relaxed));
      add(kMissing, live.missing.load(std::memory_order_relaxed));
    }
    if (auto c = read_counters(s)) {
      add(kMoved, c->moved);
      add(kAcknowledged, c->acknowledged);
      add(kRetries, c->retries);
      add(kReconnects, c->reconnects);
      add(kDuplicates, c->duplicates);
      add(kRecovered, c->recovered);
    }
    const RouteCondition condition = live.condition.load(std::memory_order_relaxed);
    for (const RouteCondition c : kRouteConditions)
      families[kRouteState].samples.push_back(
          {fmt::format("{},condition=\"{}\"", labels, to_string(c)), c == condition ? "1" : "0"});
    add(kLastErrorCode, static_cast<std::uint64_t>(std::max(0, detail.last_error_code)));
    if (const std::int64_t success = live.last_success_ms.load(std::memory_order_relaxed);
        success != 0)
      families[kLastSuccessAge].samples.push_back({labels, seconds_since(success)});
    if (!detail.last_error.empty())
      families[kLastErrorAge].samples.push_back({labels, seconds_since(detail.last_error_ms)});
    add(kFailures, live.failures.load(std::memory_order_relaxed));
  }
  std::string out;
  for (const Family& f : families) {
    if (f.samples.empty()) continue;
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", f.name, f.help, f.name, f.type);
    for (const Sample& sample : f.samples)
      out += fmt::format("{}{{{}}} {}\n", f.name, sample.labels, sample.value);
  }
  return {200, "text/plain; version=0.0.4; charset=utf-8", out};
}

}  // namespace

daemons::HttpResponse status_page(std::span<const StatusSource> sources,
                                  const daemons::HttpRequest& request) {
  if (request.path == "/status") return status_json(sources);
  if (request.path == "/metrics") return metrics(sources);
  return {404, "text/plain; charset=utf-8", "not found: try /status or /metrics\n"};
}

}  // namespace shm::bridge
