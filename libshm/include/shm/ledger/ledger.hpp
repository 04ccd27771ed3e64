// Ledger: byte budgets and token buckets that independent processes share.
//
// One segment (kind 5, "ledger") holds
//   - a global account and two partitions: ordinary (limit global -
//     control_reserve) and control (limit global). Ordinary reservations can
//     therefore never borrow the control reserve, while control work may use
//     whatever ordinary work leaves free;
//   - named category accounts (a fixed table; each category belongs to one
//     partition; a limit is fixed at definition and a duplicate definition
//     cannot reset it);
//   - pools: owner accounts (a connection, a session, a process) with up to
//     four accounts each, every account covering a set of categories (several
//     categories may share one aggregate account), and an optional ticket cap;
//   - a bounded ticket table: every reservation, zero-byte ones included, holds
//     one ticket, so live tickets are bounded;
//   - token buckets (token_bucket.hpp) admitted all-or-nothing.
//
// Protocol. Every multi-word update holds one robust process-shared mutex
// (shm/platform/robust_mutex.hpp). The ticket table is the source of truth: a ticket
// records (pool, category, bytes, state) and its owner's attachment (slot,
// generation). Account counters are derived: reserve() writes the ticket's
// fields, publishes its state last, then updates counters; release() frees the
// ticket first. A holder killed inside the critical section leaves the next
// locker EOWNERDEAD: it restores the undo journal (replace, admit), recomputes
// every derived counter from the tickets, marks the mutex consistent and goes
// on. Counters are atomics, so shmctl and metrics read them without the lock;
// a seqlock version (odd while a holder mutates) tells consistent snapshots.
//
// Outcomes. A budget or rate refusal is an ordinary outcome (Rejection: which
// scope refused, the account's label, used, requested and limit); errors
// (Result) are bad arguments, stale or foreign tickets and damaged memory.
// Every reservation is all-or-nothing: nothing changes unless every dimension
// (ticket table, global, partition, category, pool account, pool ticket cap)
// accepts it.
//
// Handles. A Ledger is a process-local, move-only handle holding the segment
// and an attachment (role "member"); tickets it reserves are owned by that
// attachment, and only it may commit, replace, release or offer them. A
// ticket moves to another attachment by offer() + accept() (a journaled owner
// change: exactly one owner at every moment, whoever dies). Destroying the
// handle releases the tickets it still owns (handing offered ones to their
// live receiver); a process that dies instead has its tickets released by
// reclaim() (the sidecar's kind descriptor calls it, and a later attacher of
// the same slot sweeps them). A pool left by its owner while others hold
// tickets in it is orphaned and closes with its last ticket. PoolId and Ticket
// carry the segment incarnation: a handle of another ledger is ForeignHandle.
// One handle may be used by several threads at once.
#pragma once

#include "shm/error.hpp"
#include "shm/ledger/layout.hpp"
#include "shm/ledger/token_bucket.hpp"
#include "shm/segment/segment.hpp"

#include <array>
#include <cstdint>
#include <expected>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shm {

enum class Partition : std::uint8_t { Ordinary = 0, Control = 1 };
using LedgerScope = ledger::Scope;

struct CategoryId {
  std::uint32_t index = 0;
  friend bool operator==(CategoryId, CategoryId) = default;
};
// Pool and ticket handles name their ledger: `ledger` is the segment's
// incarnation (random per create), so a handle from another ledger, or from an
// earlier ledger of the same name, is refused with Errc::ForeignHandle.
struct PoolId {
  std::uint32_t index = 0;
  std::uint32_t generation = 0;
  std::uint64_t ledger = 0;  // the segment incarnation that issued the handle
  friend bool operator==(PoolId, PoolId) = default;
};
struct Ticket {
  std::uint32_t index = 0;
  std::uint32_t generation = 0;
  std::uint64_t ledger = 0;  // the segment incarnation that issued the handle
  friend bool operator==(Ticket, Ticket) = default;
};
// An attachment of the segment: (slot, generation) names one attacher for ever.
struct Owner {
  std::uint32_t slot = 0;
  std::uint32_t generation = 0;
  friend bool operator==(Owner, Owner) = default;
};

// Why a reservation or an admission was refused. For a bucket, `used` is
// burst - available tokens, `requested` the (coalesced) cost, `limit` the burst,
// so that used + requested > limit holds for every scope.
struct Rejection {
  LedgerScope scope = LedgerScope::Global;
  std::int64_t used = 0;
  std::int64_t requested = 0;
  std::int64_t limit = 0;
  std::uint8_t label_size = 0;
  std::array<char, 2 * ledger::kLabelBytes + 1> label_bytes{};  // "pool/account" fits

