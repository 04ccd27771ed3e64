// Crash points for the bridge's fault tests, compiled in only when the build
// makes the tests (SHM_BRIDGE_CRASH_POINTS, from LIBSHM_BUILD_TESTS): with
// SHM_BRIDGE_CRASH=<point>:<n> in its environment the bridge kills itself
// with SIGKILL (a kill -9 at an exact place) the n-th time it passes <point>.
// Points: export_after_enqueue (the record is in the egress, the ring record
// not yet released), export_after_release (the source's record released:
// the ring record freed, the channel lease given back, the relay entry
// committed; passed in ExportSource::release, wherever it is called),
// export_after_publish (JetStream acknowledged a window, the egress not yet
// acknowledged), import_after_intent (the import intent stored, the message
// not yet committed into the ring), import_after_commit (the message is in
// the ring, `applied` not yet advanced), import_before_ack (applied, not yet
// acknowledged to JetStream).
//
// Pause points (the same build condition): with SHM_BRIDGE_PAUSE=<point>:<ms>
// the bridge prints "PAUSED <point>" on stderr the first time it passes
// <point> and sleeps <ms> milliseconds there, so that a test can change the
// world (kill nats-server) at that exact place. Points: export_connected,
// import_connected (the first connection made, nothing asked of JetStream
// yet), import_before_subscribe (the stream found or created, the durable
// consumer not yet made).
#pragma once

#include <string_view>

#ifdef SHM_BRIDGE_CRASH_POINTS
#include <signal.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#endif

namespace shm::bridge {

inline void crash_point([[maybe_unused]] std::string_view point) noexcept {
#ifdef SHM_BRIDGE_CRASH_POINTS
  struct Config {
    std::string point;
    long remaining = 0;
  };
  static Config config = [] {
    Config c;
    if (const char* env = std::getenv("SHM_BRIDGE_CRASH"); env != nullptr) {
      const std::string s(env);
      if (const auto colon = s.rfind(':'); colon != std::string::npos) {
        c.point = s.substr(0, colon);
        c.remaining = std::strtol(s.c_str() + colon + 1, nullptr, 10);
      }
    }
    return c;
  }();
  if (config.remaining > 0 && point == config.point && --config.remaining == 0)
    ::kill(::getpid(), SIGKILL);
#endif
}

inline void pause_point([[maybe_unused]] std::string_view point) noexcept {
#ifdef SHM_BRIDGE_CRASH_POINTS
  // "<point>:<ms>", split once; `ms` is taken by the first thread to pass the
  // point (the routes of a config file run on threads of their own).
  static const std::string config = [] {
    const char* env = std::getenv("SHM_BRIDGE_PAUSE");
    return std::string(env != nullptr ? env : "");
  }();
  static std::atomic<long> ms{[] {
    const auto colon = config.rfind(':');
    return colon == std::string::npos ? 0L : std::strtol(config.c_str() + colon + 1, nullptr, 10);
  }()};
  const auto colon = config.rfind(':');
  if (colon == std::string::npos || point != std::string_view(config).substr(0, colon)) return;
  const long wait = ms.exchange(0, std::memory_order_relaxed);  // once
  if (wait <= 0) return;
  std::fprintf(stderr, "PAUSED %.*s\n", static_cast<int>(point.size()), point.data());
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::milliseconds(wait));
#endif
}

}  // namespace shm::bridge
