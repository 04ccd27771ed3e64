#include "shm/platform/robust_mutex.hpp"

#include "format/format.hpp"

#include <linux/futex.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <cstring>
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

// A file-backed mapping's identity, as /proc/<pid>/maps prints it.
struct MappedFile {
  unsigned long long dev_major = 0;
  unsigned long long dev_minor = 0;
  unsigned long long inode = 0;
  [[nodiscard]] bool known() const noexcept { return inode != 0; }
  [[nodiscard]] bool operator==(const MappedFile&) const = default;
};

// Reads /proc/<pid>/maps (`path`) line by line (fgets on a fixed buffer: a
// line longer than it arrives in pieces, only a line's first piece is
// parsed) and calls `visit(start, end, file)` for each mapping until it
// returns true. false when the file cannot be read (permission, gone).
template <class Visit>
bool each_mapping(const char* path, Visit&& visit) noexcept {
  std::FILE* f = std::fopen(path, "re");
  if (f == nullptr) return false;
  char line[512];
  bool line_start = true;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    const bool first_piece = line_start;
    line_start = std::strchr(line, '\n') != nullptr;
    if (!first_piece) continue;
    unsigned long long start = 0;
    unsigned long long end = 0;
    MappedFile file;
    if (std::sscanf(line, "%llx-%llx %*s %*x %llx:%llx %llu", &start, &end, &file.dev_major,
                    &file.dev_minor, &file.inode) != 5)
      continue;
    if (visit(start, end, file)) break;
  }
  std::fclose(f);
  return true;
}

// The file this process maps at `address` (unknown: private memory, or no /proc).
MappedFile file_mapped_at(const void* address) noexcept {
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  MappedFile found;
  (void)each_mapping("/proc/self/maps",
                     [&](unsigned long long start, unsigned long long end, const MappedFile& file) {
                       if (at < start || at >= end) return false;
                       found = file;
                       return true;
                     });
  return found;
}

// Whether /proc/<tid>/stat says `tid` is a kernel thread (PF_KTHREAD in its
// flags, the ninth field, counted after the command name's closing paren,
// which may itself hold spaces and parens).
bool kernel_thread(std::int32_t tid) noexcept {
  char path[40];
  std::snprintf(path, sizeof path, "/proc/%d/stat", tid);
  std::FILE* f = std::fopen(path, "re");
  if (f == nullptr) return false;
  char stat[1024];
  const std::size_t n = std::fread(stat, 1, sizeof stat - 1, f);
  std::fclose(f);
  stat[n] = '\0';
  const char* after_comm = std::strrchr(stat, ')');
  if (after_comm == nullptr) return false;
  unsigned long long flags = 0;
  // ") S ppid pgrp session tty_nr tpgid flags"
  if (std::sscanf(after_comm + 1, " %*c %*d %*d %*d %*d %*d %llu", &flags) != 1) return false;
  constexpr unsigned long long kPfKthread = 0x00200000;  // include/linux/sched.h
  return (flags & kPfKthread) != 0;
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

OwnerVerdict judge_owner(std::int32_t tid, const void* mutex) noexcept {
  if (!thread_exists(tid)) return OwnerVerdict::Missing;
  if (kernel_thread(tid)) return OwnerVerdict::KernelThread;
  // A holder maps the mutex: the file this process maps it from must be in
  // the holder's maps too (any of its threads' /proc/<tid>/maps shows the
  // process's address space). Undecided where either side is unknown: a
  // private mapping here, or maps of another user's process (EACCES).
  const MappedFile ours = file_mapped_at(mutex);
  if (!ours.known()) return OwnerVerdict::Plausible;
  char path[40];
  std::snprintf(path, sizeof path, "/proc/%d/maps", tid);
  bool maps_it = false;
  const bool read =
      each_mapping(path, [&](unsigned long long, unsigned long long, const MappedFile& file) {
        maps_it = file == ours;
        return maps_it;
      });
  if (!read || maps_it) return OwnerVerdict::Plausible;
  // One look can be wrong (the holder ended and its id went to another
  // process between the two reads): lock() acts only on a verdict that
  // stands, with the word unchanged, for kDeadOwnerGrace.
  return OwnerVerdict::NotMapping;
}

const char* owner_verdict_text(OwnerVerdict v) noexcept {
  switch (v) {
    case OwnerVerdict::Plausible:
      return "which may hold it";
    case OwnerVerdict::Missing:
      return "which does not exist and was never marked dead by the kernel";
    case OwnerVerdict::KernelThread:
      return "a kernel thread, which never holds a user-space mutex";
    case OwnerVerdict::NotMapping:
      return "a live thread of a process that does not map this segment";
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

namespace {

// Why the word's owner cannot hold the mutex, judged again for the message
// (the judgment that refused the lock was the same, a moment earlier).
const char* impossible_owner_text(const RobustMutex& m) noexcept {
  const OwnerVerdict v = judge_owner(m.owner_tid(), &m);
  return owner_verdict_text(v == OwnerVerdict::Plausible ? OwnerVerdict::Missing : v);
}

}  // namespace

std::unexpected<Error> fail_dead_owner(std::string_view path, std::string_view what,
                                       const RobustMutex& m) {
  return fail(Errc::Corrupt,
              shm::detail::format(
                  "{}: the {} mutex's lock word is corrupt: it names owner thread {}, {} (a "
                  "damaged or hostile file); re-create the segment",
                  path, what, m.owner_tid(), impossible_owner_text(m)));
}

std::string dead_owner_note(std::string_view what, const RobustMutex& m) {
  return shm::detail::format(
      "the {} mutex's lock word is corrupt: it names owner thread {}, {}; every "
      "locker fails (Corrupt): re-create the segment",
      what, m.owner_tid(), impossible_owner_text(m));
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
  if (judge_owner(static_cast<std::int32_t>(word & kFutexTidMask), this) == OwnerVerdict::Plausible)
    return false;
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
    const bool missing =
        word != 0 && (word & kFutexOwnerDied) == 0 &&
        (static_cast<std::int32_t>(tid) == self_tid() ||
         judge_owner(static_cast<std::int32_t>(tid), this) != OwnerVerdict::Plausible) &&
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
