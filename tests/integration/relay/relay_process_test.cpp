// Relays across real processes: kill -9 inside every crash point, writers and
// readers killed and restarted under load, policies not registered in a peer.
#include "common/scale.hpp"
#include "common/subprocess.hpp"
#include "common/temp_dir.hpp"
#include "common/temp_root.hpp"
#include "shm/relay/relay.hpp"
#include "shm/segment/kind.hpp"
#include "shm/testing/relay_crash.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace shm {
namespace {

using namespace std::chrono_literals;
using test::Subprocess;

Subprocess relay_peer(std::vector<std::string> args) {
  args.insert(args.begin(), test::helper_path("relay_peer"));
  return Subprocess(std::move(args));
}

std::vector<std::byte> bytes64(unsigned char b) {
  return std::vector<std::byte>(64, static_cast<std::byte>(b));
}

class RelayProcessTest : public ::testing::Test {
 protected:
  test::TempRoot root_;
};

struct RelayCrashCase {
  test_hooks::RelayCrashPoint point;
  const char* name;
  // What a fresh reader drains after the repair: (key, byte of every value byte).
  std::vector<std::pair<std::uint64_t, unsigned char>> expect;
  bool redelivered;  // the first entry comes back from a dead reader
};

// A writer or reader killed -9 at every crash point: the next locker repairs,
// the value is never torn (old or new, as the intent protocol decides), the
// derived state matches the entry table (verify), and nothing else changes.
TEST_F(RelayProcessTest, KilledInsideEveryCrashPointLeavesOldOrNewNeverTorn) {
  using P = test_hooks::RelayCrashPoint;
  const std::vector<RelayCrashCase> cases = {
      {P::MergeIntentFilling, "MergeIntentFilling", {{1, 0xAA}, {3, 0xCC}}, false},
      {P::MergeIntentValid, "MergeIntentValid", {{1, 0xBB}, {3, 0xCC}}, false},
      {P::MergeMidValue, "MergeMidValue", {{1, 0xBB}, {3, 0xCC}}, false},
      {P::MergeApplied, "MergeApplied", {{1, 0xBB}, {3, 0xCC}}, false},
      {P::AppendFilled, "AppendFilled", {{1, 0xAA}, {3, 0xCC}}, false},
      {P::AppendPublished, "AppendPublished", {{1, 0xAA}, {3, 0xCC}, {2, 0x22}}, false},
      // The drop-oldest intent holds the op: repair finishes the drop and the append.
      {P::DropOldestFreed,
       "DropOldestFreed",
       {{3, 0xCC}, {4, 0x44}, {5, 0x55}, {6, 0x66}, {8, 0x88}},
       false},
      {P::TakeMidEntries, "TakeMidEntries", {{1, 0xAA}, {3, 0xCC}}, true},
      // A commit is all or nothing: repair frees every entry the dead reader held.
      {P::CommitMidEntries, "CommitMidEntries", {}, false},
  };
  ASSERT_EQ(static_cast<int>(cases.size()), test_hooks::kRelayCrashPoints);
  for (const RelayCrashCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string name = std::string("crash-") + c.name;
    RelayConfig cfg;
    cfg.policy = policy::kKeepLatest;
    cfg.value_bytes = 64;
    cfg.max_entries = 8;
    cfg.backpressure = {Dimension::Count, 5, 1, Overflow::DropOldest};
    {
      auto w = RelayWriter::create(name, cfg);
      ASSERT_TRUE(w) << w.error().what();
      ASSERT_TRUE(w->write(1, bytes64(0xAA), shm::forever));
      ASSERT_TRUE(w->write(3, bytes64(0xCC), shm::forever));
    }
    auto helper = relay_peer({"crash", name, std::to_string(static_cast<int>(c.point))});
    ASSERT_TRUE(helper.wait_for_line("inside", 20s)) << helper.output();
    helper.kill(SIGKILL);
    ASSERT_EQ(helper.wait(20s), 128 + SIGKILL) << helper.output();

    auto r = RelayReader::open(name);  // locks: repairs, returns what a dead reader held
    ASSERT_TRUE(r) << r.error().what();
    const RelaySnapshot s = r->snapshot();
    EXPECT_TRUE(s.consistent);
    EXPECT_FALSE(s.faulted);
    EXPECT_EQ(s.repairs, 1u);
    auto seg = Segment::open_any(name, {});
    ASSERT_TRUE(seg);
    const std::vector<std::string> problems = find_kind(kRelayKind)->verify(*seg);
    EXPECT_TRUE(problems.empty()) << problems.front();
    std::vector<std::pair<std::uint64_t, unsigned char>> got;
    std::vector<bool> redelivered;
    auto n = r->drain(100, [&](const RelayEntry& e) {
      ASSERT_FALSE(e.value.empty());
      const auto first = static_cast<unsigned char>(e.value[0]);
      // The merge writes 40 bytes of 0xBB (another length: the mutex path).
      ASSERT_EQ(e.value.size(), first == 0xBB ? 40u : 64u) << "key " << e.key;
      for (std::byte b : e.value)
        ASSERT_EQ(static_cast<unsigned char>(b), first) << "torn value for key " << e.key;
      got.emplace_back(e.key, first);
      redelivered.push_back(e.redelivered);
    });
    ASSERT_TRUE(n) << n.error().what();
    EXPECT_EQ(got, c.expect);
    if (!redelivered.empty()) {
      EXPECT_EQ(redelivered.front(), c.redelivered);
    }
    // The relay goes on working.
    auto w = RelayWriter::open(name);
    ASSERT_TRUE(w);
    auto again = w->write(9, bytes64(0x99), shm::forever);
    ASSERT_TRUE(again);
    EXPECT_EQ(again->status, WriteStatus::Appended);
  }
}

TEST_F(RelayProcessTest, OpeningWithAPolicyIdNotRegisteredInThisProcessIsATypedError) {
  MergePolicy keep_first;
  keep_first.id = policy::kFirstCustomPolicy + 77;
  keep_first.name = "keep_first";
  keep_first.flags = {true, false, true, true, false};
  keep_first.combine = [](std::span<const std::byte> cur, std::span<const std::byte>,
                          std::span<std::byte> out) {
    std::memcpy(out.data(), cur.data(), cur.size());
    return cur.size();
  };
  ASSERT_TRUE(register_merge(keep_first));
  RelayConfig cfg;
  cfg.policy = keep_first.id;
  auto w = RelayWriter::create("custom", cfg);
  ASSERT_TRUE(w) << w.error().what();
  auto helper = relay_peer({"open", "custom"});
  EXPECT_EQ(helper.wait(20s), 1) << helper.output();
  EXPECT_NE(helper.output().find("UnknownPolicy: "), std::string::npos) << helper.output();
  EXPECT_NE(helper.output().find("merge policy id 1101 is not registered"), std::string::npos)
      << helper.output();
}

struct Cli {
  int code;
  std::string out;
};
Cli shmctl(std::vector<std::string> args, const std::string& root) {
  std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1",
                                   test::bin_path("shmctl")};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--root");
  argv.push_back(root);
  Subprocess p(argv);
  const int code = p.wait(20s);
  return {code, p.output()};
}

