// The rows of the wake-up table of docs/spsc.md that a dead peer plays: a peer
// in another process makes the change (publishes a record, or frees room) and
// is SIGKILLed before it loads the parked party's flag, so the wake it owed
// is lost with it. The successor that takes its role over must issue it: the
// parked party (10 s timeout) returns within test::kWakeBound of the takeover.
#include "common/subprocess.hpp"
#include "common/temp_root.hpp"
#include "common/wake_probe.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/layout.hpp"
#include "shm/spsc/producer.hpp"

#include <gtest/gtest.h>

#include <csignal>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace shm::spsc_wake_process_test {
namespace {

using namespace std::chrono_literals;
using test::Subprocess;

const ring::RingControl& control_of(const Segment& seg) {
  return *reinterpret_cast<const ring::RingControl*>(seg.data().data());
}

class SpscWakeProcessTest : public ::testing::Test {
 protected:
  Subprocess peer(const std::string& mode) {
    return Subprocess({test::helper_path("spsc_wake_peer"), mode, "wake", go_file_});
  }
  // Parks `park`; once `parked()` holds, lets `dying` make its change and die
  // (the party must still be parked afterwards: the wake died with the
  // peer), then times `takeover`.
  test::WakeProbe woken_by_takeover(const std::function<void()>& park,
                                    const std::function<bool()>& parked, Subprocess& dying,
                                    const std::function<void()>& takeover) {
    bool died = false;
    return test::probe_wake(
        park,
        [&] {
          if (!parked()) return false;
          if (!died) {
            std::this_thread::sleep_for(20ms);  // past the park's first, short sleep
            std::ofstream(go_file_).put('1');
            EXPECT_EQ(dying.wait(10s), 128 + SIGKILL) << dying.output();
            died = true;
          }
          return parked();
        },
        takeover);
  }

  test::TempRoot root_;
  std::string go_file_ = root_.file("go");
};

// The dead producer published a record (the commit's release store of its
// header) and died before it loaded consumer_parked.
TEST_F(SpscWakeProcessTest, ConsumerWakesWhenAProducerTakesOverFromOneKilledAfterPublishing) {
  auto c = RingConsumer::create("wake", {.capacity_bytes = 1024});
  ASSERT_TRUE(c) << c.error().what();
  auto dying = peer("publish-and-die");
  ASSERT_TRUE(dying.wait_for_line("READY", 30s)) << dying.output();
  std::optional<RingProducer> successor;
  test::expect_woken(woken_by_takeover(
      [&] {
        auto r = c->peek(10s);
        ASSERT_TRUE(r) << r.error().what();
        ASSERT_TRUE(*r) << "timed out";
        EXPECT_EQ(std::string(reinterpret_cast<const char*>((*r)->data()), (*r)->size()),
                  "orphaned");
        c->release();
      },
      [&] { return control_of(c->segment()).producer.consumer_parked.load() != 0; }, dying,
      [&] {
        auto p = RingProducer::open("wake");
        ASSERT_TRUE(p) << p.error().what();
        successor.emplace(std::move(*p));
      }));
}

// The dead consumer released a record (the release store of head) and died
// before it loaded producer_parked: the ring has room, the producer sleeps.
TEST_F(SpscWakeProcessTest, ProducerWakesWhenAConsumerTakesOverFromOneKilledAfterReleasing) {
  auto p = RingProducer::create("wake", {.capacity_bytes = 1024});
  ASSERT_TRUE(p) << p.error().what();
  const std::vector<std::byte> rec(56, std::byte{3});  // 64 bytes with the header
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(*p->try_push(rec));
  ASSERT_FALSE(*p->try_push(rec));
  auto dying = peer("release-and-die");
  ASSERT_TRUE(dying.wait_for_line("READY", 30s)) << dying.output();
  std::optional<RingConsumer> successor;
  test::expect_woken(woken_by_takeover(
      [&] {
        auto r = p->push(rec, 10s);
        ASSERT_TRUE(r) << r.error().what();
        EXPECT_TRUE(*r) << "timed out";
      },
      [&] { return control_of(p->segment()).consumer.producer_parked.load() != 0; }, dying,
      [&] {
        auto c = RingConsumer::open("wake");
        ASSERT_TRUE(c) << c.error().what();
        successor.emplace(std::move(*c));
      }));
}

}  // namespace
}  // namespace shm::spsc_wake_process_test
