// Damages a file in place for the tests of refused pages: the byte at
// `offset` is XORed with 0x40, so it always changes whatever it held.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace shm::test {

inline void flip_byte(const std::string& path, std::uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x40);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

}  // namespace shm::test
