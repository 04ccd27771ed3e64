// shmctl reclaim NAME | --all [--dry-run]: releases what dead attachers held
// and frees their slots, through shm::reclaim_dead_attacher(), the one path
// shm-sidecar's Monitor takes too (the kind's reclaim() under the slot's
// kernel lock, then the slot freed and a Reclaimed event recorded).
//
// A slot is dead when it says Attached while its kernel lock is free: its
// holder's process is gone, however it died. A slot whose lock is held is
// never touched: its holder lives (stopped or stuck ones included). Liveness
// is read first on a read-only mapping (--dry-run stops there, and a segment
// with nothing dead needs no write access), then again under the slot's lock
// before anything changes. Exit codes as everywhere (shmctl.hpp); a segment
// with dead attachers whose kind or layout this build does not know is 3.
#include "output.hpp"
#include "segment_access.hpp"

#include "shm/platform/process.hpp"

#include <fmt/format.h>

namespace shm::shmctl {
namespace {

struct SlotResult {
  SlotInfo slot;
  std::string role;
  std::string action;  // "reclaimed" | "would_reclaim" | "kept" | "failed"
  std::string reason;
  std::vector<std::string> actions;  // the kind's reclaim() lines
  std::optional<Error> error;        // action "failed"
};

struct SegmentResult {
  std::string name;
  std::string kind = "-";
  std::uint64_t alive = 0;  // as found, before reclaiming
  std::uint64_t dead = 0;
  std::vector<SlotResult> slots;
  std::optional<Error> error;  // could not open the segment or interpret its kind

