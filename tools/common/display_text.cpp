#include "display_text.hpp"

#include <fmt/format.h>

#include <cstdint>

namespace shm::tools {
namespace {

// Length of the well-formed UTF-8 sequence at s[i] (Unicode 15, table 3-7:
// no overlong forms, no surrogates, nothing above U+10FFFF), or 0.
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto at = [&](std::size_t k) { return static_cast<std::uint8_t>(s[k]); };
  const std::uint8_t lead = at(i);
  std::size_t len = 0;
  std::uint8_t lo = 0x80;
  std::uint8_t hi = 0xBF;  // bounds of the byte after the lead
  if (lead >= 0xC2 && lead <= 0xDF) {
    len = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    len = 3;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    len = 4;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  if (at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < len; ++k)
    if (at(i + k) < 0x80 || at(i + k) > 0xBF) return 0;
  return len;
}

void escape(std::string& out, std::uint8_t byte) {
  out += fmt::format("\\x{:02x}", byte);
}

}  // namespace

std::string displayable(std::string_view raw) {
  std::string out;
  out.reserve(raw.size());
  std::size_t i = 0;
  while (i < raw.size()) {
    const auto byte = static_cast<std::uint8_t>(raw[i]);
    if (byte < 0x80) {
      if (byte < 0x20 || byte == 0x7F)
        escape(out, byte);
      else
        out += static_cast<char>(byte);
      ++i;
      continue;
    }
    const std::size_t len = utf8_sequence(raw, i);
    // U+0080..U+009F (C1 controls) are encoded C2 80..C2 9F.
    const bool c1 = len == 2 && byte == 0xC2 && static_cast<std::uint8_t>(raw[i + 1]) <= 0x9F;
    if (len == 0 || c1) {
      escape(out, byte);
      ++i;
      continue;
    }
    out.append(raw.substr(i, len));
    i += len;
  }
  return out;
}

}  // namespace shm::tools
