// A ledger user in its own process, for tests/integration/ledger/ledger_test.cpp.
//
//   test_ledger_worker random NAME MILLIS SEED
//       Random reserve/commit/replace/release/admit on pools "shared" and its
//       own "w<SEED>" for MILLIS ms; releases everything, closes its pool and
//       prints "done ops=N reserves=R rejections=J". Any error: "error: ..." and exit 1.
//   test_ledger_worker hold NAME POOL COUNT BYTES
//       Reserves COUNT tickets of BYTES in POOL (category 0; "+LABEL": a pool
//       LABEL this process opens and owns), commits every other one, prints "held COUNT TOTAL SLOT
//       GENERATION", then "ready", and sleeps until it is killed.
//   test_ledger_worker own-pool NAME LABEL
//       Opens pool LABEL, prints "ready", waits until another process holds a
//       ticket in it, prints "leaving" and exits 0 (the pool is then orphaned).
//   test_ledger_worker give NAME TO_SLOT TO_GEN POINT
//       Sender side of a hand-off (pool "xfer"): prints "ticket INDEX GEN LEDGER",
//       then stops at POINT (offer-inside, offered, leave-inside).
//   test_ledger_worker take NAME POINT
//       Receiver side: prints "owner SLOT GEN", waits for a ticket offered to
//       it, then stops at POINT (accept-inside, accepted).
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
#include <optional>
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
  const PoolId p =
      pool.starts_with('+')
          ? must(l.open_pool(PoolSpec{pool.substr(1), {{"all", 1'000'000, {}}}, 0}), "open_pool")
          : must(l.pool(pool), "pool");
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

