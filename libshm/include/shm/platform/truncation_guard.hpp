/// @file
/// Reading a mapped segment whose file was truncated under the mapping raises
/// SIGBUS on the first access to a page past the new end of file, which kills
/// a long-running observer (shm-sidecar, `shmctl watch`) however carefully it
/// checked the size a moment before. A TruncationGuard::Scope marks a mapping
/// this thread is about to read; a SIGBUS inside it maps a private zero page
/// over the lost page (the faulting read is then retried and sees zeros) and
/// records the hit, so the caller can drop the segment instead of dying. A
/// SIGBUS anywhere else goes to the handler installed before (or the default
/// action: the process is killed), so real bugs are not hidden.
///
/// Opt-in and process-wide: install() sets the SIGBUS handler once; the
/// library never installs it on its own. What a guarded read returned after
/// a hit is meaningless: callers must check hit() and discard it.
#pragma once

#include "shm/error.hpp"

#include <cstddef>
#include <cstdint>

namespace shm {

namespace detail {
/// The range a thread guards (read by the SIGBUS handler).
struct GuardedRange {
  std::uintptr_t begin;
  std::uintptr_t end;  ///< exclusive
  volatile int hit;    ///< set by the signal handler
  GuardedRange* outer;
};
}  // namespace detail

/// The process-wide SIGBUS handler that turns a read past a truncated file
/// into a hit() of the reading thread's Scope (see the file's description).
class TruncationGuard {
 public:
  /// Installs the SIGBUS handler (idempotent). SystemError if sigaction fails.
  [[nodiscard]] static Result<void> install();

  /// Guards [base, base + size) for reads by this thread until destroyed. The
  /// default constructor guards every file mapping the thread reads (a hit
  /// then means "some mapping read in this scope lost its file", whichever
  /// one: use it where the scope reads one segment's mappings). An inner
  /// scope hides the outer one until it ends.
  class Scope {
   public:
    /// Guards every file mapping this thread reads.
    Scope() noexcept;
    /// Guards [base, base + size) only.
    Scope(const void* base, std::size_t size) noexcept;
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    ~Scope();
    /// True once a read inside the range faulted because the file shrank.
    [[nodiscard]] bool hit() const noexcept;

   private:
    detail::GuardedRange range_;
  };
};

}  // namespace shm
