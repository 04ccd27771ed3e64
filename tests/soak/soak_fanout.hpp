// The fanout block of scripts/soak.sh (test_soak_fanout_producer,
// test_soak_fanout_consumer, test_soak_fanout_verify): one PriorityFanout
// (K MpmcRings + the bitmap) shared by N producer and M consumer processes.
//
// Items are shm::test::FanoutItem (fanout_items.hpp): (producer, seq,
// priority) and a body derived from them; the priority is a function of
// (producer, seq), so a consumer can tell an item routed to the wrong ring.
//
// Producer journal (soak_common.hpp's JournalEntry, first == last == the
// sequence number): before submitting s the producer journals s; a restarted
// producer continues at s + 1. So s is the only item "in doubt" at a producer
// kill: a push killed before its claim never happened, one killed between
// claim and publish is repaired into a tombstone (MpmcRing: "claimed,
// unpublished" cells are skipped), one that completed is published once.
// Never repeated.
//
// Consumers drain at-least-once: take_highest, log, release (docs/fanout.md,
// "Two drain modes"). An item is consumed when it is released; a consumer
// killed between its take and its release leaves the item in its ring cell,
// the ring's repair marks it an orphan and the next consumer of that ring
// takes it again (before newer items of that ring, so out of submission
// order). Nothing is lost; an item is delivered twice only when the killed
// consumer had logged it before it died (it was in hand).
//
// Logs (one write(2) per line group; formats common to every kind in soak_logs.hpp):
//   producer:  S <pid> <realtime_ns> <next_seq> <in_doubt_seq|->
//              F <realtime_ns>                first item submitted
//              X <next_seq>                   clean stop: 0..next_seq-1 submitted
//              V <message>
//   consumer:  S <pid> <realtime_ns>
//              H <owner_pid> idle|taking|held [<producer> <seq> <priority>]
//                                             what the hand file (below) held
//                                             when this incarnation took it
//                                             over from incarnation owner_pid;
//                                             the item only when intact
//              I <producer> <seq> <priority>  one item, logged after its take
//                                             and before its release: a kill
//                                             in between delivers it again
//                                             (the hand then names it)
//              L <lost_pops ring 0> ... <ring K-1>  the rings' counters at the
//                                             clean stop (before X); 0 when
//                                             every drain is a take
//              F <realtime_ns>                first item of this incarnation
//              C <reason> <producer> <seq> <priority>  an item failed its checks
//              X <items_this_incarnation>     drained and stopped (SIGTERM)
//              V <message>
//
// Hand file (consumer, --hand, default <log>.hand): a MAP_SHARED page that
// records what the consumer has taken and not released, and survives a
// kill -9. Per item: zero the item, state = taking, take, copy the item into
// the hand, state = held, log "I", release, state = idle. A compiler fence
// orders each step (a kill stops the process between instructions; what it
// stored is in the page cache). So a killed consumer's hand shows "held X"
// (X taken and maybe logged, maybe released: X may be delivered again),
// "taking X" (X taken, not logged: its next delivery is its first, perhaps
// out of order), "taking" with no intact item (died inside the take: an
// item it had claimed comes back as an orphan, unnamed) or "idle".
#pragma once

#include "helpers/fanout/fanout_items.hpp"
#include "soak_common.hpp"

#include "shm/fanout/priority_fanout.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <cstring>
#include <span>
#include <string>

namespace soak {

// Opens the fanout, creating it (ephemeral) when it does not exist yet. Both
// sides may create: whoever comes first. Retries while another process is
// creating it (rings present, bitmap not yet) and while attachment slots of
// dead handles wait for reclaim. Handle: shm::FanoutProducer or FanoutConsumer.
template <class Handle>
shm::Result<Handle> attach_fanout(const std::string& base, const shm::FanoutParams& params) {
  return open_or_create(
      [&] { return Handle::open(base, params); },
      [&](const shm::CreateOptions& co) { return Handle::create(base, params, co); });
}

enum class HandState : std::uint32_t { Idle = 0, Taking = 1, Held = 2 };

inline const char* to_string(HandState s) {
  switch (s) {
    case HandState::Taking:
      return "taking";
    case HandState::Held:
      return "held";
    case HandState::Idle:
      break;
  }
  return "idle";
}

struct Hand {
  std::atomic<std::int64_t> owner;  // pid of the incarnation using it (0: never used)
  std::atomic<HandState> state;
  std::uint32_t reserved;
  shm::test::FanoutItem item;  // a copy of the item taken
};

// The consumer's hand file, mapped shared (it outlives the process).
class HandFile {
 public:
  explicit HandFile(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    if (::ftruncate(fd, sizeof(Hand)) == 0) {
      void* p = ::mmap(nullptr, sizeof(Hand), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) hand_ = static_cast<Hand*>(p);
    }
    ::close(fd);
  }
  HandFile(const HandFile&) = delete;
  HandFile& operator=(const HandFile&) = delete;
  ~HandFile() {
    if (hand_ != nullptr) ::munmap(hand_, sizeof(Hand));
  }
  [[nodiscard]] bool ok() const noexcept { return hand_ != nullptr; }
  [[nodiscard]] Hand& operator*() const noexcept { return *hand_; }
  [[nodiscard]] Hand* operator->() const noexcept { return hand_; }

  // "H ..." for the log: what the previous owner left (empty when none).
  [[nodiscard]] std::string describe() const {
    const std::int64_t owner = hand_->owner.load(std::memory_order_relaxed);
    if (owner == 0) return {};
    const HandState st = hand_->state.load(std::memory_order_relaxed);
    const shm::test::FanoutItem& it = hand_->item;
    if (!shm::test::item_intact(it)) return fmt::format("H {} {}\n", owner, to_string(st));
    return fmt::format("H {} {} {} {} {}\n", owner, to_string(st), it.producer, it.seq,
                       it.priority);
  }
  // Takes the hand over (after its previous state was logged).
  void take_over() const noexcept {
    hand_->state.store(HandState::Idle, std::memory_order_relaxed);
    hand_->item = {};
    std::atomic_signal_fence(std::memory_order_seq_cst);
    hand_->owner.store(::getpid(), std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);
  }
  // Before a take.
  void before_take() const noexcept {
    hand_->item = {};
    std::atomic_signal_fence(std::memory_order_seq_cst);
    hand_->state.store(HandState::Taking, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);
  }
  // After a take returned an item: copies it in (at most sizeof(FanoutItem)
  // bytes; a short or long payload fails the consumer's size check), then
  // "held" (before the item is logged).
  void took(std::span<const std::byte> payload) const noexcept {
    std::memcpy(&hand_->item, payload.data(), std::min(payload.size(), sizeof hand_->item));
    std::atomic_signal_fence(std::memory_order_seq_cst);
    hand_->state.store(HandState::Held, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);
  }
  // After the release: nothing in hand.
  void released() const noexcept {
    std::atomic_signal_fence(std::memory_order_seq_cst);
    hand_->state.store(HandState::Idle, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);
  }

 private:
  Hand* hand_ = nullptr;
};

}  // namespace soak
