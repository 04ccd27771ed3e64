// A consumer of the soak that goes away now and then, so its producers fill
// what they write into (a relay's head spills, an egress pool fills): about
// every `every_ms` (jittered 0.5x-1.5x) it sleeps about `pause_ms` (same
// jitter), waking every 10 ms to see the stop flag. pause_ms 0: never.
#pragma once

#include "soak_process.hpp"

#include <chrono>
#include <cstdint>
#include <random>
#include <thread>

namespace soak {

class RandomPauses {
 public:
  RandomPauses(std::mt19937_64& rng, std::uint64_t every_ms, std::uint64_t pause_ms)
      : rng_(rng), every_ms_(every_ms), pause_ms_(pause_ms), next_(after(every_ms)) {}

  // Sleeps through a pause when one is due (or until g_stop); else returns at once.
  void maybe_pause() {
    if (pause_ms_ == 0 || std::chrono::steady_clock::now() < next_) return;
    const auto until = after(pause_ms_);
    while (g_stop == 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    next_ = after(every_ms_);
  }

 private:
  std::chrono::steady_clock::time_point after(std::uint64_t ms) {
    return std::chrono::steady_clock::now() + std::chrono::milliseconds(ms / 2 + rng_() % (ms + 1));
  }

  std::mt19937_64& rng_;
  std::uint64_t every_ms_;
  std::uint64_t pause_ms_;
  std::chrono::steady_clock::time_point next_;
};

}  // namespace soak
