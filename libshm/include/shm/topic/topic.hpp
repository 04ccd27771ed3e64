/// @file
/// Topic: zero-copy publish-subscribe. One TopicPublisher (an exclusive role,
/// taken over when its holder is dead) loans chunks of the segment's pool,
/// writes a sample in place and publishes it: the chunk's index goes to every
/// subscriber's queue, nothing is copied. Up to 256 TopicSubscribers (the
/// shared attachment slots) each receive every sample as a read-only view
/// that stays valid until the Sample is dropped; the chunk returns to the
/// pool when its last holder drops it.
///
/// Slow subscribers. Each subscriber chooses at attach: TopicOverflow::DropOldest
/// (the publisher never waits; the subscriber's oldest queued sample is
/// dropped and counted in missed()) or TopicOverflow::Block (try_publish
/// says Full while its queue is full; publish(timeout) waits for room).
///
/// Late joiners receive the last `history` samples when they attach.
///
/// Crashes. Loans, queued and held samples are recorded per attachment slot
/// in the segment; a dead holder's chunks return to the pool when the next
/// handle attaches, when a locker finds the mutex's owner died, and by the
/// kind's reclaim (shmctl reclaim, the sidecar). docs/topic.md has the table.
///
/// Threads. A handle is used by one thread at a time; its samples must be
/// dropped before the handle (a Sample outliving its handle aborts).
#pragma once

#include "shm/error.hpp"
#include "shm/platform/endpoint_guard.hpp"
#include "shm/segment/segment.hpp"
#include "shm/topic/layout.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace shm {

/// What a subscriber's full queue does to the publisher (chosen per subscriber).
enum class TopicOverflow : std::uint8_t {
  DropOldest = 1,  ///< the oldest queued sample is dropped and counted in missed()
  Block = 2,       ///< the publisher waits (publish(timeout)) or hears Full (try_publish)
};
/// The enumerator's name, for logs and tool output.
[[nodiscard]] std::string_view to_string(TopicOverflow v) noexcept;

/// What a publish did.
enum class PublishStatus : std::uint8_t {
  Published = 1,  ///< every subscriber's queue has the sample
  Full = 2,  ///< a Block subscriber's queue is full: nothing changed, the caller keeps the sample
};
/// The enumerator's name, for logs and tool output.
[[nodiscard]] std::string_view to_string(PublishStatus v) noexcept;

/// The answer of try_publish / publish.
struct PublishOutcome {
  PublishStatus status = PublishStatus::Full;  ///< what happened
  std::uint64_t seq = 0;                       ///< the sample's sequence number (Published)
  std::uint32_t subscribers = 0;               ///< queues it went to (Published)
  std::uint32_t dropped = 0;                   ///< DropOldest queues that lost their oldest
};

/// What a topic handle's snapshot() reads (relaxed loads, never blocking).
struct TopicSnapshot {
  std::uint64_t published = 0;      ///< samples published, every incarnation
  std::uint64_t next_seq = 0;       ///< sequence number of the next publish
  std::uint32_t incarnation = 0;    ///< the publisher's incarnation (+1 per attach)
  bool publisher_attached = false;  ///< a publisher's record is active
  std::uint64_t chunks = 0;         ///< the pool's size
  std::uint64_t free_chunks = 0;    ///< chunks in the pool now
  std::uint32_t subscribers = 0;    ///< active subscriber records
  std::uint64_t dropped = 0;        ///< entries dropped from DropOldest queues, all subscribers
  // This subscriber's (zero in a publisher's snapshot):
  std::uint64_t queued = 0;    ///< samples waiting in its queue
  std::uint64_t held = 0;      ///< samples it holds
  std::uint64_t received = 0;  ///< samples it received
  std::uint64_t missed = 0;    ///< samples dropped from its queue (DropOldest)
};

/// An event of the topic's ring (publisher_gone, subscriber_gone, repaired).
using TopicEvent = topic::EventRecord;

namespace topic::detail {
struct Core;
}  // namespace topic::detail
namespace detail {
struct WaitSetAccess;  // the WaitSet reads a member's state (shm/waitset/waitset.hpp)
}  // namespace detail

