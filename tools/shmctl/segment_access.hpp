// How shmctl finds and opens segments: listing the root, opening a segment for
// inspection (read-only, other owners allowed) or modification (writable), and
// matching it against the kind-descriptor table.
#pragma once

#include "shmctl.hpp"

#include "shm/segment/kind.hpp"
#include "shm/segment/segment.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shm::shmctl {

struct RootListing {
  bool root_exists = false;
  std::vector<std::string> segments;    // every name except the reserved ".libshm-" ones, sorted
  std::vector<std::string> temp_files;  // ".libshm-tmp-*" leftovers of interrupted creates
};

// Lists the root directory. A missing root is an empty listing (nothing has
// been created yet); a root that cannot be read is an error.
[[nodiscard]] Result<RootListing> list_root(const std::string& root);

enum class Access : std::uint8_t {
  Inspect,  // read-only mapping, files of other owners allowed (shmctl only reads defensively)
  Modify,   // writable mapping, this uid's files only
};

struct OpenedSegment {
  Segment segment;
  // nullptr when this build has no descriptor for the segment's kind id.
  const KindDescriptor* kind = nullptr;
  // Set when the segment's layout fingerprint differs from the descriptor's:
  // the kind's own views (describe, verify, dump, set) must not be applied.
  std::optional<Error> layout_error;
  // Set (with layout_error) when the fingerprint is an older layout of the
  // kind that this build still describes read-only.
  const OlderLayout* older_layout = nullptr;

  [[nodiscard]] KindId kind_id() const noexcept { return segment.header().kind; }
  // The descriptor's name, or "unknown".
  [[nodiscard]] std::string_view kind_name() const noexcept;
  // kind_name() plus the id when unknown: "unknown(7)".
  [[nodiscard]] std::string kind_label() const;
};

// Validates the name, refuses anything but a regular file (a symbolic link, a
// FIFO, a directory: NotRegularFile), then opens and validates the generic
// header through Segment::open_any and looks the kind up in the table.
[[nodiscard]] Result<OpenedSegment> open_segment(const Context& ctx, std::string_view name,
                                                 Access access);

// For the commands that interpret a kind's data (verify, dump, set): the kind
// must be known to this build and its layout must match.
[[nodiscard]] Result<const KindDescriptor*> require_kind(const OpenedSegment& opened);

struct AttacherCounts {
  std::uint64_t alive = 0;
  std::uint64_t dead = 0;
  std::vector<SlotInfo> live;  // the live ones, for naming their processes
};
// Liveness of every used slot, from the kernel's OFD locks.
[[nodiscard]] AttacherCounts count_attachers(const Segment& segment);
// Whether the creator (pid + start time, so a reused pid does not count) lives.
[[nodiscard]] bool creator_alive(const SegmentHeader& header) noexcept;

// Which file a name pointed to when it was checked.
struct FileIdentity {
  std::uint64_t dev = 0;
  std::uint64_t ino = 0;
};
// For removing a file that is not a valid segment (rm --force, gc of temp
// files): the entry itself (never followed through a link) must be a regular
// file, belong to this user (WrongOwner) and start with the segment magic
// (BadMagic), or be empty when `allow_empty`. Nothing but a regular file is
// ever opened.
[[nodiscard]] Result<FileIdentity> check_own_segment_file(const std::string& path,
                                                          bool allow_empty);
// The same for another file format: starts with `magic` (the 8 bytes of
// `what`, e.g. "spill page", named in the BadMagic message).
[[nodiscard]] Result<FileIdentity> check_own_file(const std::string& path, bool allow_empty,
                                                  std::uint64_t magic, std::string_view what);
// "a directory", "a FIFO", ... for messages about a file's type (lstat mode).
[[nodiscard]] std::string_view mode_type_name(mode_t mode) noexcept;
// Unlinks `path` only if it still names the file `id` was taken from.
[[nodiscard]] Result<void> unlink_if_same(const std::string& path, const FileIdentity& id);

// "spsc_ring(1), channel(2)": the kinds this build knows, for messages.
[[nodiscard]] std::string known_kinds();

}  // namespace shm::shmctl
