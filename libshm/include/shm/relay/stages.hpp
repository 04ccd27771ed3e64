/// @file
/// Egress stages over a relay's reader (relaycell-egress-tables.md §7): a
/// window (throttle), a rate (token bucket) and an expiry, composed on the
/// reader's side in that order. A StagedReader owns the RelayReader and only
/// decides when to take and which taken entries to hand on; the relay's head,
/// its merges and its backpressure are untouched. docs/relay.md, "Egress
/// stages".
#pragma once

#include "shm/error.hpp"
#include "shm/ledger/token_bucket.hpp"
#include "shm/relay/relay.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace shm {

/// WindowPolicy: at most one batch is delivered per `window` (a throttle,
/// leading edge: the first batch goes at once, the next one no earlier than
/// `window` after it). Meanwhile ops keep merging into the head.
struct WindowPolicy {
  std::chrono::nanoseconds window{0};  ///< > 0
};

/// RatePolicy: at most `per_second` entries a second on average, `burst` at
/// once (a TokenBucket: one token per delivered entry). What the stage holds
/// back stays in the head, which fills: writers feel it through the relay's
/// own high water.
struct RatePolicy {
  std::int64_t per_second = 0;  ///< tokens minted a second, > 0
  std::int64_t burst = 0;       ///< most tokens held, > 0 (the bucket starts full)
};

/// ExpiryPolicy: an entry whose first op is older than `deadline` when it is
/// taken is not delivered: it is consumed with the batch and counted
/// (`expired`). Explicitly lossy.
struct ExpiryPolicy {
  std::chrono::nanoseconds deadline{0};  ///< > 0
};

/// The stages a StagedReader applies; an unset stage is not applied.
struct RelayStages {
  std::optional<WindowPolicy> window;  ///< flush at most once per window
  std::optional<RatePolicy> rate;      ///< pace the entries delivered
  std::optional<ExpiryPolicy> expiry;  ///< drop (count) entries older than a deadline
};

/// InvalidArgument naming the field when a stage's parameters are unusable
/// (a window or deadline <= 0, a rate or burst <= 0).
[[nodiscard]] Result<void> validate(const RelayStages& stages);

/// What a staged take did.
enum class TakeStatus : std::uint8_t {
  Delivered,  ///< `entries` holds the batch (commit() or abandon() it)
  Empty,      ///< nothing delivered: nothing pending, or only expired entries (consumed, counted)
  Window,     ///< the window is closed: nothing taken; it opens in `ready_in`
  Rate,       ///< no token: nothing taken; the next one is minted in `ready_in`
};
/// The enumerator's name, for logs and tool output.
[[nodiscard]] std::string_view to_string(TakeStatus s) noexcept;

/// What a staged take (or drain) did, and what it delivered.
struct TakeOutcome {
  TakeStatus status = TakeStatus::Empty;  ///< what the take did
  /// The delivered entries (Delivered only); valid until the next take.
  std::span<const RelayEntry> entries;
  /// Entries this call found expired: consumed with the batch (already, when
  /// nothing was delivered; at commit() otherwise).
  std::uint64_t expired = 0;
  std::chrono::nanoseconds ready_in{0};  ///< Window / Rate: when a take may deliver again
};

/// The stages' counters (process-local: the stages live in this reader, not
/// in the relay's segment).
struct StagedSnapshot {
  std::uint64_t batches = 0,  ///< takes that delivered entries
      delivered = 0,          ///< entries delivered (committed or not)
      expired = 0,            ///< entries consumed as expired (committed)
      undated = 0,            ///< entries delivered under expiry with no first-op time (cold pages)
      held_window = 0,        ///< takes the window held back
      held_rate = 0;          ///< takes the rate held back
  std::int64_t tokens = 0;    ///< whole tokens the rate stage has now (0 without one)
};

/// A RelayReader behind egress stages. Owns the reader (reader() gives it
/// back for snapshots, set_catch_up...). Move-only; one thread at a time, as
/// the reader.
class StagedReader {
 public:
  /// Validates the stages (InvalidArgument naming the field) and takes the
  /// reader over; InvalidArgument when the reader is not attached. On an
  /// error the reader is left as it was.
  [[nodiscard]] static Result<StagedReader> make(RelayReader&& reader, const RelayStages& stages);

  /// Takes up to `credit` entries when the window is open and the rate has
  /// tokens (at most that many), hands on those not expired. Nothing is taken
  /// while a stage holds (Window, Rate). A take whose entries all expired
  /// commits them and takes again (up to the relay's max_entries of them).
  /// Calling take() again before commit() or abandon() is OutOfOrder.
  [[nodiscard]] Result<TakeOutcome> take(std::size_t credit);
  /// take() at `now_ns` (CLOCK_MONOTONIC ns, as monotonic_ns()): the time the
  /// stages judge by. A time earlier than one used before is treated as that
  /// one.
  [[nodiscard]] Result<TakeOutcome> take_at(std::size_t credit, std::uint64_t now_ns);
  /// Frees the taken batch (delivered and expired entries); counts the expired.
  [[nodiscard]] Result<void> commit();
  /// Returns the taken batch to the head (delivered again, expired ones judged
  /// again). The window and the tokens the batch spent are not given back.
  [[nodiscard]] Result<void> abandon();
  /// take + fn(entry) for each delivered entry + commit; if fn throws the
  /// batch is abandoned. The outcome's entries were committed.
  template <class F>
  [[nodiscard]] Result<TakeOutcome> drain(std::size_t credit, F&& fn) {
    auto got = take(credit);
    if (!got) return got;
    if (got->status != TakeStatus::Delivered) return got;
    try {
      for (const RelayEntry& e : got->entries) fn(e);
    } catch (...) {
      (void)abandon();
      throw;
    }
    if (auto ok = commit(); !ok) return std::unexpected(ok.error());
    return got;
  }
  /// Waits until a take may deliver: the stages' gates open (a closed window
  /// or an empty bucket is waited out by sleeping: only time opens them) and
  /// an entry or a cold page waits (the reader's wait()). False when the
  /// timeout passes first.
  [[nodiscard]] Result<bool> wait(std::chrono::nanoseconds timeout);

  /// The stages' counters.
  [[nodiscard]] StagedSnapshot snapshot() const;
  /// The stages in force.
  [[nodiscard]] const RelayStages& stages() const noexcept { return stages_; }
  /// The reader behind the stages (taking through it bypasses them).
  [[nodiscard]] RelayReader& reader() noexcept { return reader_; }
  /// The reader behind the stages, for reads (snapshot, delivered).
  [[nodiscard]] const RelayReader& reader() const noexcept { return reader_; }
  /// Gives the reader back (the StagedReader is empty afterwards).
  [[nodiscard]] RelayReader release() && { return std::move(reader_); }

 private:
  StagedReader(RelayReader reader, const RelayStages& stages, std::optional<TokenBucket> bucket);
  /// ns until the window and the rate both let a take deliver (0: now), and
  /// which stage holds when not 0.
  [[nodiscard]] std::pair<std::uint64_t, TakeStatus> gate(std::uint64_t now_ns) const;

  RelayReader reader_;
  RelayStages stages_;
  std::optional<TokenBucket> bucket_;
  std::uint64_t last_now_ = 0;         ///< the latest time a take judged by
  std::uint64_t window_open_ = 0;      ///< the window opens at this time (0: open)
  std::vector<RelayEntry> passed_;     ///< the delivered entries of the batch in hand
  std::uint64_t pending_expired_ = 0;  ///< expired entries of the batch in hand
  bool in_hand_ = false;
  StagedSnapshot counts_;
};

}  // namespace shm
