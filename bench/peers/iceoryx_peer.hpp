// iceoryx 2.0 publish/subscribe as a transport of the cross-process ring
// harness (issue 17: the peers in the same run). Built only when CMake finds
// iceoryx_posh (then LIBSHM_BENCH_ICEORYX is defined); nothing here includes
// an iceoryx header, so the harness compiles the same either way.
//
// iceoryx needs its daemon, RouDi, and registers each process with it once:
//  - Roudi runs `iox-roudi` (its built-in memory config, or a config file)
//    for the life of the harness and stops it with SIGTERM, so it removes its
//    shared memory;
//  - a process registers on its first Sender/Receiver. A process forked after
//    that inherits a registration that is not its own, so the harness runs
//    every iceoryx case in a fresh child (see xproc_ring.cpp).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace shm::bench::iceoryx {

class Roudi {
 public:
  // Starts iox-roudi, logging into `log_path`, and returns once it accepts
  // clients. Throws BenchError (not installed, exited, not ready in `timeout`).
  // With `config_path`, RouDi reads its memory pools from that file (see
  // write_config), else it uses its built-in ones.
  Roudi(const std::string& log_path, std::chrono::seconds timeout,
        const std::string& config_path = {});
  Roudi(const Roudi&) = delete;
  Roudi& operator=(const Roudi&) = delete;
  ~Roudi();

 private:
  pid_t pid_ = -1;
};

// Writes a RouDi config file of one segment whose memory pools are `pools`
// (chunk bytes, including iceoryx's chunk header, and count); throws BenchError.
void write_config(const std::string& path,
                  const std::vector<std::pair<std::size_t, std::size_t>>& pools);

// One topic, one way. The publisher waits for the subscriber's queue when it
// is full (no message is ever dropped) and the subscriber's queue holds
// `queue` messages, the in-flight budget the other transports get too.
class Sender {
 public:
  // Waits until RouDi has connected a subscriber (at most `limit`).
  Sender(const std::string& topic, std::chrono::milliseconds limit);
  Sender(Sender&&) noexcept;
  ~Sender();
  // loan, copy `message` in, publish; spins while every chunk is in use.
  void send(std::span<const std::byte> message);
  void flush() noexcept {}
  // Zero copy: a chunk of `bytes` to write in place (spins while every chunk
  // is in use), then publish() hands exactly that chunk to the subscribers.
  [[nodiscard]] std::span<std::byte> loan(std::size_t bytes);
  void publish(std::span<std::byte> loaned);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class Receiver {
 public:
  Receiver(const std::string& topic, std::size_t queue, std::chrono::milliseconds limit);
  Receiver(Receiver&&) noexcept;
  ~Receiver();
  // take (spinning while the queue is empty), copy out, release; throws when
  // the chunk is not exactly out.size() bytes.
  void recv(std::span<std::byte> out);
  // Waits (at most `limit`) until RouDi has connected this subscriber to a
  // publisher: one that offers the topic must exist already.
  void wait_subscribed(std::chrono::milliseconds limit);
  // Zero copy: the next sample in place, or nullopt when the queue is empty;
  // hand it back with release().
  [[nodiscard]] std::optional<std::span<const std::byte>> try_take();
  void release(std::span<const std::byte> taken);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shm::bench::iceoryx
