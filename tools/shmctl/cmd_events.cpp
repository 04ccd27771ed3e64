// shmctl events NAME: the segment's observation ring (the last
// kEventRingSize events: created, attached, detached, takeover, fault,
// reclaimed), oldest first. The ring lives in the generic header, so it is
// shown even when the kind's layout differs from this build (then exit 3).
#include "output.hpp"
#include "segment_access.hpp"

#include <fmt/format.h>

namespace shm::shmctl {
namespace {

// For attach-family events `detail` is the role id; for created, the kind id.
bool detail_is_role(EventType type) noexcept {
  return type == EventType::Attached || type == EventType::Detached ||
         type == EventType::Takeover || type == EventType::Reclaimed;
}

}  // namespace

Exit run_events(const Context& ctx, const std::string& name) {
  auto opened = open_segment(ctx, name, Access::Inspect);
  if (!opened) return report_error(ctx, "events", opened.error());
  const std::vector<EventInfo> events = opened->segment.events();
  const std::uint64_t total =
      opened->segment.header().counters.events.load(std::memory_order_relaxed);

  Json list = Json::array();
  Table table({"#", "TIME", "EVENT", "PID", "SLOT", "DETAIL"});
  for (const EventInfo& e : events) {
    const std::string type(to_string(e.type));
    Json j = {{"number", e.number}, {"time_ns", e.time_ns}, {"time", iso_time(e.time_ns)},
              {"type", type},       {"pid", e.pid},         {"slot", e.slot},
              {"detail", e.detail}};
    std::string detail = fmt::format("{}", e.detail);
    if (detail_is_role(e.type)) {
      const std::string role(role_name(opened->kind, e.detail));
      j["role"] = role;
      detail = "role " + role;
    } else if (e.type == EventType::Created) {
      const KindDescriptor* kind = find_kind(static_cast<KindId>(e.detail));
      detail = fmt::format("kind {}", kind != nullptr ? kind->name : std::string_view("unknown"));
    } else if (e.type == EventType::Fault) {
      detail = fmt::format("code {}", e.detail);
    }
    list.push_back(std::move(j));
    table.add({fmt::format("{}", e.number), iso_time(e.time_ns), type, fmt::format("{}", e.pid),
               fmt::format("{}", e.slot), detail});
  }

  if (ctx.json) {
    Json doc = Json::object();
    doc["name"] = name;
    doc["kind"] = std::string(opened->kind_name());
    doc["total_events"] = total;
    doc["events"] = std::move(list);
    if (opened->layout_error) doc["error"] = error_json(*opened->layout_error);
    print_json(ctx, doc);
  } else if (events.empty()) {
    ctx.out << fmt::format("{}: no events recorded\n", printable(name));
  } else {
    ctx.out << fmt::format("{}: {} event(s) shown of {} recorded\n", printable(name), events.size(),
                           total);
    ctx.out << table.render();
  }
  if (opened->layout_error) {
    warn(ctx, "events", *opened->layout_error);
    return Exit::Invalid;
  }
  return Exit::Ok;
}

}  // namespace shm::shmctl
