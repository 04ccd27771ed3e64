// A forked child gets a copy of every handle its parent holds (fork copies
// the address space) but none of the parent's threads. Destroying those
// copies in the child must leave the parent's attachment slots, tickets and
// background threads alone, and must not hang: each test forks a child that
// drops its copies and exits, then checks the parent's handles still work.
#include "common/forked_child.hpp"
#include "common/spill_config.hpp"
#include "common/temp_dir.hpp"
#include "common/temp_root.hpp"
#include "shm/ledger/ledger.hpp"
#include "shm/ledger/slot_leases.hpp"
#include "shm/relay/relay.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <thread>

namespace shm {
namespace {

using namespace std::chrono_literals;

// Runs `drop` in a forked child, which then exits with 0 (1 if `drop`
// throws). Returns the child's exit status, or -1 when it was still running
// after 20 s (it is killed then: a hang fails the test instead of blocking).
int run_in_child(const std::function<void()>& drop) {
  return test::run_in_child([&] {
    try {
      drop();
    } catch (...) {
      return 1;
    }
    return 0;
  });
}

std::span<const std::byte> bytes_of(const std::uint64_t& v) {
  return std::as_bytes(std::span(&v, 1));
}

std::uint64_t u64_of(std::span<const std::byte> b) {
  std::uint64_t v = 0;
  std::memcpy(&v, b.data(), std::min(b.size(), sizeof v));
  return v;
}

std::size_t threads_in_this_process() {
  std::error_code ec;
  std::filesystem::directory_iterator it("/proc/self/task", ec);
  return ec ? 0
            : static_cast<std::size_t>(std::distance(it, std::filesystem::directory_iterator{}));
}

class ForkedChildTest : public ::testing::Test {
 protected:
  test::TempRoot root_;
};

TEST_F(ForkedChildTest, DroppingACopiedRingEndpointLeavesTheParentsSlotAttached) {
  std::optional<RingProducer> producer;
  {
    auto p = RingProducer::create("ring", {.capacity_bytes = 4096});
    ASSERT_TRUE(p) << p.error().what();
    producer.emplace(std::move(*p));
  }
  const std::uint64_t detaches_before =
      producer->segment().header().counters.detaches.load(std::memory_order_relaxed);

  ASSERT_EQ(run_in_child([&] { producer.reset(); }), 0);

  bool found = false;
  for (const SlotInfo& s : producer->segment().slots()) {
    if (s.pid != ::getpid()) continue;
    found = true;
    EXPECT_EQ(s.state, SlotState::Attached) << "the child freed the parent's slot";
    EXPECT_EQ(s.liveness, Liveness::Alive);
  }
  EXPECT_TRUE(found) << "the parent's producer slot is gone";
  EXPECT_EQ(producer->segment().header().counters.detaches.load(std::memory_order_relaxed),
            detaches_before)
      << "the child's copy counted a detach";
  auto second = RingProducer::open("ring");
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, Errc::RoleTaken);

  // The parent's producer still works, and a consumer gets what it sends.
  auto consumer = RingConsumer::open("ring");
  ASSERT_TRUE(consumer) << consumer.error().what();
  const std::uint64_t sent = 0x5eed;
  auto pushed = producer->try_push(bytes_of(sent));
  ASSERT_TRUE(pushed && *pushed);
  std::uint64_t got = 0;
  auto popped = consumer->try_pop(std::as_writable_bytes(std::span(&got, 1)));
  ASSERT_TRUE(popped && *popped);
  EXPECT_EQ(got, sent);

