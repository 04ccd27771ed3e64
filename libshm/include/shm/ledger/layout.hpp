// The binary layout of a ledger segment (kind 5). Everything here lives in the
// mapping and is shared by every attached process; process-local handles are
// in ledger/ledger.hpp.
//
// Data area (after the kHeaderSize header), offsets from LedgerGeometry:
//   LedgerControl                  mutex, seqlock version, stats, global and
//                                  partition accounts, table sizes, journal
//   Category   [max_categories]    named category accounts (append-only)
//   Pool       [max_pools]         owner pools, up to kPoolAccounts accounts each
//   TicketSlot [max_tickets]       the bounded ticket table: the source of truth
//                                  (owner, pool, category, bytes, pending offer)
//   u32        [max_tickets]       stack of free ticket indices (derived)
//   Bucket     [max_buckets]       token buckets (append-only definitions)
//
// Primary state: the ticket table (a ticket's owner and pending offer
// included), the pool/category/bucket definitions (a pool's owner, or
// kOrphanedPool) and bucket levels. Derived state: every account's used/reserved/tickets, the
// live-ticket count and the free stack; repair() recomputes all of it from the
// tickets. Every field is an atomic so that shmctl and metrics may read
// without the lock (relaxed loads; the seqlock `version` tells a consistent
// snapshot); writers hold the robust mutex and use plain relaxed loads/stores
// (no read-modify-write instructions are needed under the lock).
#pragma once

#include "shm/ledger/token_bucket.hpp"
#include "shm/platform/robust_mutex.hpp"
#include "shm/segment/header.hpp"
#include "shm/segment/kind_ids.hpp"
#include "shm/segment/layout.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace shm {

