// The local ring or channel of a route; see local_endpoint.hpp.
#include "bridge/local_endpoint.hpp"

#include "bridge/crash_point.hpp"
#include "bridge/segment_errors.hpp"

#include "shm/segment/kind.hpp"
#include "shm/segment/kind_ids.hpp"

#include <fmt/format.h>

#include <cstring>
#include <thread>

namespace shm::bridge {

using namespace std::chrono_literals;

std::string_view to_string(LocalKind k) noexcept {
  switch (k) {
    case LocalKind::Ring:
      return "ring";
    case LocalKind::Channel:
      return "channel";
    case LocalKind::Relay:
      return "relay";
    case LocalKind::Topic:
      return "topic";
  }
  return "?";
}

namespace {

// The kind of the local segment `name`: a ring or a channel (or, for a
// source, a relay or a topic), nullopt when it is missing; any other kind is exit 6
// naming it.
Outcome<std::optional<LocalKind>> local_kind(std::string_view what, const std::string& name,
                                             const std::string& root, bool relay_allowed) {
  auto seg = Segment::open_any(name, OpenOptions{.root = root, .read_only = true});
  if (!seg) {
    if (seg.error().code == Errc::NotFound) return std::nullopt;
    return std::unexpected(segment_failure(what, name, seg.error()));
  }
  const KindId kind = seg->header().kind;
  if (kind == kSpscRingKind) return LocalKind::Ring;
  if (kind == kChannelKind) return LocalKind::Channel;
  if (kind == kRelayKind && relay_allowed) return LocalKind::Relay;
  if (kind == kTopicKind && relay_allowed) return LocalKind::Topic;
  const KindDescriptor* d = find_kind(kind);
  return failure(kExitSegment,
                 fmt::format("{} segment {}: KindMismatch: its kind is {} ({}); the bridge "
                             "takes a ring (spsc_ring) or a channel{}",
                             what, name, d != nullptr ? d->name : "unknown", kind,
                             relay_allowed ? ", a relay or a topic" : ""));
}

// The kind to create a missing segment with, per --create-ring / --create-channel.
Outcome<LocalKind> kind_to_create(std::string_view what, const std::string& name,
                                  const CommonOptions& c) {
  if (c.create_ring != 0) return LocalKind::Ring;
  if (c.create_channel != 0) return LocalKind::Channel;
  return failure(kExitSegment, fmt::format("{} segment {}: NotFound: no such segment (pass "
                                           "--create-ring BYTES or --create-channel BYTES to "
                                           "create it)",
                                           what, name));
}

Outcome<ChannelParams> channel_params(std::string_view what, const std::string& name,
                                      std::uint64_t max_payload) {
  // A window of 256 payloads of the largest size before back-pressure.
  auto p = ChannelParams::for_payload(max_payload, 256);
  if (!p)
    return failure(kExitUsage, fmt::format("{} segment {}: --create-channel {}: {}", what, name,
                                           max_payload, p.error().what()));
  return *p;
}

// What the local segment `name` is, and whether it must be created first.
struct Resolved {
  LocalKind kind = LocalKind::Ring;
  bool create = false;
};

Outcome<Resolved> resolve(std::string_view what, const std::string& name, const CommonOptions& c,
                          bool relay_allowed = false) {
  if (c.create_ring != 0 && c.create_channel != 0)
    return failure(kExitUsage, "--create-ring and --create-channel exclude each other");
  auto found = local_kind(what, name, c.root, relay_allowed);
  if (!found) return std::unexpected(found.error());
  if (*found) return Resolved{**found, false};
  auto k = kind_to_create(what, name, c);
  if (!k) return std::unexpected(k.error());
  return Resolved{*k, true};
}

// Opens the channel `name` as E (ChannelConsumer / ChannelProducer),
// creating it first when `create` (or opening what a racing creator made).
// `created` says whether this call made it.
template <class E>
Outcome<Result<E>> open_channel_endpoint(std::string_view what, const std::string& name,
                                         const CommonOptions& c, bool create, bool& created) {
  created = false;
  if (!create) return E::open(name, {}, OpenOptions{.root = c.root});
  auto params = channel_params(what, name, c.create_channel);
  if (!params) return std::unexpected(params.error());
  auto made = E::create(name, *params, CreateOptions{.root = c.root});
  if (!made && made.error().code == Errc::AlreadyExists)
    return E::open(name, {}, OpenOptions{.root = c.root});
  created = made.has_value();
  return made;
}

// Opens the ring `name` as E (RingConsumer / RingProducer), creating it
// first when `create` (or opening what a racing creator made meanwhile).
// `created` says whether this call made it.
template <class E>
Result<E> open_ring_endpoint(const std::string& name, const CommonOptions& c, bool create,
                             bool& created) {
  created = false;
  if (!create) return E::open(name, {}, OpenOptions{.root = c.root});
  auto made = E::create(name, RingParams{c.create_ring}, CreateOptions{.root = c.root});
  if (!made && made.error().code == Errc::AlreadyExists)
    return E::open(name, {}, OpenOptions{.root = c.root});
  created = made.has_value();
  return made;
}

}  // namespace

// ---------------------------------------------------------------- ExportSource

Outcome<ExportSource> ExportSource::open(const ExportOptions& o) {
  constexpr std::string_view kWhat = "source";
  const CommonOptions& c = o.common;
  auto resolved = resolve(kWhat, o.source, c, /*relay_allowed=*/true);
  if (!resolved) return std::unexpected(resolved.error());
  const auto [kind, create] = *resolved;
  ExportSource s;
  s.kind_ = kind;
  s.name_ = o.source;
  const std::string what = fmt::format("source {}", to_string(kind));
  if (kind == LocalKind::Relay) {
    auto reader = RelayReader::open(o.source, OpenOptions{.root = c.root});
    if (!reader) return std::unexpected(segment_failure(what, o.source, reader.error()));
    s.relay_.emplace(std::move(*reader));
    return s;
  }
  if (kind == LocalKind::Topic) {
    auto seg = open_topic(o.source, {}, OpenOptions{.root = c.root});
    if (!seg) return std::unexpected(segment_failure(what, o.source, seg.error()));
    std::string why;
    const auto v = topic::view(*seg, &why);
    if (!v)
      return failure(kExitSegment, fmt::format("source topic {}: Corrupt: {}", o.source, why));
    if (v->p.max_sample_bytes > o.max_message)
      return failure(kExitSegment,
                     fmt::format("source topic {}: its samples may be {} bytes, more than an "
                                 "egress slot (--max-message {}); raise --max-message",
                                 o.source, v->p.max_sample_bytes, o.max_message));
    // acquire: pairs with the publish that stored it (under the topic's
    // mutex). Every sample numbered below it was published before this read,
    // so before the attach: only the history can hand it to this bridge.
    s.topic_first_live_ = v->control->publisher.next_seq.load(std::memory_order_acquire);
    auto sub = TopicSubscriber::attach(
        std::move(*seg), o.topic_drop_oldest ? TopicOverflow::DropOldest : TopicOverflow::Block);
    if (!sub) return std::unexpected(segment_failure(what, o.source, sub.error()));
    s.topic_.emplace(std::move(*sub));
    return s;
  }
  if (kind == LocalKind::Ring) {
    auto ring = open_ring_endpoint<RingConsumer>(o.source, c, create, s.created_);
    if (!ring) return std::unexpected(segment_failure(what, o.source, ring.error()));
    s.ring_.emplace(std::move(*ring));
    return s;
  }
  auto ch = open_channel_endpoint<ChannelConsumer>(what, o.source, c, create, s.created_);
  if (!ch) return std::unexpected(ch.error());
  if (!*ch) return std::unexpected(segment_failure(what, o.source, ch->error()));
  s.channel_ = std::make_unique<ChannelConsumer>(std::move(**ch));
  return s;
}

Outcome<void> ExportSource::receive(std::optional<std::chrono::milliseconds> timeout) {
  auto r = timeout ? channel_->receive(*timeout) : channel_->try_receive();
  if (!r) {
    if (r.error().code == Errc::ProducerDied) {
      ended_ = true;
      end_reason_ = r.error().what();
      return {};
    }
    return failure(kExitRuntime, fmt::format("source channel {}: {}", name_, r.error().what()));
  }
  if (r->status == ReceiveStatus::End) {
    ended_ = true;
    end_reason_ = "the producer finished the channel";
  } else if (r->status == ReceiveStatus::Received) {
    lease_ = std::move(r->lease);
  }
  return {};
}

Outcome<void> ExportSource::hold_topic_sample(Result<std::optional<Sample>> got) {
  if (!got)
    return failure(kExitRuntime, fmt::format("source topic {}: {}", name_, got.error().what()));
  if (!*got) return {};
  if ((*got)->seq() < topic_first_live_) {
    ++topic_skipped_;  // history: published before the attach, dropped here
    return {};
  }
  topic_held_ = std::move(**got);
  return {};
}

std::uint64_t ExportSource::topic_missed() const noexcept {
  return topic_ ? topic_->missed() : 0;
}

Outcome<std::optional<std::span<const std::byte>>> ExportSource::try_next() {
  if (topic_) {
    // A history sample is dropped and the next one received, until a live
    // one or none: at most `history` of them, once.
    while (!topic_held_) {
      const std::uint64_t skipped = topic_skipped_;
      if (auto ok = hold_topic_sample(topic_->try_receive()); !ok)
        return std::unexpected(ok.error());
      if (!topic_held_ && topic_skipped_ == skipped) return std::nullopt;
    }
    return topic_held_->bytes();
  }
  if (relay_) {
    if (!relay_held_) {
      auto taken = relay_->take(1);
      if (!taken)
        return failure(kExitRuntime,
                       fmt::format("source relay {}: {}", name_, taken.error().what()));
      if (taken->empty()) return std::nullopt;
      const RelayEntry& e = taken->front();
      // The policy now: reconfigure() may swap it while the head is empty.
      // relaxed: read after take(), which held the relay mutex that
      // reconfigure() writes it under.
      const bool keyed =
          relay_->view().control->policy.load(std::memory_order_relaxed) != policy::kRawFifo;
      const std::size_t key_bytes = keyed ? 8 : 0;
      relay_record_.resize(key_bytes + e.value.size());
      for (std::size_t i = 0; i < key_bytes; ++i)  // little-endian, whatever the host
        relay_record_[i] = std::byte(static_cast<std::uint8_t>(e.key >> (8 * i)));
      if (!e.value.empty())
        std::memcpy(relay_record_.data() + key_bytes, e.value.data(), e.value.size());
      relay_held_ = e.first_seq;
    }
    return std::span<const std::byte>(relay_record_);
  }
  if (ring_) {
    auto rec = ring_->try_peek();
    if (!rec)
      return failure(kExitRuntime, fmt::format("source ring {}: {}", name_, rec.error().what()));
    if (*rec) ++ring_held_;
    return *rec;
  }
  if (!lease_.held() && !ended_) {
    if (auto ok = receive(std::nullopt); !ok) return std::unexpected(ok.error());
  }
  if (!lease_.held()) return std::nullopt;
  return lease_.bytes();
}

std::uint64_t ExportSource::position() const noexcept {
  if (topic_) return topic_held_ ? topic_held_->seq() : kNoPosition;
  if (relay_) return relay_held_.value_or(kNoPosition);
  if (ring_) return ring_->released_position();
  return lease_.held() ? lease_.sequence() : channel_->next_sequence();
}

void ExportSource::put_back() noexcept {
  if (ring_ && ring_held_ != 0) {
    // unpeek() forgets every peek since the last release: the ones before
    // the last are peeked again (they are still there: nothing released).
    ring_->unpeek();
    const std::size_t keep = ring_held_ - 1;
    ring_held_ = 0;
    for (std::size_t i = 0; i < keep; ++i) {
      auto rec = ring_->try_peek();
      if (!rec || !*rec) break;
      ++ring_held_;
    }
  }
  // A channel lease, a relay entry and a topic sample stay held: the next
  // try_next() hands them out again.
}

Outcome<void> ExportSource::release() {
  if (topic_) {
    topic_held_.reset();  // the chunk goes back to the pool once nobody holds it
    crash_point("export_after_release");
    return {};
  }
  if (relay_) {
    relay_held_.reset();
    if (auto ok = relay_->commit(); !ok)
      return failure(kExitRuntime, fmt::format("source relay {}: {}", name_, ok.error().what()));
    crash_point("export_after_release");
    return {};
  }
  if (ring_) {
    ring_->release();
    // Passed once per record given back (the tests count records).
    for (std::size_t k = 1; k < ring_held_; ++k) crash_point("export_after_release");
    ring_held_ = 0;
  } else {
    lease_.release();
  }
  crash_point("export_after_release");
  return {};
}

Outcome<void> ExportSource::wait(std::chrono::milliseconds timeout) {
  if (topic_) {
    if (topic_held_) return {};
    return hold_topic_sample(topic_->receive(timeout));  // the next pass hands it out
  }
  if (relay_) {
    if (relay_held_) return {};
    if (auto ready = relay_->wait(timeout); !ready)
      return failure(kExitRuntime, fmt::format("source relay {}: {}", name_, ready.error().what()));
    return {};
  }
  if (ring_) {
    if (ring_held_ != 0) return {};
    if (auto rec = ring_->peek(timeout); rec && *rec) ring_->unpeek();  // the next pass takes it
    return {};
  }
  if (lease_.held()) return {};
  if (ended_) {
    std::this_thread::sleep_for(timeout);
    return {};
  }
  return receive(timeout);
}

// ---------------------------------------------------------------- ImportDest

Outcome<ImportDest> ImportDest::open(const ImportOptions& o) {
  constexpr std::string_view kWhat = "destination";
  const CommonOptions& c = o.common;
  auto resolved = resolve(kWhat, o.dest, c);
  if (!resolved) return std::unexpected(resolved.error());
  const auto [kind, create] = *resolved;
  ImportDest d;
  d.kind_ = kind;
  d.name_ = o.dest;
  d.root_ = c.root;
  const std::string what = fmt::format("destination {}", to_string(kind));
  if (kind == LocalKind::Ring) {
    auto ring = open_ring_endpoint<RingProducer>(o.dest, c, create, d.created_);
    if (!ring) return std::unexpected(segment_failure(what, o.dest, ring.error()));
    d.ring_.emplace(std::move(*ring));
    return d;
  }
  auto opened = open_channel_endpoint<ChannelProducer>(what, o.dest, c, create, d.created_);
  if (!opened) return std::unexpected(opened.error());
  Result<ChannelProducer>& ch = *opened;
  if (ch) {
    d.channel_ = std::make_unique<ChannelProducer>(std::move(*ch));
    return d;
  }
  if (ch.error().code == Errc::RoleTaken || ch.error().code == Errc::NotFound)
    return std::unexpected(segment_failure(what, o.dest, ch.error()));
  // Refused: is it a channel whose producer lifetime ended (a bridge that
  // died, or stopped and finished it)? Then it is replaced once drained.
  auto seg = open_channel(o.dest, {}, OpenOptions{.root = c.root, .read_only = true});
  if (!seg) return std::unexpected(segment_failure(what, o.dest, seg.error()));
  auto v = channel::view(*seg);
  if (!v) return std::unexpected(segment_failure(what, o.dest, v.error()));
  const channel::ChannelControl& ctl = *v->control;
  // acquire: pairs with the producer's [chan.T] / [chan.R] and a consumer's fault store.
  const ChannelState st = channel::state_of(ctl.terminal.word.load(std::memory_order_acquire));
  const auto fault = static_cast<ChannelFault>(ctl.terminal.fault.load(std::memory_order_acquire));
  const bool ended = ch.error().code == Errc::ProducerDied || st == ChannelState::Clean ||
                     (st == ChannelState::Faulted && fault == ChannelFault::ProducerDied);
  if (!ended) return std::unexpected(segment_failure(what, o.dest, ch.error()));
  d.ended_tail_ = ctl.producer.tail.load(std::memory_order_acquire);
  d.ended_.emplace(std::move(*seg));
  d.replace_ = true;
  return d;
}

std::uint64_t ImportDest::published_position() const noexcept {
  if (ring_) return ring_->published_position();
  if (replace_) return ended_tail_;
  return channel_->published_descriptors();
}

Outcome<bool> ImportDest::replace_ended_channel(const std::atomic<bool>& stop, const LogFn& log) {
  if (!replace_) return true;
  auto v = channel::view(*ended_);
  if (!v)
    return failure(kExitRuntime,
                   fmt::format("destination channel {}: {}", name_, v.error().what()));
  const channel::ChannelControl& ctl = *v->control;
  bool logged = false;
  for (;;) {
    // acquire: pairs with a reader's [chan.C]: it has received up to head.
    const std::uint64_t head = ctl.consumer.head.load(std::memory_order_acquire);
    if (head >= ended_tail_) break;
    if (stop.load(std::memory_order_relaxed)) return false;
    if (!logged) {
      log("info", "waiting_for_readers",
          fmt::format("route=import dest={} undelivered={} (the previous bridge's channel is "
                      "replaced once its readers have received it all)",
                      name_, ended_tail_ - head));
      logged = true;
    }
    std::this_thread::sleep_for(20ms);
  }
  const ChannelParams params{v->params.pages, v->params.page_bytes, v->params.descriptors_per_page,
                             v->params.ring_cells};
  const std::uint64_t old_incarnation = ended_->header().incarnation;
  if (auto ok = ended_->unlink(); !ok && ok.error().code != Errc::NotFound)
    return failure(kExitRuntime,
                   fmt::format("destination channel {}: removing the ended channel: {}", name_,
                               ok.error().what()));
  ended_.reset();
  auto ch = ChannelProducer::create(name_, params, CreateOptions{.root = root_});
  if (!ch) return std::unexpected(segment_failure("destination channel", name_, ch.error()));
  channel_ = std::make_unique<ChannelProducer>(std::move(*ch));
  replace_ = false;
  log("info", "replaced_channel",
      fmt::format("route=import dest={} old_incarnation={} incarnation={} final_tail={}", name_,
                  old_incarnation, channel_->segment().header().incarnation, ended_tail_));
  return true;
}

Outcome<std::optional<std::span<std::byte>>> ImportDest::reserve(
    std::size_t n, std::chrono::milliseconds timeout) {
  if (ring_) {
    auto slot = ring_->reserve(n, timeout);
    if (!slot)
      return failure(kExitRuntime,
                     fmt::format("destination ring {}: {}", name_, slot.error().what()));
    return *slot;
  }
  auto r = channel_->reserve(n, timeout);
  if (!r)
    return failure(kExitRuntime,
                   fmt::format("destination channel {}: {}", name_, r.error().what()));
  if (!*r) return std::nullopt;  // RingFull / PageQuotaExhausted: back-pressure
  reservation_ = std::move(*r);
  return reservation_.bytes();
}

Outcome<void> ImportDest::commit() {
  if (ring_) {
    ring_->commit();
    return {};
  }
  auto r = reservation_.commit();
  if (!r)
    return failure(kExitRuntime,
                   fmt::format("destination channel {}: {}", name_, r.error().what()));
  return {};
}

void ImportDest::finish() noexcept {
  if (channel_ && !replace_) {
    reservation_.abandon();
    (void)channel_->finish();
  }
}

}  // namespace shm::bridge
