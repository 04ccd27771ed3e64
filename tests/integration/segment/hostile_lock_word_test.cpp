// A segment whose robust mutex names an owner thread that cannot hold it (a
// corrupt or hostile file: the kernel's robust-list recovery only covers
// owners that died while registered) must give every call that locks a typed
// Corrupt error naming the segment and its lock word, within a bounded time,
// never a wait for ever; shmctl verify reports it (exit 3) and inspect does
// not hang. One case per kind with a robust mutex, each with three owners:
// a thread that is gone, a kernel thread, a live process that does not map
// the segment (the last two are alive for ever: the fuzzer found a topic
// attach waiting on thread 2 for ever). The calls run in a forked
// child (a fresh process: it opens the file itself) with a deadline.
#include "common/forked_child.hpp"
#include "common/spill_config.hpp"
#include "common/subprocess.hpp"
#include "common/temp_dir.hpp"
#include "common/temp_root.hpp"
#include "shm/egress/egress.hpp"
#include "shm/egress/layout.hpp"
#include "shm/ledger/ledger.hpp"
#include "shm/platform/robust_mutex.hpp"
#include "shm/relay/relay.hpp"
#include "shm/segment/header.hpp"
#include "shm/topic/layout.hpp"
#include "shm/topic/topic.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <thread>

namespace shm::hostile_lock_word_test {
namespace {

using namespace std::chrono_literals;

constexpr std::uint32_t kFutexWaiters = 0x80000000u;

// The mutex sits first in each kind's control block, at the data area's start.
static_assert(offsetof(egress::Control, lock) == 0);
static_assert(offsetof(egress::Control::Lock, mutex) == 0);
static_assert(offsetof(topic::Control, lock) == 0);
static_assert(offsetof(topic::Control::Lock, mutex) == 0);

using test::gone_tid;

// A topic of 8 chunks of 64 bytes, queues of 4, 2 samples held at most.
TopicParams small_topic() {
  TopicParams p;
  p.max_sample_bytes = 64;
  p.chunks = 8;
  p.queue_depth = 4;
  p.max_held = 2;
  return p;
}

int run_in_child(const std::function<int()>& body) {
  return test::run_in_child(body, 30s);
}

// Writes, as a hostile process would, a lock word naming `tid` (plus the
// waiters bit) and glibc's owner field into the mutex at `offset` of the data area.
void forge_owner(const std::string& path, std::size_t offset, pid_t tid) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << path;
  const std::size_t at = kHeaderSize + offset;
  const std::uint32_t word = static_cast<std::uint32_t>(tid) | kFutexWaiters;
  const int owner = tid;
  ASSERT_EQ(::pwrite(fd, &word, sizeof word,
                     static_cast<off_t>(at + offsetof(pthread_mutex_t, __data.__lock))),
            static_cast<ssize_t>(sizeof word));
  ASSERT_EQ(::pwrite(fd, &owner, sizeof owner,
                     static_cast<off_t>(at + offsetof(pthread_mutex_t, __data.__owner))),
            static_cast<ssize_t>(sizeof owner));
  ::close(fd);
}

// 0 when `r` failed with Corrupt naming the segment and its lock word; the
// child's stderr says what else it was.
template <class T>
int expect_corrupt(const Result<T>& r, const std::string& path, const char* call) {
  if (r) {
    std::fprintf(stderr, "%s succeeded on a forged lock word\n", call);
    return 1;
  }
  const Error& e = r.error();
  const bool named = e.message.find(path) != std::string::npos &&
                     e.message.find("lock word is corrupt") != std::string::npos;
  if (e.code != Errc::Corrupt || !named) {
    std::fprintf(stderr, "%s: %s\n", call, e.what().c_str());
    return 2;
  }
  return 0;
}

// Whom the forged lock word names: a thread that is gone, a kernel thread, or
// a live process that does not map the segment. None can hold the mutex.
enum class ForgedOwner { Gone, KernelThread, Bystander };

std::string forged_owner_name(const ::testing::TestParamInfo<ForgedOwner>& info) {
  switch (info.param) {
    case ForgedOwner::Gone:
      return "Gone";
    case ForgedOwner::KernelThread:
      return "KernelThread";
    case ForgedOwner::Bystander:
      return "Bystander";
  }
  return "Unknown";
}

class HostileLockWordTest : public ::testing::TestWithParam<ForgedOwner> {
 protected:
  // The bystander is forked before the test creates its segment: it never maps it.
  void SetUp() override {
    if (GetParam() == ForgedOwner::Bystander) bystander_.emplace();
    if (GetParam() == ForgedOwner::KernelThread && test::kernel_thread_tid() == 0)
      GTEST_SKIP() << "no kernel thread visible in this pid namespace";
  }
  pid_t forged_tid() {
    switch (GetParam()) {
      case ForgedOwner::Gone:
        return gone_tid();
      case ForgedOwner::KernelThread:
        return test::kernel_thread_tid();
      case ForgedOwner::Bystander:
        return bystander_->pid();
    }
    return 0;
  }

