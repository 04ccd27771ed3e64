// The ledger soak's verdict is only as good as its verifier: run
// test_soak_ledger_verify against real ledgers and hand-written logs, and
// check that it passes a ledger back at zero and names every leaked charge,
// unreclaimed ticket of a killed process, open pool and logged violation.
#include "common/log_dir.hpp"
#include "common/subprocess.hpp"
#include "common/temp_root.hpp"
#include "common/text.hpp"
#include "soak/soak_ledger.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

namespace shm {
namespace {

using namespace std::chrono_literals;

using test::contains;

class SoakLedgerVerifier : public ::testing::Test {
 protected:
  test::TempRoot root_;
  test::LogDir dir{"libshm-soak-ledger-verify"};
  void SetUp() override {
    // One worker killed once, then stopped cleanly; a checker that saw nothing
    // wrong, killed once after 512 samples (30 verified, 1 + 2 skipped), then
    // stopped cleanly after 400 (25 verified, 3 + 1 skipped).
    dir.write("ledger-worker-0.log",
              "\nS 100 1000 w0.100.a w0.100.b\nF 1001\n\nS 101 2000 w0.101.a w0.101.b\nF 2001\n"
              "X 500 200 30\n");
    dir.write("ledger-checker.log",
              "\nS 102 1000\nF 1001\nP 256 16 0 0\nP 512 30 1 2\n\nS 103 2000\nF 2001\n"
              "X 400 25 0 3 1\n");
  }

