// One sidecar per root: an OFD lock on <root>/.libshm-sidecar.lock. The kernel
// drops it when the holder dies, however it dies, so a crashed sidecar never
// blocks its successor. The holder writes who it is into the file so a refused
// second instance can name it.
#pragma once

#include "shm/error.hpp"
#include "shm/platform/file.hpp"

#include <optional>
#include <string>
#include <string_view>

namespace shm::sidecar {

inline constexpr std::string_view kLockFileName = ".libshm-sidecar.lock";

class InstanceLock {
 public:
  InstanceLock() = default;
  InstanceLock(InstanceLock&&) noexcept = default;
  InstanceLock& operator=(InstanceLock&&) noexcept = default;

  // Takes the lock of `root` (creating the root and the file when missing)
  // and writes this process's identity into the file. Errc::RoleTaken when
  // another live process holds it; the message names its pid, command line,
  // start time and listen address. The lock itself needs no free space (a
  // lock on a byte of an empty file): on a full filesystem the identity may
  // not be written, which is not a failure (identity_error() says why).
  [[nodiscard]] static Result<InstanceLock> acquire(const std::string& root);
  // Rewrites the identity with the address the HTTP endpoint is bound to
  // (over the previous one, then cut to length: no free space needed when
  // the file already held an identity).
  [[nodiscard]] Result<void> publish(std::string_view listen_address);
  // Why acquire() could not write the identity (a full filesystem), if so.
  [[nodiscard]] const std::optional<Error>& identity_error() const noexcept {
    return identity_error_;
  }

  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] bool held() const noexcept { return fd_.valid(); }

 private:
  FileHandle fd_;
  std::string path_;
  std::string started_;
  std::optional<Error> identity_error_;
};

}  // namespace shm::sidecar
