// The Egress handles: the core over a segment, under the robust mutex, with
// the futex wake-ups (see the protocol note in shm/egress/layout.hpp).
#include "shm/egress/egress.hpp"

#include "internal.hpp"
#include "segment/size_check.hpp"
#include "shm/platform/clock.hpp"
#include "shm/platform/futex.hpp"
#include "waitset_hooks.hpp"

#include "format/format.hpp"

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

namespace shm {

using namespace egress;
using namespace egress::internal;

namespace egress {

ParamBlock to_block(const EgressParams& p) noexcept {
  ParamBlock b{};
  b.capacity = p.max_payloads;
  b.slot_bytes = p.slot_bytes;
  b.inflight_limit = p.inflight_limit;
  b.retry_budget = p.retry_budget;
  b.retry_base_ns = static_cast<std::uint64_t>(std::max<std::int64_t>(0, p.retry_base.count()));
  b.retry_ceiling_ns =
      static_cast<std::uint64_t>(std::max<std::int64_t>(0, p.retry_ceiling.count()));
  return b;
}

namespace {

ParamBlock read_block(std::span<const std::byte> raw) {
  ParamBlock b{};
  std::memcpy(&b, raw.data(), std::min(raw.size(), sizeof b));
  return b;
}

std::string mismatch(std::span<const std::byte> found_raw, std::span<const std::byte> want_raw) {
  const ParamBlock f = read_block(found_raw), w = read_block(want_raw);
  auto cmp = [](std::string_view field, std::uint64_t found, std::uint64_t want) -> std::string {
    if (want == 0 || found == want) return {};
    return shm::detail::format("{}: segment has {}, caller expects {}", field, found, want);
  };
  for (std::string s :
       {cmp("capacity", f.capacity, w.capacity), cmp("slot_bytes", f.slot_bytes, w.slot_bytes),
        cmp("inflight_limit", f.inflight_limit, w.inflight_limit),
        cmp("retry_budget", f.retry_budget, w.retry_budget),
        cmp("retry_base_ns", f.retry_base_ns, w.retry_base_ns),
        cmp("retry_ceiling_ns", f.retry_ceiling_ns, w.retry_ceiling_ns)})
    if (!s.empty()) return s;
  return {};
}

}  // namespace

KindSpec kind_spec(const ParamBlock& params, bool any) {
  static thread_local ParamBlock storage{};
  storage = params;
  KindSpec spec;
  spec.kind = kEgressKind;
  spec.kind_name = "egress";
  spec.fingerprint = kFingerprint;
  spec.params = std::as_bytes(std::span(&storage, 1));
  spec.data_size = any ? 0 : geometry(params).data_size;
  spec.param_mismatch = mismatch;
  return spec;
}

Result<State> make_state(const Segment& segment) {
  const auto raw = segment.params();
  if (raw.size() < sizeof(ParamBlock))
    return fail(Errc::Corrupt, shm::detail::format("{}: egress parameter block of {} bytes, "
                                                   "expected {}",
                                                   segment.path(), raw.size(), sizeof(ParamBlock)));
  const ParamBlock p = read_block(raw);
  if (auto ok = validate(p); !ok)
    return fail(Errc::Corrupt, shm::detail::format("{}: egress parameters: {}", segment.path(),
                                                   ok.error().message));
  const Geometry g = geometry(p);
  if (segment.data().size() < g.data_size)
    return fail(Errc::Corrupt,
                shm::detail::format("{}: data area of {} bytes, the egress parameters need {}",
                                    segment.path(), segment.data().size(), g.data_size));
  return state_over(p, segment.data().data());
}

std::optional<Projection> observe(const State& s, bool with_records) {
  const Control& c = *s.control;
  const EgressCore core(s);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    // [egress.V2'] acquire: pairs with [egress.V2] in end_write(); the fields
    // read below are at least as new as that writer's.
    const std::uint64_t v1 = c.lock.version.load(std::memory_order_acquire);
    if ((v1 & 1u) != 0) {
      std::this_thread::yield();
      continue;
    }
    Projection p = core.project(with_records);
    // [egress.V1'] acquire fence: pairs with [egress.V1] in begin_write(); if a
    // writer stored anything read above, the reload sees its odd version.
    std::atomic_thread_fence(std::memory_order_acquire);
    if (c.lock.version.load(std::memory_order_relaxed) == v1) return p;
  }
  return std::nullopt;
}

std::optional<Projection> internal::read_projection(const State& s, bool with_records) {
  return observe(s, with_records);
}

}  // namespace egress

