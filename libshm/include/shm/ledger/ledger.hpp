/// @file
/// Ledger: byte budgets and token buckets that independent processes share.
///
/// One segment (kind 5, "ledger") holds
///   - a global account and two partitions: ordinary (limit global -
///     control_reserve) and control (limit global). Ordinary reservations can
///     therefore never borrow the control reserve, while control work may use
///     whatever ordinary work leaves free;
///   - named category accounts (a fixed table; each category belongs to one
///     partition; a limit is fixed at definition and a duplicate definition
///     cannot reset it);
///   - pools: owner accounts (a connection, a session, a process) with up to
///     four accounts each, every account covering a set of categories (several
///     categories may share one aggregate account), and an optional ticket cap;
///   - a bounded ticket table: every reservation, zero-byte ones included, holds
///     one ticket, so live tickets are bounded;
///   - token buckets (token_bucket.hpp) admitted all-or-nothing.
///
/// Protocol. Every multi-word update holds one robust process-shared mutex
/// (shm/platform/robust_mutex.hpp). The ticket table is the source of truth: a ticket
/// records (pool, category, bytes, state) and its owner's attachment (slot,
/// generation). Account counters are derived: reserve() writes the ticket's
/// fields, publishes its state last, then updates counters; release() frees the
/// ticket first. A holder killed inside the critical section leaves the next
/// locker EOWNERDEAD: it restores the undo journal (replace, admit), recomputes
/// every derived counter from the tickets, marks the mutex consistent and goes
/// on. Counters are atomics, so shmctl and metrics read them without the lock;
/// a seqlock version (odd while a holder mutates) tells consistent snapshots.
///
/// Outcomes. A budget or rate refusal is an ordinary outcome (Rejection: which
/// scope refused, the account's label, used, requested and limit); errors
/// (Result) are bad arguments, stale or foreign tickets and damaged memory.
/// Every reservation is all-or-nothing: nothing changes unless every dimension
/// (ticket table, global, partition, category, pool account, pool ticket cap)
/// accepts it.
///
/// Handles. A Ledger is a process-local, move-only handle holding the segment
/// and an attachment (role "member"); tickets it reserves are owned by that
/// attachment, and only it may commit, replace, release or offer them. A
/// ticket moves to another attachment by offer() + accept() (a journaled owner
/// change: exactly one owner at every moment, whoever dies). Destroying the
/// handle releases the tickets it still owns (handing offered ones to their
/// live receiver); a process that dies instead has its tickets released by
/// reclaim() (the sidecar's kind descriptor calls it, and a later attacher of
/// the same slot sweeps them). A pool left by its owner while others hold
/// tickets in it is orphaned and closes with its last ticket. PoolId and Ticket
/// carry the segment incarnation: a handle of another ledger is ForeignHandle.
/// One handle may be used by several threads at once.
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

/// Which partition of the global account a category draws from: Ordinary (up to
/// global_limit - control_reserve) or Control (up to global_limit: the reserve is
/// for control traffic only).
enum class Partition : std::uint8_t { Ordinary = 0, Control = 1 };
/// Which account or bucket refused (Rejection::scope).
using LedgerScope = ledger::Scope;

/// A category of a ledger segment (index into its category table).
struct CategoryId {
  std::uint32_t index = 0;  ///< row of the category table
  /// Same category.
  friend bool operator==(CategoryId, CategoryId) = default;
};
/// Pool and ticket handles name their ledger: `ledger` is the segment's
/// incarnation (random per create), so a handle from another ledger, or from an
/// earlier ledger of the same name, is refused with Errc::ForeignHandle.
struct PoolId {
  std::uint32_t index = 0;       ///< row of the pool table
  std::uint32_t generation = 0;  ///< +1 per reuse of the row: a stale handle never matches
  std::uint64_t ledger = 0;      ///< the segment incarnation that issued the handle
  /// Same pool of the same ledger.
  friend bool operator==(PoolId, PoolId) = default;
};
/// Bytes reserved in a pool and category; see PoolId for `ledger`.
struct Ticket {
  std::uint32_t index = 0;       ///< row of the ticket table
  std::uint32_t generation = 0;  ///< +1 per reuse of the row: a stale handle never matches
  std::uint64_t ledger = 0;      ///< the segment incarnation that issued the handle
  /// Same ticket of the same ledger.
  friend bool operator==(Ticket, Ticket) = default;
};
/// An attachment of the segment: (slot, generation) names one attacher for ever.
struct Owner {
  std::uint32_t slot = 0;        ///< the attachment slot
  std::uint32_t generation = 0;  ///< the slot's generation at attach
  /// Same attacher.
  friend bool operator==(Owner, Owner) = default;
};

