// relay_ticker: writers publish price updates for many symbols at full speed;
// one reader drains at a fixed rate and always sees the latest price per
// symbol. Memory is bounded by the symbol count, whatever the overload.
//
//   relay_ticker [--symbols 10000] [--writers 2] [--seconds 3] [--rate 10000] [--keep]
//
// Creates the relay "ticker" (lww, one entry per symbol, Conflate), forks the
// writer processes, drains `rate` entries per second in the parent and folds
// what it drains (lww: the newest (timestamp, writer) wins). At the end each
// writer's last timestamp per symbol (written to a file by the writer) is
// compared with the reader's view: for every symbol the reader holds the
// newest price written. Prints the staleness of what the reader saw and the
// memory used. A drained entry may be older than one drained before: a writer
// stamped it before the newer one was written and delivered (the relay keeps
// no value once it is drained); the fold absorbs it, the count is printed.
// The relay is removed at the end unless --keep is given (then shmctl and
// shm-sidecar can still show it: scripts/demo.sh).
#include <shm/relay/relay.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono;

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(
      duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count());
}

std::string last_file(pid_t parent, std::uint64_t id) {
  return fmt::format("/tmp/relay_ticker.{}.{}", parent, id);
}

// Writer `id`: prices for every symbol in turn until `seconds` pass; then
// stores its last timestamp per symbol in last_file(); exits 0.
int run_writer(std::uint64_t id, std::uint32_t symbols, int seconds, pid_t parent) {
  std::vector<std::uint64_t> last(symbols, 0);
  auto w = shm::RelayWriter::open("ticker");
  if (!w) {
    fmt::print(stderr, "writer {}: {}\n", id, w.error().what());
    return 1;
  }
  const auto end = steady_clock::now() + std::chrono::seconds(seconds);
  std::uint64_t n = 0;
  while (steady_clock::now() < end) {
    for (std::uint32_t s = 0; s < symbols; ++s, ++n) {
      const std::uint64_t price = 10'000 + (n * 7 + id) % 1'000;
      const std::uint64_t ts = now_ns();
      auto r = w->try_write(s, shm::lww_value(ts, id, shm::u64_value(price)));
      // Full: no free entry (every key pending and the symbol's entry in
      // the reader's hand); nothing was written, so write it again.
      while (r && r->status == shm::WriteStatus::Full) {
        std::this_thread::yield();
        r = w->try_write(s, shm::lww_value(ts, id, shm::u64_value(price)));
      }
      if (!r) {
        fmt::print(stderr, "writer {}: {}\n", id, r.error().what());
        return 1;
      }
      last[s] = ts;
    }
  }
  std::FILE* f = std::fopen(last_file(parent, id).c_str(), "wb");
  if (f == nullptr || std::fwrite(last.data(), 8, last.size(), f) != last.size()) return 1;
  std::fclose(f);
  fmt::print("writer {}: {} updates\n", id, n);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"RelayCell ticker: conflate price updates per symbol"};
  std::uint32_t symbols = 10'000;
  int writers = 2, seconds = 3;
  std::uint64_t rate = 10'000;
  app.add_option("--symbols", symbols, "symbols (relay capacity)")->check(CLI::Range(1u, 1u << 20));
  app.add_option("--writers", writers, "writer processes")->check(CLI::Range(1, 16));
  app.add_option("--seconds", seconds, "how long the writers publish")->check(CLI::Range(1, 3600));
  app.add_option("--rate", rate, "entries the reader drains per second")
      ->check(CLI::Range(1, 100'000'000));
  bool keep = false;
  app.add_flag("--keep", keep, "leave the relay in place at the end (for shmctl inspect)");
  CLI11_PARSE(app, argc, argv);

  (void)shm::Segment::unlink("ticker");
  shm::RelayConfig cfg;
  cfg.policy = shm::policy::kLww;
  cfg.value_bytes = 24;  // timestamp, writer, price
  // One entry per symbol, plus room for the entries the reader holds between
  // take and commit (a symbol written again meanwhile needs a second entry).
  const std::size_t per_tick = static_cast<std::size_t>(std::max<std::uint64_t>(1, rate / 100));
  cfg.max_entries = symbols + static_cast<std::uint32_t>(std::min<std::size_t>(per_tick, symbols));
  cfg.backpressure = {shm::Dimension::Keys, symbols, symbols / 2, shm::Overflow::Conflate};
  auto reader = shm::RelayReader::create("ticker", cfg);
  if (!reader) {
    fmt::print(stderr, "{}\n", reader.error().what());
    return 1;
  }
  std::vector<pid_t> pids;
  const pid_t parent = ::getpid();
  for (int i = 0; i < writers; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(run_writer(static_cast<std::uint64_t>(i), symbols, seconds, parent));
    pids.push_back(pid);
  }
  // Drain `rate` entries per second in 10 ms ticks; keep the newest
  // (timestamp, writer) seen per symbol and the staleness of each entry.
  std::vector<std::uint64_t> seen_ts(symbols, 0), seen_writer(symbols, 0);
  std::vector<std::uint64_t> staleness;
  std::uint64_t drained = 0, went_back = 0;
  auto drain = [&](std::size_t credit) {
    const std::uint64_t t = now_ns();
    auto n = reader->drain(credit, [&](const shm::RelayEntry& e) {
      std::uint64_t ts = 0, wid = 0;
      std::memcpy(&ts, e.value.data(), 8);
      std::memcpy(&wid, e.value.data() + 8, 8);
      if (e.key >= symbols) return;
      if (ts < seen_ts[e.key] || (ts == seen_ts[e.key] && wid < seen_writer[e.key])) {
        ++went_back;  // stamped before the newer price that was already delivered
      } else {
        seen_ts[e.key] = ts;
        seen_writer[e.key] = wid;
      }
      if (staleness.size() < 1'000'000) staleness.push_back(t > ts ? t - ts : 0);
    });
    if (n) drained += *n;
    return n ? *n : 0;
  };
  int running = writers;
  bool writers_ok = true;
  std::uint64_t max_depth = 0;
  while (running > 0) {
    const auto tick = steady_clock::now() + milliseconds(10);
    drain(per_tick);
    max_depth = std::max(max_depth, reader->snapshot().depth);
    std::this_thread::sleep_until(tick);
    int status = 0;
    while (running > 0 && ::waitpid(-1, &status, WNOHANG) > 0) {
      --running;
      writers_ok = writers_ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
  }
  // After the writers stop: the rest, then compare with the newest writes.
  while (drain(1'000'000) > 0) {
  }
  const shm::RelaySnapshot s = reader->snapshot();
  std::sort(staleness.begin(), staleness.end());
  auto pct = [&](double q) {
    return staleness.empty() ? 0.0
                             : static_cast<double>(staleness[static_cast<std::size_t>(
                                   q * static_cast<double>(staleness.size() - 1))]) /
                                   1e6;
  };
  fmt::print(
      "symbols {} writers {}: {} writes, {} conflated, {} drained; max depth {} (bound {}), "
      "relay file {} KiB\n",
      symbols, writers, s.writes, s.conflated, drained, max_depth, symbols,
      reader->segment().header().total_size / 1024);
  fmt::print("staleness of drained prices: p50 {:.1f} ms, p99 {:.1f} ms, max {:.1f} ms\n", pct(0.5),
             pct(0.99), pct(1.0));
  if (!keep) (void)reader->segment().unlink();
  // The newest write per symbol, over every writer, against the reader's view.
  std::uint64_t stale_symbols = 0;
  std::vector<std::uint64_t> newest(symbols, 0), newest_writer(symbols, 0);
  for (int i = 0; i < writers; ++i) {
    std::vector<std::uint64_t> last(symbols, 0);
    const std::string path = last_file(parent, static_cast<std::uint64_t>(i));
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr || std::fread(last.data(), 8, last.size(), f) != last.size()) {
      fmt::print(stderr, "cannot read {}\n", path);
      return 1;
    }
    std::fclose(f);
    std::remove(path.c_str());
    for (std::uint32_t s2 = 0; s2 < symbols; ++s2)
      if (last[s2] > newest[s2] ||
          (last[s2] == newest[s2] && static_cast<std::uint64_t>(i) > newest_writer[s2])) {
        newest[s2] = last[s2];
        newest_writer[s2] = static_cast<std::uint64_t>(i);
      }
  }
  for (std::uint32_t s2 = 0; s2 < symbols; ++s2)
    if (seen_ts[s2] != newest[s2] || seen_writer[s2] != newest_writer[s2]) ++stale_symbols;
  fmt::print(
      "older deliveries absorbed by the fold: {}; symbols whose latest price the reader "
      "missed: {}\n",
      went_back, stale_symbols);
  return writers_ok && stale_symbols == 0 && max_depth <= symbols ? 0 : 1;
}
