#include "shm/segment/kind.hpp"

#include "shm/platform/clock.hpp"
#include "shm/platform/process.hpp"

#include "format/format.hpp"

#include <array>
#include <exception>

namespace shm {
namespace {
// The kind table. One line per kind.
constexpr std::array<const KindDescriptor*, 9> kKinds = {
    &kSpscRingDescriptor, &kChannelDescriptor,      &kLedgerDescriptor,
    &kMpmcRingDescriptor, &kFanoutBitmapDescriptor, &kRelayDescriptor,
    &kEgressDescriptor,   &kBridgeStateDescriptor,  &kTopicDescriptor,
};
}  // namespace

std::span<const KindDescriptor* const> all_kinds() noexcept {
  return kKinds;
}

const KindDescriptor* find_kind(KindId kind) noexcept {
  for (const KindDescriptor* d : kKinds)
    if (d->kind == kind) return d;
  return nullptr;
}

const OlderLayout* find_older_layout(const KindDescriptor& kind,
                                     std::uint64_t fingerprint) noexcept {
  for (const OlderLayout& l : kind.older_layouts)
    if (l.fingerprint == fingerprint) return &l;
  return nullptr;
}

std::string_view role_name(const KindDescriptor* kind, std::uint32_t role) noexcept {
  if (kind != nullptr)
    for (const RoleSpec& r : kind->roles)
      if (r.id == role) return r.name;
  return "unknown";
}

std::string_view to_string(Liveness l) noexcept {
  switch (l) {
    case Liveness::Free:
      return "free";
    case Liveness::Alive:
      return "alive";
    case Liveness::Dead:
      return "dead";
  }
  return "unknown";
}

void describe_header(const Segment& segment, Node& out) {
  const SegmentHeader& h = segment.header();
  const KindDescriptor* kind = find_kind(h.kind);
  out.set("name", segment.name());
  out.set("path", segment.path());
  out.set("kind", std::string(kind ? kind->name : "unknown"));
  out.set("kind_id", static_cast<std::uint64_t>(h.kind));
  out.set("size", h.total_size);
  out.set("layout_version", shm::detail::format("{}.{}", h.layout_major, h.layout_minor));
  out.set("fingerprint", shm::detail::format("{:#018x}", h.fingerprint));
  out.set("incarnation", shm::detail::format("{:016x}", h.incarnation));
  out.set("flags", static_cast<std::uint64_t>(h.flags));
  out.set("ephemeral", (h.flags & static_cast<std::uint16_t>(SegmentFlags::Ephemeral)) != 0);
  const std::uint32_t state = h.state.load(std::memory_order_acquire);
  out.set("state", std::string(state == static_cast<std::uint32_t>(SegmentState::Ready) ? "ready"
                               : state == static_cast<std::uint32_t>(SegmentState::Initializing)
                                   ? "initializing"
                                   : "invalid"));
  Node& creator = out.object("creator");
  creator.set("pid", static_cast<std::int64_t>(h.creator_pid));
  creator.set("alive", process_alive(ProcessId{h.creator_pid, h.creator_start_time}));
  out.set("created_ns", h.creation_time_ns);
  Node& counters = out.object("counters");
  counters.counter("attaches", h.counters.attaches.load(std::memory_order_relaxed));
  counters.counter("detaches", h.counters.detaches.load(std::memory_order_relaxed));
  counters.counter("takeovers", h.counters.takeovers.load(std::memory_order_relaxed));
  counters.counter("faults", h.counters.faults.load(std::memory_order_relaxed));
  counters.counter("events", h.counters.events.load(std::memory_order_relaxed));
  Node& att = out.array("attachers");
  std::uint64_t alive = 0, dead = 0;
  const std::uint64_t now = monotonic_ns();
  for (const SlotInfo& s : segment.slots()) {
    Node& a = att.push_object();
    a.set("slot", static_cast<std::uint64_t>(s.index));
    a.set("role", std::string(role_name(kind, s.role)));
    a.set("pid", static_cast<std::int64_t>(s.pid));
    a.set("liveness", std::string(to_string(s.liveness)));
    a.set("generation", static_cast<std::uint64_t>(s.generation));
    a.set("attach_time_ns", s.attach_time_ns);
    a.set("heartbeat_age_ms", s.heartbeat_ns <= now ? (now - s.heartbeat_ns) / 1'000'000 : 0);
    if (s.liveness == Liveness::Alive) {
      ++alive;
      a.set("cmdline", process_cmdline(s.pid));
    } else if (s.liveness == Liveness::Dead) {
      ++dead;
    }
  }
  out.gauge("attachers_alive", alive);
  out.gauge("attachers_dead", dead);
}

namespace {

// Marks `slot` Free and records the Reclaimed event. The caller holds the
// slot's kernel lock, so no process attaches to it meanwhile.
void free_locked_slot(Segment& segment, std::size_t slot) {
  AttachmentSlot& s = segment.mutable_header()->slots[slot];
  // release: as in Attachment::detach(), the kind's reclaim writes above come
  // before the slot reads Free to an acquiring attacher ([seg.A'] in attach()).
  s.state.store(static_cast<std::uint32_t>(SlotState::Free), std::memory_order_release);
  // relaxed: the role is the dead holder's, unchanged while we hold its lock.
  segment.record_event(EventType::Reclaimed, static_cast<std::uint32_t>(slot),
                       s.role.load(std::memory_order_relaxed));
}

Result<void> check_reclaimable(const Segment& segment, std::size_t slot) {
  if (slot >= kMaxAttachments)
    return fail(Errc::InvalidArgument, shm::detail::format("slot {} out of range", slot));
  if (!segment.writable())
    return fail(Errc::InvalidArgument,
                shm::detail::format("{}: reclaim needs a writable mapping", segment.path()));
  return {};
}

}  // namespace

Result<bool> reclaim_slot(Segment& segment, std::size_t slot) {
  if (auto ok = check_reclaimable(segment, slot); !ok) return std::unexpected(ok.error());
  auto fd = reopen(segment.fd(), true);
  if (!fd) return std::unexpected(fd.error());
  auto got = try_lock_byte(fd->get(), slot_lock_offset(slot));
  if (!got) return std::unexpected(got.error());
  if (!*got) return false;  // someone holds it: alive (or taking it over right now)
  const AttachmentSlot& s = segment.header().slots[slot];
  if (s.state.load(std::memory_order_acquire) != static_cast<std::uint32_t>(SlotState::Attached))
    return false;
  free_locked_slot(segment, slot);
  return true;  // the lock drops when fd closes
}

std::string_view to_string(ReclaimStatus outcome) noexcept {
  switch (outcome) {
    case ReclaimStatus::Reclaimed:
      return "reclaimed";
    case ReclaimStatus::LockHeld:
      return "lock_held";
    case ReclaimStatus::Changed:
      return "changed";
  }
  return "unknown";
}

Result<SlotReclaim> reclaim_dead_attacher(Segment& segment, const KindDescriptor& kind,
                                          const SlotInfo& dead) {
  if (auto ok = check_reclaimable(segment, dead.index); !ok) return std::unexpected(ok.error());
  const SegmentHeader& h = segment.header();
  if (h.kind != kind.kind)
    return fail(Errc::KindMismatch,
                shm::detail::format(
                    "{}: kind {} ({}) is not {} ({}); its reclaim is not applied", segment.path(),
                    find_kind(h.kind) != nullptr ? find_kind(h.kind)->name : "unknown", h.kind,
                    kind.name, kind.kind));
  if (h.fingerprint != kind.fingerprint)
    return fail(
        Errc::FingerprintMismatch,
        shm::detail::format("{}: {} layout fingerprint: segment has {:#018x}, this build has "
                            "{:#018x}; its reclaim is not applied",
                            segment.path(), kind.name, h.fingerprint, kind.fingerprint));
  // The slot's lock, held from the check below to the free: a live holder
  // keeps it (we back off), and no process can take the slot over halfway
  // through the kind's reclaim.
  auto guard = reopen(segment.fd(), true);
  if (!guard) return std::unexpected(guard.error());
  auto got = try_lock_byte(guard->get(), slot_lock_offset(dead.index));
  if (!got) return std::unexpected(got.error());
  if (!*got) return SlotReclaim{ReclaimStatus::LockHeld, {}};
  // [seg.A'] acquire: pairs with [seg.A] in attach(); a new owner bumps the generation.
  const AttachmentSlot& cur = h.slots[dead.index];
  if (cur.state.load(std::memory_order_acquire) !=
          static_cast<std::uint32_t>(SlotState::Attached) ||
      cur.generation.load(std::memory_order_relaxed) != dead.generation)
    return SlotReclaim{ReclaimStatus::Changed, {}};
  auto actions = kind.reclaim(segment, dead);
  if (!actions)
    return fail(actions.error().code,
                shm::detail::format("{}: {} reclaim of slot {} (pid {}) failed: {}", segment.path(),
                                    kind.name, dead.index, dead.pid, actions.error().message));
  SlotReclaim r{ReclaimStatus::Reclaimed, std::move(*actions)};
  free_locked_slot(segment, dead.index);
  return r;  // the lock drops when guard closes
}

}  // namespace shm
