// Test-only access to a channel's internals: drive a producer's rotation one
// step at a time (so a helper process can stop between steps and be killed),
// inject what a buggy or hostile producer could write, and create a channel
// whose epoch counter starts late. Not installed: only the shm_testing target
// (tests) sees libshm/testing/. ChannelTesting is header-only: it costs nothing
// in the hot path.
#pragma once

#include "shm/channel/consumer.hpp"
#include "shm/channel/producer.hpp"

#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace shm::detail {

// Creation knobs the library itself never uses: start the epoch counter at
// `first_epoch` to exercise the u32 generation wrap with a small P.
struct ChannelTestOptions {
  std::uint64_t first_epoch = 0;
};
[[nodiscard]] Result<Segment> create_channel_for_test(std::string_view name,
                                                      const ChannelParams& params,
                                                      const ChannelTestOptions& test,
                                                      const CreateOptions& options = {});

class ChannelTesting {
 public:
  // True when an n-byte payload does not fit the active page (a rotation is due).
  [[nodiscard]] static bool rotation_due(const ChannelProducer& p, std::size_t n) {
    return !p.page_.fits(n);
  }
  // The rotation steps of try_reserve(), one by one.
  [[nodiscard]] static Result<bool> quota_allows(ChannelProducer& p) { return p.quota_allows(); }
  static void seal_active(ChannelProducer& p) { p.seal_active(); }
  static void rebind_next(ChannelProducer& p) { p.rebind_next(); }

  // Appends and publishes a payload in the active page ([chan.P]) without writing
  // its ring descriptor: the state of a producer stopped between [chan.P] and
  // [chan.R], or one that orphans a cell. The page must have room.
  static std::uint64_t publish_without_descriptor(ChannelProducer& p,
                                                  std::span<const std::byte> payload) {
    std::memcpy(p.page_.next_payload(), payload.data(), payload.size());
    const std::uint64_t sequence = p.page_.next_sequence();
    (void)p.page_.publish(static_cast<std::uint32_t>(payload.size()),
                          page::checksum(payload.data(), payload.size()), sequence);
    return sequence;
  }

  // Writes a raw descriptor at the ring tail and publishes it ([chan.R]).
  static void push_descriptor(ChannelProducer& p, const channel::Descriptor& d) {
    std::memcpy(p.view_.ring + (p.tail_ & p.ring_mask_), &d, sizeof d);
    ++p.tail_;
    p.control().producer.tail.store(p.tail_, std::memory_order_release);
  }

  [[nodiscard]] static const channel::View& view(const ChannelEndpoint& e) { return e.view_; }

  // Occupies an endpoint's guard as if another thread were inside one of its
  // calls, until the returned scope ends: what that endpoint does meanwhile
  // on this thread must abort like a second thread would.
  [[nodiscard]] static EndpointGuard::Scope occupy(ChannelEndpoint& e) {
    return EndpointGuard::Scope(e.guard_, "a channel endpoint");
  }
};

}  // namespace shm::detail
