// The HTTP endpoint of the libshm daemons (the sidecar today, the bridge
// next): serves a handful of GET paths (/metrics, /status, ...) on a loopback
// TCP port. Request parsing and response writing are cpp-httplib's
// (Debian libcpp-httplib-dev); this component owns only what the daemons
// need around it:
//
//  - The listening socket, bound here (not by cpp-httplib, whose default
//    options set SO_REUSEPORT and so would let a second daemon share a taken
//    port silently): a taken port fails start() with "bind ADDR: Address
//    already in use". Loopback only (127.0.0.0/8, "localhost").
//  - The connections: one request per connection (Connection: close), GET
//    and HEAD only (405 with "Allow: GET, HEAD" otherwise), a request head of
//    at most `max_request_head` bytes (431 beyond), the request read within
//    `timeout` of the connection's start or the connection dropped (an idle
//    client never holds a worker longer), the answer sent within `timeout`
//    of its first byte, at most `max_connections` connections at once (503
//    beyond, answered on the accepting thread without blocking).
//  - The gauge connections(): connections accepted and not yet closed, from
//    cpp-httplib's hand-off of the accepted socket (its task queue, where the
//    count goes up) to the close here (where it goes down): waiting for a
//    request, being answered, or being turned away. The scrape reading it
//    counts itself. cpp-httplib has no such counter; the old hand-written
//    server reported its list of clients, which is the same set.
//  - stop() is prompt: it cuts the connections still waiting for a request
//    instead of waiting for their timeout, and says how many it cut.
//
// Threads: cpp-httplib accepts on one thread and serves each connection on a
// worker of a pool of `max_connections` threads. The handler therefore runs on
// worker threads, several at once: it must be thread-safe (the sidecar takes
// its monitor's mutex).
#pragma once

#include "shm/error.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace shm::daemons {

struct HttpRequest {
  std::string_view path;  // percent-decoded, query string removed
  bool head = false;      // HEAD: the body is computed, its length sent, the body not
  // Connections open at this moment, this one included: accepted by the
  // endpoint and not yet closed (waiting for a request, being answered).
  std::size_t connections = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// Parses "HOST:PORT" where HOST is an IPv4 loopback address (127.0.0.0/8) or
// "localhost"; port 0 lets the kernel pick one.
struct ListenAddress {
  std::uint32_t ipv4 = 0;  // host byte order
  std::uint16_t port = 0;
};
[[nodiscard]] Result<ListenAddress> parse_listen_address(std::string_view text);

struct HttpEndpointOptions {
  std::size_t max_connections = 16;  // also the number of worker threads
  std::chrono::milliseconds timeout{5000};
  std::size_t max_request_head = 8192;
};

class HttpEndpoint {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  // Binds `address` and serves it on background threads until stop() or the
  // destructor. The handler must be thread-safe (see the top of the file).
  [[nodiscard]] static Result<std::unique_ptr<HttpEndpoint>> start(
      std::string_view address, Handler handler, HttpEndpointOptions options = {});

  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;
  ~HttpEndpoint();

  // "127.0.0.1:PORT" with the port actually bound.
  [[nodiscard]] const std::string& address() const noexcept { return address_; }
  [[nodiscard]] std::uint16_t port() const noexcept { return port_; }
  // Connections accepted and not yet closed (see HttpRequest::connections).
  [[nodiscard]] std::size_t connections() const noexcept;

  // Stops accepting, cuts the connections still waiting for (or sending) a
  // request, joins every thread. Returns how many connections it cut
  // unanswered. Idempotent (later calls return 0). Call it from one thread.
  std::size_t stop();

  class Server;  // the cpp-httplib server (http_endpoint.cpp)

 private:
  HttpEndpoint() = default;

  std::unique_ptr<Server> server_;
  std::string address_;
  std::uint16_t port_ = 0;
};

}  // namespace shm::daemons
