// The Ledger handle: definitions, reserve/commit/release/replace, admit.
#include "internal.hpp"

#include <fmt/format.h>

#include <cassert>
#include <cstdlib>
#include <utility>

namespace shm {

using namespace ledger;
using namespace ledger::internal;
using CrashPoint = test_hooks::LedgerCrashPoint;

namespace {

constexpr auto kPoolOpen = static_cast<std::uint32_t>(PoolStatus::Open);
constexpr auto kTicketFree = static_cast<std::uint32_t>(TicketState::Free);
constexpr auto kTicketReserved = static_cast<std::uint32_t>(TicketState::Reserved);
constexpr auto kTicketCommitted = static_cast<std::uint32_t>(TicketState::Committed);

Rejection make_rejection(LedgerScope scope, std::string_view a, std::string_view b,
                         std::int64_t used, std::int64_t requested, std::int64_t limit) {
  Rejection r;
  r.scope = scope;
  r.used = used;
  r.requested = requested;
  r.limit = limit;
  std::size_t n = 0;
  auto put = [&](std::string_view s) {
    for (char ch : s)
      if (n < r.label_bytes.size() - 1) r.label_bytes[n++] = ch;
  };
  put(a);
  if (!b.empty()) {
    put("/");
    put(b);
  }
  r.label_size = static_cast<std::uint8_t>(n);
  return r;
}

// Counts a refusal at its scope (and on the refusing account, when there is one).
void count_rejection(LedgerControl& c, LedgerScope scope,
                     std::atomic<std::uint64_t>* account) noexcept {
  bump(c.stats.rejections[static_cast<std::size_t>(scope)]);
  if (account != nullptr) bump(*account);
}

std::unexpected<Error> corrupt(std::string_view path, std::string what) {
  return fail(Errc::Corrupt, fmt::format("{}: {}", path, what));
}

// A live ticket of this handle's, or why not (counted as a refused release).
Result<void> check_ticket(const View& v, std::string_view op, Ticket tk, Owner self) {
  LedgerControl& c = *v.control;
  const TicketSlot& t = v.tickets[tk.index];
  const std::uint32_t state = ld(t.state);
  const std::uint32_t gen = ld(t.generation);
  if (state == kTicketFree || gen != tk.generation) {
    bump(c.stats.refused_releases);
    if (state == kTicketFree && gen == tk.generation)
      return fail(Errc::InvalidArgument, fmt::format("{}: ticket {}#{} was already released", op,
                                                     tk.index, tk.generation));
    return fail(
        Errc::InvalidArgument,
        fmt::format("{}: ticket {}#{} is stale: its slot was reused and is now generation {} ({})",
                    op, tk.index, tk.generation, gen, state == kTicketFree ? "free" : "live"));
  }
  const Owner owner{ld(t.owner_slot), ld(t.owner_generation)};
  if (owner != self) {
    bump(c.stats.refused_releases);
    return fail(
        Errc::PermissionDenied,
        fmt::format("{}: ticket {}#{} belongs to attachment slot {} generation {}; this handle is "
                    "slot {} generation {}",
                    op, tk.index, tk.generation, owner.slot, owner.generation, self.slot,
                    self.generation));
  }
  return {};
}

// Room left in an account, or Corrupt when its counters are impossible.
Result<std::int64_t> room(const Account& a, std::string_view path, std::string_view what) {
  const std::int64_t used = ld(a.used), limit = ld(a.limit);
  if (used < 0 || used > limit) [[unlikely]]
    return corrupt(path,
                   fmt::format("{} account: used {} is outside [0, limit {}]", what, used, limit));
  return limit - used;
}

Result<CategoryId> define_category_held(const View& v, Held& held, const CategorySpec& spec,
                                        std::string_view path) {
  LedgerControl& c = *v.control;
  const std::uint32_t cc = ld(c.lock.category_count);
  if (cc > v.params.max_categories)
    return corrupt(path, fmt::format("category count {} exceeds the table of {}", cc,
                                     v.params.max_categories));
  const auto part = static_cast<std::uint32_t>(spec.partition);
  for (std::uint32_t i = 0; i < cc; ++i) {
    const Category& cat = v.categories[i];
    if (!label_equals(cat.label, spec.label)) continue;
    if (ld(cat.account.limit) == spec.limit && ld(cat.partition) == part) return CategoryId{i};
    return fail(
        Errc::AlreadyExists,
        fmt::format("category '{}' already exists with limit {} ({}); a duplicate definition "
                    "cannot reset it to limit {} ({})",
                    spec.label, ld(cat.account.limit),
                    to_string(ld(cat.partition) == 1 ? Partition::Control : Partition::Ordinary),
                    spec.limit, to_string(spec.partition)));
  }
  if (cc == v.params.max_categories)
    return fail(Errc::NoFreeSlot,
                fmt::format("category table is full ({} of {}); cannot define '{}'", cc,
                            v.params.max_categories, spec.label));
  held.write();
  Category& cat = v.categories[cc];
  write_label(cat.label, spec.label);
  st(cat.account.limit, spec.limit);
  st(cat.account.used, 0);
  st(cat.account.reserved, 0);
  st(cat.account.tickets, 0u);
  st(cat.account.rejections, 0u);
  st(cat.partition, part);
  // [C] release: publishes the entry to unlocked readers; pairs with [C'] (acquire).
  c.lock.category_count.store(cc + 1, std::memory_order_release);
  return CategoryId{cc};
}

Result<BucketId> define_bucket_held(const View& v, Held& held, const BucketSpec& spec,
                                    std::string_view path) {
  LedgerControl& c = *v.control;
  const std::uint32_t bc = ld(c.lock.bucket_count);
  if (bc > v.params.max_buckets)
    return corrupt(
        path, fmt::format("bucket count {} exceeds the table of {}", bc, v.params.max_buckets));
  for (std::uint32_t i = 0; i < bc; ++i) {
    const Bucket& b = v.buckets[i];
    if (!label_equals(b.label, spec.label)) continue;
    if (ld(b.rate) == spec.rate_per_sec && ld(b.burst) == spec.burst) return BucketId{i};
    return fail(
        Errc::AlreadyExists,
        fmt::format("bucket '{}' already exists with rate {}/s burst {}; a duplicate definition "
                    "cannot reset it to rate {}/s burst {}",
                    spec.label, ld(b.rate), ld(b.burst), spec.rate_per_sec, spec.burst));
  }
  if (bc == v.params.max_buckets)
    return fail(Errc::NoFreeSlot, fmt::format("bucket table is full ({} of {}); cannot define '{}'",
                                              bc, v.params.max_buckets, spec.label));
  held.write();
  Bucket& b = v.buckets[bc];
  write_label(b.label, spec.label);
  st(b.rate, spec.rate_per_sec);
  st(b.burst, spec.burst);
  st(b.tokens, spec.burst);  // a bucket starts full
  st(b.frac, 0u);
  st(b.started, 0u);
  st(b.last_ms, 0);
  st(b.admits, 0u);
  st(b.rejections, 0u);
  // [B] release: publishes the entry to unlocked readers; pairs with [B'] (acquire).
  c.lock.bucket_count.store(bc + 1, std::memory_order_release);
  return BucketId{bc};
}

Result<void> validate_category(const CategorySpec& spec) {
  if (auto ok = validate_label("category", spec.label); !ok) return ok;
  if (spec.limit < 0)
    return fail(Errc::InvalidArgument,
                fmt::format("category '{}': limit {} is negative", spec.label, spec.limit));
  if (spec.partition != Partition::Ordinary && spec.partition != Partition::Control)
    return fail(Errc::InvalidArgument,
                fmt::format("category '{}': unknown partition {}", spec.label,
                            static_cast<unsigned>(spec.partition)));
  return {};
}

Result<void> validate_bucket(const BucketSpec& spec) {
  if (auto ok = validate_label("bucket", spec.label); !ok) return ok;
  if (auto ok = token_bucket::validate(spec.rate_per_sec, spec.burst); !ok)
    return fail(Errc::InvalidArgument,
                fmt::format("bucket '{}': {}", spec.label, ok.error().message));
  return {};
}

// A caller-supplied pool handle that names an open pool, or why not.
Result<Pool*> open_pool_at(const View& v, PoolId id, std::string_view op) {
  Pool& p = v.pools[id.index];
  if (ld(p.state) != kPoolOpen || ld(p.generation) != id.generation) [[unlikely]]
    return fail(Errc::InvalidArgument,
                fmt::format("{}: pool {}#{} is not open (closed, or reopened as generation {})", op,
                            id.index, id.generation, ld(p.generation)));
  return &p;
}

// The pool account that `category` is charged to in `pool`.
Result<PoolAccount*> pool_account(const View& v, Pool& p, std::uint32_t category,
                                  std::string_view path) {
  const int a = find_account(p, category);
  if (a == -1) [[unlikely]]
    return fail(Errc::InvalidArgument,
                fmt::format("pool '{}' has no account for category '{}'", read_label(p.label),
                            read_label(v.categories[category].label)));
  if (a < 0) [[unlikely]]
    return corrupt(path, fmt::format("pool '{}' has {} accounts (limit {})", read_label(p.label),
                                     ld(p.account_count), kPoolAccounts));
  return &p.accounts[a];
}

// A live ticket owned by `self` under this handle's generation (the hot check;
// check_ticket() explains a failure).
[[nodiscard]] inline bool owned_live(const TicketSlot& t, Ticket tk, Owner self) noexcept {
  return ld(t.state) != kTicketFree && ld(t.generation) == tk.generation &&
         ld(t.owner_slot) == self.slot && ld(t.owner_generation) == self.generation;
}

[[gnu::cold]] std::unexpected<Error> ticket_range_error(std::string_view op, Ticket tk,
                                                        const View& v) {
  return fail(Errc::InvalidArgument, fmt::format("{}: ticket index {} is outside the table of {}",
                                                 op, tk.index, v.params.max_tickets));
}

[[gnu::cold]] std::unexpected<Error> reserve_argument_error(const View& v, PoolId pool,
                                                            CategoryId cat, std::int64_t bytes) {
  if (bytes < 0)
    return fail(Errc::InvalidArgument, fmt::format("reserve: bytes {} is negative", bytes));
  if (pool.index >= v.params.max_pools)
    return fail(Errc::InvalidArgument,
                fmt::format("reserve: pool index {} is outside the table of {}", pool.index,
                            v.params.max_pools));
  return fail(Errc::InvalidArgument, fmt::format("reserve: category {} is outside the table of {}",
                                                 cat.index, v.params.max_categories));
}

// Why (pool, category) cannot be charged: a stale pool, an undefined category,
// no pool account for it, or damage. Caller holds the mutex.
[[gnu::cold]] std::unexpected<Error> reserve_lookup_error(const View& v, PoolId pool_id,
                                                          CategoryId category,
                                                          std::string_view path) {
  const LedgerControl& c = *v.control;
  auto pool = open_pool_at(v, pool_id, "reserve");
  if (!pool) return std::unexpected(std::move(pool.error()));
  const std::uint32_t cc = ld(c.lock.category_count);
  if (cc > v.params.max_categories)
    return corrupt(path, fmt::format("category count {} exceeds the table of {}", cc,
                                     v.params.max_categories));
  if (category.index >= cc)
    return fail(Errc::InvalidArgument,
                fmt::format("reserve: category {} is not defined ({} are)", category.index, cc));
  const std::uint32_t part = ld(v.categories[category.index].partition);
  if (part >= kPartitions)
    return corrupt(path, fmt::format("category {} has partition {}", category.index, part));
  auto pa = pool_account(v, **pool, category.index, path);
  if (!pa) return std::unexpected(std::move(pa.error()));
  return corrupt(path, "reserve: inconsistent lookup");  // not reached: the fast path accepted it
}

// The first dimension that refuses `bytes` (counted), or damage. Caller holds the mutex.
[[gnu::cold]] Result<LedgerReservation> reserve_refused(const View& v, Pool& p, Category& cat,
                                                        PoolAccount& pa, std::uint32_t part,
                                                        std::int64_t bytes, std::string_view path) {
  // A refusal changes statistics only: no write section.
  LedgerControl& c = *v.control;
  const std::uint32_t top = ld(c.lock.free_top);
  if (top > v.params.max_tickets)
    return corrupt(path, fmt::format("free stack holds {} entries, the table has {}", top,
                                     v.params.max_tickets));
  if (top == 0) {
    count_rejection(c, LedgerScope::Tickets, nullptr);
    return LedgerReservation(std::unexpect,
                             make_rejection(LedgerScope::Tickets, "tickets", {},
                                            static_cast<std::int64_t>(ld(c.lock.live_tickets)), 1,
                                            v.params.max_tickets));
  }
  const std::uint32_t ticket_limit = ld(p.ticket_limit);
  if (ticket_limit != 0 && ld(p.tickets) >= ticket_limit) {
    count_rejection(c, LedgerScope::Tickets, &p.rejections);
    return LedgerReservation(
        std::unexpect, make_rejection(LedgerScope::Tickets, read_label(p.label), "tickets",
                                      static_cast<std::int64_t>(ld(p.tickets)), 1, ticket_limit));
  }
  Account* const dims[] = {&c.global, &c.partitions[part], &cat.account, &pa.account};
  constexpr LedgerScope kScopesInOrder[] = {LedgerScope::Global, LedgerScope::Partition,
                                            LedgerScope::Category, LedgerScope::Pool};
  for (std::size_t d = 0; d < 4; ++d) {
    auto left = room(*dims[d], path, to_string(kScopesInOrder[d]));
    if (!left) return std::unexpected(std::move(left.error()));
    if (bytes <= *left) continue;
    count_rejection(c, kScopesInOrder[d], &dims[d]->rejections);
    if (kScopesInOrder[d] == LedgerScope::Pool) bump(p.rejections);
    const std::string a = d == 0   ? std::string("global")
                          : d == 1 ? std::string(to_string(static_cast<Partition>(part)))
                          : d == 2 ? read_label(cat.label)
                                   : read_label(p.label);
    const std::string b = d == 3 ? read_label(pa.label) : std::string();
    return LedgerReservation(
        std::unexpect,
        make_rejection(kScopesInOrder[d], a, b, ld(dims[d]->used), bytes, ld(dims[d]->limit)));
  }
  return corrupt(path, "reserve: inconsistent refusal");  // not reached: the fast path refused
}

// Why a live, owned ticket cannot be released: damage (Corrupt, with detail).
[[gnu::cold]] Result<void> release_damage(const View& v, std::uint32_t index,
                                          std::string_view path) {
  auto ch = resolve(v, index, path);
  if (!ch) return std::unexpected(std::move(ch.error()));
  return check_uncharge(v, *ch, path);
}

[[gnu::cold]] std::unexpected<Error> admit_argument_error(std::span<const Constraint> constraints,
                                                          std::int64_t now_ms) {
  if (now_ms < 0)
    return fail(Errc::InvalidArgument, fmt::format("admit: time {} ms is negative", now_ms));
  auto co = token_bucket::coalesce(constraints);
  return fail(Errc::InvalidArgument,
              co ? std::string("admit: malformed constraints") : "admit: " + co.error().message);
}

[[gnu::cold]] Result<LedgerAdmission> admit_refused(LedgerControl& c, Bucket& b, std::int64_t burst,
                                                    std::int64_t available, std::int64_t cost) {
  count_rejection(c, LedgerScope::Bucket, &b.rejections);
  return LedgerAdmission(std::unexpect, make_rejection(LedgerScope::Bucket, read_label(b.label), {},
                                                       burst - available, cost, burst));
}

}  // namespace

// ---------------------------------------------------------------- lifetime

Ledger::Ledger(Ledger&& o) noexcept
    : segment_(std::move(o.segment_)),
      attachment_(std::move(o.attachment_)),
      view_(std::exchange(o.view_, View{})),
      owner_(o.owner_) {}

Ledger& Ledger::operator=(Ledger&& o) noexcept {
  if (this != &o) {
    shutdown();
    segment_ = std::move(o.segment_);
    attachment_ = std::move(o.attachment_);
    view_ = std::exchange(o.view_, View{});
    owner_ = o.owner_;
  }
  return *this;
}

Ledger::~Ledger() {
  shutdown();
}

void Ledger::shutdown() noexcept {
  if (view_.control != nullptr && attachment_.attached()) {
    // Best effort: a failure here (a faulted ledger) leaves the tickets to reclaim.
    try {
      (void)release_owned(view_, segment_.path(), owner_, Match::Exact, false, true);
    } catch (...) {
    }
  }
  attachment_.detach();
  view_ = View{};
}

Result<Ledger> Ledger::bind(Segment segment) {
  auto view = make_view(segment);
  if (!view) return std::unexpected(view.error());
  auto attachment = segment.attach(kMemberRole);
  if (!attachment) return std::unexpected(attachment.error());
  Ledger l;
  l.segment_ = std::move(segment);
  l.attachment_ = std::move(*attachment);
  l.view_ = *view;
  l.owner_ = Owner{static_cast<std::uint32_t>(l.attachment_.slot()), l.attachment_.generation()};
  // Earlier holders of our slot are gone (we hold its kernel lock): whatever
  // they still own was never reclaimed. Release it now.
  auto swept = release_owned(l.view_, l.segment_.path(), l.owner_, Match::Predecessors, true, true);
  if (!swept) return std::unexpected(swept.error());
  return l;
}

Result<Ledger> Ledger::create(std::string_view name, const LedgerConfig& config,
                              const CreateOptions& options) {
  if (auto ok = validate(config.params); !ok) return std::unexpected(ok.error());
  for (const CategorySpec& c : config.categories)
    if (auto ok = validate_category(c); !ok) return std::unexpected(ok.error());
  for (const BucketSpec& b : config.buckets)
    if (auto ok = validate_bucket(b); !ok) return std::unexpected(ok.error());
  ParamBlock block{};
  const KindSpec spec = kind_spec(config.params, false, block);
  const std::string path = std::string(name);
  auto init = [&](std::span<std::byte> data) -> Result<void> {
    // The data area is zero-filled and invisible to others until READY: no lock needed.
    const View v = view_over(block, data.data());
    LedgerControl& c = *v.control;
    if (auto ok = c.lock.mutex.init(); !ok) return ok;
    st(c.global.limit, block.global_limit);
    st(c.partitions[0].limit, block.global_limit - block.control_reserve);
    st(c.partitions[1].limit, block.global_limit);
    // Nobody else can lock yet; the definitions still run under the lock
    // because define_*_held() expect a Held section.
    for (const CategorySpec& cs : config.categories) {
      if (c.lock.mutex.lock() != detail::LockResult::Acquired)
        return fail(Errc::SystemError, "cannot lock the new ledger's mutex");
      Held held(c);
      if (auto id = define_category_held(v, held, cs, path); !id)
        return std::unexpected(id.error());
    }
    for (const BucketSpec& bs : config.buckets) {
      if (c.lock.mutex.lock() != detail::LockResult::Acquired)
        return fail(Errc::SystemError, "cannot lock the new ledger's mutex");
      Held held(c);
      if (auto id = define_bucket_held(v, held, bs, path); !id) return std::unexpected(id.error());
    }
    store_derived(v, tally(v));  // an empty ticket table: every index on the free stack
    return {};
  };
  auto seg = Segment::create(name, spec, options, init);
  if (!seg) return std::unexpected(seg.error());
  return bind(std::move(*seg));
}

Result<Ledger> Ledger::open(std::string_view name, const OpenOptions& options) {
  ParamBlock block{};
  const KindSpec spec = kind_spec(LedgerParams{}, true, block);
  auto seg = Segment::open(name, spec, options);
  if (!seg) return std::unexpected(seg.error());
  // Any geometry skips Segment::open's size check: check the size against the
  // segment's own (validated) geometry, as the other kinds do.
  auto view = make_view(*seg);
  if (!view) return std::unexpected(view.error());
  const std::uint64_t needed = kHeaderSize + round_up(view->geometry.data_size, kPageSize);
  if (seg->header().total_size != needed)
    return fail(Errc::SizeMismatch,
                fmt::format("{}: size: segment has {} bytes, its ledger parameters need {}",
                            seg->path(), seg->header().total_size, needed));
  return bind(std::move(*seg));
}

Result<Ledger> Ledger::open(std::string_view name, const LedgerParams& expected,
                            const OpenOptions& options) {
  if (auto ok = validate(expected); !ok) return std::unexpected(ok.error());
  ParamBlock block{};
  const KindSpec spec = kind_spec(expected, false, block);
  auto seg = Segment::open(name, spec, options);
  if (!seg) return std::unexpected(seg.error());
  return bind(std::move(*seg));
}

// ---------------------------------------------------------------- definitions

Result<CategoryId> Ledger::define_category(const CategorySpec& spec) {
  assert(view_.control != nullptr && "use of an empty Ledger handle");
  if (auto ok = validate_category(spec); !ok) return std::unexpected(ok.error());
  if (auto ok = lock(view_, segment_.path()); !ok) return std::unexpected(ok.error());
  Held held(*view_.control);
  return define_category_held(view_, held, spec, segment_.path());
}

Result<BucketId> Ledger::define_bucket(const BucketSpec& spec) {
  assert(view_.control != nullptr && "use of an empty Ledger handle");
  if (auto ok = validate_bucket(spec); !ok) return std::unexpected(ok.error());
  if (auto ok = lock(view_, segment_.path()); !ok) return std::unexpected(ok.error());
  Held held(*view_.control);
  return define_bucket_held(view_, held, spec, segment_.path());
}

Result<CategoryId> Ledger::category(std::string_view label) const {
  assert(view_.control != nullptr && "use of an empty Ledger handle");
  // [C'] acquire: pairs with [C]; entries below the count are complete and immutable.
  const std::uint32_t cc = view_.control->lock.category_count.load(std::memory_order_acquire);
  for (std::uint32_t i = 0; i < cc && i < view_.params.max_categories; ++i)
    if (label_equals(view_.categories[i].label, label)) return CategoryId{i};
  return fail(Errc::NotFound,
              fmt::format("{}: no category '{}' ({} defined)", segment_.path(), label, cc));
}

Result<BucketId> Ledger::bucket(std::string_view label) const {
  assert(view_.control != nullptr && "use of an empty Ledger handle");
  // [B'] acquire: pairs with [B]; entries below the count have immutable labels.
  const std::uint32_t bc = view_.control->lock.bucket_count.load(std::memory_order_acquire);
  for (std::uint32_t i = 0; i < bc && i < view_.params.max_buckets; ++i)
    if (label_equals(view_.buckets[i].label, label)) return BucketId{i};
  return fail(Errc::NotFound,
              fmt::format("{}: no bucket '{}' ({} defined)", segment_.path(), label, bc));
}

Result<PoolId> Ledger::open_pool(const PoolSpec& spec) {
  assert(view_.control != nullptr && "use of an empty Ledger handle");
  if (auto ok = validate_label("pool", spec.label); !ok) return std::unexpected(ok.error());
  if (spec.accounts.empty() || spec.accounts.size() > kPoolAccounts)
    return fail(Errc::InvalidArgument,
                fmt::format("pool '{}': {} accounts, expected 1 to {}", spec.label,
                            spec.accounts.size(), kPoolAccounts));
  std::array<std::uint64_t, kPoolAccounts> masks{};
  std::uint32_t highest = 0;
  bool any_listed = false;
  for (std::size_t a = 0; a < spec.accounts.size(); ++a) {
    const PoolAccountSpec& acc = spec.accounts[a];
    if (auto ok = validate_label("pool account", acc.label); !ok)
      return std::unexpected(ok.error());
    if (acc.limit < 0)
      return fail(Errc::InvalidArgument, fmt::format("pool '{}' account '{}': limit {} is negative",
                                                     spec.label, acc.label, acc.limit));
    for (CategoryId c : acc.categories) {
      if (c.index >= view_.params.max_categories)
        return fail(Errc::InvalidArgument,
                    fmt::format("pool '{}' account '{}': category {} is outside the "
                                "table of {}",
                                spec.label, acc.label, c.index, view_.params.max_categories));
      masks[a] |= std::uint64_t{1} << c.index;
      highest = std::max(highest, c.index);
      any_listed = true;
    }
    if (acc.categories.empty()) masks[a] = ~std::uint64_t{0};
    for (std::size_t b = 0; b < a; ++b)
      if ((masks[a] & masks[b]) != 0)
        return fail(
            Errc::InvalidArgument,
            fmt::format(
                "pool '{}': accounts '{}' and '{}' cover a common category; each category is "
                "charged to one account",
                spec.label, spec.accounts[b].label, acc.label));
  }
  const std::string& path = segment_.path();
  if (auto ok = lock(view_, path); !ok) return std::unexpected(ok.error());
  LedgerControl& c = *view_.control;
  Held held(c);
  const std::uint32_t cc = ld(c.lock.category_count);
  if (any_listed && highest >= cc)
    return fail(Errc::InvalidArgument, fmt::format("pool '{}': category {} is not defined ({} are)",
                                                   spec.label, highest, cc));
  std::uint32_t slot = view_.params.max_pools;
  for (std::uint32_t i = 0; i < view_.params.max_pools; ++i) {
    const Pool& p = view_.pools[i];
    if (ld(p.state) == kPoolOpen) {
      if (label_equals(p.label, spec.label))
        return fail(Errc::AlreadyExists, fmt::format("pool '{}' is already open (pool {}#{})",
                                                     spec.label, i, ld(p.generation)));
    } else if (slot == view_.params.max_pools) {
      slot = i;
    }
  }
  if (slot == view_.params.max_pools)
    return fail(Errc::NoFreeSlot, fmt::format("all {} pools are open; cannot open '{}'",
                                              view_.params.max_pools, spec.label));
  held.write();
  Pool& p = view_.pools[slot];
  const std::uint32_t gen = ld(p.generation) + 1;
  st(p.generation, gen);
  st(p.owner_slot, owner_.slot);
  st(p.owner_generation, owner_.generation);
  st(p.account_count, spec.accounts.size());
  st(p.ticket_limit, spec.max_tickets);
  st(p.tickets, 0u);
  st(p.rejections, 0u);
  write_label(p.label, spec.label);
  for (std::uint32_t a = 0; a < kPoolAccounts; ++a) {
    PoolAccount& pa = p.accounts[a];
    const bool used = a < spec.accounts.size();
    write_label(pa.label, used ? std::string_view(spec.accounts[a].label) : std::string_view());
    st(pa.account.limit, used ? spec.accounts[a].limit : 0);
    st(pa.account.used, 0);
    st(pa.account.reserved, 0);
    st(pa.account.tickets, 0u);
    st(pa.account.rejections, 0u);
    st(pa.categories, used ? masks[a] : 0u);
  }
  // [P] release: publishes the pool (and, for crash order, its fields before
  // its state); pairs with the acquire [P'] of unlocked readers.
  p.state.store(kPoolOpen, std::memory_order_release);
  st(c.lock.open_pools, ld(c.lock.open_pools) + 1);
  return PoolId{slot, gen};
}

Result<PoolId> Ledger::pool(std::string_view label) const {
  assert(view_.control != nullptr && "use of an empty Ledger handle");
  if (auto ok = lock(view_, segment_.path()); !ok) return std::unexpected(ok.error());
  Held held(*view_.control);
  for (std::uint32_t i = 0; i < view_.params.max_pools; ++i) {
    const Pool& p = view_.pools[i];
    if (ld(p.state) == kPoolOpen && label_equals(p.label, label))
      return PoolId{i, ld(p.generation)};
  }
  return fail(Errc::NotFound, fmt::format("{}: no open pool '{}'", segment_.path(), label));
}

Result<void> Ledger::close_pool(PoolId id) {
  if (id.index >= view_.params.max_pools)
    return fail(Errc::InvalidArgument,
                fmt::format("close_pool: pool index {} is outside the table of {}", id.index,
                            view_.params.max_pools));
  if (auto ok = lock(view_, segment_.path()); !ok) return std::unexpected(ok.error());
  LedgerControl& c = *view_.control;
  Held held(c);
  auto p = open_pool_at(view_, id, "close_pool");
  if (!p) return std::unexpected(p.error());
  if (const std::uint64_t n = ld((*p)->tickets); n != 0)
    return fail(Errc::InvalidArgument,
                fmt::format("close_pool: pool '{}' still holds {} tickets; release them "
                            "first",
                            read_label((*p)->label), n));
  held.write();
  // [P2] release: pairs with the acquire [P'] of unlocked readers.
  (*p)->state.store(static_cast<std::uint32_t>(PoolStatus::Free), std::memory_order_release);
  st(c.lock.open_pools, ld(c.lock.open_pools) - 1);
  return {};
}

// ---------------------------------------------------------------- accounting

Result<LedgerReservation> Ledger::reserve(PoolId pool_id, CategoryId category, std::int64_t bytes) {
  assert(view_.control != nullptr && "use of an empty Ledger handle");
  const View& v = view_;
  if (bytes < 0 || pool_id.index >= v.params.max_pools || category.index >= v.params.max_categories)
      [[unlikely]]
    return reserve_argument_error(v, pool_id, category, bytes);
  const std::string& path = segment_.path();
  if (auto ok = lock(v, path); !ok) [[unlikely]]
    return std::unexpected(std::move(ok.error()));
  LedgerControl& c = *v.control;
  Held held(c);

  // Everything the reservation touches, each index checked before use.
  Pool& p = v.pools[pool_id.index];
  const std::uint32_t cc = ld(c.lock.category_count);
  if (ld(p.state) != kPoolOpen || ld(p.generation) != pool_id.generation || category.index >= cc)
      [[unlikely]]
    return reserve_lookup_error(v, pool_id, category, path);
  Category& cat = v.categories[category.index];
  const std::uint32_t part = ld(cat.partition);
  const int ai = find_account(p, category.index);
  if (part >= kPartitions || ai < 0) [[unlikely]]
    return reserve_lookup_error(v, pool_id, category, path);
  PoolAccount& pa = p.accounts[ai];
  const std::uint32_t top = ld(c.lock.free_top);
  if (top == 0 || top > v.params.max_tickets) [[unlikely]]
    return reserve_refused(v, p, cat, pa, part, bytes, path);
  const std::uint32_t ticket_limit = ld(p.ticket_limit);
  if (ticket_limit != 0 && ld(p.tickets) >= ticket_limit) [[unlikely]]
    return reserve_refused(v, p, cat, pa, part, bytes, path);
  Account* const dims[] = {&c.global, &c.partitions[part], &cat.account, &pa.account};
  for (const Account* a : dims) {
    const std::int64_t used = ld(a->used), limit = ld(a->limit);
    // used outside [0, limit] is damage; bytes > limit - used is a refusal.
    if (used < 0 || used > limit || bytes > limit - used) [[unlikely]]
      return reserve_refused(v, p, cat, pa, part, bytes, path);
  }
  const std::uint32_t index = ld(v.free_stack[top - 1]);
  if (index >= v.params.max_tickets || ld(v.tickets[index].state) != kTicketFree) [[unlikely]]
    return corrupt(path,
                   fmt::format("free stack top {} names ticket {}, which is out of range or live",
                               top - 1, index));

  held.write();
  st(c.lock.free_top, top - 1);
  TicketSlot& t = v.tickets[index];
  const std::uint32_t gen = ld(t.generation) + 1;
  st(t.generation, gen);
  st(t.owner_slot, owner_.slot);
  st(t.owner_generation, owner_.generation);
  st(t.pool, pool_id.index);
  st(t.pool_generation, pool_id.generation);
  st(t.category, category.index);
  st(t.bytes, bytes);
  // [T] release: crash order — every field above is in memory before the ticket
  // is live; a repairer (after the mutex's EOWNERDEAD acquire) sees a whole ticket or none.
  t.state.store(kTicketReserved, std::memory_order_release);
  detail::ledger_crash_point(CrashPoint::ReserveAfterTicketPublished);
  charge(*dims[0], bytes, true);
  charge(*dims[1], bytes, true);
  detail::ledger_crash_point(CrashPoint::ReserveMidCounters);
  charge(*dims[2], bytes, true);
  charge(*dims[3], bytes, true);
  bump(p.tickets);
  bump(c.lock.live_tickets);
  bump(c.stats.reserves);
  return LedgerReservation(Ticket{index, gen});
}

Result<void> Ledger::commit(Ticket ticket) {
  assert(view_.control != nullptr && "use of an empty Ledger handle");
  const View& v = view_;
  if (ticket.index >= v.params.max_tickets) [[unlikely]]
    return ticket_range_error("commit", ticket, v);
  const std::string& path = segment_.path();
  if (auto ok = lock(v, path); !ok) [[unlikely]]
    return ok;
  LedgerControl& c = *v.control;
  Held held(c);
  TicketSlot& t = v.tickets[ticket.index];
  if (!owned_live(t, ticket, owner_)) [[unlikely]]
    return check_ticket(v, "commit", ticket, owner_);
  if (ld(t.state) == kTicketCommitted) [[unlikely]]
    return fail(Errc::InvalidArgument, fmt::format("commit: ticket {}#{} is already committed",
                                                   ticket.index, ticket.generation));
  Charge ch;
  if (!resolve_fast(v, ticket.index, ch)) [[unlikely]]
    return std::unexpected(resolve(v, ticket.index, path).error());
  Account* const dims[] = {ch.global, ch.partition, ch.category, ch.pool_account};
  for (const Account* a : dims)
    if (ld(a->reserved) < ch.bytes) [[unlikely]]
      return corrupt(path, fmt::format("commit of {} bytes: an account has only {} reserved",
                                       ch.bytes, ld(a->reserved)));
  held.write();
  // [T] release (crash order, as in reserve): the state is the source of truth.
  t.state.store(kTicketCommitted, std::memory_order_release);
  st(dims[0]->reserved, ld(dims[0]->reserved) - ch.bytes);
  detail::ledger_crash_point(CrashPoint::CommitMidCounters);
  for (std::size_t d = 1; d < std::size(dims); ++d)
    st(dims[d]->reserved, ld(dims[d]->reserved) - ch.bytes);
  bump(c.stats.commits);
  return {};
}

Result<void> Ledger::release(Ticket ticket) {
  assert(view_.control != nullptr && "use of an empty Ledger handle");
  const View& v = view_;
  if (ticket.index >= v.params.max_tickets) [[unlikely]]
    return ticket_range_error("release", ticket, v);
  const std::string& path = segment_.path();
  if (auto ok = lock(v, path); !ok) [[unlikely]]
    return ok;
  LedgerControl& c = *v.control;
  Held held(c);
  if (!owned_live(v.tickets[ticket.index], ticket, owner_)) [[unlikely]]
    return check_ticket(v, "release", ticket, owner_);
  Charge ch;
  if (!resolve_fast(v, ticket.index, ch) || !can_uncharge(v, ch)) [[unlikely]]
    return release_damage(v, ticket.index, path);
  held.write();
  free_ticket(v, ticket.index, ch);
  bump(c.stats.releases);
  return {};
}

Result<LedgerReplacement> Ledger::replace(Ticket ticket, PoolId pool_id, std::int64_t bytes) {
  assert(view_.control != nullptr && "use of an empty Ledger handle");
  const View& v = view_;
  if (bytes < 0)
    return fail(Errc::InvalidArgument, fmt::format("replace: bytes {} is negative", bytes));
  if (ticket.index >= v.params.max_tickets)
    return fail(Errc::InvalidArgument,
                fmt::format("replace: ticket index {} is outside the table of {}", ticket.index,
                            v.params.max_tickets));
  if (pool_id.index >= v.params.max_pools)
    return fail(Errc::InvalidArgument,
                fmt::format("replace: pool index {} is outside the table of {}", pool_id.index,
                            v.params.max_pools));
  const std::string& path = segment_.path();
  if (auto ok = lock(v, path); !ok) return std::unexpected(ok.error());
  LedgerControl& c = *v.control;
  Held held(c);
  if (auto ok = check_ticket(v, "replace", ticket, owner_); !ok) return std::unexpected(ok.error());
  auto old = resolve(v, ticket.index, path);
  if (!old) return std::unexpected(old.error());
  auto pool = open_pool_at(v, pool_id, "replace");
  if (!pool) return std::unexpected(pool.error());
  Pool& np = **pool;
  TicketSlot& t = v.tickets[ticket.index];
  const std::uint32_t cat_index = ld(t.category);
  auto npa = pool_account(v, np, cat_index, path);
  if (!npa) return std::unexpected(npa.error());
  Account* const new_account = &(*npa)->account;
  const bool same_account = new_account == old->pool_account;
  const bool same_pool = &np == old->pool;
  if (auto ok = check_uncharge(v, *old, path); !ok) return std::unexpected(ok.error());

  // Checks, in scope order. Shared dimensions move by the difference; a new
  // pool account takes the whole amount.
  const std::int64_t delta = bytes - old->bytes;  // both in [0, INT64_MAX]: no overflow
  const std::uint32_t ticket_limit = ld(np.ticket_limit);
  if (!same_pool && ticket_limit != 0 && ld(np.tickets) >= ticket_limit) {
    count_rejection(c, LedgerScope::Tickets, &np.rejections);
    return LedgerReplacement(
        std::unexpect, make_rejection(LedgerScope::Tickets, read_label(np.label), "tickets",
                                      static_cast<std::int64_t>(ld(np.tickets)), 1, ticket_limit));
  }
  Account* const shared[] = {old->global, old->partition, old->category};
  constexpr LedgerScope kSharedScopes[] = {LedgerScope::Global, LedgerScope::Partition,
                                           LedgerScope::Category};
  const Category& cat = v.categories[cat_index];
  for (std::size_t d = 0; d < 3; ++d) {
    auto left = room(*shared[d], path, to_string(kSharedScopes[d]));
    if (!left) return std::unexpected(left.error());
    if (delta > *left) {
      count_rejection(c, kSharedScopes[d], &shared[d]->rejections);
      const std::string a =
          d == 0   ? std::string("global")
          : d == 1 ? std::string(to_string(ld(cat.partition) == 1 ? Partition::Control
                                                                  : Partition::Ordinary))
                   : read_label(cat.label);
      return LedgerReplacement(std::unexpect,
                               make_rejection(kSharedScopes[d], a, {}, ld(shared[d]->used), delta,
                                              ld(shared[d]->limit)));
    }
  }
  auto left = room(*new_account, path, "pool");
  if (!left) return std::unexpected(left.error());
  const std::int64_t need = same_account ? delta : bytes;
  if (need > *left) {
    count_rejection(c, LedgerScope::Pool, &new_account->rejections);
    bump(np.rejections);
    return LedgerReplacement(
        std::unexpect,
        make_rejection(LedgerScope::Pool, read_label(np.label), read_label((*npa)->label),
                       ld(new_account->used), need, ld(new_account->limit)));
  }

  held.write();
  Journal& j = c.journal;
  st(j.ticket, ticket.index);
  st(j.ticket_image.pool, ld(t.pool));
  st(j.ticket_image.pool_generation, ld(t.pool_generation));
  st(j.ticket_image.bytes, old->bytes);
  st(j.op, JournalOp::Replace);
  // [J1] release fence: crash order — the journal (images, then op) is in
  // memory before the ticket changes; read by repair() after EOWNERDEAD.
  std::atomic_thread_fence(std::memory_order_release);
  st(t.pool, pool_id.index);
  st(t.pool_generation, pool_id.generation);
  detail::ledger_crash_point(CrashPoint::ReplaceMidTicket);
  st(t.bytes, bytes);
  // [J2] release: crash order — the ticket's new fields are in memory before
  // the journal is retired.
  j.op.store(static_cast<std::uint32_t>(JournalOp::None), std::memory_order_release);
  for (Account* a : shared) {
    st(a->used, ld(a->used) + delta);
    if (old->reserved) st(a->reserved, ld(a->reserved) + delta);
  }
  uncharge(*old->pool_account, old->bytes, old->reserved);
  charge(*new_account, bytes, old->reserved);
  st(old->pool->tickets, ld(old->pool->tickets) - 1);
  bump(np.tickets);
  bump(c.stats.replaces);
  return LedgerReplacement();
}

// ---------------------------------------------------------------- rate admission

Result<LedgerAdmission> Ledger::admit(std::span<const Constraint> constraints,
                                      std::int64_t now_ms) {
  assert(view_.control != nullptr && "use of an empty Ledger handle");
  const View& v = view_;
  token_bucket::Term terms[kMaxConstraints];  // scratch: deliberately not initialised
  const int count = token_bucket::coalesce_into(constraints, terms);
  if (count < 0 || now_ms < 0) [[unlikely]]
    return admit_argument_error(constraints, now_ms);
  const auto n = static_cast<std::size_t>(count);
  if (n == 0) return LedgerAdmission();
  for (std::size_t k = 0; k < n; ++k)
    if (terms[k].bucket >= v.params.max_buckets) [[unlikely]]
      return fail(Errc::InvalidArgument, fmt::format("admit: bucket {} is outside the table of {}",
                                                     terms[k].bucket, v.params.max_buckets));
  const std::string& path = segment_.path();
  if (auto ok = lock(v, path); !ok) [[unlikely]]
    return std::unexpected(std::move(ok.error()));
  LedgerControl& c = *v.control;
  Held held(c);
  const std::uint32_t bc = ld(c.lock.bucket_count);
  if (bc > v.params.max_buckets) [[unlikely]]
    return corrupt(
        path, fmt::format("bucket count {} exceeds the table of {}", bc, v.params.max_buckets));
  token_bucket::Level before[kMaxConstraints];  // scratch, as above
  token_bucket::Level after[kMaxConstraints];
  for (std::size_t k = 0; k < n; ++k) {
    const std::uint32_t bi = terms[k].bucket;
    if (bi >= bc) [[unlikely]]
      return fail(Errc::InvalidArgument,
                  fmt::format("admit: bucket {} is not defined ({} are)", bi, bc));
    Bucket& b = v.buckets[bi];
    const std::int64_t rate = ld(b.rate), burst = ld(b.burst);
    const std::uint32_t started = ld(b.started);
    before[k] = token_bucket::Level{ld(b.tokens), ld(b.frac), started != 0, ld(b.last_ms)};
    if (rate < 0 || burst < 0 || before[k].tokens < 0 ||
        before[k].frac >= token_bucket::kUnitsPerToken || started > 1) [[unlikely]]
      return corrupt(
          path, fmt::format("bucket {}: rate {} burst {} tokens {} fraction {} is impossible", bi,
                            rate, burst, before[k].tokens, before[k].frac));
    after[k] = token_bucket::refill(before[k], rate, burst, now_ms);
    if (terms[k].cost > after[k].tokens) [[unlikely]]
      return admit_refused(c, b, burst, after[k].tokens, terms[k].cost);
    after[k].tokens -= terms[k].cost;
  }
  held.write();
  Journal& j = c.journal;
  for (std::size_t k = 0; k < n; ++k) {
    BucketImage& img = j.buckets[k];
    st(img.index, terms[k].bucket);
    st(img.tokens, before[k].tokens);
    st(img.frac, before[k].frac);
    st(img.started, before[k].started ? 1u : 0u);
    st(img.last_ms, before[k].last_ms);
  }
  st(j.count, n);
  st(j.op, JournalOp::Admit);
  // [J1] release fence: crash order, as in replace().
  std::atomic_thread_fence(std::memory_order_release);
  for (std::size_t k = 0; k < n; ++k) {
    Bucket& b = v.buckets[terms[k].bucket];
    st(b.tokens, after[k].tokens);
    st(b.frac, after[k].frac);
    st(b.started, 1u);
    st(b.last_ms, after[k].last_ms);
    if (k == 0) detail::ledger_crash_point(CrashPoint::AdmitMidBuckets);
  }
  // [J2] release: crash order, as in replace().
  j.op.store(static_cast<std::uint32_t>(JournalOp::None), std::memory_order_release);
  for (std::size_t k = 0; k < n; ++k) bump(v.buckets[terms[k].bucket].admits);
  bump(c.stats.admits);
  return LedgerAdmission();
}

// ---------------------------------------------------------------- ownership, inspection

Result<std::uint64_t> Ledger::release_all() {
  auto r = release_owned(view_, segment_.path(), owner_, Match::Exact, false, false);
  if (!r) return std::unexpected(r.error());
  return r->tickets;
}

Result<ReclaimReport> Ledger::reclaim(Owner owner) {
  if (owner.slot >= kMaxAttachments)
    return fail(Errc::InvalidArgument,
                fmt::format("reclaim: slot {} is outside the attachment table of {}", owner.slot,
                            kMaxAttachments));
  if (owner == owner_)
    return fail(Errc::InvalidArgument,
                "reclaim: this handle's own tickets are released with release_all()");
  const AttachmentSlot& s = segment_.header().slots[owner.slot];
  // [A'] acquire: pairs with attach()'s release [A]; the slot's fields (pid) are
  // then those of the generation we compare, read relaxed for the message.
  const std::uint32_t generation = s.generation.load(std::memory_order_acquire);
  if (segment_.liveness(owner.slot) == Liveness::Alive && generation == owner.generation)
    return fail(Errc::InvalidArgument,
                fmt::format("reclaim: attachment slot {} generation {} is alive (pid {})",
                            owner.slot, owner.generation, s.pid.load(std::memory_order_relaxed)));
  return release_owned(view_, segment_.path(), owner, Match::Exact, true, true);
}

Result<LedgerSnapshot> Ledger::snapshot() const {
  if (auto ok = lock(view_, segment_.path()); !ok) return std::unexpected(ok.error());
  Held held(*view_.control);
  return read_snapshot(view_);
}

Result<std::vector<TicketInfo>> Ledger::tickets() const {
  if (auto ok = lock(view_, segment_.path()); !ok) return std::unexpected(ok.error());
  Held held(*view_.control);
  std::vector<TicketInfo> out;
  for (std::uint32_t i = 0; i < view_.params.max_tickets; ++i) {
    const TicketSlot& t = view_.tickets[i];
    const std::uint32_t s = ld(t.state);
    if (s == kTicketFree) continue;
    out.push_back(TicketInfo{Ticket{i, ld(t.generation)}, static_cast<TicketState>(s),
                             Owner{ld(t.owner_slot), ld(t.owner_generation)},
                             PoolId{ld(t.pool), ld(t.pool_generation)}, CategoryId{ld(t.category)},
                             ld(t.bytes)});
  }
  return out;
}

Result<std::vector<std::string>> Ledger::verify() const {
  const std::vector<SlotInfo> slots = segment_.slots();
  if (auto ok = lock(view_, segment_.path()); !ok) return std::unexpected(ok.error());
  Held held(*view_.control);
  return verify_tables(view_, slots);
}

// ---------------------------------------------------------------- test hook

namespace detail {
std::atomic<test_hooks::LedgerCrashHook> ledger_crash_hook{nullptr};
}  // namespace detail

void test_hooks::set_ledger_crash_hook(LedgerCrashHook hook) noexcept {
  detail::ledger_crash_hook.store(hook, std::memory_order_relaxed);
}

}  // namespace shm
