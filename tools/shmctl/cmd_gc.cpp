// shmctl gc [--dry-run]: removes segments nobody can still be using, and
// leftover temp files of interrupted creates.
//
// A segment is collected only when its creator process is dead (pid + start
// time) and no attachment slot is alive (kernel OFD locks). Before unlinking,
// gc takes the lock of every slot itself: while it holds them no process can
// attach, so "no live attacher" cannot change between the check and the
// unlink. Segments that fail validation or belong to another user are never
// touched (inspect them; `shmctl rm` removes them deliberately). A temp file
// (".libshm-tmp-*") is removed only when it is older than 60 s, belongs to
// this user and is empty or starts with the segment magic.
#include "output.hpp"
#include "segment_access.hpp"

#include "shm/platform/file.hpp"

#include <fmt/format.h>

#include <filesystem>

namespace shm::shmctl {
namespace {

namespace fs = std::filesystem;

struct Decision {
  std::string name;
  std::string type;    // "segment" | "temp_file"
  std::string action;  // "removed" | "would_remove" | "kept" | "skipped" | "failed"
  std::string reason;
};

// Holds every slot's lock so no process can attach while gc removes the name.
Result<FileHandle> fence_attachments(const Segment& segment) {
  auto fd = reopen(segment.fd(), true);
  if (!fd) return std::unexpected(fd.error());
  for (std::size_t i = 0; i < kMaxAttachments; ++i) {
    auto got = try_lock_byte(fd->get(), slot_lock_offset(i));
    if (!got) return std::unexpected(got.error());
    if (!*got) return fail(Errc::RoleTaken, fmt::format("slot {} was taken while collecting", i));
  }
  return std::move(*fd);  // the locks drop when the returned handle closes
}

std::string live_list(const OpenedSegment& opened, const AttacherCounts& counts) {
  std::string out;
  for (const SlotInfo& s : counts.live)
    out += fmt::format("{}pid {} ({})", out.empty() ? "" : ", ", s.pid,
                       role_name(opened.kind, s.role));
  return out;
}

std::optional<Decision> collect_segment(const Context& ctx, const std::string& name, bool dry_run) {
  Decision d{name, "segment", "kept", ""};
  auto opened = open_segment(ctx, name, Access::Modify);
  if (!opened) {
    if (opened.error().code == Errc::NotFound) return std::nullopt;  // vanished meanwhile
    d.action = "skipped";
    d.reason = opened.error().code == Errc::WrongOwner
                   ? fmt::format("belongs to another user ({})", opened.error().message)
                   : fmt::format(
                         "not a valid segment ({}); inspect it, remove it with "
                         "`shmctl rm {}` if unwanted",
                         opened.error().what(), name);
    return d;
  }
  const SegmentHeader& h = opened->segment.header();
  if (creator_alive(h)) {
    d.reason = fmt::format("creator pid {} is alive", h.creator_pid);
    return d;
  }
  const AttacherCounts counts = count_attachers(opened->segment);
  if (counts.alive != 0) {
    d.reason = fmt::format("{} live attacher(s): {}", counts.alive, live_list(*opened, counts));
    return d;
  }
  const std::string why =
      counts.dead == 0
          ? fmt::format("creator pid {} is dead and nothing is attached", h.creator_pid)
          : fmt::format("creator pid {} is dead and all {} attacher(s) are dead", h.creator_pid,
                        counts.dead);
  if (dry_run) {
    d.action = "would_remove";
    d.reason = why;
    return d;
  }
  auto fence = fence_attachments(opened->segment);
  if (!fence) {
    d.reason = fmt::format("an attacher appeared while collecting ({})", fence.error().message);
    return d;
  }
  if (auto removed = opened->segment.unlink(); !removed) {
    d.action = "failed";
    d.reason = removed.error().what();
    return d;
  }
  d.action = "removed";
  d.reason = why;
  return d;
}

Decision collect_temp_file(const Context& ctx, const std::string& name, const GcOptions& options) {
  Decision d{name, "temp_file", "kept", ""};
  const fs::path path = fs::path(ctx.root) / name;
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(path, ec);
  if (ec || st.type() != fs::file_type::regular) {
    d.action = "skipped";
    d.reason = "not a regular file";
    return d;
  }
  const auto modified = fs::last_write_time(path, ec);
  if (ec) {
    d.action = "failed";
    d.reason = fmt::format("stat: {}", ec.message());
    return d;
  }
  const auto age =
      std::chrono::duration_cast<std::chrono::seconds>(fs::file_time_type::clock::now() - modified);
  if (age < options.temp_file_age) {
    d.reason = fmt::format("{} s old, younger than {} s: a create may still be in progress",
                           age.count(), options.temp_file_age.count());
    return d;
  }
  // Only what an interrupted create of this user leaves: empty, or starting
  // with the segment magic. Any other file that carries the reserved name is
  // not ours to delete.
  auto id = check_own_segment_file(path.string(), true);
  if (!id) {
    d.action = "skipped";
    d.reason = fmt::format("not a temp file of an interrupted create ({})", id.error().message);
    return d;
  }
  d.reason = fmt::format("temp file of an interrupted create, {} s old", age.count());
  if (options.dry_run) {
    d.action = "would_remove";
    return d;
  }
  if (auto removed = unlink_if_same(path.string(), *id); !removed) {
    d.action = "failed";
    d.reason = fmt::format("remove: {}", removed.error().message);
    return d;
  }
  d.action = "removed";
  return d;
}

}  // namespace

Exit run_gc(const Context& ctx, const GcOptions& options) {
  auto listing = list_root(ctx.root);
  if (!listing) return report_error(ctx, "gc", listing.error());

  std::vector<Decision> decisions;
  for (const std::string& name : listing->segments)
    if (auto d = collect_segment(ctx, name, options.dry_run)) decisions.push_back(std::move(*d));
  for (const std::string& name : listing->temp_files)
    decisions.push_back(collect_temp_file(ctx, name, options));

  std::size_t removed = 0;
  std::size_t failed = 0;
  for (const Decision& d : decisions) {
    if (d.action == "removed" || d.action == "would_remove") ++removed;
    if (d.action == "failed") ++failed;
  }
  if (ctx.json) {
    Json actions = Json::array();
    for (const Decision& d : decisions)
      actions.push_back(
          {{"name", d.name}, {"type", d.type}, {"action", d.action}, {"reason", d.reason}});
    Json doc = Json::object();
    doc["root"] = ctx.root;
    doc["dry_run"] = options.dry_run;
    doc[options.dry_run ? "would_remove" : "removed"] = removed;
    doc["failed"] = failed;
    doc["actions"] = std::move(actions);
    print_json(ctx, doc);
  } else {
    Table table({"ACTION", "TYPE", "NAME", "REASON"});
    for (const Decision& d : decisions)
      table.add({d.action, d.type, printable(d.name), printable(d.reason)});
    if (!table.empty()) ctx.out << table.render();
    ctx.out << fmt::format("gc{}: {} {} file(s) in {}{}\n", options.dry_run ? " (dry run)" : "",
                           options.dry_run ? "would remove" : "removed", removed,
                           printable(ctx.root), failed ? fmt::format(", {} failed", failed) : "");
  }
  return failed == 0 ? Exit::Ok : Exit::System;
}

}  // namespace shm::shmctl