namespace {

struct Wake {
  bool claim = false;
  bool space = false;
};

std::string join(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += (s.empty() ? "" : "; ") + l;
  return s;
}

// `deadline` (timed calls): a live holder that keeps the mutex past it sets
// *timed_out and fails; the caller answers its own timeout outcome instead.
Result<void> lock(
    const State& s, std::string_view path,
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max(),
    bool* timed_out = nullptr) {
  Control& c = *s.control;
  const detail::LockResult r = deadline == std::chrono::steady_clock::time_point::max()
                                   ? c.lock.mutex.lock()
                                   : c.lock.mutex.lock_until(deadline);
  if (r == detail::LockResult::Acquired && ld(c.lock.faulted) == 0) [[likely]]
    return {};
  switch (r) {
    case detail::LockResult::Acquired:
      break;
    case detail::LockResult::OwnerDied: {
      EgressCore core(s);
      const std::vector<std::string> damage = core.repair();
      // Waiters may have lost a wake-up with the dead holder: wake them all.
      st(c.wake.claim_word, ld(c.wake.claim_word) + 1);
      st(c.wake.space_word, ld(c.wake.space_word) + 1);
      c.lock.mutex.mark_consistent();
      if (!damage.empty()) {
        st(c.lock.faulted, 1u);
        end_write(c);
        c.lock.mutex.unlock();
        return fail(Errc::Corrupt,
                    shm::detail::format("{}: a holder of the egress lock died and repair found "
                                        "damage; the egress is now faulted: {}",
                                        path, join(damage)));
      }
      end_write(c);  // the dead holder's odd version, made even again
      (void)futex_wake_all(c.wake.claim_word);
      (void)futex_wake_all(c.wake.space_word);
      break;
    }
    case detail::LockResult::Unrecoverable:
      return fail(Errc::Faulted,
                  shm::detail::format("{}: the egress mutex is not recoverable", path));
    case detail::LockResult::DeadOwnerUnregistered:
      return detail::fail_dead_owner(path, "egress", c.lock.mutex);
    case detail::LockResult::TimedOut:
      if (timed_out != nullptr) *timed_out = true;
      return fail(Errc::SystemError,
                  shm::detail::format("{}: the egress mutex stayed held past the deadline", path));
    case detail::LockResult::Failed:
    case detail::LockResult::Busy:  // try_lock only
      return fail(Errc::Corrupt, shm::detail::format("{}: the egress mutex word is damaged", path));
  }
  if (ld(c.lock.faulted) != 0) {
    c.lock.mutex.unlock();
    return fail(Errc::Faulted,
                shm::detail::format("{}: the egress is faulted (a repair found damage; `shmctl "
                                    "verify` lists it); re-create it",
                                    path));
  }
  return {};
}

// Runs f(core, wake) under the lock in a write section; then bumps the futex
// words f asked for and wakes their announced waiters after unlocking.
// With a `deadline` (timed calls), a mutex a live holder keeps past it sets
// *timed_out and fails without running f.
template <class F>
auto locked(
    const State& s, std::string_view path, F&& f,
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max(),
    bool* timed_out = nullptr) -> Result<std::invoke_result_t<F, EgressCore&, Wake&>> {
  if (auto ok = lock(s, path, deadline, timed_out); !ok) return std::unexpected(ok.error());
  Control& c = *s.control;
  begin_write(c);
  EgressCore core(s);
  const bool claimable_before = core.claimable();
  const bool space_before = core.has_space();
  const std::uint64_t due_before = core.next_due();
  const std::uint64_t generation_before = core.generation();
  Wake w;
  auto out = f(core, w);
  // Every change that can unblock a parked party wakes it, whatever the
  // operation (the table in docs/egress.md, "Wake-ups"): a claimer waits for
  // something claimable, an earlier due time or a new generation (fenced); a
  // producer for pool space. Judged from the state, not per operation, so an
  // operation cannot forget one (a failure that exhausts a record reopens the
  // window just as an acknowledgement does).
  w.claim |= (!claimable_before && core.claimable()) || core.next_due() < due_before ||
             core.generation() != generation_before;
  w.space |= !space_before && core.has_space();
  // [egress.W] under the mutex: a waiter announced itself and read the word
  // under the same mutex, so either it sees the new value before sleeping
  // (futex_wait returns at once) or it announced itself before this bump and
  // is woken below.
  if (w.claim) {
    st(c.wake.claim_word, ld(c.wake.claim_word) + 1);
    st(c.wake.claim_wakes, ld(c.wake.claim_wakes) + 1);
  }
  if (w.space) {
    st(c.wake.space_word, ld(c.wake.space_word) + 1);
    st(c.wake.space_wakes, ld(c.wake.space_wakes) + 1);
  }
  const bool wake_claim = w.claim && ld(c.wake.claim_waiters) != 0;
  const bool wake_space = w.space && ld(c.wake.space_waiters) != 0;
  end_write(c);
  c.lock.mutex.unlock();
  if (wake_claim) (void)futex_wake_all(c.wake.claim_word);
  if (wake_space) (void)futex_wake_all(c.wake.space_word);
  return out;
}

void copy_payload(ClaimOutcome& out, std::vector<std::byte>& payload) {
  if (out.status != ClaimStatus::Claimed) return;
  payload.assign(out.envelope.payload.begin(), out.envelope.payload.end());
  out.envelope.payload = payload;
}

void claim_wake(const AckOutcome& a, Wake& w) {
  if (a.status != AckStatus::Advanced) return;
  w.claim |= a.reopened_window;
  w.space |= a.freed_space;
}

// Opens an existing egress (any parameters) and checks that the file holds
// the size its parameters need, before any handle binds to it.
Result<Segment> open_egress_segment(std::string_view name, const OpenOptions& options) {
  const KindSpec spec = kind_spec(ParamBlock{}, true);
  auto seg = Segment::open(name, spec, options);
  if (!seg) return std::unexpected(seg.error());
  if (auto ok = egress::check_geometry(*seg); !ok) return std::unexpected(std::move(ok.error()));
  return seg;
}

}  // namespace

