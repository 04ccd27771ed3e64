// Harness for README snippets that observe a segment `seg` with
// `observe(seg)` and `forget(seg)` (tests/readme.cmake puts the snippet in
// place of the README_BLOCK line).
#include <shm/platform/truncation_guard.hpp>
#include <shm/spsc/layout.hpp>

#include <cstdio>

namespace {

int observed = 0;
int forgotten = 0;

void observe(const shm::Segment& seg) {
  volatile std::byte sink{};
  for (std::byte b : seg.data()) sink = b;
  (void)sink;
  ++observed;
}

void forget(const shm::Segment&) {
  ++forgotten;
}

}  // namespace

int main() {
  auto created = shm::create_ring("observed", {.capacity_bytes = 4096});
  if (!created) {
    std::fprintf(stderr, "%s\n", created.error().what().c_str());
    return 2;
  }
  const shm::Segment& seg = *created;
  {
    // README_BLOCK
  }
  // The file did not shrink: read once, nothing forgotten.
  return observed == 1 && forgotten == 0 ? 0 : 1;
}
