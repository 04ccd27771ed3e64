// The local end of a route: an SpscRing or a Channel, found by the kind id in
// the named segment's header (or created by --create-ring / --create-channel
// when the name is missing); an export route also reads a relay (made by the
// application, with its merge policy and overflow: a Spill relay absorbs the
// backpressure of a full egress on disk). Anything else is exit 6 naming the
// segment and its kind.
//
//  - ExportSource: the bridge is the consumer. A record is handed out, then
//    either released (it is in the egress) or kept for the next pass (the
//    egress was full): a ring record is unpeeked, a channel lease is kept, a
//    relay entry stays taken (one at a time: take(1), commit() on release).
//    A relay entry's record is its value (raw_fifo), or its key (8 bytes,
//    little-endian) then its merged value (keyed policies); its position is
//    its first op sequence, which a dead bridge's entry keeps when the relay
//    delivers it again.
//    A topic's bridge is one more subscriber: each sample is a record
//    (its bytes), its position its sequence number; the samples a late
//    joiner receives from the history (published before the bridge
//    attached) are not exported, so a restarted bridge repeats nothing.
//  - ImportDest: the bridge is the producer. Room is reserved, filled, then
//    committed. A channel carries one producer lifetime (shm/channel): a
//    channel whose previous bridge died (or stopped and finished it) is
//    replaced under the same name, with the same geometry, once its readers
//    have received everything in it (docs/bridge.md).
#pragma once

#include "bridge/failure.hpp"
#include "bridge/routes.hpp"

#include "shm/channel/consumer.hpp"
#include "shm/channel/producer.hpp"
#include "shm/relay/relay.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"
#include "shm/topic/topic.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shm::bridge {

enum class LocalKind : std::uint8_t { Ring, Channel, Relay, Topic };
[[nodiscard]] std::string_view to_string(LocalKind k) noexcept;

class ExportSource {
 public:
  // Opens (or creates, per --create-ring / --create-channel) the source.
  [[nodiscard]] static Outcome<ExportSource> open(const ExportOptions& o);

  [[nodiscard]] LocalKind kind() const noexcept { return kind_; }
  // open() created it (--create-ring / --create-channel; not one a racing
  // process made first).
  [[nodiscard]] bool created() const noexcept { return created_; }
  // The next record, held until release() or put_back(); nullopt when none
  // is there now (or the channel ended: see ended()). A held channel lease
  // is handed out again. A ring (holds_many()) hands out the record after
  // the ones it holds, and holds them all.
  [[nodiscard]] Outcome<std::optional<std::span<const std::byte>>> try_next();
  // A ring: several records can be held at once and release() gives them
  // back together (one store of the ring's head, one wake of a producer
  // waiting for room). A channel or a relay holds one.
  [[nodiscard]] bool holds_many() const noexcept { return ring_.has_value(); }
  // The position of the next record try_next() hands out (or the held one):
  // a ring's released position, a channel's next sequence, the held relay
  // entry's first op sequence, the held topic sample's sequence number
  // (kNoPosition when no relay entry or sample is held).
  [[nodiscard]] std::uint64_t position() const noexcept;
  // The last record handed out stays in the source for the next pass (a
  // ring keeps holding the ones before it).
  void put_back() noexcept;
  // The held records are done with: the source may reuse their space (a
  // relay commits the taken entry, which can fail).
  [[nodiscard]] Outcome<void> release();
  // Waits up to `timeout` for a record (one may be held afterwards).
  [[nodiscard]] Outcome<void> wait(std::chrono::milliseconds timeout);
  // A channel whose producer finished (End) or died (ProducerDied), with
  // everything it published received: nothing more will come.
  [[nodiscard]] bool ended() const noexcept { return ended_; }
  // Why it ended ("finished" or the ProducerDied message).
  [[nodiscard]] const std::string& end_reason() const noexcept { return end_reason_; }
  // A topic source: samples its DropOldest subscription missed, and history
  // samples not exported (published before the bridge attached).
  [[nodiscard]] std::uint64_t topic_missed() const noexcept;
  [[nodiscard]] std::uint64_t topic_history_skipped() const noexcept { return topic_skipped_; }

