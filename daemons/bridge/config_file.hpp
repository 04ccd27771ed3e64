// `shm-bridge run --config FILE`: several routes in one process, listed in a
// JSON file (docs/bridge.md, "A config file of routes"). The keys are the
// command line's option names without the leading dashes; "defaults" holds
// options every route shares (the connection, the root, the stream), and each
// route overrides them:
//
//   {
//     "listen": "127.0.0.1:9465",
//     "defaults": {"server": ["nats://10.0.0.5:4222"], "create-stream": "ORDERS"},
//     "routes": [
//       {"export": {"subject": "orders.a", "source": "orders", "egress": "orders-out"}},
//       {"import": {"subject": "fills.a", "durable": "host-a", "dest": "fills"}}
//     ]
//   }
//
// Every mistake is a usage failure (exit 2) naming the file, the route (its
// index and kind) and the key: an unknown key, a value of the wrong type or
// out of the command line's range, a required option missing, or two routes
// that would share a state segment.
#pragma once

#include "bridge/failure.hpp"
#include "bridge/routes.hpp"
#include "shm/bridge/state_layout.hpp"

#include <string>
#include <vector>

namespace shm::bridge {

struct RouteConfig {
  Route route = Route::Export;
  ExportOptions exported;  // route == Export
  ImportOptions imported;  // route == Import
};

struct BridgeConfig {
  std::string listen;  // empty: no HTTP pages
  std::vector<RouteConfig> routes;
};

// Reads and validates the file.
[[nodiscard]] Outcome<BridgeConfig> load_config(const std::string& path);

// The same, from the file's text (`path` names it in messages).
[[nodiscard]] Outcome<BridgeConfig> parse_config(const std::string& text, const std::string& path);

}  // namespace shm::bridge
