// Exhaustive interleaving check of the Channel protocol (ADR-0010's three
// races): the producer's and the consumer's atomic steps as a small state
// machine, explored depth-first over every interleaving, with the ADR's
// invariants asserted in every state.
//
//   release vs rebind       [chan.C] -> [chan.E] -> [chan.A] -> rebind
//   quota refusal vs an in-flight release ([chan.A] racing [chan.E])
//   faulted closure mid-rotation (the producer dies at any step, the sidecar
//   may mark the channel FAULTED, the consumer drains and ends)
//
// Each model step is one atomic access of the code (or one plain write/read
// that an acquire/release pair publishes), named after its memory-order label;
// docs/channel.md ("Interleaving model") maps every step to its line of code.
// The model explores sequentially consistent interleavings of those steps: it
// checks the protocol's order of steps, not the hardware's reordering of
// relaxed accesses (the labels' acquire/release pairs and TSan cover that).
//
// The checker proves it can fail: each InjectedBug below is a protocol mistake
// injected into the model (a wrong step order, an off-by-one quota), and the
// suite requires the checker to find a violating interleaving for each.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace shm {
namespace {

enum class InjectedBug : std::uint8_t {
  None,
  QuotaOffByOne,          // the producer allows active + 1 <= released + P (P + 1 live pages)
  RebindBeforeQuota,      // seal and rebind first, acquire-load released_epoch [A] after
  SealBeforeQuota,        // seal [S] before the quota check: a refusal has mutated the page
  ReleaseBeforeGiveBack,  // [E] of epoch e when its last lease is taken, before [C] gives it back
  DescriptorBeforeCell,   // ring release [R] before the page release [P]
  DiedReleasesOnlyItsEpoch,  // the faulted end releases the consumer's epoch, not the final one
  FlagAfterRecheck,          // a parking producer re-checks, then announces itself [D2']
};

constexpr std::string_view bug_name(InjectedBug b) {
  switch (b) {
    case InjectedBug::None:
      return "none";
    case InjectedBug::QuotaOffByOne:
      return "quota off by one";
    case InjectedBug::RebindBeforeQuota:
      return "rebind before the quota check";
    case InjectedBug::SealBeforeQuota:
      return "seal before the quota check";
    case InjectedBug::ReleaseBeforeGiveBack:
      return "release before give-back";
    case InjectedBug::DescriptorBeforeCell:
      return "descriptor before cell";
    case InjectedBug::DiedReleasesOnlyItsEpoch:
      return "faulted end releases only the consumer's epoch";
    case InjectedBug::FlagAfterRecheck:
      return "parked flag after the re-check";
  }
  return "?";
}

struct Config {
  std::uint8_t pages;     // P
  std::uint8_t cells;     // descriptors per page
  std::uint8_t ring;      // descriptor ring capacity
  std::uint8_t messages;  // payloads the producer sends before finish()
  bool death;             // the producer may die at any step (once)
  bool blocking = false;  // a refused producer parks (reserve/send) instead of retrying
  InjectedBug bug = InjectedBug::None;
};

constexpr int kMaxPages = 4;
constexpr int kMaxCells = 2;
constexpr int kMaxRing = 4;

// ModelSlot states, terminal words.
constexpr std::uint8_t kUnbound = 0, kOpen = 1, kSealed = 2;
constexpr std::uint8_t kWordOpen = 0, kWordClean = 1, kWordFaulted = 2;  // Faulted: producer died

// Producer program counter.
enum : std::uint8_t {
  P_START,      // local: choose ring check / fit / finish
  P_LOAD_HEAD,  // [C'] acquire head (ring looked full)
  P_FIT,        // local: room in the active page?
  P_QUOTA,      // local: cached released_epoch enough?
  P_LOAD_REL,   // [A] acquire released_epoch; refuse (PageQuotaExhausted) or go on
  P_SEAL,       // [S] release state = Sealed
  P_REBIND,     // relaxed stores of the successor binding (epoch, first, published = 0)
  P_OPEN,       // [B] release state = Open
  P_ACTIVE,     // relaxed store of active_epoch (observers; the faulted end reads it)
  P_CHECK_REL,  // (InjectedBug::RebindBeforeQuota only) [A] after the rebind
  P_WRITE,      // payload + cell (plain writes)
  P_PUBLISH,    // [P] release published
  P_DESC,       // descriptor (plain write)
  P_TAIL,       // [R] seq_cst tail
  P_PARK_SEEN,  // park round: acquire-load space_signal (the futex word)
  P_PARK_FLAG,  // [D2'] seq_cst producer_parked = 1, then the attempt again from P_START
  P_SLEEP,      // futex_wait(space_signal, seen): blocked while the word is unchanged
  P_UNPARK,     // relaxed producer_parked = 0 once the attempt succeeded
  P_FIN_SEAL,   // finish: [S]
  P_FIN_CLEAN,  // finish: [T] CAS OPEN -> CLEAN
  P_DONE,
};

// Consumer program counter.
enum : std::uint8_t {
  C_START,          // local
  C_LOAD_TAIL,      // [R'] acquire tail
  C_TERM,           // [T'] acquire terminal word
  C_PROBE,          // liveness probe (the kernel lock)
  C_DIED_TAIL,      // [R'] tail again: anything described before the death?
  C_DIED_WORD,      // [T'] word again (finished just before dying?)
  C_DIED_ACTIVE,    // active_epoch (relaxed, after the death was observed)
  C_DIED_RAISE,     // [T] FAULTED (producer died)
  C_DIED_RELEASE,   // [E] the faulted end releases the final epoch
  C_CLEAN_TAIL,     // [R'] tail again after CLEAN
  C_CLEAN_ACTIVE,   // active_epoch (ordered by CLEAN)
  C_CLEAN_CHECK,    // [S'] / [P'] the final page sealed and fully committed, later pages empty
  C_CLEAN_RELEASE,  // [E] the clean end releases the final epoch
  C_READ_DESC,      // descriptor at head (plain read, published by [R])
  C_SEAM_BIND,      // successor slot bound to epoch + 1 (relaxed, ordered by [R'])
  C_SEAM_SEALED,    // [S'] acquire: the page of the epoch is sealed
  C_SEAM_COUNT,     // [P'] acquire: committed == published, first sequence continues
  C_SEAM_RELEASE,   // [E] seq_cst released_epoch = epoch + 1
  C_BIND,           // slot still bound to the epoch, sequence == head
  C_LOAD_PUB,       // [P'] acquire published
  C_READ_CELL,      // cell + payload (plain reads, published by [P]): the lease
  C_GIVE_BACK,      // [C] seq_cst head (the lease is given back)
  C_WAKE_CHECK,     // [D2] seq_cst load of producer_parked after [C] / [E]
  C_WAKE,           // exchange producer_parked 0, release increment of space_signal, wake
  C_DONE,
};

constexpr std::uint8_t kOutcomeNone = 0, kOutcomeEnd = 1, kOutcomeDied = 2;

#pragma pack(push, 1)
struct ModelSlot {
  std::uint8_t epoch;
  std::uint8_t state;
  std::uint8_t first;
  std::uint8_t published;
  std::array<std::uint8_t, kMaxCells> cell_epoch;  // whose payload the cell holds
  std::array<std::uint8_t, kMaxCells> cell_seq;
};

// One state of the whole system: shared memory, then each side's locals.
// Only uint8 fields, packed: the bytes are the identity of the state.
struct State {
  // shared (the segment)
  std::uint8_t tail, head, released, active, word, dead;
  std::uint8_t space_signal, producer_parked;
  std::array<ModelSlot, kMaxPages> slots;
  std::array<std::uint8_t, kMaxRing> ring_seq, ring_epoch;
  // producer
  std::uint8_t ppc, p_active, p_pub, p_sent, p_cached_head, p_cached_rel, p_wrote;
  std::uint8_t p_parking, p_seen;
  // consumer
  std::uint8_t cpc, c_head, c_epoch, c_first, c_committed, c_cached_tail, c_cached_pub, c_lease;
  std::uint8_t d_seq, d_epoch, c_active, c_outcome, c_ret;
};
#pragma pack(pop)
static_assert(std::is_trivially_copyable_v<State>);

std::string key(const State& s) {
  return std::string(reinterpret_cast<const char*>(&s), sizeof s);
}

State initial(const Config&) {
  State s{};
  s.slots[0].state = kOpen;  // create binds epoch 0 in slot 0
  return s;
}

// One step of one actor: the next state, or the violation the step found.
struct Step {
  State next;
  const char* label;
  std::string violation;  // empty: none
};

class InterleavingModel {
 public:
  explicit InterleavingModel(const Config& c) : c_(c) {}

