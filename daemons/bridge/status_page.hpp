// The bridge's own HTTP pages (`shm-bridge ... --listen 127.0.0.1:PORT`):
//   GET /status   JSON: per route, whether it is ready and connected, the
//                 state segment's counters, bytes moved, backlog
//   GET /metrics  the same figures in the Prometheus text format
// Anything else is 404. The counters are read from the state segment through
// a read-only mapping of its own (StateSegment::observe), so a page never
// touches the route's handles; the live figures come from RouteStatus.
#pragma once

#include "bridge/route_status.hpp"
#include "shm/bridge/state_layout.hpp"

#include "common/http_endpoint.hpp"

#include <span>
#include <string>

namespace shm::bridge {

struct StatusSource {
  Route route = Route::Export;
  std::string state;  // the state segment's name
  std::string root;   // its directory (empty: the default)
  std::string subject;
  const RouteStatus* live = nullptr;
};

// The answer to one request about the process's routes (one, or every route
// of a config file), thread-safe: reads only. /status is {"routes": [...]},
// one object per route in order; /metrics labels each series with its route
// and state segment.
[[nodiscard]] daemons::HttpResponse status_page(std::span<const StatusSource> sources,
                                                const daemons::HttpRequest& request);

}  // namespace shm::bridge