TEST_F(RelayProcessTest, ShmctlInspectsVerifiesAndRetunesARelayLive) {
#if !SHM_EXPECT_TOOLS
  GTEST_SKIP() << "LIBSHM_BUILD_TOOLS is OFF";
#endif
  RelayConfig cfg;
  cfg.policy = policy::kRawFifo;
  cfg.max_entries = 64;
  cfg.backpressure = {Dimension::Count, 4, 1, Overflow::Block};
  auto w = RelayWriter::create("log", cfg);
  ASSERT_TRUE(w) << w.error().what();
  for (std::uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(w->write(u64_value(i), 0ns));
  EXPECT_TRUE(w->snapshot().is_full);
  const Cli inspect = shmctl({"inspect", "log", "--json"}, root_.path());
  ASSERT_EQ(inspect.code, 0) << inspect.out;
  for (const char* word : {"\"is_full\"", "\"depth\"", "\"raw_fifo\"", "\"high_water\"",
                           "\"full_set\"", "\"dropped\""})
    EXPECT_NE(inspect.out.find(word), std::string::npos) << word << "\n" << inspect.out;
  const Cli verify = shmctl({"verify", "log"}, root_.path());
  EXPECT_EQ(verify.code, 0) << verify.out;
  // Retuned from another process, followed by the attached writer at once.
  const Cli set = shmctl({"set", "log", "high_water=32"}, root_.path());
  ASSERT_EQ(set.code, 0) << set.out;
  EXPECT_EQ(w->snapshot().backpressure.high_water, 32u);
  EXPECT_TRUE(w->snapshot().is_full) << "hysteresis: level 4 is still above low water 1";
  ASSERT_EQ(shmctl({"set", "log", "low_water=8"}, root_.path()).code, 0);
  EXPECT_FALSE(w->snapshot().is_full) << "level 4 is at or below the new low water";
  auto more = w->write(u64_value(9), 0ns);
  ASSERT_TRUE(more);
  EXPECT_EQ(more->status, WriteStatus::Appended);
  const Cli bad = shmctl({"set", "log", "low_water=32"}, root_.path());
  EXPECT_NE(bad.code, 0) << bad.out;
  EXPECT_NE(bad.out.find("low_water 32 must be below high_water 32"), std::string::npos) << bad.out;
  const Cli refused = shmctl({"set", "log", "overflow=conflate"}, root_.path());
  EXPECT_NE(refused.code, 0) << refused.out;
  EXPECT_NE(refused.out.find("overflow conflate with policy raw_fifo"), std::string::npos)
      << refused.out;
  EXPECT_EQ(w->snapshot().backpressure.overflow, Overflow::Block);
}

// The examples: relay_ticker (lww, conflation bounded by keys, prices never
// go back) and relay_log (raw_fifo + Block: parks, resumes, retuned live;
// --spill: the paused reader's backlog goes to disk and comes back in order).
TEST_F(RelayProcessTest, ExamplesTickerAndLogRunToTheirOwnChecks) {
#if !SHM_EXPECT_EXAMPLES
  GTEST_SKIP() << "LIBSHM_BUILD_EXAMPLES is OFF";
#endif
  Subprocess ticker({test::bin_path("relay_ticker"), "--symbols", "1000", "--writers", "2",
                     "--seconds", "1", "--rate", "20000"});
  ASSERT_EQ(ticker.wait(60s), 0) << ticker.output();
  EXPECT_NE(ticker.output().find("max depth"), std::string::npos) << ticker.output();
  Subprocess log({test::bin_path("relay_log"), "--lines", std::to_string(test::scaled(5000)),
                  "--high", "64", "--low", "16", "--retune-high", "256"});
  ASSERT_EQ(log.wait(60s), 0) << log.output();
  EXPECT_NE(log.output().find("shipped in order: true"), std::string::npos) << log.output();
  // relay_log --spill: the reader paused, the writer never blocks, the
  // oldest lines go to disk; every line comes back in order with its CRC.
  test::TempSpillDir spill;
  Subprocess spilled({test::bin_path("relay_log"), "--spill", "--pause-ms", "300", "--lines",
                      std::to_string(test::scaled(5000)), "--high", "64", "--low", "16",
                      "--spill-dir", spill.sub("log")});
  ASSERT_EQ(spilled.wait(60s), 0) << spilled.output();
  EXPECT_NE(spilled.output().find("with their CRC: true"), std::string::npos) << spilled.output();
  EXPECT_NE(spilled.output().find("writer blocked 0 times"), std::string::npos) << spilled.output();
}

// relay_log retuned by `shmctl set` from another process while it runs (the
// issue's example): the reader stops halfway until the high water changes.
TEST_F(RelayProcessTest, ExampleLogIsRetunedByShmctlSetWhileItRuns) {
#if !SHM_EXPECT_EXAMPLES || !SHM_EXPECT_TOOLS
  GTEST_SKIP() << "LIBSHM_BUILD_EXAMPLES or LIBSHM_BUILD_TOOLS is OFF";
#endif
  Subprocess log({test::bin_path("relay_log"), "--lines", std::to_string(test::scaled(2000)),
                  "--high", "64", "--low", "16", "--retune-high", "256", "--retune-externally"});
  ASSERT_TRUE(log.wait_for_line("waiting for: shmctl set log high_water=256", 60s)) << log.output();
  const Cli set = shmctl({"set", "log", "high_water=256"}, root_.path());
  ASSERT_EQ(set.code, 0) << set.out;
  ASSERT_EQ(log.wait(60s), 0) << log.output();
  EXPECT_NE(log.output().find("retuned from outside: high water 64 -> 256"), std::string::npos)
      << log.output();
  EXPECT_NE(log.output().find("shipped in order: true"), std::string::npos) << log.output();
}

// The composition of issue 15: writers -> relay (conflation) -> bridge with
// credit = free egress slots -> egress -> transport process. A pool far
// smaller than the write stream forces the relay to merge; every key still
// arrives with its last value and nothing is dropped.
TEST_F(RelayProcessTest, ExampleRelayAheadOfEgressDeliversEveryKeysLastValue) {
#if !SHM_EXPECT_EXAMPLES
  GTEST_SKIP() << "LIBSHM_BUILD_EXAMPLES is OFF";
#endif
  const std::string rounds = std::to_string(test::scaled(100));
  Subprocess p({test::bin_path("relay_egress"), "--keys", "500", "--writers", "2", "--rounds",
                rounds, "--pool", "32", "--window", "8"});
  ASSERT_EQ(p.wait(90s), 0) << p.output();
  const std::string& out = p.output();
  EXPECT_NE(out.find("every key delivered with its last value: true"), std::string::npos) << out;
  EXPECT_NE(out.find(", 0 without their last value"), std::string::npos) << out;
  EXPECT_NE(out.find("0 dropped"), std::string::npos) << out;
  // 500 keys x rounds writes through a 32-slot pool: the relay merged.
  const auto at = out.find(" merged into open entries");
  ASSERT_NE(at, std::string::npos) << out;
  const auto from = out.rfind(", ", at) + 2;
  EXPECT_GT(std::stoull(out.substr(from, at - from)), 0u) << out;
}

// ---------------------------------------------------------------- 4 writers, 1 reader, kill -9

struct WriterLog {
  std::set<std::uint64_t> acked, uncertain;  // uncertain: tried, never acknowledged
};

WriterLog read_writer_log(const std::string& path) {
  WriterLog l;
  std::set<std::uint64_t> tried;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    std::string tag;
    std::uint64_t i = 0;
    if (!(s >> tag >> i)) continue;  // a line cut by kill -9
    (tag == "a" ? l.acked : tried).insert(i);
  }
  for (std::uint64_t i : tried)
    if (!l.acked.contains(i)) l.uncertain.insert(i);
  return l;
}

