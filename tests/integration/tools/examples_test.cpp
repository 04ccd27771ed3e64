// The ring_producer / ring_consumer examples (the demo's programs) and the
// channel_producer / channel_consumer pair as separate processes: they stream
// and verify, and the consumer's verdict (exit code and last line) is right
// both when everything arrives and when it cannot.
#include "common/scale.hpp"
#include "common/subprocess.hpp"
#include "common/temp_root.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

namespace shm {
namespace {

using namespace std::chrono_literals;
using test::Subprocess;

constexpr auto kExampleDeadline = 120s;

class ExamplesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* exe :
         {"ring_producer", "ring_consumer", "channel_producer", "channel_consumer"}) {
      if (std::filesystem::exists(test::bin_path(exe))) continue;
#if SHM_EXPECT_EXAMPLES
      FAIL() << test::bin_path(exe)
             << " is missing although LIBSHM_BUILD_EXAMPLES is ON (did its output path move?)";
#else
      GTEST_SKIP() << test::bin_path(exe) << " is not built: LIBSHM_BUILD_EXAMPLES is OFF";
#endif
    }
  }

  static Subprocess start(const std::string& exe, std::vector<std::string> args) {
    args.insert(args.begin(), test::bin_path(exe));
    return Subprocess(std::move(args));
  }

  // Runs channel_producer on channel `name` and kill -9s it mid-stream: once
  // it has sent its first thousand messages (of a billion: it is still
  // streaming), however slowly it starts under a sanitizer.
  static void kill_producer_mid_stream(const std::string& name) {
    auto producer = start("channel_producer", {"--name", name, "--count", "1000000000", "--timeout",
                                               "60", "--progress", "1000"});
    ASSERT_TRUE(producer.wait_for_text("channel_producer: 1000 messages sent\n", kExampleDeadline))
        << producer.output();
    producer.kill(SIGKILL);
    (void)producer.wait(kExampleDeadline);
  }

  test::TempRoot root_;
};

