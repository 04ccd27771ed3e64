// The export route: ring or channel -> egress -> JetStream. See routes.hpp and
// docs/bridge.md (model, crash cases).
#include "bridge/crash_point.hpp"
#include "bridge/created_segments.hpp"
#include "bridge/local_endpoint.hpp"
#include "bridge/routes.hpp"
#include "bridge/segment_errors.hpp"
#include "bridge/state.hpp"

#include "shm/egress/egress.hpp"
#include "shm/platform/clock.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace shm::bridge {
namespace {

using namespace std::chrono_literals;

// JetStream's JSStreamStoreFailedF (the client's 3.4 headers do not name it):
// with "maximum messages/bytes exceeded", a stream full under discard new.
constexpr int kStreamStoreFailed = 10077;

// The outcome of every asynchronous publish, as JetStream (or the client's
// timeout) reports it, one callback per message on a thread of the client.
// A window is acknowledged in the egress only when every one of its
// sequences has a positive acknowledgement here: nothing is inferred from
// the absence of an error.
struct PublishResult {
  std::uint64_t sequence = 0;
  bool stored = false;
  std::uint64_t stream_sequence =
      0;               // where JetStream holds it (stored, or a duplicate's original)
  int error_code = 0;  // JetStream's error code when refused (10070, ...)
  std::string error;   // and its text
};

struct PublishResults {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<PublishResult> outcomes;
};

void on_publish_ack(jsCtx* /*js*/, natsMsg* msg, jsPubAck* pa, jsPubAckErr* pae, void* closure) {
  auto* results = static_cast<PublishResults*>(closure);
  const char* id = nullptr;
  if (msg != nullptr && natsMsgHeader_Get(msg, "Nats-Msg-Id", &id) == NATS_OK && id != nullptr) {
    if (const char* dash = std::strrchr(id, '-'); dash != nullptr) {
      PublishResult r;
      r.sequence = std::strtoull(dash + 1, nullptr, 10);
      r.stored = pa != nullptr && pae == nullptr;
      if (pa != nullptr) r.stream_sequence = pa->Sequence;
      if (pae != nullptr) {
        r.error_code = static_cast<int>(pae->ErrCode);
        r.error = pae->ErrText != nullptr && *pae->ErrText != '\0' ? pae->ErrText
                                                                   : natsStatus_GetText(pae->Err);
      }
      {
        const std::lock_guard lock(results->mutex);
        results->outcomes.push_back(std::move(r));
      }
      results->changed.notify_one();
    }
  }
  natsMsg_Destroy(msg);
}

// The published, not yet acknowledged messages of the window, oldest first:
// their sequences are contiguous, from the egress's next unacknowledged one.
//
// Not every message asks for an acknowledgement. The window is published in
// groups; only the last message of a group (its tail) carries a reply
// subject and gets JetStream's acknowledgement, the ones before it are
// plain publishes (no reply: JetStream stores them and answers nothing).
// Every message expects its predecessor as the stream's last message (the
// first of a window the subject's last stream sequence), so a message stored
// proves its predecessor was stored right before it, and so on down to the
// window's first: a positive acknowledgement of any message is one for every
// message before it in the window. A message refused (or lost) makes every
// later one refused (its successor's expectation fails), so the tail's
// refusal covers its group. The server sends, and the bridge handles, one
// acknowledgement per group instead of one per message.
struct InFlight {
  std::uint64_t sequence;
  std::chrono::steady_clock::time_point deadline;  // no outcome by then: failed
  std::int8_t state = 0;                           // 0 unknown, 1 stored, -1 failed
  bool tail = true;                                // published with a reply subject
  bool inferred = false;              // state from a later message's outcome (the tail's)
  std::uint64_t stream_sequence = 0;  // stored, not inferred: where JetStream holds it
  int error_code = 0;                 // failed: JetStream's code and text
  std::string error;
};

// Moves the outcomes reported so far onto the messages in flight (waiting up
// to `wait` for one when none is there yet). Outcomes of sequences not in
// flight (a late answer to a failed attempt that was published again) are
// dropped: the new attempt gets its own. A late positive outcome of an
// earlier attempt of an in-flight sequence counts: its message id was stored.
// A positive outcome also stores every message before it in the window (see
// InFlight), a negative one fails the untold messages of its group.
void collect_outcomes(PublishResults& results, std::deque<InFlight>& in_flight,
                      std::chrono::microseconds wait) {
  std::unique_lock lock(results.mutex);
  if (results.outcomes.empty() && wait.count() > 0)
    (void)results.changed.wait_for(lock, wait, [&] { return !results.outcomes.empty(); });
  if (!in_flight.empty()) {
    const std::uint64_t first = in_flight.front().sequence;
    for (PublishResult& r : results.outcomes) {
      if (r.sequence < first || r.sequence - first >= in_flight.size()) continue;
      const std::size_t at = r.sequence - first;
      InFlight& m = in_flight[at];
      if (m.state == 1 && !m.inferred) continue;
      if (r.stored) {
        m.state = 1;
        m.inferred = false;
        m.stream_sequence = r.stream_sequence;
        for (std::size_t i = at; i-- > 0 && !(in_flight[i].state == 1);) {
          in_flight[i].state = 1;
          in_flight[i].inferred = true;
        }
        continue;
      }
      if (m.state == 1) continue;  // stored, as a later message's outcome says
      m.state = -1;
      m.inferred = false;
      m.error_code = r.error_code;
      m.error = r.error;
      for (std::size_t i = at; i-- > 0 && !in_flight[i].tail && in_flight[i].state == 0;) {
        in_flight[i].state = -1;
        in_flight[i].inferred = true;
        in_flight[i].error_code = r.error_code;
        in_flight[i].error = r.error;
      }
    }
  }
  results.outcomes.clear();
}

// The route's position as the stream holds it: the last message on the
// route's subject, read from the stream's store (it survives a server
// restart, unlike the server's memory of the last message id and its
// duplicate window).
struct StreamPosition {
  bool found = false;  // the subject has a message in the stream
  std::uint64_t stream_sequence = 0;
  bool ours = false;           // its message id is <this egress's incarnation>-<sequence>
  std::uint64_t sequence = 0;  // that egress sequence (when ours)
  std::string id;              // its message id as found ("" when it has none)
};

// nats-server 2.9 registers a new stream in its account before it sets up
// the stream's store, and a last-message request in between dereferences the
// missing store: the server panics (a nil pointer in jsMsgGetRequest). Its
// stream info request reads the creation time and the store under the one
// lock that setupStore holds while it sets both, so an answer with a
// creation time is an answer given after the store exists (during the
// window the time is zero). The first read of a stream's last message waits
// for such an answer (up to 10 s); then the stream is not created any more,
// by this process or another.
Outcome<void> wait_for_stream_store(NatsLink& link, const std::string& stream) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  for (;;) {
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = 2000;
    jsStreamInfo* si = nullptr;
    jsErrCode code = static_cast<jsErrCode>(0);
    const natsStatus s = js_GetStreamInfo(&si, link.js(), stream.c_str(), &jo, &code);
    const bool ready = s == NATS_OK && si != nullptr && si->Created > 0;
    if (si != nullptr) jsStreamInfo_Destroy(si);
    if (ready) return {};
    if (std::chrono::steady_clock::now() >= deadline || !link.connected())
      return failure(kExitRuntime,
                     fmt::format("stream {}: no stream information with a creation time: {} "
                                 "(JetStream error {})",
                                 stream, s == NATS_OK ? "created at 0" : nats_error(s),
                                 static_cast<int>(code)));
    std::this_thread::sleep_for(50ms);
  }
}

