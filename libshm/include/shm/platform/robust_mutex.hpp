/// @file
/// A robust, process-shared pthread mutex that lives in a shared mapping.
///
/// A holder killed inside the critical section does not wedge everybody else:
/// the kernel walks the dead thread's robust list and marks the mutex
/// OWNER_DIED, and the next locker gets LockResult::OwnerDied. That locker owns
/// the mutex, must repair whatever derived state the dead holder may have left
/// half-updated, then call mark_consistent() before unlock(). Unlocking without
/// mark_consistent() makes the mutex permanently unusable (Unrecoverable).
///
/// Uncontended lock/unlock make no system call (glibc's robust fast path is a
/// compare-and-swap on the owner word plus robust-list bookkeeping in user space).
#pragma once

#include "shm/error.hpp"

#include <pthread.h>
#include <cerrno>
#include <cstdint>
#include <type_traits>

namespace shm::detail {

enum class LockResult : std::uint8_t {
  Acquired,       ///< ordinary acquisition
  OwnerDied,      ///< acquired; the previous holder died inside: repair, then mark_consistent()
  Unrecoverable,  ///< not acquired: a repairer unlocked without marking it consistent
  Failed,         ///< not acquired: any other error (EINVAL on a damaged mutex word, ...)
  Busy,           ///< try_lock only: not acquired, a live holder has it
};

class RobustMutex {
 public:
  /// Initialises the mutex in place (process-shared, robust). Only the creator of
  /// the mapping calls it, before the mapping is published.
  [[nodiscard]] Result<void> init();

  [[nodiscard]] LockResult lock() noexcept {
    const int rc = ::pthread_mutex_lock(&m_);
    if (rc == 0) [[likely]]
      return LockResult::Acquired;
    if (rc == EOWNERDEAD) return LockResult::OwnerDied;
    if (rc == ENOTRECOVERABLE) return LockResult::Unrecoverable;
    return LockResult::Failed;
  }
  /// Never waits: Busy while a live thread holds it (the holder itself too).
  /// A holder that died is OwnerDied here as in lock(): the caller owns it.
  [[nodiscard]] LockResult try_lock() noexcept {
    const int rc = ::pthread_mutex_trylock(&m_);
    if (rc == 0) return LockResult::Acquired;
    if (rc == EBUSY || rc == EDEADLK) return LockResult::Busy;
    if (rc == EOWNERDEAD) return LockResult::OwnerDied;
    if (rc == ENOTRECOVERABLE) return LockResult::Unrecoverable;
    return LockResult::Failed;
  }
  void mark_consistent() noexcept { (void)::pthread_mutex_consistent(&m_); }
  /// Read-only probe for observers (verify): true when the mutex is
  /// permanently unusable (every lock() would say Unrecoverable). Reads glibc's
  /// owner word, which pthread_mutex_unlock sets to PTHREAD_MUTEX_NOTRECOVERABLE
  /// (INT_MAX - 1) when a repairer unlocks without mark_consistent(); false
  /// where that word is not known.
  [[nodiscard]] bool unrecoverable() const noexcept {
#if defined(__GLIBC__)
    // relaxed: a diagnostic read of a word only the lock holder writes.
    return __atomic_load_n(&m_.__data.__owner, __ATOMIC_RELAXED) == 0x7ffffffe;
#else
    return false;
#endif
  }
  void unlock() noexcept {
    (void)::pthread_mutex_unlock(&m_);
  }

 private:
  pthread_mutex_t m_;
};

/// The mutex is part of a file layout: its size is pinned (glibc x86-64/aarch64).
static_assert(std::is_standard_layout_v<RobustMutex>);
static_assert(sizeof(RobustMutex) == sizeof(pthread_mutex_t));
#if defined(__x86_64__) || defined(__aarch64__)
static_assert(sizeof(pthread_mutex_t) == 40 || sizeof(pthread_mutex_t) == 48);
#endif

}  // namespace shm::detail
