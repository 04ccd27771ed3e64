// Fixed infrastructure charged once (the specification: "one parent ticket
// with bounded slot leases; do not charge the same storage again for each
// lease"). A SlotLeases reserves and commits one parent ticket of
// slots x slot_bytes bytes (checked arithmetic) in a ledger, then hands out
// leases of single slots without touching the ledger again: a lease costs no
// lock, no ticket and no charge, and at most `slots` leases exist at once.
//
// Process-local: the leases are bookkeeping of the process that owns the
// parent ticket (its queue slots, its control slots). Not thread-safe: one
// thread uses a SlotLeases, or the caller serialises. Destroying it releases
// the parent ticket (every lease ends with it).
#pragma once

#include "shm/error.hpp"
#include "shm/ledger/ledger.hpp"

#include <cstdint>
#include <expected>
#include <optional>
#include <vector>

namespace shm {

struct SlotLease {
  Ticket parent;  // names the SlotLeases that issued it
  std::uint32_t slot = 0;
  std::uint32_t generation = 0;  // +1 per lease of the slot: a stale lease never matches
  friend bool operator==(const SlotLease&, const SlotLease&) = default;
};

class SlotLeases {
 public:
  using Made = std::expected<SlotLeases, Rejection>;
  // Reserves and commits the parent ticket. A budget refusal is the Rejection;
  // errors: slots == 0 or slot_bytes < 0 (InvalidArgument), a product beyond
  // INT64_MAX (TooLarge), and the ledger's own errors.
  [[nodiscard]] static Result<Made> make(Ledger& ledger, PoolId pool, CategoryId category,
                                         std::uint32_t slots, std::int64_t slot_bytes);

  SlotLeases(SlotLeases&& other) noexcept;
  SlotLeases& operator=(SlotLeases&& other) noexcept;
  SlotLeases(const SlotLeases&) = delete;
  SlotLeases& operator=(const SlotLeases&) = delete;
  ~SlotLeases();

  // A free slot, or nullopt when all are leased (back-pressure, not an error).
  [[nodiscard]] std::optional<SlotLease> acquire() noexcept;
  // Ends a lease. InvalidArgument: a lease of another set, a stale lease or a
  // second release.
  [[nodiscard]] Result<void> release(const SlotLease& lease);
  // Releases the parent ticket now (the destructor does it otherwise).
  // InvalidArgument while leases are out.
  [[nodiscard]] Result<void> close();

  [[nodiscard]] std::uint32_t max_leases() const noexcept {
    return static_cast<std::uint32_t>(generations_.size());
  }
  [[nodiscard]] std::uint32_t leased() const noexcept { return max_leases() - free_count(); }
  [[nodiscard]] std::int64_t slot_bytes() const noexcept { return slot_bytes_; }
  [[nodiscard]] Ticket parent() const noexcept { return parent_; }

 private:
  SlotLeases() = default;
  [[nodiscard]] std::uint32_t free_count() const noexcept {
    return static_cast<std::uint32_t>(free_.size());
  }
  Ledger* ledger_ = nullptr;  // null once closed or moved from
  Ticket parent_;
  std::int64_t slot_bytes_ = 0;
  std::vector<std::uint32_t> generations_;  // per slot; odd while leased
  std::vector<std::uint32_t> free_;         // free slots, lowest on top
};

}  // namespace shm