  [[nodiscard]] std::string_view label() const noexcept { return {label_bytes.data(), label_size}; }
  // "category 'frames' refused 200 bytes: used 900, limit 1000"
  [[nodiscard]] std::string describe() const;
};
[[nodiscard]] std::string_view to_string(LedgerScope scope) noexcept;
[[nodiscard]] std::string_view to_string(Partition partition) noexcept;

using LedgerReservation = std::expected<Ticket, Rejection>;
using LedgerReplacement = std::expected<void, Rejection>;
using LedgerAdmission = std::expected<void, Rejection>;

// Labels: [A-Za-z0-9._-]{1,32}.
struct CategorySpec {
  std::string label;
  std::int64_t limit = 0;
  Partition partition = Partition::Ordinary;
};
struct PoolAccountSpec {
  std::string label;
  std::int64_t limit = 0;
  std::vector<CategoryId> categories;  // empty: every category
};
struct PoolSpec {
  std::string label;                      // unique among open pools
  std::vector<PoolAccountSpec> accounts;  // 1..4, category sets must not overlap
  std::uint32_t max_tickets = 0;          // 0: only the ticket table bounds the pool
};
struct BucketSpec {
  std::string label;
  std::int64_t rate_per_sec = 0;
  std::int64_t burst = 0;
};

struct LedgerParams {
  std::int64_t global_limit = 0;
  std::int64_t control_reserve = 0;   // <= global_limit
  std::uint32_t max_tickets = 1024;   // [1, 2^22]
  std::uint32_t max_categories = 16;  // [1, 64]
  std::uint32_t max_pools = 64;       // [1, 2^16]
  std::uint32_t max_buckets = 16;     // [0, 2^12]
};
struct LedgerConfig {
  LedgerParams params;
  std::vector<CategorySpec> categories;  // defined at creation, ids 0, 1, ...
  std::vector<BucketSpec> buckets;       // defined at creation, ids 0, 1, ...
};

// ---------------------------------------------------------------- snapshots

struct AccountState {
  std::string label;
  std::int64_t limit = 0;
  std::int64_t used = 0;
  std::int64_t reserved = 0;  // of used, not committed yet
  std::uint64_t tickets = 0;
  std::uint64_t rejections = 0;
  friend bool operator==(const AccountState&, const AccountState&) = default;
};
struct CategoryState {
  AccountState account;
  Partition partition = Partition::Ordinary;
  friend bool operator==(const CategoryState&, const CategoryState&) = default;
};
struct PoolState {
  PoolId id;
  std::string label;
  Owner owner;
  bool orphaned = false;  // its owner left while others held tickets in it (`owner` is then void)
  std::uint32_t ticket_limit = 0;
  std::uint64_t tickets = 0;
  std::uint64_t rejections = 0;
  std::vector<AccountState> accounts;
  std::vector<std::uint64_t> category_masks;
  friend bool operator==(const PoolState&, const PoolState&) = default;
};
struct BucketState {
  std::string label;
  std::int64_t rate_per_sec = 0;
  std::int64_t burst = 0;
  token_bucket::Level level{};
  std::uint64_t admits = 0;
  std::uint64_t rejections = 0;
};
struct LedgerStats {
  std::uint64_t reserves = 0, commits = 0, releases = 0, replaces = 0, admits = 0;
  std::uint64_t refused_releases = 0, repairs = 0, reclaimed_tickets = 0;
  std::array<std::uint64_t, ledger::kScopes> rejections{};
  std::uint64_t offers = 0, handovers = 0;
  friend bool operator==(const LedgerStats&, const LedgerStats&) = default;
};
struct LedgerSnapshot {
  ledger::ParamBlock params{};
  AccountState global;
  std::array<AccountState, ledger::kPartitions> partitions;
  std::vector<CategoryState> categories;
  std::vector<PoolState> pools;  // open pools, by index
  std::vector<BucketState> buckets;
  std::uint64_t live_tickets = 0;
  std::uint64_t version = 0;
  bool faulted = false;
  LedgerStats stats;
};
struct TicketInfo {
  Ticket ticket;
  ledger::TicketState state = ledger::TicketState::Free;
  Owner owner;
  bool offered = false;  // the owner offers it to `offered_to` (hand-off pending)
  Owner offered_to;
  PoolId pool;
  CategoryId category;
  std::int64_t bytes = 0;
};
struct ReclaimReport {
  std::uint64_t tickets = 0;
  std::int64_t bytes = 0;
  std::uint64_t pools_closed = 0;
  std::uint64_t pools_orphaned = 0;  // left open for other owners' tickets; close with the last
  std::uint64_t handed_over = 0;     // offered tickets that went to their (live) receiver
  std::uint64_t offers_voided = 0;   // offers made to the departed owner, withdrawn
};

