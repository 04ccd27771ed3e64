// Helpers shared by the monitor's sources (monitor.cpp: the cycle and
// discovery; monitor_observe.cpp: liveness, reclaim, collection;
// monitor_snapshot.cpp: the views for /metrics and /status). Private to the
// sidecar.
#pragma once

#include "shm/error.hpp"
#include "shm/segment/segment.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shm::sidecar::detail {

inline std::uint64_t age_ms(std::uint64_t then_ns, std::uint64_t now_ns) noexcept {
  return then_ns <= now_ns ? (now_ns - then_ns) / 1'000'000u : 0;
}

inline std::string join(const std::vector<std::string>& lines, std::string_view sep) {
  std::string out;
  for (const auto& l : lines) {
    if (!out.empty()) out += sep;
    out += l;
  }
  return out;
}

inline std::string error_text(const Error& e) {
  return e.what();
}

// Options for a writable mapping, opened only for a reclaim or a collection.
inline OpenOptions writable_options(const std::string& root) {
  OpenOptions o;
  o.root = root;
  o.read_only = false;
  o.allow_other_owner = true;
  o.ready_wait = std::chrono::milliseconds(0);
  return o;
}

}  // namespace shm::sidecar::detail
