// The daemons' HTTP endpoint (daemons/common/http_endpoint.hpp, cpp-httplib
// underneath) in process, talked to by a plain TCP client on loopback: the
// listen address rules, the responses, the bad requests, the connection
// gauge, the limits and the stop.
#include "common/http_endpoint.hpp"
#include "common/loopback_http.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

namespace shm::daemons {
namespace {

using namespace std::chrono_literals;

int connect_to(std::uint16_t port) {
  const int fd = test::connect_loopback(port);
  EXPECT_GE(fd, 0) << "connect to 127.0.0.1:" << port << ": " << std::strerror(errno);
  return fd;
}

// Reads until the server closes (or a generous deadline passes).
std::string read_to_eof(int fd) {
  return test::read_until_closed(fd, 20s);
}

// One request on a fresh connection, the whole reply.
std::string round_trip(const HttpEndpoint& ep, const std::string& request) {
  const int fd = connect_to(ep.port());
  EXPECT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  std::string reply = read_to_eof(fd);
  ::close(fd);
  return reply;
}

// Polls the gauge until it reads `want` or a generous deadline passes.
std::size_t wait_connections(const HttpEndpoint& ep, std::size_t want) {
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (ep.connections() != want && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);  // a polling pace, not a synchronisation
  return ep.connections();
}

HttpResponse hello(const HttpRequest& req) {
  if (req.path == "/hello") return HttpResponse{200, "text/plain", "hi\n"};
  if (req.path == "/gauge")
    return HttpResponse{200, "text/plain", std::to_string(req.connections) + "\n"};
  if (req.path == "/throw") throw std::runtime_error("boom");
  return HttpResponse{404, "text/plain", "no\n"};
}

TEST(HttpEndpointListen, AcceptsLoopbackOnlyWithAPort) {
  auto a = parse_listen_address("127.0.0.1:9464");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->port, 9464);
  EXPECT_TRUE(parse_listen_address("localhost:0"));
  EXPECT_TRUE(parse_listen_address("127.1.2.3:1"));
  auto any = parse_listen_address("0.0.0.0:9464");
  ASSERT_FALSE(any);
  EXPECT_EQ(any.error().code, Errc::InvalidArgument);
  EXPECT_NE(any.error().message.find("0.0.0.0 is not a loopback address"), std::string::npos);
  auto noport = parse_listen_address("127.0.0.1");
  ASSERT_FALSE(noport);
  EXPECT_NE(noport.error().message.find("HOST:PORT"), std::string::npos);
  auto big = parse_listen_address("127.0.0.1:70000");
  ASSERT_FALSE(big);
  EXPECT_NE(big.error().message.find("'70000'"), std::string::npos);
  EXPECT_FALSE(parse_listen_address("example.com:80"));
}

TEST(HttpEndpoint, ServesOneRequestPerConnectionWithContentLength) {
  auto ep = HttpEndpoint::start("127.0.0.1:0", hello);
  ASSERT_TRUE(ep) << ep.error().what();
  EXPECT_NE((*ep)->port(), 0);
  EXPECT_EQ((*ep)->address(), "127.0.0.1:" + std::to_string((*ep)->port()));
  const std::string ok = round_trip(**ep, "GET /hello?x=1 HTTP/1.0\r\n\r\n");
  EXPECT_TRUE(ok.starts_with("HTTP/1.1 200 OK\r\n")) << ok;
  EXPECT_NE(ok.find("Content-Length: 3\r\n"), std::string::npos) << ok;
  EXPECT_NE(ok.find("Connection: close\r\n"), std::string::npos) << ok;
  EXPECT_NE(ok.find("Cache-Control: no-store\r\n"), std::string::npos) << ok;
  EXPECT_TRUE(ok.ends_with("\r\n\r\nhi\n")) << ok;
  // HTTP/1.1 without "Connection: close" is still answered and closed.
  const std::string one_one = round_trip(**ep, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_TRUE(one_one.ends_with("\r\n\r\nhi\n")) << one_one;
  const std::string head = round_trip(**ep, "HEAD /hello HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(head.starts_with("HTTP/1.1 200 OK\r\n")) << head;
  EXPECT_NE(head.find("Content-Length: 3\r\n"), std::string::npos) << head;
  EXPECT_TRUE(head.ends_with("\r\n\r\n")) << head;
  EXPECT_TRUE(
      round_trip(**ep, "GET /other HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404 Not Found"));
  const std::string del = round_trip(**ep, "DELETE /hello HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(del.starts_with("HTTP/1.1 405")) << del;
  EXPECT_NE(del.find("Allow: GET, HEAD\r\n"), std::string::npos) << del;
  const std::string boom = round_trip(**ep, "GET /throw HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(boom.starts_with("HTTP/1.1 500")) << boom;
  EXPECT_TRUE(boom.ends_with("internal error: boom\n")) << boom;
  EXPECT_EQ(wait_connections(**ep, 0), 0u);
  EXPECT_EQ((*ep)->stop(), 0u);
}

// What the hand-written parser let through or could not read: a version that
// is not HTTP/1.x, a request line without a version, a head over the limit
// spread over many short header lines, a percent-encoded path. Each gets its
// answer and the endpoint keeps serving.
TEST(HttpEndpoint, MalformedOrOversizedRequestsGet400Or431AndServingGoesOn) {
  auto ep = HttpEndpoint::start("127.0.0.1:0", hello);
  ASSERT_TRUE(ep) << ep.error().what();
  const std::string bad_version = round_trip(**ep, "GET /hello HTTP/9.9\r\n\r\n");
  EXPECT_TRUE(bad_version.starts_with("HTTP/1.1 400 Bad Request\r\n")) << bad_version;
  EXPECT_TRUE(bad_version.ends_with("bad request\n")) << bad_version;
  const std::string no_version = round_trip(**ep, "GET /hello\r\n\r\n");
  EXPECT_TRUE(no_version.starts_with("HTTP/1.1 400 ")) << no_version;
  EXPECT_TRUE(round_trip(**ep, "garbage\r\n\r\n").starts_with("HTTP/1.1 400 "));

  std::string many = "GET /hello HTTP/1.1\r\n";
  for (int i = 0; many.size() <= 9000; ++i) many += "X-Pad-" + std::to_string(i) + ": abcdefgh\r\n";
  many += "\r\n";
  const std::string big_head = round_trip(**ep, many);
  EXPECT_TRUE(big_head.starts_with("HTTP/1.1 431 ")) << big_head;
  EXPECT_TRUE(big_head.ends_with("request head too large\n")) << big_head;
  const std::string no_newline = round_trip(**ep, std::string(9000, 'A'));
  EXPECT_TRUE(no_newline.starts_with("HTTP/1.1 431 ")) << no_newline;

  const std::string encoded = round_trip(**ep, "GET /h%65llo HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(encoded.ends_with("\r\n\r\nhi\n")) << encoded;
  const std::string after = round_trip(**ep, "GET /hello HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(after.starts_with("HTTP/1.1 200 OK\r\n")) << after;
  EXPECT_EQ(wait_connections(**ep, 0), 0u);
}

TEST(HttpEndpoint, GaugeCountsOpenConnectionsAndStopCutsTheIdleOnes) {
  // The idle client must outlive the checks: an idle timeout no loaded
  // runner reaches (the default is 5 s).
  HttpEndpointOptions o;
  o.timeout = 120s;
  auto ep = HttpEndpoint::start("127.0.0.1:0", hello, o);
  ASSERT_TRUE(ep) << ep.error().what();
  const int idle = connect_to((*ep)->port());  // never sends a request
  ASSERT_EQ(wait_connections(**ep, 1), 1u);
  // The request that reads the gauge counts itself.
  const std::string gauge = round_trip(**ep, "GET /gauge HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(gauge.ends_with("\r\n\r\n2\n")) << gauge;
  EXPECT_EQ(wait_connections(**ep, 1), 1u);
  // stop() does not wait out the idle client's timeout: it cuts it, says so, and
  // the client sees the connection closed without an answer.
  EXPECT_EQ((*ep)->stop(), 1u);
  EXPECT_EQ((*ep)->connections(), 0u);
  EXPECT_EQ(read_to_eof(idle), "");
  ::close(idle);
  EXPECT_EQ((*ep)->stop(), 0u);  // idempotent
}

TEST(HttpEndpoint, DropsAnIdleConnectionAfterTheTimeout) {
  HttpEndpointOptions o;
  o.timeout = 200ms;
  auto ep = HttpEndpoint::start("127.0.0.1:0", hello, o);
  ASSERT_TRUE(ep) << ep.error().what();
  const int idle = connect_to((*ep)->port());
  // The server closes it on its own (read_to_eof returns at EOF, well before
  // its own deadline), unanswered, and the gauge drops back.
  EXPECT_EQ(read_to_eof(idle), "");
  ::close(idle);
  EXPECT_EQ(wait_connections(**ep, 0), 0u);
  EXPECT_EQ((*ep)->stop(), 0u);  // timed out, not cut by the stop
}

TEST(HttpEndpoint, TurnsAwayConnectionsOverTheLimitWith503) {
  HttpEndpointOptions o;
  o.max_connections = 2;
  o.timeout = 120s;  // the idle clients a and b stay until the test closes them
  auto ep = HttpEndpoint::start("127.0.0.1:0", hello, o);
  ASSERT_TRUE(ep) << ep.error().what();
  const int a = connect_to((*ep)->port());
  const int b = connect_to((*ep)->port());
  ASSERT_EQ(wait_connections(**ep, 2), 2u);
  const std::string busy = round_trip(**ep, "GET /hello HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(busy.starts_with("HTTP/1.1 503 Service Unavailable\r\n")) << busy;
  EXPECT_TRUE(busy.ends_with("too many connections\n")) << busy;
  ::close(a);  // frees a worker: served again
  ASSERT_EQ(wait_connections(**ep, 1), 1u);
  EXPECT_TRUE(round_trip(**ep, "GET /hello HTTP/1.1\r\n\r\n").ends_with("hi\n"));
  EXPECT_EQ((*ep)->stop(), 1u);
  ::close(b);
}

TEST(HttpEndpoint, ATakenPortFailsToStartWithTheReason) {
  auto first = HttpEndpoint::start("127.0.0.1:0", hello);
  ASSERT_TRUE(first) << first.error().what();
  const std::string taken = (*first)->address();
  auto second = HttpEndpoint::start(taken, hello);
  ASSERT_FALSE(second) << "two endpoints bound " << taken;
  EXPECT_NE(second.error().message.find("bind " + taken), std::string::npos)
      << second.error().message;
  EXPECT_NE(second.error().message.find("in use"), std::string::npos) << second.error().message;
  // The first one is not disturbed.
  EXPECT_TRUE(round_trip(**first, "GET /hello HTTP/1.1\r\n\r\n").ends_with("hi\n"));
}

}  // namespace
}  // namespace shm::daemons
