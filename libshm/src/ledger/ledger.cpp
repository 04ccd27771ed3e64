// The Ledger handle: lifetime (create, open, bind, shutdown), the definitions
// of categories, buckets and pools, and inspection. Accounting (reserve,
// commit, release, replace, admit) is in accounting.cpp, crash repair and
// verification in repair.cpp.
#include "internal.hpp"
#include "segment/size_check.hpp"

#include "format/format.hpp"

#include <cassert>
#include <cstdlib>
#include <utility>

namespace shm {

using namespace ledger;
using namespace ledger::internal;
using CrashPoint = test_hooks::LedgerCrashPoint;

namespace {

Result<CategoryId> define_category_held(const View& v, Held& held, const CategorySpec& spec,
                                        std::string_view path) {
  LedgerControl& c = *v.control;
  const std::uint32_t cc = ld(c.lock.category_count);
  if (cc > v.params.max_categories)
    return corrupt(path, shm::detail::format("category count {} exceeds the table of {}", cc,
                                             v.params.max_categories));
  const auto part = static_cast<std::uint32_t>(spec.partition);
  for (std::uint32_t i = 0; i < cc; ++i) {
    const Category& cat = v.categories[i];
    if (!label_equals(cat.label, spec.label)) continue;
    if (ld(cat.account.limit) == spec.limit && ld(cat.partition) == part) return CategoryId{i};
    return fail(Errc::AlreadyExists,
                shm::detail::format(
                    "category '{}' already exists with limit {} ({}); a duplicate definition "
                    "cannot reset it to limit {} ({})",
                    spec.label, ld(cat.account.limit),
                    to_string(ld(cat.partition) == 1 ? Partition::Control : Partition::Ordinary),
                    spec.limit, to_string(spec.partition)));
  }
  if (cc == v.params.max_categories)
    return fail(Errc::NoFreeSlot,
                shm::detail::format("category table is full ({} of {}); cannot define '{}'", cc,
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
  // [ledger.C] release: publishes the entry to unlocked readers; pairs with [ledger.C'] (acquire).
  c.lock.category_count.store(cc + 1, std::memory_order_release);
  return CategoryId{cc};
}

Result<BucketId> define_bucket_held(const View& v, Held& held, const BucketSpec& spec,
                                    std::string_view path) {
  LedgerControl& c = *v.control;
  const std::uint32_t bc = ld(c.lock.bucket_count);
  if (bc > v.params.max_buckets)
    return corrupt(path, shm::detail::format("bucket count {} exceeds the table of {}", bc,
                                             v.params.max_buckets));
  for (std::uint32_t i = 0; i < bc; ++i) {
    const Bucket& b = v.buckets[i];
    if (!label_equals(b.label, spec.label)) continue;
    if (ld(b.rate) == spec.rate_per_sec && ld(b.burst) == spec.burst) return BucketId{i};
    return fail(Errc::AlreadyExists,
                shm::detail::format(
                    "bucket '{}' already exists with rate {}/s burst {}; a duplicate definition "
                    "cannot reset it to rate {}/s burst {}",
                    spec.label, ld(b.rate), ld(b.burst), spec.rate_per_sec, spec.burst));
  }
  if (bc == v.params.max_buckets)
    return fail(Errc::NoFreeSlot,
                shm::detail::format("bucket table is full ({} of {}); cannot define '{}'", bc,
                                    v.params.max_buckets, spec.label));
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
  // [ledger.B] release: publishes the entry to unlocked readers; pairs with [ledger.B'] (acquire).
  c.lock.bucket_count.store(bc + 1, std::memory_order_release);
  return BucketId{bc};
}

Result<void> validate_category(const CategorySpec& spec) {
  if (auto ok = validate_label("category", spec.label); !ok) return ok;
  if (spec.limit < 0)
    return fail(Errc::InvalidArgument,
                shm::detail::format("category '{}': limit {} is negative", spec.label, spec.limit));
  if (spec.partition != Partition::Ordinary && spec.partition != Partition::Control)
    return fail(Errc::InvalidArgument,
                shm::detail::format("category '{}': unknown partition {}", spec.label,
                                    static_cast<unsigned>(spec.partition)));
  return {};
}

Result<void> validate_bucket(const BucketSpec& spec) {
  if (auto ok = validate_label("bucket", spec.label); !ok) return ok;
  if (auto ok = token_bucket::validate(spec.rate_per_sec, spec.burst); !ok)
    return fail(Errc::InvalidArgument,
                shm::detail::format("bucket '{}': {}", spec.label, ok.error().message));
  return {};
}

}  // namespace

std::unexpected<Error> internal::corrupt(std::string_view path, std::string what) {
  return fail(Errc::Corrupt, shm::detail::format("{}: {}", path, what));
}

std::unexpected<Error> internal::foreign_handle(const View& v, std::string_view path,
                                                std::string_view op, std::string_view what,
                                                std::uint32_t index, std::uint32_t generation,
                                                std::uint64_t ledger) {
  return fail(Errc::ForeignHandle,
              shm::detail::format("{}: {} {}#{} was issued by ledger incarnation {:016x}, not by "
                                  "{} (incarnation {:016x}); a handle works only with the ledger "
                                  "that issued it",
                                  op, what, index, generation, ledger, path, v.incarnation));
}

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
  if (view_.control != nullptr && attachment_.attached() && !attachment_.copied_by_fork()) {
    // Best effort: a failure here (a faulted ledger) leaves the tickets to reclaim.
    try {
      (void)release_owned(view_, segment_, owner_, Match::Exact, Departure::Leave, false);
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
  auto swept =
      release_owned(l.view_, l.segment_, l.owner_, Match::Predecessors, Departure::Leave, true);
  if (!swept) return std::unexpected(swept.error());
  return l;
}

Result<Segment> create_ledger(std::string_view name, const LedgerConfig& config,
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
  return Segment::create(name, spec, options, init);
}

Result<Segment> open_ledger(std::string_view name, const OpenOptions& options) {
  ParamBlock block{};
  const KindSpec spec = kind_spec(LedgerParams{}, true, block);
  auto seg = Segment::open(name, spec, options);
  if (!seg) return seg;
  // Any geometry skips Segment::open's size check: check the size against the
  // segment's own (validated) geometry, as the other kinds do.
  if (auto ok = check_geometry(*seg); !ok) return std::unexpected(std::move(ok.error()));
  return seg;
}

Result<Segment> open_ledger(std::string_view name, const LedgerParams& expected,
                            const OpenOptions& options) {
  if (auto ok = validate(expected); !ok) return std::unexpected(ok.error());
  ParamBlock block{};
  const KindSpec spec = kind_spec(expected, false, block);
  return Segment::open(name, spec, options);
}

Result<void> ledger::check_geometry(const Segment& seg) {
  auto view = make_view(seg);
  if (!view) return std::unexpected(view.error());
  return shm::detail::check_total_size(seg, view->geometry.data_size, "its ledger parameters need");
}

Result<void> ledger::check_adopted(const Segment& seg) {
  ParamBlock storage{};
  if (auto ok = shm::detail::check_kind(seg, kind_spec(LedgerParams{}, true, storage)); !ok)
    return ok;
  return check_geometry(seg);
}

Result<Ledger> Ledger::create(std::string_view name, const LedgerConfig& config,
                              const CreateOptions& options) {
  auto seg = create_ledger(name, config, options);
  if (!seg) return std::unexpected(std::move(seg.error()));
  return bind(std::move(*seg));
}

Result<Ledger> Ledger::open(std::string_view name, const OpenOptions& options) {
  auto seg = open_ledger(name, options);
  if (!seg) return std::unexpected(std::move(seg.error()));
  return bind(std::move(*seg));
}

Result<Ledger> Ledger::open(std::string_view name, const LedgerParams& expected,
                            const OpenOptions& options) {
  auto seg = open_ledger(name, expected, options);
  if (!seg) return std::unexpected(std::move(seg.error()));
  return bind(std::move(*seg));
}

Result<Ledger> Ledger::attach(Segment segment) {
  if (auto ok = ledger::check_adopted(segment); !ok) return std::unexpected(ok.error());
  return bind(std::move(segment));
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
  // [ledger.C'] acquire: pairs with [ledger.C]; entries below the count are complete and immutable.
  const std::uint32_t cc = view_.control->lock.category_count.load(std::memory_order_acquire);
  for (std::uint32_t i = 0; i < cc && i < view_.params.max_categories; ++i)
    if (label_equals(view_.categories[i].label, label)) return CategoryId{i};
  return fail(Errc::NotFound,
              shm::detail::format("{}: no category '{}' ({} defined)", segment_.path(), label, cc));
}

Result<BucketId> Ledger::bucket(std::string_view label) const {
  assert(view_.control != nullptr && "use of an empty Ledger handle");
  // [ledger.B'] acquire: pairs with [ledger.B]; entries below the count have immutable labels.
  const std::uint32_t bc = view_.control->lock.bucket_count.load(std::memory_order_acquire);
  for (std::uint32_t i = 0; i < bc && i < view_.params.max_buckets; ++i)
    if (label_equals(view_.buckets[i].label, label)) return BucketId{i};
  return fail(Errc::NotFound,
              shm::detail::format("{}: no bucket '{}' ({} defined)", segment_.path(), label, bc));
}

Result<PoolId> Ledger::open_pool(const PoolSpec& spec) {
  assert(view_.control != nullptr && "use of an empty Ledger handle");
  if (auto ok = validate_label("pool", spec.label); !ok) return std::unexpected(ok.error());
  if (spec.accounts.empty() || spec.accounts.size() > kPoolAccounts)
    return fail(Errc::InvalidArgument,
                shm::detail::format("pool '{}': {} accounts, expected 1 to {}", spec.label,
                                    spec.accounts.size(), kPoolAccounts));
  std::array<std::uint64_t, kPoolAccounts> masks{};
  std::uint32_t highest = 0;
  bool any_listed = false;
  for (std::size_t a = 0; a < spec.accounts.size(); ++a) {
    const PoolAccountSpec& acc = spec.accounts[a];
    if (auto ok = validate_label("pool account", acc.label); !ok)
      return std::unexpected(ok.error());
    if (acc.limit < 0)
      return fail(Errc::InvalidArgument,
                  shm::detail::format("pool '{}' account '{}': limit {} is negative", spec.label,
                                      acc.label, acc.limit));
    for (CategoryId c : acc.categories) {
      if (c.index >= view_.params.max_categories)
        return fail(
            Errc::InvalidArgument,
            shm::detail::format("pool '{}' account '{}': category {} is outside the "
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
            shm::detail::format(
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
    return fail(Errc::InvalidArgument,
                shm::detail::format("pool '{}': category {} is not defined ({} are)", spec.label,
                                    highest, cc));
  std::uint32_t slot = view_.params.max_pools;
  for (std::uint32_t i = 0; i < view_.params.max_pools; ++i) {
    const Pool& p = view_.pools[i];
    if (ld(p.state) == kPoolOpen) {
      if (label_equals(p.label, spec.label))
        return fail(Errc::AlreadyExists,
                    shm::detail::format("pool '{}' is already open (pool {}#{})", spec.label, i,
                                        ld(p.generation)));
    } else if (slot == view_.params.max_pools) {
      slot = i;
    }
  }
  if (slot == view_.params.max_pools)
    return fail(Errc::NoFreeSlot, shm::detail::format("all {} pools are open; cannot open '{}'",
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
  // [ledger.P] release: publishes the pool (and, for crash order, its fields before
  // its state); pairs with the acquire [ledger.P'] of unlocked readers.
  p.state.store(kPoolOpen, std::memory_order_release);
  st(c.lock.open_pools, ld(c.lock.open_pools) + 1);
  return PoolId{slot, gen, view_.incarnation};
}

Result<PoolId> Ledger::pool(std::string_view label) const {
  assert(view_.control != nullptr && "use of an empty Ledger handle");
  if (auto ok = lock(view_, segment_.path()); !ok) return std::unexpected(ok.error());
  Held held(*view_.control);
  for (std::uint32_t i = 0; i < view_.params.max_pools; ++i) {
    const Pool& p = view_.pools[i];
    if (ld(p.state) == kPoolOpen && label_equals(p.label, label))
      return PoolId{i, ld(p.generation), view_.incarnation};
  }
  return fail(Errc::NotFound, shm::detail::format("{}: no open pool '{}'", segment_.path(), label));
}

Result<void> Ledger::close_pool(PoolId id) {
  if (id.ledger != view_.incarnation) [[unlikely]]
    return foreign(view_, segment_.path(), "close_pool", id);
  if (id.index >= view_.params.max_pools)
    return fail(Errc::InvalidArgument,
                shm::detail::format("close_pool: pool index {} is outside the table of {}",
                                    id.index, view_.params.max_pools));
  if (auto ok = lock(view_, segment_.path()); !ok) return std::unexpected(ok.error());
  LedgerControl& c = *view_.control;
  Held held(c);
  auto p = open_pool_at(view_, id, "close_pool");
  if (!p) return std::unexpected(p.error());
  if (const std::uint64_t n = ld((*p)->tickets); n != 0)
    return fail(Errc::InvalidArgument,
                shm::detail::format("close_pool: pool '{}' still holds {} tickets; release them "
                                    "first",
                                    read_label((*p)->label), n));
  held.write();
  // [ledger.P2] release: pairs with the acquire [ledger.P'] of unlocked readers.
  (*p)->state.store(static_cast<std::uint32_t>(PoolStatus::Free), std::memory_order_release);
  st(c.lock.open_pools, ld(c.lock.open_pools) - 1);
  return {};
}

// ---------------------------------------------------------------- ownership, inspection

Result<std::uint64_t> Ledger::release_all() {
  auto r = release_owned(view_, segment_, owner_, Match::Exact, Departure::Keep, false);
  if (!r) return std::unexpected(r.error());
  return r->tickets;
}

Result<ReclaimReport> Ledger::reclaim(Owner owner) {
  if (owner.slot >= kMaxAttachments)
    return fail(Errc::InvalidArgument,
                shm::detail::format("reclaim: slot {} is outside the attachment table of {}",
                                    owner.slot, kMaxAttachments));
  if (owner == owner_)
    return fail(Errc::InvalidArgument,
                "reclaim: this handle's own tickets are released with release_all()");
  const AttachmentSlot& s = segment_.header().slots[owner.slot];
  // [seg.A'] acquire: pairs with attach()'s release [seg.A]; the slot's fields (pid) are
  // then those of the generation we compare, read relaxed for the message.
  const std::uint32_t generation = s.generation.load(std::memory_order_acquire);
  if (segment_.liveness(owner.slot) == Liveness::Alive && generation == owner.generation)
    return fail(
        Errc::InvalidArgument,
        shm::detail::format("reclaim: attachment slot {} generation {} is alive (pid {})",
                            owner.slot, owner.generation, s.pid.load(std::memory_order_relaxed)));
  return release_owned(view_, segment_, owner, Match::Exact, Departure::Leave, true);
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
    out.push_back(TicketInfo{Ticket{i, ld(t.generation), view_.incarnation},
                             static_cast<TicketState>(s),
                             Owner{ld(t.owner_slot), ld(t.owner_generation)}, ld(t.offered) != 0,
                             Owner{ld(t.offer_slot), ld(t.offer_generation)},
                             PoolId{ld(t.pool), ld(t.pool_generation), view_.incarnation},
                             CategoryId{ld(t.category)}, ld(t.bytes)});
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
