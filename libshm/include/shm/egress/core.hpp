/// @file
/// EgressCore: the delivery state machine of an egress (sequence assignment,
/// pending queue, bounded in-flight window, cumulative acknowledgement
/// watermark, retries with bounded exponential backoff, exhaustion, generation
/// fence), with the specification's typed outcomes.
///
/// One implementation runs over a State: pointers to a Control block, the
/// record table and the payload pool laid out as in egress/layout.hpp. The
/// state lives either in the heap (LocalEgress: one process, a test, a
/// reference) or in a segment's mapping (the Egress handles in egress.hpp,
/// which hold the robust mutex around every call). The core itself takes no
/// lock, makes no system call and reads no clock: every time-dependent call
/// takes `now` (nanoseconds of the caller's monotonic clock).
///
/// Sequences start at 0; generations at 1. A reader's change counter moves
/// exactly when that reader's value changes; no-op and stale calls move none.
#pragma once

#include "shm/egress/layout.hpp"
#include "shm/error.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shm::egress {

/// backoff(attempt) = min(ceiling, base * 2^(attempt - 1)), saturating; attempt >= 1.
[[nodiscard]] constexpr std::uint64_t backoff(std::uint64_t base, std::uint64_t ceiling,
                                              std::uint32_t attempt) noexcept {
  const std::uint32_t shift = attempt == 0 ? 0 : attempt - 1;
  if (base == 0) return 0;
  if (shift >= 64 || base > (ceiling >> shift)) return ceiling;
  return std::min(ceiling, base << shift);
}

/// A claimed record as the transport sends it.
struct Envelope {
  std::uint64_t generation = 0;        ///< the generation it was claimed under
  std::uint64_t sequence = 0;          ///< its sequence (from 0)
  std::uint32_t attempt = 0;           ///< sends so far, this one included (from 1)
  std::span<const std::byte> payload;  ///< into the pool: valid until the record changes
};

/// The retry reader's value: the latest failed record while parked or exhausted.
struct RetryRecord {
  std::uint64_t sequence = 0;    ///< the failed record's sequence
  std::uint32_t attempt = 0;     ///< its attempt at the failure
  std::uint64_t backoff_ns = 0;  ///< backoff(attempt), exhausted or not
  bool exhausted = false;        ///< its retry budget is spent: it is a dead letter
  /// Field by field.
  friend bool operator==(const RetryRecord&, const RetryRecord&) = default;
};

/// What enqueue did.
enum class EnqueueStatus : std::uint8_t {
  Enqueued,  ///< the payload is retained with a new sequence
  Full       ///< back-pressure: the pool is full (capacity records retained)
};
/// The outcome of an enqueue.
struct EnqueueOutcome {
  EnqueueStatus status = EnqueueStatus::Full;  ///< what happened
  std::uint64_t sequence = 0;                  ///< Enqueued: the sequence assigned
};

/// A batch enqueue (Egress::try_enqueue_batch): the first `enqueued` payloads
/// got the sequences first_sequence, first_sequence + 1, ...; the rest did not
/// fit (the pool was full).
struct EnqueueBatchOutcome {
  std::size_t enqueued = 0;          ///< payloads enqueued, from the first
  std::uint64_t first_sequence = 0;  ///< when enqueued > 0
};

/// What a claim did.
enum class ClaimStatus : std::uint8_t {
  Claimed,         ///< the oldest pending record is now in flight (its attempt counted)
  WindowFull,      ///< inflight_limit records are in flight: wait for an ack or a failure
  Empty,           ///< nothing pending
  StaleGeneration  ///< the caller's generation is fenced; nothing changed
};
/// The outcome of a claim.
struct ClaimOutcome {
  ClaimStatus status = ClaimStatus::Empty;  ///< what happened
  Envelope envelope;                        ///< Claimed
  std::uint64_t current_generation = 0;     ///< StaleGeneration: the generation in force
};

