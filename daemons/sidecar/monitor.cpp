// The monitor's duty cycle (do_work) and discovery: the root's free space,
// inotify, rescans, opening and re-validating the segments it tracks. The
// work on each segment is in monitor_observe.cpp, the views in
// monitor_snapshot.cpp.
#include "sidecar/monitor.hpp"

#include "sidecar/monitor_internal.hpp"

#include "shm/platform/clock.hpp"
#include "shm/platform/crc32c.hpp"
#include "shm/platform/process.hpp"
#include "shm/platform/truncation_guard.hpp"

#include <fmt/format.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <exception>
#include <set>

namespace shm::sidecar {
namespace {

constexpr std::uint32_t kWatchMask = IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE |
                                     IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR;

}  // namespace

using namespace detail;

Monitor::Monitor(MonitorOptions options, const Logger& log)
    : options_(std::move(options)), log_(log) {
  root_ = options_.root.empty() ? default_root() : options_.root;
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
  if (options_.use_inotify) {
    inotify_ = FileHandle(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
    if (!inotify_.valid())
      log_.warn("inotify_unavailable")
          .kv("error", std::string(std::strerror(errno)))
          .kv("fallback_rescan_ms", static_cast<std::int64_t>(options_.rescan_every.count()));
  }
  // Reads of tracked segments run under TruncationGuard scopes (do_work).
  if (auto ok = TruncationGuard::install(); !ok)
    log_.warn("truncation_guard_unavailable")
        .kv("error", ok.error().what())
        .kv("effect", "a segment file truncated while being read kills the sidecar (SIGBUS)");
}

Monitor::Monitor(Monitor&&) noexcept = default;
Monitor::~Monitor() = default;

int Monitor::wake_fd() const noexcept {
  return inotify_.valid() ? inotify_.get() : -1;
}

const SegmentView* Monitor::find(std::string_view name) const noexcept {
  for (const SegmentView& v : snapshot_)
    if (v.name == name) return &v;
  return nullptr;
}

void Monitor::check_space() {
  struct statvfs fs {};
  if (::statvfs(root_.c_str(), &fs) != 0) {
    space_.known = false;  // the root is missing: logged by rescan()
    return;
  }
  const std::uint64_t unit = fs.f_frsize != 0 ? fs.f_frsize : fs.f_bsize;
  RootSpace now;
  now.known = true;
  now.size_bytes = static_cast<std::uint64_t>(fs.f_blocks) * unit;
  now.free_bytes = static_cast<std::uint64_t>(fs.f_bavail) * unit;
  now.free_inodes = fs.f_favail;
  // f_files == 0: the filesystem does not count inodes (it never runs out).
  now.full = now.free_bytes < static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)) ||
             (fs.f_files != 0 && fs.f_favail == 0);
  if (now.full && !space_.full) {
    ++stats_.root_full;
    log_.warn("root_full")
        .kv("root", root_)
        .kv("free_bytes", now.free_bytes)
        .kv("size_bytes", now.size_bytes)
        .kv("free_inodes", now.free_inodes)
        .kv("effect", "new segments and segment growth fail with ENOSPC");
  } else if (!now.full && space_.full) {
    log_.info("root_space_available")
        .kv("root", root_)
        .kv("free_bytes", now.free_bytes)
        .kv("free_inodes", now.free_inodes);
  }
  space_ = now;
}

void Monitor::watch_root() {
  if (!inotify_.valid() || watch_ >= 0) return;
  watch_ = ::inotify_add_watch(inotify_.get(), root_.c_str(), kWatchMask);
  if (watch_ >= 0) rescan_due_ = true;  // anything created before the watch
}

void Monitor::drain_inotify() {
  if (!inotify_.valid()) return;
  alignas(inotify_event) std::array<char, 4096> buf;
  for (;;) {
    const ssize_t n = ::read(inotify_.get(), buf.data(), buf.size());
    if (n <= 0) break;  // EAGAIN: drained
    std::size_t off = 0;
    while (off + sizeof(inotify_event) <= static_cast<std::size_t>(n)) {
      inotify_event ev;
      std::memcpy(&ev, buf.data() + off, sizeof ev);
      off += sizeof(inotify_event) + ev.len;
      rescan_due_ = true;
      if ((ev.mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF)) != 0 && ev.wd == watch_) {
        if ((ev.mask & IN_IGNORED) == 0) ::inotify_rm_watch(inotify_.get(), watch_);
        watch_ = -1;  // the root went away; watched again once it is back
      }
    }
  }
}

void Monitor::do_work() {
  const std::uint64_t start = monotonic_ns();
  const std::uint64_t cycle = ++stats_.cycles;
  try {
    check_space();
    watch_root();
    drain_inotify();
    const auto rescan_every_ns = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(options_.rescan_every).count());
    if (start - last_rescan_ns_ >= rescan_every_ns) rescan_due_ = true;  // the fallback
    observe_all(cycle);
    take_snapshot();
  } catch (const std::exception& e) {
    log_.error("cycle_failed").kv("error", e.what());
  }
  stats_.last_cycle_ns = monotonic_ns() - start;
}
void Monitor::rescan() {
  rescan_due_ = false;
  last_rescan_ns_ = monotonic_ns();
  ++stats_.rescans;
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(root_.c_str()), ::closedir);
  if (!dir) {
    if (!root_missing_logged_)
      log_.warn("root_unreadable").kv("root", root_).kv("error", std::string(std::strerror(errno)));
    root_missing_logged_ = true;
    unreadable_.clear();
    return;  // tracked segments notice on their own that their file is gone
  }
  if (root_missing_logged_) log_.info("root_available").kv("root", root_);
  root_missing_logged_ = false;
  watch_root();

  std::set<std::string> names;
  while (const dirent* e = ::readdir(dir.get())) {
    const std::string_view n(e->d_name);
    if (n == "." || n == ".." || n.starts_with(kReservedPrefix)) continue;
    if (e->d_type == DT_DIR) continue;
    names.emplace(n);
  }
  for (auto it = unreadable_.begin(); it != unreadable_.end();) {
    if (names.contains(it->first)) {
      ++it;
    } else {
      log_.info("segment_removed").kv("segment", it->first).kv("was", "unreadable");
      it = unreadable_.erase(it);
    }
  }
  for (const std::string& name : names)
    if (!tracked_.contains(name)) try_open(name);
}

