#include "node_render.hpp"

#include "display_text.hpp"

#include <fmt/format.h>

namespace shm::tools {

nlohmann::ordered_json value_json(const Node::Value& v) {
  return std::visit(
      [](const auto& x) -> nlohmann::ordered_json {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>)
          return nullptr;
        else if constexpr (std::is_same_v<T, std::string>)
          return displayable(x);
        else
          return x;
      },
      v);
}

std::string value_text(const Node::Value& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>)
          return "-";
        else if constexpr (std::is_same_v<T, bool>)
          return x ? "yes" : "no";
        else if constexpr (std::is_same_v<T, std::string>)
          return displayable(x);
        else
          return fmt::format("{}", x);
      },
      v);
}

nlohmann::ordered_json to_json(const Node& node) {
  switch (node.type()) {
    case Node::Type::Value:
      return value_json(node.value());
    case Node::Type::Array: {
      auto a = nlohmann::ordered_json::array();
      for (const Node& e : node.elements()) a.push_back(to_json(e));
      return a;
    }
    case Node::Type::Object:
      break;
  }
  auto o = nlohmann::ordered_json::object();
  for (const auto& [k, v] : node.members()) o[displayable(k)] = to_json(v);
  return o;
}

std::optional<std::string> element_id(const Node& element) {
  if (element.type() != Node::Type::Object) return std::nullopt;
  for (std::string_view key : {"name", "label", "id", "slot"}) {
    const Node* n = element.find(key);
    if (n == nullptr || n->type() != Node::Type::Value) continue;
    const Node::Value& v = n->value();
    if (const auto* s = std::get_if<std::string>(&v); s != nullptr && !s->empty()) return *s;
    if (const auto* u = std::get_if<std::uint64_t>(&v)) return fmt::format("{}", *u);
    if (const auto* d = std::get_if<std::int64_t>(&v)) return fmt::format("{}", *d);
  }
  return std::nullopt;
}

std::string to_text(const Node& node, int indent) {
  std::string out;
  const std::string pad(static_cast<std::size_t>(indent), ' ');
  if (node.type() == Node::Type::Value) return pad + value_text(node.value()) + "\n";
  if (node.type() == Node::Type::Array) {
    for (const Node& e : node.elements()) {
      if (e.type() == Node::Type::Value) {
        out += pad + "- " + value_text(e.value()) + "\n";
      } else {
        std::string inner = to_text(e, indent + 2);
        if (inner.size() >= static_cast<std::size_t>(indent) + 2)
          inner.replace(static_cast<std::size_t>(indent), 2, "- ");
        out += inner;
      }
    }
    return out;
  }
  for (const auto& [k, v] : node.members()) {
    if (v.type() == Node::Type::Value) {
      out += fmt::format("{}{}: {}\n", pad, displayable(k), value_text(v.value()));
    } else if (v.type() == Node::Type::Array && v.elements().empty()) {
      out += fmt::format("{}{}: []\n", pad, displayable(k));
    } else {
      out += fmt::format("{}{}:\n", pad, displayable(k));
      out += to_text(v, indent + 2);
    }
  }
  return out;
}

}  // namespace shm::tools