Result<void> egress::check_geometry(const Segment& seg) {
  auto state = make_state(seg);
  if (!state) return std::unexpected(state.error());
  return shm::detail::check_total_size(seg, geometry(state->params).data_size,
                                       "its egress parameters need");
}

Result<std::pair<std::uint64_t, std::uint64_t>> egress::internal::record_transport_death(
    const State& s, std::string_view path) {
  return locked(s, path, [&](EgressCore& core, Wake&) {
    Control& c = *s.control;
    st(c.stats.transport_deaths, ld(c.stats.transport_deaths) + 1);
    return std::pair{core.generation(),
                     ld(c.state.counts[static_cast<std::size_t>(RecordState::Inflight)])};
  });
}

// ---------------------------------------------------------------- lifetime

Result<Egress> Egress::bind(Segment segment, const RoleSpec& role) {
  auto state = make_state(segment);
  if (!state) return std::unexpected(state.error());
  auto attachment = segment.attach(role);
  if (!attachment) return std::unexpected(attachment.error());
  Egress e;
  e.segment_ = std::move(segment);
  e.attachment_ = std::move(*attachment);
  e.state_ = *state;
  return e;
}

Result<Segment> create_egress(std::string_view name, const EgressParams& params,
                              const CreateOptions& options) {
  const ParamBlock block = to_block(params);
  if (auto ok = validate(block); !ok) return std::unexpected(ok.error());
  const KindSpec spec = kind_spec(block, false);
  auto init = [&](std::span<std::byte> data) -> Result<void> {
    const State s = state_over(block, data.data());
    if (auto ok = s.control->lock.mutex.init(); !ok) return ok;
    EgressCore(s).initialize();
    return {};
  };
  return Segment::create(name, spec, options, init);
}

Result<Segment> open_egress(std::string_view name, const OpenOptions& options) {
  return open_egress_segment(name, options);
}

Result<void> egress::check_adopted(const Segment& seg) {
  if (auto ok = shm::detail::check_kind(seg, kind_spec(ParamBlock{}, true)); !ok) return ok;
  return check_geometry(seg);
}

