// The Channel kind descriptor: what shmctl inspect / verify / dump and the
// sidecar see, with no channel-specific code in them.
#include "common/node_fields.hpp"
#include "common/temp_root.hpp"
#include "common/text.hpp"
#include "shm/segment/kind.hpp"
#include "shm/testing/channel.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <csignal>
#include <optional>
#include <string>
#include <thread>
#include <utility>

namespace shm {
namespace {

using detail::ChannelTesting;

using test::bytes;

using test::u64;
bool contains(const std::vector<std::string>& lines, std::string_view needle) {
  for (const auto& l : lines)
    if (l.find(needle) != std::string::npos) return true;
  return false;
}
std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}
std::string text(const Node& n, std::string_view key) {
  const Node* f = n.find(key);
  if (f == nullptr) return "<missing>";
  if (const auto* v = std::get_if<std::string>(&f->value())) return *v;
  return "<not a string>";
}

class ChannelKindTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto p = ChannelProducer::create(
        "k", {.pages = 4, .page_bytes = 64, .descriptors_per_page = 2, .ring_cells = 16});
    ASSERT_TRUE(p) << p.error().what();
    producer_ = std::move(*p);
    auto c = ChannelConsumer::open("k");
    ASSERT_TRUE(c) << c.error().what();
    consumer_ = std::move(*c);
    auto seg = Segment::open_any("k", {.read_only = true});
    ASSERT_TRUE(seg) << seg.error().what();
    observer_ = std::move(*seg);
  }
  void send(const std::string& s) {
    auto r = producer_.try_send(bytes(s));
    ASSERT_TRUE(r && *r);
  }
  void take() {
    auto r = consumer_.try_receive();
    ASSERT_TRUE(r && *r);
  }
  Node describe() const {
    Node n;
    kChannelDescriptor.describe(observer_, n);
    return n;
  }

  test::TempRoot root_;
  ChannelProducer producer_;
  ChannelConsumer consumer_;
  Segment observer_;
};

TEST_F(ChannelKindTest, IsRegisteredInTheKindTableWithItsRoles) {
  const KindDescriptor* d = find_kind(kChannelKind);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->name, "channel");
  EXPECT_EQ(d->fingerprint, channel::kFingerprint);
  EXPECT_EQ(role_name(d, 0), "producer");
  EXPECT_EQ(role_name(d, 1), "consumer");
  EXPECT_EQ(role_name(d, 2), "observer");
}

TEST_F(ChannelKindTest, DescribeShowsGeometryEpochsSlotsAndCounters) {
  for (int i = 0; i < 5; ++i) send("m" + std::to_string(i));  // epochs 0, 0, 1, 1, 2
  take();
  take();
  take();  // crosses into epoch 1: epoch 0 released
  (void)producer_.try_send(bytes("x"));
  const Node n = describe();
  EXPECT_EQ(u64(n, "pages"), 4u);
  EXPECT_EQ(u64(n, "page_bytes"), 64u);
  EXPECT_EQ(u64(n, "descriptors_per_page"), 2u);
  EXPECT_EQ(u64(n, "ring_capacity"), 16u);
  EXPECT_EQ(text(n, "terminal"), "open");
  EXPECT_EQ(u64(n, "active_epoch"), 2u);
  EXPECT_EQ(u64(n, "released_epoch"), 1u);
  EXPECT_EQ(n.find("active_epoch")->metric(), Node::Metric::Gauge);
  EXPECT_EQ(u64(n, "sent"), 6u);
  EXPECT_EQ(u64(n, "received"), 3u);
  EXPECT_EQ(n.find("sent")->metric(), Node::Metric::Counter);
  EXPECT_EQ(u64(n, "rotations"), 2u);
  EXPECT_EQ(u64(n, "quota_refusals"), 0u);
  EXPECT_EQ(u64(n, "depth"), 3u);
  const Node* slots = n.find("slots");
  ASSERT_NE(slots, nullptr);
  ASSERT_EQ(slots->elements().size(), 4u);
  const Node& s0 = slots->elements()[0];
  EXPECT_EQ(text(s0, "state"), "sealed");
  EXPECT_EQ(u64(s0, "published"), 2u);
  EXPECT_EQ(u64(s0, "committed"), 2u);
  const Node& s1 = slots->elements()[1];
  EXPECT_EQ(u64(s1, "epoch"), 1u);
  EXPECT_EQ(u64(s1, "generation"), 1u);
  EXPECT_EQ(u64(s1, "first_sequence"), 2u);
  EXPECT_EQ(u64(s1, "committed"), 1u) << "the consumer is one payload into epoch 1";
  const Node& s2 = slots->elements()[2];
  EXPECT_EQ(text(s2, "state"), "open");
  EXPECT_EQ(u64(s2, "published"), 2u);
  EXPECT_EQ(u64(s2, "committed"), 0u);
  EXPECT_EQ(text(slots->elements()[3], "state"), "unbound");
}

