#include "relay/catch_up.hpp"

#include "format/format.hpp"

#include <algorithm>
#include <cstring>

namespace shm::relay::internal {

bool conflatable_catch_up(const MergePolicy& policy) noexcept {
  return policy.keyed && policy.flags.associative && policy.flags.conflatable;
}

CatchUpSummary::CatchUpSummary(const MergePolicy& policy, std::size_t value_bytes)
    : policy_(policy), value_size_(value_bytes), scratch_(value_bytes) {}

Result<void> CatchUpSummary::fold(const spill::Page& page, std::uint64_t page_id,
                                  std::uint64_t delivered_before) {
  pages_.push_back(page_id);
  for (std::size_t r = 0; r < page.records(); ++r) {
    const spill::Record rec = page.record(r);
    const bool redelivered =
        r < delivered_before || (rec.head.flags & spill::kRecordRedelivered) != 0;
    if (rec.value.size() > value_size_)
      return fail(Errc::Corrupt,
                  shm::detail::format("cold page {} record {}: {} value bytes (the relay's value "
                                      "size is {})",
                                      page_id, r, rec.value.size(), value_size_));
    // A record that may have been applied already stays as it is, an entry
    // of its own: merged with others, it would hand ops applied once to the
    // application again inside a wider range. Later records of its key
    // start a new entry after it (order is kept for non-commutative merges).
    if (redelivered) index_.erase(rec.head.key);
    const auto [it, fresh] =
        redelivered ? std::pair{index_.end(), true}
                    : index_.try_emplace(rec.head.key, static_cast<std::uint32_t>(entries_.size()));
    if (fresh) {
      entries_.push_back(RelayEntry{rec.head.key,
                                    {},
                                    rec.head.first_seq,
                                    rec.head.last_seq,
                                    rec.head.op_count,
                                    redelivered,
                                    page_id});
      lengths_.push_back(static_cast<std::uint32_t>(rec.value.size()));
      values_.resize(values_.size() + value_size_);
      std::memcpy(values_.data() + (entries_.size() - 1) * value_size_, rec.value.data(),
                  rec.value.size());
      continue;
    }
    const std::uint32_t i = it->second;
    std::byte* value = values_.data() + std::size_t{i} * value_size_;
    auto merged =
        combine(policy_, std::span<const std::byte>(value, lengths_[i]), rec.value, scratch_);
    if (!merged) return std::unexpected(merged.error());
    std::memcpy(value, scratch_.data(), *merged);
    lengths_[i] = static_cast<std::uint32_t>(*merged);
    RelayEntry& e = entries_[i];
    e.first_seq = std::min(e.first_seq, rec.head.first_seq);
    e.last_seq = std::max(e.last_seq, rec.head.last_seq);
    e.op_count += rec.head.op_count;
    e.redelivered = e.redelivered || redelivered;
  }
  return {};
}

void CatchUpSummary::mark_redelivered() noexcept {
  for (RelayEntry& e : entries_) e.redelivered = true;
}

void CatchUpSummary::finish() {
  for (std::size_t i = 0; i < entries_.size(); ++i)
    entries_[i].value = std::span<const std::byte>(values_.data() + i * value_size_, lengths_[i]);
}

}  // namespace shm::relay::internal
