#include "shm/platform/robust_mutex.hpp"

#include "format/format.hpp"

#include <linux/futex.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <ctime>

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SHM_ROBUST_MUTEX_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define SHM_ROBUST_MUTEX_TSAN 1
#endif

namespace shm::detail {
namespace {

// The robust-futex bits of glibc's lock word (linux/futex.h: the kernel's
// robust-list protocol, which glibc's robust mutexes follow).
constexpr std::uint32_t kFutexWaiters = 0x80000000u;
constexpr std::uint32_t kFutexOwnerDied = 0x40000000u;
constexpr std::uint32_t kFutexTidMask = 0x3fffffffu;
static_assert((kFutexWaiters | kFutexOwnerDied | kFutexTidMask) == 0xffffffffu);

using Clock = std::chrono::steady_clock;

timespec to_timespec(std::chrono::nanoseconds ns) noexcept {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(ns.count() / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(ns.count() % 1'000'000'000);
  return ts;
}

std::int32_t self_tid() noexcept {
  return static_cast<std::int32_t>(::syscall(SYS_gettid));
}

// One wait of at most `until` for the mutex: 0, EOWNERDEAD, ENOTRECOVERABLE,
// ETIMEDOUT, or another error.
int wait_slice(pthread_mutex_t* m, Clock::time_point until) noexcept {
#if defined(SHM_ROBUST_MUTEX_TSAN)
  // TSan intercepts neither pthread_mutex_clocklock nor EOWNERDEAD from
  // pthread_mutex_timedlock: it would lose the acquisition and report the
  // unlock. Under TSan the slice polls trylock, which it does intercept.
  for (;;) {
    const int rc = ::pthread_mutex_trylock(m);
    if (rc != EBUSY && rc != EDEADLK) return rc;
    if (Clock::now() >= until) return ETIMEDOUT;
    const timespec pause = to_timespec(std::chrono::microseconds(100));
    ::nanosleep(&pause, nullptr);
  }
#elif defined(__GLIBC__)
  // steady_clock is CLOCK_MONOTONIC: its epoch is the clock's.
  const timespec abs = to_timespec(until.time_since_epoch());
  return ::pthread_mutex_clocklock(m, CLOCK_MONOTONIC, &abs);
#else
  // No clocklock: a CLOCK_REALTIME deadline for one slice (a clock step
  // lengthens or shortens this slice only).
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  const auto left = std::max(until - Clock::now(), Clock::duration::zero());
  const timespec abs =
      to_timespec(std::chrono::seconds(now.tv_sec) + std::chrono::nanoseconds(now.tv_nsec) + left);
  return ::pthread_mutex_timedlock(m, &abs);
#endif
}

#if defined(__GLIBC__)
std::uint32_t lock_word(const pthread_mutex_t& m) noexcept {
  // relaxed: a diagnostic read; the decision it feeds is re-checked against
  // the same word after the owner's liveness is known.
  return static_cast<std::uint32_t>(__atomic_load_n(&m.__data.__lock, __ATOMIC_RELAXED));
}
#endif

}  // namespace

const char* to_string(LockResult r) noexcept {
  switch (r) {
    case LockResult::Acquired:
      return "acquired";
    case LockResult::OwnerDied:
      return "owner-died";
    case LockResult::Unrecoverable:
      return "unrecoverable";
    case LockResult::Failed:
      return "failed";
    case LockResult::Busy:
      return "busy";
    case LockResult::DeadOwnerUnregistered:
      return "dead-owner-unregistered";
    case LockResult::TimedOut:
      return "timed-out";
  }
  return "?";
}

bool thread_exists(std::int32_t tid) noexcept {
  // 0 and negative ids name process groups for kill(): never a thread.
  if (tid <= 0) return false;
  if (::kill(tid, 0) == 0 || errno == EPERM) return true;  // EPERM: it exists, not ours
  // kill() looks a thread id up as a process on some kernels; /proc/<tid>
  // names every thread of this pid namespace. No /proc: kill()'s answer.
  char path[32];
  std::snprintf(path, sizeof path, "/proc/%d", tid);
  struct stat st {};
  return ::stat(path, &st) == 0 || (errno != ENOENT && errno != ENOTDIR);
}

std::unexpected<Error> fail_dead_owner(std::string_view path, std::string_view what,
                                       const RobustMutex& m) {
  return fail(Errc::Corrupt,
              shm::detail::format(
                  "{}: the {} mutex's lock word is corrupt: it names owner thread {}, which "
                  "does not exist and was never marked dead by the kernel (a damaged or "
                  "hostile file); re-create the segment",
                  path, what, m.owner_tid()));
}

std::string dead_owner_note(std::string_view what, const RobustMutex& m) {
  return shm::detail::format(
      "the {} mutex's lock word is corrupt: it names owner thread {}, which "
      "does not exist and was never marked dead by the kernel; every "
      "locker fails (Corrupt): re-create the segment",
      what, m.owner_tid());
}

Result<void> RobustMutex::init() {
  pthread_mutexattr_t attr;
  if (const int rc = ::pthread_mutexattr_init(&attr); rc != 0)
    return fail_errno(rc, "pthread_mutexattr_init");
  struct AttrGuard {
    pthread_mutexattr_t* a;
    ~AttrGuard() { ::pthread_mutexattr_destroy(a); }
  } guard{&attr};
  if (const int rc = ::pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED); rc != 0)
    return fail_errno(rc, "pthread_mutexattr_setpshared(PTHREAD_PROCESS_SHARED)");
  if (const int rc = ::pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST); rc != 0)
    return fail_errno(rc, "pthread_mutexattr_setrobust(PTHREAD_MUTEX_ROBUST)");
  if (const int rc = ::pthread_mutex_init(&m_, &attr); rc != 0)
    return fail_errno(rc, "pthread_mutex_init");
  return {};
}

std::int32_t RobustMutex::owner_tid() const noexcept {
#if defined(__GLIBC__)
  return static_cast<std::int32_t>(lock_word(m_) & kFutexTidMask);
#else
  return 0;
#endif
}

bool RobustMutex::owner_missing() const noexcept {
#if defined(__GLIBC__)
  const std::uint32_t word = lock_word(m_);
  if (word == 0 || (word & kFutexOwnerDied) != 0) return false;
  if (thread_exists(static_cast<std::int32_t>(word & kFutexTidMask))) return false;
  // A registered owner that died has its word marked (OWNER_DIED) by the
  // kernel before its id disappears: a word unchanged now is not such a death.
  return lock_word(m_) == word;
#else
  return false;
#endif
}

void RobustMutex::release_unrecoverable() noexcept {
#if defined(__GLIBC__)
  const std::uint32_t word = lock_word(m_);
  if ((word & kFutexTidMask) != static_cast<std::uint32_t>(self_tid())) return;
  // What pthread_mutex_lock does on ENOTRECOVERABLE (lll_unlock): clear the
  // word, wake one waiter (it meets ENOTRECOVERABLE in turn).
  const auto old =
      static_cast<std::uint32_t>(__atomic_exchange_n(&m_.__data.__lock, 0, __ATOMIC_RELEASE));
  if ((old & kFutexWaiters) != 0)
    (void)::syscall(SYS_futex, &m_.__data.__lock, FUTEX_WAKE, 1, nullptr, nullptr, 0);
#endif
}

LockResult RobustMutex::lock_slow(int rc, Clock::time_point deadline) noexcept {
  if (rc == EOWNERDEAD) return LockResult::OwnerDied;
  if (rc == ENOTRECOVERABLE) {
    release_unrecoverable();
    return LockResult::Unrecoverable;
  }
  if (rc != EBUSY && rc != EDEADLK) return LockResult::Failed;
  // An owner seen missing: its id and since when (a flag, no optional: GCC -O1
  // warns maybe-uninitialized on optional<time_point>).
  bool suspect = false;
  std::uint32_t suspect_tid = 0;
  Clock::time_point suspect_since{};
  // A timed caller waits at least one slice: a deadline of "now" must not
  // turn an ordinary microsecond hold into TimedOut.
  const Clock::time_point start = Clock::now();
  if (deadline < start + kLockSlice) deadline = start + kLockSlice;
  for (;;) {
    const Clock::time_point now = Clock::now();
    // Past the deadline a timed caller stops waiting for a live owner; an
    // owner seen missing is waited out to its grace, so that the caller learns
    // the lock word is damaged (DeadOwnerUnregistered) instead of timing out
    // at every call for ever.
    if (now >= deadline && !suspect) return LockResult::TimedOut;
    const Clock::time_point slice_end =
        now >= deadline || deadline - now > kLockSlice ? now + kLockSlice : deadline;
    rc = wait_slice(&m_, slice_end);
    if (rc == 0) return LockResult::Acquired;
    if (rc == EOWNERDEAD) return LockResult::OwnerDied;
    if (rc == ENOTRECOVERABLE) {
      release_unrecoverable();  // a no-op after clocklock, which released it
      return LockResult::Unrecoverable;
    }
    if (rc != ETIMEDOUT) return LockResult::Failed;
#if defined(__GLIBC__)
    // A whole slice passed with the mutex held: is its owner alive?
    const std::uint32_t word = lock_word(m_);
    const std::uint32_t tid = word & kFutexTidMask;
    const bool missing = word != 0 && (word & kFutexOwnerDied) == 0 &&
                         (static_cast<std::int32_t>(tid) == self_tid() ||
                          !thread_exists(static_cast<std::int32_t>(tid))) &&
                         // The kernel marks a registered owner's word before
                         // its id disappears: unchanged now, it is no such death.
                         (lock_word(m_) & (kFutexOwnerDied | kFutexTidMask)) == tid;
    if (!missing) {
      suspect = false;
      continue;
    }
    const Clock::time_point seen = Clock::now();
    if (!suspect || suspect_tid != tid) {
      suspect = true;
      suspect_tid = tid;
      suspect_since = seen;
      continue;
    }
    if (seen - suspect_since >= kDeadOwnerGrace) return LockResult::DeadOwnerUnregistered;
#else
    (void)suspect;
    (void)suspect_tid;
    (void)suspect_since;
#endif
  }
}

}  // namespace shm::detail
