// Fuzz input -> a segment file. Every fuzz target writes its input as the
// whole file of one segment, "fuzzed", in a private root (a fresh 0700
// directory under /dev/shm, made once per process), and reads it back through
// the library's own open path: the bytes play a corrupt or hostile segment.
#pragma once

#include "shm/segment/segment.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace shm::fuzz {

inline constexpr std::string_view kSegmentName = "fuzzed";

// The private root, created on first use (aborts when it cannot be: a fuzz
// run without a root tests nothing).
[[nodiscard]] const std::string& root();

// Replaces the segment file with `bytes`. False when the write failed.
[[nodiscard]] bool write_segment(std::span<const std::uint8_t> bytes);

// Options every target opens with: the private root, no wait for a segment
// that says it is still initializing (a fuzzed header must not cost a second).
[[nodiscard]] OpenOptions open_options(bool read_only);

}  // namespace shm::fuzz
