// A real nats-server with JetStream for the bridge tests, started by the
// test itself: a free loopback port, its own store directory, ready when its
// log says so (polled with a deadline), killed (SIGKILL) and its store
// removed when the object goes out of scope, whatever the test's outcome.
#pragma once

#include "common/subprocess.hpp"

#include <chrono>
#include <csignal>
#include <memory>
#include <string>
#include <vector>

namespace shm::test {

// The nats-server program found at configure time ("" when none was).
[[nodiscard]] std::string nats_server_program();
// A TCP port on 127.0.0.1 nobody listens on right now.
[[nodiscard]] int free_loopback_port();

// Where a server runs and listens: by default a free port on 127.0.0.1 of
// this network namespace.
struct NatsPlacement {
  std::vector<std::string> launcher;  // runs the server through it (e.g. `ip netns exec NS`)
  std::string host = "127.0.0.1";
  int port = 0;  // 0: a free loopback port
};

class NatsServer {
 public:
  // Starts `nats-server -js -a <host> -p <port> -sd <store>` plus `extra`
  // arguments (e.g. --user/--pass). Check ready() after.
  explicit NatsServer(std::vector<std::string> extra = {}, NatsPlacement placement = {});
  NatsServer(const NatsServer&) = delete;
  NatsServer& operator=(const NatsServer&) = delete;
  ~NatsServer();

  // Waits until the server logs "Server is ready" (or the deadline passes).
  [[nodiscard]] bool ready(std::chrono::milliseconds timeout = std::chrono::seconds(20));
  // Stops it with `sig` (SIGKILL: kill -9; SIGTERM: a clean shutdown) and
  // reaps it; the store stays.
  void kill(int sig = SIGKILL);
  // Stops it with `sig`, starts it again on the same port and store, waits
  // for ready.
  [[nodiscard]] bool restart(int sig = SIGKILL,
                             std::chrono::milliseconds timeout = std::chrono::seconds(20));
  // After kill(): starts it again on the same port and store, waits for ready.
  [[nodiscard]] bool start_again(std::chrono::milliseconds timeout = std::chrono::seconds(20));

  [[nodiscard]] int port() const { return port_; }
  [[nodiscard]] std::string url() const {
    return "nats://" + placement_.host + ":" + std::to_string(port_);
  }
  [[nodiscard]] const std::string& dir() const { return dir_; }
  // The server's log so far (for failure messages).
  [[nodiscard]] std::string log() const;

 private:
  void start();
  int port_ = 0;
  std::string dir_;
  std::vector<std::string> extra_;
  NatsPlacement placement_;
  std::unique_ptr<Subprocess> process_;
  std::size_t log_offset_ = 0;  // where the current run's log starts
};

}  // namespace shm::test
