/// @file
/// Egress: reliable send state in shared memory (segment kind 7, "egress").
///
/// The segment holds delivery authority for a stream leaving the host: the
/// sequence numbers, the pending queue, the bounded unacknowledged window, the
/// cumulative acknowledgement watermark, retries with backoff, the dead-letter
/// list and the generation fence (EgressCore, egress/core.hpp, running over the
/// mapping; layout and protocol note in egress/layout.hpp).
///
/// Handles.
///  - Egress (role "producer", any number of processes): enqueue payloads
///    (atomic, monotone sequences; a full pool is an ordinary Full outcome,
///    with a blocking variant woken by acknowledgements), read projections,
///    take dead letters, and call the raw core operations with an explicit
///    generation (tools, conformance tests).
///  - EgressTransport (role "transport", exclusive): the process that sends.
///    Attaching captures the generation; when an earlier transport existed
///    (alive until it detached, or killed: the kernel's liveness lock tells),
///    the attach performs reconnect(generation + 1) first, which fences the
///    old transport and returns its in-flight and parked records to pending.
///    Its calls carry its generation; once fenced they return
///    StaleGeneration and change nothing.
///
/// Every call takes the robust mutex; a holder that died inside is repaired
/// by the next locker (journal undo/redo, derived state recomputed), so the
/// state is the one before or after the interrupted operation.
#pragma once

#include "shm/egress/core.hpp"
#include "shm/egress/layout.hpp"
#include "shm/error.hpp"
#include "shm/segment/segment.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shm {

/// The geometry and retry policy an egress is created with (fixed for its life).
struct EgressParams {
  std::uint32_t max_payloads = 1024;  ///< payloads retained at most (the pool)
  std::uint32_t slot_bytes = 256;     ///< largest payload
  std::uint32_t inflight_limit = 64;  ///< the unacknowledged window, <= max_payloads
  std::uint32_t retry_budget = 3;     ///< retries after the first send
  /// Backoff after the first failure; it doubles with each attempt.
  std::chrono::nanoseconds retry_base{std::chrono::milliseconds(10)};
  /// Longest backoff (the doubling saturates here).
  std::chrono::nanoseconds retry_ceiling{std::chrono::seconds(1)};
};

/// Egress: reliable send state in shared memory (docs/egress.md). The state
/// machine, its outcomes and the segment layout; the handles are shm::Egress
/// and shm::EgressTransport.
namespace egress {

/// @name Roles in the attachment table
///@{
inline constexpr RoleSpec kTransportRole{0, true, "transport"};  ///< the one sender (slot 0)
inline constexpr RoleSpec kProducerRole{1, false, "producer"};   ///< an Egress (any number)
///@}

/// The segment's parameter block for `params` (durations in nanoseconds, negative as 0).
[[nodiscard]] ParamBlock to_block(const EgressParams& params) noexcept;
/// The KindSpec for create (exact) or open (`any`: accept any geometry).
[[nodiscard]] KindSpec kind_spec(const ParamBlock& params, bool any);
/// Checks the parameter block and the data size, then points into the mapping.
[[nodiscard]] Result<State> make_state(const Segment& segment);
/// A projection without the lock (seqlock, bounded retries): shmctl, metrics,
/// any process. nullopt when writers kept it busy throughout.
[[nodiscard]] std::optional<Projection> observe(const State& state, bool with_records);
/// The parameter block and the segment's size (Corrupt, SizeMismatch).
[[nodiscard]] Result<void> check_geometry(const Segment& seg);
/// What attach(Segment) checks of a segment it is given: kind, layout,
/// parameters and size.
[[nodiscard]] Result<void> check_adopted(const Segment& seg);

}  // namespace egress

/// The setup helpers (docs/idioms.md, "Lifecycle"): create_egress makes the
/// segment, open_egress opens it (any parameters); neither attaches.
/// Egress::attach / EgressTransport::attach(segment) adopt the result;
/// X::create / X::open do both in one step.
[[nodiscard]] Result<Segment> create_egress(std::string_view name, const EgressParams& params,
                                            const CreateOptions& options = {});
/// Opens egress `name` with whatever parameters it was created with (see create_egress).
[[nodiscard]] Result<Segment> open_egress(std::string_view name, const OpenOptions& options = {});

/// How the blocking calls wait: statistics of the futex words (tests, metrics).
struct EgressWakeCounters {
  std::uint32_t claim_word = 0;  ///< bumped when a claimer may proceed (work, due time, generation)
  std::uint32_t claim_waiters = 0;  ///< transports announced as parked on claim_word
  std::uint32_t space_word = 0;     ///< bumped when the pool had no space and has some
  std::uint32_t space_waiters = 0;  ///< producers announced as parked on space_word
};