// The options of a request about the stream (its info, a message): 5 s.
jsOptions stream_request_options() {
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = 5000;
  return jo;
}

// The stream's last sequence, whatever the subject.
Outcome<std::uint64_t> stream_last_sequence(NatsLink& link, const std::string& stream) {
  jsOptions jo = stream_request_options();
  jsStreamInfo* si = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = NATS_OK;
  {
    const std::lock_guard lock(stream_admin_mutex());
    s = js_GetStreamInfo(&si, link.js(), stream.c_str(), &jo, &code);
  }
  if (s != NATS_OK || si == nullptr) {
    if (si != nullptr) jsStreamInfo_Destroy(si);
    return failure(kExitRuntime,
                   fmt::format("reading the information of stream {}: {} (JetStream error {})",
                               stream, nats_error(s), static_cast<int>(code)));
  }
  const std::uint64_t last = si->State.LastSeq;
  jsStreamInfo_Destroy(si);
  return last;
}

// The last message of `subject`, read from the stream's store. A request
// that timed out, or met a cluster still electing a leader, is tried again
// (three tries in all).
Outcome<StreamPosition> read_stream_position(NatsLink& link, const std::string& stream,
                                             const std::string& subject,
                                             std::uint64_t incarnation) {
  jsOptions jo = stream_request_options();
  natsMsg* m = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = NATS_OK;
  for (int attempt = 1;; ++attempt) {
    code = static_cast<jsErrCode>(0);
    {
      const std::lock_guard lock(stream_admin_mutex());  // never beside a stream's creation
      s = js_GetLastMsg(&m, link.js(), stream.c_str(), subject.c_str(), &jo, &code);
    }
    const bool transient = s == NATS_TIMEOUT || code == JSClusterNotAvailErr;
    if (!transient || attempt == 3 || !link.connected()) break;
    if (m != nullptr) natsMsg_Destroy(m);
    m = nullptr;
    std::this_thread::sleep_for(250ms);
  }
  StreamPosition p;
  if (s == NATS_NOT_FOUND || code == JSNoMessageFoundErr) {
    if (m != nullptr) natsMsg_Destroy(m);
    return p;
  }
  if (s != NATS_OK || m == nullptr) {
    if (m != nullptr) natsMsg_Destroy(m);
    return failure(kExitRuntime,
                   fmt::format("reading the last message of subject {} in stream {}: {} "
                               "(JetStream error {})",
                               subject, stream, nats_error(s), static_cast<int>(code)));
  }
  p.found = true;
  p.stream_sequence = natsMsg_GetSequence(m);
  const char* id = nullptr;
  if (natsMsgHeader_Get(m, "Nats-Msg-Id", &id) == NATS_OK && id != nullptr) {
    p.id = id;
    const std::string prefix = fmt::format("{}-", incarnation);
    if (p.id.size() > prefix.size() && p.id.compare(0, prefix.size(), prefix) == 0 &&
        p.id.find_first_not_of("0123456789", prefix.size()) == std::string::npos) {
      p.ours = true;
      p.sequence = std::strtoull(p.id.c_str() + prefix.size(), nullptr, 10);
    }
  }
  natsMsg_Destroy(m);
  return p;
}

