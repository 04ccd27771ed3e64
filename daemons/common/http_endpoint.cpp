#include "common/http_endpoint.hpp"

#include "shm/platform/clock.hpp"
#include "shm/platform/file.hpp"

#include <fmt/format.h>
#include <httplib.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <thread>

namespace shm::daemons {
namespace {

constexpr const char* kText = "text/plain; charset=utf-8";

// Body text of the errors cpp-httplib answers by itself.
std::string_view reason(int status) noexcept {
  switch (status) {
    case 400:
      return "bad request";
    case 414:
      return "request target too long";
    case 416:
      return "range not satisfiable";
    case 417:
      return "expectation failed";
    default:
      return status >= 500 ? "internal error" : "request refused";
  }
}

// One connection's socket as cpp-httplib's Stream: reads and writes wait on
// the socket and on the endpoint's stop eventfd, each phase up to a deadline:
// the request must arrive within `timeout` of the connection's start, the
// response must leave within `timeout` of its first byte (so a handler that
// waited for the daemon's lock still gets its answer out). Reads stop at
// `max_head` bytes (a request is a head only: GET and HEAD have no body, and
// no other method is read past its head).
class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(int sock, int stop_fd, std::uint64_t timeout_ns, std::size_t max_head)
      : sock_(sock),
        stop_fd_(stop_fd),
        timeout_ns_(timeout_ns),
        deadline_ns_(monotonic_ns() + timeout_ns),
        max_head_(max_head) {}

  bool is_readable() const override { return pos_ < len_ || wait(POLLIN); }
  bool is_writable() const override { return wait(POLLOUT); }

  ssize_t read(char* ptr, size_t size) override {
    if (pos_ == len_) {
      if (taken_ >= max_head_) {
        // Ends the line being read: the request does not parse, the
        // endpoint's error handler turns that 400 into a 431.
        head_too_large_ = true;
        return 0;
      }
      for (;;) {
        if (!wait(POLLIN)) return -1;
        const ssize_t n =
            ::recv(sock_, buf_, std::min(sizeof buf_, max_head_ - taken_), MSG_DONTWAIT);
        if (n > 0) {
          pos_ = 0;
          len_ = static_cast<std::size_t>(n);
          taken_ += len_;
          break;
        }
        if (n == 0) return 0;
        if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) return -1;
      }
    }
    const std::size_t k = std::min(size, len_ - pos_);
    std::copy_n(buf_ + pos_, k, ptr);
    pos_ += k;
    return static_cast<ssize_t>(k);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!writing_) {
      writing_ = true;
      deadline_ns_ = monotonic_ns() + timeout_ns_;
    }
    std::size_t done = 0;
    while (done < size) {
      if (!wait(POLLOUT)) return -1;
      const ssize_t n = ::send(sock_, ptr + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        done += static_cast<std::size_t>(n);
        answered_ = true;
      } else if (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
        return -1;
      }
    }
    return static_cast<ssize_t>(size);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    address(::getpeername, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    address(::getsockname, ip, port);
  }
  socket_t socket() const override { return sock_; }

  [[nodiscard]] bool head_too_large() const noexcept { return head_too_large_; }
  [[nodiscard]] bool stopped() const noexcept { return stopped_; }
  [[nodiscard]] bool answered() const noexcept { return answered_; }

 private:
  // True when the socket is ready for `events`; false on stop, timeout or error.
  bool wait(short events) const {
    for (;;) {
      const std::uint64_t now = monotonic_ns();
      if (now >= deadline_ns_) return false;
      const std::uint64_t left_ms = (deadline_ns_ - now + 999'999u) / 1'000'000u;
      pollfd fds[2] = {{sock_, events, 0}, {stop_fd_, POLLIN, 0}};
      const int rc = ::poll(fds, 2, static_cast<int>(std::min<std::uint64_t>(left_ms, INT_MAX)));
      if (rc < 0 && errno != EINTR) return false;
      if ((fds[1].revents & POLLIN) != 0) {
        stopped_ = true;
        return false;
      }
      if (fds[0].revents != 0) return true;  // ready, or POLLERR/POLLHUP: the call reports it
    }
  }

  template <class Get>
  void address(Get get, std::string& ip, int& port) const {
    sockaddr_in sa{};
    socklen_t len = sizeof sa;
    char host[INET_ADDRSTRLEN] = {};
    if (get(sock_, reinterpret_cast<sockaddr*>(&sa), &len) == 0 && sa.sin_family == AF_INET &&
        ::inet_ntop(AF_INET, &sa.sin_addr, host, sizeof host) != nullptr) {
      ip = host;
      port = ntohs(sa.sin_port);
    }
  }

  int sock_;
  int stop_fd_;
  std::uint64_t timeout_ns_;
  std::uint64_t deadline_ns_;  // of the phase: reading the request, then writing the answer
  std::size_t max_head_;
  char buf_[4096];
  std::size_t pos_ = 0, len_ = 0, taken_ = 0;
  bool head_too_large_ = false;
  bool writing_ = false;
  bool answered_ = false;
  mutable bool stopped_ = false;
};

// The connection the current thread serves (its worker), for the error handler.
thread_local const ConnectionStream* t_connection = nullptr;
// Set while the accepting thread turns a connection away (over the limit).
thread_local bool t_turn_away = false;

}  // namespace

