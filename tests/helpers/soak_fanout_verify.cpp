// Soak verifier for the fanout block of scripts/soak.sh (PriorityFanout over
// MpmcRings): reads the logs of every producer and consumer (formats in
// soak_fanout.hpp), checks the delivery semantics, prints a summary, exits 1
// on any violation.
//
// Semantics verified:
//  - nothing duplicated: every item (producer, seq) is delivered at most once,
//    across every consumer and every kill;
//  - nothing lost beyond the documented cases: every item 0..N-1 of each
//    producer (N from its clean stop) is delivered, except
//      * the item a producer was submitting when it was killed (journalled,
//        "in doubt"): delivered once or not at all, never repeated;
//      * the item a consumer had popped and not logged yet when it was killed
//        (MpmcRing: "a consumer killed mid-drain loses at most the item it had
//        popped"): at most one missing item per consumer kill;
//  - order: within one consumer incarnation, each producer's items of one
//    priority come in submission order (each ring is FIFO);
//  - nothing corrupt: every item passed its size/body/routing checks, and no
//    item names a producer or a sequence number that was never submitted;
//  - every process stopped cleanly at the end (its last incarnation logged X).
//
//   test_soak_fanout_verify --dir DIR --producers N --consumers M
#include "soak_logs.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
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
  for (int c = 0; c < consumers; ++c) {
    const std::string name = fmt::format("fanout-consumer-{}", c);
    // Per incarnation: the last sequence number seen of (producer, priority).
    std::map<std::pair<std::uint32_t, std::uint32_t>, std::uint64_t> last;
    std::size_t current = ~std::size_t{0};
    std::uint64_t disorder = 0;
    std::string first_disorder;
    const auto incs = soak::parse_log(
        fmt::format("{}/{}.log", dir, name), violations,
        [&](char tag, std::istringstream& ls, soak::Incarnation&, std::size_t index) {
          std::uint64_t p = 0, seq = 0, prio = 0;
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
  }
  if (corrupt > kListed) violations.push_back(fmt::format("{} corrupt items in all", corrupt));

  std::uint64_t delivered = 0, duplicated = 0, lost = 0, doubt_sent = 0, doubt_lost = 0;
  std::uint64_t producer_kills = 0;
  std::vector<std::string> lost_where;
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
    std::vector<std::uint64_t> dup_seqs, lost_seqs, unknown_seqs;
    std::uint64_t dups = 0, missing = 0, unknown = 0;
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
        ++missing;
        if (lost_seqs.size() < kListed) lost_seqs.push_back(s);
      }
    }
    if (dups != 0)
      violations.push_back(fmt::format("producer {}: {} duplicate deliveries (seq {})", p, dups,
                                       list(dup_seqs, dups)));
    if (unknown != 0)
      violations.push_back(fmt::format(
          "producer {}: {} item(s) delivered that were never submitted (it stopped at {}): seq {}",
          p, unknown, submitted, list(unknown_seqs, unknown)));
    if (missing != 0)
      lost_where.push_back(fmt::format("producer {} seq {}", p, list(lost_seqs, missing)));
    duplicated += dups;
    lost += missing;
  }
  if (lost > consumer_kills)
    violations.push_back(fmt::format(
        "{} item(s) lost ({}), more than the {} consumer kill(s) allow: a consumer killed "
        "mid-drain loses at most the one item it had popped",
        lost, fmt::join(lost_where, "; "), consumer_kills));

  std::printf("  messages: %llu delivered, %llu duplicated\n",
              static_cast<unsigned long long>(delivered),
              static_cast<unsigned long long>(duplicated));
  std::printf(
      "  lost to a consumer kill mid-drain (documented: at most the one item it had popped): "
      "%llu, allowed %llu (one per consumer kill)\n",
      static_cast<unsigned long long>(lost), static_cast<unsigned long long>(consumer_kills));
  std::printf(
      "  in flight at a producer kill (published once or not at all): %llu published, %llu not "
      "(%llu producer kill(s))\n",
      static_cast<unsigned long long>(doubt_sent), static_cast<unsigned long long>(doubt_lost),
      static_cast<unsigned long long>(producer_kills));
  for (const std::string& v : violations) std::printf("  VIOLATION: %s\n", v.c_str());
  return violations.empty() ? 0 : 1;
}