/// A producer's handle on an egress (role "producer", any number of
/// processes; move-only). Every call takes the segment's robust mutex,
/// repairing first when a holder died inside.
class Egress {
 public:
  /// Attached to nothing: only assignment is valid.
  Egress() = default;
  /// Takes over the attachment; `other` is left attached to nothing.
  Egress(Egress&&) noexcept = default;
  /// Detaches before the old mapping goes away (the attachment writes into
  /// it); a defaulted one would unmap first, in member order.
  Egress& operator=(Egress&& other) noexcept {
    if (this != &other) {
      attachment_.detach();
      segment_ = std::move(other.segment_);
      attachment_ = std::move(other.attachment_);
      state_ = std::exchange(other.state_, egress::State{});
    }
    return *this;
  }
  Egress(const Egress&) = delete;
  Egress& operator=(const Egress&) = delete;

  /// Creates egress `name` (create_egress) and attaches as a producer.
  [[nodiscard]] static Result<Egress> create(std::string_view name, const EgressParams& params,
                                             const CreateOptions& options = {});
  /// Opens egress `name` (open_egress) and attaches as a producer.
  [[nodiscard]] static Result<Egress> open(std::string_view name, const OpenOptions& options = {});
  /// Adopts a segment opened or created already (open_egress, create_egress)
  /// and attaches as a producer; KindMismatch / SizeMismatch when it is not an egress.
  [[nodiscard]] static Result<Egress> attach(Segment segment);

  /// @name Producers
  ///@{

  /// Enqueued with the sequence assigned, or Full (the pool holds capacity
  /// unacknowledged records). TooLarge beyond slot_bytes.
  [[nodiscard]] Result<egress::EnqueueOutcome> try_enqueue(std::span<const std::byte> payload);
  /// Enqueues `payloads` in order under one lock, as many as fit (the rest
  /// get nothing: the pool was full), with one wake-up of the transport for
  /// the batch. TooLarge, with nothing enqueued, when any payload exceeds
  /// slot_bytes.
  [[nodiscard]] Result<egress::EnqueueBatchOutcome> try_enqueue_batch(
      std::span<const std::span<const std::byte>> payloads);
  /// Waits (futex, woken by acknowledgements) up to `timeout` for pool space.
  [[nodiscard]] Result<egress::EnqueueOutcome> enqueue(std::span<const std::byte> payload,
                                                       std::chrono::nanoseconds timeout);
  /// With the caller's clock (nanoseconds), for tests and replays.
  [[nodiscard]] Result<egress::EnqueueOutcome> try_enqueue_at(std::span<const std::byte> payload,
                                                              std::uint64_t now_ns);
  /// Removes the oldest dead letter (a record whose retry budget is exhausted).
  [[nodiscard]] Result<std::optional<egress::RecordView>> pop_dead_letter(
      std::vector<std::byte>* payload);
  ///@}

  /// @name The raw core operations
  /// With an explicit generation and clock (EgressTransport wraps them with
  /// its own), for tools and conformance tests; each is the EgressCore
  /// operation of the same name under the lock, then the wake-ups it calls for.
  ///@{

  /// A Claimed envelope's payload is copied into `payload` and the
  /// envelope's span points there.
  [[nodiscard]] Result<egress::ClaimOutcome> claim(std::uint64_t generation,
                                                   std::vector<std::byte>& payload);
  /// Acknowledges every record through sequence `through` (cumulative).
  [[nodiscard]] Result<egress::AckOutcome> ack(std::uint64_t generation, std::uint64_t through);
  /// Reports in-flight record `sequence` failed at `now_ns` (monotonic clock).
  [[nodiscard]] Result<egress::FailOutcome> fail(std::uint64_t generation, std::uint64_t sequence,
                                                 std::uint64_t now_ns);
  /// Returns parked record `sequence` to pending now.
  [[nodiscard]] Result<egress::RetryOutcome> retry_now(std::uint64_t generation,
                                                       std::uint64_t sequence);
  /// Returns every parked record due at `now_ns` to pending.
  [[nodiscard]] Result<egress::RetryOutcome> retry_due(std::uint64_t generation,
                                                       std::uint64_t now_ns);
  /// Advances the generation (fencing the current transport) and replays
  /// its in-flight and parked records.
  [[nodiscard]] Result<egress::ReconnectOutcome> reconnect(std::uint64_t new_generation);
  ///@}

  /// @name Reads
  ///@{

  /// Counters and positions now, without the lock (a seqlock read with
  /// bounded retries: never blocks a writer); `consistent` is false when
  /// writers kept it busy throughout.
  [[nodiscard]] egress::Projection snapshot(bool with_records = false) const;
  /// The same under the lock (repairing first if a holder died): for a caller
  /// that needs the exact state and may wait for it (tests, tools).
  [[nodiscard]] Result<egress::Projection> projection(bool with_records = false) const;
  /// The futex words and waiter counts now (relaxed reads, never blocks).
  [[nodiscard]] EgressWakeCounters wake_counters() const noexcept;
  /// Takes the lock (repairing if needed) and lists every invariant violation.
  [[nodiscard]] Result<std::vector<std::string>> verify() const;
  ///@}

