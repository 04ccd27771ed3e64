// The sidecar's status: JSON for /status and `--once --json`, a table for
// `--once`.
//
// JSON shape:
//   { "sidecar": { "root", "pid", "cycles", "deaths", "reclaims", ... },
//     "segments": [ { "name", "up", "kind", "size", "ephemeral",
//                     "attachers": { "alive", "stuck", "dead", "slots": [...] },
//                     "header": <describe_header tree>,
//                     "detail": <the kind's describe tree> }
//                 | { "name", "up": false, "error" } ] }
#pragma once

#include "sidecar/monitor.hpp"

#include <nlohmann/json.hpp>

#include <string>

namespace shm::sidecar {

[[nodiscard]] nlohmann::ordered_json status_json(const Monitor& monitor,
                                                 std::uint64_t start_time_ns);
// One line per segment (NAME KIND SIZE ALIVE STUCK DEAD STATE) under a summary line.
// status_json() serialised (indented), as /status and --once --json print it.
[[nodiscard]] std::string status_json_text(const Monitor& monitor, std::uint64_t start_time_ns);
[[nodiscard]] std::string status_text(const Monitor& monitor);

}  // namespace shm::sidecar
