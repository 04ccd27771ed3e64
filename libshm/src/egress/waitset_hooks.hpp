// What a WaitSet asks of an egress (libshm/src/waitset/waitset.cpp,
// docs/waitset.md): the look a claim or an enqueue makes first, under the
// egress's mutex, and the announcement in its waiter count. Private to the
// library.
#pragma once

#include "shm/egress/egress.hpp"

#include <cstdint>

namespace shm::egress::internal {

/// What a look found.
enum class SetLook : std::uint8_t {
  Nothing,  ///< nothing to claim / no room (announced when asked)
  Ready,    ///< a claim would return a record / an enqueue would not be Full
  Fenced,   ///< the transport's generation is no longer current (a newer transport)
  Busy,     ///< a live holder kept the mutex past one lock slice: not looked
};

/// A transport: Ready when a claim would return a record (after the parked
/// records whose backoff elapsed are scheduled, as a claim does first).
/// When not and `announce`, adds the set's +1 to claim_waiters unless
/// `counted` (then sets it). `due`: the earliest parked record's due time.
/// An error when the egress is faulted or its mutex unusable.
[[nodiscard]] Result<SetLook> look_for_set(const EgressTransport& t, bool announce, bool& counted,
                                           std::uint64_t& due);
/// A producer: Ready when an enqueue would not be Full; as above with space_waiters.
[[nodiscard]] Result<SetLook> look_for_set(const Egress& e, bool announce, bool& counted);
/// Takes the set's +1 back (claim_waiters for a transport, else
/// space_waiters). False when it could not lock (the +1 stays).
[[nodiscard]] bool withdraw_for_set(const Egress& e, bool transport) noexcept;

}  // namespace shm::egress::internal
