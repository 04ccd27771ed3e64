// RobustMutex against owners that are not what its lock word says: a word
// naming a thread that does not exist (a corrupt or hostile file) must end
// lock() with DeadOwnerUnregistered instead of a wait that never ends, while a
// live holder in another process keeps the ordinary semantics (lock() waits,
// lock_until() times out, the release wakes the waiter at once) and a holder
// killed while registered still hands over with OwnerDied. Each lock runs in a
// forked child with a deadline, so a hang fails the test.
#include "shm/platform/robust_mutex.hpp"
#include "common/forked_child.hpp"
#include "shm/platform/clock.hpp"

#include <gtest/gtest.h>

#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <thread>

namespace shm::robust_mutex_test {
namespace {

using namespace std::chrono_literals;
using detail::LockResult;
using detail::RobustMutex;

constexpr std::uint32_t kFutexWaiters = 0x80000000u;

// A mutex and a few words in an anonymous shared mapping: every forked child
// meets the same memory.
struct Shared {
  RobustMutex mutex;
  std::atomic<std::uint64_t> released_ns{0};  // the holder's clock just before unlock()
  std::atomic<std::uint64_t> acquired_ns{0};  // the waiter's clock just after lock()
  std::atomic<std::uint32_t> holding{0};      // 1 while the holder holds it
  std::atomic<std::uint32_t> release{0};      // set to ask the holder to unlock
};

// Where the mutex lives: shared anonymous memory, or a mapped file (as in a
// segment). Both have an inode, which lets lock() judge whether a live owner
// maps the mutex.
enum class Backing { Anonymous, File };

std::string backing_name(const ::testing::TestParamInfo<Backing>& info) {
  return info.param == Backing::File ? "File" : "Anonymous";
}

class RobustMutexTest : public ::testing::TestWithParam<Backing> {
 protected:
  void SetUp() override {
    int fd = -1;
    int flags = MAP_SHARED | MAP_ANONYMOUS;
    if (GetParam() == Backing::File) {
      std::string path = (std::filesystem::temp_directory_path() / "robust_mutex_test.XXXXXX");
      fd = ::mkstemp(path.data());
      ASSERT_GE(fd, 0) << path;
      ::unlink(path.c_str());  // mapped, it keeps its inode
      ASSERT_EQ(::ftruncate(fd, sizeof(Shared)), 0);
      flags = MAP_SHARED;
    }
    void* p = ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, flags, fd, 0);
    if (fd >= 0) ::close(fd);
    ASSERT_NE(p, MAP_FAILED);
    shared_ = new (p) Shared;
    ASSERT_TRUE(shared_->mutex.init());
  }
  void TearDown() override {
    if (shared_ != nullptr) ::munmap(shared_, sizeof(Shared));
  }
  Shared* shared_ = nullptr;
};

using test::gone_tid;
using test::run_in_child;

// What a corrupt file holds: the lock word names `tid` as owner (with the
// waiters bit, as a contended word has), the kernel never marked it dead.
void forge_owner(RobustMutex& m, pid_t tid) {
  auto& raw = reinterpret_cast<pthread_mutex_t&>(m);
  __atomic_store_n(&raw.__data.__lock,
                   static_cast<int>(static_cast<std::uint32_t>(tid) | kFutexWaiters),
                   __ATOMIC_SEQ_CST);
  raw.__data.__owner = tid;
}

std::uint64_t ms_since(std::chrono::steady_clock::time_point t) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t)
          .count());
}

TEST_P(RobustMutexTest, AnOwnerThatDoesNotExistEndsLockWithDeadOwnerUnregistered) {
  const pid_t tid = gone_tid();
  ASSERT_FALSE(detail::thread_exists(tid));
  forge_owner(shared_->mutex, tid);
  EXPECT_EQ(shared_->mutex.owner_tid(), tid);
  EXPECT_TRUE(shared_->mutex.owner_missing());
  // The garbage owner is never waited on for ever: lock() gives up after the grace.
  const int rc = run_in_child([&] {
    const auto start = std::chrono::steady_clock::now();
    const LockResult r = shared_->mutex.lock();
    if (r != LockResult::DeadOwnerUnregistered) return 10 + static_cast<int>(r);
    const std::uint64_t ms = ms_since(start);
    if (ms < static_cast<std::uint64_t>(RobustMutex::kDeadOwnerGrace.count())) return 30;
    return ms < 10'000 ? 0 : 31;
  });
  EXPECT_EQ(rc, 0) << "10+LockResult: wrong result; 30: gave up before the grace; 31: too late";
  // A deadline before the grace does not end it with TimedOut: a timed call
  // (try_write in a loop, say) would time out at every call for ever and
  // never learn that the word is damaged. It says so after the grace.
  const int timed = run_in_child([&] {
    const auto start = std::chrono::steady_clock::now();
    const LockResult r = shared_->mutex.lock_until(start + 200ms);
    if (r != LockResult::DeadOwnerUnregistered) return 10 + static_cast<int>(r);
    const std::uint64_t ms = ms_since(start);
    return ms >= static_cast<std::uint64_t>(RobustMutex::kDeadOwnerGrace.count()) && ms < 10'000
               ? 0
               : 30;
  });
  EXPECT_EQ(timed, 0) << "10+LockResult: wrong result; 30: outside [grace, 10 s)";
  // try_lock never waits: Busy, as for any holder.
  EXPECT_EQ(shared_->mutex.try_lock(), LockResult::Busy);
  // The word is untouched: still the forged owner, nobody took it.
  EXPECT_EQ(shared_->mutex.owner_tid(), tid);
}