struct Delivered {
  std::uint64_t key, first, last, count, value;
};

// Entries in delivery order, deduplicated by first_seq (a redelivered entry
// carries the sequences it had).
std::vector<Delivered> read_reader_log(const std::string& path) {
  std::vector<Delivered> out;
  std::set<std::uint64_t> seen;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    std::string tag;
    Delivered d{};
    std::uint64_t check = 0;
    if (!(s >> tag >> d.key >> d.first >> d.last >> d.count >> d.value >> check) || tag != "e")
      continue;
    if (check != (d.key ^ d.first ^ d.last ^ d.count ^ d.value)) continue;  // cut by kill -9
    if (!seen.insert(d.first).second) continue;
    out.push_back(d);
  }
  return out;
}

std::pair<std::uint64_t, std::uint64_t> op_for(PolicyId policy, std::uint64_t id, std::uint64_t i) {
  if (policy == policy::kRawFifo) return {id, (id << 32) | i};
  if (policy == policy::kSum) return {i % 8, 1 + (id * 7 + i) % 5};
  return {i % 8, i * 4 + id};
}

void run_chaos(const std::string& name, PolicyId policy, Overflow overflow, unsigned seed,
               const std::string& dir) {
  constexpr int kWriters = 4;
  const std::uint64_t count = test::scaled(2000);
  RelayConfig cfg;
  cfg.policy = policy;
  cfg.max_entries = 64;
  cfg.backpressure = {Dimension::Count, 48, 16, overflow};
  if (overflow == Overflow::Spill) {  // the spill directory: LIBSHM_SPILL_DIR (TempSpillDir)
    cfg.spill.enabled = true;
    cfg.spill_dedup = true;
    cfg.spill.page_size = spill::kPageHeaderSize + 64 * spill::record_stride(8);
    if (policy != policy::kRawFifo) cfg.backpressure = {Dimension::Count, 6, 2, overflow};
  }
  auto creator = RelayWriter::create(name, cfg);
  ASSERT_TRUE(creator) << creator.error().what();
  std::mt19937 rng(seed);
  const std::string rlog = dir + "/" + name + ".reader";
  auto wlog = [&](int w) { return dir + "/" + name + ".w" + std::to_string(w); };
  std::vector<std::optional<Subprocess>> writers(kWriters);
  auto start_writer = [&](int w) {
    writers[w].emplace(
        relay_peer({"writer", name, std::to_string(w), std::to_string(count), wlog(w)}));
  };
  for (int w = 0; w < kWriters; ++w) start_writer(w);
  std::optional<Subprocess> reader;
  auto start_reader = [&] {
    reader.emplace(relay_peer({"reader", name, rlog, std::to_string(rng())}));
    ASSERT_TRUE(reader->wait_for_line("started", 20s)) << reader->output();
  };
  start_reader();
  const int kills = static_cast<int>(test::scaled(12) < 4 ? 4 : test::scaled(12));
  int writer_kills = 0, reader_kills = 0;
  for (int k = 0; k < kills; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5 + rng() % 40));  // chaos, not sync
    const int victim = static_cast<int>(rng() % (kWriters + 1));
    if (victim == kWriters) {
      reader->kill(SIGKILL);
      (void)reader->wait(20s);
      start_reader();
      ++reader_kills;
      continue;
    }
    Subprocess& w = *writers[victim];
    if (w.wait_for_line("done", 0ms)) continue;
    w.kill(SIGKILL);
    (void)w.wait(20s);
    start_writer(victim);
    ++writer_kills;
  }
  for (int w = 0; w < kWriters; ++w) {
    ASSERT_EQ(writers[w]->wait(60s), 0) << writers[w]->output();
  }
  reader->kill(SIGKILL);  // mid-drain perhaps: the final reader gets back what it held
  (void)reader->wait(20s);
  Subprocess final_reader = relay_peer({"reader", name, rlog, "7", "final"});
  ASSERT_EQ(final_reader.wait(60s), 0) << final_reader.output();
  ++reader_kills;

  auto seg = Segment::open_any(name, {});
  ASSERT_TRUE(seg);
  const std::vector<std::string> problems = find_kind(kRelayKind)->verify(*seg);
  EXPECT_TRUE(problems.empty()) << problems.front();
  if (overflow == Overflow::Spill) {
    auto snap = read_relay_snapshot(name);
    ASSERT_TRUE(snap);
    EXPECT_GT(snap->pages_sealed, 0u) << "the run never spilled";
    EXPECT_EQ(snap->cold_pages, 0u);
    ::testing::Test::RecordProperty("pages_sealed", static_cast<int>(snap->pages_sealed));
  }

  std::vector<WriterLog> logs;
  for (int w = 0; w < kWriters; ++w) logs.push_back(read_writer_log(wlog(w)));
  const std::vector<Delivered> got = read_reader_log(rlog);
  std::uint64_t acked_total = 0;
  for (const WriterLog& l : logs) acked_total += l.acked.size();
  ASSERT_GT(acked_total, 0u);
  ::testing::Test::RecordProperty("writer_kills", writer_kills);
  ::testing::Test::RecordProperty("reader_kills", reader_kills);

  if (policy == policy::kRawFifo) {
    // Every acknowledged op exactly once, an unacknowledged one at most once,
    // nothing else, and each writer's ops in its order.
    std::map<std::uint64_t, std::uint64_t> last_index;
    std::set<std::pair<std::uint64_t, std::uint64_t>> seen;
    for (const Delivered& d : got) {
      const std::uint64_t w = d.value >> 32, i = d.value & 0xFFFF'FFFFu;
      ASSERT_LT(w, static_cast<std::uint64_t>(kWriters));
      ASSERT_TRUE(seen.insert({w, i}).second) << "op " << w << "/" << i << " delivered twice";
      ASSERT_TRUE(logs[w].acked.contains(i) || logs[w].uncertain.contains(i))
          << "op " << w << "/" << i << " was never written";
      if (last_index.contains(w)) {
        ASSERT_GT(i, last_index[w]) << "writer " << w << " out of order";
      }
      last_index[w] = i;
    }
    for (int w = 0; w < kWriters; ++w)
      for (std::uint64_t i : logs[w].acked)
        ASSERT_TRUE(seen.contains({static_cast<std::uint64_t>(w), i}))
            << "acknowledged op " << w << "/" << i << " lost";
    return;
  }
  // Keyed: fold what was delivered, compare with the fold of the acknowledged
  // ops (and the ops whose fate a kill left open).
  std::map<std::uint64_t, std::uint64_t> delivered, acked, with_uncertain;
  const bool sum = policy == policy::kSum;
  auto fold = [&](std::map<std::uint64_t, std::uint64_t>& m, std::uint64_t k, std::uint64_t v) {
    if (!m.contains(k))
      m[k] = v;
    else
      m[k] = sum ? m[k] + v : std::max(m[k], v);
  };
  for (const Delivered& d : got) fold(delivered, d.key, d.value);
  for (int w = 0; w < kWriters; ++w) {
    for (std::uint64_t i : logs[w].acked) {
      const auto [k, v] = op_for(policy, static_cast<std::uint64_t>(w), i);
      fold(acked, k, v);
      fold(with_uncertain, k, v);
    }
    for (std::uint64_t i : logs[w].uncertain) {
      const auto [k, v] = op_for(policy, static_cast<std::uint64_t>(w), i);
      fold(with_uncertain, k, v);
    }
  }
  for (const auto& [k, v] : acked) {
    ASSERT_TRUE(delivered.contains(k)) << "key " << k;
    EXPECT_GE(delivered[k], v) << "key " << k << ": acknowledged ops lost";
    EXPECT_LE(delivered[k], with_uncertain[k]) << "key " << k << ": an op applied twice";
    if (!sum && delivered[k] != v) {
      // max: only an unacknowledged op may explain a larger value.
      bool explained = false;
      for (int w = 0; w < kWriters; ++w)
        for (std::uint64_t i : logs[w].uncertain)
          explained |= op_for(policy, static_cast<std::uint64_t>(w), i) ==
                       std::pair<std::uint64_t, std::uint64_t>{k, delivered[k]};
      EXPECT_TRUE(explained) << "key " << k << ": " << delivered[k] << " was never written";
    }
  }
  EXPECT_EQ(delivered.size(), with_uncertain.size());
}

