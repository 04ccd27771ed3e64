// The soak's verdict is only as good as its verifier: feed test_soak_verify
// hand-written logs and check that it accepts exactly the documented
// semantics (at-least-once only for the batch in hand at a consumer kill) and
// names every other loss or duplication; and test_soak_recovery, which times
// every kind's recoveries and names a process that never recovered.
#include "common/log_dir.hpp"
#include "common/subprocess.hpp"

#include <gtest/gtest.h>

#include <chrono>

namespace shm {
namespace {

using namespace std::chrono_literals;

class SoakVerifier : public ::testing::Test {
 protected:
  test::LogDir dir{"libshm-soak-verify"};
  void SetUp() override { dir.write("events.log", ""); }

  // Producer 0 published `published` records and stopped cleanly.
  void producer(std::uint64_t published) {
    dir.write("producer-0.log",
              "\nS 100 1000 0 fresh\nF 1001\nX " + std::to_string(published) + "\n");
  }

  int verify(std::string& out) {
    test::Subprocess p({test::helper_path("soak_verify"), "--dir", dir.string(), "--pairs", "1",
                        "--batch-max", "8", "--end-ns", "999999999999"});
    const int rc = p.wait(10s);
    out = p.output();
    return rc;
  }
};

TEST_F(SoakVerifier, AcceptsACompleteInOrderStream) {
  producer(10);
  dir.write("consumer-0.log", "\nS 200 1000\nB 0 4\nF 1002\nB 5 9\nX 10\n");
  std::string out;
  EXPECT_EQ(verify(out), 0) << out;
  EXPECT_NE(out.find("messages: 10 delivered, 0 redelivered"), std::string::npos) << out;
}

TEST_F(SoakVerifier, AcceptsRedeliveryOfTheBatchInHandAtAConsumerKill) {
  producer(10);
  // Killed after logging 5..7 (maybe before releasing it): the next incarnation
  // may see 5..7 again, and no more than that.
  dir.write("consumer-0.log",
            "\nS 200 1000\nB 0 4\nF 1002\nB 5 7\n\nS 201 2000\nB 5 9\nF 2002\nX 5\n");
  std::string out;
  EXPECT_EQ(verify(out), 0) << out;
  EXPECT_NE(out.find("10 delivered, 3 redelivered"), std::string::npos) << out;
}

TEST_F(SoakVerifier, RejectsAGapInsideAnIncarnation) {
  producer(10);
  dir.write("consumer-0.log", "\nS 200 1000\nB 0 4\nB 6 9\nX 9\n");
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_NE(out.find("VIOLATION: consumer-0: incarnation 0: 6 follows 4 (records lost)"),
            std::string::npos)
      << out;
}

TEST_F(SoakVerifier, RejectsADuplicateInsideAnIncarnation) {
  producer(10);
  dir.write("consumer-0.log", "\nS 200 1000\nB 0 4\nB 3 9\nX 12\n");
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_NE(out.find("3 follows 4 (records duplicated)"), std::string::npos) << out;
}

TEST_F(SoakVerifier, RejectsRedeliveryBeyondTheBatchInHand) {
  producer(10);
  dir.write("consumer-0.log", "\nS 200 1000\nB 0 4\nB 5 7\n\nS 201 2000\nB 3 9\nX 7\n");
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_NE(
      out.find("before the batch in hand at the previous kill (5..7): records 3..7 duplicated"),
      std::string::npos)
      << out;
}

TEST_F(SoakVerifier, RejectsARedeliveryStartingInsideTheBatchInHand) {
  producer(10);
  // Killed with 5..7 in hand: the consumer releases a whole batch at once, so
  // its successor starts at 5 (not released) or at 8 (released), never at 6.
  dir.write("consumer-0.log",
            "\nS 200 1000\nB 0 4\nF 1002\nB 5 7\n\nS 201 2000\nB 6 9\nF 2002\nX 4\n");
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_NE(out.find("VIOLATION: consumer-0: incarnation 1 starts at 6, not at the first record "
                     "of the batch in hand at the previous kill (5..7)"),
            std::string::npos)
      << out;
}

TEST_F(SoakVerifier, RejectsRedeliveryAfterACleanStop) {
  producer(10);
  dir.write("consumer-0.log", "\nS 200 1000\nB 0 4\nX 5\n\nS 201 2000\nB 4 9\nX 6\n");
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_NE(out.find("records 4..4 duplicated"), std::string::npos) << out;
}

TEST_F(SoakVerifier, RejectsRecordsLostAtTheEndOrAtARestart) {
  producer(12);
  dir.write("consumer-0.log", "\nS 200 1000\nB 0 4\n\nS 201 2000\nB 6 9\nX 4\n");
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_NE(out.find("incarnation 1 starts at 6: records 5..5 lost"), std::string::npos) << out;
  EXPECT_NE(out.find("ring 0: published 12 records, consumers saw 0..9 only: 2 lost"),
            std::string::npos)
      << out;
}

TEST_F(SoakVerifier, RejectsCorruptRecordsAndUncleanStops) {
  dir.write("producer-0.log", "\nS 100 1000 0 fresh\nF 1001\n");
  dir.write("consumer-0.log", "\nS 200 1000\nB 0 4\nC 5 crc\n");
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_NE(out.find("consumer-0: corrupt record after sequence 5 crc"), std::string::npos) << out;
  EXPECT_NE(out.find("producer-0: did not stop cleanly"), std::string::npos) << out;
  EXPECT_NE(out.find("consumer-0: did not drain and stop cleanly"), std::string::npos) << out;
}

// ---------------------------------------------------------------- recovery

class SoakRecovery : public SoakVerifier {
 protected:
  void SetUp() override {
    SoakVerifier::SetUp();
    dir.write("events.log",
              "K fanout-consumer-0 1000000000\nR fanout-consumer-0 1100000000\n"
              "K sidecar 2000000000\nR sidecar 2100000000\n"
              "K ledger-worker-1 3000000000\nR ledger-worker-1 3100000000\n");
    // Restarted 100 ms after the kill, first item 12 ms after the restart.
    dir.write("fanout-consumer-0.log", "\nS 1 500\nF 600\n\nS 2 1100000001\nF 1112000000\nX 5\n");
    // Restarted, never made progress again.
    dir.write("ledger-worker-1.log", "\nS 3 500\nF 600\n\nS 4 3100000001\n");
  }
  int recovery(const std::string& end_ns, std::string& out) {
    test::Subprocess p(
        {test::helper_path("soak_recovery"), "--dir", dir.string(), "--end-ns", end_ns});
    const int rc = p.wait(10s);
    out = p.output();
    return rc;
  }
};

TEST_F(SoakRecovery, TimesRecoveriesAndRejectsAProcessThatNeverRecovered) {
  std::string out;
  EXPECT_EQ(recovery("20000000000", out), 1) << out;
  EXPECT_NE(out.find("kills: 3 (fanout-consumer 1, ledger-worker 1, sidecar 1); recoveries: 1 "
                     "of 1"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("recovery (restart to first progress): max 12.0 ms"), std::string::npos)
      << out;
  EXPECT_NE(out.find("longest outage (kill to first progress) 112.0 ms"), std::string::npos) << out;
  EXPECT_NE(out.find("VIOLATION: ledger-worker-1: killed at 3000000000 and never made progress "
                     "again"),
            std::string::npos)
      << out;
}

TEST_F(SoakRecovery, CountsAKillShortlyBeforeTheEndAsPending) {
  std::string out;
  EXPECT_EQ(recovery("4000000000", out), 0) << out;
  EXPECT_NE(out.find("recoveries: 1 of 2 (1 too close to the end)"), std::string::npos) << out;
}

}  // namespace
}  // namespace shm
