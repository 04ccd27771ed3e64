// Renders a kind's description tree (shm::Node) as JSON (nlohmann) or as
// indented "key: value" text. Shared by shmctl and shm-sidecar.
#pragma once

#include "shm/segment/describe.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace shm::tools {

[[nodiscard]] nlohmann::ordered_json to_json(const Node& node);
// One leaf's value: JSON (null for an empty value), or text ("-", yes/no);
// strings made displayable either way.
[[nodiscard]] nlohmann::ordered_json value_json(const Node::Value& v);
[[nodiscard]] std::string value_text(const Node::Value& v);
// Indented text, one "key: value" per line; arrays of objects as "- " items.
[[nodiscard]] std::string to_text(const Node& node, int indent = 0);
// An array element's identity: its "name", "label", "id" or "slot" member (a
// string or an integer), if it has one. A slot (a topic's subscriber, a
// ledger ticket owner) keeps naming the same element when the elements
// before it come and go, which its index in the array would not.
[[nodiscard]] std::optional<std::string> element_id(const Node& element);

}  // namespace shm::tools
