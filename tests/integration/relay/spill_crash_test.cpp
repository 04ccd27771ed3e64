// The spill store across real processes: a writer killed -9 at every step of
// a page seal, a reader killed -9 at every step of a page acknowledgement or
// of a Ttl expiry; then reopen and drain: nothing lost, nothing applied
// twice, files and manifest agree (verify), no torn temporary file left, and
// the counters (pages_sealed, entries_spilled, ops_spilled, pages_acked,
// pages_expired) exact: each change counted once, whatever step the kill hit.
#include "shm/testing/spill_crash.hpp"
#include "common/flip_byte.hpp"
#include "common/spill_config.hpp"
#include "common/subprocess.hpp"
#include "common/temp_dir.hpp"
#include "common/temp_root.hpp"
#include "shm/relay/relay.hpp"
#include "shm/segment/kind.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace shm {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using test::Subprocess;
using P = test_hooks::SpillCrashPoint;

// removed/ is gone or empty: every retired page file was unlinked.
bool nothing_retired_left(const std::string& dir) {
  std::error_code ec;
  fs::directory_iterator removed(dir + "/removed", ec);
  return ec || removed == fs::directory_iterator{};
}

Subprocess spill_peer(std::vector<std::string> args) {
  args.insert(args.begin(), test::helper_path("spill_peer"));
  return Subprocess(std::move(args));
}

RelayConfig crash_cfg() {
  RelayConfig c = test::small_spill_fifo("");  // the directory: LIBSHM_SPILL_DIR/<relay>
  c.spill.page_size = spill::kPageHeaderSize + 4 * spill::record_stride(8);
  return c;
}

struct Applied {
  std::uint64_t first, value;
};

std::vector<Applied> read_log(const std::string& path) {
  std::vector<Applied> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    std::string tag;
    Applied a{};
    if (s >> tag >> a.first >> a.value && tag == "e") out.push_back(a);
  }
  return out;
}

// A fresh crash_cfg() relay holding ops 0..5: full (high water 6), no page yet.
void fill_to_high_water(const std::string& name) {
  auto w = RelayWriter::create(name, crash_cfg());
  ASSERT_TRUE(w) << w.error().what();
  for (std::uint64_t i = 0; i < 6; ++i) ASSERT_TRUE(w->write(u64_value(i), 0ns));
  ASSERT_EQ(w->snapshot().pages_sealed, 0u);
  ASSERT_TRUE(w->snapshot().is_full);
}

// Drains everything (credit 3), every entry delivered for the first time.
std::vector<std::uint64_t> drain_first_time(RelayReader& r) {
  std::vector<std::uint64_t> got;
  for (int guard = 0; guard < 100; ++guard) {
    auto n = r.drain(3, [&](const RelayEntry& e) {
      EXPECT_FALSE(e.redelivered);
      got.push_back(u64_of(e.value));
    });
    EXPECT_TRUE(n) << n.error().what();
    if (!n || *n == 0) break;
  }
  return got;
}

class SpillCrashTest : public ::testing::Test {
 protected:
  void check_verify(const std::string& name) {
    auto seg = Segment::open_any(name, {});
    ASSERT_TRUE(seg);
    const std::vector<std::string> problems = find_kind(kRelayKind)->verify(*seg);
    EXPECT_TRUE(problems.empty()) << problems.front();
  }
  test::TempRoot root_;
  test::TempSpillDir spill_;
};

