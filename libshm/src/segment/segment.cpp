#include "shm/segment/segment.hpp"

#include "segment/size_check.hpp"
#include "shm/platform/clock.hpp"
#include "shm/platform/crc32c.hpp"
#include "shm/platform/fork_generation.hpp"
#include "shm/platform/process.hpp"
#include "shm/segment/kind.hpp"

#include "format/format.hpp"

#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>
#include <bitset>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>
#include <utility>
#include <vector>

namespace shm {
namespace {

std::string resolve_root(const std::string& root) {
  return root.empty() ? default_root() : root;
}

std::string join(const std::string& root, std::string_view name) {
  return shm::detail::format("{}/{}", root, name);
}

// LIBSHM_ROOT_GROUP: the group (a name or a number) whose shared roots this
// process accepts; nullopt when unset. A value that names no group is an error.
Result<std::optional<gid_t>> shared_root_group() {
  const char* env = std::getenv("LIBSHM_ROOT_GROUP");
  if (env == nullptr || *env == '\0') return std::optional<gid_t>{};
  const std::string value = env;
  if (value.find_first_not_of("0123456789") == std::string::npos && value.size() < 10)
    return std::optional<gid_t>{static_cast<gid_t>(std::stoul(value))};
  std::vector<char> buffer(16384);
  group entry{};
  group* found = nullptr;
  const int err = ::getgrnam_r(value.c_str(), &entry, buffer.data(), buffer.size(), &found);
  if (err != 0 || found == nullptr)
    return fail(Errc::InvalidArgument,
                shm::detail::format(
                    "LIBSHM_ROOT_GROUP={}: no such group{}", value,
                    err != 0 ? shm::detail::format(" ({})", std::strerror(err)) : std::string()));
  return std::optional<gid_t>{found->gr_gid};
}

bool process_is_in_group(gid_t gid) {
  if (::getegid() == gid) return true;
  const int n = ::getgroups(0, nullptr);
  if (n <= 0) return false;
  std::vector<gid_t> groups(static_cast<std::size_t>(n));
  const int got = ::getgroups(n, groups.data());
  for (int i = 0; i < got; ++i)
    if (groups[static_cast<std::size_t>(i)] == gid) return true;
  return false;
}

// A root of another owner, shared by a group (LIBSHM_ROOT_GROUP): accepted
// only when it is that group's, this process is a member, and its mode keeps
// the members from removing each other's segments (sticky bit) and everyone
// else out (no access for others).
Result<void> check_shared_group_root(const std::string& entry, const struct stat& st, gid_t gid) {
  const auto mode = static_cast<unsigned>(st.st_mode & 07777);
  if (st.st_gid != gid)
    return fail(Errc::UnsafeRoot,
                shm::detail::format("root {} is owned by uid {} and group {}, not by the group "
                                    "LIBSHM_ROOT_GROUP names ({})",
                                    entry, st.st_uid, st.st_gid, gid));
  if (!process_is_in_group(gid))
    return fail(Errc::UnsafeRoot,
                shm::detail::format("root {} belongs to group {}, and this process (uid {}) is "
                                    "not a member of it",
                                    entry, gid, ::geteuid()));
  if ((st.st_mode & S_ISVTX) == 0)
    return fail(Errc::UnsafeRoot,
                shm::detail::format("group root {} (mode {:o}) lacks the sticky bit: any member "
                                    "could remove or replace another member's segments",
                                    entry, mode));
  if ((st.st_mode & S_IRWXO) != 0)
    return fail(Errc::UnsafeRoot,
                shm::detail::format("group root {} (mode {:o}) gives access to users outside "
                                    "group {}; a group root is mode 3770 or 1770",
                                    entry, mode, gid));
  return {};
}

// Refuses a root whose segments another user could redirect, remove or
// replace: a symbolic link, a directory of another user (a root-owned one with
// the sticky bit, like /dev/shm itself, is fine, and so is a group root that
// LIBSHM_ROOT_GROUP names, see check_shared_group_root), a world-writable
// directory without the sticky bit.
Result<void> check_root_is_safe(const std::string& root) {
  std::string entry = root;  // lstat of "link/" would follow the link
  while (entry.size() > 1 && entry.back() == '/') entry.pop_back();
  struct stat st {};
  if (::lstat(entry.c_str(), &st) != 0) return fail_errno(errno, "root directory " + root);
  if (S_ISLNK(st.st_mode))
    return fail(Errc::UnsafeRoot,
                shm::detail::format("root {} is a symbolic link; a root must be a directory itself "
                                    "(whoever controls the link controls where segments go)",
                                    entry));
  if (!S_ISDIR(st.st_mode))
    return fail(Errc::UnsafeRoot, shm::detail::format("root {} is not a directory", entry));
  const bool sticky = (st.st_mode & S_ISVTX) != 0;
  if (st.st_uid != ::geteuid() && !(st.st_uid == 0 && sticky)) {
    auto group = shared_root_group();
    if (!group) return std::unexpected(group.error());
    if (*group) return check_shared_group_root(entry, st, **group);
    return fail(
        Errc::UnsafeRoot,
        shm::detail::format("root {} is owned by uid {}, this process runs as uid {}: its owner "
                            "could remove or replace the segments; use a root of your own "
                            "(or a group root, see LIBSHM_ROOT_GROUP)",
                            entry, st.st_uid, ::geteuid()));
  }
  if ((st.st_mode & S_IWOTH) != 0 && !sticky)
    return fail(
        Errc::UnsafeRoot,
        shm::detail::format("root {} is world-writable (mode {:o}) without the sticky bit: any "
                            "user could remove or replace its segments",
                            entry, static_cast<unsigned>(st.st_mode & 07777)));
  return {};
}

Result<void> check_absolute(const std::string& root) {
  if (root.empty() || root.front() != '/')
    return fail(Errc::InvalidArgument,
                shm::detail::format("root directory '{}' is not an absolute path (a relative "
                                    "path would follow each process's working directory)",
                                    root));
  return {};
}

// Every std::filesystem call here takes an error_code: no exception may leave
// the library (a root whose parent cannot be searched is EACCES, not a throw).
Result<void> ensure_root(const std::string& root) {
  if (auto ok = check_absolute(root); !ok) return ok;
  std::error_code ec;
  if (std::filesystem::is_directory(root, ec)) return check_root_is_safe(root);
  if (ec && ec != std::errc::no_such_file_or_directory)
    return fail_errno(ec.value(), shm::detail::format("root directory {}", root));
  std::filesystem::create_directories(root, ec);
  if (ec) {
    std::error_code again;
    if (!std::filesystem::is_directory(root, again))  // another process may have created it
      return fail_errno(ec.value(), shm::detail::format("create root directory {}", root));
    return check_root_is_safe(root);  // created by another process meanwhile
  }
  ::chmod(root.c_str(), 0700);
  return {};
}

std::uint32_t header_crc(const SegmentHeader& h) {
  return crc32c(&h, offsetof(SegmentHeader, header_crc));
}

// Reads a shared field of the header with relaxed order: the immutable part was
// published by the creator's READY release store, paired with our acquire load
// of `state` in validate_header().
template <class T>
T relaxed(const std::atomic<T>& a) {
  return a.load(std::memory_order_relaxed);
}

}  // namespace

Result<void> validate_name(std::string_view name) {
  if (name.empty()) return fail(Errc::InvalidName, "segment name is empty");
  if (name.size() > 200)
    return fail(
        Errc::InvalidName,
        shm::detail::format("segment name is {} characters long, the limit is 200", name.size()));
  if (name == "." || name == "..")
    return fail(Errc::InvalidName, shm::detail::format("segment name '{}' is not allowed", name));
  if (name.front() == '-')
    return fail(
        Errc::InvalidName,
        shm::detail::format("segment name '{}' starts with '-'; a name may not start with '-' "
                            "(command-line tools would read it as an option)",
                            name));
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok)
      return fail(Errc::InvalidName,
                  shm::detail::format(
                      "segment name '{}' contains '{}'; allowed: [A-Za-z0-9._-]", name,
                      std::isprint(static_cast<unsigned char>(c))
                          ? std::string(1, c)
                          : shm::detail::format("\\x{:02x}", static_cast<unsigned char>(c))));
  }
  if (name.starts_with(kReservedPrefix))
    return fail(Errc::InvalidName,
                shm::detail::format("segment name '{}' uses the reserved prefix '{}'", name,
                                    kReservedPrefix));
  return {};
}

