// The sidecar's duty cycle. Monitor::do_work() runs one pass over the root:
//
//   1. drain inotify (segments published, removed, renamed) and rescan the
//      directory when it changed or when the periodic fallback is due;
//   2. for every known segment: check it is still the file we mapped (not
//      removed, replaced, truncated or scribbled over), read every attacher's
//      liveness from the kernel locks (Segment::slots()), mark a live attacher
//      stuck when its role has work waiting and its progress (the kind's
//      positions and counters) has not moved for `stuck_after`, and reclaim a dead
//      one through shm::reclaim_dead_attacher() (the kind's reclaim() under the
//      slot's lock, then the slot freed and a Reclaimed event recorded in the
//      segment; `shmctl reclaim` takes the same path);
//   3. optionally collect ephemeral segments whose attachers are all gone;
//   4. snapshot what it saw (describe trees, counts) for /metrics and /status.
//
// Segments are mapped read-only for observation; a writable mapping is opened
// only for the moment of a reclaim or a collection. Nothing here waits on
// anything a producer or consumer holds, so the data path runs the same with or
// without the sidecar. Kinds are seen only through the descriptor table
// (shm/segment/kind.hpp). Tests drive do_work() step by step.
#pragma once

#include "sidecar/log.hpp"

#include "shm/error.hpp"
#include "shm/platform/file.hpp"
#include "shm/segment/describe.hpp"
#include "shm/segment/kind.hpp"
#include "shm/segment/segment.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shm::sidecar {

struct MonitorOptions {
  std::string root;  // empty: shm::default_root()
  // A live attacher whose role has work waiting and whose progress has not
  // moved for longer than this is reported stuck (never dead: only the
  // kernel lock says dead). 0 disables.
  std::chrono::milliseconds stuck_after{5000};
  // Directory rescan fallback when inotify says nothing (or is unavailable).
  std::chrono::milliseconds rescan_every{2000};
  // Unlink segments created ephemeral once every attacher is dead.
  bool gc_ephemeral = false;
  bool use_inotify = true;
  // Tests only: runs after a tracked segment passed its per-cycle checks and
  // before it is read (a test shrinks the file there).
  std::function<void(const std::string& name)> before_reading;
};

struct AttacherView {
  std::size_t slot = 0;
  std::string role;
  std::int32_t pid = 0;
  std::uint32_t generation = 0;
  Liveness liveness = Liveness::Free;
  bool stuck = false;
  std::uint64_t stalled_ms = 0;  // work waiting and no progress for this long (0: none waiting)
  std::uint64_t heartbeat_age_ms = 0;
};

// What one pass saw of one file in the root.
struct SegmentView {
  std::string name;
  bool up = false;               // mapped, valid, observed this cycle
  std::string error;             // why it is not up
  std::string kind = "unknown";  // descriptor name
  bool kind_known = false;       // kind in the table and layout fingerprint matches
  std::uint64_t size = 0;
  bool ephemeral = false;
  std::string incarnation;
  // alive + stuck + dead partition the attachers (as /metrics and /status show them).
  std::uint64_t alive = 0;  // holding their lock and not stuck
  std::uint64_t stuck = 0;  // holding their lock, work waiting, no progress for stuck_after
  std::uint64_t dead = 0;   // attached, lock gone, not reclaimed (yet)
  std::uint64_t attaches = 0, detaches = 0, takeovers = 0, faults = 0, events = 0;
  std::vector<AttacherView> attachers;
  Node header;  // describe_header()
  Node detail;  // the kind's describe(); empty object when the kind is unknown
};

struct MonitorStats {
  std::uint64_t cycles = 0;
  std::uint64_t rescans = 0;
  std::uint64_t discovered = 0;  // segments that appeared
  std::uint64_t removed = 0;     // segments that vanished or were replaced
  std::uint64_t unreadable = 0;  // open/validation failures (each distinct one)
  std::uint64_t deaths = 0;      // dead attachers detected
  std::uint64_t reclaims = 0;    // slots freed by us
  std::uint64_t reclaim_failures = 0;
  std::uint64_t stuck_detections = 0;
  std::uint64_t collected = 0;      // ephemeral segments unlinked
  std::uint64_t root_full = 0;      // times the root's filesystem was seen becoming full
  std::uint64_t last_cycle_ns = 0;  // duration of the last do_work()
};