// A writer killed at each step of a seal: before the manifest records the
// page, repair rolls back (the entries stay hot, the file goes); after, it
// rolls forward (the entries leave the hot head, the page stays). Either way
// the reader gets ops 0..5 once, in order, and the page is counted once if it
// was recorded (SealCounted: the holder counted it already), never otherwise.
//
// The same with the page sealed by the writer's sealer thread
// (SealMode::Background, helper "seal-bg"): the write that found the relay
// full returned (its op, 1000, appended into the room) before the thread
// reached the step where the process is killed. The next locker reaps the
// seal as before, and op 1000 follows ops 0..5.
TEST_F(SpillCrashTest, AWriterKilledAtEverySealStepLosesNothingAndDuplicatesNothing) {
  const std::vector<std::pair<P, const char*>> points = {{P::ContentWritten, "ContentWritten"},
                                                         {P::HeaderWritten, "HeaderWritten"},
                                                         {P::Renamed, "Renamed"},
                                                         {P::DirSynced, "DirSynced"},
                                                         {P::ManifestUpdated, "ManifestUpdated"},
                                                         {P::SealCounted, "SealCounted"}};
  for (const bool background : {false, true}) {
    for (const auto& [point, label] : points) {
      SCOPED_TRACE(std::string(background ? "background " : "inline ") + label);
      const std::string name = std::string(background ? "bgseal-" : "seal-") + label;
      ASSERT_NO_FATAL_FAILURE(fill_to_high_water(name));
      auto helper = spill_peer(
          {background ? "seal-bg" : "seal", name, std::to_string(static_cast<int>(point))});
      if (background) {
        ASSERT_TRUE(helper.wait_for_line("written", 20s)) << helper.output();
      }
      ASSERT_TRUE(helper.wait_for_line("inside", 20s)) << helper.output();
      helper.kill(SIGKILL);
      ASSERT_EQ(helper.wait(20s), 128 + SIGKILL) << helper.output();

      auto r = RelayReader::open(name);  // locks: repairs the interrupted seal
      ASSERT_TRUE(r) << r.error().what();
      const RelaySnapshot s = r->snapshot();
      EXPECT_EQ(s.repairs, 1u);
      const bool forward = point == P::ManifestUpdated || point == P::SealCounted;
      const std::uint64_t written = background ? 1 : 0;  // op 1000, in the hot head
      EXPECT_EQ(s.seals_rolled_forward, forward ? 1u : 0u);
      EXPECT_EQ(s.seals_rolled_back, forward ? 0u : 1u);
      EXPECT_EQ(s.cold_pages, forward ? 1u : 0u);
      EXPECT_EQ(s.depth, (forward ? 2u : 6u) + written);
      // The counters are exact: the page counted once if it was recorded, never otherwise.
      EXPECT_EQ(s.pages_sealed, forward ? 1u : 0u);
      EXPECT_EQ(s.entries_spilled, forward ? 4u : 0u);
      EXPECT_EQ(s.ops_spilled, forward ? 4u : 0u);
      const std::string dir = spill_.sub(name);
      EXPECT_EQ(test::count_files(dir, ".tmp"), 0u);
      EXPECT_EQ(test::count_files(dir, ".spill"), forward ? 1u : 0u);
      check_verify(name);
      std::vector<std::uint64_t> expect = {0, 1, 2, 3, 4, 5};
      if (background) expect.push_back(1000);
      EXPECT_EQ(drain_first_time(*r), expect);
      EXPECT_EQ(test::count_files(dir, ".spill"), 0u);
      // The relay goes on spilling.
      auto w = RelayWriter::open(name);
      ASSERT_TRUE(w);
      for (std::uint64_t i = 0; i < 12; ++i) ASSERT_TRUE(w->write(u64_value(i), 0ns));
      EXPECT_GT(w->snapshot().pages_sealed, forward ? 1u : 0u);
    }
  }
}

