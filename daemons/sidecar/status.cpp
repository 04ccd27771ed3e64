#include "sidecar/status.hpp"

#include "display_text.hpp"
#include "node_render.hpp"

#include "shm/platform/clock.hpp"

#include <fmt/format.h>

#include <unistd.h>

namespace shm::sidecar {

nlohmann::ordered_json status_json(const Monitor& monitor, std::uint64_t start_time_ns) {
  const MonitorStats& st = monitor.stats();
  nlohmann::ordered_json out;
  auto& sc = out["sidecar"];
  sc["root"] = tools::displayable(monitor.root());
  sc["pid"] = static_cast<std::int64_t>(::getpid());
  sc["started"] = iso8601(start_time_ns);
  sc["cycles"] = st.cycles;
  sc["rescans"] = st.rescans;
  sc["discovered"] = st.discovered;
  sc["removed"] = st.removed;
  sc["unreadable"] = st.unreadable;
  sc["deaths"] = st.deaths;
  sc["reclaims"] = st.reclaims;
  sc["reclaim_failures"] = st.reclaim_failures;
  sc["stuck_detections"] = st.stuck_detections;
  sc["collected"] = st.collected;
  sc["last_cycle_ms"] = static_cast<double>(st.last_cycle_ns) / 1e6;
  sc["stuck_after_ms"] = static_cast<std::int64_t>(monitor.options().stuck_after.count());
  sc["gc_ephemeral"] = monitor.options().gc_ephemeral;
  if (const RootSpace& space = monitor.root_space(); space.known) {
    auto& fs = sc["root_space"];
    fs["size_bytes"] = space.size_bytes;
    fs["free_bytes"] = space.free_bytes;
    fs["free_inodes"] = space.free_inodes;
    fs["full"] = space.full;
  }
  auto segs = nlohmann::ordered_json::array();
  for (const SegmentView& v : monitor.snapshot()) {
    nlohmann::ordered_json s;
    s["name"] = tools::displayable(v.name);
    s["up"] = v.up;
    if (!v.error.empty()) s["error"] = tools::displayable(v.error);
    if (!v.up) {
      segs.push_back(std::move(s));
      continue;
    }
    s["kind"] = v.kind;
    s["size"] = v.size;
    s["ephemeral"] = v.ephemeral;
    auto& a = s["attachers"];
    a["alive"] = v.alive;
    a["stuck"] = v.stuck;
    a["dead"] = v.dead;
    auto slots = nlohmann::ordered_json::array();
    for (const AttacherView& at : v.attachers) {
      nlohmann::ordered_json j;
      j["slot"] = at.slot;
      j["role"] = at.role;
      j["pid"] = at.pid;
      j["generation"] = at.generation;
      j["state"] = at.liveness == Liveness::Alive ? (at.stuck ? "stuck" : "alive")
                                                  : std::string(to_string(at.liveness));
      j["stalled_ms"] = at.stalled_ms;
      j["heartbeat_age_ms"] = at.heartbeat_age_ms;
      slots.push_back(std::move(j));
    }
    a["slots"] = std::move(slots);
    s["header"] = tools::to_json(v.header);
    s["detail"] = tools::to_json(v.detail);
    segs.push_back(std::move(s));
  }
  out["segments"] = std::move(segs);
  return out;
}

std::string status_json_text(const Monitor& monitor, std::uint64_t start_time_ns) {
  // Replace, not throw: every string is displayable() already, but a status
  // page must never take the daemon down over one byte.
  return status_json(monitor, start_time_ns)
             .dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) +
         "\n";
}

std::string status_text(const Monitor& monitor) {
  const MonitorStats& st = monitor.stats();
  std::size_t up = 0;
  for (const SegmentView& v : monitor.snapshot()) up += v.up ? 1 : 0;
  std::string out =
      fmt::format("root {}: {} segment(s), {} unreadable; deaths {}, reclaimed {}, collected {}\n",
                  tools::displayable(monitor.root()), up, monitor.snapshot().size() - up, st.deaths,
                  st.reclaims, st.collected);
  if (monitor.root_space().full)
    out += fmt::format("root filesystem FULL: {} bytes, {} inodes free\n",
                       monitor.root_space().free_bytes, monitor.root_space().free_inodes);
  std::size_t width = 7;
  for (const SegmentView& v : monitor.snapshot())
    width = std::max(width, tools::displayable(v.name).size());
  out += fmt::format("{:<{}}  {:<14} {:>12} {:>5} {:>5} {:>5}  {}\n", "SEGMENT", width, "KIND",
                     "SIZE", "ALIVE", "STUCK", "DEAD", "STATE");
  for (const SegmentView& v : monitor.snapshot()) {
    if (!v.up) {
      out += fmt::format("{:<{}}  {:<14} {:>12} {:>5} {:>5} {:>5}  unreadable: {}\n",
                         tools::displayable(v.name), width, "-", "-", "-", "-", "-",
                         tools::displayable(v.error));
      continue;
    }
    out += fmt::format("{:<{}}  {:<14} {:>12} {:>5} {:>5} {:>5}  {}\n", tools::displayable(v.name),
                       width, v.kind, v.size, v.alive, v.stuck, v.dead,
                       v.error.empty() ? "ok" : tools::displayable(v.error));
  }
  return out;
}

}  // namespace shm::sidecar