Result<void> check_root(const std::string& root) {
  if (auto ok = check_absolute(root); !ok) return ok;
  struct stat st {};
  std::string entry = root;
  while (entry.size() > 1 && entry.back() == '/') entry.pop_back();
  if (::lstat(entry.c_str(), &st) != 0 && errno == ENOENT) return {};
  return check_root_is_safe(root);
}

std::string default_root() {
  const char* env = std::getenv("LIBSHM_ROOT");
  return (env != nullptr && *env != '\0') ? std::string(env) : std::string("/dev/shm/libshm");
}

std::string_view to_string(EventType type) noexcept {
  switch (type) {
    case EventType::Created:
      return "created";
    case EventType::Attached:
      return "attached";
    case EventType::Detached:
      return "detached";
    case EventType::Takeover:
      return "takeover";
    case EventType::Fault:
      return "fault";
    case EventType::Reclaimed:
      return "reclaimed";
  }
  return "unknown";
}

void record_event(SegmentHeader& h, EventType type, std::uint32_t slot,
                  std::uint32_t detail) noexcept {
  const std::uint64_t n = h.counters.events.fetch_add(1, std::memory_order_relaxed);
  EventEntry& e = h.events[n % kEventRingSize];
  // Seqlock writer: odd while writing. Two writers 32 events apart could
  // overlap on one entry; the reader then sees a sequence mismatch and skips it.
  // [seg.E1] acq_rel exchange: the field stores below cannot move above the odd
  // marker (no fences: ThreadSanitizer does not model them); pairs with [seg.E1'].
  (void)e.seq.exchange(2 * n + 1, std::memory_order_acq_rel);
  e.time_ns.store(realtime_ns(), std::memory_order_relaxed);
  e.type.store(static_cast<std::uint32_t>(type), std::memory_order_relaxed);
  e.pid.store(static_cast<std::int32_t>(::getpid()), std::memory_order_relaxed);
  e.slot.store(slot, std::memory_order_relaxed);
  e.detail.store(detail, std::memory_order_relaxed);
  // [seg.E2] release: pairs with the reader's acquire [seg.E2'].
  e.seq.store(2 * n + 2, std::memory_order_release);
}