Result<Egress> Egress::create(std::string_view name, const EgressParams& params,
                              const CreateOptions& options) {
  auto seg = create_egress(name, params, options);
  if (!seg) return std::unexpected(seg.error());
  return bind(std::move(*seg), kProducerRole);
}

Result<Egress> Egress::open(std::string_view name, const OpenOptions& options) {
  auto seg = open_egress(name, options);
  if (!seg) return std::unexpected(seg.error());
  return bind(std::move(*seg), kProducerRole);
}

Result<Egress> Egress::attach(Segment segment) {
  if (auto ok = check_adopted(segment); !ok) return std::unexpected(ok.error());
  return bind(std::move(segment), kProducerRole);
}

// ---------------------------------------------------------------- producers

Result<EnqueueOutcome> Egress::try_enqueue_at(std::span<const std::byte> payload,
                                              std::uint64_t now_ns) {
  auto r = locked(state_, segment_.path(), [&](EgressCore& core, Wake& w) {
    auto out = core.enqueue(payload, now_ns);
    w.claim = out && out->status == EnqueueStatus::Enqueued;
    return out;
  });
  if (!r) return std::unexpected(r.error());
  return std::move(*r);
}

Result<EnqueueBatchOutcome> Egress::try_enqueue_batch(
    std::span<const std::span<const std::byte>> payloads) {
  for (std::size_t i = 0; i < payloads.size(); ++i)
    if (payloads[i].size() > state_.params.slot_bytes)
      return shm::fail(
          Errc::TooLarge,
          shm::detail::format("payload {} of the batch: {} bytes exceeds slot_bytes {}", i,
                              payloads[i].size(), state_.params.slot_bytes));
  const std::uint64_t now = monotonic_ns();
  auto r = locked(state_, segment_.path(),
                  [&](EgressCore& core, Wake& w) -> Result<EnqueueBatchOutcome> {
                    EnqueueBatchOutcome batch;
                    for (const auto& p : payloads) {
                      auto out = core.enqueue(p, now);
                      if (!out) return std::unexpected(out.error());
                      if (out->status != EnqueueStatus::Enqueued) break;
                      if (batch.enqueued++ == 0) batch.first_sequence = out->sequence;
                    }
                    w.claim = batch.enqueued != 0;
                    return batch;
                  });
  if (!r) return std::unexpected(r.error());
  return std::move(*r);
}

Result<EnqueueOutcome> Egress::try_enqueue(std::span<const std::byte> payload) {
  return try_enqueue_at(payload, monotonic_ns());
}

Result<EnqueueOutcome> Egress::enqueue(std::span<const std::byte> payload,
                                       std::chrono::nanoseconds timeout) {
  const auto deadline = ::shm::detail::deadline_after(timeout);
  Control& c = *state_.control;
  bool announced = false;
  for (;;) {
    std::uint32_t seen = 0;
    bool timed_out = false;
    auto r = locked(
        state_, segment_.path(),
        [&](EgressCore& core, Wake& w) {
          if (announced) st(c.wake.space_waiters, ld(c.wake.space_waiters) - 1);
          announced = false;
          auto out = core.enqueue(payload, monotonic_ns());
          w.claim = out && out->status == EnqueueStatus::Enqueued;
          if (out && out->status == EnqueueStatus::Full &&
              std::chrono::steady_clock::now() < deadline) {
            st(c.wake.space_waiters, ld(c.wake.space_waiters) + 1);  // [egress.W]
            seen = ld(c.wake.space_word);
            announced = true;
          }
          return out;
        },
        // Announced, it must lock to withdraw (space_waiters would stay one
        // too high): then the holder is waited for as by an untimed call.
        announced ? std::chrono::steady_clock::time_point::max() : deadline, &timed_out);
    // A live holder kept the mutex past the deadline: the timeout's outcome.
    if (timed_out) return EnqueueOutcome{EnqueueStatus::Full, 0};
    if (!r) return std::unexpected(r.error());
    if (!*r || (*r)->status == EnqueueStatus::Enqueued || !announced) return std::move(*r);
    const auto left = deadline - std::chrono::steady_clock::now();
    (void)futex_wait(c.wake.space_word, seen,
                     static_cast<std::uint64_t>(std::max<std::int64_t>(
                         0, std::chrono::duration_cast<std::chrono::nanoseconds>(left).count())));
  }
}

