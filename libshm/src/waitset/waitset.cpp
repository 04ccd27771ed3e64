// WaitSet: the members' checks (WaitSetAccess), the park loop over
// futex_waitv, and the helper thread behind fd(). The protocol per member
// and its lost-wake argument are in docs/waitset.md.
#include "shm/waitset/waitset.hpp"

#include "egress/waitset_hooks.hpp"
#include "format/format.hpp"
#include "shm/channel/consumer.hpp"
#include "shm/channel/producer.hpp"
#include "shm/egress/egress.hpp"
#include "shm/fanout/priority_fanout.hpp"
#include "shm/mpmc/mpmc_ring.hpp"
#include "shm/platform/clock.hpp"
#include "shm/platform/cpu_relax.hpp"
#include "shm/platform/futex.hpp"
#include "shm/relay/relay.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"
#include "shm/testing/waitset.hpp"
#include "shm/topic/topic.hpp"
#include "topic/internal.hpp"

#include <linux/membarrier.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

namespace shm {

std::string_view to_string(ReadyReason v) noexcept {
  switch (v) {
    case ReadyReason::Data:
      return "data";
    case ReadyReason::Room:
      return "room";
    case ReadyReason::PeerDied:
      return "peer_died";
    case ReadyReason::Faulted:
      return "faulted";
    case ReadyReason::Closed:
      return "closed";
  }
  return "unknown";
}

std::string_view to_string(WaitStatus v) noexcept {
  switch (v) {
    case WaitStatus::Ready:
      return "ready";
    case WaitStatus::TimedOut:
      return "timed_out";
    case WaitStatus::Closed:
      return "closed";
  }
  return "unknown";
}

// What the set needs of a member, type-erased.
enum class MemberKind : std::uint8_t {
  RingConsumer,
  RingProducer,
  ChannelConsumer,
  ChannelProducer,
  TopicSubscriber,
  RelayReader,
  RelayWriter,
  EgressTransport,
  EgressSender,
  MpmcConsumer,
  MpmcProducer,
  FanoutConsumer
};

namespace {

// Test hook (shm/testing/waitset.hpp): make() sees no futex_waitv.
std::atomic<bool> g_pretend_no_waitv{false};

// The heavy half of the ring's asymmetric barrier ([spsc.D'], see
// shm/spsc/layout.hpp): every running thread of every registered process
// executes a full barrier before it returns.
bool heavy_barrier() noexcept {
  return ::syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) == 0;
}

// Spin budget of a wait (member checks in total, across all members) before it parks.
constexpr int kSpinChecks = 4096;
// Longest sleep when the heavy barrier failed (a waker may have relied on it).
constexpr std::uint64_t kFencelessSleepNs = 1'000'000;
// An MPMC or fanout member whose other side is mid-operation (a claim not
// yet published or released, which may have missed the set's announcement)
// is polled, as the structure's own blocking call polls it: from the first
// interval, doubling, up to the cap (mpmc/internal.hpp's values).
constexpr std::uint64_t kInFlightFirstNs = 20'000;
constexpr std::uint64_t kInFlightMaxNs = 1'000'000;
// Longest sleep with an MPMC or fanout member: a waiter bit cleared under a
// live waiter (a reclaim race) is set again by the next round
// (mpmc::internal::kMaxParkNs).
constexpr std::uint64_t kParkedSetMaxSleepNs = 250'000'000;
constexpr std::uint64_t kForeverNs = 3600ull * 1'000'000'000ull;

}  // namespace

namespace detail {

// The members' state, read through the handles' private members (each handle
// names this struct a friend). Every check runs in the thread that uses the
// set, which must be the handle's thread: the member's endpoint guard is
// taken around it, so a second thread inside the handle aborts.
struct WaitSetAccess {
  using Reason = std::optional<ReadyReason>;

  // ---- ring consumer: the header word at the peek position.
  static Reason check(RingConsumer& c) {
    const EndpointGuard::Scope scope(c.guard_, RingEndpoint::kGuardName);
    std::byte* slot = c.at(c.peek_pos_);
    // [spsc.P'] acquire: pairs with the producer's [spsc.P]; the record's
    // checks are the consumer's own next peek.
    const std::uint64_t word = header_at(slot).load(std::memory_order_acquire);
    switch (ring::classify_slot(word, c.lap(c.peek_pos_))) {
      case ring::SlotState::Current:
        return ReadyReason::Data;
      case ring::SlotState::Foreign:
        return ReadyReason::Faulted;
      case ring::SlotState::Empty:
      case ring::SlotState::Stale:
        break;
    }
    return std::nullopt;
  }
  // ---- ring producer: room for a record of `n` payload bytes at the
  // reservation end, as reserve() computes it.
  static Reason check(RingProducer& p, std::size_t n) {
    const EndpointGuard::Scope scope(p.guard_, RingEndpoint::kGuardName);
    // [spsc.C'] acquire: pairs with the consumer's [spsc.C].
    const std::uint64_t head = p.control_->consumer.head.load(std::memory_order_acquire);
    if (head < p.cached_head_ || head > p.tail_ || !ring::position_aligned(head))
      return ReadyReason::Faulted;  // the producer's next reserve reports Corrupt
    const std::uint64_t need = ring::record_size(n);
    const std::uint64_t contiguous = p.capacity_ - (p.reserved_ & p.mask_);
    const std::uint64_t padding = need <= contiguous ? 0 : contiguous;
    if (p.reserved_ + padding + need - head <= p.capacity_) return ReadyReason::Room;
    return std::nullopt;
  }
  // ---- channel consumer: the consumer's own "is there anything" (it never
  // consumes; it may probe the producer's liveness and end the stream).
  static Reason check(ChannelConsumer& c, bool probe) {
    const EndpointGuard::Scope scope(c.guard_, "a channel endpoint");
    if (c.sticky_) return reason_of(c.sticky_->code);
    auto w = c.ready(probe, ChannelConsumer::Batch::Flush);
    if (!w) return reason_of(w.error().code);
    switch (*w) {
      case ChannelConsumer::Wait::Ready:
        return ReadyReason::Data;
      case ChannelConsumer::Wait::End:
        return ReadyReason::Closed;
      case ChannelConsumer::Wait::Empty:
        break;
    }
    return std::nullopt;
  }
  // ---- channel producer: would reserve_once(n) admit now? (Read only.)
  static Reason check(ChannelProducer& p, std::size_t n) {
    const EndpointGuard::Scope scope(p.guard_, "a channel endpoint");
    if (p.reserving_) return ReadyReason::Room;  // the reservation is the room
    if (p.finished_) return ReadyReason::Closed;
    // [chan.T'] acquire: pairs with [chan.T] of the side that changed the word.
    switch (channel::state_of(p.control().terminal.word.load(std::memory_order_acquire))) {
      case ChannelState::Open:
        break;
      case ChannelState::Clean:
        return ReadyReason::Closed;
      case ChannelState::Faulted:
      case ChannelState::Corrupt:
        return ReadyReason::Faulted;
    }
    // [chan.C'] acquire: pairs with the consumer's [chan.C].
    const std::uint64_t head = p.control().consumer.head.load(std::memory_order_acquire);
    if (head < p.cached_head_ || head > p.tail_) return ReadyReason::Faulted;
    if (p.tail_ - head >= p.view_.params.ring_cells) return std::nullopt;
    if (p.page_.fits(n)) return ReadyReason::Room;
    // [chan.A] acquire: pairs with the consumer's [chan.E].
    const std::uint64_t released =
        p.control().release.released_epoch.load(std::memory_order_acquire);
    if (p.page_.epoch() + 1 < released + p.view_.params.pages) return ReadyReason::Room;
    return std::nullopt;
  }