/// Why a reservation or an admission was refused. For a bucket, `used` is
/// burst - available tokens, `requested` the (coalesced) cost, `limit` the burst,
/// so that used + requested > limit holds for every scope.
struct Rejection {
  LedgerScope scope = LedgerScope::Global;  ///< which account or bucket refused
  std::int64_t used = 0;                    ///< bytes (tokens) in use in that scope
  std::int64_t requested = 0;               ///< bytes (tokens) asked for
  std::int64_t limit = 0;                   ///< the scope's limit
  std::uint8_t label_size = 0;              ///< bytes of label_bytes in use
  std::array<char, 2 * ledger::kLabelBytes + 1> label_bytes{};  ///< "pool/account" fits

  /// The refusing scope's label: "global", the partition, the category, "pool/account",
  /// "pool/tickets", "tickets" or the bucket.
  [[nodiscard]] std::string_view label() const noexcept { return {label_bytes.data(), label_size}; }
  /// "category 'frames' refused 200 bytes: used 900, limit 1000"
  [[nodiscard]] std::string describe() const;
};
/// The enumerator's name, for logs and tool output.
[[nodiscard]] std::string_view to_string(LedgerScope scope) noexcept;
/// The enumerator's name, for logs and tool output.
[[nodiscard]] std::string_view to_string(Partition partition) noexcept;

/// reserve()'s answer: a ticket, or why the budget refused.
using LedgerReservation = std::expected<Ticket, Rejection>;
/// replace()'s answer: done, or why the budget refused.
using LedgerReplacement = std::expected<void, Rejection>;
/// admit()'s answer: admitted, or which bucket refused.
using LedgerAdmission = std::expected<void, Rejection>;

/// Labels: [A-Za-z0-9._-]{1,32}.
struct CategorySpec {
  std::string label;                          ///< unique among categories
  std::int64_t limit = 0;                     ///< bytes the category may use, >= 0
  Partition partition = Partition::Ordinary;  ///< which partition it draws from
};
/// One account of a pool: a limit over a set of categories.
struct PoolAccountSpec {
  std::string label;                   ///< unique within the pool
  std::int64_t limit = 0;              ///< bytes the account's categories may use in the pool, >= 0
  std::vector<CategoryId> categories;  ///< empty: every category
};
/// A pool: up to 4 accounts, each limiting some categories, owned by the attachment that opens it.
struct PoolSpec {
  std::string label;                      ///< unique among open pools
  std::vector<PoolAccountSpec> accounts;  ///< 1..4, category sets must not overlap
  std::uint32_t max_tickets = 0;          ///< 0: only the ticket table bounds the pool
};
/// A token bucket of the ledger (labels as for categories).
struct BucketSpec {
  std::string label;              ///< unique among buckets
  std::int64_t rate_per_sec = 0;  ///< tokens gained per second, >= 0
  std::int64_t burst = 0;         ///< most tokens the bucket holds (it starts full), >= 0
};

