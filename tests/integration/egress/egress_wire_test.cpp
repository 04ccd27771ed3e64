// Across processes: producers enqueue, a transport process sends to a
// receiver process over a lossy link (drops, duplicates, reordering, lost and
// delayed acks, all simulated by test_egress_worker), and the transport is
// kill -9'd and replaced repeatedly. The receiver must end with every
// sequence exactly once, in order (each producer's payloads in its order),
// and the egress with everything acknowledged.
//
// Size: 20,000 payloads in the normal lane (scaled down under sanitizers),
// not the 1,000,000: every payload costs a locked claim, a datagram
// each way and, on loss, a 5 ms retransmission timeout, and the whole test
// must stay within a few seconds on a loaded 2-core CI machine. The issue's
// size is one environment variable away (payloads per producer, two
// producers; bench/RESULTS.md records such a run):
//   SHM_EGRESS_WIRE_PER_PRODUCER=500000 shm_process_tests --gtest_filter='EgressWire*'
#include "common/scale.hpp"
#include "common/subprocess.hpp"
#include "common/temp_root.hpp"
#include "shm/egress/egress.hpp"
#include "shm/segment/kind.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

namespace shm {
namespace {

using namespace std::chrono_literals;

TEST(EgressWireTest, ReceiverGetsEverySequenceOnceInOrderAcrossTransportKills) {
  test::TempRoot root;
  const char* size = std::getenv("SHM_EGRESS_WIRE_PER_PRODUCER");
  const long per_producer =
      size != nullptr ? std::atol(size) : static_cast<long>(test::scaled(10'000));
  ASSERT_GT(per_producer, 0) << "SHM_EGRESS_WIRE_PER_PRODUCER=" << size;
  const int producers = 2;
  const long total = per_producer * producers;
  EgressParams params;
  params.max_payloads = 4096;
  params.slot_bytes = 32;
  params.inflight_limit = 64;
  params.retry_budget = 1'000'000;  // the link loses packets; nothing may become a dead letter
  params.retry_base = 1ms;
  params.retry_ceiling = 10ms;
  auto e = Egress::create("wire", params);
  ASSERT_TRUE(e);
  const std::string worker = test::helper_path("egress_worker");
  const std::string loss = "0.01";  // each of: drop, duplicate, reorder (and lost acks)
  test::Subprocess receiver({worker, "receive", root.path(), std::to_string(total),
                             std::to_string(producers), loss, "7"});
  ASSERT_TRUE(receiver.wait_for_line("listening", 20s)) << receiver.output();
  std::vector<std::unique_ptr<test::Subprocess>> producer;
  for (int i = 0; i < producers; ++i)
    producer.push_back(std::make_unique<test::Subprocess>(std::vector<std::string>{
        worker, "produce", "wire", std::to_string(i), std::to_string(per_producer)}));
  auto start_transport = [&](int n) {
    auto t = std::make_unique<test::Subprocess>(std::vector<std::string>{
        worker, "transport", "wire", root.path(), loss, std::to_string(n)});
    EXPECT_TRUE(t->wait_for_text("attached", 20s)) << t->output();
    return t;
  };
  auto transport = start_transport(0);
  // Kill k happens once acked_through passes k/(kills+2) of the stream
  // (absolute marks: a mark passed between two polls is not skipped). A fast
  // lane (small counts under sanitizers) may complete before the last marks;
  // their kills then hit an idle transport, still killed and replaced.
  const int kills = 6;
  int killed = 0;
  const auto deadline =
      std::chrono::steady_clock::now() + 120s + std::chrono::milliseconds(total / 2);
  bool complete = false;
  while (std::chrono::steady_clock::now() < deadline && !(complete && killed == kills)) {
    complete = complete || receiver.wait_for_text("complete", 5ms);
    const auto p = e->snapshot();
    const std::uint64_t acked = p.consistent && p.acked_through ? *p.acked_through + 1 : 0;
    const std::uint64_t mark =
        static_cast<std::uint64_t>(total) * static_cast<std::uint64_t>(killed + 1) / (kills + 2);
    if (killed < kills && acked >= mark) {
      transport->kill(SIGKILL);
      ASSERT_EQ(transport->wait(20s), 128 + SIGKILL);
      ++killed;
      transport = start_transport(killed);
    }
  }
  ASSERT_TRUE(complete) << "receiver: " << receiver.output();
  EXPECT_EQ(killed, kills);
  for (auto& p : producer) EXPECT_EQ(p->wait(20s), 0) << p->output();
  EXPECT_NE(receiver.output().find("complete delivered=" + std::to_string(total)),
            std::string::npos)
      << receiver.output();
  // The last transport drains the acknowledgements into the egress.
  const auto drained = std::chrono::steady_clock::now() + 30s;
  egress::Projection p;
  while (std::chrono::steady_clock::now() < drained) {
    p = *e->projection();
    if (p.acked_through && *p.acked_through + 1 == static_cast<std::uint64_t>(total)) break;
    std::this_thread::sleep_for(2ms);
  }
  ASSERT_TRUE(p.acked_through.has_value());
  EXPECT_EQ(*p.acked_through + 1, static_cast<std::uint64_t>(total));
  EXPECT_EQ(p.next_sequence, static_cast<std::uint64_t>(total));
  EXPECT_EQ(p.pending + p.inflight + p.parked + p.terminal, 0u);
  EXPECT_GE(p.generation, static_cast<std::uint64_t>(kills) + 1);
  auto lines = e->verify();
  ASSERT_TRUE(lines);
  EXPECT_TRUE(lines->empty()) << lines->front();
  transport->kill(SIGKILL);
  receiver.kill(SIGKILL);
}

}  // namespace
}  // namespace shm
