// The raw socket side of the HTTP tests: a connection to a loopback port and
// a reader that collects a reply until the server closes.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace shm::test {

// A socket connected to 127.0.0.1:port, or -1 (errno says why).
[[nodiscard]] int connect_loopback(std::uint16_t port);

// Everything the peer sends on `fd` until it closes, a read fails, or `limit`
// has passed (a generous deadline, so a server that never closes fails the
// test instead of hanging it).
[[nodiscard]] std::string read_until_closed(int fd, std::chrono::milliseconds limit);

struct HttpReply {
  int status = 0;
  std::string head;  // status line and headers
  std::string body;
};

// A plain TCP client: sends `request` as is, reads to EOF (5 s at most),
// splits the reply; nullopt when nothing that looks like HTTP/1.1 came back.
[[nodiscard]] std::optional<HttpReply> http_exchange(std::uint16_t port,
                                                     const std::string& request);
// GET `path` from 127.0.0.1:`port`.
[[nodiscard]] std::optional<HttpReply> http_get(std::uint16_t port, const std::string& path);

}  // namespace shm::test
