// The relay's Spill overflow over a spill store: the oldest entries go to
// sealed pages instead of blocking or dropping, the reader drains cold pages
// in order then the hot head, a page file goes only after its ack, the
// manifest is rebuilt from the directory, bad pages are refused and counted,
// retention bounds fall back to Block, and reconstruction equals the flat fold.
#include "common/flip_byte.hpp"
#include "common/scale.hpp"
#include "common/temp_dir.hpp"
#include "common/temp_root.hpp"
#include "shm/relay/relay.hpp"
#include "shm/segment/kind.hpp"
#include "shm/testing/spill_crash.hpp"

#include <gtest/gtest.h>

#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace shm {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Room for `records` 8-byte records per page.
constexpr std::uint64_t page_for(std::uint64_t records) {
  return spill::kPageHeaderSize + records * spill::record_stride(8);
}

RelayConfig spill_cfg(PolicyId policy, std::uint32_t capacity = 8, std::uint64_t high = 6,
                      std::uint64_t low = 2, std::uint64_t page_records = 4) {
  RelayConfig c;
  c.policy = policy;
  c.max_entries = capacity;
  c.value_bytes = 8;
  c.backpressure = Backpressure{Dimension::Count, high, low, Overflow::Spill};
  c.spill_dedup = true;
  c.spill.enabled = true;
  c.spill.page_size = page_for(page_records);
  return c;
}

// Entries of `dir`/removed/ (0 when it does not exist).
std::size_t removed_left(const std::string& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir + "/removed", ec);
  return ec ? 0 : static_cast<std::size_t>(std::distance(it, fs::directory_iterator{}));
}

// Drains everything; returns (key, value, first_seq) in delivery order.
struct SpilledEntry {
  std::uint64_t key, value, first, last, count;
  bool redelivered;
  std::uint64_t page;
};
std::vector<SpilledEntry> drain_spilled(RelayReader& r, std::size_t credit = 3) {
  std::vector<SpilledEntry> out;
  for (int guard = 0; guard < 100000; ++guard) {
    auto n = r.drain(credit, [&](const RelayEntry& e) {
      out.push_back(SpilledEntry{e.key, u64_of(e.value), e.first_seq, e.last_seq, e.op_count,
                                 e.redelivered, e.page_id});
    });
    EXPECT_TRUE(n) << n.error().what();
    if (!n || *n == 0) break;
  }
  return out;
}

class RelaySpillTest : public ::testing::Test {
 protected:
  test::TempRoot root_;
  test::TempSpillDir spill_;
};

TEST_F(RelaySpillTest, AFullFifoSpillsItsOldestOpsAndTheReaderGetsEveryOpInOrder) {
  auto w = RelayWriter::create("fifo", spill_cfg(policy::kRawFifo));
  ASSERT_TRUE(w) << w.error().what();
  constexpr std::uint64_t kOps = 100;
  for (std::uint64_t i = 0; i < kOps; ++i) {
    auto r = w->write(7, u64_value(i), 0ns);  // never waits: a block would be TimedOut
    ASSERT_TRUE(r) << r.error().what();
    ASSERT_EQ(r->status, WriteStatus::Appended) << "op " << i;
  }
  RelaySnapshot s = w->snapshot();
  EXPECT_TRUE(s.is_spilling);
  EXPECT_GT(s.pages_sealed, 0u);
  EXPECT_EQ(s.cold_pages, s.manifest.size());
  EXPECT_EQ(s.lag, kOps);
  EXPECT_EQ(s.blocked, 0u);
  EXPECT_EQ(test::count_files(spill_.sub("fifo"), ".spill"), s.cold_pages);
  EXPECT_EQ(test::count_files(spill_.sub("fifo"), ".tmp"), 0u);
  auto r = RelayReader::open("fifo");
  ASSERT_TRUE(r);
  const std::vector<SpilledEntry> got = drain_spilled(*r);
  ASSERT_EQ(got.size(), kOps);
  for (std::uint64_t i = 0; i < kOps; ++i) {
    EXPECT_EQ(got[i].value, i);
    EXPECT_EQ(got[i].first, i + 1);
    EXPECT_FALSE(got[i].redelivered);
  }
  EXPECT_NE(got.front().page, 0u);  // the oldest came from disk
  EXPECT_EQ(got.back().page, 0u);   // the newest from the hot head
  s = r->snapshot();
  EXPECT_EQ(s.cold_pages, 0u);
  EXPECT_EQ(s.pages_acked, s.pages_sealed);
  EXPECT_EQ(s.lag, 0u);
  EXPECT_EQ(test::count_files(spill_.sub("fifo"), ".spill"), 0u);
  auto seg = Segment::open_any("fifo", {});
  ASSERT_TRUE(seg);
  const auto problems = find_kind(kRelayKind)->verify(*seg);
  EXPECT_TRUE(problems.empty()) << problems.front();
}

TEST_F(RelaySpillTest, APageFileIsRemovedOnlyAfterTheReaderAcknowledgesIt) {
  auto w = RelayWriter::create("ack", spill_cfg(policy::kRawFifo));
  ASSERT_TRUE(w);
  for (std::uint64_t i = 0; i < 12; ++i) ASSERT_TRUE(w->write(u64_value(i), 0ns));
  auto r = RelayReader::open("ack");
  ASSERT_TRUE(r);
  const std::uint64_t first_page = r->snapshot().manifest.at(0).page_id;
  const std::string file = spill_.sub("ack") + "/" + spill::page_file_name(first_page);
  auto got = r->take(2);  // a part of the first page (credit-metered)
  ASSERT_TRUE(got);
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[0].page_id, first_page);
  ASSERT_TRUE(r->abandon());
  EXPECT_TRUE(fs::exists(file));
  got = r->take(2);  // the same two again, marked redelivered
  ASSERT_TRUE(got);
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ(u64_of((*got)[0].value), 0u);
  EXPECT_TRUE((*got)[0].redelivered);
  ASSERT_TRUE(r->commit());
  EXPECT_TRUE(fs::exists(file));  // half acknowledged: the cursor moved, the file stays
  EXPECT_EQ(r->snapshot().cursor_record, 2u);
  got = r->take(100);  // the rest of the page only: a take never spans two pages
  ASSERT_TRUE(got);
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ(u64_of((*got)[0].value), 2u);
  EXPECT_FALSE((*got)[0].redelivered);
  EXPECT_TRUE(fs::exists(file));
  ASSERT_TRUE(r->commit());
  EXPECT_FALSE(fs::exists(file));
  const auto rest = drain_spilled(*r);
  ASSERT_EQ(rest.size(), 8u);
  EXPECT_EQ(rest.front().value, 4u);
}

