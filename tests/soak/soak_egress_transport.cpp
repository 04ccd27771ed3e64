// Soak egress transport: the one transport of the egress --egress. Claims
// records, checks each (the soak record's CRC and framing), "delivers" it by
// logging it (an I line, one write) and acknowledges cumulatively the way a
// receiver would: through the end of the run of delivered sequences above the
// watermark, after a random number of deliveries, sometimes only part of it
// (late), now and then an old value again (out of order: Unchanged). Some
// sends fail: a send error before the delivery (T ... 0: a gap the
// cumulative ack must not cover until the retry fills it) or an ack that
// never came after it (T ... 1: retried, delivered again). When the window is
// full and the run cannot advance (a gap whose retry the full window blocks),
// every record in flight times out (go-back-N: T ... 1 for each).
// Now and then it stops claiming for --pause-ms so the pool fills and the
// senders feel the back-pressure, and it sometimes waits up to --hold-us
// between a delivery and its ack, so kills land there.
// In-process checks: the window is exact (WindowFull exactly when this
// incarnation holds inflight_limit records in flight), a fail is Retrying
// below the retry budget, every claimed envelope carries this generation, and
// a call with the previous generation is refused (the G line).
// SIGTERM (the senders are stopped by then): deliver and acknowledge
// everything, log the final projection ("P") and "X ...", exit 0.
//
//   test_soak_egress_transport --egress NAME --log PATH [--pause-ms MS]
//                              [--pause-every-ms MS] [--hold-us US]
#include "soak_egress.hpp"
#include "soak_pauses.hpp"
#include "soak_process.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

using soak::g_stop;
namespace eg = shm::egress;

namespace {

std::string opt_text(const std::optional<std::uint64_t>& v) {
  return v ? std::to_string(*v) : std::string("-");
}

}  // namespace

