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
/// A lock word can also name an owner the kernel will never mark dead: a
/// corrupt or hostile file holding a garbage owner thread id (the robust list
/// only covers threads that died while registered). pthread_mutex_lock would
/// wait on it forever. lock() never does: it waits in slices of kLockSlice and,
/// each time a slice ends without the mutex, reads the owner thread id from the
/// lock word (glibc) and judges it (judge_owner): a holder is a live thread of
/// a process that maps the mutex's file. An owner that does not exist, is a
/// kernel thread, is the calling thread, or belongs to a live process that
/// does not map the file, still named by the word, unmarked, for
/// kDeadOwnerGrace, gives LockResult::DeadOwnerUnregistered. The grace is for
/// a holder in another pid namespace, whose id means nothing here (or names
/// an unrelated thread): it holds the mutex for microseconds, not for a
/// second. A garbage id that names a live thread of a process mapping the
/// file waits like a live holder, until that thread ends or the caller's
/// deadline (lock_until) passes; so does one whose maps this process may not
/// read (another user's) or a mutex in private memory (the heap: no file to
/// look for; only this process's threads can hold it).
///
/// Uncontended lock/unlock make no system call (glibc's robust fast path is a
/// compare-and-swap on the owner word plus robust-list bookkeeping in user space);
/// the slices, the clock and the liveness check run only when the mutex is held.
#pragma once

#include "shm/error.hpp"
#include "shm/platform/clock.hpp"

#include <pthread.h>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <expected>
#include <string>
#include <string_view>
#include <type_traits>

namespace shm::detail {

enum class LockResult : std::uint8_t {
  Acquired,       ///< ordinary acquisition
  OwnerDied,      ///< acquired; the previous holder died inside: repair, then mark_consistent()
  Unrecoverable,  ///< not acquired: a repairer unlocked without marking it consistent
  Failed,         ///< not acquired: any other error (EINVAL on a damaged mutex word, ...)
  Busy,           ///< try_lock only: not acquired, a live holder has it
  /// Not acquired: the lock word names an owner thread that cannot hold it (it
  /// does not exist, is the caller itself, a kernel thread, or a thread of a
  /// process that does not map the mutex) and that the kernel never marked
  /// dead: a corrupt or hostile lock word (owner_tid() tells which id).
  /// Waiting would never end.
  DeadOwnerUnregistered,
  /// lock_until only: a live holder kept it past the deadline, and for at
  /// least kLockSlice (ordinary microsecond holds never refuse a timed call).
  TimedOut,
};

/// The enumerator's name, for logs and tool output.
[[nodiscard]] const char* to_string(LockResult r) noexcept;

class RobustMutex {
 public:
  /// How long one timed wait lasts before lock() checks the owner's liveness.
  static constexpr std::chrono::milliseconds kLockSlice{50};
  /// How long an owner that does not exist must keep the word before lock()
  /// gives up on it (see the file comment: a holder in another pid namespace).
  static constexpr std::chrono::milliseconds kDeadOwnerGrace{1000};

  /// Initialises the mutex in place (process-shared, robust). Only the creator of
  /// the mapping calls it, before the mapping is published.
  [[nodiscard]] Result<void> init();