  // shmctl verify reports the forged word (exit 3, the word named) and
  // inspect answers; neither locks, so neither waits.
  void expect_shmctl_reports(const std::string& name) {
    if (!std::filesystem::exists(test::bin_path("shmctl"))) {
#if SHM_EXPECT_TOOLS
      FAIL() << test::bin_path("shmctl") << " is missing although LIBSHM_BUILD_TOOLS is ON";
#else
      return;
#endif
    }
    test::Subprocess verify({test::bin_path("shmctl"), "verify", "--root", root_.path(), name});
    EXPECT_EQ(verify.wait(20s), 3) << verify.output();
    EXPECT_NE(verify.output().find("lock word is corrupt"), std::string::npos) << verify.output();
    test::Subprocess inspect({test::bin_path("shmctl"), "inspect", "--root", root_.path(), name});
    const int rc = inspect.wait(20s);
    EXPECT_TRUE(rc == 0 || rc == 3) << rc << ": " << inspect.output();
  }
  test::TempRoot root_;
  std::optional<test::Bystander> bystander_;
};

TEST_P(HostileLockWordTest, LedgerOpenAndLockingCallsAnswerCorrupt) {
  const std::string path = root_.file("budget");
  std::size_t offset = 0;
  {
    LedgerConfig cfg;
    cfg.params.global_limit = 1000;
    cfg.categories.push_back({"frames", 1000, Partition::Ordinary});
    auto l = Ledger::create("budget", cfg);
    ASSERT_TRUE(l) << l.error().what();
    offset = static_cast<std::size_t>(
        reinterpret_cast<const std::byte*>(&l->view().control->lock.mutex) -
        l->segment().data().data());
  }
  forge_owner(path, offset, forged_tid());
  const int rc = run_in_child([&] {
    auto l = Ledger::open("budget");
    if (!l) return expect_corrupt(l, path, "Ledger::open");
    return expect_corrupt(l->open_pool({"conn", {{"all", 10, {}}}, 0}), path, "open_pool");
  });
  EXPECT_EQ(rc, 0);
  expect_shmctl_reports("budget");
}

TEST_P(HostileLockWordTest, RelayOpenAndWriteAnswerCorrupt) {
  const std::string path = root_.file("rates");
  std::size_t offset = 0;
  {
    auto w = RelayWriter::create("rates", RelayConfig{});
    ASSERT_TRUE(w) << w.error().what();
    offset = static_cast<std::size_t>(
        reinterpret_cast<const std::byte*>(&w->view().control->mutex) - w->segment().data().data());
  }
  forge_owner(path, offset, forged_tid());
  const int rc = run_in_child([&] {
    const std::uint64_t v = 7;
    auto w = RelayWriter::open("rates");
    if (!w) return expect_corrupt(w, path, "RelayWriter::open");
    if (int bad =
            expect_corrupt(w->try_write(1, std::as_bytes(std::span(&v, 1))), path, "try_write");
        bad != 0)
      return bad;
    auto r = RelayReader::open("rates");
    if (!r) return expect_corrupt(r, path, "RelayReader::open");
    return 0;
  });
  EXPECT_EQ(rc, 0);
  expect_shmctl_reports("rates");
}

// The spill's seal mutex is only ever tried: a forged owner there makes the
// write that would seal a page answer Corrupt naming it, at once.
TEST_P(HostileLockWordTest, RelaySpillSealMutexMakesTheSealingWriteAnswerCorrupt) {
  test::TempSpillDir spill_dir;  // LIBSHM_SPILL_DIR/<relay>
  const std::string path = root_.file("spilled");
  std::size_t offset = 0;
  {
    auto w = RelayWriter::create("spilled", test::small_spill_fifo(""));
    ASSERT_TRUE(w) << w.error().what();
    offset =
        static_cast<std::size_t>(reinterpret_cast<const std::byte*>(&w->view().spill->seal_mutex) -
                                 w->segment().data().data());
  }
  forge_owner(path, offset, forged_tid());
  const int rc = run_in_child([&] {
    auto w = RelayWriter::open("spilled");
    if (!w) {
      std::fprintf(stderr, "RelayWriter::open: %s\n", w.error().what().c_str());
      return 3;
    }
    for (std::uint64_t i = 0; i < 16; ++i) {
      auto r = w->try_write(std::as_bytes(std::span(&i, 1)));
      if (r) continue;
      const Error& e = r.error();
      const bool named = e.message.find("seal mutex's lock word is corrupt") != std::string::npos;
      if (e.code != Errc::Corrupt || !named) {
        std::fprintf(stderr, "try_write %llu: %s\n", static_cast<unsigned long long>(i),
                     e.what().c_str());
        return 2;
      }
      return 0;
    }
    std::fprintf(stderr, "16 writes and no seal refused\n");
    return 1;
  });
  EXPECT_EQ(rc, 0);
}

TEST_P(HostileLockWordTest, EgressOpenAndEnqueueAnswerCorrupt) {
  const std::string path = root_.file("out");
  {
    EgressParams p;
    p.max_payloads = 8;
    p.slot_bytes = 16;
    p.inflight_limit = 8;
    auto e = Egress::create("out", p);
    ASSERT_TRUE(e) << e.error().what();
  }
  forge_owner(path, 0, forged_tid());
  const int rc = run_in_child([&] {
    const std::byte payload[4]{};
    auto e = Egress::open("out");
    if (!e) return expect_corrupt(e, path, "Egress::open");
    return expect_corrupt(e->try_enqueue(payload), path, "try_enqueue");
  });
  EXPECT_EQ(rc, 0);
  expect_shmctl_reports("out");
}

TEST_P(HostileLockWordTest, TopicPublisherAndSubscriberOpenAnswerCorrupt) {
  const std::string path = root_.file("news");
  {
    auto pub = TopicPublisher::create("news", small_topic());
    ASSERT_TRUE(pub) << pub.error().what();
  }
  forge_owner(path, 0, forged_tid());
  const int rc = run_in_child([&] {
    auto sub = TopicSubscriber::open("news", TopicOverflow::DropOldest);
    if (!sub) {
      if (int bad = expect_corrupt(sub, path, "TopicSubscriber::open"); bad != 0) return bad;
    } else if (int bad = expect_corrupt(sub->try_receive(), path, "try_receive"); bad != 0) {
      return bad;
    }
    auto pub = TopicPublisher::open("news");
    if (!pub) return expect_corrupt(pub, path, "TopicPublisher::open");
    return expect_corrupt(pub->try_loan(8), path, "try_loan");
  });
  EXPECT_EQ(rc, 0);
  expect_shmctl_reports("news");
}

INSTANTIATE_TEST_SUITE_P(Owners, HostileLockWordTest,
                         ::testing::Values(ForgedOwner::Gone, ForgedOwner::KernelThread,
                                           ForgedOwner::Bystander),
                         forged_owner_name);

// A live process holding the mutex at the start of a segment's data area
// (the egress's, the relay's and the topic's are there) until release() or
// the end of the object.
class LiveHolder {
 public:
  explicit LiveHolder(const std::string& path) {
    int go[2];
    int held[2];
    if (::pipe(go) != 0 || ::pipe(held) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(go[1]);
      ::close(held[0]);
      const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
      void* map =
          fd < 0 ? MAP_FAILED
                 : ::mmap(nullptr, kHeaderSize + 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (map == MAP_FAILED) ::_exit(1);
      auto* m = reinterpret_cast<detail::RobustMutex*>(static_cast<std::byte*>(map) + kHeaderSize);
      if (m->lock() != detail::LockResult::Acquired) ::_exit(2);
      (void)!::write(held[1], "h", 1);
      char c = 0;
      (void)!::read(go[0], &c, 1);  // until the parent closes its end
      m->unlock();
      ::_exit(0);
    }
    ::close(go[0]);
    ::close(held[1]);
    go_ = go[1];
    char c = 0;
    holding_ = pid_ > 0 && ::read(held[0], &c, 1) == 1;
    ::close(held[0]);
  }
  LiveHolder(const LiveHolder&) = delete;
  LiveHolder& operator=(const LiveHolder&) = delete;
  ~LiveHolder() { (void)release(); }
  [[nodiscard]] bool holding() const { return holding_; }
  // Lets go and reaps the holder: true when it exited 0.
  bool release() {
    if (pid_ <= 0) return false;
    ::close(go_);
    int status = 0;
    const bool ok =
        ::waitpid(pid_, &status, 0) == pid_ && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    pid_ = -1;
    return ok;
  }

 private:
  pid_t pid_ = -1;
  int go_ = -1;
  bool holding_ = false;
};

// How long a timed call may take while a live process holds the mutex: its
// timeout, a lock slice of waiting for it, and scheduling slack.
constexpr auto kTimedCallBound = 2 * detail::RobustMutex::kLockSlice + 200ms;

// A live process holding the egress mutex (stopped inside, say) keeps the
// ordinary semantics: the timed calls answer their timeout outcome within
// their timeout (plus a slice), and work again as soon as it lets go.
TEST(LiveLockHolderTest, EgressTimedCallsAnswerTheirTimeoutOutcomeWhileALiveProcessHoldsTheMutex) {
  test::TempRoot root;
  EgressParams p;
  p.max_payloads = 8;
  p.slot_bytes = 16;
  p.inflight_limit = 8;
  auto transport = EgressTransport::create("held", p);
  ASSERT_TRUE(transport) << transport.error().what();
  auto producer = Egress::open("held");
  ASSERT_TRUE(producer) << producer.error().what();
  LiveHolder holder(root.file("held"));
  ASSERT_TRUE(holder.holding());
  const std::byte payload[4]{};
  std::vector<std::byte> buf;
  auto start = std::chrono::steady_clock::now();
  auto claimed = transport->claim(buf, 300ms);
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(claimed) << claimed.error().what();
  EXPECT_EQ(claimed->status, egress::ClaimStatus::Empty);
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 300ms + kTimedCallBound);
  start = std::chrono::steady_clock::now();
  auto enq = producer->enqueue(payload, 300ms);
  took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(enq) << enq.error().what();
  EXPECT_EQ(enq->status, egress::EnqueueStatus::Full);
  EXPECT_LT(took, 300ms + kTimedCallBound);
  // Released: the same calls go through.
  ASSERT_TRUE(holder.release());
  enq = producer->enqueue(payload, 1s);
  ASSERT_TRUE(enq) << enq.error().what();
  EXPECT_EQ(enq->status, egress::EnqueueStatus::Enqueued);
  claimed = transport->claim(buf, 1s);
  ASSERT_TRUE(claimed) << claimed.error().what();
  EXPECT_EQ(claimed->status, egress::ClaimStatus::Claimed);
}

// The same for the relay: write(timeout) and try_write answer TimedOut, and
// the reader's wait(timeout) false, within their timeout while a live
// process holds the relay's mutex; they waited for ever before.
TEST(LiveLockHolderTest, RelayTimedCallsAnswerTheirTimeoutOutcomeWhileALiveProcessHoldsTheMutex) {
  test::TempRoot root;
  RelayConfig rc;
  rc.policy = policy::kSum;
  rc.value_bytes = 8;
  rc.max_entries = 16;
  rc.backpressure = Backpressure{Dimension::Count, 12, 4, Overflow::Block};
  auto reader = RelayReader::create("held", rc);
  ASSERT_TRUE(reader) << reader.error().what();
  auto writer = RelayWriter::open("held");
  ASSERT_TRUE(writer) << writer.error().what();
  const std::uint64_t one = 1;
  const auto op = std::as_bytes(std::span(&one, 1));
  LiveHolder holder(root.file("held"));
  ASSERT_TRUE(holder.holding());
  // A new key takes the mutex (an open key's sum could take the lock-free path).
  auto start = std::chrono::steady_clock::now();
  auto wrote = writer->write(7, op, 300ms);
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(wrote) << wrote.error().what();
  EXPECT_EQ(wrote->status, WriteStatus::TimedOut);
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 300ms + kTimedCallBound);
  start = std::chrono::steady_clock::now();
  wrote = writer->try_write(8, op);
  took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(wrote) << wrote.error().what();
  EXPECT_EQ(wrote->status, WriteStatus::TimedOut);
  EXPECT_LT(took, kTimedCallBound);
  start = std::chrono::steady_clock::now();
  auto waited = reader->wait(300ms);
  took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(waited) << waited.error().what();
  EXPECT_FALSE(*waited);
  EXPECT_LT(took, 300ms + kTimedCallBound);
  // Released: the same calls go through.
  ASSERT_TRUE(holder.release());
  wrote = writer->write(7, op, 1s);
  ASSERT_TRUE(wrote) << wrote.error().what();
  EXPECT_EQ(wrote->status, WriteStatus::Appended);
  waited = reader->wait(1s);
  ASSERT_TRUE(waited) << waited.error().what();
  EXPECT_TRUE(*waited);
}

