// test_topic_peer MODE NAME ARGS... — one side of a topic in its own process.
//   pub NAME COUNT BYTES       publishes COUNT samples of BYTES (publish waits up to 10 s);
//                              prints "ready", then "published COUNT"
//   sub NAME drop|block COUNT DELAY_US
//                              receives until the sample of sequence COUNT-1, checking every
//                              payload, sleeping DELAY_US after each; prints "ready", then
//                              "received R missed M"
//   hold-sub NAME K            receives K samples (Block) and holds them; prints "holding",
//                              sleeps until killed
//   hold-loan NAME             loans one chunk as the publisher; prints "loaned", sleeps
//   wait-sub NAME              subscribes (DropOldest), prints "ready", waits for one sample,
//                              prints "got SEQ"
//   block-pub NAME             publishes one sample, waiting up to 30 s; prints "published"
//   loan-pub NAME              loans one chunk, waiting up to 30 s; prints "loaned"
// Payload of sample s: its first 8 bytes hold s, byte i >= 8 holds (s + i) & 0xff.
// Exit codes: 0 done, 2 open failed, 3 a call failed, 4 a payload was wrong, 64 usage.
#include "shm/platform/clock.hpp"
#include "shm/topic/topic.hpp"

#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

using namespace std::chrono_literals;

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void fill(std::span<std::byte> b, std::uint64_t seq) {
  if (b.size() >= 8) std::memcpy(b.data(), &seq, 8);
  for (std::size_t i = 8; i < b.size(); ++i) b[i] = static_cast<std::byte>((seq + i) & 0xff);
}

bool check(std::span<const std::byte> b, std::uint64_t seq) {
  if (b.size() < 8) return false;
  std::uint64_t got = 0;
  std::memcpy(&got, b.data(), 8);
  if (got != seq) return false;
  for (std::size_t i = 8; i < b.size(); ++i)
    if (b[i] != static_cast<std::byte>((seq + i) & 0xff)) return false;
  return true;
}

[[noreturn]] void die(int code, const std::string& what) {
  std::fprintf(stderr, "test_topic_peer: %s\n", what.c_str());
  std::exit(code);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODE NAME ARGS...\n", argv[0]);
    return 64;
  }
  const std::string mode = argv[1];
  const std::string name = argv[2];
  if (mode == "pub" && argc == 5) {
    auto pub = shm::TopicPublisher::open(name);
    if (!pub) die(2, pub.error().what());
    const std::uint64_t count = std::strtoull(argv[3], nullptr, 10);
    const std::size_t bytes = std::strtoull(argv[4], nullptr, 10);
    say("ready");
    for (std::uint64_t i = 0; i < count; ++i) {
      auto loan = pub->loan(bytes, 10s);
      if (!loan || !*loan) die(3, loan ? "loan timed out" : loan.error().what());
      const std::uint64_t seq = pub->snapshot().next_seq;
      fill((*loan)->bytes(), seq);
      auto o = pub->publish(std::move(**loan), 10s);
      if (!o || o->status != shm::PublishStatus::Published)
        die(3, o ? "publish timed out" : o.error().what());
      if (o->seq != seq) die(3, "sequence moved under the publisher");
    }
    say("published " + std::to_string(count));
    return 0;
  }
  if (mode == "sub" && argc == 6) {
    const std::string how = argv[3];
    auto sub = shm::TopicSubscriber::open(
        name, how == "block" ? shm::TopicOverflow::Block : shm::TopicOverflow::DropOldest);
    if (!sub) die(2, sub.error().what());
    const std::uint64_t count = std::strtoull(argv[4], nullptr, 10);
    const auto delay = std::chrono::microseconds(std::strtoull(argv[5], nullptr, 10));
    say("ready");
    std::uint64_t received = 0;
    std::uint64_t last = 0;
    bool first = true;
    while (first || last + 1 < count) {
      auto s = sub->receive(20s);
      if (!s) die(3, s.error().what());
      if (!*s) die(3, "nothing received for 20 s");
      if (!check((*s)->bytes(), (*s)->seq())) die(4, "payload of " + std::to_string((*s)->seq()));
      if (!first && (*s)->seq() <= last) die(4, "sequence went back");
      last = (*s)->seq();
      first = false;
      ++received;
      s->reset();
      if (delay.count() != 0) std::this_thread::sleep_for(delay);
    }
    say("received " + std::to_string(received) + " missed " + std::to_string(sub->missed()));
    return 0;
  }
  if (mode == "hold-sub" && argc == 4) {
    auto sub = shm::TopicSubscriber::open(name, shm::TopicOverflow::Block);
    if (!sub) die(2, sub.error().what());
    const std::uint64_t k = std::strtoull(argv[3], nullptr, 10);
    std::vector<shm::Sample> held;
    for (std::uint64_t i = 0; i < k; ++i) {
      auto s = sub->receive(10s);
      if (!s || !*s) die(3, s ? "nothing to hold" : s.error().what());
      held.push_back(std::move(**s));
    }
    say("holding");
    for (;;) ::pause();
  }
  if (mode == "hold-loan" && argc == 3) {
    auto pub = shm::TopicPublisher::open(name);
    if (!pub) die(2, pub.error().what());
    auto loan = pub->try_loan(8);
    if (!loan || !*loan) die(3, "no loan");
    say("loaned");
    for (;;) ::pause();
  }
  if (mode == "wait-sub" && argc == 3) {
    auto sub = shm::TopicSubscriber::open(name, shm::TopicOverflow::DropOldest);
    if (!sub) die(2, sub.error().what());
    say("ready");
    auto s = sub->receive(30s);
    if (!s || !*s) die(3, s ? "nothing in 30 s" : s.error().what());
    say("got " + std::to_string((*s)->seq()));
    return 0;
  }
  if (mode == "block-pub" && argc == 3) {
    auto pub = shm::TopicPublisher::open(name);
    if (!pub) die(2, pub.error().what());
    auto loan = pub->try_loan(8);
    if (!loan || !*loan) die(3, "no loan");
    fill((*loan)->bytes(), pub->snapshot().next_seq);
    say("ready");
    auto o = pub->publish(std::move(**loan), 30s);
    if (!o || o->status != shm::PublishStatus::Published) die(3, "publish did not complete");
    say("published");
    return 0;
  }
  if (mode == "loan-pub" && argc == 3) {
    auto pub = shm::TopicPublisher::open(name);
    if (!pub) die(2, pub.error().what());
    say("ready");
    auto loan = pub->loan(8, 30s);
    if (!loan || !*loan) die(3, "loan did not complete");
    say("loaned");
    return 0;
  }
  std::fprintf(stderr, "usage: %s MODE NAME ARGS... (bad mode or argument count)\n", argv[0]);
  return 64;
}
