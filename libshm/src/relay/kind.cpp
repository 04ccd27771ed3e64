// The relay kind descriptor: what shmctl and the sidecar see of a relay.
#include "shm/segment/kind.hpp"
#include "internal.hpp"

#include "format/format.hpp"

#include <array>
#include <charconv>

namespace shm {
namespace {

using namespace relay;
using namespace relay::internal;

void describe(const Segment& seg, Node& out) {
  auto view = make_view(seg);
  if (!view) {
    out.set("error", view.error().message);
    return;
  }
  const RelaySnapshot s = read_snapshot(*view);
  Node& params = out.object("params");
  params.set("value_size", static_cast<std::uint64_t>(s.value_bytes));
  params.set("capacity", static_cast<std::uint64_t>(s.max_entries));
  Node& policy = out.object("policy");
  policy.set("id", static_cast<std::uint64_t>(s.policy));
  policy.set("name", s.policy_name);
  policy.set("flags", describe(s.flags));
  policy.set("egress", std::string(to_string(s.egress)));
  Node& bp = out.object("backpressure");
  bp.set("dimension", std::string(to_string(s.backpressure.dimension)));
  bp.gauge("high_water", s.backpressure.high_water);
  bp.gauge("low_water", s.backpressure.low_water);
  bp.set("overflow", std::string(to_string(s.backpressure.overflow)));
  bp.gauge("level", s.level());
  Node& head = out.object("head");
  head.gauge("depth", s.depth);
  head.gauge("bytes", s.bytes);
  head.gauge("pending_keys", s.pending_keys);
  head.gauge("lag", s.lag);
  head.gauge("in_hand", s.in_hand);
  head.gauge("oldest_age_ms", s.oldest_age_ns / 1'000'000);
  Node& flags = out.object("flags");
  flags.gauge("is_full", s.is_full ? 1 : 0);
  flags.gauge("is_spilling", s.is_spilling ? 1 : 0);
  flags.gauge("is_draining", s.is_draining ? 1 : 0);
  flags.gauge("faulted", s.faulted ? 1 : 0);
  out.set("consistent", s.consistent);
  Node& k = out.object("counters");
  k.counter("writes", s.writes);
  k.counter("appended", s.appended);
  k.counter("merged", s.merged);
  k.counter("unchanged", s.unchanged);
  k.counter("dropped", s.dropped);
  k.counter("conflated", s.conflated);
  k.counter("blocked", s.blocked);
  k.counter("timed_out", s.timed_out);
  k.counter("refused_full", s.refused_full);
  k.counter("drained", s.drained);
  k.counter("drained_ops", s.drained_ops);
  k.counter("returned", s.returned);
  k.counter("repairs", s.repairs);
  k.counter("retunes", s.retunes);
  k.counter("reconfigures", s.reconfigures);
  k.counter("notifies", s.notifies);
  if (s.max_remembered != 0) {
    Node& mem = out.object("memory");
    mem.gauge("max_remembered", s.max_remembered);
    mem.gauge("remembered", s.remembered);
    mem.counter("forgotten", s.forgotten);
    mem.counter("remembered_unchanged", s.remembered_unchanged);
  }
  if (s.spill_enabled) {
    Node& sp = out.object("spill");
    sp.set("dir", s.spill_dir);
    sp.gauge("page_size", s.spill_page_size);
    sp.set("retention", std::string(to_string(s.retention)));
    sp.gauge("retention_bytes", s.retention_bytes);
    sp.gauge("retention_ttl_ms", s.retention_ttl_ms);
    sp.gauge("cold_pages", s.cold_pages);
    sp.gauge("cold_bytes", s.cold_bytes);
    sp.gauge("cold_ops", s.cold_ops);
    Node& seal = sp.object("seal_in_flight");
    seal.set("active", s.seal_in_flight);
    seal.set("page", s.seal_page);
    seal.gauge("entries", s.spilling_entries);
    Node& cursor = sp.object("cursor");
    cursor.set("page", s.cursor_page);
    cursor.set("record", s.cursor_record);
    cursor.set("catch_up_page", s.catch_up_page);
    Node& sk = sp.object("counters");
    sk.counter("pages_sealed", s.pages_sealed);
    sk.counter("entries_spilled", s.entries_spilled);
    sk.counter("ops_spilled", s.ops_spilled);
    sk.counter("pages_acked", s.pages_acked);
    sk.counter("pages_refused", s.pages_refused);
    sk.counter("pages_expired", s.pages_expired);
    sk.counter("pages_rebuilt", s.pages_rebuilt);
    sk.counter("fallbacks", s.spill_fallbacks);
    sk.counter("no_space", s.no_space);
    sk.counter("seal_errors", s.seal_errors);
    sk.counter("seals_rolled_forward", s.seals_rolled_forward);
    sk.counter("seals_rolled_back", s.seals_rolled_back);
    Node& manifest = sp.array("manifest");
    for (const RelaySnapshot::ColdPage& p : s.manifest) {
      Node& n = manifest.push_object();
      n.set("page_id", p.page_id);
      n.set("file", spill::page_file_name(p.page_id));
      n.set("first_seq", p.first_seq);
      n.set("last_seq", p.last_seq);
      n.set("records", p.records);
      n.set("ops", p.ops);
      n.set("bytes", p.bytes);
      n.set("state", std::string(p.acked ? "acked" : "sealed"));
    }
  }
  Node& events = out.array("events");
  for (const RelayEvent& e : s.events) {
    Node& n = events.push_object();
    n.set("number", e.number);
    n.set("time_ns", e.time_ns);
    n.set("kind", std::string(to_string(e.kind)));
    n.set("key", e.key);
    n.set("count", e.count);
  }
}

std::vector<std::string> verify(const Segment& seg) {
  auto view = make_view(seg);
  if (!view) return {view.error().message};
  std::vector<std::string> out = verify_unlocked(*view);
  for (std::string& p : verify_spill(*view)) out.push_back(std::move(p));
  return out;
}

Result<std::vector<std::string>> reclaim(Segment& seg, const SlotInfo& dead) {
  if (!seg.writable())
    return fail(
        Errc::InvalidArgument,
        shm::detail::format("{}: reclaim needs a writable mapping; nothing returned", seg.path()));
  auto view = make_view(seg);
  if (!view) return std::unexpected(view.error());
  if (auto ok = lock(*view, seg.path()); !ok) return std::unexpected(ok.error());
  std::uint64_t n = 0;
  const std::uint64_t repairs = ld(view->control->counters.repairs);
  {
    Held held(*view->control);
    // A writer killed inside a seal's file I/O held the seal mutex alone: the
    // seal is finished or rolled back here (a death under the relay mutex
    // was repaired by lock() above).
    if (auto ok = reap_sealer(*view, seg.path()); !ok) return std::unexpected(ok.error());
    if (dead.role == kReaderRole.id) n = return_in_hand(*view);
  }
  const bool reaped = ld(view->control->counters.repairs) != repairs;
  if (dead.role != kReaderRole.id)
    return std::vector<std::string>{shm::detail::format(
        "slot {} (pid {}): {}", dead.index, dead.pid,
        reaped ? "the dead writer was sealing a page: the seal was finished or rolled back"
               : "a writer holds nothing else outside the relay mutex (a death inside it is "
                 "repaired by the next locker)")};
  return std::vector<std::string>{shm::detail::format(
      "slot {} (pid {}): the dead reader held {} entries; returned for redelivery", dead.index,
      dead.pid, n)};
}

Result<void> set(Segment& seg, std::string_view key, std::string_view value) {
  constexpr std::string_view kKeys =
      "valid keys: high_water, low_water, dimension, overflow, spill_page_size, "
      "spill_retention_bytes, spill_ttl_ms";
  const bool spill_key =
      key == "spill_page_size" || key == "spill_retention_bytes" || key == "spill_ttl_ms";
  // An unknown key is refused before the segment's data is read (a usage
  // error, whatever state the relay is in).
  if (key != "high_water" && key != "low_water" && key != "dimension" && key != "overflow" &&
      !spill_key)
    return fail(Errc::InvalidArgument,
                shm::detail::format("relay has no settable key '{}'; {}", key, kKeys));
  if (!seg.writable())
    return fail(Errc::InvalidArgument,
                shm::detail::format("{}: set needs a writable mapping", seg.path()));
  auto view = make_view(seg);
  if (!view) return std::unexpected(view.error());
  // The value is parsed first; the one field is changed under the relay
  // mutex, over the limits the segment holds then (never a snapshot taken
  // before the lock: a concurrent set of another field would be lost).
  auto number = [&]() -> Result<std::uint64_t> {
    std::uint64_t n = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (ec != std::errc() || end != value.data() + value.size())
      return fail(Errc::InvalidArgument,
                  shm::detail::format("{}: '{}' is not an unsigned integer", key, value));
    return n;
  };
  if (spill_key) {
    auto n = number();
    if (!n) return std::unexpected(n.error());
    return retune_spill_view(*view, seg.path(), [&](SpillLimits& now) {
      (key == "spill_page_size"         ? now.page_size
       : key == "spill_retention_bytes" ? now.retention_bytes
                                        : now.ttl_ms) = *n;
    });
  }
  BackpressureEdit edit;
  if (key == "high_water" || key == "low_water") {
    auto n = number();
    if (!n) return std::unexpected(n.error());
    const bool high = key == "high_water";
    edit = [high, n = *n](Backpressure& now) { (high ? now.high_water : now.low_water) = n; };
  } else if (key == "dimension") {
    auto d = parse_dimension(value);
    if (!d) return std::unexpected(d.error());
    edit = [d = *d](Backpressure& now) { now.dimension = d; };
  } else {
    auto o = parse_overflow(value);
    if (!o) return std::unexpected(o.error());
    edit = [o = *o](Backpressure& now) { now.overflow = o; };
  }
  return retune_view(*view, seg.path(), edit);
}

// The reader has work while entries are pending, in its hands or on disk;
// its progress is the entries it committed. relaxed: a monitoring sample.
std::optional<RoleProgress> progress(const Segment& seg, std::uint32_t role) {
  if (role != kReaderRole.id) return std::nullopt;
  auto view = make_view(seg);
  if (!view) return std::nullopt;
  const Control& c = *view->control;
  const bool waiting = c.depth.load(std::memory_order_relaxed) != 0 ||
                       c.in_hand.load(std::memory_order_relaxed) != 0 ||
                       view->spill->cold_pages.load(std::memory_order_relaxed) != 0;
  return RoleProgress{waiting, c.counters.drained.load(std::memory_order_relaxed)};
}

constexpr std::array<RoleSpec, 2> kRoles = {kReaderRole, kWriterRole};

}  // namespace

const KindDescriptor kRelayDescriptor{
    .kind = kRelayKind,
    .name = "relay",
    .fingerprint = kFingerprint,
    .roles = kRoles,
    .describe = describe,
    .verify = verify,
    .reclaim = reclaim,
    .set = set,
    .progress = progress,
};

}  // namespace shm
