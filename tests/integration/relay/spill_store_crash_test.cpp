// The spill store's own multi-step changes killed at every store they make
// to the relay's mapping (N = 1 ... all, the counting hook of
// common/store_crash.hpp): a seal (the writer marks the entries, writes the
// page, records it in the manifest, frees the entries, counts it), an
// acknowledgement (a reader commits a cold page), a Ttl expiry and the
// refusal of a damaged page (a reader's take). spill_crash_test.cpp stops the
// same changes at their named steps; this one leaves no store out.
//
// After each kill the next locker (a fresh reader) repairs, and everything
// it then drains, with the spill counters and the files left, must be what a
// run without the kill gives from the state before or after the change (or,
// for the write that seals, after its seal and before its append: the seal is
// a change of its own): nothing lost, nothing delivered twice, each page
// counted once. A keyed max
// seals entries holding several ops each, so ops_spilled differs from
// entries_spilled and a roll-forward that counts the wrong one shows.
#include "common/flip_byte.hpp"
#include "common/spill_config.hpp"
#include "common/store_crash.hpp"
#include "common/temp_dir.hpp"
#include "common/temp_root.hpp"
#include "shm/relay/relay.hpp"
#include "shm/segment/kind.hpp"
#include "shm/segment/segment.hpp"
#include "shm/testing/spill_crash.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace shm::spill_store_crash_test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr const char* kName = "spill-store-crash";

// What a reader gets of one entry, without how it came (redelivered or not,
// from which page): the same ops, whoever delivers them.
struct Drained {
  std::uint64_t key, first_seq, last_seq, op_count, value;
  friend bool operator==(const Drained&, const Drained&) = default;
};

// The state a test compares: everything a full drain delivers, then the
// spill counters and the files left.
struct Observed {
  std::vector<Drained> drained;
  std::uint64_t pages_sealed = 0, entries_spilled = 0, ops_spilled = 0, pages_acked = 0,
                pages_expired = 0, pages_refused = 0;
  std::size_t pages_left = 0, refused_files = 0;
  friend bool operator==(const Observed&, const Observed&) = default;
};

std::string show(const Observed& o) {
  std::string out = "drained";
  for (const Drained& d : o.drained)
    out += " k" + std::to_string(d.key) + "[" + std::to_string(d.first_seq) + "-" +
           std::to_string(d.last_seq) + " ops " + std::to_string(d.op_count) + " =" +
           std::to_string(d.value) + "]";
  out += "; sealed " + std::to_string(o.pages_sealed) + ", entries " +
         std::to_string(o.entries_spilled) + ", ops " + std::to_string(o.ops_spilled) + ", acked " +
         std::to_string(o.pages_acked) + ", expired " + std::to_string(o.pages_expired) +
         ", refused " + std::to_string(o.pages_refused) + "; files left " +
         std::to_string(o.pages_left) + ", refused files " + std::to_string(o.refused_files);
  return out;
}

RelayConfig fifo() {
  RelayConfig c = test::small_spill_fifo("");  // LIBSHM_SPILL_DIR/<relay>
  c.spill.page_size = spill::kPageHeaderSize + 4 * spill::record_stride(8);
  return c;
}

RelayConfig keyed_max() {
  RelayConfig c = fifo();
  c.policy = policy::kMax;
  return c;
}

// Six keys of three ops each (values growing with the op: max merges them).
void six_keys(RelayWriter& w, std::uint64_t base) {
  for (std::uint64_t key = 1; key <= 6; ++key)
    for (std::uint64_t i = 0; i < 3; ++i)
      ASSERT_TRUE(w.write(key, u64_value(base + key * 10 + i), 0ns));
}

RelayConfig ttl() {
  RelayConfig c = fifo();
  c.spill.retention = relay::RetentionKind::Ttl;
  c.spill.ttl = 1ms;
  return c;
}

bool write_ok(std::uint64_t key, std::uint64_t value) {
  auto w = RelayWriter::open(kName);
  if (!w) return false;
  auto r = w->write(key, u64_value(value), 0ns);
  return r && r->status == WriteStatus::Appended;
}

