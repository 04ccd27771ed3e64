// Soak producer: publishes records 0, 1, 2, ... into one SpscRing, resuming
// after a kill -9 exactly where the published stream ended (see the journal in
// soak_common.hpp). Throttled to --rate records per second. SIGTERM: finish the
// current batch, log "X <next>", exit 0.
//
//   test_soak_producer --ring NAME --id N --journal PATH --log PATH
//                      [--rate R] [--batch-max K] [--capacity BYTES] [--hold-us US]
// --hold-us pauses between the journal write and the commit, widening the
// window in which a kill leaves a journalled but unpublished batch.
#include "soak_process.hpp"

#include "shm/spsc/producer.hpp"

#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <random>
#include <thread>

using soak::g_stop;

int main(int argc, char** argv) {
  constexpr std::string_view kProgram = "test_soak_producer";
  const auto opts = soak::Options::parse(
      argc, argv, kProgram,
      {"--ring", "--id", "--journal", "--log", "--rate", "--batch-max", "--capacity", "--hold-us"});
  if (!opts) return 2;
  struct {
    std::string ring, journal, log;
    std::uint32_t id;
    std::uint64_t rate, batch_max, capacity, hold_us;
  } const a{opts->str("--ring"),
            opts->str("--journal"),
            opts->str("--log"),
            opts->u32("--id", 0),
            opts->u64("--rate", 20000),
            opts->u64("--batch-max", 16),
            opts->u64("--capacity", 1u << 16),
            opts->u64("--hold-us", 0)};
  if (a.ring.empty() || a.journal.empty() || a.log.empty() || a.rate == 0 || a.batch_max == 0)
    return soak::usage_error(kProgram, "need --ring, --journal, --log; --rate and --batch-max > 0");
  soak::stop_on_term_signals();
  const soak::ProcessLog process_log(a.log, kProgram, a.id);
  const int journal = ::open(a.journal.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (!process_log.ok() || journal < 0)
    return soak::usage_error(kProgram, "cannot open the log or the journal");
  const int log = process_log.fd();
  auto violation = [&](std::string_view what) { return process_log.violation(what); };

  // Attach: open the ring (taking over a dead producer's slot) or create it.
  shm::RingProducer p;
  for (int attempt = 0;; ++attempt) {
    auto opened = shm::RingProducer::open(a.ring);
    if (opened) {
      p = std::move(*opened);
      break;
    }
    if (opened.error().code == shm::Errc::NotFound) {
      shm::CreateOptions co;
      co.ephemeral = true;
      auto created = shm::RingProducer::create(a.ring, shm::RingParams{a.capacity}, co);
      if (created) {
        p = std::move(*created);
        break;
      }
      if (created.error().code != shm::Errc::AlreadyExists)
        return violation(created.error().what());
    } else if (attempt > 200 || opened.error().code != shm::Errc::RoleTaken) {
      return violation(opened.error().what());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  // Recover the next sequence number from the journal and the ring's tail.
  const std::uint64_t tail = p.published_position();
  std::uint64_t next = 0;
  std::string_view resumed = "fresh";
  if (auto e = soak::read_journal(journal)) {
    if (tail == e->tail_before) {
      next = e->first;
      resumed = "unpublished";  // killed between journal and commit: send the batch again
    } else if (tail > e->tail_before) {
      next = e->last + 1;
      resumed = "published";
    }
    if (tail < e->tail_before)
      return violation(
          fmt::format("ring tail {} is behind the journal's {}", tail, e->tail_before));
  } else if (tail != 0) {
    return violation(fmt::format("ring tail is {} but the journal is empty", tail));
  }
  std::uint64_t counter = 0;
  if (auto e = soak::read_journal(journal)) counter = e->counter + 1;
  soak::append(log,
               fmt::format("\nS {} {} {} {}\n", ::getpid(), soak::realtime_ns(), next, resumed));

  std::mt19937_64 rng(soak::mix(soak::realtime_ns() ^ static_cast<std::uint64_t>(::getpid())));
  const auto start = std::chrono::steady_clock::now();
  const std::uint64_t start_seq = next;
  bool first = true;
  while (g_stop == 0) {
    const std::uint64_t k = 1 + rng() % a.batch_max;
    const std::uint64_t tail_before = p.published_position();
    std::uint64_t n = 0;
    while (n < k) {
      const std::size_t len = soak::record_length(a.id, next + n);
      auto r = p.reserve(len, std::chrono::milliseconds(n == 0 ? 50 : 0));
      if (!r) return violation(r.error().what());
      if (!*r) break;
      soak::fill_record(**r, a.id, next + n);
      ++n;
    }
    p.heartbeat();
    if (n == 0) continue;  // full: the consumer is away
    if (!soak::write_journal(journal,
                             soak::JournalEntry{counter++, tail_before, next, next + n - 1, 0, 0}))
      return violation("journal write failed");
    if (a.hold_us != 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % a.hold_us));
    p.commit();
    next += n;
    if (first) {
      soak::append(log, fmt::format("F {}\n", soak::realtime_ns()));
      first = false;
    }
    // Throttle: never ahead of `rate` records per second since start.
    const auto due =
        start + std::chrono::nanoseconds((next - start_seq) * 1'000'000'000ull / a.rate);
    if (due > std::chrono::steady_clock::now()) std::this_thread::sleep_until(due);
  }
  soak::append(log, fmt::format("X {}\n", next));
  return 0;
}
