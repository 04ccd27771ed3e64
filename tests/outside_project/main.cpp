// Uses the installed libshm the way an outside program would.
//
//   outside_main              ring round trip in this process, then a channel
//                             across two processes: this one produces, a copy
//                             of itself (posix_spawn of /proc/self/exe) consumes.
//   outside_main consume NAME N
//                             the consumer: receives N payloads, checks each,
//                             expects the end of the stream, exits 0.
//
// Built as Debug (asserts on, no NDEBUG) against the install of a Release
// library (NDEBUG): the handles' layout and the symbols the inline code calls
// must agree across that mix (check_install.cmake). Segments go to
// $LIBSHM_ROOT (a private directory).
#ifdef NDEBUG
#error "outside_main checks a Debug program (no NDEBUG) against the installed library"
#endif

#include <shm/channel/consumer.hpp>
#include <shm/channel/producer.hpp>
#include <shm/platform/crc32c.hpp>
#include <shm/spsc/consumer.hpp>
#include <shm/spsc/producer.hpp>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

extern char** environ;

namespace {

using namespace std::chrono_literals;

int fail(const char* what, const shm::Error& e) {
  std::fprintf(stderr, "outside_main: %s: %s\n", what, e.what().c_str());
  return 1;
}

// Payload i: its number and a filler whose length varies, so pages rotate.
std::string payload(int i) {
  return "message " + std::to_string(i) + ":" + std::string(static_cast<std::size_t>(i % 97), 'x');
}

int ring_round_trip() {
  shm::RingParams params;
  params.capacity_bytes = 4096;
  auto producer = shm::RingProducer::create("outside-ring", params);
  if (!producer) return fail("create ring", producer.error());
  auto consumer = shm::RingConsumer::open("outside-ring");
  if (!consumer) return fail("open ring", consumer.error());
  // More records than fit at once, so the ring wraps several times.
  std::array<std::byte, 256> buffer{};
  for (int i = 0; i < 1000; ++i) {
    const std::string text = "record " + std::to_string(i);
    auto pushed = producer->try_push(std::as_bytes(std::span(text)));
    if (!pushed) return fail("push", pushed.error());
    if (!*pushed) {
      std::fprintf(stderr, "outside_main: ring full at record %d\n", i);
      return 1;
    }
    auto popped = consumer->try_pop(buffer);
    if (!popped) return fail("pop", popped.error());
    if (!*popped || std::string(reinterpret_cast<const char*>(buffer.data()), **popped) != text) {
      std::fprintf(stderr, "outside_main: record %d did not come back intact\n", i);
      return 1;
    }
  }
  if (auto removed = shm::Segment::unlink("outside-ring"); !removed)
    return fail("unlink ring", removed.error());
  std::printf("outside_main: 1000 records through an installed libshm ring: ok\n");
  return 0;
}

int consume(const std::string& name, int count) {
  auto consumer = shm::ChannelConsumer::open(name);
  if (!consumer) return fail("consumer open", consumer.error());
  for (int i = 0;; ++i) {
    auto r = consumer->receive(30s);
    if (!r) return fail("receive", r.error());
    if (r->status == shm::ReceiveStatus::End) {
      if (i != count) {
        std::fprintf(stderr, "outside_main: stream ended after %d of %d payloads\n", i, count);
        return 1;
      }
      return 0;
    }
    if (!*r) {
      std::fprintf(stderr, "outside_main: no payload %d within 30 s\n", i);
      return 1;
    }
    const auto bytes = r->lease.bytes();
    if (i >= count ||
        std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()) != payload(i)) {
      std::fprintf(stderr, "outside_main: payload %d did not come through intact\n", i);
      return 1;
    }
    r->lease.release();
  }
}

int channel_across_processes() {
  const std::string name = "outside-channel";
  constexpr int kCount = 3000;
  shm::ChannelParams params{
      .pages = 4, .page_bytes = 4096, .descriptors_per_page = 64, .ring_cells = 64};
  auto producer = shm::ChannelProducer::create(name, params);
  if (!producer) return fail("producer create", producer.error());

  const std::string count = std::to_string(kCount);
  char* argv[] = {const_cast<char*>("outside_main"), const_cast<char*>("consume"),
                  const_cast<char*>(name.c_str()), const_cast<char*>(count.c_str()), nullptr};
  pid_t child = 0;
  if (const int e = posix_spawn(&child, "/proc/self/exe", nullptr, nullptr, argv, environ);
      e != 0) {
    std::fprintf(stderr, "outside_main: posix_spawn: error %d\n", e);
    return 1;
  }
  int rc = 0;
  for (int i = 0; i < kCount && rc == 0; ++i) {
    const std::string text = payload(i);
    auto sent = producer->send(std::as_bytes(std::span(text)), 30s);
    if (!sent) {
      rc = fail("send", sent.error());
    } else if (!*sent) {
      std::fprintf(stderr, "outside_main: payload %d not admitted within 30 s\n", i);
      rc = 1;
    }
  }
  if (rc == 0) {
    if (auto done = producer->finish(); !done) rc = fail("finish", done.error());
  }
  if (rc != 0) kill(child, SIGKILL);
  int status = 0;
  if (waitpid(child, &status, 0) != child) {
    std::perror("outside_main: waitpid");
    return 1;
  }
  if (rc != 0) return rc;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "outside_main: consumer process failed (status %d)\n", status);
    return 1;
  }
  *producer = shm::ChannelProducer{};  // detach before removing the segment
  if (auto removed = shm::Segment::unlink(name); !removed)
    return fail("unlink channel", removed.error());
  std::printf(
      "outside_main: %d payloads through an installed libshm channel, producer and "
      "consumer in two processes: ok\n",
      kCount);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "consume") return consume(argv[2], std::atoi(argv[3]));
  if (argc != 1) {
    std::fprintf(stderr, "usage: outside_main | outside_main consume NAME N\n");
    return 2;
  }
  // RFC 3720 check value: the installed library computes real CRC32C.
  const std::string check = "123456789";
  if (shm::crc32c(check.data(), check.size()) != 0xE3069283u) {
    std::fprintf(stderr, "outside_main: crc32c(\"123456789\") is wrong\n");
    return 1;
  }
  if (const int rc = ring_round_trip(); rc != 0) return rc;
  return channel_across_processes();
}