// ---------------------------------------------------------------- Attachment

Attachment::Attachment(Attachment&& o) noexcept
    : lock_fd_(std::move(o.lock_fd_)),
      header_(std::exchange(o.header_, nullptr)),
      slot_(o.slot_),
      generation_(o.generation_),
      fork_generation_(o.fork_generation_),
      took_over_(o.took_over_) {}

Attachment& Attachment::operator=(Attachment&& o) noexcept {
  if (this != &o) {
    detach();
    lock_fd_ = std::move(o.lock_fd_);
    header_ = std::exchange(o.header_, nullptr);
    slot_ = o.slot_;
    generation_ = o.generation_;
    fork_generation_ = o.fork_generation_;
    took_over_ = o.took_over_;
  }
  return *this;
}

Attachment::~Attachment() {
  detach();
}

void Attachment::heartbeat() noexcept {
  if (header_ != nullptr)
    header_->slots[slot_].heartbeat_ns.store(monotonic_ns(), std::memory_order_relaxed);
}

bool Attachment::copied_by_fork() const noexcept {
  return header_ != nullptr && fork_generation() != fork_generation_;
}

void Attachment::detach() noexcept {
  if (header_ == nullptr) return;
  if (copied_by_fork()) {
    // The parent still holds the slot and its lock: the kernel keeps an OFD
    // lock while any descriptor of it is open, and the parent's is.
    header_ = nullptr;
    lock_fd_ = FileHandle();
    return;
  }
  AttachmentSlot& s = header_->slots[slot_];
  s.state.store(static_cast<std::uint32_t>(SlotState::Free), std::memory_order_release);
  header_->counters.detaches.fetch_add(1, std::memory_order_relaxed);
  record_event(*header_, EventType::Detached, static_cast<std::uint32_t>(slot_),
               s.role.load(std::memory_order_relaxed));
  header_ = nullptr;
  lock_fd_ = FileHandle();  // closing the last fd of the OFD drops the lock
}

// ---------------------------------------------------------------- Segment

