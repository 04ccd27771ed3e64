// Soak verifier for the relay block of scripts/soak.sh (a raw_fifo relay with
// Spill, soak_relay.hpp): reads the writers' and the reader's logs, checks the
// relay's delivery guarantee, prints a summary, exits 1 on any violation.
//
// Semantics verified (docs/relay.md "What a crash leaves behind", docs/spill.md
// "Crash semantics", "Replay and dedup"):
//  - nothing lost: every op a writer saw acknowledged (0..N-1 from its clean
//    stop, minus the ops in doubt) is delivered; an op in doubt (its writer
//    was killed inside the write) is delivered at most once;
//  - replays only of what a killed reader held: an entry (first_seq) delivered
//    again must be flagged redelivered, carry the same op, and have been in
//    the hands of a killed reader incarnation (logged after its last commit);
//    each such kill allows one more delivery of each entry it held. Counted
//    and reported apart;
//  - dedup by first_seq is exact: an entry delivered for the first time has a
//    first_seq above every one delivered before it (a reader that drops
//    first_seq at or below the last it applied never drops a new op), and no
//    op comes under two first_seq (never written twice);
//  - order: each writer's ops are first delivered in the order it wrote them;
//  - nothing corrupt (value check, key, one op per entry), nothing that was
//    never written;
//  - the relay spilled: some entries came from cold pages (else the run did
//    not test the spill); the reader stopped only with no cold page left
//    (the script then checks that no page file is left either);
//  - every process stopped cleanly at the end (its last incarnation logged X).
//
//   test_soak_relay_verify --dir DIR --writers N
#include "soak_logs.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr std::size_t kListed = 8;

