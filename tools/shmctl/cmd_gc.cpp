// shmctl gc [--dry-run]: removes segments nobody can still be using, and
// leftover temp files of interrupted creates.
//
// A segment is collected only when it is provably garbage: it was created
// ephemeral (CreateOptions::ephemeral, a flag in its header), its creator
// process is dead (pid + start time) and no attachment slot is alive (kernel
// OFD locks). A persistent segment (the default) is never collected, whatever
// its liveness: "create in a setup step, open later" leaves a dead creator
// and no attacher, and that is a user's data, not garbage. Before unlinking,
// gc takes the lock of every slot itself: while it holds them no process can
// attach, so "no live attacher" cannot change between the check and the
// unlink. Segments that fail validation or belong to another user are never
// touched (inspect them; `shmctl rm` removes them deliberately). A temp file
// (".libshm-tmp-*") is removed only when it is older than 60 s, belongs to
// this user and is empty or starts with the segment magic.
//
// Spill directories (docs/spill.md): each directory `<base>/<relay>` of the
// spill base (--spill-dir, else $LIBSHM_SPILL_DIR, else /var/lib/libshm/spill)
// whose relay segment `<relay>` is gone from the root is removed with its
// pages, but only when everything in it is ours and is what a relay writes:
// the directory and every file belong to this user, nothing is a link or a
// special file, every page-*.spill / page-*.tmp starts with the spill page
// magic, relay.id is there and is a regular file (relay.owner, when there,
// too), refused/ is empty, removed/ holds only page files (pages a reader
// acknowledged and had not unlinked yet), and nothing was written in the
// last 60 s (a relay of another root may still use it). gc holds the directory's binding lock
// while it decides and removes: a relay create binding it is not disturbed.
// Anything else keeps the whole directory, with the reason.
#include "output.hpp"
#include "segment_access.hpp"

#include "shm/platform/file.hpp"
#include "shm/spill/page.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cstring>
#include <filesystem>

namespace shm::shmctl {
namespace {

namespace fs = std::filesystem;

struct Decision {
  std::string name;
  std::string type;    // "segment" | "temp_file" | "spill_dir"
  std::string action;  // "removed" | "would_remove" | "kept" | "skipped" | "failed"
  std::string reason;
};

// Holds every slot's lock so no process can attach while gc removes the name.
Result<FileHandle> fence_attachments(const Segment& segment) {
  auto fd = reopen(segment.fd(), true);
  if (!fd) return std::unexpected(fd.error());
  // One lock over every slot's byte (kMaxAttachments of them): one call.
  const std::uint64_t first = slot_lock_offset(0);
  auto got = try_lock_range(fd->get(), first, slot_lock_offset(kMaxAttachments - 1) + 1 - first);
  if (!got) return std::unexpected(got.error());
  if (!*got) return fail(Errc::RoleTaken, "a slot was taken while collecting");
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
  if ((h.flags & static_cast<std::uint16_t>(SegmentFlags::Ephemeral)) == 0) {
    d.reason = fmt::format(
        "persistent (not created ephemeral): it may be opened later; remove "
        "it with `shmctl rm {}`",
        name);
    return d;
  }
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

// The spill base gc looks in: --spill-dir, else where a relay puts its
// directory by default (default_spill_dir's parent).
std::string spill_base(const GcOptions& options) {
  if (!options.spill_dir.empty()) return options.spill_dir;
  return fs::path(spill::default_spill_dir("relay")).parent_path().string();
}

// What one file of a spill directory is, or why the directory must stay.
struct SpillFile {
  std::string name;
  FileIdentity id;
};
struct Refusal {
  bool recent = false;  // kept (a relay may still use it), not skipped
  std::string reason;
};
Refusal refused(const Error& e) {
  return {false, e.message};
}
// The age check shared by every file gc would remove.
std::expected<void, Refusal> old_enough(const std::string& path, std::chrono::seconds min_age) {
  std::error_code ec;
  const auto modified = fs::last_write_time(path, ec);
  if (ec) return std::unexpected(Refusal{false, fmt::format("stat {}: {}", path, ec.message())});
  const auto age =
      std::chrono::duration_cast<std::chrono::seconds>(fs::file_time_type::clock::now() - modified);
  if (age < min_age)
    return std::unexpected(Refusal{true, fmt::format("{} was written {} s ago, less than {} s: "
                                                     "a relay may still use it",
                                                     path, age.count(), min_age.count())});
  return {};
}

// A subdirectory of the spill directory (refused/, removed/): a directory
// of this user, not a link.
std::expected<void, Refusal> own_subdir(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0)
    return std::unexpected(Refusal{false, fmt::format("stat {}: {}", path, std::strerror(errno))});
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid())
    return std::unexpected(Refusal{false, fmt::format("{} is not a directory of this user", path)});
  return {};
}

// removed/ holds pages a reader retired (acknowledged) and had not unlinked
// yet: each must be a page file of this user, and goes with the directory.
std::expected<void, Refusal> check_removed(const fs::path& dir, std::chrono::seconds min_age,
                                           std::vector<SpillFile>& files) {
  std::error_code ec;
  fs::directory_iterator it(dir / "removed", ec);
  if (ec)
    return std::unexpected(
        Refusal{false, fmt::format("read {}: {}", (dir / "removed").string(), ec.message())});
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::string path = it->path().string();
    if (!(name.starts_with("page-") && name.ends_with(".spill")))
      return std::unexpected(Refusal{false, fmt::format("{} is not a retired page", path)});
    const Result<FileIdentity> id = check_own_file(path, false, spill::kPageMagic, "spill page");
    if (!id) return std::unexpected(refused(id.error()));
    if (auto ok = old_enough(path, min_age); !ok) return std::unexpected(ok.error());
    files.push_back({"removed/" + name, *id});
  }
  if (ec)
    return std::unexpected(
        Refusal{false, fmt::format("read {}: {}", (dir / "removed").string(), ec.message())});
  return {};
}

