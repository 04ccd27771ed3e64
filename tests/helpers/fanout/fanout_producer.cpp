// test_fanout_producer BASE PRODUCER_ID COUNT [hold]
// Submits COUNT FanoutItems of producer PRODUCER_ID to the fanout BASE, at
// pseudo-random priorities, blocking (up to 30 s per item) while a ring is full.
// With `hold`: then claims a cell for item COUNT in its priority's ring (an
// MpmcRing handle on <BASE>.prio<p>, as submit() does), writes the item but
// never publishes it, prints "holding priority P seq COUNT until killed" and
// sleeps until killed (a submitter killed between claim and publish).
#include "fanout_items.hpp"
#include "shm/fanout/priority_fanout.hpp"

#include <fmt/format.h>

#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

int main(int argc, char** argv) {
  if (argc != 4 && !(argc == 5 && std::string(argv[4]) == "hold")) {
    std::fprintf(stderr, "usage: %s BASE PRODUCER_ID COUNT [hold]\n", argv[0]);
    return 64;
  }
  const std::string base = argv[1];
  const auto producer = static_cast<std::uint32_t>(std::strtoul(argv[2], nullptr, 10));
  const std::uint64_t count = std::strtoull(argv[3], nullptr, 10);
  auto f = shm::FanoutProducer::open(base, {.priorities = 0, .ring_cells = 0, .slot_bytes = 0});
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
  if (argc == 5) {
    const std::uint32_t prio = shm::test::item_priority(producer, count, f->priorities());
    auto ring = shm::MpmcProducer::open(fmt::format("{}.prio{}", base, prio));
    if (!ring) {
      std::fprintf(stderr, "open ring: %s\n", ring.error().what().c_str());
      return 2;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (;;) {
      auto cell = ring->try_reserve();
      if (!cell) {
        std::fprintf(stderr, "reserve: %s\n", cell.error().what().c_str());
        return 3;
      }
      if (*cell) {
        const shm::test::FanoutItem item = shm::test::make_item(producer, count, prio);
        std::memcpy((*cell)->data(), &item, sizeof item);
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "reserve: still full after 30 s\n");
        return 4;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::printf("holding priority %u seq %llu until killed\n", prio,
                static_cast<unsigned long long>(count));
    std::fflush(stdout);
    for (;;) ::pause();
  }
  std::printf("done %llu\n", static_cast<unsigned long long>(count));
  std::fflush(stdout);
  return 0;
}