TEST_F(ExamplesTest, ConsumerVerifiesMixedSizeStreamFromProducerProcess) {
  const std::string count = std::to_string(test::scaled(200'000));
  auto consumer =
      start("ring_consumer", {"--name", "mixed", "--create", "--capacity", "64KiB", "--count",
                              count, "--min-size", "1", "--max-size", "4096"});
  auto producer = start("ring_producer", {"--name", "mixed", "--count", count, "--min-size", "1",
                                          "--max-size", "4096"});
  EXPECT_EQ(producer.wait(kExampleDeadline), 0) << producer.output();
  ASSERT_EQ(consumer.wait(kExampleDeadline), 0) << consumer.output();
  EXPECT_NE(consumer.output().find("received " + count + " messages"), std::string::npos)
      << consumer.output();
  EXPECT_NE(consumer.output().find("verification OK: 0 lost, 0 duplicated, 0 corrupt"),
            std::string::npos)
      << consumer.output();
}

TEST_F(ExamplesTest, SpinModeWithBatchedCommitsDeliversEveryMessage) {
  const std::string count = std::to_string(test::scaled(200'000));
  // The producer creates this time; the consumer waits for the ring to appear.
  auto consumer = start("ring_consumer", {"--name", "spin", "--spin", "--batch", "7", "--count",
                                          count, "--size", "100"});
  auto producer =
      start("ring_producer", {"--name", "spin", "--create", "--capacity", "64KiB", "--spin",
                              "--batch", "16", "--count", count, "--size", "100"});
  EXPECT_EQ(producer.wait(kExampleDeadline), 0) << producer.output();
  ASSERT_EQ(consumer.wait(kExampleDeadline), 0) << consumer.output();
  EXPECT_NE(consumer.output().find("verification OK"), std::string::npos) << consumer.output();
}

TEST_F(ExamplesTest, ConsumerFailsWhenPayloadSizesDisagreeWithTheProducer) {
  auto producer =
      start("ring_producer", {"--name", "sizes", "--create", "--count", "100", "--size", "10"});
  ASSERT_EQ(producer.wait(kExampleDeadline), 0) << producer.output();
  auto consumer = start("ring_consumer", {"--name", "sizes", "--size", "11"});
  EXPECT_EQ(consumer.wait(kExampleDeadline), 1) << consumer.output();
  EXPECT_NE(consumer.output().find("verification FAILED: 0 lost, 0 duplicated, 100 corrupt"),
            std::string::npos)
      << consumer.output();
}

TEST_F(ExamplesTest, ConsumerFailsWhenTheStreamIsShorterThanExpected) {
  auto producer = start("ring_producer", {"--name", "short", "--create", "--count", "50"});
  ASSERT_EQ(producer.wait(kExampleDeadline), 0) << producer.output();
  auto consumer = start("ring_consumer", {"--name", "short", "--count", "51"});
  EXPECT_EQ(consumer.wait(kExampleDeadline), 1) << consumer.output();
  EXPECT_NE(consumer.output().find("verification FAILED"), std::string::npos) << consumer.output();
}

TEST_F(ExamplesTest, OpenerGivesUpWhenTheRingNeverAppears) {
  auto consumer = start("ring_consumer", {"--name", "absent", "--timeout", "0.2"});
  EXPECT_EQ(consumer.wait(kExampleDeadline), 3) << consumer.output();
}

TEST_F(ExamplesTest, ProducerRefusesANameStartingWithADash) {
  auto producer = start("ring_producer", {"--name=-x", "--create", "--count", "1"});
  EXPECT_NE(producer.wait(kExampleDeadline), 0) << producer.output();
  EXPECT_FALSE(std::filesystem::exists(root_.file("-x")));
}

TEST_F(ExamplesTest, ProducerRejectsMessagesLargerThanTheRing) {
  auto producer = start("ring_producer", {"--name", "small", "--create", "--capacity", "1KiB",
                                          "--count", "1", "--size", "600"});
  EXPECT_EQ(producer.wait(kExampleDeadline), 2) << producer.output();
}

TEST_F(ExamplesTest, ChannelConsumerVerifiesAStreamThatRotatesThroughEveryPage) {
  const std::string count = std::to_string(test::scaled(200'000));
  // Small pages: the stream rotates through the four slots hundreds of times.
  auto consumer =
      start("channel_consumer", {"--name", "chan", "--create", "--pages", "4", "--page-bytes",
                                 "16384", "--descriptors", "256", "--ring", "1024", "--quiet"});
  auto producer = start("channel_producer", {"--name", "chan", "--count", count, "--min-size", "8",
                                             "--max-size", "300"});
  EXPECT_EQ(producer.wait(kExampleDeadline), 0) << producer.output();
  ASSERT_EQ(consumer.wait(kExampleDeadline), 0) << consumer.output();
  EXPECT_NE(consumer.output().find("stream ended cleanly: " + count + " messages"),
            std::string::npos)
      << consumer.output();
}

TEST_F(ExamplesTest, ChannelConsumerReportsAProducerKilledMidStream) {
  // The consumer must learn of the death (exit 3) after draining what was
  // published, not wait for a producer that will never come back.
  auto consumer =
      start("channel_consumer", {"--name", "killed", "--create", "--quiet", "--timeout", "60"});
  ASSERT_NO_FATAL_FAILURE(kill_producer_mid_stream("killed"));
  EXPECT_EQ(consumer.wait(kExampleDeadline), 3) << "3 is ProducerDied; " << consumer.output();
}

TEST_F(ExamplesTest, CoalescingConsumerVerifiesAStreamAndLearnsOfAKilledProducer) {
  const std::string count = std::to_string(test::scaled(100'000));
  auto consumer =
      start("channel_consumer",
            {"--name", "coal", "--create", "--pages", "4", "--page-bytes", "16384", "--descriptors",
             "256", "--ring", "1024", "--quiet", "--coalesce", "64", "--coalesce-us", "50"});
  auto producer = start("channel_producer", {"--name", "coal", "--count", count, "--min-size", "8",
                                             "--max-size", "300"});
  EXPECT_EQ(producer.wait(kExampleDeadline), 0) << producer.output();
  ASSERT_EQ(consumer.wait(kExampleDeadline), 0) << consumer.output();
  EXPECT_NE(consumer.output().find("stream ended cleanly: " + count + " messages"),
            std::string::npos)
      << consumer.output();

  // A held partial batch must not hide a dead producer.
  auto waiting = start("channel_consumer", {"--name", "coal-killed", "--create", "--quiet",
                                            "--timeout", "60", "--coalesce", "4096"});
  ASSERT_NO_FATAL_FAILURE(kill_producer_mid_stream("coal-killed"));
  EXPECT_EQ(waiting.wait(kExampleDeadline), 3) << "3 is ProducerDied; " << waiting.output();
}

TEST_F(ExamplesTest, ChannelConsumerRejectsACoalescingOutsideTheRing) {
  // The error goes to stderr: read it through a shell that merges the two.
  Subprocess consumer({"/bin/sh", "-c",
                       test::bin_path("channel_consumer") +
                           " --name bad-coal --create --ring 1024 --coalesce 2048 --quiet 2>&1"});
  EXPECT_EQ(consumer.wait(kExampleDeadline), 1) << consumer.output();
  EXPECT_NE(consumer.output().find("coalescing of 2048 descriptors is outside [1, 1024]"),
            std::string::npos)
      << consumer.output();
}

}  // namespace
}  // namespace shm
