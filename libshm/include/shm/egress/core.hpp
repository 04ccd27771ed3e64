// EgressCore: the delivery state machine of an egress (sequence assignment,
// pending queue, bounded in-flight window, cumulative acknowledgement
// watermark, retries with bounded exponential backoff, exhaustion, generation
// fence), with the specification's typed outcomes.
//
// One implementation runs over a State: pointers to a Control block, the
// record table and the payload pool laid out as in egress/layout.hpp. The
// state lives either in the heap (LocalEgress: one process, a test, a
// reference) or in a segment's mapping (the Egress handles in egress.hpp,
// which hold the robust mutex around every call). The core itself takes no
// lock, makes no system call and reads no clock: every time-dependent call
// takes `now` (nanoseconds of the caller's monotonic clock).
//
// Sequences start at 0; generations at 1. A reader's change counter moves
// exactly when that reader's value changes; no-op and stale calls move none.
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

// backoff(attempt) = min(ceiling, base * 2^(attempt - 1)), saturating; attempt >= 1.
[[nodiscard]] constexpr std::uint64_t backoff(std::uint64_t base, std::uint64_t ceiling,
                                              std::uint32_t attempt) noexcept {
  const std::uint32_t shift = attempt == 0 ? 0 : attempt - 1;
  if (base == 0) return 0;
  if (shift >= 64 || base > (ceiling >> shift)) return ceiling;
  return std::min(ceiling, base << shift);
}

struct Envelope {
  std::uint64_t generation = 0;
  std::uint64_t sequence = 0;
  std::uint32_t attempt = 0;
  std::span<const std::byte> payload;  // into the pool: valid until the record changes
};

struct RetryRecord {
  std::uint64_t sequence = 0;
  std::uint32_t attempt = 0;
  std::uint64_t backoff_ns = 0;  // backoff(attempt), exhausted or not
  bool exhausted = false;
  friend bool operator==(const RetryRecord&, const RetryRecord&) = default;
};

enum class EnqueueStatus : std::uint8_t { Enqueued, Full };
struct EnqueueOutcome {
  EnqueueStatus status = EnqueueStatus::Full;
  std::uint64_t sequence = 0;  // Enqueued: the sequence assigned
};

// A batch enqueue (Egress::try_enqueue_batch): the first `enqueued` payloads
// got the sequences first_sequence, first_sequence + 1, ...; the rest did not
// fit (the pool was full).
struct EnqueueBatchOutcome {
  std::size_t enqueued = 0;
  std::uint64_t first_sequence = 0;  // when enqueued > 0
};

enum class ClaimStatus : std::uint8_t { Claimed, WindowFull, Empty, StaleGeneration };
struct ClaimOutcome {
  ClaimStatus status = ClaimStatus::Empty;
  Envelope envelope;                     // Claimed
  std::uint64_t current_generation = 0;  // StaleGeneration: the generation in force
};

enum class AckStatus : std::uint8_t { Advanced, Unchanged, Refused, StaleGeneration };
// A batch claim (EgressTransport::try_claim_batch): `claimed` records, and
// why it stopped before its maximum (WindowFull, Empty, StaleGeneration), or
// Claimed when it claimed as many as asked.
struct ClaimBatchOutcome {
  std::size_t claimed = 0;
  ClaimStatus status = ClaimStatus::Claimed;
  std::uint64_t current_generation = 0;
};

struct AckOutcome {
  AckStatus status = AckStatus::Unchanged;
  std::uint64_t removed = 0;     // Advanced: records removed
  bool reopened_window = false;  // Advanced: the window was full and is not any more
  bool freed_space = false;      // Advanced: the pool's retained range shrank
  std::uint64_t current_generation = 0;
};

enum class FailStatus : std::uint8_t { Retrying, Exhausted, UnknownSequence, StaleGeneration };
struct FailOutcome {
  FailStatus status = FailStatus::UnknownSequence;
  RetryRecord record;        // Retrying / Exhausted
  std::uint64_t due_ns = 0;  // Retrying
  std::uint64_t current_generation = 0;
};

enum class RetryStatus : std::uint8_t { Scheduled, UnknownSequence, StaleGeneration };
struct RetryOutcome {
  RetryStatus status = RetryStatus::UnknownSequence;
  std::uint64_t scheduled = 0;  // records returned to pending
  std::uint64_t current_generation = 0;
};

enum class ReconnectStatus : std::uint8_t { Advanced, Refused };
struct ReconnectOutcome {
  ReconnectStatus status = ReconnectStatus::Refused;
  std::uint64_t replayed = 0;    // in-flight and parked records returned to pending
  std::uint64_t generation = 0;  // the generation in force afterwards
};

[[nodiscard]] std::string_view to_string(EnqueueStatus s) noexcept;
[[nodiscard]] std::string_view to_string(ClaimStatus s) noexcept;
[[nodiscard]] std::string_view to_string(AckStatus s) noexcept;
[[nodiscard]] std::string_view to_string(FailStatus s) noexcept;
[[nodiscard]] std::string_view to_string(RetryStatus s) noexcept;
[[nodiscard]] std::string_view to_string(ReconnectStatus s) noexcept;
[[nodiscard]] std::string_view to_string(RecordState s) noexcept;
[[nodiscard]] std::string_view to_string(Reader r) noexcept;

