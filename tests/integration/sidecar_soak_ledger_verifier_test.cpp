// The ledger soak's verdict is only as good as its verifier: run
// test_soak_ledger_verify against real ledgers and hand-written logs, and
// check that it passes a ledger back at zero and names every leaked charge,
// unreclaimed ticket of a killed process, open pool and logged violation.
#include "common/log_dir.hpp"
#include "common/subprocess.hpp"
#include "common/temp_root.hpp"
#include "helpers/soak_ledger.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>

namespace shm {
namespace {

using namespace std::chrono_literals;

bool has(const std::string& out, const std::string& what) {
  return out.find(what) != std::string::npos;
}

class SoakLedgerVerifier : public ::testing::Test {
 protected:
  test::TempRoot root_;
  test::LogDir dir{"libshm-soak-ledger-verify"};
  void SetUp() override {
    // One worker killed once, then stopped cleanly; a checker that saw nothing
    // wrong, killed once after 512 samples, then stopped cleanly after 400.
    dir.write("ledger-worker-0.log",
              "\nS 100 1000 w0.100.a w0.100.b\nF 1001\n\nS 101 2000 w0.101.a w0.101.b\nF 2001\n"
              "X 500 200 30\n");
    dir.write("ledger-checker.log",
              "\nS 102 1000\nF 1001\nP 256 16\nP 512 30\n\nS 103 2000\nF 2001\nX 400 25 0\n");
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
  EXPECT_TRUE(has(out, "their tickets reclaimed: 0, 18 of them by the sidecar")) << out;
  EXPECT_TRUE(has(out, "operations: 3 (1 reserves, 1 commits, 0 replaces, 1 releases")) << out;
  EXPECT_TRUE(has(out, "killed workers: 1;")) << out;
  EXPECT_TRUE(has(out,
                  "never over a limit: 912 samples (55 verified against the tickets), 0 "
                  "violations"))
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
  EXPECT_TRUE(has(out,
                  "VIOLATION: global: used 900 reserved 900 tickets 1 after every worker "
                  "stopped"))
      << out;
  EXPECT_TRUE(has(out, "VIOLATION: category 'meta': used 900")) << out;
  EXPECT_TRUE(has(out, "VIOLATION: pool 'leaky' is still open")) << out;
  EXPECT_TRUE(has(out, "VIOLATION: 1 ticket(s) still live")) << out;
  EXPECT_TRUE(has(out, "is live: owner slot")) << out;
  EXPECT_TRUE(has(out, "category 1, 900 bytes")) << out;
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
  EXPECT_TRUE(has(out, "VIOLATION: verify: 3 tickets (300 bytes) belong to attachment slot"))
      << out;
  EXPECT_TRUE(has(out, "pending reclaim")) << out;
  EXPECT_TRUE(has(out, "VIOLATION: 3 ticket(s) still live")) << out;
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
            "X 400 25 1\n");
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(has(out, "VIOLATION: ledger-worker-0: pool 'w0.100.a' account 'data': used 5"))
      << out;
  EXPECT_TRUE(has(out, "VIOLATION: ledger-worker-0: did not stop cleanly")) << out;
  EXPECT_TRUE(has(out, "VIOLATION: ledger-checker: sample 9: global: used 99000")) << out;
  EXPECT_TRUE(has(out, "VIOLATION: ledger-checker: 1 violation(s) while sampling")) << out;
}

TEST_F(SoakLedgerVerifier, RejectsAMissingLedger) {
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(has(out, "VIOLATION: ledger 'soak.ledger': ")) << out;
}

}  // namespace
}  // namespace shm