/// A chunk loaned by the publisher: write the sample in bytes(), then
/// publish it. Dropped unpublished, the chunk returns to the pool.
class LoanedSample {
 public:
  LoanedSample() = default;
  /// Takes over the other's chunk; `other` is left empty.
  LoanedSample(LoanedSample&& other) noexcept { *this = std::move(other); }
  /// Gives this one's chunk back, then takes over the other's.
  LoanedSample& operator=(LoanedSample&& other) noexcept;
  LoanedSample(const LoanedSample&) = delete;
  LoanedSample& operator=(const LoanedSample&) = delete;
  ~LoanedSample() { reset(); }

  /// The writable sample, in the shared chunk.
  [[nodiscard]] std::span<std::byte> bytes() const noexcept { return bytes_; }
  /// Its size, as loaned.
  [[nodiscard]] std::size_t size() const noexcept { return bytes_.size(); }
  /// False once published, dropped or moved from.
  [[nodiscard]] explicit operator bool() const noexcept { return core_ != nullptr; }
  /// Returns the chunk to the pool unpublished (no-op when empty).
  void reset() noexcept;

 private:
  friend class TopicPublisher;
  topic::detail::Core* core_ = nullptr;
  std::uint32_t chunk_ = 0;
  std::uint32_t loan_ = 0;
  std::span<std::byte> bytes_;
};

/// A received sample: a read-only view into the shared chunk, valid until
/// the Sample is dropped or release()d.
class Sample {
 public:
  Sample() = default;
  /// Takes over the other's chunk; `other` is left empty.
  Sample(Sample&& other) noexcept { *this = std::move(other); }
  /// Gives this one's chunk back, then takes over the other's.
  Sample& operator=(Sample&& other) noexcept;
  Sample(const Sample&) = delete;
  Sample& operator=(const Sample&) = delete;
  ~Sample() { release(); }

  /// The sample's bytes.
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return bytes_; }
  /// Its size.
  [[nodiscard]] std::size_t size() const noexcept { return bytes_.size(); }
  /// Its sequence number (per topic, over every publisher incarnation).
  [[nodiscard]] std::uint64_t seq() const noexcept { return seq_; }
  /// The publisher incarnation that published it (+1 each time a publisher attaches).
  [[nodiscard]] std::uint32_t incarnation() const noexcept { return incarnation_; }
  /// False once released or moved from.
  [[nodiscard]] explicit operator bool() const noexcept { return core_ != nullptr; }
  /// Gives the sample back (its chunk returns to the pool when nobody else holds it).
  void release() noexcept;

 private:
  friend class TopicSubscriber;
  topic::detail::Core* core_ = nullptr;
  std::uint32_t chunk_ = 0;
  std::uint32_t held_ = 0;
  std::uint32_t incarnation_ = 0;
  std::uint64_t seq_ = 0;
  std::span<const std::byte> bytes_;
};

/// The setup helpers (docs/idioms.md, "Lifecycle"): make or open a topic
/// segment without attaching.
[[nodiscard]] Result<Segment> create_topic(std::string_view name, const TopicParams& params,
                                           const CreateOptions& options = {});
/// Opens a topic segment (no attachment), checking the parameters of `expected` (0: any).
[[nodiscard]] Result<Segment> open_topic(std::string_view name, const TopicParams& expected = {},
                                         const OpenOptions& options = {});

/// The publishing side (exclusive role).
class TopicPublisher {
 public:
  /// An empty handle (attached to nothing).
  TopicPublisher() noexcept;
  /// Takes over the other's attachment; `other` is left empty.
  TopicPublisher(TopicPublisher&&) noexcept;
  /// Detaches this handle, then takes over the other's attachment.
  TopicPublisher& operator=(TopicPublisher&&) noexcept;
  TopicPublisher(const TopicPublisher&) = delete;
  TopicPublisher& operator=(const TopicPublisher&) = delete;
  ~TopicPublisher();

  /// Creates the topic segment and attaches as its publisher.
  [[nodiscard]] static Result<TopicPublisher> create(std::string_view name,
                                                     const TopicParams& params,
                                                     const CreateOptions& options = {});
  /// Opens a topic and attaches as its publisher (RoleTaken while a live one
  /// holds it; a dead one's loans return to the pool).
  [[nodiscard]] static Result<TopicPublisher> open(std::string_view name,
                                                   const TopicParams& expected = {},
                                                   const OpenOptions& options = {});
  /// Adopts a segment opened or created already.
  [[nodiscard]] static Result<TopicPublisher> attach(Segment segment);

