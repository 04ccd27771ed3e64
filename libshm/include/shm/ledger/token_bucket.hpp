/// @file
/// Token buckets with exact fixed-point refill.
///
/// A bucket holds at most `burst` tokens and gains `rate` tokens per second.
/// Time is a caller-supplied monotonic millisecond count (any process's
/// CLOCK_MONOTONIC, see monotonic_ms()). Fixed point: one token is
/// kUnitsPerToken units, so a rate of r tokens/s mints exactly r units per
/// millisecond — refill is integer arithmetic with no rounding, and the
/// fraction of the next token is kept between refills (rate 1/s asked every
/// 300 ms still yields a token every 1000 ms). Products are computed in 128
/// bits and saturate at burst, so no elapsed time or rate can overflow. A time
/// earlier than the last refill (a regression) mints nothing and does not move
/// the refill point back. Rate 0 never refills; burst 0 admits no positive cost;
/// a cost of 0 is always admitted.
///
/// The shared, multi-bucket, all-or-nothing admission lives in the ledger
/// (Ledger::admit); this header holds the arithmetic both share and a
/// process-local TokenBucket that uses the same rules.
#pragma once

#include "shm/error.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace shm {

/// A bucket of a ledger segment (index into its bucket table).
struct BucketId {
  std::uint32_t index = 0;  ///< row of the segment's bucket table
  /// Same row.
  friend bool operator==(BucketId, BucketId) = default;
};

/// One (bucket, cost) term of an admission.
struct Constraint {
  BucketId bucket;        ///< the bucket to debit
  std::int64_t cost = 0;  ///< tokens to take, >= 0
};

/// Most terms of one admission (after coalescing, distinct buckets).
inline constexpr std::size_t kMaxConstraints = 16;

/// CLOCK_MONOTONIC in milliseconds: the time base processes sharing buckets use.
[[nodiscard]] std::int64_t monotonic_ms() noexcept;