  /// The segment this handle keeps mapped.
  [[nodiscard]] const Segment& segment() const noexcept { return segment_; }
  /// The pointers into the mapping.
  [[nodiscard]] const egress::State& state() const noexcept { return state_; }
  /// The core over the mapping, for tests that need its reads (check()); never
  /// call its operations without the lock.
  [[nodiscard]] egress::EgressCore core() const noexcept { return egress::EgressCore(state_); }
  /// Stamps this attachment's heartbeat (a "stuck" signal for tools, not liveness).
  void heartbeat() noexcept { attachment_.heartbeat(); }

 private:
  friend class EgressTransport;
  [[nodiscard]] static Result<Egress> bind(Segment segment, const RoleSpec& role);

  Segment segment_;
  Attachment attachment_;
  egress::State state_;
};

/// What EgressTransport::snapshot() reads: the egress's snapshot and the
/// transport's own generation.
struct EgressTransportSnapshot {
  egress::Projection egress;     ///< Egress::snapshot()
  std::uint64_t generation = 0;  ///< this transport's
  std::uint64_t replayed = 0;    ///< records its open returned to pending
  bool fenced = false;           ///< a later transport (or a reclaim) advanced the generation
};

/// The sending process's handle on an egress (role "transport", exclusive;
/// move-only). Its calls carry the generation captured at attach; once a
/// later transport (or a reclaim) advanced it, they return StaleGeneration
/// and change nothing.
class EgressTransport {
 public:
  /// Attached to nothing: only assignment is valid.
  EgressTransport() = default;
  /// Takes over the attachment and the generation.
  EgressTransport(EgressTransport&&) noexcept = default;
  /// Detaches this transport, then takes over `other`'s attachment.
  EgressTransport& operator=(EgressTransport&&) noexcept = default;

  /// Creates the egress and attaches as its transport (for a transport that
  /// starts first).
  [[nodiscard]] static Result<EgressTransport> create(std::string_view name,
                                                      const EgressParams& params,
                                                      const CreateOptions& options = {});
  /// Opens the egress and takes the transport slot (RoleTaken while a live
  /// transport holds it; a dead holder's slot is taken over) and captures the
  /// generation, reconnecting first when a transport attached before.
  [[nodiscard]] static Result<EgressTransport> open(std::string_view name,
                                                    const OpenOptions& options = {});
  /// As open(), on a segment opened already (open_egress, create_egress).
  [[nodiscard]] static Result<EgressTransport> attach(Segment segment);

  /// The generation this transport sends under (captured at attach).
  [[nodiscard]] std::uint64_t generation() const noexcept { return generation_; }
  /// Records returned to pending by the reconnect of open() / attach().
  [[nodiscard]] std::uint64_t replayed() const noexcept { return replayed_; }
  /// True once a later transport (or a reclaim) advanced the generation.
  [[nodiscard]] bool fenced() const noexcept;

  /// Schedules the parked records whose backoff has elapsed, then claims the
  /// oldest pending record (Claimed, WindowFull, Empty or StaleGeneration).
  [[nodiscard]] Result<egress::ClaimOutcome> try_claim(std::vector<std::byte>& payload);
  /// try_claim up to `max` times under one lock: the envelopes go to `out`
  /// (cleared first) in sequence order, their payloads copied into `payloads`,
  /// where the envelopes' spans point (valid until `payloads` changes).
  [[nodiscard]] Result<egress::ClaimBatchOutcome> try_claim_batch(
      std::size_t max, std::vector<egress::Envelope>& out, std::vector<std::byte>& payloads);
  /// As try_claim, parking on the futex while there is nothing to claim: woken
  /// by an enqueue, an acknowledgement that reopens the window, a reconnect,
  /// or the earliest backoff expiry (kept in the segment). After `timeout`,
  /// the last Empty / WindowFull outcome.
  [[nodiscard]] Result<egress::ClaimOutcome> claim(std::vector<std::byte>& payload,
                                                   std::chrono::nanoseconds timeout);
  /// Acknowledges every record through sequence `through` (cumulative).
  [[nodiscard]] Result<egress::AckOutcome> ack(std::uint64_t through);
  /// Reports in-flight record `sequence` failed now: parked for its backoff,
  /// or a dead letter once its retry budget is spent.
  [[nodiscard]] Result<egress::FailOutcome> fail(std::uint64_t sequence);
  /// Returns parked record `sequence` to pending now, whatever its due time.
  [[nodiscard]] Result<egress::RetryOutcome> retry_now(std::uint64_t sequence);

  /// The egress's counters and this transport's generation (never blocks).
  [[nodiscard]] EgressTransportSnapshot snapshot(bool with_records = false) const;

  /// The egress handle underneath (attached in the transport role).
  [[nodiscard]] Egress& egress() noexcept { return egress_; }
  /// The egress handle underneath (attached in the transport role).
  [[nodiscard]] const Egress& egress() const noexcept { return egress_; }

 private:
  [[nodiscard]] static Result<EgressTransport> adopt(Segment segment);
  Egress egress_;
  std::uint64_t generation_ = 0;
  std::uint64_t replayed_ = 0;
  std::vector<std::size_t> claim_offsets_;  // try_claim_batch's scratch, kept for its capacity
};

}  // namespace shm
