// shm-bridge under random kill -9 (issue 36, "Tests"): a producer writes
// records into host A's ring, the export bridge carries them into a
// JetStream stream, the import bridge carries them into host B's ring, where
// a consumer checks every record (sequence + CRC32C). Meanwhile the export
// bridge, the import bridge and nats-server (restarted on its port and
// store) are killed -9 at random moments, alone or the export bridge and the
// server together, and stay down for a time either shorter or longer than
// the stream's duplicate window (1.5 s, the stream made by the test): a
// short outage is covered by JetStream's memory of message ids, a long one
// only by the bridge reading the route's position from the stream. Every
// record must arrive once, in order, and one more record written after the
// loop must be the next to arrive (a late duplicate would come first).
//
// Scale: 40 outages over 200,000 records in the normal lane, fewer under
// the sanitizers. Knobs for long or replayed runs (the schedule of targets,
// down times and moments is drawn from the seed; the processes' timing is
// not, so a replay repeats the schedule, not every interleaving):
//   LIBSHM_BRIDGE_KILL_SEED      the seed (printed at the start; decimal or 0x...)
//   LIBSHM_BRIDGE_KILLS          the number of outages
//   LIBSHM_BRIDGE_KILL_MESSAGES  the number of records
//   LIBSHM_BRIDGE_KILL_SECONDS   the test's own deadline (default 240 s; the
//                                ctest TIMEOUT of the suite's tests is 300 s)
#include "bridge/state.hpp"
#include "common/nats_server.hpp"
#include "common/scale.hpp"
#include "integration/bridge/bridge_route.hpp"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace shm::bridge_kill_loop_test {
namespace {

using namespace std::chrono_literals;
namespace br = shm::test::bridge_route;
using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kWindow = 1500ms;  // the stream's duplicate window
constexpr std::uint64_t kDefaultSeed = 0x36b41d9eull;
// How far the producer may run ahead of the consumer (records): more than
// ring A (64 KiB), the egress (1024) and a publish window hold together.
constexpr std::uint64_t kLead = 4096;

#if defined(__SANITIZE_THREAD__)
constexpr std::uint64_t kDefaultOutages = 8;
#elif defined(__SANITIZE_ADDRESS__)
constexpr std::uint64_t kDefaultOutages = 12;
#else
constexpr std::uint64_t kDefaultOutages = 40;
#endif

std::uint64_t env_number(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const std::uint64_t n = std::strtoull(v, &end, 0);
  return end != v && *end == '\0' ? n : fallback;
}

// What one outage takes down.
enum class Target : std::uint8_t { Export, Import, Server, ExportAndServer };
constexpr std::array kTargets{Target::Export, Target::Import, Target::Server,
                              Target::ExportAndServer};

const char* name_of(Target t) {
  switch (t) {
    case Target::Export:
      return "export bridge";
    case Target::Import:
      return "import bridge";
    case Target::Server:
      return "nats-server";
    case Target::ExportAndServer:
      break;
  }
  return "export bridge + nats-server";
}

struct Outage {
  Target target = Target::Export;
  bool longer_than_window = false;
  std::chrono::milliseconds down{0};
  std::chrono::milliseconds jitter{0};  // after the consumer passed the outage's mark
};

// The outages: the targets in shuffled blocks of all four, each target's
// down times alternating between shorter (0-500 ms) and longer (window +
// 0.5-1.5 s) than the duplicate window, from a random first one; so with two
// blocks or more every target meets both.
std::vector<Outage> schedule(std::mt19937_64& rng, std::uint64_t count) {
  std::vector<Outage> out;
  std::map<Target, bool> next_long;
  for (Target t : kTargets) next_long[t] = (rng() & 1) != 0;
  auto block = kTargets;
  while (out.size() < count) {
    std::shuffle(block.begin(), block.end(), rng);
    for (Target t : block) {
      if (out.size() == count) break;
      Outage o;
      o.target = t;
      o.longer_than_window = next_long[t];
      next_long[t] = !next_long[t];
      o.down = o.longer_than_window ? kWindow + std::chrono::milliseconds(500 + rng() % 1001)
                                    : std::chrono::milliseconds(rng() % 501);
      o.jitter = std::chrono::milliseconds(rng() % 21);
      out.push_back(o);
    }
  }
  return out;
}

class BridgeKillLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(shm::test::bin_path("shm-bridge")))
        << shm::test::bin_path("shm-bridge") << " missing although this build makes it";
    ASSERT_FALSE(shm::test::nats_server_program().empty())
        << "nats-server was not found at configure time (scripts/setup.sh installs it)";
  }

  // The test's own deadline passed, or the stream or a bridge failed: the
  // failure says where the stream stood and what each process wrote last.
  [[nodiscard]] std::string context() {
    return fmt::format(
        "{}; {} of {} outages done{}\n--- export bridge ({} runs), last output:\n{}\n--- import "
        "bridge ({} runs), last output:\n{}\n--- nats-server log (this run):\n{}",
        stream_->position(), done_, outages_.size(),
        current_.empty() ? "" : ", in outage " + std::to_string(done_ + 1) + ": " + current_,
        exporter_->runs(), br::tail_of(exporter_->all_output()), importer_->runs(),
        br::tail_of(importer_->all_output()), br::tail_of(server_->log(), 3000));
  }

  [[nodiscard]] std::chrono::milliseconds left() const {
    return std::max(
        0ms, std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()));
  }

  // Polls until `done` (true) while watching the stream, the bridges and the
  // deadline (false, with a failure that says where the stream stood).
  bool wait_until(const std::string& what, const std::function<bool()>& done) {
    const std::string why =
        br::wait_for(what, *stream_, {exporter_.get(), importer_.get()}, deadline_, done);
    if (why.empty()) return true;
    ADD_FAILURE() << why << " (the kill loop's deadline: " << deadline_seconds_ << " s)\n"
                  << context();
    return false;
  }

  // kill -9 of a running bridge (it must not have stopped by itself).
  bool kill_bridge(br::BridgeProcess& b) {
    const int rc = b.kill9();
    if (rc == 128 + SIGKILL) return true;
    ADD_FAILURE() << "the " << b.role() << " bridge had stopped by itself before its kill (exit "
                  << "status " << rc << ")\n"
                  << context();
    return false;
  }

  bool start_bridge(br::BridgeProcess& b) {
    b.start();
    const auto patience = std::min<std::chrono::milliseconds>(60s, left());
    if (b.wait_ready(patience)) return true;
    ADD_FAILURE() << "the " << b.role() << " bridge started again did not print READY " << b.role()
                  << " within " << patience.count() << " ms"
                  << (patience < 60s
                          ? fmt::format(" (the kill loop's deadline: {} s)", deadline_seconds_)
                          : std::string())
                  << "\n"
                  << context();
    return false;
  }

  bool restart_server(std::chrono::milliseconds down) {
    server_->kill(SIGKILL);
    std::this_thread::sleep_for(down);
    const auto patience = std::min<std::chrono::milliseconds>(30s, left());
    if (server_->start_again(patience)) return true;
    ADD_FAILURE() << "nats-server did not come back on its store within " << patience.count()
                  << " ms"
                  << (patience < 30s
                          ? fmt::format(" (the kill loop's deadline: {} s)", deadline_seconds_)
                          : std::string())
                  << "\n"
                  << context();
    return false;
  }

  bool run_outage(const Outage& o) {
    switch (o.target) {
      case Target::Export:
        if (!kill_bridge(*exporter_)) return false;
        std::this_thread::sleep_for(o.down);
        return start_bridge(*exporter_);
      case Target::Import:
        if (!kill_bridge(*importer_)) return false;
        std::this_thread::sleep_for(o.down);
        return start_bridge(*importer_);
      case Target::Server:
        return restart_server(o.down);
      case Target::ExportAndServer:
        // Both down at once: the server comes back first, the bridge after.
        if (!kill_bridge(*exporter_)) return false;
        if (!restart_server(o.down)) return false;
        return start_bridge(*exporter_);
    }
    return false;
  }

  br::HostRoot a_, b_;
  std::unique_ptr<shm::test::NatsServer> server_;
  std::unique_ptr<br::BridgeProcess> exporter_, importer_;
  std::unique_ptr<br::RecordStream> stream_;
  std::vector<Outage> outages_;
  std::size_t done_ = 0;
  std::string current_;
  std::uint64_t deadline_seconds_ = 240;
  Clock::time_point deadline_{};
};

