/// @file
/// Named segments: a file in the root directory that begins with the handshake
/// header (header.hpp). Create is atomic (temp file, fallocate, initialise,
/// READY, publish without replacing); open validates every header field before
/// trusting the mapping; attachments hold an OFD byte lock per slot so the
/// kernel tells who is alive.
#pragma once

#include "shm/error.hpp"
#include "shm/platform/file.hpp"
#include "shm/segment/header.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shm {

/// Checks a segment name: [A-Za-z0-9._-]{1,200}, not "." or "..", not starting
/// with '-' (a tool would read it as an option), not the reserved ".libshm-"
/// prefix.
[[nodiscard]] Result<void> validate_name(std::string_view name);
/// $LIBSHM_ROOT, or /dev/shm/libshm.
[[nodiscard]] std::string default_root();
/// Checks a root directory before anything in it is trusted, at every entry
/// point (create, open, unlink, shmctl, the sidecar): an absolute path
/// (InvalidArgument: a relative root would follow the working directory), and,
/// when it exists, a real directory (not a symbolic link) of this user, or
/// root's with the sticky bit, or a group root LIBSHM_ROOT_GROUP names, that no
/// other user can write into without the sticky bit (UnsafeRoot). A root that
/// does not exist passes: there is nothing in it to trust yet.
[[nodiscard]] Result<void> check_root(const std::string& root);
/// Names of the files that are used internally in a root (temp files, locks).
inline constexpr std::string_view kReservedPrefix = ".libshm-";

/// What a kind asks of a segment: identity, layout and parameters.
struct KindSpec {
  KindId kind = 0;
  std::string_view kind_name;
  std::uint64_t fingerprint = 0;
  std::span<const std::byte> params;  ///< the kind's parameter block (<= kParamBytes)
  std::uint64_t data_size = 0;        ///< bytes after the header
  /// Compares the segment's parameters with the caller's expectation. Returns an
  /// empty string when they agree, else "field: segment has X, caller expects Y".
  std::function<std::string(std::span<const std::byte> found, std::span<const std::byte> expected)>
      param_mismatch;
};

struct CreateOptions {
  std::string root;                    ///< empty: default_root()
  std::uint32_t mode = 0600;           ///< file mode bits
  std::optional<std::uint32_t> group;  ///< chown to this gid (mode 0660 makes it useful)
  bool ephemeral = false;              ///< the sidecar may collect it once every attacher is dead
};

struct OpenOptions {
  std::string root;  ///< empty: default_root()
  bool read_only = false;
  bool allow_other_owner = false;
  std::chrono::milliseconds ready_wait{1000};  ///< bound on waiting for INITIALIZING
};

enum class Liveness : std::uint8_t { Free, Alive, Dead };

struct SlotInfo {
  std::size_t index;
  SlotState state;
  std::uint32_t role;
  std::int32_t pid;
  std::uint64_t start_time;
  std::uint32_t generation;
  std::uint64_t attach_time_ns;
  std::uint64_t heartbeat_ns;
  Liveness liveness;
};

struct EventInfo {
  std::uint64_t number;
  std::uint64_t time_ns;
  EventType type;
  std::int32_t pid;
  std::uint32_t slot;
  std::uint32_t detail;
};
[[nodiscard]] std::string_view to_string(EventType type) noexcept;
[[nodiscard]] std::string_view to_string(Liveness liveness) noexcept;

struct RoleSpec {
  std::uint32_t id;  ///< exclusive roles: id < kExclusiveSlots and is the slot index
  bool exclusive;
  std::string_view name;
};

class Segment;

/// A held slot of the attachment table (move-only). Detaches on destruction.
/// Holds its own open file description, so its OFD lock is independent of every
/// other handle, in this process or another.
class Attachment {
 public:
  Attachment() = default;
  Attachment(Attachment&&) noexcept;
  Attachment& operator=(Attachment&&) noexcept;
  Attachment(const Attachment&) = delete;
  Attachment& operator=(const Attachment&) = delete;
  ~Attachment();

