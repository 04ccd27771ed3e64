// The egress soak's verdict is only as good as its verifier: feed
// test_soak_egress_verify hand-written logs and check that it accepts exactly
// the egress's promises (at least once, deduplicated by sequence: nothing
// lost, a sequence delivered again only after a transport kill or a fail, an
// acknowledgement final, the generation fence advancing and refusing the old
// generation, nothing left in the pool) and names every other loss,
// duplicate, corruption, fence breach or leftover (formats: soak_egress.hpp).
#include "common/log_dir.hpp"
#include "common/subprocess.hpp"
#include "common/text.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace shm {
namespace {

using namespace std::chrono_literals;
using test::contains;

// A transport incarnation's start line: generation, records replayed, the
// watermark found ("-": none) and next_sequence.
std::string start(int pid, int generation, int replayed, const std::string& acked, int next) {
  return "\nS " + std::to_string(pid) + " " + std::to_string(pid * 10) + " " +
         std::to_string(generation) + " " + std::to_string(replayed) + " " + acked + " " +
         std::to_string(next) + "\n";
}

constexpr const char* kFence = "G stale_generation stale_generation\n";
// The clean end of a drained transport that assigned 0..3.
constexpr const char* kDrained = "P 4 3 0 0 0 0\nX 4 4 0 0 1 0\n";

class SoakEgressVerifier : public ::testing::Test {
 protected:
  test::LogDir dir{"libshm-soak-egress-verify"};

  // Sender 0 enqueued `n` messages in one incarnation and stopped cleanly.
  void sender(int n) {
    dir.write("egress-sender-0.log",
              "\nS 100 1000 0 -\nF 1001\nX " + std::to_string(n) + "\nQ 2\n");
  }
  void transport(const std::string& log) { dir.write("egress-transport.log", log); }

