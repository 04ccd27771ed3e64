/// @file
/// WaitSet: one thread waits on many endpoints at once and learns which are
/// ready and why (docs/waitset.md).
///
/// A member is a handle of this process (a ring or channel consumer or
/// producer, an MPMC ring's consumer or producer, a fanout's consumer, a
/// topic subscriber, a relay reader or writer, an egress's transport or
/// sender) with a user tag. wait(timeout) parks on
/// every member's futex word with one futex_waitv system call (Linux 5.16 and newer) and returns
/// the tags that are ready and the reason. The set waits as each member's own
/// blocking call does: it announces itself in the member's parked flag (so
/// the peer's publish wakes it), re-checks, then sleeps; the peer's side pays
/// nothing more than it pays for a parked blocking call, and nothing at all
/// when no set (and no blocking call) waits on it.
///
/// fd() is a file descriptor (an eventfd) that is readable when wait() has
/// something to say: put it in epoll, poll, Boost.Asio or libuv, and call
/// wait() with a zero timeout when it is readable.
#pragma once

#include "shm/error.hpp"
#include "shm/platform/endpoint_guard.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

namespace shm {

class RingConsumer;
class RingProducer;
class ChannelConsumer;
class ChannelProducer;
class TopicSubscriber;
class RelayReader;
class RelayWriter;
class Egress;
class EgressTransport;
class MpmcConsumer;
class MpmcProducer;
class FanoutConsumer;

/// Why a member is ready.
enum class ReadyReason : std::uint8_t {
  Data,      ///< a consumer has something to take (try_peek / try_receive will return it)
  Room,      ///< a producer has room for the payload size given at attach
  PeerDied,  ///< the other side's process died (nothing to take, no room to come)
  Faulted,   ///< the structure is faulted or corrupt: the member's next call says how
  Closed,    ///< the stream ended cleanly (a channel's producer finished)
};
/// The enumerator's name, for logs and tool output.
[[nodiscard]] std::string_view to_string(ReadyReason v) noexcept;

/// How a wait() ended.
enum class WaitStatus : std::uint8_t {
  Ready,     ///< at least one member is ready (WaitOutcome::ready)
  TimedOut,  ///< the timeout passed with no member ready
  Closed,    ///< close() was called (from any thread) or the set is being destroyed
};
/// The enumerator's name, for logs and tool output.
[[nodiscard]] std::string_view to_string(WaitStatus v) noexcept;

/// One ready member.
struct ReadyEvent {
  std::uint64_t tag = 0;                   ///< the tag given at attach
  ReadyReason reason = ReadyReason::Data;  ///< why
};

/// What wait() found. `ready` points into the set: valid until the next
/// call on the set (and never after the set is destroyed).
struct WaitOutcome {
  WaitStatus status = WaitStatus::TimedOut;  ///< how the wait ended
  std::span<const ReadyEvent> ready;         ///< the ready members (status Ready), in attach order
};

/// Counters of a set (snapshot()).
struct WaitSetSnapshot {
  std::size_t members = 0;       ///< attached now
  std::size_t max_members = 0;   ///< WaitSetOptions::max_members
  std::uint64_t waits = 0;       ///< wait() calls
  std::uint64_t parks = 0;       ///< futex_waitv sleeps (one per round that found nothing)
  std::uint64_t probes = 0;      ///< peer-liveness probes (one per member that has a peer)
  bool fd_active = false;        ///< fd() was called: the helper thread runs
  std::uint64_t fd_signals = 0;  ///< times the helper thread made fd() readable
};

/// Options of WaitSet::make().
struct WaitSetOptions {
  /// Most members: 1 to kMaxMembers.
  std::size_t max_members = 64;
  /// How often a waiting set asks the kernel whether members' peers are alive
  /// (a dead peer never wakes anyone): 1 ms to 10 s.
  std::chrono::milliseconds liveness_interval{50};
};

/// One thread waiting on many endpoints. Process-local (not a segment):
/// made by make(), move-only, used by one thread at a time (checked: a
/// second thread entering aborts), except close(), which any thread may call.
class WaitSet {
 public:
  /// The most members of one set: futex_waitv takes 128 words, one is the set's own.
  static constexpr std::size_t kMaxMembers = 127;