/// What an acknowledgement did.
enum class AckStatus : std::uint8_t {
  Advanced,        ///< the watermark moved: records at or below `through` removed
  Unchanged,       ///< `through` is at or below the watermark: a no-op
  Refused,         ///< `through` >= next_sequence: no such record was ever enqueued
  StaleGeneration  ///< the caller's generation is fenced; nothing changed
};
/// A batch claim (EgressTransport::try_claim_batch): `claimed` records, and
/// why it stopped before its maximum (WindowFull, Empty, StaleGeneration), or
/// Claimed when it claimed as many as asked.
struct ClaimBatchOutcome {
  std::size_t claimed = 0;                    ///< envelopes claimed
  ClaimStatus status = ClaimStatus::Claimed;  ///< why it stopped
  std::uint64_t current_generation = 0;       ///< StaleGeneration: the generation in force
};

/// The outcome of an acknowledgement.
struct AckOutcome {
  AckStatus status = AckStatus::Unchanged;  ///< what happened
  std::uint64_t removed = 0;                ///< Advanced: records removed
  bool reopened_window = false;             ///< Advanced: the window was full and is not any more
  bool freed_space = false;                 ///< Advanced: the pool's retained range shrank
  std::uint64_t current_generation = 0;     ///< StaleGeneration: the generation in force
};

/// What a failure report did.
enum class FailStatus : std::uint8_t {
  Retrying,         ///< the record is parked until its backoff elapses
  Exhausted,        ///< its retry budget is spent: it is a dead letter (Terminal)
  UnknownSequence,  ///< no such record in flight: a no-op
  StaleGeneration   ///< the caller's generation is fenced; nothing changed
};
/// The outcome of a failure report.
struct FailOutcome {
  FailStatus status = FailStatus::UnknownSequence;  ///< what happened
  RetryRecord record;                               ///< Retrying / Exhausted
  std::uint64_t due_ns = 0;                         ///< Retrying
  std::uint64_t current_generation = 0;             ///< StaleGeneration: the generation in force
};

/// What a retry (retry_now, retry_due) did.
enum class RetryStatus : std::uint8_t {
  Scheduled,        ///< parked records returned to pending (retry_due: possibly none)
  UnknownSequence,  ///< retry_now: no such parked record (terminal ones included)
  StaleGeneration   ///< the caller's generation is fenced; nothing changed
};
/// The outcome of a retry.
struct RetryOutcome {
  RetryStatus status = RetryStatus::UnknownSequence;  ///< what happened
  std::uint64_t scheduled = 0;                        ///< records returned to pending
  std::uint64_t current_generation = 0;               ///< StaleGeneration: the generation in force
};

/// What a reconnect did.
enum class ReconnectStatus : std::uint8_t {
  Advanced,  ///< the generation moved: in-flight and parked records are pending again
  Refused    ///< the new generation does not exceed the current one; nothing changed
};
/// The outcome of a reconnect.
struct ReconnectOutcome {
  ReconnectStatus status = ReconnectStatus::Refused;  ///< what happened
  std::uint64_t replayed = 0;    ///< in-flight and parked records returned to pending
  std::uint64_t generation = 0;  ///< the generation in force afterwards
};

/// @name Names of the values, as the specification spells them
/// Lower case with underscores ("stale_generation"); "unknown" for a value
/// outside the enumeration.
///@{

