// reclaim_dead_attacher(), the one reclaim path of shm-sidecar and `shmctl
// reclaim`: a kind whose reclaim fails leaves the dead slot attached for a
// retry (never freed with what it held), and a later reclaim then frees it.
#include "common/temp_root.hpp"
#include "shm/segment/kind.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <csignal>
#include <optional>
#include <stdexcept>

namespace shm {
namespace {

TEST(ReclaimDeadAttacher, AFailedKindReclaimKeepsTheSlotForARetry) {
  test::TempRoot root;
  auto producer = RingProducer::create("ring", {.capacity_bytes = 4096});
  ASSERT_TRUE(producer) << producer.error().what();
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // a consumer that attaches, says so, and waits to be killed
    auto c = RingConsumer::open("ring");
    const char byte = c ? 'y' : 'n';
    (void)::write(ready[1], &byte, 1);
    ::pause();
    ::_exit(0);
  }
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ASSERT_EQ(byte, 'y');
  ::close(ready[0]);
  ::close(ready[1]);
  std::optional<SlotInfo> dead;
  for (const SlotInfo& s : producer->segment().slots())
    if (s.pid == child) dead = s;
  ASSERT_TRUE(dead);
  ::kill(child, SIGKILL);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);

  auto seg = Segment::open_any("ring", OpenOptions{});
  ASSERT_TRUE(seg) << seg.error().what();
  ASSERT_EQ(seg->liveness(dead->index), Liveness::Dead);
  KindDescriptor failing = kSpscRingDescriptor;
  failing.reclaim = [](Segment&, const SlotInfo&) -> Result<std::vector<std::string>> {
    return fail(Errc::Corrupt, "could not release everything");
  };
  auto failed = reclaim_dead_attacher(*seg, failing, *dead);
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code, Errc::Corrupt) << "the kind's own error code, passed through";
  EXPECT_NE(failed.error().message.find("could not release everything"), std::string::npos)
      << failed.error().message;
  EXPECT_EQ(seg->liveness(dead->index), Liveness::Dead) << "kept attached (and dead) for a retry";

  auto retried = reclaim_dead_attacher(*seg, kSpscRingDescriptor, *dead);
  ASSERT_TRUE(retried) << retried.error().what();
  EXPECT_EQ(retried->status, ReclaimStatus::Reclaimed);
  EXPECT_EQ(seg->liveness(dead->index), Liveness::Free);
  auto again = reclaim_dead_attacher(*seg, kSpscRingDescriptor, *dead);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, ReclaimStatus::Changed) << "a freed slot is not reclaimed twice";
}

}  // namespace
}  // namespace shm
