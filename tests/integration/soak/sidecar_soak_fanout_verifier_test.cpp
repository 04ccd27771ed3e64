// The fanout soak's verdict is only as good as its verifier: feed
// test_soak_fanout_verify hand-written logs and check that it accepts exactly
// the documented MpmcRing semantics (a lost item only with evidence: the
// killed consumer's hand named it, or its ring counted a lost pop; the
// in-flight item of a killed producer published once or not at all) and names
// every other loss, duplicate, reordering or corruption.
#include "common/log_dir.hpp"
#include "common/subprocess.hpp"
#include "common/text.hpp"
#include "helpers/fanout/fanout_items.hpp"

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

using test::contains;

TEST_F(SoakFanoutVerifier, AcceptsEveryItemOnceSplitAcrossConsumers) {
  producer(6);
  dir.write("fanout-consumer-0.log", "\nS 200 1000\nI 0 0 1\nF 1002\nI 0 2 1\nX 2\n");
  dir.write("fanout-consumer-1.log",
            "\nS 201 1000\nI 0 1 3\nF 1003\nI 0 3 0\nI 0 4 2\nI 0 5 1\nX 4\n");
  std::string out;
  EXPECT_EQ(verify(out), 0) << out;
  EXPECT_TRUE(contains(out, "messages: 6 delivered, 0 duplicated")) << out;
  EXPECT_TRUE(
      contains(out, "lost to consumer kills: 0 (0 in a killed consumer's hand, 0 lost mid-pop)"))
      << out;
}

TEST_F(SoakFanoutVerifier, AcceptsALostItemTheKilledConsumerHeldInItsHand) {
  producer(6);
  // Consumer 0 (pid 200) was killed holding item 3 (popped, not logged yet);
  // its successor logged the hand file it found: "H 200 held 0 3 1".
  dir.write(
      "fanout-consumer-0.log",
      "\nS 200 1000\nI 0 0 1\nF 1002\nI 0 2 1\n\nS 202 2000\nH 200 held 0 3 1\nI 0 5 1\nX 1\n");
  dir.write("fanout-consumer-1.log", "\nS 201 1000\nI 0 1 3\nF 1003\nI 0 4 2\nX 2\n");
  std::string out;
  EXPECT_EQ(verify(out), 0) << out;
  EXPECT_TRUE(contains(out, "messages: 5 delivered")) << out;
  EXPECT_TRUE(
      contains(out, "lost to consumer kills: 1 (1 in a killed consumer's hand, 0 lost mid-pop)"))
      << out;
}

TEST_F(SoakFanoutVerifier, AcceptsALostItemTheKilledConsumerHadCopiedMidPop) {
  producer(4);
  // Killed inside drain_highest() after the copy into the hand: "popping"
  // with an intact item.
  dir.write("fanout-consumer-0.log",
            "\nS 200 1000\nI 0 0 1\n\nS 202 2000\nH 200 popping 0 2 1\nI 0 3 1\nX 1\n");
  dir.write("fanout-consumer-1.log", "\nS 201 1000\nI 0 1 3\nX 1\n");
  std::string out;
  EXPECT_EQ(verify(out), 0) << out;
  EXPECT_TRUE(contains(out, "lost to consumer kills: 1 (1 in a killed consumer's hand")) << out;
}

TEST_F(SoakFanoutVerifier, RejectsALostItemWithoutEvidenceEvenAfterConsumerKills) {
  producer(6);
  // Two consumer kills, but neither victim held item 3: one was waiting in a
  // pop (empty hand, and no ring counted a lost pop), the other held item 2,
  // which it had logged. Item 3 is lost with no evidence.
  dir.write("fanout-consumer-0.log",
            "\nS 200 1000\nI 0 0 1\nI 0 2 1\n\nS 202 2000\nH 200 held 0 2 1\nI 0 5 1\n"
            "\nS 203 3000\nH 202 popping\nL 0 0 0 0\nX 0\n");
  dir.write("fanout-consumer-1.log", "\nS 201 1000\nI 0 1 3\nI 0 4 2\nL 0 0 0 0\nX 2\n");
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(contains(out, "VIOLATION: 1 item(s) lost without evidence (producer 0 seq 3)"))
      << out;
}