  // In the parent, dropping the handle still frees the slot.
  producer.reset();
  auto again = RingProducer::open("ring");
  EXPECT_TRUE(again) << again.error().what();
}

TEST_F(ForkedChildTest, DroppingACopiedLedgerReleasesNoneOfTheParentsTickets) {
  LedgerConfig cfg;
  cfg.params = {20'000, 4'000, 256, 8, 16, 4};
  cfg.categories = {{"a", 1'000, Partition::Ordinary}};
  std::optional<Ledger> ledger;
  {
    auto l = Ledger::create("budget", cfg);
    ASSERT_TRUE(l) << l.error().what();
    ledger.emplace(std::move(*l));
  }
  auto pool = ledger->open_pool({"mine", {{"all", 1'000, {}}}, 0});
  ASSERT_TRUE(pool) << pool.error().what();
  auto category = ledger->category("a");
  ASSERT_TRUE(category) << category.error().what();
  auto ticket = ledger->reserve(*pool, *category, 300);
  ASSERT_TRUE(ticket && *ticket);
  // Two slot-lease sets, each holding a parent ticket of its own.
  std::optional<SlotLeases> first, second;
  for (auto* set : {&first, &second}) {
    auto made = SlotLeases::make(*ledger, *pool, *category, 4, 10);
    ASSERT_TRUE(made && *made);
    set->emplace(std::move(**made));
  }

  // The child assigns one set over the other (the old one's parent ticket
  // would be released), then drops everything.
  ASSERT_EQ(run_in_child([&] {
              *first = std::move(*second);
              first.reset();
              second.reset();
              ledger.reset();
            }),
            0);

  auto tickets = ledger->tickets();
  ASSERT_TRUE(tickets) << tickets.error().what();
  ASSERT_EQ(tickets->size(), 3u) << "the child released some of the parent's tickets";
  EXPECT_TRUE(
      std::ranges::any_of(*tickets, [&](const TicketInfo& t) { return t.ticket == **ticket; }));
  ASSERT_TRUE(first->close());
  ASSERT_TRUE(second->close());
  auto problems = ledger->verify();
  ASSERT_TRUE(problems) << problems.error().what();
  EXPECT_TRUE(problems->empty());
  auto released = ledger->release(**ticket);
  EXPECT_TRUE(released) << released.error().what();
}

// The writer seals pages on a thread of its own (SealMode::Background), the
// reader reads the next cold page ahead and unlinks acknowledged pages on
// threads of its own: none of them exists in the child, whose copies must
// not wait for them.
TEST_F(ForkedChildTest, DroppingCopiedRelayHandlesDoesNotWaitForTheParentsThreads) {
  test::TempSpillDir spill;
  RelayConfig cfg = test::small_spill_fifo(spill.path());
  std::optional<RelayWriter> writer;
  std::optional<RelayReader> reader;
  {
    auto w = RelayWriter::create("relay", cfg);
    ASSERT_TRUE(w) << w.error().what();
    writer.emplace(std::move(*w));
    auto r = RelayReader::open("relay");
    ASSERT_TRUE(r) << r.error().what();
    reader.emplace(std::move(*r));
  }
  ASSERT_TRUE(writer->set_seal_mode(SealMode::Background));
  std::uint64_t next = 0;
  std::vector<std::uint64_t> got;
  // No seal in flight in 5 samples in a row (the sealer may start the next
  // page right after one), within 10 s.
  auto seals_settled = [&] {
    for (int i = 0, quiet = 0; i < 2000; ++i) {
      quiet = writer->snapshot().seal_in_flight ? 0 : quiet + 1;
      if (quiet == 5) return true;
      std::this_thread::sleep_for(2ms);
    }
    return false;
  };
  auto drain_some = [&](std::size_t credit) {
    auto n = reader->drain(credit, [&](const RelayEntry& e) { got.push_back(u64_of(e.value)); });
    EXPECT_TRUE(n) << n.error().what();
  };
  for (; next < 40; ++next) {
    auto w = writer->write(bytes_of(next), 5s);
    ASSERT_TRUE(w) << w.error().what();
  }
  ASSERT_TRUE(seals_settled());
  ASSERT_GT(writer->snapshot().pages_sealed, 1u) << "the sealer thread sealed nothing";
  // Until the first cold page is acknowledged (the reader's purger starts),
  // then one more take (it reads the next page ahead).
  for (int i = 0; i < 100 && writer->snapshot().pages_acked == 0; ++i) drain_some(3);
  ASSERT_GT(writer->snapshot().pages_acked, 0u);
  drain_some(3);
  EXPECT_GE(threads_in_this_process(), 3u) << "this thread, the sealer and the purger";

  ASSERT_EQ(run_in_child([&] { reader.reset(); }), 0) << "-1: the child hung dropping the reader";
  ASSERT_EQ(run_in_child([&] { writer.reset(); }), 0) << "-1: the child hung dropping the writer";

  // The parent's threads and roles are untouched: everything arrives in order.
  for (; next < 60; ++next) {
    auto w = writer->write(bytes_of(next), 5s);
    ASSERT_TRUE(w) << w.error().what();
  }
  ASSERT_TRUE(seals_settled());
  for (int i = 0; i < 1000 && got.size() < next; ++i) drain_some(7);
  ASSERT_EQ(got.size(), next);
  for (std::uint64_t i = 0; i < next; ++i) ASSERT_EQ(got[i], i) << "at " << i;
  auto second = RelayReader::open("relay");
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, Errc::RoleTaken);
}

}  // namespace
}  // namespace shm
