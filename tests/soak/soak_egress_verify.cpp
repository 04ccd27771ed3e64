// Soak verifier for the egress block of scripts/soak.sh (soak_egress.hpp):
// reads the senders' and the transport's logs, checks the egress's delivery
// promises, prints a summary, exits 1 on any violation.
//
// Semantics verified (docs/egress.md "Operations and outcomes", "Crash
// semantics"; delivery is at least once, the receiver deduplicates by
// sequence):
//  - nothing lost: every message a sender saw enqueued (0..N-1 from its clean
//    stop, minus the one in doubt) is delivered; the message in doubt (its
//    sender was killed inside the enqueue) is delivered or not, under one
//    sequence; every sequence the egress assigned (0..next_sequence-1 at the
//    end) is delivered at least once;
//  - one sequence per message: a sequence always carries the same message and
//    no message is delivered under two sequences (never enqueued twice);
//  - duplicates only by redelivery: a sequence is delivered again only when
//    the transport incarnation that delivered it last was killed (replayed by
//    the successor's reconnect), or when fail() was called on it since (a send
//    error or an ack that never came: retried); counted apart. Its attempt
//    grows with every delivery (claims count attempts, a reconnect keeps them);
//  - an acknowledgement is final: no sequence at or below an advanced
//    acknowledgement is delivered again, every acknowledgement is advanced or
//    unchanged (a late one), and the watermark a new transport finds is not
//    below the last one acknowledged;
//  - the generation fence: every transport incarnation has a larger
//    generation than the one before, delivers only envelopes of its own
//    generation, and saw a claim and an ack with the previous generation
//    refused (stale_generation); every fail was Retrying (below the budget);
//  - nothing corrupt (the record's CRC and framing), nothing never sent;
//  - nothing leaked in the pool: after the final drain the egress holds no
//    pending, in-flight, parked or terminal record and the watermark is
//    next_sequence - 1;
//  - every process stopped cleanly at the end (its last incarnation logged X).
//
//   test_soak_egress_verify --dir DIR --senders N
#include "soak_logs.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr std::size_t kListed = 8;

// One line of the transport's log that the walk needs, in log order.
struct Event {
  char tag;  // I, T or A
  std::size_t incarnation;
  // I: a = sender, b = message; T: a = delivered before the fail (0|1)
  std::uint64_t a = 0, b = 0, seq = 0, gen = 0, attempt = 0;
  std::string status;  // T, A
};

struct PerSequence {
  std::pair<std::uint64_t, std::uint64_t> message;
  std::uint64_t deliveries = 0, last_attempt = 0;
  std::size_t last_incarnation = 0;
};

