/// @file
/// Process identity: a pid alone is reused by the kernel, pid + start time is not.
#pragma once

#include <sys/types.h>
#include <cstdint>
#include <string>

namespace shm {

/// A process, named so that a reused pid does not match: pid plus start time.
struct ProcessId {
  std::int32_t pid = 0;          ///< the kernel's process id (0: none)
  std::uint64_t start_time = 0;  ///< clock ticks since boot (/proc/PID/stat field 22)

  /// Same pid and same start time: the same process.
  friend bool operator==(const ProcessId&, const ProcessId&) = default;
};

/// This process's ProcessId.
[[nodiscard]] ProcessId self_process() noexcept;
/// Start time of `pid`, or 0 when no such process exists (or /proc is unreadable).
[[nodiscard]] std::uint64_t process_start_time(std::int32_t pid) noexcept;
/// True when a process with this pid *and* this start time still exists.
[[nodiscard]] bool process_alive(const ProcessId& id) noexcept;
/// The command line of `pid` with NULs as spaces, empty when unknown.
[[nodiscard]] std::string process_cmdline(std::int32_t pid);
/// 64 random bits from getrandom(2) (incarnation ids, owner tokens).
[[nodiscard]] std::uint64_t random_u64() noexcept;

}  // namespace shm
