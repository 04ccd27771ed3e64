#include "shm/spill/purger.hpp"

#include "shm/platform/fork_generation.hpp"

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <system_error>
#include <thread>

namespace shm::spill {

struct Purger::State {
  explicit State(SpillDir d) : dir(std::move(d)) {}
  void run();
  SpillDir dir;
  std::mutex mutex;
  std::condition_variable cv;
  std::uint64_t asked = 0, done = 0;  // purges asked for / finished (under mutex)
  bool stop = false;
  std::uint64_t fork_generation = shm::fork_generation();  // of the process that started `thread`
  std::thread thread;
};

Purger::Purger(SpillDir dir) : state_(std::make_unique<State>(std::move(dir))) {
  State* s = state_.get();
  try {
    s->thread = std::thread([s] { s->run(); });
  } catch (const std::system_error&) {
    // No thread to be had: kick() purges on the caller's thread.
  }
}

Purger::~Purger() {
  State& s = *state_;
  if (s.fork_generation != shm::fork_generation()) {
    // A forked child's copy: the thread is the parent's (see fork_generation.hpp).
    keep_forever(std::move(state_));
    return;
  }
  {
    std::lock_guard held(s.mutex);
    s.stop = true;
  }
  s.cv.notify_all();
  if (s.thread.joinable()) s.thread.join();
}

void Purger::kick() {
  State& s = *state_;
  if (!s.thread.joinable()) {
    (void)purge_removed(s.dir);  // a failure: retried by the next kick
    return;
  }
  {
    std::lock_guard held(s.mutex);
    ++s.asked;
  }
  s.cv.notify_all();
}

void Purger::State::run() {
  std::unique_lock held(mutex);
  for (;;) {
    cv.wait(held, [&] { return asked != done || stop; });
    if (asked == done) return;  // stopped with nothing asked
    // One pass answers every kick so far: a file retired before its kick
    // is in removed/ when the pass lists it.
    const std::uint64_t answering = asked;
    held.unlock();
    (void)purge_removed(dir);  // a failure: retried by the next kick
    held.lock();
    done = answering;
  }
}

}  // namespace shm::spill
