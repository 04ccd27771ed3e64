// test_mpmc_take_hold NAME
// Opens the MPMC ring NAME as a consumer, takes one item with the kept
// (at-least-once) take, try_take(), and never releases it: prints
// "taken <item>" and sleeps until killed. The test kill -9s it so that a
// repair finds a dead taker's kept cell and makes its item an orphan.
#include "shm/mpmc/mpmc_ring.hpp"

#include <unistd.h>
#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s NAME\n", argv[0]);
    return 64;
  }
  auto r = shm::MpmcConsumer::open(argv[1]);
  if (!r) {
    std::fprintf(stderr, "open: %s\n", r.error().what().c_str());
    return 2;
  }
  auto t = r->try_take();
  if (!t || !*t) {
    std::fprintf(stderr, "take: %s\n", t ? "the ring is empty" : t.error().what().c_str());
    return 3;
  }
  std::printf("taken %.*s\n", static_cast<int>((*t)->size()),
              reinterpret_cast<const char*>((*t)->data()));
  std::fflush(stdout);
  for (;;) ::pause();
}
