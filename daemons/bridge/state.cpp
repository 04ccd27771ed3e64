#include "bridge/state.hpp"

#include <new>

namespace shm::bridge {

Result<StateSegment> StateSegment::attach(std::string_view name, Route route,
                                          const std::string& root) {
  StateParams params{};
  params.route = static_cast<std::uint32_t>(route);
  StateSegment out;
  auto opened = Segment::open(name, state_spec(params), OpenOptions{.root = root});
  if (!opened && opened.error().code == Errc::NotFound) {
    CreateOptions co;
    co.root = root;
    opened = Segment::create(name, state_spec(params), co, init_state);
    if (opened) out.created_ = true;
    // Lost a creation race: open what the other process made.
    if (!opened && opened.error().code == Errc::AlreadyExists)
      opened = Segment::open(name, state_spec(params), OpenOptions{.root = root});
  }
  if (!opened) return std::unexpected(opened.error());
  auto att = opened->attach(kBridgeRole);
  if (!att) return std::unexpected(att.error());
  out.segment_ = std::move(*opened);
  out.attachment_ = std::move(*att);
  out.data_ = std::launder(reinterpret_cast<StateData*>(out.segment_.data().data()));
  return out;
}

Result<StateSegment> StateSegment::observe(std::string_view name, Route route,
                                           const std::string& root) {
  StateParams params{};
  params.route = static_cast<std::uint32_t>(route);
  auto opened =
      Segment::open(name, state_spec(params), OpenOptions{.root = root, .read_only = true});
  if (!opened) return std::unexpected(opened.error());
  StateSegment out;
  out.segment_ = std::move(*opened);
  out.data_ = std::launder(reinterpret_cast<StateData*>(out.segment_.data().data()));
  return out;
}

}  // namespace shm::bridge
