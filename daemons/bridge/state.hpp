// The state segment of one shm-bridge route: the daemon's handle on it. The
// layout, the protocol of its two hand-overs and the memory-order notes are in
// shm/bridge/state_layout.hpp (the library's, so that shmctl and the sidecar
// can show it too).
#pragma once

#include "shm/bridge/state_layout.hpp"
#include "shm/error.hpp"
#include "shm/segment/segment.hpp"

#include <string>
#include <string_view>

namespace shm::bridge {

// The segment plus the held "bridge" role.
class StateSegment {
 public:
  // Opens the state segment `name` (creating it when missing) and takes the
  // exclusive bridge role. KindMismatch / ParamMismatch when the name holds
  // something else (another kind, or the state of the other route).
  [[nodiscard]] static Result<StateSegment> attach(std::string_view name, Route route,
                                                   const std::string& root);
  // Opens the segment read-only without taking the role (tools, tests: the
  // counters and the applied sequence of a running bridge).
  [[nodiscard]] static Result<StateSegment> observe(std::string_view name, Route route,
                                                    const std::string& root);
  [[nodiscard]] StateData& data() const noexcept { return *data_; }
  [[nodiscard]] bool created() const noexcept { return created_; }

 private:
  Segment segment_;
  Attachment attachment_;
  StateData* data_ = nullptr;
  bool created_ = false;
};

}  // namespace shm::bridge
