// shmctl rm NAME [--force]: removes the name. Processes still attached keep
// working on the removed incarnation (and see Segment::stale()); rm names them.
// rm removes only a valid segment. A file that fails validation is refused with
// the reason; with --force, rm removes it only if it is a regular file of this
// user that still starts with the segment magic (a damaged segment). A text
// file, a FIFO, a socket, a device, a symbolic link, a directory or another
// user's file is never removed: a mistyped --root must not make rm delete
// whatever it finds.
#include "output.hpp"
#include "segment_access.hpp"

#include "shm/platform/process.hpp"

#include <fmt/format.h>

namespace shm::shmctl {

namespace {

Exit refuse(const Context& ctx, const std::string& name, const Error& why, std::string_view hint) {
  return report_error(
      ctx, "rm",
      Error{why.code, fmt::format("refusing to remove '{}': {}{}", name, why.message, hint)});
}

}  // namespace

Exit run_rm(const Context& ctx, const RmOptions& options) {
  const std::string& name = options.name;
  if (auto ok = validate_name(name); !ok) return report_error(ctx, "rm", ok.error());
  Json doc = Json::object();
  doc["name"] = name;

  auto opened = open_segment(ctx, name, Access::Inspect);
  if (!opened) {
    if (exit_for(opened.error().code) != Exit::Invalid)
      return report_error(ctx, "rm", opened.error());
    if (!options.force) {
      const bool file = opened.error().code != Errc::NotRegularFile;
      return refuse(ctx, name,
                    Error{opened.error().code,
                          fmt::format("not a valid segment ({})", opened.error().message)},
                    file ? "; `shmctl rm --force` removes a damaged segment file that still "
                           "starts with the segment magic and belongs to you"
                         : "; shmctl removes only segment files");
    }
    const std::string path = fmt::format("{}/{}", ctx.root, name);
    auto id = check_own_segment_file(path, false);
    if (!id) return refuse(ctx, name, id.error(), "");
    if (auto removed = unlink_if_same(path, *id); !removed)
      return report_error(ctx, "rm", removed.error());
    doc["removed"] = true;
    doc["valid"] = false;
    doc["error"] = error_json(opened.error());
    if (ctx.json)
      print_json(ctx, doc);
    else
      ctx.out << fmt::format("removed '{}' (it was not a valid segment: {})\n", printable(name),
                             printable(opened.error().what()));
    return Exit::Ok;
  }

  const SegmentHeader& h = opened->segment.header();
  const AttacherCounts attachers = count_attachers(opened->segment);
  // Segment::unlink() refuses when the name meanwhile points to another incarnation.
  if (auto removed = opened->segment.unlink(); !removed)
    return report_error(ctx, "rm", removed.error());

  doc["removed"] = true;
  doc["valid"] = !opened->layout_error;
  doc["kind"] = std::string(opened->kind_name());
  doc["incarnation"] = fmt::format("{:016x}", h.incarnation);
  Json live = Json::array();
  std::string live_text;
  for (const SlotInfo& slot : attachers.live) {
    const std::string role(role_name(opened->kind, slot.role));
    const std::string cmdline = process_cmdline(slot.pid);
    live.push_back({{"slot", slot.index}, {"role", role}, {"pid", slot.pid}, {"cmdline", cmdline}});
    live_text += fmt::format("  pid {} ({}): {}\n", slot.pid, role, printable(cmdline));
  }
  if (ctx.json) {
    doc["live_attachers"] = std::move(live);
    print_json(ctx, doc);
  } else {
    ctx.out << fmt::format("removed '{}' ({}, incarnation {:016x})\n", printable(name),
                           opened->kind_label(), h.incarnation);
    if (attachers.alive != 0)
      ctx.out << fmt::format(
          "{} live attacher(s) keep using the removed incarnation until they detach:\n{}",
          attachers.alive, live_text);
  }
  return Exit::Ok;
}

}  // namespace shm::shmctl