struct Case {
  const char* name;
  RelayConfig (*config)();
  // The writes before the change (in the parent, on a fresh relay).
  std::function<void(RelayWriter&)> fill;
  // Runs after the writes: damages or ages what the change needs.
  std::function<void(const std::string& dir)> prepare;
  // The change, in the child: true when it did what the case expects.
  std::function<bool()> op;
  // The change is a write that seals a page, then appends its op.
  bool seals = false;
  // prepare() damaged the first page: verify names it until a reader refuses it.
  bool damaged = false;
};

void ops_0_to(RelayWriter& w, std::uint64_t n) {
  for (std::uint64_t i = 0; i < n; ++i) ASSERT_TRUE(w.write(u64_value(i), 0ns));
}

// Takes `n` and commits them: the first page's records, or the first hot entry.
bool take_and_commit(std::size_t n) {
  auto r = RelayReader::open(kName);
  if (!r) return false;
  auto got = r->take(n);
  if (!got || got->size() != n) return false;
  return r->commit().has_value();
}

const Case kCases[] = {
    // The relay at high water (6 of 8, no page yet): the next write seals the
    // four oldest entries into a page, then appends.
    {"seal_fifo", fifo, [](RelayWriter& w) { ops_0_to(w, 6); }, nullptr,
     [] { return write_ok(0, 6); }, true},
    // The same with six keys of three ops each, on max: the page holds 4
    // entries, 12 ops, and recording it puts their values into the
    // delivered-value memory (finish_seal), each inside the Remember intent.
    {"seal_keyed_max", keyed_max, [](RelayWriter& w) { six_keys(w, 0); }, nullptr,
     [] { return write_ok(7, 70); }, true},
    // 14 ops: three pages and two hot entries; the reader acknowledges the first page.
    {"ack", fifo, [](RelayWriter& w) { ops_0_to(w, 14); }, nullptr,
     [] { return take_and_commit(4); }},
    // The same pages past their ttl: the reader's take expires them all, then
    // takes the first hot entry.
    {"expire", ttl, [](RelayWriter& w) { ops_0_to(w, 14); },
     [](const std::string&) { std::this_thread::sleep_for(5ms); },
     [] { return take_and_commit(1); }},
    // The first page damaged: the reader's take refuses it (moved aside, counted).
    {"refuse", fifo, [](RelayWriter& w) { ops_0_to(w, 14); },
     [](const std::string& dir) {
       test::flip_byte(dir + "/" + spill::page_file_name(1), spill::kPageHeaderSize + 50);
     },
     [] {
       auto r = RelayReader::open(kName);
       if (!r) return false;
       auto got = r->take(10);
       return !got && got.error().code == Errc::Corrupt;
     },
     false, true},
};

class SpillStoreCrashTest : public ::testing::TestWithParam<int> {
 protected:
  // The kills are SIGKILLs, not power losses: what the kernel holds survives
  // them, so the flushes only cost time here (spill_crash_test keeps them).
  void SetUp() override { test_hooks::set_spill_sync(false); }
  void TearDown() override { test_hooks::set_spill_sync(true); }
  test::TempRoot root_;
  test::TempSpillDir spill_;
};