// RelayMergeStressTest (tests/unit/relay) across processes: four writer
// processes merge into the same eight open keys at once (the lock-free
// merge path: their compare-exchanges of the same merge words contend
// between processes), then one reader drains: every op is delivered once
// (the op counts add up), the fold is exact, the counters agree, verify is
// clean.
void run_merge_stress(const std::string& name, PolicyId policy, const std::string& dir) {
  constexpr int kWriters = 4;
  const std::uint64_t count = test::scaled(20000);
  RelayConfig cfg;
  cfg.policy = policy;
  cfg.max_entries = 64;
  cfg.backpressure = {Dimension::Count, 48, 16, Overflow::Block};
  auto creator = RelayWriter::create(name, cfg);
  ASSERT_TRUE(creator) << creator.error().what();
  auto wlog = [&](int w) { return dir + "/" + name + ".w" + std::to_string(w); };
  std::vector<Subprocess> writers;
  for (int w = 0; w < kWriters; ++w)
    writers.push_back(
        relay_peer({"writer", name, std::to_string(w), std::to_string(count), wlog(w)}));
  for (Subprocess& w : writers) {
    ASSERT_EQ(w.wait(120s), 0) << w.output();
  }
  const std::string rlog = dir + "/" + name + ".reader";
  Subprocess reader = relay_peer({"reader", name, rlog, "5", "final"});
  ASSERT_EQ(reader.wait(60s), 0) << reader.output();

  const bool sum = policy == policy::kSum;
  std::map<std::uint64_t, std::uint64_t> want, got;
  for (int w = 0; w < kWriters; ++w) {
    const WriterLog l = read_writer_log(wlog(w));
    ASSERT_EQ(l.acked.size(), count) << "writer " << w;
    for (std::uint64_t i : l.acked) {
      const auto [k, v] = op_for(policy, static_cast<std::uint64_t>(w), i);
      want[k] = sum ? want[k] + v : std::max(want[k], v);
    }
  }
  std::uint64_t ops = 0;
  for (const Delivered& d : read_reader_log(rlog)) {
    got[d.key] = sum ? got[d.key] + d.value : std::max(got[d.key], d.value);
    ops += d.count;
    EXPECT_LE(d.first, d.last);
  }
  EXPECT_EQ(got, want);
  auto snap = read_relay_snapshot(name);
  ASSERT_TRUE(snap);
  // Every write counted once; every op that changed a value delivered once
  // (sum: all of them; max: not the ones below the key's value, Unchanged).
  EXPECT_EQ(snap->writes, kWriters * count);
  EXPECT_EQ(snap->appended + snap->merged + snap->unchanged, snap->writes);
  EXPECT_EQ(ops, snap->appended + snap->merged) << "every op delivered once";
  if (sum) {
    EXPECT_EQ(ops, kWriters * count);
  }
  EXPECT_EQ(snap->lag, 0u);
  EXPECT_EQ(snap->drained_ops, ops);
  auto seg = Segment::open_any(name, {});
  ASSERT_TRUE(seg);
  const std::vector<std::string> problems = find_kind(kRelayKind)->verify(*seg);
  EXPECT_TRUE(problems.empty()) << problems.front();
}

