/// @file
/// A small key/value tree that kinds fill to describe a segment (shmctl inspect,
/// the sidecar's /status and metrics). Programs render it as text or JSON.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace shm {

/// One node of a description: a value, an object (named members) or an array.
class Node {
 public:
  /// A leaf's value; monostate is null.
  using Value =
      std::variant<std::monostate, bool, std::int64_t, std::uint64_t, double, std::string>;
  /// What the node holds.
  enum class Type : std::uint8_t {
    Value,   ///< a leaf: value()
    Object,  ///< named children: members()
    Array    ///< unnamed children: elements()
  };
  /// Counters and gauges are exported as metrics by the sidecar.
  enum class Metric : std::uint8_t {
    None,     ///< shown, not exported
    Counter,  ///< only grows
    Gauge     ///< goes up and down
  };

  /// An empty object.
  Node() = default;
  /// An empty node of `type`.
  explicit Node(Type type) : type_(type) {}

  /// @name Object members (insertion order kept)
  ///@{

  /// Adds the leaf `key` = `value`; returns this node, so calls chain.
  Node& set(std::string key, Value value, Metric metric = Metric::None);
  /// Adds a Counter leaf; returns this node.
  Node& counter(std::string key, std::uint64_t value) {
    return set(std::move(key), value, Metric::Counter);
  }
  /// Adds a Gauge leaf; returns this node.
  Node& gauge(std::string key, std::uint64_t value) {
    return set(std::move(key), value, Metric::Gauge);
  }
  /// Adds an empty object member `key` and returns it, to be filled.
  Node& object(std::string key);
  /// Adds an empty array member `key` and returns it, to be filled.
  Node& array(std::string key);
  ///@}
  /// @name Array elements
  ///@{

  /// Appends an empty object and returns it, to be filled.
  Node& push_object();
  /// Appends a leaf.
  void push(Value value);
  ///@}

  /// What this node holds.
  [[nodiscard]] Type type() const noexcept { return type_; }
  /// A leaf's value (monostate for objects and arrays).
  [[nodiscard]] const Value& value() const noexcept { return value_; }
  /// Whether the sidecar exports this leaf as a metric.
  [[nodiscard]] Metric metric() const noexcept { return metric_; }
  /// An object's members, in insertion order.
  [[nodiscard]] const std::vector<std::pair<std::string, Node>>& members() const noexcept {
    return members_;
  }
  /// An array's elements, in order.
  [[nodiscard]] const std::vector<Node>& elements() const noexcept { return elements_; }
  /// The first member named `key`, or nullptr.
  [[nodiscard]] const Node* find(std::string_view key) const noexcept;

 private:
  Type type_ = Type::Object;
  Value value_;
  Metric metric_ = Metric::None;
  std::vector<std::pair<std::string, Node>> members_;
  std::vector<Node> elements_;
};

/// The enumerator's name, for logs and tool output.
[[nodiscard]] std::string_view to_string(Node::Type v) noexcept;
/// The enumerator's name, for logs and tool output.
[[nodiscard]] std::string_view to_string(Node::Metric v) noexcept;

}  // namespace shm
