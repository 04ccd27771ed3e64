// Files, mappings and per-byte OFD locks: the only place that touches fds.
#pragma once

#include "shm/error.hpp"

#include <sys/stat.h>
#include <sys/types.h>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace shm {

// An owned file descriptor (move-only, closed on destruction).
class FileHandle {
 public:
  FileHandle() = default;
  explicit FileHandle(int fd) noexcept : fd_(fd) {}
  FileHandle(FileHandle&& other) noexcept : fd_(other.release()) {}
  FileHandle& operator=(FileHandle&& other) noexcept;
  FileHandle(const FileHandle&) = delete;
  FileHandle& operator=(const FileHandle&) = delete;
  ~FileHandle();

  [[nodiscard]] int get() const noexcept { return fd_; }
  [[nodiscard]] bool valid() const noexcept { return fd_ >= 0; }
  int release() noexcept;

 private:
  int fd_ = -1;
};

// A shared mapping of a whole file (move-only, unmapped on destruction).
class Mapping {
 public:
  Mapping() = default;
  Mapping(Mapping&& other) noexcept;
  Mapping& operator=(Mapping&& other) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping();

  [[nodiscard]] static Result<Mapping> map(int fd, std::size_t size, bool writable,
                                           std::string_view what);

  [[nodiscard]] std::byte* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool writable() const noexcept { return writable_; }
  // Touches every page so later accesses do not fault (benchmarks, creators).
  void prefault() const noexcept;

 private:
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  bool writable_ = false;
};

// Opens the same file again as a new open file description (its own OFD locks).
[[nodiscard]] Result<FileHandle> reopen(int fd, bool writable);

// Open-file-description byte locks: held by an open file description, dropped by
// the kernel when the last fd of it closes, however the process dies.
enum class LockProbe : std::uint8_t { Free, Held };
[[nodiscard]] std::string_view to_string(LockProbe v) noexcept;
// Tries to take an exclusive lock on byte `offset`; false when another OFD holds it.
[[nodiscard]] Result<bool> try_lock_byte(int fd, std::uint64_t offset);
[[nodiscard]] Result<void> unlock_byte(int fd, std::uint64_t offset);
// Whether some other open file description holds a lock on byte `offset`.
[[nodiscard]] Result<LockProbe> probe_byte(int fd, std::uint64_t offset);
// Tries to take an exclusive lock on bytes [offset, offset + length) in one
// call; false when another OFD holds a lock on any of them.
[[nodiscard]] Result<bool> try_lock_range(int fd, std::uint64_t offset, std::uint64_t length);
// One lock that another open file description holds on some byte of
// [offset, offset + length): its range [start, end) (end = UINT64_MAX: to the
// end of the file), or nullopt when none does. Which one, when several do, is
// the kernel's choice.
struct LockedRange {
  std::uint64_t start;
  std::uint64_t end;
};
[[nodiscard]] Result<std::optional<LockedRange>> probe_range(int fd, std::uint64_t offset,
                                                             std::uint64_t length);

struct FsSpace {
  std::uint64_t available_bytes;
  std::uint64_t total_bytes;
};
[[nodiscard]] Result<FsSpace> filesystem_space(const std::string& dir);

}  // namespace shm