TEST_F(SoakFanoutVerifier, RejectsTwoLostItemsForOneKill) {
  producer(6);
  // The victim held item 3; item 4 is gone too, and nothing accounts for it.
  dir.write("fanout-consumer-0.log",
            "\nS 200 1000\nI 0 0 1\nI 0 2 1\n\nS 202 2000\nH 200 held 0 3 1\nI 0 5 1\nX 1\n");
  dir.write("fanout-consumer-1.log", "\nS 201 1000\nI 0 1 3\nX 1\n");
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(contains(out, "VIOLATION: 1 item(s) lost without evidence (producer 0 seq 4)"))
      << out;
}

TEST_F(SoakFanoutVerifier, RejectsAHandThatNoKilledIncarnationLeft) {
  producer(4);
  // Pid 200 stopped cleanly (X): a hand it left names nothing lost.
  dir.write("fanout-consumer-0.log",
            "\nS 200 1000\nI 0 0 1\nX 1\n\nS 202 2000\nH 200 held 0 2 1\nI 0 3 1\nX 1\n");
  dir.write("fanout-consumer-1.log", "\nS 201 1000\nI 0 1 3\nX 1\n");
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(contains(out, "VIOLATION: 1 item(s) lost without evidence (producer 0 seq 2)"))
      << out;
}

TEST_F(SoakFanoutVerifier, AcceptsALossMidPopOnlyWhenItsRingCountedALostPop) {
  producer(4);
  // The victim died inside a pop before the copy (its hand is empty); the
  // repair released the claimed cell and counted a lost pop in the ring of
  // item 2's priority.
  const std::uint32_t prio = test::item_priority(0, 2, 4);
  auto logs = [&](std::uint32_t counted_ring) {
    std::string lost = "L";
    for (std::uint32_t p = 0; p < 4; ++p) lost += p == counted_ring ? " 1" : " 0";
    dir.write("fanout-consumer-0.log",
              "\nS 200 1000\nI 0 0 1\n\nS 202 2000\nH 200 popping\n" + lost + "\nX 0\n");
    dir.write("fanout-consumer-1.log", "\nS 201 1000\nI 0 1 3\nI 0 3 0\n" + lost + "\nX 2\n");
  };
  logs(prio);
  std::string out;
  EXPECT_EQ(verify(out), 0) << out;
  EXPECT_TRUE(
      contains(out, "lost to consumer kills: 1 (0 in a killed consumer's hand, 1 lost mid-pop)"))
      << out;
  logs((prio + 1) % 4);  // the lost pop was counted in another ring
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(contains(out, "VIOLATION: 1 item(s) lost without evidence (producer 0 seq 2)"))
      << out;
}

TEST_F(SoakFanoutVerifier, RejectsALostItemWithoutAnyConsumerKill) {
  producer(3);
  dir.write("fanout-consumer-0.log", "\nS 200 1000\nI 0 0 1\nX 1\n");
  dir.write("fanout-consumer-1.log", "\nS 201 1000\nI 0 2 3\nX 1\n");
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(contains(out, "VIOLATION: 1 item(s) lost without evidence (producer 0 seq 1)"))
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
  EXPECT_TRUE(contains(out,
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
  EXPECT_TRUE(contains(out, "VIOLATION: producer 0: 1 duplicate deliveries (seq 1)")) << out;
}

TEST_F(SoakFanoutVerifier, RejectsItemsOutOfSubmissionOrderWithinAPriority) {
  producer(4);
  dir.write("fanout-consumer-0.log", "\nS 200 1000\nI 0 0 1\nI 0 2 1\nI 0 1 1\nI 0 3 0\nX 4\n");
  dir.write("fanout-consumer-1.log", "\nS 201 1000\nX 0\n");
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(contains(out,
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
      contains(out, "fanout-consumer-0: corrupt item (reason producer seq priority): body 0 1 1"))
      << out;
  EXPECT_TRUE(contains(out,
                       "producer 0: 1 item(s) delivered that were never submitted (it stopped at "
                       "3): seq 7"))
      << out;
  EXPECT_TRUE(contains(out, "fanout-consumer-1: item from producer 4 seq 0: no such producer"))
      << out;
  EXPECT_TRUE(contains(out, "fanout-consumer-1: did not drain and stop cleanly")) << out;
}

}  // namespace
}  // namespace shm
