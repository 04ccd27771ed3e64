// Private to the topic's sources: the process-local state behind a handle,
// the store helper (a crash point at every store of the shared structure)
// and the mutex guard.
#pragma once

#include "platform/store_crash.hpp"
#include "shm/platform/endpoint_guard.hpp"
#include "shm/segment/segment.hpp"
#include "shm/topic/layout.hpp"
#include "shm/topic/topic.hpp"

#include <atomic>
#include <cstdint>

namespace shm::topic::detail {

// The state a handle owns, on the heap so that samples keep pointing at it
// when the handle moves.
struct Core {
  Segment segment;
  Attachment attachment;
  View v;
  bool publisher = false;
  std::size_t record = 0;  // subscriber record (slot - kExclusiveSlots)
  TopicOverflow overflow = TopicOverflow::DropOldest;
  std::uint32_t incarnation = 0;  // the publisher's
  // Loans or held samples alive in this process. Atomic: a sample may be
  // dropped on another thread than the handle's (relaxed: a count, the
  // mutex orders what the drop does in the segment).
  std::atomic<std::uint32_t> outstanding{0};
  shm::detail::EndpointGuard guard;
};

// Every store to the topic's shared words: a crash point first (test hook,
// shm/testing/store_crash.hpp), then the store. [topic.M] relaxed by
// default: the mutex's unlock/lock pair orders it for the next locker.
template <class T, class V>
inline void st(std::atomic<T>& a, V value,
               std::memory_order order = std::memory_order_relaxed) noexcept {
  ::shm::detail::store_crash_tick();
  a.store(static_cast<T>(value), order);
}

// Relaxed load of a word written under the mutex, read under it.
template <class T>
[[nodiscard]] inline T ld(const std::atomic<T>& a) noexcept {
  return a.load(std::memory_order_relaxed);  // [topic.M] ordered by the mutex
}

// Takes the topic's mutex; repairs when the previous owner died inside it.
// Faulted when the mutex is unrecoverable, Corrupt when repair found the
// references impossible (the mutex is then released).
[[nodiscard]] Result<void> lock(const Segment& segment, const View& v);
// lock() for the try_ calls: false (nothing locked) when a live process
// holds the mutex through one lock slice (stopped inside it, say), which the
// caller answers as "nothing now" (no chunk, Full, no sample) instead of
// waiting for ever; its timed form waits on and retries within its timeout.
[[nodiscard]] Result<bool> lock_briefly(const Segment& segment, const View& v);
inline void unlock(const View& v) noexcept {
  v.control->lock.mutex.unlock();
}

}  // namespace shm::topic::detail
