// relay_ticker: writers publish price updates for many symbols at full speed;
// one reader drains at a fixed rate and always sees the latest price per
// symbol. Memory is bounded by the symbol count, whatever the overload.
//
//   relay_ticker [--symbols 10000] [--writers 2] [--seconds 3] [--rate 10000]
//
// Creates the relay "ticker" (lww, one entry per symbol, Conflate), forks the
// writer processes, drains `rate` entries per second in the parent, then
// checks that every symbol's last drained price is the newest one written,
// and prints the staleness of what the reader saw and the memory used.
#include <shm/relay/relay.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono;

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(
      duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count());
}

// Writer `id`: prices for every symbol in turn until `seconds` pass; exits 0.
int run_writer(std::uint64_t id, std::uint32_t symbols, int seconds) {
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
      auto r = w->write(s, shm::lww_value(now_ns(), id, shm::u64_value(price)));
      if (!r) {
        fmt::print(stderr, "writer {}: {}\n", id, r.error().what());
        return 1;
      }
    }
  }
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
  CLI11_PARSE(app, argc, argv);

  (void)shm::Segment::unlink("ticker");
  shm::RelayConfig cfg;
  cfg.policy = shm::policy::kLww;
  cfg.value_size = 24;  // timestamp, writer, price
  cfg.capacity = symbols;
  cfg.backpressure = {shm::Dimension::Keys, symbols, symbols / 2, shm::Overflow::Conflate};
  auto reader = shm::RelayReader::create("ticker", cfg);
  if (!reader) {
    fmt::print(stderr, "{}\n", reader.error().what());
    return 1;
  }
  std::vector<pid_t> pids;
  for (int i = 0; i < writers; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(run_writer(static_cast<std::uint64_t>(i), symbols, seconds));
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
      if (ts < seen_ts[e.key] || (ts == seen_ts[e.key] && wid < seen_writer[e.key])) ++went_back;
      seen_ts[e.key] = ts;
      seen_writer[e.key] = wid;
      if (staleness.size() < 1'000'000) staleness.push_back(t > ts ? t - ts : 0);
    });
    if (n) drained += *n;
    return n ? *n : 0;
  };
  const std::size_t per_tick = static_cast<std::size_t>(std::max<std::uint64_t>(1, rate / 100));
  int running = writers;
  std::uint64_t max_depth = 0;
  while (running > 0) {
    const auto tick = steady_clock::now() + milliseconds(10);
    drain(per_tick);
    max_depth = std::max(max_depth, reader->snapshot().depth);
    std::this_thread::sleep_until(tick);
    int status = 0;
    while (running > 0 && ::waitpid(-1, &status, WNOHANG) > 0) --running;
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
  (void)reader->segment().unlink();
  if (went_back != 0) {
    fmt::print(stderr, "{} drained prices were older than one seen before\n", went_back);
    return 1;
  }
  return max_depth <= symbols ? 0 : 1;
}
