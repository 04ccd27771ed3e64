// A writer's background sealer (RelayWriter::set_seal_mode(SealMode::Background),
// docs/spill.md "Sealing on a thread"): a thread of the writer's process that
// seals the oldest pending entries into a page when a write finds the relay
// full, so the write appends into the room left between high water and
// capacity instead of waiting for the page's flushes. It seals exactly as a
// write does (begin_seal under the relay mutex, the file with the relay
// unlocked and the seal mutex held, finish_seal under the relay mutex): the
// seal mutex is robust and owned by this thread, so a process killed
// mid-seal is reaped by the next locker as before.
#pragma once

#include "internal.hpp"

#include <memory>
#include <string>

namespace shm::relay::internal {

class Sealer {
 public:
  // Starts the thread (std::system_error when none can be had). `view`
  // points into the writer's mapping, which must outlive the sealer; `dir`
  // is the sealer's own descriptor of the spill directory.
  Sealer(const View& view, std::string path, spill::SpillDir dir);
  Sealer(const Sealer&) = delete;
  Sealer& operator=(const Sealer&) = delete;
  // A seal under way finishes first (its page recorded), then the thread ends.
  ~Sealer();

  // Asks for a seal (returns at once; nothing when one is already asked for).
  void kick() noexcept;
  // A seal asked for and not finished.
  [[nodiscard]] bool busy() const noexcept;
  // Waits until no seal is asked for or under way.
  void wait_idle() noexcept;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace shm::relay::internal
