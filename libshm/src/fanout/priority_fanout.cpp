#include "shm/fanout/priority_fanout.hpp"
#include "shm/platform/clock.hpp"

#include "mpmc/internal.hpp"
#include "segment/kind_spec.hpp"
#include "segment/size_check.hpp"
#include "shm/platform/futex.hpp"
#include "shm/testing/fanout_crash.hpp"  // FanoutCrashPoint (libshm/testing, not installed)

#include "format/format.hpp"

#include <algorithm>
#include <cassert>
#include <cstring>

namespace shm {
namespace fanout {

std::string bitmap_name(std::string_view base) {
  return shm::detail::format("{}.bitmap", base);
}

std::string ring_name(std::string_view base, std::uint32_t priority) {
  return shm::detail::format("{}.prio{}", base, priority);
}

std::string base_of(std::string_view name) {
  constexpr std::string_view suffix = ".bitmap";
  if (name.size() <= suffix.size() || !name.ends_with(suffix)) return {};
  return std::string(name.substr(0, name.size() - suffix.size()));
}

Result<void> validate(const FanoutParams& params) {
  if (params.priorities < 1 || params.priorities > kMaxPriorities)
    return fail(
        Errc::InvalidArgument,
        shm::detail::format("priorities {} must be in [1, {}] (one bit each in a 64-bit bitmap)",
                            params.priorities, kMaxPriorities));
  return mpmc::validate(MpmcParams{params.ring_cells, params.slot_bytes});
}

KindSpec kind_spec(const FanoutParams& params, ParamBlock& storage) {
  storage = ParamBlock{params.priorities, 0, params.ring_cells, params.slot_bytes};
  return shm::detail::block_kind_spec(
      kFanoutBitmapKind, "fanout_bitmap", kFingerprint, storage, sizeof(Control),
      [](const ParamBlock& f) -> std::string {
        if (auto ok = validate(FanoutParams{f.priorities, f.ring_cells, f.slot_bytes}); !ok)
          return shm::detail::format("parameters: segment has invalid ones: {}",
                                     ok.error().message);
        return {};
      },
      [](const ParamBlock& f, const ParamBlock& e, shm::detail::FieldCheck& check) {
        check.field("priorities", f.priorities, e.priorities)
            .field("ring_cells", f.ring_cells, e.ring_cells)
            .field("slot_bytes", f.slot_bytes, e.slot_bytes);
      });
}

}  // namespace fanout

namespace {

std::string resolved_root(const std::string& root) {
  return root.empty() ? default_root() : root;
}

void wake_parked_drainer(fanout::Control& c) noexcept {
  // [fanout.E] release: pairs with the drainer's [fanout.E'] load of the epoch before its re-check.
  c.hot.epoch.fetch_add(1, std::memory_order_release);
  (void)futex_wake(c.hot.epoch, 1);
  c.stats.wakeups.fetch_add(1, std::memory_order_relaxed);  // statistics only
}

// The repair hook of ring `priority` (MpmcRing::set_repair_hook): a handle
// stuck behind a dead holder's cell repaired it. An orphan (a dead taker's
// kept item) is an item under a clear bit, and the ring's wake reaches only
// the ring's own waiters: resurface the bit as resurface() does, and wake a
// drainer parked on the bitmap.
void ring_repaired(void* context, std::uint32_t priority, const MpmcRing& ring) noexcept {
  auto& c = *static_cast<fanout::Control*>(context);
  const std::uint64_t bit = std::uint64_t{1} << priority;
  // [fanout.B1] seq_cst, then [fanout.C] (has_claimed_items), as in resurface().
  if ((c.hot.bitmap.load(std::memory_order_seq_cst) & bit) != 0 || !ring.has_claimed_items())
    return;
  c.hot.bitmap.fetch_or(bit, std::memory_order_seq_cst);
  // [fanout.D1] seq_cst: whoever sets a bit checks for parked drainers.
  if (c.hot.waiters.any()) wake_parked_drainer(c);
}

}  // namespace

Result<PriorityFanout> PriorityFanout::bind(std::string_view base, Segment bitmap,
                                            std::vector<MpmcRing> rings, const RoleSpec& role) {
  if (bitmap.data().size() < sizeof(fanout::Control))
    return fail(Errc::Corrupt,
                shm::detail::format("{}: data area has {} bytes, the bitmap needs {}",
                                    bitmap.path(), bitmap.data().size(), sizeof(fanout::Control)));
  auto attachment = bitmap.attach(role);
  if (!attachment) return std::unexpected(attachment.error());
  PriorityFanout f;
  f.segment_ = std::move(bitmap);
  f.attachment_ = std::move(*attachment);
  f.control_ = reinterpret_cast<fanout::Control*>(f.segment_.data().data());
  f.rings_ = std::move(rings);
  f.k_ = static_cast<std::uint32_t>(f.rings_.size());
  f.slot_ = static_cast<std::uint32_t>(f.attachment_.slot());
  f.base_ = std::string(base);
  // The bitmap's mapping outlives the rings' handles (both are the fanout's).
  for (std::uint32_t i = 0; i < f.k_; ++i)
    f.rings_[i].set_repair_hook(&ring_repaired, f.control_, i);
  // A previous holder of our slot may have died parked: its waiter bit is ours now.
  (void)f.control_->hot.waiters.clear(f.slot_);
  // A submitter may have died between its ring commit and its bit (the next
  // attacher's share of the repair; the kind's reclaim does the same).
  (void)f.resurface();
  return f;
}

Result<FanoutSegments> create_fanout(std::string_view base, const FanoutParams& params,
                                     const CreateOptions& options) {
  if (auto ok = fanout::validate(params); !ok) return std::unexpected(ok.error());
  if (auto ok = validate_name(fanout::bitmap_name(base)); !ok) return std::unexpected(ok.error());
  if (auto ok = validate_name(fanout::ring_name(base, params.priorities - 1)); !ok)
    return std::unexpected(ok.error());
  FanoutSegments made;
  made.base = std::string(base);
  made.rings.reserve(params.priorities);
  auto undo = [&] {
    for (auto& r : made.rings) (void)r.unlink();
  };
  for (std::uint32_t i = 0; i < params.priorities; ++i) {
    auto r = create_mpmc_ring(fanout::ring_name(base, i), {params.ring_cells, params.slot_bytes},
                              options);
    if (!r) {
      undo();
      return std::unexpected(r.error());
    }
    made.rings.push_back(std::move(*r));
  }
  fanout::ParamBlock block{};
  const KindSpec spec = fanout::kind_spec(params, block);
  auto seg = Segment::create(fanout::bitmap_name(base), spec, options,
                             [&](std::span<std::byte> data) -> Result<void> {
                               auto* ctl = reinterpret_cast<fanout::Control*>(data.data());
                               for (std::uint32_t i = 0; i < params.priorities; ++i)
                                 ctl->rings.incarnation[i] = made.rings[i].header().incarnation;
                               return {};
                             });
  if (!seg) {
    undo();
    return std::unexpected(seg.error());
  }
  made.bitmap = std::move(*seg);
  return made;
}

namespace {

// The rings of a fanout whose bitmap is `bitmap`: each must be the ring the
// bitmap was created with (its incarnation).
Result<void> check_rings(std::string_view base, const Segment& bitmap,
                         std::span<const Segment> rings) {
  fanout::ParamBlock found{};
  std::memcpy(&found, bitmap.params().data(), sizeof found);
  if (rings.size() != found.priorities)
    return fail(Errc::ParamMismatch,
                shm::detail::format("fanout '{}': {} ring segments given, the bitmap has {} "
                                    "priorities",
                                    base, rings.size(), found.priorities));
  const auto* ctl = reinterpret_cast<const fanout::Control*>(bitmap.data().data());
  for (std::uint32_t i = 0; i < found.priorities; ++i) {
    const std::uint64_t inc = rings[i].header().incarnation;
    if (inc != ctl->rings.incarnation[i])
      return fail(
          Errc::ParamMismatch,
          shm::detail::format("{}: incarnation: segment has {:016x}, the fanout's bitmap expects "
                              "{:016x} (the ring was re-created on its own)",
                              rings[i].path(), inc, ctl->rings.incarnation[i]));
  }
  return {};
}

}  // namespace

Result<FanoutSegments> open_fanout(std::string_view base, const FanoutParams& expected,
                                   const OpenOptions& options) {
  if (expected.priorities > fanout::kMaxPriorities)
    return fail(Errc::InvalidArgument,
                shm::detail::format("priorities {} must be in [1, {}]", expected.priorities,
                                    fanout::kMaxPriorities));
  fanout::ParamBlock block{};
  const KindSpec spec = fanout::kind_spec(expected, block);
  auto seg = Segment::open(fanout::bitmap_name(base), spec, options);
  if (!seg) {
    if (seg.error().code == Errc::NotFound)
      return fail(Errc::NotFound,
                  shm::detail::format("fanout '{}': {}", base, seg.error().message));
    return std::unexpected(seg.error());
  }
  fanout::ParamBlock found{};
  std::memcpy(&found, seg->params().data(), sizeof found);
  FanoutSegments opened;
  opened.base = std::string(base);
  opened.rings.reserve(found.priorities);
  for (std::uint32_t i = 0; i < found.priorities; ++i) {
    const std::string name = fanout::ring_name(base, i);
    auto r = open_mpmc_ring(name, {found.ring_cells, found.slot_bytes}, options);
    if (!r) {
      if (r.error().code == Errc::NotFound)
        return fail(Errc::NotFound,
                    shm::detail::format("fanout '{}': ring file '{}' of priority {} is "
                                        "missing ({})",
                                        base, name, i, r.error().message));
      return std::unexpected(r.error());
    }
    opened.rings.push_back(std::move(*r));
  }
  if (auto ok = check_rings(base, *seg, opened.rings); !ok) return std::unexpected(ok.error());
  opened.bitmap = std::move(*seg);
  return opened;
}

Result<void> fanout::check_adopted(const FanoutSegments& s) {
  fanout::ParamBlock storage{};
  if (auto ok = shm::detail::check_kind(s.bitmap, fanout::kind_spec(FanoutParams{}, storage)); !ok)
    return ok;
  fanout::ParamBlock found{};
  std::memcpy(&found, s.bitmap.params().data(), sizeof found);
  if (auto ok = validate(FanoutParams{found.priorities, found.ring_cells, found.slot_bytes}); !ok)
    return ok;
  if (auto ok = shm::detail::check_total_size(s.bitmap, sizeof(Control), "the fanout bitmap needs");
      !ok)
    return ok;
  for (const Segment& r : s.rings) {
    if (auto ok = mpmc::check_adopted(r); !ok) return ok;
    mpmc::ParamBlock ring{};
    std::memcpy(&ring, r.params().data(), sizeof ring);
    if (ring.capacity != found.ring_cells || ring.slot_bytes != found.slot_bytes)
      return fail(Errc::ParamMismatch,
                  shm::detail::format("{}: capacity {} x slot size {}, the fanout's bitmap "
                                      "expects {} x {}",
                                      r.path(), ring.capacity, ring.slot_bytes, found.ring_cells,
                                      found.slot_bytes));
  }
  return check_rings(s.base, s.bitmap, s.rings);
}

Result<PriorityFanout> PriorityFanout::adopt(Result<FanoutSegments> segments, Roles roles) {
  if (!segments) return std::unexpected(std::move(segments.error()));
  if (!segments->bitmap.writable())
    return fail(
        Errc::InvalidArgument,
        shm::detail::format("fanout '{}': a handle needs writable mappings", segments->base));
  std::vector<MpmcRing> rings;
  rings.reserve(segments->rings.size());
  for (Segment& seg : segments->rings) {
    auto r = MpmcRing::adopt(std::move(seg), roles.ring);
    if (!r) return std::unexpected(std::move(r.error()));
    rings.push_back(std::move(*r));
  }
  return bind(segments->base, std::move(segments->bitmap), std::move(rings), roles.bitmap);
}

Result<PriorityFanout> PriorityFanout::attach_checked(FanoutSegments segments, Roles roles) {
  if (auto ok = fanout::check_adopted(segments); !ok) return std::unexpected(ok.error());
  return adopt(std::move(segments), roles);
}

Result<PriorityFanout> PriorityFanout::create_with(std::string_view base,
                                                   const FanoutParams& params,
                                                   const CreateOptions& options, Roles roles) {
  auto made = create_fanout(base, params, options);
  if (!made) return std::unexpected(std::move(made.error()));
  // Created by this call: removed again when it cannot be attached.
  auto f = adopt(std::move(*made), roles);
  if (!f) (void)unlink(base, options.root);
  return f;
}

Result<PriorityFanout> PriorityFanout::open_with(std::string_view base,
                                                 const FanoutParams& expected,
                                                 const OpenOptions& options, Roles roles) {
  if (options.read_only)
    return fail(Errc::InvalidArgument,
                shm::detail::format("fanout '{}': a handle needs writable mappings", base));
  return adopt(open_fanout(base, expected, options), roles);
}

Result<PriorityFanout> PriorityFanout::create(std::string_view base, const FanoutParams& params,
                                              const CreateOptions& options) {
  return create_with(base, params, options, {fanout::kPeerRole, mpmc::kPeerRole});
}

Result<PriorityFanout> PriorityFanout::open(std::string_view base, const FanoutParams& expected,
                                            const OpenOptions& options) {
  return open_with(base, expected, options, {fanout::kPeerRole, mpmc::kPeerRole});
}

Result<PriorityFanout> PriorityFanout::attach(FanoutSegments segments) {
  return attach_checked(std::move(segments), {fanout::kPeerRole, mpmc::kPeerRole});
}

Result<FanoutProducer> FanoutProducer::create(std::string_view base, const FanoutParams& params,
                                              const CreateOptions& options) {
  auto f = create_with(base, params, options, {fanout::kSubmitterRole, mpmc::kProducerRole});
  if (!f) return std::unexpected(std::move(f.error()));
  return FanoutProducer(std::move(*f));
}

Result<FanoutProducer> FanoutProducer::open(std::string_view base, const FanoutParams& expected,
                                            const OpenOptions& options) {
  auto f = open_with(base, expected, options, {fanout::kSubmitterRole, mpmc::kProducerRole});
  if (!f) return std::unexpected(std::move(f.error()));
  return FanoutProducer(std::move(*f));
}

Result<FanoutProducer> FanoutProducer::attach(FanoutSegments segments) {
  auto f = attach_checked(std::move(segments), {fanout::kSubmitterRole, mpmc::kProducerRole});
  if (!f) return std::unexpected(std::move(f.error()));
  return FanoutProducer(std::move(*f));
}

Result<FanoutConsumer> FanoutConsumer::create(std::string_view base, const FanoutParams& params,
                                              const CreateOptions& options) {
  auto f = create_with(base, params, options, {fanout::kDrainerRole, mpmc::kConsumerRole});
  if (!f) return std::unexpected(std::move(f.error()));
  return FanoutConsumer(std::move(*f));
}

Result<FanoutConsumer> FanoutConsumer::open(std::string_view base, const FanoutParams& expected,
                                            const OpenOptions& options) {
  auto f = open_with(base, expected, options, {fanout::kDrainerRole, mpmc::kConsumerRole});
  if (!f) return std::unexpected(std::move(f.error()));
  return FanoutConsumer(std::move(*f));
}

Result<FanoutConsumer> FanoutConsumer::attach(FanoutSegments segments) {
  auto f = attach_checked(std::move(segments), {fanout::kDrainerRole, mpmc::kConsumerRole});
  if (!f) return std::unexpected(std::move(f.error()));
  return FanoutConsumer(std::move(*f));
}

Result<void> PriorityFanout::unlink(std::string_view base, const std::string& root) {
  bool removed = false;
  auto drop = [&](const std::string& name) -> Result<void> {
    auto ok = Segment::unlink(name, root);
    if (ok) {
      removed = true;
      return {};
    }
    if (ok.error().code == Errc::NotFound) return {};
    return ok;
  };
  // The bitmap first: openers fail fast instead of finding half the rings.
  if (auto ok = drop(fanout::bitmap_name(base)); !ok) return ok;
  for (std::uint32_t i = 0; i < fanout::kMaxPriorities; ++i)
    if (auto ok = drop(fanout::ring_name(base, i)); !ok) return ok;
  if (!removed)
    return fail(Errc::NotFound,
                shm::detail::format("fanout '{}' not found in {}", base, resolved_root(root)));
  return {};
}

std::uint64_t PriorityFanout::ring_cells() const noexcept {
  return rings_.empty() ? 0 : rings_.front().ring_cells();
}

std::uint64_t PriorityFanout::slot_bytes() const noexcept {
  return rings_.empty() ? 0 : rings_.front().slot_bytes();
}

FanoutSnapshot PriorityFanout::snapshot() const {
  FanoutSnapshot s;
  s.priorities = k_;
  s.ring_cells = ring_cells();
  s.slot_bytes = slot_bytes();
  // Relaxed: observed values and counters; nothing is read on their strength.
  s.bitmap = control_->hot.bitmap.load(std::memory_order_relaxed);
  s.stale_retries = control_->stats.stale_retries.load(std::memory_order_relaxed);
  s.parks = control_->stats.parks.load(std::memory_order_relaxed);
  s.wakeups = control_->stats.wakeups.load(std::memory_order_relaxed);
  s.rings.reserve(rings_.size());
  for (const MpmcRing& r : rings_) s.rings.push_back(r.snapshot());
  return s;
}

std::uint64_t PriorityFanout::active_priorities() const noexcept {
  const std::uint64_t all = k_ == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << k_) - 1;
  // Acquire: pairs with the submitters' seq_cst fetch_or (a hint either way).
  return control_->hot.bitmap.load(std::memory_order_acquire) & all;
}

