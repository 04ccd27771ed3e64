// The egress state machine (see shm/egress/core.hpp and the protocol note in
// shm/egress/layout.hpp). Every function runs with the egress mutex held when
// the state lives in a segment; in the heap (LocalEgress) nothing else sees it.
#include "internal.hpp"

#include "format/format.hpp"

#include <algorithm>
#include <cstring>
#include <new>

namespace shm {
namespace detail {
std::atomic<test_hooks::EgressCrashHook> egress_crash_hook{nullptr};
}  // namespace detail

void test_hooks::set_egress_crash_hook(EgressCrashHook hook) noexcept {
  detail::egress_crash_hook.store(hook, std::memory_order_relaxed);
}

namespace egress {

using namespace internal;
using CrashPoint = test_hooks::EgressCrashPoint;

namespace {

constexpr auto kFree = static_cast<std::uint32_t>(RecordState::Free);
constexpr auto kPending = static_cast<std::uint32_t>(RecordState::Pending);
constexpr auto kInflight = static_cast<std::uint32_t>(RecordState::Inflight);
constexpr auto kParked = static_cast<std::uint32_t>(RecordState::Parked);
constexpr auto kTerminal = static_cast<std::uint32_t>(RecordState::Terminal);

[[nodiscard]] std::uint64_t stride(const ParamBlock& p) noexcept {
  return round_up(p.slot_bytes, 8);
}

struct Ops {
  const State& s;
  Control& c;
  explicit Ops(const State& st_) noexcept : s(st_), c(*st_.control) {}

  [[nodiscard]] Record& rec(std::uint64_t seq) const noexcept {
    return s.records[seq % s.params.capacity];
  }
  [[nodiscard]] std::byte* payload(std::uint64_t seq) const noexcept {
    return s.payloads + (seq % s.params.capacity) * stride(s.params);
  }
  [[nodiscard]] std::uint64_t count(std::uint32_t state) const noexcept {
    return ld(c.state.counts[state]);
  }
  void move(Record& r, std::uint32_t from, std::uint32_t to) const noexcept {
    st(r.state, to);
    if (from != kFree) st(c.state.counts[from], ld(c.state.counts[from]) - 1);
    if (to != kFree) st(c.state.counts[to], ld(c.state.counts[to]) + 1);
  }
  void touch(Reader r) const noexcept {
    auto& v = c.state.reader_versions[static_cast<std::size_t>(r)];
    st(v, ld(v) + 1);
  }
  void stat(std::atomic<std::uint64_t>& a, std::uint64_t by = 1) const noexcept {
    st(a, ld(a) + by);
  }
  // The lowest retained sequence a scan may start at (bounded by capacity,
  // whatever the stored head says).
  [[nodiscard]] std::uint64_t low() const noexcept {
    const std::uint64_t next = ld(c.state.next_sequence);
    const std::uint64_t floor = next >= s.params.capacity ? next - s.params.capacity : 0;
    const std::uint64_t head = ld(c.state.head);
    return head >= floor && head <= next ? head : floor;
  }
  void advance_head() const noexcept {
    const std::uint64_t next = ld(c.state.next_sequence);
    std::uint64_t h = low();
    while (h < next && ld(rec(h).state) == kFree) ++h;
    st(c.state.head, h);
    if (ld(c.state.pending_hint) < h) st(c.state.pending_hint, h);
  }
  void recompute_next_due() const noexcept {
    std::uint64_t due = kNoDue;
    if (count(kParked) != 0) {
      const std::uint64_t next = ld(c.state.next_sequence);
      for (std::uint64_t q = low(); q < next; ++q) {
        const Record& r = rec(q);
        if (ld(r.state) == kParked) due = std::min(due, ld(r.due_ns));
      }
    }
    st(c.state.next_due, due);
  }

  [[nodiscard]] RetryRecord retry_value() const noexcept {
    const RetryImage& r = c.state.retry;
    return RetryRecord{ld(r.sequence), ld(r.attempt), ld(r.backoff_ns), ld(r.exhausted) != 0};
  }
  [[nodiscard]] bool retry_valid() const noexcept { return ld(c.state.retry.valid) != 0; }
  // Clears the retry reader when it names parked record `seq`; true if it did.
  bool clear_parked_retry(std::uint64_t seq) const noexcept {
    RetryImage& r = c.state.retry;
    if (ld(r.valid) == 0 || ld(r.exhausted) != 0 || ld(r.sequence) != seq) return false;
    st(r.valid, 0u);
    return true;
  }