  // ---- topic subscriber: its own ready() (tail != head), plus its record
  // still being its own (repair or a reclaim drops it; a scribble changes it).
  static Reason check(TopicSubscriber& s) {
    topic::detail::Core& c = *s.core_;
    const EndpointGuard::Scope scope(c.guard, "a TopicSubscriber");
    const topic::SubscriberRecord& r = c.v.record(c.record);
    // relaxed: written under the topic's mutex; a record that is no longer
    // this handle's makes the next try_receive report Corrupt.
    if (r.active.load(std::memory_order_relaxed) != 1 ||
        r.generation.load(std::memory_order_relaxed) != c.attachment.generation())
      return ReadyReason::Faulted;
    // [topic.W] seq_cst: the re-check of the Dekker pair (the subscriber's
    // own ready() in receive()); head is only compared.
    if (r.tail.load(std::memory_order_seq_cst) != r.head.load(std::memory_order_relaxed))
      return ReadyReason::Data;
    return std::nullopt;
  }

  // ---- relay reader: would take() return something? The relay's state is
  // the mutex holder's: the answer (and the announcement) is made under the
  // relay's mutex, as the reader's own wait() makes it. A round that does not
  // announce looks first without the mutex (relaxed loads: a hint) and
  // takes the mutex only when the hint shows something.
  static Reason check(RelayReader& r, bool exact, bool announce) {
    const relay::Control& c = *r.view_.control;
    if (!exact && c.faulted.load(std::memory_order_relaxed) == 0 &&
        c.depth.load(std::memory_order_relaxed) == 0 &&
        r.view_.spill->cold_pages.load(std::memory_order_relaxed) == 0 && r.summary_ == nullptr)
      return std::nullopt;
    auto got = r.ready_for_set(announce);
    if (!got) return ReadyReason::Faulted;  // the next take() reports it
    if (*got && **got) return ReadyReason::Data;
    return std::nullopt;  // nothing, or a live holder past a lock slice: the next round looks
  }
  // ---- relay writer: would a write needing a new entry be appended now
  // (not full, an entry free)? Under the mutex, as above.
  static Reason check(RelayWriter& w, bool exact, bool announce) {
    const relay::Control& c = *w.view_.control;
    if (!exact && c.faulted.load(std::memory_order_relaxed) == 0 &&
        (c.is_full.load(std::memory_order_relaxed) != 0 ||
         c.free_head.load(std::memory_order_relaxed) == relay::kNone))
      return std::nullopt;
    auto got = w.room_for_set(announce);
    if (!got) return ReadyReason::Faulted;  // the next write reports it
    if (*got && **got) return ReadyReason::Room;
    return std::nullopt;
  }

  // ---- egress transport / sender: the look a claim / an enqueue makes
  // first, under the egress's mutex (egress/waitset_hooks.hpp); announced in
  // the same look (the set's +1 in claim_waiters / space_waiters, kept up
  // until withdrawn). A round that does not announce looks first without the
  // mutex (relaxed loads: a hint) and locks only when the hint shows something.
  static Reason check(EgressTransport& t, bool exact, bool announce, bool& counted,
                      std::uint64_t& due) {
    const egress::Control& c = *t.egress().state().control;
    if (!exact && c.lock.faulted.load(std::memory_order_relaxed) == 0 &&
        c.state.generation.load(std::memory_order_relaxed) == t.generation() &&
        c.state.counts[static_cast<int>(egress::RecordState::Pending)].load(
            std::memory_order_relaxed) == 0 &&
        c.state.next_due.load(std::memory_order_relaxed) > monotonic_ns())
      return std::nullopt;
    auto got = egress::internal::look_for_set(t, announce, counted, due);
    return egress_reason(got);
  }
  static Reason check(Egress& e, bool exact, bool announce, bool& counted) {
    const egress::Control& c = *e.state().control;
    if (!exact && c.lock.faulted.load(std::memory_order_relaxed) == 0 &&
        c.state.next_sequence.load(std::memory_order_relaxed) -
                c.state.head.load(std::memory_order_relaxed) >=
            e.state().params.capacity)
      return std::nullopt;
    auto got = egress::internal::look_for_set(e, announce, counted);
    Reason r = egress_reason(got);
    if (r == ReadyReason::Data) r = ReadyReason::Room;
    return r;
  }
  static Reason egress_reason(const Result<egress::internal::SetLook>& got) {
    if (!got) return ReadyReason::Faulted;  // the next call reports it
    switch (*got) {
      case egress::internal::SetLook::Ready:
        return ReadyReason::Data;
      case egress::internal::SetLook::Fenced:
        return ReadyReason::Closed;  // its claims answer StaleGeneration
      case egress::internal::SetLook::Nothing:
      case egress::internal::SetLook::Busy:
        break;
    }
    return std::nullopt;
  }

