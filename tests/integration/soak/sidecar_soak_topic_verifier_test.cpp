// The topic soak's verdict is only as good as its verifier: feed
// test_soak_topic_verify hand-written logs and check that it accepts exactly
// the topic's promises (every sample to every subscriber in order; a Block
// subscriber loses nothing within a publisher incarnation, a DropOldest one
// no more than missed() counts; one (incarnation, seq) is one sample for
// everybody; an unlogged sample only from a killed publisher; the tail) and
// names every other loss, mismatch or disorder (formats: soak_topic.hpp).
#include "common/log_dir.hpp"
#include "common/subprocess.hpp"
#include "common/text.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace shm::soak_topic_verifier_test {
namespace {

using namespace std::chrono_literals;
using test::contains;

// Publisher incarnation 1 (pid 100) published seqs 0..3 as counters 0..3 and
// stopped cleanly, the last publish at time 5000.
constexpr const char* kPublisher =
    "\nS 100 1000 1\nP 0 0\nF 1001\nP 1 1\nP 2 2\nP 3 3\nX 4 1 3 5000\n";

// A subscriber's start line (2 = Block, 1 = DropOldest) and one sample line.
std::string start(int pid, int overflow) {
  return "\nS " + std::to_string(pid) + " 1100 " + std::to_string(overflow) + "\n";
}
std::string sample(int seq, int counter, int missed = 0, int incarnation = 1, int pid = 100) {
  return "I " + std::to_string(incarnation) + " " + std::to_string(seq) + " " +
         std::to_string(pid) + " " + std::to_string(counter) + " " + std::to_string(missed) + "\n";
}

class SoakTopicVerifier : public ::testing::Test {
 protected:
  test::LogDir dir{"libshm-soak-topic-verify"};

  void publisher(const std::string& log) { dir.write("topic-publisher.log", log); }
  void subscriber(int i, const std::string& log) {
    dir.write("topic-subscriber-" + std::to_string(i) + ".log", log);
  }
  int verify(int subscribers, std::string& out) {
    test::Subprocess p({test::helper_path("soak_topic_verify"), "--dir", dir.string(),
                        "--subscribers", std::to_string(subscribers)});
    const int rc = p.wait(10s);
    out = p.output();
    return rc;
  }
};

TEST_F(SoakTopicVerifier, AcceptsEverySampleToABlockSubscriberAndCountedDropsToADropOldestOne) {
  publisher(kPublisher);
  subscriber(0, start(200, 2) + sample(0, 0) + "F 1101\n" + sample(1, 1) + sample(2, 2) +
                    sample(3, 3) + "X 4 0\n");
  subscriber(1, start(300, 1) + sample(0, 0) + "F 1101\n" + sample(3, 3, 2) + "X 2 2\n");
  std::string out;
  EXPECT_EQ(verify(2, out), 0) << out;
  EXPECT_TRUE(contains(out, "messages: 6 delivered to 2 subscriber(s), 4 published")) << out;
  EXPECT_TRUE(contains(out, "DropOldest: 2 sample(s) skipped")) << out;
}

TEST_F(SoakTopicVerifier, NamesASampleABlockSubscriberLost) {
  publisher(kPublisher);
  subscriber(0,
             start(200, 2) + sample(0, 0) + "F 1101\n" + sample(2, 2) + sample(3, 3) + "X 3 0\n");
  std::string out;
  EXPECT_EQ(verify(1, out), 1) << out;
  EXPECT_TRUE(contains(out, "(Block): seq 0 to 2 of incarnation 1: 1 sample(s) lost")) << out;
}

TEST_F(SoakTopicVerifier, NamesDropsThatMissedDoesNotCount) {
  publisher(kPublisher);
  subscriber(0, start(300, 1) + sample(0, 0) + "F 1101\n" + sample(3, 3, 1) + "X 2 1\n");
  std::string out;
  EXPECT_EQ(verify(1, out), 1) << out;
  EXPECT_TRUE(contains(out,
                       "(DropOldest): seq 0 to 3: 2 skipped, 2 in all since its attach, "
                       "but missed() says 1"))
      << out;
}

// missed() is read just after a receive: it may already count the drops
// that make the next gap (the CI's soak met this).
TEST_F(SoakTopicVerifier, AcceptsAMissedCountThatRanAheadOfTheGap) {
  publisher(kPublisher);
  subscriber(0, start(300, 1) + sample(0, 0, 2) + "F 1101\n" + sample(3, 3, 2) + "X 2 2\n");
  std::string out;
  EXPECT_EQ(verify(1, out), 0) << out;
}

TEST_F(SoakTopicVerifier, NamesASeqThatCarriesAnotherSampleThanThePublisherLogged) {
  publisher(kPublisher);
  subscriber(0, start(200, 2) + sample(0, 0) + "F 1101\n" + sample(1, 1) + sample(2, 7) +
                    sample(3, 3) + "X 4 0\n");
  subscriber(1, start(300, 2) + sample(0, 0) + "F 1101\n" + sample(1, 1) + sample(2, 2) +
                    sample(3, 3) + "X 4 0\n");
  std::string out;
  EXPECT_EQ(verify(2, out), 1) << out;
  EXPECT_TRUE(contains(out, "sample 1/2 is counter 7, the publisher logged 2")) << out;
  EXPECT_TRUE(contains(out, "another subscriber got pid 100 counter 7")) << out;
}

TEST_F(SoakTopicVerifier, AcceptsTheSampleAKilledPublisherWasPublishingAndNoOther) {
  // Incarnation 1 was killed after publishing counter 2 as seq 2 (not logged);
  // incarnation 2 (pid 101) then published seq 3 as its counter 0.
  publisher("\nS 100 1000 1\nP 0 0\nF 1001\nP 1 1\n\nS 101 2000 2\nP 3 0\nF 2001\nX 1 2 3 5000\n");
  subscriber(0, start(200, 2) + sample(0, 0) + "F 1101\n" + sample(1, 1) + sample(2, 2) +
                    sample(3, 0, 0, 2, 101) + "X 4 0\n");
  std::string out;
  EXPECT_EQ(verify(1, out), 0) << out;
  EXPECT_TRUE(contains(out, "1 received unlogged")) << out;
  // Counter 3 was never in flight: refused.
  subscriber(0, start(200, 2) + sample(0, 0) + "F 1101\n" + sample(1, 1) + sample(2, 3) +
                    sample(3, 0, 0, 2, 101) + "X 4 0\n");
  EXPECT_EQ(verify(1, out), 1) << out;
  EXPECT_TRUE(contains(out, "was never logged as published")) << out;
}

TEST_F(SoakTopicVerifier, NamesOutOfOrderSamplesAndAMissingTail) {
  publisher(kPublisher);
  subscriber(0, start(200, 2) + sample(1, 1) + "F 1101\n" + sample(0, 0) + "X 2 0\n");
  std::string out;
  EXPECT_EQ(verify(1, out), 1) << out;
  EXPECT_TRUE(contains(out, "sample 1/0 after 1/1")) << out;
  EXPECT_TRUE(contains(out, "stopped at 1/0 but the publisher's last sample was 1/3")) << out;
}

}  // namespace
}  // namespace shm::soak_topic_verifier_test