/// "enqueued" or "full".
[[nodiscard]] std::string_view to_string(EnqueueStatus s) noexcept;
/// "claimed", "window_full", "empty" or "stale_generation".
[[nodiscard]] std::string_view to_string(ClaimStatus s) noexcept;
/// "advanced", "unchanged", "refused" or "stale_generation".
[[nodiscard]] std::string_view to_string(AckStatus s) noexcept;
/// "retrying", "exhausted", "unknown_sequence" or "stale_generation".
[[nodiscard]] std::string_view to_string(FailStatus s) noexcept;
/// "scheduled", "unknown_sequence" or "stale_generation".
[[nodiscard]] std::string_view to_string(RetryStatus s) noexcept;
/// "advanced" or "refused".
[[nodiscard]] std::string_view to_string(ReconnectStatus s) noexcept;
/// "free", "pending", "inflight", "parked" or "terminal".
[[nodiscard]] std::string_view to_string(RecordState s) noexcept;
/// "pending", "inflight", "acked_through" or "retry".
[[nodiscard]] std::string_view to_string(Reader r) noexcept;
///@}

/// One retained record as projections list it.
struct RecordView {
  std::uint64_t sequence = 0;             ///< its sequence
  std::uint32_t attempt = 0;              ///< sends so far
  std::uint64_t generation = 0;           ///< the generation of its envelope
  RecordState state = RecordState::Free;  ///< where it is in its delivery
  /// Field by field.
  friend bool operator==(const RecordView&, const RecordView&) = default;
};

/// What any process may read of an egress (counts and scalars); `records`
/// (every retained record, in sequence order) only when asked for.
struct Projection {
  std::uint64_t generation = 0;                ///< the generation in force (from 1)
  std::uint64_t next_sequence = 0;             ///< the sequence the next enqueue gets
  std::optional<std::uint64_t> acked_through;  ///< the watermark; none before the first ack
  std::uint64_t pending = 0,                   ///< records waiting to be claimed
      inflight = 0,                            ///< records claimed and not acknowledged
      parked = 0,                              ///< failed records waiting for their backoff
      terminal = 0;                            ///< dead letters (retry budget spent), until taken
  std::optional<RetryRecord> retry;            ///< the retry reader; none when nothing failed
  std::optional<std::uint64_t> next_due_ns;    ///< the earliest parked record's due time
  std::optional<std::uint64_t> oldest_enqueue_ns;  ///< the oldest retained record's enqueue time
  /// Each reader's change counter, indexed by Reader: moves when its value changes.
  std::array<std::uint64_t, kReaders> reader_versions{};
  std::vector<RecordView> records;  ///< every retained record in order, when asked for
  /// False when a lock-free read (Egress::snapshot) found writers busy
  /// throughout: the other fields are then zero.
  bool consistent = true;
};

/// Pointers into a state laid out for `params` (non-owning).
struct State {
  ParamBlock params{};            ///< the geometry and retry policy
  Control* control = nullptr;     ///< the Control block
  Record* records = nullptr;      ///< capacity records
  std::byte* payloads = nullptr;  ///< capacity slots of round_up(slot_bytes, 8) bytes
};
/// Points a State at a data area of geometry(params).data_size bytes.
[[nodiscard]] State state_over(const ParamBlock& params, std::byte* data) noexcept;
/// InvalidArgument naming the field when the parameters cannot make an egress.
[[nodiscard]] Result<void> validate(const ParamBlock& params);

/// The delivery state machine over a State (takes no lock: the caller
/// serialises calls; Egress holds the robust mutex). Operations return the
/// specification's outcomes; a no-op or stale call changes nothing.
class EgressCore {
 public:
  /// Over no state: only assignment is valid.
  EgressCore() = default;
  /// Over `state`, which must outlive the core.
  explicit EgressCore(const State& state) noexcept : s_(state) {}

  /// Zero state: generation 1, sequences from 0, every record free.
  void initialize() noexcept;