Result<std::optional<RecordView>> Egress::pop_dead_letter(std::vector<std::byte>* payload) {
  return locked(state_, segment_.path(), [&](EgressCore& core, Wake& w) {
    const std::uint64_t head = ld(state_.control->state.head);
    auto out = core.pop_dead_letter(payload);
    w.space = ld(state_.control->state.head) != head;
    return out;
  });
}

// ---------------------------------------------------------------- raw core operations

Result<ClaimOutcome> Egress::claim(std::uint64_t generation, std::vector<std::byte>& payload) {
  return locked(state_, segment_.path(), [&](EgressCore& core, Wake&) {
    ClaimOutcome out = core.claim(generation);
    copy_payload(out, payload);
    return out;
  });
}

Result<AckOutcome> Egress::ack(std::uint64_t generation, std::uint64_t through) {
  return locked(state_, segment_.path(), [&](EgressCore& core, Wake& w) {
    const AckOutcome out = core.ack(generation, through);
    claim_wake(out, w);
    return out;
  });
}

Result<FailOutcome> Egress::fail(std::uint64_t generation, std::uint64_t sequence,
                                 std::uint64_t now_ns) {
  return locked(state_, segment_.path(), [&](EgressCore& core, Wake& w) {
    const FailOutcome out = core.fail(generation, sequence, now_ns);
    // A parked claimer recomputes its sleep from the new earliest due time.
    w.claim = out.status == FailStatus::Retrying;
    return out;
  });
}

Result<RetryOutcome> Egress::retry_now(std::uint64_t generation, std::uint64_t sequence) {
  return locked(state_, segment_.path(), [&](EgressCore& core, Wake& w) {
    const RetryOutcome out = core.retry_now(generation, sequence);
    w.claim = out.status == RetryStatus::Scheduled && out.scheduled != 0;
    return out;
  });
}

Result<RetryOutcome> Egress::retry_due(std::uint64_t generation, std::uint64_t now_ns) {
  return locked(state_, segment_.path(), [&](EgressCore& core, Wake& w) {
    const RetryOutcome out = core.retry_due(generation, now_ns);
    w.claim = out.status == RetryStatus::Scheduled && out.scheduled != 0;
    return out;
  });
}

Result<ReconnectOutcome> Egress::reconnect(std::uint64_t new_generation) {
  return locked(state_, segment_.path(), [&](EgressCore& core, Wake& w) {
    const ReconnectOutcome out = core.reconnect(new_generation);
    // Wakes the fenced transport too: it learns it is stale.
    w.claim = out.status == ReconnectStatus::Advanced;
    return out;
  });
}

// ---------------------------------------------------------------- reads

Result<Projection> Egress::projection(bool with_records) const {
  return locked(state_, segment_.path(),
                [&](EgressCore& core, Wake&) { return core.project(with_records); });
}

Projection Egress::snapshot(bool with_records) const {
  auto p = egress::observe(state_, with_records);
  if (p) return std::move(*p);
  Projection busy;
  busy.consistent = false;
  return busy;
}

EgressTransportSnapshot EgressTransport::snapshot(bool with_records) const {
  return EgressTransportSnapshot{egress_.snapshot(with_records), generation_, replayed_, fenced()};
}

EgressWakeCounters Egress::wake_counters() const noexcept {
  const Control& c = *state_.control;
  // relaxed: statistics for tests and metrics.
  return EgressWakeCounters{c.wake.claim_word.load(std::memory_order_relaxed),
                            c.wake.claim_waiters.load(std::memory_order_relaxed),
                            c.wake.space_word.load(std::memory_order_relaxed),
                            c.wake.space_waiters.load(std::memory_order_relaxed)};
}

Result<std::vector<std::string>> Egress::verify() const {
  return locked(state_, segment_.path(), [&](EgressCore& core, Wake&) { return core.check(); });
}

// ---------------------------------------------------------------- transport

Result<EgressTransport> EgressTransport::create(std::string_view name, const EgressParams& params,
                                                const CreateOptions& options) {
  auto seg = create_egress(name, params, options);
  if (!seg) return std::unexpected(seg.error());
  return adopt(std::move(*seg));
}