TEST_F(BridgeKillLoopTest, RandomKillsOfBothBridgesAndTheServerLoseAndDuplicateNothing) {
  const auto began = Clock::now();
  const std::uint64_t seed = env_number("LIBSHM_BRIDGE_KILL_SEED", kDefaultSeed);
  const std::uint64_t count = env_number("LIBSHM_BRIDGE_KILLS", kDefaultOutages);
  const std::uint64_t n = env_number("LIBSHM_BRIDGE_KILL_MESSAGES", shm::test::scaled(200'000));
  deadline_seconds_ = env_number("LIBSHM_BRIDGE_KILL_SECONDS", 240);
  deadline_ = began + std::chrono::seconds(deadline_seconds_);
  ASSERT_GT(n, count) << "fewer records than outages";
  std::mt19937_64 rng(seed);
  outages_ = schedule(rng, count);
  std::printf(
      "kill loop: seed 0x%llx (replay: LIBSHM_BRIDGE_KILL_SEED=0x%llx), %llu outages over "
      "%llu records, duplicate window %lld ms, deadline %llu s\n",
      static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed),
      static_cast<unsigned long long>(count), static_cast<unsigned long long>(n),
      static_cast<long long>(kWindow.count()), static_cast<unsigned long long>(deadline_seconds_));
  std::fflush(stdout);
  RecordProperty("seed", fmt::format("0x{:x}", seed));

  server_ = std::make_unique<shm::test::NatsServer>();
  ASSERT_TRUE(server_->ready()) << server_->log();
  {
    auto link = br::test_link({server_->url()});
    ASSERT_TRUE(link) << link.error().message;
    const std::string made = br::create_stream(**link, kWindow);
    ASSERT_TRUE(made.empty()) << made;
  }
  ASSERT_EQ(br::make_ring(a_), "");
  ASSERT_EQ(br::make_ring(b_), "");
  exporter_ = std::make_unique<br::BridgeProcess>("export", br::export_args({server_->url()}, a_));
  importer_ = std::make_unique<br::BridgeProcess>("import", br::import_args({server_->url()}, b_));
  exporter_->start();
  ASSERT_TRUE(exporter_->wait_ready(30s)) << exporter_->all_output();
  importer_->start();
  ASSERT_TRUE(importer_->wait_ready(30s)) << importer_->all_output();

  stream_ = std::make_unique<br::RecordStream>(a_, b_);
  stream_->start_consumer(n + 1);  // the stream, then one more record
  // At most kLead records ahead of the consumer: the export, JetStream and
  // the import all move through the loop.
  stream_->produce(0, n, kLead);

  // Outage i comes once the consumer has received (i + 1) n / (count + 1)
  // records, after a random 0-20 ms.
  std::map<std::string, std::uint64_t> tally;
  std::uint64_t kills = 0;
  for (done_ = 0; done_ < outages_.size(); ++done_) {
    const Outage& o = outages_[done_];
    const std::uint64_t mark = (done_ + 1) * n / (count + 1);
    current_.clear();
    ASSERT_TRUE(wait_until(fmt::format("the consumer to receive {} records", mark),
                           [&] { return stream_->received() >= mark; }));
    std::this_thread::sleep_for(o.jitter);
    current_ = fmt::format("{} down {} ms, {} than the window", name_of(o.target), o.down.count(),
                           o.longer_than_window ? "longer" : "shorter");
    std::printf("outage %zu/%zu: %s (produced %llu, received %llu)\n", done_ + 1, outages_.size(),
                current_.c_str(), static_cast<unsigned long long>(stream_->produced()),
                static_cast<unsigned long long>(stream_->received()));
    std::fflush(stdout);
    ASSERT_TRUE(run_outage(o));
    ++tally[fmt::format("{} {}", name_of(o.target), o.longer_than_window ? "long" : "short")];
    kills += o.target == Target::ExportAndServer ? 2 : 1;
  }
  current_ = "after the last outage";

  // The rest of the stream, then record n: it must be the next to arrive.
  ASSERT_TRUE(
      wait_until(fmt::format("all {} records", n), [&] { return stream_->received() >= n; }));
  stream_->produce(n, n + 1);
  ASSERT_TRUE(wait_until("the record after the stream", [&] { return stream_->received() > n; }));
  // A late duplicate of anything would still be a failure: a moment to see one.
  std::this_thread::sleep_for(500ms);
  ASSERT_TRUE(wait_until("nothing more", [] { return true; }));
  EXPECT_EQ(stream_->received(), n + 1);

  const double took = std::chrono::duration<double>(Clock::now() - began).count();
  std::string outages;
  for (const auto& [what, times] : tally) outages += fmt::format(" {}: {};", what, times);
  std::uint64_t duplicates = 0;
  if (auto s = shm::bridge::StateSegment::observe("orders-bridge-import",
                                                  shm::bridge::Route::Import, b_.path()))
    duplicates = s->data().duplicates.load();
  std::printf(
      "kill loop: %llu records + 1 once, in order; %zu outages (%llu kill -9):%s export "
      "bridge: %zu resyncs (start %zu, reconnected %zu, wrong last msg id %zu, wrong last "
      "sequence %zu; %zu acknowledged what the stream held), %zu publish_failed lines; "
      "import bridge: %llu duplicates dropped; took %.1f s\n",
      static_cast<unsigned long long>(n), outages_.size(), static_cast<unsigned long long>(kills),
      outages.c_str(), exporter_->count("event=resynced"), exporter_->count("reason=start"),
      exporter_->count("reason=reconnected"), exporter_->count("reason=wrong_last_msg_id"),
      exporter_->count("reason=wrong_last_sequence"),
      exporter_->count("event=resynced") - exporter_->count("acknowledged_from_stream=0\n"),
      exporter_->count("event=publish_failed"), static_cast<unsigned long long>(duplicates), took);
  std::fflush(stdout);
  EXPECT_GE(kills, count);
  stream_->stop();
}

}  // namespace
}  // namespace shm::bridge_kill_loop_test