int main(int argc, char** argv) {
  constexpr std::string_view kProgram = "test_soak_egress_transport";
  const auto opts = soak::Options::parse(
      argc, argv, kProgram, {"--egress", "--log", "--pause-ms", "--pause-every-ms", "--hold-us"});
  if (!opts) return 2;
  const std::string name = opts->str("--egress"), log_path = opts->str("--log");
  const std::uint64_t pause_ms = opts->u64("--pause-ms", 200);
  const std::uint64_t pause_every_ms = opts->u64("--pause-every-ms", 1500);
  const std::uint64_t hold_us = opts->u64("--hold-us", 1000);
  if (name.empty() || log_path.empty())
    return soak::usage_error(kProgram, "need --egress and --log");
  soak::stop_on_term_signals();
  const soak::ProcessLog process_log(log_path, kProgram, 0);
  if (!process_log.ok()) return 2;
  const int log = process_log.fd();
  auto violation = [&](std::string_view what) { return process_log.violation(what); };

  auto attached = soak::attach_egress_transport(name);
  if (!attached) return violation(attached.error().what());
  shm::EgressTransport t = std::move(*attached);
  const std::uint64_t gen = t.generation();
  auto start = t.egress().projection();
  if (!start) return violation(fmt::format("projection: {}", start.error().what()));
  // The lowest sequence not acknowledged yet.
  std::uint64_t expect = start->acked_through ? *start->acked_through + 1 : 0;
  std::string lines =
      fmt::format("\nS {} {} {} {} {} {}\n", ::getpid(), soak::realtime_ns(), gen, t.replayed(),
                  opt_text(start->acked_through), start->next_sequence);
  std::vector<std::byte> buf;
  if (gen > 1) {
    // The fence: the previous generation's calls change nothing.
    auto c = t.egress().claim(gen - 1, buf);
    auto a = t.egress().ack(gen - 1, expect == 0 ? 0 : expect - 1);
    if (!c || !a) return violation("stale claim/ack: error");
    lines += fmt::format("G {} {}\n", eg::to_string(c->status), eg::to_string(a->status));
  }
  if (!soak::append(log, lines)) return violation("log write failed");

  std::mt19937_64 rng(soak::mix(soak::realtime_ns() ^ static_cast<std::uint64_t>(::getpid())));
  std::set<std::uint64_t> delivered;  // delivered by this incarnation, >= expect
  std::set<std::uint64_t> inflight;   // claimed by this incarnation, not failed or acknowledged
  std::uint64_t deliveries = 0, claims = 0, window_full = 0, fails = 0, advanced = 0, unchanged = 0;
  bool first = true;

  // One past the run of delivered sequences starting at `expect`.
  auto run_end = [&] {
    std::uint64_t c = expect;
    while (delivered.contains(c)) ++c;
    return c;
  };
  // `late`: a value below the watermark again (an old ack arriving after a
  // newer one), which must change nothing.
  auto ack = [&](std::uint64_t through, bool late) -> bool {
    auto r = t.ack(through);
    if (!r) return violation(fmt::format("ack {}: {}", through, r.error().what())), false;
    if (!soak::append(log, fmt::format("A {} {}\n", through, eg::to_string(r->status))))
      return violation("log write failed"), false;
    if (late && r->status != eg::AckStatus::Unchanged)
      return violation(fmt::format("late ack {} below {}: {}", through, expect,
                                   eg::to_string(r->status))),
             false;
    if (r->status == eg::AckStatus::Advanced) {
      ++advanced;
      expect = through + 1;
      delivered.erase(delivered.begin(), delivered.lower_bound(expect));
      inflight.erase(inflight.begin(), inflight.lower_bound(expect));
    } else if (r->status == eg::AckStatus::Unchanged) {
      ++unchanged;
    } else {
      return violation(fmt::format("ack {}: {}", through, eg::to_string(r->status))), false;
    }
    return true;
  };
  // Acknowledges the whole run (or, when `partly`, a random part of it).
  auto ack_run = [&](bool partly) -> bool {
    const std::uint64_t end = run_end();
    if (end == expect) return true;
    const std::uint64_t through = partly ? expect + rng() % (end - expect) : end - 1;
    return ack(through, false);
  };
  auto fail = [&](const eg::Envelope& env, bool was_delivered) -> bool {
    auto r = t.fail(env.sequence);
    if (!r) return violation(fmt::format("fail {}: {}", env.sequence, r.error().what())), false;
    ++fails;
    inflight.erase(env.sequence);
    if (!soak::append(log, fmt::format("T {} {} {} {}\n", env.sequence, env.attempt,
                                       was_delivered ? 1 : 0, eg::to_string(r->status))))
      return violation("log write failed"), false;
    const bool exhausted = env.attempt - 1 >= soak::kEgressRetryBudget;
    if (r->status != (exhausted ? eg::FailStatus::Exhausted : eg::FailStatus::Retrying))
      return violation(fmt::format("fail {} at attempt {}: {}", env.sequence, env.attempt,
                                   eg::to_string(r->status))),
             false;
    return true;
  };

  // One claim and what follows it. `chaos`: fail sends and ack irregularly.
  // Returns the claim status, or nullopt after a violation.
  std::vector<eg::Envelope> timed_out;
  auto step = [&](bool chaos) -> std::optional<eg::ClaimStatus> {
    // A full window is handled at once (only this process's acks reopen it);
    // only an empty queue is waited for.
    auto c = t.try_claim(buf);
    if (c && c->status == eg::ClaimStatus::Empty) c = t.claim(buf, std::chrono::milliseconds(20));
    if (!c) return violation(fmt::format("claim: {}", c.error().what())), std::nullopt;
    if (c->status == eg::ClaimStatus::StaleGeneration)
      return violation(fmt::format("claim: fenced by generation {}", c->current_generation)),
             std::nullopt;
    if (c->status == eg::ClaimStatus::Empty) {
      if (!ack_run(false)) return std::nullopt;
      return c->status;
    }
    if (c->status == eg::ClaimStatus::WindowFull) {
      ++window_full;
      if (inflight.size() != soak::kEgressWindow)
        return violation(fmt::format("WindowFull with {} in flight (window {})", inflight.size(),
                                     soak::kEgressWindow)),
               std::nullopt;
      if (!soak::append(log, fmt::format("W {}\n", inflight.size())))
        return violation("log write failed"), std::nullopt;
      const std::uint64_t before = expect;
      if (!ack_run(false)) return std::nullopt;
      if (expect == before) {
        // A gap the full window keeps from its retry: every ack "timed out".
        timed_out.clear();
        for (std::uint64_t s : inflight) timed_out.push_back({gen, s, 0, {}});
        auto p = t.egress().projection(true);
        if (!p) return violation(fmt::format("projection: {}", p.error().what())), std::nullopt;
        for (eg::Envelope& e : timed_out)
          for (const eg::RecordView& r : p->records)
            if (r.sequence == e.sequence) e.attempt = r.attempt;
        for (const eg::Envelope& e : timed_out)
          if (!fail(e, true)) return std::nullopt;
      }
      return c->status;
    }
    const eg::Envelope env = c->envelope;
    ++claims;
    inflight.insert(env.sequence);
    if (inflight.size() > soak::kEgressWindow)
      return violation(
                 fmt::format("{} in flight (window {})", inflight.size(), soak::kEgressWindow)),
             std::nullopt;
    if (env.generation != gen)
      return violation(fmt::format("claimed sequence {} under generation {} (mine {})",
                                   env.sequence, env.generation, gen)),
             std::nullopt;
    const std::uint64_t roll = rng() % 64;
    if (chaos && roll == 0 && env.attempt <= 2) {  // a send error: not delivered
      if (!fail(env, false)) return std::nullopt;
      return c->status;
    }
    std::string why;
    const std::span<const std::byte> payload = env.payload;
    std::uint32_t sender = 0;
    if (payload.size() >= soak::kHeaderBytes)
      std::memcpy(&sender, payload.data() + offsetof(soak::RecordHeader, producer), sizeof sender);
    const auto msg = soak::check_record(payload, sender, why);
    std::string out = msg ? fmt::format("I {} {} {} {} {}\n", sender, *msg, env.sequence,
                                        env.generation, env.attempt)
                          : fmt::format("C {} {}\n", env.sequence, why);
    if (first) {
      out += fmt::format("F {}\n", soak::realtime_ns());
      first = false;
    }
    if (!soak::append(log, out)) return violation("log write failed"), std::nullopt;
    ++deliveries;
    if (env.sequence >= expect) delivered.insert(env.sequence);
    if (!chaos) return c->status;
    if ((roll == 1 || roll == 2) && env.attempt <= 2) {  // its ack never came
      if (!fail(env, true)) return std::nullopt;
      return c->status;
    }
    if (rng() % 8 == 0) {
      if (hold_us != 0 && rng() % 4 == 0)  // a kill here: delivered, not acknowledged
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % hold_us));
      if (!ack_run(rng() % 4 == 0)) return std::nullopt;
    }
    if (rng() % 32 == 0 && expect >= 2 && !ack(rng() % (expect - 1), true))  // an old ack, late
      return std::nullopt;
    return c->status;
  };

  soak::RandomPauses pauses(rng, pause_every_ms, pause_ms);
  while (g_stop == 0) {
    if (!step(true)) return 1;
    pauses.maybe_pause();  // away: the senders fill the pool and wait for space
  }
  // The senders are stopped: deliver and acknowledge everything.
  for (;;) {
    const auto s = step(false);
    if (!s) return 1;
    if (*s != eg::ClaimStatus::Empty) continue;
    auto p = t.egress().projection();
    if (!p) return violation(fmt::format("projection: {}", p.error().what()));
    if (p->pending + p->inflight + p->parked + p->terminal == 0 && expect == p->next_sequence) {
      soak::append(log, fmt::format("P {} {} {} {} {} {}\nX {} {} {} {} {} {}\n", p->next_sequence,
                                    opt_text(p->acked_through), p->pending, p->inflight, p->parked,
                                    p->terminal, deliveries, claims, window_full, fails, advanced,
                                    unchanged));
      return 0;
    }
    if (p->terminal != 0)
      return violation(fmt::format("{} dead letter(s) at the end", p->terminal));
  }
}