Outcome<EgressTransport> attach_transport(const std::string& name, const std::string& root) {
  auto t = EgressTransport::open(name, OpenOptions{.root = root});
  if (!t) return std::unexpected(segment_failure("egress", name, t.error()));
  return std::move(*t);
}

Failure fenced(const std::string& egress, std::uint64_t generation) {
  return {kExitBusy, fmt::format("egress {}: fenced at generation {} (another transport took the "
                                 "egress over)",
                                 egress, generation)};
}

// `created` receives the segments this start makes (removed again when it
// fails before READY).
Outcome<void> export_main(const ExportOptions& o, const std::atomic<bool>& stop, const LogFn& log,
                          RouteStatus& live, CreatedSegments& created) {
  const std::string& root = o.common.root;
  const std::string state_segment = state_name(o);
  auto state = StateSegment::attach(state_segment, Route::Export, root);
  if (!state) return std::unexpected(segment_failure("state", state_segment, state.error()));
  if (state->created()) created.add("state", state_segment);
  StateData& sd = state->data();

  auto source = ExportSource::open(o);
  if (!source) return std::unexpected(source.error());
  if (source->created()) created.add("source", o.source);
  const std::string source_kind(to_string(source->kind()));

  EgressParams ep;
  ep.max_payloads = o.egress_capacity;
  ep.slot_bytes = o.max_message;
  ep.inflight_limit = std::min(o.window, o.egress_capacity);
  ep.retry_budget = ~std::uint32_t{0} - 1;  // never dead-letter: retry until acknowledged
  ep.retry_base = 50ms;
  ep.retry_ceiling = 2s;
  if (auto made = Egress::create(o.egress, ep, CreateOptions{.root = root}); made)
    created.add("egress", o.egress);
  else if (made.error().code != Errc::AlreadyExists)
    return std::unexpected(segment_failure("egress", o.egress, made.error()));
  auto attached = attach_transport(o.egress, root);
  if (!attached) return std::unexpected(attached.error());
  // An optional, replaced by reset() + emplace(): the egress handles'
  // defaulted move assignment unmaps the old mapping before detaching the old
  // attachment from it.
  std::optional<EgressTransport> transport(std::move(*attached));
  const std::uint64_t incarnation = transport->egress().segment().header().incarnation;

  PublishResults results;
  auto link = NatsLink::connect(o.common.connection, NatsLink::Reconnect::Automatic,
                                &on_publish_ack, &results, std::int64_t{o.window} * 4);
  if (!link) return std::unexpected(link.error());
  pause_point("export_connected");
  // A request that fails because the server went away meanwhile is exit 3.
  const auto at_start = [&](Failure f) {
    return std::unexpected((*link)->at_start(std::move(f), o.common.connection));
  };
  auto stream = (*link)->stream_for(o.common.subject);
  if (!stream) return at_start(stream.error());
  if (!*stream) {
    if (o.common.create_stream.empty())
      return failure(kExitNoStream,
                     fmt::format("no JetStream stream captures subject {} (create one, or pass "
                                 "--create-stream NAME)",
                                 o.common.subject));
    if (auto ok = (*link)->create_stream(o.common.create_stream, o.common.subject,
                                         o.common.stream_replicas, o.common.add_subject);
        !ok)
      return at_start(ok.error());
    *stream = o.common.create_stream;
  }

  // Recovery of the source -> egress hand-over (state.hpp): the record at the
  // intent's head (a ring position, a channel sequence, a relay entry's first
  // op sequence) was enqueued when the egress sequence moved past the
  // intent's sequence; it is released without a second enqueue. A channel
  // consumer that died holding a lease resumes at that payload, and a relay
  // delivers the entry a dead reader held again, first: the record handed
  // out first is that one, or a later one (the dead bridge had released it).
  auto proj = transport->egress().projection();
  if (!proj)
    return failure(kExitRuntime, fmt::format("egress {}: {}", o.egress, proj.error().what()));
  std::uint64_t next_seq = proj->next_sequence;
  std::uint64_t acked_next = proj->acked_through ? *proj->acked_through + 1 : 0;
  // [bridge.I] acquire: pairs with the release store of export_intent_seq.
  const std::uint64_t intent_seq = sd.export_intent_seq.load(std::memory_order_acquire);
  if (intent_seq != kNone) {
    const std::uint64_t head = sd.export_intent_head.load(std::memory_order_relaxed);
    if (next_seq > intent_seq) {
      // The records from `head` enqueued as intent_seq, intent_seq + 1, ...:
      // one, or (a source that holds many) the pass's records enqueued
      // before the bridge died.
      const std::uint64_t enqueued = source->holds_many() ? next_seq - intent_seq : 1;
      auto rec = source->try_next();
      if (!rec) return std::unexpected(rec.error());
      if (*rec && source->position() == head) {
        for (std::uint64_t k = 1; k < enqueued; ++k) {
          auto more = source->try_next();
          if (!more) return std::unexpected(more.error());
          if (!*more)
            return failure(kExitRuntime,
                           fmt::format("source {} {}: the records from position {} that the "
                                       "egress holds as sequences {} to {} end after {}",
                                       source_kind, o.source, head, intent_seq, next_seq - 1, k));
        }
        if (auto ok = source->release(); !ok) return std::unexpected(ok.error());
        sd.recovered.fetch_add(enqueued, std::memory_order_relaxed);
        log("info", "recovered",
            fmt::format("route=export source_position={} sequence={} records={}", head, intent_seq,
                        enqueued));
      } else if (*rec) {
        source->put_back();
      } else if (source->kind() != LocalKind::Relay && source->kind() != LocalKind::Topic &&
                 source->position() == head) {
        return failure(kExitRuntime, fmt::format("source {} {}: the record at position {} that "
                                                 "the egress holds as sequence {} is gone",
                                                 source_kind, o.source, head, intent_seq));
      }
    }
    sd.export_intent_seq.store(kNone, std::memory_order_release);
  }
  live.set_stream(**stream);

  std::deque<InFlight> in_flight;
  // The stream sequence of the route's last stored message (egress sequence
  // acked_next - 1) on the subject, nullopt while unknown; 0: the subject has
  // no message. The first publish of a window (nothing in flight before it)
  // expects it as the subject's last sequence, which JetStream checks against
  // its store: unlike the last message id (kept in the server's memory only,
  // rebuilt after a restart from the messages inside the duplicate window), it
  // holds across a server restart after any quiet period. The publishes
  // behind it in the window expect their predecessor's message id.
  std::optional<std::uint64_t> anchor;
  // Other publishers write into the stream (another route, an application
  // on another subject): a message id expected as the stream's last one is
  // then at times someone else's, and the window is refused from there. The
  // resync acknowledges what the stream holds of it and the rest is retried:
  // nothing is lost or reordered (the window's first message expects its
  // subject's last sequence, which no other subject changes), but the route
  // spends retries. Found when a publish is refused for the wrong last
  // message id while the stream holds a message after the subject's last
  // one; shown on /status and logged once.
  bool shared_stream = false;
  // Resolves the route's position from the stream itself: its last message
  // on the subject. The route's own messages through that one are stored
  // (each publish expects its predecessor, so the stream holds a prefix of
  // the egress's sequences): they are acknowledged in the egress and never
  // published again, whatever JetStream's duplicate window still remembers.
  // A last message of another publisher is an error once the route has
  // anything acknowledged. False when the stream could not be read (tried
  // again at the next refusal).
  bool store_seen = false;  // wait_for_stream_store() answered once
  auto resync = [&](std::string_view reason) -> Outcome<bool> {
    if (!store_seen) {
      if (auto ready = wait_for_stream_store(**link, **stream); !ready) {
        live.set_error(0, ready.error().message);
        log("warn", "resync_failed",
            fmt::format("route=export reason={} message=\"{}\"", reason, ready.error().message));
        return false;
      }
      store_seen = true;
    }
    auto pos = read_stream_position(**link, **stream, o.common.subject, incarnation);
    if (!pos) {
      live.set_error(0, pos.error().message);
      log("warn", "resync_failed",
          fmt::format("route=export reason={} message=\"{}\"", reason, pos.error().message));
      return false;
    }
    std::uint64_t skipped = 0;
    if (!pos->found) {
      anchor = 0;
    } else if (!pos->ours) {
      if (acked_next != 0)
        return failure(
            kExitBusy,
            fmt::format("stream {}: the last message on subject {} (stream sequence {}, message "
                        "id \"{}\") is not this route's: egress {} (incarnation {}) has "
                        "sequences through {} stored; another publisher writes to the subject "
                        "(one export route per subject)",
                        **stream, o.common.subject, pos->stream_sequence, pos->id, o.egress,
                        incarnation, acked_next - 1));
      anchor = pos->stream_sequence;
    } else if (pos->sequence >= next_seq) {
      return failure(kExitRuntime,
                     fmt::format("stream {}: the last message on subject {} is {} (stream "
                                 "sequence {}), past the egress {}'s next sequence {}",
                                 **stream, o.common.subject, pos->id, pos->stream_sequence,
                                 o.egress, next_seq));
    } else {
      anchor = pos->stream_sequence;
      if (pos->sequence >= acked_next) {
        auto a = transport->ack(pos->sequence);
        if (!a)
          return failure(kExitRuntime, fmt::format("egress {}: {}", o.egress, a.error().what()));
        if (a->status == egress::AckStatus::StaleGeneration)
          return std::unexpected(fenced(o.egress, a->current_generation));
        skipped = pos->sequence + 1 - acked_next;
        acked_next = pos->sequence + 1;
        while (!in_flight.empty() && in_flight.front().sequence < acked_next) in_flight.pop_front();
        sd.acknowledged.fetch_add(skipped, std::memory_order_relaxed);
        live.last_success_ms.store(wall_ms(), std::memory_order_relaxed);
      }
    }
    log("info", "resynced",
        fmt::format("route=export reason={} stream={} last_stream_sequence={} last_id=\"{}\" "
                    "ours={} acked_next={} acknowledged_from_stream={}",
                    reason, **stream, pos->stream_sequence, pos->id, pos->ours, acked_next,
                    skipped));
    return true;
  };
  if (auto r = resync("start"); !r) return at_start(r.error());

  log("info", "ready",
      fmt::format("route=export source={} source_kind={} egress={} subject={} stream={} "
                  "servers={} generation={} replayed={} next_sequence={}",
                  o.source, source_kind, o.egress, o.common.subject, **stream,
                  describe_servers(o.common.connection.servers), transport->generation(),
                  transport->replayed(), next_seq));
  live.connected.store((*link)->connected(), std::memory_order_relaxed);
  live.ready.store(true, std::memory_order_relaxed);
  created.keep();  // running: what this start made stays
  std::fputs("READY export\n", stdout);
  std::fflush(stdout);

  // The window's claims, one egress lock per batch; their payloads are
  // copied into `claimed_payloads` (valid until the next claim).
  std::vector<egress::Envelope> claimed;
  std::vector<std::byte> claimed_payloads;
  // Message ids "<incarnation>-<sequence>", formatted in place: the prefix
  // once, the sequence per message (no allocation per publish).
  const std::string id_prefix = fmt::format("{}-", incarnation);
  char id[64];
  char previous[64];
  std::memcpy(id, id_prefix.data(), id_prefix.size());
  std::memcpy(previous, id_prefix.data(), id_prefix.size());
  const auto format_id = [&](char* buf, std::uint64_t seq) {
    *std::to_chars(buf + id_prefix.size(), buf + sizeof id - 1, seq).ptr = '\0';
  };
  // Publishes per acknowledgement (see InFlight): a quarter of the window,
  // so that groups keep arriving while the oldest is acknowledged; one while
  // publishes fail (each message then has JetStream's own answer, its error
  // code and text) and for the retry after a group was refused (which says
  // only that the stream's last message was not the expected one: the
  // message-by-message retry finds which one and why).
  const std::uint32_t ack_group = std::max<std::uint32_t>(1, o.window / 4);
  bool per_message = false;
  const auto publish_deadline = std::chrono::milliseconds(o.publish_timeout_ms) + 1s;
  bool recovering = false;  // records parked after a failed batch: claim nothing until they return
  std::uint64_t seen_reconnects = (*link)->reconnects();
  std::uint64_t failed_batches = 0;
  // The start of the current run of failures (a time and a flag rather than
  // an optional: g++ 12 at -O1, the TSan lane, warns that the optional's
  // value may be used uninitialized).
  bool failing = false;
  std::chrono::steady_clock::time_point failing_since{};
  bool stream_full = false;  // the last failure: the stream refuses new messages (discard new)
  // The start of the current run of trouble (failing publishes, or the
  // connection down): past --stall-after the route is `stalled`.
  bool troubled = false;
  std::chrono::steady_clock::time_point troubled_since{};
  bool source_end_logged = false;
  bool was_connected = true;
  while (!stop.load(std::memory_order_relaxed)) {
    bool idle = true;
    transport->egress().heartbeat();
    const bool connected = (*link)->connected();
    live.connected.store(connected, std::memory_order_relaxed);
    if (was_connected && !connected) {
      live.set_error(0, "lost the connection to the NATS server (the client reconnects)");
      live.failures.fetch_add(1, std::memory_order_relaxed);
    }
    was_connected = connected;
    // The client reconnects by itself, but gives up on a server that refuses
    // the credentials twice in a row: publishing into a closed connection
    // would fail forever, so the route stops and says why.
    if (!connected)
      if (auto f = (*link)->gave_up(o.common.connection)) return std::unexpected(std::move(*f));
    live.egress_backlog.store(next_seq - acked_next, std::memory_order_relaxed);
    {
      const auto now = std::chrono::steady_clock::now();
      if (connected && !failing) {
        troubled = false;
      } else if (!troubled) {
        troubled = true;
        troubled_since = failing ? std::min(failing_since, now) : now;
      }
      const bool long_troubled =
          troubled && now - troubled_since >= std::chrono::seconds(o.common.stall_after_s);
      RouteCondition c = RouteCondition::Idle;
      if (!connected)
        c = long_troubled ? RouteCondition::Stalled : RouteCondition::Disconnected;
      else if (failing && stream_full)
        c = RouteCondition::StreamFull;
      else if (failing)
        c = long_troubled ? RouteCondition::Stalled : RouteCondition::Retrying;
      else if (next_seq != acked_next ||
               wall_ms() - live.last_success_ms.load(std::memory_order_relaxed) < 2000)
        c = RouteCondition::Moving;
      live.condition.store(c, std::memory_order_relaxed);
    }

    // A lost and re-established connection: a new generation, which fences
    // whatever the old one had in flight and replays it in order.
    if (const std::uint64_t r = (*link)->reconnects(); r != seen_reconnects) {
      seen_reconnects = r;
      transport.reset();
      auto again = attach_transport(o.egress, root);
      if (!again) return std::unexpected(again.error());
      transport.emplace(std::move(*again));
      proj = transport->egress().projection();
      if (!proj)
        return failure(kExitRuntime, fmt::format("egress {}: {}", o.egress, proj.error().what()));
      acked_next = proj->acked_through ? *proj->acked_through + 1 : 0;
      recovering = false;
      in_flight.clear();  // the new generation replays everything unacknowledged
      sd.reconnects.fetch_add(1, std::memory_order_relaxed);
      log("warn", "reconnected",
          fmt::format("route=export generation={} replayed={}", transport->generation(),
                      transport->replayed()));
      if (!anchor)
        if (auto ok = resync("reconnected"); !ok) return std::unexpected(ok.error());
    }

    // 1. Source -> egress, while the egress has room (its Full stops the
    // drain, which pushes back on the application through the ring or
    // channel).
    // A ring source holds the records of the pass and gives them back
    // together after their enqueues (holds_many: one wake of a producer
    // waiting for room per pass, not one per record); the intent then names
    // the pass's first record and sequence, and a bridge killed before the
    // release finds next_sequence - intent records of it in the egress.
    bool source_empty = false;
    std::uint64_t held = 0;  // enqueued this pass, not yet given back (holds_many)
    for (int i = 0; i < 256; ++i) {
      auto rec = source->try_next();
      if (!rec) return std::unexpected(rec.error());
      if (!*rec) {
        source_empty = true;
        if (source->ended() && !source_end_logged) {
          source_end_logged = true;
          log("info", "source_ended",
              fmt::format("route=export source={} next_sequence={} reason=\"{}\"", o.source,
                          next_seq, source->end_reason()));
        }
        break;
      }
      // [bridge.I] the intent: validity cleared first, stored last (release).
      if (held == 0) {
        sd.export_intent_seq.store(kNone, std::memory_order_release);
        sd.export_intent_head.store(source->position(), std::memory_order_relaxed);
        sd.export_intent_seq.store(next_seq, std::memory_order_release);
      }
      auto e = transport->egress().try_enqueue(**rec);
      if (!e) {
        if (e.error().code == Errc::TooLarge)
          return failure(kExitRuntime,
                         fmt::format("source {} {}: a record of {} bytes exceeds the egress slot "
                                     "({}; --max-message sets it when the egress is created)",
                                     source_kind, o.source, (*rec)->size(), e.error().message));
        return failure(kExitRuntime, fmt::format("egress {}: {}", o.egress, e.error().what()));
      }
      if (e->status == egress::EnqueueStatus::Full) {
        source->put_back();
        if (held == 0) sd.export_intent_seq.store(kNone, std::memory_order_release);
        break;
      }
      if (e->sequence != next_seq)
        return failure(kExitBusy, fmt::format("egress {}: got sequence {}, expected {}: another "
                                              "producer writes into the bridge's egress",
                                              o.egress, e->sequence, next_seq));
      crash_point("export_after_enqueue");
      live.bytes_moved.fetch_add((*rec)->size(), std::memory_order_relaxed);
      if (source->holds_many())
        ++held;
      else if (auto ok = source->release(); !ok)
        return std::unexpected(ok.error());
      ++next_seq;
      sd.moved.fetch_add(1, std::memory_order_relaxed);
      idle = false;
    }
    if (held != 0)
      if (auto ok = source->release(); !ok) return std::unexpected(ok.error());

    // 2. Egress -> JetStream, a sliding window: claim and publish
    // asynchronously while fewer than --window messages await their
    // acknowledgement; ack the egress cumulatively through the longest stored
    // prefix as JetStream's acknowledgements come in (nothing is inferred
    // from the absence of an error); a failed or timed-out publish fails it
    // and every message after it (JetStream refuses those anyway: each one
    // expects its predecessor as the stream's last message), and they retry
    // with backoff. JetStream's duplicate window drops the copies of failed
    // messages that had been stored.
    if (recovering) {
      auto due = transport->egress().retry_due(transport->generation(), monotonic_ns());
      if (due && due->status == egress::RetryStatus::StaleGeneration)
        return std::unexpected(fenced(o.egress, due->current_generation));
      auto p = transport->egress().projection();
      if (p && p->parked == 0) recovering = false;
    }
    bool publish_failed = false;
    std::string publish_error;
    bool out_of_order = false;
    while (!recovering && !publish_failed && !out_of_order && in_flight.size() < o.window) {
      auto c = transport->try_claim_batch(o.window - in_flight.size(), claimed, claimed_payloads);
      if (!c)
        return failure(kExitRuntime, fmt::format("egress {}: {}", o.egress, c.error().what()));
      if (c->status == egress::ClaimStatus::StaleGeneration)
        return std::unexpected(fenced(o.egress, c->current_generation));
      if (claimed.empty()) break;
      idle = false;
      const std::uint32_t group = failing || per_message ? 1 : ack_group;
      std::uint32_t in_group = 0;
      const auto now = std::chrono::steady_clock::now();
      for (std::size_t k = 0; k < claimed.size(); ++k) {
        const egress::Envelope& env = claimed[k];
        in_flight.push_back({env.sequence, now + publish_deadline});
        // After a failure in this batch, the rest is claimed but not sent:
        // in flight, so that the failure below fails it too.
        if (publish_failed || out_of_order) continue;
        if (env.sequence != acked_next + in_flight.size() - 1) {
          out_of_order = true;  // not the egress's next: fail what is in flight, retry in order
          continue;
        }
        format_id(id, env.sequence);
        // The stream must hold this message right after the previous one: a
        // message sent after a hole (one lost with a connection while the next
        // ones were buffered and resent) is refused, so the stream's order is
        // the egress's order and the window is retried from the hole.
        // JetStream checks the message id for duplicates before this
        // expectation, so a retried message already stored is acknowledged.
        // The first of a window expects the subject's last stream sequence
        // (`anchor`), which survives a server restart; the others their
        // predecessor's message id.
        const bool first_of_window = env.sequence == acked_next && anchor.has_value();
        const bool expect_previous = !first_of_window && env.sequence != 0;
        if (expect_previous) format_id(previous, env.sequence - 1);
        // The tail of a group (and the last one claimed) asks for an
        // acknowledgement.
        const bool tail = ++in_group == group || k + 1 == claimed.size();
        if (tail) in_group = 0;
        in_flight.back().tail = tail;
        natsStatus ps = NATS_OK;
        if (tail) {
          jsPubOptions po;
          jsPubOptions_Init(&po);
          po.MsgId = id;
          if (first_of_window) po.ExpectLastSubjectSeq = *anchor;  // 0: the subject has none
          if (expect_previous) po.ExpectLastMsgId = previous;
          po.MaxWait = o.publish_timeout_ms;
          ps = js_PublishAsync((*link)->js(), o.common.subject.c_str(), env.payload.data(),
                               static_cast<int>(env.payload.size()), &po);
        } else {
          // The same message and headers as js_PublishAsync's, without a
          // reply subject.
          natsMsg* m = nullptr;
          ps = natsMsg_Create(&m, o.common.subject.c_str(), nullptr,
                              reinterpret_cast<const char*>(env.payload.data()),
                              static_cast<int>(env.payload.size()));
          if (ps == NATS_OK) ps = natsMsgHeader_Set(m, "Nats-Msg-Id", id);
          if (ps == NATS_OK && first_of_window && *anchor > 0) {
            char last[24];
            *std::to_chars(last, last + sizeof last - 1, *anchor).ptr = '\0';
            ps = natsMsgHeader_Set(m, "Nats-Expected-Last-Subject-Sequence", last);
          }
          if (ps == NATS_OK && expect_previous)
            ps = natsMsgHeader_Set(m, "Nats-Expected-Last-Msg-Id", previous);
          if (ps == NATS_OK) ps = natsConnection_PublishMsg((*link)->connection(), m);
          natsMsg_Destroy(m);
        }
        if (ps != NATS_OK) {
          publish_failed = true;
          publish_error = nats_error(ps);
        }
      }
      if (c->status != egress::ClaimStatus::Claimed)
        break;  // the window is full, or nothing pending
    }
    if (!in_flight.empty()) {
      // Nothing else to do this pass: wait a little for an acknowledgement
      // (a record arriving in the source meanwhile waits at most that long).
      collect_outcomes(results, in_flight, idle ? 500us : 0us);
      std::size_t stored = 0;
      while (stored < in_flight.size() && in_flight[stored].state == 1) ++stored;
      if (stored != 0) {
        idle = false;
        const std::uint64_t through = in_flight[stored - 1].sequence;
        crash_point("export_after_publish");
        auto a = transport->ack(through);
        if (!a)
          return failure(kExitRuntime, fmt::format("egress {}: {}", o.egress, a.error().what()));
        if (a->status == egress::AckStatus::StaleGeneration)
          return std::unexpected(fenced(o.egress, a->current_generation));
        acked_next = through + 1;
        anchor = in_flight[stored - 1].stream_sequence;
        in_flight.erase(in_flight.begin(), in_flight.begin() + static_cast<std::ptrdiff_t>(stored));
        sd.acknowledged.fetch_add(stored, std::memory_order_relaxed);
        live.last_success_ms.store(wall_ms(), std::memory_order_relaxed);
        per_message = false;
        if (failed_batches != 0) {
          log("info", "publishing",
              fmt::format("route=export after_failed_batches={}", failed_batches));
          failed_batches = 0;
          failing = false;
        }
      }
      const bool head_failed =
          !in_flight.empty() && (in_flight.front().state == -1 ||
                                 (in_flight.front().state == 0 &&
                                  std::chrono::steady_clock::now() >= in_flight.front().deadline));
      if (publish_failed || out_of_order || head_failed) {
        idle = false;
        // Why, for the log and /status: JetStream's code and text, a
        // publish the client refused, or no answer in time.
        const InFlight& head = in_flight.front();
        // Refused as part of a group: the tail's refusal says only that the
        // stream's last message was not the one it expected. The group is
        // retried message by message, whose answers are the route's
        // failure (or success) to report.
        const bool group_refused =
            head.state == -1 && head.inferred && !publish_failed && !out_of_order;
        int code = 0;
        std::string why;
        if (head.state == -1) {
          code = head.error_code;
          why = head.error.empty() ? "refused" : head.error;
        } else if (publish_failed) {
          why = fmt::format("the client refused the publish: {}", publish_error);
        } else if (out_of_order) {
          why = "claimed out of order";
        } else {
          why = fmt::format("no acknowledgement within {} ms", o.publish_timeout_ms);
        }
        if (group_refused) {
          per_message = true;
        } else {
          live.set_error(code, why);
          // A limit with discard new: "maximum messages/bytes exceeded".
          stream_full = code == kStreamStoreFailed && why.find("maximum") != std::string::npos;
        }
        const std::uint64_t first = head.sequence;
        const std::uint64_t last = in_flight.back().sequence;
        // The stream's last message is not the one expected (a server that
        // lost the last message id, a stored window retried after the
        // duplicate window): what it holds decides. What it holds of the
        // window is acknowledged; the rest is retried from there.
        if (code == JSStreamWrongLastMsgIDErr || code == JSStreamWrongLastSequenceErr) {
          auto r = resync(code == JSStreamWrongLastMsgIDErr ? "wrong_last_msg_id"
                                                            : "wrong_last_sequence");
          if (!r) return std::unexpected(r.error());
          if (code == JSStreamWrongLastMsgIDErr && *r && !shared_stream && anchor.has_value()) {
            auto stream_last = stream_last_sequence(**link, **stream);
            if (stream_last && *stream_last > *anchor) {
              shared_stream = true;
              live.shared_stream.store(true, std::memory_order_relaxed);
              log("warn", "shared_stream",
                  fmt::format("route=export stream={} subject={} subject_last_sequence={} "
                              "stream_last_sequence={} message=\"other publishers write into "
                              "the stream: windows they interleave are refused and retried "
                              "(give the route a stream of its own to spare the retries)\"",
                              **stream, o.common.subject, *anchor, *stream_last));
            }
          }
        }
        if (in_flight.empty()) continue;  // the stream held the whole window
        if (!failing && !group_refused) {
          failing = true;
          failing_since = std::chrono::steady_clock::now();
        }
        for (const InFlight& m : in_flight) {
          auto f = transport->fail(m.sequence);
          if (!f)
            return failure(kExitRuntime, fmt::format("egress {}: {}", o.egress, f.error().what()));
          if (f->status == egress::FailStatus::StaleGeneration)
            return std::unexpected(fenced(o.egress, f->current_generation));
        }
        sd.retries.fetch_add(in_flight.size(), std::memory_order_relaxed);
        in_flight.clear();
        recovering = true;
        if (group_refused) continue;
        live.failures.fetch_add(1, std::memory_order_relaxed);
        // The first failure of a run, then every tenth, with the reason.
        if (failed_batches++ % 10 == 0)
          log("warn", "publish_failed",
              fmt::format("route=export first={} last={} failed_batches={} error_code={} "
                          "error=\"{}\" stream={}",
                          first, last, failed_batches, code, why, **stream));
      }
    }

    if (idle && in_flight.empty()) {
      if (recovering || !source_empty) {
        std::this_thread::sleep_for(2ms);  // backoff pending, or the egress is full
      } else if (auto ok = source->wait(20ms); !ok) {
        return std::unexpected(ok.error());  // woken by a record: the next pass takes it
      }
    }
  }
  log("info", "stopped",
      fmt::format("route=export next_sequence={} acked_next={}", next_seq, acked_next));
  return {};
}

}  // namespace

std::string state_name(const ExportOptions& o) {
  return o.common.state.empty() ? o.source + "-bridge-export" : o.common.state;
}

int run_export(const ExportOptions& o, const std::atomic<bool>& stop, const LogFn& log,
               RouteStatus& live) {
  CreatedSegments created(o.common.root);
  auto r = export_main(o, stop, log, live, created);
  live.ready.store(false, std::memory_order_relaxed);
  if (r) return kExitOk;
  created.remove(log);  // a failed start leaves the root as it found it
  log("error", "failed",
      fmt::format("route=export exit_code={} message=\"{}\"", r.error().code, r.error().message));
  return r.error().code;
}

}  // namespace shm::bridge