TEST_F(RelayProcessTest, FourWriterProcessesMergingIntoTheSameOpenKeysSumExactly) {
  run_merge_stress("merge-stress-sum", policy::kSum, root_.path());
}

TEST_F(RelayProcessTest, FourWriterProcessesMergingIntoTheSameOpenKeysMaxExactly) {
  run_merge_stress("merge-stress-max", policy::kMax, root_.path());
}

TEST_F(RelayProcessTest, FourWritersOneReaderKilledAndRestartedSumLosesNothing) {
  run_chaos("chaos-sum", policy::kSum, Overflow::Conflate, 11, root_.path());
}

TEST_F(RelayProcessTest, FourWritersOneReaderKilledAndRestartedMaxConverges) {
  run_chaos("chaos-max", policy::kMax, Overflow::Conflate, 12, root_.path());
}

TEST_F(RelayProcessTest, FourWritersOneReaderKilledAndRestartedRawFifoKeepsOrder) {
  run_chaos("chaos-fifo", policy::kRawFifo, Overflow::Block, 13, root_.path());
}

// The same with Spill: writers and the reader killed at random moments while
// pages are sealed and acknowledged; every acknowledged op exactly once, in
// each writer's order; the sum converges with nothing applied twice.
TEST_F(RelayProcessTest, FourWritersOneReaderKilledAndRestartedWithSpillRawFifoKeepsOrder) {
  test::TempSpillDir spill;
  run_chaos("chaos-spill-fifo", policy::kRawFifo, Overflow::Spill, 14, root_.path());
}

