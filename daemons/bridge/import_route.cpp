// The import route: a durable JetStream pull consumer -> ring or channel. See
// routes.hpp and docs/bridge.md (model, crash cases).
#include "bridge/crash_point.hpp"
#include "bridge/created_segments.hpp"
#include "bridge/local_endpoint.hpp"
#include "bridge/routes.hpp"
#include "bridge/segment_errors.hpp"
#include "bridge/state.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

namespace shm::bridge {
namespace {

using namespace std::chrono_literals;

struct MessageId {
  std::uint64_t incarnation = 0;
  std::uint64_t sequence = 0;
};

// "<incarnation>-<sequence>" as the export route writes it; nullopt for a
// message published by something else (deduplicated by stream sequence only).
std::optional<MessageId> message_id(natsMsg* m) {
  const char* id = nullptr;
  if (natsMsgHeader_Get(m, "Nats-Msg-Id", &id) != NATS_OK || id == nullptr) return std::nullopt;
  char* end = nullptr;
  MessageId out;
  out.incarnation = std::strtoull(id, &end, 10);
  if (end == id || *end != '-' || out.incarnation == 0) return std::nullopt;
  const char* seq = end + 1;
  out.sequence = std::strtoull(seq, &end, 10);
  if (end == seq || *end != '\0') return std::nullopt;
  return out;
}

class Subscription {
 public:
  Subscription() = default;
  Subscription(const Subscription&) = delete;
  Subscription& operator=(const Subscription&) = delete;
  ~Subscription() { reset(); }
  void reset() {
    if (sub_ != nullptr) natsSubscription_Destroy(sub_);
    sub_ = nullptr;
  }
  natsSubscription** out() { return &sub_; }
  [[nodiscard]] natsSubscription* get() const { return sub_; }

