// test_mpmc_hold NAME reserve|peek
// Claims one cell of the MPMC ring NAME and never finishes: `reserve` claims a
// cell to push and never commits it, `peek` pops an item and never releases
// it. Prints "held" (reserve) or "held <item>" (peek) and sleeps until killed — the test kill -9s
// it to leave a cell held by a dead process.
#include "shm/mpmc/mpmc_ring.hpp"

#include <unistd.h>
#include <cstdio>
#include <cstring>
#include <string>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s NAME reserve|peek\n", argv[0]);
    return 64;
  }
  const std::string mode = argv[2];
  if (mode == "reserve") {
    auto r = shm::MpmcProducer::open(argv[1]);
    if (!r) {
      std::fprintf(stderr, "open: %s\n", r.error().what().c_str());
      return 2;
    }
    auto w = r->try_reserve();
    if (!w || !*w) {
      std::fprintf(stderr, "reserve failed\n");
      return 3;
    }
    std::memcpy((*w)->data(), "never", 5);
    std::printf("held\n");
    std::fflush(stdout);
    for (;;) ::pause();
  }
  auto r = shm::MpmcConsumer::open(argv[1]);
  if (!r) {
    std::fprintf(stderr, "open: %s\n", r.error().what().c_str());
    return 2;
  }
  auto p = r->try_peek();
  if (!p || !*p) {
    std::fprintf(stderr, "peek failed\n");
    return 3;
  }
  std::printf("held %.*s\n", static_cast<int>((*p)->size()),
              reinterpret_cast<const char*>((*p)->data()));
  std::fflush(stdout);
  for (;;) ::pause();
}