struct Delivery {
  std::uint64_t writer, seq, first_seq, page;
  bool redelivered;
  std::size_t incarnation;
};

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  int writers = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k(argv[i]);
    if (k == "--dir")
      dir = argv[i + 1];
    else if (k == "--writers")
      writers = std::atoi(argv[i + 1]);
  }
  if (dir.empty() || writers <= 0) {
    std::fprintf(stderr, "usage: test_soak_relay_verify --dir DIR --writers N\n");
    return 2;
  }
  const auto nw = static_cast<std::uint64_t>(writers);
  std::vector<std::string> violations;
  auto violation = [&](std::string v) {
    if (violations.size() < 4 * kListed) violations.push_back(std::move(v));
  };

  // The reader's log: deliveries in order, and per incarnation the first_seq
  // of the entries logged since its last commit ("D").
  std::vector<Delivery> deliveries;
  std::vector<std::vector<std::uint64_t>> uncommitted;
  // P: the relay's counters at the clean stop. The spill intent makes the page
  // counters exact across kills (docs/spill.md): with everything drained and
  // no page refused, every page sealed (or adopted) was acknowledged or
  // expired exactly once.
  std::uint64_t pages_sealed = 0, pages_acked = 0, entries_spilled = 0, fallbacks = 0,
                rolled_forward = 0, rolled_back = 0, blocked = 0, pages_expired = 0,
                pages_refused = 0, pages_rebuilt = 0;
  bool counted = false;
  const auto incs = soak::parse_log(
      dir + "/relay-reader.log", violations,
      [&](char tag, std::istringstream& ls, soak::Incarnation&, std::size_t index) {
        if (uncommitted.size() <= index) uncommitted.resize(index + 1);
        if (tag == 'D') {
          uncommitted[index].clear();
        } else if (tag == 'I') {
          Delivery d{};
          int r = 0;
          if (!(ls >> d.writer >> d.seq >> d.first_seq >> d.page >> r)) return;  // torn
          d.redelivered = r != 0;
          d.incarnation = index;
          deliveries.push_back(d);
          uncommitted[index].push_back(d.first_seq);
        } else if (tag == 'P') {
          counted = static_cast<bool>(ls >> pages_sealed >> pages_acked >> entries_spilled >>
                                      fallbacks >> rolled_forward >> rolled_back >> blocked >>
                                      pages_expired >> pages_refused >> pages_rebuilt);
        }
      });
  for (const soak::Incarnation& inc : incs) {
    for (const std::string& v : inc.violations) violation("relay-reader: " + v);
    for (const std::string& bad : inc.corrupt)
      violation("relay-reader: corrupt entry (reason key first_seq): " + bad);
  }
  if (incs.empty() || !incs.back().stop)
    violation("relay-reader: did not drain and stop cleanly (no final X line)");
  const std::uint64_t reader_kills = soak::killed_incarnations(incs);
  // Replays each first_seq may get: one per killed incarnation that held it.
  std::map<std::uint64_t, std::uint64_t> replay_allowed;
  for (std::size_t i = 0; i + 1 < incs.size() && i < uncommitted.size(); ++i) {
    if (incs[i].stop) continue;
    for (std::uint64_t f : uncommitted[i]) ++replay_allowed[f];
  }

  // Walk the deliveries in order.
  std::map<std::uint64_t, std::pair<std::uint64_t, std::uint64_t>> op_of;     // first_seq -> op
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::uint64_t> first_of;  // op -> first_seq
  std::vector<std::uint64_t> last_seq(nw, 0);
  std::vector<bool> any(nw, false);
  std::uint64_t max_first = 0, replays = 0, from_pages = 0, out_of_order = 0;
  std::set<std::uint64_t> pages;
  for (const Delivery& d : deliveries) {
    if (d.writer >= nw) {
      violation(
          fmt::format("entry first_seq {} from writer {}: no such writer", d.first_seq, d.writer));
      continue;
    }
    const std::pair op(d.writer, d.seq);
    if (d.page != 0) {
      ++from_pages;
      pages.insert(d.page);
    }
    if (const auto seen = op_of.find(d.first_seq); seen != op_of.end()) {
      // A replay of an entry delivered before.
      ++replays;
      if (seen->second != op)
        violation(
            fmt::format("first_seq {} delivered as writer {} op {}, before as writer {} op {}",
                        d.first_seq, d.writer, d.seq, seen->second.first, seen->second.second));
      if (!d.redelivered)
        violation(
            fmt::format("first_seq {} (writer {} op {}) delivered again, not flagged "
                        "redelivered",
                        d.first_seq, d.writer, d.seq));
      auto& allowed = replay_allowed[d.first_seq];
      if (allowed == 0)
        violation(
            fmt::format("first_seq {} (writer {} op {}) delivered again though no killed "
                        "reader held it uncommitted",
                        d.first_seq, d.writer, d.seq));
      else
        --allowed;
      continue;
    }
    if (!op_of.empty() && d.first_seq <= max_first)
      violation(
          fmt::format("first_seq {} (writer {} op {}) delivered for the first time after "
                      "first_seq {}: a reader deduplicating by first_seq would drop it",
                      d.first_seq, d.writer, d.seq, max_first));
    max_first = std::max(max_first, d.first_seq);
    op_of.emplace(d.first_seq, op);
    if (auto [it, fresh] = first_of.try_emplace(op, d.first_seq); !fresh)
      violation(
          fmt::format("writer {} op {} delivered as two entries (first_seq {} and {}): "
                      "written twice",
                      d.writer, d.seq, it->second, d.first_seq));
    if (any[d.writer] && d.seq <= last_seq[d.writer] && out_of_order++ == 0)
      violation(fmt::format("writer {}: op {} first delivered after op {}", d.writer, d.seq,
                            last_seq[d.writer]));
    any[d.writer] = true;
    last_seq[d.writer] = std::max(last_seq[d.writer], d.seq);
  }

  std::uint64_t acknowledged = 0, lost = 0, doubt_sent = 0, doubt_lost = 0, writer_kills = 0;
  for (std::uint64_t w = 0; w < nw; ++w) {
    const std::string name = fmt::format("relay-writer-{}", w);
    const auto wincs = soak::parse_log(fmt::format("{}/{}.log", dir, name), violations);
    writer_kills += soak::killed_incarnations(wincs);
    std::set<std::uint64_t> doubt;  // S <pid> <ns> <next> <in_doubt|->
    for (const soak::Incarnation& inc : wincs) {
      for (const std::string& v : inc.violations) violation(name + ": " + v);
      if (inc.start_fields.size() >= 2 && inc.start_fields[1] != "-")
        doubt.insert(std::strtoull(inc.start_fields[1].c_str(), nullptr, 10));
    }
    if (wincs.empty() || !wincs.back().stop) {
      violation(name + ": did not stop cleanly (no final X line)");
      continue;
    }
    const std::uint64_t written = *wincs.back().stop;
    std::vector<std::uint64_t> missing;
    for (std::uint64_t s = 0; s < written; ++s) {
      const bool got = first_of.contains({w, s});
      if (doubt.contains(s)) {
        (got ? doubt_sent : doubt_lost) += 1;
        continue;
      }
      ++acknowledged;
      if (!got) {
        ++lost;
        if (missing.size() < kListed) missing.push_back(s);
      }
    }
    if (!missing.empty())
      violation(fmt::format("writer {}: acknowledged op(s) lost: {}{}", w, fmt::join(missing, ", "),
                            missing.size() == kListed ? ", ..." : ""));
    for (auto it = first_of.lower_bound({w, written}); it != first_of.end() && it->first.first == w;
         ++it) {
      violation(fmt::format("writer {}: op {} delivered but never written (it stopped at {})", w,
                            it->first.second, written));
      break;
    }
  }
  if (from_pages == 0)
    violation(
        "no entry came from a cold page: the run never spilled (raise the writers' rate "
        "or the reader's pause)");
  if (counted && pages_refused == 0 && pages_acked + pages_expired != pages_sealed + pages_rebuilt)
    violation(fmt::format(
        "page counters at the clean stop: {} acknowledged + {} expired, but {} sealed + {} "
        "adopted at create (each page counts once, whatever the kills hit)",
        pages_acked, pages_expired, pages_sealed, pages_rebuilt));
  std::printf("  messages: %llu delivered, %llu acknowledged op(s) lost, %llu replayed\n",
              static_cast<unsigned long long>(op_of.size()), static_cast<unsigned long long>(lost),
              static_cast<unsigned long long>(replays));
  std::printf(
      "  replayed to a new reader (taken, not committed, by a killed reader; dropped by "
      "first_seq): %llu; %llu reader kill(s)\n",
      static_cast<unsigned long long>(replays), static_cast<unsigned long long>(reader_kills));
  std::printf(
      "  spill: %llu entries delivered from %zu cold page(s); relay counters: %llu page(s) "
      "sealed (%llu entries), %llu acknowledged, seals rolled forward %llu / back %llu, %llu "
      "fallback(s) to Block, %llu blocked write(s)\n",
      static_cast<unsigned long long>(from_pages), pages.size(),
      static_cast<unsigned long long>(pages_sealed),
      static_cast<unsigned long long>(entries_spilled),
      static_cast<unsigned long long>(pages_acked), static_cast<unsigned long long>(rolled_forward),
      static_cast<unsigned long long>(rolled_back), static_cast<unsigned long long>(fallbacks),
      static_cast<unsigned long long>(blocked));
  std::printf(
      "  in flight at a writer kill (landed once or not at all): %llu landed, %llu not (%llu "
      "writer kill(s)); %llu acknowledged op(s) checked\n",
      static_cast<unsigned long long>(doubt_sent), static_cast<unsigned long long>(doubt_lost),
      static_cast<unsigned long long>(writer_kills), static_cast<unsigned long long>(acknowledged));
  for (const std::string& v : violations) std::printf("  VIOLATION: %s\n", v.c_str());
  return violations.empty() ? 0 : 1;
}
