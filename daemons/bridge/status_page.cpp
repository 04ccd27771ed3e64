#include "bridge/status_page.hpp"

#include "bridge/state.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <utility>

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

daemons::HttpResponse status_json(const StatusSource& s) {
  const RouteStatus& live = *s.live;
  nlohmann::json j;
  j["route"] = std::string(to_string(s.route));
  j["state"] = s.state;
  j["subject"] = s.subject;
  j["ready"] = live.ready.load(std::memory_order_relaxed);
  j["connected"] = live.connected.load(std::memory_order_relaxed);
  j["bytes_moved"] = live.bytes_moved.load(std::memory_order_relaxed);
  if (s.route == Route::Export)
    j["egress_backlog"] = live.egress_backlog.load(std::memory_order_relaxed);
  else
    j["stream_pending"] = live.stream_pending.load(std::memory_order_relaxed);
  if (auto c = read_counters(s)) {
    j["counters"] = {{"moved", c->moved},           {"acknowledged", c->acknowledged},
                     {"retries", c->retries},       {"reconnects", c->reconnects},
                     {"duplicates", c->duplicates}, {"recovered", c->recovered}};
  } else {
    j["counters"] = nullptr;
    j["counters_error"] = c.error().what();
  }
  return {200, "application/json",
          j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"};
}

daemons::HttpResponse metrics(const StatusSource& s) {
  const RouteStatus& live = *s.live;
  const std::string labels =
      fmt::format("route=\"{}\",state=\"{}\"", to_string(s.route), label(s.state));
  std::string out;
  auto family = [&](const char* name, const char* type, const char* help, std::uint64_t v) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{}{{{}}} {}\n", name, help, name, type, name,
                       labels, v);
  };
  family("shm_bridge_up", "gauge", "1 while the route runs (after READY)",
         live.ready.load(std::memory_order_relaxed) ? 1 : 0);
  family("shm_bridge_connected", "gauge", "1 while the NATS connection is up",
         live.connected.load(std::memory_order_relaxed) ? 1 : 0);
  family("shm_bridge_bytes_moved_total", "counter", "payload bytes moved by this process",
         live.bytes_moved.load(std::memory_order_relaxed));
  if (s.route == Route::Export)
    family("shm_bridge_egress_backlog", "gauge",
           "records in the egress not yet stored by JetStream",
           live.egress_backlog.load(std::memory_order_relaxed));
  else
    family("shm_bridge_stream_pending", "gauge",
           "messages of the stream after the last one applied",
           live.stream_pending.load(std::memory_order_relaxed));
  if (auto c = read_counters(s)) {
    const std::array<std::tuple<const char*, const char*, std::uint64_t>, 6> counters{{
        {"shm_bridge_moved_total", "records moved (state segment, every run)", c->moved},
        {"shm_bridge_acknowledged_total", "acknowledgements (state segment)", c->acknowledged},
        {"shm_bridge_retries_total", "records failed and retried (state segment)", c->retries},
        {"shm_bridge_reconnects_total", "NATS reconnections (state segment)", c->reconnects},
        {"shm_bridge_duplicates_total", "messages dropped as already applied (state segment)",
         c->duplicates},
        {"shm_bridge_recovered_total", "intents completed after a crash (state segment)",
         c->recovered},
    }};
    for (const auto& [name, help, v] : counters) family(name, "counter", help, v);
  }
  return {200, "text/plain; version=0.0.4; charset=utf-8", out};
}

}  // namespace

daemons::HttpResponse status_page(const StatusSource& source, const daemons::HttpRequest& request) {
  if (request.path == "/status") return status_json(source);
  if (request.path == "/metrics") return metrics(source);
  return {404, "text/plain; charset=utf-8", "not found: try /status or /metrics\n"};
}

}  // namespace shm::bridge
