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
#pragma once

#include <string_view>

#ifdef SHM_BRIDGE_CRASH_POINTS
#include <signal.h>
#include <unistd.h>
#include <cstdlib>
#include <string>
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

}  // namespace shm::bridge