  [[nodiscard]] bool ok() const noexcept {
    if (error) return false;
    for (const SlotResult& s : slots)
      if (s.error) return false;
    return true;
  }
};

// Why a slot counts as dead, with what /proc says of its pid (the kernel
// lock alone decides; the pid is for the reader).
std::string death_reason(const SlotInfo& s) {
  std::string process;
  if (process_alive(ProcessId{s.pid, s.start_time}))
    process = fmt::format("pid {} still runs but no longer holds the segment open", s.pid);
  else if (process_start_time(s.pid) != 0)
    process = fmt::format("pid {} has exited (the pid now belongs to another process)", s.pid);
  else
    process = fmt::format("pid {} has exited", s.pid);
  return "the slot says attached but its kernel lock is free: " + process;
}

SlotResult slot_result(const KindDescriptor& kind, const SlotInfo& s) {
  return SlotResult{s, std::string(role_name(&kind, s.role)), "", death_reason(s), {}, {}};
}

void reclaim_slots(OpenedSegment& opened, const KindDescriptor& kind, SegmentResult& r) {
  for (const SlotInfo& s : opened.segment.slots()) {
    if (s.liveness != Liveness::Dead) continue;
    SlotResult sr = slot_result(kind, s);
    auto done = reclaim_dead_attacher(opened.segment, kind, s);
    if (!done) {
      sr.action = "failed";
      sr.reason = done.error().what();
      sr.error = done.error();
    } else if (done->status == ReclaimStatus::Reclaimed) {
      sr.action = "reclaimed";
      sr.actions = std::move(done->actions);
    } else {
      sr.action = "kept";
      sr.reason = done->status == ReclaimStatus::LockHeld
                      ? "its kernel lock was taken meanwhile (a live process took the slot over, "
                        "or another reclaimer is at it): not touched"
                      : "the slot was freed or attached again meanwhile: not touched";
    }
    r.slots.push_back(std::move(sr));
  }
}

SegmentResult reclaim_one(const Context& ctx, const std::string& name, bool dry_run) {
  SegmentResult r{name};
  auto seen = open_segment(ctx, name, Access::Inspect);
  if (!seen) {
    r.error = seen.error();
    return r;
  }
  r.kind = seen->kind_label();
  const AttacherCounts counts = count_attachers(seen->segment);
  r.alive = counts.alive;
  r.dead = counts.dead;
  if (counts.dead == 0) return r;  // nothing to reclaim, and no write access needed
  auto kind = require_kind(*seen);
  if (!kind) {
    r.error =
        Error{kind.error().code, fmt::format("{}; its {} dead attacher(s) are left as they are",
                                             kind.error().message, counts.dead)};
    return r;
  }
  if (dry_run) {
    for (const SlotInfo& s : seen->segment.slots()) {
      if (s.liveness != Liveness::Dead) continue;
      SlotResult sr = slot_result(**kind, s);
      sr.action = "would_reclaim";
      sr.reason += fmt::format("; the {} reclaim would release what it held and free the slot",
                               (*kind)->name);
      r.slots.push_back(std::move(sr));
    }
    return r;
  }
  auto opened = open_segment(ctx, name, Access::Modify);
  if (!opened) {
    r.error = opened.error();
    return r;
  }
  // The name may point to another incarnation by now: everything again on it.
  r.kind = opened->kind_label();
  kind = require_kind(*opened);
  if (!kind) {
    r.error = kind.error();
    return r;
  }
  const AttacherCounts now = count_attachers(opened->segment);
  r.alive = now.alive;
  r.dead = now.dead;
  reclaim_slots(*opened, **kind, r);
  return r;
}

Json slot_json(const SlotResult& s) {
  Json j = Json::object();
  j["slot"] = s.slot.index;
  j["role"] = s.role;
  j["pid"] = s.slot.pid;
  j["generation"] = s.slot.generation;
  j["action"] = s.action;
  j["reason"] = s.reason;
  j["actions"] = s.actions;
  if (s.error) j["error"] = error_json(*s.error);
  return j;
}

Json segment_json(const SegmentResult& r) {
  Json j = Json::object();
  j["name"] = r.name;
  j["kind"] = r.kind;
  j["ok"] = r.ok();
  if (r.error) {
    j["error"] = error_json(*r.error);
    return j;
  }
  j["attachers_alive"] = r.alive;
  j["attachers_dead"] = r.dead;
  Json slots = Json::array();
  for (const SlotResult& s : r.slots) slots.push_back(slot_json(s));
  j["slots"] = std::move(slots);
  return j;
}

std::string segment_text(const SegmentResult& r) {
  if (r.error)
    return fmt::format("{}: not reclaimed: {}\n", printable(r.name), printable(r.error->what()));
  if (r.slots.empty())
    return fmt::format("{} ({}): nothing to reclaim ({} alive, {} dead)\n", printable(r.name),
                       r.kind, r.alive, r.dead);
  std::string out;
  for (const SlotResult& s : r.slots) {
    const std::string_view verb = s.action == "reclaimed"       ? "reclaimed"
                                  : s.action == "would_reclaim" ? "would be reclaimed"
                                  : s.action == "kept"          ? "kept"
                                                                : "FAILED";
    out += fmt::format("{} ({}): slot {} ({}, pid {}, generation {}) {}: {}\n", printable(r.name),
                       r.kind, s.slot.index, s.role, s.slot.pid, s.slot.generation, verb,
                       printable(s.reason));
    for (const std::string& line : s.actions) out += "  - " + printable(line) + '\n';
  }
  return out;
}

}  // namespace

Exit run_reclaim(const Context& ctx, const ReclaimOptions& options) {
  std::vector<std::string> names;
  if (options.all) {
    auto listing = list_root(ctx.root);
    if (!listing) return report_error(ctx, "reclaim", listing.error());
    names = std::move(listing->segments);
  } else if (options.name) {
    names.push_back(*options.name);
  } else {
    return report_error(ctx, "reclaim",
                        Error{Errc::InvalidArgument, "give a segment NAME or --all"});
  }

  std::vector<SegmentResult> results;
  for (const std::string& name : names) {
    SegmentResult r = reclaim_one(ctx, name, options.dry_run);
    // Under --all, a segment removed between the listing and the open is simply gone.
    if (options.all && r.error && r.error->code == Errc::NotFound) continue;
    results.push_back(std::move(r));
  }
  if (!options.all && results.front().error)
    return report_error(ctx, "reclaim", *results.front().error);

  std::size_t done = 0, kept = 0, failed = 0, bad_segments = 0;
  Exit worst = Exit::Ok;
  auto note = [&](Exit e) {
    // Under --all a file with an impossible name is junk in the root, not a usage error.
    if (options.all && e == Exit::Usage) e = Exit::Invalid;
    if (e == Exit::Invalid || worst == Exit::Ok) worst = e;
  };
  for (const SegmentResult& r : results) {
    if (r.error) {
      ++bad_segments;
      note(exit_for(r.error->code));
    }
    for (const SlotResult& s : r.slots) {
      if (s.action == "reclaimed" || s.action == "would_reclaim") ++done;
      if (s.action == "kept") ++kept;
      if (s.error) {
        ++failed;
        note(exit_for(s.error->code));
      }
    }
  }

  if (ctx.json) {
    Json doc = Json::object();
    doc["root"] = ctx.root;
    doc["dry_run"] = options.dry_run;
    doc[options.dry_run ? "would_reclaim" : "reclaimed"] = done;
    doc["kept"] = kept;
    doc["failed"] = failed;
    Json list = Json::array();
    for (const SegmentResult& r : results) list.push_back(segment_json(r));
    doc["segments"] = std::move(list);
    print_json(ctx, doc);
  } else {
    for (const SegmentResult& r : results) ctx.out << segment_text(r);
    ctx.out << fmt::format("reclaim{}: {} {} slot(s) in {} segment(s){}{}\n",
                           options.dry_run ? " (dry run)" : "",
                           options.dry_run ? "would reclaim" : "reclaimed", done, results.size(),
                           kept != 0 ? fmt::format(", {} kept", kept) : "",
                           failed != 0 ? fmt::format(", {} failed", failed) : "");
  }
  if (bad_segments != 0 || failed != 0)
    warn(ctx, "reclaim",
         fmt::format("{} segment(s) could not be reclaimed, {} slot(s) failed", bad_segments,
                     failed));
  return worst;
}

}  // namespace shm::shmctl