// Opens pool LABEL, prints "ready", waits (up to 20 s) until another process
// holds a ticket in it, then exits normally: its handle's destructor leaves
// the pool to those tickets (orphaned).
int run_own_pool(const std::string& name, const std::string& label) {
  Ledger l = must(Ledger::open(name), "open");
  const PoolId p = must(l.open_pool(PoolSpec{label, {{"all", 1'000'000, {}}}, 0}), "open_pool");
  std::printf("ready\n");
  std::fflush(stdout);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    const LedgerSnapshot s = must(l.snapshot(), "snapshot");
    for (const PoolState& ps : s.pools)
      if (ps.id == p && ps.tickets > 0) {
        std::printf("leaving\n");
        return 0;
      }
    if (std::chrono::steady_clock::now() > deadline) die("no ticket appeared in the pool");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void print_ticket(const Ticket& t) {
  std::printf("ticket %u %u %llu\n", t.index, t.generation,
              static_cast<unsigned long long>(t.ledger));
  std::fflush(stdout);
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
  } else if (point == "release-orphan") {
    // A second handle opens pool "orph" and leaves while this handle holds a
    // ticket there: the pool is orphaned, and releasing that ticket closes it.
    Ticket t{};
    {
      Ledger owner = must(Ledger::open(name), "open owner");
      const PoolId orph =
          must(owner.open_pool(PoolSpec{"orph", {{"all", 1'000, {}}}, 0}), "open_pool orph");
      auto r = l.reserve(orph, CategoryId{0}, 44);
      if (!r || !r->has_value()) die("reserve in orph failed");
      t = **r;
    }
    arm(LedgerCrashPoint::OrphanEmptiedBeforeClose);
    (void)l.release(t);
  } else if (point == "set-rate") {  // what `shmctl set NAME bucket.api.rate=0` runs
    // A started bucket (3 of 5 tokens left, last refilled 1 s ago) has 1 s
    // to settle at the old rate before the new one applies.
    must(l.admit(std::vector<Constraint>{{BucketId{0}, 2}}, monotonic_ms() - 1000), "admit");
    auto seg = Segment::open_any(name, OpenOptions{});  // writable
    if (!seg) die("open_any: " + seg.error().what());
    const KindDescriptor* kind = find_kind(kLedgerKind);
    if (kind == nullptr || kind->set == nullptr) die("the ledger kind has no set()");
    arm(LedgerCrashPoint::SetRateMidSettle);
    (void)kind->set(*seg, "bucket.api.rate", "0");
  } else {
    die("unknown crash point " + point);
  }
  die("the operation returned without reaching crash point " + point);
}

// Sender side of a hand-off: reserves 33 bytes in pool "xfer" and offers the
// ticket to attachment (to_slot, to_gen). POINT: offer-inside (stopped inside
// offer), offered (offer made, then sleeps), leave-inside (a second handle
// reserves and offers, then is destroyed: stopped inside the hand-over its
// departure makes).
int run_give(const std::string& name, Owner to, const std::string& point) {
  using test_hooks::LedgerCrashPoint;
  Ledger l = must(Ledger::open(name), "open");
  const PoolId xfer = must(l.pool("xfer"), "pool xfer");
  auto arm = [](LedgerCrashPoint at) {
    g_stop_at.store(at);
    test_hooks::set_ledger_crash_hook(stop_at_crash_point);
  };
  if (point == "leave-inside") {
    Ledger snd = must(Ledger::open(name), "open sender");
    auto r = snd.reserve(xfer, CategoryId{0}, 33);
    if (!r || !r->has_value()) die("reserve failed");
    must(snd.offer(**r, to), "offer");
    print_ticket(**r);
    arm(LedgerCrashPoint::HandOverMidOwner);
    // Leaving the scope destroys snd: its departure hands the ticket over
    // and stops inside.
  } else {
    auto r = l.reserve(xfer, CategoryId{0}, 33);
    if (!r || !r->has_value()) die("reserve failed");
    print_ticket(**r);
    if (point == "offer-inside") {
      arm(LedgerCrashPoint::OfferBeforePublish);
      (void)l.offer(**r, to);
    } else if (point == "offered") {
      must(l.offer(**r, to), "offer");
      std::printf("offered\n");
      std::fflush(stdout);
      sleep_forever();
    } else {
      die("unknown give point " + point);
    }
  }
  die("the operation returned without reaching give point " + point);
}

// Receiver side: prints "owner SLOT GENERATION", waits (up to 20 s) for a
// ticket offered to it, then accepts it. POINT: accept-inside (stopped inside
// accept), accepted (accepted, then sleeps).
int run_take(const std::string& name, const std::string& point) {
  using test_hooks::LedgerCrashPoint;
  Ledger l = must(Ledger::open(name), "open");
  std::printf("owner %u %u\n", l.owner().slot, l.owner().generation);
  std::fflush(stdout);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::optional<Ticket> offered;
  while (!offered) {
    for (const TicketInfo& t : must(l.tickets(), "tickets"))
      if (t.offered && t.offered_to == l.owner()) offered = t.ticket;
    if (std::chrono::steady_clock::now() > deadline) die("no ticket was offered");
    if (!offered) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (point == "accept-inside") {
    g_stop_at.store(LedgerCrashPoint::HandOverMidOwner);
    test_hooks::set_ledger_crash_hook(stop_at_crash_point);
    (void)l.accept(*offered);
    die("accept returned without reaching its crash point");
  }
  if (point != "accepted") die("unknown take point " + point);
  must(l.accept(*offered), "accept");
  std::printf("accepted\n");
  std::fflush(stdout);
  sleep_forever();
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 4 && args[0] == "random")
    return run_random(args[1], std::stol(args[2]), static_cast<unsigned>(std::stoul(args[3])));
  if (args.size() == 5 && args[0] == "hold")
    return run_hold(args[1], args[2], std::stoi(args[3]), std::stoll(args[4]));
  if (args.size() == 3 && args[0] == "crash") return run_crash(args[1], args[2]);
  if (args.size() == 3 && args[0] == "own-pool") return run_own_pool(args[1], args[2]);
  if (args.size() == 5 && args[0] == "give")
    return run_give(args[1],
                    Owner{static_cast<std::uint32_t>(std::stoul(args[2])),
                          static_cast<std::uint32_t>(std::stoul(args[3]))},
                    args[4]);
  if (args.size() == 3 && args[0] == "take") return run_take(args[1], args[2]);
  std::fprintf(stderr,
               "usage: test_ledger_worker random NAME MILLIS SEED | hold NAME POOL COUNT BYTES | "
               "crash NAME POINT | own-pool NAME LABEL | give NAME SLOT GEN POINT | take NAME "
               "POINT\n");
  return 2;
}
