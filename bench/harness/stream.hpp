// A one-way stream of stamped messages between this process and a pinned
// peer: the throughput measurement every cross-process harness shares.
//
// Each message carries its sequence number in its first and last 8 bytes
// (with `full`, every byte in between is a function of it too), so a fast but
// wrong transport cannot win. The sender sends for warm-up + duration (and at
// least `min_count` messages), then kStop; the receiver checks every message
// and times the measured window from its side into StreamControl.
#pragma once

#include "harness/harness.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace shm::bench {

inline constexpr std::uint64_t kStop = ~std::uint64_t{0};

inline void stamp(std::span<std::byte> m, std::uint64_t seq, bool full) noexcept {
  std::memcpy(m.data(), &seq, 8);
  if (m.size() >= 16) std::memcpy(m.data() + m.size() - 8, &seq, 8);
  if (full) {
    const std::size_t end = m.size() >= 16 ? m.size() - 8 : m.size();
    for (std::size_t i = 8; i < end; ++i) m[i] = static_cast<std::byte>(seq * 131 + i);
  }
}

inline std::uint64_t sequence_of(std::span<const std::byte> m) noexcept {
  std::uint64_t seq = 0;
  std::memcpy(&seq, m.data(), 8);
  return seq;
}

inline void check(std::span<const std::byte> m, std::uint64_t expected, bool full) {
  const std::uint64_t seq = sequence_of(m);
  bool ok = seq == expected;
  if (ok && m.size() >= 16) {
    std::uint64_t last = 0;
    std::memcpy(&last, m.data() + m.size() - 8, 8);
    ok = last == expected;
  }
  if (ok && full) {
    const std::size_t end = m.size() >= 16 ? m.size() - 8 : m.size();
    for (std::size_t i = 8; i < end && ok; ++i)
      ok = m[i] == static_cast<std::byte>(expected * 131 + i);
  }
  if (!ok)
    throw BenchError(
        fmt::format("message {} of {} bytes arrived corrupt or out of order (got sequence {})",
                    expected, m.size(), seq));
}

// In a SharedBlock: the start gate and what the receiving peer measured.
struct StreamControl {
  StartGate gate;
  std::atomic<std::uint64_t> counted{0};     // messages in the measured window
  std::atomic<std::uint64_t> elapsed_ns{0};  // length of the measured window
};

// The peer's side: receives with recv(buf) until kStop, checking every
// message, and records the window after o.warmup_ns.
template <class O, class Recv>
void receive_stream(const O& o, StreamControl& ctl, std::span<std::byte> buf, Recv&& recv) {
  prefault(buf, true);
  if (!ctl.gate.arrive_and_wait(2, o.run_limit())) throw BenchError("start gate timed out");
  const std::uint64_t start = now_ns();
  std::uint64_t expected = 0, t0 = start, count0 = 0;
  bool measuring = o.warmup_ns == 0;
  for (;;) {
    recv(buf);
    if (sequence_of(buf) == kStop) break;
    check(buf, expected, o.smoke);
    ++expected;
    if (!measuring && (expected & 255) == 0) {
      const std::uint64_t now = now_ns();
      if (now - start >= o.warmup_ns) {
        measuring = true;
        t0 = now;
        count0 = expected;
      }
    }
  }
  const std::uint64_t t1 = now_ns();
  // relaxed: read by the sender after the peer exited (waitpid orders it).
  ctl.counted.store(expected - count0, std::memory_order_relaxed);
  ctl.elapsed_ns.store(t1 - t0, std::memory_order_relaxed);
}

// This side: sends stamped messages with send(buf) for warm-up + duration
// (at least o.min_count), then kStop.
template <class O, class Send>
void send_stream(const O& o, StreamControl& ctl, std::span<std::byte> buf, Send&& send) {
  prefault(buf, true);
  stamp(buf, 0, true);
  if (!ctl.gate.arrive_and_wait(2, o.run_limit())) throw BenchError("start gate timed out");
  const std::uint64_t end = now_ns() + o.warmup_ns + o.duration_ns;
  std::uint64_t seq = 0;
  do {
    for (int k = 0; k < 64; ++k) {
      stamp(buf, seq++, o.smoke);
      send(buf);
    }
  } while (now_ns() < end || seq < o.min_count);
  stamp(buf, kStop, false);
  send(buf);
}

// Messages per second in the window the peer measured (after it exited).
inline double stream_rate(const StreamControl& ctl) noexcept {
  // relaxed: see receive_stream().
  const auto counted = static_cast<double>(ctl.counted.load(std::memory_order_relaxed));
  const auto seconds = static_cast<double>(ctl.elapsed_ns.load(std::memory_order_relaxed)) / 1e9;
  return seconds > 0 ? counted / seconds : 0.0;
}

}  // namespace shm::bench
