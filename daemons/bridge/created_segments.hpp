// The local segments a route created while it started (its state segment,
// the egress, a ring or channel made by --create-ring / --create-channel): a
// start that fails before READY removes them again, so that a refused start
// leaves the root as it found it. Segments that existed before are never
// touched, and neither is a created one that another process (or another
// route of this one) has attached to meanwhile: an application that already
// writes into a ring the bridge made keeps it.
#pragma once

#include "bridge/routes.hpp"

#include "shm/segment/segment.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace shm::bridge {

class CreatedSegments {
 public:
  explicit CreatedSegments(std::string root) : root_(std::move(root)) {}

  // `name` (a "state", "egress", "source ring", ...) was created by this start.
  void add(std::string what, std::string name) {
    created_.push_back({std::move(what), std::move(name)});
  }
  // The route is running: what it created stays.
  void keep() noexcept { created_.clear(); }

  // The start failed: removes what it created, newest first. Called once the
  // route's own handles are closed (their attachments released).
  void remove(const LogFn& log) {
    for (auto it = created_.rbegin(); it != created_.rend(); ++it) {
      auto seg = Segment::open_any(it->name, OpenOptions{.root = root_, .read_only = true});
      if (!seg) continue;  // gone already
      const auto slots = seg->slots();
      const bool in_use = std::ranges::any_of(
          slots, [](const SlotInfo& s) { return s.liveness != Liveness::Free; });
      if (in_use) {
        log("info", "kept_segment",
            fmt::format("{}={} reason=\"created by the failed start, but attached to since\"",
                        it->what, it->name));
        continue;
      }
      if (auto ok = seg->unlink(); ok)
        log("info", "removed_segment",
            fmt::format("{}={} reason=\"created by the failed start\"", it->what, it->name));
    }
    created_.clear();
  }

 private:
  struct Created {
    std::string what;  // a logfmt key: state, egress, source, dest
    std::string name;
  };
  std::string root_;
  std::vector<Created> created_;
};

}  // namespace shm::bridge