// A reader killed at each step of a page acknowledgement, after it applied
// the page's records: the page is acknowledged (never delivered again) and
// counted once (AckCounted: the holder counted it already), its file goes at
// the next lock, and the rest follows in order.
TEST_F(SpillCrashTest, AReaderKilledAtEveryAckStepNeverGetsAnAcknowledgedPageAgain) {
  const std::vector<std::pair<P, const char*>> points = {
      {P::PageAcked, "PageAcked"}, {P::FileRemoved, "FileRemoved"}, {P::AckCounted, "AckCounted"}};
  for (const auto& [point, label] : points) {
    SCOPED_TRACE(label);
    const std::string name = std::string("ack-") + label;
    constexpr std::uint64_t kOps = 14;
    std::uint64_t first_page = 0;
    {
      auto w = RelayWriter::create(name, crash_cfg());
      ASSERT_TRUE(w) << w.error().what();
      for (std::uint64_t i = 0; i < kOps; ++i) ASSERT_TRUE(w->write(u64_value(i), 0ns));
      ASSERT_GE(w->snapshot().cold_pages, 2u);
      first_page = w->snapshot().manifest.at(0).page_id;
    }
    const std::string log = root_.file(name + ".log");
    auto helper = spill_peer({"ack", name, std::to_string(static_cast<int>(point)), log});
    ASSERT_TRUE(helper.wait_for_line("inside", 20s)) << helper.output();
    helper.kill(SIGKILL);
    ASSERT_EQ(helper.wait(20s), 128 + SIGKILL) << helper.output();
    const std::vector<Applied> before = read_log(log);
    ASSERT_EQ(before.size(), 4u);  // the first page, applied

    auto r = RelayReader::open(name);
    ASSERT_TRUE(r) << r.error().what();
    const std::string file = spill_.sub(name) + "/" + spill::page_file_name(first_page);
    EXPECT_FALSE(fs::exists(file));  // the repair finished the acknowledgement
    EXPECT_EQ(r->snapshot().pages_acked, 1u) << "the acknowledgement counted once";
    check_verify(name);
    std::vector<Applied> after;
    for (int guard = 0; guard < 100; ++guard) {
      auto n = r->drain(3, [&](const RelayEntry& e) {
        after.push_back(Applied{e.first_seq, u64_of(e.value)});
      });
      ASSERT_TRUE(n) << n.error().what();
      if (*n == 0) break;
    }
    ASSERT_FALSE(after.empty());
    EXPECT_GT(after.front().first, before.back().first) << "an acknowledged record came back";
    std::vector<std::uint64_t> all;
    for (const Applied& a : before) all.push_back(a.value);
    for (const Applied& a : after) all.push_back(a.value);
    std::vector<std::uint64_t> expect;
    for (std::uint64_t i = 0; i < kOps; ++i) expect.push_back(i);
    EXPECT_EQ(all, expect);
    EXPECT_EQ(test::count_files(spill_.sub(name), ".spill"), 0u);
    const RelaySnapshot s = r->snapshot();
    EXPECT_EQ(s.pages_acked, s.pages_sealed) << "every sealed page acknowledged, each counted once";
    EXPECT_EQ(s.cold_pages, 0u);
    // Killed at FileRemoved, the helper left its retired page in removed/:
    // the next reader unlinks it.
    *r = RelayReader{};  // closed: its purger is done
    EXPECT_TRUE(nothing_retired_left(spill_.sub(name))) << "a retired page outlived the readers";
  }
}

