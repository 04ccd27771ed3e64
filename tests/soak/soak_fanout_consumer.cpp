// Soak fanout consumer: drains the PriorityFanout --fanout at-least-once
// (take_highest, then release: highest priority first), checks every item
// (size, body, producer, ring it came from) and logs it as one "I" line
// between its take and its release. A kill -9 loses nothing: an item taken
// and not released is kept by its ring and taken again by the next consumer
// (delivered twice when the killed one had logged it). It copies each taken
// item into its hand file, which the next incarnation logs ("H") before
// taking it over: the evidence that names an item delivered twice
// (soak_fanout.hpp).
// SIGTERM: drain what is left (take_highest parks and looks at every ring, so
// it also finds items whose bitmap bit a killed producer never set), log the
// rings' lost_pops ("L") and "X <count>", exit 0.
//
//   test_soak_fanout_consumer --fanout BASE --id N --log PATH [--hand PATH]
//                             [--priorities K] [--capacity CELLS] [--hold-us US]
// --hold-us: every 16th item, pause up to US microseconds before or after its
// log line (as if processing it), widening the windows in which a kill leaves
// a taken item to the next consumer, logged or not.
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
  std::uint64_t total = 0;
  bool first = true;
  auto hold = [&] { std::this_thread::sleep_for(std::chrono::microseconds(rng() % hold_us)); };
  // Handles one taken item (copied into the hand): logs "I" when it is intact
  // and came from its own ring, then releases it.
  auto accept = [&](const shm::Taken& t) {
    const std::uint64_t r = hold_us != 0 ? rng() : 1;
    if ((r & 31u) == 0) hold();  // a kill here: taken, not logged
    std::string_view why;
    if (t.payload.size() != sizeof it)
      why = "size";
    else if (!shm::test::item_intact(it))
      why = "body";
    else if (it.priority != t.priority)
      why = "ring";
    else if (shm::test::item_priority(it.producer, it.seq, k) != t.priority)
      why = "priority";
    std::string line = why.empty()
                           ? fmt::format("I {} {} {}\n", it.producer, it.seq, t.priority)
                           : fmt::format("C {} {} {} {}\n", why, it.producer, it.seq, t.priority);
    if (first) {
      line += fmt::format("F {}\n", soak::realtime_ns());
      first = false;
    }
    ++total;
    if ((total & 255u) == 0) f.heartbeat();
    if (!soak::append(log, line)) return false;
    if ((r & 31u) == 16) hold();  // a kill here: logged, not released (delivered again)
    f.release();
    hand.released();
    return true;
  };
  // Takes into the hand: zeroed and "taking" before, the item and "held" after.
  auto take = [&](std::chrono::milliseconds timeout) {
    hand.before_take();
    auto t = f.take_highest(timeout);
    if (t && *t) hand.took((*t)->payload);
    return t;
  };

  while (g_stop == 0) {
    auto t = take(std::chrono::milliseconds(50));
    if (!t) return violation(t.error().what());
    if (*t && !accept(**t)) return violation("log write failed");
  }
  // Drain what is left until three takes in a row find nothing. A take that
  // finds the bitmap empty looks at every ring before it parks, so an item
  // whose bit a killed producer never set is found, and a held cell that a
  // repair turns into a tombstone (or an orphan) within a few ms is waited for.
  for (int idle = 0; idle < 3;) {
    auto t = take(std::chrono::milliseconds(20));
    if (!t) return violation(t.error().what());
    if (*t) {
      if (!accept(**t)) return violation("log write failed");
      idle = 0;
    } else {
      ++idle;
    }
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
