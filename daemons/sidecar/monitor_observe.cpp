// The monitor's work on one segment: liveness of every attacher, stuck
// detection, reclaim of the dead, collection of ephemeral segments.
#include "sidecar/monitor.hpp"
#include "sidecar/monitor_internal.hpp"

#include "shm/platform/clock.hpp"
#include "shm/platform/process.hpp"
#include "shm/platform/truncation_guard.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <exception>
#include <set>

namespace shm::sidecar {

using namespace detail;

void Monitor::observe_all(std::uint64_t cycle) {
  // Two passes at most: a segment replaced under its name is dropped in the
  // first and its successor discovered in the second.
  for (int pass = 0; pass < 2; ++pass) {
    if (rescan_due_) rescan();
    for (auto it = tracked_.begin(); it != tracked_.end();) {
      const std::string& name = it->first;
      Tracked& t = it->second;
      if (t.observed_cycle == cycle) {
        ++it;
        continue;
      }
      t.observed_cycle = cycle;
      bool keep = false;
      // still_valid() checks the file size first, but the file can still
      // shrink before the reads: a read of a lost page then sees zeros
      // instead of killing us (SIGBUS), and the segment is dropped. The
      // scope reads only this segment's mappings (its own, and a reclaim's).
      const TruncationGuard::Scope guard;
      bool valid = false;
      try {
        valid = still_valid(name, t);
        if (valid) {
          if (options_.before_reading) options_.before_reading(name);
          observe(name, t);
          // Never act (collect) on what may have been read as zeros.
          if (!guard.hit()) keep = !maybe_collect(name, t);
        }
      } catch (const std::exception& e) {
        log_.error("segment_observe_failed").kv("segment", name).kv("error", e.what());
      }
      if (guard.hit()) {
        keep = false;
        truncated_while_read(name, valid);
      }
      if (keep) {
        ++it;
      } else {
        it = tracked_.erase(it);
        rescan_due_ = true;
      }
    }
    if (!rescan_due_) break;
  }
}

// Stuck: alive, with work waiting for its role, and the role's progress
// unchanged for longer than stuck_after, as the structure's own counters say
// (KindDescriptor::progress). A working process is never stuck, however
// rarely it calls into the library; a role with nothing waiting for it (a
// producer, an idle consumer) never is either.
bool Monitor::judge_stuck(const Tracked& t, const SlotInfo& s, SlotMemo& memo, std::uint64_t now,
                          std::uint64_t stuck_ns) const {
  const KindDescriptor* kind = t.kind();
  const std::optional<RoleProgress> p = kind != nullptr && kind->progress != nullptr
                                            ? kind->progress(t.segment, s.role)
                                            : std::nullopt;
  if (!p || !p->waiting) {
    memo.stalled_since_ns = 0;
    return false;
  }
  if (memo.stalled_since_ns == 0 || p->progress != memo.progress) {
    memo.progress = p->progress;
    memo.stalled_since_ns = now;  // waiting from here, or moved since the last look
    return false;
  }
  return stuck_ns != 0 && now - memo.stalled_since_ns > stuck_ns;
}

void Monitor::observe(const std::string& name, Tracked& t) {
  const std::uint64_t now = monotonic_ns();
  const auto stuck_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(options_.stuck_after).count());
  std::set<std::size_t> present;
  for (const SlotInfo& s : t.segment.slots()) {
    if (s.liveness == Liveness::Free) continue;
    present.insert(s.index);
    SlotMemo& memo = t.slots[s.index];
    if (memo.generation != s.generation) memo = SlotMemo{s.generation};
    if (s.liveness == Liveness::Alive) {
      const std::uint64_t age = age_ms(s.heartbeat_ns, now);
      const bool stuck = judge_stuck(t, s, memo, now, stuck_ns);
      const std::uint64_t stalled =
          memo.stalled_since_ns == 0 ? 0 : age_ms(memo.stalled_since_ns, now);
      if (stuck && !memo.stuck) {
        ++stats_.stuck_detections;
        log_.warn("attacher_stuck")
            .kv("segment", name)
            .kv("slot", s.index)
            .kv("role", std::string(role_name(t.descriptor, s.role)))
            .kv("pid", s.pid)
            .kv("stalled_ms", stalled)
            .kv("heartbeat_age_ms", age)
            .kv("stuck_after_ms", static_cast<std::int64_t>(options_.stuck_after.count()));
      } else if (!stuck && memo.stuck) {
        log_.info("attacher_unstuck")
            .kv("segment", name)
            .kv("slot", s.index)
            .kv("role", std::string(role_name(t.descriptor, s.role)))
            .kv("pid", s.pid)
            .kv("heartbeat_age_ms", age);
      }
      memo.stuck = stuck;
    } else {
      handle_dead(name, t, s, memo);
    }
  }
  std::erase_if(t.slots, [&](const auto& kv) { return !present.contains(kv.first); });
}