std::unexpected<Error> PriorityFanout::out_of_bounds(std::uint32_t priority) const {
  return fail(Errc::PriorityOutOfBounds,
              shm::detail::format("priority {} is out of bounds for fanout '{}' with {} priorities "
                                  "(0..{}, 0 is the lowest)",
                                  priority, base_, k_, k_ - 1));
}

std::unexpected<Error> PriorityFanout::bit_out_of_range(std::uint64_t bitmap) const {
  return fail(Errc::Corrupt,
              shm::detail::format("{}: bitmap {:#018x} has a bit set above priority {} "
                                  "(the fanout has {} priorities)",
                                  segment_.path(), bitmap, k_ - 1, k_));
}

void PriorityFanout::clear_stale(std::uint32_t priority) noexcept {
  control_->stats.stale_retries.fetch_add(1, std::memory_order_relaxed);  // statistics only
  clear_bit(priority);
}

void PriorityFanout::clear_bit(std::uint32_t priority) noexcept {
  const std::uint64_t bit = std::uint64_t{1} << priority;
  auto& hot = control_->hot;
  // [fanout.B2] seq_cst: see announce() [fanout.B1].
  hot.bitmap.fetch_and(~bit, std::memory_order_seq_cst);
  // [fanout.C] (inside has_claimed_items: a seq_cst load of the ring's tail).
  if (rings_[priority].has_claimed_items()) {
    hot.bitmap.fetch_or(bit, std::memory_order_seq_cst);
    // [fanout.D1] seq_cst: whoever sets a bit checks for parked drainers (see announce()).
    if (hot.waiters.any()) wake_drainers();
  }
}