// A reader killed at each step of a Ttl expiry: the page is expired (its
// file goes, it is never delivered) and counted once in pages_expired
// (ExpireCounted: the holder counted it already); the other pages expire at
// the next take, the hot entries follow.
TEST_F(SpillCrashTest, AReaderKilledAtEveryExpiryStepCountsTheExpiredPageOnce) {
  const std::vector<std::pair<P, const char*>> points = {{P::ExpireMarked, "ExpireMarked"},
                                                         {P::ExpireCounted, "ExpireCounted"}};
  for (const auto& [point, label] : points) {
    SCOPED_TRACE(label);
    const std::string name = std::string("expire-") + label;
    constexpr std::uint64_t kOps = 14;
    std::uint64_t first_page = 0, sealed = 0;
    {
      RelayConfig cfg = crash_cfg();
      cfg.spill.retention = relay::RetentionKind::Ttl;
      cfg.spill.ttl = 1ms;
      auto w = RelayWriter::create(name, cfg);
      ASSERT_TRUE(w) << w.error().what();
      for (std::uint64_t i = 0; i < kOps; ++i) ASSERT_TRUE(w->write(u64_value(i), 0ns));
      sealed = w->snapshot().pages_sealed;
      ASSERT_GE(w->snapshot().cold_pages, 2u);
      first_page = w->snapshot().manifest.at(0).page_id;
    }
    std::this_thread::sleep_for(5ms);  // the pages age past the ttl (not a synchronisation)
    auto helper = spill_peer({"expire", name, std::to_string(static_cast<int>(point))});
    ASSERT_TRUE(helper.wait_for_line("inside", 20s)) << helper.output();
    helper.kill(SIGKILL);
    ASSERT_EQ(helper.wait(20s), 128 + SIGKILL) << helper.output();

    auto r = RelayReader::open(name);  // locks: repairs the interrupted expiry
    ASSERT_TRUE(r) << r.error().what();
    RelaySnapshot s = r->snapshot();
    EXPECT_EQ(s.repairs, 1u);
    EXPECT_EQ(s.pages_expired, 1u) << "the expired page counted once";
    EXPECT_EQ(s.cold_pages, sealed - 1);
    const std::string dir = spill_.sub(name);
    EXPECT_FALSE(fs::exists(dir + "/" + spill::page_file_name(first_page)));
    check_verify(name);
    std::vector<std::uint64_t> got;
    for (int guard = 0; guard < 100; ++guard) {
      auto n = r->drain(3, [&](const RelayEntry& e) {
        EXPECT_EQ(e.page_id, 0u) << "an expired page was delivered";
        got.push_back(u64_of(e.value));
      });
      ASSERT_TRUE(n) << n.error().what();
      if (*n == 0) break;
    }
    std::vector<std::uint64_t> hot;  // what no page took: the newest ops
    for (std::uint64_t i = 4 * sealed; i < kOps; ++i) hot.push_back(i);
    EXPECT_EQ(got, hot);
    s = r->snapshot();
    EXPECT_EQ(s.pages_expired, sealed) << "every page expired, each counted once";
    EXPECT_EQ(s.pages_acked, 0u);
    EXPECT_EQ(s.cold_pages, 0u);
    EXPECT_EQ(test::count_files(dir, ".spill"), 0u);
  }
}

