// A tiny HTTP/1.1 responder for /metrics and /status on a loopback TCP socket.
//
// Single-threaded and non-blocking: the daemon polls the descriptors it lists
// (poll_fds) together with its own, then calls service(), which accepts,
// reads and writes whatever is ready without ever blocking. One request per
// connection (Connection: close), GET and HEAD only, request head at most
// 8 KiB, a connection idle for 5 s is dropped, at most 64 at once. So a slow
// or hostile client can neither stall the duty cycle nor delay shutdown.
#pragma once

#include "shm/error.hpp"
#include "shm/platform/file.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

struct pollfd;

namespace shm::sidecar {

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

class HttpServer {
 public:
  // Answers a GET for `path` (query string removed).
  using Handler = std::function<HttpResponse(std::string_view path)>;

  HttpServer() = default;
  HttpServer(HttpServer&&) noexcept = default;
  HttpServer& operator=(HttpServer&&) noexcept = default;

  [[nodiscard]] static Result<HttpServer> listen(std::string_view address);

  // "127.0.0.1:PORT" with the port actually bound.
  [[nodiscard]] const std::string& address() const noexcept { return address_; }
  [[nodiscard]] std::uint16_t port() const noexcept { return port_; }
  [[nodiscard]] std::size_t connections() const noexcept { return clients_.size(); }

  // Appends the listening socket and every connection with the events it waits for.
  void poll_fds(std::vector<pollfd>& out) const;
  // Accepts, reads, answers and closes whatever is ready; never blocks.
  void service(const Handler& handler);

 private:
  struct Client {
    FileHandle fd;
    std::string in;
    std::string out;
    std::size_t sent = 0;
    bool writing = false;
    std::uint64_t deadline_ns = 0;
  };
  void accept_all();
  // False when the connection is finished (closed).
  bool progress(Client& c, const Handler& handler);
  void respond(Client& c, const Handler& handler);

  FileHandle listen_fd_;
  std::string address_;
  std::uint16_t port_ = 0;
  std::vector<Client> clients_;
};

// "200 OK", "404 Not Found", ...
[[nodiscard]] std::string_view status_line(int status) noexcept;

}  // namespace shm::sidecar
