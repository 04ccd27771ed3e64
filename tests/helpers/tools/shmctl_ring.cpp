// Test helper for shmctl: a separate process that creates an SpscRing so the
// segment's creator (and attachers) can be alive, killed, or gone.
//
//   test_shmctl_ring ROOT NAME MODE [RECORDS]
//     hold     create + attach producer and consumer, push RECORDS records,
//              print "ready", then wait until killed
//     abandon  like hold, but print "ready" and _exit() without detaching:
//              both slots stay Attached with their holder dead
//     create   create the ring without attaching, push nothing, exit normally
//   A MODE ending in "-ephemeral" (abandon-ephemeral, create-ephemeral)
//   creates the ring ephemeral (CreateOptions::ephemeral: gc may collect it).
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"

#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: test_shmctl_ring ROOT NAME hold|abandon|create[-ephemeral] [RECORDS]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) return usage();
  const std::string root = argv[1];
  const std::string name = argv[2];
  std::string mode = argv[3];
  const bool ephemeral = mode.ends_with("-ephemeral");
  if (ephemeral) mode.resize(mode.size() - std::string("-ephemeral").size());
  const long records = argc > 4 ? std::strtol(argv[4], nullptr, 10) : 0;

  if (mode == "create") {
    auto seg =
        shm::create_ring(name, {.capacity_bytes = 4096}, {.root = root, .ephemeral = ephemeral});
    if (!seg) {
      std::fprintf(stderr, "create: %s\n", seg.error().what().c_str());
      return 1;
    }
    std::printf("ready\n");
    return 0;
  }
  if (mode != "hold" && mode != "abandon") return usage();

  auto producer = shm::RingProducer::create(name, {.capacity_bytes = 4096},
                                            {.root = root, .ephemeral = ephemeral});
  if (!producer) {
    std::fprintf(stderr, "producer: %s\n", producer.error().what().c_str());
    return 1;
  }
  auto consumer = shm::RingConsumer::open(name, {}, {.root = root});
  if (!consumer) {
    std::fprintf(stderr, "consumer: %s\n", consumer.error().what().c_str());
    return 1;
  }
  for (long i = 0; i < records; ++i) {
    const std::string record = "record-" + std::to_string(i);
    auto pushed = producer->try_push(std::as_bytes(std::span(record)));
    if (!pushed || !*pushed) {
      std::fprintf(stderr, "push %ld failed\n", i);
      return 1;
    }
  }
  std::printf("ready\n");
  std::fflush(stdout);
  if (mode == "abandon") ::_exit(0);  // no destructors: the slots stay Attached, holder dead
  for (;;) ::pause();
}