// A reader killed at each step of refusing a damaged cold page: the page is
// refused once (moved aside into refused/, never delivered) and counted once
// in pages_refused (RefuseCounted: the holder counted it already); the
// repair frees its slot and the reader goes on with the valid pages, in order.
TEST_F(SpillCrashTest, AReaderKilledAtEveryRefusalStepCountsTheDamagedPageOnce) {
  const std::vector<std::pair<P, const char*>> points = {{P::RefuseMoved, "RefuseMoved"},
                                                         {P::RefuseCounted, "RefuseCounted"}};
  for (const auto& [point, label] : points) {
    SCOPED_TRACE(label);
    const std::string name = std::string("refuse-") + label;
    constexpr std::uint64_t kOps = 14;
    std::uint64_t first_page = 0, sealed = 0;
    {
      auto w = RelayWriter::create(name, crash_cfg());
      ASSERT_TRUE(w) << w.error().what();
      for (std::uint64_t i = 0; i < kOps; ++i) ASSERT_TRUE(w->write(u64_value(i), 0ns));
      sealed = w->snapshot().pages_sealed;
      ASSERT_GE(sealed, 2u);
      first_page = w->snapshot().manifest.at(0).page_id;
    }
    const std::string dir = spill_.sub(name);
    test::flip_byte(dir + "/" + spill::page_file_name(first_page),
                    spill::kPageHeaderSize + 50);  // a content byte: the content CRC fails
    auto helper = spill_peer({"refuse", name, std::to_string(static_cast<int>(point))});
    ASSERT_TRUE(helper.wait_for_line("inside", 20s)) << helper.output();
    helper.kill(SIGKILL);
    ASSERT_EQ(helper.wait(20s), 128 + SIGKILL) << helper.output();

    auto r = RelayReader::open(name);  // locks: repairs the interrupted refusal
    ASSERT_TRUE(r) << r.error().what();
    RelaySnapshot s = r->snapshot();
    EXPECT_EQ(s.repairs, 1u);
    EXPECT_EQ(s.pages_refused, 1u) << "the damaged page counted once";
    EXPECT_EQ(s.cold_pages, sealed - 1);
    EXPECT_FALSE(fs::exists(dir + "/" + spill::page_file_name(first_page)));
    std::vector<std::string> refused;
    for (const auto& e : fs::directory_iterator(dir + "/refused"))
      refused.push_back(e.path().filename().string());
    ASSERT_EQ(refused.size(), 1u) << "moved aside once";
    EXPECT_NE(refused[0].find(".Corrupt-"), std::string::npos) << refused[0] << ": named by why";
    check_verify(name);
    std::vector<std::uint64_t> got;
    for (int guard = 0; guard < 100; ++guard) {
      auto n = r->drain(3, [&](const RelayEntry& e) { got.push_back(u64_of(e.value)); });
      ASSERT_TRUE(n) << n.error().what();
      if (*n == 0) break;
    }
    std::vector<std::uint64_t> rest;  // everything but the refused page's 4 ops
    for (std::uint64_t i = 4; i < kOps; ++i) rest.push_back(i);
    EXPECT_EQ(got, rest);
    s = r->snapshot();
    EXPECT_EQ(s.pages_refused, 1u);
    EXPECT_EQ(s.pages_acked, sealed - 1);
    EXPECT_EQ(s.cold_pages, 0u);
  }
}

// A reader gone between take and commit (its handle dropped without a
// commit: what a kill there leaves) does not move the cursor: the next reader
// gets the records again, marked redelivered, and drops them by first_seq.
TEST_F(SpillCrashTest, RecordsTakenAndNeverCommittedComeBackMarkedRedelivered) {
  const std::string name = "before-commit";
  auto w = RelayWriter::create(name, crash_cfg());
  ASSERT_TRUE(w);
  for (std::uint64_t i = 0; i < 14; ++i) ASSERT_TRUE(w->write(u64_value(i), 0ns));
  std::uint64_t first = 0;
  {
    auto r = RelayReader::open(name);
    ASSERT_TRUE(r);
    auto got = r->take(2);
    ASSERT_TRUE(got);
    ASSERT_EQ(got->size(), 2u);
    EXPECT_FALSE((*got)[0].redelivered);
    first = (*got)[0].first_seq;
  }
  auto r = RelayReader::open(name);
  ASSERT_TRUE(r);
  auto got = r->take(4);
  ASSERT_TRUE(got);
  ASSERT_EQ(got->size(), 4u);
  EXPECT_EQ((*got)[0].first_seq, first);
  EXPECT_TRUE((*got)[0].redelivered);
  EXPECT_TRUE((*got)[1].redelivered);
  EXPECT_FALSE((*got)[2].redelivered);
  ASSERT_TRUE(r->commit());
}

