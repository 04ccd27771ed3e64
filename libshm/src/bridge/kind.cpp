// The bridge_state kind descriptor: what shmctl and the sidecar see of an
// shm-bridge route's crash-recovery state (shm/bridge/state_layout.hpp).
#include "shm/segment/kind.hpp"

#include "shm/bridge/state_layout.hpp"

#include "format/format.hpp"

#include <array>

namespace shm {
namespace {

using namespace bridge;

// The state words, or nullptr when the data region is too small to hold them
// (a damaged file; the header check lets only the right size through).
const StateData* state_of(const Segment& seg) {
  if (seg.data().size() < sizeof(StateData)) return nullptr;
  return reinterpret_cast<const StateData*>(seg.data().data());
}

std::string too_small(const Segment& seg) {
  return shm::detail::format("{}: data region of {} bytes cannot hold the {}-byte state",
                             seg.path(), seg.data().size(), sizeof(StateData));
}

std::string route_name(std::uint32_t route) {
  if (route == static_cast<std::uint32_t>(Route::Export) ||
      route == static_cast<std::uint32_t>(Route::Import))
    return std::string(to_string(static_cast<Route>(route)));
  return shm::detail::format("unknown({})", route);
}

std::string message_id(std::uint64_t incarnation, std::uint64_t sequence) {
  return shm::detail::format("{}-{}", incarnation, sequence);
}

// Loads are acquire: they pair with the bridge's release stores ([bridge.I]
// for the intents' validity words), so an intent seen valid is seen whole.
std::uint64_t ld(const std::atomic<std::uint64_t>& a) {
  return a.load(std::memory_order_acquire);
}

void describe(const Segment& seg, Node& out) {
  const StateParams p = read_state_params(seg.params());
  Node& params = out.object("params");
  params.set("route", route_name(p.route));
  params.set("version", static_cast<std::uint64_t>(p.version));
  const StateData* d = state_of(seg);
  if (d == nullptr) {
    out.set("error", too_small(seg));
    return;
  }
  // The last intent written stays after it completed, until the next one:
  // whether an export intent completed only the next bridge can tell (from
  // the ring's head and the egress's sequence); an import intent did once
  // `applied` reached it.
  if (p.route == static_cast<std::uint32_t>(Route::Export)) {
    const std::uint64_t seq = ld(d->export_intent_seq);
    if (seq == kNone) {
      out.set("last_intent", std::string("none"));
    } else {
      Node& intent = out.object("last_intent");
      intent.set("ring_head", ld(d->export_intent_head));
      intent.set("egress_sequence", seq);
    }
  } else {
    // applied first, then the intent: the order verify() relies on.
    const std::uint64_t applied = ld(d->applied_stream_seq);
    Node& a = out.object("applied");
    a.gauge("stream_sequence", applied);
    a.set("message_id", applied == 0
                            ? std::string("none")
                            : message_id(ld(d->applied_src_incarnation), ld(d->applied_src_seq)));
    const std::uint64_t intent = ld(d->intent_stream_seq);
    if (intent == kNone) {
      out.set("last_intent", std::string("none"));
    } else {
      Node& i = out.object("last_intent");
      i.set("stream_sequence", intent);
      i.set("ring_tail", ld(d->intent_ring_tail));
      i.set("message_id", message_id(ld(d->intent_src_incarnation), ld(d->intent_src_seq)));
      i.set("applied", intent <= applied);
    }
  }
  Node& counters = out.object("counters");
  counters.counter("moved", ld(d->moved));
  counters.counter("acknowledged", ld(d->acknowledged));
  counters.counter("retries", ld(d->retries));
  counters.counter("reconnects", ld(d->reconnects));
  counters.counter("duplicates", ld(d->duplicates));
  counters.counter("recovered", ld(d->recovered));
}

std::vector<std::string> verify(const Segment& seg) {
  std::vector<std::string> out;
  const StateParams p = read_state_params(seg.params());
  if (p.version != 1)
    out.push_back(
        shm::detail::format("state version {} is not the one this build knows (1)", p.version));
  const bool is_export = p.route == static_cast<std::uint32_t>(Route::Export);
  const bool is_import = p.route == static_cast<std::uint32_t>(Route::Import);
  if (!is_export && !is_import)
    out.push_back(shm::detail::format("route {} is neither export (1) nor import (2)", p.route));
  const StateData* d = state_of(seg);
  if (d == nullptr) {
    out.push_back(too_small(seg));
    return out;
  }
  // The other route's words keep the values the creator gave them.
  if (is_import && ld(d->export_intent_seq) != kNone)
    out.push_back("an import route's state holds an export intent");
  if (is_export && (ld(d->intent_stream_seq) != kNone || ld(d->applied_stream_seq) != 0))
    out.push_back("an export route's state holds import sequences");
  if (is_import) {
    // `applied` only ever moves to the sequence of an intent, and the next
    // intent is newer: read applied first, and no intent valid after that
    // read can be older (a live bridge cannot make this report).
    const std::uint64_t applied = ld(d->applied_stream_seq);
    const std::uint64_t intent = ld(d->intent_stream_seq);
    if (intent != kNone && intent < applied)
      out.push_back(shm::detail::format(
          "import intent for stream sequence {} is older than the applied sequence {}", intent,
          applied));
  }
  return out;
}

Result<std::vector<std::string>> reclaim(Segment&, const SlotInfo& dead) {
  return std::vector<std::string>{shm::detail::format(
      "slot {} (pid {}): the bridge holds nothing to release; its intent stays for the next "
      "bridge to complete",
      dead.index, dead.pid)};
}

constexpr std::array<RoleSpec, 1> kRoles = {kBridgeRole};

}  // namespace

const KindDescriptor kBridgeStateDescriptor{
    kBridgeStateKind, "bridge_state", kStateFingerprint, kRoles,  describe,
    verify,           reclaim,        nullptr,           nullptr,
};

}  // namespace shm