namespace ledger {

inline constexpr std::size_t kLabelBytes = 32;
inline constexpr std::uint32_t kMaxCategories = 64;  // a pool account's category set is a u64 mask
inline constexpr std::uint32_t kPoolAccounts = 4;
inline constexpr std::uint32_t kMaxPools = 1u << 16;
inline constexpr std::uint32_t kMaxTickets = 1u << 22;
inline constexpr std::uint32_t kMaxBuckets = 1u << 12;
inline constexpr std::uint32_t kPartitions = 2;  // ordinary, control

// A label of up to 32 bytes, NUL-padded, stored as words so that unlocked
// readers never race on plain bytes.
struct Label {
  std::atomic<std::uint64_t> words[kLabelBytes / 8];
};

struct Account {
  std::atomic<std::int64_t> limit;        // fixed while the account exists
  std::atomic<std::int64_t> used;         // derived: bytes of live tickets (reserved + committed)
  std::atomic<std::int64_t> reserved;     // derived: of `used`, bytes not committed yet
  std::atomic<std::uint64_t> tickets;     // derived: live tickets charged here
  std::atomic<std::uint64_t> rejections;  // statistics: reservations this account refused
};

struct Category {
  Label label;
  Account account;
  std::atomic<std::uint32_t> partition;  // 0 ordinary, 1 control
  std::uint32_t reserved0;
};

struct PoolAccount {
  Label label;
  Account account;
  std::atomic<std::uint64_t> categories;  // bit c set: category c is charged here
};

enum class PoolStatus : std::uint32_t { Free = 0, Open = 1 };
[[nodiscard]] std::string_view to_string(PoolStatus v) noexcept;

// Pool.owner_slot of an orphaned pool: its owner left (detached, or was
// reclaimed) while other owners still held tickets in it. Nobody owns it; it
// closes when its last ticket is released (or moved out by replace).
inline constexpr std::uint32_t kOrphanedPool = 0xFFFF'FFFFu;

struct Pool {
  std::atomic<std::uint32_t> state;       // PoolStatus; Open is published last (release)
  std::atomic<std::uint32_t> generation;  // +1 per open: (index, generation) names a pool
  std::atomic<std::uint32_t> owner_slot;  // attachment that opened it, or kOrphanedPool
  std::atomic<std::uint32_t> owner_generation;
  std::atomic<std::uint32_t> account_count;  // <= kPoolAccounts
  std::atomic<std::uint32_t> ticket_limit;   // 0: only the ticket table bounds it
  std::atomic<std::uint64_t> tickets;        // derived: live tickets charged to this pool
  std::atomic<std::uint64_t> rejections;     // statistics
  Label label;
  PoolAccount accounts[kPoolAccounts];
};

enum class TicketState : std::uint32_t { Free = 0, Reserved = 1, Committed = 2 };
[[nodiscard]] std::string_view to_string(TicketState v) noexcept;

struct TicketSlot {
  std::atomic<std::uint32_t> state;       // TicketState; published last (release) by reserve
  std::atomic<std::uint32_t> generation;  // +1 per reservation: a stale handle never matches
  std::atomic<std::uint32_t> owner_slot;  // attachment slot of the owner
  std::atomic<std::uint32_t> owner_generation;
  std::atomic<std::uint32_t> pool;
  std::atomic<std::uint32_t> pool_generation;
  std::atomic<std::uint32_t> category;
  // Hand-off: 1 while the owner offers the ticket to attachment (offer_slot,
  // offer_generation); stored last by offer() (release), cleared first.
  std::atomic<std::uint32_t> offered;
  std::atomic<std::int64_t> bytes;
  std::atomic<std::uint32_t> offer_slot;
  std::atomic<std::uint32_t> offer_generation;
};

struct Bucket {
  Label label;
  std::atomic<std::int64_t> rate;    // tokens per second
  std::atomic<std::int64_t> burst;   // capacity in tokens
  std::atomic<std::int64_t> tokens;  // whole tokens in [0, burst]
  std::atomic<std::uint32_t> frac;   // units of the next token (token_bucket::kUnitsPerToken)
  std::atomic<std::uint32_t> started;
  std::atomic<std::int64_t> last_ms;
  std::atomic<std::uint64_t> admits;      // statistics: admissions that included this bucket
  std::atomic<std::uint64_t> rejections;  // statistics: admissions this bucket refused
};

// Undo journal for the multi-word updates of primary state: replace (one
// ticket), hand-over (one ticket's owner and offer) and admit (up to 16
// buckets; also the settle of `set bucket.X.rate`). The old images are written first, then
// `op` (the journal's commit point), then the change, then op = None. A repairer
// that finds op != None restores the images: the interrupted operation never
// happened.
enum class JournalOp : std::uint32_t { None = 0, Replace = 1, Admit = 2, HandOver = 3 };
[[nodiscard]] std::string_view to_string(JournalOp v) noexcept;

struct TicketImage {
  std::atomic<std::uint32_t> pool;
  std::atomic<std::uint32_t> pool_generation;
  std::atomic<std::int64_t> bytes;
  std::atomic<std::uint32_t> owner_slot;  // HandOver: the owner and offer before it
  std::atomic<std::uint32_t> owner_generation;
  std::atomic<std::uint32_t> offer_slot;
  std::atomic<std::uint32_t> offer_generation;
  std::atomic<std::uint32_t> offered;
  std::uint32_t reserved0;
};

struct BucketImage {
  std::atomic<std::uint32_t> index;
  std::atomic<std::uint32_t> frac;
  std::atomic<std::uint32_t> started;
  std::uint32_t reserved0;
  std::atomic<std::int64_t> tokens;
  std::atomic<std::int64_t> last_ms;
};

struct Journal {
  std::atomic<std::uint32_t> op;  // JournalOp
  std::atomic<std::uint32_t> count;
  std::atomic<std::uint32_t> ticket;
  std::uint32_t reserved0;
  TicketImage ticket_image;
  BucketImage buckets[kMaxConstraints];
};

// Rejection scopes, in the order reserve() checks them.
enum class Scope : std::uint8_t { Tickets = 0, Global, Partition, Category, Pool, Bucket };
inline constexpr std::size_t kScopes = 6;

struct Stats {
  std::atomic<std::uint64_t> reserves;  // successful
  std::atomic<std::uint64_t> commits;
  std::atomic<std::uint64_t> releases;
  std::atomic<std::uint64_t> replaces;           // successful
  std::atomic<std::uint64_t> admits;             // successful
  std::atomic<std::uint64_t> refused_releases;   // stale, double or foreign release/commit/replace
  std::atomic<std::uint64_t> repairs;            // EOWNERDEAD recoveries
  std::atomic<std::uint64_t> reclaimed_tickets;  // released on behalf of dead owners
  std::atomic<std::uint64_t> rejections[kScopes];
  std::atomic<std::uint64_t> offers;     // hand-off: offers made
  std::atomic<std::uint64_t> handovers;  // ownership moved: accepted, or handed over when the
                                         // owner left with the ticket offered to a live attachment
};

struct LedgerControl {
  struct alignas(kFalseSharingRange) Lock {
    detail::RobustMutex mutex;
    // Seqlock over everything below: odd while a holder mutates. Stays odd if
    // the holder dies inside, until the next locker repairs.
    std::atomic<std::uint64_t> version;
    std::atomic<std::uint32_t> faulted;  // nonzero: repair found damage; every operation fails
    std::atomic<std::uint32_t> category_count;
    std::atomic<std::uint32_t> bucket_count;
    std::atomic<std::uint32_t> free_top;      // derived: entries in the free stack
    std::atomic<std::uint64_t> live_tickets;  // derived
    std::atomic<std::uint64_t> open_pools;    // derived
  } lock;
  // Global account, then the ordinary and control partitions.
  alignas(kFalseSharingRange) Account global;
  Account partitions[kPartitions];
  alignas(kFalseSharingRange) Stats stats;
  alignas(kFalseSharingRange) Journal journal;
};

static_assert(std::is_standard_layout_v<Label> && sizeof(Label) == kLabelBytes);
static_assert(std::is_standard_layout_v<Account> && sizeof(Account) == 40);
static_assert(std::is_standard_layout_v<Category> && sizeof(Category) == 80);
static_assert(std::is_standard_layout_v<PoolAccount> && sizeof(PoolAccount) == 80);
static_assert(std::is_standard_layout_v<Pool> && sizeof(Pool) == 72 + kPoolAccounts * 80);
static_assert(offsetof(Pool, accounts) == 72);
static_assert(std::is_standard_layout_v<TicketSlot> && sizeof(TicketSlot) == 48);
static_assert(offsetof(TicketSlot, bytes) == 32 && offsetof(TicketSlot, offer_slot) == 40);
static_assert(std::is_standard_layout_v<TicketImage> && sizeof(TicketImage) == 40);
static_assert(std::is_standard_layout_v<Bucket> && sizeof(Bucket) == 88);
static_assert(std::is_standard_layout_v<BucketImage> && sizeof(BucketImage) == 32);
static_assert(std::is_standard_layout_v<Journal> && sizeof(Journal) == 56 + kMaxConstraints * 32);
static_assert(std::is_standard_layout_v<LedgerControl>);
static_assert(offsetof(LedgerControl, global) == kFalseSharingRange);
static_assert(offsetof(LedgerControl, stats) == 2 * kFalseSharingRange);
static_assert(offsetof(LedgerControl, journal) == 3 * kFalseSharingRange);
static_assert(std::atomic<std::int64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

// The parameter block stored in the header. On open, zero counts and a
// negative global_limit / control_reserve mean "accept any".
struct ParamBlock {
  std::int64_t global_limit;
  std::int64_t control_reserve;
  std::uint32_t max_tickets;
  std::uint32_t max_categories;
  std::uint32_t max_pools;
  std::uint32_t max_buckets;
};
static_assert(sizeof(ParamBlock) == 32 && std::is_trivially_copyable_v<ParamBlock>);

struct Geometry {
  std::uint64_t categories = 0;  // byte offsets from the data area's start
  std::uint64_t pools = 0;
  std::uint64_t tickets = 0;
  std::uint64_t free_stack = 0;
  std::uint64_t buckets = 0;
  std::uint64_t data_size = 0;
};

[[nodiscard]] constexpr Geometry geometry(const ParamBlock& p) noexcept {
  Geometry g;
  g.categories = round_up(sizeof(LedgerControl), kFalseSharingRange);
  g.pools = round_up(g.categories + std::uint64_t{p.max_categories} * sizeof(Category),
                     kFalseSharingRange);
  g.tickets = round_up(g.pools + std::uint64_t{p.max_pools} * sizeof(Pool), kFalseSharingRange);
  g.free_stack =
      round_up(g.tickets + std::uint64_t{p.max_tickets} * sizeof(TicketSlot), kFalseSharingRange);
  g.buckets = round_up(g.free_stack + std::uint64_t{p.max_tickets} * sizeof(std::uint32_t),
                       kFalseSharingRange);
  g.data_size = g.buckets + std::uint64_t{p.max_buckets} * sizeof(Bucket);
  return g;
}

inline constexpr std::uint64_t kFingerprint =
    layout_fingerprint({kHeaderFingerprint,
                        sizeof(LedgerControl),
                        offsetof(LedgerControl, global),
                        offsetof(LedgerControl, stats),
                        offsetof(LedgerControl, journal),
                        sizeof(detail::RobustMutex),
                        sizeof(Account),
                        sizeof(Category),
                        sizeof(Pool),
                        sizeof(PoolAccount),
                        sizeof(TicketSlot),
                        sizeof(Bucket),
                        sizeof(Journal),
                        sizeof(TicketImage),
                        sizeof(Stats),
                        sizeof(ParamBlock),
                        kLabelBytes,
                        kPoolAccounts,
                        kScopes,
                        static_cast<std::uint64_t>(token_bucket::kUnitsPerToken),
                        kFalseSharingRange});

}  // namespace ledger
}  // namespace shm

// to_string of the enums above is reachable as shm::to_string too.
namespace shm {
using ledger::to_string;
}  // namespace shm
