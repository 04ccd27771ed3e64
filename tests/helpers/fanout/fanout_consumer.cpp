// test_fanout_consumer BASE SEEN_FILE MODE [HOLD_AT]
//   MODE drain:   pop_highest() until every item was delivered, or producers
//                 are done and nothing arrived for 300 ms. Marks each item in
//                 the seen table; a duplicate or a damaged payload fails.
//   MODE hold:    drain like `drain` until the table counts HOLD_AT
//                 deliveries, then pop one more item, do not mark it, print
//                 "holding producer P seq S until killed" and sleep until
//                 killed (a drainer killed with a popped item in hand).
//   MODE ordered: one consumer of a quiescent queue: try_pop_highest() until
//                 empty; priorities must never increase, and within a priority
//                 each producer's items must come in submission order.
#include "fanout_items.hpp"
#include "shm/fanout/priority_fanout.hpp"

#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>

namespace {

using Clock = std::chrono::steady_clock;

int fail(const char* what, const shm::test::FanoutItem& it) {
  std::printf("%s: producer %u seq %llu priority %u\n", what, it.producer,
              static_cast<unsigned long long>(it.seq), it.priority);
  std::fflush(stdout);
  return 5;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: %s BASE SEEN_FILE drain|ordered|hold [HOLD_AT]\n", argv[0]);
    return 64;
  }
  const std::string base = argv[1];
  const std::string mode = argv[3];
  const std::uint64_t hold_at = argc == 5 ? std::strtoull(argv[4], nullptr, 10) : 0;
  auto seen = shm::test::SeenTable::map(argv[2], false);
  if (!seen) {
    std::fprintf(stderr, "seen: %s\n", seen.error().what().c_str());
    return 2;
  }
  auto f = shm::FanoutConsumer::open(base, {.priorities = 0, .ring_cells = 0, .slot_bytes = 0});
  if (!f) {
    std::fprintf(stderr, "open: %s\n", f.error().what().c_str());
    return 2;
  }
  auto& hdr = seen->header();
  const std::uint64_t per_producer = hdr.per_producer.load();
  const std::uint64_t total = seen->total();
  std::printf("started\n");
  std::fflush(stdout);

  shm::test::FanoutItem it{};
  auto buf = std::as_writable_bytes(std::span(&it, 1));
  std::uint64_t mine = 0;
  // Accepts one drained item: intact, routed right, never seen before.
  auto accept = [&](std::uint32_t priority, std::size_t size) -> int {
    if (size != sizeof it || !shm::test::item_intact(it)) return fail("damaged payload", it);
    if (it.priority != priority) return fail("drained from the wrong priority", it);
    if (it.producer >= hdr.producers.load() || it.seq >= per_producer)
      return fail("unknown item", it);
    if (seen->slot(it.producer * per_producer + it.seq).fetch_add(1) != 0)
      return fail("duplicate", it);
    hdr.delivered.fetch_add(1);
    ++mine;
    return 0;
  };

  if (mode == "ordered") {
    std::uint32_t last_priority = ~0u;
    std::map<std::pair<std::uint32_t, std::uint32_t>, std::uint64_t> next_seq;  // (producer, prio)
    for (;;) {
      auto d = f->try_pop_highest(buf);
      if (!d) {
        std::printf("error: %s\n", d.error().what().c_str());
        return 6;
      }
      if (!*d) break;
      if (int rc = accept((*d)->priority, (*d)->size); rc != 0) return rc;
      if (last_priority != ~0u && (*d)->priority > last_priority)
        return fail("priority went up", it);
      last_priority = (*d)->priority;
      auto [pos, fresh] = next_seq.try_emplace({it.producer, it.priority}, 0);
      if (!fresh && it.seq < pos->second) return fail("out of order within a priority", it);
      pos->second = it.seq + 1;
    }
    std::printf("ordered %llu\n", static_cast<unsigned long long>(mine));
    std::fflush(stdout);
    return 0;
  }

  auto idle_since = Clock::now();
  while (hdr.delivered.load() < total) {
    auto d = f->pop_highest(buf, std::chrono::milliseconds(50));
    if (!d) {
      std::printf("error: %s\n", d.error().what().c_str());
      return 6;
    }
    if (*d) {
      if (mode == "hold" && hdr.delivered.load() >= hold_at) {
        if ((*d)->size != sizeof it || !shm::test::item_intact(it))
          return fail("damaged payload", it);
        std::printf("holding producer %u seq %llu until killed\n", it.producer,
                    static_cast<unsigned long long>(it.seq));
        std::fflush(stdout);
        for (;;) ::pause();
      }
      if (int rc = accept((*d)->priority, (*d)->size); rc != 0) return rc;
      idle_since = Clock::now();
      continue;
    }
    if (hdr.producers_done.load() != 0 &&
        Clock::now() - idle_since > std::chrono::milliseconds(300))
      break;
  }
  std::printf("delivered %llu\n", static_cast<unsigned long long>(mine));
  std::fflush(stdout);
  return 0;
}
