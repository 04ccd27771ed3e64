// One parent ticket, bounded slot leases (shm/ledger/slot_leases.hpp).
#include "shm/ledger/slot_leases.hpp"
#include "shm/ledger/checked.hpp"

#include "format/format.hpp"

#include <utility>

namespace shm {

Result<SlotLeases::Made> SlotLeases::make(Ledger& ledger, PoolId pool, CategoryId category,
                                          std::uint32_t slots, std::int64_t slot_bytes) {
  if (slots == 0)
    return fail(Errc::InvalidArgument, "slot leases: 0 slots; a parent ticket needs at least one");
  auto bytes = ledger::checked_mul(static_cast<std::int64_t>(slots), slot_bytes);
  if (!bytes)
    return fail(bytes.error().code, shm::detail::format("slot leases of {} x {} bytes: {}", slots,
                                                        slot_bytes, bytes.error().message));
  auto r = ledger.reserve(pool, category, *bytes);
  if (!r) return std::unexpected(std::move(r.error()));
  if (!r->has_value()) return Made(std::unexpect, r->error());
  if (auto ok = ledger.commit(**r); !ok) {
    (void)ledger.release(**r);
    return std::unexpected(std::move(ok.error()));
  }
  SlotLeases s;
  s.ledger_ = &ledger;
  s.parent_ = **r;
  s.slot_bytes_ = slot_bytes;
  s.generations_.assign(slots, 0);
  s.free_.reserve(slots);
  for (std::uint32_t i = slots; i-- > 0;) s.free_.push_back(i);
  return Made(std::move(s));
}

SlotLeases::SlotLeases(SlotLeases&& o) noexcept
    : ledger_(std::exchange(o.ledger_, nullptr)),
      parent_(o.parent_),
      slot_bytes_(o.slot_bytes_),
      generations_(std::move(o.generations_)),
      free_(std::move(o.free_)) {}

SlotLeases& SlotLeases::operator=(SlotLeases&& o) noexcept {
  if (this != &o) {
    if (ledger_ != nullptr && !ledger_->attachment().copied_by_fork())
      (void)ledger_->release(parent_);
    ledger_ = std::exchange(o.ledger_, nullptr);
    parent_ = o.parent_;
    slot_bytes_ = o.slot_bytes_;
    generations_ = std::move(o.generations_);
    free_ = std::move(o.free_);
  }
  return *this;
}

SlotLeases::~SlotLeases() {
  // Best effort: a faulted ledger leaves the parent to the owner's reclaim.
  // A forked child's copy leaves the parent ticket to the parent.
  if (ledger_ != nullptr && !ledger_->attachment().copied_by_fork())
    (void)ledger_->release(parent_);
}

std::optional<SlotLease> SlotLeases::acquire() noexcept {
  if (ledger_ == nullptr || free_.empty()) return std::nullopt;
  const std::uint32_t slot = free_.back();
  free_.pop_back();
  const std::uint32_t gen = ++generations_[slot];  // odd: leased
  return SlotLease{parent_, slot, gen};
}

Result<void> SlotLeases::release(const SlotLease& lease) {
  if (ledger_ == nullptr || lease.parent != parent_)
    return fail(
        Errc::InvalidArgument,
        shm::detail::format("slot lease {}#{}: issued by parent ticket {}#{}, not by "
                            "this set{}",
                            lease.slot, lease.generation, lease.parent.index,
                            lease.parent.generation, ledger_ == nullptr ? " (closed)" : ""));
  if (lease.slot >= generations_.size() || generations_[lease.slot] != lease.generation ||
      (lease.generation & 1u) == 0)
    return fail(Errc::InvalidArgument,
                shm::detail::format("slot lease {}#{} is stale or already released", lease.slot,
                                    lease.generation));
  ++generations_[lease.slot];  // even: free
  free_.push_back(lease.slot);
  return {};
}

Result<void> SlotLeases::close() {
  if (ledger_ == nullptr) return {};
  if (leased() != 0)
    return fail(Errc::InvalidArgument,
                shm::detail::format("slot leases: {} of {} slots are still leased", leased(),
                                    max_leases()));
  auto r = ledger_->release(parent_);
  if (!r) return r;
  ledger_ = nullptr;
  return {};
}

}  // namespace shm
