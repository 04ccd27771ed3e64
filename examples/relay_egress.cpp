// relay_egress: a relay ahead of an egress (docs/egress.md, "Composition").
//
//   writers --write--> relay "state" --drain(credit)--> egress "uplink" --> transport
//
// Writer processes publish state for many keys at full speed into a keyed
// relay (max policy, Conflate): however fast they write, the relay holds at
// most one entry per key. A bridge (this process) drains the relay only as
// far as the egress pool has room (credit = free pool slots), so the egress
// never refuses and the writers never wait: overload turns into conflation in
// the relay, not into an unbounded queue or a blocked producer. A transport
// process claims from the egress and acknowledges (the link is simulated:
// every send succeeds), folding what it receives per key.
//
//   relay_egress [--keys 2000] [--writers 2] [--rounds 200] [--pool 256] [--window 64]
//
// Writer w owns the keys k with k % writers == w and writes, round after
// round, the round number (1, 2, ...) to each of them; the last is `rounds`. At
// the end the transport checks that it received, for every key, the last
// round, and prints how many writes the relay conflated away. Exits 0 when
// every key arrived with its last value, 1 otherwise.
//
// Spill (the SpillStore of the RelayCell specification) would sit behind the
// relay for overflow that must not be conflated; it is not built yet.
#include <shm/egress/egress.hpp>
#include <shm/relay/relay.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;

constexpr std::uint64_t kEndKey = ~0ull;  // the bridge's last payload: no more data

struct Wire {  // the egress payload: one drained relay entry
  std::uint64_t key;
  std::uint64_t value;
  std::uint64_t ops;  // relay ops merged into this entry
};

int run_writer(std::uint64_t id, std::uint32_t writers, std::uint32_t keys, std::uint32_t rounds) {
  auto w = shm::RelayWriter::open("state");
  if (!w) {
    fmt::print(stderr, "writer {}: {}\n", id, w.error().what());
    return 1;
  }
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  for (std::uint64_t r = 0; r < rounds; ++r)
    for (std::uint64_t k = id; k < keys; k += writers) {
      for (;;) {
        auto res = w->write(k, shm::u64_value(r + 1), 10s);  // 0 is max's identity
        if (!res) {
          fmt::print(stderr, "writer {}: {}\n", id, res.error().what());
          return 1;
        }
        // Full: every entry is pending or in the reader's hand (nothing was
        // written); the reader frees entries as it commits, so write again.
        if (res->status != shm::WriteStatus::Full) break;
        if (std::chrono::steady_clock::now() > deadline) {
          fmt::print(stderr, "writer {}: the relay stayed full for 60 s\n", id);
          return 1;
        }
        std::this_thread::yield();
      }
    }
  return 0;
}