  // ---- MPMC ring consumer: would a claim find an item? A walk of what
  // claim_pop() reads: an orphan to adopt, then the cells from head, past
  // tombstones (consumed, as a claim consumes them), to the first that is
  // not one; it never claims an item.
  // `in_flight`: a producer has claimed a position it has not published yet
  // (its wake may have missed the set's announcement: poll). A held cell is
  // noted as the ring's own pop notes it (note_stuck), so a dead holder's
  // cell is repaired after kStuckGraceNs (a tombstone: the walk then passes it).
  static Reason check(MpmcConsumer& c, bool& in_flight) {
    MpmcRing& r = c;
    const EndpointGuard::Scope scope(r.guard_, kMpmcGuardName);
    return ring_data(r, in_flight);
  }
  static Reason ring_data(MpmcRing& r, bool& in_flight) {
    const mpmc::View& v = r.v_;
    mpmc::Control& ctl = *v.control;
    // [mpmc.W2] seq_cst: the re-check of the Dekker pair (after the set's
    // announce() in a parking round): a producer's claim [mpmc.T] ordered
    // before the announcement shows in this tail; one ordered after it sees
    // the set's bit in its [mpmc.W1] and wakes it at its publish.
    const std::uint64_t tail = ctl.producer.tail.load(std::memory_order_seq_cst);
    // Acquire: pairs with repair's release increment after its [mpmc.O] mark.
    if (ctl.consumer.orphans.load(std::memory_order_acquire) != 0) {
      if (orphan_at(v)) return ReadyReason::Data;
      // A count with no orphan: an adoption between its CAS and its
      // decrement (or a process killed there: the count stays high). Poll,
      // as the fanout's blocking pop does behind the bit that count keeps set.
      in_flight = true;
    }
    // [mpmc.H'] acquire.
    std::uint64_t pos = ctl.consumer.head.load(std::memory_order_acquire);
    for (std::uint64_t steps = 0; steps <= v.capacity + 1; ++steps) {
      // [mpmc.S'] acquire: pairs with the producer's [mpmc.S].
      const std::uint64_t seq = v.cell(pos).seq.load(std::memory_order_acquire);
      if (seq == pos + 1) return ReadyReason::Data;
      const bool tomb = (seq & mpmc::kTombstone) != 0;
      const std::uint64_t sv = seq & ~mpmc::kTombstone;
      // The classification of pop_slow(): anything else is Corrupt there.
      const std::uint64_t residue = (sv - pos) & v.mask;
      if (residue > 1 || (tomb && residue != 1)) return ReadyReason::Faulted;
      const std::uint64_t cap = v.capacity;
      if (pos >= cap && seq == ((pos - cap + 1) | mpmc::kOrphan)) return std::nullopt;
      if (tomb && sv == pos + 1) {
        // A tombstone: a claim consumes it and looks behind it. So does the
        // set (pop_slow() claims it, the one change the look makes), unless
        // the handle holds a peek or take, whose intent the claim would
        // overwrite: then it only looks behind. Left in place, a tombstone
        // would keep a fanout's bit set back by every clear (a claimed
        // position), and the set-back wakes the set itself.
        if (r.peeked_) {
          ++pos;
          continue;
        }
        auto next = r.pop_slow(pos, seq);
        if (!next) return ReadyReason::Faulted;
        if (!*next) return std::nullopt;
        pos = **next;
        continue;
      }
      if (!tomb && sv == pos) {  // free: empty, or claimed and not published yet
        if (tail > pos) {
          r.note_stuck(mpmc::Side::Push, pos);
          in_flight = true;
        }
        return std::nullopt;
      }
      if (pos >= cap && sv == pos - cap + 1) {  // the previous lap's item, not released
        r.note_stuck(mpmc::Side::Pop, pos - cap);
        return std::nullopt;  // its release and the next push wake the set
      }
      if (sv > pos + 1) {
        // Claimed (and released) by another consumer: a fresh head is past it.
        const std::uint64_t h = ctl.consumer.head.load(std::memory_order_acquire);  // [mpmc.H']
        if (h <= pos) return ReadyReason::Faulted;
        pos = h;
        continue;
      }
      return ReadyReason::Faulted;
    }
    in_flight = true;  // the ring moved under the walk: look again soon
    return std::nullopt;
  }
  // Whether an orphan (a dead taker's kept item) waits in [head - capacity, head),
  // as adopt_orphan() scans for one (orphans is a hint count).
  static bool orphan_at(const mpmc::View& v) {
    const std::uint64_t head = v.control->consumer.head.load(std::memory_order_acquire);
    const std::uint64_t lo = head >= v.capacity ? head - v.capacity : 0;
    for (std::uint64_t q = lo; q < head; ++q)
      // Acquire: pairs with [mpmc.O].
      if (v.cell(q).seq.load(std::memory_order_acquire) == ((q + 1) | mpmc::kOrphan)) return true;
    return false;
  }
  // ---- MPMC ring producer: would a claim find a free cell? A read-only
  // walk of what reserve() reads (push_slow()'s classification). `in_flight`:
  // a consumer has claimed the cell the set waits for and not released it yet.
  static Reason check(MpmcProducer& p, bool& in_flight) {
    MpmcRing& r = p;
    const EndpointGuard::Scope scope(r.guard_, kMpmcGuardName);
    const mpmc::View& v = r.v_;
    mpmc::Control& ctl = *v.control;
    // [mpmc.W2] seq_cst: as for the consumer, against a consumer's claim [mpmc.H].
    const std::uint64_t head = ctl.consumer.head.load(std::memory_order_seq_cst);
    // [mpmc.T'] acquire.
    std::uint64_t pos = ctl.producer.tail.load(std::memory_order_acquire);
    const std::uint64_t cap = v.capacity;
    for (std::uint64_t steps = 0; steps <= cap + 1; ++steps) {
      // [mpmc.R'] acquire: pairs with the consumer's [mpmc.R].
      const std::uint64_t seq = v.cell(pos).seq.load(std::memory_order_acquire);
      if (seq == pos) return ReadyReason::Room;
      const bool tomb = (seq & mpmc::kTombstone) != 0;
      const std::uint64_t sv = seq & ~mpmc::kTombstone;
      const std::uint64_t residue = (sv - pos) & v.mask;
      if (residue > 1 || (tomb && residue != 1)) return ReadyReason::Faulted;
      if (pos >= cap && seq == ((pos - cap + 1) | mpmc::kOrphan)) return std::nullopt;
      if (pos >= cap) {
        const std::uint64_t prev = pos - cap;
        if (seq == prev) {  // the previous lap's push in flight (or its producer died)
          r.note_stuck(mpmc::Side::Push, prev);
          return std::nullopt;
        }
        if (sv == prev + 1) {  // the previous lap's item: not popped, or not released
          if (head > prev) {
            r.note_stuck(mpmc::Side::Pop, prev);
            in_flight = true;  // claimed: its release may have missed the set's bit
          }
          return std::nullopt;
        }
      }
      if (sv > pos) {
        // Claimed by another producer: a fresh tail is past it.
        const std::uint64_t t = ctl.producer.tail.load(std::memory_order_acquire);  // [mpmc.T']
        if (t <= pos) return ReadyReason::Faulted;
        pos = t;
        continue;
      }
      return ReadyReason::Faulted;
    }
    in_flight = true;
    return std::nullopt;
  }
  // ---- fanout consumer: would pop_highest() claim an item? The bitmap,
  // then each set bit's ring from the highest, as the pop walks them; a ring
  // found empty with nothing in flight has a stale bit, cleared as the pop
  // clears it (clear_stale(): a claim meanwhile sets it back). An empty
  // bitmap: resurface() as the blocking pop's park round does (a submitter
  // that died between its ring commit and its bit).
  static Reason check(FanoutConsumer& c, bool& in_flight) {
    PriorityFanout& f = c;
    const EndpointGuard::Scope scope(f.guard_, kFanoutGuardName);
    auto& hot = f.control_->hot;
    // [fanout.D2] seq_cst: the re-check of the Dekker pair with a submitter's
    // [fanout.B1] (or a clearer's set-back) + [fanout.D1], as pop_highest()'s park.
    std::uint64_t bm = hot.bitmap.load(std::memory_order_seq_cst);
    if (bm == 0) {
      if (!f.resurface()) return std::nullopt;
      bm = hot.bitmap.load(std::memory_order_seq_cst);
    }
    const std::uint64_t valid = f.k_ >= 64 ? ~0ull : (std::uint64_t{1} << f.k_) - 1;
    if ((bm & ~valid) != 0) return ReadyReason::Faulted;  // the pop reports Corrupt
    while (bm != 0) {
      const auto p = static_cast<std::uint32_t>(63 - std::countl_zero(bm));
      bm &= ~(std::uint64_t{1} << p);
      bool ring_in_flight = false;
      const Reason r = ring_data(f.rings_[p], ring_in_flight);
      if (r) return r;
      if (ring_in_flight)
        in_flight = true;
      else if (!f.rings_[p].peeked_)
        // Not while this handle holds a take from that ring: its look did
        // not consume a tombstone there, which a clear would see as a claim
        // and set back, waking this set again at once.
        f.clear_stale(p);
    }
    return std::nullopt;
  }

