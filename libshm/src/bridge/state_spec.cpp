#include "shm/bridge/state_layout.hpp"

#include "shm/segment/kind_ids.hpp"

#include "format/format.hpp"

#include <algorithm>
#include <cstring>
#include <new>

namespace shm::bridge {
namespace {

std::string mismatch(std::span<const std::byte> found, std::span<const std::byte> expected) {
  const StateParams f = read_state_params(found), e = read_state_params(expected);
  if (f.route != e.route)
    return shm::detail::format(
        "route: segment is the state of an {} route, caller runs an {} route",
        to_string(static_cast<Route>(f.route)), to_string(static_cast<Route>(e.route)));
  if (f.version != e.version)
    return shm::detail::format("version: segment has {}, caller expects {}", f.version, e.version);
  return {};
}

}  // namespace

StateParams read_state_params(std::span<const std::byte> raw) noexcept {
  StateParams p{};
  std::memcpy(&p, raw.data(), std::min(raw.size(), sizeof(p)));
  return p;
}

KindSpec state_spec(const StateParams& params) {
  KindSpec s;
  s.kind = kBridgeStateKind;
  s.kind_name = "bridge_state";
  s.fingerprint = kStateFingerprint;
  s.params = std::as_bytes(std::span(&params, 1));
  s.data_size = sizeof(StateData);
  s.param_mismatch = mismatch;
  return s;
}

Result<void> init_state(std::span<std::byte> data) {
  if (data.size() < sizeof(StateData))
    return fail(Errc::InvalidArgument,
                shm::detail::format("a bridge state needs {} bytes of data, got {}",
                                    sizeof(StateData), data.size()));
  auto* d = new (data.data()) StateData{};
  d->export_intent_seq.store(kNone, std::memory_order_relaxed);
  d->intent_stream_seq.store(kNone, std::memory_order_relaxed);
  return {};
}

}  // namespace shm::bridge
