// The message format and helpers shared by the ring_producer and ring_consumer
// examples (a header, not a program: examples/CMakeLists.txt builds *.cpp).
//
// Every ring record is one message:
//
//   | seq: u64 | crc: u32 (CRC32C of payload) | flags: u32 | payload ... |
//
// Sequence numbers start at 0 and grow by one; the last record of a stream has
// flags = kEndOfStream, seq = number of data messages, and no payload. Payload
// sizes and bytes are derived from the sequence number, so the producer needs
// no buffer and a reader can tell which message it holds.
#pragma once

#include <shm/error.hpp>
#include <shm/spsc/consumer.hpp>
#include <shm/spsc/producer.hpp>

#include <fmt/format.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace example {

struct MessageHeader {
  std::uint64_t seq;    // 0, 1, 2, ...
  std::uint32_t crc;    // shm::crc32c of the payload
  std::uint32_t flags;  // kEndOfStream on the last record
};
static_assert(sizeof(MessageHeader) == 16);

inline constexpr std::uint32_t kEndOfStream = 1;

// Exit codes of both programs.
inline constexpr int kExitOk = 0;
inline constexpr int kExitVerifyFailed = 1;  // loss, duplication or corruption
inline constexpr int kExitUsage = 2;
inline constexpr int kExitRingError = 3;  // could not create/open the ring, ring error, timeout

[[nodiscard]] constexpr std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Payload size of message `seq`: uniform in [min_size, max_size].
[[nodiscard]] constexpr std::size_t payload_size(std::uint64_t seq, std::size_t min_size,
                                                 std::size_t max_size) noexcept {
  if (max_size <= min_size) return min_size;
  return min_size + static_cast<std::size_t>(splitmix64(seq) % (max_size - min_size + 1));
}

// Fills a payload with bytes derived from `seq` (xorshift64, 8 bytes a step).
inline void fill_payload(std::span<std::byte> out, std::uint64_t seq) noexcept {
  std::uint64_t x = splitmix64(seq) | 1;
  std::size_t i = 0;
  for (;; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    if (i + 8 > out.size()) break;
    std::memcpy(out.data() + i, &x, 8);
  }
  if (i < out.size()) std::memcpy(out.data() + i, &x, out.size() - i);
}

inline void cpu_pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Busy-polls `try_once` (a try_reserve or try_peek) until it yields a value, an
// error, or `deadline` passes. No system calls: this is the --spin mode.
template <class TryOnce>
[[nodiscard]] auto spin_until(TryOnce&& try_once, std::chrono::steady_clock::time_point deadline) {
  for (std::uint32_t i = 1;; ++i) {
    auto r = try_once();
    if (!r || *r) return r;
    if (i % 1024 == 0 && std::chrono::steady_clock::now() >= deadline) return r;
    cpu_pause();
  }
}

// Creates the ring (when `create`) or opens it, retrying for up to `wait` while
// it does not exist yet: the two programs may start in either order.
template <class Endpoint>
[[nodiscard]] shm::Result<Endpoint> create_or_open(const std::string& name, bool create,
                                                   std::uint64_t capacity, const std::string& root,
                                                   std::chrono::milliseconds wait) {
  shm::RingParams params;
  params.capacity_bytes = capacity;  // on open, 0 accepts whatever capacity the creator chose
  if (create) {
    shm::CreateOptions options;
    options.root = root;
    return Endpoint::create(name, params, options);
  }
  shm::OpenOptions options;
  options.root = root;
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    auto e = Endpoint::open(name, params, options);
    const bool retry =
        !e && (e.error().code == shm::Errc::NotFound || e.error().code == shm::Errc::NotReady);
    if (!retry || std::chrono::steady_clock::now() >= deadline) return e;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// "1.23 M msgs/s, 456.7 MB/s" (MB = 10^6 bytes).
[[nodiscard]] inline std::string throughput(std::uint64_t messages, std::uint64_t bytes,
                                            std::chrono::steady_clock::duration elapsed) {
  const double s = std::chrono::duration<double>(elapsed).count();
  if (s <= 0) return "n/a";
  return fmt::format("{:.3f} M msgs/s, {:.1f} MB/s", static_cast<double>(messages) / s / 1e6,
                     static_cast<double>(bytes) / s / 1e6);
}

}  // namespace example
