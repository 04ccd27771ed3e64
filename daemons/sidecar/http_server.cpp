#include "sidecar/http_server.hpp"

#include "shm/platform/clock.hpp"

#include <fmt/format.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cerrno>
#include <charconv>

namespace shm::sidecar {
namespace {

constexpr std::size_t kMaxRequestHead = 8192;
constexpr std::size_t kMaxClients = 64;
constexpr std::uint64_t kIdleTimeoutNs = 5'000'000'000u;

std::string format_response(int status, std::string_view content_type, std::string_view body,
                            bool head_only, std::string_view extra_headers = {}) {
  std::string out = fmt::format(
      "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n"
      "Cache-Control: no-store\r\n{}\r\n",
      status_line(status), content_type, body.size(), extra_headers);
  if (!head_only) out += body;
  return out;
}

}  // namespace

std::string_view status_line(int status) noexcept {
  switch (status) {
    case 200:
      return "200 OK";
    case 400:
      return "400 Bad Request";
    case 404:
      return "404 Not Found";
    case 405:
      return "405 Method Not Allowed";
    case 431:
      return "431 Request Header Fields Too Large";
    case 500:
      return "500 Internal Server Error";
    case 503:
      return "503 Service Unavailable";
    default:
      return "500 Internal Server Error";
  }
}

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
                fmt::format("listen address '{}': {} is not a loopback address; the sidecar serves "
                            "metrics on 127.0.0.0/8 only (put a proxy in front to expose them)",
                            text, host));
  return ListenAddress{ip, static_cast<std::uint16_t>(port)};
}

Result<HttpServer> HttpServer::listen(std::string_view address) {
  auto parsed = parse_listen_address(address);
  if (!parsed) return std::unexpected(parsed.error());
  HttpServer s;
  s.listen_fd_ = FileHandle(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!s.listen_fd_.valid()) return fail_errno(errno, "socket");
  const int one = 1;
  ::setsockopt(s.listen_fd_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(parsed->port);
  sa.sin_addr.s_addr = htonl(parsed->ipv4);
  if (::bind(s.listen_fd_.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0)
    return fail_errno(errno, fmt::format("bind {}", address));
  if (::listen(s.listen_fd_.get(), 64) != 0)
    return fail_errno(errno, fmt::format("listen {}", address));
  socklen_t len = sizeof sa;
  if (::getsockname(s.listen_fd_.get(), reinterpret_cast<sockaddr*>(&sa), &len) != 0)
    return fail_errno(errno, "getsockname");
  s.port_ = ntohs(sa.sin_port);
  char host[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &sa.sin_addr, host, sizeof host);
  s.address_ = fmt::format("{}:{}", host, s.port_);
  return s;
}

void HttpServer::poll_fds(std::vector<pollfd>& out) const {
  if (!listen_fd_.valid()) return;
  out.push_back(pollfd{listen_fd_.get(), POLLIN, 0});
  for (const Client& c : clients_)
    out.push_back(pollfd{c.fd.get(), static_cast<short>(c.writing ? POLLOUT : POLLIN), 0});
}

void HttpServer::accept_all() {
  for (;;) {
    FileHandle fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd.valid()) return;  // EAGAIN (or a transient error): try again on the next wake
    if (clients_.size() >= kMaxClients) {
      const std::string busy =
          format_response(503, "text/plain; charset=utf-8", "too many connections\n", false);
      (void)::send(fd.get(), busy.data(), busy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      continue;
    }
    Client c;
    c.fd = std::move(fd);
    c.deadline_ns = monotonic_ns() + kIdleTimeoutNs;
    clients_.push_back(std::move(c));
  }
}

void HttpServer::respond(Client& c, const Handler& handler) {
  c.writing = true;
  const std::size_t eol = c.in.find_first_of("\r\n");
  const std::string_view line = std::string_view(c.in).substr(0, eol);
  const std::size_t sp1 = line.find(' ');
  const std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos ||
      !line.substr(sp2 + 1).starts_with("HTTP/")) {
    c.out = format_response(400, "text/plain; charset=utf-8", "malformed request line\n", false);
    return;
  }
  const std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  if (const std::size_t q = target.find('?'); q != std::string_view::npos)
    target = target.substr(0, q);
  const bool head = method == "HEAD";
  if (method != "GET" && !head) {
    c.out = format_response(405, "text/plain; charset=utf-8", "only GET and HEAD are served\n",
                            false, "Allow: GET, HEAD\r\n");
    return;
  }
  HttpResponse r;
  try {
    r = handler(target);
  } catch (const std::exception& e) {
    r = HttpResponse{500, "text/plain; charset=utf-8",
                     fmt::format("internal error: {}\n", e.what())};
  }
  c.out = format_response(r.status, r.content_type, r.body, head);
}

bool HttpServer::progress(Client& c, const Handler& handler) {
  if (!c.writing) {
    bool eof = false;
    char buf[2048];
    while (c.in.size() <= kMaxRequestHead) {
      const ssize_t n = ::recv(c.fd.get(), buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        c.in.append(buf, static_cast<std::size_t>(n));
      } else if (n == 0) {
        eof = true;
        break;
      } else if (errno == EINTR) {
        continue;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        break;
      } else {
        return false;
      }
    }
    const bool complete =
        c.in.find("\r\n\r\n") != std::string::npos || c.in.find("\n\n") != std::string::npos;
    if (complete || (eof && c.in.find('\n') != std::string::npos)) {
      respond(c, handler);
    } else if (c.in.size() > kMaxRequestHead) {
      c.writing = true;
      c.out = format_response(431, "text/plain; charset=utf-8", "request head too large\n", false);
    } else {
      return !eof;  // wait for the rest, unless the client gave up
    }
  }
  while (c.sent < c.out.size()) {
    const ssize_t n = ::send(c.fd.get(), c.out.data() + c.sent, c.out.size() - c.sent,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.sent += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);  // wait for POLLOUT, or failed
    }
  }
  ::shutdown(c.fd.get(), SHUT_WR);
  return false;  // answered: the caller closes it
}

void HttpServer::service(const Handler& handler) {
  if (!listen_fd_.valid()) return;
  accept_all();
  const std::uint64_t now = monotonic_ns();
  std::erase_if(clients_, [&](Client& c) { return now > c.deadline_ns || !progress(c, handler); });
}

}  // namespace shm::sidecar
