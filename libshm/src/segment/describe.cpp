#include "shm/segment/describe.hpp"

// GCC 12 reports a false -Wmaybe-uninitialized inside std::variant's move
// constructor when a Node is moved into a vector (GCC PR 105562 family).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace shm {

Node& Node::set(std::string key, Value value, Metric metric) {
  Node n(Type::Value);
  n.value_ = std::move(value);
  n.metric_ = metric;
  members_.emplace_back(std::move(key), std::move(n));
  return *this;
}

Node& Node::object(std::string key) {
  members_.emplace_back(std::move(key), Node(Type::Object));
  return members_.back().second;
}

Node& Node::array(std::string key) {
  members_.emplace_back(std::move(key), Node(Type::Array));
  return members_.back().second;
}

Node& Node::push_object() {
  elements_.emplace_back(Type::Object);
  return elements_.back();
}

void Node::push(Value value) {
  Node n(Type::Value);
  n.value_ = std::move(value);
  elements_.push_back(std::move(n));
}

const Node* Node::find(std::string_view key) const noexcept {
  for (const auto& [k, v] : members_)
    if (k == key) return &v;
  return nullptr;
}

}  // namespace shm