TEST_F(ChannelKindTest, DescribeShowsQuotaRefusalsAndTheFault) {
  for (int i = 0; i < 8; ++i) send("q");
  auto r = producer_.try_send(bytes("q"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, SendStatus::PageQuotaExhausted);
  EXPECT_EQ(u64(describe(), "quota_refusals"), 1u);
  ChannelTesting::push_descriptor(producer_, {99, 0, 0});
  // Drains 8 then meets the forged descriptor.
  for (int i = 0; i < 8; ++i) take();
  ASSERT_FALSE(consumer_.try_receive());
  const Node n = describe();
  EXPECT_EQ(text(n, "terminal"), "faulted");
  const Node* f = n.find("fault");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(text(*f, "cause"), "generation mismatch");
  EXPECT_EQ(u64(*f, "sequence"), 8u);
  EXPECT_EQ(u64(*f, "role"), 1u) << "detected by the consumer";
}

TEST_F(ChannelKindTest, VerifyIsQuietOnAHealthyChannelInEveryPhase) {
  EXPECT_TRUE(kChannelDescriptor.verify(observer_).empty());
  for (int i = 0; i < 7; ++i) send("v" + std::to_string(i));
  EXPECT_EQ(kChannelDescriptor.verify(observer_), std::vector<std::string>{});
  take();
  take();
  take();
  EXPECT_EQ(kChannelDescriptor.verify(observer_), std::vector<std::string>{});
  ASSERT_TRUE(producer_.finish());
  EXPECT_EQ(kChannelDescriptor.verify(observer_), std::vector<std::string>{});
  for (int i = 0; i < 4; ++i) take();
  auto end = consumer_.try_receive();
  ASSERT_TRUE(end && end->status == ReceiveStatus::End);
  EXPECT_EQ(kChannelDescriptor.verify(observer_), std::vector<std::string>{});
}

TEST_F(ChannelKindTest, VerifyReportsBrokenInvariants) {
  for (int i = 0; i < 5; ++i) send("b");
  const channel::View v = ChannelTesting::view(producer_);
  // A page whose first sequence does not continue its predecessor's.
  v.slot_header(1)->binding.first_sequence.store(7);
  auto bad = kChannelDescriptor.verify(observer_);
  EXPECT_TRUE(contains(bad, "epoch 1 cell 0: sequence 0x2, expected 0x7")) << joined(bad);
  v.slot_header(1)->binding.first_sequence.store(2);
  EXPECT_TRUE(kChannelDescriptor.verify(observer_).empty());
  v.control->terminal.word.store(0xdeadbeef);
  bad = kChannelDescriptor.verify(observer_);
  EXPECT_TRUE(contains(bad, "terminal word 0xdeadbeef")) << joined(bad);
  v.control->terminal.word.store(channel::kTerminalOpen);
  v.control->release.released_epoch.store(9);
  bad = kChannelDescriptor.verify(observer_);
  EXPECT_TRUE(contains(bad, "released_epoch 9")) << joined(bad);
  v.control->release.released_epoch.store(0);
  v.cells(0)[1].offset = 40;
  bad = kChannelDescriptor.verify(observer_);
  EXPECT_TRUE(contains(bad, "epoch 0 cell 1: offset 40 length 1, expected offset 8"))
      << joined(bad);
  v.cells(0)[1].offset = 8;
  v.slot_header(2)->binding.generation.store(6);
  bad = kChannelDescriptor.verify(observer_);
  EXPECT_TRUE(contains(bad, "slot 2 should hold live epoch 2")) << joined(bad);
}

// Issue 18, defect 3: verify checked the cell chain but never the payload
// bytes, so a channel whose payloads were scribbled on passed.
TEST_F(ChannelKindTest, VerifyNamesEveryPayloadWhoseBytesNoLongerMatchTheirCrc) {
  for (int i = 0; i < 5; ++i) send("p" + std::to_string(i));  // epochs 0 (0, 1), 1 (2, 3), 2 (4)
  take();  // sequence 0 consumed, its page still bound: checked too
  EXPECT_EQ(kChannelDescriptor.verify(observer_), std::vector<std::string>{});
  const channel::View v = ChannelTesting::view(producer_);
  v.arena(0)[8] ^= std::byte{0x01};  // sequence 1: epoch 0, cell 1 at offset 8
  v.arena(2)[1] ^= std::byte{0x40};  // sequence 4: epoch 2, cell 0
  auto bad = kChannelDescriptor.verify(observer_);
  ASSERT_EQ(bad.size(), 2u) << joined(bad);
  EXPECT_TRUE(contains(bad, "payload sequence 1 (epoch 0 page slot 0 cell 1, 2 bytes at offset 8)"))
      << joined(bad);
  EXPECT_TRUE(contains(bad, "payload sequence 4 (epoch 2 page slot 2 cell 0, 2 bytes at offset 0)"))
      << joined(bad);
  EXPECT_TRUE(contains(bad, "CRC32C")) << joined(bad);
  v.arena(0)[8] ^= std::byte{0x01};
  v.arena(2)[1] ^= std::byte{0x40};
  EXPECT_EQ(kChannelDescriptor.verify(observer_), std::vector<std::string>{});
}

TEST_F(ChannelKindTest, VerifyReportsAChannelTheConsumerFaultedForAChecksumMismatch) {
  send("good");
  send("flip");
  take();
  ChannelTesting::view(producer_).arena(0)[8] ^= std::byte{0x01};
  auto r = consumer_.try_receive();
  ASSERT_FALSE(r);
  ASSERT_EQ(consumer_.fault(), ChannelFault::ChecksumMismatch);
  const auto bad = kChannelDescriptor.verify(observer_);
  EXPECT_TRUE(contains(bad,
                       "channel is FAULTED: checksum mismatch (fault code 4) at epoch 0, "
                       "sequence 1, detected by the consumer (pid " +
                           std::to_string(::getpid()) + ")"))
      << joined(bad);
  EXPECT_TRUE(contains(bad, "payload sequence 1 (epoch 0 page slot 0 cell 1")) << joined(bad);
}

// Every cause a channel can record is terminal and reported with its name,
// including the causes that are not about corruption (ProducerDied).
class ChannelKindFaultTest : public ChannelKindTest,
                             public ::testing::WithParamInterface<ChannelFault> {};

TEST_P(ChannelKindFaultTest, VerifyReportsTheFaultedStateWithItsCause) {
  send("x");
  auto& t = ChannelTesting::view(producer_).control->terminal;
  t.fault.store(static_cast<std::uint32_t>(GetParam()));
  t.fault_epoch.store(0);
  t.fault_sequence.store(1);
  t.fault_role.store(channel::kObserverRole.id);
  t.fault_pid.store(4242);
  t.word.store(channel::kTerminalFaulted);
  const auto bad = kChannelDescriptor.verify(observer_);
  ASSERT_EQ(bad.size(), 1u) << joined(bad);
  EXPECT_EQ(bad[0], fmt::format("channel is FAULTED: {} (fault code {}) at epoch 0, sequence 1, "
                                "detected by the sidecar or an observer (pid 4242)",
                                to_string(GetParam()), static_cast<std::uint32_t>(GetParam())));
}

INSTANTIATE_TEST_SUITE_P(EveryFaultCode, ChannelKindFaultTest,
                         ::testing::Values(ChannelFault::GenerationMismatch,
                                           ChannelFault::SequenceGap, ChannelFault::CountShortfall,
                                           ChannelFault::ChecksumMismatch,
                                           ChannelFault::DescriptorOutOfBounds,
                                           ChannelFault::CorruptTerminal,
                                           ChannelFault::CorruptState, ChannelFault::ProducerDied),
                         [](const ::testing::TestParamInfo<ChannelFault>& param) {
                           return "Code" + std::to_string(static_cast<std::uint32_t>(param.param));
                         });

TEST_F(ChannelKindTest, VerifyReportsAFaultedChannelWithAnUnknownCode) {
  auto& t = ChannelTesting::view(producer_).control->terminal;
  for (const std::uint32_t code : {0u, 9u, 0xdeadu}) {
    t.fault.store(code);
    t.word.store(channel::kTerminalFaulted);
    const auto bad = kChannelDescriptor.verify(observer_);
    EXPECT_TRUE(contains(bad, fmt::format("channel is FAULTED with unknown fault code {} ", code)))
        << joined(bad);
  }
}

// verify is read-only and takes no lock, so it runs against a channel that a
// producer and a consumer (other processes) drive through thousands of page
// rotations: it checks only published payloads and skips a page recycled
// while it read it, so a healthy live channel never shows a violation.
TEST_F(ChannelKindTest, VerifyOfALiveChannelNeverReportsAHealthyPayload) {
  constexpr int kMessages = 20000;
  const ChannelParams params{
      .pages = 4, .page_bytes = 256, .descriptors_per_page = 4, .ring_cells = 16};
  ASSERT_TRUE(create_channel("live", params));
  auto spawn = [](auto body) {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(body());
    return pid;
  };
  const pid_t producer = spawn([] {
    auto p = ChannelProducer::open("live");
    if (!p) return 10;
    for (int i = 0; i < kMessages;) {
      const std::string m(static_cast<std::size_t>(1 + i % 60), static_cast<char>('a' + i % 26));
      auto r = p->try_send(bytes(m));
      if (!r) return 11;
      if (r->status == SendStatus::Ok) ++i;
    }
    return p->finish() ? 0 : 12;
  });
  ASSERT_GT(producer, 0);
  auto observer = Segment::open_any("live", {.read_only = true});
  ASSERT_TRUE(observer) << observer.error().what();
  // The consumer starts once the producer holds its role (else it could see
  // an abandoned channel).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  auto producer_attached = [&] {
    for (const SlotInfo& s : observer->slots())
      if (s.pid == producer) return true;
    return false;
  };
  while (!producer_attached() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  const pid_t consumer = spawn([] {
    auto c = ChannelConsumer::open("live");
    if (!c) return 20;
    for (;;) {
      auto r = c->try_receive();
      if (!r) return 21;
      if (r->status == ReceiveStatus::End) return 0;
      if (r->status == ReceiveStatus::Received) r->lease.release();
    }
  });
  ASSERT_GT(consumer, 0);
  std::vector<std::string> seen;
  int verifies = 0;
  int producer_status = -1, consumer_status = -1;
  while ((producer_status < 0 || consumer_status < 0) &&
         std::chrono::steady_clock::now() < deadline) {
    for (auto& line : kChannelDescriptor.verify(*observer)) seen.push_back(std::move(line));
    ++verifies;
    int status = 0;
    if (producer_status < 0 && ::waitpid(producer, &status, WNOHANG) == producer)
      producer_status = status;
    if (consumer_status < 0 && ::waitpid(consumer, &status, WNOHANG) == consumer)
      consumer_status = status;
  }
  for (const pid_t pid : {producer, consumer}) ::kill(pid, SIGKILL);
  if (producer_status < 0) (void)::waitpid(producer, &producer_status, 0);
  if (consumer_status < 0) (void)::waitpid(consumer, &consumer_status, 0);
  ASSERT_TRUE(WIFEXITED(producer_status) && WEXITSTATUS(producer_status) == 0) << producer_status;
  ASSERT_TRUE(WIFEXITED(consumer_status) && WEXITSTATUS(consumer_status) == 0) << consumer_status;
  EXPECT_EQ(seen, std::vector<std::string>{}) << "over " << verifies << " verifies";
  EXPECT_EQ(kChannelDescriptor.verify(*observer), std::vector<std::string>{});
}

// verify() and a consumer taking over (resume) judge ring positions by the
// same predicate: both refuse a tail beyond head + ring capacity.
TEST_F(ChannelKindTest, ImpossibleRingPositionsAreReportedByVerifyAndRefusedByANewConsumer) {
  send("a");
  { const ChannelConsumer gone = std::move(consumer_); }
  const channel::View v = ChannelTesting::view(producer_);
  v.control->producer.tail.store(1000);
  const auto bad = kChannelDescriptor.verify(observer_);
  EXPECT_TRUE(contains(bad, "ring head 0 / tail 1000 impossible for capacity 16")) << joined(bad);
  auto c = ChannelConsumer::open("k");
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("positions are impossible: head 0, tail 1000"),
            std::string::npos)
      << c.error().message;
}

