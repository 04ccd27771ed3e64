// test_fanout_producer BASE PRODUCER_ID COUNT
// Submits COUNT FanoutItems of producer PRODUCER_ID to the fanout BASE, at
// pseudo-random priorities, blocking (up to 30 s per item) while a ring is full.
#include "helpers/fanout_items.hpp"
#include "shm/priority_fanout.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s BASE PRODUCER_ID COUNT\n", argv[0]);
    return 64;
  }
  const std::string base = argv[1];
  const auto producer = static_cast<std::uint32_t>(std::strtoul(argv[2], nullptr, 10));
  const std::uint64_t count = std::strtoull(argv[3], nullptr, 10);
  auto f = shm::PriorityFanout::open(base, {.priorities = 0, .ring_capacity = 0, .slot_size = 0},
                                     {}, shm::FanoutRole::Submitter);
  if (!f) {
    std::fprintf(stderr, "open: %s\n", f.error().what().c_str());
    return 2;
  }
  std::printf("started\n");
  std::fflush(stdout);
  for (std::uint64_t seq = 0; seq < count; ++seq) {
    const std::uint32_t prio = shm::test::item_priority(producer, seq, f->priorities());
    const shm::test::FanoutItem item = shm::test::make_item(producer, seq, prio);
    auto ok = f->submit(prio, std::as_bytes(std::span(&item, 1)), std::chrono::seconds(30));
    if (!ok) {
      std::fprintf(stderr, "submit %llu: %s\n", static_cast<unsigned long long>(seq),
                   ok.error().what().c_str());
      return 3;
    }
    if (!*ok) {
      std::fprintf(stderr, "submit %llu: still full after 30 s\n",
                   static_cast<unsigned long long>(seq));
      return 4;
    }
  }
  std::printf("done %llu\n", static_cast<unsigned long long>(count));
  std::fflush(stdout);
  return 0;
}
