#include "shm/platform/robust_mutex.hpp"

#include "format/format.hpp"

namespace shm::detail {

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

}  // namespace shm::detail
