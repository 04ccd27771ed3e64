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

// Registered when the library is loaded, not by a first call under a
// function-local static's guard: a fork while another thread held that
// guard would leave it held in the child, and every later call there would
// wait for it. The handles that read the generation use this translation
// unit, so the linker keeps it. pthread_atfork fails only without memory;
// the handles then behave as before (a child's copy acts as the parent's).
[[maybe_unused]] const bool g_registered = ::pthread_atfork(nullptr, nullptr, &bump_in_child) == 0;

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
