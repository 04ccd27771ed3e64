// Attaches to a ring as its producer or consumer and stays attached,
// heartbeating, until killed (or SIGTERM: detaches cleanly and exits 0). Used
// by the sidecar tests as the process to kill -9 or SIGSTOP.
//
//   test_sidecar_attacher NAME producer|consumer [--create CAPACITY] [--ephemeral]
//                         [--heartbeat-ms N] [--push N] [--work-ms N]
// Prints "attached <slot>" once attached. --work-ms N: instead of
// heartbeating, works every N ms and never waits in the library (a producer
// pushes one record, ignoring a full ring; a consumer pops every record).
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {
volatile std::sig_atomic_t g_stop = 0;
void on_term(int) {
  g_stop = 1;
}

template <class Endpoint>
int hold(Endpoint& e, int heartbeat_ms) {
  std::printf("attached %zu\n", e.attachment().slot());
  std::fflush(stdout);
  while (g_stop == 0) {
    e.heartbeat();
    std::this_thread::sleep_for(std::chrono::milliseconds(heartbeat_ms));
  }
  return 0;
}

// Works every `work_ms` with try_ calls only: the heartbeat is never refreshed.
template <class Endpoint, class Work>
int work(Endpoint& e, int work_ms, Work&& one_round) {
  std::printf("attached %zu\n", e.attachment().slot());
  std::fflush(stdout);
  while (g_stop == 0) {
    one_round();
    std::this_thread::sleep_for(std::chrono::milliseconds(work_ms));
  }
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: test_sidecar_attacher NAME producer|consumer [options]\n");
    return 2;
  }
  const std::string name = argv[1], role = argv[2];
  std::uint64_t create = 0, push = 0;
  int heartbeat_ms = 10, work_ms = 0;
  bool ephemeral = false;
  for (int i = 3; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--create" && i + 1 < argc)
      create = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--heartbeat-ms" && i + 1 < argc)
      heartbeat_ms = std::atoi(argv[++i]);
    else if (a == "--push" && i + 1 < argc)
      push = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--work-ms" && i + 1 < argc)
      work_ms = std::atoi(argv[++i]);
    else if (a == "--ephemeral")
      ephemeral = true;
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  struct sigaction sa {};
  sa.sa_handler = on_term;
  ::sigaction(SIGTERM, &sa, nullptr);
  shm::CreateOptions co;
  co.ephemeral = ephemeral;
  if (role == "producer") {
    auto p = create ? shm::RingProducer::create(name, shm::RingParams{create}, co)
                    : shm::RingProducer::open(name);
    if (!p) {
      std::fprintf(stderr, "%s\n", p.error().what().c_str());
      return 1;
    }
    const std::vector<std::byte> rec(16, std::byte{0x5a});
    for (std::uint64_t i = 0; i < push; ++i)
      if (auto ok = p->try_push(rec); !ok || !*ok) return 1;
    if (work_ms > 0) return work(*p, work_ms, [&] { (void)p->try_push(rec); });
    return hold(*p, heartbeat_ms);
  }
  auto c = create ? shm::RingConsumer::create(name, shm::RingParams{create}, co)
                  : shm::RingConsumer::open(name);
  if (!c) {
    std::fprintf(stderr, "%s\n", c.error().what().c_str());
    return 1;
  }
  if (work_ms > 0)
    return work(*c, work_ms, [&] { (void)c->drain([](std::span<const std::byte>) {}, 1u << 20); });
  return hold(*c, heartbeat_ms);
}
