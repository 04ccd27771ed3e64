// The fanout soak's verdict is only as good as its verifier: feed
// test_soak_fanout_verify hand-written logs and check that it accepts exactly
// the documented MpmcRing semantics (at most one item lost per consumer
// kill, the in-flight item of a killed producer published once or not at all)
// and names every other loss, duplicate, reordering or corruption.
#include "common/log_dir.hpp"
#include "common/subprocess.hpp"

#include <gtest/gtest.h>

#include <chrono>

namespace shm {
namespace {

using namespace std::chrono_literals;

class SoakFanoutVerifier : public ::testing::Test {
 protected:
  test::LogDir dir{"libshm-soak-fanout-verify"};

  // Producer 0 submitted `n` items in one incarnation and stopped cleanly.
  void producer(std::uint64_t n) {
    dir.write("fanout-producer-0.log", "\nS 100 1000 0 -\nF 1001\nX " + std::to_string(n) + "\n");
  }

  int verify(std::string& out) {
    test::Subprocess p({test::helper_path("soak_fanout_verify"), "--dir", dir.string(),
                        "--producers", "1", "--consumers", "2"});
    const int rc = p.wait(10s);
    out = p.output();
    return rc;
  }
};

bool has(const std::string& out, const std::string& what) {
  return out.find(what) != std::string::npos;
}

TEST_F(SoakFanoutVerifier, AcceptsEveryItemOnceSplitAcrossConsumers) {
  producer(6);
  dir.write("fanout-consumer-0.log", "\nS 200 1000\nI 0 0 1\nF 1002\nI 0 2 1\nX 2\n");
  dir.write("fanout-consumer-1.log",
            "\nS 201 1000\nI 0 1 3\nF 1003\nI 0 3 0\nI 0 4 2\nI 0 5 1\nX 4\n");
  std::string out;
  EXPECT_EQ(verify(out), 0) << out;
  EXPECT_TRUE(has(out, "messages: 6 delivered, 0 duplicated")) << out;
  EXPECT_TRUE(has(out,
                  "kill mid-drain (documented: at most the one item it had popped): 0, "
                  "allowed 0"))
      << out;
}

TEST_F(SoakFanoutVerifier, AcceptsOneLostItemPerConsumerKill) {
  producer(6);
  // Consumer 0 was killed once (an incarnation without X): item 3 is gone.
  dir.write("fanout-consumer-0.log",
            "\nS 200 1000\nI 0 0 1\nF 1002\nI 0 2 1\n\nS 202 2000\nI 0 5 1\nX 1\n");
  dir.write("fanout-consumer-1.log", "\nS 201 1000\nI 0 1 3\nF 1003\nI 0 4 2\nX 2\n");
  std::string out;
  EXPECT_EQ(verify(out), 0) << out;
  EXPECT_TRUE(has(out, "messages: 5 delivered")) << out;
  EXPECT_TRUE(has(out, "had popped): 1, allowed 1 (one per consumer kill)")) << out;
}

TEST_F(SoakFanoutVerifier, RejectsMoreLostItemsThanConsumerKills) {
  producer(6);
  dir.write("fanout-consumer-0.log",
            "\nS 200 1000\nI 0 0 1\nI 0 2 1\n\nS 202 2000\nI 0 5 1\nX 1\n");
  dir.write("fanout-consumer-1.log", "\nS 201 1000\nI 0 1 3\nX 1\n");
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(has(out,
                  "VIOLATION: 2 item(s) lost (producer 0 seq 3, 4), more than the 1 "
                  "consumer kill(s) allow"))
      << out;
}

TEST_F(SoakFanoutVerifier, RejectsALostItemWithoutAnyConsumerKill) {
  producer(3);
  dir.write("fanout-consumer-0.log", "\nS 200 1000\nI 0 0 1\nX 1\n");
  dir.write("fanout-consumer-1.log", "\nS 201 1000\nI 0 2 3\nX 1\n");
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(has(out, "1 item(s) lost (producer 0 seq 1), more than the 0 consumer kill(s)"))
      << out;
}

TEST_F(SoakFanoutVerifier, AcceptsTheItemAKilledProducerHadInFlightEitherWay) {
  // Killed while submitting 3 (journalled): the next incarnation goes on at 4.
  dir.write("fanout-producer-0.log",
            "\nS 100 1000 0 -\nF 1001\n\nS 101 2000 4 3\nF 2001\n\nS 102 3000 6 5\nF 3001\nX 8\n");
  dir.write("fanout-consumer-0.log", "\nS 200 1000\nI 0 0 1\nI 0 1 1\nI 0 2 1\nI 0 4 1\nX 4\n");
  dir.write("fanout-consumer-1.log", "\nS 201 1000\nI 0 5 0\nI 0 6 2\nI 0 7 1\nX 3\n");
  std::string out;
  EXPECT_EQ(verify(out), 0) << out;
  EXPECT_TRUE(has(out,
                  "in flight at a producer kill (published once or not at all): 1 "
                  "published, 1 not (2 producer kill(s))"))
      << out;
}

TEST_F(SoakFanoutVerifier, RejectsADuplicateEvenAfterAConsumerKill) {
  producer(4);
  dir.write("fanout-consumer-0.log",
            "\nS 200 1000\nI 0 0 1\nI 0 1 1\n\nS 202 2000\nI 0 3 1\nX 1\n");
  dir.write("fanout-consumer-1.log", "\nS 201 1000\nI 0 2 3\nI 0 1 2\nX 2\n");
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(has(out, "VIOLATION: producer 0: 1 duplicate deliveries (seq 1)")) << out;
}

TEST_F(SoakFanoutVerifier, RejectsItemsOutOfSubmissionOrderWithinAPriority) {
  producer(4);
  dir.write("fanout-consumer-0.log", "\nS 200 1000\nI 0 0 1\nI 0 2 1\nI 0 1 1\nI 0 3 0\nX 4\n");
  dir.write("fanout-consumer-1.log", "\nS 201 1000\nX 0\n");
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(has(out,
                  "fanout-consumer-0: 1 item(s) out of submission order within a priority "
                  "(first: incarnation 0: producer 0 priority 1: seq 1 after 2)"))
      << out;
}

TEST_F(SoakFanoutVerifier, RejectsCorruptAndUnknownItemsAndUncleanStops) {
  producer(3);
  dir.write("fanout-consumer-0.log",
            "\nS 200 1000\nI 0 0 1\nC body 0 1 1\nI 0 2 1\nI 0 7 1\nX 4\n");
  dir.write("fanout-consumer-1.log", "\nS 201 1000\nI 0 1 3\nI 4 0 0\n");
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(
      has(out, "fanout-consumer-0: corrupt item (reason producer seq priority): body 0 1 1"))
      << out;
  EXPECT_TRUE(has(out,
                  "producer 0: 1 item(s) delivered that were never submitted (it stopped at "
                  "3): seq 7"))
      << out;
  EXPECT_TRUE(has(out, "fanout-consumer-1: item from producer 4 seq 0: no such producer")) << out;
  EXPECT_TRUE(has(out, "fanout-consumer-1: did not drain and stop cleanly")) << out;
}

}  // namespace
}  // namespace shm