void Monitor::try_open(const std::string& name) {
  std::string problem;
  Errc code = Errc::InvalidName;
  if (auto ok = validate_name(name); !ok) {
    problem = ok.error().message;
  } else {
    OpenOptions o;
    o.root = root_;
    o.read_only = true;
    o.allow_other_owner = true;
    o.ready_wait = std::chrono::milliseconds(0);  // a published segment is READY; never wait
    // open_any() checks the size, then reads the header: the file may shrink
    // in between (see do_work()).
    const TruncationGuard::Scope guard;
    auto seg = Segment::open_any(name, o);
    if (seg && guard.hit()) {
      problem = "the file shrank while it was being opened";
      code = Errc::Truncated;
    } else if (seg) {
      struct stat st {};
      if (::fstat(seg->fd(), &st) != 0) {
        problem = fmt::format("fstat: {}", std::strerror(errno));
        code = Errc::SystemError;
      } else {
        unreadable_.erase(name);
        Tracked t;
        t.dev = st.st_dev;
        t.ino = st.st_ino;
        const SegmentHeader& h = seg->header();
        t.descriptor = find_kind(h.kind);
        t.layout_ok = t.descriptor != nullptr && t.descriptor->fingerprint == h.fingerprint;
        if (t.descriptor == nullptr)
          log_.warn("unknown_kind")
              .kv("segment", name)
              .kv("kind_id", static_cast<std::uint64_t>(h.kind))
              .kv("action", "observed generically; dead attachers are reported, not reclaimed");
        else if (!t.layout_ok)
          log_.warn("layout_mismatch")
              .kv("segment", name)
              .kv("kind", std::string(t.descriptor->name))
              .kv("segment_fingerprint", fmt::format("{:#018x}", h.fingerprint))
              .kv("build_fingerprint", fmt::format("{:#018x}", t.descriptor->fingerprint))
              .kv("action", "observed generically; dead attachers are reported, not reclaimed");
        ++stats_.discovered;
        log_.info("segment_discovered")
            .kv("segment", name)
            .kv("kind", std::string(t.descriptor ? t.descriptor->name : "unknown"))
            .kv("size", h.total_size)
            .kv("ephemeral", (h.flags & static_cast<std::uint16_t>(SegmentFlags::Ephemeral)) != 0)
            .kv("incarnation", fmt::format("{:016x}", h.incarnation));
        t.segment = std::move(*seg);
        tracked_.emplace(name, std::move(t));
        return;
      }
    } else {
      problem = seg.error().message;
      code = seg.error().code;
    }
  }
  Unreadable& u = unreadable_[name];
  const std::string error = fmt::format("{}: {}", to_string(code), problem);
  if (u.error != error) {
    ++stats_.unreadable;
    log_.warn("segment_unreadable")
        .kv("segment", name)
        .kv("code", std::string(to_string(code)))
        .kv("error", problem);
    u.error = error;
  }
}

bool Monitor::still_valid(const std::string& name, Tracked& t) {
  const Segment& seg = t.segment;
  struct stat st {};
  if (::fstatat(AT_FDCWD, seg.path().c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    const int err = errno;
    ++stats_.removed;
    if (err == ENOENT)
      log_.info("segment_removed").kv("segment", name);
    else
      log_.warn("segment_removed").kv("segment", name).kv("error", std::string(std::strerror(err)));
    return false;
  }
  if (static_cast<std::uint64_t>(st.st_ino) != t.ino ||
      static_cast<std::uint64_t>(st.st_dev) != t.dev) {
    ++stats_.removed;
    log_.info("segment_replaced")
        .kv("segment", name)
        .kv("reason", "the name now points to another file");
    return false;
  }
  // A file shrunk under our mapping would fault (SIGBUS) on the next read of
  // the lost pages: check before reading anything.
  struct stat own {};
  const std::uint64_t mapped = kHeaderSize + seg.data().size();
  if (::fstat(seg.fd(), &own) != 0 || static_cast<std::uint64_t>(own.st_size) < mapped) {
    ++stats_.removed;
    log_.error("segment_truncated")
        .kv("segment", name)
        .kv("mapped_bytes", mapped)
        .kv("file_bytes", static_cast<std::int64_t>(own.st_size));
    return false;
  }
  const SegmentHeader& h = seg.header();
  const std::uint32_t crc = crc32c(&h, offsetof(SegmentHeader, header_crc));
  if (h.magic != kSegmentMagic || crc != h.header_crc) {
    ++stats_.removed;
    log_.error("segment_corrupt")
        .kv("segment", name)
        .kv("error",
            h.magic != kSegmentMagic
                ? fmt::format("magic is {:#018x}, expected {:#018x}", h.magic, kSegmentMagic)
                : fmt::format("header CRC: segment has {:#010x}, computed {:#010x}", h.header_crc,
                              crc));
    return false;
  }
  return true;
}

void Monitor::truncated_while_read(const std::string& name, bool count_removal) {
  if (count_removal) ++stats_.removed;  // else still_valid() already counted it
  log_.error("segment_truncated")
      .kv("segment", name)
      .kv("reason", "the file shrank while it was being read; what was read is discarded");
}

}  // namespace shm::sidecar