  // Every step enabled in `s` (empty: a final state).
  std::vector<Step> steps(const State& s) const {
    std::vector<Step> out;
    // A producer asleep on an unchanged futex word has no step until a wake.
    const bool asleep = s.ppc == P_SLEEP && s.space_signal == s.p_seen;
    if (s.ppc != P_DONE && !s.dead && !asleep) out.push_back(producer(s));
    if (s.ppc != P_DONE && !s.dead) {
      if (c_.death) {  // kill -9 at any step (the kernel drops the producer's lock)
        Step d{s, "producer dies", {}};
        d.next.dead = 1;
        out.push_back(std::move(d));
      }
    }
    if (s.dead && s.word == kWordOpen) {  // the sidecar's reclaim of the dead producer
      Step m{s, "sidecar marks FAULTED (producer died)", {}};
      m.next.word = kWordFaulted;
      out.push_back(std::move(m));
    }
    if (s.cpc != C_DONE) out.push_back(consumer(s));
    return out;
  }

  // Invariants that hold in every state.
  std::string check(const State& s) const {
    const int P = c_.pages;
    // At most P epochs live: released_epoch counts released epochs.
    if (s.active + 1 > s.released + P)
      return "more than P epochs live (active " + std::to_string(s.active) + ", released " +
             std::to_string(s.released) + ")";
    if (s.released > s.active + 1) return "released beyond the active epoch";
    // Every live epoch still owns its slot (no rebind of a slot whose epoch
    // was not released).
    for (int e = s.released; e <= s.active; ++e)
      if (s.slots[e % P].epoch != e)
        return "live epoch " + std::to_string(e) + " lost its slot to epoch " +
               std::to_string(s.slots[e % P].epoch);
    // Every descriptor the consumer may still read names a live epoch whose
    // slot is bound to it (the ABA window: [released, active]).
    for (int pos = s.head; pos < s.tail; ++pos) {
      const int e = s.ring_epoch[pos % c_.ring];
      if (e < s.released || e > s.active)
        return "descriptor " + std::to_string(pos) + " names epoch " + std::to_string(e) +
               " outside [released, active]";
    }
    // The consumer's page is not rebound while it reads it, and the payload
    // of a lease in hand does not change under it.
    const bool reading =
        s.cpc == C_BIND || s.cpc == C_LOAD_PUB || s.cpc == C_READ_CELL || s.cpc == C_GIVE_BACK;
    if (reading && s.slots[s.c_epoch % P].epoch != s.c_epoch)
      return "the slot of epoch " + std::to_string(s.c_epoch) +
             " was rebound while the consumer reads it";
    if (s.c_lease) {
      const ModelSlot& sl = s.slots[s.c_epoch % P];
      const int cell = s.c_head - s.c_first;
      if (sl.cell_epoch[cell] != s.c_epoch || sl.cell_seq[cell] != s.c_head)
        return "the payload of the lease in hand (sequence " + std::to_string(s.c_head) +
               ") was overwritten";
    }
    return {};
  }

