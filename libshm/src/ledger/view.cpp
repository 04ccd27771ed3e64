// Ledger geometry, parameters, labels and lock-free reads.
#include "internal.hpp"
#include "segment/kind_spec.hpp"

#include "format/format.hpp"

#include <cstring>
#include <limits>

namespace shm {

std::string_view to_string(LedgerScope scope) noexcept {
  switch (scope) {
    case LedgerScope::Tickets:
      return "tickets";
    case LedgerScope::Global:
      return "global";
    case LedgerScope::Partition:
      return "partition";
    case LedgerScope::Category:
      return "category";
    case LedgerScope::Pool:
      return "pool";
    case LedgerScope::Bucket:
      return "bucket";
  }
  return "unknown";
}

std::string_view to_string(Partition partition) noexcept {
  return partition == Partition::Control ? "control" : "ordinary";
}

std::string Rejection::describe() const {
  if (scope == LedgerScope::Bucket)
    return shm::detail::format("bucket '{}' refused a cost of {}: {} tokens available, burst {}",
                               label(), requested, limit - used, limit);
  if (scope == LedgerScope::Tickets)
    return shm::detail::format("ticket limit '{}' refused a reservation: {} live tickets, limit {}",
                               label(), used, limit);
  return shm::detail::format("{} '{}' refused {} bytes: used {}, limit {}", to_string(scope),
                             label(), requested, used, limit);
}

namespace ledger {

using namespace internal;

namespace internal {

Result<void> validate_label(std::string_view what, std::string_view label) {
  if (label.empty() || label.size() > kLabelBytes)
    return fail(Errc::InvalidArgument,
                shm::detail::format("{} label '{}' must have 1 to {} characters", what, label,
                                    kLabelBytes));
  for (char ch : label) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
    if (!ok)
      return fail(Errc::InvalidArgument,
                  shm::detail::format("{} label '{}' contains a character outside [A-Za-z0-9._-]",
                                      what, label));
  }
  return {};
}

void write_label(Label& label, std::string_view text) noexcept {
  char bytes[kLabelBytes] = {};
  if (!text.empty())
    std::memcpy(bytes, text.data(), text.size() < kLabelBytes ? text.size() : kLabelBytes);
  for (std::size_t i = 0; i < kLabelBytes / 8; ++i) {
    std::uint64_t w = 0;
    std::memcpy(&w, bytes + 8 * i, 8);
    st(label.words[i], w);
  }
}

bool label_equals(const Label& label, std::string_view text) noexcept {
  if (text.size() > kLabelBytes) return false;
  char bytes[kLabelBytes] = {};
  if (!text.empty()) std::memcpy(bytes, text.data(), text.size());
  for (std::size_t i = 0; i < kLabelBytes / 8; ++i) {
    std::uint64_t w = 0;
    std::memcpy(&w, bytes + 8 * i, 8);
    if (ld(label.words[i]) != w) return false;
  }
  return true;
}

}  // namespace internal

std::string read_label(const Label& label) {
  char bytes[kLabelBytes];
  for (std::size_t i = 0; i < kLabelBytes / 8; ++i) {
    const std::uint64_t w = ld(label.words[i]);
    std::memcpy(bytes + 8 * i, &w, 8);
  }
  std::string out;
  for (char ch : bytes) {
    if (ch == '\0') break;
    // A damaged label never reaches a terminal or a metric name raw.
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
    out.push_back(ok ? ch : '?');
  }
  return out;
}

Result<void> validate(const LedgerParams& p) {
  if (p.global_limit < 0)
    return fail(Errc::InvalidArgument,
                shm::detail::format("global_limit {} is negative", p.global_limit));
  if (p.control_reserve < 0 || p.control_reserve > p.global_limit)
    return fail(Errc::InvalidArgument,
                shm::detail::format("control_reserve {} must be in [0, global_limit {}]",
                                    p.control_reserve, p.global_limit));
  if (p.max_tickets < 1 || p.max_tickets > kMaxTickets)
    return fail(Errc::InvalidArgument, shm::detail::format("max_tickets {} must be in [1, {}]",
                                                           p.max_tickets, kMaxTickets));
  if (p.max_categories < 1 || p.max_categories > kMaxCategories)
    return fail(Errc::InvalidArgument, shm::detail::format("max_categories {} must be in [1, {}]",
                                                           p.max_categories, kMaxCategories));
  if (p.max_pools < 1 || p.max_pools > kMaxPools)
    return fail(Errc::InvalidArgument,
                shm::detail::format("max_pools {} must be in [1, {}]", p.max_pools, kMaxPools));
  if (p.max_buckets > kMaxBuckets)
    return fail(Errc::InvalidArgument, shm::detail::format("max_buckets {} must be in [0, {}]",
                                                           p.max_buckets, kMaxBuckets));
  return {};
}

namespace {

// The same checks as validate(), on a block read from a segment.
std::string block_problem(const ParamBlock& b) {
  LedgerParams p{b.global_limit,   b.control_reserve, b.max_tickets,
                 b.max_categories, b.max_pools,       b.max_buckets};
  if (auto ok = validate(p); !ok) return ok.error().message;
  return {};
}

}  // namespace

KindSpec kind_spec(const LedgerParams& params, bool any, ParamBlock& storage) {
  storage = ParamBlock{params.global_limit,   params.control_reserve, params.max_tickets,
                       params.max_categories, params.max_pools,       params.max_buckets};
  if (any) storage = ParamBlock{-1, -1, 0, 0, 0, 0};
  return shm::detail::block_kind_spec(
      kLedgerKind, "ledger", kFingerprint, storage, any ? 0 : geometry(storage).data_size,
      [](const ParamBlock& f) {
        std::string why = block_problem(f);
        return why.empty() ? why : "segment parameters: " + why;
      },
      [](const ParamBlock& f, const ParamBlock& e, shm::detail::FieldCheck& check) {
        // A negative limit accepts any (0 is a real limit).
        check.field_if(e.global_limit >= 0, "global_limit", f.global_limit, e.global_limit)
            .field_if(e.control_reserve >= 0, "control_reserve", f.control_reserve,
                      e.control_reserve)
            .field("max_tickets", f.max_tickets, e.max_tickets)
            .field("max_categories", f.max_categories, e.max_categories)
            .field("max_pools", f.max_pools, e.max_pools)
            .field("max_buckets", f.max_buckets, e.max_buckets);
      });
}

Result<View> make_view(const Segment& seg) {
  View v;
  if (seg.header().kind != kLedgerKind)
    return fail(Errc::KindMismatch,
                shm::detail::format("{}: kind: segment has {}, expected {} (ledger)", seg.path(),
                                    seg.header().kind, kLedgerKind));
  if (seg.header().fingerprint != kFingerprint)
    return fail(Errc::FingerprintMismatch,
                shm::detail::format(
                    "{}: ledger layout fingerprint: segment has {:#018x}, this build has {:#018x}",
                    seg.path(), seg.header().fingerprint, kFingerprint));
  if (seg.params().size() != sizeof v.params)
    return fail(Errc::ParamMismatch,
                shm::detail::format("{}: parameter block: segment has {} bytes, ledger uses {}",
                                    seg.path(), seg.params().size(), sizeof v.params));
  std::memcpy(&v.params, seg.params().data(), sizeof v.params);
  if (std::string why = block_problem(v.params); !why.empty())
    return fail(Errc::ParamMismatch,
                shm::detail::format("{}: segment parameters: {}", seg.path(), why));
  v.geometry = geometry(v.params);
  if (seg.data().size() < v.geometry.data_size)
    return fail(
        Errc::SizeMismatch,
        shm::detail::format("{}: size: data area has {} bytes, its ledger parameters need {}",
                            seg.path(), seg.data().size(), v.geometry.data_size));
  View out = view_over(v.params, seg.data().data());
  out.incarnation = seg.header().incarnation;
  return out;
}

View internal::view_over(const ParamBlock& params, std::byte* base) noexcept {
  View v;
  v.params = params;
  v.geometry = geometry(params);
  v.control = reinterpret_cast<LedgerControl*>(base);
  v.categories = reinterpret_cast<Category*>(base + v.geometry.categories);
  v.pools = reinterpret_cast<Pool*>(base + v.geometry.pools);
  v.tickets = reinterpret_cast<TicketSlot*>(base + v.geometry.tickets);
  v.free_stack = reinterpret_cast<std::atomic<std::uint32_t>*>(base + v.geometry.free_stack);
  v.buckets = reinterpret_cast<Bucket*>(base + v.geometry.buckets);
  return v;
}

namespace {

AccountState read_account(const Account& a, std::string label) {
  return AccountState{std::move(label), ld(a.limit),   ld(a.used),
                      ld(a.reserved),   ld(a.tickets), ld(a.rejections)};
}

}  // namespace

LedgerSnapshot read_snapshot(const View& v) {
  LedgerSnapshot s;
  const LedgerControl& c = *v.control;
  // [ledger.V2'] acquire: pairs with end_write's release [ledger.V2] (see internal.hpp).
  s.version = c.lock.version.load(std::memory_order_acquire);
  s.params = v.params;
  s.faulted = ld(c.lock.faulted) != 0;
  s.global = read_account(c.global, "global");
  s.partitions[0] = read_account(c.partitions[0], "ordinary");
  s.partitions[1] = read_account(c.partitions[1], "control");
  // [ledger.C'] acquire: pairs with the release [ledger.C] that publishes a category.
  std::uint32_t cc = c.lock.category_count.load(std::memory_order_acquire);
  if (cc > v.params.max_categories) cc = v.params.max_categories;  // damaged: verify reports it
  for (std::uint32_t i = 0; i < cc; ++i) {
    const Category& cat = v.categories[i];
    s.categories.push_back(
        CategoryState{read_account(cat.account, read_label(cat.label)),
                      ld(cat.partition) == 1 ? Partition::Control : Partition::Ordinary});
  }
  for (std::uint32_t i = 0; i < v.params.max_pools; ++i) {
    const Pool& p = v.pools[i];
    // [ledger.P'] acquire: pairs with the release [ledger.P] in open_pool().
    if (p.state.load(std::memory_order_acquire) != static_cast<std::uint32_t>(PoolStatus::Open))
      continue;
    PoolState ps;
    ps.id = PoolId{i, ld(p.generation), v.incarnation};
    ps.label = read_label(p.label);
    ps.owner = Owner{ld(p.owner_slot), ld(p.owner_generation)};
    ps.orphaned = ps.owner.slot == kOrphanedPool;
    ps.ticket_limit = ld(p.ticket_limit);
    ps.tickets = ld(p.tickets);
    ps.rejections = ld(p.rejections);
    std::uint32_t n = ld(p.account_count);
    if (n > kPoolAccounts) n = kPoolAccounts;
    for (std::uint32_t a = 0; a < n; ++a) {
      ps.accounts.push_back(read_account(p.accounts[a].account, read_label(p.accounts[a].label)));
      ps.category_masks.push_back(ld(p.accounts[a].categories));
    }
    s.pools.push_back(std::move(ps));
  }
  // [ledger.B'] acquire: pairs with the release [ledger.B] that publishes a bucket.
  std::uint32_t bc = c.lock.bucket_count.load(std::memory_order_acquire);
  if (bc > v.params.max_buckets) bc = v.params.max_buckets;
  for (std::uint32_t i = 0; i < bc; ++i) {
    const Bucket& b = v.buckets[i];
    s.buckets.push_back(BucketState{
        read_label(b.label), ld(b.rate), ld(b.burst),
        token_bucket::Level{ld(b.tokens), ld(b.frac), ld(b.started) != 0, ld(b.last_ms)},
        ld(b.admits), ld(b.rejections)});
  }
  s.live_tickets = ld(c.lock.live_tickets);
  const Stats& st = c.stats;
  s.stats.reserves = ld(st.reserves);
  s.stats.commits = ld(st.commits);
  s.stats.releases = ld(st.releases);
  s.stats.replaces = ld(st.replaces);
  s.stats.admits = ld(st.admits);
  s.stats.refused_releases = ld(st.refused_releases);
  s.stats.repairs = ld(st.repairs);
  s.stats.reclaimed_tickets = ld(st.reclaimed_tickets);
  for (std::size_t i = 0; i < kScopes; ++i) s.stats.rejections[i] = ld(st.rejections[i]);
  s.stats.offers = ld(st.offers);
  s.stats.handovers = ld(st.handovers);
  return s;
}

}  // namespace ledger
}  // namespace shm
