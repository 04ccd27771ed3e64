// The rows of the wake-up table of docs/mpmc.md that a dead holder plays,
// with real separate processes: a cell held by a process that is SIGKILLed
// mid-operation is repaired (by the blocked party itself after
// mpmc::kStuckGraceNs, or by the next open), and the parked party (10 s
// timeout) returns within test::kWakeBound of the change.
#include "common/subprocess.hpp"
#include "common/temp_root.hpp"
#include "common/text.hpp"
#include "common/wake_probe.hpp"
#include "shm/mpmc/mpmc_ring.hpp"

#include <gtest/gtest.h>

#include <csignal>
#include <optional>
#include <string>
#include <vector>

namespace shm::mpmc_wake_process_test {
namespace {

using namespace std::chrono_literals;
using test::bytes;
using test::Subprocess;

class MpmcWakeProcessTest : public ::testing::Test {
 protected:
  void make(std::uint64_t capacity) {
    auto r = MpmcRing::create("wake", {.ring_cells = capacity, .slot_bytes = 16});
    ASSERT_TRUE(r) << r.error().what();
    ring_.emplace(std::move(*r));
    control_ = reinterpret_cast<const mpmc::Control*>(ring_->segment().data().data());
  }
  test::WakeProbe consumer_woken_by(const std::function<void()>& change,
                                    const std::string& expected) {
    return test::probe_wake(
        [&] {
          std::vector<std::byte> out(16);
          auto r = ring_->pop(out, 10s);
          ASSERT_TRUE(r) << r.error().what();
          ASSERT_TRUE(*r) << "timed out";
          EXPECT_EQ(test::str(std::span(out).first(**r)), expected);
        },
        [&] { return control_->waiters.consumers_waiting.count.load() != 0; }, change);
  }

  test::TempRoot root_;
  std::optional<MpmcRing> ring_;
  const mpmc::Control* control_ = nullptr;
};

// A producer killed between its claim and its publish holds the cell at head;
// the parked consumer polls it, finds the holder dead, tombstones the cell
// and takes the item behind it.
TEST_F(MpmcWakeProcessTest, ConsumerWakesWhenAProducerKilledMidPushIsRepaired) {
  make(8);
  Subprocess holder({test::helper_path("mpmc_hold"), "wake", "reserve"});
  ASSERT_TRUE(holder.wait_for_line("held", 10s)) << holder.output();
  ASSERT_TRUE(*ring_->try_push(bytes("behind")));
  test::expect_woken(consumer_woken_by([&] { holder.kill(SIGKILL); }, "behind"));
}

// A consumer killed between its claim and its release holds a cell of a full
// ring; the parked producer, blocked behind it, repairs it once the holder is
// dead.
TEST_F(MpmcWakeProcessTest, ProducerWakesWhenAConsumerKilledMidPopIsRepaired) {
  make(4);
  for (const char* s : {"a", "b", "c", "d"}) ASSERT_TRUE(*ring_->try_push(bytes(s)));
  Subprocess holder({test::helper_path("mpmc_hold"), "wake", "peek"});
  ASSERT_TRUE(holder.wait_for_line("held a", 10s)) << holder.output();
  test::expect_woken(test::probe_wake(
      [&] {
        auto r = ring_->push(bytes("e"), 10s);
        ASSERT_TRUE(r) << r.error().what();
        EXPECT_TRUE(*r) << "timed out";
      },
      [&] { return control_->waiters.producers_waiting.count.load() != 0; },
      [&] { holder.kill(SIGKILL); }));
}

// A kept taker (try_take) killed before its release: its death alone wakes
// nobody (the item sits behind head, where no pop looks); the repair that
// turns it into an orphan (here: the next open) is the change, and wakes the
// parked consumer, which adopts it.
TEST_F(MpmcWakeProcessTest, ConsumerWakesWhenAnOpenOrphansADeadTakersItem) {
  make(4);
  ASSERT_TRUE(*ring_->try_push(bytes("kept")));
  Subprocess taker({test::helper_path("mpmc_take_hold"), "wake"});
  ASSERT_TRUE(taker.wait_for_line("taken kept", 10s)) << taker.output();
  taker.kill(SIGKILL);
  ASSERT_EQ(taker.wait(10s), 128 + SIGKILL);
  std::optional<MpmcRing> next;
  test::expect_woken(consumer_woken_by(
      [&] {
        auto r = MpmcRing::open("wake");
        ASSERT_TRUE(r) << r.error().what();
        next.emplace(std::move(*r));
      },
      "kept"));
}

}  // namespace
}  // namespace shm::mpmc_wake_process_test