Result<EgressTransport> EgressTransport::open(std::string_view name, const OpenOptions& options) {
  auto seg = open_egress(name, options);
  if (!seg) return std::unexpected(seg.error());
  return adopt(std::move(*seg));
}

Result<EgressTransport> EgressTransport::attach(Segment segment) {
  if (auto ok = check_adopted(segment); !ok) return std::unexpected(ok.error());
  return adopt(std::move(segment));
}

Result<EgressTransport> EgressTransport::adopt(Segment segment) {
  auto e = Egress::bind(std::move(segment), kTransportRole);
  if (!e) return std::unexpected(e.error());
  EgressTransport t;
  t.egress_ = std::move(*e);
  const bool took_over = t.egress_.attachment_.took_over();
  Control& c = *t.egress_.state_.control;
  auto r = locked(t.egress_.state_, t.egress_.segment_.path(), [&](EgressCore& core, Wake& w) {
    ReconnectOutcome out{ReconnectStatus::Refused, 0, core.generation()};
    if (ld(c.wake.transports) != 0) {
      out = core.reconnect(core.generation() + 1);
      w.claim = true;
    }
    st(c.wake.transports, ld(c.wake.transports) + 1);
    if (took_over) st(c.stats.transport_deaths, ld(c.stats.transport_deaths) + 1);
    return out;
  });
  if (!r) return std::unexpected(r.error());
  t.generation_ = r->generation;
  t.replayed_ = r->replayed;
  return t;
}

bool EgressTransport::fenced() const noexcept {
  // relaxed: a hint; every call is checked against the generation under the lock.
  return egress_.state_.control->state.generation.load(std::memory_order_relaxed) != generation_;
}

Result<ClaimOutcome> EgressTransport::try_claim(std::vector<std::byte>& payload) {
  return locked(egress_.state_, egress_.segment_.path(), [&](EgressCore& core, Wake&) {
    // The clock is read only when something is parked (a read costs tens of
    // ns on a VM, a sizeable part of a claim).
    if (const std::uint64_t due = core.next_due();
        core.generation() == generation_ && due != kNoDue) {
      if (const std::uint64_t now = monotonic_ns(); due <= now)
        (void)core.retry_due(generation_, now);
    }
    ClaimOutcome out = core.claim(generation_);
    copy_payload(out, payload);
    return out;
  });
}

Result<ClaimBatchOutcome> EgressTransport::try_claim_batch(std::size_t max,
                                                           std::vector<Envelope>& out,
                                                           std::vector<std::byte>& payloads) {
  out.clear();
  payloads.clear();
  std::vector<std::size_t>& offsets = claim_offsets_;
  offsets.clear();
  auto r = locked(egress_.state_, egress_.segment_.path(), [&](EgressCore& core, Wake&) {
    if (const std::uint64_t due = core.next_due();
        core.generation() == generation_ && due != kNoDue) {
      if (const std::uint64_t now = monotonic_ns(); due <= now)
        (void)core.retry_due(generation_, now);
    }
    ClaimBatchOutcome batch;
    while (batch.claimed < max) {
      ClaimOutcome one = core.claim(generation_);
      batch.current_generation = one.current_generation;
      if (one.status != ClaimStatus::Claimed) {
        batch.status = one.status;
        break;
      }
      // The payload is copied while the lock pins its slot; the spans are
      // pointed at the copies once `payloads` stops growing.
      offsets.push_back(payloads.size());
      payloads.insert(payloads.end(), one.envelope.payload.begin(), one.envelope.payload.end());
      out.push_back(one.envelope);
      ++batch.claimed;
    }
    return batch;
  });
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i].payload =
        std::span<const std::byte>(payloads.data() + offsets[i], out[i].payload.size());
  return r;
}