  // Invariants of a final state (no step enabled).
  std::string check_final(const State& s) const {
    if (s.cpc != C_DONE) return "deadlock: the consumer can never finish";
    if (!s.dead && s.ppc != P_DONE) return "deadlock: the producer can never finish";
    if (s.released != s.active + 1)
      return "the stream ended with released_epoch " + std::to_string(s.released) +
             ", not active + 1 = " + std::to_string(s.active + 1);
    if (s.head != s.tail) return "the stream ended with descriptors unconsumed";
    if (s.c_outcome == kOutcomeEnd && s.head != c_.messages)
      return "clean end after " + std::to_string(s.head) + " of " + std::to_string(c_.messages) +
             " payloads";
    if (s.c_outcome == kOutcomeDied && !s.dead) return "ProducerDied but the producer lives";
    if (s.c_outcome == kOutcomeDied && s.word != kWordFaulted)
      return "ProducerDied but the channel is not FAULTED";
    return {};
  }

 private:
  Step producer(const State& s) const {
    Step st{s, "", {}};
    State& n = st.next;
    const int P = c_.pages;
    auto& slot = n.slots[n.p_active % P];
    const auto quota_ok = [&](int released) {
      return c_.bug == InjectedBug::QuotaOffByOne ? n.p_active + 1 <= released + P
                                          : n.p_active + 1 < released + P;
    };
    const auto refuse = [&](const char* why) {
      if (n.p_wrote)
        st.violation = std::string(why) + " refusal after the producer mutated the channel";
      if (!c_.blocking)
        n.ppc = P_START;  // try_send again
      else
        n.ppc = !n.p_parking                      ? P_PARK_SEEN
                : c_.bug == InjectedBug::FlagAfterRecheck ? P_PARK_FLAG
                                                  : P_SLEEP;
    };
    const auto to_write = [&] { return n.p_parking ? P_UNPARK : P_WRITE; };
    switch (s.ppc) {
      case P_START:
        st.label = "producer: start admission";
        n.p_wrote = 0;
        if (n.p_sent == c_.messages)
          n.ppc = P_FIN_SEAL;
        else
          n.ppc = n.p_sent - n.p_cached_head >= c_.ring ? P_LOAD_HEAD : P_FIT;
        break;
      case P_LOAD_HEAD:
        st.label = "producer [C'] acquire head";
        n.p_cached_head = n.head;
        if (n.p_sent - n.p_cached_head >= c_.ring)
          refuse("RingFull");
        else
          n.ppc = P_FIT;
        break;
      case P_FIT:
        st.label = "producer: fits the active page?";
        if (n.p_pub < c_.cells)
          n.ppc = to_write();
        else if (c_.bug == InjectedBug::RebindBeforeQuota || c_.bug == InjectedBug::SealBeforeQuota)
          n.ppc = P_SEAL;
        else
          n.ppc = P_QUOTA;
        break;
      case P_QUOTA:
        st.label = "producer: cached released_epoch enough?";
        if (!quota_ok(n.p_cached_rel))
          n.ppc = P_LOAD_REL;
        else
          n.ppc = c_.bug == InjectedBug::SealBeforeQuota ? P_REBIND : P_SEAL;
        break;
      case P_LOAD_REL:
        st.label = "producer [A] acquire released_epoch";
        n.p_cached_rel = n.released;
        if (!quota_ok(n.p_cached_rel))
          refuse("PageQuotaExhausted");
        else
          n.ppc = c_.bug == InjectedBug::SealBeforeQuota ? P_REBIND : P_SEAL;
        break;
      case P_SEAL:
        st.label = "producer [S] seal the active page";
        slot.state = kSealed;
        n.p_wrote = 1;
        n.ppc = c_.bug == InjectedBug::SealBeforeQuota ? P_QUOTA : P_REBIND;
        break;
      case P_REBIND: {
        st.label = "producer: rebind the successor slot (relaxed binding stores)";
        ModelSlot& next = n.slots[(n.p_active + 1) % P];
        next.epoch = static_cast<std::uint8_t>(n.p_active + 1);
        next.first = n.p_sent;
        next.published = 0;
        n.p_wrote = 1;
        n.ppc = P_OPEN;
        break;
      }
      case P_OPEN:
        st.label = "producer [B] release state = Open";
        n.slots[(n.p_active + 1) % P].state = kOpen;
        ++n.p_active;
        n.p_pub = 0;
        n.ppc = P_ACTIVE;
        break;
      case P_ACTIVE:
        st.label = "producer: store active_epoch (relaxed)";
        n.active = n.p_active;
        n.ppc = c_.bug == InjectedBug::RebindBeforeQuota ? P_CHECK_REL : to_write();
        break;
      case P_CHECK_REL:  // InjectedBug::RebindBeforeQuota: the check comes too late
        st.label = "producer [A] acquire released_epoch (after the rebind)";
        n.p_cached_rel = n.released;
        n.ppc = n.p_active < n.p_cached_rel + P ? P_WRITE : P_CHECK_REL;
        break;
      case P_WRITE:
        st.label = "producer: write payload and cell";
        slot.cell_epoch[n.p_pub] = n.p_active;
        slot.cell_seq[n.p_pub] = n.p_sent;
        n.ppc = c_.bug == InjectedBug::DescriptorBeforeCell ? P_DESC : P_PUBLISH;
        break;
      case P_PUBLISH:
        st.label = "producer [P] release published";
        slot.published = static_cast<std::uint8_t>(n.p_pub + 1);
        ++n.p_pub;
        n.ppc = c_.bug == InjectedBug::DescriptorBeforeCell ? P_START : P_DESC;
        if (c_.bug == InjectedBug::DescriptorBeforeCell) ++n.p_sent;
        break;
      case P_DESC:
        st.label = "producer: write descriptor";
        if (n.p_sent - n.head >= c_.ring) st.violation = "descriptor overwrites an unconsumed one";
        n.ring_seq[n.p_sent % c_.ring] = n.p_sent;
        n.ring_epoch[n.p_sent % c_.ring] = n.p_active;
        n.ppc = P_TAIL;
        break;
      case P_TAIL:
        st.label = "producer [R] store tail";
        n.tail = static_cast<std::uint8_t>(n.p_sent + 1);
        if (c_.bug == InjectedBug::DescriptorBeforeCell) {
          n.ppc = P_PUBLISH;
        } else {
          ++n.p_sent;
          n.ppc = P_START;
        }
        break;
      case P_PARK_SEEN:
        st.label = "producer park: acquire space_signal";
        n.p_seen = n.space_signal;
        if (c_.bug == InjectedBug::FlagAfterRecheck) {  // try again first, announce after
          n.p_parking = 1;
          n.ppc = P_START;
        } else {
          n.ppc = P_PARK_FLAG;
        }
        break;
      case P_PARK_FLAG:
        st.label = "producer park [D2'] producer_parked = 1, then try again";
        n.producer_parked = 1;
        n.p_parking = 1;
        n.ppc = c_.bug == InjectedBug::FlagAfterRecheck ? P_SLEEP : P_START;
        break;
      case P_SLEEP:
        st.label = "producer park: futex_wait returns (space_signal changed)";
        n.ppc = P_PARK_SEEN;
        break;
      case P_UNPARK:
        st.label = "producer park: producer_parked = 0";
        n.producer_parked = 0;
        n.p_parking = 0;
        n.ppc = P_WRITE;
        break;
      case P_FIN_SEAL:
        st.label = "producer finish [S] seal";
        slot.state = kSealed;
        n.ppc = P_FIN_CLEAN;
        break;
      case P_FIN_CLEAN:
        st.label = "producer finish [T] CAS OPEN -> CLEAN";
        if (n.word == kWordOpen) n.word = kWordClean;
        n.ppc = P_DONE;
        break;
      default:
        st.violation = "producer: bad pc";
    }
    return st;
  }