  int verify(std::string& out) {
    test::Subprocess p(
        {test::helper_path("soak_egress_verify"), "--dir", dir.string(), "--senders", "1"});
    const int rc = p.wait(10s);
    out = p.output();
    return rc;
  }
};

// 0..3 delivered by generation 1; 2's ack never came (fail), retried at attempt 2.
const std::string kRetried = start(300, 1, 0, "-", 0) +
                             "I 0 0 0 1 1\nF 1001\nI 0 1 1 1 1\nA 1 advanced\nI 0 2 2 1 1\n"
                             "T 2 1 1 retrying\nI 0 3 3 1 1\nW 32\nI 0 2 2 1 2\nA 3 advanced\n"
                             "A 0 unchanged\n" +
                             kDrained;

TEST_F(SoakEgressVerifier, AcceptsARetryAfterAFailAndALateAck) {
  sender(4);
  transport(kRetried);
  std::string out;
  EXPECT_EQ(verify(out), 0) << out;
  EXPECT_TRUE(contains(out,
                       "messages: 4 delivered, 0 lost, 1 duplicated (0 redelivered after a "
                       "transport kill, 1 retried after a fail), 0 corrupt"))
      << out;
  EXPECT_TRUE(contains(out,
                       "1 fail(s) (1 after a delivery), 3 ack(s) (1 unchanged: late or "
                       "partial), window full 1 time(s), 2 message(s) waited"))
      << out;
  EXPECT_TRUE(contains(out, "pool after the drain: empty")) << out;
}

TEST_F(SoakEgressVerifier, AcceptsTheReplayOfAKilledTransportUnderTheNextGeneration) {
  sender(4);
  // Generation 1 delivered 0..2, acknowledged 0 and was killed; generation 2
  // replays 1 and 2 (attempt 2) and goes on.
  transport(start(300, 1, 0, "-", 0) + "I 0 0 0 1 1\nF 1001\nI 0 1 1 1 1\nA 0 advanced\n" +
            "I 0 2 2 1 1\n" + start(301, 2, 2, "0", 4) + kFence +
            "I 0 1 1 2 2\nF 3011\nI 0 2 2 2 2\nI 0 3 3 2 1\nA 3 advanced\n" + kDrained);
  std::string out;
  EXPECT_EQ(verify(out), 0) << out;
  EXPECT_TRUE(contains(out,
                       "messages: 4 delivered, 0 lost, 2 duplicated (2 redelivered after a "
                       "transport kill, 0 retried after a fail), 0 corrupt"))
      << out;
  EXPECT_TRUE(contains(out,
                       "2 transport incarnation(s), generation 2 at the end, 1 transport "
                       "kill(s), 2 record(s) replayed at attach"))
      << out;
  EXPECT_TRUE(contains(out, "fence: 1 stale claim/ack pair(s) refused")) << out;
}

TEST_F(SoakEgressVerifier, AcceptsTheMessageAKilledSenderHadInDoubtEitherWay) {
  // Killed inside the enqueue of 2: the next incarnation goes on at 3; 2 did
  // not land. Killed inside the enqueue of 4: it landed.
  dir.write("egress-sender-0.log",
            "\nS 100 1000 0 -\nF 1001\n\nS 101 2000 3 2\nF 2001\n\nS 102 3000 5 4\nF 3001\nX 6\n");
  transport(start(300, 1, 0, "-", 0) +
            "I 0 0 0 1 1\nF 1001\nI 0 1 1 1 1\nI 0 3 2 1 1\nI 0 4 3 1 1\nI 0 5 4 1 1\n"
            "A 4 advanced\nP 5 4 0 0 0 0\nX 5 5 0 0 1 0\n");
  std::string out;
  EXPECT_EQ(verify(out), 0) << out;
  EXPECT_TRUE(contains(out, "1 landed, 1 not (2 sender kill(s)); 4 enqueued message(s) checked"))
      << out;
}

TEST_F(SoakEgressVerifier, RejectsAnEnqueuedMessageThatWasNeverDelivered) {
  sender(4);
  transport(start(300, 1, 0, "-", 0) +
            "I 0 0 0 1 1\nF 1001\nI 0 1 1 1 1\nI 0 3 2 1 1\nA 2 advanced\nP 3 2 0 0 0 0\n"
            "X 3 3 0 0 1 0\n");
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(contains(out, "VIOLATION: sender 0: enqueued message(s) lost: 2")) << out;
}

TEST_F(SoakEgressVerifier, RejectsASequenceAssignedAndNeverDelivered) {
  sender(4);
  transport(start(300, 1, 0, "-", 0) +
            "I 0 0 0 1 1\nF 1001\nI 0 1 1 1 1\nI 0 2 2 1 1\nI 0 3 3 1 1\nA 4 advanced\n"
            "P 5 4 0 0 0 0\nX 4 4 0 0 1 0\n");
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(contains(out, "VIOLATION: 1 sequence(s) assigned and never delivered: 4")) << out;
}

TEST_F(SoakEgressVerifier, RejectsADuplicateWithoutAKillOrAFail) {
  sender(4);
  std::string log = kRetried;
  log.replace(log.find("T 2 1 1 retrying\n"), 17, "");
  transport(log);
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(contains(out,
                       "VIOLATION: sequence 2 delivered again without a transport kill or a fail "
                       "since its last delivery"))
      << out;
}

TEST_F(SoakEgressVerifier, RejectsADeliveryAfterItsAcknowledgement) {
  sender(4);
  // 1 was acknowledged, then failed and delivered again: an ack must be final.
  transport(start(300, 1, 0, "-", 0) +
            "I 0 0 0 1 1\nF 1001\nI 0 1 1 1 1\nA 1 advanced\nT 1 1 1 retrying\nI 0 1 1 1 2\n"
            "I 0 2 2 1 1\nI 0 3 3 1 1\nA 3 advanced\n" +
            kDrained);
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(
      contains(out, "VIOLATION: sequence 1 delivered after its acknowledgement (through 1)"))
      << out;
}

TEST_F(SoakEgressVerifier, RejectsAnAttemptThatDidNotGrow) {
  sender(4);
  std::string log = kRetried;
  log.replace(log.find("I 0 2 2 1 2\n"), 12, "I 0 2 2 1 1\n");
  transport(log);
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(contains(out, "VIOLATION: sequence 2 delivered again at attempt 1 after attempt 1"))
      << out;
}

TEST_F(SoakEgressVerifier, RejectsAMessageUnderTwoSequencesAndASequenceWithTwoMessages) {
  sender(4);
  transport(start(300, 1, 0, "-", 0) +
            "I 0 0 0 1 1\nF 1001\nI 0 1 1 1 1\nI 0 1 2 1 1\nI 0 3 3 1 1\nT 3 1 1 retrying\n"
            "I 0 2 3 1 2\nA 3 advanced\n" +
            kDrained);
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(contains(out,
                       "VIOLATION: sender 0 message 1 delivered under sequences 1 and 2: "
                       "enqueued twice"))
      << out;
  EXPECT_TRUE(contains(out, "VIOLATION: sequence 3 delivered as sender 0 message 2, before as 0 3"))
      << out;
}

TEST_F(SoakEgressVerifier, RejectsCorruptUnknownAndNeverSentMessages) {
  sender(3);
  transport(start(300, 1, 0, "-", 0) +
            "I 0 0 0 1 1\nF 1001\nC 1 crc\nI 5 0 2 1 1\nI 0 9 3 1 1\nA 3 advanced\n" + kDrained);
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(
      contains(out, "VIOLATION: egress-transport: corrupt message (sequence reason): 1 crc"))
      << out;
  EXPECT_TRUE(contains(out, "VIOLATION: sequence 2: from sender 5: no such sender")) << out;
  EXPECT_TRUE(
      contains(out, "VIOLATION: sender 0: message 9 delivered but never sent (it stopped at 3)"))
      << out;
}

TEST_F(SoakEgressVerifier, RejectsAnOldGenerationDeliveredAsCurrent) {
  sender(4);
  // Generation 2 delivers envelopes still stamped with generation 1.
  transport(start(300, 1, 0, "-", 0) + "I 0 0 0 1 1\nF 1001\nA 0 advanced\nI 0 1 1 1 1\n" +
            start(301, 2, 1, "0", 4) + kFence +
            "I 0 1 1 1 2\nF 3011\nI 0 2 2 2 1\nI 0 3 3 2 1\nA 3 advanced\n" + kDrained);
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(contains(out,
                       "VIOLATION: sequence 1 delivered under generation 1 by the transport of "
                       "generation 2"))
      << out;
}

TEST_F(SoakEgressVerifier, RejectsAGenerationThatDidNotAdvance) {
  sender(4);
  transport(start(300, 1, 0, "-", 0) + "I 0 0 0 1 1\nF 1001\nA 0 advanced\nI 0 1 1 1 1\n" +
            start(301, 1, 1, "0", 4) + kFence +
            "I 0 1 1 1 2\nF 3011\nI 0 2 2 1 1\nI 0 3 3 1 1\nA 3 advanced\n" + kDrained);
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(
      contains(out, "VIOLATION: egress-transport: generation 1 after 1: the fence did not advance"))
      << out;
}

TEST_F(SoakEgressVerifier, RejectsAFenceThatLetThePreviousGenerationThroughOrWasNotTried) {
  sender(4);
  const std::string gen1 = start(300, 1, 0, "-", 0) + "I 0 0 0 1 1\nF 1001\nA 0 advanced\n";
  const std::string rest = "I 0 1 1 2 1\nF 3011\nI 0 2 2 2 1\nI 0 3 3 2 1\nA 3 advanced\n";
  transport(gen1 + start(301, 2, 0, "0", 4) + "G claimed stale_generation\n" + rest + kDrained);
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(contains(out,
                       "VIOLATION: the fence let the previous generation through: claim claimed, "
                       "ack stale_generation"))
      << out;

  transport(gen1 + start(301, 2, 0, "0", 4) + rest + kDrained);
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(
      contains(out, "VIOLATION: 1 transport incarnation(s) after the first but 0 fence check(s)"))
      << out;
}

TEST_F(SoakEgressVerifier, RejectsAWatermarkThatWentBackAndARefusedAckAndAnExhaustedFail) {
  sender(4);
  transport(start(300, 1, 0, "-", 0) +
            "I 0 0 0 1 1\nF 1001\nI 0 1 1 1 1\nA 1 advanced\nA 7 refused\n" +
            start(301, 2, 0, "-", 2) + kFence +
            "I 0 2 2 2 1\nF 3011\nT 2 9 1 exhausted\nI 0 3 3 2 1\nA 3 advanced\n" + kDrained);
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(contains(out,
                       "VIOLATION: egress-transport: generation 2 found the watermark at none "
                       "after 1 was acknowledged"))
      << out;
  EXPECT_TRUE(contains(out, "VIOLATION: ack through 7: refused (only advanced or unchanged)"))
      << out;
  EXPECT_TRUE(contains(out,
                       "VIOLATION: fail of sequence 2 at attempt 9: exhausted (the soak stays "
                       "below the retry budget)"))
      << out;
}

TEST_F(SoakEgressVerifier, RejectsRecordsLeftInThePoolAndAnUncleanStop) {
  sender(4);
  std::string log = kRetried;
  log.replace(log.find("P 4 3 0 0 0 0\n"), 14, "P 4 2 0 0 1 1\n");
  transport(log);
  std::string out;
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(contains(out,
                       "VIOLATION: left in the pool after the drain: 0 pending, 0 in flight, 1 "
                       "parked, 1 terminal"))
      << out;
  EXPECT_TRUE(contains(out, "VIOLATION: the final watermark is 2, not next_sequence - 1 = 3"))
      << out;
  EXPECT_TRUE(contains(out, "pool after the drain: NOT empty")) << out;

  transport(kRetried.substr(0, kRetried.find("P 4 3")));
  EXPECT_EQ(verify(out), 1) << out;
  EXPECT_TRUE(contains(out, "egress-transport: did not drain and stop cleanly")) << out;
  EXPECT_TRUE(contains(out, "no final projection (P line)")) << out;
}

}  // namespace
}  // namespace shm