  /// Waits while a live thread holds it; never waits on an owner that does not
  /// exist (DeadOwnerUnregistered). No system call when uncontended.
  [[nodiscard]] LockResult lock() noexcept {
    const int rc = ::pthread_mutex_trylock(&m_);
    if (rc == 0) [[likely]]
      return LockResult::Acquired;
    return lock_slow(rc, std::chrono::steady_clock::time_point::max());
  }
  /// lock(), but TimedOut once `deadline` passes while a live thread holds it
  /// (and not before the mutex was held through one kLockSlice: a timed call
  /// whose deadline is now still gets a mutex held for microseconds). Returns
  /// at most kLockSlice after `deadline`, unless the owner was seen missing
  /// (see lock()): that one is waited out to DeadOwnerUnregistered, at most
  /// kDeadOwnerGrace and a slice later.
  [[nodiscard]] LockResult lock_until(std::chrono::steady_clock::time_point deadline) noexcept {
    const int rc = ::pthread_mutex_trylock(&m_);
    if (rc == 0) [[likely]]
      return LockResult::Acquired;
    return lock_slow(rc, deadline);
  }
  /// lock_until(deadline_after(timeout)), the clock read only when the mutex
  /// is held (uncontended, it is one trylock, as lock()); `forever` waits as
  /// lock() (the deadline saturates).
  [[nodiscard]] LockResult lock_for(std::chrono::nanoseconds timeout) noexcept {
    const int rc = ::pthread_mutex_trylock(&m_);
    if (rc == 0) [[likely]]
      return LockResult::Acquired;
    return lock_slow(rc, deadline_after(timeout));
  }
  /// Never waits: Busy while a live thread holds it (the holder itself too).
  /// A holder that died is OwnerDied here as in lock(): the caller owns it.
  [[nodiscard]] LockResult try_lock() noexcept {
    const int rc = ::pthread_mutex_trylock(&m_);
    if (rc == 0) return LockResult::Acquired;
    if (rc == EBUSY || rc == EDEADLK) return LockResult::Busy;
    if (rc == EOWNERDEAD) return LockResult::OwnerDied;
    if (rc == ENOTRECOVERABLE) {
      release_unrecoverable();
      return LockResult::Unrecoverable;
    }
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
  /// Read-only probe: the thread id the lock word names as holder (glibc's
  /// futex word, FUTEX_TID_MASK bits), 0 when free or where the word is not known.
  [[nodiscard]] std::int32_t owner_tid() const noexcept;
  /// Read-only probe for observers (verify, shmctl): true when the lock word
  /// names a holder that cannot hold it (judge_owner) and that the kernel has
  /// not marked dead, so that lock() would end in
  /// DeadOwnerUnregistered (after kDeadOwnerGrace). One look, no waiting; false
  /// where the word is not known.
  [[nodiscard]] bool owner_missing() const noexcept;
  void unlock() noexcept {
    (void)::pthread_mutex_unlock(&m_);
  }

 private:
  // glibc's pthread_mutex_trylock answers ENOTRECOVERABLE with the lock word
  // still naming the caller (pthread_mutex_lock releases it): every later
  // locker would wait on it. Releases the word when it names this thread.
  void release_unrecoverable() noexcept;
  [[nodiscard]] LockResult lock_slow(int first_rc,
                                     std::chrono::steady_clock::time_point deadline) noexcept;

  pthread_mutex_t m_;
};

/// The failure of a lock() that ended in DeadOwnerUnregistered: Errc::Corrupt,
/// naming the segment (`path`), the mutex (`what`: "ledger", "relay seal", ...)
/// and the owner thread id its word holds.
[[nodiscard]] std::unexpected<Error> fail_dead_owner(std::string_view path, std::string_view what,
                                                     const RobustMutex& m);

/// verify's line for a mutex whose owner_missing() holds: names the mutex
/// (`what`) and the owner thread id, says every locker fails with Corrupt.
[[nodiscard]] std::string dead_owner_note(std::string_view what, const RobustMutex& m);

/// What lock() concludes of the thread id a held lock word names.
enum class OwnerVerdict : std::uint8_t {
  Plausible,     ///< a live thread that may hold it (or undecidable): wait for it
  Missing,       ///< no such thread in this pid namespace
  KernelThread,  ///< a kernel thread: never the holder of a user-space mutex
  NotMapping,    ///< a live thread whose process does not map the mutex's file
};

/// Judges thread `tid` as the holder of the mutex at `mutex`: Missing, a
/// KernelThread (/proc/<tid>/stat flags), or NotMapping when the file this
/// process maps `mutex` from (device and inode, /proc/self/maps) is not in
/// /proc/<tid>/maps. Plausible when it may hold it, and wherever it cannot
/// be told: `mutex` in private memory (the heap, inode 0), maps of another
/// user's process. Shared anonymous memory is judged too: the kernel backs
/// it with a file of its own, whose inode the maps show.
/// Reads /proc: for the slow path only.
[[nodiscard]] OwnerVerdict judge_owner(std::int32_t tid, const void* mutex) noexcept;

/// A short phrase saying why the verdict rules the thread out ("a kernel
/// thread, ..."), for error messages.
[[nodiscard]] const char* owner_verdict_text(OwnerVerdict v) noexcept;

/// Whether thread id `tid` names a live thread (or zombie) of this pid
/// namespace: kill(tid, 0) (EPERM counts as alive), then /proc/<tid> (which
/// also names threads that are not group leaders).
[[nodiscard]] bool thread_exists(std::int32_t tid) noexcept;

/// The mutex is part of a file layout: its size is pinned (glibc x86-64/aarch64).
static_assert(std::is_standard_layout_v<RobustMutex>);
static_assert(sizeof(RobustMutex) == sizeof(pthread_mutex_t));
#if defined(__x86_64__) || defined(__aarch64__)
static_assert(sizeof(pthread_mutex_t) == 40 || sizeof(pthread_mutex_t) == 48);
#endif

}  // namespace shm::detail