  Step consumer(const State& s) const {
    Step st{s, "", {}};
    State& n = st.next;
    const int P = c_.pages;
    const auto fault = [&](const std::string& why) {
      st.violation = "the consumer faults: " + why;
    };
    switch (s.cpc) {
      case C_START:
        st.label = "consumer: start receive";
        n.cpc = n.c_head == n.c_cached_tail ? C_LOAD_TAIL : C_READ_DESC;
        break;
      case C_LOAD_TAIL:
        st.label = "consumer [R'] acquire tail";
        n.c_cached_tail = n.tail;
        n.cpc = n.c_head != n.c_cached_tail ? C_READ_DESC : C_TERM;
        break;
      case C_TERM:
        st.label = "consumer [T'] acquire terminal word";
        n.cpc = n.word == kWordOpen ? C_PROBE : n.word == kWordClean ? C_CLEAN_TAIL : C_DIED_TAIL;
        break;
      case C_PROBE:
        st.label = "consumer: probe the producer's liveness";
        n.cpc = n.dead ? C_DIED_TAIL : C_START;  // alive: Empty, try again
        break;
      case C_DIED_TAIL:
        st.label = "consumer [R'] acquire tail (producer gone)";
        n.c_cached_tail = n.tail;
        n.cpc = n.c_head != n.c_cached_tail ? C_READ_DESC : C_DIED_WORD;
        break;
      case C_DIED_WORD:
        st.label = "consumer [T'] acquire terminal word (producer gone)";
        n.cpc = n.word == kWordClean ? C_CLEAN_TAIL : C_DIED_ACTIVE;
        break;
      case C_DIED_ACTIVE:
        st.label = "consumer: load active_epoch (producer gone)";
        n.c_active = n.active;
        if (n.c_active < n.c_epoch || n.c_active - n.c_epoch >= P) n.c_active = n.c_epoch;
        n.cpc = C_DIED_RAISE;
        break;
      case C_DIED_RAISE:
        st.label = "consumer [T] FAULTED (producer died)";
        n.word = kWordFaulted;
        n.cpc = C_DIED_RELEASE;
        break;
      case C_DIED_RELEASE:
        st.label = "consumer [E] release the final epoch (faulted end)";
        n.released = static_cast<std::uint8_t>(
            (c_.bug == InjectedBug::DiedReleasesOnlyItsEpoch ? n.c_epoch : n.c_active) + 1);
        n.c_outcome = kOutcomeDied;
        n.cpc = C_DONE;
        break;
      case C_CLEAN_TAIL:
        st.label = "consumer [R'] acquire tail (CLEAN)";
        n.c_cached_tail = n.tail;
        n.cpc = n.c_head != n.c_cached_tail ? C_READ_DESC : C_CLEAN_ACTIVE;
        break;
      case C_CLEAN_ACTIVE:
        st.label = "consumer: load active_epoch (CLEAN)";
        n.c_active = n.active;
        if (n.c_active < n.c_epoch || n.c_active - n.c_epoch >= P)
          fault("CLEAN with an impossible active epoch");
        n.cpc = C_CLEAN_CHECK;
        break;
      case C_CLEAN_CHECK: {
        st.label = "consumer [S'] [P'] the final page is sealed and fully committed";
        const ModelSlot& sl = n.slots[n.c_epoch % P];
        if (sl.state != kSealed) fault("CLEAN but the final page is not sealed");
        if (sl.published != n.c_committed) fault("CountShortfall at the end of the stream");
        for (int e = n.c_epoch + 1; e <= n.c_active; ++e)
          if (n.slots[e % P].epoch != e || n.slots[e % P].published != 0)
            fault("a page rotated to but never described is not empty");
        n.cpc = C_CLEAN_RELEASE;
        break;
      }
      case C_CLEAN_RELEASE:
        st.label = "consumer [E] release the final epoch (clean end)";
        n.released = static_cast<std::uint8_t>(n.c_active + 1);
        n.c_outcome = kOutcomeEnd;
        n.cpc = C_DONE;
        break;
      case C_READ_DESC:
        st.label = "consumer: read the descriptor at head";
        n.d_seq = n.ring_seq[n.c_head % c_.ring];
        n.d_epoch = n.ring_epoch[n.c_head % c_.ring];
        if (n.d_epoch == n.c_epoch)
          n.cpc = C_BIND;
        else if (n.d_epoch == n.c_epoch + 1)
          n.cpc = C_SEAM_BIND;
        else
          fault("GenerationMismatch: neither the current epoch nor the next");
        break;
      case C_SEAM_BIND: {
        st.label = "consumer: successor slot binding (seam)";
        const ModelSlot& sl = n.slots[(n.c_epoch + 1) % P];
        if (sl.epoch != n.c_epoch + 1 || sl.state == kUnbound)
          fault("GenerationMismatch: the successor slot is not bound to the next epoch");
        n.cpc = C_SEAM_SEALED;
        break;
      }
      case C_SEAM_SEALED:
        st.label = "consumer [S'] acquire: the page is sealed";
        if (n.slots[n.c_epoch % P].state != kSealed) fault("CorruptState: the page is not sealed");
        n.cpc = C_SEAM_COUNT;
        break;
      case C_SEAM_COUNT: {
        st.label = "consumer [P'] committed == published at the seam";
        const ModelSlot& sl = n.slots[n.c_epoch % P];
        if (sl.published != n.c_committed) fault("CountShortfall at the seam");
        if (n.slots[(n.c_epoch + 1) % P].first != n.c_first + sl.published)
          fault("SequenceGap at the seam");
        n.cpc = C_SEAM_RELEASE;
        break;
      }
      case C_SEAM_RELEASE:
        st.label = "consumer [E] store released_epoch (seam)";
        if (c_.bug != InjectedBug::ReleaseBeforeGiveBack)
          n.released = static_cast<std::uint8_t>(n.c_epoch + 1);
        ++n.c_epoch;
        n.c_first = n.slots[n.c_epoch % P].first;
        n.c_committed = 0;
        n.c_cached_pub = 0;
        n.c_ret = C_BIND;
        n.cpc = c_.blocking ? C_WAKE_CHECK : C_BIND;
        break;
      case C_BIND:
        st.label = "consumer: slot still bound to the epoch, sequence == head";
        if (n.slots[n.c_epoch % P].epoch != n.c_epoch) fault("GenerationMismatch: slot rebound");
        if (n.d_seq != n.c_head) fault("SequenceGap");
        n.cpc = n.d_seq - n.c_first >= n.c_cached_pub ? C_LOAD_PUB : C_READ_CELL;
        break;
      case C_LOAD_PUB:
        st.label = "consumer [P'] acquire published";
        n.c_cached_pub = n.slots[n.c_epoch % P].published;
        if (n.d_seq - n.c_first >= n.c_cached_pub)
          fault("DescriptorOutOfBounds: the descriptor names an unpublished cell");
        n.cpc = C_READ_CELL;
        break;
      case C_READ_CELL: {
        st.label = "consumer: read cell and payload (lease taken)";
        const ModelSlot& sl = n.slots[n.c_epoch % P];
        const int cell = n.d_seq - n.c_first;
        if (sl.cell_epoch[cell] != n.c_epoch || sl.cell_seq[cell] != n.d_seq)
          fault("the cell holds another payload than the descriptor's");
        n.c_lease = 1;
        if (c_.bug == InjectedBug::ReleaseBeforeGiveBack && cell + 1 == c_.cells)
          n.released = static_cast<std::uint8_t>(n.c_epoch + 1);  // too early: lease in hand
        n.cpc = C_GIVE_BACK;
        break;
      }
      case C_GIVE_BACK:
        st.label = "consumer [C] store head (lease given back)";
        n.c_lease = 0;
        ++n.c_head;
        ++n.c_committed;
        n.head = n.c_head;
        n.c_ret = C_START;
        n.cpc = c_.blocking ? C_WAKE_CHECK : C_START;
        break;
      case C_WAKE_CHECK:
        st.label = "consumer [D2] load producer_parked";
        n.cpc = n.producer_parked != 0 ? std::uint8_t{C_WAKE} : n.c_ret;
        break;
      case C_WAKE:
        st.label = "consumer: producer_parked = 0, space_signal += 1, futex wake";
        if (n.producer_parked) {
          n.producer_parked = 0;
          ++n.space_signal;
        }
        n.cpc = n.c_ret;
        break;
      default:
        st.violation = "consumer: bad pc";
    }
    return st;
  }