// An acknowledged page leaves the directory at its commit (renamed into
// removed/, durably); its unlink runs on the reader's purger thread, and a
// closed reader leaves nothing behind.
TEST_F(RelaySpillTest, AnAcknowledgedPageLeavesTheDirectoryAtItsCommitAndNothingIsLeftOnClose) {
  auto w = RelayWriter::create("retire", spill_cfg(policy::kRawFifo));
  ASSERT_TRUE(w);
  for (std::uint64_t i = 0; i < 20; ++i) ASSERT_TRUE(w->write(u64_value(i), 0ns));
  const std::string dir = spill_.sub("retire");
  const std::uint64_t pages = w->snapshot().cold_pages;
  ASSERT_GE(pages, 3u);
  auto r = RelayReader::open("retire");
  ASSERT_TRUE(r);
  std::uint64_t acked = 0, next = 0;
  for (int guard = 0; guard < 1000; ++guard) {
    auto n = r->drain(4, [&](const RelayEntry& e) { EXPECT_EQ(u64_of(e.value), next++); });
    ASSERT_TRUE(n) << n.error().what();
    if (*n == 0) break;
    const RelaySnapshot s = r->snapshot();
    if (s.pages_acked > acked) {
      acked = s.pages_acked;
      EXPECT_EQ(test::count_files(dir, ".spill"), s.cold_pages)
          << "an acknowledged page is out at once";
      EXPECT_EQ(s.manifest.size(), s.cold_pages) << "its slot freed at the commit";
    }
  }
  EXPECT_EQ(next, 20u);
  EXPECT_EQ(acked, pages);
  *r = RelayReader{};  // closed: its purger finishes, then stops
  EXPECT_EQ(removed_left(dir), 0u) << "a closed reader left retired pages behind";
  EXPECT_EQ(test::count_files(dir, ".spill"), 0u);
}

// A page in removed/ (retired by a reader killed before its unlink) is never
// adopted by a rebuild, and the next reader unlinks it.
TEST_F(RelaySpillTest, ARetiredPageIsNeverAdoptedAndTheNextReaderUnlinksIt) {
  std::uint64_t pages = 0, first_page = 0;
  const std::string dir = spill_.sub("retired");
  {
    auto w = RelayWriter::create("retired", spill_cfg(policy::kRawFifo));
    ASSERT_TRUE(w);
    for (std::uint64_t i = 0; i < 20; ++i) ASSERT_TRUE(w->write(u64_value(i), 0ns));
    pages = w->snapshot().cold_pages;
    first_page = w->snapshot().manifest.at(0).page_id;
    ASSERT_GE(pages, 2u);
    ASSERT_TRUE(w->segment().unlink());  // the machine "rebooted"
  }
  // As a reader leaves it after retiring the first page, before its unlink.
  fs::create_directories(dir + "/removed");
  fs::rename(dir + "/" + spill::page_file_name(first_page),
             dir + "/removed/" + spill::page_file_name(first_page));
  auto w = RelayWriter::create("retired", spill_cfg(policy::kRawFifo));
  ASSERT_TRUE(w) << w.error().what();
  const RelaySnapshot s = w->snapshot();
  EXPECT_EQ(s.pages_rebuilt, pages - 1) << "the retired page was adopted";
  for (const RelaySnapshot::ColdPage& m : s.manifest) EXPECT_NE(m.page_id, first_page);
  EXPECT_EQ(s.pages_refused, 0u) << "removed/ is not a foreign file";
  EXPECT_EQ(removed_left(dir), 1u);
  {
    auto r = RelayReader::open("retired");  // opened and closed: it retires nothing itself
    ASSERT_TRUE(r);
  }
  EXPECT_EQ(removed_left(dir), 0u) << "the next reader did not unlink the leftover";
  auto r = RelayReader::open("retired");
  ASSERT_TRUE(r);
  const auto got = drain_spilled(*r);
  ASSERT_EQ(got.size(), (pages - 1) * 4);
  EXPECT_EQ(got.front().value, 4u) << "the first page's ops came back";
}

TEST_F(RelaySpillTest, KeyedSumSpillsAndTheFoldOfWhatTheReaderGetsIsTheFlatFold) {
  auto w = RelayWriter::create("sum", spill_cfg(policy::kSum));
  ASSERT_TRUE(w) << w.error().what();
  std::map<std::uint64_t, std::uint64_t> expect;
  std::mt19937_64 rng(5);
  for (int i = 0; i < 300; ++i) {
    const std::uint64_t key = rng() % 40, v = 1 + rng() % 9;
    expect[key] += v;
    auto r = w->write(key, u64_value(v), 0ns);
    ASSERT_TRUE(r);
    ASSERT_NE(r->status, WriteStatus::TimedOut);
  }
  EXPECT_GT(w->snapshot().pages_sealed, 0u);
  auto r = RelayReader::open("sum");
  ASSERT_TRUE(r);
  std::map<std::uint64_t, std::uint64_t> fold;
  for (const SpilledEntry& g : drain_spilled(*r, 5)) fold[g.key] += g.value;
  EXPECT_EQ(fold, expect);
}

TEST_F(RelaySpillTest, AFreshSegmentRebuildsTheManifestFromTheDirectory) {
  std::uint64_t pages = 0;
  {
    auto w = RelayWriter::create("again", spill_cfg(policy::kRawFifo));
    ASSERT_TRUE(w);
    for (std::uint64_t i = 0; i < 20; ++i) ASSERT_TRUE(w->write(u64_value(i), 0ns));
    pages = w->snapshot().cold_pages;
    ASSERT_GT(pages, 0u);
    ASSERT_TRUE(w->segment().unlink());  // the machine "rebooted": the hot head is gone
  }
  auto w = RelayWriter::create("again", spill_cfg(policy::kRawFifo));
  ASSERT_TRUE(w) << w.error().what();
  const RelaySnapshot s = w->snapshot();
  EXPECT_EQ(s.pages_rebuilt, pages);
  EXPECT_EQ(s.cold_pages, pages);
  auto next = w->write(u64_value(1000), 0ns);
  ASSERT_TRUE(next);
  auto r = RelayReader::open("again");
  ASSERT_TRUE(r);
  const auto got = drain_spilled(*r);
  ASSERT_EQ(got.size(), pages * 4 + 1);
  for (std::size_t i = 0; i + 1 < got.size(); ++i) {
    EXPECT_EQ(got[i].value, i);
    EXPECT_LT(got[i].first, got[i + 1].first);  // sequences continue above the pages'
  }
  EXPECT_EQ(got.back().value, 1000u);
}

TEST_F(RelaySpillTest, ACorruptPageIsRefusedCountedMovedAsideAndTheReaderGoesOn) {
  auto w = RelayWriter::create("bad", spill_cfg(policy::kRawFifo));
  ASSERT_TRUE(w);
  for (std::uint64_t i = 0; i < 12; ++i) ASSERT_TRUE(w->write(u64_value(i), 0ns));
  const auto manifest = w->snapshot().manifest;
  ASSERT_GE(manifest.size(), 2u);
  const std::string dir = spill_.sub("bad");
  test::flip_byte(dir + "/" + spill::page_file_name(manifest[0].page_id),
                  spill::kPageHeaderSize + 50);  // a content byte: the content CRC fails
  auto r = RelayReader::open("bad");
  ASSERT_TRUE(r);
  auto got = r->take(10);
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code, Errc::Corrupt) << got.error().what();
  EXPECT_NE(got.error().message.find("4 ops lost"), std::string::npos) << got.error().what();
  const RelaySnapshot s = r->snapshot();
  EXPECT_EQ(s.pages_refused, 1u);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir + "/refused"), fs::directory_iterator{}), 1);
  const auto rest = drain_spilled(*r);
  ASSERT_EQ(rest.size(), 8u);
  EXPECT_EQ(rest.front().value, 4u);
}

