// relay_log: log shipping through a raw_fifo relay with the Block overflow.
// A writer process appends numbered log lines as fast as it can; the reader
// drains slowly. The writer parks at high water and resumes below low water;
// halfway through, the watermarks are retuned live from this process, as
// `shmctl set log high_water=N` does from another.
//
//   relay_log [--lines 20000] [--high 256] [--low 64] [--retune-high 1024] [--retune-externally]
//
// With --retune-externally the reader does not retune: halfway it prints
// "waiting for: shmctl set log high_water=N" and stops draining until another
// process (shmctl) has changed the high water (up to 60 s).
//
// Exits 0 when every line arrived once, in order, and the writer blocked.
#include <shm/relay/relay.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

namespace {

int run_writer(std::uint64_t lines) {
  auto w = shm::RelayWriter::open("log");
  if (!w) {
    fmt::print(stderr, "writer: {}\n", w.error().what());
    return 1;
  }
  for (std::uint64_t i = 0; i < lines; ++i) {
    char line[64] = {};
    const auto n = fmt::format_to_n(line, sizeof line, "{:020} GET /index.html 200", i).size;
    auto r = w->write(std::as_bytes(std::span(line, std::min<std::size_t>(n, sizeof line))),
                      std::chrono::seconds(30));
    if (!r || r->outcome != shm::WriteOutcome::Appended) {
      fmt::print(stderr, "writer: line {}: {}\n", i,
                 r ? std::string(shm::to_string(r->outcome)) : r.error().what());
      return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"RelayCell log shipping: raw_fifo with Block backpressure"};
  std::uint64_t lines = 20'000, high = 256, low = 64, retune_high = 1024;
  app.add_option("--lines", lines, "log lines to ship")->check(CLI::Range(1, 100'000'000));
  app.add_option("--high", high, "high water (pending lines)");
  app.add_option("--low", low, "low water (pending lines)");
  app.add_option("--retune-high", retune_high, "high water set halfway through");
  bool externally = false;
  app.add_flag("--retune-externally", externally,
               "halfway, wait for `shmctl set log high_water=N` instead of retuning here");
  CLI11_PARSE(app, argc, argv);

  (void)shm::Segment::unlink("log");
  shm::RelayConfig cfg;
  cfg.policy = shm::policy::kRawFifo;
  cfg.value_size = 64;
  cfg.capacity = static_cast<std::uint32_t>(std::max<std::uint64_t>(high, retune_high));
  cfg.backpressure = {shm::Dimension::Count, high, low, shm::Overflow::Block};
  auto reader = shm::RelayReader::create("log", cfg);
  if (!reader) {
    fmt::print(stderr, "{}\n", reader.error().what());
    return 1;
  }
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(run_writer(lines));
  int status = 0;
  bool reaped = false;
  // The reader starts late: it waits until the writer has filled the relay
  // and parked, so the run shows Block whatever the speed of either side.
  const auto park_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (lines > high && reader->snapshot().blocked == 0) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      reaped = true;
      break;
    }
    if (std::chrono::steady_clock::now() > park_deadline) {
      fmt::print(stderr, "the writer did not park within 30 s\n");
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::uint64_t next = 0;
  bool retuned = false, in_order = true;
  while (next < lines) {
    auto n = reader->drain(32, [&](const shm::RelayEntry& e) {
      const std::string text(reinterpret_cast<const char*>(e.value.data()), 20);
      if (std::stoull(text) != next) in_order = false;
      ++next;
    });
    if (!n) {
      fmt::print(stderr, "{}\n", n.error().what());
      return 1;
    }
    if (!retuned && next >= lines / 2 && externally) {
      // Another process retunes: stop draining (the writer stays parked at
      // high water) until the relay's high water changes.
      fmt::print("waiting for: shmctl set log high_water={}\n", retune_high);
      std::fflush(stdout);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      std::uint64_t now_high = high;
      while ((now_high = reader->snapshot().backpressure.high_water) == high) {
        if (std::chrono::steady_clock::now() > deadline) {
          fmt::print(stderr, "nobody retuned the high water within 60 s\n");
          return 1;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      retuned = true;
      fmt::print("retuned from outside: high water {} -> {} after {} lines\n", high, now_high,
                 next);
    }
    if (!retuned && next >= lines / 2) {
      // What `shmctl set log high_water=N` does: the parked writer follows at once.
      if (auto ok = shm::retune_relay(
              "log", {shm::Dimension::Count, retune_high, low, shm::Overflow::Block});
          !ok) {
        fmt::print(stderr, "retune: {}\n", ok.error().what());
        return 1;
      }
      retuned = true;
      fmt::print("retuned high water {} -> {} after {} lines\n", high, retune_high, next);
    }
    if (*n == 0) {
      if (!reaped && ::waitpid(pid, &status, WNOHANG) == pid) reaped = true;
      if (reaped && reader->snapshot().depth == 0) break;  // the writer is gone, nothing is left
      (void)reader->wait(std::chrono::milliseconds(100));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));  // a slow reader
  }
  if (!reaped) ::waitpid(pid, &status, 0);
  const shm::RelaySnapshot s = reader->snapshot();
  fmt::print("{} lines shipped in order: {}; writer parked {} times, timed out {}; full now: {}\n",
             next, in_order, s.blocked, s.timed_out, s.is_full);
  (void)reader->segment().unlink();
  return in_order && WIFEXITED(status) && WEXITSTATUS(status) == 0 && s.blocked > 0 ? 0 : 1;
}