  static ReadyReason reason_of(Errc code) noexcept {
    return code == Errc::ProducerDied ? ReadyReason::PeerDied : ReadyReason::Faulted;
  }

  // ---- the words: (futex word, parked flag, peer's slot) per member kind.
  struct Words {
    const std::atomic<std::uint32_t>* word;
    std::atomic<std::uint32_t>* parked;
    const Segment* segment;
    std::size_t peer_slot;
    // A count of parked parties instead of a flag (the topic's
    // subscribers_parked): `parked` is then the record's own flag for repair.
    std::atomic<std::uint32_t>* count = nullptr;
    // A set of parked attachment slots instead of a flag (the MPMC ring's and
    // the fanout's ParkedSet): the set announces the handle's own slot.
    mpmc::ParkedSet* parked_set = nullptr;
    std::size_t slot = 0;
  };
  static Words words(RingConsumer& c) {
    return {&c.control_->waiters.data_signal, &c.control_->producer.consumer_parked, &c.segment_,
            ring::kProducerRole.id};
  }
  static Words words(RingProducer& p) {
    return {&p.control_->waiters.space_signal, &p.control_->consumer.producer_parked, &p.segment_,
            ring::kConsumerRole.id};
  }
  static Words words(ChannelConsumer& c) {
    return {&c.control().waiters.data_signal, &c.control().waiters.consumer_parked, &c.segment_,
            channel::kProducerRole.id};
  }
  static Words words(ChannelProducer& p) {
    return {&p.control().waiters.space_signal, &p.control().waiters.producer_parked, &p.segment_,
            channel::kConsumerRole.id};
  }
  static Words words(TopicSubscriber& s) {
    topic::detail::Core& c = *s.core_;
    return {&c.v.control->waiters.data_signal, &c.v.record(c.record).parked, &c.segment,
            topic::kPublisherRole.id, &c.v.control->waiters.subscribers_parked};
  }
  // The relay's reader has many writers and no one peer (no PeerDied, no
  // probe: segment null); a writer's peer is the reader, which drains.
  static Words words(RelayReader& r) {
    relay::Control& c = *r.view_.control;
    return {&c.data_word, &c.reader_waiting, nullptr, 0};
  }
  static Words words(RelayWriter& w) {
    relay::Control& c = *w.view_.control;
    return {&c.space_word, &c.writers_waiting, &w.segment_, relay::kReaderRole.id};
  }
  // The egress's transport has producers, any number, and no one peer (no
  // probe: segment null); a sender's peer is the transport, which acks.
  // `parked` is the waiter count; the set changes it only under the mutex.
  static Words words(EgressTransport& t) {
    egress::Control& c = *t.egress().state().control;
    return {&c.wake.claim_word, &c.wake.claim_waiters, nullptr, 0};
  }
  static Words words(Egress& e) {
    egress::Control& c = *e.state().control;
    return {&c.wake.space_word, &c.wake.space_waiters, &e.segment(), egress::kTransportRole.id};
  }
  // The MPMC ring's and the fanout's members have no one peer (any number of
  // producers, consumers, submitters): no probe, segment null.
  static Words words(MpmcConsumer& c) {
    MpmcRing& r = c;
    auto& w = r.v_.control->waiters;
    return {&w.data_signal, nullptr, nullptr, 0, nullptr, &w.consumers_waiting, r.slot_};
  }
  static Words words(MpmcProducer& p) {
    MpmcRing& r = p;
    auto& w = r.v_.control->waiters;
    return {&w.space_signal, nullptr, nullptr, 0, nullptr, &w.producers_waiting, r.slot_};
  }
  static Words words(FanoutConsumer& c) {
    PriorityFanout& f = c;
    auto& hot = f.control_->hot;
    return {&hot.epoch, nullptr, nullptr, 0, nullptr, &hot.waiters, f.slot_};
  }
  // Whether a handle is attached to anything (a default-constructed or
  // moved-from handle has no control block).
  template <class Handle>
  static bool attached(Handle& h) {
    return h.segment().mutable_header() != nullptr;
  }
  static bool attached(TopicSubscriber& s) { return s.core_ != nullptr; }
  static bool attached(RelayReader& r) { return r.view_.control != nullptr; }
  static bool attached(RelayWriter& w) { return w.view_.control != nullptr; }
  static bool attached(EgressTransport& t) { return t.egress().state().control != nullptr; }
  static bool attached(Egress& e) { return e.state().control != nullptr; }
  static bool attached(MpmcConsumer& c) { return static_cast<MpmcRing&>(c).v_.control != nullptr; }
  static bool attached(MpmcProducer& p) { return static_cast<MpmcRing&>(p).v_.control != nullptr; }
  static bool attached(FanoutConsumer& c) {
    return static_cast<PriorityFanout&>(c).control_ != nullptr;
  }
  // The announcement's tail for the channel (the seq_cst loads that pair with
  // the waker's seq_cst stores; see [chan.D1'] / [chan.D2']).
  static void announced(ChannelConsumer& c) {
    (void)c.control().producer.tail.load(std::memory_order_seq_cst);
    (void)c.control().terminal.word.load(std::memory_order_seq_cst);
  }
  static void announced(ChannelProducer& p) {
    (void)p.control().consumer.head.load(std::memory_order_seq_cst);
    (void)p.control().release.released_epoch.load(std::memory_order_seq_cst);
    (void)p.control().terminal.word.load(std::memory_order_seq_cst);
  }
  static std::uint64_t max_payload(RingProducer& p) { return p.max_payload_; }
  static std::uint64_t max_payload(ChannelProducer& p) { return p.view_.params.max_payload; }
  static std::uint64_t max_payload(RelayWriter& w) { return w.view_.params.value_bytes; }
  static std::uint64_t max_payload(Egress& e) { return e.state().params.slot_bytes; }
  static std::uint64_t max_payload(MpmcProducer& p) { return p.slot_bytes(); }
  static const std::string& path(RingProducer& p) { return p.segment_.path(); }
  static const std::string& path(ChannelProducer& p) { return p.segment_.path(); }
  static const std::string& path(RelayWriter& w) { return w.segment_.path(); }
  static const std::string& path(Egress& e) { return e.segment().path(); }
  static const std::string& path(MpmcProducer& p) { return p.segment().path(); }
};

}  // namespace detail

