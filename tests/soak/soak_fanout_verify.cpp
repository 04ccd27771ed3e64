// Soak verifier for the fanout block of scripts/soak.sh (PriorityFanout over
// MpmcRings): reads the logs of every producer and consumer (formats in
// soak_fanout.hpp), checks the delivery semantics, prints a summary, exits 1
// on any violation.
//
// Semantics verified:
//  - nothing duplicated: every item (producer, seq) is delivered at most once,
//    across every consumer and every kill;
//  - nothing lost without evidence: every item 0..N-1 of each producer (N
//    from its clean stop) is delivered, except
//      * the item a producer was submitting when it was killed (journalled,
//        "in doubt"): delivered once or not at all, never repeated;
//      * an item a killed consumer had popped and not delivered (MpmcRing: "a
//        consumer killed mid-drain loses at most the item it had popped"),
//        and only when the loss is proven (below);
//  - order: within one consumer incarnation, each producer's items of one
//    priority come in submission order (each ring is FIFO);
//  - nothing corrupt: every item passed its size/body/routing checks, and no
//    item names a producer or a sequence number that was never submitted;
//  - every process stopped cleanly at the end (its last incarnation logged X).
//
// Proving a consumer's loss. A consumer pops straight into its hand file, a
// small MAP_SHARED file that outlives a kill -9 (soak_fanout.hpp: the item is
// zeroed and the state set to "popping" before each pop, "held" once the pop
// returned, and the delivery line "I" is written after that). Its next
// incarnation logs what the hand holds, "H <owner_pid> <state> [<item>]",
// before it takes the hand over. So for the killed incarnation with pid P:
//  (a) "H P held|popping <p> <seq> <prio>": the intact item in its hand. If
//      no consumer delivered it, it is lost, with evidence: it was copied out
//      of the ring by P, which died before logging it. One item, no more.
//  (b) "H P popping" without an intact item: P died inside a pop before the
//      copy finished (or while waiting in it). If it had claimed a cell, the
//      item is gone unseen, and the ring's repair released the cell and
//      counted it in that ring's lost_pops (mpmc_ring.cpp, repair_position).
//      The consumers log the rings' lost_pops counters at their clean stop
//      ("L <ring 0> ... <ring K-1>", after every kill was repaired: a handle's
//      open repairs what dead ones held). An item of priority q missing with
//      no hand naming it is allowed only against ring q's budget: its
//      lost_pops minus the (a) losses of priority q whose victim was still
//      "popping" (they may have been counted there too), and at most one per
//      (b) kill.
// Every other missing item is a violation: a kill of a consumer that held
// nothing excuses nothing, and one kill excuses one item at most.
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

  // Deliveries: count[p][seq], from every consumer log.
  std::vector<std::vector<std::uint8_t>> count(np);
  std::uint64_t consumer_kills = 0, corrupt = 0;
  // Evidence of consumer losses. in_hand: the intact item a killed consumer
  // had in its hand -> true when it was still inside the pop (the ring may
  // have counted it as a lost pop too). empty_pops: killed consumers that died
  // inside a pop with nothing copied yet. lost_pops[q]: ring q's counter, the
  // highest any consumer logged at its clean stop.
  std::map<std::pair<std::uint64_t, std::uint64_t>, bool> in_hand;
  std::uint64_t empty_pops = 0;
  std::vector<std::uint64_t> lost_pops;
  for (int c = 0; c < consumers; ++c) {
    const std::string name = fmt::format("fanout-consumer-{}", c);
    // Per incarnation: the last sequence number seen of (producer, priority).
    std::map<std::pair<std::uint32_t, std::uint32_t>, std::uint64_t> last;
    std::size_t current = ~std::size_t{0};
    std::uint64_t disorder = 0;
    std::string first_disorder;
    struct Hand {
      std::string state;
      std::optional<std::pair<std::uint64_t, std::uint64_t>> item;  // (producer, seq)
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
            if (ls >> p >> seq >> prio) h.item = std::make_pair(p, seq);
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
            if (seq <= pos->second && disorder++ == 0)
              first_disorder =
                  fmt::format("incarnation {}: producer {} priority {}: seq {} after {}", index, p,
                              prio, seq, pos->second);
            pos->second = seq;
          }
        });
    if (disorder != 0)
      violations.push_back(
          fmt::format("{}: {} item(s) out of submission order within a priority (first: {})", name,
                      disorder, first_disorder));
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
      const bool popping = h->second.state == "popping";
      if (h->second.item && (popping || h->second.state == "held"))
        in_hand.emplace(*h->second.item, popping);
      else if (popping)
        ++empty_pops;
    }
  }
  if (corrupt > kListed) violations.push_back(fmt::format("{} corrupt items in all", corrupt));

  std::uint64_t delivered = 0, duplicated = 0, doubt_sent = 0, doubt_lost = 0;
  std::uint64_t producer_kills = 0, lost_in_hand = 0;
  // Missing items no hand names: (producer, seq), judged against the rings.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> unnamed;
  // Ring q's budget of lost pops the hands do not already explain.
  std::vector<std::uint64_t> budget = lost_pops;
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
        dups += n - 1;
        if (dup_seqs.size() < kListed) dup_seqs.push_back(s);
      }
      if (doubt.contains(s)) {
        (n != 0 ? doubt_sent : doubt_lost) += 1;
      } else if (n == 0) {
        const auto h = in_hand.find({p, s});
        if (h == in_hand.end()) {
          unnamed.emplace_back(p, s);
        } else {
          ++lost_in_hand;
          // No ring counters logged (budget empty): no priority to charge.
          if (h->second && !budget.empty()) {
            const std::uint32_t q = shm::test::item_priority(
                static_cast<std::uint32_t>(p), s, static_cast<std::uint32_t>(budget.size()));
            if (budget[q] > 0) --budget[q];
          }
        }
      }
    }
    if (dups != 0)
      violations.push_back(fmt::format("producer {}: {} duplicate deliveries (seq {})", p, dups,
                                       list(dup_seqs, dups)));
    if (unknown != 0)
      violations.push_back(fmt::format(
          "producer {}: {} item(s) delivered that were never submitted (it stopped at {}): seq {}",
          p, unknown, submitted, list(unknown_seqs, unknown)));
    duplicated += dups;
  }
  // A missing item no hand names: lost inside a pop, before the copy, by a
  // killed consumer whose hand shows exactly that, and counted by its ring.
  std::uint64_t lost_mid_pop = 0;
  std::map<std::uint64_t, std::vector<std::uint64_t>> unexplained;  // producer -> seqs
  std::uint64_t unexplained_total = 0;
  for (const auto& [p, s] : unnamed) {
    if (!budget.empty() && lost_mid_pop < empty_pops) {
      const std::uint32_t q = shm::test::item_priority(static_cast<std::uint32_t>(p), s,
                                                       static_cast<std::uint32_t>(budget.size()));
      if (budget[q] > 0) {
        --budget[q];
        ++lost_mid_pop;
        continue;
      }
    }
    auto& seqs = unexplained[p];
    seqs.push_back(s);
    ++unexplained_total;
  }
  if (unexplained_total != 0) {
    std::vector<std::string> where;
    for (const auto& [p, seqs] : unexplained)
      where.push_back(fmt::format("producer {} seq {}", p, list(seqs, seqs.size())));
    violations.push_back(fmt::format(
        "{} item(s) lost without evidence ({}): no killed consumer held them in its hand, and "
        "no ring counted a lost pop for them",
        unexplained_total, fmt::join(where, "; ")));
  }

  std::printf("  messages: %llu delivered, %llu duplicated\n",
              static_cast<unsigned long long>(delivered),
              static_cast<unsigned long long>(duplicated));
  std::printf(
      "  lost to consumer kills: %llu (%llu in a killed consumer's hand, %llu lost mid-pop), "
      "each proven; %llu consumer kill(s)\n",
      static_cast<unsigned long long>(lost_in_hand + lost_mid_pop),
      static_cast<unsigned long long>(lost_in_hand), static_cast<unsigned long long>(lost_mid_pop),
      static_cast<unsigned long long>(consumer_kills));
  std::printf(
      "  in flight at a producer kill (published once or not at all): %llu published, %llu not "
      "(%llu producer kill(s))\n",
      static_cast<unsigned long long>(doubt_sent), static_cast<unsigned long long>(doubt_lost),
      static_cast<unsigned long long>(producer_kills));
  for (const std::string& v : violations) std::printf("  VIOLATION: %s\n", v.c_str());
  return violations.empty() ? 0 : 1;
}
