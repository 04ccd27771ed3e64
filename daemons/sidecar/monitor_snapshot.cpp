// The monitor's snapshot: one view per file of the root, for /metrics and
// /status, built from the segments observed in this cycle.
#include "sidecar/monitor.hpp"
#include "sidecar/monitor_internal.hpp"

#include "shm/platform/clock.hpp"
#include "shm/platform/truncation_guard.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <exception>

namespace shm::sidecar {

using namespace detail;

void Monitor::take_snapshot() {
  snapshot_.clear();
  for (auto it = tracked_.begin(); it != tracked_.end();) {
    const TruncationGuard::Scope guard;  // as in the observe loop above
    const std::size_t views = snapshot_.size();
    try {
      build_view(it->first, it->second);
    } catch (const std::exception& e) {
      log_.error("segment_describe_failed").kv("segment", it->first).kv("error", e.what());
    }
    if (guard.hit()) {
      if (snapshot_.size() > views) snapshot_.pop_back();  // built from zeros
      truncated_while_read(it->first, true);
      it = tracked_.erase(it);
      rescan_due_ = true;
    } else {
      ++it;
    }
  }
  for (const auto& [name, u] : unreadable_) {
    SegmentView v;
    v.name = name;
    v.error = u.error;
    snapshot_.push_back(std::move(v));
  }
  std::sort(snapshot_.begin(), snapshot_.end(),
            [](const SegmentView& a, const SegmentView& b) { return a.name < b.name; });
}

void Monitor::build_view(const std::string& name, Tracked& t) {
  const Segment& seg = t.segment;
  const SegmentHeader& h = seg.header();
  SegmentView v;
  v.name = name;
  v.up = true;
  v.kind = t.descriptor ? std::string(t.descriptor->name) : "unknown";
  v.kind_known = t.kind() != nullptr;
  if (t.descriptor == nullptr)
    v.error = fmt::format("unknown kind id {}", h.kind);
  else if (!t.layout_ok)
    v.error = fmt::format("layout fingerprint {:#018x} differs from this build's {:#018x}",
                          h.fingerprint, t.descriptor->fingerprint);
  v.size = h.total_size;
  v.ephemeral = (h.flags & static_cast<std::uint16_t>(SegmentFlags::Ephemeral)) != 0;
  v.incarnation = fmt::format("{:016x}", h.incarnation);
  v.attaches = h.counters.attaches.load(std::memory_order_relaxed);
  v.detaches = h.counters.detaches.load(std::memory_order_relaxed);
  v.takeovers = h.counters.takeovers.load(std::memory_order_relaxed);
  v.faults = h.counters.faults.load(std::memory_order_relaxed);
  v.events = h.counters.events.load(std::memory_order_relaxed);
  const std::uint64_t now = monotonic_ns();
  for (const SlotInfo& s : seg.slots()) {
    if (s.liveness == Liveness::Free) continue;
    AttacherView a;
    a.slot = s.index;
    a.role = std::string(role_name(t.descriptor, s.role));
    a.pid = s.pid;
    a.generation = s.generation;
    a.liveness = s.liveness;
    a.heartbeat_age_ms = age_ms(s.heartbeat_ns, now);
    if (s.liveness == Liveness::Alive) {
      const auto it = t.slots.find(s.index);
      const bool known = it != t.slots.end() && it->second.generation == s.generation;
      a.stuck = known && it->second.stuck;
      if (known && it->second.stalled_since_ns != 0)
        a.stalled_ms = age_ms(it->second.stalled_since_ns, now);
      ++(a.stuck ? v.stuck : v.alive);
    } else {
      ++v.dead;
    }
    v.attachers.push_back(std::move(a));
  }
  describe_header(seg, v.header);
  if (const KindDescriptor* kind = t.kind()) kind->describe(seg, v.detail);
  snapshot_.push_back(std::move(v));
}

}  // namespace shm::sidecar
