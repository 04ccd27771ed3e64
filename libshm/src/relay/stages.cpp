// Egress stages over a RelayReader (shm/relay/stages.hpp, docs/relay.md,
// "Egress stages"). Process-local: nothing here touches the relay's segment
// but through the reader's own take / commit / abandon / wait.
#include "shm/relay/stages.hpp"

#include "shm/platform/clock.hpp"

#include "format/format.hpp"

#include <algorithm>
#include <limits>
#include <thread>

namespace shm {

namespace {

constexpr std::uint64_t kStageNsPerMs = 1'000'000;

std::int64_t stage_ms(std::uint64_t now_ns) noexcept {
  return static_cast<std::int64_t>(now_ns / kStageNsPerMs);
}

// A duration as an unsigned ns count (callers checked it is > 0).
std::uint64_t stage_ns(std::chrono::nanoseconds d) noexcept {
  return static_cast<std::uint64_t>(d.count());
}

}  // namespace

std::string_view to_string(TakeStatus s) noexcept {
  switch (s) {
    case TakeStatus::Delivered:
      return "delivered";
    case TakeStatus::Empty:
      return "empty";
    case TakeStatus::Window:
      return "window";
    case TakeStatus::Rate:
      return "rate";
  }
  return "unknown";
}

Result<void> validate(const RelayStages& stages) {
  if (stages.window && stages.window->window.count() <= 0)
    return fail(Errc::InvalidArgument,
                shm::detail::format("WindowPolicy::window is {} ns: a window must be > 0 (leave "
                                    "RelayStages::window unset for no window)",
                                    stages.window->window.count()));
  if (stages.rate) {
    const RatePolicy& r = *stages.rate;
    if (r.per_second < 0)
      return fail(Errc::InvalidArgument,
                  shm::detail::format("RatePolicy::per_second {} is negative", r.per_second));
    if (r.burst < 0)
      return fail(Errc::InvalidArgument,
                  shm::detail::format("RatePolicy::burst {} is negative", r.burst));
    if (r.per_second == 0)
      return fail(Errc::InvalidArgument,
                  shm::detail::format("RatePolicy::per_second is 0 (burst {}): the bucket would "
                                      "never refill and the egress would stop after the burst "
                                      "(leave RelayStages::rate unset for no pacing)",
                                      r.burst));
    if (r.burst == 0)
      return fail(Errc::InvalidArgument,
                  shm::detail::format("RatePolicy::burst is 0 (per_second {}): a bucket of no "
                                      "token delivers nothing; burst must be >= 1",
                                      r.per_second));
  }
  if (stages.expiry && stages.expiry->deadline.count() <= 0)
    return fail(Errc::InvalidArgument,
                shm::detail::format("ExpiryPolicy::deadline is {} ns: a deadline must be > 0 "
                                    "(leave RelayStages::expiry unset for no expiry)",
                                    stages.expiry->deadline.count()));
  return {};
}

StagedReader::StagedReader(RelayReader reader, const RelayStages& stages,
                           std::optional<TokenBucket> bucket)
    : reader_(std::move(reader)), stages_(stages), bucket_(std::move(bucket)) {}

Result<StagedReader> StagedReader::make(RelayReader&& reader, const RelayStages& stages) {
  if (auto ok = validate(stages); !ok) return std::unexpected(ok.error());
  if (reader.view().control == nullptr)
    return fail(Errc::InvalidArgument, "StagedReader::make: the RelayReader is not attached");
  std::optional<TokenBucket> bucket;
  if (stages.rate) {
    auto b = TokenBucket::make(stages.rate->per_second, stages.rate->burst);
    if (!b) return std::unexpected(b.error());
    bucket.emplace(std::move(*b));
  }
  return StagedReader(std::move(reader), stages, std::move(bucket));
}

std::pair<std::uint64_t, TakeStatus> StagedReader::gate(std::uint64_t now_ns) const {
  std::uint64_t wait = 0;
  TakeStatus held = TakeStatus::Delivered;
  if (stages_.window && window_open_ > now_ns) {
    wait = window_open_ - now_ns;
    held = TakeStatus::Window;
  }
  if (bucket_) {
    const std::int64_t now_ms = stage_ms(now_ns);
    if (bucket_->available(now_ms) == 0) {
      // The bucket mints per_second units a millisecond; the next token
      // needs the units its fraction lacks.
      const token_bucket::Level level =
          token_bucket::refill(bucket_->level(), bucket_->rate(), bucket_->burst(), now_ms);
      const auto lacking = static_cast<std::uint64_t>(token_bucket::kUnitsPerToken - level.frac);
      const auto rate = static_cast<std::uint64_t>(bucket_->rate());
      const std::uint64_t ms = (lacking + rate - 1) / rate;  // >= 1
      const std::uint64_t ready =
          (static_cast<std::uint64_t>(now_ms) + ms) * kStageNsPerMs - now_ns;  // > 0
      if (ready > wait) {
        wait = ready;
        held = TakeStatus::Rate;
      }
    }
  }
  return {wait, held};
}

Result<TakeOutcome> StagedReader::take(std::size_t credit) {
  return take_at(credit, monotonic_ns());
}

Result<TakeOutcome> StagedReader::take_at(std::size_t credit, std::uint64_t now_ns) {
  if (in_hand_)
    return fail(Errc::OutOfOrder, shm::detail::format("{}: staged take() again while {} entries "
                                                      "of the last take are in hand: commit() or "
                                                      "abandon() them first",
                                                      reader_.segment().path(), passed_.size()));
  const std::uint64_t now = std::max(now_ns, last_now_);
  last_now_ = now;
  TakeOutcome out;
  if (const auto [wait, held] = gate(now); wait > 0) {
    ++(held == TakeStatus::Window ? counts_.held_window : counts_.held_rate);
    out.status = held;
    out.ready_in = std::chrono::nanoseconds(static_cast<std::int64_t>(
        std::min<std::uint64_t>(wait, std::numeric_limits<std::int64_t>::max())));
    return out;
  }
  std::size_t want = credit;
  if (bucket_)
    want = std::min<std::size_t>(want, static_cast<std::size_t>(std::max<std::int64_t>(
                                           0, bucket_->available(stage_ms(now)))));
  // Entries whose first op is older than the deadline are judged at the take
  // (the time is the take's); an entry of unknown age (0: a cold page's) is
  // delivered. A batch that expired whole is committed here and the take
  // goes on, up to one pool's worth of expired entries per call.
  const std::uint64_t bound = reader_.view().params.capacity;
  std::uint64_t undated = 0;
  for (;;) {
    auto got = reader_.take(want);
    if (!got) return std::unexpected(got.error());
    passed_.clear();
    std::uint64_t expired = 0;
    undated = 0;
    for (const RelayEntry& e : *got) {
      if (stages_.expiry) {
        if (e.created_ns == 0) {
          ++undated;
        } else if (now > e.created_ns && now - e.created_ns > stage_ns(stages_.expiry->deadline)) {
          ++expired;
          continue;
        }
      }
      passed_.push_back(e);
    }
    if (got->empty() || !passed_.empty()) {
      pending_expired_ = expired;
      out.expired += expired;
      in_hand_ = !got->empty();
      break;
    }
    if (auto ok = reader_.commit(); !ok) return std::unexpected(ok.error());
    counts_.expired += expired;
    out.expired += expired;
    if (out.expired >= bound) break;
  }
  if (passed_.empty()) return out;  // Empty
  out.status = TakeStatus::Delivered;
  out.entries = std::span<const RelayEntry>(passed_);
  if (stages_.window) window_open_ = now + stage_ns(stages_.window->window);
  if (bucket_) {
    // passed_ <= want <= the tokens available at `now`: the debit succeeds.
    auto debited = bucket_->try_take(static_cast<std::int64_t>(passed_.size()), stage_ms(now));
    if (!debited) return std::unexpected(debited.error());
  }
  ++counts_.batches;
  counts_.delivered += passed_.size();
  counts_.undated += undated;
  return out;
}

Result<void> StagedReader::commit() {
  if (auto ok = reader_.commit(); !ok) return ok;
  counts_.expired += std::exchange(pending_expired_, 0);
  in_hand_ = false;
  return {};
}

Result<void> StagedReader::abandon() {
  if (auto ok = reader_.abandon(); !ok) return ok;
  pending_expired_ = 0;
  in_hand_ = false;
  return {};
}

Result<bool> StagedReader::wait(std::chrono::nanoseconds timeout) {
  const std::uint64_t start = monotonic_ns();
  const std::uint64_t limit =
      timeout.count() <= 0 ? 0 : static_cast<std::uint64_t>(timeout.count());
  const std::uint64_t deadline = limit > std::numeric_limits<std::uint64_t>::max() - start
                                     ? std::numeric_limits<std::uint64_t>::max()
                                     : start + limit;
  for (;;) {
    const std::uint64_t now = monotonic_ns();
    const std::uint64_t closed = gate(std::max(now, last_now_)).first;
    const std::uint64_t left = deadline > now ? deadline - now : 0;
    if (closed == 0)
      return reader_.wait(deadline == std::numeric_limits<std::uint64_t>::max()
                              ? shm::forever
                              : std::chrono::nanoseconds(static_cast<std::int64_t>(left)));
    // Only time opens a closed window or an empty bucket: sleep until it
    // opens, or until the timeout if that comes first.
    if (left <= closed) {
      if (left > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(left));
      return false;
    }
    std::this_thread::sleep_for(std::chrono::nanoseconds(closed));
  }
}

StagedSnapshot StagedReader::snapshot() const {
  StagedSnapshot s = counts_;
  if (bucket_) s.tokens = bucket_->available(stage_ms(std::max(monotonic_ns(), last_now_)));
  return s;
}

}  // namespace shm
