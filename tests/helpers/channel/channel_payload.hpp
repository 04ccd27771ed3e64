// Deterministic channel payloads shared by the channel tests and helpers: the
// content of payload n is a function of n, so any process can check it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace shm::test {

[[nodiscard]] inline std::byte channel_byte(std::uint64_t sequence, std::size_t i) {
  return static_cast<std::byte>((sequence * 131 + i * 7 + (sequence >> 8)) & 0xFF);
}

// A length in [0, max] that varies with the sequence.
[[nodiscard]] inline std::size_t channel_length(std::uint64_t sequence, std::size_t max) {
  return static_cast<std::size_t>(((sequence * 2654435761u) >> 7) % (max + 1));
}

inline void fill_channel_payload(std::span<std::byte> out, std::uint64_t sequence) {
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = channel_byte(sequence, i);
}

[[nodiscard]] inline std::vector<std::byte> channel_payload(std::uint64_t sequence, std::size_t n) {
  std::vector<std::byte> v(n);
  fill_channel_payload(v, sequence);
  return v;
}

[[nodiscard]] inline bool check_channel_payload(std::span<const std::byte> got,
                                                std::uint64_t sequence, std::size_t expected_size) {
  if (got.size() != expected_size) return false;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != channel_byte(sequence, i)) return false;
  return true;
}

}  // namespace shm::test