bool PriorityFanout::resurface() noexcept {
  auto& hot = control_->hot;
  bool set = false;
  for (std::uint32_t p = 0; p < k_; ++p) {
    const std::uint64_t bit = std::uint64_t{1} << p;
    // [fanout.B1] seq_cst, then [fanout.C] (has_claimed_items, a seq_cst load
    // of the ring's tail): as in announce() and clear_bit(), a claim that is
    // not visible here is followed by its submitter's own [fanout.B1].
    if ((hot.bitmap.load(std::memory_order_seq_cst) & bit) != 0) continue;
    if (!rings_[p].has_claimed_items()) continue;
    hot.bitmap.fetch_or(bit, std::memory_order_seq_cst);
    set = true;
  }
  // [fanout.D1] seq_cst: whoever sets a bit checks for parked drainers.
  if (set && hot.waiters.any()) wake_drainers();
  return set;
}

void PriorityFanout::wake_drainers() noexcept {
  wake_parked_drainer(*control_);
}

Result<bool> PriorityFanout::submit(std::uint32_t priority, std::span<const std::byte> payload,
                                    std::chrono::nanoseconds timeout) {
  const detail::EndpointGuard::Scope scope(guard_, detail::kFanoutGuardName);
  if (priority >= k_) return out_of_bounds(priority);
  auto r = rings_[priority].push(payload, timeout);
  if (!r || !*r) return r;
  if (detail::fanout_crash_armed.load(std::memory_order_relaxed)) [[unlikely]]
    detail::fanout_crash_point(detail::kCrashSubmitAfterRingCommit);
  announce(priority);
  return true;
}