// A page file swapped for another valid page of the same relay, id, record
// count and sequence range, but other content (a restored backup, a copy from
// another run of the same program): every check of the file alone passes
// (header CRC, content CRC, relay id, counts, ranges); only the content CRC
// the manifest recorded at the seal tells them apart. Refused, never delivered.
TEST_F(RelaySpillTest, AValidPageSwappedForTheSealedOneIsRefusedByTheManifestsCrc) {
  auto w = RelayWriter::create("swap", spill_cfg(policy::kRawFifo));
  ASSERT_TRUE(w);
  for (std::uint64_t i = 0; i < 12; ++i) ASSERT_TRUE(w->write(u64_value(i), 0ns));
  const auto manifest = w->snapshot().manifest;
  ASSERT_GE(manifest.size(), 2u);
  const std::uint64_t id = manifest[0].page_id;
  {
    auto dir = spill::SpillDir::open(spill_.sub("swap"), false);
    ASSERT_TRUE(dir) << dir.error().what();
    auto sealed = spill::read_page(*dir, id);
    ASSERT_TRUE(sealed) << sealed.error().what();
    spill::PageBuilder other;
    for (std::size_t i = 0; i < sealed->records(); ++i) {
      const spill::Record r = sealed->record(i);
      other.add(r.head, u64_value(u64_of(r.value) + 1000));
    }
    ASSERT_TRUE(spill::write_page(*dir, id, sealed->header.policy, other));  // renamed over it
    auto swapped = spill::read_page(*dir, id);
    ASSERT_TRUE(swapped) << "the swapped page is valid on its own: " << swapped.error().what();
    ASSERT_EQ(swapped->header.records, sealed->header.records);
    ASSERT_EQ(swapped->header.first_seq, sealed->header.first_seq);
    ASSERT_EQ(swapped->header.last_seq, sealed->header.last_seq);
    ASSERT_NE(swapped->header.content_crc, sealed->header.content_crc);
  }
  auto r = RelayReader::open("swap");
  ASSERT_TRUE(r);
  auto got = r->take(10);
  ASSERT_FALSE(got) << "the swapped page was delivered";
  EXPECT_EQ(got.error().code, Errc::Corrupt) << got.error().what();
  EXPECT_NE(got.error().message.find("the manifest recorded"), std::string::npos)
      << got.error().what();
  EXPECT_EQ(r->snapshot().pages_refused, 1u);
  const auto rest = drain_spilled(*r);
  ASSERT_EQ(rest.size(), 8u);
  for (const SpilledEntry& e : rest) EXPECT_LT(e.value, 1000u) << "a swapped record was delivered";
  EXPECT_EQ(rest.front().value, 4u);
}

// The second page is read ahead, on the reader's thread, while the first is
// delivered: its damage is found the same way when the reader reaches it.
TEST_F(RelaySpillTest, ACorruptPageReadAheadIsRefusedWhenReachedAndTheReaderGoesOn) {
  auto w = RelayWriter::create("bad-ahead", spill_cfg(policy::kRawFifo));
  ASSERT_TRUE(w);
  for (std::uint64_t i = 0; i < 18; ++i) ASSERT_TRUE(w->write(u64_value(i), 0ns));
  const auto manifest = w->snapshot().manifest;
  ASSERT_GE(manifest.size(), 3u);
  const std::string dir = spill_.sub("bad-ahead");
  test::flip_byte(dir + "/" + spill::page_file_name(manifest[1].page_id),
                  spill::kPageHeaderSize + 50);  // a content byte: the content CRC fails
  auto r = RelayReader::open("bad-ahead");
  ASSERT_TRUE(r);
  auto first = r->take(10);
  ASSERT_TRUE(first) << first.error().what();
  ASSERT_EQ(first->size(), 4u);
  EXPECT_EQ(u64_of((*first)[0].value), 0u);
  ASSERT_TRUE(r->commit());
  auto got = r->take(10);
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code, Errc::Corrupt) << got.error().what();
  EXPECT_NE(got.error().message.find("4 ops lost"), std::string::npos) << got.error().what();
  EXPECT_EQ(r->snapshot().pages_refused, 1u);
  const auto rest = drain_spilled(*r);
  ASSERT_EQ(rest.size(), 10u);
  EXPECT_EQ(rest.front().value, 8u);
  EXPECT_EQ(rest.back().value, 17u);
}

// A seal reads the manifest and the pending list from the segment: damage there
// is Corrupt naming what is wrong, never a silent fallback to Block.
TEST_F(RelaySpillTest, ASealOverADamagedManifestOrPendingListIsCorruptNotBlock) {
  // A relay at its high water (6 of 8): the next new op seals a page.
  auto at_high_water = [](const std::string& name) {
    auto w = RelayWriter::create(name, spill_cfg(policy::kRawFifo));
    EXPECT_TRUE(w) << w.error().what();
    for (std::uint64_t i = 0; i < 6; ++i) {
      auto r = w->write(u64_value(i), 0ns);
      EXPECT_TRUE(r && r->status == WriteStatus::Appended) << "op " << i;
    }
    EXPECT_TRUE(w->snapshot().is_full);
    return std::move(*w);
  };
  auto expect_corrupt = [](RelayWriter& w, const std::string& what) {
    auto r = w.write(u64_value(99), 0ns);
    ASSERT_FALSE(r) << "a damaged manifest or list gave " << to_string(r->status);
    EXPECT_EQ(r.error().code, Errc::Corrupt) << r.error().what();
    EXPECT_NE(r.error().message.find(what), std::string::npos) << r.error().what();
    EXPECT_EQ(w.snapshot().spill_fallbacks, 0u);
  };
  {  // a manifest slot in an impossible state (a seal went on around it)
    RelayWriter w = at_high_water("state");
    w.view().spill->slots[5].state.store(9);
    expect_corrupt(w, "spill manifest slot 5 has state 9");
  }
  {  // every slot "sealed", naming a page never sealed (the manifest looked full: Block)
    RelayWriter w = at_high_water("ids");
    for (relay::ManifestSlot& s : w.view().spill->slots) {
      s.page_id.store(77);
      s.state.store(static_cast<std::uint32_t>(relay::SlotState::Sealed));
    }
    expect_corrupt(w, "spill manifest slot 0 names page 77, outside [1, 1)");
  }
  {  // the pending list runs past the entry table (the seal gave up: Block)
    RelayWriter w = at_high_water("list");
    const std::uint32_t head = w.view().control->head.load();
    ASSERT_LT(head, 8u);
    w.view().entry(head).next.store(1000);
    expect_corrupt(w, "the pending list names entry 1000 after 1 entries (capacity 8)");
  }
}

