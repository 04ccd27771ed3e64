#include "sidecar/metrics.hpp"

#include "display_text.hpp"
#include "node_render.hpp"

#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <type_traits>

namespace shm::sidecar {
namespace {

std::string format_double(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

// A leaf's numeric value, if it has one (strings and empty values have none).
std::optional<std::string> numeric(const Node::Value& v) {
  return std::visit(
      [](const auto& x) -> std::optional<std::string> {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>)
          return std::string(x ? "1" : "0");
        else if constexpr (std::is_same_v<T, std::int64_t> || std::is_same_v<T, std::uint64_t>)
          return fmt::format("{}", x);
        else if constexpr (std::is_same_v<T, double>)
          return format_double(x);
        else
          return std::nullopt;
      },
      v);
}

// # HELP text: backslash and newline escaped.
std::string escape_help(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

// Prometheus names its times in seconds: a leaf in milli-, micro- or
// nanoseconds is exposed under _seconds, divided by this (1 when it is not a time).
double to_seconds_divisor(std::string& name) {
  static constexpr std::pair<std::string_view, double> kUnits[] = {
      {"_ms", 1e3}, {"_us", 1e6}, {"_ns", 1e9}};
  for (const auto& [suffix, divisor] : kUnits) {
    if (!name.ends_with(suffix)) continue;
    name.resize(name.size() - suffix.size());
    name += "_seconds";
    return divisor;
  }
  return 1;
}

// The suffixes Prometheus reserves: _total for counters, _count for
// histograms and summaries. A gauge named so by its tree is renamed (the
// tree, shown by shmctl and /status, keeps its name).
void unreserve_gauge_suffix(std::string& name) {
  if (name.ends_with("_total"))
    name.replace(name.size() - 6, 6, "_all");  // depth_total: the depth of all rings
  else if (name.ends_with("_count"))
    name.replace(name.size() - 6, 6, "_now");  // active_count: how many are active now
}

std::string_view type_name(MetricsWriter::Type t) {
  return t == MetricsWriter::Type::Counter ? "counter" : "gauge";
}

}  // namespace

std::string metric_fragment(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    out += ok ? c : '_';
  }
  // push_back, not = "_": GCC 12 at -O3 reports a bogus -Wrestrict for the
  // literal assignment after reserve() (breaks Release builds with -Werror).
  if (out.empty()) out.push_back('_');
  return out;
}

std::string escape_label(std::string_view raw) {
  // The text format is UTF-8: a segment name or value that is not (a corrupt
  // or hostile segment) would make the whole exposition invalid. Each line of
  // it goes through displayable() (invalid bytes and control characters
  // become "\xNN", valid UTF-8 passes unchanged); the newlines between them
  // stay newlines, escaped below as the format requires, with \ and ".
  std::string s;
  s.reserve(raw.size());
  for (std::size_t at = 0;;) {
    const std::size_t nl = raw.find('\n', at);
    s += tools::displayable(raw.substr(at, nl == std::string_view::npos ? nl : nl - at));
    if (nl == std::string_view::npos) break;
    s += '\n';
    at = nl + 1;
  }
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

void MetricsWriter::add(std::string_view name, Type type, std::string_view help,
                        const Labels& labels, std::string value) {
  Family* family = nullptr;
  for (Family& f : families_)
    if (f.name == name) family = &f;
  if (family == nullptr) {
    families_.push_back(Family{std::string(name), type, std::string(help), {}});
    family = &families_.back();
  } else if (family->type != type) {
    return;  // one name, two types: keep the first (Prometheus would reject the mix)
  }
  std::string line(name);
  if (!labels.empty()) {
    line += '{';
    bool first = true;
    for (const auto& [k, v] : labels) {
      if (!first) line += ',';
      first = false;
      line += fmt::format("{}=\"{}\"", k, escape_label(v));
    }
    line += '}';
  }
  line += ' ';
  line += value;
  family->samples.push_back(std::move(line));
}

void MetricsWriter::sample(std::string_view name, Type type, std::string_view help,
                           const Labels& labels, double value) {
  add(name, type, help, labels, format_double(value));
}

void MetricsWriter::sample(std::string_view name, Type type, std::string_view help,
                           const Labels& labels, std::uint64_t value) {
  add(name, type, help, labels, fmt::format("{}", value));
}

void MetricsWriter::walk(const std::string& name, const Node& node, Labels& labels,
                         const std::string& key, const std::string& kind_path) {
  switch (node.type()) {
    case Node::Type::Value: {
      if (node.metric() == Node::Metric::None) return;
      auto value = numeric(node.value());
      if (!value) return;
      const bool counter = node.metric() == Node::Metric::Counter;
      std::string full = name;
      if (const double divisor = to_seconds_divisor(full); divisor != 1)
        value = format_double(std::stod(*value) / divisor);
      if (counter && !full.ends_with("_total")) full += "_total";
      if (!counter) unreserve_gauge_suffix(full);
      add(full, counter ? Type::Counter : Type::Gauge,
          fmt::format("{} '{}' of the kind's describe() tree.", counter ? "Counter" : "Gauge",
                      escape_help(kind_path)),
          labels, *value);
      return;
    }
    case Node::Type::Object:
      for (const auto& [child_key, child] : node.members())
        walk(name + "_" + metric_fragment(child_key), child, labels, child_key,
             kind_path + "." + child_key);
      return;
    case Node::Type::Array: {
      // Elements are told apart by a label named after the array; its value
      // is the element's own name/label/id when it has one, else its index.
      std::string label = metric_fragment(key);
      for (const auto& l : labels)
        if (l.first == label) label += "_";
      std::size_t i = 0;
      for (const Node& e : node.elements()) {
        labels.emplace_back(label, tools::element_id(e).value_or(fmt::format("{}", i)));
        ++i;
        walk(name, e, labels, key, kind_path + "[]");
        labels.pop_back();
      }
      return;
    }
  }
}

void MetricsWriter::tree(std::string_view prefix, const Node& tree, const Labels& labels) {
  Labels l = labels;
  if (tree.type() == Node::Type::Object) {
    for (const auto& [key, child] : tree.members())
      walk(fmt::format("{}_{}", prefix, metric_fragment(key)), child, l, key, key);
  }
}

std::string MetricsWriter::render() const {
  std::string out;
  for (const Family& f : families_) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", f.name, f.help, f.name, type_name(f.type));
    for (const std::string& s : f.samples) {
      out += s;
      out += '\n';
    }
  }
  return out;
}

std::string render_metrics(const Monitor& monitor, std::uint64_t start_time_ns,
                           std::optional<std::uint64_t> http_connections) {
  using T = MetricsWriter::Type;
  MetricsWriter w;
  const MonitorStats& st = monitor.stats();
  const MetricsWriter::Labels none;
  w.sample("libshm_sidecar_cycles_total", T::Counter, "Duty cycles run.", none, st.cycles);
  w.sample("libshm_sidecar_rescans_total", T::Counter, "Directory rescans of the root.", none,
           st.rescans);
  w.sample("libshm_sidecar_segments_discovered_total", T::Counter, "Segments that appeared.", none,
           st.discovered);
  w.sample("libshm_sidecar_segments_removed_total", T::Counter,
           "Segments that vanished, were replaced, truncated or corrupted under the sidecar.", none,
           st.removed);
  w.sample("libshm_sidecar_unreadable_total", T::Counter,
           "Files of the root that could not be opened as segments (each distinct error once).",
           none, st.unreadable);
  w.sample("libshm_sidecar_attacher_deaths_total", T::Counter,
           "Dead attachers detected (kernel lock gone, slot still attached).", none, st.deaths);
  w.sample("libshm_sidecar_reclaims_total", T::Counter, "Dead attachers' slots reclaimed.", none,
           st.reclaims);
  w.sample("libshm_sidecar_reclaim_failures_total", T::Counter, "Reclaims that failed.", none,
           st.reclaim_failures);
  w.sample("libshm_sidecar_stuck_detections_total", T::Counter,
           "Live attachers seen crossing the stuck threshold.", none, st.stuck_detections);
  w.sample("libshm_sidecar_segments_collected_total", T::Counter,
           "Ephemeral segments unlinked after their last attacher died.", none, st.collected);
  w.sample("libshm_sidecar_last_cycle_duration_seconds", T::Gauge,
           "Duration of the last duty cycle.", none, static_cast<double>(st.last_cycle_ns) / 1e9);
  w.sample("libshm_sidecar_start_time_seconds", T::Gauge, "Start time of the sidecar (Unix time).",
           none, static_cast<double>(start_time_ns / 1'000'000u) / 1e3);
  if (http_connections)
    w.sample("libshm_sidecar_http_connections", T::Gauge,
             "HTTP connections open, the one answering this scrape included.", none,
             *http_connections);

  const RootSpace& space = monitor.root_space();
  if (space.known) {
    w.sample("libshm_sidecar_root_size_bytes", T::Gauge, "Size of the filesystem holding the root.",
             none, space.size_bytes);
    w.sample("libshm_sidecar_root_free_bytes", T::Gauge,
             "Bytes of the root's filesystem available to unprivileged users.", none,
             space.free_bytes);
    w.sample("libshm_sidecar_root_free_inodes", T::Gauge,
             "Inodes of the root's filesystem available to unprivileged users.", none,
             space.free_inodes);
  }
  w.sample("libshm_sidecar_root_full", T::Gauge,
           "1 when the root's filesystem has less than a page or no inode left: new segments "
           "fail with ENOSPC.",
           none, std::uint64_t{space.full ? 1u : 0u});
  w.sample("libshm_sidecar_root_full_total", T::Counter,
           "Times the root's filesystem was seen becoming full.", none, st.root_full);

  std::uint64_t up = 0, down = 0;
  for (const SegmentView& v : monitor.snapshot()) (v.up ? up : down) += 1;
  w.sample("libshm_sidecar_segments", T::Gauge, "Files in the root, by state.", {{"state", "up"}},
           up);
  w.sample("libshm_sidecar_segments", T::Gauge, "Files in the root, by state.",
           {{"state", "unreadable"}}, down);

  for (const SegmentView& v : monitor.snapshot()) {
    w.sample("libshm_segment_up", T::Gauge,
             "1 when the segment is mapped and its header valid, 0 when it cannot be read.",
             {{"segment", v.name}, {"kind", v.kind}}, std::uint64_t{v.up ? 1u : 0u});
  }
  for (const SegmentView& v : monitor.snapshot()) {
    if (!v.up) continue;
    const MetricsWriter::Labels seg{{"segment", v.name}};
    w.sample("libshm_segment_info", T::Gauge, "Identity of a segment (always 1).",
             {{"segment", v.name},
              {"kind", v.kind},
              {"incarnation", v.incarnation},
              {"ephemeral", v.ephemeral ? "true" : "false"}},
             std::uint64_t{1});
    w.sample("libshm_segment_size_bytes", T::Gauge, "Size of the segment file.", seg, v.size);
    const std::string_view att_help =
        "Attachers by state: alive (lock held, not stuck), stuck (lock held, work waiting for "
        "its role and no progress for --stuck-after), dead (lock gone, not reclaimed yet).";
    w.sample("libshm_segment_attachers", T::Gauge, att_help,
             {{"segment", v.name}, {"state", "alive"}}, v.alive);
    w.sample("libshm_segment_attachers", T::Gauge, att_help,
             {{"segment", v.name}, {"state", "stuck"}}, v.stuck);
    w.sample("libshm_segment_attachers", T::Gauge, att_help,
             {{"segment", v.name}, {"state", "dead"}}, v.dead);
    w.sample("libshm_segment_attaches_total", T::Counter, "Attachments made to the segment.", seg,
             v.attaches);
    w.sample("libshm_segment_detaches_total", T::Counter, "Clean detaches from the segment.", seg,
             v.detaches);
    w.sample("libshm_segment_takeovers_total", T::Counter,
             "Attachments that took over a dead holder's slot.", seg, v.takeovers);
    w.sample("libshm_segment_faults_total", T::Counter, "Faults recorded in the segment.", seg,
             v.faults);
    w.sample("libshm_segment_events_total", T::Counter,
             "Events written to the segment's observation ring.", seg, v.events);
  }
  for (const SegmentView& v : monitor.snapshot()) {
    if (!v.up || !v.kind_known) continue;
    w.tree(fmt::format("libshm_{}", metric_fragment(v.kind)), v.detail, {{"segment", v.name}});
  }
  return w.render();
}

}  // namespace shm::sidecar
