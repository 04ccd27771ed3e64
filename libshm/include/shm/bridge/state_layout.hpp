// The layout of an shm-bridge route's state segment (kind 9, "bridge_state").
//
// The bridge daemon (daemons/bridge/state.hpp) writes it; the library knows
// the layout so that shmctl and the sidecar can show, verify and watch it
// like every other kind (libshm/src/bridge/kind.cpp).
//
// A few 64-bit words that make the two hand-overs of a bridge exactly-once
// across a kill -9 of the bridge:
//
//  - export (ring -> egress): before enqueueing the ring record that starts at
//    ring position H, the bridge writes the intent {H, S} where S is the
//    egress sequence the record will get. If the bridge dies after the enqueue
//    but before releasing the ring record, the next bridge sees the egress
//    sequence past S while the ring head is still H, and releases that record
//    without enqueueing it again.
//  - import (JetStream -> ring): before committing the message of stream
//    sequence N into the ring at tail T, the bridge writes the intent {N, T,
//    message id}; after the commit it advances `applied`. If it dies between
//    the commit and that store, the next bridge sees the ring tail past T and
//    promotes the intent. Messages at or below `applied` (redeliveries) and
//    republished message ids at or below the applied one are dropped.
//
// A route whose local end is a Channel keeps the same words: the export's
// "ring position" is the payload's channel sequence, the import's "ring
// tail" the channel's published descriptor count.
//
// Single writer: the bridge holds the segment's exclusive "bridge" role (a
// second bridge on the same state is RoleTaken). Every field is a lock-free
// std::atomic; the writer's stores are release, the readers (the next bridge,
// tools) load acquire. [bridge.I] The intent's validity word is stored last
// (release) and cleared first, so a reader that sees it valid sees the rest
// of the intent ([bridge.I] pairs with the acquire loads in the bridge's
// recovery and in the kind's describe).
#pragma once

#include "shm/error.hpp"
#include "shm/segment/layout.hpp"
#include "shm/segment/segment.hpp"

#include <atomic>
#include <cstdint>
#include <span>
#include <string_view>

namespace shm::bridge {

enum class Route : std::uint32_t { Export = 1, Import = 2 };

[[nodiscard]] std::string_view to_string(Route r) noexcept;

inline constexpr std::uint64_t kNone = ~std::uint64_t{0};

struct StateParams {
  std::uint32_t route = 0;    // Route
  std::uint32_t version = 1;  // layout of StateData
};
static_assert(sizeof(StateParams) == 8);

struct StateData {
  // export
  std::atomic<std::uint64_t> export_intent_head;  // ring position of the record being enqueued
  std::atomic<std::uint64_t> export_intent_seq;   // its egress sequence; kNone: no intent
  // import
  std::atomic<std::uint64_t> applied_stream_seq;       // last stream sequence in the ring (0: none)
  std::atomic<std::uint64_t> applied_src_incarnation;  // message id of that message (0: none)
  std::atomic<std::uint64_t> applied_src_seq;
  std::atomic<std::uint64_t> intent_ring_tail;  // ring tail before the commit of intent_stream_seq
  std::atomic<std::uint64_t> intent_src_incarnation;
  std::atomic<std::uint64_t> intent_src_seq;
  std::atomic<std::uint64_t> intent_stream_seq;  // kNone: no intent
  // counters (monotone, for tools and tests)
  std::atomic<std::uint64_t> moved;         // records put into the egress / the ring
  std::atomic<std::uint64_t> acknowledged;  // export: publish acks; import: acks sent
  std::atomic<std::uint64_t> retries;       // export: records failed and retried
  std::atomic<std::uint64_t> reconnects;    // NATS reconnections seen
  std::atomic<std::uint64_t> duplicates;    // import: messages dropped as already applied
  std::atomic<std::uint64_t> recovered;     // intents completed by a restarted bridge
  std::atomic<std::uint64_t> reserved[1];
};
static_assert(sizeof(StateData) == 128);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

inline constexpr RoleSpec kBridgeRole{0, true, "bridge"};

inline constexpr std::uint64_t kStateFingerprint =
    layout_fingerprint({1, sizeof(StateData), sizeof(StateParams), alignof(StateData)});

// The parameters stored in a segment's parameter block; fields past the end
// of a short block keep their defaults (route 0, which verify refuses).
[[nodiscard]] StateParams read_state_params(std::span<const std::byte> raw) noexcept;
// The segment spec of a state segment with these parameters (`params` must
// outlive the spec: it points at them). A mismatch names the route or version.
[[nodiscard]] KindSpec state_spec(const StateParams& params);
// Writes the initial state into a new segment's data (no intent, nothing applied).
[[nodiscard]] Result<void> init_state(std::span<std::byte> data);

}  // namespace shm::bridge

// to_string of the enums above is reachable as shm::to_string too.
namespace shm {
using bridge::to_string;
}  // namespace shm