TEST_P(RobustMutexTest, AWordWithoutOwnerIdButHeldIsDeadOwnerUnregisteredToo) {
  // glibc would wait on a word of only the waiters bit for ever: no thread 0 unlocks it.
  auto& raw = reinterpret_cast<pthread_mutex_t&>(shared_->mutex);
  __atomic_store_n(&raw.__data.__lock, static_cast<int>(kFutexWaiters), __ATOMIC_SEQ_CST);
  EXPECT_TRUE(shared_->mutex.owner_missing());
  const int rc = run_in_child(
      [&] { return shared_->mutex.lock() == LockResult::DeadOwnerUnregistered ? 0 : 1; });
  EXPECT_EQ(rc, 0);
}

TEST_P(RobustMutexTest, ALiveHolderIsWaitedForPastTheGraceAndItsReleaseWakesTheWaiter) {
  Shared& s = *shared_;
  // The holder: another process that locks, says so, and holds until asked.
  const pid_t holder = ::fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    if (s.mutex.lock() != LockResult::Acquired) ::_exit(1);
    s.holding.store(1);
    while (s.release.load() == 0) std::this_thread::sleep_for(1ms);
    s.released_ns.store(monotonic_ns());
    s.mutex.unlock();
    ::_exit(0);
  }
  const auto up = std::chrono::steady_clock::now() + 10s;
  while (s.holding.load() == 0 && std::chrono::steady_clock::now() < up)
    std::this_thread::sleep_for(1ms);
  ASSERT_EQ(s.holding.load(), 1u);
  EXPECT_FALSE(s.mutex.owner_missing());
  EXPECT_EQ(s.mutex.owner_tid(), holder);
  // A timed lock times out within its deadline (plus a slice of slack).
  const int timed = run_in_child([&] {
    const auto start = std::chrono::steady_clock::now();
    const LockResult r = s.mutex.lock_until(start + 300ms);
    if (r != LockResult::TimedOut) return 10 + static_cast<int>(r);
    const std::uint64_t ms = ms_since(start);
    return ms >= 300 && ms < 1'000 ? 0 : 30;
  });
  EXPECT_EQ(timed, 0);
  // lock() waits for the live holder beyond the grace, then gets it as soon as it is released.
  std::thread releaser([&] {
    std::this_thread::sleep_for(RobustMutex::kDeadOwnerGrace + 500ms);
    s.release.store(1);
  });
  const int waited = run_in_child([&] {
    const LockResult r = s.mutex.lock();
    s.acquired_ns.store(monotonic_ns());
    if (r != LockResult::Acquired) return 10 + static_cast<int>(r);
    s.mutex.unlock();
    return 0;
  });
  releaser.join();
  EXPECT_EQ(waited, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(holder, &status, 0), holder);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_NE(s.released_ns.load(), 0u);
  ASSERT_GE(s.acquired_ns.load(), s.released_ns.load());
  EXPECT_LT(s.acquired_ns.load() - s.released_ns.load(), 100'000'000u)
      << "the waiter took the mutex more than 100 ms after its release";
}