Result<Segment> Segment::create(std::string_view name, const KindSpec& spec,
                                const CreateOptions& options, const Initializer& init) {
  if (auto ok = validate_name(name); !ok) return std::unexpected(ok.error());
  if (spec.params.size() > kParamBytes)
    return fail(Errc::InvalidArgument,
                shm::detail::format("{} parameter block is {} bytes, limit {}", spec.kind_name,
                                    spec.params.size(), kParamBytes));
  const std::string root = resolve_root(options.root);
  if (auto ok = ensure_root(root); !ok) return std::unexpected(ok.error());
  const std::string path = join(root, name);
  const std::uint64_t total = kHeaderSize + round_up(spec.data_size, kPageSize);

  if (::access(path.c_str(), F_OK) == 0)
    return fail(Errc::AlreadyExists,
                shm::detail::format("segment '{}' already exists at {}", name, path));

  auto space = filesystem_space(root);
  if (!space) return std::unexpected(space.error());
  if (space->available_bytes < total)
    return fail(
        Errc::NoSpace,
        shm::detail::format("filesystem of {} has {} bytes free (of {}), segment '{}' needs {}; "
                            "enlarge it (Docker: --shm-size) or choose a smaller segment",
                            root, space->available_bytes, space->total_bytes, name, total));

  const std::string tmp =
      shm::detail::format("{}/{}tmp-{}-{:016x}", root, kReservedPrefix, name, random_u64());
  FileHandle fd(::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                       static_cast<mode_t>(options.mode)));
  if (!fd.valid()) return fail_errno(errno, "create " + tmp);
  struct TmpGuard {
    const std::string& p;
    bool armed = true;
    ~TmpGuard() {
      if (armed) ::unlink(p.c_str());
    }
  } guard{tmp};

  if (::fchmod(fd.get(), static_cast<mode_t>(options.mode)) != 0)
    return fail_errno(errno, "fchmod " + tmp);
  if (options.group && ::fchown(fd.get(), static_cast<uid_t>(-1), *options.group) != 0)
    return fail_errno(errno, shm::detail::format("fchown {} to gid {}", tmp, *options.group));
  if (const int rc = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(total)); rc != 0) {
    if (rc == ENOSPC)
      return fail(Errc::NoSpace,
                  shm::detail::format("filesystem of {} cannot hold segment '{}' ({} bytes)", root,
                                      name, total));
    return fail_errno(rc, "posix_fallocate " + tmp);
  }

  auto mapping = Mapping::map(fd.get(), total, true, tmp);
  if (!mapping) return std::unexpected(mapping.error());
  auto* h = reinterpret_cast<SegmentHeader*>(mapping->data());
  const ProcessId self = self_process();
  h->magic = kSegmentMagic;
  h->layout_major = kLayoutMajor;
  h->layout_minor = kLayoutMinor;
  h->kind = spec.kind;
  h->flags = options.ephemeral ? static_cast<std::uint16_t>(SegmentFlags::Ephemeral) : 0;
  h->header_size = static_cast<std::uint32_t>(kHeaderSize);
  h->params_size = static_cast<std::uint32_t>(spec.params.size());
  h->total_size = total;
  h->fingerprint = spec.fingerprint;
  h->incarnation = random_u64();
  h->creator_pid = self.pid;
  h->creator_start_time = self.start_time;
  h->creation_time_ns = realtime_ns();
  if (!spec.params.empty()) std::memcpy(h->params, spec.params.data(), spec.params.size());
  h->header_crc = header_crc(*h);
  h->state.store(static_cast<std::uint32_t>(SegmentState::Initializing), std::memory_order_relaxed);

  Segment seg;
  seg.fd_ = std::move(fd);
  seg.mapping_ = std::move(*mapping);
  seg.name_ = std::string(name);
  seg.path_ = path;
  if (init) {
    if (auto ok = init(seg.data()); !ok) return std::unexpected(ok.error());
  }
  // [seg.R] release: publishes header + data initialisation; pairs with [seg.R'] in
  // validate_header().
  h->state.store(static_cast<std::uint32_t>(SegmentState::Ready), std::memory_order_release);

  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) != 0) {
    if (errno == EEXIST)
      return fail(Errc::AlreadyExists,
                  shm::detail::format("segment '{}' already exists at {}", name, path));
    if (errno != EINVAL && errno != ENOSYS) return fail_errno(errno, "publish " + path);
    // Filesystem without RENAME_NOREPLACE: link() also refuses to replace.
    if (::link(tmp.c_str(), path.c_str()) != 0) {
      if (errno == EEXIST)
        return fail(Errc::AlreadyExists,
                    shm::detail::format("segment '{}' already exists at {}", name, path));
      return fail_errno(errno, "publish " + path);
    }
    ::unlink(tmp.c_str());
  }
  guard.armed = false;
  struct stat st {};
  ::fstat(seg.fd_.get(), &st);
  seg.dev_ = st.st_dev;
  seg.ino_ = st.st_ino;
  shm::record_event(*h, EventType::Created, 0, spec.kind);
  return seg;
}

