// A channel producer process for the multi-process tests.
//
//   test_channel_producer_step NAME stream COUNT MAX_LEN
//       sends COUNT deterministic payloads (blocking), finishes, prints "done".
//   test_channel_producer_step NAME fault POINT COMMITTED
//       sends COUNT payloads, then drives the producer to a fault point one
//       step at a time, prints "at POINT" and sleeps until killed:
//         before-quota      the active page is full; nothing of the rotation done
//         after-seal        quota granted, the page sealed [S], slot not rebound
//         after-rebind      successor slot rebound, nothing admitted to it
//         reserve-commit    bytes reserved and half written, never committed
//         page-before-ring  a payload published to the page [P], not to the ring [R]
//         detach            exits without finish() (prints "detached")
//         finish            finishes and exits (prints "finished")
// Payload n has test::channel_length(n, 40) bytes of test::channel_byte(n, i).
#include "channel_payload.hpp"
#include "shm/testing/channel.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace {

using namespace std::chrono_literals;
using shm::detail::ChannelTesting;

constexpr std::size_t kFaultMaxLen = 40;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "channel_producer_step: %s\n", what.c_str());
  std::exit(2);
}

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

[[noreturn]] void wait_for_kill(const std::string& point) {
  say("at " + point);
  for (;;) std::this_thread::sleep_for(1s);
}

void send_one(shm::ChannelProducer& p, std::uint64_t seq, std::size_t max_len) {
  const auto payload = shm::test::channel_payload(seq, shm::test::channel_length(seq, max_len));
  auto r = p.send(payload, 30s);
  if (!r) die("send: " + r.error().what());
  if (!*r) die("send timed out: " + std::string(shm::to_string(r->status)));
  if (r->sequence != seq)
    die("sequence " + std::to_string(r->sequence) + " != " + std::to_string(seq));
}

int run_fault(shm::ChannelProducer& p, const std::string& point, std::uint64_t committed) {
  for (std::uint64_t i = 0; i < committed; ++i) send_one(p, i, kFaultMaxLen);
  const auto next =
      shm::test::channel_payload(committed, shm::test::channel_length(committed, kFaultMaxLen));
  if (point == "detach") {
    say("detached");
    return 0;  // the handle detaches on destruction, without finish()
  }
  if (point == "finish") {
    if (auto ok = p.finish(); !ok) die("finish: " + ok.error().what());
    say("finished");
    return 0;
  }
  if (point == "reserve-commit") {
    auto r = p.try_reserve(next.size());
    if (!r || !*r) die("reserve failed");
    std::memcpy(r->bytes().data(), next.data(), next.size() / 2);
    wait_for_kill(point);
  }
  if (point == "page-before-ring") {
    if (ChannelTesting::rotation_due(p, next.size()))
      die("page-before-ring needs room in the page");
    (void)ChannelTesting::publish_without_descriptor(p, next);
    wait_for_kill(point);
  }
  if (!ChannelTesting::rotation_due(p, next.size())) die(point + " needs a full page");
  if (point == "before-quota") wait_for_kill(point);
  auto free = ChannelTesting::quota_allows(p);
  if (!free || !*free) die("quota refused");
  ChannelTesting::seal_active(p);
  if (point == "after-seal") wait_for_kill(point);
  ChannelTesting::rebind_next(p);
  if (point == "after-rebind") wait_for_kill(point);
  die("unknown fault point " + point);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) die("usage: NAME stream COUNT MAX_LEN | NAME fault POINT COMMITTED");
  const std::string name = argv[1];
  const std::string mode = argv[2];
  auto p = shm::ChannelProducer::open(name);
  if (!p) die("open: " + p.error().what());
  say("ready");
  if (mode == "stream") {
    const std::uint64_t count = std::strtoull(argv[3], nullptr, 10);
    const std::size_t max_len = std::strtoull(argv[4], nullptr, 10);
    for (std::uint64_t i = 0; i < count; ++i) send_one(*p, i, max_len);
    if (auto ok = p->finish(); !ok) die("finish: " + ok.error().what());
    say("done");
    return 0;
  }
  if (mode == "fault") return run_fault(*p, argv[3], std::strtoull(argv[4], nullptr, 10));
  die("unknown mode " + mode);
}