// The same for the topic: its try_ calls answer "nothing now" (no chunk,
// Full, no sample) after one lock slice, and the timed ones their timeout
// outcome within their timeout, while a live process holds the topic's
// mutex; they waited for ever before.
TEST(LiveLockHolderTest, TopicCallsAnswerNothingNowWhileALiveProcessHoldsTheMutex) {
  test::TempRoot root;
  auto pub = TopicPublisher::create("held", small_topic());
  ASSERT_TRUE(pub) << pub.error().what();
  auto sub = TopicSubscriber::open("held", TopicOverflow::Block);
  ASSERT_TRUE(sub) << sub.error().what();
  auto first = pub->try_loan(8);
  ASSERT_TRUE(first && first->has_value());
  auto published = pub->try_publish(std::move(**first));
  ASSERT_TRUE(published && published->status == PublishStatus::Published);
  auto second = pub->try_loan(8);
  ASSERT_TRUE(second && second->has_value());
  LoanedSample sample = std::move(**second);
  LiveHolder holder(root.file("held"));
  ASSERT_TRUE(holder.holding());
  auto timed = [](auto&& call) {
    const auto start = std::chrono::steady_clock::now();
    auto r = call();
    return std::make_pair(std::move(r), std::chrono::steady_clock::now() - start);
  };
  auto [loaned, took] = timed([&] { return pub->try_loan(8); });
  ASSERT_TRUE(loaned) << loaned.error().what();
  EXPECT_FALSE(loaned->has_value());
  EXPECT_LT(took, kTimedCallBound);
  std::tie(loaned, took) = timed([&] { return pub->loan(8, 300ms); });
  ASSERT_TRUE(loaned) << loaned.error().what();
  EXPECT_FALSE(loaned->has_value());
  EXPECT_LT(took, 300ms + kTimedCallBound);
  auto [out, took_publish] = timed([&] { return pub->try_publish(std::move(sample)); });
  ASSERT_TRUE(out) << out.error().what();
  EXPECT_EQ(out->status, PublishStatus::Full);
  EXPECT_LT(took_publish, kTimedCallBound);
  std::tie(out, took_publish) = timed([&] { return pub->publish(std::move(sample), 300ms); });
  ASSERT_TRUE(out) << out.error().what();
  EXPECT_EQ(out->status, PublishStatus::Full);
  EXPECT_LT(took_publish, 300ms + kTimedCallBound);
  auto [got, took_receive] = timed([&] { return sub->receive(300ms); });
  ASSERT_TRUE(got) << got.error().what();
  EXPECT_FALSE(got->has_value());
  EXPECT_LT(took_receive, 300ms + kTimedCallBound);
  // Released: the same calls go through (the caller kept its sample).
  ASSERT_TRUE(holder.release());
  got = sub->try_receive();
  ASSERT_TRUE(got) << got.error().what();
  EXPECT_TRUE(got->has_value());
  out = pub->try_publish(std::move(sample));
  ASSERT_TRUE(out) << out.error().what();
  EXPECT_EQ(out->status, PublishStatus::Published);
}

}  // namespace
}  // namespace shm::hostile_lock_word_test
