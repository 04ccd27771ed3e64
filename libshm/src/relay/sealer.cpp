#include "sealer.hpp"

#include "shm/platform/clock.hpp"
#include "shm/platform/fork_generation.hpp"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace shm::relay::internal {

struct Sealer::State {
  State(const View& v, std::string p, spill::SpillDir d)
      : view(v), path(std::move(p)), dir(std::move(d)) {}
  void run() noexcept;
  void seal_once() noexcept;

  View view;
  std::string path;
  spill::SpillDir dir;
  SealJob job;  // its page buffer reused seal after seal
  std::mutex mutex;
  std::condition_variable cv;
  // Set by kick(), cleared when the seal it asked for is done; read without
  // the mutex on the writer's fast path. Its release clear (run) pairs with
  // the acquire loads of kick() and busy(): a writer that sees it clear sees
  // the seal's end. Only an optimisation: the writer then takes the relay
  // mutex, which orders everything the seal wrote in the segment.
  std::atomic<bool> asked{false};
  bool stop = false;  // under mutex
  // The last seal was impossible (bound, manifest full, no space): the next
  // attempts still count a fallback each, as a write's would, but log no
  // event until a seal starts again.
  bool quiet = false;
  std::uint64_t fork_generation = shm::fork_generation();  // of the process that started `thread`
  std::thread thread;
};

Sealer::Sealer(const View& view, std::string path, spill::SpillDir dir)
    : state_(std::make_unique<State>(view, std::move(path), std::move(dir))) {
  State* s = state_.get();
  s->thread = std::thread([s] { s->run(); });
}

Sealer::~Sealer() {
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
  s.thread.join();
}

void Sealer::kick() noexcept {
  State& s = *state_;
  if (s.asked.load(std::memory_order_acquire)) return;
  {
    std::lock_guard held(s.mutex);
    s.asked.store(true, std::memory_order_relaxed);
  }
  s.cv.notify_all();
}

bool Sealer::busy() const noexcept {
  return state_->asked.load(std::memory_order_acquire);
}

void Sealer::wait_idle() noexcept {
  State& s = *state_;
  std::unique_lock held(s.mutex);
  s.cv.wait(held, [&] { return !s.asked.load(std::memory_order_relaxed); });
}

void Sealer::State::run() noexcept {
  std::unique_lock held(mutex);
  for (;;) {
    cv.wait(held, [&] { return asked.load(std::memory_order_relaxed) || stop; });
    if (!asked.load(std::memory_order_relaxed)) return;  // stopped, nothing asked
    held.unlock();
    seal_once();
    held.lock();
    asked.store(false, std::memory_order_release);
    cv.notify_all();
  }
}

// One seal, as a write makes it. Errors are not reported here: a faulted
// relay, a damaged manifest or a failed page reach the writers through
// their own next lock, seal attempt or the counters.
void Sealer::State::seal_once() noexcept {
  Control& c = *view.control;
  // Qualified: with <mutex> in this unit, std::lock would be found by
  // argument-dependent lookup (path is a std::string).
  if (!::shm::relay::internal::lock(view, path)) return;
  {
    Held held(c);
    if (static_cast<Overflow>(ld(c.overflow)) != Overflow::Spill || ld(view.spill->enabled) == 0)
      return;
    if (ld(c.is_full) == 0 && ld(c.free_head) != kNone) return;  // drained meanwhile
    auto begun = begin_seal(view, !quiet, path, job);
    if (!begun) return;
    quiet = *begun == SealStart::Impossible;
    if (*begun != SealStart::Started) return;
  }
  // The file I/O with the relay unlocked (the seal mutex held).
  const Result<spill::SealInfo> written = write_seal(dir, job);
  if (!::shm::relay::internal::lock(view, path)) {
    abandon_seal(view);  // the next locker rolls it back
    return;
  }
  Held held(c);
  if (finish_seal(view, dir, job, written, !quiet))
    wake_writers(c);
  else
    quiet = true;
  update_full(view, monotonic_ns());
  notify_reader(c);
}

}  // namespace shm::relay::internal
