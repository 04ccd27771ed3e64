// Soak topic subscriber --id: receives every sample of the topic --topic
// with the overflow --overflow (block | drop_oldest), checks each byte, logs
// it ("I ...", with missed() read just after) and keeps up to --hold of the
// samples it received before dropping them (a kill leaves them held, for
// the next attach or the sidecar to return to the pool). With --pause-ms it
// stops receiving now and then: a slow subscriber (a Block one holds the
// publisher back, a DropOldest one misses samples).
// SIGTERM (the publisher is stopped by then): receive what is queued, log
// "X <received> <missed>", exit 0.
//
//   test_soak_topic_subscriber --topic NAME --id N --overflow block|drop_oldest --log PATH
//                              [--hold N] [--pause-ms MS] [--pause-every-ms MS]
#include "soak_pauses.hpp"
#include "soak_process.hpp"
#include "soak_topic.hpp"

#include <fmt/format.h>

#include <chrono>
#include <deque>
#include <random>
#include <thread>

using soak::g_stop;

int main(int argc, char** argv) {
  constexpr std::string_view kProgram = "test_soak_topic_subscriber";
  const auto opts = soak::Options::parse(
      argc, argv, kProgram,
      {"--topic", "--id", "--overflow", "--log", "--hold", "--pause-ms", "--pause-every-ms"});
  if (!opts) return 2;
  const std::string name = opts->str("--topic"), log_path = opts->str("--log"),
                    overflow_name = opts->str("--overflow");
  const std::uint32_t id = opts->u32("--id", 0);
  const std::uint64_t hold = opts->u64("--hold", 4);
  const std::uint64_t pause_ms = opts->u64("--pause-ms", 0);
  const std::uint64_t pause_every_ms = opts->u64("--pause-every-ms", 1500);
  const shm::TopicParams params = soak::topic_params();
  if (name.empty() || log_path.empty() || hold >= params.max_held ||
      (overflow_name != "block" && overflow_name != "drop_oldest"))
    return soak::usage_error(kProgram,
                             "need --topic, --log, --overflow block|drop_oldest; --hold < 8");
  const shm::TopicOverflow overflow =
      overflow_name == "block" ? shm::TopicOverflow::Block : shm::TopicOverflow::DropOldest;
  soak::stop_on_term_signals();
  const soak::ProcessLog process_log(log_path, kProgram, id);
  if (!process_log.ok()) return 2;
  const int log = process_log.fd();
  auto violation = [&](std::string_view what) { return process_log.violation(what); };

  auto attached =
      soak::attach_topic([&] { return shm::TopicSubscriber::open(name, overflow, params); },
                         [&](const shm::CreateOptions& co) {
                           return shm::TopicSubscriber::create(name, params, overflow, co);
                         });
  if (!attached) return violation(attached.error().what());
  shm::TopicSubscriber sub = std::move(*attached);
  if (!soak::append(log, fmt::format("\nS {} {} {}\n", ::getpid(), soak::realtime_ns(),
                                     static_cast<unsigned>(overflow))))
    return violation("log write failed");

  std::mt19937_64 rng(soak::mix(soak::realtime_ns() ^ static_cast<std::uint64_t>(::getpid())));
  std::deque<shm::Sample> held;  // dropped before `sub` (declared after it)
  std::uint64_t received = 0;
  // Logs one received sample and keeps it a while. false after a violation.
  auto take = [&](shm::Sample sample) {
    soak::TopicSampleHead head{};
    std::string_view why;
    std::string line = soak::check_topic_sample(sample.bytes(), head, why)
                           ? fmt::format("I {} {} {} {} {}\n", sample.incarnation(), sample.seq(),
                                         head.pid, head.counter, sub.missed())
                           : fmt::format("C {} {} {}\n", why, sample.incarnation(), sample.seq());
    if (received++ == 0) line += fmt::format("F {}\n", soak::realtime_ns());
    if (!soak::append(log, line)) return false;
    held.push_back(std::move(sample));
    const std::uint64_t keep = hold == 0 ? 0 : rng() % (hold + 1);
    while (held.size() > keep) held.pop_front();
    return true;
  };

  soak::RandomPauses pauses(rng, pause_every_ms, pause_ms);
  while (g_stop == 0) {
    auto got = sub.receive(std::chrono::milliseconds(50));
    if (!got) return violation(fmt::format("receive: {}", got.error().what()));
    if (*got && !take(std::move(**got))) return violation("log write failed");
    pauses.maybe_pause();  // away: a Block queue fills, a DropOldest one drops
  }
  // The publisher has stopped: what is queued now is all there is. A
  // publisher restarted just before its stop may still be leaving: receive
  // until the queue is empty and no publisher is attached (at most 5 s).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < give_up) {
    auto got = sub.try_receive();
    if (!got) return violation(fmt::format("receive: {}", got.error().what()));
    if (*got) {
      if (!take(std::move(**got))) return violation("log write failed");
      continue;
    }
    if (!sub.snapshot().publisher_attached) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  held.clear();
  soak::append(log, fmt::format("X {} {}\n", received, sub.missed()));
  return 0;
}
