// "Every state change that can unblock a parked party wakes it": parks a
// party on a thread (a blocking call with a long timeout), makes the change,
// and measures how long after the change the call returned. A lost wake-up
// shows as the call's own timeout or the implementation's longest futex slice
// (a second), far above kWakeBound.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <future>
#include <thread>

namespace shm::test {

// The bound a woken party must return within (docs/*.md, the wake-up tables).
inline constexpr std::chrono::milliseconds kWakeBound{100};

struct WakeProbe {
  std::chrono::milliseconds latency{-1};  // change -> return; -1: did not return in time
  bool returned_early = false;            // returned before the change (not parked at all)
};

// `park` runs on its own thread and blocks; `parked()` turns true once it
// announced itself (a waiter count, a counter), then a settle time lets it
// reach the futex. `change` runs on the caller's thread.
inline WakeProbe probe_wake(const std::function<void()>& park, const std::function<bool()>& parked,
                            const std::function<void()>& change,
                            std::chrono::milliseconds give_up = std::chrono::seconds(20)) {
  using clock = std::chrono::steady_clock;
  std::promise<clock::time_point> done;
  auto returned = done.get_future();
  std::thread t([&] {
    park();
    done.set_value(clock::now());
  });
  WakeProbe p;
  const auto deadline = clock::now() + give_up;
  while (!parked() && clock::now() < deadline &&
         returned.wait_for(std::chrono::milliseconds(1)) != std::future_status::ready) {
  }
  if (returned.wait_for(std::chrono::milliseconds(30)) == std::future_status::ready) {
    p.returned_early = true;
    t.join();
    return p;
  }
  const auto changed = clock::now();
  change();
  if (returned.wait_until(changed + give_up) == std::future_status::ready)
    p.latency = std::chrono::duration_cast<std::chrono::milliseconds>(returned.get() - changed);
  t.join();
  return p;
}

// The party was parked when the change came, and returned within kWakeBound.
inline void expect_woken(const WakeProbe& p) {
  EXPECT_FALSE(p.returned_early) << "the party was not parked";
  EXPECT_GE(p.latency.count(), 0) << "never woken";
  EXPECT_LE(p.latency, kWakeBound) << "woken " << p.latency.count() << " ms after";
}

}  // namespace shm::test