// A seal writes its page with the relay unlocked: while a writer (another
// process) is inside the file I/O, other writers go on into the free
// entries and only a write that finds none waits; the reader waits for the
// page (it drains before every newer entry). Continued, the sealer records
// the page and the reader gets everything in order. Killed there, the next
// locker reaps it: the seal rolls back (its file goes, its entries drain
// hot, closed to merges) and is counted as a repair, never as a page.
TEST_F(SpillCrashTest, WritersGoOnWhileAPageSealsAndADeadSealerIsReaped) {
  for (const bool killed : {false, true}) {
    SCOPED_TRACE(killed ? "the sealer is killed" : "the sealer finishes");
    const std::string name = killed ? "inflight-killed" : "inflight";
    {
      auto w = RelayWriter::create(name, crash_cfg());  // capacity 8, spill at 6, pages of 4
      ASSERT_TRUE(w) << w.error().what();
      for (std::uint64_t i = 0; i < 6; ++i) ASSERT_TRUE(w->write(u64_value(i), 0ns));
      ASSERT_TRUE(w->snapshot().is_full);
    }
    auto helper =
        spill_peer({"seal-pause", name, std::to_string(static_cast<int>(P::ContentWritten))});
    ASSERT_TRUE(helper.wait_for_line("inside", 20s)) << helper.output();

    auto w = RelayWriter::open(name);
    ASSERT_TRUE(w) << w.error().what();
    const RelaySnapshot during = w->snapshot();
    EXPECT_TRUE(during.seal_in_flight);
    EXPECT_EQ(during.seal_page, 1u);
    EXPECT_EQ(during.spilling_entries, 4u);
    for (std::uint64_t v : {100u, 101u}) {
      auto r = w->write(u64_value(v), 0ns);  // a try: it would time out if it waited
      ASSERT_TRUE(r) << r.error().what();
      EXPECT_EQ(r->status, WriteStatus::Appended) << v << " waited for the seal's disk I/O";
    }
    auto full = w->write(u64_value(102), 0ns);  // no free entry left: this one waits (times out)
    ASSERT_TRUE(full) << full.error().what();
    EXPECT_EQ(full->status, WriteStatus::TimedOut);
    {
      auto r = RelayReader::open(name);
      ASSERT_TRUE(r) << r.error().what();
      auto none = r->take(10);
      ASSERT_TRUE(none) << none.error().what();
      EXPECT_TRUE(none->empty()) << "an entry newer than the page in flight was delivered first";
      ASSERT_TRUE(r->commit());
      auto ready = r->wait(50ms);
      ASSERT_TRUE(ready);
      EXPECT_FALSE(*ready) << "the reader was told to drain while only the seal's entries wait";
    }
    std::vector<std::uint64_t> expect;
    if (killed) {
      const pid_t sealer = helper.pid();
      helper.kill(SIGKILL);
      ASSERT_EQ(helper.wait(20s), 128 + SIGKILL) << helper.output();
      expect = {0, 1, 2, 3, 4, 5, 100, 101};
      // The sidecar's (or shmctl's) reclaim of the dead writer reaps its seal.
      auto seg = Segment::open_any(name, {});
      ASSERT_TRUE(seg) << seg.error().what();
      std::optional<SlotInfo> dead;
      for (const SlotInfo& slot : seg->slots())
        if (slot.pid == sealer && slot.liveness == Liveness::Dead) dead = slot;
      ASSERT_TRUE(dead.has_value()) << "the killed sealer's attachment slot";
      auto lines = find_kind(kRelayKind)->reclaim(*seg, *dead);
      ASSERT_TRUE(lines) << lines.error().what();
      ASSERT_EQ(lines->size(), 1u);
      EXPECT_NE(lines->front().find("was sealing a page"), std::string::npos) << lines->front();
      EXPECT_FALSE(w->snapshot().seal_in_flight);
    } else {
      helper.kill(SIGCONT);
      ASSERT_TRUE(helper.wait_for_line("written", 20s)) << helper.output();
      ASSERT_EQ(helper.wait(20s), 0) << helper.output();
      expect = {0, 1, 2, 3, 4, 5, 100, 101, 1000};
    }
    auto r = RelayReader::open(name);  // reaps a dead sealer
    ASSERT_TRUE(r) << r.error().what();
    std::vector<std::uint64_t> got;
    std::vector<bool> from_page;
    for (int guard = 0; guard < 100; ++guard) {
      auto n = r->drain(3, [&](const RelayEntry& e) {
        got.push_back(u64_of(e.value));
        from_page.push_back(e.page_id != 0);
      });
      ASSERT_TRUE(n) << n.error().what();
      if (*n == 0) break;
    }
    EXPECT_EQ(got, expect);
    const RelaySnapshot s = r->snapshot();
    EXPECT_EQ(s.pages_sealed, killed ? 0u : 1u);
    EXPECT_EQ(s.seals_rolled_back, killed ? 1u : 0u);
    EXPECT_EQ(s.repairs, killed ? 1u : 0u);
    ASSERT_EQ(from_page.size(), got.size());
    EXPECT_EQ(from_page.front(), !killed) << "ops 0-3 come from the page iff it was recorded";
    EXPECT_FALSE(s.seal_in_flight);
    EXPECT_EQ(s.spilling_entries, 0u);
    EXPECT_EQ(test::count_files(spill_.sub(name), ".spill"), 0u);
    EXPECT_EQ(test::count_files(spill_.sub(name), ".tmp"), 0u);
    check_verify(name);
    *r = RelayReader{};  // closed: its purger is done
    EXPECT_TRUE(nothing_retired_left(spill_.sub(name))) << "a retired page outlived the readers";
  }
}

