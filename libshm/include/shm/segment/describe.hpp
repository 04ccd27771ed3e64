// A small key/value tree that kinds fill to describe a segment (shmctl inspect,
// the sidecar's /status and metrics). Programs render it as text or JSON.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace shm {

class Node {
 public:
  using Value =
      std::variant<std::monostate, bool, std::int64_t, std::uint64_t, double, std::string>;
  enum class Type : std::uint8_t { Value, Object, Array };
  // Counters and gauges are exported as metrics by the sidecar.
  enum class Metric : std::uint8_t { None, Counter, Gauge };

  Node() = default;
  explicit Node(Type type) : type_(type) {}

  // Object members (insertion order kept).
  Node& set(std::string key, Value value, Metric metric = Metric::None);
  Node& counter(std::string key, std::uint64_t value) {
    return set(std::move(key), value, Metric::Counter);
  }
  Node& gauge(std::string key, std::uint64_t value) {
    return set(std::move(key), value, Metric::Gauge);
  }
  Node& object(std::string key);
  Node& array(std::string key);
  // Array elements.
  Node& push_object();
  void push(Value value);

  [[nodiscard]] Type type() const noexcept { return type_; }
  [[nodiscard]] const Value& value() const noexcept { return value_; }
  [[nodiscard]] Metric metric() const noexcept { return metric_; }
  [[nodiscard]] const std::vector<std::pair<std::string, Node>>& members() const noexcept {
    return members_;
  }
  [[nodiscard]] const std::vector<Node>& elements() const noexcept { return elements_; }
  [[nodiscard]] const Node* find(std::string_view key) const noexcept;

 private:
  Type type_ = Type::Object;
  Value value_;
  Metric metric_ = Metric::None;
  std::vector<std::pair<std::string, Node>> members_;
  std::vector<Node> elements_;
};

[[nodiscard]] std::string_view to_string(Node::Type v) noexcept;
[[nodiscard]] std::string_view to_string(Node::Metric v) noexcept;

}  // namespace shm