// The transport: claims, "sends", acknowledges; folds max per key.
int run_transport(std::uint32_t keys, std::uint32_t rounds) {
  auto t = shm::EgressTransport::open("uplink");
  if (!t) {
    fmt::print(stderr, "transport: {}\n", t.error().what());
    return 1;
  }
  std::vector<std::uint64_t> latest(keys, 0);
  std::vector<bool> seen(keys, false);
  std::vector<std::byte> buf;
  std::uint64_t messages = 0, ops = 0;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  for (;;) {
    if (std::chrono::steady_clock::now() > deadline) {
      fmt::print(stderr, "transport: no end marker within 120 s\n");
      return 1;
    }
    auto c = t->claim(buf, 1s);
    if (!c) {
      fmt::print(stderr, "transport: {}\n", c.error().what());
      return 1;
    }
    if (c->status != shm::egress::ClaimStatus::Claimed) continue;
    Wire w{};
    if (c->envelope.payload.size() != sizeof w) {
      fmt::print(stderr, "transport: a payload of {} bytes\n", c->envelope.payload.size());
      return 1;
    }
    std::memcpy(&w, c->envelope.payload.data(), sizeof w);
    // The link: every send arrives; the receiver acknowledges at once.
    if (auto a = t->ack(c->envelope.sequence); !a) {
      fmt::print(stderr, "transport: {}\n", a.error().what());
      return 1;
    }
    if (w.key == kEndKey) break;
    ++messages;
    ops += w.ops;
    if (w.key >= keys) {
      fmt::print(stderr, "transport: key {} out of range\n", w.key);
      return 1;
    }
    latest[w.key] = std::max(latest[w.key], w.value);
    seen[w.key] = true;
  }
  std::uint64_t wrong = 0;
  for (std::uint32_t k = 0; k < keys; ++k)
    if (!seen[k] || latest[k] != rounds) ++wrong;
  fmt::print("transport: {} messages carried {} relay ops; {} keys, {} without their last value\n",
             messages, ops, keys, wrong);
  std::fflush(stdout);  // the process ends with _exit
  return wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"A relay ahead of an egress: conflation and backpressure before reliable send"};
  std::uint32_t keys = 2000, writers = 2, rounds = 200, pool = 256, window = 64;
  app.add_option("--keys", keys, "keys")->check(CLI::Range(1u, 1u << 20));
  app.add_option("--writers", writers, "writer processes")->check(CLI::Range(1u, 16u));
  app.add_option("--rounds", rounds, "values written to each key")->check(CLI::Range(1u, 1u << 24));
  app.add_option("--pool", pool, "egress pool (payloads retained)")
      ->check(CLI::Range(2u, 1u << 20));
  app.add_option("--window", window, "egress in-flight window")->check(CLI::Range(1u, 1u << 20));
  CLI11_PARSE(app, argc, argv);
  if (window > pool) {
    fmt::print(stderr, "--window {} must not exceed --pool {}\n", window, pool);
    return 2;
  }

  (void)shm::Segment::unlink("state");
  (void)shm::Segment::unlink("uplink");
  shm::RelayConfig cfg;
  cfg.policy = shm::policy::kMax;
  cfg.value_bytes = 8;
  // One entry per key, plus the entries the bridge holds between take and
  // commit (at most a pool's worth): a key drained and written again needs a
  // second entry until the first is committed.
  cfg.max_entries = keys + pool;
  cfg.backpressure = {shm::Dimension::Keys, keys, keys / 2, shm::Overflow::Conflate};
  auto relay = shm::RelayReader::create("state", cfg);
  if (!relay) {
    fmt::print(stderr, "{}\n", relay.error().what());
    return 1;
  }
  shm::EgressParams params;
  params.max_payloads = pool;
  params.slot_bytes = sizeof(Wire);
  params.inflight_limit = window;
  auto egress = shm::Egress::create("uplink", params);
  if (!egress) {
    fmt::print(stderr, "{}\n", egress.error().what());
    return 1;
  }
  const pid_t transport = ::fork();
  if (transport == 0) ::_exit(run_transport(keys, rounds));
  std::vector<pid_t> pids;
  for (std::uint32_t i = 0; i < writers; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(run_writer(i, writers, keys, rounds));
    pids.push_back(pid);
  }

  // The bridge: relay -> egress, with credit = free slots in the egress pool.
  std::uint64_t forwarded = 0, max_retained = 0;
  bool ok = true;
  auto bridge = [&](std::chrono::nanoseconds wait) -> std::size_t {
    const auto p = egress->snapshot();
    const std::uint64_t retained =
        p.consistent ? p.pending + p.inflight + p.parked + p.terminal : std::uint64_t{pool};
    max_retained = std::max(max_retained, retained);
    const std::size_t credit = retained < pool ? pool - retained : 0;
    if (credit == 0) {
      std::this_thread::sleep_for(100us);  // the transport frees slots as it acks
      return 0;
    }
    if (auto ready = relay->wait(wait); !ready || !*ready) return 0;
    auto n = relay->drain(credit, [&](const shm::RelayEntry& e) {
      const Wire w{e.key, shm::u64_of(e.value), e.op_count};
      // Never Full: the credit was the pool's free space and only the bridge enqueues.
      auto q = egress->enqueue(std::as_bytes(std::span(&w, 1)), 10s);
      if (!q || q->status != shm::egress::EnqueueStatus::Enqueued) ok = false;
      ++forwarded;
    });
    return n ? *n : 0;
  };
  std::size_t running = pids.size();
  bool writers_ok = true;
  while (running > 0 && ok) {
    (void)bridge(10ms);
    int status = 0;
    for (pid_t& pid : pids)
      if (pid > 0 && ::waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        --running;
        writers_ok = writers_ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
      }
  }
  // The writers are done: forward what is left, then the end marker.
  while (ok && (relay->snapshot().depth > 0 || relay->snapshot().in_hand > 0)) (void)bridge(0ns);
  const Wire end{kEndKey, 0, 0};
  auto q = egress->enqueue(std::as_bytes(std::span(&end, 1)), 30s);
  ok = ok && q && q->status == shm::egress::EnqueueStatus::Enqueued;
  int status = 0;
  (void)::waitpid(transport, &status, 0);
  const bool transport_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;

  const shm::RelaySnapshot s = relay->snapshot();
  const auto p = egress->projection();
  fmt::print(
      "writers {} keys {} rounds {}: {} writes, {} merged into open entries, {} forwarded to the "
      "egress ({:.1f} writes per message)\n",
      writers, keys, rounds, s.writes, s.merged, forwarded,
      static_cast<double>(s.writes) / static_cast<double>(std::max<std::uint64_t>(forwarded, 1)));
  fmt::print(
      "relay: {} conflated while full, {} refused full (written again), {} dropped; egress pool "
      "peak {} of {}, acked through {}\n",
      s.conflated, s.refused_full, s.dropped, max_retained, pool,
      p && p->acked_through ? fmt::format("{}", *p->acked_through) : std::string("none"));
  (void)relay->segment().unlink();
  (void)egress->segment().unlink();
  const bool all = ok && writers_ok && transport_ok && s.dropped == 0;
  fmt::print("every key delivered with its last value: {}\n", all);
  return all ? 0 : 1;
}
