// The topic kind descriptor: what shmctl and the sidecar see of a topic.
#include "shm/segment/kind.hpp"
#include "shm/topic/layout.hpp"
#include "shm/topic/topic.hpp"

#include "format/format.hpp"
#include "topic/internal.hpp"

#include <array>

namespace shm {
namespace {

// Memory orders in this file: descriptors read samples for people and tools,
// relaxed, without the mutex (a read-only mapping cannot take it); a value a
// live writer is changing may be stale by one operation, never out of bounds:
// every index is checked before use.

void describe(const Segment& seg, Node& out) {
  std::string why;
  const auto v = topic::view(seg, &why);
  if (!v) {
    out.set("error", why);
    return;
  }
  const topic::Control& c = *v->control;
  const auto rl = [](const auto& a) { return a.load(std::memory_order_relaxed); };
  Node& params = out.object("params");
  params.set("max_sample_bytes", v->p.max_sample_bytes);
  params.set("chunks", v->p.chunks);
  params.set("queue_depth", v->p.queue_depth);
  params.set("history", v->p.history);
  params.set("max_held", v->p.max_held);
  Node& pub = out.object("publisher");
  pub.set("attached", rl(c.publisher.active) == 1);
  pub.set("incarnation", static_cast<std::uint64_t>(rl(c.publisher.incarnation)));
  pub.set("next_seq", rl(c.publisher.next_seq));
  std::uint64_t loans = 0;
  for (const auto& l : c.publisher.loans)
    if (rl(l) != 0) ++loans;
  pub.gauge("loans", loans);
  pub.counter("published", rl(c.publisher.published));
  pub.counter("dropped", rl(c.publisher.dropped));
  pub.counter("full", rl(c.publisher.full));
  out.gauge("free_chunks", rl(c.pool.free_count));
  out.counter("repairs", rl(c.lock.repairs));
  out.counter("reclaimed_records", rl(c.lock.reclaimed));
  Node& subs = out.array("subscribers");
  const std::uint64_t next = rl(c.publisher.next_seq);
  for (std::size_t i = 0; i < topic::kSubscribers; ++i) {
    const topic::SubscriberRecord& r = v->record(i);
    if (rl(r.active) != 1) continue;
    Node& s = subs.push_object();
    const std::uint64_t head = rl(r.head), tail = rl(r.tail), received = rl(r.received);
    std::uint64_t held = 0;
    for (std::uint64_t k = 0; k < v->p.max_held; ++k)
      if (rl(v->held(i)[k]) != 0) ++held;
    s.set("slot", static_cast<std::uint64_t>(kExclusiveSlots + i));
    s.set("overflow", std::string(to_string(static_cast<TopicOverflow>(rl(r.overflow) & 0xff))));
    s.gauge("queue", tail >= head ? tail - head : 0);
    s.gauge("held", held);
    s.counter("received", received);
    s.counter("missed", head >= received ? head - received : 0);
    // lag: samples published since the one this subscriber would receive next.
    const std::uint64_t first = rl(r.first_seq);
    const std::uint64_t at = first + head;
    s.gauge("lag", next >= at ? next - at : 0);
  }
  Node& events = out.array("events");
  for (const TopicEvent& e : topic::read_events(*v)) {
    Node& n = events.push_object();
    n.set("number", e.number);
    n.set("time_ns", e.time_ns);
    n.set("kind", std::string(topic::to_string(e.kind)));
    n.set("key", e.key);
    n.set("count", e.count);
  }
}

std::vector<std::string> verify(const Segment& seg) {
  std::vector<std::string> bad;
  std::string why;
  const auto v = topic::view(seg, &why);
  if (!v) {
    bad.push_back(why);
    return bad;
  }
  const topic::Control& c = *v->control;
  const auto rl = [](const auto& a) { return a.load(std::memory_order_relaxed); };
  if (c.lock.mutex.unrecoverable())
    bad.push_back("the topic's mutex is unrecoverable (a repair failed): re-create the topic");
  if (c.lock.mutex.owner_missing())
    bad.push_back(shm::detail::dead_owner_note("topic", c.lock.mutex));
  const std::uint32_t free_count = rl(c.pool.free_count);
  if (free_count > v->p.chunks)
    bad.push_back(
        shm::detail::format("free count {} exceeds the pool's {} chunks", free_count, v->p.chunks));
  auto check_entry = [&](std::uint32_t e, const std::string& where) {
    if (e > v->p.chunks)
      bad.push_back(
          shm::detail::format("{} names chunk entry {}, outside [1, {}]", where, e, v->p.chunks));
  };
  for (std::size_t k = 0; k < topic::kMaxLoans; ++k)
    check_entry(rl(c.publisher.loans[k]), shm::detail::format("publisher loan {}", k));
  for (std::uint64_t h = 0; h < v->p.history; ++h)
    check_entry(rl(v->history[h]), shm::detail::format("history entry {}", h));
  const std::uint32_t records_used = rl(c.pool.records_used);
  for (std::size_t i = 0; i < topic::kSubscribers; ++i) {
    const topic::SubscriberRecord& r = v->record(i);
    const std::uint32_t active = rl(r.active);
    if (active > 1) {
      bad.push_back(shm::detail::format("subscriber record {}: active word {}", i, active));
      continue;
    }
    if (active == 0) continue;
    if (i >= records_used)
      bad.push_back(shm::detail::format(
          "subscriber slot {}: active beyond records_used {} (publishes would skip it)",
          kExclusiveSlots + i, records_used));
    const std::uint64_t head = rl(r.head), tail = rl(r.tail);
    if (tail < head || tail - head > v->p.queue_depth)
      bad.push_back(shm::detail::format("subscriber slot {}: head {} and tail {}, queue depth {}",
                                        kExclusiveSlots + i, head, tail, v->p.queue_depth));
    const std::uint32_t ov = rl(r.overflow);
    if (ov != static_cast<std::uint32_t>(TopicOverflow::DropOldest) &&
        ov != static_cast<std::uint32_t>(TopicOverflow::Block))
      bad.push_back(
          shm::detail::format("subscriber slot {}: overflow word {}", kExclusiveSlots + i, ov));
    for (std::uint64_t k = 0; k < v->p.max_held; ++k)
      check_entry(rl(v->held(i)[k]),
                  shm::detail::format("subscriber slot {} held entry {}", kExclusiveSlots + i, k));
  }
  return bad;
}

Result<std::vector<std::string>> reclaim(Segment& seg, const SlotInfo& dead) {
  std::string why;
  const auto v = topic::view(seg, &why);
  if (!v) return fail(Errc::Corrupt, shm::detail::format("topic not repaired: {}", why));
  if (auto ok = topic::detail::lock(seg, *v); !ok) return std::unexpected(ok.error());
  // `dead` is assumed dead, not probed: the caller holds its kernel lock.
  auto report = topic::repair_locked(seg, *v, dead.index);
  topic::detail::unlock(*v);
  if (!report) return std::unexpected(std::move(report.error()));
  if (report->actions.empty())
    report->actions.push_back(
        shm::detail::format("slot {} (pid {}) held no sample of the topic", dead.index, dead.pid));
  return std::move(report->actions);
}

// Subscribers have work while their queues hold samples; their progress is
// the sum of their heads. relaxed: a monitoring sample.
std::optional<RoleProgress> progress(const Segment& seg, std::uint32_t role) {
  if (role != topic::kSubscriberRole.id) return std::nullopt;
  const auto v = topic::view(seg);
  if (!v) return std::nullopt;
  RoleProgress p;
  for (std::size_t i = 0; i < topic::kSubscribers; ++i) {
    const topic::SubscriberRecord& r = v->record(i);
    if (r.active.load(std::memory_order_relaxed) != 1) continue;
    const std::uint64_t head = r.head.load(std::memory_order_relaxed);
    if (r.tail.load(std::memory_order_relaxed) > head) p.waiting = true;
    p.progress += head;
  }
  return p;
}

constexpr std::array<RoleSpec, 2> kRoles = {topic::kPublisherRole, topic::kSubscriberRole};

}  // namespace

const KindDescriptor kTopicDescriptor{
    .kind = kTopicKind,
    .name = "topic",
    .fingerprint = topic::kFingerprint,
    .roles = kRoles,
    .describe = describe,
    .verify = verify,
    .reclaim = reclaim,
    .progress = progress,
};

}  // namespace shm