Result<ClaimOutcome> EgressTransport::claim(std::vector<std::byte>& payload,
                                            std::chrono::nanoseconds timeout) {
  const auto deadline = ::shm::detail::deadline_after(timeout);
  Control& c = *egress_.state_.control;
  bool announced = false;
  for (;;) {
    std::uint32_t seen = 0;
    std::uint64_t due = kNoDue;
    bool timed_out = false;
    auto r = locked(
        egress_.state_, egress_.segment_.path(),
        [&](EgressCore& core, Wake&) {
          if (announced) st(c.wake.claim_waiters, ld(c.wake.claim_waiters) - 1);
          announced = false;
          const std::uint64_t now = monotonic_ns();
          if (core.generation() == generation_ && core.next_due() <= now)
            (void)core.retry_due(generation_, now);
          ClaimOutcome out = core.claim(generation_);
          copy_payload(out, payload);
          if ((out.status == ClaimStatus::Empty || out.status == ClaimStatus::WindowFull) &&
              std::chrono::steady_clock::now() < deadline) {
            st(c.wake.claim_waiters, ld(c.wake.claim_waiters) + 1);  // [egress.W]
            seen = ld(c.wake.claim_word);
            due = core.next_due();
            announced = true;
          }
          return out;
        },
        // Announced, it must lock to withdraw (claim_waiters would stay one
        // too high): then the holder is waited for as by an untimed call.
        announced ? std::chrono::steady_clock::time_point::max() : deadline, &timed_out);
    // A live holder kept the mutex past the deadline: the timeout's outcome
    // (nothing claimed).
    if (timed_out) return ClaimOutcome{};
    if (!r) return std::unexpected(r.error());
    if (!announced) return std::move(*r);
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    std::uint64_t sleep = static_cast<std::uint64_t>(std::max<std::int64_t>(0, left));
    if (due != kNoDue) {
      const std::uint64_t now = monotonic_ns();
      sleep = std::min(sleep, due > now ? due - now : 0);
    }
    (void)futex_wait(c.wake.claim_word, seen, sleep);
  }
}

Result<AckOutcome> EgressTransport::ack(std::uint64_t through) {
  return egress_.ack(generation_, through);
}
Result<FailOutcome> EgressTransport::fail(std::uint64_t sequence) {
  return egress_.fail(generation_, sequence, monotonic_ns());
}
Result<RetryOutcome> EgressTransport::retry_now(std::uint64_t sequence) {
  return egress_.retry_now(generation_, sequence);
}

// ---------------------------------------------------------------- WaitSet hooks

namespace egress::internal {

namespace {

// Under the mutex, waiting out a live holder for one lock slice at most (a
// deadline of now); `look` runs there. Busy when the holder kept it longer.
template <class F>
Result<SetLook> set_locked(const Egress& e, F&& look) {
  bool timed_out = false;
  auto r = locked(
      e.state(), e.segment().path(), [&](EgressCore& core, Wake&) { return look(core); },
      std::chrono::steady_clock::now(), &timed_out);
  if (timed_out) return SetLook::Busy;
  return r;
}

}  // namespace

Result<SetLook> look_for_set(const EgressTransport& t, bool announce, bool& counted,
                             std::uint64_t& due) {
  Control& c = *t.egress().state().control;
  return set_locked(t.egress(), [&](EgressCore& core) {
    if (core.generation() != t.generation()) return SetLook::Fenced;
    // As a claim does first: the parked records whose backoff elapsed go back to pending.
    const std::uint64_t now = monotonic_ns();
    if (core.next_due() <= now) (void)core.retry_due(t.generation(), now);
    due = core.next_due();
    if (core.claimable()) return SetLook::Ready;
    if (announce && !counted) {
      st(c.wake.claim_waiters, ld(c.wake.claim_waiters) + 1);  // [egress.W]
      counted = true;
    }
    return SetLook::Nothing;
  });
}

Result<SetLook> look_for_set(const Egress& e, bool announce, bool& counted) {
  Control& c = *e.state().control;
  return set_locked(e, [&](EgressCore& core) {
    if (core.has_space()) return SetLook::Ready;
    if (announce && !counted) {
      st(c.wake.space_waiters, ld(c.wake.space_waiters) + 1);  // [egress.W]
      counted = true;
    }
    return SetLook::Nothing;
  });
}

bool withdraw_for_set(const Egress& e, bool transport) noexcept {
  Control& c = *e.state().control;
  auto r = set_locked(e, [&](EgressCore&) {
    std::atomic<std::uint32_t>& n = transport ? c.wake.claim_waiters : c.wake.space_waiters;
    if (ld(n) != 0) st(n, ld(n) - 1);
    return SetLook::Nothing;
  });
  return r && *r != SetLook::Busy;
}

}  // namespace egress::internal

}  // namespace shm
