// shm-bridge on a three-node JetStream cluster whose stream leader dies
// during a quiet period (issue 36, "Tests"): the stream is replicated three
// times with a one-second duplicate window (made by the test); half of the
// records go through, the route stays idle for three windows, the two
// followers are restarted one after the other (killed -9, started again on
// their stores: they rebuild the route's last message id from the messages
// inside the window, so they have none), then the stream's leader, read
// from stream info, is killed -9 and not restarted, and the other half is
// written. The new leader knows the route's last message only from its
// store, so the export's first publish must find its expectation met there
// (or resynchronise from the stream's last message): every record arrives
// once, in order, one more written after them is the next to arrive, and
// the export acknowledges everything in its egress (the route did not
// stall). (Without the follower restarts the new leader remembers the last
// message id it applied as a follower: an export expecting only message ids
// passed the test.)
//
// The export bridge is connected to a follower first (it loses that
// connection in the restart and reconnects), the import bridge to the
// leader (it loses its connection at the kill, fails over and recreates its
// consumer).
#include "bridge/state.hpp"
#include "common/nats_cluster.hpp"
#include "common/scale.hpp"
#include "integration/bridge/bridge_route.hpp"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace shm::bridge_cluster_leader_test {
namespace {

using namespace std::chrono_literals;
namespace br = shm::test::bridge_route;
using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kWindow = 1000ms;  // the stream's duplicate window

// The export state's `acknowledged` counter (0 until it can be read).
std::uint64_t export_acknowledged(const br::HostRoot& root) {
  auto s = shm::bridge::StateSegment::observe("orders-bridge-export", shm::bridge::Route::Export,
                                              root.path());
  return s ? s->data().acknowledged.load() : 0;
}

TEST(BridgeClusterLeaderTest, StreamLeaderKilledAfterAQuietPeriodLongerThanTheWindow) {
  ASSERT_TRUE(std::filesystem::exists(shm::test::bin_path("shm-bridge")))
      << shm::test::bin_path("shm-bridge") << " missing although this build makes it";
  ASSERT_FALSE(shm::test::nats_server_program().empty())
      << "nats-server was not found at configure time (scripts/setup.sh installs it)";
  const auto began = Clock::now();
  const auto deadline = began + 200s;  // the ctest TIMEOUT is 300 s
  const std::uint64_t n = std::max<std::uint64_t>(shm::test::scaled(20'000), 2'000);

  br::HostRoot a, b;
  shm::test::NatsCluster cluster;
  ASSERT_TRUE(cluster.ready()) << cluster.logs();
  const std::vector<std::string> urls = cluster.urls();
  auto link = br::test_link(urls);
  ASSERT_TRUE(link) << link.error().message;
  {
    const std::string made = br::create_stream(**link, kWindow, 3);
    ASSERT_TRUE(made.empty()) << made << "\n" << cluster.logs();
  }
  // The stream placed: a leader and two current followers.
  br::StreamPlacement placed;
  for (const auto until = Clock::now() + 30s; Clock::now() < until;) {
    placed = br::stream_placement(**link);
    if (!placed.leader.empty() && placed.replicas.size() == 2 && placed.replicas_current) break;
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_FALSE(placed.leader.empty()) << placed.error << "\n" << cluster.logs();
  ASSERT_EQ(placed.replicas.size(), 2u) << "the stream's peers: " << placed.leader;
  // Node i is named "n<i>" (nats_cluster.cpp).
  auto index_of = [&](const std::string& name) -> std::size_t {
    for (std::size_t i = 0; i < urls.size(); ++i)
      if (name == fmt::format("n{}", i)) return i;
    return urls.size();
  };
  const std::size_t leader = index_of(placed.leader);
  ASSERT_LT(leader, urls.size()) << "unknown leader name " << placed.leader;
  const std::size_t follower = index_of(placed.replicas.front());
  ASSERT_LT(follower, urls.size()) << "unknown follower name " << placed.replicas.front();
  // Every node in each bridge's list, the one it connects to first in front.
  auto first = [&](std::size_t i) {
    std::vector<std::string> order{urls[i]};
    for (std::size_t j = 0; j < urls.size(); ++j)
      if (j != i) order.push_back(urls[j]);
    return order;
  };

  ASSERT_EQ(br::make_ring(a), "");
  ASSERT_EQ(br::make_ring(b), "");
  br::BridgeProcess exporter("export", br::export_args(first(follower), a));
  br::BridgeProcess importer("import", br::import_args(first(leader), b));
  exporter.start();
  ASSERT_TRUE(exporter.wait_ready(30s)) << exporter.all_output() << cluster.logs();
  importer.start();
  ASSERT_TRUE(importer.wait_ready(30s)) << importer.all_output() << cluster.logs();

  br::RecordStream stream(a, b);
  auto context = [&] {
    return fmt::format("{}\n--- export bridge:\n{}\n--- import bridge:\n{}\n--- cluster logs:\n{}",
                       stream.position(), br::tail_of(exporter.all_output()),
                       br::tail_of(importer.all_output()), br::tail_of(cluster.logs(), 12000));
  };
  auto wait_until = [&](const std::string& what, const std::function<bool()>& done) {
    const std::string why = br::wait_for(what, stream, {&exporter, &importer}, deadline, done);
    if (!why.empty()) ADD_FAILURE() << why << "\n" << context();
    return why.empty();
  };

  // The first half, through the route and acknowledged in the egress.
  stream.start_consumer(n + 1);
  stream.produce(0, n / 2);
  ASSERT_TRUE(wait_until(fmt::format("the first {} records", n / 2), [&] {
    return stream.received() >= n / 2 && export_acknowledged(a) >= n / 2;
  }));
  const auto quiet = Clock::now();
  // Quiet for three windows; then a rolling restart as an upgrade would
  // make it: each follower killed -9 and started again on its store (it
  // rebuilds the stream's last message id from the messages inside the
  // duplicate window: none), back in the stream's group, current; then the
  // leader killed -9 and not started again. The new leader is a node that
  // does not remember the route's last message id: an export expecting it
  // would be refused for ever (JetStream error 10070).
  std::this_thread::sleep_for(3 * kWindow);
  for (const std::string& name : placed.replicas) {
    const std::size_t i = index_of(name);
    ASSERT_LT(i, urls.size()) << "unknown follower name " << name;
    ASSERT_TRUE(cluster.node(i).restart(SIGKILL)) << cluster.logs();
    const auto restarted = Clock::now();
    // Back in the group: current, and heard from by the leader since it
    // started again.
    auto rejoined = [&](const br::StreamPlacement& p) {
      if (p.leader != placed.leader || p.replicas.size() != 2 || !p.replicas_current) return false;
      for (std::size_t r = 0; r < p.replicas.size(); ++r)
        if (p.replicas[r] == name) return p.replicas_active[r] < Clock::now() - restarted;
      return false;
    };
    br::StreamPlacement now;
    for (const auto until = Clock::now() + 30s; Clock::now() < until;) {
      now = br::stream_placement(**link);
      if (rejoined(now)) break;
      std::this_thread::sleep_for(100ms);
    }
    ASSERT_TRUE(rejoined(now)) << "the stream's group did not settle after the restart of " << name
                               << " (leader \"" << now.leader << "\", " << now.error << ")\n"
                               << context();
  }
  // The leader as it is now (an election while idle is not expected, but the
  // one to kill is the one leading at this moment).
  const br::StreamPlacement before = br::stream_placement(**link);
  ASSERT_FALSE(before.leader.empty()) << before.error << "\n" << context();
  const std::size_t victim = index_of(before.leader);
  ASSERT_LT(victim, urls.size()) << "unknown leader name " << before.leader;
  cluster.node(victim).kill(SIGKILL);
  const auto killed = Clock::now();
  std::printf(
      "cluster: followers restarted, then stream leader %s killed, %.1f s after the last "
      "record (export connected to n%zu first, import to n%zu); the stream holds %llu "
      "messages\n",
      before.leader.c_str(), std::chrono::duration<double>(Clock::now() - quiet).count(), follower,
      leader, static_cast<unsigned long long>(before.messages));
  std::fflush(stdout);

  // The second half, then one more record that must be the next to arrive.
  stream.produce(n / 2, n);
  auto since_kill = [&] { return std::chrono::duration<double>(Clock::now() - killed).count(); };
  ASSERT_TRUE(wait_until("the export's first acknowledgement after the leader's death",
                         [&] { return export_acknowledged(a) > n / 2; }));
  const double exported = since_kill();
  ASSERT_TRUE(wait_until("the first record after the leader's death",
                         [&] { return stream.received() > n / 2; }));
  const double resumed = since_kill();
  ASSERT_TRUE(wait_until(fmt::format("all {} records", n), [&] { return stream.received() >= n; }));
  stream.produce(n, n + 1);
  ASSERT_TRUE(wait_until("the record after the stream", [&] { return stream.received() > n; }));
  // The export route did not stall: its egress is acknowledged through the
  // last record (the stream holds each of them once).
  ASSERT_TRUE(wait_until("the export's acknowledgement of every record",
                         [&] { return export_acknowledged(a) >= n + 1; }));
  std::this_thread::sleep_for(500ms);  // a late duplicate would still fail the consumer
  ASSERT_TRUE(wait_until("nothing more", [] { return true; }));
  EXPECT_EQ(stream.received(), n + 1);
  EXPECT_EQ(export_acknowledged(a), n + 1) << context();
  br::StreamPlacement after;
  for (const auto until = Clock::now() + 30s; Clock::now() < until;) {
    after = br::stream_placement(**link);
    if (!after.leader.empty() && after.messages == n + 1) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_NE(after.leader, before.leader) << after.error;
  EXPECT_EQ(after.messages, n + 1) << "the stream should hold every record once: " << after.error;
  std::printf(
      "cluster: new leader %s; the export stored again %.1f s after the kill, the consumer "
      "received again %.1f s after it; %llu records + 1 once, in order; export: %zu resyncs, "
      "%zu publish_failed lines; took %.1f s\n",
      after.leader.c_str(), exported, resumed, static_cast<unsigned long long>(n),
      exporter.count("event=resynced"), exporter.count("event=publish_failed"),
      std::chrono::duration<double>(Clock::now() - began).count());
  std::printf("%s%s", exporter.lines_with("event=publish_failed").c_str(),
              exporter.lines_with("event=resynced").c_str());
  std::fflush(stdout);
  stream.stop();
}

}  // namespace
}  // namespace shm::bridge_cluster_leader_test