struct WaitSet::State {
  struct Member {
    std::uint64_t tag = 0;
    MemberKind kind{};
    void* handle = nullptr;
    std::size_t payload_bytes = 0;
    detail::WaitSetAccess::Words w{};
    bool counted = false;  // w.count holds this set's +1 (a topic subscriber, an egress), or
                           // w.parked_set this set's bit (an MPMC ring, a fanout)
    std::uint64_t due_ns = ~0ull;  // an egress transport: its earliest parked record's due time
    bool in_flight = false;  // an MPMC / fanout member: the other side is mid-operation (poll)
  };

  WaitSetOptions options;
  std::vector<Member> members;
  std::vector<ReadyEvent> events;          // wait()'s answer
  std::vector<FutexWaitEntry> entries;     // one park round's words + the set's own
  std::atomic<std::uint32_t> own_word{0};  // bumped by close(): wakes a waiter
  std::atomic<bool> closed{false};
  std::atomic<int> waiters{0};  // threads inside wait() (the destructor waits for 0)
  detail::EndpointGuard guard;
  std::uint64_t last_probe_ns = 0;
  std::atomic<std::uint64_t> waits{0};
  std::atomic<std::uint64_t> parks{0};
  std::atomic<std::uint64_t> probes{0};

  // fd(): the eventfd and the helper thread that sleeps for the set.
  int event_fd = -1;
  std::thread helper;
  std::atomic<std::uint32_t> helper_word{0};  // bumped on arm / disarm / stop
  std::mutex helper_mutex;
  std::vector<FutexWaitEntry> armed_entries;  // under helper_mutex
  std::uint64_t armed_timeout_ns = 0;         // under helper_mutex
  std::uint64_t arm_generation = 0;           // under helper_mutex
  bool armed = false;                         // under helper_mutex
  bool stop = false;                          // under helper_mutex
  std::atomic<std::uint64_t> fd_signals{0};

  // The members' parked flags are left as they are (a flag left up costs its
  // waker one needless wake). A count (a topic subscriber's) is taken back:
  // left up, it would cost every later publish a wake. The handle is still
  // there: a member must not be destroyed while it is attached.
  ~State() {
    stop_helper();
    for (auto& m : members)
      if (m.counted) withdraw(m);
    if (event_fd >= 0) ::close(event_fd);
  }

  [[nodiscard]] Member* find(std::uint64_t tag) noexcept {
    for (auto& m : members)
      if (m.tag == tag) return &m;
    return nullptr;
  }