template <class R, class Attempt>
R PriorityFanout::park_until(std::chrono::nanoseconds timeout, Attempt&& attempt) {
  const auto deadline = ::shm::detail::deadline_after(timeout);
  const auto done = [](const R& r) { return !r || *r; };
  // The fanout waits as its MPMC rings do: same spin budget and backoff.
  if (auto r = detail::spin(mpmc::internal::kSpins, attempt, done)) return std::move(*r);
  auto& hot = control_->hot;
  control_->stats.parks.fetch_add(1, std::memory_order_relaxed);  // statistics only
  R r = typename R::value_type{};
  // [fanout.E'] (the acquire load of the epoch in detail::park) pairs with a waker's
  // [fanout.E]. [fanout.D] (the announcement, re-asserted every round) is the Dekker pair of
  // [fanout.D1]. [fanout.D2] seq_cst below: a bit set before [fanout.D] in the total order shows
  // there (a push in flight, or a ring whose held cell awaits repair): poll
  // instead of sleeping; a bit set after [fanout.D] is followed by its setter seeing
  // our bit.
  mpmc::internal::park_announced(
      hot.epoch, hot.waiters, slot_, deadline,
      [&] {
        r = attempt();
        return done(r);
      },
      // An empty bitmap: before sleeping, look once at every ring (bounded:
      // K loads per park round). A ring with items and a clear bit was left
      // by a submitter that died before its bit: set it and poll.
      [&] { return hot.bitmap.load(std::memory_order_seq_cst) != 0 || resurface(); },
      [&] { attachment_.heartbeat(); });
  return r;
}

