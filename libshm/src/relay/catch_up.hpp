// Conflated catch-up (docs/spill.md): several cold pages folded into one
// summary per key, which a lagging reader receives instead of every record.
// Sound only for keyed policies that are associative and conflatable: the
// fold of the summaries equals the fold of every op in them.
#pragma once

#include "shm/relay/policy.hpp"
#include "shm/relay/relay.hpp"
#include "shm/spill/page.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace shm::relay::internal {

// Whether `policy` allows a conflated catch-up.
[[nodiscard]] bool conflatable_catch_up(const MergePolicy& policy) noexcept;

class CatchUpSummary {
 public:
  CatchUpSummary(const MergePolicy& policy, std::size_t value_bytes);

  // Folds every record of `page`, in record order, into the summary: a key
  // seen before merges into its entry (the policy's combine; first and last
  // sequence widen, op counts add up), a new key becomes an entry after the
  // others. A record that was delivered before (flagged in the page, or
  // below `delivered_before`: a reader that died holding it) is never merged:
  // it stays an entry of its own, marked redelivered, so no entry covers ops
  // that were handed out and ops that were not.
  [[nodiscard]] Result<void> fold(const spill::Page& page, std::uint64_t page_id,
                                  std::uint64_t delivered_before);
  // Marks every entry redelivered (a summary folded again after the reader
  // delivering it died).
  void mark_redelivered() noexcept;
  // Points the entries at their values; call once, after the last fold.
  void finish();

  [[nodiscard]] std::span<const RelayEntry> entries() const noexcept { return entries_; }
  [[nodiscard]] const std::vector<std::uint64_t>& pages() const noexcept { return pages_; }

  std::size_t committed = 0;  // entries [0, committed) are committed
  std::size_t delivered = 0;  // entries [0, delivered) were taken at least once

 private:
  const MergePolicy& policy_;
  std::size_t value_size_;
  std::unordered_map<std::uint64_t, std::uint32_t> index_;  // key -> entry
  std::vector<RelayEntry> entries_;
  std::vector<std::uint32_t> lengths_;
  std::vector<std::byte> values_;  // value_size_ bytes per entry
  std::vector<std::byte> scratch_;
  std::vector<std::uint64_t> pages_;
};

}  // namespace shm::relay::internal
