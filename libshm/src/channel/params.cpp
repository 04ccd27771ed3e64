// ChannelParams::for_payload: channel parameters derived from a payload size
// (the rule is stated next to the declaration in shm/channel/layout.hpp).
#include "shm/channel/layout.hpp"

#include <algorithm>
#include <bit>
#include <string>
#include <utility>

namespace shm {

Result<ChannelParams> ChannelParams::for_payload(std::size_t max_payload, std::size_t in_flight) {
  constexpr std::uint32_t kPages = 4;
  if (max_payload == 0 || in_flight == 0)
    return fail(Errc::InvalidArgument, "channel for_payload: max_payload " +
                                           std::to_string(max_payload) + " and in_flight " +
                                           std::to_string(in_flight) + " must both be at least 1");
  const std::uint64_t per_page = (std::uint64_t{in_flight} + kPages - 2) / (kPages - 1);
  const std::uint64_t slot = page::aligned_length(max_payload);
  if (max_payload > channel::kMaxPageBytes || per_page > channel::kMaxPageBytes / slot ||
      per_page > channel::kMaxDescriptorsPerPage)
    return fail(Errc::InvalidArgument,
                "channel for_payload: " + std::to_string(in_flight) + " payloads of " +
                    std::to_string(max_payload) + " bytes need more than a page can hold (" +
                    std::to_string(channel::kMaxPageBytes) + " bytes, " +
                    std::to_string(channel::kMaxDescriptorsPerPage) + " descriptors)");
  ChannelParams p;
  p.pages = kPages;
  p.page_bytes = std::max(channel::kMinPageBytes, per_page * slot);
  p.descriptors_per_page = static_cast<std::uint32_t>(std::min<std::uint64_t>(
      channel::kMaxDescriptorsPerPage, std::max(per_page, p.page_bytes / 64)));
  p.ring_cells = static_cast<std::uint32_t>(
      std::clamp<std::uint64_t>(std::bit_ceil(std::uint64_t{kPages} * p.descriptors_per_page),
                                channel::kMinRingCapacity, channel::kMaxRingCapacity));
  if (auto ok = channel::validate(p); !ok) return std::unexpected(std::move(ok.error()));
  return p;
}

}  // namespace shm