TEST_F(RelayProcessTest, FourWritersOneReaderKilledAndRestartedWithSpillSumLosesNothing) {
  test::TempSpillDir spill;
  run_chaos("chaos-spill-sum", policy::kSum, Overflow::Spill, 15, root_.path());
}

// For the lww tests: whether value `v` of `key` fails to win strictly
// against the last value delivered for that key (`have`, then updated).
bool not_newer_than_delivered(const MergePolicy& lww,
                              std::map<std::uint64_t, std::vector<std::byte>>& have,
                              std::uint64_t key, std::span<const std::byte> v) {
  std::vector<std::byte> value(v.begin(), v.end());
  bool older = false;
  if (auto it = have.find(key); it != have.end()) {
    std::vector<std::byte> out(v.size());
    auto len = combine(lww, it->second, value, out);
    out.resize(len ? *len : 0);
    older = out != value || value == it->second;  // the new one must win, strictly
  }
  have[key] = std::move(value);
  return older;
}

// Drains `reader` three entries at a time (each to `each`) while the writer
// processes run, until each printed "done" (within `budget` for all) and
// exited 0, then what they left.
template <class Each>
void drain_until_writers_done(RelayReader& reader, std::vector<Subprocess>& writers,
                              std::chrono::seconds budget, Each each) {
  auto drain_some = [&] {
    auto n = reader.drain(3, each);
    EXPECT_TRUE(n) << n.error().what();
    return n ? *n : 0;
  };
  const auto deadline = std::chrono::steady_clock::now() + budget;
  for (Subprocess& w : writers) {
    while (!w.wait_for_line("done", 1ms) && std::chrono::steady_clock::now() < deadline)
      (void)drain_some();
    EXPECT_EQ(w.wait(10s), 0) << w.output();
  }
  while (drain_some() != 0) {
  }
}