TEST_P(SpillStoreCrashTest, KilledAtEveryStoreTheNextReaderGetsTheStateBeforeOrAfter) {
  const Case& c = kCases[GetParam()];
  const std::string dir = spill_.sub(kName);
  auto fresh = [&] {
    (void)Segment::unlink(kName);
    std::error_code ec;
    fs::remove_all(dir, ec);
    auto w = RelayWriter::create(kName, c.config());
    ASSERT_TRUE(w) << w.error().what();
    c.fill(*w);
    ASSERT_GT(w->snapshot().depth, 0u);
    if (c.prepare) c.prepare(dir);
  };
  // What the next reader finds: it repairs (opening locks), then drains all.
  auto observe = [&](std::string& problem) {
    Observed o;
    auto r = RelayReader::open(kName);
    if (!r) {
      problem = r.error().what();
      return o;
    }
    const RelaySnapshot s = r->snapshot();
    if (s.faulted || !s.consistent) problem = "faulted or inconsistent";
    if (s.seal_in_flight) problem = "a seal still in flight after the repair";
    if (test::count_files(dir, ".tmp") != 0) problem = "a temporary page file outlived the repair";
    if (auto seg = Segment::open_any(kName, {})) {
      const std::vector<std::string> damage = find_kind(kRelayKind)->verify(*seg);
      for (const std::string& d : damage)
        if (!(c.damaged && d.starts_with("page 1: Corrupt"))) problem = d;
    }
    int refusals = 0;
    for (int guard = 0; guard < 100; ++guard) {
      auto n = r->drain(3, [&](const RelayEntry& e) {
        o.drained.push_back(Drained{e.key, e.first_seq, e.last_seq, e.op_count, u64_of(e.value)});
      });
      if (!n && n.error().code == Errc::Corrupt && ++refusals == 1) continue;  // the damaged page
      if (!n) problem = n.error().what();
      if (!n || *n == 0) break;
    }
    // The delivered-value memory: a key it remembers holds what the reader
    // was last given for it (the fold of what it drained), never a torn value.
    if (auto p = find_merge(r->snapshot().policy); p && r->snapshot().max_remembered != 0) {
      std::map<std::uint64_t, std::uint64_t> fold;
      for (const Drained& d : o.drained) {
        auto it = fold.find(d.key);
        if (it == fold.end() || (*p)->id == policy::kKeepLatest || d.value > it->second)
          fold[d.key] = d.value;
      }
      for (const auto& [key, value] : fold) {
        auto had = r->delivered(key);
        if (!had) {
          problem = had.error().what();
        } else if (*had && u64_of(**had) != value) {
          problem = "key " + std::to_string(key) + " remembered as " +
                    std::to_string(u64_of(**had)) + ", delivered " + std::to_string(value);
        }
      }
    }
    const RelaySnapshot after = r->snapshot();
    o.pages_sealed = after.pages_sealed;
    o.entries_spilled = after.entries_spilled;
    o.ops_spilled = after.ops_spilled;
    o.pages_acked = after.pages_acked;
    o.pages_expired = after.pages_expired;
    o.pages_refused = after.pages_refused;
    *r = RelayReader{};  // closed: its acknowledged files are gone
    o.pages_left = test::count_files(dir, ".spill");
    o.refused_files = test::count_files(dir + "/refused", "");
    return o;
  };

  std::string problem;
  fresh();
  const Observed before = observe(problem);
  ASSERT_EQ(problem, "") << c.name << " before";
  fresh();
  ASSERT_TRUE(c.op()) << c.name << ": the change's outcome without a kill";
  const Observed after = observe(problem);
  ASSERT_EQ(problem, "") << c.name << " after";
  ASSERT_FALSE(before.drained.empty());
  Observed sealed_only = after;  // the seal done, the write's own op not appended
  if (c.seals) sealed_only.drained.pop_back();

  std::uint64_t back = 0, forward = 0, sealed = 0;
  const test::StoreCrashRun run = test::kill_at_every_store(fresh, c.op, [&](std::uint64_t n) {
    std::string why;
    const Observed now = observe(why);
    EXPECT_EQ(why, "") << c.name << " killed at store " << n;
    back += now == before;
    forward += now == after;
    sealed += c.seals && now == sealed_only;
    EXPECT_TRUE(now == before || now == after || (c.seals && now == sealed_only))
        << c.name << " killed at store " << n << "\n  repaired: " << show(now)
        << "\n  before:   " << show(before) << "\n  after:    " << show(after);
  });
  ASSERT_TRUE(run.error.empty()) << c.name << ": " << run.error;
  EXPECT_GE(run.kills, 3u) << c.name << ": the hook killed almost nothing";
  EXPECT_EQ(run.kills, run.stores);
  if (before != after) {
    EXPECT_GT(back, 0u) << c.name << ": no kill left the state before";
    EXPECT_GT(forward + sealed, 0u) << c.name << ": no kill was rolled forward";
  }
  if (c.seals) {
    EXPECT_GT(sealed, 0u) << c.name << ": no kill between the seal and the append";
  }
  std::printf("%s: %llu stores, %llu like before, %llu sealed only, %llu like after\n", c.name,
              static_cast<unsigned long long>(run.stores), static_cast<unsigned long long>(back),
              static_cast<unsigned long long>(sealed), static_cast<unsigned long long>(forward));
}

std::string case_name(const ::testing::TestParamInfo<int>& info) {
  return kCases[info.param].name;
}

INSTANTIATE_TEST_SUITE_P(EveryChange, SpillStoreCrashTest,
                         ::testing::Range(0, static_cast<int>(std::size(kCases))), case_name);

}  // namespace
}  // namespace shm::spill_store_crash_test
