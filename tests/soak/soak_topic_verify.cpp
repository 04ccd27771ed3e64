// Soak verifier for the topic block of scripts/soak.sh (soak_topic.hpp):
// reads the publisher's and the subscribers' logs, checks the topic's
// delivery guarantees, prints a summary, exits 1 on any violation.
//
// Semantics verified (docs/topic.md "Protocol", "Crashes"):
//  - nothing corrupt: every sample received passed its byte checks;
//  - order: each subscriber incarnation receives samples in strictly
//    increasing (publisher incarnation, seq); a publisher killed inside a
//    publish may leave its seq to the next incarnation, which then comes
//    with a larger incarnation;
//  - one sample per (incarnation, seq): every subscriber that received it
//    saw the same (pid, counter) (one chunk, read in place), and it is the
//    sample the publisher logged under that seq; a sample it did not log is
//    the one that incarnation was publishing when it was killed (its next
//    counter), never one of a publisher that stopped cleanly;
//  - loss is only what the overflow allows: within one publisher
//    incarnation a Block subscriber receives consecutive seqs; a DropOldest
//    subscriber skips no more seqs in all than its missed() count says (a
//    count read just after a receive may already include the drops after it);
//  - the tail: a subscriber that stopped cleanly and attached before the
//    publisher's last publish ends with that last sample;
//  - every process stopped cleanly at the end (its last incarnation logged X).
//
//   test_soak_topic_verify --dir DIR --subscribers N
#include "soak_logs.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr std::size_t kListed = 8;

struct Published {
  std::uint64_t pid;  // of the incarnation
  std::uint64_t counter;
};

struct Received {
  std::uint64_t incarnation, seq, pid, counter, missed;
};