 private:
  [[nodiscard]] Outcome<void> receive(std::optional<std::chrono::milliseconds> timeout);
  // Holds the sample a topic receive gave, unless it came from the history.
  [[nodiscard]] Outcome<void> hold_topic_sample(Result<std::optional<Sample>> got);

  static constexpr std::uint64_t kNoPosition = ~std::uint64_t{0};

  LocalKind kind_ = LocalKind::Ring;
  bool created_ = false;
  std::string name_;
  std::optional<RingConsumer> ring_;
  std::size_t ring_held_ = 0;  // records peeked and not released
  std::optional<RelayReader> relay_;
  std::optional<std::uint64_t> relay_held_;  // the taken entry's first op sequence
  std::vector<std::byte> relay_record_;      // its record (key + value, or value)
  std::optional<TopicSubscriber> topic_;
  std::optional<Sample> topic_held_;    // declared after topic_: dropped before it
  std::uint64_t topic_first_live_ = 0;  // the topic's next sequence just before the attach
  std::uint64_t topic_skipped_ = 0;
  // The lease points back at its consumer: the consumer never moves.
  std::unique_ptr<ChannelConsumer> channel_;
  ChannelLease lease_;
  bool ended_ = false;
  std::string end_reason_;
};

class ImportDest {
 public:
  // Opens (or creates) the destination. A channel whose producer lifetime
  // ended is kept, read-only, for recovery: published_position() is its
  // final tail until replace_ended_channel() swaps it for a fresh one.
  [[nodiscard]] static Outcome<ImportDest> open(const ImportOptions& o);

  [[nodiscard]] LocalKind kind() const noexcept { return kind_; }
  // open() created it (--create-ring / --create-channel; not one a racing
  // process made first).
  [[nodiscard]] bool created() const noexcept { return created_; }
  // Records committed so far (a ring's published tail, a channel's
  // published descriptors, or an ended channel's final tail).
  [[nodiscard]] std::uint64_t published_position() const noexcept;
  // True when the channel found at open must be replaced before anything is
  // committed (its previous producer died, or finished it).
  [[nodiscard]] bool needs_replacement() const noexcept { return replace_; }
  // Waits until the old channel's readers have received all of it, then
  // replaces it under its name (same geometry) and attaches as its producer.
  // False when `stop` was set first.
  [[nodiscard]] Outcome<bool> replace_ended_channel(const std::atomic<bool>& stop,
                                                    const LogFn& log);
  // Room for `n` bytes (waiting up to `timeout`), nullopt when the
  // destination is full. Filled, then commit().
  [[nodiscard]] Outcome<std::optional<std::span<std::byte>>> reserve(
      std::size_t n, std::chrono::milliseconds timeout);
  [[nodiscard]] Outcome<void> commit();
  // A ring: several reservations can be filled before one commit() publishes
  // them all (one store of the ring's tail, one wake of a consumer waiting
  // for records). A channel takes one reservation per commit().
  [[nodiscard]] bool holds_many() const noexcept { return ring_.has_value(); }
  // A clean stop: a channel is finished (its readers see End).
  void finish() noexcept;

 private:
  LocalKind kind_ = LocalKind::Ring;
  bool created_ = false;
  std::string name_;
  std::string root_;
  std::optional<RingProducer> ring_;
  std::unique_ptr<ChannelProducer> channel_;  // a reservation points back at it
  Reservation reservation_;
  // An ended channel, observed read-only until replaced.
  std::optional<Segment> ended_;
  std::uint64_t ended_tail_ = 0;
  bool replace_ = false;
};

}  // namespace shm::bridge
