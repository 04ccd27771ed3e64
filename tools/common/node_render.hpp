// Renders a kind's description tree (shm::Node) as JSON (nlohmann) or as
// indented "key: value" text. Shared by shmctl and shm-sidecar.
#pragma once

#include "shm/segment/describe.hpp"

#include <nlohmann/json.hpp>

#include <string>

namespace shm::tools {

[[nodiscard]] nlohmann::ordered_json to_json(const Node& node);
// Indented text, one "key: value" per line; arrays of objects as "- " items.
[[nodiscard]] std::string to_text(const Node& node, int indent = 0);

}  // namespace shm::tools
