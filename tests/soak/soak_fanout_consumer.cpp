// Soak fanout consumer: drains the PriorityFanout --fanout (highest priority
// first), checks every item (size, body, producer, ring it came from) and logs
// it as one "I" line after the pop and before the next one, so a kill -9 can
// lose at most the one item popped and not logged yet — the documented loss
// of an MpmcRing consumer killed mid-drain (soak_fanout.hpp). It pops into its
// hand file, which the next incarnation logs ("H") before taking it over: the
// evidence that names such a loss.
// SIGTERM: drain what is left (every priority, also items whose bitmap bit a
// killed producer never set), log the rings' lost_pops ("L") and "X <count>",
// exit 0.
//
//   test_soak_fanout_consumer --fanout BASE --id N --log PATH [--hand PATH]
//                             [--priorities K] [--capacity CELLS] [--hold-us US]
// --hold-us: every 16th item, pause up to US microseconds between the pop and
// the log line (as if processing it), widening the window in which a kill
// loses the item in hand.
#include "soak_fanout.hpp"
#include "soak_process.hpp"

#include "shm/segment/kind.hpp"

#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <random>
#include <thread>

using soak::g_stop;

int main(int argc, char** argv) {
  constexpr std::string_view kProgram = "test_soak_fanout_consumer";
  const auto opts = soak::Options::parse(
      argc, argv, kProgram,
      {"--fanout", "--id", "--log", "--hand", "--priorities", "--capacity", "--hold-us"});
  if (!opts) return 2;
  const std::string base = opts->str("--fanout"), log_path = opts->str("--log");
  const std::uint32_t id = opts->u32("--id", 0);
  const shm::FanoutParams params{opts->u32("--priorities", 4), opts->u64("--capacity", 1024),
                                 sizeof(shm::test::FanoutItem)};
  const std::uint64_t hold_us = opts->u64("--hold-us", 0);
  if (base.empty() || log_path.empty())
    return soak::usage_error(kProgram, "need --fanout and --log");
  soak::stop_on_term_signals();
  const soak::ProcessLog process_log(log_path, kProgram, id);
  if (!process_log.ok()) return 2;
  const int log = process_log.fd();
  auto violation = [&](std::string_view what) { return process_log.violation(what); };
  const std::string hand_path =
      opts->str("--hand").empty() ? log_path + ".hand" : opts->str("--hand");
  const soak::HandFile hand(hand_path);
  if (!hand.ok()) return violation(fmt::format("cannot map the hand file {}", hand_path));

  auto attached = soak::attach_fanout<shm::FanoutConsumer>(base, params);
  if (!attached) return violation(attached.error().what());
  shm::FanoutConsumer f = std::move(*attached);
  const std::uint32_t k = f.priorities();
  // What the previous incarnation left in the hand is logged before this one
  // takes it over (a kill in between: the next incarnation logs it again).
  if (!soak::append(log,
                    fmt::format("\nS {} {}\n{}", ::getpid(), soak::realtime_ns(), hand.describe())))
    return violation("log write failed");
  hand.take_over();

  std::mt19937_64 rng(soak::mix(soak::realtime_ns() ^ static_cast<std::uint64_t>(::getpid())));
  const shm::test::FanoutItem& it = hand->item;
  const auto buf = std::as_writable_bytes(std::span(&hand->item, 1));
  std::uint64_t total = 0;
  bool first = true;
  // Logs one popped item: "I" when it is intact and came from its own ring.
  auto accept = [&](std::uint32_t priority, std::size_t size) {
    if (hold_us != 0 && (rng() & 15u) == 0)
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % hold_us));
    std::string_view why;
    if (size != sizeof it)
      why = "size";
    else if (!shm::test::item_intact(it))
      why = "body";
    else if (it.priority != priority)
      why = "ring";
    else if (shm::test::item_priority(it.producer, it.seq, k) != priority)
      why = "priority";
    std::string line = why.empty()
                           ? fmt::format("I {} {} {}\n", it.producer, it.seq, priority)
                           : fmt::format("C {} {} {} {}\n", why, it.producer, it.seq, priority);
    if (first) {
      line += fmt::format("F {}\n", soak::realtime_ns());
      first = false;
    }
    ++total;
    if ((total & 255u) == 0) f.heartbeat();
    return soak::append(log, line);
  };

  // Pops into the hand: zeroed and "popping" before, "held" after an item.
  auto drain = [&](std::chrono::milliseconds timeout) {
    hand.before_pop();
    auto d = f.drain_highest(buf, timeout);
    if (d && *d) hand.popped();
    return d;
  };
  auto drain_priority = [&](std::uint32_t p) {
    hand.before_pop();
    auto r = f.try_drain_priority(p, buf);
    if (r && *r) hand.popped();
    return r;
  };

  while (g_stop == 0) {
    auto d = drain(std::chrono::milliseconds(50));
    if (!d) return violation(d.error().what());
    if (*d && !accept((*d)->priority, (*d)->size)) return violation("log write failed");
  }
  // Drain what is left. A killed producer may have left an item whose bit is
  // clear (drain_highest does not look there) or a held cell that a repair
  // turns into a tombstone within a few ms: sweep every priority until three
  // rounds in a row find nothing.
  for (int idle = 0; idle < 3;) {
    bool got = false;
    auto d = drain(std::chrono::milliseconds(20));
    if (!d) return violation(d.error().what());
    if (*d) {
      got = true;
      if (!accept((*d)->priority, (*d)->size)) return violation("log write failed");
    }
    for (std::uint32_t p = 0; p < k; ++p) {
      for (;;) {
        auto r = drain_priority(p);
        if (!r) return violation(r.error().what());
        if (!*r) break;
        got = true;
        if (!accept(p, **r)) return violation("log write failed");
      }
    }
    idle = got ? 0 : idle + 1;
  }
  // The rings' lost-pop counters: every kill was repaired by now (this
  // handle's open repaired what dead ones held); the verifier's evidence for
  // a consumer killed inside a pop before the copy.
  std::string lost = "L";
  for (std::uint32_t p = 0; p < k; ++p) {
    shm::Node n;
    shm::kMpmcRingDescriptor.describe(f.ring(p).segment(), n);
    const shm::Node* c = n.find("lost_pops");
    if (c == nullptr) return violation("ring describe has no lost_pops counter");
    lost += fmt::format(" {}", std::get<std::uint64_t>(c->value()));
  }
  soak::append(log, fmt::format("{}\nX {}\n", lost, total));
  return 0;
}
