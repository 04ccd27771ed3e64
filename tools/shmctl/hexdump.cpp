#include "hexdump.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace shm::shmctl {
namespace {

constexpr std::size_t kBytesPerLine = 16;

char printable_char(std::byte b) noexcept {
  const auto u = std::to_integer<unsigned char>(b);
  return (u >= 0x20 && u < 0x7f) ? static_cast<char>(u) : '.';
}

}  // namespace

std::string hex_lines(std::span<const std::byte> bytes, std::string_view indent) {
  std::string out;
  for (std::size_t line = 0; line < bytes.size(); line += kBytesPerLine) {
    const auto chunk = bytes.subspan(line, std::min(kBytesPerLine, bytes.size() - line));
    std::string hex;
    for (std::size_t i = 0; i < kBytesPerLine; ++i) {
      if (i == kBytesPerLine / 2) hex += ' ';
      if (i < chunk.size())
        hex += fmt::format("{:02x} ", std::to_integer<unsigned>(chunk[i]));
      else
        hex += "   ";
    }
    out += fmt::format("{}{:08x}  {} |{}|\n", indent, line, hex, printable_ascii(chunk));
  }
  return out;
}

std::string hex_string(std::span<const std::byte> bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (std::byte b : bytes) out += fmt::format("{:02x}", std::to_integer<unsigned>(b));
  return out;
}

std::string printable_ascii(std::span<const std::byte> bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (std::byte b : bytes) out += printable_char(b);
  return out;
}

}  // namespace shm::shmctl