/// The pure token-bucket arithmetic (a Level and its refill), shared by the ledger and
/// KeyedBuckets.
namespace token_bucket {

/// Fixed-point units per token: refill keeps fractions of a token exactly.
inline constexpr std::int64_t kUnitsPerToken = 1000;

/// Trivially constructible on purpose (hot paths keep arrays of them as scratch):
/// initialise with Level{} or Level{tokens, frac, started, last_ms}.
struct Level {
  std::int64_t tokens;   ///< whole tokens in [0, burst]
  std::uint32_t frac;    ///< units of the next token, [0, kUnitsPerToken); 0 when full
  bool started;          ///< false until the first refill fixes last_ms
  std::int64_t last_ms;  ///< time of the last refill
};

/// Brings `level` up to `now_ms`. The first call only records the time (a
/// bucket starts full). Pure; the caller decides whether to store the result.
[[nodiscard]] inline Level refill(Level level, std::int64_t rate_per_sec, std::int64_t burst,
                                  std::int64_t now_ms) noexcept {
  if (!level.started) {
    level.started = true;
    level.last_ms = now_ms;
    return level;
  }
  if (now_ms <= level.last_ms) return level;  // regression (or same ms): mint nothing
  const auto elapsed = static_cast<std::uint64_t>(now_ms - level.last_ms);
  level.last_ms = now_ms;
  if (level.tokens >= burst) {
    level.tokens = burst;
    level.frac = 0;
    return level;
  }
  const auto room = static_cast<std::uint64_t>(burst - level.tokens);
  std::uint64_t whole = 0, frac = 0;
  std::uint64_t product = 0;
  if (!__builtin_mul_overflow(static_cast<std::uint64_t>(rate_per_sec), elapsed, &product) &&
      product < (std::uint64_t{1} << 63)) [[likely]] {
    // 64-bit path: a division by a constant compiles to a multiplication.
    const std::uint64_t units = product + level.frac;
    whole = units / static_cast<std::uint64_t>(kUnitsPerToken);
    frac = units % static_cast<std::uint64_t>(kUnitsPerToken);
  } else {
    __extension__ using u128 = unsigned __int128;
    const u128 units =
        static_cast<u128>(static_cast<std::uint64_t>(rate_per_sec)) * elapsed + level.frac;
    const u128 w = units / static_cast<u128>(kUnitsPerToken);
    whole = w >= room ? room : static_cast<std::uint64_t>(w);  // only the comparison below needs it
    frac = static_cast<std::uint64_t>(units % static_cast<u128>(kUnitsPerToken));
  }
  if (whole >= room) {  // saturate at burst: the fraction of a token beyond it is dropped too
    level.tokens = burst;
    level.frac = 0;
  } else {
    level.tokens += static_cast<std::int64_t>(whole);
    level.frac = static_cast<std::uint32_t>(frac);
  }
  return level;
}

/// Rate and burst must be >= 0.
[[nodiscard]] Result<void> validate(std::int64_t rate_per_sec, std::int64_t burst);

/// One coalesced term; trivially constructible so that scratch arrays of them
/// cost nothing to declare.
struct Term {
  std::uint32_t bucket;  ///< BucketId::index
  std::int64_t cost;     ///< summed cost, >= 0
};
/// Coalesces into `out` (room for kMaxConstraints terms) and returns the number
/// of terms, or -1 when the input is malformed (more than kMaxConstraints terms,
/// a negative cost, a sum that overflows); coalesce() then says which.
[[nodiscard]] inline int coalesce_into(std::span<const Constraint> in, Term* out) noexcept {
  if (in.size() > kMaxConstraints) return -1;
  int n = 0;
  for (const Constraint& c : in) {
    if (c.cost < 0) return -1;
    int j = 0;
    while (j < n && out[j].bucket != c.bucket.index) ++j;
    if (j == n) {
      out[n++] = Term{c.bucket.index, c.cost};
    } else if (__builtin_add_overflow(out[j].cost, c.cost, &out[j].cost)) {
      return -1;
    }
  }
  return n;
}

/// Constraints with one entry per bucket (first-appearance order), costs summed.
struct Coalesced {
  std::array<Constraint, kMaxConstraints> items{};  ///< the terms; the first `size` are used
  std::size_t size = 0;                             ///< terms in use
  /// The terms in use.
  [[nodiscard]] std::span<const Constraint> view() const noexcept { return {items.data(), size}; }
};
/// Rejects more than kMaxConstraints terms, negative costs and sums that overflow
/// int64 — before anything is looked at or changed.
[[nodiscard]] Result<Coalesced> coalesce(std::span<const Constraint> constraints);

}  // namespace token_bucket

/// A process-local token bucket (no sharing, no lock) with the same arithmetic.
class TokenBucket {
 public:
  /// A full bucket of `burst` tokens gaining `rate_per_sec` a second;
  /// InvalidArgument when either is negative.
  [[nodiscard]] static Result<TokenBucket> make(std::int64_t rate_per_sec, std::int64_t burst);

  /// Takes `cost` tokens at `now_ms` if available (true); otherwise changes
  /// nothing (false). Negative cost or time: InvalidArgument.
  [[nodiscard]] Result<bool> try_take(std::int64_t cost, std::int64_t now_ms);
  /// Whole tokens available at `now_ms` (without changing the bucket).
  [[nodiscard]] std::int64_t available(std::int64_t now_ms) const noexcept;
  /// The level as of the last successful try_take() (nothing else stores a refill).
  [[nodiscard]] const token_bucket::Level& level() const noexcept { return level_; }
  /// Tokens gained per second.
  [[nodiscard]] std::int64_t rate() const noexcept { return rate_; }
  /// Most tokens the bucket holds.
  [[nodiscard]] std::int64_t burst() const noexcept { return burst_; }

 private:
  TokenBucket(std::int64_t rate, std::int64_t burst) noexcept
      : rate_(rate), burst_(burst), level_{burst, 0, false, 0} {}
  std::int64_t rate_;
  std::int64_t burst_;
  token_bucket::Level level_;
};

}  // namespace shm