void Monitor::handle_dead(const std::string& name, Tracked& t, const SlotInfo& s, SlotMemo& memo) {
  const std::string role(role_name(t.descriptor, s.role));
  if (!memo.death_seen) {
    memo.death_seen = true;
    ++stats_.deaths;
    log_.warn("attacher_dead")
        .kv("segment", name)
        .kv("slot", s.index)
        .kv("role", role)
        .kv("pid", s.pid)
        .kv("generation", s.generation)
        .kv("heartbeat_age_ms", age_ms(s.heartbeat_ns, monotonic_ns()));
  }
  const KindDescriptor* kind = t.kind();
  if (kind == nullptr) {
    if (!t.reclaim_skip_logged)
      log_.warn("reclaim_skipped")
          .kv("segment", name)
          .kv("slot", s.index)
          .kv("reason", t.descriptor == nullptr ? "unknown kind" : "layout fingerprint mismatch");
    t.reclaim_skip_logged = true;
    return;
  }
  auto failed = [&](std::string_view step, const std::string& why) {
    if (!memo.reclaim_failed) {
      ++stats_.reclaim_failures;
      log_.error("reclaim_failed")
          .kv("segment", name)
          .kv("slot", s.index)
          .kv("pid", s.pid)
          .kv("step", step)
          .kv("error", why)
          .kv("action", "retried every cycle");
    }
    memo.reclaim_failed = true;
  };

  auto w = Segment::open_any(name, writable_options(root_));
  if (!w) return failed("open writable", error_text(w.error()));
  if (w->header().incarnation != t.segment.header().incarnation) return;  // replaced: next cycle
  // The path shmctl reclaim takes too: under the slot's kernel lock, the
  // kind's reclaim, then the slot freed and a Reclaimed event recorded.
  auto reclaimed = reclaim_dead_attacher(*w, *kind, s);
  if (!reclaimed) return failed("reclaim", error_text(reclaimed.error()));
  if (reclaimed->status == ReclaimStatus::LockHeld) {
    log_.info("attacher_replaced").kv("segment", name).kv("slot", s.index).kv("dead_pid", s.pid);
    return;
  }
  if (reclaimed->status == ReclaimStatus::Changed) return;  // freed or re-attached meanwhile
  const std::vector<std::string>& actions = reclaimed->actions;
  ++stats_.reclaims;
  log_.info("attacher_reclaimed")
      .kv("segment", name)
      .kv("slot", s.index)
      .kv("role", role)
      .kv("pid", s.pid)
      .kv("generation", s.generation)
      .kv("actions", join(actions, "; "));
}

bool Monitor::maybe_collect(const std::string& name, Tracked& t) {
  if (!options_.gc_ephemeral) return false;
  const SegmentHeader& h = t.segment.header();
  if ((h.flags & static_cast<std::uint16_t>(SegmentFlags::Ephemeral)) == 0) return false;
  for (const SlotInfo& s : t.segment.slots())
    if (s.liveness == Liveness::Alive) return false;
  // Never attached yet: its creator may be about to attach.
  if (h.counters.attaches.load(std::memory_order_relaxed) == 0 &&
      process_alive(ProcessId{h.creator_pid, h.creator_start_time}))
    return false;

  auto w = Segment::open_any(name, writable_options(root_));
  if (!w) return false;
  if (w->header().incarnation != h.incarnation) return false;
  // Hold every slot's lock while unlinking: nobody attaches meanwhile, and a
  // process attaching right now makes us back off.
  auto guard = reopen(w->fd(), true);
  if (!guard) return false;
  // One lock over every slot's byte (kMaxAttachments of them): one call.
  const std::uint64_t first = slot_lock_offset(0);
  auto got = try_lock_range(guard->get(), first, slot_lock_offset(kMaxAttachments - 1) + 1 - first);
  if (!got || !*got) return false;
  struct stat st {};
  if (::fstatat(AT_FDCWD, t.segment.path().c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
      static_cast<std::uint64_t>(st.st_ino) != t.ino)
    return false;
  if (::unlink(t.segment.path().c_str()) != 0) {
    log_.warn("collect_failed").kv("segment", name).kv("error", std::string(std::strerror(errno)));
    return false;
  }
  ++stats_.collected;
  log_.info("segment_collected")
      .kv("segment", name)
      .kv("kind", std::string(t.descriptor ? t.descriptor->name : "unknown"))
      .kv("reason", "ephemeral and no live attacher")
      .kv("attaches", h.counters.attaches.load(std::memory_order_relaxed));
  return true;
}

}  // namespace shm::sidecar