TEST_P(RobustMutexTest, AHolderKilledWhileAnotherWaitsStillHandsOverWithOwnerDied) {
  Shared& s = *shared_;
  const pid_t holder = ::fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    if (s.mutex.lock() != LockResult::Acquired) ::_exit(1);
    s.holding.store(1);
    for (;;) ::pause();
  }
  const auto up = std::chrono::steady_clock::now() + 10s;
  while (s.holding.load() == 0 && std::chrono::steady_clock::now() < up)
    std::this_thread::sleep_for(1ms);
  ASSERT_EQ(s.holding.load(), 1u);
  std::thread killer([&] {
    std::this_thread::sleep_for(300ms);  // the waiter is inside lock() by then
    ::kill(holder, SIGKILL);
  });
  const int rc = run_in_child([&] {
    const LockResult r = s.mutex.lock();
    if (r != LockResult::OwnerDied) return 10 + static_cast<int>(r);
    s.mutex.mark_consistent();
    s.mutex.unlock();
    return 0;
  });
  killer.join();
  int status = 0;
  (void)::waitpid(holder, &status, 0);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(s.mutex.lock(), LockResult::Acquired);
  s.mutex.unlock();
}

// lock() ending in DeadOwnerUnregistered within [grace, 10 s), run in a
// forked child: 0, or 10 + the LockResult it got, 30 too early, 31 too late.
int expect_refused_after_grace(RobustMutex& m) {
  return run_in_child([&] {
    const auto start = std::chrono::steady_clock::now();
    const LockResult r = m.lock();
    if (r != LockResult::DeadOwnerUnregistered) return 10 + static_cast<int>(r);
    const std::uint64_t ms = ms_since(start);
    if (ms < static_cast<std::uint64_t>(RobustMutex::kDeadOwnerGrace.count())) return 30;
    return ms < 10'000 ? 0 : 31;
  });
}

// A word naming a kernel thread (always alive, never marked dead) is
// refused like a missing owner: a kernel thread never holds a user-space
// mutex. Before, lock() waited for it for ever (the fuzzer found it, a
// topic attach naming thread 2).
TEST_P(RobustMutexTest, AKernelThreadOwnerEndsLockWithDeadOwnerUnregistered) {
  const pid_t kthread = test::kernel_thread_tid();
  if (kthread == 0) GTEST_SKIP() << "no kernel thread visible in this pid namespace";
  forge_owner(shared_->mutex, kthread);
  EXPECT_EQ(detail::judge_owner(kthread, shared_), detail::OwnerVerdict::KernelThread);
  EXPECT_TRUE(shared_->mutex.owner_missing());
  EXPECT_EQ(expect_refused_after_grace(shared_->mutex), 0)
      << "10+LockResult: wrong result; 30: gave up before the grace; 31: too late";
  EXPECT_EQ(shared_->mutex.owner_tid(), kthread);
}

// A word naming a live thread of a process that does not map the mutex's
// memory is refused after the grace. Shared anonymous memory has an inode
// too (the kernel's shmem file, "/dev/zero (deleted)" in the maps): both
// backings are judged.
TEST_P(RobustMutexTest, ALiveProcessThatDoesNotMapTheMutexIsRefusedAsOwner) {
  test::Bystander bystander(shared_, sizeof(Shared));
  ASSERT_GT(bystander.pid(), 0);
  ASSERT_TRUE(detail::thread_exists(bystander.pid()));
  forge_owner(shared_->mutex, bystander.pid());
  EXPECT_EQ(detail::judge_owner(bystander.pid(), shared_), detail::OwnerVerdict::NotMapping);
  EXPECT_TRUE(shared_->mutex.owner_missing());
  EXPECT_EQ(expect_refused_after_grace(shared_->mutex), 0)
      << "10+LockResult: wrong result; 30: gave up before the grace; 31: too late";
}

// Memory no other process can map (the heap) holds a mutex shared by this
// process's threads only: an owner there cannot be judged by the maps, and
// is waited for as a live holder (a timed lock times out past the grace).
TEST(RobustMutexPrivateMemoryTest, AnOwnerOfAMutexOnTheHeapIsWaitedForAsALiveHolder) {
  auto heap = std::make_unique<RobustMutex>();
  ASSERT_TRUE(heap->init());
  test::Bystander bystander;
  ASSERT_GT(bystander.pid(), 0);
  forge_owner(*heap, bystander.pid());
  EXPECT_EQ(detail::judge_owner(bystander.pid(), heap.get()), detail::OwnerVerdict::Plausible);
  EXPECT_FALSE(heap->owner_missing());
  const int timed = run_in_child([&] {
    const auto start = std::chrono::steady_clock::now();
    const LockResult r = heap->lock_until(start + RobustMutex::kDeadOwnerGrace + 300ms);
    return r == LockResult::TimedOut ? 0 : 10 + static_cast<int>(r);
  });
  EXPECT_EQ(timed, 0) << "10+LockResult";
}

INSTANTIATE_TEST_SUITE_P(Backings, RobustMutexTest,
                         ::testing::Values(Backing::Anonymous, Backing::File), backing_name);

}  // namespace
}  // namespace shm::robust_mutex_test