 private:
  natsSubscription* sub_ = nullptr;
};

// JetStream API waits for the consumer's requests. A replicated consumer's
// create is answered once the consumer's own group has elected a leader;
// when the group was placed on a node that has just died (the metadata
// leader has not noticed it yet), that election outlasts the client's
// default 5 s. Its info is answered by its leader too, or by the metadata
// leader once it is gone: asked often, with a short wait.
constexpr std::int64_t kCreateWaitMs = 15'000;
constexpr std::int64_t kDeleteWaitMs = 5'000;
constexpr std::int64_t kInfoWaitMs = 1'000;

jsOptions api_options(std::int64_t wait_ms) {
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = wait_ms;
  return jo;
}

// The durable consumer as the route finds it.
enum class ConsumerState : std::uint8_t {
  Missing,  // JetStream says there is none
  AsAsked,  // filtered on the route's subject, cumulative acks, delivering from
            // `start`, nothing delivered yet: what `subscribe` would create
  Other,    // another position or configuration, or it delivered already
  Unknown,  // no answer (the request timed out or failed)
};

std::string_view to_string(ConsumerState s) noexcept {
  switch (s) {
    case ConsumerState::Missing:
      return "none";
    case ConsumerState::AsAsked:
      return "as_asked";
    case ConsumerState::Other:
      return "other";
    case ConsumerState::Unknown:
      break;
  }
  return "no_answer";
}

ConsumerState consumer_state(NatsLink& link, const ImportOptions& o, const std::string& stream,
                             std::uint64_t start) {
  jsOptions jo = api_options(kInfoWaitMs);
  jsConsumerInfo* ci = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  const natsStatus s =
      js_GetConsumerInfo(&ci, link.js(), stream.c_str(), o.durable.c_str(), &jo, &code);
  ConsumerState state = ConsumerState::Unknown;
  if (s == NATS_NOT_FOUND || code == JSConsumerNotFoundErr) {
    state = ConsumerState::Missing;
  } else if (s == NATS_OK && ci != nullptr && ci->Config != nullptr) {
    const jsConsumerConfig& c = *ci->Config;
    const bool from_start =
        start <= 1 ? c.DeliverPolicy == js_DeliverAll
                   : c.DeliverPolicy == js_DeliverByStartSequence && c.OptStartSeq == start;
    // Nothing delivered: the consumer's delivered stream sequence is still
    // the one before its start (0 for DeliverAll). A consumer of an earlier
    // bridge (explicit acks) is Other: recreated from applied + 1.
    const bool as_asked = from_start && c.AckPolicy == js_AckAll && c.FilterSubject != nullptr &&
                          o.common.subject == c.FilterSubject &&
                          ci->Delivered.Stream < std::max<std::uint64_t>(start, 1);
    state = as_asked ? ConsumerState::AsAsked : ConsumerState::Other;
  }
  if (ci != nullptr) jsConsumerInfo_Destroy(ci);
  return state;
}

// (Re)creates the durable consumer so that it delivers from `start` (stream
// sequence) in order, and binds a pull subscription to it. The bridge's state
// segment, not the consumer's ack floor, decides where delivery resumes: a
// consumer recreated at applied + 1 never delivers a newer message before an
// older unapplied one.
//
// When a JetStream node has just died, the consumer's delete and create can
// each take longer than any wait: both are answered once the consumer's own
// replicated group has a leader, and a group placed on the dead node (the
// metadata leader has not noticed it yet) first has to elect one. Each step
// therefore looks at what the last one left instead of starting over: a
// consumer already as asked (a create whose answer came late) is bound, a
// delete that timed out is checked and repeated while the consumer is still
// there, and a create that timed out is checked. Deleting and creating
// again on every timeout started the same slow elections over and over
// (seen: 30 s and more without a message, the bridge cluster test under
// load; 0.3 to 14.3 s with these steps).
//
// Returns what it found and did ("found=... deletes=... created=...
// took_ms=..."), for the log.
Outcome<std::string> subscribe(NatsLink& link, const ImportOptions& o, const std::string& stream,
                               std::uint64_t start, Subscription& sub) {
  const auto began = std::chrono::steady_clock::now();
  sub.reset();
  auto failed = [&](const std::string& step, natsStatus s, jsErrCode code) {
    return failure(kExitRuntime,
                   fmt::format("{} durable consumer {} on stream {}: {} (JetStream error {})", step,
                               o.durable, stream, nats_error(s), static_cast<int>(code)));
  };
  ConsumerState state = consumer_state(link, o, stream, start);
  std::string did = fmt::format("found={}", to_string(state));
  // A delete that timed out may have happened or not (its request can be
  // lost with the node that died): the consumer is looked at, and deleted
  // again while it is still there, rather than created into
  // ("deliver policy can not be updated").
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  int deletes = 0;
  while (state == ConsumerState::Other || state == ConsumerState::Unknown) {
    if (std::chrono::steady_clock::now() >= deadline)
      return failed("deleting", NATS_TIMEOUT, static_cast<jsErrCode>(0));
    jsOptions jo = api_options(kDeleteWaitMs);
    jsErrCode code = static_cast<jsErrCode>(0);
    const natsStatus deleted =
        js_DeleteConsumer(link.js(), stream.c_str(), o.durable.c_str(), &jo, &code);
    ++deletes;
    if (deleted == NATS_OK || deleted == NATS_NOT_FOUND || code == JSConsumerNotFoundErr) {
      state = ConsumerState::Missing;
    } else if (deleted == NATS_TIMEOUT) {
      state = consumer_state(link, o, stream, start);
    } else {
      return failed("deleting", deleted, code);
    }
  }
  if (deletes != 0) did += fmt::format(" deletes={}", deletes);
  if (state == ConsumerState::Missing) {
    jsConsumerConfig cc;
    jsConsumerConfig_Init(&cc);
    cc.Durable = o.durable.c_str();
    cc.DeliverPolicy = start <= 1 ? js_DeliverAll : js_DeliverByStartSequence;
    cc.OptStartSeq = start <= 1 ? 0 : start;
    // Cumulative: one ack per fetched batch, on its last applied message
    // (see import_main), covers the messages before it.
    cc.AckPolicy = js_AckAll;
    cc.AckWait = static_cast<std::int64_t>(o.ack_wait_ms) * 1'000'000;
    cc.FilterSubject = o.common.subject.c_str();
    cc.MaxAckPending = static_cast<std::int64_t>(o.batch) * 4;
    jsOptions jo = api_options(kCreateWaitMs);
    jsConsumerInfo* ci = nullptr;
    jsErrCode code = static_cast<jsErrCode>(0);
    const natsStatus s = js_AddConsumer(&ci, link.js(), stream.c_str(), &cc, &jo, &code);
    if (ci != nullptr) jsConsumerInfo_Destroy(ci);
    if (s != NATS_OK &&
        !(s == NATS_TIMEOUT && consumer_state(link, o, stream, start) == ConsumerState::AsAsked))
      return failed("creating", s, code);
    did += s == NATS_OK ? " created=yes" : " created=late";
  }
  jsOptions jo = api_options(kCreateWaitMs);
  jsErrCode code = static_cast<jsErrCode>(0);
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = stream.c_str();
  so.Consumer = o.durable.c_str();
  const natsStatus s = js_PullSubscribe(sub.out(), link.js(), o.common.subject.c_str(),
                                        o.durable.c_str(), &jo, &so, &code);
  if (s != NATS_OK)
    return failure(kExitRuntime, fmt::format("pull subscription to {} on stream {}: {}", o.durable,
                                             stream, nats_error(s)));
  return fmt::format("{} took_ms={}", did,
                     std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::steady_clock::now() - began)
                         .count());
}

// `created` receives the segments this start makes (removed again when it
// fails before READY).
Outcome<void> import_main(const ImportOptions& o, const std::atomic<bool>& stop, const LogFn& log,
                          RouteStatus& live, CreatedSegments& created) {
  const std::string& root = o.common.root;
  const std::string state_segment = state_name(o);
  auto state = StateSegment::attach(state_segment, Route::Import, root);
  if (!state) return std::unexpected(segment_failure("state", state_segment, state.error()));
  if (state->created()) created.add("state", state_segment);
  StateData& sd = state->data();

  auto dest = ImportDest::open(o);
  if (!dest) return std::unexpected(dest.error());
  if (dest->created()) created.add("dest", o.dest);
  const std::string dest_kind(to_string(dest->kind()));

  // Recovery of the JetStream -> ring/channel hand-over (state.hpp): a
  // commit that happened (the tail moved past the intent's) is applied. A
  // channel that the previous bridge's death ended is read here, before it
  // is replaced below.
  // [bridge.I] acquire: pairs with the release store of intent_stream_seq.
  const std::uint64_t intent = sd.intent_stream_seq.load(std::memory_order_acquire);
  if (intent != kNone && intent > sd.applied_stream_seq.load(std::memory_order_acquire)) {
    if (dest->published_position() > sd.intent_ring_tail.load(std::memory_order_relaxed)) {
      sd.applied_src_incarnation.store(sd.intent_src_incarnation.load(std::memory_order_relaxed),
                                       std::memory_order_relaxed);
      sd.applied_src_seq.store(sd.intent_src_seq.load(std::memory_order_relaxed),
                               std::memory_order_relaxed);
      sd.applied_stream_seq.store(intent, std::memory_order_release);
      sd.recovered.fetch_add(1, std::memory_order_relaxed);
      log("info", "recovered", fmt::format("route=import stream_sequence={}", intent));
    }
  }
  sd.intent_stream_seq.store(kNone, std::memory_order_release);
  // A channel carries one producer lifetime: the previous bridge's channel
  // is replaced (same name, same geometry) once its readers have it all.
  if (dest->needs_replacement()) {
    auto replaced = dest->replace_ended_channel(stop, log);
    if (!replaced) return std::unexpected(replaced.error());
    if (!*replaced) return {};  // stopped while waiting
  }

  // The import route makes its own reconnections: when the connection drops,
  // the client closes it (no automatic reconnection, so nothing sent while
  // disconnected is buffered and replayed later), and the route connects
  // anew and recreates its consumer from applied + 1. A connection that the
  // client had reconnected by itself carried the old one's buffered pull
  // requests and consumer deletes into the new server session, and after a
  // server restart the consumer's re-creation on it could time out for more
  // than 20 s (seen under TSan with load; issue 16).
  auto connected = NatsLink::connect(o.common.connection, NatsLink::Reconnect::Never);
  if (!connected) return std::unexpected(connected.error());
  std::unique_ptr<NatsLink> link = std::move(*connected);
  pause_point("import_connected");
  // A request that fails because the server went away meanwhile is exit 3
  // (it was exit 1: issue 36).
  const auto at_start = [&](Failure f) {
    return std::unexpected(link->at_start(std::move(f), o.common.connection));
  };
  auto stream = link->stream_for(o.common.subject);
  if (!stream) return at_start(stream.error());
  if (!*stream) {
    if (o.common.create_stream.empty())
      return failure(kExitNoStream,
                     fmt::format("no JetStream stream captures subject {} (create one, or pass "
                                 "--create-stream NAME)",
                                 o.common.subject));
    if (auto ok = link->create_stream(o.common.create_stream, o.common.subject,
                                      o.common.stream_replicas, o.common.add_subject);
        !ok)
      return at_start(ok.error());
    *stream = o.common.create_stream;
  }
  // A new state (the host's shared memory was wiped, or the first run) takes
  // over an existing durable consumer's acknowledged position.
  if (state->created()) {
    jsConsumerInfo* ci = nullptr;
    if (js_GetConsumerInfo(&ci, link->js(), (*stream)->c_str(), o.durable.c_str(), nullptr,
                           nullptr) == NATS_OK &&
        ci != nullptr) {
      sd.applied_stream_seq.store(ci->AckFloor.Stream, std::memory_order_release);
      log("info", "resumed",
          fmt::format("route=import durable={} ack_floor={}", o.durable, ci->AckFloor.Stream));
    }
    if (ci != nullptr) jsConsumerInfo_Destroy(ci);
  }
  std::uint64_t applied = sd.applied_stream_seq.load(std::memory_order_acquire);
  std::uint64_t applied_inc = sd.applied_src_incarnation.load(std::memory_order_relaxed);
  std::uint64_t applied_src = sd.applied_src_seq.load(std::memory_order_relaxed);
  Subscription sub;
  pause_point("import_before_subscribe");
  if (auto ok = subscribe(*link, o, **stream, applied + 1, sub); !ok) return at_start(ok.error());
  live.set_stream(**stream);
  log("info", "ready",
      fmt::format("route=import dest={} dest_kind={} durable={} subject={} stream={} servers={} "
                  "applied_stream_sequence={}",
                  o.dest, dest_kind, o.durable, o.common.subject, **stream,
                  describe_servers(o.common.connection.servers), applied));
  live.connected.store(link->connected(), std::memory_order_relaxed);
  live.ready.store(true, std::memory_order_relaxed);
  created.keep();  // running: what this start made stays
  std::fputs("READY import\n", stdout);
  std::fflush(stdout);

  natsMsgList list{};
  // Every return below, a failure's too, gives the fetched batch back (the
  // gap stop once left it to the exit: LeakSanitizer failed the ASan lane).
  struct ListGuard {
    natsMsgList& list;
    ~ListGuard() {
      if (list.Msgs != nullptr) natsMsgList_Destroy(&list);
    }
  } list_guard{list};
  int next = 0;
  // The last message of the batch in hand that is applied (or a duplicate)
  // and not yet acknowledged. The consumer acknowledges cumulatively
  // (AckAll): one ack on it, after its local commit, covers the batch's
  // messages before it, so the server handles one ack per batch instead of
  // one per message. Sent when the pass over the batch ends (done, a full
  // destination, a stop, a gap), before the batch is given back.
  natsMsg* unacked = nullptr;
  const auto ack_applied = [&] {
    if (unacked == nullptr) return;
    (void)natsMsg_Ack(unacked, nullptr);
    unacked = nullptr;
  };
  // The records of the batch in hand reserved in the destination and not
  // yet committed (a ring holds many: holds_many), committed together by
  // commit_applied() with one intent: the ring's tail before the commit and
  // the last applied message (stream sequence, message id). A bridge killed
  // before the commit left none of them visible (delivered again from
  // applied + 1), after it all of them (the recovery applies the intent).
  // `applied`, applied_inc and applied_src run ahead of the state segment
  // while records are uncommitted; the crash points are passed once per
  // record, as when each record was committed alone.
  std::uint64_t uncommitted = 0;
  std::uint64_t uncommitted_bytes = 0;
  natsMsg* last_uncommitted = nullptr;  // the last message of the commit (or a duplicate after it)
  const auto commit_applied = [&]() -> Outcome<void> {
    if (uncommitted == 0) return {};
    // [bridge.I] the intent, its validity word last (release); see state.hpp.
    sd.intent_ring_tail.store(dest->published_position(), std::memory_order_relaxed);
    sd.intent_src_incarnation.store(applied_inc, std::memory_order_relaxed);
    sd.intent_src_seq.store(applied_src, std::memory_order_relaxed);
    sd.intent_stream_seq.store(applied, std::memory_order_release);
    for (std::uint64_t k = 0; k < uncommitted; ++k) crash_point("import_after_intent");
    if (auto ok = dest->commit(); !ok) return std::unexpected(ok.error());
    for (std::uint64_t k = 0; k < uncommitted; ++k) crash_point("import_after_commit");
    sd.applied_src_incarnation.store(applied_inc, std::memory_order_relaxed);
    sd.applied_src_seq.store(applied_src, std::memory_order_relaxed);
    sd.applied_stream_seq.store(applied, std::memory_order_release);
    // Applied, the ack not sent yet.
    for (std::uint64_t k = 0; k < uncommitted; ++k) crash_point("import_before_ack");
    unacked = last_uncommitted;  // acknowledged after the local commit (ack_applied)
    sd.moved.fetch_add(uncommitted, std::memory_order_relaxed);
    sd.acknowledged.fetch_add(uncommitted, std::memory_order_relaxed);
    live.bytes_moved.fetch_add(uncommitted_bytes, std::memory_order_relaxed);
    live.last_success_ms.store(wall_ms(), std::memory_order_relaxed);
    uncommitted = 0;
    uncommitted_bytes = 0;
    last_uncommitted = nullptr;
    return {};
  };
  bool need_reset = false;
  std::uint64_t fetch_errors = 0;
  std::uint64_t resubscribe_failures = 0;
  bool gap_passed = false;  // the message in hand was checked for a gap already
  // The last gap found (a flag and a time rather than an optional: g++ 12
  // at -O1, the TSan lane, warns that an optional time may be used
  // uninitialized).
  bool gap_found = false;
  std::chrono::steady_clock::time_point gap_at{};
  // The start of the current run of trouble: the connection down, or
  // fetches or the consumer's re-creation failing. Past --stall-after the
  // route is `stalled`.
  bool troubled = false;
  std::chrono::steady_clock::time_point troubled_since{};
  const auto update_condition = [&] {
    const auto now = std::chrono::steady_clock::now();
    const bool down = !link || !link->connected();
    const bool failing = need_reset || fetch_errors != 0;
    live.connected.store(!down, std::memory_order_relaxed);
    if (!down && !failing) {
      troubled = false;
    } else if (!troubled) {
      troubled = true;
      troubled_since = now;
    }
    RouteCondition c = RouteCondition::Idle;
    if (troubled && now - troubled_since >= std::chrono::seconds(o.common.stall_after_s))
      c = RouteCondition::Stalled;
    else if (down)
      c = RouteCondition::Disconnected;
    else if (failing)
      c = RouteCondition::Retrying;
    else if (gap_found && now - gap_at < 10s)
      c = RouteCondition::Gap;
    else if (list.Count != 0 ||
             wall_ms() - live.last_success_ms.load(std::memory_order_relaxed) < 2000)
      c = RouteCondition::Moving;
    live.condition.store(c, std::memory_order_relaxed);
  };
  // The first failure of a run, then every tenth, is logged with its reason.
  const auto worth_logging = [](std::uint64_t failures) {
    return failures == 1 || failures % 10 == 0;
  };
  while (!stop.load(std::memory_order_relaxed)) {
    update_condition();
    if (list.Count == 0 && !link->connected()) {
      // Lost: close, destroy the subscription, then the connection (in that
      // order: the client's threads are done with both), and connect again
      // until a server answers or the bridge is stopped.
      log("warn", "disconnected", fmt::format("route=import applied_stream_sequence={}", applied));
      live.set_error(0, "lost the connection to the NATS server");
      live.failures.fetch_add(1, std::memory_order_relaxed);
      link->close();
      sub.reset();
      link.reset();
      for (std::uint64_t attempt = 1; !stop.load(std::memory_order_relaxed); ++attempt) {
        auto again = NatsLink::connect(o.common.connection, NatsLink::Reconnect::Never);
        if (again) {
          link = std::move(*again);
          break;
        }
        if (again.error().code == kExitAuth) return std::unexpected(again.error());
        live.set_error(0, again.error().message);
        live.failures.fetch_add(1, std::memory_order_relaxed);
        if (worth_logging(attempt))
          log("warn", "reconnect_failed",
              fmt::format("route=import attempt={} message=\"{}\"", attempt,
                          again.error().message));
        update_condition();
        std::this_thread::sleep_for(200ms);
      }
      if (!link) break;  // stopped
      sd.reconnects.fetch_add(1, std::memory_order_relaxed);
      log("warn", "reconnected", fmt::format("route=import applied_stream_sequence={}", applied));
      need_reset = true;
    }
    if (list.Count == 0) {
      if (need_reset) {
        auto ok = subscribe(*link, o, **stream, applied + 1, sub);
        if (!ok) {
          // Every failure of the first few, then every tenth: a resubscription
          // that keeps failing must show in the log.
          live.set_error(0, ok.error().message);
          live.failures.fetch_add(1, std::memory_order_relaxed);
          ++resubscribe_failures;
          if (worth_logging(resubscribe_failures))
            log("warn", "resubscribe_failed",
                fmt::format("route=import attempt={} connected={} message=\"{}\"",
                            resubscribe_failures, link->connected(), ok.error().message));
          update_condition();
          std::this_thread::sleep_for(200ms);
          continue;
        }
        log("info", "resubscribed",
            fmt::format("route=import attempts={} applied_stream_sequence={} {}",
                        resubscribe_failures + 1, applied, *ok));
        resubscribe_failures = 0;
        need_reset = false;
      }
      jsErrCode code = static_cast<jsErrCode>(0);
      const natsStatus s =
          natsSubscription_Fetch(&list, sub.get(), static_cast<int>(o.batch), 500, &code);
      if (s == NATS_TIMEOUT) continue;
      if (s != NATS_OK) {
        natsMsgList_Destroy(&list);
        list = natsMsgList{};
        if (!link->connected()) continue;  // the reconnection above takes over
        const std::string why = nats_error(s);
        live.set_error(static_cast<int>(code), fmt::format("fetch: {}", why));
        live.failures.fetch_add(1, std::memory_order_relaxed);
        if (worth_logging(++fetch_errors))
          log("warn", "fetch_failed",
              fmt::format("route=import failures={} error_code={} error=\"{}\" stream={}",
                          fetch_errors, static_cast<int>(code), why, **stream));
        need_reset = true;  // a message may have been lost in transit: redeliver from applied + 1
        std::this_thread::sleep_for(100ms);
        continue;
      }
      fetch_errors = 0;
      next = 0;
    }
    // Apply in order; a full ring or channel keeps the rest in hand and stops
    // pulling.
    while (next < list.Count && !stop.load(std::memory_order_relaxed)) {
      natsMsg* m = list.Msgs[next];
      jsMsgMetaData* meta = nullptr;
      if (natsMsg_GetMetaData(&meta, m) != NATS_OK || meta == nullptr) {
        ++next;  // not a JetStream message (a status): nothing to apply
        continue;
      }
      const std::uint64_t sseq = meta->Sequence.Stream;
      const std::uint64_t pending = meta->NumPending;
      jsMsgMetaData_Destroy(meta);
      const auto id = message_id(m);
      const bool redelivered = sseq <= applied;
      const bool republished = !redelivered && id && id->incarnation == applied_inc &&
                               applied_inc != 0 && id->sequence <= applied_src;
      if (redelivered || republished) {
        if (republished) {
          applied = sseq;
          // Not before the reserved records ahead of it are committed.
          if (uncommitted == 0) sd.applied_stream_seq.store(sseq, std::memory_order_release);
        }
        (uncommitted != 0 ? last_uncommitted : unacked) = m;
        sd.duplicates.fetch_add(1, std::memory_order_relaxed);
        live.stream_pending.store(pending, std::memory_order_relaxed);
        ++next;
        continue;
      }
      // A gap: the export's message ids run on without a hole within an
      // incarnation (from 0 in a new one), so a jump means messages the
      // stream dropped (max_msgs, max_bytes, max_age with discard old, a
      // purge) before this import received them. Loud: logged with the
      // missing range and counted; the route stops unless --on-gap continue.
      if (id && applied_inc != 0 && !gap_passed) {
        const bool same = id->incarnation == applied_inc;
        const std::uint64_t from = same ? applied_src + 1 : 0;
        if (id->sequence > from) {
          const std::uint64_t count = id->sequence - from;
          live.gaps.fetch_add(1, std::memory_order_relaxed);
          live.missing.fetch_add(count, std::memory_order_relaxed);
          gap_found = true;
          gap_at = std::chrono::steady_clock::now();
          const std::string what = fmt::format(
              "stream {}: messages {}-{} through {}-{} ({}) are gone from the stream before the "
              "import received them (a stream limit such as max_msgs, max_bytes or max_age, or a "
              "purge); the next is stream sequence {}",
              **stream, id->incarnation, from, id->incarnation, id->sequence - 1, count, sseq);
          live.set_error(0, what);
          log(o.stop_on_gap ? "error" : "warn", "gap",
              fmt::format("route=import stream={} incarnation={} missing_first={} "
                          "missing_last={} missing={} stream_sequence={} action={}",
                          **stream, id->incarnation, from, id->sequence - 1, count, sseq,
                          o.stop_on_gap ? "stop" : "continue"));
          if (o.stop_on_gap) {
            // What came before the gap is applied.
            if (auto ok = commit_applied(); !ok) return std::unexpected(ok.error());
            ack_applied();
            return failure(kExitGap, what + " (--on-gap continue goes on past it)");
          }
        }
      }
      gap_passed = false;
      const int len = natsMsg_GetDataLength(m);
      auto slot = dest->reserve(static_cast<std::size_t>(len), uncommitted != 0 ? 0ms : 20ms);
      if (!slot)
        return failure(kExitRuntime, fmt::format("{} (a message of {} bytes, stream sequence {})",
                                                 slot.error().message, len, sseq));
      if (!*slot) {
        gap_passed = true;  // this message's gap is counted: not again when it is retried
        if (uncommitted != 0) {
          // Full of this pass's own records: publish them, then wait for room.
          if (auto ok = commit_applied(); !ok) return std::unexpected(ok.error());
          continue;
        }
        break;  // full: back-pressure
      }
      if (len > 0) std::memcpy((*slot)->data(), natsMsg_GetData(m), static_cast<std::size_t>(len));
      if (id) {
        applied_inc = id->incarnation;
        applied_src = id->sequence;
      }
      applied = sseq;
      ++uncommitted;
      uncommitted_bytes += static_cast<std::uint64_t>(len);
      last_uncommitted = m;
      live.stream_pending.store(pending, std::memory_order_relaxed);
      ++next;
      if (!dest->holds_many())
        if (auto ok = commit_applied(); !ok) return std::unexpected(ok.error());
    }
    if (auto ok = commit_applied(); !ok) return std::unexpected(ok.error());
    ack_applied();
    if (next >= list.Count && list.Count != 0) {
      natsMsgList_Destroy(&list);
      list = natsMsgList{};
    }
  }
  if (list.Count != 0) natsMsgList_Destroy(&list);
  list = natsMsgList{};  // given back before the link closes
  dest->finish();        // a channel's readers see End
  if (link) link->close();
  sub.reset();
  log("info", "stopped", fmt::format("route=import applied_stream_sequence={}", applied));
  return {};
}

}  // namespace

std::string state_name(const ImportOptions& o) {
  return o.common.state.empty() ? o.dest + "-bridge-import" : o.common.state;
}

int run_import(const ImportOptions& o, const std::atomic<bool>& stop, const LogFn& log,
               RouteStatus& live) {
  CreatedSegments created(o.common.root);
  auto r = import_main(o, stop, log, live, created);
  live.ready.store(false, std::memory_order_relaxed);
  if (r) return kExitOk;
  created.remove(log);  // a failed start leaves the root as it found it
  log("error", "failed",
      fmt::format("route=import exit_code={} message=\"{}\"", r.error().code, r.error().message));
  return r.error().code;
}

}  // namespace shm::bridge
