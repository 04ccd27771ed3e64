// The NATS side of a bridge: one connection and its JetStream context, built
// from the connection options, with RAII ownership of the C client's objects.
#pragma once

#include "bridge/failure.hpp"

#include <nats/nats.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace shm::bridge {

struct ConnectionOptions {
  std::vector<std::string> servers;  // nats://host:port, tried in order
  std::string user, password;
  std::string token;
  std::string creds_file;
  std::string tls_ca_file;
  int connect_timeout_ms = 2000;
};

// `url` with any user information replaced by "***" (nats://***@host:4222).
[[nodiscard]] std::string redact_url(const std::string& url);
// The servers, redacted, comma separated (for messages and logs).
[[nodiscard]] std::string describe_servers(const std::vector<std::string>& servers);

// Held by the routes of one process while they create a stream, add a subject
// to one, or read a stream's last message. A stream's subjects are rewritten
// whole, so two additions at once could lose one; and nats-server 2.9 panics
// (a nil store in jsMsgGetRequest) on a last-message request that meets the
// stream's creation, which a config file's import and export routes on one
// stream did at start.
[[nodiscard]] std::mutex& stream_admin_mutex() noexcept;

class NatsLink {
 public:
  NatsLink() = default;
  NatsLink(const NatsLink&) = delete;
  NatsLink& operator=(const NatsLink&) = delete;
  ~NatsLink();

  // What the client does when the connection drops: reconnect by itself
  // (buffering what is sent meanwhile), or close the connection, leaving the
  // caller to connect anew.
  enum class Reconnect { Automatic, Never };

  // Connects (no retry: an unreachable server or a refused credential is an
  // error). `on_publish_ack` (optional) receives the outcome of every
  // asynchronous publish (on a thread of the client; it owns and destroys the
  // message).
  [[nodiscard]] static Outcome<std::unique_ptr<NatsLink>> connect(
      const ConnectionOptions& o, Reconnect reconnect = Reconnect::Automatic,
      jsPubAckHandler on_publish_ack = nullptr, void* closure = nullptr,
      std::int64_t max_pending = 4096);

  [[nodiscard]] natsConnection* connection() const noexcept { return nc_; }
  [[nodiscard]] jsCtx* js() const noexcept { return js_; }
  // Counts reconnections (the client's reconnected callback).
  [[nodiscard]] std::uint64_t reconnects() const noexcept {
    return reconnects_.load(std::memory_order_acquire);  // [bridge.N]: see on_reconnected()
  }
  [[nodiscard]] bool connected() const noexcept;
  // The client gave the connection up while reconnecting (a server that
  // refused the credentials twice in a row): what failed, as connect()
  // reports it (exit 4 for a refusal); nullopt while the connection is up or
  // being re-established.
  [[nodiscard]] std::optional<Failure> gave_up(const ConnectionOptions& o) const;
  // A step of a route's start (a request to JetStream) failed with `f`: when
  // the connection is down by then, the server was lost while the route
  // started, which is exit 3 like a server that never answered (exit 4 when
  // the client gave up on refused credentials); else `f` as it is.
  [[nodiscard]] Failure at_start(Failure f, const ConnectionOptions& o) const;
  // Closes the connection (idempotent): the client's threads stop using it and
  // its subscriptions, which may then be destroyed, before the link is.
  void close() noexcept;

  // The stream that captures `subject`, nullopt when none does.
  // kExitNoStream when the server has no JetStream.
  [[nodiscard]] Outcome<std::optional<std::string>> stream_for(const std::string& subject);
  // Creates stream `name` (file storage, `replicas` copies in a JetStream
  // cluster) capturing `subject`. An existing stream of that name is kept
  // when it captures `subject`; when it does not, `add_subject` adds the
  // subject to it, else kExitNoStream names the stream and its subjects.
  [[nodiscard]] Outcome<void> create_stream(const std::string& name, const std::string& subject,
                                            std::uint32_t replicas = 1, bool add_subject = false);

 private:
  natsOptions* opts_ = nullptr;
  natsConnection* nc_ = nullptr;
  jsCtx* js_ = nullptr;
  std::atomic<std::uint64_t> reconnects_{0};
  static void on_reconnected(natsConnection* nc, void* closure);
  // create_stream's part for a stream that exists without the subject.
  [[nodiscard]] Outcome<void> add_subject_to(const std::string& name, const std::string& subject,
                                             bool add);
};

// What is wrong with a --server URL (nullopt: nothing): the scheme must be
// nats:// or tls://, then a host and a port in 1-65535 (user information
// before an `@` is allowed, never shown).
[[nodiscard]] std::optional<std::string> server_url_problem(const std::string& url);

// "NATS_TIMEOUT: <last error text>" for messages.
[[nodiscard]] std::string nats_error(natsStatus s);

}  // namespace shm::bridge
