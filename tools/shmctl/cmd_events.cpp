// shmctl events NAME [--type T]...: the segment's observation ring (the last
// kEventRingSize events: created, attached, detached, takeover, fault,
// reclaimed) merged, by time, with the kind's own event ring when it keeps
// one (a relay's spilled, spill_fallback, dropped, retuned...: the "events"
// array of its describe() tree). The observation ring lives in the generic
// header, so it is shown even when the kind's layout differs from this build
// (then without the kind's events, exit 3).
#include "node_render.hpp"
#include "output.hpp"
#include "segment_access.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace shm::shmctl {
namespace {

// For attach-family events `detail` is the role id; for created, the kind id.
bool detail_is_role(EventType type) noexcept {
  return type == EventType::Attached || type == EventType::Detached ||
         type == EventType::Takeover || type == EventType::Reclaimed;
}

struct Row {
  std::uint64_t time_ns = 0;
  std::vector<std::string> cells;  // #, TIME, SOURCE, EVENT, PID, SLOT, DETAIL
  std::string type;
  Json json;
};

std::uint64_t as_u64(const Node* n) {
  if (n == nullptr) return 0;
  if (const auto* u = std::get_if<std::uint64_t>(&n->value())) return *u;
  return 0;
}

void add_segment_events(const OpenedSegment& opened, std::vector<Row>& rows) {
  for (const EventInfo& e : opened.segment.events()) {
    const std::string type(to_string(e.type));
    Json j = {{"source", "segment"},  {"number", e.number},
              {"time_ns", e.time_ns}, {"time", iso_time(e.time_ns)},
              {"type", type},         {"pid", e.pid},
              {"slot", e.slot},       {"detail", e.detail}};
    std::string detail = fmt::format("{}", e.detail);
    if (detail_is_role(e.type)) {
      const std::string role(role_name(opened.kind, e.detail));
      j["role"] = role;
      detail = "role " + role;
    } else if (e.type == EventType::Created) {
      const KindDescriptor* kind = find_kind(static_cast<KindId>(e.detail));
      detail = fmt::format("kind {}", kind != nullptr ? kind->name : std::string_view("unknown"));
    } else if (e.type == EventType::Fault) {
      detail = fmt::format("code {}", e.detail);
    }
    rows.push_back(Row{e.time_ns,
                       {fmt::format("{}", e.number), iso_time(e.time_ns), "segment", type,
                        fmt::format("{}", e.pid), fmt::format("{}", e.slot), detail},
                       type,
                       std::move(j)});
  }
}

// The kind's own ring: each element of its describe() "events" array is an
// object with number, time_ns and kind (the event's type); its other members
// are the detail.
void add_kind_events(const OpenedSegment& opened, std::vector<Row>& rows) {
  if (opened.kind == nullptr || opened.layout_error) return;
  Node description;
  opened.kind->describe(opened.segment, description);
  const Node* events = description.find("events");
  if (events == nullptr || events->type() != Node::Type::Array) return;
  const std::string source(opened.kind->name);
  for (const Node& e : events->elements()) {
    if (e.type() != Node::Type::Object) continue;
    const std::uint64_t number = as_u64(e.find("number"));
    const std::uint64_t time_ns = as_u64(e.find("time_ns"));
    const Node* kind = e.find("kind");
    const std::string type = kind != nullptr ? tools::value_text(kind->value()) : "-";
    Json j = {{"source", source},
              {"number", number},
              {"time_ns", time_ns},
              {"time", iso_time(time_ns)},
              {"type", type}};
    std::string detail;
    for (const auto& [key, member] : e.members()) {
      if (key == "number" || key == "time_ns" || key == "kind") continue;
      if (member.type() != Node::Type::Value) continue;
      j[key] = tools::value_json(member.value());
      detail +=
          fmt::format("{}{}={}", detail.empty() ? "" : " ", key, tools::value_text(member.value()));
    }
    rows.push_back(Row{time_ns,
                       {fmt::format("{}", number), iso_time(time_ns), source, type, "-", "-",
                        detail.empty() ? "-" : detail},
                       type,
                       std::move(j)});
  }
}

}  // namespace

Exit run_events(const Context& ctx, const EventsOptions& options) {
  auto opened = open_segment(ctx, options.name, Access::Inspect);
  if (!opened) return report_error(ctx, "events", opened.error());
  const std::uint64_t total =
      opened->segment.header().counters.events.load(std::memory_order_relaxed);

  std::vector<Row> rows;
  add_segment_events(*opened, rows);
  const std::size_t segment_events = rows.size();
  add_kind_events(*opened, rows);
  const std::size_t kind_events = rows.size() - segment_events;
  // Oldest first across both rings (each is oldest first already).
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.time_ns < b.time_ns; });
  if (!options.types.empty())
    std::erase_if(rows, [&](const Row& r) {
      return std::find(options.types.begin(), options.types.end(), r.type) == options.types.end();
    });

  if (ctx.json) {
    Json list = Json::array();
    for (Row& r : rows) list.push_back(std::move(r.json));
    Json doc = Json::object();
    doc["name"] = options.name;
    doc["kind"] = std::string(opened->kind_name());
    doc["total_events"] = total;
    doc["kind_events"] = kind_events;
    doc["events"] = std::move(list);
    if (opened->layout_error) doc["error"] = error_json(*opened->layout_error);
    print_json(ctx, doc);
  } else if (rows.empty()) {
    ctx.out << fmt::format("{}: no events{}\n", printable(options.name),
                           options.types.empty() ? " recorded" : " of those types");
  } else {
    Table table({"#", "TIME", "SOURCE", "EVENT", "PID", "SLOT", "DETAIL"});
    for (Row& r : rows) table.add(std::move(r.cells));
    ctx.out << fmt::format("{}: {} event(s) shown; the segment recorded {}{}\n",
                           printable(options.name), table.size(), total,
                           kind_events > 0 ? fmt::format(", the {} keeps its last {}",
                                                         opened->kind_name(), kind_events)
                                           : std::string());
    ctx.out << table.render();
  }
  if (opened->layout_error) {
    warn(ctx, "events", *opened->layout_error);
    return Exit::Invalid;
  }
  return Exit::Ok;
}

}  // namespace shm::shmctl
