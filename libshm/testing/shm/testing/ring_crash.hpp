// Test-only: stop an SpscRing endpoint at a point inside commit() or
// release(), and switch its light barrier to the fallback.
//
// The crash points are calls in the inline hot path of RingProducer::commit()
// and RingConsumer::release() (libshm/include/shm/spsc/). With no hook set on
// the handle each costs one load of a member of the handle and a predictable
// branch. A test helper sets a hook that stops (prints a line, sleeps until
// it is killed -9) at the point it wants; the test then checks what the next
// producer or consumer finds. Not installed: only the shm_testing target
// (tests) sees libshm/testing/.
#pragma once

#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"

#include <cstdint>

namespace shm::test_hooks {

enum class RingCrashPoint : std::uint8_t {
  CommitBeforePublish =
      0,  // commit(): payloads, later headers, terminator written; first header not
  CommitAfterPublish = 1,  // commit(): first header stored (batch visible); `tail` hint not updated
  ReleaseBeforeHead = 2,   // release(): records handled, `head` not yet stored
  ReleaseAfterHead = 3,    // release(): `head` stored, the records counter not yet
};

using RingCrashHook = void (*)(RingCrashPoint point);

// Sets `hook` on one handle (nullptr removes it).
void set_ring_crash_hook(RingProducer& producer, RingCrashHook hook) noexcept;
void set_ring_crash_hook(RingConsumer& consumer, RingCrashHook hook) noexcept;

// Makes the handle behave as in a process whose membarrier registration
// failed: a full fence as the light barrier after each publish.
void force_fenced_waker(RingProducer& producer) noexcept;
void force_fenced_waker(RingConsumer& consumer) noexcept;

}  // namespace shm::test_hooks
