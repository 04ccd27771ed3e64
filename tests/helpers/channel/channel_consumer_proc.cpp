// A channel consumer process for the multi-process tests.
//
//   test_channel_consumer_proc NAME MAX_LEN [HOLD_AT]
// Receives (blocking) and checks every payload against its sequence
// (test::channel_length(seq, MAX_LEN) bytes of test::channel_byte(seq, i)).
// Prints "first SEQ" for the first payload it sees, and at the end
// "result received=N next=SEQ status=end|<Errc>". With HOLD_AT, once it holds
// the lease of sequence HOLD_AT it prints "holding HOLD_AT" and sleeps until
// killed. A payload that does not match is "result ... status=mismatch" (exit 3).
#include "channel_payload.hpp"
#include "shm/channel/consumer.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

using namespace std::chrono_literals;

namespace {
void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: NAME MAX_LEN [HOLD_AT]\n");
    return 2;
  }
  const std::size_t max_len = std::strtoull(argv[2], nullptr, 10);
  const bool hold = argc == 4;
  const std::uint64_t hold_at = hold ? std::strtoull(argv[3], nullptr, 10) : 0;
  auto c = shm::ChannelConsumer::open(argv[1]);
  if (!c) {
    std::fprintf(stderr, "open: %s\n", c.error().what().c_str());
    return 2;
  }
  say("ready");
  std::uint64_t received = 0;
  bool first = true;
  for (;;) {
    auto r = c->receive(60s);
    if (!r) {
      say("result received=" + std::to_string(received) +
          " next=" + std::to_string(c->next_sequence()) +
          " status=" + std::string(shm::to_string(r.error().code)));
      std::fprintf(stderr, "%s\n", r.error().what().c_str());
      return 0;
    }
    if (r->status == shm::ReceiveStatus::End) {
      say("result received=" + std::to_string(received) +
          " next=" + std::to_string(c->next_sequence()) + " status=end");
      return 0;
    }
    if (r->status == shm::ReceiveStatus::Empty) {
      say("result received=" + std::to_string(received) + " status=timeout");
      return 4;
    }
    const std::uint64_t seq = r->lease.sequence();
    if (first) {
      say("first " + std::to_string(seq));
      first = false;
    }
    if (!shm::test::check_channel_payload(r->lease.bytes(), seq,
                                          shm::test::channel_length(seq, max_len))) {
      say("result received=" + std::to_string(received) + " status=mismatch at " +
          std::to_string(seq));
      return 3;
    }
    if (hold && seq == hold_at) {
      say("holding " + std::to_string(seq));
      for (;;) std::this_thread::sleep_for(1s);
    }
    ++received;
  }
}
