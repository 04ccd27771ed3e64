// A ledger user in its own process, for tests/integration/ledger/ledger_test.cpp.
//
//   test_ledger_worker random NAME MILLIS SEED
//       Random reserve/commit/replace/release/admit on pools "shared" and its
//       own "w<SEED>" for MILLIS ms; releases everything, closes its pool and
//       prints "done ops=N reserves=R rejections=J". Any error: "error: ..." and exit 1.
//   test_ledger_worker hold NAME POOL COUNT BYTES
//       Reserves COUNT tickets of BYTES in POOL (category 0), commits every other
//       one, prints "held COUNT TOTAL SLOT GENERATION", then "ready", and sleeps
//       until it is killed.
//   test_ledger_worker crash NAME POINT
//       Runs the real operation named by POINT with the test-only crash hook
//       (shm/testing/ledger_crash.hpp) installed, which stops it inside the
//       ledger's critical section, prints "inside" and sleeps until killed.
//       Pools "crash" and "other" and buckets 0 and 1 must exist.
#include "shm/ledger/ledger.hpp"
#include "shm/segment/kind.hpp"
#include "shm/testing/ledger_crash.hpp"

#include <fmt/format.h>

#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace shm;

[[noreturn]] void die(const std::string& what) {
  std::printf("error: %s\n", what.c_str());
  std::fflush(stdout);
  std::exit(1);
}

template <class T>
T must(Result<T> r, const char* what) {
  if (!r) die(fmt::format("{}: {}", what, r.error().what()));
  if constexpr (!std::is_void_v<T>) return std::move(*r);
}

void must(Result<void> r, const char* what) {
  if (!r) die(fmt::format("{}: {}", what, r.error().what()));
}