Result<std::optional<Popped>> PriorityFanout::pop_highest(std::span<std::byte> out,
                                                          std::chrono::nanoseconds timeout) {
  const detail::EndpointGuard::Scope scope(guard_, detail::kFanoutGuardName);
  return park_until<Result<std::optional<Popped>>>(timeout, [&] { return pop_once(out); });
}

Result<std::optional<Taken>> PriorityFanout::take_once() {
  assert(taken_ == kNoTake && "take while an earlier take is not released");
  std::span<const std::byte> payload;
  auto p = highest([&](MpmcRing& ring) -> Result<bool> {
    auto r = ring.try_take();
    if (!r) return std::unexpected(std::move(r.error()));
    if (*r) payload = **r;
    return r->has_value();
  });
  if (!p) return std::unexpected(std::move(p.error()));
  if (!*p) return std::optional<Taken>{};
  taken_ = **p;
  return std::optional<Taken>{Taken{**p, payload}};
}

Result<std::optional<Taken>> PriorityFanout::try_take_highest() {
  const detail::EndpointGuard::Scope scope(guard_, detail::kFanoutGuardName);
  return take_once();
}

Result<std::optional<Taken>> PriorityFanout::take_highest(std::chrono::nanoseconds timeout) {
  const detail::EndpointGuard::Scope scope(guard_, detail::kFanoutGuardName);
  return park_until<Result<std::optional<Taken>>>(timeout, [&] { return take_once(); });
}