std::optional<std::uint64_t> number(const std::string& s) {
  if (s.empty() || s == "-") return std::nullopt;
  return std::strtoull(s.c_str(), nullptr, 10);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  int senders = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k(argv[i]);
    if (k == "--dir")
      dir = argv[i + 1];
    else if (k == "--senders")
      senders = std::atoi(argv[i + 1]);
  }
  if (dir.empty() || senders <= 0) {
    std::fprintf(stderr, "usage: test_soak_egress_verify --dir DIR --senders N\n");
    return 2;
  }
  const auto ns = static_cast<std::uint64_t>(senders);
  std::vector<std::string> violations;
  auto violation = [&](std::string v) {
    if (violations.size() < 4 * kListed) violations.push_back(std::move(v));
  };

  // ---- the transport's log
  std::vector<Event> events;
  std::vector<std::pair<std::string, std::string>> fences;  // G lines
  std::vector<std::uint64_t> final_state;                   // P of the last incarnation
  std::optional<std::uint64_t> final_acked;
  std::uint64_t window_full = 0;
  const auto incs =
      soak::parse_log(dir + "/egress-transport.log", violations,
                      [&](char tag, std::istringstream& ls, soak::Incarnation&, std::size_t index) {
                        Event e{tag, index};
                        if (tag == 'I') {
                          if (ls >> e.a >> e.b >> e.seq >> e.gen >> e.attempt) events.push_back(e);
                        } else if (tag == 'T') {
                          if (ls >> e.seq >> e.attempt >> e.a >> e.status) events.push_back(e);
                        } else if (tag == 'A') {
                          if (ls >> e.seq >> e.status) events.push_back(e);
                        } else if (tag == 'G') {
                          std::string c, a;
                          if (ls >> c >> a) fences.emplace_back(c, a);
                        } else if (tag == 'W') {
                          ++window_full;
                        } else if (tag == 'P') {
                          std::uint64_t next = 0, v = 0;
                          std::string acked;
                          final_state.clear();
                          if (ls >> next >> acked) {
                            final_state.push_back(next);
                            final_acked = number(acked);
                            while (ls >> v) final_state.push_back(v);
                          }
                        }
                      });
  std::vector<std::uint64_t> gens(incs.size(), 0);
  std::uint64_t replayed = 0;
  for (std::size_t i = 0; i < incs.size(); ++i) {
    const soak::Incarnation& inc = incs[i];
    for (const std::string& v : inc.violations) violation("egress-transport: " + v);
    for (const std::string& bad : inc.corrupt)
      violation("egress-transport: corrupt message (sequence reason): " + bad);
    // S <pid> <ns> <generation> <replayed> <acked_through|-> <next_sequence>
    if (inc.start_fields.size() < 4) {
      violation(fmt::format("egress-transport: incarnation {} has no generation", i));
      continue;
    }
    gens[i] = std::strtoull(inc.start_fields[0].c_str(), nullptr, 10);
    replayed += std::strtoull(inc.start_fields[1].c_str(), nullptr, 10);
    if (i > 0 && gens[i] <= gens[i - 1])
      violation(fmt::format("egress-transport: generation {} after {}: the fence did not advance",
                            gens[i], gens[i - 1]));
  }
  if (incs.empty() || !incs.back().stop)
    violation("egress-transport: did not drain and stop cleanly (no final X line)");
  std::uint64_t fenced = 0;
  for (const auto& [claim, ack] : fences) {
    if (claim == "stale_generation" && ack == "stale_generation")
      ++fenced;
    else
      violation(fmt::format(
          "the fence let the previous generation through: claim {}, ack {} (both must be "
          "stale_generation)",
          claim, ack));
  }
  if (fences.size() + 1 < incs.size())
    violation(fmt::format("{} transport incarnation(s) after the first but {} fence check(s)",
                          incs.size() - 1, fences.size()));
  const std::uint64_t transport_kills = soak::killed_incarnations(incs);

  // ---- walk the events in order
  std::map<std::uint64_t, PerSequence> seqs;           // delivered sequences
  std::map<std::uint64_t, std::uint64_t> fails_since;  // fail() calls since the last delivery
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::uint64_t> seq_of;  // message -> sequence
  std::uint64_t acked_next = 0;  // one past the last advanced acknowledgement
  std::uint64_t deliveries = 0, kill_dups = 0, timeout_dups = 0, unexplained = 0, fails = 0,
                fails_delivered = 0, acks = 0, acks_unchanged = 0;
  std::size_t watermark_checked = 0;
  auto check_watermark = [&](std::size_t upto) {
    // An incarnation's start watermark is not below what was acknowledged before it.
    for (; watermark_checked <= upto && watermark_checked < incs.size(); ++watermark_checked) {
      const auto& f = incs[watermark_checked].start_fields;
      if (f.size() < 4) continue;
      const std::optional<std::uint64_t> w = number(f[2]);
      const std::uint64_t found = w ? *w + 1 : 0;
      if (found < acked_next)
        violation(fmt::format(
            "egress-transport: generation {} found the watermark at {} after {} was acknowledged",
            gens[watermark_checked], w ? std::to_string(*w) : "none", acked_next - 1));
    }
  };
  for (const Event& e : events) {
    check_watermark(e.incarnation);
    if (e.tag == 'A') {
      ++acks;
      if (e.status == "advanced")
        acked_next = std::max(acked_next, e.seq + 1);
      else if (e.status == "unchanged")
        ++acks_unchanged;
      else
        violation(fmt::format("ack through {}: {} (only advanced or unchanged)", e.seq, e.status));
      continue;
    }
    if (e.tag == 'T') {
      ++fails;
      fails_delivered += e.a;
      ++fails_since[e.seq];
      if (e.status != "retrying")
        violation(fmt::format(
            "fail of sequence {} at attempt {}: {} (the soak stays below the retry budget)", e.seq,
            e.attempt, e.status));
      continue;
    }
    // A delivery.
    ++deliveries;
    const std::pair msg(e.a, e.b);
    if (e.a >= ns)
      violation(fmt::format("sequence {}: from sender {}: no such sender", e.seq, e.a));
    if (e.gen != gens[e.incarnation])
      violation(
          fmt::format("sequence {} delivered under generation {} by the transport of "
                      "generation {}",
                      e.seq, e.gen, gens[e.incarnation]));
    if (e.seq < acked_next)
      violation(fmt::format("sequence {} delivered after its acknowledgement (through {})", e.seq,
                            acked_next - 1));
    auto [it, fresh] = seqs.try_emplace(e.seq);
    PerSequence& s = it->second;
    if (s.deliveries == 0) {
      s.message = msg;
      if (auto [m, first] = seq_of.try_emplace(msg, e.seq); !first)
        violation(
            fmt::format("sender {} message {} delivered under sequences {} and {}: "
                        "enqueued twice",
                        e.a, e.b, m->second, e.seq));
      if (e.attempt == 0) violation(fmt::format("sequence {} delivered at attempt 0", e.seq));
    } else {
      if (s.message != msg)
        violation(fmt::format("sequence {} delivered as sender {} message {}, before as {} {}",
                              e.seq, e.a, e.b, s.message.first, s.message.second));
      if (e.attempt <= s.last_attempt)
        violation(fmt::format("sequence {} delivered again at attempt {} after attempt {}", e.seq,
                              e.attempt, s.last_attempt));
      if (s.last_incarnation != e.incarnation && !incs[s.last_incarnation].stop) {
        ++kill_dups;
      } else if (fails_since[e.seq] > 0) {
        ++timeout_dups;
      } else if (unexplained++ < kListed) {
        violation(
            fmt::format("sequence {} delivered again without a transport kill or a fail "
                        "since its last delivery",
                        e.seq));
      }
    }
    ++s.deliveries;
    s.last_attempt = e.attempt;
    s.last_incarnation = e.incarnation;
    fails_since.erase(e.seq);
  }
  check_watermark(incs.size());

  // ---- the final state: everything assigned was delivered, nothing left in the pool
  std::uint64_t next_sequence = 0;
  if (final_state.size() != 5) {
    violation("egress-transport: no final projection (P line)");
  } else {
    next_sequence = final_state[0];
    if (final_state[1] + final_state[2] + final_state[3] + final_state[4] != 0)
      violation(
          fmt::format("left in the pool after the drain: {} pending, {} in flight, {} "
                      "parked, {} terminal",
                      final_state[1], final_state[2], final_state[3], final_state[4]));
    if (next_sequence != 0 && final_acked != next_sequence - 1)
      violation(fmt::format("the final watermark is {}, not next_sequence - 1 = {}",
                            final_acked ? std::to_string(*final_acked) : "none",
                            next_sequence - 1));
    std::vector<std::uint64_t> missing;
    std::uint64_t never = 0;
    for (std::uint64_t q = 0; q < next_sequence; ++q)
      if (!seqs.contains(q) && never++ < kListed) missing.push_back(q);
    if (never != 0)
      violation(fmt::format("{} sequence(s) assigned and never delivered: {}{}", never,
                            fmt::join(missing, ", "), never > kListed ? ", ..." : ""));
    if (!seqs.empty() && seqs.rbegin()->first >= next_sequence)
      violation(fmt::format("sequence {} delivered, beyond next_sequence {}", seqs.rbegin()->first,
                            next_sequence));
  }

  // ---- the senders
  std::uint64_t enqueued = 0, lost = 0, doubt_sent = 0, doubt_lost = 0, sender_kills = 0,
                full_waits = 0;
  for (std::uint64_t w = 0; w < ns; ++w) {
    const std::string name = fmt::format("egress-sender-{}", w);
    const auto sincs =
        soak::parse_log(fmt::format("{}/{}.log", dir, name), violations,
                        [&](char tag, std::istringstream& ls, soak::Incarnation&, std::size_t) {
                          std::uint64_t q = 0;
                          if (tag == 'Q' && ls >> q) full_waits += q;
                        });
    sender_kills += soak::killed_incarnations(sincs);
    std::set<std::uint64_t> doubt;  // S <pid> <ns> <next> <in_doubt|->
    for (const soak::Incarnation& inc : sincs) {
      for (const std::string& v : inc.violations) violation(name + ": " + v);
      if (inc.start_fields.size() >= 2 && inc.start_fields[1] != "-")
        doubt.insert(std::strtoull(inc.start_fields[1].c_str(), nullptr, 10));
    }
    if (sincs.empty() || !sincs.back().stop) {
      violation(name + ": did not stop cleanly (no final X line)");
      continue;
    }
    const std::uint64_t sent = *sincs.back().stop;
    std::vector<std::uint64_t> missing;
    for (std::uint64_t m = 0; m < sent; ++m) {
      const bool got = seq_of.contains({w, m});
      if (doubt.contains(m)) {
        (got ? doubt_sent : doubt_lost) += 1;
        continue;
      }
      ++enqueued;
      if (!got) {
        ++lost;
        if (missing.size() < kListed) missing.push_back(m);
      }
    }
    if (!missing.empty())
      violation(fmt::format("sender {}: enqueued message(s) lost: {}{}", w,
                            fmt::join(missing, ", "), missing.size() == kListed ? ", ..." : ""));
    if (auto it = seq_of.lower_bound({w, sent}); it != seq_of.end() && it->first.first == w)
      violation(fmt::format("sender {}: message {} delivered but never sent (it stopped at {})", w,
                            it->first.second, sent));
  }

  const std::uint64_t duplicates = deliveries - seqs.size();
  std::printf(
      "  messages: %llu delivered, %llu lost, %llu duplicated (%llu redelivered after a "
      "transport kill, %llu retried after a fail), %zu corrupt\n",
      static_cast<unsigned long long>(seqs.size()), static_cast<unsigned long long>(lost),
      static_cast<unsigned long long>(duplicates), static_cast<unsigned long long>(kill_dups),
      static_cast<unsigned long long>(timeout_dups), [&] {
        std::size_t n = 0;
        for (const auto& inc : incs) n += inc.corrupt.size();
        return n;
      }());
  std::printf(
      "  egress: %llu sequence(s) assigned; %zu transport incarnation(s), generation %llu at the "
      "end, %llu transport kill(s), %llu record(s) replayed at attach; %llu fail(s) (%llu after "
      "a delivery), %llu ack(s) (%llu unchanged: late or partial), window full %llu time(s), "
      "%llu message(s) waited for pool space (Full)\n",
      static_cast<unsigned long long>(next_sequence), incs.size(),
      static_cast<unsigned long long>(gens.empty() ? 0 : gens.back()),
      static_cast<unsigned long long>(transport_kills), static_cast<unsigned long long>(replayed),
      static_cast<unsigned long long>(fails), static_cast<unsigned long long>(fails_delivered),
      static_cast<unsigned long long>(acks), static_cast<unsigned long long>(acks_unchanged),
      static_cast<unsigned long long>(window_full), static_cast<unsigned long long>(full_waits));
  std::printf("  fence: %llu stale claim/ack pair(s) refused; pool after the drain: %s\n",
              static_cast<unsigned long long>(fenced),
              final_state.size() == 5 &&
                      final_state[1] + final_state[2] + final_state[3] + final_state[4] == 0
                  ? "empty"
                  : "NOT empty");
  std::printf(
      "  in flight at a sender kill (landed once or not at all): %llu landed, %llu not (%llu "
      "sender kill(s)); %llu enqueued message(s) checked\n",
      static_cast<unsigned long long>(doubt_sent), static_cast<unsigned long long>(doubt_lost),
      static_cast<unsigned long long>(sender_kills), static_cast<unsigned long long>(enqueued));
  for (const std::string& v : violations) std::printf("  VIOLATION: %s\n", v.c_str());
  return violations.empty() ? 0 : 1;
}