// The spill intent's repair, driven over intents written by hand: a child
// process that exits holding the relay mutex leaves EOWNERDEAD, as a killed
// holder does. An acknowledgement or expiry whose slot says Acked is
// finished and counted once (not again when its counter moved past the
// recorded value); one whose slot is still Sealed never happened; an intent
// state past 3 is damage (verify says so; the repair faults the relay).
TEST_F(RelaySpillTest, TheRepairCountsAnInterruptedAckOrExpiryOnceAndRefusesAnUnknownIntent) {
  auto w = RelayWriter::create("intent", spill_cfg(policy::kRawFifo));
  ASSERT_TRUE(w) << w.error().what();
  for (std::uint64_t i = 0; i < 20; ++i) ASSERT_TRUE(w->write(u64_value(i), 0ns));
  const RelaySnapshot before = w->snapshot();
  ASSERT_GE(before.cold_pages, 3u);
  relay::SpillArea& a = *w->view().spill;
  auto slot_of = [&](std::uint64_t page) -> relay::ManifestSlot& {
    for (relay::ManifestSlot& s : a.slots)
      if (s.state.load() != 0 && s.page_id.load() == page) return s;
    ADD_FAILURE() << "page " << page << " is not in the manifest";
    return a.slots[0];
  };
  auto intent = [&](relay::SpillIntent kind, std::uint64_t page, std::uint64_t count) {
    a.intent_page.store(page);
    a.intent_last_order.store(0);
    a.intent_count.store(static_cast<std::uint32_t>(count));
    a.intent_state.store(static_cast<std::uint32_t>(kind));
  };
  auto die_holding_the_mutex = [&] {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      (void)w->view().control->mutex.lock();
      ::_exit(0);  // the kernel marks the robust mutex OWNER_DIED
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  };
  auto repaired = [&] {
    auto r = RelayReader::open("intent");  // locks: EOWNERDEAD, repairs
    EXPECT_TRUE(r) << r.error().what();
    const RelaySnapshot s = w->snapshot();
    EXPECT_EQ(a.intent_state.load(), 0u);
    return s;
  };
  const std::string dir = spill_.sub("intent");
  const std::uint64_t p0 = before.manifest.at(0).page_id, p1 = before.manifest.at(1).page_id,
                      p2 = before.manifest.at(2).page_id;
  const KindDescriptor* kind = find_kind(kRelayKind);
  auto problems = [&] {
    auto seg = Segment::open_any("intent", {});
    EXPECT_TRUE(seg);
    return kind->verify(*seg);
  };

  // An acknowledgement killed after its commit point, before its count.
  intent(relay::SpillIntent::Ack, p0, before.pages_acked);
  EXPECT_TRUE(problems().empty()) << problems().front();  // a valid intent (state 2)
  slot_of(p0).state.store(static_cast<std::uint32_t>(relay::SlotState::Acked));
  die_holding_the_mutex();
  RelaySnapshot s = repaired();
  EXPECT_EQ(s.pages_acked, before.pages_acked + 1);
  EXPECT_EQ(s.cold_pages, before.cold_pages - 1);
  EXPECT_FALSE(fs::exists(dir + "/" + spill::page_file_name(p0)));

  // An expiry killed after its count: not counted again.
  intent(relay::SpillIntent::Expire, p1, s.pages_expired);
  EXPECT_TRUE(problems().empty()) << problems().front();  // state 3
  slot_of(p1).state.store(static_cast<std::uint32_t>(relay::SlotState::Acked));
  a.counters.pages_expired.store(s.pages_expired + 1);  // the holder's bump
  die_holding_the_mutex();
  s = repaired();
  EXPECT_EQ(s.pages_expired, 1u);
  EXPECT_EQ(s.cold_pages, before.cold_pages - 2);
  EXPECT_FALSE(fs::exists(dir + "/" + spill::page_file_name(p1)));

  // An expiry killed before its commit point: nothing happened.
  intent(relay::SpillIntent::Expire, p2, s.pages_expired);
  die_holding_the_mutex();
  s = repaired();
  EXPECT_EQ(s.pages_expired, 1u);
  EXPECT_EQ(s.cold_pages, before.cold_pages - 2);
  EXPECT_TRUE(fs::exists(dir + "/" + spill::page_file_name(p2)));
  EXPECT_EQ(s.pages_acked, before.pages_acked + 1);
  EXPECT_TRUE(problems().empty()) << problems().front();

  // State 1 (a seal: seals keep their own record) and 5 are no intent at all.
  a.intent_state.store(1);
  ASSERT_EQ(problems().size(), 1u);
  EXPECT_EQ(problems()[0],
            "spill intent state 1 is not 0 (none), 2 (acknowledge), 3 (expire) or 4 (refuse)");
  a.intent_state.store(5);
  const auto found = problems();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0],
            "spill intent state 5 is not 0 (none), 2 (acknowledge), 3 (expire) or 4 (refuse)");
  die_holding_the_mutex();
  auto r = RelayReader::open("intent");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::Corrupt);
  EXPECT_NE(r.error().message.find("spill intent state 5 is not 0 (none)"), std::string::npos)
      << r.error().what();
}

// A seal writes its page with the relay unlocked; an overflow retuned to
// drop_oldest meanwhile must not drop the seal's entries (the oldest ones):
// such a write drops nothing and says Full, and the seal then records the
// page and frees exactly its entries. Before the fix the write dropped the
// spilling head and reused it, and the seal's finish freed the new entry.
std::atomic<int> g_seal_stage{0};
void hold_seal_open(test_hooks::SpillCrashPoint point) {
  if (point != test_hooks::SpillCrashPoint::ContentWritten) return;
  g_seal_stage.store(1);
  while (g_seal_stage.load() != 2) std::this_thread::sleep_for(1ms);
}

TEST_F(RelaySpillTest, ADropOldestRetunedDuringASealDropsNothingOfTheSeal) {
  RelayConfig c = spill_cfg(policy::kKeepLatest, 8, 6, 2, 4);
  auto w = RelayWriter::create("retuned", c);
  ASSERT_TRUE(w) << w.error().what();
  for (std::uint64_t k = 0; k < 6; ++k) ASSERT_TRUE(w->write(k, u64_value(100 + k), 0ns));
  g_seal_stage.store(0);
  test_hooks::set_spill_crash_hook(hold_seal_open);
  struct Unhook {
    ~Unhook() {
      g_seal_stage.store(2);
      test_hooks::set_spill_crash_hook(nullptr);
    }
  } unhook;
  std::optional<Result<WriteOutcome>> sealing;
  std::thread sealer([&] {
    auto w2 = RelayWriter::open("retuned");
    if (w2) sealing.emplace(w2->write(6, u64_value(106), 0ns));
  });
  for (int i = 0; i < 20000 && g_seal_stage.load() != 1; ++i) std::this_thread::sleep_for(1ms);
  ASSERT_EQ(g_seal_stage.load(), 1) << "the seal never reached its file I/O";
  EXPECT_TRUE(w->snapshot().seal_in_flight);

  ASSERT_TRUE(w->retune(Backpressure{Dimension::Count, 6, 2, Overflow::DropOldest}));
  auto dropped = w->write(7, u64_value(107), 0ns);
  ASSERT_TRUE(dropped) << dropped.error().what();
  EXPECT_EQ(dropped->status, WriteStatus::Full) << to_string(dropped->status);
  ASSERT_TRUE(w->retune(Backpressure{Dimension::Count, 6, 2, Overflow::Spill}));

  g_seal_stage.store(2);
  sealer.join();
  ASSERT_TRUE(sealing.has_value());
  ASSERT_TRUE(*sealing) << (*sealing).error().what();
  EXPECT_EQ((*sealing)->status, WriteStatus::Appended);
  const RelaySnapshot s = w->snapshot();
  EXPECT_EQ(s.pages_sealed, 1u);
  EXPECT_EQ(s.dropped, 0u);
  auto r = RelayReader::open("retuned");
  ASSERT_TRUE(r) << r.error().what();
  std::map<std::uint64_t, std::uint64_t> latest;
  for (const SpilledEntry& e : drain_spilled(*r)) latest[e.key] = e.value;
  const std::map<std::uint64_t, std::uint64_t> expect = {{0, 100}, {1, 101}, {2, 102}, {3, 103},
                                                         {4, 104}, {5, 105}, {6, 106}};
  EXPECT_EQ(latest, expect) << "an op of the seal or of the sealing write was lost";
  auto seg = Segment::open_any("retuned", {});
  ASSERT_TRUE(seg);
  const auto problems = find_kind(kRelayKind)->verify(*seg);
  EXPECT_TRUE(problems.empty()) << problems.front();
}

