// The loop of a soak producer that journals each item before it sends it:
// test_soak_fanout_producer and test_soak_relay_writer.
//
// Journal: soak_common.hpp's JournalEntry, first == last == the sequence
// number, tail_before the "acknowledged" flag. Before sending s the producer
// journals {s, 0}; with journal_acks it journals {s, 1} once the send
// returned. A restarted producer continues at s + 1 either way, so no item is
// sent twice; s is "in doubt" (sent once or not at all) when the entry says 0.
//
// Log lines (soak_logs.hpp):
//   S <pid> <realtime_ns> <next_seq> <in_doubt_seq|->   incarnation start
//   F <realtime_ns>                                     first item sent
//   X <next_seq>                                        clean stop: 0..next_seq-1 sent
#pragma once

#include "soak_process.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>
#include <chrono>
#include <cstdint>
#include <expected>
#include <string>
#include <string_view>
#include <thread>

namespace soak {

// What a send did: true once item `seq` was sent, false when a stop request
// came while it waited (nothing sent), or why it failed (a violation).
using SendOutcome = std::expected<bool, std::string>;

// Sends items next, next + 1, ... with send(seq) until SIGTERM, at most
// `rate` per second, calling after_send(next) after each; exits 0 after "X",
// 1 after a violation, 2 when the journal cannot be opened.
template <class Send, class AfterSend>
int run_journalled_producer(const ProcessLog& log, std::string_view program,
                            const std::string& journal_path, std::uint64_t rate, bool journal_acks,
                            Send&& send, AfterSend&& after_send) {
  const int journal = ::open(journal_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (journal < 0) return usage_error(program, "cannot open the journal");
  std::uint64_t next = 0, counter = 0;
  std::string doubt = "-";
  if (auto e = read_journal(journal)) {
    next = e->first + 1;
    if (e->tail_before == 0) doubt = std::to_string(e->first);
    counter = e->counter + 1;
  }
  append(log.fd(), fmt::format("\nS {} {} {} {}\n", ::getpid(), realtime_ns(), next, doubt));

  const auto start = std::chrono::steady_clock::now();
  const std::uint64_t start_seq = next;
  bool first = true;
  while (g_stop == 0) {
    if (!write_journal(journal, JournalEntry{counter++, 0, next, next, 0, 0}))
      return log.violation("journal write failed");
    const SendOutcome sent = send(next);
    if (!sent) return log.violation(sent.error());
    if (!*sent) break;  // stopped while waiting: `next` was not sent
    if (journal_acks && !write_journal(journal, JournalEntry{counter++, 1, next, next, 0, 0}))
      return log.violation("journal write failed");
    ++next;
    if (first) {
      append(log.fd(), fmt::format("F {}\n", realtime_ns()));
      first = false;
    }
    after_send(next);
    // Throttle: never ahead of `rate` items per second since start.
    const auto due = start + std::chrono::nanoseconds((next - start_seq) * 1'000'000'000ull / rate);
    if (due > std::chrono::steady_clock::now()) std::this_thread::sleep_until(due);
  }
  append(log.fd(), fmt::format("X {}\n", next));
  return 0;
}

}  // namespace soak