/// The geometry and global limits of a ledger segment (docs/ledger.md).
struct LedgerParams {
  std::int64_t global_limit = 0;      ///< bytes every category together may use, >= 0
  std::int64_t control_reserve = 0;   ///< <= global_limit
  std::uint32_t max_tickets = 1024;   ///< [1, 2^22]
  std::uint32_t max_categories = 16;  ///< [1, 64]
  std::uint32_t max_pools = 64;       ///< [1, 2^16]
  std::uint32_t max_buckets = 16;     ///< [0, 2^12]
};
/// What create_ledger makes: the geometry and the categories and buckets defined at once.
struct LedgerConfig {
  LedgerParams params;                   ///< the geometry and global limits
  std::vector<CategorySpec> categories;  ///< defined at creation, ids 0, 1, ...
  std::vector<BucketSpec> buckets;       ///< defined at creation, ids 0, 1, ...
};

// ---------------------------------------------------------------- snapshots

/// One account's counters.
struct AccountState {
  std::string label;          ///< the account's label ("global", "ordinary", "control" for those)
  std::int64_t limit = 0;     ///< bytes it may use
  std::int64_t used = 0;      ///< bytes in use (reserved or committed)
  std::int64_t reserved = 0;  ///< of used, not committed yet
  std::uint64_t tickets = 0;  ///< live tickets charged to it
  std::uint64_t rejections = 0;  ///< statistics: reservations it refused
  /// Every field equal.
  friend bool operator==(const AccountState&, const AccountState&) = default;
};
/// A category's account and partition.
struct CategoryState {
  AccountState account;                       ///< its counters
  Partition partition = Partition::Ordinary;  ///< which partition it draws from
  /// Every field equal.
  friend bool operator==(const CategoryState&, const CategoryState&) = default;
};
/// An open pool's owner, limits and accounts.
struct PoolState {
  PoolId id;              ///< its handle
  std::string label;      ///< its label
  Owner owner;            ///< the attachment that opened it
  bool orphaned = false;  ///< its owner left while others held tickets in it (`owner` is then void)
  std::uint32_t ticket_limit = 0;  ///< PoolSpec::max_tickets (0: only the ticket table bounds it)
  std::uint64_t tickets = 0;       ///< live tickets in it
  std::uint64_t rejections = 0;    ///< statistics: reservations it refused
  std::vector<AccountState> accounts;  ///< its accounts, in PoolSpec order
  std::vector<std::uint64_t>
      category_masks;  ///< per account: the categories it covers, bit i = category i
  /// Every field equal.
  friend bool operator==(const PoolState&, const PoolState&) = default;
};
/// A token bucket's configuration, level and counters.
struct BucketState {
  std::string label;              ///< its label
  std::int64_t rate_per_sec = 0;  ///< tokens gained per second
  std::int64_t burst = 0;         ///< most tokens it holds
  token_bucket::Level level{};    ///< the stored level (refilled on the next admission)
  std::uint64_t admits = 0;       ///< admissions that included it
  std::uint64_t rejections = 0;   ///< statistics: admissions it refused
};
/// Ledger-wide operation counters.
struct LedgerStats {
  std::uint64_t reserves = 0,          ///< successful reservations
      commits = 0,                     ///< successful commits
      releases = 0,                    ///< successful releases
      replaces = 0,                    ///< successful replaces
      admits = 0;                      ///< successful admissions
  std::uint64_t refused_releases = 0,  ///< stale, double or foreign release / commit / replace
      repairs = 0,                     ///< repairs after a holder died (EOWNERDEAD)
      reclaimed_tickets = 0;           ///< tickets released on behalf of dead owners
  std::array<std::uint64_t, ledger::kScopes> rejections{};  ///< refusals, by LedgerScope
  std::uint64_t offers = 0,                                 ///< hand-off offers made
      handovers = 0;  ///< ownership moves: accepted, or handed over when the owner left
  /// Every field equal.
  friend bool operator==(const LedgerStats&, const LedgerStats&) = default;
};
/// Every account, pool, bucket and counter of a ledger.
struct LedgerSnapshot {
  ledger::ParamBlock params{};                               ///< the segment's parameter block
  AccountState global;                                       ///< the global account
  std::array<AccountState, ledger::kPartitions> partitions;  ///< Ordinary then Control
  std::vector<CategoryState> categories;                     ///< by CategoryId::index
  std::vector<PoolState> pools;                              ///< open pools, by index
  std::vector<BucketState> buckets;                          ///< by BucketId::index
  std::uint64_t live_tickets = 0;                            ///< tickets reserved or committed
  std::uint64_t version = 0;                                 ///< the seqlock version it was read at
  bool faulted = false;  ///< damage was found: every operation fails
  LedgerStats stats;     ///< operation counters
};
/// One live ticket (Ledger::tickets()).
struct TicketInfo {
  Ticket ticket;                                          ///< its handle
  ledger::TicketState state = ledger::TicketState::Free;  ///< Reserved or Committed
  Owner owner;                                            ///< the attachment that owns it
  bool offered = false;    ///< the owner offers it to `offered_to` (hand-off pending)
  Owner offered_to;        ///< the receiver while `offered`
  PoolId pool;             ///< the pool it is charged to
  CategoryId category;     ///< the category it is charged to
  std::int64_t bytes = 0;  ///< bytes charged
};
/// What Ledger::reclaim() did for a dead owner.
struct ReclaimReport {
  std::uint64_t tickets = 0;         ///< tickets released
  std::int64_t bytes = 0;            ///< bytes those tickets held
  std::uint64_t pools_closed = 0;    ///< the owner's pools closed
  std::uint64_t pools_orphaned = 0;  ///< left open for other owners' tickets; close with the last
  std::uint64_t handed_over = 0;     ///< offered tickets that went to their (live) receiver
  std::uint64_t offers_voided = 0;   ///< offers made to the departed owner, withdrawn
};