  int verify(std::string& out) {
    test::Subprocess p({test::helper_path("soak_ledger_verify"), "--ledger", "soak.ledger", "--dir",
                        dir.string(), "--workers", "1", "--sidecar-log",
                        (dir.path() / "sidecar.out").string()});
    const int rc = p.wait(20s);
    out = p.output();
    return rc;
  }
};

TEST_F(SoakLedgerVerifier, AcceptsALedgerBackAtZeroAndCleanLogs) {
  {
    auto l = Ledger::create("soak.ledger", soak::ledger_config());
    ASSERT_TRUE(l) << l.error().what();
    auto pool = l->open_pool({"p", {{"all", 4096, {}}}, 0});
    ASSERT_TRUE(pool) << pool.error().what();
    auto t = l->reserve(*pool, CategoryId{0}, 700);
    ASSERT_TRUE(t && t->has_value());
    ASSERT_TRUE(l->commit(**t));
    ASSERT_TRUE(l->release(**t));
    ASSERT_TRUE(l->close_pool(*pool));
  }
  // The sidecar's reclaim lines: only those of this segment count.
  dir.write(
      "sidecar.out",
      "ts=1 level=info event=attacher_reclaimed segment=soak.ledger slot=9 role=member pid=7 "
      "generation=1 actions=\"slot 9 (pid 7) generation 1: released 16 tickets (9178 bytes), "
      "closed 2 pools\"\n"
      "ts=2 level=info event=attacher_reclaimed segment=soak.ledger.other slot=3 role=member "
      "actions=\"slot 3 (pid 8) generation 1: released 5 tickets (1 bytes), closed 2 pools\"\n"
      "ts=3 level=info event=attacher_dead segment=soak.ledger slot=4 role=member\n"
      "ts=4 level=info event=attacher_reclaimed segment=soak.ledger slot=4 role=member "
      "actions=\"slot 4 (pid 9) generation 2: released 2 tickets (10 bytes), closed 2 pools\"\n");
  std::string out;
  EXPECT_EQ(verify(out), 0) << out;
  EXPECT_TRUE(contains(out, "their tickets reclaimed: 0, 18 of them by the sidecar")) << out;
  EXPECT_TRUE(contains(out, "operations: 3 (1 reserves, 1 commits, 0 replaces, 1 releases")) << out;
  EXPECT_TRUE(contains(out, "killed workers: 1;")) << out;
  EXPECT_TRUE(
      contains(out,
               "never over a limit: 912 samples (55 verified against the tickets, 7 skipped: "
               "4 busy, 3 in progress), 0 violations"))
      << out;
}

TEST_F(SoakLedgerVerifier, RejectsAChargeStillHeld) {
  auto l = Ledger::create("soak.ledger", soak::ledger_config());
  ASSERT_TRUE(l) << l.error().what();
  auto pool = l->open_pool({"leaky", {{"all", 4096, {}}}, 0});
  ASSERT_TRUE(pool) << pool.error().what();
  auto t = l->reserve(*pool, CategoryId{1}, 900);  // "meta", held while the verifier looks
  ASSERT_TRUE(t && t->has_value());
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(contains(out,
                       "VIOLATION: global: used 900 reserved 900 tickets 1 after every worker "
                       "stopped"))
      << out;
  EXPECT_TRUE(contains(out, "VIOLATION: category 'meta': used 900")) << out;
  EXPECT_TRUE(contains(out, "VIOLATION: pool 'leaky' is still open")) << out;
  EXPECT_TRUE(contains(out, "VIOLATION: 1 ticket(s) still live")) << out;
  EXPECT_TRUE(contains(out, "is live: owner slot")) << out;
  EXPECT_TRUE(contains(out, "category 1, 900 bytes")) << out;
}

TEST_F(SoakLedgerVerifier, RejectsTicketsOfAKilledProcessNobodyReclaimed) {
  auto l = Ledger::create("soak.ledger", soak::ledger_config());
  ASSERT_TRUE(l) << l.error().what();
  auto pool = l->open_pool({"shared", {{"all", 8192, {}}}, 0});
  ASSERT_TRUE(pool) << pool.error().what();
  test::Subprocess holder(
      {test::helper_path("ledger_worker"), "hold", "soak.ledger", "shared", "3", "100"});
  ASSERT_TRUE(holder.wait_for_line("ready", 20s)) << holder.output();
  holder.kill(SIGKILL);
  EXPECT_EQ(holder.wait(20s), 128 + SIGKILL);
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(contains(out, "VIOLATION: verify: 3 tickets (300 bytes) belong to attachment slot"))
      << out;
  EXPECT_TRUE(contains(out, "pending reclaim")) << out;
  EXPECT_TRUE(contains(out, "VIOLATION: 3 ticket(s) still live")) << out;
}

TEST_F(SoakLedgerVerifier, RejectsViolationsTheProcessesLogged) {
  {
    auto l = Ledger::create("soak.ledger", soak::ledger_config());
    ASSERT_TRUE(l) << l.error().what();
  }
  dir.write("ledger-worker-0.log",
            "\nS 100 1000 w0.100.a w0.100.b\nF 1001\n\nV pool 'w0.100.a' account 'data': used 5\n");
  dir.write("ledger-checker.log",
            "\nS 102 1000\nF 1001\nV sample 9: global: used 99000 reserved 0 outside [0, 98304]\n"
            "X 400 25 1 0 0\n");
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(contains(out, "VIOLATION: ledger-worker-0: pool 'w0.100.a' account 'data': used 5"))
      << out;
  EXPECT_TRUE(contains(out, "VIOLATION: ledger-worker-0: did not stop cleanly")) << out;
  EXPECT_TRUE(contains(out, "VIOLATION: ledger-checker: sample 9: global: used 99000")) << out;
  EXPECT_TRUE(contains(out, "VIOLATION: ledger-checker: 1 violation(s) while sampling")) << out;
}

// Samples whose snapshot could not be had verified nothing: a checker that
// never had one checked no derived counter, however many samples it took.
TEST_F(SoakLedgerVerifier, RejectsACheckerThatVerifiedNoSnapshot) {
  {
    auto l = Ledger::create("soak.ledger", soak::ledger_config());
    ASSERT_TRUE(l) << l.error().what();
  }
  dir.write("ledger-checker.log",
            "\nS 102 1000\nF 1001\nP 256 0 0 16\n\nS 103 2000\nF 2001\nX 300 0 0 2 16\n");
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(
      contains(out,
               "VIOLATION: ledger-checker: no snapshot could be verified against the tickets "
               "(34 skipped: 2 with writers too busy, 32 with a mutation in progress)"))
      << out;
  EXPECT_TRUE(contains(out,
                       "556 samples (0 verified against the tickets, 34 skipped: 2 busy, 32 in "
                       "progress)"))
      << out;
}

// End to end: the real soak checker sampling a ledger whose last holder was
// killed inside the lock (no snapshot can be had until somebody repairs) logs
// every attempt as skipped "in progress", none as verified, and the verifier
// rejects the run.
TEST_F(SoakLedgerVerifier, CheckerOfAStalledLedgerVerifiesNothingAndTheRunIsRejected) {
  auto l = Ledger::create("soak.ledger", soak::ledger_config());
  ASSERT_TRUE(l) << l.error().what();
  ASSERT_TRUE(l->open_pool({"crash", {{"all", 4096, {}}}, 0}));
  ASSERT_TRUE(l->open_pool({"other", {{"all", 4096, {}}}, 0}));
  test::Subprocess holder(
      {test::helper_path("ledger_worker"), "crash", "soak.ledger", "reserve-published"});
  ASSERT_TRUE(holder.wait_for_line("inside", 20s)) << holder.output();
  holder.kill(SIGKILL);
  ASSERT_EQ(holder.wait(20s), 128 + SIGKILL);

  const std::string log = (dir.path() / "ledger-checker.log").string();
  std::filesystem::remove(log);
  test::Subprocess checker({test::helper_path("soak_ledger_checker"), "--ledger", "soak.ledger",
                            "--log", log, "--interval-us", "1"},
                           false);
  // 256 samples: 16 snapshot attempts, each given up after its retries.
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  auto text = [&] {
    std::ifstream in(log);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  while (!contains(text(), "\nP 256 ") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(contains(text(), "\nP 256 0 0 16\n")) << text();
  checker.kill(SIGTERM);
  ASSERT_EQ(checker.wait(60s), 0);
  unsigned long long samples = 0, verified = 1, over = 1, busy = 1, in_progress = 0;
  const std::string all = text();
  const auto x = all.rfind("\nX ");
  ASSERT_NE(x, std::string::npos) << all;
  ASSERT_EQ(std::sscanf(all.c_str() + x, "\nX %llu %llu %llu %llu %llu", &samples, &verified, &over,
                        &busy, &in_progress),
            5)
      << all;
  EXPECT_GE(samples, 256u) << all;
  EXPECT_EQ(verified, 0u) << all;
  EXPECT_EQ(over, 0u) << all;
  EXPECT_EQ(busy, 0u) << all;
  EXPECT_EQ(in_progress, samples / 16) << all;

  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(contains(out,
                       "VIOLATION: ledger-checker: no snapshot could be verified against the "
                       "tickets"))
      << out;
}

TEST_F(SoakLedgerVerifier, RejectsACheckerStopLineWithoutItsSkipCounts) {
  {
    auto l = Ledger::create("soak.ledger", soak::ledger_config());
    ASSERT_TRUE(l) << l.error().what();
  }
  dir.write("ledger-checker.log", "\nS 102 1000\nF 1001\nX 400 25 0\n");
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(contains(out, "VIOLATION: ledger-checker: X line of incarnation 0 has 2 fields"))
      << out;
}

TEST_F(SoakLedgerVerifier, RejectsAMissingLedger) {
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(contains(out, "VIOLATION: ledger 'soak.ledger': ")) << out;
}

}  // namespace
}  // namespace shm