// The reader reads a cold page's file, and removes an acknowledged page's
// file, with the relay unlocked: while the reader (another process) is
// stopped at either point, a writer goes on, a seal included. Continued, the
// reader gets everything once, in order; killed there, a new reader gets the
// rest (the acknowledged page never again, its file and slot finished at the
// open).
TEST_F(SpillCrashTest, WritersGoOnWhileTheReaderReadsOrRemovesAPageFile) {
  for (const P point : {P::ColdPageRead, P::FileRemoved}) {
    for (const bool killed : {false, true}) {
      const std::string label =
          std::string(point == P::ColdPageRead ? "read" : "removed") + (killed ? "-killed" : "");
      SCOPED_TRACE(label);
      const std::string name = "unlocked-" + label;
      constexpr std::uint64_t kOps = 14;
      {
        auto w = RelayWriter::create(name, crash_cfg());
        ASSERT_TRUE(w) << w.error().what();
        for (std::uint64_t i = 0; i < kOps; ++i) ASSERT_TRUE(w->write(u64_value(i), 0ns));
        ASSERT_GE(w->snapshot().cold_pages, 2u);
      }
      auto helper = spill_peer({"drain-pause", name, std::to_string(static_cast<int>(point))});
      ASSERT_TRUE(helper.wait_for_line("inside", 20s)) << helper.output();

      // On a thread: a write that waited for the stopped reader's mutex
      // would never return, so it gets 20 s, then the reader is killed
      // (which frees the mutex) and the test fails.
      auto w = RelayWriter::open(name);
      ASSERT_TRUE(w) << w.error().what();
      std::vector<std::string> outcomes;
      auto writes = std::async(std::launch::async, [&] {
        for (std::uint64_t v : {100u, 101u, 102u, 103u, 104u}) {
          auto r = w->write(u64_value(v), 0ns);
          outcomes.push_back(r ? std::string(to_string(r->status)) : r.error().what());
        }
      });
      if (writes.wait_for(20s) != std::future_status::ready) {
        helper.kill(SIGKILL);
        writes.wait();
        FAIL() << "a write waited for the reader stopped with the relay unlocked";
      }
      EXPECT_EQ(outcomes, std::vector<std::string>(5, "appended"));
      EXPECT_GT(w->snapshot().pages_sealed, 2u) << "the writes sealed a page meanwhile";

      std::vector<std::uint64_t> expect;
      for (std::uint64_t i = 0; i < kOps; ++i) expect.push_back(i);
      for (std::uint64_t v : {100u, 101u, 102u, 103u, 104u}) expect.push_back(v);
      std::string want = "got";
      if (!killed) {
        for (std::uint64_t v : expect) want += " " + std::to_string(v);
        helper.kill(SIGCONT);
        EXPECT_TRUE(helper.wait_for_line(want, 20s)) << helper.output();
        ASSERT_EQ(helper.wait(20s), 0) << helper.output();
      } else {
        helper.kill(SIGKILL);
        ASSERT_EQ(helper.wait(20s), 128 + SIGKILL) << helper.output();
        // Killed after its first page was acknowledged: that page is gone.
        if (point == P::FileRemoved) expect.erase(expect.begin(), expect.begin() + 4);
        auto r = RelayReader::open(name);
        ASSERT_TRUE(r) << r.error().what();
        for (const RelaySnapshot::ColdPage& m : r->snapshot().manifest)
          EXPECT_FALSE(m.acked) << "page " << m.page_id << " left acknowledged";
        std::vector<std::uint64_t> got;
        for (int guard = 0; guard < 100; ++guard) {
          auto n = r->drain(4, [&](const RelayEntry& e) { got.push_back(u64_of(e.value)); });
          ASSERT_TRUE(n) << n.error().what();
          if (*n == 0) break;
        }
        EXPECT_EQ(got, expect);
      }
      const RelaySnapshot s = w->snapshot();
      EXPECT_EQ(s.pages_acked, s.pages_sealed) << "every page acknowledged once";
      EXPECT_EQ(s.cold_pages, 0u);
      EXPECT_EQ(test::count_files(spill_.sub(name), ".spill"), 0u);
      check_verify(name);
    }
  }
}