// One relay per spill directory: a second relay (another segment) created on a
// directory an existing relay spills into is refused, naming both; once that
// relay's segment is gone the binding is stale and a new relay takes over.
TEST_F(RelaySpillTest, ASecondRelayOnABoundSpillDirectoryIsRefusedUntilTheFirstIsGone) {
  RelayConfig c = spill_cfg(policy::kRawFifo);
  c.spill.dir = spill_.sub("shared");
  auto a = RelayWriter::create("a", c);
  ASSERT_TRUE(a) << a.error().what();
  for (std::uint64_t i = 0; i < 12; ++i) ASSERT_TRUE(a->write(u64_value(i), 0ns));
  const std::uint64_t pages = a->snapshot().cold_pages;
  ASSERT_GE(pages, 1u);

  auto b = RelayWriter::create("b", c);
  ASSERT_FALSE(b) << "two relays share " << c.spill.dir;
  EXPECT_EQ(b.error().code, Errc::RoleTaken) << b.error().what();
  EXPECT_NE(b.error().message.find("spill directory " + c.spill.dir), std::string::npos)
      << b.error().what();
  EXPECT_NE(b.error().message.find(root_.file("a")), std::string::npos) << b.error().what();
  EXPECT_FALSE(Segment::open_any("b", {})) << "a refused create leaves no segment";
  // The first relay's pages were neither adopted nor touched.
  EXPECT_EQ(test::count_files(c.spill.dir, ".spill"), pages);
  EXPECT_EQ(a->snapshot().pages_refused, 0u);

  // Stale binding: a's segment is gone; b takes the directory over and adopts its pages.
  ASSERT_TRUE(a->segment().unlink());
  b = RelayWriter::create("b", c);
  ASSERT_TRUE(b) << b.error().what();
  EXPECT_EQ(b->snapshot().pages_rebuilt, pages);
  // And now "a" (re-created) is the one refused.
  auto a2 = RelayWriter::create("a", c);
  ASSERT_FALSE(a2);
  EXPECT_EQ(a2.error().code, Errc::RoleTaken);
  EXPECT_NE(a2.error().message.find(root_.file("b")), std::string::npos) << a2.error().what();
}

TEST_F(RelaySpillTest, ForeignSymlinkFifoAndTruncatedPagesAreRefusedAtRebuild) {
  {
    auto w = RelayWriter::create("mixed", spill_cfg(policy::kRawFifo));
    ASSERT_TRUE(w);
    for (std::uint64_t i = 0; i < 12; ++i) ASSERT_TRUE(w->write(u64_value(i), 0ns));
    auto other = RelayWriter::create("other", spill_cfg(policy::kRawFifo));
    ASSERT_TRUE(other);
    for (std::uint64_t i = 0; i < 12; ++i) ASSERT_TRUE(other->write(u64_value(i), 0ns));
    ASSERT_TRUE(w->segment().unlink());
  }
  const std::string dir = spill_.sub("mixed");
  fs::copy_file(spill_.sub("other") + "/" + spill::page_file_name(1),
                dir + "/" + spill::page_file_name(50));  // another relay's page
  fs::create_symlink(dir + "/" + spill::page_file_name(1), dir + "/" + spill::page_file_name(51));
  ASSERT_EQ(::mkfifo((dir + "/" + spill::page_file_name(52)).c_str(), 0600), 0);
  fs::resize_file(dir + "/" + spill::page_file_name(2), 100);  // truncated
  auto w = RelayWriter::create("mixed", spill_cfg(policy::kRawFifo));
  ASSERT_TRUE(w) << w.error().what();
  const RelaySnapshot s = w->snapshot();
  EXPECT_EQ(s.pages_refused, 4u);
  EXPECT_EQ(s.pages_rebuilt, 1u);  // page 1 only
  EXPECT_EQ(std::distance(fs::directory_iterator(dir + "/refused"), fs::directory_iterator{}), 4);
  auto r = RelayReader::open("mixed");
  ASSERT_TRUE(r);
  const auto got = drain_spilled(*r);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].value, 0u);
  // A new page never reuses a refused page's name.
  EXPECT_TRUE(w->write(u64_value(1), 0ns));
}

TEST_F(RelaySpillTest, TheValidationTableAndTheSpillPolicyAreChecked) {
  RelayConfig c = spill_cfg(policy::kSum);
  c.spill_dedup = false;
  auto refused = RelayWriter::create("v1", c);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::PolicyRefused);
  c = spill_cfg(policy::kRawFifo);
  c.spill.rehydrate = relay::Rehydrate::Parallel;
  refused = RelayWriter::create("v2", c);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::PolicyRefused);
  EXPECT_NE(refused.error().message.find("commutative"), std::string::npos);
  c = spill_cfg(policy::kMax);
  c.spill.rehydrate = relay::Rehydrate::Parallel;
  EXPECT_TRUE(RelayWriter::create("v3", c));
  c = spill_cfg(policy::kMax);
  c.spill.page_size = 100;
  refused = RelayWriter::create("v4", c);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::InvalidArgument);
  c = spill_cfg(policy::kMax);
  c.spill.dir = "/dev/shm/spill-here";
  refused = RelayWriter::create("v5", c);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::UnsafeRoot);
  // Retuning to Spill needs a store.
  RelayConfig plain;
  plain.policy = policy::kMax;
  auto w = RelayWriter::create("v6", plain);
  ASSERT_TRUE(w);
  auto ok = w->retune(Backpressure{Dimension::Count, 10, 5, Overflow::Spill});
  ASSERT_FALSE(ok);
  EXPECT_EQ(ok.error().code, Errc::PolicyRefused);
}

TEST_F(RelaySpillTest, BoundedDiskStopsSpillingAtTheBoundAndFallsBackToBlock) {
  RelayConfig c = spill_cfg(policy::kRawFifo);
  c.spill.retention = relay::RetentionKind::BoundedDisk;
  c.spill.retention_bytes = 2 * page_for(4);  // two pages
  auto w = RelayWriter::create("bound", c);
  ASSERT_TRUE(w) << w.error().what();
  std::uint64_t accepted = 0;
  WriteStatus last = WriteStatus::Appended;
  for (std::uint64_t i = 0; i < 40; ++i) {
    auto r = w->write(u64_value(i), 0ns);
    ASSERT_TRUE(r);
    last = r->status;
    if (last != WriteStatus::Appended) break;
    ++accepted;
  }
  EXPECT_EQ(last, WriteStatus::TimedOut);
  RelaySnapshot s = w->snapshot();
  EXPECT_EQ(s.cold_pages, 2u);
  EXPECT_LE(s.cold_bytes, c.spill.retention_bytes);
  EXPECT_GE(s.spill_fallbacks, 1u);
  bool event = false;
  for (const RelayEvent& e : s.events) event |= e.kind == relay::EventKind::SpillFallback;
  EXPECT_TRUE(event);
  // Draining a page frees the bound: spilling resumes.
  auto r = RelayReader::open("bound");
  ASSERT_TRUE(r);
  ASSERT_TRUE(r->drain(4, [](const RelayEntry&) {}));
  auto again = w->write(u64_value(999), 0ns);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, WriteStatus::Appended);
  // Retuned live: a larger bound.
  ASSERT_TRUE(w->retune_spill(page_for(4), 10 * page_for(4), 0ms));
  EXPECT_EQ(w->snapshot().retention_bytes, 10 * page_for(4));
  std::vector<SpilledEntry> all = drain_spilled(*r);
  EXPECT_EQ(all.size() + 4, accepted + 1);
}