  [[nodiscard]] std::size_t slot() const noexcept { return slot_; }
  [[nodiscard]] std::uint32_t generation() const noexcept { return generation_; }
  [[nodiscard]] bool took_over() const noexcept { return took_over_; }
  [[nodiscard]] bool attached() const noexcept { return header_ != nullptr; }
  /// True in a forked child for the copy of its parent's attachment: the slot
  /// is the parent's, and detach() leaves it to the parent.
  [[nodiscard]] bool copied_by_fork() const noexcept;
  /// Stores "now" in the slot's heartbeat (a relaxed store, no syscall).
  void heartbeat() noexcept;
  /// Frees the slot (in the process that attached; a forked child's copy only
  /// forgets it).
  void detach() noexcept;

 private:
  friend class Segment;
  FileHandle lock_fd_;
  SegmentHeader* header_ = nullptr;
  std::size_t slot_ = 0;
  std::uint32_t generation_ = 0;
  std::uint64_t fork_generation_ = 0;  ///< shm::fork_generation() when attached
  bool took_over_ = false;
};

class Segment {
 public:
  using Initializer = std::function<Result<void>(std::span<std::byte> data)>;

  Segment() = default;
  Segment(Segment&&) noexcept = default;
  Segment& operator=(Segment&&) noexcept = default;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  /// Creates and publishes a new segment; `init` fills the data area before READY.
  [[nodiscard]] static Result<Segment> create(std::string_view name, const KindSpec& spec,
                                              const CreateOptions& options,
                                              const Initializer& init);
  /// Opens and validates a segment against a kind (kind, fingerprint, parameters).
  [[nodiscard]] static Result<Segment> open(std::string_view name, const KindSpec& expected,
                                            const OpenOptions& options);
  /// Opens and validates only the generic header (shmctl, sidecar); the kind is
  /// looked up by the caller.
  [[nodiscard]] static Result<Segment> open_any(std::string_view name, const OpenOptions& options);

  /// Takes a slot for `role`: exclusive roles fail with RoleTaken while a live
  /// process holds them and take over a dead holder's slot.
  [[nodiscard]] Result<Attachment> attach(const RoleSpec& role);

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] const SegmentHeader& header() const noexcept { return *mutable_header(); }
  /// Writes through this pointer need a writable mapping (not open(read_only)).
  [[nodiscard]] SegmentHeader* mutable_header() const noexcept {
    return reinterpret_cast<SegmentHeader*>(mapping_.data());
  }
  [[nodiscard]] std::span<std::byte> data() const noexcept {
    return {mapping_.data() + kHeaderSize, mapping_.size() - kHeaderSize};
  }
  [[nodiscard]] std::span<const std::byte> params() const noexcept {
    return {header().params, header().params_size};
  }
  [[nodiscard]] bool writable() const noexcept { return mapping_.writable(); }
  [[nodiscard]] int fd() const noexcept { return fd_.get(); }
  void prefault() const noexcept { mapping_.prefault(); }

  /// True when the name no longer points to this incarnation (unlinked or re-created).
  [[nodiscard]] bool stale() const;
  /// Removes the name; attached processes keep the old incarnation.
  [[nodiscard]] Result<void> unlink() const;
  [[nodiscard]] static Result<void> unlink(std::string_view name, const std::string& root = {});

  [[nodiscard]] std::vector<SlotInfo> slots() const;
  [[nodiscard]] Liveness liveness(std::size_t slot) const;
  [[nodiscard]] std::vector<EventInfo> events() const;
  void record_event(EventType type, std::uint32_t slot, std::uint32_t detail) const noexcept;

 private:
  [[nodiscard]] static Result<Segment> open_file(std::string_view name, const OpenOptions& options);
  [[nodiscard]] Result<void> validate_header(const OpenOptions& options) const;

  FileHandle fd_;
  Mapping mapping_;
  std::string name_;
  std::string path_;
  std::uint64_t dev_ = 0;
  std::uint64_t ino_ = 0;
};

/// Writes an event into a header's observation ring (any process may call it).
void record_event(SegmentHeader& header, EventType type, std::uint32_t slot,
                  std::uint32_t detail) noexcept;

}  // namespace shm
