// Renders a kind's description tree (shm::Node) as JSON (nlohmann) or as
// indented "key: value" text. Shared by shmctl and shm-sidecar.
#pragma once

#include "shm/segment/describe.hpp"

#include <nlohmann/json.hpp>

#include <string>

namespace shm::tools {

[[nodiscard]] nlohmann::ordered_json to_json(const Node& node);
// One leaf's value: JSON (null for an empty value), or text ("-", yes/no);
// strings made displayable either way.
[[nodiscard]] nlohmann::ordered_json value_json(const Node::Value& v);
[[nodiscard]] std::string value_text(const Node::Value& v);
// Indented text, one "key: value" per line; arrays of objects as "- " items.
[[nodiscard]] std::string to_text(const Node& node, int indent = 0);

}  // namespace shm::tools
