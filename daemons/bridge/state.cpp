#include "bridge/state.hpp"

#include "shm/segment/kind_ids.hpp"
#include "shm/segment/layout.hpp"

#include <fmt/format.h>

#include <cstring>
#include <new>

namespace shm::bridge {

std::string_view to_string(Route r) noexcept {
  switch (r) {
    case Route::Export:
      return "export";
    case Route::Import:
      return "import";
  }
  return "unknown";
}

namespace {

constexpr std::uint64_t kStateFingerprint =
    layout_fingerprint({1, sizeof(StateData), sizeof(StateParams), alignof(StateData)});

StateParams read_params(std::span<const std::byte> raw) {
  StateParams p{};
  std::memcpy(&p, raw.data(), std::min(raw.size(), sizeof(p)));
  return p;
}

std::string mismatch(std::span<const std::byte> found, std::span<const std::byte> expected) {
  const StateParams f = read_params(found), e = read_params(expected);
  if (f.route != e.route)
    return fmt::format("route: segment is the state of an {} route, caller runs an {} route",
                       to_string(static_cast<Route>(f.route)),
                       to_string(static_cast<Route>(e.route)));
  if (f.version != e.version)
    return fmt::format("version: segment has {}, caller expects {}", f.version, e.version);
  return {};
}

KindSpec spec(const StateParams& params) {
  KindSpec s;
  s.kind = kBridgeStateKind;
  s.kind_name = "bridge_state";
  s.fingerprint = kStateFingerprint;
  s.params = std::as_bytes(std::span(&params, 1));
  s.data_size = sizeof(StateData);
  s.param_mismatch = mismatch;
  return s;
}

}  // namespace

Result<StateSegment> StateSegment::attach(std::string_view name, Route route,
                                          const std::string& root) {
  StateParams params{};
  params.route = static_cast<std::uint32_t>(route);
  StateSegment out;
  auto opened = Segment::open(name, spec(params), OpenOptions{.root = root});
  if (!opened && opened.error().code == Errc::NotFound) {
    CreateOptions co;
    co.root = root;
    opened = Segment::create(name, spec(params), co, [](std::span<std::byte> data) -> Result<void> {
      auto* d = new (data.data()) StateData{};
      d->export_intent_seq.store(kNone, std::memory_order_relaxed);
      d->intent_stream_seq.store(kNone, std::memory_order_relaxed);
      return {};
    });
    if (opened) out.created_ = true;
    // Lost a creation race: open what the other process made.
    if (!opened && opened.error().code == Errc::AlreadyExists)
      opened = Segment::open(name, spec(params), OpenOptions{.root = root});
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
  auto opened = Segment::open(name, spec(params), OpenOptions{.root = root, .read_only = true});
  if (!opened) return std::unexpected(opened.error());
  StateSegment out;
  out.segment_ = std::move(*opened);
  out.data_ = std::launder(reinterpret_cast<StateData*>(out.segment_.data().data()));
  return out;
}

}  // namespace shm::bridge