std::expected<std::vector<SpillFile>, Refusal> check_spill_contents(const fs::path& dir,
                                                                    std::chrono::seconds min_age) {
  std::vector<SpillFile> files;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec)
    return std::unexpected(Refusal{false, fmt::format("read {}: {}", dir.string(), ec.message())});
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::string path = it->path().string();
    if (name == "refused") {
      if (auto ok = own_subdir(path); !ok) return std::unexpected(ok.error());
      if (!fs::is_empty(path, ec) || ec)
        return std::unexpected(Refusal{
            false, fmt::format("{} holds refused pages: inspect them (docs/spill.md)", path)});
      continue;
    }
    if (name == "removed") {
      if (auto ok = own_subdir(path); !ok) return std::unexpected(ok.error());
      if (auto ok = check_removed(dir, min_age, files); !ok) return std::unexpected(ok.error());
      continue;
    }
    Result<FileIdentity> id = FileIdentity{};
    if (name == "relay.id" || name == "relay.owner") {
      // relay.id (8 random bytes) and relay.owner (the bound segment's path)
      // have no magic: the check's type and owner tests are what counts; a
      // BadMagic comes only after they passed.
      id = check_own_file(path, false, 0, name);
      if (!id && id.error().code == Errc::BadMagic) {
        struct stat st {};
        if (::lstat(path.c_str(), &st) != 0)
          return std::unexpected(
              Refusal{false, fmt::format("stat {}: {}", path, std::strerror(errno))});
        id = FileIdentity{static_cast<std::uint64_t>(st.st_dev),
                          static_cast<std::uint64_t>(st.st_ino)};
      }
    } else if (name.starts_with("page-") && (name.ends_with(".spill") || name.ends_with(".tmp"))) {
      id = check_own_file(path, false, spill::kPageMagic, "spill page");
    } else {
      return std::unexpected(Refusal{false, fmt::format("{} is not a file a relay writes", path)});
    }
    if (!id) return std::unexpected(refused(id.error()));
    if (auto ok = old_enough(path, min_age); !ok) return std::unexpected(ok.error());
    files.push_back({name, *id});
  }
  if (ec)
    return std::unexpected(Refusal{false, fmt::format("read {}: {}", dir.string(), ec.message())});
  if (std::ranges::none_of(files, [](const SpillFile& f) { return f.name == "relay.id"; }))
    return std::unexpected(Refusal{false, "no relay.id: not a relay's spill directory"});
  return files;
}