Result<Segment> Segment::open_file(std::string_view name, const OpenOptions& options) {
  if (auto ok = validate_name(name); !ok) return std::unexpected(ok.error());
  const std::string root = resolve_root(options.root);
  if (auto ok = check_root(root); !ok) return std::unexpected(ok.error());
  const std::string path = join(root, name);
  // O_NONBLOCK: a FIFO planted under a segment's name must not block the open
  // (fstat below refuses it); for a regular file the flag changes nothing.
  const int flags = (options.read_only ? O_RDONLY : O_RDWR) | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK;
  FileHandle fd(::open(path.c_str(), flags));
  if (!fd.valid()) {
    const int err = errno;
    if (err == ENOENT)
      return fail(Errc::NotFound, shm::detail::format("segment '{}' not found in {}", name, root));
    if (err == ELOOP)
      return fail(Errc::NotRegularFile,
                  shm::detail::format(
                      "{} is a symbolic link; segments are never followed through links", path));
    return fail_errno(err, "open " + path);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return fail_errno(errno, "fstat " + path);
  if (!S_ISREG(st.st_mode))
    return fail(Errc::NotRegularFile, shm::detail::format("{} is not a regular file (mode {:o})",
                                                          path, static_cast<unsigned>(st.st_mode)));
  if (st.st_uid != ::geteuid() && !options.allow_other_owner)
    return fail(Errc::WrongOwner,
                shm::detail::format("{} is owned by uid {}, this process runs as uid {}; pass "
                                    "allow_other_owner to trust it",
                                    path, st.st_uid, ::geteuid()));
  // The version is checked before the rest of the header is trusted to be
  // there: a segment of another layout (its header may be shorter) is a
  // VersionMismatch, not a Truncated.
  if (static_cast<std::uint64_t>(st.st_size) < kHeaderPrefix)
    return fail(Errc::Truncated,
                shm::detail::format("{} has {} bytes, less than the {}-byte header", path,
                                    st.st_size, kHeaderSize));
  auto mapping =
      Mapping::map(fd.get(), static_cast<std::size_t>(st.st_size), !options.read_only, path);
  if (!mapping) return std::unexpected(mapping.error());
  Segment seg;
  seg.fd_ = std::move(fd);
  seg.mapping_ = std::move(*mapping);
  seg.name_ = std::string(name);
  seg.path_ = path;
  seg.dev_ = st.st_dev;
  seg.ino_ = st.st_ino;
  if (auto ok = seg.validate_header(options); !ok) return std::unexpected(ok.error());
  return seg;
}

Result<void> Segment::validate_header(const OpenOptions& options) const {
  const SegmentHeader& h = header();
  if (h.magic != kSegmentMagic)
    return fail(
        Errc::BadMagic,
        shm::detail::format("{}: magic is {:#018x}, expected {:#018x} (not a libshm segment)",
                            path_, h.magic, kSegmentMagic));
  if (h.layout_major != kLayoutMajor)
    return fail(
        Errc::VersionMismatch,
        shm::detail::format("{}: layout version: segment has {}.{}, this library speaks {}.{}",
                            path_, h.layout_major, h.layout_minor, kLayoutMajor, kLayoutMinor));
  if (mapping_.size() < kHeaderSize)
    return fail(Errc::Truncated,
                shm::detail::format("{} has {} bytes, less than the {}-byte header", path_,
                                    mapping_.size(), kHeaderSize));
  // [seg.R'] acquire: pairs with the creator's READY release [seg.R]; after it the
  // immutable header and the kind's initial data are visible.
  const auto deadline = std::chrono::steady_clock::now() + options.ready_wait;
  std::uint32_t state = h.state.load(std::memory_order_acquire);
  while (state == static_cast<std::uint32_t>(SegmentState::Initializing) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    state = h.state.load(std::memory_order_acquire);
  }
  if (state == static_cast<std::uint32_t>(SegmentState::Initializing))
    return fail(Errc::NotReady,
                shm::detail::format("{}: still INITIALIZING after {} ms (creator pid {} "
                                    "may have died while creating it)",
                                    path_, options.ready_wait.count(), h.creator_pid));
  if (state != static_cast<std::uint32_t>(SegmentState::Ready))
    return fail(Errc::HeaderCorrupt,
                shm::detail::format("{}: state word is {}, expected READY ({})", path_, state,
                                    static_cast<std::uint32_t>(SegmentState::Ready)));
  if (const std::uint32_t crc = header_crc(h); crc != h.header_crc)
    return fail(Errc::HeaderCorrupt,
                shm::detail::format("{}: header CRC: segment has {:#010x}, computed {:#010x}",
                                    path_, h.header_crc, crc));
  if (h.header_size != kHeaderSize)
    return fail(Errc::HeaderCorrupt,
                shm::detail::format("{}: header size: segment has {}, expected {}", path_,
                                    h.header_size, kHeaderSize));
  if (h.params_size > kParamBytes)
    return fail(Errc::HeaderCorrupt,
                shm::detail::format("{}: parameter block: segment has {} bytes, limit {}", path_,
                                    h.params_size, kParamBytes));
  if (h.total_size < mapping_.size())
    return fail(Errc::SizeMismatch,
                shm::detail::format("{}: size: header states {} bytes, file has {}", path_,
                                    h.total_size, mapping_.size()));
  if (h.total_size > mapping_.size())
    return fail(Errc::Truncated,
                shm::detail::format("{}: size: header states {} bytes, file has only {}", path_,
                                    h.total_size, mapping_.size()));
  return {};
}

Result<Segment> Segment::open_any(std::string_view name, const OpenOptions& options) {
  return open_file(name, options);
}

Result<Segment> Segment::open(std::string_view name, const KindSpec& expected,
                              const OpenOptions& options) {
  auto seg = open_file(name, options);
  if (!seg) return seg;
  if (auto ok = detail::check_kind(*seg, expected); !ok) return std::unexpected(ok.error());
  if (expected.param_mismatch) {
    const std::string why = expected.param_mismatch(seg->params(), expected.params);
    if (!why.empty())
      return fail(Errc::ParamMismatch, shm::detail::format("{}: {}", seg->path(), why));
  }
  if (expected.data_size != 0) {
    auto ok =
        detail::check_total_size(*seg, expected.data_size,
                                 shm::detail::format("its {} parameters need", expected.kind_name));
    if (!ok) return std::unexpected(std::move(ok.error()));
  }
  return seg;
}

Result<void> detail::check_kind(const Segment& seg, const KindSpec& expected) {
  if (seg.fd() < 0)
    return fail(Errc::InvalidArgument,
                shm::detail::format("attach: the {} segment given is empty (default-constructed "
                                    "or moved from)",
                                    expected.kind_name));
  const SegmentHeader& h = seg.header();
  if (h.kind != expected.kind) {
    const KindDescriptor* found = find_kind(h.kind);
    return fail(Errc::KindMismatch,
                shm::detail::format("{}: kind: segment has {} ({}), caller expects {} ({})",
                                    seg.path(), found != nullptr ? found->name : "an unknown kind",
                                    h.kind, expected.kind_name, expected.kind));
  }
  if (h.fingerprint != expected.fingerprint)
    return fail(Errc::FingerprintMismatch,
                shm::detail::format(
                    "{}: {} layout fingerprint: segment has {:#018x}, this build has {:#018x} "
                    "(built from a different layout)",
                    seg.path(), expected.kind_name, h.fingerprint, expected.fingerprint));
  return {};
}

Result<void> detail::check_total_size(const Segment& seg, std::uint64_t data_size,
                                      std::string_view needs) {
  const std::uint64_t needed = kHeaderSize + round_up(data_size, kPageSize);
  if (seg.header().total_size != needed)
    return fail(Errc::SizeMismatch,
                shm::detail::format("{}: size: segment has {} bytes, {} {}", seg.path(),
                                    seg.header().total_size, needs, needed));
  return {};
}

Result<Attachment> Segment::attach(const RoleSpec& role) {
  if (!writable())
    return fail(Errc::InvalidArgument,
                shm::detail::format("{}: attach needs a writable mapping", path_));
  if (role.exclusive && role.id >= kExclusiveSlots)
    return fail(Errc::InvalidArgument, shm::detail::format("exclusive role {} has id {}, limit {}",
                                                           role.name, role.id, kExclusiveSlots));
  auto lock_fd = reopen(fd_.get(), true);
  if (!lock_fd) return std::unexpected(lock_fd.error());
  SegmentHeader* h = mutable_header();

  std::size_t first = role.id;
  std::size_t last = role.id + 1;
  if (!role.exclusive) {
    first = kExclusiveSlots;
    last = kMaxAttachments;
  }
  // Non-exclusive roles prefer never-used/free slots, so a dead holder's record
  // stays visible to the sidecar for reclaim as long as possible.
  std::optional<std::size_t> won;
  for (int pass = 0; pass < 2 && !won; ++pass) {
    for (std::size_t i = first; i < last; ++i) {
      const bool free = relaxed(h->slots[i].state) == static_cast<std::uint32_t>(SlotState::Free);
      if (!role.exclusive && pass == 0 && !free) continue;
      auto got = try_lock_byte(lock_fd->get(), slot_lock_offset(i));
      if (!got) return std::unexpected(got.error());
      if (*got) {
        won = i;
        break;
      }
    }
  }
  if (!won) {
    if (role.exclusive) {
      const AttachmentSlot& s = h->slots[role.id];
      const std::int32_t pid = relaxed(s.pid);
      return fail(Errc::RoleTaken,
                  shm::detail::format("{}: role '{}' is held by live pid {} ({})", path_, role.name,
                                      pid, process_cmdline(pid)));
    }
    return fail(Errc::NoFreeSlot,
                shm::detail::format("{}: all {} shared attachment slots are held by live "
                                    "processes",
                                    path_, kMaxAttachments - kExclusiveSlots));
  }
  // We hold the slot's kernel lock: we are its only writer from here on.
  AttachmentSlot& s = h->slots[*won];
  const bool takeover = relaxed(s.state) == static_cast<std::uint32_t>(SlotState::Attached);
  const ProcessId self = self_process();
  s.role.store(role.id, std::memory_order_relaxed);
  s.pid.store(self.pid, std::memory_order_relaxed);
  s.start_time.store(self.start_time, std::memory_order_relaxed);
  s.attach_time_ns.store(realtime_ns(), std::memory_order_relaxed);
  s.heartbeat_ns.store(monotonic_ns(), std::memory_order_relaxed);
  const std::uint32_t generation = s.generation.fetch_add(1, std::memory_order_relaxed) + 1;
  // [seg.A] release: readers that acquire-load `state` see the fields above.
  s.state.store(static_cast<std::uint32_t>(SlotState::Attached), std::memory_order_release);
  h->counters.attaches.fetch_add(1, std::memory_order_relaxed);
  if (takeover) h->counters.takeovers.fetch_add(1, std::memory_order_relaxed);
  shm::record_event(*h, takeover ? EventType::Takeover : EventType::Attached,
                    static_cast<std::uint32_t>(*won), role.id);

  Attachment a;
  a.lock_fd_ = std::move(*lock_fd);
  a.header_ = h;
  a.slot_ = *won;
  a.generation_ = generation;
  a.fork_generation_ = fork_generation();
  a.took_over_ = takeover;
  return a;
}

bool Segment::stale() const {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) return true;
  return static_cast<std::uint64_t>(st.st_dev) != dev_ ||
         static_cast<std::uint64_t>(st.st_ino) != ino_;
}