[[noreturn]] void sleep_forever() {
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

int run_random(const std::string& name, long millis, unsigned seed) {
  Ledger l = must(Ledger::open(name), "open");
  const std::vector<CategoryId> cats = {must(l.category("a"), "category a"),
                                        must(l.category("b"), "category b"),
                                        must(l.category("c"), "category c")};
  const BucketId api = must(l.bucket("api"), "bucket api");
  const PoolId shared = must(l.pool("shared"), "pool shared");
  const PoolId own =
      must(l.open_pool(PoolSpec{fmt::format("w{}", seed), {{"all", 3000, {}}}, 30}), "open_pool");
  const PoolId pools[] = {shared, own};
  std::mt19937 rng(seed);
  auto pick = [&](unsigned n) { return static_cast<unsigned>(rng() % n); };
  std::vector<Ticket> live;
  std::uint64_t ops = 0, reserves = 0, rejections = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(millis);
  while (std::chrono::steady_clock::now() < deadline) {
    ++ops;
    const unsigned op = pick(100);
    if (op < 45 || live.empty()) {
      if (live.size() >= 40) continue;
      const std::int64_t bytes = pick(8) == 0 ? 0 : static_cast<std::int64_t>(pick(400));
      auto r = l.reserve(pools[pick(2)], cats[pick(3)], bytes);
      if (!r) die(fmt::format("reserve: {}", r.error().what()));
      if (r->has_value()) {
        live.push_back(**r);
        ++reserves;
      } else {
        ++rejections;
      }
    } else if (op < 60) {
      const Ticket t = live[pick(static_cast<unsigned>(live.size()))];
      auto r = l.commit(t);
      if (!r && r.error().code != Errc::InvalidArgument)
        die(fmt::format("commit: {}", r.error().what()));
    } else if (op < 70) {
      const Ticket t = live[pick(static_cast<unsigned>(live.size()))];
      auto r = l.replace(t, pools[pick(2)], static_cast<std::int64_t>(pick(400)));
      if (!r) die(fmt::format("replace: {}", r.error().what()));
      if (!r->has_value()) ++rejections;
    } else if (op < 95) {
      const std::size_t i = pick(static_cast<unsigned>(live.size()));
      must(l.release(live[i]), "release");
      live[i] = live.back();
      live.pop_back();
    } else {
      const std::vector<Constraint> cs = {{api, 1}, {api, static_cast<std::int64_t>(pick(2))}};
      auto r = l.admit(cs, monotonic_ms());
      if (!r) die(fmt::format("admit: {}", r.error().what()));
    }
    if ((ops & 255u) == 0) l.heartbeat();
  }
  for (const Ticket& t : live) must(l.release(t), "final release");
  must(l.close_pool(own), "close_pool");
  std::printf("done ops=%llu reserves=%llu rejections=%llu\n", static_cast<unsigned long long>(ops),
              static_cast<unsigned long long>(reserves),
              static_cast<unsigned long long>(rejections));
  return 0;
}

int run_hold(const std::string& name, const std::string& pool, int count, std::int64_t bytes) {
  Ledger l = must(Ledger::open(name), "open");
  const PoolId p = must(l.pool(pool), "pool");
  for (int i = 0; i < count; ++i) {
    auto r = l.reserve(p, CategoryId{0}, bytes);
    if (!r) die(fmt::format("reserve: {}", r.error().what()));
    if (!r->has_value()) die(fmt::format("reserve refused: {}", r->error().describe()));
    if (i % 2 == 1) must(l.commit(**r), "commit");
  }
  std::printf("held %d %lld %u %u\nready\n", count, static_cast<long long>(count * bytes),
              l.owner().slot, l.owner().generation);
  std::fflush(stdout);
  sleep_forever();
}

// The crash point run_crash() stops at (set before the hook is installed).
std::atomic<test_hooks::LedgerCrashPoint> g_stop_at{};

void stop_at_crash_point(test_hooks::LedgerCrashPoint point) {
  if (point != g_stop_at.load()) return;
  std::printf("inside\n");
  std::fflush(stdout);
  sleep_forever();
}

// Runs the real operation with the crash hook installed; the hook stops it at
// `point`, with the ledger's mutex held, until the test kills this process.
int run_crash(const std::string& name, const std::string& point) {
  using test_hooks::LedgerCrashPoint;
  Ledger l = must(Ledger::open(name), "open");
  const PoolId crash = must(l.pool("crash"), "pool crash");
  const PoolId other = must(l.pool("other"), "pool other");
  const std::vector<Constraint> cs = {{BucketId{0}, 2}, {BucketId{1}, 3}};
  auto own_ticket = [&] {  // before the hook is installed
    auto r = l.reserve(crash, CategoryId{0}, 55);
    if (!r || !r->has_value()) die("reserve before the crash failed");
    return **r;
  };
  auto arm = [](LedgerCrashPoint at) {
    g_stop_at.store(at);
    test_hooks::set_ledger_crash_hook(stop_at_crash_point);
  };
  if (point == "reserve-published") {
    arm(LedgerCrashPoint::ReserveAfterTicketPublished);
    (void)l.reserve(crash, CategoryId{0}, 77);
  } else if (point == "reserve-counters") {
    arm(LedgerCrashPoint::ReserveMidCounters);
    (void)l.reserve(crash, CategoryId{0}, 77);
  } else if (point == "commit") {
    const Ticket t = own_ticket();
    arm(LedgerCrashPoint::CommitMidCounters);
    (void)l.commit(t);
  } else if (point == "release") {
    const Ticket t = own_ticket();
    arm(LedgerCrashPoint::ReleaseAfterTicketFreed);
    (void)l.release(t);
  } else if (point == "replace") {
    const Ticket t = own_ticket();
    arm(LedgerCrashPoint::ReplaceMidTicket);
    (void)l.replace(t, other, 66);
  } else if (point == "admit") {
    arm(LedgerCrashPoint::AdmitMidBuckets);
    (void)l.admit(cs, 5000);
  } else if (point == "set-burst") {  // what `shmctl set NAME bucket.api.burst 2` runs
    auto seg = Segment::open_any(name, OpenOptions{});  // writable
    if (!seg) die("open_any: " + seg.error().what());
    const KindDescriptor* kind = find_kind(kLedgerKind);
    if (kind == nullptr || kind->set == nullptr) die("the ledger kind has no set()");
    arm(LedgerCrashPoint::SetBurstMidBucket);
    (void)kind->set(*seg, "bucket.api.burst", "2");
  } else {
    die("unknown crash point " + point);
  }
  die("the operation returned without reaching crash point " + point);
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 4 && args[0] == "random")
    return run_random(args[1], std::stol(args[2]), static_cast<unsigned>(std::stoul(args[3])));
  if (args.size() == 5 && args[0] == "hold")
    return run_hold(args[1], args[2], std::stoi(args[3]), std::stoll(args[4]));
  if (args.size() == 3 && args[0] == "crash") return run_crash(args[1], args[2]);
  std::fprintf(stderr,
               "usage: test_ledger_worker random NAME MILLIS SEED | hold NAME POOL COUNT BYTES | "
               "crash NAME POINT\n");
  return 2;
}
