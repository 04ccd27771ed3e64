// Hex + printable rendering of record bytes (shmctl dump).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace shm::shmctl {

// Classic 16-bytes-per-line dump, every line prefixed with `indent`:
//   00000000  68 65 6c 6c 6f 20 77 6f  72 6c 64                 |hello world|
[[nodiscard]] std::string hex_lines(std::span<const std::byte> bytes, std::string_view indent);
// Lower-case hex without separators ("68656c6c6f").
[[nodiscard]] std::string hex_string(std::span<const std::byte> bytes);
// Printable ASCII kept, every other byte shown as '.'.
[[nodiscard]] std::string printable_ascii(std::span<const std::byte> bytes);

}  // namespace shm::shmctl
