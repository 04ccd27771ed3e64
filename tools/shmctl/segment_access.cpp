#include "segment_access.hpp"

#include "shm/platform/file.hpp"
#include "shm/platform/process.hpp"
#include "shm/segment/header.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <filesystem>
#include <system_error>

namespace shm::shmctl {
namespace {

namespace fs = std::filesystem;

// Bound on waiting for a segment still INITIALIZING. Create publishes a
// segment only once it is READY, so a published INITIALIZING one is damaged;
// do not make every listing wait the library's default second for it.
constexpr std::chrono::milliseconds kReadyWait{100};

std::string_view file_type_name(fs::file_type type) noexcept {
  switch (type) {
    case fs::file_type::directory:
      return "a directory";
    case fs::file_type::fifo:
      return "a FIFO";
    case fs::file_type::socket:
      return "a socket";
    case fs::file_type::block:
      return "a block device";
    case fs::file_type::character:
      return "a character device";
    case fs::file_type::symlink:
      return "a symbolic link";
    default:
      return "not a regular file";
  }
}

// Opening a FIFO would block and a symbolic link must never be followed: look
// at the directory entry itself before open() touches it.
Result<void> check_entry(const std::string& path, std::string_view name, const std::string& root) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(path, ec);
  if (ec || st.type() == fs::file_type::not_found) {
    if (ec == std::errc::no_such_file_or_directory || st.type() == fs::file_type::not_found)
      return fail(Errc::NotFound, fmt::format("segment '{}' not found in {}", name, root));
    return fail_errno(ec.value(), "stat " + path);
  }
  if (st.type() == fs::file_type::symlink)
    return fail(
        Errc::NotRegularFile,
        fmt::format("{} is a symbolic link; segments are never followed through links", path));
  if (st.type() != fs::file_type::regular)
    return fail(Errc::NotRegularFile,
                fmt::format("{} is {}, not a segment file", path, file_type_name(st.type())));
  return {};
}

}  // namespace

std::string_view mode_type_name(mode_t mode) noexcept {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

Result<FileIdentity> check_own_segment_file(const std::string& path, bool allow_empty) {
  return check_own_file(path, allow_empty, kSegmentMagic, "segment");
}

Result<FileIdentity> check_own_file(const std::string& path, bool allow_empty,
                                    std::uint64_t expected_magic, std::string_view what) {
  struct stat entry {};
  if (::lstat(path.c_str(), &entry) != 0) return fail_errno(errno, "stat " + path);
  if (S_ISLNK(entry.st_mode))
    return fail(Errc::NotRegularFile,
                fmt::format("{} is a symbolic link, not a {} file", path, what));
  if (!S_ISREG(entry.st_mode))
    return fail(Errc::NotRegularFile,
                fmt::format("{} is {}, not a {} file", path, mode_type_name(entry.st_mode), what));
  if (entry.st_uid != ::geteuid())
    return fail(Errc::WrongOwner, fmt::format("{} is owned by uid {}, not by this user (uid {})",
                                              path, entry.st_uid, ::geteuid()));
  FileHandle fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (!fd.valid()) return fail_errno(errno, "open " + path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return fail_errno(errno, "fstat " + path);
  if (st.st_dev != entry.st_dev || st.st_ino != entry.st_ino || !S_ISREG(st.st_mode))
    return fail(Errc::NotRegularFile, fmt::format("{} changed while it was checked", path));
  const FileIdentity id{static_cast<std::uint64_t>(st.st_dev),
                        static_cast<std::uint64_t>(st.st_ino)};
  if (st.st_size == 0 && allow_empty) return id;
  std::uint64_t magic = 0;
  const ssize_t n = ::pread(fd.get(), &magic, sizeof magic, 0);
  if (n < 0) return fail_errno(errno, "read " + path);
  if (static_cast<std::size_t>(n) != sizeof magic || magic != expected_magic)
    return fail(
        Errc::BadMagic,
        fmt::format("{} does not start with the {} magic: not a libshm {} file", path, what, what));
  return id;
}

Result<void> unlink_if_same(const std::string& path, const FileIdentity& id) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return fail_errno(errno, "stat " + path);
  if (static_cast<std::uint64_t>(st.st_dev) != id.dev ||
      static_cast<std::uint64_t>(st.st_ino) != id.ino)
    return fail(Errc::NotFound,
                fmt::format("{} names another file since it was checked; nothing removed", path));
  if (::unlink(path.c_str()) != 0) return fail_errno(errno, "unlink " + path);
  return {};
}

Result<RootListing> list_root(const std::string& root) {
  RootListing listing;
  std::error_code ec;
  const fs::file_status st = fs::status(root, ec);
  if (st.type() == fs::file_type::not_found) return listing;
  if (ec) return fail_errno(ec.value(), "stat root " + root);
  if (st.type() != fs::file_type::directory)
    return fail(Errc::NotRegularFile, fmt::format("root {} is not a directory", root));
  listing.root_exists = true;
  fs::directory_iterator it(root, ec);
  if (ec) return fail_errno(ec.value(), "read root directory " + root);
  // increment(ec), not the range-for: its operator++ throws on a read error
  // (on an error increment(ec) sets ec and makes `it` the end iterator).
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.starts_with(kReservedPrefix)) {
      if (name.starts_with(std::string(kReservedPrefix) + "tmp-"))
        listing.temp_files.push_back(std::move(name));
      continue;
    }
    listing.segments.push_back(std::move(name));
  }
  if (ec) return fail_errno(ec.value(), "read root directory " + root);
  std::ranges::sort(listing.segments);
  std::ranges::sort(listing.temp_files);
  return listing;
}

