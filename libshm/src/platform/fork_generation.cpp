#include "shm/platform/fork_generation.hpp"

#include <pthread.h>

#include <atomic>
#include <new>

namespace shm {
namespace {

std::atomic<std::uint64_t> g_generation{0};

void bump_in_child() noexcept {
  g_generation.fetch_add(1, std::memory_order_relaxed);
}

// A list only ever pushed to, with no lock: a mutex could have been copied
// locked by the fork that made this process. Reachable from a global, so a
// leak checker sees the objects as held, not lost.
struct Kept {
  void* object;
  Kept* next;
};
std::atomic<Kept*> g_kept{nullptr};

}  // namespace

std::uint64_t fork_generation() noexcept {
  // Registered before the first handle records a generation, so any fork
  // after that handle was made is counted. pthread_atfork fails only without
  // memory; the handles then behave as before (and a child's copy is treated
  // as the parent's).
  static const bool registered = ::pthread_atfork(nullptr, nullptr, &bump_in_child) == 0;
  (void)registered;
  return g_generation.load(std::memory_order_relaxed);
}

void keep_forever_erased(void* object) noexcept {
  if (object == nullptr) return;
  auto* node = new (std::nothrow) Kept{object, nullptr};
  if (node == nullptr) return;  // out of memory: the object is leaked unreferenced instead
  Kept* head = g_kept.load(std::memory_order_relaxed);
  do {
    node->next = head;
  } while (!g_kept.compare_exchange_weak(head, node, std::memory_order_release,
                                         std::memory_order_relaxed));
}

}  // namespace shm