  Config c_;
};

struct Report {
  std::uint64_t states = 0;
  std::uint64_t transitions = 0;
  std::uint64_t finals = 0;
  std::string violation;           // empty: every interleaving satisfies every invariant
  std::vector<std::string> trace;  // the interleaving that leads to it
};

// Depth-first search over every interleaving (states deduplicated), then a
// progress check: from every reachable state some final state is reachable
// (no interleaving can keep the producer refused, or the consumer waiting, forever).
Report explore(const Config& c, std::uint64_t max_states = 2'000'000) {
  const InterleavingModel m(c);
  Report r;
  std::unordered_map<std::string, std::uint32_t> index;
  std::vector<State> states;
  std::vector<std::pair<std::uint32_t, const char*>> parent;  // (state, label) it came from
  std::vector<std::vector<std::uint32_t>> edges;
  std::vector<bool> final_state;
  const auto trace_to = [&](std::uint32_t i, const char* last) {
    std::vector<std::string> t;
    if (last != nullptr) t.emplace_back(last);
    while (i != 0) {
      t.push_back(parent[i].second);
      i = parent[i].first;
    }
    return std::vector<std::string>(t.rbegin(), t.rend());
  };
  const auto add = [&](const State& s, std::uint32_t from, const char* label) {
    auto [it, fresh] = index.try_emplace(key(s), static_cast<std::uint32_t>(states.size()));
    if (fresh) {
      states.push_back(s);
      parent.emplace_back(from, label);
      edges.emplace_back();
      final_state.push_back(false);
    }
    return std::pair{it->second, fresh};
  };
  add(initial(c), 0, "initial");
  std::vector<std::uint32_t> stack{0};
  while (!stack.empty()) {
    const std::uint32_t i = stack.back();
    stack.pop_back();
    const State s = states[i];
    if (auto v = m.check(s); !v.empty()) {
      r.violation = v;
      r.trace = trace_to(i, nullptr);
      return r;
    }
    const std::vector<Step> next = m.steps(s);
    if (next.empty()) {
      ++r.finals;
      final_state[i] = true;
      if (auto v = m.check_final(s); !v.empty()) {
        r.violation = v;
        r.trace = trace_to(i, nullptr);
        return r;
      }
    }
    for (const Step& st : next) {
      ++r.transitions;
      if (!st.violation.empty()) {
        r.violation = st.violation;
        r.trace = trace_to(i, st.label);
        return r;
      }
      const auto [j, fresh] = add(st.next, i, st.label);
      edges[i].push_back(j);
      if (fresh) stack.push_back(j);
      if (states.size() > max_states) {
        r.violation = "state space larger than the bound";
        return r;
      }
    }
  }
  r.states = states.size();
  // Progress: backwards from the final states.
  std::vector<std::vector<std::uint32_t>> back(states.size());
  for (std::uint32_t i = 0; i < states.size(); ++i)
    for (std::uint32_t j : edges[i]) back[j].push_back(i);
  std::vector<bool> can_finish(states.size(), false);
  std::vector<std::uint32_t> work;
  for (std::uint32_t i = 0; i < states.size(); ++i)
    if (final_state[i]) {
      can_finish[i] = true;
      work.push_back(i);
    }
  while (!work.empty()) {
    const std::uint32_t j = work.back();
    work.pop_back();
    for (std::uint32_t i : back[j])
      if (!can_finish[i]) {
        can_finish[i] = true;
        work.push_back(i);
      }
  }
  for (std::uint32_t i = 0; i < states.size(); ++i)
    if (!can_finish[i]) {
      r.violation = "livelock: no interleaving from here ever ends the stream";
      r.trace = trace_to(i, nullptr);
      return r;
    }
  return r;
}

std::string describe(const Config& c) {
  return "P=" + std::to_string(c.pages) + " cells=" + std::to_string(c.cells) +
         " ring=" + std::to_string(c.ring) + " messages=" + std::to_string(c.messages) +
         (c.death ? " with producer death" : "") + (c.blocking ? " blocking" : "") +
         " bug=" + std::string(bug_name(c.bug));
}

std::string joined_trace(const std::vector<std::string>& trace) {
  std::string s;
  for (const std::string& t : trace) s += "\n  " + t;
  return s;
}

// The configurations the suite explores: P = 2 and 3, one and two cells per
// page (rotation by every payload, and seams inside a ring wrap), a ring
// smaller than the pages (RingFull), a few messages so that every slot is
// reused, with and without the producer dying at any step.
const std::vector<Config>& configs() {
  static const std::vector<Config> all{
      {.pages = 2, .cells = 1, .ring = 2, .messages = 8, .death = false},
      {.pages = 2, .cells = 1, .ring = 4, .messages = 8, .death = false},
      {.pages = 2, .cells = 2, .ring = 4, .messages = 8, .death = false},
      {.pages = 3, .cells = 1, .ring = 4, .messages = 8, .death = false},
      {.pages = 3, .cells = 2, .ring = 4, .messages = 8, .death = false},
      {.pages = 2, .cells = 1, .ring = 4, .messages = 6, .death = true},
      {.pages = 2, .cells = 2, .ring = 4, .messages = 6, .death = true},
      {.pages = 3, .cells = 1, .ring = 4, .messages = 6, .death = true},
      {.pages = 3, .cells = 2, .ring = 4, .messages = 6, .death = true},
      {.pages = 2, .cells = 1, .ring = 2, .messages = 6, .death = false, .blocking = true},
      {.pages = 2, .cells = 2, .ring = 4, .messages = 6, .death = false, .blocking = true},
      {.pages = 3, .cells = 1, .ring = 4, .messages = 6, .death = false, .blocking = true},
      {.pages = 3, .cells = 2, .ring = 4, .messages = 6, .death = true, .blocking = true},
  };
  return all;
}

TEST(ChannelInterleavingTest, EveryInterleavingKeepsTheAdrInvariants) {
  for (const Config& c : configs()) {
    const Report r = explore(c);
    EXPECT_TRUE(r.violation.empty()) << describe(c) << ": " << r.violation << joined_trace(r.trace);
    EXPECT_GT(r.finals, 0u) << describe(c);
    std::printf("[ model    ] %s: %llu states, %llu transitions, %llu final states\n",
                describe(c).c_str(), static_cast<unsigned long long>(r.states),
                static_cast<unsigned long long>(r.transitions),
                static_cast<unsigned long long>(r.finals));
  }
}

// The checker can fail: each injected protocol bug is found, with the
// interleaving that shows it.
struct Injected {
  InjectedBug bug;
  bool death;
  bool blocking;
  std::vector<const char*> expect;  // the violation names one of these
};

class ChannelInterleavingBugTest : public ::testing::TestWithParam<Injected> {};

TEST_P(ChannelInterleavingBugTest, CheckerFindsAViolatingInterleaving) {
  const Injected in = GetParam();
  bool found = false;
  for (const std::uint8_t pages : {std::uint8_t{2}, std::uint8_t{3}}) {
    const Config c{.pages = pages,
                   .cells = 1,
                   .ring = static_cast<std::uint8_t>(in.blocking ? 2 : 4),
                   .messages = 5,
                   .death = in.death,
                   .blocking = in.blocking,
                   .bug = in.bug};
    const Report r = explore(c);
    ASSERT_FALSE(r.violation.empty()) << describe(c) << ": no violation found";
    bool named = false;
    for (const char* e : in.expect) named = named || r.violation.find(e) != std::string::npos;
    EXPECT_TRUE(named) << describe(c) << ": " << r.violation << joined_trace(r.trace);
    found = true;
    // The last steps of the interleaving (all of them with SHM_MODEL_TRACE=1).
    const bool all = std::getenv("SHM_MODEL_TRACE") != nullptr;
    const std::size_t from = all || r.trace.size() < 12 ? 0 : r.trace.size() - 12;
    std::printf(
        "[ model    ] %s: %s, after %zu steps; the last ones:%s\n", describe(c).c_str(),
        r.violation.c_str(), r.trace.size(),
        joined_trace({r.trace.begin() + static_cast<std::ptrdiff_t>(from), r.trace.end()}).c_str());
  }
  EXPECT_TRUE(found);
}

INSTANTIATE_TEST_SUITE_P(
    InjectedBugs, ChannelInterleavingBugTest,
    ::testing::Values(
        Injected{InjectedBug::QuotaOffByOne, false, false, {"lost its slot", "more than P epochs live"}},
        Injected{
            InjectedBug::RebindBeforeQuota, false, false, {"lost its slot", "more than P epochs live"}},
        Injected{
            InjectedBug::SealBeforeQuota, false, false, {"refusal after the producer mutated the channel"}},
        Injected{InjectedBug::ReleaseBeforeGiveBack,
                 false,
                 false,
                 {"rebound while the consumer reads it", "was overwritten",
                  "outside [released, active]"}},
        Injected{InjectedBug::DescriptorBeforeCell, false, false, {"unpublished cell"}},
        Injected{InjectedBug::DiedReleasesOnlyItsEpoch, true, false, {"not active + 1"}},
        Injected{InjectedBug::FlagAfterRecheck, false, true, {"livelock", "deadlock"}}),
    [](const ::testing::TestParamInfo<Injected>& p) {
      std::string s(bug_name(p.param.bug));
      for (char& ch : s)
        if (ch == ' ' || ch == '\'' || ch == '-' || ch == ',') ch = '_';
      return s;
    });

}  // namespace
}  // namespace shm