  // ---- journal
  // What an undo entry saves: the images repair() restores for its op, no
  // more (enqueue and claim are the per-message path; a batch runs them once
  // per record). Enqueue needs only the sequence (the record was free), a
  // claim the record, fail / retry_now / pop_dead_letter the retry reader too.
  enum class Images { Record, RecordAndRetry };
  void open_undo(JournalOp op, std::uint64_t seq, Images images) const noexcept {
    Journal& j = c.journal;
    const Record& r = rec(seq);
    st(j.arg, seq);
    st(j.record_state, ld(r.state));
    st(j.record_attempt, ld(r.attempt));
    st(j.record_due_ns, ld(r.due_ns));
    st(j.record_backoff_ns, ld(r.backoff_ns));
    if (images == Images::Record) {
      commit(op);
      return;
    }
    const RetryImage& from = c.state.retry;
    st(j.retry.valid, ld(from.valid));
    st(j.retry.exhausted, ld(from.exhausted));
    st(j.retry.attempt, ld(from.attempt));
    st(j.retry.sequence, ld(from.sequence));
    st(j.retry.backoff_ns, ld(from.backoff_ns));
    commit(op);
  }
  void open_redo(JournalOp op, std::uint64_t arg) const noexcept {
    st(c.journal.arg, arg);
    commit(op);
  }
  void commit(JournalOp op) const noexcept {
    // Crash order (a SIGKILL lands between instructions, not between memory
    // orders): the images above are stored before the op, the op before the change.
    std::atomic_signal_fence(std::memory_order_seq_cst);
    st(c.journal.op, static_cast<std::uint32_t>(op));
    std::atomic_signal_fence(std::memory_order_seq_cst);
  }
  void close() const noexcept {
    std::atomic_signal_fence(std::memory_order_seq_cst);
    st(c.journal.op, static_cast<std::uint32_t>(JournalOp::None));
  }