std::string_view OpenedSegment::kind_name() const noexcept {
  return kind != nullptr ? kind->name : std::string_view("unknown");
}

std::string OpenedSegment::kind_label() const {
  if (kind != nullptr) return std::string(kind->name);
  return fmt::format("unknown({})", kind_id());
}

Result<OpenedSegment> open_segment(const Context& ctx, std::string_view name, Access access) {
  if (auto ok = validate_name(name); !ok) return std::unexpected(ok.error());
  const std::string path = fmt::format("{}/{}", ctx.root, name);
  if (auto ok = check_entry(path, name, ctx.root); !ok) return std::unexpected(ok.error());

  OpenOptions options;
  options.root = ctx.root;
  options.read_only = access == Access::Inspect;
  options.allow_other_owner = access == Access::Inspect;
  options.ready_wait = kReadyWait;
  auto segment = Segment::open_any(name, options);
  if (!segment) return std::unexpected(segment.error());

  OpenedSegment opened{std::move(*segment), nullptr, std::nullopt};
  const SegmentHeader& h = opened.segment.header();
  opened.kind = find_kind(h.kind);
  if (opened.kind != nullptr && h.fingerprint != opened.kind->fingerprint)
    opened.older_layout = find_older_layout(*opened.kind, h.fingerprint);
  if (opened.older_layout != nullptr)
    opened.layout_error =
        Error{Errc::VersionMismatch,
              fmt::format("{}: {} layout version: segment has {}, this build speaks {} (an older "
                          "layout: described read-only, never attached to)",
                          opened.segment.path(), opened.kind->name, opened.older_layout->version,
                          opened.kind->layout_version)};
  else if (opened.kind != nullptr && h.fingerprint != opened.kind->fingerprint)
    opened.layout_error = Error{
        Errc::FingerprintMismatch,
        fmt::format("{}: {} layout fingerprint: segment has {:#018x}, this build has {:#018x} "
                    "(written by a build with a different layout; its data is not interpreted)",
                    opened.segment.path(), opened.kind->name, h.fingerprint,
                    opened.kind->fingerprint)};
  return opened;
}

Result<const KindDescriptor*> require_kind(const OpenedSegment& opened) {
  if (opened.kind == nullptr)
    return fail(Errc::KindMismatch,
                fmt::format("{}: kind id {} is unknown to this build (known kinds: {})",
                            opened.segment.path(), opened.kind_id(), known_kinds()));
  if (opened.layout_error) return std::unexpected(*opened.layout_error);
  return opened.kind;
}

AttacherCounts count_attachers(const Segment& segment) {
  AttacherCounts counts;
  for (const SlotInfo& slot : segment.slots()) {
    if (slot.liveness == Liveness::Alive) {
      ++counts.alive;
      counts.live.push_back(slot);
    } else if (slot.liveness == Liveness::Dead) {
      ++counts.dead;
    }
  }
  return counts;
}

bool creator_alive(const SegmentHeader& header) noexcept {
  return process_alive(ProcessId{header.creator_pid, header.creator_start_time});
}

std::string known_kinds() {
  std::string out;
  for (const KindDescriptor* kind : all_kinds()) {
    if (!out.empty()) out += ", ";
    out += fmt::format("{}({})", kind->name, kind->kind);
  }
  return out.empty() ? std::string("none") : out;
}

}  // namespace shm::shmctl