/// The ledger's shared layout, its checked arithmetic and its process-local helpers.
namespace ledger {

inline constexpr RoleSpec kMemberRole{0, false,
                                      "member"};  ///< the one (shared) role of a ledger handle

/// A checked view of a ledger segment's data area (non-owning; valid while the
/// segment stays mapped). Writes need a writable mapping.
struct View {
  ParamBlock params{};                               ///< the checked parameter block
  Geometry geometry{};                               ///< where each table starts
  LedgerControl* control = nullptr;                  ///< the control block
  Category* categories = nullptr;                    ///< the category table
  Pool* pools = nullptr;                             ///< the pool table
  TicketSlot* tickets = nullptr;                     ///< the ticket table
  std::atomic<std::uint32_t>* free_stack = nullptr;  ///< the stack of free ticket indices
  Bucket* buckets = nullptr;                         ///< the bucket table
  std::uint64_t incarnation = 0;  ///< the segment's: stamped into every PoolId and Ticket
};
/// Checks the parameter block and the data size before pointing into the mapping.
[[nodiscard]] Result<View> make_view(const Segment& segment);
/// InvalidArgument unless every parameter is in its range (docs/ledger.md).
[[nodiscard]] Result<void> validate(const LedgerParams& params);
/// The KindSpec for create (exact) or open (`any`: accept any geometry).
[[nodiscard]] KindSpec kind_spec(const LedgerParams& params, bool any, ParamBlock& storage);

/// Recomputes every derived counter from the ticket table without the lock (a
/// seqlock snapshot, retried while writers run) and lists each difference and
/// each broken invariant. `attached` reports whether an owner is still attached
/// (tickets of gone owners are listed as pending reclaim); may be empty.
[[nodiscard]] std::vector<std::string> verify_unlocked(const View& view,
                                                       std::span<const SlotInfo> slots);
/// Reads every counter (relaxed loads, no lock; may be mid-update unless the
/// version is even and unchanged).
[[nodiscard]] LedgerSnapshot read_snapshot(const View& view);
/// The parameter block and the segment's size (Corrupt, SizeMismatch).
[[nodiscard]] Result<void> check_geometry(const Segment& seg);
/// What Ledger::attach(Segment) checks of a segment it is given: kind,
/// layout, parameters and size.
[[nodiscard]] Result<void> check_adopted(const Segment& seg);
/// A stored label as a string.
[[nodiscard]] std::string read_label(const Label& label);

}  // namespace ledger

