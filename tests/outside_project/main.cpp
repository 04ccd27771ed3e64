// Uses the installed libshm the way an outside project would: creates a ring,
// attaches a consumer, moves records through it, checks them, removes the ring.
// Segments go to $LIBSHM_ROOT (check_install.cmake points it at a private dir).
#include <shm/platform/crc32c.hpp>
#include <shm/ring_consumer.hpp>
#include <shm/ring_producer.hpp>

#include <array>
#include <cstdio>
#include <string>

namespace {

int fail(const char* what, const shm::Error& e) {
  std::fprintf(stderr, "outside_main: %s: %s\n", what, e.what().c_str());
  return 1;
}

}  // namespace

int main() {
  // RFC 3720 check value: the installed library computes real CRC32C.
  const std::string check = "123456789";
  if (shm::crc32c(check.data(), check.size()) != 0xE3069283u) {
    std::fprintf(stderr, "outside_main: crc32c(\"123456789\") is wrong\n");
    return 1;
  }

  shm::RingParams params;
  params.capacity = 4096;
  auto producer = shm::RingProducer::create("outside-ring", params);
  if (!producer) return fail("create", producer.error());
  auto consumer = shm::RingConsumer::open("outside-ring");
  if (!consumer) return fail("open", consumer.error());

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
    return fail("unlink", removed.error());
  std::printf("outside_main: 1000 records through an installed libshm ring: ok\n");
  return 0;
}