// cpp-httplib's Server with the connection handling of this component:
// process_and_close_socket() (a virtual of httplib::Server, overridden as
// its SSLServer does) serves one request per connection through
// ConnectionStream and the protected process_request(), which does the
// parsing, the routing hooks and the response writing.
class HttpEndpoint::Server final : public httplib::Server {
 public:
  Server(HttpEndpoint::Handler handler, HttpEndpointOptions options)
      : handler_(std::move(handler)),
        options_(options),
        stop_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    new_task_queue = [this] { return new CountingQueue(*this); };
    set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (req.method != "GET" && req.method != "HEAD") {
        res.status = 405;
        res.set_header("Allow", "GET, HEAD");
        res.set_content("only GET and HEAD are served\n", kText);
        return HandlerResponse::Handled;
      }
      HttpResponse r = handler_(HttpRequest{req.path, req.method == "HEAD", connections()});
      res.status = r.status;
      res.set_header("Cache-Control", "no-store");
      res.set_content(std::move(r.body), r.content_type.c_str());
      return HandlerResponse::Handled;
    });
    set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
          std::string what = "unknown exception";
          try {
            std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            what = e.what();
          } catch (...) {
          }
          res.status = 500;
          res.set_content(fmt::format("internal error: {}\n", what), kText);
        });
    // Every status >= 400 passes here: give the ones cpp-httplib produced
    // itself (400 for a request that does not parse, ...) a text body, and
    // report a head cut at max_request_head as 431.
    set_error_handler(HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
      if (t_connection != nullptr && t_connection->head_too_large()) {
        res.status = 431;
        res.set_content("request head too large\n", kText);
      } else if (res.body.empty()) {
        res.set_content(fmt::format("{}\n", reason(res.status)), kText);
      }
      return HandlerResponse::Handled;
    }));
  }

  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  ~Server() override { (void)stop_serving(); }

  [[nodiscard]] bool valid() const noexcept { return stop_fd_.valid(); }

  // Serves the bound, listening socket on a new thread. cpp-httplib gets a
  // duplicate, which it closes itself when its accept loop ends (stopped, or
  // failed on its own); ours stays valid to shut the socket down with.
  Result<void> serve(FileHandle listen_fd) {
    const int dup = ::fcntl(listen_fd.get(), F_DUPFD_CLOEXEC, 0);
    if (dup < 0) return fail_errno(errno, "dup listening socket");
    listen_fd_ = std::move(listen_fd);
    svr_sock_ = dup;
    thread_ = std::thread([this] { (void)listen_after_bind(); });
    return {};
  }

  // Cuts the waiting connections, stops the accept loop, joins every thread.
  std::size_t stop_serving() {
    if (!thread_.joinable()) return 0;
    const std::uint64_t one = 1;
    // The eventfd stays readable from here on: every wait of every
    // connection, present or later, sees it.
    (void)::write(stop_fd_.get(), &one, sizeof one);
    // Not httplib::Server::stop(): it does nothing before the accept thread
    // has set is_running_. Shutting the socket down works at any point: the
    // accept() in progress or to come fails, and the loop ends (closing its
    // duplicate).
    ::shutdown(listen_fd_.get(), SHUT_RDWR);
    thread_.join();  // cpp-httplib joins its workers before its accept loop returns
    listen_fd_ = FileHandle();
    // relaxed: the join above ordered every worker's increment before this load.
    return cut_.exchange(0, std::memory_order_relaxed);
  }

  // [http.open] relaxed: a gauge read for display; it publishes nothing.
  [[nodiscard]] std::size_t connections() const noexcept {
    return open_.load(std::memory_order_relaxed);
  }

 private:
  // cpp-httplib's ThreadPool (max_connections workers) behind a count of the
  // open connections: a connection over the limit is turned away on the
  // accepting thread, so every admitted one has a worker at once.
  class CountingQueue final : public httplib::TaskQueue {
   public:
    explicit CountingQueue(Server& owner)
        : owner_(owner), pool_(std::max<std::size_t>(owner.options_.max_connections, 1)) {}
    void enqueue(std::function<void()> fn) override {
      // [http.open] relaxed: counts; the connection itself reaches the worker
      // through the pool's mutex.
      if (owner_.open_.fetch_add(1, std::memory_order_relaxed) >= owner_.options_.max_connections) {
        t_turn_away = true;
        fn();  // process_and_close_socket(): a 503 without blocking, then close
        t_turn_away = false;
        return;
      }
      pool_.enqueue(std::move(fn));
    }
    void shutdown() override { pool_.shutdown(); }

   private:
    Server& owner_;
    httplib::ThreadPool pool_;
  };

  bool process_and_close_socket(socket_t sock) override {
    bool ok = false;
    if (t_turn_away) {
      static constexpr std::string_view busy =
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
          "Content-Length: 21\r\nConnection: close\r\n\r\ntoo many connections\n";
      (void)::send(sock, busy.data(), busy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    } else {
      const auto timeout_ns = static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(options_.timeout).count());
      ConnectionStream stream(sock, stop_fd_.get(), timeout_ns, options_.max_request_head);
      t_connection = &stream;
      bool closed = false;
      ok = process_request(stream, /*close_connection=*/true, closed, nullptr);
      t_connection = nullptr;
      // [http.cut] relaxed: read by stop_serving() after joining this thread.
      if (stream.stopped() && !stream.answered()) cut_.fetch_add(1, std::memory_order_relaxed);
    }
    // Half-close, then discard what the client sent beyond what was read (an
    // oversized head), so the close does not reset the connection under the
    // response still in flight.
    ::shutdown(sock, SHUT_WR);
    char sink[4096];
    for (int i = 0; i < 16 && ::recv(sock, sink, sizeof sink, MSG_DONTWAIT) > 0; ++i) {
    }
    ::close(sock);
    open_.fetch_sub(1, std::memory_order_relaxed);  // [http.open]
    return ok;
  }

  HttpEndpoint::Handler handler_;
  HttpEndpointOptions options_;
  FileHandle stop_fd_;    // eventfd, readable once stop_serving() began
  FileHandle listen_fd_;  // the listening socket (cpp-httplib's svr_sock_ is a duplicate)
  std::atomic<std::size_t> open_{0};
  std::atomic<std::size_t> cut_{0};
  std::thread thread_;
};