namespace ledger {

inline constexpr RoleSpec kMemberRole{0, false, "member"};

// A checked view of a ledger segment's data area (non-owning; valid while the
// segment stays mapped). Writes need a writable mapping.
struct View {
  ParamBlock params{};
  Geometry geometry{};
  LedgerControl* control = nullptr;
  Category* categories = nullptr;
  Pool* pools = nullptr;
  TicketSlot* tickets = nullptr;
  std::atomic<std::uint32_t>* free_stack = nullptr;
  Bucket* buckets = nullptr;
  std::uint64_t incarnation = 0;  // the segment's: stamped into every PoolId and Ticket
};
// Checks the parameter block and the data size before pointing into the mapping.
[[nodiscard]] Result<View> make_view(const Segment& segment);
[[nodiscard]] Result<void> validate(const LedgerParams& params);
// The KindSpec for create (exact) or open (`any`: accept any geometry).
[[nodiscard]] KindSpec kind_spec(const LedgerParams& params, bool any, ParamBlock& storage);

// Recomputes every derived counter from the ticket table without the lock (a
// seqlock snapshot, retried while writers run) and lists each difference and
// each broken invariant. `attached` reports whether an owner is still attached
// (tickets of gone owners are listed as pending reclaim); may be empty.
[[nodiscard]] std::vector<std::string> verify_unlocked(const View& view,
                                                       std::span<const SlotInfo> slots);
// Reads every counter (relaxed loads, no lock; may be mid-update unless the
// version is even and unchanged).
[[nodiscard]] LedgerSnapshot read_snapshot(const View& view);
// The parameter block and the segment's size (Corrupt, SizeMismatch).
[[nodiscard]] Result<void> check_geometry(const Segment& seg);
// What Ledger::attach(Segment) checks of a segment it is given: kind,
// layout, parameters and size.
[[nodiscard]] Result<void> check_adopted(const Segment& seg);
[[nodiscard]] std::string read_label(const Label& label);

}  // namespace ledger

// The setup helpers (docs/idioms.md, "Lifecycle"): create_ledger makes the
// segment (defining the configured categories and buckets), open_ledger opens
// it (any geometry, or `expected` exactly); neither attaches.
// Ledger::attach(segment) adopts the result; Ledger::create / open do both.
[[nodiscard]] Result<Segment> create_ledger(std::string_view name, const LedgerConfig& config,
                                            const CreateOptions& options = {});
[[nodiscard]] Result<Segment> open_ledger(std::string_view name, const OpenOptions& options = {});
[[nodiscard]] Result<Segment> open_ledger(std::string_view name, const LedgerParams& expected,
                                          const OpenOptions& options = {});

class Ledger {
 public:
  Ledger() = default;
  Ledger(Ledger&&) noexcept;
  Ledger& operator=(Ledger&&) noexcept;
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;
  // Releases the tickets this handle still owns, then detaches; a forked
  // child's copy releases nothing (the tickets are the parent's).
  ~Ledger();

  // Creates the segment, defines the configured categories and buckets, attaches.
  [[nodiscard]] static Result<Ledger> create(std::string_view name, const LedgerConfig& config,
                                             const CreateOptions& options = {});
  // Opens and attaches, accepting any geometry / checking `expected` exactly.
  [[nodiscard]] static Result<Ledger> open(std::string_view name, const OpenOptions& options = {});
  [[nodiscard]] static Result<Ledger> open(std::string_view name, const LedgerParams& expected,
                                           const OpenOptions& options = {});
  // Adopts a segment opened or created already (open_ledger, create_ledger)
  // and attaches; KindMismatch / SizeMismatch when it is not a ledger.
  [[nodiscard]] static Result<Ledger> attach(Segment segment);