Result<void> Segment::unlink() const {
  if (stale())
    return fail(Errc::NotFound, shm::detail::format("{} no longer names this segment", path_));
  if (::unlink(path_.c_str()) != 0) return fail_errno(errno, "unlink " + path_);
  return {};
}

Result<void> Segment::unlink(std::string_view name, const std::string& root) {
  if (auto ok = validate_name(name); !ok) return std::unexpected(ok.error());
  const std::string r = resolve_root(root);
  if (auto ok = check_root(r); !ok) return std::unexpected(ok.error());
  const std::string path = join(r, name);
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT)
      return fail(Errc::NotFound, shm::detail::format("segment '{}' not found in {}", name, r));
    return fail_errno(errno, "unlink " + path);
  }
  return {};
}

Liveness Segment::liveness(std::size_t slot) const {
  if (slot >= kMaxAttachments) return Liveness::Free;
  auto probe = probe_byte(fd_.get(), slot_lock_offset(slot));
  const bool held = probe && *probe == LockProbe::Held;
  // [seg.A'] acquire: pairs with [seg.A] in attach().
  const bool attached = header().slots[slot].state.load(std::memory_order_acquire) ==
                        static_cast<std::uint32_t>(SlotState::Attached);
  if (held) return Liveness::Alive;  // attached, or attaching right now
  return attached ? Liveness::Dead : Liveness::Free;
}

