// Soak topic publisher: the topic --topic's one publisher. Loans a chunk,
// writes a checkable sample (soak_topic.hpp) and publishes it, at most --rate
// samples per second; a publish that meets a full Block subscriber (Full after
// 50 ms) keeps its sample and tries again, so slow subscribers hold it back.
// Each publish is logged after it happened ("P <seq> <counter>").
// SIGTERM: finish the current sample, log "X ...", exit 0.
//
//   test_soak_topic_publisher --topic NAME --log PATH [--rate R]
#include "soak_process.hpp"
#include "soak_topic.hpp"

#include <fmt/format.h>

#include <chrono>
#include <thread>

using soak::g_stop;

int main(int argc, char** argv) {
  constexpr std::string_view kProgram = "test_soak_topic_publisher";
  const auto opts = soak::Options::parse(argc, argv, kProgram, {"--topic", "--log", "--rate"});
  if (!opts) return 2;
  const std::string name = opts->str("--topic"), log_path = opts->str("--log");
  const std::uint64_t rate = opts->u64("--rate", 2000);
  if (name.empty() || log_path.empty() || rate == 0)
    return soak::usage_error(kProgram, "need --topic, --log; --rate > 0");
  soak::stop_on_term_signals();
  const soak::ProcessLog process_log(log_path, kProgram, 0);
  if (!process_log.ok()) return 2;
  const int log = process_log.fd();
  auto violation = [&](std::string_view what) { return process_log.violation(what); };

  const shm::TopicParams params = soak::topic_params();
  auto attached = soak::attach_topic(
      [&] { return shm::TopicPublisher::open(name, params); },
      [&](const shm::CreateOptions& co) { return shm::TopicPublisher::create(name, params, co); });
  if (!attached) return violation(attached.error().what());
  shm::TopicPublisher pub = std::move(*attached);
  const auto pid = static_cast<std::uint64_t>(::getpid());
  if (!soak::append(log,
                    fmt::format("\nS {} {} {}\n", pid, soak::realtime_ns(), pub.incarnation())))
    return violation("log write failed");

  using Clock = std::chrono::steady_clock;
  const auto period = std::chrono::nanoseconds(1'000'000'000 / rate);
  auto next = Clock::now();
  std::uint64_t counter = 0;
  std::uint64_t last_seq = 0;
  std::uint64_t last_ns = 0;
  while (g_stop == 0) {
    std::this_thread::sleep_until(next);
    next += period;
    const std::size_t size = soak::topic_sample_size(pid, counter);
    auto loaned = pub.loan(size, std::chrono::milliseconds(50));
    if (!loaned) return violation(fmt::format("loan: {}", loaned.error().what()));
    if (!*loaned) continue;  // the pool is empty for now (held samples, dead holders)
    shm::LoanedSample sample = std::move(**loaned);
    soak::fill_topic_sample(sample.bytes(), pid, counter);
    bool published = false;
    while (g_stop == 0 && !published) {
      auto out = pub.publish(std::move(sample), std::chrono::milliseconds(50));
      if (!out) return violation(fmt::format("publish {}: {}", counter, out.error().what()));
      if (out->status != shm::PublishStatus::Published) continue;  // Full: still ours
      published = true;
      std::string line = fmt::format("P {} {}\n", out->seq, counter);
      if (counter == 0) line += fmt::format("F {}\n", soak::realtime_ns());
      if (!soak::append(log, line)) return violation("log write failed");
      last_seq = out->seq;
      last_ns = soak::realtime_ns();
    }
    if (published) ++counter;
    if (Clock::now() > next + std::chrono::milliseconds(100)) next = Clock::now();
  }
  if (!soak::append(log,
                    fmt::format("X {} {} {} {}\n", counter, pub.incarnation(), last_seq, last_ns)))
    return violation("log write failed");
  return 0;
}