Result<ListenAddress> parse_listen_address(std::string_view text) {
  const std::size_t colon = text.rfind(':');
  if (colon == std::string_view::npos)
    return fail(Errc::InvalidArgument,
                fmt::format("listen address '{}' must be HOST:PORT, e.g. 127.0.0.1:9464", text));
  std::string host(text.substr(0, colon));
  const std::string_view port_text = text.substr(colon + 1);
  unsigned port = 0;
  const auto [end, ec] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port_text.empty() ||
      port > 65535)
    return fail(Errc::InvalidArgument,
                fmt::format("listen address '{}': port '{}' is not a number in [0, 65535]", text,
                            port_text));
  if (host == "localhost") host = "127.0.0.1";
  in_addr addr{};
  if (::inet_pton(AF_INET, host.c_str(), &addr) != 1)
    return fail(Errc::InvalidArgument,
                fmt::format("listen address '{}': host '{}' is not an IPv4 address", text, host));
  const std::uint32_t ip = ntohl(addr.s_addr);
  if ((ip >> 24) != 127)
    return fail(Errc::InvalidArgument,
                fmt::format("listen address '{}': {} is not a loopback address; the daemons serve "
                            "HTTP on 127.0.0.0/8 only (put a proxy in front to expose them)",
                            text, host));
  return ListenAddress{ip, static_cast<std::uint16_t>(port)};
}

Result<std::unique_ptr<HttpEndpoint>> HttpEndpoint::start(std::string_view address, Handler handler,
                                                          HttpEndpointOptions options) {
  auto parsed = parse_listen_address(address);
  if (!parsed) return std::unexpected(parsed.error());
  // Blocking: cpp-httplib's accept loop blocks in accept() on it.
  FileHandle fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return fail_errno(errno, "socket");
  // SO_REUSEADDR only (a port in TIME_WAIT can be bound again); not
  // SO_REUSEPORT, which would let two daemons share one port.
  const int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(parsed->port);
  sa.sin_addr.s_addr = htonl(parsed->ipv4);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0)
    return fail_errno(errno, fmt::format("bind {}", address));
  if (::listen(fd.get(), 64) != 0) return fail_errno(errno, fmt::format("listen {}", address));
  socklen_t len = sizeof sa;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sa), &len) != 0)
    return fail_errno(errno, "getsockname");

  std::unique_ptr<HttpEndpoint> ep(new HttpEndpoint());
  ep->port_ = ntohs(sa.sin_port);
  char host[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &sa.sin_addr, host, sizeof host);
  ep->address_ = fmt::format("{}:{}", host, ep->port_);
  ep->server_ = std::make_unique<Server>(std::move(handler), options);
  if (!ep->server_->valid()) return fail_errno(errno, "eventfd");
  if (auto ok = ep->server_->serve(std::move(fd)); !ok) return std::unexpected(ok.error());
  return ep;
}

HttpEndpoint::~HttpEndpoint() {
  (void)stop();
}

std::size_t HttpEndpoint::connections() const noexcept {
  return server_ ? server_->connections() : 0;
}

std::size_t HttpEndpoint::stop() {
  return server_ ? server_->stop_serving() : 0;
}

}  // namespace shm::daemons
