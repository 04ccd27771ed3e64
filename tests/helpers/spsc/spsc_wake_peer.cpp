// A ring endpoint that dies between a state change and the wake it owes,
// driven by tests/integration/wake/spsc_wake_process_test.cpp.
//
//   spsc_wake_peer publish-and-die NAME GO_FILE
//       attaches as producer, reserves one 8-byte record, prints "READY",
//       waits until GO_FILE exists, then commits it with a crash hook that
//       SIGKILLs the process right after the record's header is published
//       (before the commit loads the consumer's parked flag)
//   spsc_wake_peer release-and-die NAME GO_FILE
//       attaches as consumer, peeks one record, prints "READY", waits until
//       GO_FILE exists, then releases it with a crash hook that SIGKILLs the
//       process right after head is stored (before the producer's flag load)
//
// Exit codes: 2 usage, 3 library error; otherwise killed by SIGKILL.
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"
#include "shm/testing/ring_crash.hpp"

#include <unistd.h>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

namespace {

[[noreturn]] void die(int code, const std::string& msg) {
  std::fprintf(stderr, "spsc_wake_peer: %s\n", msg.c_str());
  std::_Exit(code);
}

void say(const char* line) {
  std::printf("%s\n", line);
  std::fflush(stdout);
}

void wait_for_file(const std::string& path) {
  while (!std::filesystem::exists(path)) ::usleep(500);
}

shm::test_hooks::RingCrashPoint g_point{};
void kill_here(shm::test_hooks::RingCrashPoint point) {
  if (point == g_point) ::raise(SIGKILL);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) die(2, "usage: spsc_wake_peer publish-and-die|release-and-die NAME GO_FILE");
  const std::string mode = argv[1];
  if (mode == "publish-and-die") {
    auto p = shm::RingProducer::open(argv[2]);
    if (!p) die(3, p.error().what());
    auto r = p->try_reserve(8);
    if (!r || !*r) die(3, "no room for the record");
    std::memcpy((*r)->data(), "orphaned", 8);
    say("READY");
    wait_for_file(argv[3]);
    g_point = shm::test_hooks::RingCrashPoint::CommitAfterPublish;
    shm::test_hooks::set_ring_crash_hook(*p, kill_here);
    p->commit();
    die(3, "commit() went past the crash point");
  }
  if (mode == "release-and-die") {
    auto c = shm::RingConsumer::open(argv[2]);
    if (!c) die(3, c.error().what());
    auto r = c->try_peek();
    if (!r || !*r) die(3, "no record to peek");
    say("READY");
    wait_for_file(argv[3]);
    g_point = shm::test_hooks::RingCrashPoint::ReleaseAfterHead;
    shm::test_hooks::set_ring_crash_hook(*c, kill_here);
    c->release();
    die(3, "release() went past the crash point");
  }
  die(2, "unknown mode " + mode);
}
