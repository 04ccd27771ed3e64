#include "shm/ledger/token_bucket.hpp"

#include "shm/platform/clock.hpp"

#include "format/format.hpp"

#include <limits>

namespace shm {

std::int64_t monotonic_ms() noexcept {
  return static_cast<std::int64_t>(monotonic_ns() / 1'000'000);
}

namespace token_bucket {

Result<void> validate(std::int64_t rate_per_sec, std::int64_t burst) {
  if (rate_per_sec < 0)
    return fail(Errc::InvalidArgument,
                shm::detail::format("bucket rate {} is negative", rate_per_sec));
  if (burst < 0)
    return fail(Errc::InvalidArgument, shm::detail::format("bucket burst {} is negative", burst));
  return {};
}

Result<Coalesced> coalesce(std::span<const Constraint> constraints) {
  if (constraints.size() > kMaxConstraints)
    return fail(Errc::InvalidArgument,
                shm::detail::format("{} constraints in one admission, the limit is {}",
                                    constraints.size(), kMaxConstraints));
  Coalesced out;
  for (std::size_t i = 0; i < constraints.size(); ++i) {
    const Constraint& c = constraints[i];
    if (c.cost < 0)
      return fail(Errc::InvalidArgument,
                  shm::detail::format("constraint {} (bucket {}): cost {} is negative", i,
                                      c.bucket.index, c.cost));
    std::size_t j = 0;
    while (j < out.size && out.items[j].bucket != c.bucket) ++j;
    if (j == out.size) {
      out.items[out.size++] = c;
      continue;
    }
    if (c.cost > std::numeric_limits<std::int64_t>::max() - out.items[j].cost)
      return fail(Errc::InvalidArgument,
                  shm::detail::format("bucket {}: coalesced costs {} + {} overflow int64",
                                      c.bucket.index, out.items[j].cost, c.cost));
    out.items[j].cost += c.cost;
  }
  return out;
}

}  // namespace token_bucket

Result<TokenBucket> TokenBucket::make(std::int64_t rate_per_sec, std::int64_t burst) {
  if (auto ok = token_bucket::validate(rate_per_sec, burst); !ok)
    return std::unexpected(ok.error());
  return TokenBucket(rate_per_sec, burst);
}

Result<bool> TokenBucket::try_take(std::int64_t cost, std::int64_t now_ms) {
  if (cost < 0)
    return fail(Errc::InvalidArgument, shm::detail::format("cost {} is negative", cost));
  if (now_ms < 0)
    return fail(Errc::InvalidArgument, shm::detail::format("time {} ms is negative", now_ms));
  token_bucket::Level next = token_bucket::refill(level_, rate_, burst_, now_ms);
  if (cost > next.tokens) return false;  // nothing stored: a refused take changes nothing
  next.tokens -= cost;
  level_ = next;
  return true;
}

std::int64_t TokenBucket::available(std::int64_t now_ms) const noexcept {
  return token_bucket::refill(level_, rate_, burst_, now_ms).tokens;
}

}  // namespace shm
