// Prometheus text exposition (format 0.0.4) of what the monitor saw.
//
// Per segment (label segment="NAME"):
//   libshm_segment_up                      1 mapped and valid, 0 unreadable (label kind)
//   libshm_segment_info                    1, labels kind, incarnation, ephemeral
//   libshm_segment_size_bytes
//   libshm_segment_attachers{state=...}    alive | stuck | dead (a partition)
//   libshm_segment_{attaches,detaches,takeovers,faults,events}_total
// Per kind, generically from the kind's describe() tree: every leaf marked
// counter becomes libshm_<kind>_<path>_total, every leaf marked gauge
// libshm_<kind>_<path>, where <path> joins the keys from the root with '_'.
// Elements of an array add a label named after the array whose value is the
// element's "name", "label" or "id" member, or else its index.
// The sidecar itself: libshm_sidecar_* (cycles, deaths, reclaims, ...), and
// when rendered by the daemon for a scrape, libshm_sidecar_http_connections
// (connections open, the scrape being answered included: a client that
// connected and said nothing shows up here, served around, not waited on).
#pragma once

#include "sidecar/monitor.hpp"

#include "shm/segment/describe.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace shm::sidecar {

// Collects metric families in first-seen order and renders them with one
// # HELP / # TYPE pair each, all samples of a family together.
class MetricsWriter {
 public:
  enum class Type : std::uint8_t { Counter, Gauge };
  using Labels = std::vector<std::pair<std::string, std::string>>;

  void sample(std::string_view name, Type type, std::string_view help, const Labels& labels,
              double value);
  void sample(std::string_view name, Type type, std::string_view help, const Labels& labels,
              std::uint64_t value);
  // Every metric-marked leaf of `tree`, named prefix_<path>[_total].
  void tree(std::string_view prefix, const Node& tree, const Labels& labels);

  [[nodiscard]] std::string render() const;

 private:
  struct Family {
    std::string name;
    Type type;
    std::string help;
    std::vector<std::string> samples;  // "name{labels} value"
  };
  void add(std::string_view name, Type type, std::string_view help, const Labels& labels,
           std::string value);
  void walk(const std::string& name, const Node& node, Labels& labels, const std::string& key,
            const std::string& kind_path);

  std::vector<Family> families_;
};

// A valid metric name fragment: [a-zA-Z0-9_], other characters become '_'.
[[nodiscard]] std::string metric_fragment(std::string_view s);
// A label value with \, " and newline escaped, and made valid UTF-8 first:
// invalid bytes and control characters other than newline become "\xNN"
// (tools::displayable), so the label decodes to that text.
[[nodiscard]] std::string escape_label(std::string_view s);

// `http_connections`: the daemon's open HTTP connections (absent: no server,
// e.g. a test rendering a bare monitor).
[[nodiscard]] std::string render_metrics(const Monitor& monitor, std::uint64_t start_time_ns,
                                         std::optional<std::uint64_t> http_connections = {});

}  // namespace shm::sidecar
