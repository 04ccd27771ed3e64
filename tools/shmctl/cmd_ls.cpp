// shmctl ls: one row per segment in the root. A file that fails validation is
// listed with its error; the listing itself still succeeds (exit 0) — use
// `verify --all` for a health verdict.
#include "output.hpp"
#include "segment_access.hpp"

#include <fmt/format.h>

namespace shm::shmctl {
namespace {

struct Entry {
  Json json;
  std::vector<std::string> cells;
};

Entry describe_entry(const Context& ctx, const std::string& name) {
  Entry e;
  e.json["name"] = name;
  auto opened = open_segment(ctx, name, Access::Inspect);
  if (!opened) {
    // "invalid": the file fails validation (or has a name no segment can
    // have); "error": it could not be read (permissions, I/O), which says
    // nothing about its contents.
    const Errc code = opened.error().code;
    const bool invalid = exit_for(code) == Exit::Invalid || code == Errc::InvalidName;
    const std::string state = invalid ? "invalid" : "error";
    const std::string cell = state + ": " + printable(opened.error().what());
    e.json["valid"] = false;
    e.json["state"] = state;
    e.json["error"] = error_json(opened.error());
    e.cells = {printable(name), "-", "-", "-", "-", "-", "-", cell};
    return e;
  }
  const SegmentHeader& h = opened->segment.header();
  const AttacherCounts attachers = count_attachers(opened->segment);
  const bool creator_lives = creator_alive(h);
  const bool valid = !opened->layout_error;
  e.json["valid"] = valid;
  e.json["kind"] = std::string(opened->kind_name());
  e.json["kind_id"] = h.kind;
  e.json["size"] = h.total_size;
  e.json["incarnation"] = fmt::format("{:016x}", h.incarnation);
  e.json["creator"] = {{"pid", h.creator_pid}, {"alive", creator_lives}};
  e.json["attachers_alive"] = attachers.alive;
  e.json["attachers_dead"] = attachers.dead;
  e.json["state"] = valid ? "ready" : "invalid";
  if (!valid) e.json["error"] = error_json(*opened->layout_error);
  e.cells = {printable(name),
             opened->kind_label(),
             human_size(h.total_size),
             fmt::format("{:016x}", h.incarnation),
             fmt::format("{} ({})", h.creator_pid, creator_lives ? "alive" : "dead"),
             fmt::format("{}", attachers.alive),
             fmt::format("{}", attachers.dead),
             valid ? std::string("ready") : "invalid: " + printable(opened->layout_error->what())};
  return e;
}

}  // namespace

Exit run_ls(const Context& ctx) {
  auto listing = list_root(ctx.root);
  if (!listing) return report_error(ctx, "ls", listing.error());

  Json segments = Json::array();
  Table table({"NAME", "KIND", "SIZE", "INCARNATION", "CREATOR", "ALIVE", "DEAD", "STATE"});
  for (const std::string& name : listing->segments) {
    Entry e = describe_entry(ctx, name);
    segments.push_back(std::move(e.json));
    table.add(std::move(e.cells));
  }

  if (ctx.json) {
    Json doc = Json::object();
    doc["root"] = ctx.root;
    doc["segments"] = std::move(segments);
    print_json(ctx, doc);
  } else if (table.empty()) {
    ctx.out << "no segments in " << printable(ctx.root)
            << (listing->root_exists ? "" : " (the directory does not exist yet)") << '\n';
  } else {
    ctx.out << table.render();
  }
  return Exit::Ok;
}

}  // namespace shm::shmctl
