// Fuzz target: shmctl's renderers over a segment made of arbitrary bytes:
// `inspect` (the header and the kind's description, as text and as JSON) and
// `dump` (the kind's records as hex and printable text).
#include "segment_file.hpp"

#include "hexdump.hpp"
#include "node_render.hpp"
#include "shm/segment/describe.hpp"
#include "shm/segment/kind.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace shm;
  if (!fuzz::write_segment({data, size})) return 0;
  auto segment = Segment::open_any(fuzz::kSegmentName, fuzz::open_options(true));
  if (!segment) return 0;
  Node node;
  describe_header(*segment, node);
  const KindDescriptor* kind = find_kind(segment->header().kind);
  if (kind != nullptr && segment->header().fingerprint == kind->fingerprint) {
    kind->describe(*segment, node.object("state"));
    if (kind->dump != nullptr) {
      for (const auto& record : kind->dump(*segment, 8)) {
        (void)shmctl::hex_lines(record, "  ");
        (void)shmctl::printable_ascii(record);
      }
    }
  }
  (void)tools::to_text(node);
  (void)tools::to_json(node).dump();
  return 0;
}
