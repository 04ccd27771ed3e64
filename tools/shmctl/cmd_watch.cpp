// shmctl watch [NAME] [--interval MS] [--count N]: a refreshing table of every
// segment (or one): the kind's gauges (depth), rates per second computed from
// the deltas of the kind's counters between two refreshes, and attachers.
// Text output clears the screen between refreshes on a terminal; --json
// prints one JSON document per refresh (JSON Lines).
#include "node_render.hpp"
#include "output.hpp"
#include "segment_access.hpp"

#include "shm/platform/clock.hpp"
#include "shm/platform/truncation_guard.hpp"

#include <fmt/format.h>

#include <unistd.h>
#include <map>
#include <thread>

namespace shm::shmctl {
namespace {

constexpr const char* kWatchHeaders[] = {"NAME", "KIND", "GAUGES", "RATES/s", "ATTACHERS", "STATE"};

struct Sample {
  std::string name;
  std::string kind = "-";
  bool opened = false;  // the generic header validated (counts and incarnation are set)
  std::uint64_t incarnation = 0;
  std::uint64_t taken_ns = 0;  // monotonic
  std::uint64_t alive = 0;
  std::uint64_t dead = 0;
  std::vector<std::pair<std::string, std::uint64_t>> gauges;
  std::vector<std::pair<std::string, std::uint64_t>> counters;
  std::optional<Error> error;
};

std::optional<std::uint64_t> as_u64(const Node::Value& value) {
  if (const auto* u = std::get_if<std::uint64_t>(&value)) return *u;
  if (const auto* i = std::get_if<std::int64_t>(&value); i && *i >= 0)
    return static_cast<std::uint64_t>(*i);
  return std::nullopt;
}

// Collects every counter and gauge of a description, nested ones as "a.b".
void collect_metrics(const Node& node, const std::string& prefix, Sample& s) {
  for (const auto& [key, child] : node.members()) {
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    if (child.type() == Node::Type::Object) {
      collect_metrics(child, path, s);
      continue;
    }
    if (child.type() == Node::Type::Array) {
      // Each element by its identity (a topic's subscribers by slot:
      // "subscribers[2].queue"), else its position.
      std::size_t i = 0;
      for (const Node& e : child.elements()) {
        if (e.type() == Node::Type::Object)
          collect_metrics(
              e, fmt::format("{}[{}]", path, tools::element_id(e).value_or(std::to_string(i))), s);
        ++i;
      }
      continue;
    }
    if (child.type() != Node::Type::Value) continue;
    const auto value = as_u64(child.value());
    if (!value) continue;
    if (child.metric() == Node::Metric::Gauge) s.gauges.emplace_back(path, *value);
    if (child.metric() == Node::Metric::Counter) s.counters.emplace_back(path, *value);
  }
}

Sample take_sample(const Context& ctx, const std::string& name) {
  Sample s{name};
  // The file may shrink between open's size check and the reads below.
  const TruncationGuard::Scope guard;
  auto opened = open_segment(ctx, name, Access::Inspect);
  s.taken_ns = monotonic_ns();
  if (!opened) {
    s.error = opened.error();
    return s;
  }
  s.opened = true;
  s.kind = opened->kind_label();
  s.incarnation = opened->segment.header().incarnation;
  const AttacherCounts attachers = count_attachers(opened->segment);
  s.alive = attachers.alive;
  s.dead = attachers.dead;
  auto kind = require_kind(*opened);
  if (!kind) {
    s.error = kind.error();
    return s;
  }
  Node description;
  (*kind)->describe(opened->segment, description);
  collect_metrics(description, "", s);
  if (guard.hit()) {
    Sample lost{name};
    lost.taken_ns = s.taken_ns;
    lost.error =
        Error{Errc::Truncated, fmt::format("{}: the file shrank while it was being read", name)};
    return lost;
  }
  return s;
}

// Per-second rate of each counter since `before`; nullopt without a usable
// earlier sample (first refresh, re-created segment, counter went backwards).
std::vector<std::pair<std::string, std::optional<double>>> rates(const Sample& now,
                                                                 const Sample* before) {
  std::vector<std::pair<std::string, std::optional<double>>> out;
  for (const auto& [key, value] : now.counters) {
    std::optional<double> rate;
    if (before != nullptr && before->incarnation == now.incarnation &&
        now.taken_ns > before->taken_ns) {
      for (const auto& [old_key, old_value] : before->counters) {
        if (old_key != key || old_value > value) continue;
        const double seconds = static_cast<double>(now.taken_ns - before->taken_ns) / 1e9;
        rate = static_cast<double>(value - old_value) / seconds;
      }
    }
    out.emplace_back(key, rate);
  }
  return out;
}

Json sample_json(const Sample& s, const Sample* before) {
  Json j = Json::object();
  j["name"] = s.name;
  j["kind"] = s.kind;
  if (s.error) {
    j["error"] = error_json(*s.error);
    if (!s.opened) return j;
  }
  j["attachers_alive"] = s.alive;
  j["attachers_dead"] = s.dead;
  Json gauges = Json::object();
  for (const auto& [k, v] : s.gauges) gauges[k] = v;
  Json counters = Json::object();
  for (const auto& [k, v] : s.counters) counters[k] = v;
  Json per_second = Json::object();
  for (const auto& [k, r] : rates(s, before)) per_second[k] = r ? Json(*r) : Json(nullptr);
  j["gauges"] = std::move(gauges);
  j["counters"] = std::move(counters);
  j["rates_per_second"] = std::move(per_second);
  return j;
}

std::vector<std::string> sample_cells(const Sample& s, const Sample* before) {
  if (!s.opened)
    return {printable(s.name), s.kind, "-", "-", "-", "error: " + printable(s.error->what())};
  std::string gauges;
  for (const auto& [k, v] : s.gauges)
    gauges += fmt::format("{}{}={}", gauges.empty() ? "" : " ", k, v);
  std::string per_second;
  for (const auto& [k, r] : rates(s, before))
    per_second += fmt::format("{}{}={}", per_second.empty() ? "" : " ", k,
                              r ? fmt::format("{:.0f}", *r) : std::string("-"));
  return {printable(s.name),
          s.kind,
          gauges.empty() ? "-" : gauges,
          per_second.empty() ? "-" : per_second,
          fmt::format("{} alive, {} dead", s.alive, s.dead),
          s.error ? "error: " + printable(s.error->what()) : std::string("ok")};
}

// `text` cut to `width` characters, ending in "..." when cut.
std::string fit_text(const std::string& text, std::size_t width) {
  if (text.size() <= width) return text;
  return width <= 3 ? text.substr(0, width) : text.substr(0, width - 3) + "...";
}

// A cell of space-separated "key=value" items cut after the last whole item
// that fits in `width` with " ..." after it.
std::string fit_items(const std::string& cell, std::size_t width) {
  if (cell.size() <= width) return cell;
  constexpr std::string_view kMore = " ...";
  std::size_t keep = 0;
  for (std::size_t at = cell.find(' '); at != std::string::npos; at = cell.find(' ', at + 1)) {
    if (at + kMore.size() > width) break;
    keep = at;
  }
  if (keep == 0) return fit_text(cell, width);
  return cell.substr(0, keep) + std::string(kMore);
}

// The rows cut so that each rendered line fits `columns`: the name and state
// get at most 24 characters, the gauges and the rates share what is left.
void fit_rows(std::vector<std::vector<std::string>>& rows, std::size_t columns) {
  constexpr std::size_t kName = 0, kKind = 1, kGauges = 2, kRates = 3, kAttachers = 4, kState = 5;
  constexpr std::size_t kSeparator = 2, kNarrow = 24, kLeastShare = 12;
  std::size_t fixed = 0;
  for (const std::size_t col : {kName, kKind, kAttachers, kState}) {
    std::size_t w = std::string_view(kWatchHeaders[col]).size();
    for (auto& row : rows) {
      if (col == kName || col == kState) row[col] = fit_text(row[col], kNarrow);
      w = std::max(w, row[col].size());
    }
    fixed += w + kSeparator;
  }
  const std::size_t left = columns > fixed + kSeparator ? columns - fixed - kSeparator : 0;
  const std::size_t share = std::max(left / 2, kLeastShare);
  for (auto& row : rows) {
    row[kGauges] = fit_items(row[kGauges], share);
    row[kRates] = fit_items(row[kRates], share);
  }
}

}  // namespace

Exit run_watch(const Context& ctx, const WatchOptions& options) {
  // A named segment must exist at the start; later it may vanish (shown as an error row).
  if (options.name) {
    auto first = open_segment(ctx, *options.name, Access::Inspect);
    if (!first) return report_error(ctx, "watch", first.error());
  }
  const bool clear_screen = !ctx.json && ::isatty(STDOUT_FILENO) == 1;
  std::map<std::string, Sample> previous;
  for (std::uint64_t refresh = 1; options.count == 0 || refresh <= options.count; ++refresh) {
    if (refresh > 1) std::this_thread::sleep_for(std::chrono::milliseconds(options.interval_ms));
    std::vector<std::string> names;
    if (options.name) {
      names.push_back(*options.name);
    } else {
      auto listing = list_root(ctx.root);
      if (!listing) return report_error(ctx, "watch", listing.error());
      names = std::move(listing->segments);
    }

    std::map<std::string, Sample> current;
    Json list = Json::array();
    std::vector<std::vector<std::string>> rows;
    for (const std::string& name : names) {
      Sample s = take_sample(ctx, name);
      const auto before = previous.find(name);
      const Sample* prior = before == previous.end() ? nullptr : &before->second;
      if (ctx.json)
        list.push_back(sample_json(s, prior));
      else
        rows.push_back(sample_cells(s, prior));
      current.emplace(name, std::move(s));
    }
    previous = std::move(current);
    if (!options.wide) fit_rows(rows, kWatchColumns);
    Table table(std::vector<std::string>(std::begin(kWatchHeaders), std::end(kWatchHeaders)));
    for (auto& row : rows) table.add(std::move(row));

    if (ctx.json) {
      Json doc = Json::object();
      doc["refresh"] = refresh;
      doc["time"] = iso_time(realtime_ns());
      doc["interval_ms"] = options.interval_ms;
      doc["segments"] = std::move(list);
      print_json_line(ctx, doc);
      continue;
    }
    if (clear_screen) ctx.out << "\x1b[H\x1b[2J";
    ctx.out << fmt::format("shmctl watch {}  refresh {}{}  every {} ms  {}\n", printable(ctx.root),
                           refresh, options.count ? fmt::format("/{}", options.count) : "",
                           options.interval_ms, iso_time(realtime_ns()));
    if (table.empty())
      ctx.out << "no segments\n";
    else
      ctx.out << table.render();
    ctx.out << '\n' << std::flush;
  }
  return Exit::Ok;
}

}  // namespace shm::shmctl
