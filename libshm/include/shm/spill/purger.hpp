/// @file
/// A background thread that empties a spill directory's removed/ (see
/// retire_page in shm/spill/page.hpp): the reader retires an acknowledged
/// page with a rename and leaves the slow unlink to this thread, so a drain
/// does not wait for the filesystem to free a page it already delivered.
#pragma once

#include "shm/spill/page.hpp"

#include <cstddef>
#include <memory>

namespace shm::spill {

/// Owns the purge thread of one spill directory (see the file's description).
class Purger {
 public:
  /// Takes its own descriptor of the directory: the thread uses nothing of
  /// its owner's, which may move meanwhile.
  explicit Purger(SpillDir dir);
  Purger(const Purger&) = delete;
  Purger& operator=(const Purger&) = delete;
  /// Finishes a purge asked for and not yet done, then joins: a closed
  /// reader leaves nothing in removed/.
  ~Purger();

  /// Asks for a purge (returns at once). Without a thread (none could be
  /// started) the purge runs here, on the caller's thread.
  void kick();

 private:
  /// The thread and what it shares with the caller, behind a pointer: this
  /// header stays free of <mutex> and <thread> (whose std::lock would meet
  /// the relay's own lock() by argument-dependent lookup).
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace shm::spill
