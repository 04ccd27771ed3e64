// test_fanout_take_hold BASE
// Opens the fanout BASE as a FanoutConsumer, takes the highest-priority item
// with the at-least-once take (try_take_highest) and never releases it:
// prints "taken <priority> <payload>" and sleeps until killed. The test
// kill -9s it between take and release.
#include "shm/fanout/priority_fanout.hpp"

#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <thread>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s BASE\n", argv[0]);
    return 64;
  }
  auto f = shm::FanoutConsumer::open(argv[1], {});
  if (!f) {
    std::fprintf(stderr, "open: %s\n", f.error().what().c_str());
    return 2;
  }
  auto got = f->take_highest(std::chrono::seconds(30));
  if (!got || !*got) {
    std::fprintf(stderr, "take: %s\n", got ? "nothing within 30 s" : got.error().what().c_str());
    return 3;
  }
  std::printf("taken %u %.*s\n", (*got)->priority, static_cast<int>((*got)->payload.size()),
              reinterpret_cast<const char*>((*got)->payload.data()));
  std::fflush(stdout);
  for (;;) ::pause();
}
