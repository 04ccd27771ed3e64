// Private to the library: the size check every kind applies when it opens a
// segment (Segment::open for a complete expectation, each kind's open for a
// geometry read from the segment itself).
#pragma once

#include "shm/error.hpp"
#include "shm/segment/segment.hpp"

#include <cstdint>
#include <string_view>

namespace shm::detail {

// The file must be exactly the header plus `data_size` rounded up to whole
// pages; otherwise SizeMismatch "<path>: size: segment has N bytes, <needs> M",
// where `needs` names what asks for the size ("capacity 64 needs", "its
// ledger parameters need").
[[nodiscard]] Result<void> check_total_size(const Segment& seg, std::uint64_t data_size,
                                            std::string_view needs);

// The checks of Segment::open that need no expected parameters: the segment
// is of `expected.kind` (else KindMismatch naming both kinds) and of this
// build's layout (else FingerprintMismatch). A handle's attach(Segment) runs
// them on a segment it is given, then its kind's own checks.
[[nodiscard]] Result<void> check_kind(const Segment& seg, const KindSpec& expected);

}  // namespace shm::detail
