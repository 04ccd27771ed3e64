#include "shm/platform/truncation_guard.hpp"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <limits>

#include <sys/mman.h>
#include <unistd.h>

namespace shm {
namespace {

// Per thread: the range the thread is reading (a SIGBUS from a load is
// delivered to the thread that faulted). initial-exec: the handler reads it
// on any thread, and a lazily allocated (dynamic-model) TLS block could call
// malloc inside the handler.
[[gnu::tls_model("initial-exec")]] thread_local detail::GuardedRange* t_range = nullptr;
long g_page_size = 0;            // written before the handler is installed
struct sigaction g_previous {};  // the disposition we replaced

bool replace_lost_page(const siginfo_t* info) noexcept {
  detail::GuardedRange* range = t_range;
  const auto addr = reinterpret_cast<std::uintptr_t>(info->si_addr);
  // BUS_ADRERR: a mapped file page with no file behind it any more.
  if (range == nullptr || info->si_code != BUS_ADRERR || addr < range->begin || addr >= range->end)
    return false;
  const std::uintptr_t lost = addr & ~static_cast<std::uintptr_t>(g_page_size - 1);
  // A private zero page over the page the file no longer backs: the faulting
  // access is retried and reads zeros. Writable, so a store to it (a reclaim
  // writing through a writable mapping) lands in the private copy instead of
  // raising SIGSEGV; the caller discards the segment anyway.
  void* r = ::mmap(reinterpret_cast<void*>(lost), static_cast<std::size_t>(g_page_size),
                   PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  if (r == MAP_FAILED) return false;
  range->hit = 1;
  return true;
}

// Async-signal-safe only: no allocation, no locks (mmap and sigaction are
// plain system calls); errno is the interrupted code's and is restored.
void on_sigbus(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  if (replace_lost_page(info)) {
    errno = saved_errno;
    return;
  }
  // Not ours: whoever handled SIGBUS before us, else the default action
  // (returning re-executes the faulting access, which then kills us).
  if (g_previous.sa_handler == SIG_DFL || g_previous.sa_handler == SIG_IGN) {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(sig, &dfl, nullptr);
  } else if ((g_previous.sa_flags & SA_SIGINFO) != 0) {
    g_previous.sa_sigaction(sig, info, context);
  } else {
    g_previous.sa_handler(sig);
  }
  errno = saved_errno;
}

Result<void> install_handler() {
  g_page_size = ::sysconf(_SC_PAGESIZE);
  // The previous disposition first, so the handler never sees it half-written.
  if (::sigaction(SIGBUS, nullptr, &g_previous) != 0) return fail_errno(errno, "sigaction(SIGBUS)");
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  if (::sigaction(SIGBUS, &sa, nullptr) != 0) return fail_errno(errno, "sigaction(SIGBUS)");
  return {};
}

}  // namespace

Result<void> TruncationGuard::install() {
  static const Result<void> installed = install_handler();  // once, even when called concurrently
  return installed;
}

TruncationGuard::Scope::Scope() noexcept
    : range_{0, std::numeric_limits<std::uintptr_t>::max(), 0, t_range} {
  t_range = &range_;
  // The handler reads t_range on this thread: no guarded access may be moved
  // before this store by the compiler (nothing else can see the reordering).
  std::atomic_signal_fence(std::memory_order_seq_cst);
}

TruncationGuard::Scope::Scope(const void* base, std::size_t size) noexcept
    : range_{reinterpret_cast<std::uintptr_t>(base), reinterpret_cast<std::uintptr_t>(base) + size,
             0, t_range} {
  t_range = &range_;
  std::atomic_signal_fence(std::memory_order_seq_cst);  // as above
}

TruncationGuard::Scope::~Scope() {
  std::atomic_signal_fence(std::memory_order_seq_cst);  // guarded accesses stay before this
  t_range = range_.outer;
}

bool TruncationGuard::Scope::hit() const noexcept {
  std::atomic_signal_fence(std::memory_order_seq_cst);  // reads the handler's store
  return range_.hit != 0;
}

}  // namespace shm
