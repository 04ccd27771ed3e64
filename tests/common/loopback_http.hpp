// The raw socket side of the HTTP tests: a connection to a loopback port and
// a reader that collects a reply until the server closes.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace shm::test {

// A socket connected to 127.0.0.1:port, or -1 (errno says why).
[[nodiscard]] int connect_loopback(std::uint16_t port);

// Everything the peer sends on `fd` until it closes, a read fails, or `limit`
// has passed (a generous deadline, so a server that never closes fails the
// test instead of hanging it).
[[nodiscard]] std::string read_until_closed(int fd, std::chrono::milliseconds limit);

}  // namespace shm::test