  // ---- definitions (append-only tables; idempotent for identical specs)
  // A label already defined with the same limit and partition returns its id;
  // with another limit or partition: AlreadyExists (a limit cannot be reset).
  [[nodiscard]] Result<CategoryId> define_category(const CategorySpec& spec);
  [[nodiscard]] Result<CategoryId> category(std::string_view label) const;
  [[nodiscard]] Result<BucketId> define_bucket(const BucketSpec& spec);
  [[nodiscard]] Result<BucketId> bucket(std::string_view label) const;
  // Opens a pool owned by this attachment (AlreadyExists if the label is open).
  [[nodiscard]] Result<PoolId> open_pool(const PoolSpec& spec);
  [[nodiscard]] Result<PoolId> pool(std::string_view label) const;
  // Closes a pool that holds no tickets (else InvalidArgument naming how many).
  [[nodiscard]] Result<void> close_pool(PoolId pool);

  // ---- accounting
  [[nodiscard]] Result<LedgerReservation> reserve(PoolId pool, CategoryId category,
                                                  std::int64_t bytes);
  [[nodiscard]] Result<void> commit(Ticket ticket);
  [[nodiscard]] Result<void> release(Ticket ticket);
  // Moves `ticket` to `pool` (same category) with `bytes`, atomically; a
  // rejection leaves the ticket and every account as they were.
  [[nodiscard]] Result<LedgerReplacement> replace(Ticket ticket, PoolId pool, std::int64_t bytes);

  // ---- rate admission: all refills and debits commit together, or none
  [[nodiscard]] Result<LedgerAdmission> admit(std::span<const Constraint> constraints,
                                              std::int64_t now_ms);

  // ---- ownership hand-off between attachments (processes)
  // A ticket belongs to one attachment. To move it to another (the process
  // that dequeues the object it pays for):
  //   sender:   offer(ticket, receiver.owner())   -- the ticket stays the sender's
  //   receiver: accept(ticket)                    -- now it is the receiver's
  // The owner field changes in one journaled step, so a ticket always has
  // exactly one owner, whoever dies when:
  //   - the sender leaves (detach, death + reclaim) with the offer pending: the
  //     ticket is handed over to the receiver if it is a live attachment,
  //     else released; the receiver's accept() then succeeds (it already owns it);
  //   - the receiver leaves before accepting: the offer is void, the sender
  //     keeps the ticket;
  //   - either dies inside offer() or accept(): repair restores the state
  //     before the call.
  // An offer replaces the ticket's earlier offer; the sender may still commit,
  // replace or release an offered ticket (a release makes accept() fail).
  // InvalidArgument: `to` is this handle or not an attached slot generation.
  [[nodiscard]] Result<void> offer(Ticket ticket, Owner to);
  // Withdraws a pending offer (no-op when none is pending).
  [[nodiscard]] Result<void> withdraw(Ticket ticket);
  // Takes ownership of a ticket offered to this handle; succeeds without change
  // when this handle already owns it (accepted before, or handed over when the
  // sender left). PermissionDenied: owned by another and not offered to us.
  [[nodiscard]] Result<void> accept(Ticket ticket);

  // ---- ownership and inspection
  // Releases every ticket this handle owns, offered ones included; returns how many.
  [[nodiscard]] Result<std::uint64_t> release_all();
  // Releases every ticket of `owner` (a dead attacher, never this handle) and
  // closes that owner's pools once they hold no tickets. Takes the lock
  // (repairing if its holder died). InvalidArgument when `owner` is alive.
  [[nodiscard]] Result<ReclaimReport> reclaim(Owner owner);
  [[nodiscard]] Result<LedgerSnapshot> snapshot() const;  // consistent: taken under the lock
  [[nodiscard]] Result<std::vector<TicketInfo>> tickets() const;
  // Takes the lock (repairing if needed) and lists every invariant violation.
  [[nodiscard]] Result<std::vector<std::string>> verify() const;

  [[nodiscard]] Owner owner() const noexcept { return owner_; }
  [[nodiscard]] const Segment& segment() const noexcept { return segment_; }
  [[nodiscard]] const Attachment& attachment() const noexcept { return attachment_; }
  [[nodiscard]] const ledger::View& view() const noexcept { return view_; }
  void heartbeat() noexcept { attachment_.heartbeat(); }

 private:
  [[nodiscard]] static Result<Ledger> bind(Segment segment);
  void shutdown() noexcept;

  Segment segment_;
  Attachment attachment_;
  ledger::View view_;
  Owner owner_;
};

}  // namespace shm