  /// A set with no members. Errc::SystemError naming the kernel when the
  /// kernel has no futex_waitv (Linux older than 5.16, or a seccomp filter
  /// refusing it): libshm does not fall back to polling. InvalidArgument for
  /// options out of range.
  [[nodiscard]] static Result<WaitSet> make(const WaitSetOptions& options = {});

  /// Takes over `other`'s members, helper thread and descriptor; `other` is left empty
  /// (its calls return InvalidArgument).
  WaitSet(WaitSet&& other) noexcept;
  /// Closes this set (as the destructor does), then takes over `other`'s.
  WaitSet& operator=(WaitSet&& other) noexcept;
  WaitSet(const WaitSet&) = delete;             ///< one owner
  WaitSet& operator=(const WaitSet&) = delete;  ///< one owner
  /// Closes the set: a wait() in another thread returns Closed, and the
  /// destructor returns once it has left. The handles are untouched (a
  /// parked flag the set left up costs its waker one needless wake).
  ~WaitSet();

  /// @name Members
  /// A handle is attached to at most one set, and must stay where it is (not
  /// moved, not destroyed) until it is detached; tags are the caller's and
  /// must be distinct within a set (InvalidArgument otherwise, as for a full
  /// set). Producers name the payload size they mean to write: Room means a
  /// payload of that size fits now (TooLarge beyond the structure's limit).
  ///@{

