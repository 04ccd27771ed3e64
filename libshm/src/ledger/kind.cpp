// The ledger kind descriptor: what shmctl and the sidecar see of a ledger.
#include "shm/segment/kind.hpp"
#include "internal.hpp"
#include "shm/platform/process.hpp"

#include "format/format.hpp"

#include <array>
#include <charconv>
#include <stdexcept>

namespace shm {
namespace {

using namespace ledger;
using namespace ledger::internal;

void put_account(Node& out, const AccountState& a) {
  out.gauge("limit", static_cast<std::uint64_t>(a.limit));
  out.gauge("used", static_cast<std::uint64_t>(a.used));
  out.gauge("reserved", static_cast<std::uint64_t>(a.reserved));
  // A corrupt segment can hold any two values: subtract without overflow.
  out.gauge("committed",
            static_cast<std::uint64_t>(a.used) - static_cast<std::uint64_t>(a.reserved));
  out.gauge("tickets", a.tickets);
  out.counter("rejections", a.rejections);
}

std::string_view owner_state(const Segment& seg, Owner o) {
  if (o.slot == kOrphanedPool) return "orphaned";
  if (o.slot >= kMaxAttachments) return "invalid";
  const AttachmentSlot& s = seg.header().slots[o.slot];
  if (s.generation.load(std::memory_order_acquire) != o.generation)
    return "gone";  // [seg.A'] pairs with attach [seg.A]
  return to_string(seg.liveness(o.slot));
}

void describe(const Segment& seg, Node& out) {
  auto view = make_view(seg);
  if (!view) {
    out.set("error", view.error().message);
    return;
  }
  const View& v = *view;
  const LedgerSnapshot s = read_snapshot(v);
  Node& params = out.object("params");
  params.set("global_limit", s.params.global_limit);
  params.set("control_reserve", s.params.control_reserve);
  params.set("max_tickets", static_cast<std::uint64_t>(s.params.max_tickets));
  params.set("max_categories", static_cast<std::uint64_t>(s.params.max_categories));
  params.set("max_pools", static_cast<std::uint64_t>(s.params.max_pools));
  params.set("max_buckets", static_cast<std::uint64_t>(s.params.max_buckets));
  out.set("version", s.version);
  out.set("mutating", (s.version & 1u) != 0);
  out.set("faulted", s.faulted);

  Node& accounts = out.object("accounts");
  put_account(accounts.object("global"), s.global);
  put_account(accounts.object("ordinary"), s.partitions[0]);
  put_account(accounts.object("control"), s.partitions[1]);
  Node& categories = out.object("categories");
  for (const CategoryState& c : s.categories) {
    Node& n = categories.object(c.account.label);
    n.set("partition", std::string(to_string(c.partition)));
    put_account(n, c.account);
  }
  Node& pools = out.array("pools");
  for (const PoolState& p : s.pools) {
    Node& n = pools.push_object();
    n.set("label", p.label);
    n.set("index", static_cast<std::uint64_t>(p.id.index));
    n.set("generation", static_cast<std::uint64_t>(p.id.generation));
    n.set("owner_slot", static_cast<std::uint64_t>(p.owner.slot));
    n.set("owner_generation", static_cast<std::uint64_t>(p.owner.generation));
    n.set("owner", std::string(owner_state(seg, p.owner)));
    n.set("ticket_limit", static_cast<std::uint64_t>(p.ticket_limit));
    n.gauge("tickets", p.tickets);
    n.counter("rejections", p.rejections);
    Node& acc = n.object("accounts");
    for (std::size_t a = 0; a < p.accounts.size(); ++a) {
      Node& an = acc.object(p.accounts[a].label);
      put_account(an, p.accounts[a]);
      an.set("categories", p.category_masks[a] == ~std::uint64_t{0}
                               ? std::string("all")
                               : shm::detail::format("{:#x}", p.category_masks[a]));
    }
  }
  Node& tickets = out.object("tickets");
  tickets.set("capacity", static_cast<std::uint64_t>(s.params.max_tickets));
  tickets.gauge("live", s.live_tickets);
  Node& by_owner = out.array("tickets_by_owner");
  const Tally t = tally(v);  // unlocked: a display, not a proof (verify uses the seqlock)
  for (const OwnerSum& o : t.owners) {
    Node& n = by_owner.push_object();
    n.set("slot", static_cast<std::uint64_t>(o.owner.slot));
    n.set("generation", static_cast<std::uint64_t>(o.owner.generation));
    // relaxed: a display value; owner_state() below does the acquire pairing.
    const std::int32_t pid =
        o.owner.slot < kMaxAttachments
            ? seg.header().slots[o.owner.slot].pid.load(std::memory_order_relaxed)
            : 0;
    n.set("pid", static_cast<std::int64_t>(pid));
    const std::string_view state = owner_state(seg, o.owner);
    n.set("owner", std::string(state));
    if (state == to_string(Liveness::Alive)) n.set("cmdline", process_cmdline(pid));
    n.set("tickets", o.tickets);
    n.set("bytes", o.bytes);
  }
  Node& buckets = out.object("buckets");
  for (const BucketState& b : s.buckets) {
    Node& n = buckets.object(b.label);
    n.set("rate_per_sec", b.rate_per_sec);
    n.set("burst", b.burst);
    n.gauge("tokens", static_cast<std::uint64_t>(b.level.tokens));
    n.set("fraction_milli", static_cast<std::uint64_t>(b.level.frac));
    n.set("last_ms", b.level.last_ms);
    n.counter("admits", b.admits);
    n.counter("rejections", b.rejections);
  }
  Node& rejections = out.object("rejections");
  for (std::size_t i = 0; i < kScopes; ++i)
    rejections.counter(std::string(to_string(static_cast<LedgerScope>(i))), s.stats.rejections[i]);
  Node& ops = out.object("operations");
  ops.counter("reserves", s.stats.reserves);
  ops.counter("commits", s.stats.commits);
  ops.counter("releases", s.stats.releases);
  ops.counter("replaces", s.stats.replaces);
  ops.counter("admits", s.stats.admits);
  ops.counter("refused_releases", s.stats.refused_releases);
  ops.counter("repairs", s.stats.repairs);
  ops.counter("reclaimed_tickets", s.stats.reclaimed_tickets);
  ops.counter("offers", s.stats.offers);
  ops.counter("handovers", s.stats.handovers);
}

std::vector<std::string> verify(const Segment& seg) {
  auto view = make_view(seg);
  if (!view) return {view.error().message};
  // Terminal: no locker can take the mutex again (the seqlock snapshot below
  // would still look healthy). A repair that found damage sets `faulted`,
  // which verify_unlocked reports with the tables' damage.
  if (view->control->lock.mutex.unrecoverable())
    return {
        "the ledger is FAULTED: its mutex is not recoverable (a holder died inside and the "
        "next locker unlocked it without marking it consistent); every operation fails: "
        "re-create it"};
  if (view->control->lock.mutex.owner_missing())
    return {shm::detail::dead_owner_note("ledger", view->control->lock.mutex)};
  const std::vector<SlotInfo> slots = seg.slots();
  return verify_unlocked(*view, slots);
}

Result<std::vector<std::string>> reclaim(Segment& seg, const SlotInfo& dead) {
  // On failure reclaim_dead_attacher() leaves the slot Attached (and dead) for
  // the next attempt instead of freeing it with its tickets held.
  if (!seg.writable())
    return fail(
        Errc::InvalidArgument,
        shm::detail::format("{}: reclaim needs a writable mapping; nothing released", seg.path()));
  auto view = make_view(seg);
  if (!view) return std::unexpected(view.error());
  const Owner owner{static_cast<std::uint32_t>(dead.index), dead.generation};
  auto r = release_owned(*view, seg, owner, Match::Exact, Departure::Leave, true);
  if (!r)
    return fail(r.error().code,
                shm::detail::format("generation {}: {}", dead.generation, r.error().message));
  return std::vector<std::string>{shm::detail::format(
      "slot {} (pid {}) generation {}: released {} tickets ({} bytes), closed {} pools, orphaned "
      "{} (closed with their last ticket), handed over {} offered tickets, voided {} offers",
      dead.index, dead.pid, dead.generation, r->tickets, r->bytes, r->pools_closed,
      r->pools_orphaned, r->handed_over, r->offers_voided)};
}

// A new rate applies from now on: the time since the last refill is first
// settled at the old rate (a refill to monotonic_ms(), the time base callers
// share), then the rate changes. The settled level is a multi-word update of
// primary state, so it goes through the undo journal as admit() does: a setter
// killed mid-level leaves the old level (restored by repair) and the old rate;
// killed after the journal is retired, a settled level and the old rate. Both
// are states an admit() could have produced. Caller holds the mutex inside a
// write section.
void set_rate(const View& v, LedgerControl& c, Bucket& b, std::int64_t rate) noexcept {
  const std::int64_t old_rate = ld(b.rate), burst = ld(b.burst);
  const std::uint32_t started = ld(b.started);
  if (started != 0 && old_rate >= 0 && burst >= 0) {
    const token_bucket::Level before{ld(b.tokens), ld(b.frac), true, ld(b.last_ms)};
    const token_bucket::Level after = token_bucket::refill(before, old_rate, burst, monotonic_ms());
    Journal& j = c.journal;
    BucketImage& img = j.buckets[0];
    st(img.index, static_cast<std::uint32_t>(&b - v.buckets));
    st(img.tokens, before.tokens);
    st(img.frac, before.frac);
    st(img.started, 1u);
    st(img.last_ms, before.last_ms);
    st(j.count, 1u);
    st(j.op, JournalOp::Admit);
    // [ledger.J1] release fence: crash order, as in admit().
    std::atomic_thread_fence(std::memory_order_release);
    st(b.tokens, after.tokens);
    detail::ledger_crash_point(test_hooks::LedgerCrashPoint::SetRateMidSettle);
    st(b.frac, after.frac);
    st(b.last_ms, after.last_ms);
    // [ledger.J2] release: crash order, as in admit().
    j.op.store(static_cast<std::uint32_t>(JournalOp::None), std::memory_order_release);
  }
  st(b.rate, rate);
}

Result<void> set(Segment& seg, std::string_view key, std::string_view value) {
  constexpr std::string_view kKeys = "valid keys: bucket.<label>.rate, bucket.<label>.burst";
  auto bad_key = [&] {
    return fail(Errc::InvalidArgument,
                shm::detail::format("ledger has no settable key '{}'; {}", key, kKeys));
  };
  if (!key.starts_with("bucket.")) return bad_key();
  const std::string_view rest = key.substr(7);
  const std::size_t dot = rest.rfind('.');
  if (dot == std::string_view::npos || dot == 0) return bad_key();
  const std::string_view label = rest.substr(0, dot);
  const std::string_view field = rest.substr(dot + 1);
  if (field != "rate" && field != "burst") return bad_key();
  std::int64_t n = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (ec != std::errc() || end != value.data() + value.size() || n < 0)
    return fail(
        Errc::InvalidArgument,
        shm::detail::format("{}: '{}' is not an integer in [0, 9223372036854775807]", key, value));
  if (!seg.writable())
    return fail(Errc::InvalidArgument,
                shm::detail::format("{}: set needs a writable mapping", seg.path()));
  auto view = make_view(seg);
  if (!view) return std::unexpected(view.error());
  const View& v = *view;
  if (auto ok = lock(v, seg.path()); !ok) return ok;
  LedgerControl& c = *v.control;
  Held held(c);
  const std::uint32_t bc = std::min(ld(c.lock.bucket_count), v.params.max_buckets);
  for (std::uint32_t i = 0; i < bc; ++i) {
    Bucket& b = v.buckets[i];
    if (!label_equals(b.label, label)) continue;
    held.write();
    if (field == "rate") {
      set_rate(v, c, b, n);
    } else {
      // Crash-safe order: every intermediate state keeps tokens + frac <= the
      // burst stored at that moment, so a setter killed anywhere here leaves a
      // bucket that repair finds consistent (it checks tokens <= burst). The
      // level is lowered first (frac, then tokens: each step only lowers it),
      // the burst last. Storing the burst first would leave tokens > burst.
      if (ld(b.tokens) >= n) {
        st(b.frac, 0u);
        st(b.tokens, n);
      }
      // A SIGKILL lands between instructions: keep the compiler from moving
      // the burst store above the level stores.
      std::atomic_signal_fence(std::memory_order_seq_cst);
      detail::ledger_crash_point(test_hooks::LedgerCrashPoint::SetBurstMidBucket);
      st(b.burst, n);
    }
    return {};
  }
  return fail(Errc::NotFound,
              shm::detail::format("{}: no bucket '{}' ({} defined)", seg.path(), label, bc));
}

constexpr std::array<RoleSpec, 1> kRoles = {kMemberRole};

}  // namespace

const KindDescriptor kLedgerDescriptor{
    kLedgerKind, "ledger", kFingerprint, kRoles, describe, verify, reclaim, set, nullptr,
};

}  // namespace shm