/// The setup helpers (docs/idioms.md, "Lifecycle"): create_ledger makes the
/// segment (defining the configured categories and buckets), open_ledger opens
/// it (any geometry, or `expected` exactly); neither attaches.
/// Ledger::attach(segment) adopts the result; Ledger::create / open do both.
[[nodiscard]] Result<Segment> create_ledger(std::string_view name, const LedgerConfig& config,
                                            const CreateOptions& options = {});
/// Opens a ledger segment of any geometry (no attachment).
[[nodiscard]] Result<Segment> open_ledger(std::string_view name, const OpenOptions& options = {});
/// Opens a ledger segment whose geometry is `expected` exactly (no attachment).
[[nodiscard]] Result<Segment> open_ledger(std::string_view name, const LedgerParams& expected,
                                          const OpenOptions& options = {});

/// A handle on a ledger segment: byte budgets (categories, pools, tickets) and
/// token buckets shared by every attached process. Move-only; releases its
/// tickets and detaches on destruction.
class Ledger {
 public:
  Ledger() = default;
  /// Takes over the other's attachment and tickets.
  Ledger(Ledger&&) noexcept;
  /// Releases this handle's tickets and detaches, then takes over the other's.
  Ledger& operator=(Ledger&&) noexcept;
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;
  /// Releases the tickets this handle still owns, then detaches; a forked
  /// child's copy releases nothing (the tickets are the parent's).
  ~Ledger();

  /// Creates the segment, defines the configured categories and buckets, attaches.
  [[nodiscard]] static Result<Ledger> create(std::string_view name, const LedgerConfig& config,
                                             const CreateOptions& options = {});
  /// Opens and attaches, accepting any geometry / checking `expected` exactly.
  [[nodiscard]] static Result<Ledger> open(std::string_view name, const OpenOptions& options = {});
  /// Opens and attaches, checking that the geometry is `expected` exactly.
  [[nodiscard]] static Result<Ledger> open(std::string_view name, const LedgerParams& expected,
                                           const OpenOptions& options = {});
  /// Adopts a segment opened or created already (open_ledger, create_ledger)
  /// and attaches; KindMismatch / SizeMismatch when it is not a ledger.
  [[nodiscard]] static Result<Ledger> attach(Segment segment);

  // ---- definitions (append-only tables; idempotent for identical specs)
  /// A label already defined with the same limit and partition returns its id;
  /// with another limit or partition: AlreadyExists (a limit cannot be reset).
  [[nodiscard]] Result<CategoryId> define_category(const CategorySpec& spec);
  /// The id of category `label` (NotFound if undefined).
  [[nodiscard]] Result<CategoryId> category(std::string_view label) const;
  /// As define_category(), for a token bucket.
  [[nodiscard]] Result<BucketId> define_bucket(const BucketSpec& spec);
  /// The id of bucket `label` (NotFound if undefined).
  [[nodiscard]] Result<BucketId> bucket(std::string_view label) const;
  /// Opens a pool owned by this attachment (AlreadyExists if the label is open).
  [[nodiscard]] Result<PoolId> open_pool(const PoolSpec& spec);
  /// The id of the open pool `label` (NotFound if none is open).
  [[nodiscard]] Result<PoolId> pool(std::string_view label) const;
  /// Closes a pool that holds no tickets (else InvalidArgument naming how many).
  [[nodiscard]] Result<void> close_pool(PoolId pool);