// Two writer processes write lww values whose timestamps wander back and
// forth over 16 keys while this reader drains a few entries at a time: the
// delivered-value memory keeps every entry the reader receives newer than
// the last one it received for that key (an older write is Unchanged even
// after the key was drained), and the reader's fold is every key's newest
// write.
TEST_F(RelayProcessTest, LwwReaderNeverReceivesAValueOlderThanOneItHas) {
  constexpr std::uint64_t kKeys = 16, kCount = 3000;
  RelayConfig cfg;
  cfg.policy = policy::kLww;
  cfg.value_bytes = 24;
  cfg.max_entries = 64;
  cfg.backpressure = {Dimension::Keys, 48, 16, Overflow::Conflate};
  auto reader = RelayReader::create("lww-memory", cfg);
  ASSERT_TRUE(reader) << reader.error().what();
  auto lww = find_merge(policy::kLww);
  ASSERT_TRUE(lww);
  std::vector<Subprocess> writers;
  for (int id = 1; id <= 2; ++id)
    writers.push_back(relay_peer(
        {"lww", "lww-memory", std::to_string(id), std::to_string(kCount), std::to_string(kKeys)}));
  std::map<std::uint64_t, std::vector<std::byte>> have;
  std::uint64_t older = 0, entries = 0;
  drain_until_writers_done(*reader, writers, 30s, [&](const RelayEntry& e) {
    ++entries;
    if (not_newer_than_delivered(**lww, have, e.key, e.value)) ++older;
  });
  EXPECT_EQ(older, 0u) << "of " << entries << " entries";
  // The newest write of every key, whoever wrote it.
  for (std::uint64_t key = 0; key < kKeys; ++key) {
    std::vector<std::byte> best;
    for (std::uint64_t id = 1; id <= 2; ++id)
      for (std::uint64_t i = key; i < kCount; i += kKeys) {
        std::vector<std::byte> v = lww_value((i * 7919 + id * 13) % 1000, id, u64_value(i));
        if (best.empty()) {
          best = v;
          continue;
        }
        std::vector<std::byte> out(cfg.value_bytes);
        auto len = combine(**lww, best, v, out);
        ASSERT_TRUE(len);
        out.resize(*len);
        best = out;
      }
    EXPECT_EQ(have[key], best) << "key " << key;
  }
  // Whether the writers' own older values met the memory depends on when the
  // reader got the CPU; a write older than every delivered value, after all
  // of them were drained, must meet it: Unchanged, no entry.
  auto late = RelayWriter::open("lww-memory");
  ASSERT_TRUE(late) << late.error().what();
  for (std::uint64_t key = 0; key < kKeys; ++key) {
    auto w = late->try_write(key, lww_value(0, 3, u64_value(key)));
    ASSERT_TRUE(w) << w.error().what();
    EXPECT_EQ(w->status, WriteStatus::Unchanged) << "key " << key;
  }
  auto rest = reader->drain(3, [](const RelayEntry&) {});
  ASSERT_TRUE(rest) << rest.error().what();
  EXPECT_EQ(*rest, 0u);
  const RelaySnapshot s = reader->snapshot();
  EXPECT_GE(s.remembered_unchanged, kKeys);
  EXPECT_EQ(s.remembered, kKeys);
  EXPECT_EQ(s.forgotten, 0u);
}

