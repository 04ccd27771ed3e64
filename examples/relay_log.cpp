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
//
//   relay_log --spill [--pause-ms 10000] [--spill-dir DIR] [--lines N] [--keep]
//
// The same relay with the Spill overflow (docs/spill.md): the reader is
// stopped for --pause-ms while the writer produces at least twice the relay's
// RAM budget; the oldest lines go to page files in DIR (default
// $LIBSHM_SPILL_DIR/log, else /var/lib/libshm/spill/log) instead of blocking
// the writer. The reader then drains everything: the cold pages in order,
// then the hot head. Exits 0 when every line arrived once, in order, with its
// CRC intact, the writer never blocked, and pages were sealed and removed.
// With --keep the relay stays in place at the end (for shmctl and shm-sidecar:
// scripts/demo.sh); by default it is removed.
#include <shm/platform/crc32c.hpp>
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

// "<seq:020> GET /index.html 200 <crc32c of the text before it:08x>"
std::size_t format_line(char (&line)[64], std::uint64_t i) {
  const auto n = fmt::format_to_n(line, sizeof line, "{:020} GET /index.html 200 ", i).size;
  const std::uint32_t crc = shm::crc32c(line, n);
  return n + fmt::format_to_n(line + n, sizeof line - n, "{:08x}", crc).size;
}

bool line_ok(std::span<const std::byte> value, std::uint64_t expect) {
  char line[64] = {};
  const std::size_t n = format_line(line, expect);
  return value.size() == n && std::memcmp(value.data(), line, n) == 0;
}

int run_writer(std::uint64_t lines, bool spill) {
  auto w = shm::RelayWriter::open("log");
  if (!w) {
    fmt::print(stderr, "writer: {}\n", w.error().what());
    return 1;
  }
  for (std::uint64_t i = 0; i < lines; ++i) {
    char line[64] = {};
    const std::size_t n = format_line(line, i);
    // Spill: the writer should never wait; if it did (a seal impossible),
    // the reader's check of the blocked counter says so.
    (void)spill;
    auto r = w->write(std::as_bytes(std::span(line, n)), std::chrono::seconds(30));
    if (!r || r->status != shm::WriteStatus::Appended) {
      fmt::print(stderr, "writer: line {}: {}\n", i,
                 r ? std::string(shm::to_string(r->status)) : r.error().what());
      return 1;
    }
  }
  return 0;
}

int run_spill(std::uint64_t lines, std::uint64_t high, std::uint64_t low, std::uint64_t pause_ms,
              const std::string& dir, bool keep) {
  // A page holds about high-water lines (the pending ones at the seal) and a
  // relay keeps at most 64 cold pages: keep the run under 32 pages.
  high = std::max<std::uint64_t>(high, lines / 32 + 1);
  low = std::min(low, high / 2);
  shm::RelayConfig cfg;
  cfg.policy = shm::policy::kRawFifo;
  cfg.value_bytes = 64;
  cfg.max_entries = static_cast<std::uint32_t>(high + high / 4);  // the RAM budget, in lines
  cfg.backpressure = {shm::Dimension::Count, high, low, shm::Overflow::Spill};
  cfg.spill_dedup = true;  // raw_fifo: the reader drops replays by first_seq
  cfg.spill.enabled = true;
  cfg.spill.dir = dir;
  cfg.spill.page_size = shm::spill::kPageHeaderSize + (high + 1) * shm::spill::record_stride(64);
  lines = std::max<std::uint64_t>(lines, 2 * cfg.max_entries);  // at least twice the RAM budget
  auto reader = shm::RelayReader::create("log", cfg);
  if (!reader) {
    fmt::print(stderr, "{}\n", reader.error().what());
    return 1;
  }
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(run_writer(lines, true));
  // The reader is stopped: the writer runs alone for pause_ms (or until it is done).
  int status = 0;
  bool reaped = false;
  const auto resume = std::chrono::steady_clock::now() + std::chrono::milliseconds(pause_ms);
  while (std::chrono::steady_clock::now() < resume) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      reaped = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const shm::RelaySnapshot paused = reader->snapshot();
  fmt::print("reader paused: {} cold pages ({} bytes on disk), {} lines hot, {} sealed so far\n",
             paused.cold_pages, paused.cold_bytes, paused.depth, paused.pages_sealed);
  std::uint64_t next = 0, applied = 0;
  bool ok = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (next < lines && std::chrono::steady_clock::now() < deadline) {
    auto n = reader->drain(256, [&](const shm::RelayEntry& e) {
      if (e.first_seq <= applied) return;  // a replay: applied already
      applied = e.first_seq;
      if (!line_ok(e.value, next)) ok = false;
      ++next;
    });
    if (!n) {
      fmt::print(stderr, "{}\n", n.error().what());
      return 1;
    }
    if (*n == 0) {
      if (!reaped && ::waitpid(pid, &status, WNOHANG) == pid) reaped = true;
      (void)reader->wait(std::chrono::milliseconds(100));
    }
  }
  if (!reaped) ::waitpid(pid, &status, 0);
  const shm::RelaySnapshot s = reader->snapshot();
  fmt::print(
      "{} of {} lines in order with their CRC: {}; {} pages sealed, {} acknowledged, {} "
      "left; writer blocked {} times\n",
      next, lines, ok, s.pages_sealed, s.pages_acked, s.cold_pages, s.blocked);
  if (!keep) (void)reader->segment().unlink();
  return ok && next == lines && WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
                 s.pages_sealed > 0 && s.pages_acked == s.pages_sealed && s.blocked == 0
             ? 0
             : 1;
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
  bool spill = false;
  std::uint64_t pause_ms = 10'000;
  std::string spill_dir;
  app.add_flag("--spill", spill, "Spill overflow: the reader pauses, the oldest lines go to disk");
  app.add_option("--pause-ms", pause_ms, "--spill: how long the reader stays stopped");
  app.add_option("--spill-dir", spill_dir, "--spill: the spill directory");
  bool keep = false;
  app.add_flag("--keep", keep, "leave the relay in place at the end (for shmctl inspect)");
  CLI11_PARSE(app, argc, argv);

  (void)shm::Segment::unlink("log");
  if (spill) return run_spill(lines, high, low, pause_ms, spill_dir, keep);
  shm::RelayConfig cfg;
  cfg.policy = shm::policy::kRawFifo;
  cfg.value_bytes = 64;
  cfg.max_entries = static_cast<std::uint32_t>(std::max<std::uint64_t>(high, retune_high));
  cfg.backpressure = {shm::Dimension::Count, high, low, shm::Overflow::Block};
  auto reader = shm::RelayReader::create("log", cfg);
  if (!reader) {
    fmt::print(stderr, "{}\n", reader.error().what());
    return 1;
  }
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(run_writer(lines, false));
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
      if (!line_ok(e.value, next)) in_order = false;
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
  if (!keep) (void)reader->segment().unlink();
  return in_order && WIFEXITED(status) && WEXITSTATUS(status) == 0 && s.blocked > 0 ? 0 : 1;
}