namespace {

// Which slots' lock bytes another open file description holds, in as few
// F_OFD_GETLK calls as there are locks (two per lock and one more at most),
// not one per slot: a probe of a range of slot bytes returns one lock in it,
// and the slots on either side of that lock are probed again.
std::bitset<kMaxAttachments> held_slots(int fd) {
  std::bitset<kMaxAttachments> held;
  std::vector<std::pair<std::size_t, std::size_t>> todo{{0, kMaxAttachments}};
  while (!todo.empty()) {
    const auto [lo, hi] = todo.back();
    todo.pop_back();
    if (lo >= hi) continue;
    const std::uint64_t first = slot_lock_offset(lo);
    auto lock = probe_range(fd, first, slot_lock_offset(hi - 1) + 1 - first);
    if (!lock) {  // cannot probe ranges: one slot at a time, as liveness() does
      for (std::size_t i = lo; i < hi; ++i) {
        auto probe = probe_byte(fd, slot_lock_offset(i));
        held[i] = probe && *probe == LockProbe::Held;
      }
      continue;
    }
    if (!*lock) continue;
    // The slots whose byte the lock covers: [a, b). Those before and after it
    // lie outside the lock, so every probe makes progress.
    std::size_t a = lo;
    while (a < hi && slot_lock_offset(a) < (*lock)->start) ++a;
    std::size_t b = a;
    for (; b < hi && slot_lock_offset(b) < (*lock)->end; ++b) held[b] = true;
    todo.emplace_back(lo, a);
    todo.emplace_back(b, hi);
  }
  return held;
}

}  // namespace