// Four writer processes write 64-byte lww values into the same eight keys
// (open entries: the copy merge of the lock-free path) while this reader
// drains a few entries at a time: no value is torn (its payload bytes all
// equal its op number's low byte, its timestamp is that op's), every entry
// is strictly newer than the last one delivered for its key, each key ends
// with its newest write, every op that changed a value is delivered once,
// the counters agree and verify is clean.
TEST_F(RelayProcessTest, FourWriterProcessesMergingIntoTheSameOpenKeysLwwConverges) {
  constexpr std::uint64_t kKeys = 8, kWriters = 4, kPayload = 48;
  const std::uint64_t count = test::scaled(6000);
  RelayConfig cfg;
  cfg.policy = policy::kLww;
  cfg.value_bytes = 16 + kPayload;
  cfg.max_entries = 64;
  cfg.backpressure = {Dimension::Keys, 48, 16, Overflow::Conflate};
  auto reader = RelayReader::create("merge-stress-lww", cfg);
  ASSERT_TRUE(reader) << reader.error().what();
  auto lww = find_merge(policy::kLww);
  ASSERT_TRUE(lww);
  std::vector<Subprocess> writers;
  for (std::uint64_t id = 1; id <= kWriters; ++id)
    writers.push_back(
        relay_peer({"lww", "merge-stress-lww", std::to_string(id), std::to_string(count),
                    std::to_string(kKeys), std::to_string(kPayload)}));
  std::map<std::uint64_t, std::vector<std::byte>> have;
  std::uint64_t older = 0, torn = 0, entries = 0, ops = 0;
  drain_until_writers_done(*reader, writers, 60s, [&](const RelayEntry& e) {
    ++entries;
    ops += e.op_count;
    std::span<const std::byte> v = e.value;
    std::uint64_t ts = 0, id = 0, i = 0;
    if (v.size() != cfg.value_bytes) {
      ++torn;
      return;
    }
    std::memcpy(&ts, v.data(), 8);
    std::memcpy(&id, v.data() + 8, 8);
    std::memcpy(&i, v.data() + 16, 8);
    bool whole = ts == (i * 7919 + id * 13) % 1000 && i % kKeys == e.key;
    for (std::size_t b = 24; b < v.size(); ++b)
      whole = whole && v[b] == static_cast<std::byte>(i & 0xFF);
    if (!whole) ++torn;
    if (not_newer_than_delivered(**lww, have, e.key, v)) ++older;
  });
  EXPECT_EQ(torn, 0u) << "of " << entries << " entries";
  EXPECT_EQ(older, 0u) << "of " << entries << " entries";
  for (std::uint64_t key = 0; key < kKeys; ++key) {
    std::vector<std::byte> best;
    for (std::uint64_t id = 1; id <= kWriters; ++id)
      for (std::uint64_t i = key; i < count; i += kKeys) {
        std::vector<std::byte> body = u64_value(i);
        body.resize(kPayload, static_cast<std::byte>(i & 0xFF));
        std::vector<std::byte> v = lww_value((i * 7919 + id * 13) % 1000, id, body);
        if (best.empty()) {
          best = v;
          continue;
        }
        std::vector<std::byte> out(cfg.value_bytes);
        auto len = combine(**lww, best, v, out);
        ASSERT_TRUE(len);
        out.resize(*len);
        best = out;
      }
    EXPECT_EQ(have[key], best) << "key " << key;
  }
  const RelaySnapshot s = reader->snapshot();
  EXPECT_EQ(s.writes, kWriters * count);
  EXPECT_EQ(s.appended + s.merged + s.unchanged, s.writes);
  EXPECT_EQ(ops, s.appended + s.merged) << "every op that changed a value delivered once";
  EXPECT_GT(s.merged, 0u) << "no write merged into an open entry";
  EXPECT_EQ(s.lag, 0u);
  EXPECT_EQ(s.drained_ops, ops);
  auto seg = Segment::open_any("merge-stress-lww", {});
  ASSERT_TRUE(seg);
  const std::vector<std::string> problems = find_kind(kRelayKind)->verify(*seg);
  EXPECT_TRUE(problems.empty()) << problems.front();
}

}  // namespace
}  // namespace shm