  /// A writable chunk of `bytes` (TooLarge above max_sample_bytes), or
  /// nullopt when the pool is empty (or a live process held the topic's
  /// mutex through a 50 ms lock slice); HeldLimit when kMaxLoans are out.
  [[nodiscard]] Result<std::optional<LoanedSample>> try_loan(std::size_t bytes);
  /// As try_loan, waiting up to `timeout` for a chunk to come back.
  [[nodiscard]] Result<std::optional<LoanedSample>> loan(std::size_t bytes,
                                                         std::chrono::nanoseconds timeout);
  /// Hands the sample to every subscriber's queue. On Published `sample` is
  /// emptied; on Full (a Block subscriber's queue is full, or a live process
  /// held the topic's mutex through a 50 ms lock slice) nothing changed and
  /// the caller keeps it.
  [[nodiscard]] Result<PublishOutcome> try_publish(LoanedSample&& sample);
  /// As try_publish, waiting up to `timeout` for Block subscribers' room (a
  /// dead Block subscriber is dropped, not waited for).
  [[nodiscard]] Result<PublishOutcome> publish(LoanedSample&& sample,
                                               std::chrono::nanoseconds timeout);

  /// Largest sample, bytes.
  [[nodiscard]] std::uint64_t max_sample_bytes() const noexcept;
  /// The counters and positions (relaxed loads).
  [[nodiscard]] TopicSnapshot snapshot() const noexcept;
  /// This handle's slot in the attachment table.
  [[nodiscard]] const Attachment& attachment() const noexcept;
  /// This publisher's incarnation.
  [[nodiscard]] std::uint32_t incarnation() const noexcept;
  /// The last events of the topic's ring (dead holders' records dropped,
  /// repairs), oldest first.
  [[nodiscard]] std::vector<TopicEvent> events() const;

 private:
  std::unique_ptr<topic::detail::Core> core_;
};

/// A receiving side (up to 256 per topic).
class TopicSubscriber {
 public:
  /// An empty handle (attached to nothing).
  TopicSubscriber() noexcept;
  /// Takes over the other's attachment; `other` is left empty.
  TopicSubscriber(TopicSubscriber&&) noexcept;
  /// Detaches this handle, then takes over the other's attachment.
  TopicSubscriber& operator=(TopicSubscriber&&) noexcept;
  TopicSubscriber(const TopicSubscriber&) = delete;
  TopicSubscriber& operator=(const TopicSubscriber&) = delete;
  ~TopicSubscriber();

  /// Creates the topic segment and attaches as a subscriber.
  [[nodiscard]] static Result<TopicSubscriber> create(std::string_view name,
                                                      const TopicParams& params,
                                                      TopicOverflow overflow,
                                                      const CreateOptions& options = {});
  /// Opens a topic and attaches as a subscriber; its queue starts with the
  /// last `history` samples.
  [[nodiscard]] static Result<TopicSubscriber> open(std::string_view name, TopicOverflow overflow,
                                                    const TopicParams& expected = {},
                                                    const OpenOptions& options = {});
  /// Adopts a segment opened or created already.
  [[nodiscard]] static Result<TopicSubscriber> attach(Segment segment, TopicOverflow overflow);

  /// The next sample, or nullopt when none is queued (or a live process held
  /// the topic's mutex through a 50 ms lock slice); HeldLimit when this
  /// subscriber already holds max_held samples (drop one first).
  [[nodiscard]] Result<std::optional<Sample>> try_receive();
  /// As try_receive, waiting up to `timeout` (spin, then park) for a publish.
  [[nodiscard]] Result<std::optional<Sample>> receive(std::chrono::nanoseconds timeout);

  /// Samples dropped from this subscriber's queue (DropOldest) so far.
  [[nodiscard]] std::uint64_t missed() const noexcept;
  /// Its overflow policy.
  [[nodiscard]] TopicOverflow overflow() const noexcept;
  /// The counters and positions (relaxed loads).
  [[nodiscard]] TopicSnapshot snapshot() const noexcept;
  /// This handle's slot in the attachment table.
  [[nodiscard]] const Attachment& attachment() const noexcept;
  /// The last events of the topic's ring, oldest first (see TopicPublisher::events()).
  [[nodiscard]] std::vector<TopicEvent> events() const;

 private:
  friend struct detail::WaitSetAccess;
  std::unique_ptr<topic::detail::Core> core_;
};

}  // namespace shm