TEST_F(RelaySpillTest, ShmctlSetRetunesTheSpillStoreLive) {
  RelayConfig c = spill_cfg(policy::kRawFifo);
  c.spill.retention = relay::RetentionKind::BoundedDisk;
  c.spill.retention_bytes = page_for(4);
  auto w = RelayWriter::create("tune", c);
  ASSERT_TRUE(w);
  auto seg = Segment::open_any("tune", {});
  ASSERT_TRUE(seg);
  const KindDescriptor* kind = find_kind(kRelayKind);
  ASSERT_TRUE(kind->set(*seg, "spill_retention_bytes", "100000"));
  ASSERT_TRUE(kind->set(*seg, "spill_page_size", std::to_string(page_for(8))));
  const RelaySnapshot s = w->snapshot();
  EXPECT_EQ(s.retention_bytes, 100000u);
  EXPECT_EQ(s.spill_page_size, page_for(8));
  auto bad = kind->set(*seg, "spill_page_size", "10");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, Errc::InvalidArgument);
  bad = kind->set(*seg, "spill_retention_bytes", "0");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("BoundedDisk"), std::string::npos);
  // Every handle follows: the larger page takes 8 records.
  for (std::uint64_t i = 0; i < 12; ++i) ASSERT_TRUE(w->write(u64_value(i), 0ns));
  EXPECT_EQ(w->snapshot().manifest.at(0).records, 6u);  // the pending entries at the seal
}

// Concurrent `shmctl set`s of different fields on one relay (each thread its
// own mapping, as separate shmctl processes): every set is one step under the
// relay mutex, so none undoes another's field with a value read before it.
TEST_F(RelaySpillTest, ConcurrentSetsOfDifferentFieldsNeverLoseAnUpdate) {
  RelayConfig c = spill_cfg(policy::kRawFifo, 16384);  // room for every high water set below
  c.backpressure = Backpressure{Dimension::Count, 10000, 1, Overflow::Spill};
  c.spill.retention = relay::RetentionKind::BoundedDisk;
  c.spill.retention_bytes = page_for(4);
  auto w = RelayWriter::create("race", c);
  ASSERT_TRUE(w) << w.error().what();
  const relay::detail::View& v = w->view();
  const KindDescriptor* kind = find_kind(kRelayKind);
  const std::uint64_t rounds = test::scaled(3000);
  struct Field {
    const char* key;
    std::uint64_t base;
    const std::atomic<std::uint64_t>* word;
  };
  const std::array<Field, 4> fields{{
      {"high_water", 10000, &v.control->high_water},
      {"low_water", 1, &v.control->low_water},
      {"spill_page_size", page_for(4), &v.spill->page_bytes},
      {"spill_retention_bytes", 1, &v.spill->retention_bytes},
  }};
  std::array<std::uint64_t, 4> lost{}, failed{};
  std::atomic<std::size_t> ready{0};  // all threads start together: their sets overlap
  std::vector<std::thread> threads;
  for (std::size_t f = 0; f < fields.size(); ++f)
    threads.emplace_back([&, f] {
      auto seg = Segment::open_any("race", {});
      ready.fetch_add(1);
      while (ready.load() < fields.size()) std::this_thread::yield();
      if (!seg) {
        failed[f] = rounds;
        return;
      }
      for (std::uint64_t i = 0; i < rounds; ++i) {
        const std::uint64_t want = fields[f].base + (i % 500) * 8;
        if (!kind->set(*seg, fields[f].key, std::to_string(want))) ++failed[f];
        // Nobody else sets this field: it holds what this thread stored.
        if (fields[f].word->load() != want) ++lost[f];
      }
    });
  for (std::thread& t : threads) t.join();
  for (std::size_t f = 0; f < fields.size(); ++f) {
    EXPECT_EQ(failed[f], 0u) << fields[f].key;
    EXPECT_EQ(lost[f], 0u) << fields[f].key << ": updates undone by a concurrent set";
    EXPECT_EQ(fields[f].word->load(), fields[f].base + ((rounds - 1) % 500) * 8) << fields[f].key;
  }
  EXPECT_EQ(w->snapshot().retunes, 4 * rounds);
}

// The roles table's events preset is usable as it is: it creates, and a write
// past high water spills instead of being refused or blocking.
TEST_F(RelaySpillTest, TheOutboxEventsPresetCreatesAndSpillsPastHighWater) {
  for (const PolicyId p : {policy::kRawFifo, policy::kSum, policy::kMax}) {
    const std::string name = "events-" + std::to_string(p);
    const RelayConfig c = Outbox::config(p, Traffic::Events, 16);
    auto w = Outbox::create(name, c);
    ASSERT_TRUE(w) << name << ": " << w.error().what();
    const std::uint64_t ops = 3 * c.backpressure.high_water;
    for (std::uint64_t i = 0; i < ops; ++i) {
      auto r = w->write(i, u64_value(i + 1), 0ns);  // a new key each time: never a merge
      ASSERT_TRUE(r) << name << " op " << i << ": " << r.error().what();
      ASSERT_EQ(r->status, WriteStatus::Appended) << name << " op " << i;
    }
    const RelaySnapshot s = w->snapshot();
    EXPECT_GT(s.pages_sealed, 0u) << name;
    EXPECT_EQ(s.lag, ops) << name;
    EXPECT_EQ(s.blocked, 0u) << name;
    EXPECT_EQ(test::count_files(spill_.sub(name), ".spill"), s.cold_pages) << name;
  }
}

TEST_F(RelaySpillTest, TtlRetentionExpiresOldPagesAndSaysSo) {
  RelayConfig c = spill_cfg(policy::kMax);
  c.spill.retention = relay::RetentionKind::Ttl;
  c.spill.ttl = 1ms;
  auto w = RelayWriter::create("ttl", c);
  ASSERT_TRUE(w) << w.error().what();
  for (std::uint64_t k = 0; k < 12; ++k) ASSERT_TRUE(w->write(k, u64_value(k + 1), 0ns));
  const std::uint64_t pages = w->snapshot().cold_pages;
  ASSERT_GT(pages, 0u);
  std::this_thread::sleep_for(5ms);  // the pages age past the ttl (not a synchronisation)
  auto r = RelayReader::open("ttl");
  ASSERT_TRUE(r);
  const auto got = drain_spilled(*r);
  for (const SpilledEntry& g : got) EXPECT_EQ(g.page, 0u);  // every cold page expired
  const RelaySnapshot s = r->snapshot();
  EXPECT_EQ(s.pages_expired, pages);
  EXPECT_EQ(test::count_files(spill_.sub("ttl"), ".spill"), 0u);
}