  /// A ring consumer: Data when try_peek() / try_pop() would return a record.
  [[nodiscard]] Result<void> attach(RingConsumer& consumer, std::uint64_t tag);
  /// A ring producer: Room when a record of `payload_bytes` fits now.
  [[nodiscard]] Result<void> attach(RingProducer& producer, std::uint64_t tag,
                                    std::size_t payload_bytes);
  /// A channel consumer: Data when try_receive() would return a payload,
  /// Closed at the end of the stream, PeerDied when the producer died.
  [[nodiscard]] Result<void> attach(ChannelConsumer& consumer, std::uint64_t tag);
  /// A channel producer: Room when try_send() of `payload_bytes` would be admitted now.
  [[nodiscard]] Result<void> attach(ChannelProducer& producer, std::uint64_t tag,
                                    std::size_t payload_bytes);
  /// A topic subscriber: Data when its queue holds a sample (try_receive()
  /// returns it, or HeldLimit while this subscriber holds max_held samples),
  /// PeerDied when the publisher's process died with nothing queued (until a
  /// new publisher attaches), Faulted when its record was dropped or scribbled.
  [[nodiscard]] Result<void> attach(TopicSubscriber& subscriber, std::uint64_t tag);
  /// A relay reader: Data when take() would return something (an entry
  /// pending outside a seal in flight, a cold page, a summary being
  /// delivered), Faulted when the relay is faulted.
  [[nodiscard]] Result<void> attach(RelayReader& reader, std::uint64_t tag);
  /// A relay writer: Room when a write that needs a new entry would be
  /// appended now, not met by the overflow action (the relay is not full and
  /// an entry is free; a write that merges into an open key never waits);
  /// PeerDied when the reader's process died with no room; Faulted when the
  /// relay is faulted. `value_bytes`: the largest value it means to write
  /// (TooLarge beyond the relay's value size).
  [[nodiscard]] Result<void> attach(RelayWriter& writer, std::uint64_t tag,
                                    std::size_t value_bytes);
  /// An egress transport: Data when a claim would return a record (a parked
  /// record counts once its backoff has elapsed: the set wakes for its due
  /// time), Closed once the transport is fenced (a newer transport took
  /// over: its claims answer StaleGeneration), Faulted when the egress is.
  [[nodiscard]] Result<void> attach(EgressTransport& transport, std::uint64_t tag);
  /// An egress sender (a producer's Egress handle): Room when an enqueue of
  /// `payload_bytes` would be admitted now (not Full; TooLarge beyond
  /// slot_bytes), PeerDied when the transport's process died with the pool
  /// full, Faulted when the egress is.
  [[nodiscard]] Result<void> attach(Egress& sender, std::uint64_t tag, std::size_t payload_bytes);
  /// An MPMC ring consumer: Data when try_pop() / try_peek() / try_take()
  /// would claim an item (a published item at the head, past any
  /// tombstones, or an orphan to adopt); Faulted when a cell it would read is
  /// impossible (its next call reports Corrupt). No PeerDied: the ring has
  /// any number of producers; a producer killed mid-push is repaired by the
  /// set's own look (after mpmc::kStuckGraceNs, as a blocked pop repairs it),
  /// and the items behind it then report Data. The set and a blocking pop of
  /// another consumer handle compete as consumers do: a push wakes one of them.
  [[nodiscard]] Result<void> attach(MpmcConsumer& consumer, std::uint64_t tag);
  /// An MPMC ring producer: Room when try_push() / try_reserve() would claim a
  /// cell now; Faulted as above. A consumer killed holding a cell is repaired
  /// as above, and the producer then reports Room. `payload_bytes`: the
  /// largest payload it means to push (TooLarge beyond slot_bytes()).
  [[nodiscard]] Result<void> attach(MpmcProducer& producer, std::uint64_t tag,
                                    std::size_t payload_bytes);
  /// A priority fanout consumer: Data when try_pop_highest() /
  /// try_take_highest() would claim an item from some priority; Faulted when
  /// a ring or the bitmap is impossible. The set's look does what a pop does
  /// on its way: it clears a stale bit, resurfaces an item whose submitter
  /// died before setting its bit, and repairs a cell held by a dead handle.
  [[nodiscard]] Result<void> attach(FanoutConsumer& consumer, std::uint64_t tag);
  /// Removes the member with `tag` (NotFound when there is none) and clears
  /// the parked flag the set may have left in its structure.
  [[nodiscard]] Result<void> detach(std::uint64_t tag);
  /// Members attached now.
  [[nodiscard]] std::size_t size() const noexcept;
  ///@}

  /// Returns the members that are ready now; when none is, spins briefly,
  /// then parks on all their wait words at once until one becomes ready or
  /// `timeout` passes (TimedOut, not an error). Level-triggered: a member
  /// stays ready until its handle takes the data / uses the room (PeerDied,
  /// Faulted and Closed until it is detached). With a zero timeout it never
  /// sleeps. Closed after close().
  [[nodiscard]] Result<WaitOutcome> wait(std::chrono::nanoseconds timeout);

  /// A file descriptor that is readable when wait() would return at once:
  /// when readable, call wait() (a zero timeout is enough) and handle what it
  /// returns; a wait() that returns TimedOut re-arms it. It may be readable
  /// with nothing ready (a peer's wake that was not for new data, such as a
  /// producer's attach): wait() then returns TimedOut and re-arms. The first call
  /// starts a helper thread that sleeps in futex_waitv for the set (its cost:
  /// docs/waitset.md); the descriptor belongs to the set (do not close it).
  [[nodiscard]] Result<int> fd();

  /// Thread-safe: a wait() in progress (in any thread) returns Closed, and so
  /// does every later one.
  void close() noexcept;

  /// Counters now (never blocks).
  [[nodiscard]] WaitSetSnapshot snapshot() const noexcept;

  struct State;  ///< private: the set's state (pinned in memory)

 private:
  explicit WaitSet(std::unique_ptr<State> state) noexcept;
  std::unique_ptr<State> state_;
};

}  // namespace shm
