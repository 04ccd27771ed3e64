// Fuzz target: open a segment of any kind from arbitrary bytes and verify it,
// as `shmctl verify` and the sidecar do: the generic handshake header first,
// then the kind's own describe and verify over a read-only mapping. Any
// outcome is fine except a crash, a hang or a sanitizer report.
#include "segment_file.hpp"

#include "shm/segment/describe.hpp"
#include "shm/segment/kind.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace shm;
  if (!fuzz::write_segment({data, size})) return 0;
  auto segment = Segment::open_any(fuzz::kSegmentName, fuzz::open_options(true));
  if (!segment) return 0;
  Node header;
  describe_header(*segment, header);
  const KindDescriptor* kind = find_kind(segment->header().kind);
  if (kind == nullptr || segment->header().fingerprint != kind->fingerprint) return 0;
  Node state;
  kind->describe(*segment, state);
  (void)kind->verify(*segment);
  return 0;
}