// Two relay creates racing for one spill directory. A relay's segment is
// created under a temporary name and published under its own only at the
// end, so while the first create rebuilds its manifest, its binding names a
// path that does not exist yet: without the directory's binding lock the
// second create calls that binding stale and takes the directory over (two
// relays adopting and deleting each other's pages). With it the second
// create waits; it is then refused (the first relay exists), or, when the
// first create was killed before publishing, takes the directory over.
TEST_F(SpillCrashTest, ARelayCreateHoldsItsSpillDirectoryUntilItsSegmentIsPublished) {
  for (const bool first_killed : {false, true}) {
    SCOPED_TRACE(first_killed ? "the first create is killed" : "the first create finishes");
    const std::string tag = first_killed ? "killed" : "finishes";
    const std::string dir = spill_.sub("race-" + tag);
    const std::string first = "first-" + tag, second = "second-" + tag;
    auto helper = spill_peer({"bind", first, dir});
    ASSERT_TRUE(helper.wait_for_line("inside", 20s)) << helper.output();

    std::optional<Result<RelayWriter>> raced;
    std::atomic<bool> returned{false};
    std::thread racer([&] {
      raced.emplace(RelayWriter::create(second, test::small_spill_fifo(dir)));
      returned.store(true);
    });
    std::this_thread::sleep_for(500ms);
    EXPECT_FALSE(returned.load())
        << "the second create did not wait for the first create's binding lock";
    if (first_killed) {
      helper.kill(SIGKILL);
      EXPECT_EQ(helper.wait(20s), 128 + SIGKILL) << helper.output();
    } else {
      helper.kill(SIGCONT);
      EXPECT_TRUE(helper.wait_for_line("created", 20s)) << helper.output();
      EXPECT_EQ(helper.wait(20s), 0) << helper.output();
    }
    racer.join();
    ASSERT_TRUE(raced.has_value());
    if (first_killed) {
      ASSERT_TRUE(*raced) << "a binding to a create that died is stale: " << raced->error().what();
      EXPECT_FALSE(Segment::open_any(first, {})) << "the killed create never published";
    } else {
      ASSERT_FALSE(*raced) << "two relays bound to " << dir;
      EXPECT_EQ(raced->error().code, Errc::RoleTaken) << raced->error().what();
      EXPECT_NE(raced->error().message.find(root_.file(first)), std::string::npos)
          << raced->error().what();
      EXPECT_FALSE(Segment::open_any(second, {})) << "a refused create leaves no segment";
      EXPECT_TRUE(Segment::open_any(first, {}));
    }
  }
}

}  // namespace
}  // namespace shm