// A publisher incarnation: its pid, the samples it logged, how it ended.
struct PublisherRun {
  std::uint64_t pid = 0;
  std::map<std::uint64_t, std::uint64_t> counter_of;  // seq -> counter
  std::uint64_t next_counter = 0;                     // after the last logged one
  bool clean = false;
};

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  int subscribers = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k(argv[i]);
    if (k == "--dir")
      dir = argv[i + 1];
    else if (k == "--subscribers")
      subscribers = std::atoi(argv[i + 1]);
  }
  if (dir.empty() || subscribers <= 0) {
    std::fprintf(stderr, "usage: test_soak_topic_verify --dir DIR --subscribers N\n");
    return 2;
  }
  std::vector<std::string> violations;
  auto violation = [&](std::string v) {
    if (violations.size() < 4 * kListed) violations.push_back(std::move(v));
  };

  // The publisher: its incarnations by topic incarnation number.
  std::vector<std::string> problems;
  std::vector<std::vector<std::pair<std::uint64_t, std::uint64_t>>> logged;  // per log incarnation
  const auto pub_incs =
      soak::parse_log(dir + "/topic-publisher.log", problems,
                      [&](char tag, std::istringstream& in, soak::Incarnation&, std::size_t index) {
                        std::uint64_t seq = 0, counter = 0;
                        if (tag != 'P' || !(in >> seq >> counter)) return;
                        if (logged.size() <= index) logged.resize(index + 1);
                        logged[index].emplace_back(seq, counter);
                      });
  const std::vector<std::pair<std::uint64_t, std::uint64_t>> kNoneLogged;
  const std::vector<Received> kNoneReceived;
  std::map<std::uint64_t, PublisherRun> runs;  // topic incarnation -> run
  std::uint64_t published = 0, last_seq = 0, last_publish_ns = 0, last_incarnation = 0;
  bool have_tail = false;
  for (std::size_t i = 0; i < pub_incs.size(); ++i) {
    const soak::Incarnation& inc = pub_incs[i];
    for (const std::string& v : inc.violations) violation("publisher: " + v);
    if (inc.start_fields.empty()) continue;  // a torn start line: it published nothing
    const std::uint64_t number = std::strtoull(inc.start_fields[0].c_str(), nullptr, 10);
    PublisherRun& run = runs[number];
    run.pid = static_cast<std::uint64_t>(inc.pid);
    run.clean = inc.stop.has_value();
    std::uint64_t expect = 0;
    std::uint64_t prev_seq = 0;
    for (const auto& [seq, counter] : i < logged.size() ? logged[i] : kNoneLogged) {
      if (counter != expect || (expect != 0 && seq <= prev_seq))
        violation(
            fmt::format("publisher incarnation {}: logged seq {} counter {} after seq {} "
                        "counter {}",
                        number, seq, counter, prev_seq, expect - 1));
      run.counter_of[seq] = counter;
      expect = counter + 1;
      prev_seq = seq;
      ++published;
    }
    run.next_counter = expect;
    if (i + 1 == pub_incs.size()) {
      if (!inc.stop) {
        violation("publisher: its last incarnation did not stop cleanly");
      } else if (inc.stop_fields.size() >= 3 && *inc.stop > 0) {
        have_tail = true;
        last_incarnation = number;
        last_seq = std::strtoull(inc.stop_fields[1].c_str(), nullptr, 10);
        last_publish_ns = std::strtoull(inc.stop_fields[2].c_str(), nullptr, 10);
      }
    }
  }

  // The subscribers.
  std::map<std::pair<std::uint64_t, std::uint64_t>, Published> sample_of;  // (inc, seq)
  std::uint64_t delivered = 0, skipped_block = 0, skipped_drop = 0, unlogged = 0;
  std::uint64_t missed_total = 0, subscriber_kills = 0;
  for (int s = 0; s < subscribers; ++s) {
    const std::string name = fmt::format("topic-subscriber-{}", s);
    std::vector<std::vector<Received>> got;
    const auto incs = soak::parse_log(
        dir + "/" + name + ".log", problems,
        [&](char tag, std::istringstream& in, soak::Incarnation&, std::size_t index) {
          Received r{};
          if (tag != 'I' || !(in >> r.incarnation >> r.seq >> r.pid >> r.counter >> r.missed))
            return;
          if (got.size() <= index) got.resize(index + 1);
          got[index].push_back(r);
        });
    subscriber_kills += soak::killed_incarnations(incs);
    if (incs.empty() || !incs.back().stop)
      violation(fmt::format("{}: its last incarnation did not stop cleanly", name));
    for (std::size_t i = 0; i < incs.size(); ++i) {
      const soak::Incarnation& inc = incs[i];
      for (const std::string& v : inc.violations) violation(fmt::format("{}: {}", name, v));
      for (const std::string& c : inc.corrupt)
        violation(fmt::format("{}: corrupt sample: {}", name, c));
      const bool block = !inc.start_fields.empty() && inc.start_fields[0] == "2";
      const std::vector<Received>& rs = i < got.size() ? got[i] : kNoneReceived;
      // Skipped seqs of this incarnation so far. missed() counts every drop
      // since the attach (a new record starts at 0); it is read just after a
      // receive, so it may already count drops of the samples after that one:
      // only the running total is bounded, not each gap by its own step.
      std::uint64_t dropped_so_far = 0;
      for (std::size_t k = 0; k < rs.size(); ++k) {
        const Received& r = rs[k];
        ++delivered;
        // The sample against the publisher's log.
        const auto run = runs.find(r.incarnation);
        if (run == runs.end() || run->second.pid != r.pid) {
          violation(
              fmt::format("{}: sample {}/{} of pid {} from no publisher incarnation that "
                          "logged its start",
                          name, r.incarnation, r.seq, r.pid));
        } else if (const auto c = run->second.counter_of.find(r.seq);
                   c != run->second.counter_of.end()) {
          if (c->second != r.counter)
            violation(fmt::format("{}: sample {}/{} is counter {}, the publisher logged {}", name,
                                  r.incarnation, r.seq, r.counter, c->second));
        } else if (run->second.clean || r.counter != run->second.next_counter) {
          violation(
              fmt::format("{}: sample {}/{} (counter {}) was never logged as published and "
                          "is not the one its publisher was publishing when killed",
                          name, r.incarnation, r.seq, r.counter));
        } else {
          ++unlogged;
        }
        // One sample per (incarnation, seq), whoever received it.
        const auto [it, fresh] =
            sample_of.try_emplace({r.incarnation, r.seq}, Published{r.pid, r.counter});
        if (!fresh && (it->second.pid != r.pid || it->second.counter != r.counter))
          violation(fmt::format(
              "{}: sample {}/{} is pid {} counter {}, another subscriber got "
              "pid {} counter {}",
              name, r.incarnation, r.seq, r.pid, r.counter, it->second.pid, it->second.counter));
        if (k == 0) continue;
        // Order and loss against the one before.
        const Received& p = rs[k - 1];
        if (std::pair(r.incarnation, r.seq) <= std::pair(p.incarnation, p.seq)) {
          violation(fmt::format("{}: sample {}/{} after {}/{}", name, r.incarnation, r.seq,
                                p.incarnation, p.seq));
          continue;
        }
        if (r.incarnation != p.incarnation) continue;
        const std::uint64_t skipped = r.seq - p.seq - 1;
        if (skipped == 0) continue;
        if (block) {
          skipped_block += skipped;
          violation(fmt::format("{} (Block): seq {} to {} of incarnation {}: {} sample(s) lost",
                                name, p.seq, r.seq, r.incarnation, skipped));
        } else if (dropped_so_far + skipped > r.missed) {
          violation(
              fmt::format("{} (DropOldest): seq {} to {}: {} skipped, {} in all since its "
                          "attach, but missed() says {}",
                          name, p.seq, r.seq, skipped, dropped_so_far + skipped, r.missed));
        } else {
          dropped_so_far += skipped;
          skipped_drop += skipped;
        }
      }
      if (i + 1 == incs.size() && inc.stop && !inc.stop_fields.empty())
        missed_total += std::strtoull(inc.stop_fields[0].c_str(), nullptr, 10);
      // The tail: attached before the last publish, stopped cleanly.
      if (i + 1 == incs.size() && inc.stop && have_tail && inc.start_ns < last_publish_ns) {
        if (rs.empty() || rs.back().incarnation != last_incarnation || rs.back().seq != last_seq)
          violation(fmt::format("{}: stopped at {} but the publisher's last sample was {}/{}", name,
                                rs.empty()
                                    ? std::string("nothing")
                                    : fmt::format("{}/{}", rs.back().incarnation, rs.back().seq),
                                last_incarnation, last_seq));
      }
    }
  }
  for (const std::string& p : problems) violation(p);
  std::printf(
      "  messages: %llu delivered to %d subscriber(s), %llu published (%zu publisher "
      "incarnation(s)), %llu received unlogged (in flight at a publisher kill)\n",
      static_cast<unsigned long long>(delivered), subscribers,
      static_cast<unsigned long long>(published), runs.size(),
      static_cast<unsigned long long>(unlogged));
  std::printf(
      "  DropOldest: %llu sample(s) skipped, all counted in missed() (%llu at the clean "
      "stops); Block: %llu lost; %llu subscriber kill(s)\n",
      static_cast<unsigned long long>(skipped_drop), static_cast<unsigned long long>(missed_total),
      static_cast<unsigned long long>(skipped_block),
      static_cast<unsigned long long>(subscriber_kills));
  for (const std::string& v : violations) std::printf("  VIOLATION: %s\n", v.c_str());
  return violations.empty() ? 0 : 1;
}