  // ---- multi-record transitions (idempotent: the journal's redo replays them)
  struct AckEffect {
    std::uint64_t removed = 0;
    bool pending = false, inflight = false, retry = false, parked = false;
  };
  AckEffect apply_ack(std::uint64_t through) const noexcept {
    AckEffect e;
    st(c.state.acked_next, through + 1);
    const std::uint64_t end = std::min(through + 1, ld(c.state.next_sequence));
    for (std::uint64_t q = low(); q < end; ++q) {
      Record& r = rec(q);
      const std::uint32_t state = ld(r.state);
      if (state != kPending && state != kInflight && state != kParked) continue;
      // [retry-first] The retry reader is cleared before the record leaves
      // Parked: a holder killed between the two stores leaves a parked record
      // that the redo moves, never a reader naming a record that is not parked.
      if (state == kParked) e.retry |= clear_parked_retry(q);
      move(r, state, kFree);
      ++e.removed;
      e.pending |= state == kPending;
      e.inflight |= state == kInflight;
      e.parked |= state == kParked;
      if (e.removed == 1) detail::egress_crash_point(CrashPoint::AckMidPrune);
    }
    advance_head();
    if (e.parked) recompute_next_due();
    return e;
  }
  struct RetryEffect {
    std::uint64_t scheduled = 0;
    bool retry = false;
  };
  RetryEffect apply_retry_due(std::uint64_t now) const noexcept {
    RetryEffect e;
    const std::uint64_t next = ld(c.state.next_sequence);
    for (std::uint64_t q = low(); q < next; ++q) {
      Record& r = rec(q);
      if (ld(r.state) != kParked || ld(r.due_ns) > now) continue;
      e.retry |= clear_parked_retry(q);  // before the move: [retry-first] in apply_ack
      move(r, kParked, kPending);
      if (ld(c.state.pending_hint) > q) st(c.state.pending_hint, q);
      if (++e.scheduled == 1) detail::egress_crash_point(CrashPoint::RetryDueMidSchedule);
    }
    recompute_next_due();
    return e;
  }
  struct ReconnectEffect {
    std::uint64_t moved = 0;
    bool retry = false;
  };
  ReconnectEffect apply_reconnect(std::uint64_t generation) const noexcept {
    ReconnectEffect e;
    st(c.state.generation, generation);
    const std::uint64_t next = ld(c.state.next_sequence);
    for (std::uint64_t q = low(); q < next; ++q) {
      Record& r = rec(q);
      const std::uint32_t state = ld(r.state);
      if (state == kInflight || state == kParked) {
        if (state == kParked) e.retry |= clear_parked_retry(q);  // [retry-first] in apply_ack
        move(r, state, kPending);
        ++e.moved;
        if (e.moved == 1) detail::egress_crash_point(CrashPoint::ReconnectMidReplay);
      }
      if (ld(r.state) == kPending) st(r.generation, generation);
    }
    st(c.state.pending_hint, ld(c.state.head));
    st(c.state.next_due, kNoDue);
    return e;
  }
};

}  // namespace

// ---------------------------------------------------------------- names

std::string_view to_string(EnqueueStatus s) noexcept {
  return s == EnqueueStatus::Enqueued ? "enqueued" : "full";
}
std::string_view to_string(ClaimStatus s) noexcept {
  switch (s) {
    case ClaimStatus::Claimed:
      return "claimed";
    case ClaimStatus::WindowFull:
      return "window_full";
    case ClaimStatus::Empty:
      return "empty";
    case ClaimStatus::StaleGeneration:
      return "stale_generation";
  }
  return "unknown";
}
std::string_view to_string(AckStatus s) noexcept {
  switch (s) {
    case AckStatus::Advanced:
      return "advanced";
    case AckStatus::Unchanged:
      return "unchanged";
    case AckStatus::Refused:
      return "refused";
    case AckStatus::StaleGeneration:
      return "stale_generation";
  }
  return "unknown";
}
std::string_view to_string(FailStatus s) noexcept {
  switch (s) {
    case FailStatus::Retrying:
      return "retrying";
    case FailStatus::Exhausted:
      return "exhausted";
    case FailStatus::UnknownSequence:
      return "unknown_sequence";
    case FailStatus::StaleGeneration:
      return "stale_generation";
  }
  return "unknown";
}
std::string_view to_string(RetryStatus s) noexcept {
  switch (s) {
    case RetryStatus::Scheduled:
      return "scheduled";
    case RetryStatus::UnknownSequence:
      return "unknown_sequence";
    case RetryStatus::StaleGeneration:
      return "stale_generation";
  }
  return "unknown";
}
std::string_view to_string(ReconnectStatus s) noexcept {
  return s == ReconnectStatus::Advanced ? "advanced" : "refused";
}
std::string_view to_string(RecordState s) noexcept {
  switch (s) {
    case RecordState::Free:
      return "free";
    case RecordState::Pending:
      return "pending";
    case RecordState::Inflight:
      return "inflight";
    case RecordState::Parked:
      return "parked";
    case RecordState::Terminal:
      return "terminal";
  }
  return "unknown";
}
std::string_view to_string(Reader r) noexcept {
  switch (r) {
    case Reader::Pending:
      return "pending";
    case Reader::Inflight:
      return "inflight";
    case Reader::AckedThrough:
      return "acked_through";
    case Reader::Retry:
      return "retry";
  }
  return "unknown";
}

// ---------------------------------------------------------------- setup

State state_over(const ParamBlock& params, std::byte* data) noexcept {
  const Geometry g = geometry(params);
  State s;
  s.params = params;
  s.control = reinterpret_cast<Control*>(data);
  s.records = reinterpret_cast<Record*>(data + g.records);
  s.payloads = data + g.payloads;
  return s;
}

Result<void> validate(const ParamBlock& p) {
  auto bad = [](std::string what) { return fail(Errc::InvalidArgument, std::move(what)); };
  if (p.capacity == 0 || p.capacity > kMaxCapacity)
    return bad(shm::detail::format("capacity {} is outside [1, {}]", p.capacity, kMaxCapacity));
  if (p.slot_bytes == 0 || p.slot_bytes > kMaxSlotBytes)
    return bad(
        shm::detail::format("slot_bytes {} is outside [1, {}]", p.slot_bytes, kMaxSlotBytes));
  if (p.inflight_limit == 0 || p.inflight_limit > p.capacity)
    return bad(shm::detail::format("inflight_limit {} is outside [1, capacity {}]",
                                   p.inflight_limit, p.capacity));
  if (p.retry_base_ns > p.retry_ceiling_ns)
    return bad(shm::detail::format("retry_base_ns {} exceeds retry_ceiling_ns {}", p.retry_base_ns,
                                   p.retry_ceiling_ns));
  return {};
}

void EgressCore::initialize() noexcept {
  Control& c = *s_.control;
  st(c.state.generation, 1u);
  st(c.state.next_sequence, 0u);
  st(c.state.acked_next, 0u);
  st(c.state.head, 0u);
  st(c.state.pending_hint, 0u);
  for (auto& n : c.state.counts) st(n, 0u);
  st(c.state.next_due, kNoDue);
  for (auto& v : c.state.reader_versions) st(v, 0u);
  st(c.state.retry.valid, 0u);
  st(c.journal.op, 0u);
  for (std::uint32_t i = 0; i < s_.params.capacity; ++i) st(s_.records[i].state, kFree);
}

// ---------------------------------------------------------------- operations

Result<EnqueueOutcome> EgressCore::enqueue(std::span<const std::byte> payload,
                                           std::uint64_t now_ns) {
  Ops o(s_);
  if (payload.size() > s_.params.slot_bytes)
    return shm::fail(Errc::TooLarge,
                     shm::detail::format("payload of {} bytes exceeds slot_bytes {}",
                                         payload.size(), s_.params.slot_bytes));
  const std::uint64_t next = ld(o.c.state.next_sequence);
  if (next - o.low() >= s_.params.capacity) {
    o.stat(o.c.stats.full);
    return EnqueueOutcome{EnqueueStatus::Full, 0};
  }
  o.open_redo(JournalOp::Enqueue, next);  // its undo needs the sequence only
  Record& r = o.rec(next);
  if (!payload.empty()) std::memcpy(o.payload(next), payload.data(), payload.size());
  st(r.length, payload.size());
  st(r.attempt, 0u);
  st(r.sequence, next);
  st(r.generation, ld(o.c.state.generation));
  st(r.enqueue_ns, now_ns);
  st(r.due_ns, kNoDue);
  st(r.backoff_ns, 0u);
  o.move(r, kFree, kPending);
  detail::egress_crash_point(CrashPoint::EnqueueAfterRecord);
  st(o.c.state.next_sequence, next + 1);
  o.touch(Reader::Pending);
  o.stat(o.c.stats.enqueued);
  o.close();
  return EnqueueOutcome{EnqueueStatus::Enqueued, next};
}

ClaimOutcome EgressCore::claim(std::uint64_t generation) noexcept {
  Ops o(s_);
  const std::uint64_t g = ld(o.c.state.generation);
  if (generation != g) {
    o.stat(o.c.stats.stale);
    return ClaimOutcome{ClaimStatus::StaleGeneration, {}, g};
  }
  if (o.count(kInflight) >= s_.params.inflight_limit) return {ClaimStatus::WindowFull, {}, g};
  if (o.count(kPending) == 0) return {ClaimStatus::Empty, {}, g};
  const std::uint64_t next = ld(o.c.state.next_sequence);
  std::uint64_t q = std::max(ld(o.c.state.pending_hint), o.low());
  while (q < next && ld(o.rec(q).state) != kPending) ++q;
  if (q == next) {  // the count said otherwise: the hint was wrong; never skip a record
    q = o.low();
    while (q < next && ld(o.rec(q).state) != kPending) ++q;
    if (q == next) return {ClaimStatus::Empty, {}, g};
  }
  Record& r = o.rec(q);
  o.open_undo(JournalOp::Claim, q, Ops::Images::Record);
  const std::uint32_t attempt = ld(r.attempt) + 1;
  st(r.attempt, attempt);
  detail::egress_crash_point(CrashPoint::ClaimMidRecord);
  o.move(r, kPending, kInflight);
  st(o.c.state.pending_hint, q + 1);
  o.touch(Reader::Pending);
  o.touch(Reader::Inflight);
  o.stat(o.c.stats.claims);
  o.close();
  const std::uint32_t length = std::min(ld(r.length), s_.params.slot_bytes);
  return ClaimOutcome{ClaimStatus::Claimed,
                      Envelope{ld(r.generation), q, attempt, {o.payload(q), length}}, g};
}

AckOutcome EgressCore::ack(std::uint64_t generation, std::uint64_t through) noexcept {
  Ops o(s_);
  const std::uint64_t g = ld(o.c.state.generation);
  if (generation != g) {
    o.stat(o.c.stats.stale);
    return AckOutcome{AckStatus::StaleGeneration, 0, false, false, g};
  }
  if (through >= ld(o.c.state.next_sequence))
    return AckOutcome{AckStatus::Refused, 0, false, false, g};
  if (ld(o.c.state.acked_next) > through)
    return AckOutcome{AckStatus::Unchanged, 0, false, false, g};
  const bool window_was_full = o.count(kInflight) >= s_.params.inflight_limit;
  const std::uint64_t head = o.low();
  o.open_redo(JournalOp::Ack, through);
  const Ops::AckEffect e = o.apply_ack(through);
  o.touch(Reader::AckedThrough);
  if (e.pending) o.touch(Reader::Pending);
  if (e.inflight) o.touch(Reader::Inflight);
  if (e.retry) o.touch(Reader::Retry);
  o.stat(o.c.stats.acked, e.removed);
  o.close();
  return AckOutcome{AckStatus::Advanced, e.removed,
                    window_was_full && o.count(kInflight) < s_.params.inflight_limit,
                    ld(o.c.state.head) != head, g};
}

FailOutcome EgressCore::fail(std::uint64_t generation, std::uint64_t sequence,
                             std::uint64_t now_ns) noexcept {
  Ops o(s_);
  const std::uint64_t g = ld(o.c.state.generation);
  if (generation != g) {
    o.stat(o.c.stats.stale);
    return FailOutcome{FailStatus::StaleGeneration, {}, 0, g};
  }
  if (sequence < o.low() || sequence >= ld(o.c.state.next_sequence) ||
      ld(o.rec(sequence).state) != kInflight)
    return FailOutcome{FailStatus::UnknownSequence, {}, 0, g};
  Record& r = o.rec(sequence);
  const std::uint32_t attempt = std::max(ld(r.attempt), 1u);
  const bool retry = attempt - 1 < s_.params.retry_budget;
  // An exhausted record reports the backoff its failure derived too (the
  // specification's retry record), though nothing is scheduled after it.
  RetryRecord rr{sequence, attempt,
                 backoff(s_.params.retry_base_ns, s_.params.retry_ceiling_ns, attempt), !retry};
  std::uint64_t due = kNoDue;
  if (retry) {
    due = now_ns > kNoDue - 1 - rr.backoff_ns ? kNoDue - 1 : now_ns + rr.backoff_ns;
  }
  const bool retry_changed = !o.retry_valid() || o.retry_value() != rr;
  o.open_undo(JournalOp::Fail, sequence, Ops::Images::RecordAndRetry);
  st(r.backoff_ns, rr.backoff_ns);
  st(r.due_ns, due);
  detail::egress_crash_point(CrashPoint::FailMidRecord);
  o.move(r, kInflight, retry ? kParked : kTerminal);
  if (retry && due < ld(o.c.state.next_due)) st(o.c.state.next_due, due);
  RetryImage& ri = o.c.state.retry;
  st(ri.sequence, rr.sequence);
  st(ri.attempt, rr.attempt);
  st(ri.backoff_ns, rr.backoff_ns);
  st(ri.exhausted, rr.exhausted ? 1u : 0u);
  st(ri.valid, 1u);
  o.touch(Reader::Inflight);
  if (retry_changed) o.touch(Reader::Retry);
  o.stat(o.c.stats.failures);
  if (!retry) o.stat(o.c.stats.exhausted);
  o.close();
  return FailOutcome{retry ? FailStatus::Retrying : FailStatus::Exhausted, rr, retry ? due : 0, g};
}

RetryOutcome EgressCore::retry_now(std::uint64_t generation, std::uint64_t sequence) noexcept {
  Ops o(s_);
  const std::uint64_t g = ld(o.c.state.generation);
  if (generation != g) {
    o.stat(o.c.stats.stale);
    return RetryOutcome{RetryStatus::StaleGeneration, 0, g};
  }
  if (sequence < o.low() || sequence >= ld(o.c.state.next_sequence) ||
      ld(o.rec(sequence).state) != kParked)
    return RetryOutcome{RetryStatus::UnknownSequence, 0, g};
  o.open_undo(JournalOp::RetryNow, sequence, Ops::Images::RecordAndRetry);
  o.move(o.rec(sequence), kParked, kPending);
  if (ld(o.c.state.pending_hint) > sequence) st(o.c.state.pending_hint, sequence);
  const bool retry = o.clear_parked_retry(sequence);
  o.recompute_next_due();
  o.touch(Reader::Pending);
  if (retry) o.touch(Reader::Retry);
  o.stat(o.c.stats.retries);
  o.close();
  return RetryOutcome{RetryStatus::Scheduled, 1, g};
}

RetryOutcome EgressCore::retry_due(std::uint64_t generation, std::uint64_t now_ns) noexcept {
  Ops o(s_);
  const std::uint64_t g = ld(o.c.state.generation);
  if (generation != g) {
    o.stat(o.c.stats.stale);
    return RetryOutcome{RetryStatus::StaleGeneration, 0, g};
  }
  if (o.count(kParked) == 0 || ld(o.c.state.next_due) > now_ns)
    return RetryOutcome{RetryStatus::Scheduled, 0, g};
  o.open_redo(JournalOp::RetryDue, now_ns);
  const Ops::RetryEffect e = o.apply_retry_due(now_ns);
  if (e.scheduled != 0) o.touch(Reader::Pending);
  if (e.retry) o.touch(Reader::Retry);
  o.stat(o.c.stats.retries, e.scheduled);
  o.close();
  return RetryOutcome{RetryStatus::Scheduled, e.scheduled, g};
}

ReconnectOutcome EgressCore::reconnect(std::uint64_t new_generation) noexcept {
  Ops o(s_);
  const std::uint64_t g = ld(o.c.state.generation);
  if (new_generation <= g) return ReconnectOutcome{ReconnectStatus::Refused, 0, g};
  const bool had_pending = o.count(kPending) != 0;
  const bool had_inflight = o.count(kInflight) != 0;
  o.open_redo(JournalOp::Reconnect, new_generation);
  const Ops::ReconnectEffect e = o.apply_reconnect(new_generation);
  if (had_pending || e.moved != 0) o.touch(Reader::Pending);
  if (had_inflight) o.touch(Reader::Inflight);
  if (e.retry) o.touch(Reader::Retry);
  o.stat(o.c.stats.reconnects);
  o.close();
  return ReconnectOutcome{ReconnectStatus::Advanced, e.moved, new_generation};
}

std::optional<RecordView> EgressCore::pop_dead_letter(std::vector<std::byte>* payload) {
  Ops o(s_);
  if (o.count(kTerminal) == 0) return std::nullopt;
  const std::uint64_t next = ld(o.c.state.next_sequence);
  std::uint64_t q = o.low();
  while (q < next && ld(o.rec(q).state) != kTerminal) ++q;
  if (q == next) return std::nullopt;
  Record& r = o.rec(q);
  RecordView view{q, ld(r.attempt), ld(r.generation), RecordState::Terminal};
  if (payload != nullptr) {
    const std::uint32_t length = std::min(ld(r.length), s_.params.slot_bytes);
    payload->assign(o.payload(q), o.payload(q) + length);
  }
  o.open_undo(JournalOp::TakeDeadLetter, q, Ops::Images::RecordAndRetry);
  o.move(r, kTerminal, kFree);
  bool retry = false;
  RetryImage& ri = o.c.state.retry;
  if (ld(ri.valid) != 0 && ld(ri.exhausted) != 0 && ld(ri.sequence) == q) {
    st(ri.valid, 0u);
    retry = true;
  }
  o.advance_head();
  if (retry) o.touch(Reader::Retry);
  o.stat(o.c.stats.dead_letters_taken);
  o.close();
  return view;
}

// ---------------------------------------------------------------- reads

std::uint64_t EgressCore::generation() const noexcept {
  return ld(s_.control->state.generation);
}
std::uint64_t EgressCore::reader_version(Reader r) const noexcept {
  return ld(s_.control->state.reader_versions[static_cast<std::size_t>(r)]);
}
bool EgressCore::claimable() const noexcept {
  const Control& c = *s_.control;
  return ld(c.state.counts[kPending]) != 0 &&
         ld(c.state.counts[kInflight]) < s_.params.inflight_limit;
}
bool EgressCore::has_space() const noexcept {
  const Ops o(s_);
  return ld(o.c.state.next_sequence) - o.low() < s_.params.capacity;
}
std::uint64_t EgressCore::next_due() const noexcept {
  return ld(s_.control->state.next_due);
}
bool EgressCore::journal_open() const noexcept {
  return ld(s_.control->journal.op) != static_cast<std::uint32_t>(JournalOp::None);
}

Projection EgressCore::project(bool with_records) const {
  const Ops o(s_);
  const Control& c = o.c;
  Projection p;
  p.generation = ld(c.state.generation);
  p.next_sequence = ld(c.state.next_sequence);
  const std::uint64_t acked = ld(c.state.acked_next);
  if (acked != 0) p.acked_through = acked - 1;
  p.pending = ld(c.state.counts[kPending]);
  p.inflight = ld(c.state.counts[kInflight]);
  p.parked = ld(c.state.counts[kParked]);
  p.terminal = ld(c.state.counts[kTerminal]);
  if (o.retry_valid()) p.retry = o.retry_value();
  const std::uint64_t due = ld(c.state.next_due);
  if (due != kNoDue) p.next_due_ns = due;
  for (std::size_t i = 0; i < kReaders; ++i) p.reader_versions[i] = ld(c.state.reader_versions[i]);
  const std::uint64_t low = o.low();
  if (low < p.next_sequence) p.oldest_enqueue_ns = ld(o.rec(low).enqueue_ns);
  if (with_records) {
    for (std::uint64_t q = low; q < p.next_sequence; ++q) {
      const Record& r = o.rec(q);
      const std::uint32_t state = ld(r.state);
      if (state == kFree) continue;
      p.records.push_back(RecordView{q, ld(r.attempt), ld(r.generation),
                                     static_cast<RecordState>(std::min(state, kRecordStates))});
    }
  }
  return p;
}

// ---------------------------------------------------------------- repair

namespace {

struct Derived {
  std::uint64_t head = 0;
  std::uint64_t counts[kRecordStates] = {};
  std::uint64_t next_due = kNoDue;
};

Derived derive(const Ops& o) {
  Derived d;
  const std::uint64_t next = ld(o.c.state.next_sequence);
  const std::uint64_t floor = next >= o.s.params.capacity ? next - o.s.params.capacity : 0;
  d.head = next;
  for (std::uint64_t q = floor; q < next; ++q) {
    const Record& r = o.rec(q);
    const std::uint32_t state = ld(r.state);
    if (state == kFree || state >= kRecordStates) continue;
    if (d.head == next) d.head = q;
    ++d.counts[state];
    if (state == kParked) d.next_due = std::min(d.next_due, ld(r.due_ns));
  }
  return d;
}

}  // namespace

std::vector<std::string> EgressCore::repair() {
  const Ops o(s_);
  Control& c = o.c;
  const auto op = static_cast<JournalOp>(ld(c.journal.op));
  const std::uint64_t arg = ld(c.journal.arg);
  const std::uint64_t next = ld(c.state.next_sequence);
  auto restore_record = [&](bool retry) {
    if (arg >= next) return;  // damaged journal: check() reports what it finds
    Record& r = o.rec(arg);
    st(r.state, ld(c.journal.record_state));
    st(r.attempt, ld(c.journal.record_attempt));
    st(r.due_ns, ld(c.journal.record_due_ns));
    st(r.backoff_ns, ld(c.journal.record_backoff_ns));
    if (!retry) return;
    RetryImage& ri = c.state.retry;
    st(ri.valid, ld(c.journal.retry.valid));
    st(ri.exhausted, ld(c.journal.retry.exhausted));
    st(ri.attempt, ld(c.journal.retry.attempt));
    st(ri.sequence, ld(c.journal.retry.sequence));
    st(ri.backoff_ns, ld(c.journal.retry.backoff_ns));
  };
  auto rebuild = [&] {
    const Derived d = derive(o);
    st(c.state.head, d.head);
    st(c.state.pending_hint, d.head);
    for (std::uint32_t i = 0; i < kRecordStates; ++i) st(c.state.counts[i], d.counts[i]);
    st(c.state.next_due, d.next_due);
  };
  switch (op) {
    case JournalOp::Enqueue:
      // Undo: the record was free before; next_sequence may or may not have moved.
      if (arg == next || arg + 1 == next) {
        st(o.rec(arg).state, kFree);
        st(c.state.next_sequence, arg);
      }
      break;
    case JournalOp::Claim:
      restore_record(false);
      break;
    case JournalOp::Fail:
    case JournalOp::RetryNow:
    case JournalOp::TakeDeadLetter:
      restore_record(true);
      break;
    default:
      break;
  }
  rebuild();
  switch (op) {
    case JournalOp::Ack:
      if (arg < ld(c.state.next_sequence)) (void)o.apply_ack(arg);
      break;
    case JournalOp::RetryDue:
      (void)o.apply_retry_due(arg);
      break;
    case JournalOp::Reconnect:
      if (arg >= ld(c.state.generation)) (void)o.apply_reconnect(arg);
      break;
    default:
      break;
  }
  rebuild();
  st(c.journal.op, static_cast<std::uint32_t>(JournalOp::None));
  for (std::size_t i = 0; i < kReaders; ++i) o.touch(static_cast<Reader>(i));
  o.stat(c.stats.repairs);
  return check();
}

std::vector<std::string> EgressCore::check() const {
  const Ops o(s_);
  const Control& c = o.c;
  std::vector<std::string> out;
  auto note = [&](std::string line) {
    if (out.size() < 32) out.push_back(std::move(line));
  };
  const std::uint64_t g = ld(c.state.generation);
  const std::uint64_t next = ld(c.state.next_sequence);
  const std::uint64_t acked = ld(c.state.acked_next);
  if (g == 0) note("generation is 0 (generations start at 1)");
  if (acked > next)
    note(shm::detail::format("acked_through {} is not below next_sequence {}", acked - 1, next));
  const std::uint32_t op = ld(c.journal.op);
  if (op != 0)
    note(
        shm::detail::format("journal entry {} is open (a holder died inside an operation; the "
                            "next locker repairs it)",
                            op));
  const Derived d = derive(o);
  if (ld(c.state.head) != d.head)
    note(shm::detail::format("head is {}, the records say {}", ld(c.state.head), d.head));
  for (std::uint32_t i = 1; i < kRecordStates; ++i)
    if (ld(c.state.counts[i]) != d.counts[i])
      note(shm::detail::format("{} count is {}, the records hold {}",
                               to_string(static_cast<RecordState>(i)), ld(c.state.counts[i]),
                               d.counts[i]));
  if (ld(c.state.next_due) != d.next_due)
    note(shm::detail::format("next_due is {}, the parked records say {}", ld(c.state.next_due),
                             d.next_due));
  if (ld(c.state.pending_hint) > next)
    note(shm::detail::format("pending hint {} is beyond next_sequence {}", ld(c.state.pending_hint),
                             next));
  if (d.counts[kInflight] > s_.params.inflight_limit)
    note(shm::detail::format("{} records in flight exceed inflight_limit {}", d.counts[kInflight],
                             s_.params.inflight_limit));
  const std::uint64_t floor = next >= s_.params.capacity ? next - s_.params.capacity : 0;
  for (std::uint64_t q = floor; q < next; ++q) {
    const Record& r = o.rec(q);
    const std::uint32_t state = ld(r.state);
    if (state == kFree) continue;
    if (state >= kRecordStates) {
      note(shm::detail::format("record {}: state {} is not a record state", q, state));
      continue;
    }
    if (ld(r.sequence) != q)
      note(shm::detail::format("record slot of sequence {} holds sequence {}", q, ld(r.sequence)));
    if (ld(r.length) > s_.params.slot_bytes)
      note(shm::detail::format("record {}: length {} exceeds slot_bytes {}", q, ld(r.length),
                               s_.params.slot_bytes));
    if (state == kParked && ld(r.attempt) > s_.params.retry_budget)
      note(shm::detail::format("parked record {}: attempt {} leaves no retry of budget {}", q,
                               ld(r.attempt), s_.params.retry_budget));
    if (state == kPending && ld(r.generation) != g)
      note(shm::detail::format("pending record {} has generation {}, the egress {}", q,
                               ld(r.generation), g));
    if (state != kTerminal && q < acked)
      note(shm::detail::format("{} record {} is at or below acked_through {}",
                               to_string(static_cast<RecordState>(state)), q, acked - 1));
  }
  if (o.retry_valid()) {
    const RetryRecord rr = o.retry_value();
    const std::uint32_t want = rr.exhausted ? kTerminal : kParked;
    const bool in_range = rr.sequence >= floor && rr.sequence < next;
    if (!in_range || ld(o.rec(rr.sequence).state) != want)
      note(shm::detail::format("the retry reader names record {} as {}, which it is not",
                               rr.sequence, rr.exhausted ? "exhausted" : "parked"));
  }
  return out;
}

// ---------------------------------------------------------------- LocalEgress

void LocalEgress::Free::operator()(std::byte* p) const noexcept {
  ::operator delete (p, std::align_val_t{kFalseSharingRange});
}

Result<LocalEgress> LocalEgress::create(const ParamBlock& params) {
  if (auto ok = validate(params); !ok) return std::unexpected(ok.error());
  const Geometry g = geometry(params);
  auto* raw = static_cast<std::byte*>(
      ::operator new (g.data_size, std::align_val_t{kFalseSharingRange}, std::nothrow));
  if (raw == nullptr)
    return fail(Errc::NoSpace,
                shm::detail::format("cannot allocate {} bytes for an egress", g.data_size));
  std::memset(raw, 0, g.data_size);
  LocalEgress e;
  e.buffer_.reset(raw);
  e.core_ = EgressCore(state_over(params, raw));
  e.core_.initialize();
  return e;
}

}  // namespace egress
}  // namespace shm