// A 16 MiB filesystem: the first page (~9.7 MB) fits, the statvfs preflight
// refuses the second: NoSpace is counted and logged, the write falls back to
// Block (TimedOut with a zero timeout), nothing torn is left, nothing lost.
TEST_F(RelaySpillTest, AFullFilesystemIsNoSpaceAndTheRelayFallsBackToBlock) {
  const std::string mnt = spill_.sub("small");
  fs::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=16m") != 0)
    GTEST_SKIP() << "cannot mount a 16 MiB tmpfs here (" << std::strerror(errno)
                 << "); the NoSpace path needs one";
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount(path.c_str()); }
  } unmount{mnt};
  RelayConfig c;
  c.policy = policy::kRawFifo;
  c.max_entries = 32768;
  c.value_bytes = 256;
  c.backpressure = Backpressure{Dimension::Count, 32000, 100, Overflow::Spill};
  c.spill_dedup = true;
  c.spill.enabled = true;
  c.spill.dir = mnt + "/relay";
  c.spill.page_size = 16u << 20;
  auto w = RelayWriter::create("nospace", c);
  ASSERT_TRUE(w) << w.error().what();
  const std::vector<std::byte> value(256, std::byte{0x5A});
  std::uint64_t accepted = 0;
  WriteStatus last = WriteStatus::Appended;
  for (std::uint64_t i = 0; i < 70000 && last == WriteStatus::Appended; ++i) {
    std::vector<std::byte> v = value;
    std::memcpy(v.data(), &i, sizeof i);
    auto r = w->write(v, 0ns);
    ASSERT_TRUE(r) << r.error().what();
    last = r->status;
    if (last == WriteStatus::Appended) ++accepted;
  }
  EXPECT_EQ(last, WriteStatus::TimedOut);
  const RelaySnapshot s = w->snapshot();
  EXPECT_EQ(s.pages_sealed, 1u);
  EXPECT_GE(s.no_space, 1u);
  EXPECT_GE(s.spill_fallbacks, 1u);
  bool event = false;
  for (const RelayEvent& e : s.events) event |= e.kind == relay::EventKind::NoSpace;
  EXPECT_TRUE(event);
  EXPECT_EQ(test::count_files(mnt + "/relay", ".tmp"), 0u);
  EXPECT_EQ(test::count_files(mnt + "/relay", ".spill"), 1u);
  // Everything accepted is there, in order.
  auto r = RelayReader::open("nospace");
  ASSERT_TRUE(r);
  std::uint64_t next = 0;
  for (int guard = 0; guard < 100000; ++guard) {
    auto n = r->drain(4096, [&](const RelayEntry& e) {
      std::uint64_t i = 0;
      std::memcpy(&i, e.value.data(), sizeof i);
      EXPECT_EQ(i, next);
      ++next;
    });
    ASSERT_TRUE(n) << n.error().what();
    if (*n == 0) break;
  }
  EXPECT_EQ(next, accepted);
}

// ---------------------------------------------------------------- losslessness

struct PolicyCase {
  PolicyId policy;
  const char* name;
};

void run_seed_into(PolicyId policy, relay::SpillMode mode, std::uint64_t seed,
                   const std::string& name, std::uint64_t& pages,
                   SealMode seal_mode = SealMode::Inline);

// Replays a random schedule of writes, spills and drains (with abandons);
// the reader drops redelivered entries by first_seq (per-op sequences) and
// folds; the fold must equal the flat fold of every accepted op.
void run_seed_into(PolicyId policy, relay::SpillMode mode, std::uint64_t seed,
                   const std::string& name, std::uint64_t& pages, SealMode seal_mode) {
  RelayConfig c = spill_cfg(policy, 6, 4, 1, 1 + seed % 3);
  c.spill.mode = mode;
  auto w = RelayWriter::create(name, c);
  ASSERT_TRUE(w) << w.error().what();
  ASSERT_TRUE(w->set_seal_mode(seal_mode));
  auto r = RelayReader::open(name);
  ASSERT_TRUE(r);
  std::mt19937_64 rng(seed);
  std::map<std::uint64_t, std::uint64_t> flat;  // keyed fold
  std::vector<std::uint64_t> flat_fifo;
  std::map<std::uint64_t, std::uint64_t> fold;
  std::vector<std::uint64_t> fold_fifo;
  std::uint64_t applied = 0;  // first_seq of the last applied entry
  auto merge = [&](std::map<std::uint64_t, std::uint64_t>& m, std::uint64_t k, std::uint64_t v) {
    auto [it, fresh] = m.try_emplace(k, v);
    if (fresh) return;
    if (policy == policy::kSum) it->second += v;
    if (policy == policy::kMax) it->second = std::max(it->second, v);
    if (policy == policy::kKeepLatest) it->second = v;
  };
  auto apply = [&](const RelayEntry& e) {
    if (e.first_seq <= applied) return;  // a redelivery: already applied
    ASSERT_GT(e.first_seq, applied);
    applied = e.first_seq;
    if (policy == policy::kRawFifo)
      fold_fifo.push_back(u64_of(e.value));
    else
      merge(fold, e.key, u64_of(e.value));
  };
  std::span<const RelayEntry> held;
  bool holding = false;
  int hold_left = 0, close_kind = 0;
  auto close = [&]() -> bool {
    holding = false;
    if (close_kind >= 1)
      for (const RelayEntry& e : held) apply(e);
    return close_kind == 2 ? r->commit().has_value() : r->abandon().has_value();
  };
  const int ops = 32;
  for (int i = 0; i < ops; ++i) {
    const std::uint64_t key = rng() % 5, v = 1 + rng() % 50;
    auto res = w->write(key, u64_value(v), 0ns);
    ASSERT_TRUE(res) << res.error().what();
    if (res->status == WriteStatus::Appended || res->status == WriteStatus::Merged) {
      if (policy == policy::kRawFifo)
        flat_fifo.push_back(v);
      else
        merge(flat, key, v);
    } else {
      ASSERT_EQ(res->status, WriteStatus::Unchanged) << to_string(res->status);
    }
    // A take stays open over a few writes (which may seal pages younger than
    // what it holds), then is abandoned, applied and "crashed" (abandoned
    // after applying: redelivered), or applied and committed.
    if (holding) {
      if (hold_left-- > 0) continue;
      ASSERT_TRUE(close());
      continue;
    }
    const auto dice = rng() % 6;
    if (dice < 3) {
      auto got = r->take(1 + rng() % 4);
      ASSERT_TRUE(got) << got.error().what();
      held = *got;
      holding = true;
      hold_left = static_cast<int>(rng() % 4);
      close_kind = static_cast<int>(dice);
    }
  }
  if (holding) {
    ASSERT_TRUE(close());
  }
  ASSERT_TRUE(w->set_seal_mode(SealMode::Inline));  // a background seal under way ends
  for (int guard = 0; guard < 1000; ++guard) {
    auto n = r->drain(1 + rng() % 4, apply);
    ASSERT_TRUE(n) << n.error().what();
    if (*n == 0) break;
  }
  if (policy == policy::kRawFifo)
    EXPECT_EQ(fold_fifo, flat_fifo) << "seed " << seed;
  else
    EXPECT_EQ(fold, flat) << "seed " << seed;
  const RelaySnapshot s = r->snapshot();
  EXPECT_EQ(s.cold_pages, 0u);
  EXPECT_EQ(s.depth, 0u);
  pages = s.pages_sealed;
  ASSERT_TRUE(w->segment().unlink());
}

std::uint64_t run_seed(PolicyId policy, relay::SpillMode mode, std::uint64_t seed,
                       const std::string& name, SealMode seal_mode = SealMode::Inline) {
  std::uint64_t pages = 0;
  run_seed_into(policy, mode, seed, name, pages, seal_mode);
  return pages;
}

// Runs `seeds` schedules per keyed policy and spill mode; counts the runs
// and the pages they sealed. Logic, not durability: no fsync (crash tests
// keep it), so thousands of seeds stay cheap.
struct SeedTotals {
  std::uint64_t runs = 0, pages = 0;
};
void run_seeds(std::uint64_t seeds, SealMode seal_mode, const std::string& prefix,
               SeedTotals& totals) {
  const std::vector<PolicyCase> cases = {{policy::kRawFifo, "raw_fifo"},
                                         {policy::kSum, "sum"},
                                         {policy::kMax, "max"},
                                         {policy::kKeepLatest, "keep_latest"}};
  test_hooks::set_spill_sync(false);
  struct Restore {
    ~Restore() { test_hooks::set_spill_sync(true); }
  } restore;
  for (const PolicyCase& pc : cases) {
    for (relay::SpillMode mode :
         {relay::SpillMode::AppendCompact, relay::SpillMode::CompactOnWrite}) {
      for (std::uint64_t seed = 1; seed <= seeds; ++seed) {
        SCOPED_TRACE(std::string(pc.name) + " seed " + std::to_string(seed));
        const std::string name = prefix + pc.name + "-" + std::to_string(seed);
        totals.pages += run_seed(pc.policy, mode, seed, name, seal_mode);
        if (::testing::Test::HasFatalFailure()) return;
        ++totals.runs;
      }
    }
  }
}