// One retained record as projections list it.
struct RecordView {
  std::uint64_t sequence = 0;
  std::uint32_t attempt = 0;
  std::uint64_t generation = 0;
  RecordState state = RecordState::Free;
  friend bool operator==(const RecordView&, const RecordView&) = default;
};

// What any process may read of an egress (counts and scalars); `records`
// (every retained record, in sequence order) only when asked for.
struct Projection {
  std::uint64_t generation = 0;
  std::uint64_t next_sequence = 0;
  std::optional<std::uint64_t> acked_through;
  std::uint64_t pending = 0, inflight = 0, parked = 0, terminal = 0;
  std::optional<RetryRecord> retry;
  std::optional<std::uint64_t> next_due_ns;
  std::optional<std::uint64_t> oldest_enqueue_ns;  // the oldest retained record's enqueue time
  std::array<std::uint64_t, kReaders> reader_versions{};
  std::vector<RecordView> records;
  // False when a lock-free read (Egress::snapshot) found writers busy
  // throughout: the other fields are then zero.
  bool consistent = true;
};

// Pointers into a state laid out for `params` (non-owning).
struct State {
  ParamBlock params{};
  Control* control = nullptr;
  Record* records = nullptr;
  std::byte* payloads = nullptr;  // capacity slots of round_up(slot_bytes, 8) bytes
};
// Points a State at a data area of geometry(params).data_size bytes.
[[nodiscard]] State state_over(const ParamBlock& params, std::byte* data) noexcept;
// InvalidArgument naming the field when the parameters cannot make an egress.
[[nodiscard]] Result<void> validate(const ParamBlock& params);

class EgressCore {
 public:
  EgressCore() = default;
  explicit EgressCore(const State& state) noexcept : s_(state) {}

  // Zero state: generation 1, sequences from 0, every record free.
  void initialize() noexcept;

  // Producer side. TooLarge when the payload exceeds slot_bytes.
  [[nodiscard]] Result<EnqueueOutcome> enqueue(std::span<const std::byte> payload,
                                               std::uint64_t now_ns);
  // Send side: every call carries the caller's generation.
  [[nodiscard]] ClaimOutcome claim(std::uint64_t generation) noexcept;
  [[nodiscard]] AckOutcome ack(std::uint64_t generation, std::uint64_t through) noexcept;
  [[nodiscard]] FailOutcome fail(std::uint64_t generation, std::uint64_t sequence,
                                 std::uint64_t now_ns) noexcept;
  // Returns parked record `sequence` to pending now, whatever its due time.
  [[nodiscard]] RetryOutcome retry_now(std::uint64_t generation, std::uint64_t sequence) noexcept;
  // Returns every parked record due at `now_ns` to pending (Scheduled with a
  // count, possibly 0).
  [[nodiscard]] RetryOutcome retry_due(std::uint64_t generation, std::uint64_t now_ns) noexcept;
  [[nodiscard]] ReconnectOutcome reconnect(std::uint64_t new_generation) noexcept;
  // Application side: removes the oldest dead letter (a terminal record),
  // copying its payload out. nullopt when there is none.
  [[nodiscard]] std::optional<RecordView> pop_dead_letter(std::vector<std::byte>* payload);

  // Reads (no change).
  [[nodiscard]] std::uint64_t generation() const noexcept;
  [[nodiscard]] Projection project(bool with_records) const;
  [[nodiscard]] std::uint64_t reader_version(Reader r) const noexcept;
  [[nodiscard]] bool claimable() const noexcept;          // something pending and the window open
  [[nodiscard]] bool has_space() const noexcept;          // an enqueue would not be Full
  [[nodiscard]] std::uint64_t next_due() const noexcept;  // kNoDue when nothing is parked

  // Crash recovery: applies the journal (undo or redo), recomputes derived
  // state and moves every reader's counter. Returns the damage found by
  // check() afterwards (empty: repaired).
  [[nodiscard]] std::vector<std::string> repair();
  // Every broken invariant and every derived field that disagrees with the
  // records, one line each (empty: healthy). Reads only.
  [[nodiscard]] std::vector<std::string> check() const;
  // True while an operation's journal entry is open (a holder died inside).
  [[nodiscard]] bool journal_open() const noexcept;

  [[nodiscard]] const State& state() const noexcept { return s_; }

 private:
  State s_;
};

// An egress in the heap of one process: the same core over a private buffer.
class LocalEgress {
 public:
  [[nodiscard]] static Result<LocalEgress> create(const ParamBlock& params);
  LocalEgress(LocalEgress&&) noexcept = default;
  LocalEgress& operator=(LocalEgress&&) noexcept = default;
  [[nodiscard]] EgressCore& core() noexcept { return core_; }
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
// Every enum's to_string is reachable as shm::to_string, as for the other
// structures' enums (and by argument-dependent lookup, as before).
using egress::to_string;
}  // namespace shm
