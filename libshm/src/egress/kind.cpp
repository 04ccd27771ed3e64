// The egress kind descriptor: what shmctl and the sidecar see of an egress.
#include "shm/segment/kind.hpp"

#include "internal.hpp"
#include "shm/egress/egress.hpp"
#include "shm/platform/clock.hpp"

#include "format/format.hpp"

#include <algorithm>
#include <array>
#include <thread>

namespace shm {
namespace {

using namespace egress;
using namespace egress::internal;

void describe(const Segment& seg, Node& out) {
  auto state = make_state(seg);
  if (!state) {
    out.set("error", state.error().message);
    return;
  }
  const State& s = *state;
  const Control& c = *s.control;
  Node& params = out.object("params");
  params.set("capacity", static_cast<std::uint64_t>(s.params.capacity));
  params.set("slot_bytes", static_cast<std::uint64_t>(s.params.slot_bytes));
  params.set("inflight_limit", static_cast<std::uint64_t>(s.params.inflight_limit));
  params.set("retry_budget", static_cast<std::uint64_t>(s.params.retry_budget));
  params.set("retry_base_ns", s.params.retry_base_ns);
  params.set("retry_ceiling_ns", s.params.retry_ceiling_ns);
  const std::optional<Projection> p = egress::observe(s, false);
  if (!p) {
    // A holder died inside (odd version until the next locker repairs) or
    // writers kept it busy: show what we can.
    out.set("busy", true);
    out.set("journal_open", EgressCore(s).journal_open());
    return;
  }
  out.gauge("generation", p->generation);
  out.gauge("next_sequence", p->next_sequence);
  if (p->acked_through) {
    out.gauge("acked_through", *p->acked_through);
  } else {
    out.set("acked_through", std::string("none"));
  }
  out.gauge("pending", p->pending);
  out.gauge("inflight", p->inflight);
  out.gauge("parked", p->parked);
  out.gauge("terminal", p->terminal);
  out.gauge("retained", p->pending + p->inflight + p->parked + p->terminal);
  const std::uint64_t now = monotonic_ns();
  out.gauge("oldest_unacked_age_ms", p->oldest_enqueue_ns && *p->oldest_enqueue_ns <= now
                                         ? (now - *p->oldest_enqueue_ns) / 1'000'000
                                         : 0);
  if (p->next_due_ns)
    out.set("next_retry_in_ms",
            *p->next_due_ns > now ? (*p->next_due_ns - now) / 1'000'000 : std::uint64_t{0});
  if (p->retry) {
    Node& r = out.object("retry");
    r.set("sequence", p->retry->sequence);
    r.set("attempt", static_cast<std::uint64_t>(p->retry->attempt));
    r.set("backoff_ns", p->retry->backoff_ns);
    r.set("exhausted", p->retry->exhausted);
  }
  Node& readers = out.object("reader_versions");
  for (std::size_t i = 0; i < kReaders; ++i)
    readers.counter(std::string(to_string(static_cast<Reader>(i))), p->reader_versions[i]);
  // The transport: slot 0 (exclusive role).
  Node& t = out.object("transport");
  // slots() lists the occupied slots only: look the transport's up by index
  // (none listed: Free).
  const std::vector<SlotInfo> slots = seg.slots();
  const auto ts = std::ranges::find_if(
      slots, [](const SlotInfo& slot) { return slot.index == kTransportRole.id; });
  if (ts != slots.end()) {
    t.set("state", std::string(to_string(ts->liveness)));
    if (ts->liveness != Liveness::Free) t.set("pid", static_cast<std::int64_t>(ts->pid));
  } else {
    t.set("state", std::string(to_string(Liveness::Free)));
  }
  // relaxed: statistics.
  t.counter("attaches", c.wake.transports.load(std::memory_order_relaxed));
  t.counter("deaths", c.stats.transport_deaths.load(std::memory_order_relaxed));
  Node& ops = out.object("operations");
  const Stats& st_ = c.stats;
  auto rd = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  ops.counter("enqueued", rd(st_.enqueued));
  ops.counter("full", rd(st_.full));
  ops.counter("claims", rd(st_.claims));
  ops.counter("acked", rd(st_.acked));
  ops.counter("failures", rd(st_.failures));
  ops.counter("retries", rd(st_.retries));
  ops.counter("exhausted", rd(st_.exhausted));
  ops.counter("reconnects", rd(st_.reconnects));
  ops.counter("stale", rd(st_.stale));
  ops.counter("dead_letters_taken", rd(st_.dead_letters_taken));
  ops.counter("repairs", rd(st_.repairs));
  out.set("faulted", c.lock.faulted.load(std::memory_order_relaxed) != 0);
}

std::vector<std::string> verify(const Segment& seg) {
  auto state = make_state(seg);
  if (!state) return {state.error().message};
  const State& s = *state;
  const Control& c = *s.control;
  if (c.lock.mutex.unrecoverable())
    return {"the egress is FAULTED: its mutex is not recoverable; re-create it"};
  if (c.lock.mutex.owner_missing()) return {shm::detail::dead_owner_note("egress", c.lock.mutex)};
  if (c.lock.faulted.load(std::memory_order_relaxed) != 0)
    return {"the egress is FAULTED: a repair found damage; re-create it"};
  const EgressCore core(s);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    // [egress.V2'] acquire: pairs with [egress.V2]; see egress::observe().
    const std::uint64_t v1 = c.lock.version.load(std::memory_order_acquire);
    if ((v1 & 1u) != 0) {
      if (core.journal_open() && attempt > 100)
        return {shm::detail::format(
            "a holder of the egress lock stopped inside an operation (journal entry {} open); "
            "the next locker rolls it back or forward",
            c.journal.op.load(std::memory_order_relaxed))};
      std::this_thread::yield();
      continue;
    }
    std::vector<std::string> out = core.check();
    // [egress.V1'] acquire fence: pairs with [egress.V1]; see egress::observe().
    std::atomic_thread_fence(std::memory_order_acquire);
    if (c.lock.version.load(std::memory_order_relaxed) == v1) return out;
  }
  return {};  // writers kept it busy: nothing seen that could be judged
}

Result<std::vector<std::string>> reclaim(Segment& seg, const SlotInfo& dead) {
  if (dead.role != kTransportRole.id)
    return std::vector<std::string>{shm::detail::format(
        "producer slot {} (pid {}): enqueue is atomic under the lock; nothing held", dead.index,
        dead.pid)};
  if (!seg.writable())
    return fail(Errc::InvalidArgument,
                shm::detail::format("{}: reclaim needs a writable mapping", seg.path()));
  auto state = make_state(seg);
  if (!state) return std::unexpected(state.error());
  // Reported and counted; the fence itself is the next attach's reconnect
  // (the records stay in flight, under the dead generation, until then).
  auto seen = record_transport_death(*state, seg.path());
  if (!seen) return std::unexpected(seen.error());
  const auto [g, inflight] = *seen;
  return std::vector<std::string>{shm::detail::format(
      "transport slot {} (pid {}) died at generation {} with {} records in flight; the next "
      "transport to attach reconnects (generation {}) and replays them",
      dead.index, dead.pid, g, inflight, g + 1)};
}

// The transport has work while a record is claimable (pending, the window
// open); its progress is what it did: claims, acknowledgements, failures.
// relaxed: a monitoring sample.
std::optional<RoleProgress> progress(const Segment& seg, std::uint32_t role) {
  if (role != kTransportRole.id) return std::nullopt;
  auto state = make_state(seg);
  if (!state) return std::nullopt;
  const Control& c = *state->control;
  const auto count = [&](RecordState r) {
    return c.state.counts[static_cast<std::size_t>(r)].load(std::memory_order_relaxed);
  };
  const bool waiting = count(RecordState::Pending) != 0 &&
                       count(RecordState::Inflight) < state->params.inflight_limit;
  const std::uint64_t done = c.stats.claims.load(std::memory_order_relaxed) +
                             c.stats.acked.load(std::memory_order_relaxed) +
                             c.stats.failures.load(std::memory_order_relaxed);
  return RoleProgress{waiting, done};
}

constexpr std::array<RoleSpec, 2> kRoles = {kTransportRole, kProducerRole};

}  // namespace

const KindDescriptor kEgressDescriptor{
    .kind = kEgressKind,
    .name = "egress",
    .fingerprint = kFingerprint,
    .roles = kRoles,
    .describe = describe,
    .verify = verify,
    .reclaim = reclaim,
    .progress = progress,
};

}  // namespace shm