TEST_F(RelaySpillTest, ReconstructionFromColdPagesAndHotHeadEqualsTheFlatFoldOverManySeeds) {
  // 400 per policy and mode: 3,200 seeds in the normal lane (about 3 s: a
  // seed creates a relay and its directory and seals and removes pages);
  // the sanitizer lanes run fewer (scale.hpp).
  const std::uint64_t seeds = test::scaled(400);
  SeedTotals t;
  run_seeds(seeds, SealMode::Inline, "", t);
  if (HasFatalFailure()) return;
  EXPECT_EQ(t.runs, 4 * 2 * seeds);
  EXPECT_GT(t.pages, t.runs);  // the schedules really spill (several pages per seed)
  ::testing::Test::RecordProperty("pages_sealed", static_cast<int>(t.pages));
}

// The same schedules with the pages sealed by the writer's sealer thread:
// the seals now race the writes and the takes (each write that finds the
// relay full kicks the thread and appends into the room; one that finds no
// room waits for the seal), and the fold still equals the flat fold.
TEST_F(RelaySpillTest, BackgroundSealingLosesNothingOverManySeeds) {
  const std::uint64_t seeds = test::scaled(60);
  SeedTotals t;
  run_seeds(seeds, SealMode::Background, "bg-", t);
  if (HasFatalFailure()) return;
  EXPECT_EQ(t.runs, 4 * 2 * seeds);
  EXPECT_GT(t.pages, t.runs);  // the sealer thread really sealed
}

// Holds the background sealer at ContentWritten (the page file written and
// flushed, the relay unlocked, the seal mutex held) until released.
std::atomic<bool> g_sealer_held{false};
std::atomic<bool> g_sealer_release{false};
void hold_sealer(test_hooks::SpillCrashPoint point) {
  if (point != test_hooks::SpillCrashPoint::ContentWritten) return;
  g_sealer_held.store(true);
  while (!g_sealer_release.load()) std::this_thread::sleep_for(1ms);
}

// While the sealer thread is stopped inside a seal, the writes go on into
// the room between high water and capacity: none of them waits for the
// disk. The write that finds no room waits for the seal and then appends.
TEST_F(RelaySpillTest, BackgroundSealingWritesGoOnWhileThePageIsWritten) {
  RelayConfig c = spill_cfg(policy::kRawFifo, 80, 64, 8, 64);  // 64 records a page
  auto w = RelayWriter::create("bg-held", c);
  ASSERT_TRUE(w) << w.error().what();
  ASSERT_TRUE(w->set_seal_mode(SealMode::Background));
  g_sealer_held = false;
  g_sealer_release = false;
  test_hooks::set_spill_crash_hook(hold_sealer);
  struct Unhook {
    ~Unhook() {
      g_sealer_release = true;
      test_hooks::set_spill_crash_hook(nullptr);
    }
  } unhook;
  std::uint64_t next = 0;
  for (; next < 65; ++next) {  // the 65th finds the relay full: it kicks the sealer
    auto r = w->write(u64_value(next), 0ns);
    ASSERT_TRUE(r && r->status == WriteStatus::Appended) << "op " << next;
  }
  for (int i = 0; i < 10000 && !g_sealer_held; ++i) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(g_sealer_held) << "the sealer thread never started the seal";
  for (; next < 80; ++next) {  // the room: 15 entries
    auto r = w->write(u64_value(next), 0ns);
    ASSERT_TRUE(r && r->status == WriteStatus::Appended) << "op " << next;
  }
  EXPECT_TRUE(w->snapshot().seal_in_flight) << "the writes waited for the seal";
  EXPECT_EQ(w->snapshot().pages_sealed, 0u);
  // No room left: this write waits for the seal (a thread of its own, so
  // the test can let the sealer go).
  auto last = std::async(std::launch::async, [&] { return w->write(u64_value(80), 0ns); });
  g_sealer_release = true;
  ASSERT_EQ(last.wait_for(20s), std::future_status::ready);
  auto r = last.get();
  ASSERT_TRUE(r) << r.error().what();
  EXPECT_EQ(r->status, WriteStatus::Appended);
  ASSERT_TRUE(w->set_seal_mode(SealMode::Inline));
  EXPECT_GE(w->snapshot().pages_sealed, 1u);
  auto reader = RelayReader::open("bg-held");
  ASSERT_TRUE(reader);
  const auto got = drain_spilled(*reader, 50);
  ASSERT_EQ(got.size(), 81u);
  for (std::uint64_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].value, i);
}

// A writer in Background mode: everything arrives in order, the handle
// moves with its sealer, and the mode is refused without a spill store.
TEST_F(RelaySpillTest, BackgroundSealingSealsOnTheWritersThreadAndKeepsOrder) {
  auto plain = RelayWriter::create("no-store", RelayConfig{});
  ASSERT_TRUE(plain) << plain.error().what();
  auto refused = plain->set_seal_mode(SealMode::Background);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::InvalidArgument);
  EXPECT_EQ(plain->seal_mode(), SealMode::Inline);

  // 64 records a page, a head of 80: a seal frees 64 entries.
  RelayConfig c = spill_cfg(policy::kRawFifo, 80, 64, 8, 64);
  auto w = RelayWriter::create("bg", c);
  ASSERT_TRUE(w) << w.error().what();
  ASSERT_TRUE(w->set_seal_mode(SealMode::Background));
  EXPECT_EQ(w->seal_mode(), SealMode::Background);
  constexpr std::uint64_t kOps = 2000;
  for (std::uint64_t i = 0; i < kOps; ++i) {
    auto r = w->write(u64_value(i), 0ns);
    ASSERT_TRUE(r) << r.error().what();
    ASSERT_EQ(r->status, WriteStatus::Appended) << "op " << i;
  }
  // Moved while its sealer may be sealing: the sealer goes with the handle.
  RelayWriter moved = std::move(*w);
  *w = RelayWriter{};
  ASSERT_TRUE(moved.set_seal_mode(SealMode::Inline));  // waits for a seal under way
  const RelaySnapshot s = moved.snapshot();
  EXPECT_GE(s.pages_sealed, (kOps - 80) / 64);
  EXPECT_EQ(s.spill_fallbacks, 0u);
  EXPECT_FALSE(s.seal_in_flight);
  EXPECT_EQ(test::count_files(spill_.sub("bg"), ".spill"), s.cold_pages);
  EXPECT_EQ(test::count_files(spill_.sub("bg"), ".tmp"), 0u);
  auto r = RelayReader::open("bg");
  ASSERT_TRUE(r);
  const auto got = drain_spilled(*r, 50);
  ASSERT_EQ(got.size(), kOps);
  for (std::uint64_t i = 0; i < kOps; ++i) ASSERT_EQ(got[i].value, i) << "op " << i;
}

}  // namespace
}  // namespace shm