TEST_F(ChannelKindTest, DumpCopiesThePublishedUnconsumedPayloads) {
  for (int i = 0; i < 5; ++i) send("d" + std::to_string(i));
  take();
  auto all = kChannelDescriptor.dump(observer_, 100);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(all[0].data()), all[0].size()), "d1");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(all[3].data()), all[3].size()), "d4");
  EXPECT_EQ(kChannelDescriptor.dump(observer_, 2).size(), 2u);
}

TEST_F(ChannelKindTest, ReclaimOfADeadConsumerKeepsItsPositionForASuccessor) {
  for (const char* m : {"a", "b", "c"}) send(m);
  consumer_ = ChannelConsumer();  // leaves: the consumer role is free for one that dies
  // A consumer in a child process takes "a" (released: its position moves to
  // 1), holds the lease of "b" and is killed with it in hand.
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto c = ChannelConsumer::open("k");
    bool ok = false;
    if (c) {
      auto a = c->try_receive();
      ok = a && *a && a->lease.sequence() == 0;
      if (ok) a->lease.release();
      auto b = c->try_receive();
      ok = ok && b && *b && b->lease.sequence() == 1;
      const char byte = ok ? 'y' : 'n';
      (void)::write(ready[1], &byte, 1);
      ::pause();  // killed here, "b" in hand
    }
    const char byte = 'n';
    (void)::write(ready[1], &byte, 1);
    ::_exit(1);
  }
  char byte = 0;
  const bool answered = ::read(ready[0], &byte, 1) == 1;
  ::close(ready[0]);
  ::close(ready[1]);
  std::optional<SlotInfo> dead;
  for (const SlotInfo& s : observer_.slots())
    if (s.pid == child) dead = s;
  ::kill(child, SIGKILL);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  ASSERT_TRUE(answered && byte == 'y') << "the child's consumer did not take a and hold b";
  ASSERT_TRUE(dead) << "the child's consumer slot";
  ASSERT_EQ(dead->role, channel::kConsumerRole.id);

  auto seg = Segment::open_any("k", {});
  ASSERT_TRUE(seg) << seg.error().what();
  ASSERT_EQ(seg->liveness(dead->index), Liveness::Dead);
  auto reclaimed = reclaim_dead_attacher(*seg, kChannelDescriptor, *dead);
  ASSERT_TRUE(reclaimed) << reclaimed.error().what();
  EXPECT_EQ(reclaimed->status, ReclaimStatus::Reclaimed);
  ASSERT_EQ(reclaimed->actions.size(), 1u);
  EXPECT_NE(
      reclaimed->actions[0].find("consumer pid " + std::to_string(child) + " freed at sequence 1"),
      std::string::npos)
      << reclaimed->actions[0];
  EXPECT_EQ(producer_.state(), ChannelState::Open) << "a dead consumer does not fault the channel";

  // The successor resumes at the kept position: "b" again (it was in hand,
  // never released), then "c"; "a" is not delivered twice.
  auto successor = ChannelConsumer::open("k");
  ASSERT_TRUE(successor) << successor.error().what();
  EXPECT_EQ(successor->next_sequence(), 1u);
  for (const auto& [seq, text] : {std::pair<std::uint64_t, std::string>{1, "b"}, {2, "c"}}) {
    auto r = successor->try_receive();
    ASSERT_TRUE(r) << r.error().what();
    ASSERT_EQ(r->status, ReceiveStatus::Received) << "expected " << text;
    EXPECT_EQ(r->lease.sequence(), seq);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(r->lease.bytes().data()),
                          r->lease.bytes().size()),
              text);
  }
  auto empty = successor->try_receive();
  ASSERT_TRUE(empty) << empty.error().what();
  EXPECT_EQ(empty->status, ReceiveStatus::Empty);
}

}  // namespace
}  // namespace shm
