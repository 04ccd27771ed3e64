// Soak verifier for the fanout block of scripts/soak.sh (PriorityFanout over
// MpmcRings, drained at-least-once): reads the logs of every producer and
// consumer (formats in soak_fanout.hpp), checks the delivery semantics, prints
// a summary, exits 1 on any violation.
//
// Semantics verified:
//  - nothing lost: every item 0..N-1 of each producer (N from its clean stop)
//    is delivered, except the item a producer was submitting when it was
//    killed (journalled, "in doubt"): published once or not at all. No
//    consumer kill excuses a missing item, and no ring counted a lost pop
//    (every drain is a take: a killed taker's item is kept, not released);
//  - nothing duplicated except what a killed consumer had in hand: an item is
//    delivered twice only when a killed consumer's hand names it "held"
//    (taken, logged, maybe not released), and at most once more per such
//    hand. These redeliveries are counted and reported apart;
//  - order: within one consumer incarnation, each producer's items of one
//    priority come in submission order (each ring is FIFO), except an item
//    taken again after its taker died (an orphan is taken before newer items
//    of its ring, so after items the dead consumer's neighbours took
//    meanwhile): allowed when a killed consumer's hand names the item, or
//    once per killed consumer that died inside a take with nothing copied yet;
//  - nothing corrupt: every item passed its size/body/routing checks, and no
//    item names a producer or a sequence number that was never submitted;
//  - every process stopped cleanly at the end (its last incarnation logged X).
//
// A killed consumer's hand is read from its next incarnation's log: "H
// <owner_pid> <state> [<item>]" (the first such line for that pid counts: a
// later incarnation that finds the hand not taken over logs it again).
//
//   test_soak_fanout_verify --dir DIR --producers N --consumers M
#include "helpers/fanout/fanout_items.hpp"
#include "soak_logs.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr std::uint64_t kMaxSeq = 1ull << 26;  // more than any soak submits; bounds memory
constexpr std::size_t kListed = 8;             // items named per violation

