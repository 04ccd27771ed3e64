/// @file
/// Kind descriptors: how programs (shmctl, the sidecar) see every segment kind.
/// Adding a kind = writing one descriptor and listing it in libshm/src/segment/kinds.cpp; the
/// programs need no edits.
#pragma once

#include "shm/error.hpp"
#include "shm/segment/describe.hpp"
#include "shm/segment/segment.hpp"

#include <optional>
#include <span>
#include <string>
#include <vector>

namespace shm {

/// A layout an older build wrote for a kind, recognised by its fingerprint:
/// open refuses it (naming both versions), `shmctl inspect` describes it
/// read-only with `describe`.
struct OlderLayout {
  std::uint64_t fingerprint;  ///< the older layout's fingerprint
  std::uint32_t version;      ///< its layout version, named in the refusal
  void (*describe)(const Segment& segment, Node& out);  ///< read-only description of such a segment
};

/// What a role of a structure has waiting for it, and how far it has come:
/// the sidecar's "stuck" is alive, `waiting`, and `progress` unchanged for
/// --stuck-after (docs/architecture.md). Read lock-free from the structure's
/// own positions and counters, so a working process costs nothing to watch.
struct RoleProgress {
  bool waiting = false;        ///< work is there for this role (records to read, a record to send)
  std::uint64_t progress = 0;  ///< grows whenever the role does some of it
};

/// One segment kind as programs see it: identity, roles and the operations
/// shmctl and the sidecar run on any segment of the kind.
struct KindDescriptor {
  KindId kind;                ///< the header's kind id (kind_ids.hpp)
  std::string_view name;      ///< short name shown by the programs ("spsc_ring", "ledger", ...)
  std::uint64_t fingerprint;  ///< layout fingerprint of the kind's shared structs in this build
  std::span<const RoleSpec> roles;  ///< the roles a handle attaches as
  /// Kind-specific state for `inspect` and metrics. The segment may be mapped
  /// read-only and may be corrupt: describe reads defensively.
  void (*describe)(const Segment& segment, Node& out);
  /// Invariant violations, damaged records (a channel payload whose bytes no
  /// longer match their CRC32C) and terminal states (a FAULTED channel or
  /// ledger, with its cause), one line each; empty = healthy. Read-only and
  /// lock-free: it runs against live segments (each kind says how it avoids
  /// reporting what a live writer is in the middle of) and never blocks them.
  std::vector<std::string> (*verify)(const Segment& segment);
  /// Releases what a dead attacher held (the slot itself is freed by the caller).
  /// Returns a line per action taken. Needs a writable mapping. The caller holds
  /// the dead slot's kernel lock, so `dead` must be treated as dead, never probed
  /// (a liveness probe would see that lock as a live holder). An error when it
  /// could not release everything: the caller then keeps the slot for a retry.
  Result<std::vector<std::string>> (*reclaim)(Segment& segment, const SlotInfo& dead);
  /// Optional: live-tunable parameters (`shmctl set`); nullptr when none.
  Result<void> (*set)(Segment& segment, std::string_view key, std::string_view value) = nullptr;
  /// Optional: records without consuming them (`shmctl dump`), up to `limit`.
  std::vector<std::vector<std::byte>> (*dump)(const Segment& segment, std::size_t limit) = nullptr;
  /// Optional: the kind's own layout version (0 = none kept) and the older
  /// layouts this build still recognises.
  std::uint32_t layout_version = 0;
  /// Older layouts recognised, see layout_version.
  std::span<const OlderLayout> older_layouts = {};
  /// Optional: RoleProgress of `role` (nullopt: this role never has work
  /// waiting for it, e.g. a producer, and is never stuck).
  std::optional<RoleProgress> (*progress)(const Segment& segment, std::uint32_t role) = nullptr;
};

/// Every kind this build knows, in kind id order.
[[nodiscard]] std::span<const KindDescriptor* const> all_kinds() noexcept;
/// The older layout of `kind` with this fingerprint, or nullptr.
[[nodiscard]] const OlderLayout* find_older_layout(const KindDescriptor& kind,
                                                   std::uint64_t fingerprint) noexcept;
/// The descriptor of `kind`, or nullptr for an id this build does not know.
[[nodiscard]] const KindDescriptor* find_kind(KindId kind) noexcept;
/// The name of `role` in `kind` (nullptr allowed), or "unknown".
[[nodiscard]] std::string_view role_name(const KindDescriptor* kind, std::uint32_t role) noexcept;

/// Generic header description shared by every kind (identity, attachers, counters).
void describe_header(const Segment& segment, Node& out);
/// Frees a dead holder's slot: takes its kernel lock first, so it never races a
/// taker-over, then marks it Free and records a Reclaimed event. False if the
/// slot turned out to be alive.
[[nodiscard]] Result<bool> reclaim_slot(Segment& segment, std::size_t slot);

/// What reclaim_dead_attacher() did with one slot.
enum class ReclaimStatus : std::uint8_t {
  Reclaimed,  ///< the kind released what the holder had; the slot is Free, a Reclaimed event
              ///< recorded
  LockHeld,   ///< another open file description holds the slot's lock (a live holder, a process
              ///< taking the slot over, another reclaimer): nothing touched
  Changed,    ///< the slot was freed or attached again (another generation) since it was read:
              ///< nothing touched
};
/// The enumerator's name, for logs and shmctl output.
[[nodiscard]] std::string_view to_string(ReclaimStatus status) noexcept;

/// What reclaim_dead_attacher() did, and the kind's account of it.
struct SlotReclaim {
  ReclaimStatus status = ReclaimStatus::Changed;  ///< what happened to the slot
  std::vector<std::string> actions;               ///< the kind's reclaim() lines (Reclaimed only)
};

/// The one reclaim path of the programs (shm-sidecar's Monitor, `shmctl
/// reclaim`). `dead` is a slot read from `segment` as Liveness::Dead (it says
/// Attached, its kernel lock is free). Takes the slot's kernel lock and keeps it
/// to the end, so no process attaches to the slot meanwhile and a live holder is
/// never touched; checks the slot still names `dead` (Attached, same
/// generation); runs kind.reclaim(); then marks the slot Free and records a
/// Reclaimed event. `segment` must be a writable mapping of a segment whose kind
/// id and layout fingerprint are `kind`'s (else InvalidArgument / KindMismatch /
/// FingerprintMismatch, and nothing is touched). An error from the kind's
/// reclaim is returned with its code, the message naming the segment, the kind
/// and the slot; the slot then stays Attached (and dead), to be retried.
[[nodiscard]] Result<SlotReclaim> reclaim_dead_attacher(Segment& segment,
                                                        const KindDescriptor& kind,
                                                        const SlotInfo& dead);

/// @name Per-kind descriptors (defined next to each kind)
///@{
extern const KindDescriptor kSpscRingDescriptor;      ///< kSpscRingKind
extern const KindDescriptor kMpmcRingDescriptor;      ///< kMpmcRingKind
extern const KindDescriptor kFanoutBitmapDescriptor;  ///< kFanoutBitmapKind
extern const KindDescriptor kChannelDescriptor;       ///< kChannelKind
extern const KindDescriptor kLedgerDescriptor;        ///< kLedgerKind
extern const KindDescriptor kRelayDescriptor;         ///< kRelayKind
extern const KindDescriptor kEgressDescriptor;        ///< kEgressKind
/// kBridgeStateKind, written by shm-bridge (daemons/bridge).
extern const KindDescriptor kBridgeStateDescriptor;
extern const KindDescriptor kTopicDescriptor;  ///< kTopicKind
///@}

}  // namespace shm