// Space left on the filesystem holding the root (statvfs, each cycle): what
// a producer needs to create a segment. Full: less than a page available to
// unprivileged users, or no inode left.
struct RootSpace {
  bool known = false;  // statvfs succeeded (false while the root is missing)
  std::uint64_t size_bytes = 0;
  std::uint64_t free_bytes = 0;  // available to unprivileged users (f_bavail)
  std::uint64_t free_inodes = 0;
  bool full = false;
};

class Monitor {
 public:
  Monitor(MonitorOptions options, const Logger& log);
  Monitor(Monitor&&) noexcept;
  Monitor& operator=(Monitor&&) = delete;
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;
  ~Monitor();

  // One duty cycle (see the top of this file). Never throws; every problem
  // with a segment is logged and the pass continues.
  void do_work();

  // Readable when the root changed (inotify); -1 without inotify. Polling it
  // lets a daemon run do_work() as soon as a segment appears.
  [[nodiscard]] int wake_fd() const noexcept;
  // Forces a directory rescan on the next do_work().
  void request_rescan() noexcept { rescan_due_ = true; }

  [[nodiscard]] const std::string& root() const noexcept { return root_; }
  [[nodiscard]] const MonitorOptions& options() const noexcept { return options_; }
  // Segments as of the last do_work(), sorted by name (unreadable files included).
  [[nodiscard]] const std::vector<SegmentView>& snapshot() const noexcept { return snapshot_; }
  [[nodiscard]] const SegmentView* find(std::string_view name) const noexcept;
  [[nodiscard]] const MonitorStats& stats() const noexcept { return stats_; }
  [[nodiscard]] const RootSpace& root_space() const noexcept { return space_; }

 private:
  struct SlotMemo {
    std::uint32_t generation = 0;
    bool stuck = false;
    std::uint64_t progress = 0;          // the role's progress at the last look
    std::uint64_t stalled_since_ns = 0;  // waiting, progress unchanged since; 0: not waiting
    bool death_seen = false;
    bool reclaim_failed = false;
  };
  struct Tracked {
    Segment segment;
    std::uint64_t dev = 0;
    std::uint64_t ino = 0;
    const KindDescriptor* descriptor = nullptr;  // from the kind id; null when unknown
    bool layout_ok = false;                      // descriptor's fingerprint matches the segment
    std::map<std::size_t, SlotMemo> slots;
    std::uint64_t observed_cycle = 0;
    bool reclaim_skip_logged = false;

    // The descriptor, when this build may act on the segment's layout.
    [[nodiscard]] const KindDescriptor* kind() const noexcept {
      return layout_ok ? descriptor : nullptr;
    }
  };
  struct Unreadable {
    std::string error;
  };

  // Reads the root's free space; logs root_full / root_space_available on a change.
  void check_space();
  void drain_inotify();
  void watch_root();
  void rescan();
  void try_open(const std::string& name);
  // False when the segment must be dropped (gone, replaced, truncated, corrupt).
  bool still_valid(const std::string& name, Tracked& t);
  // Logs (and counts, unless already counted) a segment whose file shrank
  // during a guarded read.
  void truncated_while_read(const std::string& name, bool count_removal);
  // The tracked segments, two passes at most (a segment replaced under its
  // name is dropped in the first and its successor discovered in the second).
  void observe_all(std::uint64_t cycle);
  void observe(const std::string& name, Tracked& t);
  [[nodiscard]] bool judge_stuck(const Tracked& t, const SlotInfo& s, SlotMemo& memo,
                                 std::uint64_t now, std::uint64_t stuck_ns) const;
  void handle_dead(const std::string& name, Tracked& t, const SlotInfo& slot, SlotMemo& memo);
  // True when the segment was unlinked.
  bool maybe_collect(const std::string& name, Tracked& t);
  // snapshot_: a view of every tracked and unreadable file, sorted by name.
  void take_snapshot();
  void build_view(const std::string& name, Tracked& t);

  MonitorOptions options_;
  const Logger& log_;
  std::string root_;
  FileHandle inotify_;
  int watch_ = -1;
  bool rescan_due_ = true;
  bool root_missing_logged_ = false;
  std::uint64_t last_rescan_ns_ = 0;
  std::map<std::string, Tracked> tracked_;
  std::map<std::string, Unreadable> unreadable_;
  std::vector<SegmentView> snapshot_;
  MonitorStats stats_;
  RootSpace space_;
};

}  // namespace shm::sidecar