std::vector<SlotInfo> Segment::slots() const {
  std::vector<SlotInfo> out;
  // Probed before the states are loaded, as in liveness().
  const std::bitset<kMaxAttachments> held = held_slots(fd_.get());
  for (std::size_t i = 0; i < kMaxAttachments; ++i) {
    const AttachmentSlot& s = header().slots[i];
    // [seg.A'] acquire: pairs with [seg.A] in attach().
    const auto state = static_cast<SlotState>(s.state.load(std::memory_order_acquire));
    const Liveness live = held[i]                        ? Liveness::Alive
                          : state == SlotState::Attached ? Liveness::Dead
                                                         : Liveness::Free;
    if (state == SlotState::Free && live == Liveness::Free) continue;
    out.push_back(SlotInfo{i, state, relaxed(s.role), relaxed(s.pid), relaxed(s.start_time),
                           relaxed(s.generation), relaxed(s.attach_time_ns),
                           relaxed(s.heartbeat_ns), live});
  }
  return out;
}

std::vector<EventInfo> Segment::events() const {
  const SegmentHeader& h = header();
  const std::uint64_t end = h.counters.events.load(std::memory_order_acquire);
  const std::uint64_t begin = end > kEventRingSize ? end - kEventRingSize : 0;
  std::vector<EventInfo> out;
  for (std::uint64_t n = begin; n < end; ++n) {
    const EventEntry& e = h.events[n % kEventRingSize];
    // [seg.E2'] acquire: pairs with [seg.E2].
    const std::uint64_t s1 = e.seq.load(std::memory_order_acquire);
    // [seg.E1'] acquire loads keep the re-read of seq below after them; a writer
    // that started meanwhile ([seg.E1]) changed seq, and the entry is skipped.
    constexpr auto acq = std::memory_order_acquire;
    EventInfo info{n,
                   e.time_ns.load(acq),
                   static_cast<EventType>(e.type.load(acq)),
                   e.pid.load(acq),
                   e.slot.load(acq),
                   e.detail.load(acq)};
    const std::uint64_t s2 = e.seq.load(std::memory_order_relaxed);
    if (s1 == s2 && s1 == 2 * n + 2) out.push_back(info);
  }
  return out;
}

void Segment::record_event(EventType type, std::uint32_t slot,
                           std::uint32_t detail) const noexcept {
  if (writable()) shm::record_event(*mutable_header(), type, slot, detail);
}

}  // namespace shm
