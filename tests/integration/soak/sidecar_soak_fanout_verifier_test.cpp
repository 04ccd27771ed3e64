// The fanout soak's verdict is only as good as its verifier: feed
// test_soak_fanout_verify hand-written logs and check that it accepts exactly
// the at-least-once drain's semantics (nothing lost; an item delivered again
// only when a killed consumer's hand names it held; an item taken again after
// its taker died may come out of order; the in-flight item of a killed
// producer published once or not at all) and names every other loss,
// duplicate, reordering or corruption.
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
  EXPECT_TRUE(contains(out, "messages: 6 delivered, 0 lost, 0 duplicated")) << out;
  EXPECT_TRUE(contains(out, "redelivered after consumer kills: 0")) << out;
}

TEST_F(SoakFanoutVerifier, AcceptsOneRedeliveryOfTheItemAKilledConsumerHeld) {
  producer(6);
  // Consumer 0 (pid 200) took item 3, logged it and was killed before its
  // release: the item stayed with the fanout and consumer 1 got it again. The
  // successor of pid 200 logged the hand it found: "H 200 held 0 3 1".
  dir.write("fanout-consumer-0.log",
            "\nS 200 1000\nI 0 0 1\nI 0 3 1\n\nS 202 2000\nH 200 held 0 3 1\nI 0 5 1\nX 1\n");
  dir.write("fanout-consumer-1.log", "\nS 201 1000\nI 0 1 3\nI 0 2 1\nI 0 3 1\nI 0 4 2\nX 4\n");
  std::string out;
  EXPECT_EQ(verify(out), 0) << out;
  EXPECT_TRUE(contains(out, "messages: 6 delivered, 0 lost, 0 duplicated")) << out;
  EXPECT_TRUE(contains(out,
                       "redelivered after consumer kills: 1 (killed consumers' hands: 1 held "
                       "an item, 0 had taken one not logged yet, 0 died inside a take)"))
      << out;
}

TEST_F(SoakFanoutVerifier, RejectsASecondRedeliveryForOneHeldHand) {
  producer(4);
  dir.write("fanout-consumer-0.log",
            "\nS 200 1000\nI 0 0 1\nI 0 2 1\n\nS 202 2000\nH 200 held 0 2 1\nI 0 2 1\nX 1\n");
  dir.write("fanout-consumer-1.log", "\nS 201 1000\nI 0 1 3\nI 0 2 1\nI 0 3 0\nX 3\n");
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(contains(out,
                       "VIOLATION: producer 0: 1 duplicate deliveries no killed consumer's hand "
                       "explains (seq 2)"))
      << out;
}

TEST_F(SoakFanoutVerifier, AcceptsAnOrphanTakenAgainOutOfOrderWhenAKilledHandNamesIt) {
  producer(4);
  // Pid 200 was killed inside a take of item 1 (copied into its hand, not
  // logged); meanwhile consumer 1 took item 2 of the same priority, then the
  // orphaned item 1: out of submission order, explained by the hand.
  dir.write("fanout-consumer-0.log",
            "\nS 200 1000\nI 0 0 1\n\nS 202 2000\nH 200 taking 0 1 1\nI 0 3 0\nX 1\n");
  dir.write("fanout-consumer-1.log", "\nS 201 1000\nI 0 2 1\nI 0 1 1\nX 2\n");
  std::string out;
  EXPECT_EQ(verify(out), 0) << out;
  EXPECT_TRUE(contains(out, "1 taken again out of order")) << out;
  EXPECT_TRUE(contains(out, "messages: 4 delivered, 0 lost, 0 duplicated")) << out;
}

TEST_F(SoakFanoutVerifier, RejectsALostItemEvenAfterConsumerKills) {
  producer(6);
  // Two consumer kills: one victim held item 2 (logged, delivered again), the
  // other died inside a take with nothing copied. Item 3 never came: the
  // at-least-once drain excuses no loss, whatever was killed.
  dir.write("fanout-consumer-0.log",
            "\nS 200 1000\nI 0 0 1\nI 0 2 1\n\nS 202 2000\nH 200 held 0 2 1\nI 0 2 1\n"
            "I 0 5 1\n\nS 203 3000\nH 202 taking\nL 0 0 0 0\nX 0\n");
  dir.write("fanout-consumer-1.log", "\nS 201 1000\nI 0 1 3\nI 0 4 2\nL 0 0 0 0\nX 2\n");
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(contains(out,
                       "VIOLATION: 1 item(s) lost (producer 0 seq 3): the at-least-once drain "
                       "allows none"))
      << out;
}

TEST_F(SoakFanoutVerifier, RejectsALostItemWithoutAnyConsumerKill) {
  producer(3);
  dir.write("fanout-consumer-0.log", "\nS 200 1000\nI 0 0 1\nX 1\n");
  dir.write("fanout-consumer-1.log", "\nS 201 1000\nI 0 2 3\nX 1\n");
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(contains(out,
                       "VIOLATION: 1 item(s) lost (producer 0 seq 1): the at-least-once drain "
                       "allows none"))
      << out;
}

TEST_F(SoakFanoutVerifier, RejectsARingThatCountedALostPop) {
  producer(3);
  dir.write("fanout-consumer-0.log", "\nS 200 1000\nI 0 0 1\nI 0 1 1\nL 0 0 1 0\nX 2\n");
  dir.write("fanout-consumer-1.log", "\nS 201 1000\nI 0 2 3\nL 0 0 0 0\nX 1\n");
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(contains(out, "VIOLATION: ring 2 counted 1 lost pop(s)")) << out;
}

TEST_F(SoakFanoutVerifier, RejectsAHandThatNoKilledIncarnationLeft) {
  producer(4);
  // Pid 200 stopped cleanly (X): a hand it left explains no redelivery.
  dir.write("fanout-consumer-0.log",
            "\nS 200 1000\nI 0 0 1\nI 0 2 1\nX 2\n\nS 202 2000\nH 200 held 0 2 1\nI 0 3 1\nX 1\n");
  dir.write("fanout-consumer-1.log", "\nS 201 1000\nI 0 1 3\nI 0 2 1\nX 2\n");
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(contains(out,
                       "VIOLATION: producer 0: 1 duplicate deliveries no killed consumer's hand "
                       "explains (seq 2)"))
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
  EXPECT_TRUE(contains(out,
                       "VIOLATION: producer 0: 1 duplicate deliveries no killed consumer's hand "
                       "explains (seq 1)"))
      << out;
}

TEST_F(SoakFanoutVerifier, RejectsItemsOutOfSubmissionOrderWithinAPriority) {
  producer(4);
  dir.write("fanout-consumer-0.log", "\nS 200 1000\nI 0 0 1\nI 0 2 1\nI 0 1 1\nI 0 3 0\nX 4\n");
  dir.write("fanout-consumer-1.log", "\nS 201 1000\nX 0\n");
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(contains(out,
                       "VIOLATION: 1 item(s) out of submission order within a priority that no "
                       "killed consumer's take explains (first: fanout-consumer-0 incarnation 0: "
                       "producer 0 priority 1: seq 1 after 2)"))
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
