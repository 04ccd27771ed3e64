// test_fanout_attach_hold BASE
// Opens the fanout BASE as a FanoutProducer, prints "attached" and sleeps
// until killed, holding nothing: the test kill -9s it to leave a dead
// attacher in the bitmap's table for the kind's reclaim.
#include "shm/fanout/priority_fanout.hpp"

#include <unistd.h>
#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s BASE\n", argv[0]);
    return 64;
  }
  auto f = shm::FanoutProducer::open(argv[1], {.priorities = 0, .ring_cells = 0, .slot_bytes = 0});
  if (!f) {
    std::fprintf(stderr, "open: %s\n", f.error().what().c_str());
    return 2;
  }
  std::printf("attached\n");
  std::fflush(stdout);
  for (;;) ::pause();
}