  /// Producer side. TooLarge when the payload exceeds slot_bytes.
  [[nodiscard]] Result<EnqueueOutcome> enqueue(std::span<const std::byte> payload,
                                               std::uint64_t now_ns);
  /// Send side (every call carries the caller's generation): moves the
  /// oldest pending record in flight, counting an attempt.
  [[nodiscard]] ClaimOutcome claim(std::uint64_t generation) noexcept;
  /// Cumulative: removes every pending, in-flight and parked record at or
  /// below `through` (dead letters stay until taken).
  [[nodiscard]] AckOutcome ack(std::uint64_t generation, std::uint64_t through) noexcept;
  /// Parks in-flight record `sequence` until backoff(attempt) past `now_ns`, or
  /// makes it terminal once its retry budget is spent.
  [[nodiscard]] FailOutcome fail(std::uint64_t generation, std::uint64_t sequence,
                                 std::uint64_t now_ns) noexcept;
  /// Returns parked record `sequence` to pending now, whatever its due time.
  [[nodiscard]] RetryOutcome retry_now(std::uint64_t generation, std::uint64_t sequence) noexcept;
  /// Returns every parked record due at `now_ns` to pending (Scheduled with a
  /// count, possibly 0).
  [[nodiscard]] RetryOutcome retry_due(std::uint64_t generation, std::uint64_t now_ns) noexcept;
  /// Advances the generation to `new_generation` (Refused unless greater):
  /// in-flight and parked records return to pending in sequence order,
  /// attempts kept, every pending envelope rewritten to the new generation.
  [[nodiscard]] ReconnectOutcome reconnect(std::uint64_t new_generation) noexcept;
  /// Application side: removes the oldest dead letter (a terminal record),
  /// copying its payload out. nullopt when there is none.
  [[nodiscard]] std::optional<RecordView> pop_dead_letter(std::vector<std::byte>* payload);

  /// @name Reads (no change)
  ///@{

  /// The generation in force (from 1).
  [[nodiscard]] std::uint64_t generation() const noexcept;
  /// Counts and scalars; every retained record too when `with_records`.
  [[nodiscard]] Projection project(bool with_records) const;
  /// Reader `r`'s change counter.
  [[nodiscard]] std::uint64_t reader_version(Reader r) const noexcept;
  [[nodiscard]] bool claimable() const noexcept;          ///< something pending and the window open
  [[nodiscard]] bool has_space() const noexcept;          ///< an enqueue would not be Full
  [[nodiscard]] std::uint64_t next_due() const noexcept;  ///< kNoDue when nothing is parked
  ///@}

  /// Crash recovery: applies the journal (undo or redo), recomputes derived
  /// state and moves every reader's counter. Returns the damage found by
  /// check() afterwards (empty: repaired).
  [[nodiscard]] std::vector<std::string> repair();
  /// Every broken invariant and every derived field that disagrees with the
  /// records, one line each (empty: healthy). Reads only.
  [[nodiscard]] std::vector<std::string> check() const;
  /// True while an operation's journal entry is open (a holder died inside).
  [[nodiscard]] bool journal_open() const noexcept;

  /// The pointers the core works on.
  [[nodiscard]] const State& state() const noexcept { return s_; }

 private:
  State s_;
};

/// An egress in the heap of one process: the same core over a private buffer.
class LocalEgress {
 public:
  /// Allocates and initialises a state for `params` (InvalidArgument as validate()).
  [[nodiscard]] static Result<LocalEgress> create(const ParamBlock& params);
  /// Moves the buffer; the core's pointers stay valid.
  LocalEgress(LocalEgress&&) noexcept = default;
  /// Moves the buffer; the core's pointers stay valid.
  LocalEgress& operator=(LocalEgress&&) noexcept = default;
  /// The core over the buffer.
  [[nodiscard]] EgressCore& core() noexcept { return core_; }
  /// The core over the buffer.
  [[nodiscard]] const EgressCore& core() const noexcept { return core_; }

 private:
  LocalEgress() = default;
  struct Free {
    void operator()(std::byte* p) const noexcept;
  };
  std::unique_ptr<std::byte, Free> buffer_;
  EgressCore core_;
};

}  // namespace shm::egress

namespace shm {
/// Every enum's to_string is reachable as shm::to_string, as for the other
/// structures' enums (and by argument-dependent lookup, as before).
using egress::to_string;
}  // namespace shm
