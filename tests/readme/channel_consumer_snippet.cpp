// Harness for README snippets that use a channel consumer `rx`
// (tests/readme.cmake puts the snippet in place of the README_BLOCK line).
#include <shm/channel/consumer.hpp>

#include <chrono>
#include <cstdio>

int main() {
  auto params = shm::ChannelParams::for_payload(512, 64);
  if (!params) return 2;
  auto rx = shm::ChannelConsumer::create("snippet", *params);
  if (!rx) {
    std::fprintf(stderr, "%s\n", rx.error().what().c_str());
    return 2;
  }
  {
    // README_BLOCK
  }
  // The snippet must have taken effect.
  return rx->coalescing().descriptors == 256 ? 0 : 1;
}