std::string list(const std::vector<std::uint64_t>& seqs, std::uint64_t total) {
  std::string out;
  for (std::size_t i = 0; i < seqs.size() && i < kListed; ++i)
    out += fmt::format("{}{}", i ? ", " : "", seqs[i]);
  if (total > kListed) out += fmt::format(", ... ({} in all)", total);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  int producers = 0, consumers = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k(argv[i]);
    if (k == "--dir")
      dir = argv[i + 1];
    else if (k == "--producers")
      producers = std::atoi(argv[i + 1]);
    else if (k == "--consumers")
      consumers = std::atoi(argv[i + 1]);
  }
  if (dir.empty() || producers <= 0 || consumers <= 0) {
    std::fprintf(stderr, "usage: test_soak_fanout_verify --dir DIR --producers N --consumers M\n");
    return 2;
  }
  std::vector<std::string> violations;
  const auto np = static_cast<std::size_t>(producers);
  using Item = std::pair<std::uint64_t, std::uint64_t>;  // (producer, seq)

  // Deliveries: count[p][seq], from every consumer log.
  std::vector<std::vector<std::uint8_t>> count(np);
  std::uint64_t consumer_kills = 0, corrupt = 0;
  // What killed consumers had in hand. held[item]: hands that name it "held"
  // (it may be delivered once more per hand); named: every item a killed hand
  // names, held or taking (it may come again out of order); blind_takes:
  // killed inside a take with no intact item copied. lost_pops[q]: ring q's
  // counter, the highest any consumer logged at its clean stop.
  std::map<Item, std::uint64_t> held;
  std::set<Item> named;
  std::uint64_t held_hands = 0, taking_hands = 0, blind_takes = 0;
  std::vector<std::uint64_t> lost_pops;
  // Deliveries out of submission order, judged once every hand is known.
  struct Disorder {
    std::string where;
    Item item;
  };
  std::vector<Disorder> disorders;
  for (int c = 0; c < consumers; ++c) {
    const std::string name = fmt::format("fanout-consumer-{}", c);
    // Per incarnation: the last sequence number seen of (producer, priority).
    std::map<std::pair<std::uint32_t, std::uint32_t>, std::uint64_t> last;
    std::size_t current = ~std::size_t{0};
    struct Hand {
      std::string state;
      std::optional<Item> item;
    };
    std::map<std::int64_t, Hand> hands;  // by the pid of the incarnation that left it
    const auto incs = soak::parse_log(
        fmt::format("{}/{}.log", dir, name), violations,
        [&](char tag, std::istringstream& ls, soak::Incarnation&, std::size_t index) {
          std::uint64_t p = 0, seq = 0, prio = 0;
          if (tag == 'H') {  // H <owner_pid> <state> [<producer> <seq> <priority>]
            std::int64_t owner = 0;
            Hand h;
            if (!(ls >> owner >> h.state)) return;
            if (ls >> p >> seq >> prio) h.item = Item(p, seq);
            hands.emplace(owner, std::move(h));  // the first record of it counts
            return;
          }
          if (tag == 'L') {  // L <lost_pops of ring 0> ... <ring K-1>
            std::vector<std::uint64_t> v;
            for (std::uint64_t n = 0; ls >> n;) v.push_back(n);
            if (lost_pops.size() < v.size()) lost_pops.resize(v.size(), 0);
            for (std::size_t q = 0; q < v.size(); ++q) lost_pops[q] = std::max(lost_pops[q], v[q]);
            return;
          }
          if (tag != 'I' || !(ls >> p >> seq >> prio)) return;  // a torn line
          if (p >= np || seq >= kMaxSeq) {
            violations.push_back(
                fmt::format("{}: item from producer {} seq {}: no such producer "
                            "or an impossible sequence number",
                            name, p, seq));
            return;
          }
          auto& counts = count[p];
          if (counts.size() <= seq)
            counts.resize(
                std::min<std::size_t>(std::max<std::size_t>(seq + 1, counts.size() * 2), kMaxSeq));
          if (counts[seq] < 255) ++counts[seq];
          if (index != current) {
            last.clear();
            current = index;
          }
          const auto key =
              std::make_pair(static_cast<std::uint32_t>(p), static_cast<std::uint32_t>(prio));
          auto [pos, fresh] = last.try_emplace(key, seq);
          if (!fresh) {
            if (seq <= pos->second)
              disorders.push_back(
                  {fmt::format("{} incarnation {}: producer {} priority {}: seq {} after {}", name,
                               index, p, prio, seq, pos->second),
                   Item(p, seq)});
            pos->second = seq;
          }
        });
    for (const soak::Incarnation& inc : incs) {
      for (const std::string& v : inc.violations)
        violations.push_back(fmt::format("{}: {}", name, v));
      for (const std::string& bad : inc.corrupt) {
        if (++corrupt <= kListed)
          violations.push_back(
              fmt::format("{}: corrupt item (reason producer seq priority): {}", name, bad));
      }
    }
    if (incs.empty() || !incs.back().stop)
      violations.push_back(
          fmt::format("{}: did not drain and stop cleanly (no final X line)", name));
    consumer_kills += soak::killed_incarnations(incs);
    // Only a hand left by a killed incarnation of this consumer is evidence.
    for (std::size_t i = 0; i + 1 < incs.size(); ++i) {
      if (incs[i].stop) continue;
      const auto h = hands.find(incs[i].pid);
      if (h == hands.end()) continue;  // killed before it took its hand over
      const Hand& hand = h->second;
      if (hand.item && hand.state == "held") {
        ++held[*hand.item];
        ++held_hands;
      } else if (hand.item && hand.state == "taking") {
        ++taking_hands;
      } else if (hand.state == "taking") {
        ++blind_takes;
      }
      if (hand.item && hand.state != "idle") named.insert(*hand.item);
    }
  }
  if (corrupt > kListed) violations.push_back(fmt::format("{} corrupt items in all", corrupt));
  for (std::size_t q = 0; q < lost_pops.size(); ++q) {
    if (lost_pops[q] != 0)
      violations.push_back(fmt::format(
          "ring {} counted {} lost pop(s): a consumer's claim was released by a repair, not kept "
          "(every drain of the soak is a take)",
          q, lost_pops[q]));
  }
  std::uint64_t out_of_order = 0, unexplained_disorder = 0, blind_left = blind_takes;
  std::string first_unexplained;
  for (const Disorder& d : disorders) {
    if (named.contains(d.item)) {
      ++out_of_order;
      continue;
    }
    if (blind_left > 0) {
      --blind_left;
      ++out_of_order;
      continue;
    }
    if (unexplained_disorder++ == 0) first_unexplained = d.where;
  }
  if (unexplained_disorder != 0)
    violations.push_back(fmt::format(
        "{} item(s) out of submission order within a priority that no killed consumer's take "
        "explains (first: {})",
        unexplained_disorder, first_unexplained));

  std::uint64_t delivered = 0, redelivered = 0, duplicated = 0, lost = 0, doubt_sent = 0,
                doubt_lost = 0, producer_kills = 0;
  std::map<std::uint64_t, std::vector<std::uint64_t>> missing;  // producer -> seqs
  for (std::size_t p = 0; p < np; ++p) {
    const std::string name = fmt::format("fanout-producer-{}", p);
    const auto incs = soak::parse_log(fmt::format("{}/{}.log", dir, name), violations);
    producer_kills += soak::killed_incarnations(incs);
    // S <pid> <ns> <next> <in_doubt|->
    std::set<std::uint64_t> doubt;
    for (const soak::Incarnation& inc : incs) {
      for (const std::string& v : inc.violations)
        violations.push_back(fmt::format("{}: {}", name, v));
      if (inc.start_fields.size() >= 2 && inc.start_fields[1] != "-")
        doubt.insert(std::strtoull(inc.start_fields[1].c_str(), nullptr, 10));
    }
    if (incs.empty() || !incs.back().stop) {
      violations.push_back(fmt::format("{}: did not stop cleanly (no final X line)", name));
      continue;
    }
    const std::uint64_t submitted = *incs.back().stop;
    auto& counts = count[p];
    if (counts.size() < submitted) counts.resize(submitted);
    std::vector<std::uint64_t> dup_seqs, unknown_seqs;
    std::uint64_t dups = 0, unknown = 0;
    for (std::uint64_t s = 0; s < counts.size(); ++s) {
      const std::uint8_t n = counts[s];
      if (s >= submitted) {
        if (n != 0 && unknown++ < kListed) unknown_seqs.push_back(s);
        continue;
      }
      delivered += n != 0 ? 1 : 0;
      if (n > 1) {
        const auto h = held.find({p, s});
        const std::uint64_t allowed = h == held.end() ? 0 : h->second;
        const std::uint64_t extra = n - 1u;
        redelivered += std::min(extra, allowed);
        if (extra > allowed) {
          dups += extra - allowed;
          if (dup_seqs.size() < kListed) dup_seqs.push_back(s);
        }
      }
      if (doubt.contains(s)) {
        (n != 0 ? doubt_sent : doubt_lost) += 1;
      } else if (n == 0) {
        missing[p].push_back(s);
        ++lost;
      }
    }
    if (dups != 0)
      violations.push_back(
          fmt::format("producer {}: {} duplicate deliveries no killed consumer's hand explains "
                      "(seq {})",
                      p, dups, list(dup_seqs, dups)));
    if (unknown != 0)
      violations.push_back(fmt::format(
          "producer {}: {} item(s) delivered that were never submitted (it stopped at {}): seq {}",
          p, unknown, submitted, list(unknown_seqs, unknown)));
    duplicated += dups;
  }
  if (lost != 0) {
    std::vector<std::string> where;
    for (const auto& [p, seqs] : missing)
      where.push_back(fmt::format("producer {} seq {}", p, list(seqs, seqs.size())));
    violations.push_back(fmt::format("{} item(s) lost ({}): the at-least-once drain allows none",
                                     lost, fmt::join(where, "; ")));
  }

  std::printf("  messages: %llu delivered, %llu lost, %llu duplicated\n",
              static_cast<unsigned long long>(delivered), static_cast<unsigned long long>(lost),
              static_cast<unsigned long long>(duplicated));
  std::printf(
      "  redelivered after consumer kills: %llu (killed consumers' hands: %llu held an item, "
      "%llu had taken one not logged yet, %llu died inside a take); %llu taken again out of "
      "order; %llu consumer kill(s)\n",
      static_cast<unsigned long long>(redelivered), static_cast<unsigned long long>(held_hands),
      static_cast<unsigned long long>(taking_hands), static_cast<unsigned long long>(blind_takes),
      static_cast<unsigned long long>(out_of_order),
      static_cast<unsigned long long>(consumer_kills));
  std::printf(
      "  in flight at a producer kill (published once or not at all): %llu published, %llu not "
      "(%llu producer kill(s))\n",
      static_cast<unsigned long long>(doubt_sent), static_cast<unsigned long long>(doubt_lost),
      static_cast<unsigned long long>(producer_kills));
  for (const std::string& v : violations) std::printf("  VIOLATION: %s\n", v.c_str());
  return violations.empty() ? 0 : 1;
}