  [[nodiscard]] bool has_peers() const noexcept { return !members.empty(); }
  [[nodiscard]] std::uint64_t interval_ns() const noexcept {
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(options.liveness_interval).count());
  }
  [[nodiscard]] bool probe_due() noexcept {
    const std::uint64_t now = monotonic_ns();
    if (now - last_probe_ns < interval_ns()) return false;
    last_probe_ns = now;
    return true;
  }

  // One member's readiness now; `probe` allows the liveness system call.
  // `exact`: a member whose state is read under a lock (the relay's) is
  // read under it, not through its unlocked hint; `announcing`: the round
  // announces, and such a member is announced in the same locked look.
  std::optional<ReadyReason> check(Member& m, bool probe, bool exact, bool announcing) {
    using A = detail::WaitSetAccess;
    std::optional<ReadyReason> r;
    switch (m.kind) {
      case MemberKind::RingConsumer:
        r = A::check(*static_cast<RingConsumer*>(m.handle));
        break;
      case MemberKind::RingProducer:
        r = A::check(*static_cast<RingProducer*>(m.handle), m.payload_bytes);
        break;
      case MemberKind::ChannelConsumer:
        if (probe) probes.fetch_add(1, std::memory_order_relaxed);  // statistics
        return A::check(*static_cast<ChannelConsumer*>(m.handle), probe);
      case MemberKind::ChannelProducer:
        r = A::check(*static_cast<ChannelProducer*>(m.handle), m.payload_bytes);
        break;
      case MemberKind::TopicSubscriber:
        r = A::check(*static_cast<TopicSubscriber*>(m.handle));
        break;
      case MemberKind::RelayReader:
        r = A::check(*static_cast<RelayReader*>(m.handle), exact, announcing);
        break;
      case MemberKind::RelayWriter:
        r = A::check(*static_cast<RelayWriter*>(m.handle), exact, announcing);
        break;
      case MemberKind::EgressTransport:
        r = A::check(*static_cast<EgressTransport*>(m.handle), exact, announcing, m.counted,
                     m.due_ns);
        break;
      case MemberKind::EgressSender:
        r = A::check(*static_cast<Egress*>(m.handle), exact, announcing, m.counted);
        break;
      case MemberKind::MpmcConsumer:
        m.in_flight = false;
        return A::check(*static_cast<MpmcConsumer*>(m.handle), m.in_flight);
      case MemberKind::MpmcProducer:
        m.in_flight = false;
        return A::check(*static_cast<MpmcProducer*>(m.handle), m.in_flight);
      case MemberKind::FanoutConsumer:
        m.in_flight = false;
        return A::check(*static_cast<FanoutConsumer*>(m.handle), m.in_flight);
    }
    if (r || !probe || m.w.segment == nullptr) return r;
    // Nothing to take and no room: a dead peer will never change that.
    probes.fetch_add(1, std::memory_order_relaxed);  // statistics
    if (m.w.segment->liveness(m.w.peer_slot) == Liveness::Dead) return ReadyReason::PeerDied;
    return std::nullopt;
  }

  // Fills `events`; true when any member is ready.
  bool collect(bool probe, bool exact, bool announcing = false) {
    events.clear();
    for (auto& m : members)
      if (auto r = check(m, probe, exact, announcing)) events.push_back(ReadyEvent{m.tag, *r});
    return !events.empty();
  }

  // Announces the set in every member's parked flag, then the barriers that
  // make each flag store and the re-check that follows a Dekker pair with
  // the waker's publish and flag load (docs/waitset.md). Returns false when
  // the heavy barrier failed (sleeps are then bounded).
  bool announce() {
    bool rings = false;
    for (auto& m : members) {
      if (m.w.parked_set != nullptr) {
        // [ws.P] the handle's own announcement ([mpmc.W] / [fanout.D]):
        // seq_cst +1 of the count, then the seq_cst fetch_or of its slot's
        // bit, repeated every round as the blocking call's park repeats it (a
        // reclaim race may have cleared it). The re-check is check()'s first
        // load ([mpmc.W2] / [fanout.D2], seq_cst): no barrier follows.
        m.w.parked_set->announce(m.w.slot);
        m.counted = true;
        continue;
      }
      if (m.w.count != nullptr) {
        // A count: announced once, kept up until withdrawn (a later round
        // finds it in place). [topic.W] seq_cst: the same increment as the
        // subscriber's own receive(); its re-check is check()'s seq_cst load
        // of tail, so no barrier follows.
        if (!m.counted) {
          m.w.count->fetch_add(1, std::memory_order_seq_cst);
          // relaxed: for repair only, as in receive() (a dead parked party's
          // +1 is taken back by the topic's repair).
          m.w.parked->store(1, std::memory_order_relaxed);
          m.counted = true;
        }
        continue;
      }
      // The relay's flags are raised under its mutex, in the round's check
      // (collect with `announcing`): the relay's waker reads them under it.
      // The egress's counts likewise, under its mutex.
      if (under_lock(m)) continue;
      // [ws.D'] seq_cst: the same store as the member's own blocking call
      // ([spsc.D'] / [chan.D1'] / [chan.D2']).
      m.w.parked->store(1, std::memory_order_seq_cst);
      switch (m.kind) {
        case MemberKind::RingConsumer:
        case MemberKind::RingProducer:
          rings = true;
          break;
        case MemberKind::ChannelConsumer:
          detail::WaitSetAccess::announced(*static_cast<ChannelConsumer*>(m.handle));
          break;
        case MemberKind::ChannelProducer:
          detail::WaitSetAccess::announced(*static_cast<ChannelProducer*>(m.handle));
          break;
        case MemberKind::TopicSubscriber:
        case MemberKind::MpmcConsumer:
        case MemberKind::MpmcProducer:
        case MemberKind::FanoutConsumer:
          break;  // a count or a parked set (above)
        case MemberKind::RelayReader:
        case MemberKind::RelayWriter:
        case MemberKind::EgressTransport:
        case MemberKind::EgressSender:
          break;  // not reached (above)
      }
    }
    // One heavy barrier covers every ring member's flag.
    return !rings || heavy_barrier();
  }

  void withdraw() noexcept {
    for (auto& m : members) withdraw(m);
  }
  // A member announced under its structure's mutex, in the round's check.
  static bool under_lock(const Member& m) noexcept {
    return m.kind == MemberKind::RelayReader || m.kind == MemberKind::RelayWriter ||
           m.kind == MemberKind::EgressTransport || m.kind == MemberKind::EgressSender;
  }
  static void withdraw(Member& m) noexcept {
    if (m.w.parked_set != nullptr) {
      // Exact: the handle's own bit (and its 1 in the count), as its blocking
      // call's park withdraws it. Left up, it would cost every push a wake.
      if (m.counted) (void)m.w.parked_set->clear(m.w.slot);
      m.counted = false;
      return;
    }
    if (m.kind == MemberKind::EgressTransport || m.kind == MemberKind::EgressSender) {
      // The +1 is taken back under the mutex (left up, it would cost every
      // later wake a FUTEX_WAKE). A live holder past a lock slice: it stays
      // up and the next withdraw tries again.
      if (!m.counted) return;
      const Egress& e = m.kind == MemberKind::EgressTransport
                            ? static_cast<EgressTransport*>(m.handle)->egress()
                            : *static_cast<Egress*>(m.handle);
      if (egress::internal::withdraw_for_set(e, m.kind == MemberKind::EgressTransport))
        m.counted = false;
      return;
    }
    if (m.w.count != nullptr) {
      if (!m.counted) return;
      m.w.parked->store(0, std::memory_order_relaxed);  // for repair only
      // seq_cst as every change of the count ([topic.W]).
      m.w.count->fetch_sub(1, std::memory_order_seq_cst);
      m.counted = false;
      return;
    }
    // The relay's flags are left up: the relay clears them under its mutex
    // when it wakes, and writers_waiting is shared with every parked writer
    // of every process (a clear here could hide one from the next wake).
    if (m.kind == MemberKind::RelayReader || m.kind == MemberKind::RelayWriter) return;
    // relaxed: a hint; a waker that still sees it issues one needless wake.
    m.w.parked->store(0, std::memory_order_relaxed);
  }

  WaitOutcome ready_outcome() const noexcept {
    return WaitOutcome{WaitStatus::Ready, std::span<const ReadyEvent>(events)};
  }

  Result<WaitOutcome> wait(std::chrono::nanoseconds timeout) {
    waits.fetch_add(1, std::memory_order_relaxed);  // statistics
    events.clear();
    if (event_fd >= 0) drain_fd();
    if (closed.load(std::memory_order_acquire)) return WaitOutcome{WaitStatus::Closed, {}};
    const auto deadline = detail::deadline_after(timeout);
    std::uint64_t backoff_ns = kInFlightFirstNs;
    if (collect(probe_due(), true)) return signalled(ready_outcome());
    if (timeout <= std::chrono::nanoseconds::zero() && event_fd < 0)
      return WaitOutcome{WaitStatus::TimedOut, {}};
    if (timeout > std::chrono::nanoseconds::zero()) {
      const int rounds = std::max<int>(16, kSpinChecks / static_cast<int>(members.size() + 1));
      for (int i = 0; i < rounds; ++i) {
        if (collect(false, false)) return signalled(ready_outcome());
        detail::cpu_relax();
      }
    }
    for (;;) {
      // Read each futex word before announcing: a wake after this load
      // changes it, and futex_waitv then returns at once. acquire: pairs
      // with the waker's release increment of the word ([spsc.W], channel).
      entries.clear();
      for (auto& m : members)
        entries.push_back(FutexWaitEntry{m.w.word, m.w.word->load(std::memory_order_acquire)});
      const std::uint32_t own = own_word.load(std::memory_order_acquire);
      const bool fenced = announce();
      if (collect(probe_due(), true, true)) {
        withdraw();
        return signalled(ready_outcome());
      }
      if (closed.load(std::memory_order_acquire)) {
        withdraw();
        return WaitOutcome{WaitStatus::Closed, {}};
      }
      const auto now = std::chrono::steady_clock::now();
      std::uint64_t sleep_ns = has_peers() ? interval_ns() : kForeverNs;
      if (!fenced) sleep_ns = std::min(sleep_ns, kFencelessSleepNs);
      // An MPMC / fanout member: bounded as its own park is; polled while its
      // other side is mid-operation (that side's wake may have missed our bit).
      bool in_flight = false;
      for (const auto& m : members) {
        if (m.w.parked_set == nullptr) continue;
        sleep_ns = std::min(sleep_ns, kParkedSetMaxSleepNs);
        in_flight = in_flight || m.in_flight;
      }
      if (in_flight) {
        sleep_ns = std::min(sleep_ns, backoff_ns);
        backoff_ns = std::min(backoff_ns * 2, kInFlightMaxNs);
      } else {
        backoff_ns = kInFlightFirstNs;
      }
      // An egress transport's parked record becomes claimable at its due
      // time, which no one wakes for (the transport's own claim sleeps until it).
      for (const auto& m : members) {
        if (m.kind != MemberKind::EgressTransport || m.due_ns == ~0ull) continue;
        const std::uint64_t t = monotonic_ns();
        sleep_ns = std::min(sleep_ns, m.due_ns > t ? m.due_ns - t : 0);
      }
      if (now >= deadline) {
        // The flags stay up while fd() is armed: the helper sleeps on these words.
        if (event_fd >= 0)
          arm(sleep_ns);
        else
          withdraw();
        return WaitOutcome{WaitStatus::TimedOut, {}};
      }
      sleep_ns = std::min<std::uint64_t>(
          sleep_ns,
          static_cast<std::uint64_t>(
              std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now).count()));
      entries.push_back(FutexWaitEntry{&own_word, own});
      parks.fetch_add(1, std::memory_order_relaxed);  // statistics
      (void)futex_wait_any(entries.data(), entries.size(), sleep_ns);
      // A round after a wake looks first: what the waker published is there
      // (a relay member through its hint; the next round looks under the mutex).
      if (collect(probe_due(), false)) {
        withdraw();
        return signalled(ready_outcome());
      }
    }
  }

  // ---- fd()

  // With fd() in use, a wait() that finds members ready leaves the
  // descriptor readable, so an event loop comes back while they stay ready
  // (level-triggered); the wait() that finds none re-arms the helper.
  WaitOutcome signalled(WaitOutcome o) noexcept {
    if (event_fd >= 0) write_fd();
    return o;
  }
  void write_fd() noexcept {
    const std::uint64_t one = 1;
    (void)!::write(event_fd, &one, sizeof one);
  }
  void drain_fd() noexcept {
    std::uint64_t n = 0;
    (void)!::read(event_fd, &n, sizeof n);  // non-blocking: EAGAIN when not readable
  }

  // Hands the words of the round just announced to the helper thread.
  void arm(std::uint64_t timeout_ns) {
    {
      const std::lock_guard lock(helper_mutex);
      armed_entries.assign(entries.begin(), entries.end());
      armed_timeout_ns = timeout_ns;
      ++arm_generation;
      armed = true;
    }
    kick_helper();
  }
  void disarm() {
    {
      const std::lock_guard lock(helper_mutex);
      armed = false;
    }
    kick_helper();
  }
  void kick_helper() noexcept {
    // release: the helper's acquire load of the word sees the state set above (under the mutex
    // as well; the word is what ends its sleep).
    helper_word.fetch_add(1, std::memory_order_release);
    (void)futex_wake_all(helper_word);
  }
  void stop_helper() noexcept {
    if (!helper.joinable()) return;
    {
      const std::lock_guard lock(helper_mutex);
      stop = true;
    }
    kick_helper();
    helper.join();
  }

  void helper_main() {
    std::vector<FutexWaitEntry> local;
    local.reserve(WaitSet::kMaxMembers + 1);
    for (;;) {
      // acquire: pairs with kick_helper()'s release increment.
      const std::uint32_t seen = helper_word.load(std::memory_order_acquire);
      std::uint64_t generation = 0;
      std::uint64_t timeout_ns = 0;
      bool is_armed = false;
      {
        const std::lock_guard lock(helper_mutex);
        if (stop) return;
        is_armed = armed;
        if (is_armed) {
          local.assign(armed_entries.begin(), armed_entries.end());
          generation = arm_generation;
          timeout_ns = armed_timeout_ns;
        }
      }
      if (!is_armed) {
        (void)futex_wait(helper_word, seen, kForeverNs);
        continue;
      }
      local.push_back(FutexWaitEntry{&helper_word, seen});
      (void)futex_wait_any(local.data(), local.size(), timeout_ns);
      // acquire: as above. A changed word: re-armed, disarmed or stopping.
      if (helper_word.load(std::memory_order_acquire) != seen) continue;
      {
        const std::lock_guard lock(helper_mutex);
        if (arm_generation == generation) armed = false;
      }
      fd_signals.fetch_add(1, std::memory_order_relaxed);  // statistics
      write_fd();
    }
  }
};

