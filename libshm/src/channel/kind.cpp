// The Channel kind descriptor: what shmctl and the sidecar see of a channel.
// The segment may be mapped read-only, may be live and may be corrupt: every
// value read from it is checked before it is used as an index.
#include "shm/segment/kind.hpp"
#include "channel/internal.hpp"
#include "shm/channel/layout.hpp"
#include "shm/platform/futex.hpp"
#include "shm/platform/page_crc.hpp"

#include "format/format.hpp"

#include <unistd.h>
#include <algorithm>
#include <array>
#include <chrono>
#include <thread>

namespace shm {
namespace {

using channel::View;

constexpr std::size_t kMaxSlotsShown = 256;
constexpr std::uint64_t kMaxWalk = 1u << 20;

std::string_view slot_state_name(std::uint32_t s) {
  switch (s) {
    case page::kUnbound:
      return "unbound";
    case page::kOpen:
      return "open";
    case page::kSealed:
      return "sealed";
    default:
      return "invalid";
  }
}

// A consistent-enough snapshot of the shared words (relaxed/acquire loads;
// a live channel moves underneath, so verify reports what it saw).
struct Snapshot {
  std::uint32_t word = 0;
  std::uint64_t active = 0;
  std::uint64_t released = 0;
  std::uint64_t head = 0;
  std::uint64_t tail = 0;
};

Snapshot snapshot(const View& v) {
  const auto& c = *v.control;
  Snapshot s;
  // acquire: pairs with [chan.T], [chan.E], [chan.C], [chan.R] (the consumer's and producer's
  // releases).
  s.word = c.terminal.word.load(std::memory_order_acquire);
  s.released = c.release.released_epoch.load(std::memory_order_acquire);
  s.head = c.consumer.head.load(std::memory_order_acquire);
  s.tail = c.producer.tail.load(std::memory_order_acquire);
  // relaxed: an observer's view of a producer-owned value.
  s.active = c.producer.active_epoch.load(std::memory_order_relaxed);
  return s;
}

struct SlotSnapshot {
  std::uint64_t epoch = 0;
  std::uint64_t first_sequence = 0;
  std::uint32_t generation = 0;
  std::uint32_t state = 0;
  std::uint32_t published = 0;
  std::uint32_t used = 0;
};

SlotSnapshot slot_snapshot(const View& v, std::uint64_t index) {
  const page::SlotHeader* h = v.slot_header(index);
  SlotSnapshot s;
  // [chan.B'] acquire: pairs with [chan.B] in rebind(): the binding below is the one that state
  // opened.
  s.state = h->binding.state.load(std::memory_order_acquire);
  s.epoch = h->binding.epoch.load(std::memory_order_relaxed);
  s.first_sequence = h->binding.first_sequence.load(std::memory_order_relaxed);
  s.generation = h->binding.generation.load(std::memory_order_relaxed);
  // acquire: pairs with [chan.P].
  s.published = h->publication.published.load(std::memory_order_acquire);
  s.used = h->publication.used_bytes.load(std::memory_order_relaxed);
  return s;
}

// Payloads the consumer has committed from a slot's epoch, derived from the
// consumer's position (epochs below released_epoch were checked complete).
std::uint64_t committed_of(const SlotSnapshot& s, const Snapshot& g) {
  if (s.state == page::kUnbound) return 0;
  if (s.epoch < g.released) return s.published;
  if (s.epoch > g.released || g.head < s.first_sequence) return 0;
  return std::min<std::uint64_t>(g.head - s.first_sequence, s.published);
}

void describe(const Segment& seg, Node& out) {
  auto v = channel::view(seg);
  if (!v) {
    out.set("error", v.error().message);
    return;
  }
  const auto& p = v->params;
  const auto& c = *v->control;
  out.set("pages", std::uint64_t{p.pages});
  out.set("page_bytes", p.page_bytes);
  out.set("descriptors_per_page", std::uint64_t{p.descriptors_per_page});
  out.set("ring_capacity", std::uint64_t{p.ring_cells});
  out.set("max_payload", p.max_payload);
  const Snapshot g = snapshot(*v);
  const ChannelState state = channel::state_of(g.word);
  out.set("terminal", std::string(to_string(state)));
  if (state == ChannelState::Corrupt)
    out.set("terminal_word", shm::detail::format("{:#010x}", g.word));
  if (state == ChannelState::Faulted) {
    Node& f = out.object("fault");
    const auto code =
        c.terminal.fault.load(std::memory_order_relaxed);  // ordered by [chan.T'] above
    f.set("cause", std::string(to_string(static_cast<ChannelFault>(code))));
    f.set("epoch", c.terminal.fault_epoch.load(std::memory_order_relaxed));
    f.set("sequence", c.terminal.fault_sequence.load(std::memory_order_relaxed));
    f.set("role", std::uint64_t{c.terminal.fault_role.load(std::memory_order_relaxed)});
    f.set("pid", std::int64_t{c.terminal.fault_pid.load(std::memory_order_relaxed)});
  }
  out.gauge("active_epoch", g.active);
  out.gauge("released_epoch", g.released);
  out.gauge("live_pages", g.active >= g.released ? g.active - g.released + 1 : 0);
  out.set("head", g.head);
  out.set("tail", g.tail);
  out.gauge("depth", g.tail >= g.head ? g.tail - g.head : 0);
  // relaxed: statistics.
  out.counter("sent", g.tail);
  out.counter("received", g.head);
  out.counter("rotations", c.stats.rotations.load(std::memory_order_relaxed));
  out.counter("quota_refusals", c.stats.quota_refusals.load(std::memory_order_relaxed));
  out.counter("ring_full", c.stats.ring_full.load(std::memory_order_relaxed));
  out.set("consumer_parked", c.waiters.consumer_parked.load(std::memory_order_relaxed) != 0);
  out.set("producer_parked", c.waiters.producer_parked.load(std::memory_order_relaxed) != 0);
  Node& slots = out.array("slots");
  const std::size_t shown = std::min<std::size_t>(p.pages, kMaxSlotsShown);
  for (std::size_t i = 0; i < shown; ++i) {
    const SlotSnapshot s = slot_snapshot(*v, i);
    Node& n = slots.push_object();
    n.set("slot", std::uint64_t{i});
    n.set("state", std::string(slot_state_name(s.state)));
    if (s.state == page::kUnbound) continue;
    n.set("epoch", s.epoch);
    n.set("generation", std::uint64_t{s.generation});
    n.set("first_sequence", s.first_sequence);
    n.set("published", std::uint64_t{s.published});
    n.set("committed", committed_of(s, g));
    n.set("used_bytes", std::uint64_t{s.used});
  }
  if (shown < p.pages) out.set("slots_shown", std::uint64_t{shown});
}

// True while epoch `e` is still bound to its slot and not released: read after
// a page's bytes, it says those bytes were the epoch's (a slot is rebound
// only after released_epoch passes e [E] -> [A], and the producer never writes
// below `published` while the page is bound).
bool still_live(const View& v, std::uint64_t e) {
  // acquire fence: orders the payload reads before the loads below (a
  // seqlock-style re-check; the bytes may have been recycled meanwhile).
  std::atomic_thread_fence(std::memory_order_acquire);
  // acquire: pairs with [E].
  if (v.control->release.released_epoch.load(std::memory_order_acquire) > e) return false;
  const SlotSnapshot s = slot_snapshot(v, e & (v.params.pages - 1));
  return s.state != page::kUnbound && s.epoch == e;
}

// Checks the stored CRC32C of one published payload. Only cells below the
// page's published count (acquire [P']) are read: their bytes are complete and
// immutable while the page is bound, and a payload being written right now
// lies beyond that count and is never looked at. A mismatch is reported only
// if the page is still bound to `e` after the read, so a page recycled under a
// slow verify is skipped, not reported.
void verify_payload(const View& v, std::uint64_t e, std::uint64_t index, std::uint32_t i,
                    const page::Cell& cell, std::uint64_t sequence, std::vector<std::string>& bad) {
  const std::uint32_t crc = page::checksum(v.arena(index) + cell.offset, cell.length);
  if (crc == cell.crc || !still_live(v, e)) return;
  bad.push_back(shm::detail::format(
      "payload sequence {} (epoch {} page slot {} cell {}, {} bytes at offset {}): CRC32C "
      "{:#010x} of its bytes differs from the stored {:#010x}",
      sequence, e, index, i, cell.length, cell.offset, crc, cell.crc));
}

// Checks one live page: binding, counts, the append-only cell chain and the
// CRC32C of every published payload.
void verify_page(const View& v, std::uint64_t e, bool clean, const Snapshot& g,
                 std::vector<std::string>& bad) {
  const auto& p = v.params;
  const std::uint64_t index = e & (p.pages - 1);
  const SlotSnapshot s = slot_snapshot(v, index);
  if (s.state == page::kUnbound || s.epoch != e || s.generation != static_cast<std::uint32_t>(e)) {
    bad.push_back(shm::detail::format(
        "slot {} should hold live epoch {} (generation {:#x}) but is {} with "
        "epoch {} generation {:#x}",
        index, e, static_cast<std::uint32_t>(e), slot_state_name(s.state), s.epoch, s.generation));
    return;
  }
  if (s.state != page::kOpen && s.state != page::kSealed)
    bad.push_back(shm::detail::format("slot {} has state word {}", index, s.state));
  if (e < g.active && s.state != page::kSealed)
    bad.push_back(shm::detail::format(
        "epoch {} (slot {}) precedes the active epoch {} but is not sealed", e, index, g.active));
  if (clean && s.state != page::kSealed)
    bad.push_back(shm::detail::format(
        "channel is CLEAN but the page of epoch {} (slot {}) is not sealed", e, index));
  if (s.published > p.descriptors_per_page || s.used > p.page_bytes) {
    bad.push_back(
        shm::detail::format("epoch {} (slot {}) has {} published cells / {} bytes, page holds "
                            "{} / {}",
                            e, index, s.published, s.used, p.descriptors_per_page, p.page_bytes));
    return;
  }
  const page::Cell* cells = v.cells(index);
  std::uint64_t offset = 0;
  for (std::uint32_t i = 0; i < s.published; ++i) {
    const page::Cell cell = cells[i];
    if (cell.offset != offset || cell.length > p.page_bytes - offset) {
      bad.push_back(
          shm::detail::format("epoch {} cell {}: offset {} length {}, expected offset {} in a "
                              "{}-byte arena",
                              e, i, cell.offset, cell.length, offset, p.page_bytes));
      return;
    }
    if (cell.sequence_lo != static_cast<std::uint32_t>(s.first_sequence + i)) {
      bad.push_back(shm::detail::format("epoch {} cell {}: sequence {:#x}, expected {:#x}", e, i,
                                        cell.sequence_lo,
                                        static_cast<std::uint32_t>(s.first_sequence + i)));
      return;
    }
    verify_payload(v, e, index, i, cell, s.first_sequence + i, bad);
    offset += page::aligned_length(cell.length);
  }
  // used_bytes is stored before published ([chan.P]) and loaded after it, so on
  // an Open page a payload published between the two loads makes `used` run
  // ahead of the cells read; it can never be behind them. A sealed page is
  // final: the two must agree.
  if (s.state == page::kSealed ? offset != s.used : offset > s.used)
    bad.push_back(shm::detail::format("epoch {} uses {} arena bytes but its cells span {}", e,
                                      s.used, offset));
}

// A FAULTED channel is terminal whatever the cause: one line naming it, where
// and by whom it was detected.
std::string fault_line(const channel::ChannelControl::Terminal& t) {
  // relaxed: ordered by the [chan.T'] acquire of the word in snapshot(): the one
  // raiser that won the fault CAS stores the code and details before [chan.T].
  const std::uint32_t code = t.fault.load(std::memory_order_relaxed);
  const std::uint32_t role = t.fault_role.load(std::memory_order_relaxed);
  const std::string detected =
      shm::detail::format("at epoch {}, sequence {}, detected by the {} (pid {})",
                          t.fault_epoch.load(std::memory_order_relaxed),
                          t.fault_sequence.load(std::memory_order_relaxed),
                          role == channel::kProducerRole.id   ? "producer"
                          : role == channel::kConsumerRole.id ? "consumer"
                                                              : "sidecar or an observer",
                          t.fault_pid.load(std::memory_order_relaxed));
  if (code == 0 || code > static_cast<std::uint32_t>(ChannelFault::ProducerDied))
    return shm::detail::format("channel is FAULTED with unknown fault code {} {}", code, detected);
  return shm::detail::format("channel is FAULTED: {} (fault code {}) {}",
                             to_string(static_cast<ChannelFault>(code)), code, detected);
}

// One pass of the checks over the snapshot `g` (the values it read, whatever
// moved since).
void check(const View& v, const Snapshot& g, std::vector<std::string>& bad) {
  const auto& p = v.params;
  const auto& c = *v.control;
  const ChannelState state = channel::state_of(g.word);
  if (state == ChannelState::Corrupt)
    bad.push_back(shm::detail::format("terminal word {:#010x} is not OPEN/CLEAN/FAULTED", g.word));
  if (state == ChannelState::Faulted) bad.push_back(fault_line(c.terminal));
  if (!channel::internal::ring_positions_possible(g.head, g.tail, p.ring_cells)) {
    bad.push_back(shm::detail::format("ring head {} / tail {} impossible for capacity {}", g.head,
                                      g.tail, p.ring_cells));
    return;
  }
  if (!channel::internal::epochs_possible(g.released, g.active, p.pages)) {
    bad.push_back(
        shm::detail::format("released_epoch {} / active_epoch {}: more than {} live pages or "
                            "released beyond the active one",
                            g.released, g.active, p.pages));
    return;
  }
  if (g.released == g.active + 1) {  // end of stream: nothing live
    if (state == ChannelState::Open)
      bad.push_back("every epoch is released but the channel is still OPEN");
    if (g.head != g.tail)
      bad.push_back(shm::detail::format("every epoch is released but {} descriptors are unconsumed",
                                        g.tail - g.head));
    return;
  }
  // Live epochs [released, active].
  const std::size_t before = bad.size();
  for (std::uint64_t e = g.released; e <= g.active; ++e)
    verify_page(v, e, state == ChannelState::Clean, g, bad);
  if (bad.size() != before) return;
  for (std::uint64_t e = g.released; e < g.active; ++e) {
    const SlotSnapshot a = slot_snapshot(v, e & (p.pages - 1));
    const SlotSnapshot b = slot_snapshot(v, (e + 1) & (p.pages - 1));
    if (b.first_sequence != a.first_sequence + a.published)
      bad.push_back(shm::detail::format("epoch {} starts at sequence {}, epoch {} ended at {}",
                                        e + 1, b.first_sequence, e,
                                        a.first_sequence + a.published));
  }
  const SlotSnapshot first = slot_snapshot(v, g.released & (p.pages - 1));
  if (g.head < first.first_sequence || g.head > first.first_sequence + first.published)
    bad.push_back(shm::detail::format(
        "consumer head {} lies outside its epoch {} (sequences {}..{})", g.head, g.released,
        first.first_sequence, first.first_sequence + first.published));
  const SlotSnapshot last = slot_snapshot(v, g.active & (p.pages - 1));
  const std::uint64_t next = last.first_sequence + last.published;
  // Between a page release [chan.P] and the ring release [chan.R] the tail lags by one.
  if (g.tail > next || g.tail + 1 < next)
    bad.push_back(shm::detail::format("ring tail {} does not match the pages' next sequence {}",
                                      g.tail, next));
  // Descriptors in flight reference live epochs in order, with their cells.
  std::uint64_t epoch = g.released;
  for (std::uint64_t pos = g.head; pos < g.tail && pos - g.head < kMaxWalk; ++pos) {
    const channel::Descriptor d = v.ring[pos & (p.ring_cells - 1)];
    while (epoch <= g.active && d.generation != static_cast<std::uint32_t>(epoch)) ++epoch;
    if (epoch > g.active) {
      bad.push_back(shm::detail::format(
          "descriptor at {} has generation {:#x}, not a live epoch in order", pos, d.generation));
      break;
    }
    const SlotSnapshot s = slot_snapshot(v, epoch & (p.pages - 1));
    if (d.sequence != pos || d.cell != d.sequence - s.first_sequence || d.cell >= s.published) {
      bad.push_back(
          shm::detail::format("descriptor at {}: sequence {} cell {} (epoch {} from sequence {}, "
                              "{} published)",
                              pos, d.sequence, d.cell, epoch, s.first_sequence, s.published));
      break;
    }
  }
}

bool operator==(const Snapshot& a, const Snapshot& b) noexcept {
  return a.word == b.word && a.active == b.active && a.released == b.released && a.head == b.head &&
         a.tail == b.tail;
}

// verify is read-only and takes no lock: a live producer and consumer keep
// moving while it reads, so one pass can mix values from before and after a
// rotation. A pass that finds nothing is the answer. A pass that finds a
// problem counts only if the shared positions did not move while it ran
// (positions only grow, so equal before and after means no append was
// released, no page rotated or was released and the terminal word stayed):
// otherwise the pass is repeated. Payloads: only cells below a page's
// published count are read (see verify_payload), so a payload being written
// right now is never looked at.
std::vector<std::string> verify(const Segment& seg) {
  auto v = channel::view(seg);
  if (!v) return {v.error().message};
  constexpr int kAttempts = 64;
  std::vector<std::string> bad;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    bad.clear();
    const Snapshot before = snapshot(*v);
    check(*v, before, bad);
    if (bad.empty()) return bad;
    // acquire fence: the reads of the pass above happen before the re-read
    // (as in a seqlock reader).
    std::atomic_thread_fence(std::memory_order_acquire);
    if (snapshot(*v) == before) return bad;
    if (attempt % 8 == 7) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return {shm::detail::format(
      "the channel moved during each of {} passes that found a problem (the last: {}{}); no "
      "stable view: retry",
      kAttempts, bad.front(),
      bad.size() > 1 ? shm::detail::format(" and {} more", bad.size() - 1) : std::string())};
}

Result<std::vector<std::string>> reclaim(Segment& seg, const SlotInfo& dead) {
  std::vector<std::string> lines;
  auto v = channel::view(seg);
  if (!v) {
    lines.push_back(shm::detail::format("slot {} (pid {}) freed; channel unreadable: {}",
                                        dead.index, dead.pid, v.error().message));
    return lines;
  }
  auto& c = *v->control;
  if (dead.role == channel::kProducerRole.id) {
    auto& t = c.terminal;
    std::uint32_t none = 0;
    if (t.word.load(std::memory_order_acquire) == channel::kTerminalOpen &&
        t.fault.compare_exchange_strong(none,
                                        static_cast<std::uint32_t>(ChannelFault::ProducerDied),
                                        std::memory_order_acq_rel)) {
      // relaxed: published by the release store of the word.
      t.fault_epoch.store(c.producer.active_epoch.load(std::memory_order_relaxed),
                          std::memory_order_relaxed);
      t.fault_sequence.store(c.producer.tail.load(std::memory_order_relaxed),
                             std::memory_order_relaxed);
      t.fault_role.store(channel::kObserverRole.id, std::memory_order_relaxed);
      t.fault_pid.store(static_cast<std::int32_t>(::getpid()), std::memory_order_relaxed);
      // [chan.T] pairs with the consumer's [chan.T']; seq_cst with the flag load below
      // (Dekker pairing with [chan.D1'], as in raise()).
      t.word.store(channel::kTerminalFaulted, std::memory_order_seq_cst);
      seg.record_event(EventType::Fault, static_cast<std::uint32_t>(dead.index),
                       static_cast<std::uint32_t>(ChannelFault::ProducerDied));
      if (c.waiters.consumer_parked.load(std::memory_order_seq_cst) != 0 &&
          c.waiters.consumer_parked.exchange(0, std::memory_order_relaxed) != 0) {
        c.waiters.data_signal.fetch_add(
            1, std::memory_order_release);  // pairs with the waiter's acquire
        (void)futex_wake_all(c.waiters.data_signal);
      }
      lines.push_back(
          shm::detail::format("producer pid {} died with the channel OPEN at epoch {}: marked "
                              "FAULTED (producer died); the consumer drains {} published "
                              "payload(s) first",
                              dead.pid, c.producer.active_epoch.load(std::memory_order_relaxed),
                              c.producer.tail.load(std::memory_order_relaxed) -
                                  c.consumer.head.load(std::memory_order_relaxed)));
    } else {
      lines.push_back(shm::detail::format(
          "producer pid {} freed; channel already {}", dead.pid,
          to_string(channel::state_of(t.word.load(std::memory_order_acquire)))));
    }
  } else if (dead.role == channel::kConsumerRole.id) {
    lines.push_back(
        shm::detail::format("consumer pid {} freed at sequence {}; a new consumer resumes there "
                            "(a payload it held is delivered again)",
                            dead.pid, c.consumer.head.load(std::memory_order_acquire)));
  } else {
    lines.push_back(shm::detail::format("observer pid {} freed", dead.pid));
  }
  return lines;
}

std::vector<std::vector<std::byte>> dump(const Segment& seg, std::size_t limit) {
  std::vector<std::vector<std::byte>> out;
  auto v = channel::view(seg);
  if (!v) return out;
  const auto& p = v->params;
  const Snapshot g = snapshot(*v);
  if (g.head > g.tail || g.tail - g.head > p.ring_cells) return out;
  for (std::uint64_t pos = g.head; pos < g.tail && out.size() < limit; ++pos) {
    const channel::Descriptor d = v->ring[pos & (p.ring_cells - 1)];
    const std::uint64_t index = d.generation & (p.pages - 1);
    const SlotSnapshot s = slot_snapshot(*v, index);
    if (s.generation != d.generation || d.cell >= s.published ||
        s.published > p.descriptors_per_page)
      break;
    const page::Cell cell = v->cells(index)[d.cell];
    if (cell.offset > p.page_bytes || cell.length > p.page_bytes - cell.offset) break;
    const std::byte* bytes = v->arena(index) + cell.offset;
    out.emplace_back(bytes, bytes + cell.length);
  }
  return out;
}

// The consumer has work while descriptors are published and not consumed;
// its progress is the consumed count. relaxed: a monitoring sample.
std::optional<RoleProgress> progress(const Segment& seg, std::uint32_t role) {
  if (role != channel::kConsumerRole.id) return std::nullopt;
  auto v = channel::view(seg);
  if (!v) return std::nullopt;
  const std::uint64_t head = v->control->consumer.head.load(std::memory_order_relaxed);
  const std::uint64_t tail = v->control->producer.tail.load(std::memory_order_relaxed);
  return RoleProgress{tail != head, head};
}

constexpr std::array<RoleSpec, 3> kRoles = {channel::kProducerRole, channel::kConsumerRole,
                                            channel::kObserverRole};

}  // namespace

const KindDescriptor kChannelDescriptor{
    .kind = kChannelKind,
    .name = "channel",
    .fingerprint = channel::kFingerprint,
    .roles = kRoles,
    .describe = describe,
    .verify = verify,
    .reclaim = reclaim,
    .dump = dump,
    .progress = progress,
};

}  // namespace shm
