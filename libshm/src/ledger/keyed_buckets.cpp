// Token buckets per key with idle-key reclamation (shm/ledger/keyed_buckets.hpp).
#include "shm/ledger/keyed_buckets.hpp"

#include "format/format.hpp"

#include <utility>

namespace shm {

Result<KeyedBuckets> KeyedBuckets::make(std::vector<KeyedBucketSpec> per_key,
                                        std::uint32_t max_keys) {
  if (per_key.empty() || per_key.size() > kMaxConstraints)
    return fail(Errc::InvalidArgument,
                shm::detail::format("keyed buckets: {} buckets per key, expected 1 to {}",
                                    per_key.size(), kMaxConstraints));
  if (max_keys == 0) return fail(Errc::InvalidArgument, "keyed buckets: max_keys is 0");
  for (std::size_t i = 0; i < per_key.size(); ++i)
    if (auto ok = token_bucket::validate(per_key[i].rate_per_sec, per_key[i].burst); !ok)
      return fail(Errc::InvalidArgument,
                  shm::detail::format("keyed buckets: bucket {}: {}", i, ok.error().message));
  return KeyedBuckets(std::move(per_key), max_keys);
}

bool KeyedBuckets::idle_at(const Entry& e, std::int64_t now_ms) const noexcept {
  if (e.refs != 0) return false;
  for (std::size_t b = 0; b < specs_.size(); ++b) {
    const token_bucket::Level l =
        token_bucket::refill(e.levels[b], specs_[b].rate_per_sec, specs_[b].burst, now_ms);
    if (l.tokens < specs_[b].burst) return false;
  }
  return true;
}

void KeyedBuckets::remove(std::size_t i) {
  index_.erase(entries_[i].key);
  if (i + 1 != entries_.size()) {
    entries_[i] = std::move(entries_.back());
    index_[entries_[i].key] = i;
  }
  entries_.pop_back();
}

std::size_t KeyedBuckets::reclaim_idle(std::int64_t now_ms, std::size_t max_scan) {
  std::size_t removed = 0;
  for (std::size_t scanned = 0; scanned < max_scan && !entries_.empty(); ++scanned) {
    if (cursor_ >= entries_.size()) cursor_ = 0;
    if (idle_at(entries_[cursor_], now_ms)) {
      remove(cursor_);  // the last entry moved here: look at it next, without advancing
      ++removed;
    } else {
      ++cursor_;
    }
  }
  return removed;
}

Result<AdmitStatus> KeyedBuckets::admit(std::string_view key, std::span<const std::int64_t> costs,
                                        std::int64_t now_ms) {
  if (costs.size() != specs_.size())
    return fail(Errc::InvalidArgument,
                shm::detail::format("keyed buckets: {} costs for {} buckets per key", costs.size(),
                                    specs_.size()));
  if (now_ms < 0)
    return fail(Errc::InvalidArgument,
                shm::detail::format("keyed buckets: time {} ms is negative", now_ms));
  for (std::size_t b = 0; b < costs.size(); ++b)
    if (costs[b] < 0)
      return fail(
          Errc::InvalidArgument,
          shm::detail::format("keyed buckets: cost {} of bucket {} is negative", costs[b], b));
  // The levels this admission would leave, computed before anything changes.
  std::vector<token_bucket::Level> after(specs_.size());
  const auto found = index_.find(std::string(key));
  for (std::size_t b = 0; b < specs_.size(); ++b) {
    const token_bucket::Level before = found != index_.end()
                                           ? entries_[found->second].levels[b]
                                           : token_bucket::Level{specs_[b].burst, 0, false, 0};
    after[b] = token_bucket::refill(before, specs_[b].rate_per_sec, specs_[b].burst, now_ms);
    if (costs[b] > after[b].tokens) return AdmitStatus::Refused;
    after[b].tokens -= costs[b];
  }
  if (found != index_.end()) {
    entries_[found->second].levels = std::move(after);
    return AdmitStatus::Admitted;
  }
  if (entries_.size() >= max_keys_ && reclaim_idle(now_ms) == 0) return AdmitStatus::TableFull;
  index_.emplace(std::string(key), entries_.size());
  entries_.push_back(Entry{std::string(key), std::move(after), 0});
  return AdmitStatus::Admitted;
}

Result<void> KeyedBuckets::retain(std::string_view key) {
  const auto it = index_.find(std::string(key));
  if (it == index_.end())
    return fail(Errc::NotFound, shm::detail::format("keyed buckets: no key '{}'", key));
  ++entries_[it->second].refs;
  return {};
}

Result<void> KeyedBuckets::release(std::string_view key) {
  const auto it = index_.find(std::string(key));
  if (it == index_.end())
    return fail(Errc::NotFound, shm::detail::format("keyed buckets: no key '{}'", key));
  Entry& e = entries_[it->second];
  if (e.refs == 0)
    return fail(Errc::InvalidArgument,
                shm::detail::format("keyed buckets: key '{}' holds no reference to release", key));
  --e.refs;
  return {};
}

bool KeyedBuckets::idle(std::string_view key, std::int64_t now_ms) const {
  const auto it = index_.find(std::string(key));
  return it != index_.end() && idle_at(entries_[it->second], now_ms);
}

bool KeyedBuckets::contains(std::string_view key) const {
  return index_.find(std::string(key)) != index_.end();
}

Result<std::int64_t> KeyedBuckets::available(std::string_view key, std::size_t bucket,
                                             std::int64_t now_ms) const {
  const auto it = index_.find(std::string(key));
  if (it == index_.end())
    return fail(Errc::NotFound, shm::detail::format("keyed buckets: no key '{}'", key));
  if (bucket >= specs_.size())
    return fail(Errc::InvalidArgument,
                shm::detail::format("keyed buckets: bucket {} of {}", bucket, specs_.size()));
  return token_bucket::refill(entries_[it->second].levels[bucket], specs_[bucket].rate_per_sec,
                              specs_[bucket].burst, now_ms)
      .tokens;
}

}  // namespace shm