Result<WaitSet> WaitSet::make(const WaitSetOptions& options) {
  if (options.max_members == 0 || options.max_members > kMaxMembers)
    return fail(Errc::InvalidArgument, detail::format("WaitSet max_members {} must be in [1, {}]",
                                                      options.max_members, kMaxMembers));
  if (options.liveness_interval < std::chrono::milliseconds(1) ||
      options.liveness_interval > std::chrono::seconds(10))
    return fail(Errc::InvalidArgument,
                detail::format("WaitSet liveness_interval {} ms must be in [1, 10000] ms",
                               options.liveness_interval.count()));
  if (g_pretend_no_waitv.load(std::memory_order_relaxed) || !futex_wait_any_supported())
    return fail(Errc::SystemError,
                "WaitSet needs the futex_waitv system call (Linux 5.16 or newer); this kernel "
                "(or a seccomp filter) refuses it. Wait on each endpoint in its own thread "
                "instead (the blocking calls need no futex_waitv)");
  auto state = std::make_unique<State>();
  state->options = options;
  state->members.reserve(options.max_members);
  state->events.reserve(options.max_members);
  state->entries.reserve(options.max_members + 1);
  state->last_probe_ns = monotonic_ns();
  return WaitSet(std::move(state));
}

WaitSet::WaitSet(std::unique_ptr<State> state) noexcept : state_(std::move(state)) {}
WaitSet::WaitSet(WaitSet&&) noexcept = default;
WaitSet& WaitSet::operator=(WaitSet&& other) noexcept {
  if (this != &other) {
    close();
    if (state_)
      while (state_->waiters.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
    state_ = std::move(other.state_);
  }
  return *this;
}

WaitSet::~WaitSet() {
  if (!state_) return;
  close();
  // seq_cst: after close()'s store of `closed`; a waiter inside sees it (or
  // its wake) and leaves, then decrements.
  while (state_->waiters.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
}

void WaitSet::close() noexcept {
  if (!state_) return;
  State& s = *state_;
  s.closed.store(true, std::memory_order_seq_cst);
  // release: the waiter's acquire load of own_word before its re-check.
  s.own_word.fetch_add(1, std::memory_order_release);
  (void)futex_wake_all(s.own_word);
  if (s.event_fd >= 0) s.write_fd();  // an event loop learns it through wait()
}

namespace {

std::unexpected<Error> moved_from() {
  return fail(Errc::InvalidArgument, "a moved-from WaitSet has no members and cannot wait");
}

}  // namespace

template <class Handle>
static Result<void> attach_member(WaitSet::State* s, Handle& h, std::uint64_t tag, MemberKind kind,
                                  std::size_t payload_bytes) {
  if (s == nullptr) return moved_from();
  const detail::EndpointGuard::Scope scope(s->guard, "a WaitSet");
  if (s->members.size() >= s->options.max_members)
    return fail(Errc::InvalidArgument,
                detail::format("WaitSet is full: {} members (max_members)", s->members.size()));
  if (s->find(tag) != nullptr)
    return fail(Errc::InvalidArgument,
                detail::format("WaitSet already has a member with tag {}", tag));
  for (const auto& m : s->members)
    if (m.handle == static_cast<void*>(&h))
      return fail(Errc::InvalidArgument,
                  detail::format("this handle is already in the WaitSet (tag {})", m.tag));
  // Before any look at its control block: a default-constructed or
  // moved-from handle has none.
  if (!detail::WaitSetAccess::attached(h))
    return fail(Errc::InvalidArgument, "a handle attached to nothing cannot join a WaitSet");
  WaitSet::State::Member m;
  m.tag = tag;
  m.kind = kind;
  m.handle = &h;
  m.payload_bytes = payload_bytes;
  m.w = detail::WaitSetAccess::words(h);
  s->members.push_back(m);
  if (s->event_fd >= 0) {
    s->disarm();
    s->write_fd();  // the loop calls wait(), which arms with the new member
  }
  return {};
}

Result<void> WaitSet::attach(RingConsumer& consumer, std::uint64_t tag) {
  return attach_member(state_.get(), consumer, tag, MemberKind::RingConsumer, 0);
}

Result<void> WaitSet::attach(ChannelConsumer& consumer, std::uint64_t tag) {
  return attach_member(state_.get(), consumer, tag, MemberKind::ChannelConsumer, 0);
}

Result<void> WaitSet::attach(TopicSubscriber& subscriber, std::uint64_t tag) {
  return attach_member(state_.get(), subscriber, tag, MemberKind::TopicSubscriber, 0);
}

Result<void> WaitSet::attach(RelayReader& reader, std::uint64_t tag) {
  return attach_member(state_.get(), reader, tag, MemberKind::RelayReader, 0);
}

Result<void> WaitSet::attach(EgressTransport& transport, std::uint64_t tag) {
  return attach_member(state_.get(), transport, tag, MemberKind::EgressTransport, 0);
}

Result<void> WaitSet::attach(MpmcConsumer& consumer, std::uint64_t tag) {
  return attach_member(state_.get(), consumer, tag, MemberKind::MpmcConsumer, 0);
}

Result<void> WaitSet::attach(FanoutConsumer& consumer, std::uint64_t tag) {
  return attach_member(state_.get(), consumer, tag, MemberKind::FanoutConsumer, 0);
}

template <class Producer>
static Result<void> check_payload(Producer& p, std::size_t payload_bytes) {
  const std::uint64_t max = detail::WaitSetAccess::max_payload(p);
  if (payload_bytes > max)
    return fail(Errc::TooLarge,
                detail::format("{}: WaitSet room for {} bytes: the largest payload is {} bytes",
                               detail::WaitSetAccess::path(p), payload_bytes, max));
  return {};
}

Result<void> WaitSet::attach(RingProducer& producer, std::uint64_t tag, std::size_t payload_bytes) {
  if (state_ && producer.segment().mutable_header() != nullptr) {
    if (auto ok = check_payload(producer, payload_bytes); !ok) return ok;
  }
  return attach_member(state_.get(), producer, tag, MemberKind::RingProducer, payload_bytes);
}

Result<void> WaitSet::attach(ChannelProducer& producer, std::uint64_t tag,
                             std::size_t payload_bytes) {
  if (state_ && producer.segment().mutable_header() != nullptr) {
    if (auto ok = check_payload(producer, payload_bytes); !ok) return ok;
  }
  return attach_member(state_.get(), producer, tag, MemberKind::ChannelProducer, payload_bytes);
}

Result<void> WaitSet::attach(MpmcProducer& producer, std::uint64_t tag, std::size_t payload_bytes) {
  if (state_ && detail::WaitSetAccess::attached(producer)) {
    if (auto ok = check_payload(producer, payload_bytes); !ok) return ok;
  }
  return attach_member(state_.get(), producer, tag, MemberKind::MpmcProducer, payload_bytes);
}

Result<void> WaitSet::attach(RelayWriter& writer, std::uint64_t tag, std::size_t value_bytes) {
  if (state_ && detail::WaitSetAccess::attached(writer)) {
    if (auto ok = check_payload(writer, value_bytes); !ok) return ok;
  }
  return attach_member(state_.get(), writer, tag, MemberKind::RelayWriter, value_bytes);
}

Result<void> WaitSet::attach(Egress& sender, std::uint64_t tag, std::size_t payload_bytes) {
  if (state_ && detail::WaitSetAccess::attached(sender)) {
    if (auto ok = check_payload(sender, payload_bytes); !ok) return ok;
  }
  return attach_member(state_.get(), sender, tag, MemberKind::EgressSender, payload_bytes);
}

Result<void> WaitSet::detach(std::uint64_t tag) {
  if (!state_) return moved_from();
  State& s = *state_;
  const detail::EndpointGuard::Scope scope(s.guard, "a WaitSet");
  const auto it = std::find_if(s.members.begin(), s.members.end(),
                               [&](const State::Member& m) { return m.tag == tag; });
  if (it == s.members.end())
    return fail(Errc::NotFound, detail::format("WaitSet has no member with tag {}", tag));
  if (s.event_fd >= 0) s.disarm();
  State::withdraw(*it);  // a flag: a hint (at worst one needless wake); a count: exact
  s.members.erase(it);
  if (s.event_fd >= 0) s.write_fd();  // re-armed by the next wait()
  return {};
}

std::size_t WaitSet::size() const noexcept {
  return state_ ? state_->members.size() : 0;
}

Result<WaitOutcome> WaitSet::wait(std::chrono::nanoseconds timeout) {
  if (!state_) return moved_from();
  State& s = *state_;
  // seq_cst: pairs with the destructor's load after its store of `closed`.
  s.waiters.fetch_add(1, std::memory_order_seq_cst);
  Result<WaitOutcome> r = [&] {
    const detail::EndpointGuard::Scope scope(s.guard, "a WaitSet");
    return s.wait(timeout);
  }();
  if (r && r->status == WaitStatus::Ready && s.closed.load(std::memory_order_seq_cst))
    r = WaitOutcome{WaitStatus::Closed, {}};
  // The last touch of the set: the destructor may free it once this is 0.
  s.waiters.fetch_sub(1, std::memory_order_seq_cst);
  return r;
}

Result<int> WaitSet::fd() {
  if (!state_) return moved_from();
  State& s = *state_;
  const detail::EndpointGuard::Scope scope(s.guard, "a WaitSet");
  if (s.event_fd >= 0) return s.event_fd;
  const int efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (efd < 0)
    return fail(Errc::SystemError,
                detail::format("WaitSet fd(): eventfd: {}", std::strerror(errno)));
  s.event_fd = efd;
  s.helper = std::thread([&s] { s.helper_main(); });
  s.write_fd();  // readable at once: the first wait() arms the helper
  return efd;
}

WaitSetSnapshot WaitSet::snapshot() const noexcept {
  WaitSetSnapshot out;
  if (!state_) return out;
  const State& s = *state_;
  out.members = s.members.size();
  out.max_members = s.options.max_members;
  // relaxed: statistics counters.
  out.waits = s.waits.load(std::memory_order_relaxed);
  out.parks = s.parks.load(std::memory_order_relaxed);
  out.probes = s.probes.load(std::memory_order_relaxed);
  out.fd_active = s.event_fd >= 0;
  out.fd_signals = s.fd_signals.load(std::memory_order_relaxed);
  return out;
}

void test_hooks::pretend_no_futex_waitv(bool on) noexcept {
  g_pretend_no_waitv.store(on, std::memory_order_relaxed);
}

}  // namespace shm
