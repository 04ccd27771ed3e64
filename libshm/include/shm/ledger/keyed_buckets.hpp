// Token buckets per key (a peer address, a client id) with idle-key
// reclamation. Every key has the same set of buckets (up to 16, e.g. connects
// per second and publishes per second); a key also counts live references (a
// connection of that peer). The table is bounded: it never grows past
// `max_keys`.
//
// Idle-key rule (the specification): a key is removed only when it has no
// reference AND every one of its buckets is full at the time of the scan.
// Removing a key whose bucket is still refilling would forget a debt and let
// its owner start over with a full burst; a TTL alone is not enough.
//
// reclaim_idle() scans at most `max_scan` keys from a rotating cursor, so its
// cost is bounded whatever the table size; admit() on a full table runs one
// such scan before it says TableFull.
//
// Process-local (no sharing, no lock): the shared form of a bucket is the
// Ledger's; this table is for per-peer state a single process keeps. Not
// thread-safe: one thread uses it, or the caller serialises.
#pragma once

#include "shm/error.hpp"
#include "shm/ledger/token_bucket.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace shm {

struct KeyedBucketSpec {
  std::int64_t rate_per_sec = 0;
  std::int64_t burst = 0;
};

enum class AdmitStatus : std::uint8_t {
  Admitted,   // every bucket of the key paid its cost
  Refused,    // a bucket had too few tokens: nothing changed
  TableFull,  // the key is new and no idle key could be reclaimed: nothing changed
};
[[nodiscard]] std::string_view to_string(AdmitStatus v) noexcept;

class KeyedBuckets {
 public:
  // 1 to 16 buckets per key (rate, burst >= 0); max_keys >= 1.
  [[nodiscard]] static Result<KeyedBuckets> make(std::vector<KeyedBucketSpec> per_key,
                                                 std::uint32_t max_keys);

  // Debits costs[i] from bucket i of `key` (costs.size() == buckets per key),
  // all or nothing, at `now_ms`; a new key starts with full buckets. Errors:
  // a wrong number of costs, a negative cost or time (InvalidArgument).
  [[nodiscard]] Result<AdmitStatus> admit(std::string_view key, std::span<const std::int64_t> costs,
                                          std::int64_t now_ms);
  // A live reference to `key` (it is never reclaimed while referenced).
  // NotFound for an unknown key; release() of an unreferenced key: InvalidArgument.
  [[nodiscard]] Result<void> retain(std::string_view key);
  [[nodiscard]] Result<void> release(std::string_view key);

  // Scans up to `max_scan` keys from the rotating cursor and removes each one
  // that is idle at `now_ms`; returns how many it removed.
  std::size_t reclaim_idle(std::int64_t now_ms, std::size_t max_scan = kDefaultScan);
  // Whether `key` would be reclaimed at `now_ms` (false for an unknown key).
  [[nodiscard]] bool idle(std::string_view key, std::int64_t now_ms) const;

  [[nodiscard]] bool contains(std::string_view key) const;
  [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }
  [[nodiscard]] std::uint32_t max_keys() const noexcept { return max_keys_; }
  // Whole tokens of bucket `bucket` of `key` at `now_ms` (NotFound / InvalidArgument).
  [[nodiscard]] Result<std::int64_t> available(std::string_view key, std::size_t bucket,
                                               std::int64_t now_ms) const;

  static constexpr std::size_t kDefaultScan = 32;

 private:
  struct Entry {
    std::string key;
    std::vector<token_bucket::Level> levels;
    std::uint32_t refs = 0;
  };
  KeyedBuckets(std::vector<KeyedBucketSpec> specs, std::uint32_t max_keys)
      : specs_(std::move(specs)), max_keys_(max_keys) {}
  [[nodiscard]] bool idle_at(const Entry& e, std::int64_t now_ms) const noexcept;
  void remove(std::size_t index);

  std::vector<KeyedBucketSpec> specs_;
  std::uint32_t max_keys_ = 0;
  std::vector<Entry> entries_;
  std::unordered_map<std::string, std::size_t> index_;
  std::size_t cursor_ = 0;
};

}  // namespace shm