  // ---- accounting
  /// Reserves `bytes` in `pool` for `category`: every account on the way
  /// (global, partition, category, pool account) and the ticket caps must have
  /// room, else the Rejection names the first that has not. InvalidArgument:
  /// negative bytes, an undefined category or one no account of the pool
  /// covers, a stale (closed) pool; ForeignHandle: another ledger's pool.
  [[nodiscard]] Result<LedgerReservation> reserve(PoolId pool, CategoryId category,
                                                  std::int64_t bytes);
  /// Marks a reserved ticket committed (its bytes stay charged).
  [[nodiscard]] Result<void> commit(Ticket ticket);
  /// Frees a ticket's bytes. InvalidArgument: released already, or stale (its
  /// row reused); PermissionDenied: another attachment owns it.
  [[nodiscard]] Result<void> release(Ticket ticket);
  /// Moves `ticket` to `pool` (same category) with `bytes`, atomically; a
  /// rejection leaves the ticket and every account as they were.
  [[nodiscard]] Result<LedgerReplacement> replace(Ticket ticket, PoolId pool, std::int64_t bytes);

  // ---- rate admission: all refills and debits commit together, or none
  /// Refills and debits every bucket of `constraints` (coalesced per bucket) at
  /// `now_ms`, all or none; the Rejection names the first bucket short of tokens.
  [[nodiscard]] Result<LedgerAdmission> admit(std::span<const Constraint> constraints,
                                              std::int64_t now_ms);

  // ---- ownership hand-off between attachments (processes)
  /// A ticket belongs to one attachment. To move it to another (the process
  /// that dequeues the object it pays for):
  ///   sender:   offer(ticket, receiver.owner())   -- the ticket stays the sender's
  ///   receiver: accept(ticket)                    -- now it is the receiver's
  /// The owner field changes in one journaled step, so a ticket always has
  /// exactly one owner, whoever dies when:
  ///   - the sender leaves (detach, death + reclaim) with the offer pending: the
  ///     ticket is handed over to the receiver if it is a live attachment,
  ///     else released; the receiver's accept() then succeeds (it already owns it);
  ///   - the receiver leaves before accepting: the offer is void, the sender
  ///     keeps the ticket;
  ///   - either dies inside offer() or accept(): repair restores the state
  ///     before the call.
  /// An offer replaces the ticket's earlier offer; the sender may still commit,
  /// replace or release an offered ticket (a release makes accept() fail).
  /// InvalidArgument: `to` is this handle or not an attached slot generation.
  [[nodiscard]] Result<void> offer(Ticket ticket, Owner to);
  /// Withdraws a pending offer (no-op when none is pending).
  [[nodiscard]] Result<void> withdraw(Ticket ticket);
  /// Takes ownership of a ticket offered to this handle; succeeds without change
  /// when this handle already owns it (accepted before, or handed over when the
  /// sender left). PermissionDenied: owned by another and not offered to us.
  [[nodiscard]] Result<void> accept(Ticket ticket);

  // ---- ownership and inspection
  /// Releases every ticket this handle owns, offered ones included; returns how many.
  [[nodiscard]] Result<std::uint64_t> release_all();
  /// Releases every ticket of `owner` (a dead attacher, never this handle) and
  /// closes that owner's pools once they hold no tickets. Takes the lock
  /// (repairing if its holder died). InvalidArgument when `owner` is alive.
  [[nodiscard]] Result<ReclaimReport> reclaim(Owner owner);
  [[nodiscard]] Result<LedgerSnapshot> snapshot() const;  ///< consistent: taken under the lock
  /// Every live ticket, read under the lock.
  [[nodiscard]] Result<std::vector<TicketInfo>> tickets() const;
  /// Takes the lock (repairing if needed) and lists every invariant violation.
  [[nodiscard]] Result<std::vector<std::string>> verify() const;

  /// This handle's attachment as an Owner (give it to a sender's offer()).
  [[nodiscard]] Owner owner() const noexcept { return owner_; }
  /// The mapped segment.
  [[nodiscard]] const Segment& segment() const noexcept { return segment_; }
  /// This handle's attachment slot.
  [[nodiscard]] const Attachment& attachment() const noexcept { return attachment_; }
  /// The checked view of the data area.
  [[nodiscard]] const ledger::View& view() const noexcept { return view_; }
  /// Refreshes the attachment's heartbeat.
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