Decision collect_spill_dir(const Context& ctx, const fs::path& dir, const GcOptions& options) {
  Decision d{dir.string(), "spill_dir", "kept", ""};
  const std::string relay = dir.filename().string();
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    d.action = "failed";
    d.reason = fmt::format("stat: {}", std::strerror(errno));
    return d;
  }
  if (!S_ISDIR(st.st_mode)) {
    d.action = "skipped";
    d.reason = fmt::format("{}, not a spill directory", S_ISLNK(st.st_mode)
                                                            ? "a symbolic link (not followed)"
                                                            : mode_type_name(st.st_mode));
    return d;
  }
  if (st.st_uid != ::geteuid()) {
    d.action = "skipped";
    d.reason = fmt::format("owned by uid {}, not by this user (uid {})", st.st_uid, ::geteuid());
    return d;
  }
  const auto relay_exists = [&] {
    struct stat seg {};
    if (::lstat((fs::path(ctx.root) / relay).c_str(), &seg) != 0) return false;
    d.reason = fmt::format("relay segment {} exists in {}", relay, ctx.root);
    return true;
  };
  if (relay_exists()) return d;
  // The binding lock (spill::lock_binding), held to the end: a relay create
  // binding this directory right now has not published its segment yet.
  auto binding = spill::lock_binding(dir.string(), std::chrono::milliseconds(0));
  if (!binding) {
    d.action = binding.error().code == Errc::RoleTaken ? "kept" : "failed";
    d.reason = binding.error().code == Errc::RoleTaken ? "a relay create is binding it right now"
                                                       : binding.error().message;
    return d;
  }
  if (relay_exists()) return d;  // a create may have published it since the first look
  auto files = check_spill_contents(dir, options.temp_file_age);
  if (!files) {
    d.action = files.error().recent ? "kept" : "skipped";
    d.reason = files.error().reason;
    return d;
  }
  std::uint64_t pages = 0;
  for (const SpillFile& f : *files)
    pages += f.name.starts_with("page-") ? 1 : 0;  // not retired ones
  const std::string why = fmt::format("relay segment {} is gone; {} page file(s)", relay, pages);
  if (options.dry_run) {
    d.action = "would_remove";
    d.reason = why;
    return d;
  }
  for (const SpillFile& f : *files) {
    if (auto removed = unlink_if_same((dir / f.name).string(), f.id); !removed) {
      d.action = "failed";
      d.reason = fmt::format("remove: {}", removed.error().message);
      return d;
    }
  }
  std::error_code ec;
  (void)fs::remove(dir / "refused", ec);  // empty, checked above
  (void)fs::remove(dir / "removed", ec);  // its retired pages unlinked above
  if (!fs::remove(dir, ec) || ec) {
    d.action = "failed";
    d.reason = fmt::format("rmdir: {}", ec ? ec.message() : "not removed");
    return d;
  }
  d.action = "removed";
  d.reason = why;
  return d;
}

void collect_spill(const Context& ctx, const GcOptions& options, std::vector<Decision>& out) {
  const fs::path base = spill_base(options);
  std::error_code ec;
  if (fs::symlink_status(base, ec).type() != fs::file_type::directory) return;  // nothing spilled
  fs::directory_iterator it(base, ec);
  std::vector<fs::path> dirs;
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) dirs.push_back(it->path());
  std::ranges::sort(dirs);
  for (const fs::path& dir : dirs) out.push_back(collect_spill_dir(ctx, dir, options));
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
  collect_spill(ctx, options, decisions);

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