void PriorityFanout::release() noexcept {
  const detail::EndpointGuard::Scope scope(guard_, detail::kFanoutGuardName);
  assert(taken_ != kNoTake && "release() without a take");
  if (taken_ == kNoTake) return;  // a contract breach: nothing to release
  rings_[taken_].release();
  taken_ = kNoTake;
}

Result<std::optional<std::size_t>> PriorityFanout::pop_priority(std::uint32_t priority,
                                                                std::span<std::byte> out,
                                                                std::chrono::nanoseconds timeout) {
  const detail::EndpointGuard::Scope scope(guard_, detail::kFanoutGuardName);
  if (priority >= k_) return out_of_bounds(priority);
  auto r = rings_[priority].pop(out, timeout);
  if (r && *r && rings_[priority].popped_last()) clear_bit(priority);
  return r;
}

void PriorityFanout::heartbeat() noexcept {
  attachment_.heartbeat();
  for (MpmcRing& r : rings_) r.heartbeat();
}

mpmc::RepairReport PriorityFanout::repair() const {
  mpmc::RepairReport total;
  for (const MpmcRing& r : rings_) {
    mpmc::RepairReport one = r.repair();
    total.repaired_pushes += one.repaired_pushes;
    total.repaired_pops += one.repaired_pops;
    total.held_by_live += one.held_by_live;
    for (auto& a : one.actions)
      total.actions.push_back(shm::detail::format("{}: {}", r.segment().name(), a));
  }
  return total;
}

// ---------------------------------------------------------------- test hook

namespace detail {
static_assert(kCrashSubmitAfterRingCommit ==
              static_cast<std::uint8_t>(test_hooks::FanoutCrashPoint::SubmitAfterRingCommit));
std::atomic<bool> fanout_crash_armed{false};
namespace {
std::atomic<test_hooks::FanoutCrashHook> fanout_crash_hook{nullptr};
}  // namespace

void fanout_crash_point(std::uint8_t point) noexcept {
  // Relaxed: installed before the operations it should see (see the hook's header).
  if (const auto hook = fanout_crash_hook.load(std::memory_order_relaxed))
    hook(static_cast<test_hooks::FanoutCrashPoint>(point));
}
}  // namespace detail

void test_hooks::set_fanout_crash_hook(FanoutCrashHook hook) noexcept {
  // Relaxed: see fanout_crash_point().
  detail::fanout_crash_hook.store(hook, std::memory_order_relaxed);
  detail::fanout_crash_armed.store(hook != nullptr, std::memory_order_relaxed);
}

}  // namespace shm
