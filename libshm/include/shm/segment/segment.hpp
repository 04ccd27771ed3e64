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
  KindId kind = 0;             ///< the kind id stored in the header (kind_ids.hpp)
  std::string_view kind_name;  ///< the kind's name, for messages
  std::uint64_t fingerprint =
      0;  ///< the kind's layout fingerprint (KindMismatch / FingerprintMismatch)
  std::span<const std::byte> params;  ///< the kind's parameter block (<= kParamBytes)
  std::uint64_t data_size = 0;        ///< bytes after the header
  /// Compares the segment's parameters with the caller's expectation. Returns an
  /// empty string when they agree, else "field: segment has X, caller expects Y".
  std::function<std::string(std::span<const std::byte> found, std::span<const std::byte> expected)>
      param_mismatch;
};

/// How Segment::create (and every X::create) makes the file.
struct CreateOptions {
  std::string root;                    ///< empty: default_root()
  std::uint32_t mode = 0600;           ///< file mode bits
  std::optional<std::uint32_t> group;  ///< chown to this gid (mode 0660 makes it useful)
  bool ephemeral = false;              ///< the sidecar may collect it once every attacher is dead
};

/// How Segment::open (and every X::open) opens the file.
struct OpenOptions {
  std::string root;                ///< empty: default_root()
  bool read_only = false;          ///< map read-only: writes through the segment are refused
  bool allow_other_owner = false;  ///< trust a file another user owns (else WrongOwner)
  std::chrono::milliseconds ready_wait{1000};  ///< bound on waiting for INITIALIZING
};

/// What an attachment slot's kernel lock and state say of its holder: Free (not
/// attached), Alive (its lock is held), Dead (Attached but nobody holds the lock).
enum class Liveness : std::uint8_t { Free, Alive, Dead };

/// A snapshot of one attachment slot (Segment::slots()).
struct SlotInfo {
  std::size_t index;             ///< the slot, in [0, kMaxAttachments)
  SlotState state;               ///< Free or Attached, as stored
  std::uint32_t role;            ///< the holder's role id (RoleSpec::id)
  std::int32_t pid;              ///< the holder's process id
  std::uint64_t start_time;      ///< the holder's start time, /proc ticks: survives pid reuse
  std::uint32_t generation;      ///< +1 per attach of the slot
  std::uint64_t attach_time_ns;  ///< when the holder attached, realtime ns
  std::uint64_t heartbeat_ns;    ///< the last heartbeat, monotonic ns: shown, decides nothing
  Liveness liveness;             ///< from the kernel lock, when read
};

/// One entry of a segment's observation ring (Segment::events()).
struct EventInfo {
  std::uint64_t number;   ///< the event's number, from 0: a gap means overwritten events
  std::uint64_t time_ns;  ///< when it happened, realtime ns
  EventType type;         ///< what happened
  std::int32_t pid;       ///< the process that recorded it
  std::uint32_t slot;     ///< the attachment slot it concerns
  std::uint32_t detail;   ///< type-specific detail
};
/// The enumerator's name, for logs and tool output.
[[nodiscard]] std::string_view to_string(EventType type) noexcept;
/// The enumerator's name, for logs and tool output.
[[nodiscard]] std::string_view to_string(Liveness liveness) noexcept;

/// A role a handle attaches as (Segment::attach).
struct RoleSpec {
  std::uint32_t id;  ///< exclusive roles: id < kExclusiveSlots and is the slot index
  bool exclusive;  ///< at most one live holder (RoleTaken otherwise); a dead holder's slot is taken
                   ///< over
  std::string_view name;  ///< the role's name, for messages and tools
};

class Segment;

/// A held slot of the attachment table (move-only). Detaches on destruction.
/// Holds its own open file description, so its OFD lock is independent of every
/// other handle, in this process or another.
class Attachment {
 public:
  Attachment() = default;
  /// Takes over the slot; `other` is left detached.
  Attachment(Attachment&&) noexcept;
  /// Detaches this slot, then takes over the other's.
  Attachment& operator=(Attachment&&) noexcept;
  Attachment(const Attachment&) = delete;
  Attachment& operator=(const Attachment&) = delete;
  ~Attachment();

  /// The held slot's index.
  [[nodiscard]] std::size_t slot() const noexcept { return slot_; }
  /// The slot's generation at attach.
  [[nodiscard]] std::uint32_t generation() const noexcept { return generation_; }
  /// True when the attach took over a dead holder's slot.
  [[nodiscard]] bool took_over() const noexcept { return took_over_; }
  /// False once detached or moved from.
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

/// An open (mapped) named segment: the generic header, the data area and the
/// attachment table. Move-only; the mapping lives as long as the object.
class Segment {
 public:
  /// Fills the data area of a new segment before it becomes READY.
  using Initializer = std::function<Result<void>(std::span<std::byte> data)>;

  Segment() = default;
  /// Takes over the mapping; `other` is left empty.
  Segment(Segment&&) noexcept = default;
  /// Unmaps this segment, then takes over the other's mapping.
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

  /// The segment's name.
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  /// The file's path: root / name.
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  /// The generic header.
  [[nodiscard]] const SegmentHeader& header() const noexcept { return *mutable_header(); }
  /// Writes through this pointer need a writable mapping (not open(read_only)).
  [[nodiscard]] SegmentHeader* mutable_header() const noexcept {
    return reinterpret_cast<SegmentHeader*>(mapping_.data());
  }
  /// The data area: every byte after the header.
  [[nodiscard]] std::span<std::byte> data() const noexcept {
    return {mapping_.data() + kHeaderSize, mapping_.size() - kHeaderSize};
  }
  /// The kind's parameter block stored in the header.
  [[nodiscard]] std::span<const std::byte> params() const noexcept {
    return {header().params, header().params_size};
  }
  /// True when mapped read-write.
  [[nodiscard]] bool writable() const noexcept { return mapping_.writable(); }
  /// The file descriptor of the segment file.
  [[nodiscard]] int fd() const noexcept { return fd_.get(); }
  /// Touches every page so later accesses do not fault.
  void prefault() const noexcept { mapping_.prefault(); }

  /// True when the name no longer points to this incarnation (unlinked or re-created).
  [[nodiscard]] bool stale() const;
  /// Removes the name; attached processes keep the old incarnation.
  [[nodiscard]] Result<void> unlink() const;
  /// Removes segment `name` from `root` (empty: default_root()).
  [[nodiscard]] static Result<void> unlink(std::string_view name, const std::string& root = {});

  /// A snapshot of every attachment slot.
  [[nodiscard]] std::vector<SlotInfo> slots() const;
  /// Probes slot `slot`'s kernel lock now (Free for an index out of range).
  [[nodiscard]] Liveness liveness(std::size_t slot) const;
  /// The events still in the observation ring, oldest first (an entry being
  /// overwritten while read is skipped).
  [[nodiscard]] std::vector<EventInfo> events() const;
  /// Writes an event into this segment's observation ring.
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
