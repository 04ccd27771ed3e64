// The relay's spill store: rebuilding the manifest from the directory at
// create, sealing the oldest entries into a page, repairing an interrupted
// seal, finishing acknowledgements, Ttl expiry. The protocol is the spill note
// in shm/relay/layout.hpp; the page format is shm/spill/page.hpp.
#include "internal.hpp"
#include "shm/platform/clock.hpp"

#include "format/format.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <algorithm>
#include <cstring>
#include <span>
#include <unordered_map>
#include <vector>

namespace shm {

namespace detail {
std::atomic<test_hooks::SpillCrashHook> spill_crash_hook{nullptr};
}  // namespace detail

void test_hooks::set_spill_crash_hook(SpillCrashHook hook) noexcept {
  // relaxed: installed before the operations it watches start (see the header).
  detail::spill_crash_hook.store(hook, std::memory_order_relaxed);
}

namespace relay::internal {
namespace {

using CrashPoint = test_hooks::SpillCrashPoint;

// The message for an intent state the repair and verify refuse (1 was the
// seal's before seals got their own record).
constexpr const char* kIntentProblem =
    "spill intent state {} is not 0 (none), 2 (acknowledge), 3 (expire) or 4 (refuse)";

void seal_step(spill::SealStep step) {
  switch (step) {
    case spill::SealStep::ContentWritten:
      return ::shm::detail::spill_crash_point(CrashPoint::ContentWritten);
    case spill::SealStep::HeaderWritten:
      return ::shm::detail::spill_crash_point(CrashPoint::HeaderWritten);
    case spill::SealStep::Renamed:
      return ::shm::detail::spill_crash_point(CrashPoint::Renamed);
    case spill::SealStep::DirSynced:
      return ::shm::detail::spill_crash_point(CrashPoint::DirSynced);
  }
}

void fill_slot(ManifestSlot& s, const spill::PageHeader& h, std::uint64_t file_bytes) {
  st(s.page_id, h.page_id);
  st(s.first_seq, h.first_seq);
  st(s.last_seq, h.last_seq);
  st(s.first_order, h.first_order);
  st(s.last_order, h.last_order);
  st(s.records, h.records);
  st(s.ops, h.ops);
  st(s.file_bytes, file_bytes);
  st(s.sealed_ns, h.sealed_ns);
  st(s.content_crc, h.content_crc);
}

ManifestSlot* free_slot(const View& v) noexcept {
  for (ManifestSlot& s : v.spill->slots)
    if (ld(s.state) == static_cast<std::uint32_t>(SlotState::Free)) return &s;
  return nullptr;
}

// The counter a spill intent's change bumps.
std::atomic<std::uint64_t>& counter_of(SpillArea& a, SpillIntent kind) noexcept {
  switch (kind) {
    case SpillIntent::Ack:
      return a.counters.pages_acked;
    case SpillIntent::Expire:
      return a.counters.pages_expired;
    case SpillIntent::Refuse:
      return a.counters.pages_refused;
    case SpillIntent::Seal:
    case SpillIntent::None:
      break;
  }
  return a.counters.pages_sealed;
}

// Whether the interrupted intent's counter still holds the value recorded
// when the intent was opened: its holder died before the bump. The holder
// bumps it once at most, and n and n + 1 differ in their low 32 bits.
bool uncounted(SpillArea& a, SpillIntent kind) noexcept {
  return static_cast<std::uint32_t>(ld(counter_of(a, kind))) == ld(a.intent_count);
}

}  // namespace

void recompute_cold(const View& v) noexcept {
  SpillArea& a = *v.spill;
  std::uint64_t pages = 0, bytes = 0, ops = 0;
  for (const ManifestSlot& s : a.slots) {
    if (ld(s.state) != static_cast<std::uint32_t>(SlotState::Sealed)) continue;
    ++pages;
    bytes += ld(s.file_bytes);
    ops += ld(s.ops);
  }
  st(a.cold_pages, pages);
  st(a.cold_bytes, bytes);
  st(a.cold_ops, ops);
}

void begin_intent(SpillArea& a, SpillIntent kind, std::uint64_t page,
                  std::uint64_t last_order) noexcept {
  st(a.intent_page, page);
  st(a.intent_last_order, last_order);
  st(a.intent_count, static_cast<std::uint32_t>(ld(counter_of(a, kind))));
  // A kill stops this process between two instructions: the compiler must
  // not sink the record's stores below the state store, nor hoist the
  // change's stores above it.
  std::atomic_signal_fence(std::memory_order_seq_cst);
  // [spill.I] release: the record above is complete before the state says
  // valid; pairs with the next locker's acquisition of the robust mutex (the
  // repair reads the intent under it, EOWNERDEAD or not).
  a.intent_state.store(static_cast<std::uint32_t>(kind), std::memory_order_release);
  std::atomic_signal_fence(std::memory_order_seq_cst);
}

void end_intent(SpillArea& a) noexcept {
  // The change and its counter's bump stay above the clear (a kill between
  // them must find the intent still valid).
  std::atomic_signal_fence(std::memory_order_seq_cst);
  st(a.intent_state, static_cast<std::uint32_t>(SpillIntent::None));
}

std::string spill_dir_of(const View& v) {
  const char* d = v.spill->dir;
  return std::string(d, strnlen(d, kSpillDirBytes - 1));
}

ManifestSlot* find_slot(const View& v, std::uint64_t page_id) noexcept {
  for (ManifestSlot& s : v.spill->slots)
    if (ld(s.state) != static_cast<std::uint32_t>(SlotState::Free) && ld(s.page_id) == page_id)
      return &s;
  return nullptr;
}

ManifestSlot* oldest_slot(const View& v) noexcept {
  // By first order, not by page id: entries a dead or abandoning reader
  // returned are older than pages sealed while it held them, and may be
  // sealed into a later page (see seal_page's gap rule).
  ManifestSlot* best = nullptr;
  for (ManifestSlot& s : v.spill->slots)
    if (ld(s.state) == static_cast<std::uint32_t>(SlotState::Sealed) &&
        (best == nullptr || ld(s.first_order) < ld(best->first_order)))
      best = &s;
  return best;
}

const ManifestSlot* next_slot(const View& v, const ManifestSlot& after) noexcept {
  const ManifestSlot* best = nullptr;
  for (const ManifestSlot& s : v.spill->slots)
    if (ld(s.state) == static_cast<std::uint32_t>(SlotState::Sealed) &&
        ld(s.first_order) > ld(after.first_order) &&
        (best == nullptr || ld(s.first_order) < ld(best->first_order)))
      best = &s;
  return best;
}

void release_slot(const View& v, ManifestSlot& s) noexcept {
  SpillArea& a = *v.spill;
  if (ld(a.cursor_page) == ld(s.page_id)) {
    st(a.cursor_page, 0u);
    st(a.cursor_record, 0u);
  }
  if (ld(a.catch_up_page) == ld(s.page_id)) st(a.catch_up_page, 0u);
  if (ld(a.taken_page) == ld(s.page_id)) {
    st(a.taken_page, 0u);
    st(a.taken_record, 0u);
  }
  st(s.state, static_cast<std::uint32_t>(SlotState::Free));
  recompute_cold(v);
}

namespace {

// Whether the relay segment at `owner` (an absolute path) still holds the
// spill directory `dir`: its file exists, is a relay, and spills into `dir`.
// Anything that cannot be checked (a damaged or foreign file at that path) is
// an error: the caller refuses rather than adopt another relay's pages.
Result<bool> owner_holds(const std::string& owner, const std::string& dir) {
  const std::size_t slash = owner.rfind('/');
  OpenOptions o;
  o.root = slash == 0 ? std::string("/") : owner.substr(0, slash);
  o.read_only = true;
  o.allow_other_owner = true;
  auto seg = Segment::open_any(owner.substr(slash + 1), o);
  if (!seg) {
    if (seg.error().code == Errc::NotFound) return false;  // gone: a stale binding
    return std::unexpected(seg.error());
  }
  if (seg->header().kind != kRelayKind) return false;  // the name now holds something else
  auto v = make_view(*seg);
  if (!v) return std::unexpected(v.error());
  return ld(v->spill->enabled) != 0 && spill_dir_of(*v) == dir;
}

// One relay per spill directory: binds `dir` to the segment being created at
// `self`, refusing a directory another existing relay spills into.
Result<void> claim_dir(const spill::SpillDir& dir, const std::string& self,
                       std::string_view relay_name) {
  auto owner = spill::read_owner(dir);
  if (!owner)
    return fail(owner.error().code, shm::detail::format("relay {}: spill store: {}", relay_name,
                                                        owner.error().message));
  if (*owner && **owner != self) {
    auto held = owner_holds(**owner, dir.path());
    if (!held)
      return fail(
          held.error().code,
          shm::detail::format("relay {}: the spill directory {} is bound to the relay {}, "
                              "which cannot be checked ({}); remove {}/relay.owner if "
                              "that relay is gone",
                              relay_name, dir.path(), **owner, held.error().message, dir.path()));
    if (*held)
      return fail(Errc::RoleTaken,
                  shm::detail::format("relay {}: the spill directory {} belongs to the relay {}, "
                                      "which still exists and spills there: two relays would "
                                      "adopt and delete each other's pages; choose another "
                                      "spill.dir",
                                      relay_name, dir.path(), **owner));
    // Stale: that relay is gone (or no longer spills here): take over.
  }
  if (auto ok = spill::write_owner(dir, self); !ok)
    return fail(ok.error().code,
                shm::detail::format("relay {}: spill store: {}", relay_name, ok.error().message));
  return {};
}

}  // namespace

Result<SpillFloors> init_spill(const View& v, const SpillPolicy& policy, const spill::SpillDir& dir,
                               std::string_view relay_name, const std::string& segment_path) {
  SpillArea& a = *v.spill;
  const std::string& path = dir.path();
  if (auto ok = claim_dir(dir, segment_path, relay_name); !ok) return std::unexpected(ok.error());
  auto listing = spill::list_dir(dir);
  if (!listing) return std::unexpected(listing.error());
  // Torn seals: never renamed, so never recorded anywhere: remove them.
  for (const std::string& t : listing->temps) (void)::unlinkat(dir.fd(), t.c_str(), 0);
  SpillFloors floors;
  std::uint64_t max_id = 0;
  std::uint32_t used = 0;
  for (std::uint64_t id : listing->pages) {
    max_id = std::max(max_id, id);
    auto page = spill::read_page(dir, id);
    if (!page) {
      const std::string why(to_string(page.error().code));
      (void)spill::refuse_file(dir, spill::page_file_name(id), why);
      bump(a.counters.pages_refused);
      log_event(*v.control, EventKind::PageRefused, id, 0);
      continue;
    }
    if (used == kManifestSlots)
      return fail(Errc::TooLarge,
                  shm::detail::format("relay {}: the spill directory {} holds more than {} valid "
                                      "pages (the manifest's bound); drain them with a relay of "
                                      "the old incarnation or move them away",
                                      relay_name, path, kManifestSlots));
    ManifestSlot& s = a.slots[used++];
    fill_slot(s, page->header, spill::kPageHeaderSize + page->header.content_bytes);
    st(s.state, static_cast<std::uint32_t>(SlotState::Sealed));
    floors.next_seq = std::max(floors.next_seq, page->header.last_seq + 1);
    floors.next_order = std::max(floors.next_order, page->header.last_order + 1);
    bump(a.counters.pages_rebuilt);
  }
  (void)spill::sync_dir(dir);
  st(a.enabled, 1u);
  st(a.mode, static_cast<std::uint32_t>(policy.mode));
  st(a.retention, static_cast<std::uint32_t>(policy.retention));
  st(a.rehydrate, static_cast<std::uint32_t>(policy.rehydrate));
  st(a.relay_id, dir.relay_id());
  st(a.page_bytes, policy.page_size);
  st(a.retention_bytes, policy.retention_bytes);
  st(a.retention_ttl_ms, static_cast<std::uint64_t>(policy.ttl.count()));
  st(a.next_page_id, max_id + 1);
  std::memcpy(a.dir, path.data(), path.size());
  a.dir[path.size()] = '\0';
  recompute_cold(v);
  ::shm::detail::spill_crash_point(CrashPoint::DirBound);
  return floors;
}

// What is impossible in the manifest, or empty.
static std::string manifest_problem(const View& v) {
  const SpillArea& a = *v.spill;
  const std::uint64_t next = ld(a.next_page_id);
  for (std::uint32_t n = 0; n < kManifestSlots; ++n) {
    const ManifestSlot& s = a.slots[n];
    const std::uint32_t state = ld(s.state);
    if (state > static_cast<std::uint32_t>(SlotState::Acked))
      return shm::detail::format(
          "spill manifest slot {} has state {}, not free (0), sealed (1) or acked (2)", n, state);
    if (state != static_cast<std::uint32_t>(SlotState::Free) &&
        (ld(s.page_id) == 0 || ld(s.page_id) >= next))
      return shm::detail::format(
          "spill manifest slot {} names page {}, outside [1, {}) (the next page id)", n,
          ld(s.page_id), next);
  }
  return {};
}

namespace {

bool is_spilling(const EntryHead& e) noexcept {
  return ld(e.state) == static_cast<std::uint32_t>(EntryState::Pending) &&
         (ld(e.flags) & kSpilling) != 0;
}

// The low 32 bits of the seal's three counters before its bumps, as the
// seal record keeps them (seal_count, seal_counts).
std::uint64_t packed_counts(const SpillArea& a) noexcept {
  return static_cast<std::uint32_t>(ld(a.counters.entries_spilled)) |
         std::uint64_t{static_cast<std::uint32_t>(ld(a.counters.ops_spilled))} << 32;
}

// Bumps each of the seal's counters that still holds the value recorded when
// the seal began: its sealer died before that bump (each is bumped once per
// seal, by a non-zero amount below 2^32, so "bumped" shows in the low bits).
void count_seal(const View& v, std::uint64_t page, std::uint64_t records, std::uint64_t ops) {
  SpillArea& a = *v.spill;
  const std::uint64_t before = ld(a.seal_counts);
  if (static_cast<std::uint32_t>(ld(a.counters.entries_spilled)) ==
      static_cast<std::uint32_t>(before))
    bump(a.counters.entries_spilled, records);
  if (static_cast<std::uint32_t>(ld(a.counters.ops_spilled)) ==
      static_cast<std::uint32_t>(before >> 32))
    bump(a.counters.ops_spilled, ops);
  if (static_cast<std::uint32_t>(ld(a.counters.pages_sealed)) == ld(a.seal_count)) {
    bump(a.counters.pages_sealed);
    log_event(*v.control, EventKind::Spilled, page, records);
  }
}

// Frees the entries of a recorded page (state Free; the lists, index and
// projections are rebuilt by the caller) and counts the seal where its
// sealer did not. Used by the repair of a dead sealer.
void seal_forward(const View& v, const ManifestSlot& s) {
  SpillArea& a = *v.spill;
  for (std::uint32_t i = 0; i < v.params.capacity; ++i) {
    EntryHead& e = v.entry(i);
    if (!is_spilling(e)) continue;
    st(e.state, static_cast<std::uint32_t>(EntryState::Free));
    std::atomic_signal_fence(std::memory_order_seq_cst);
    st(e.flags, 0u);
  }
  count_seal(v, ld(s.page_id), ld(s.records), ld(s.ops));
  bump(a.counters.rolled_forward);
}

// Reopens the entries of a seal that did not complete: they stay pending,
// closed to merges (a newer open entry may hold their key now), and drain in
// order (or go into a later page).
void seal_back(const View& v) noexcept {
  for (std::uint32_t i = 0; i < v.params.capacity; ++i) {
    EntryHead& e = v.entry(i);
    if (is_spilling(e)) st(e.flags, (ld(e.flags) & ~kSpilling) | kClosed);
  }
}

void clear_seal(SpillArea& a) noexcept {
  // The entries' flags and the manifest are settled before the record says
  // no seal is in flight (a kill between them: the record still names it).
  std::atomic_signal_fence(std::memory_order_seq_cst);
  st(a.seal_state, 0u);
}

}  // namespace

namespace {

spill::PageRecord record_of(const View& v, std::uint32_t i) noexcept {
  const EntryHead& e = v.entry(i);
  return spill::PageRecord{ld(e.key),
                           ld(e.first_seq),
                           ld(e.last_seq),
                           ld(e.op_count),
                           ld(e.order),
                           std::min(ld(e.len), v.params.value_bytes),
                           (ld(e.flags) & kSealed) != 0 ? spill::kRecordRedelivered : 0u};
}

std::span<const std::byte> value_of(const View& v, std::uint32_t i, std::uint32_t len) noexcept {
  return {reinterpret_cast<const std::byte*>(value_at(v, i)), len};
}

// The policy CompactOnWrite merges with, or null when the page is written
// as the entries are (AppendCompact, raw_fifo, a merge that is not
// associative or not registered here).
const MergePolicy* compacting_policy(const View& v) {
  if (static_cast<SpillMode>(ld(v.spill->mode)) != SpillMode::CompactOnWrite) return nullptr;
  auto p = find_merge(ld(v.control->policy));
  if (!p || !(*p)->keyed || !(*p)->flags.associative) return nullptr;
  return *p;
}

// The chosen entries into the page, in drain order. CompactOnWrite
// (docs/spill.md): the entries of one key become one record, their values
// merged in drain order (first and last sequence widen, op counts add up, the
// record takes the first one's place and order). An entry delivered before
// (kSealed: a reader took it and gave it back) is never merged: it stays a
// record of its own and the later entries of its key start a new one, so a
// record never hands the application ops it may have applied together with
// ops it has not (a consumer dropping replays by first_seq would drop the
// new ones with them, a sum would count the old ones twice).
void add_records(const View& v, SealJob& job) {
  const MergePolicy* merge = compacting_policy(v);
  if (merge == nullptr) {
    for (const std::uint32_t i : job.chosen) {
      const spill::PageRecord r = record_of(v, i);
      job.page.add(r, value_of(v, i, r.len));
    }
    return;
  }
  const std::size_t value_bytes = v.params.value_bytes;
  std::vector<spill::PageRecord> records;
  std::vector<std::byte> values(job.chosen.size() * value_bytes), merged(value_bytes);
  std::unordered_map<std::uint64_t, std::size_t> open;  // key -> the record merges go into
  records.reserve(job.chosen.size());
  for (const std::uint32_t i : job.chosen) {
    const spill::PageRecord r = record_of(v, i);
    const std::span<const std::byte> value = value_of(v, i, r.len);
    const bool alone = (r.flags & spill::kRecordRedelivered) != 0;
    if (alone) open.erase(r.key);
    if (auto it = alone ? open.end() : open.find(r.key); it != open.end()) {
      spill::PageRecord& into = records[it->second];
      std::byte* current = values.data() + it->second * value_bytes;
      auto n = combine(*merge, std::span<const std::byte>(current, into.len), value, merged);
      if (n && *n <= value_bytes) {
        std::memcpy(current, merged.data(), *n);
        into.len = static_cast<std::uint32_t>(*n);
        into.first_seq = std::min(into.first_seq, r.first_seq);
        into.last_seq = std::max(into.last_seq, r.last_seq);
        into.op_count += r.op_count;
        continue;
      }
      // A merge that fails here failed nowhere else: the entry keeps its own record.
    }
    if (!alone) open[r.key] = records.size();
    std::memcpy(values.data() + records.size() * value_bytes, value.data(), r.len);
    records.push_back(r);
  }
  for (std::size_t k = 0; k < records.size(); ++k)
    job.page.add(records[k],
                 std::span<const std::byte>(values.data() + k * value_bytes, records[k].len));
}

}  // namespace

Result<SealStart> begin_seal(const View& v, bool log, std::string_view path, SealJob& job) {
  Control& c = *v.control;
  SpillArea& a = *v.spill;
  auto fall_back = [&](EventKind kind, std::uint64_t count) {
    bump(a.counters.fallbacks);
    if (log) log_event(c, kind, 0, count);
    return SealStart::Impossible;
  };
  if (ld(a.seal_state) != 0) return SealStart::InFlight;
  // The manifest and the pending list come from shared memory: damage is
  // Corrupt, never a fallback to Block (which would hide it, park the
  // writers, and could seal over a page id the manifest still names).
  if (std::string why = manifest_problem(v); !why.empty()) return corrupt(path, why);
  if (free_slot(v) == nullptr) return fall_back(EventKind::SpillFallback, kManifestSlots);
  const std::uint64_t stride = spill::record_stride(v.params.value_bytes);
  const std::uint64_t page_bytes = ld(a.page_bytes);
  const std::uint64_t room =
      page_bytes > spill::kPageHeaderSize ? (page_bytes - spill::kPageHeaderSize) / stride : 0;
  const std::uint64_t max_records = std::max<std::uint64_t>(1, room);
  if (static_cast<RetentionKind>(ld(a.retention)) == RetentionKind::BoundedDisk &&
      ld(a.cold_bytes) + spill::kPageHeaderSize + std::min(max_records, ld(c.depth)) * stride >
          ld(a.retention_bytes))
    return fall_back(EventKind::SpillFallback, ld(a.cold_bytes));
  // The oldest pending entries, in drain order, up to the next sealed page's
  // first order: page ranges never overlap and never contain a hot entry, so
  // cold pages by first order merged with the hot head is arrival order.
  const std::uint32_t head = ld(c.head);
  if (head != kNone && head >= v.params.capacity)
    return corrupt(path, shm::detail::format("spill seal: the pending list starts at entry {} "
                                             "(capacity {})",
                                             head, v.params.capacity));
  std::uint64_t gap_end = ~std::uint64_t{0};
  if (head != kNone && head < v.params.capacity)
    for (const ManifestSlot& s : a.slots)
      if (ld(s.state) == static_cast<std::uint32_t>(SlotState::Sealed) &&
          ld(s.first_order) > ld(v.entry(head).order))
        gap_end = std::min(gap_end, ld(s.first_order));
  job.chosen.clear();
  job.page.clear();
  job.page.reserve(max_records * stride);
  for (std::uint32_t i = head; i != kNone && job.chosen.size() < max_records;
       i = ld(v.entry(i).next)) {
    if (i >= v.params.capacity)
      return corrupt(path, shm::detail::format("spill seal: the pending list names entry {} after "
                                               "{} entries (capacity {})",
                                               i, job.chosen.size(), v.params.capacity));
    if (ld(v.entry(i).order) >= gap_end) break;
    job.chosen.push_back(i);
  }
  if (job.chosen.empty())
    return fall_back(EventKind::SpillFallback, 0);  // all in the reader's hands
  // The seal mutex: free, since no seal is in flight; a sealer that died
  // after clearing its record but before releasing it left OwnerDied, with
  // nothing to repair.
  const ::shm::detail::LockResult got = a.seal_mutex.try_lock();
  if (got == ::shm::detail::LockResult::OwnerDied) a.seal_mutex.mark_consistent();
  if (got != ::shm::detail::LockResult::Acquired && got != ::shm::detail::LockResult::OwnerDied)
    return corrupt(path, a.seal_mutex.owner_missing()
                             ? "spill seal: " + ::shm::detail::dead_owner_note("seal", a.seal_mutex)
                             : std::string("spill seal: the seal mutex is held or unusable while "
                                           "no seal is in flight"));
  job.page_id = ld(a.next_page_id);
  job.policy = ld(c.policy);
  st(a.next_page_id, job.page_id + 1);
  st(a.seal_page, job.page_id);
  st(a.seal_count, static_cast<std::uint32_t>(ld(a.counters.pages_sealed)));
  st(a.seal_counts, packed_counts(a));
  std::atomic_signal_fence(std::memory_order_seq_cst);
  // [spill.S] release: the record is complete before it says a seal is in
  // flight; pairs with the relay mutex's acquisition by whoever reads it.
  a.seal_state.store(1u, std::memory_order_release);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  // Closed to merges: the page holds the values copied below; a write to one
  // of these keys opens a new entry, which drains after the page.
  const bool keyed = ld(c.policy) != policy::kRawFifo;
  // A keep_latest key whose value goes to a page is forgotten: the reader's
  // value for it is the page's once the page is read, which the memory does
  // not follow (a commutative policy remembers the page's values when it is
  // recorded, finish_seal).
  const bool forgetting = memory_on(v) && !memory_commutative(v);
  for (std::uint32_t i : job.chosen) {
    EntryHead& e = v.entry(i);
    const std::uint32_t f = ld(e.flags);
    if (forgetting) forget(v, ld(e.key));
    if (keyed && !closed_to_merges(f)) {
      index_erase(v, ld(e.key));
      st(c.pending_keys, ld(c.pending_keys) - 1);
    }
    st(e.flags, f | kSpilling);
  }
  // Closed, then bumped: ops merged into an entry's word before are folded
  // into it (the page holds them), and no later one lands. Then the page
  // is built from the entries as they are now (process-local: nothing
  // shared changes).
  if (merge_words(ld(c.policy), v.params.value_bytes))
    for (std::uint32_t i : job.chosen) (void)rebase(v, i);
  add_records(v, job);
  return SealStart::Started;
}

Result<spill::SealInfo> write_seal(const spill::SpillDir& dir, const SealJob& job) {
  return spill::write_page(dir, job.page_id, job.policy, job.page, seal_step);
}

bool finish_seal(const View& v, const spill::SpillDir& dir, const SealJob& job,
                 const Result<spill::SealInfo>& sealed, bool log) {
  Control& c = *v.control;
  SpillArea& a = *v.spill;
  ManifestSlot* slot = sealed ? free_slot(v) : nullptr;
  if (!sealed || slot == nullptr) {
    seal_back(v);  // nothing recorded, nothing counted (write_page removed its file)
    if (sealed) {
      // No free slot (begin_seal saw one, and slots only free up meanwhile:
      // defensive): the page is not recorded, so it must not stay.
      (void)spill::remove_page(dir, job.page_id);
      bump(a.counters.seal_errors);
    } else if (sealed.error().code == Errc::NoSpace) {
      bump(a.counters.no_space);
      if (log) log_event(c, EventKind::NoSpace, job.page_id, job.page.content().size());
    } else {
      bump(a.counters.seal_errors);
    }
    clear_seal(a);
    a.seal_mutex.unlock();
    bump(a.counters.fallbacks);
    if (log) log_event(c, EventKind::SpillFallback, 0, 0);
    return false;
  }
  spill::PageHeader h{};
  h.page_id = job.page_id;
  h.first_seq = job.page.first_seq();
  h.last_seq = job.page.last_seq();
  h.first_order = job.page.first_order();
  h.last_order = job.page.last_order();
  h.records = job.page.records();
  h.ops = job.page.ops();
  h.sealed_ns = sealed->sealed_ns;
  h.content_crc = sealed->content_crc;
  fill_slot(*slot, h, sealed->file_bytes);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  st(slot->state, static_cast<std::uint32_t>(SlotState::Sealed));  // the commit point
  std::atomic_signal_fence(std::memory_order_seq_cst);
  ::shm::detail::spill_crash_point(CrashPoint::ManifestUpdated);
  // A commutative, idempotent policy remembers what the page will give the
  // reader (the protocol's delivered-value memory): a later write at or
  // below it changes nothing the reader will have.
  const MergePolicy* remembering = nullptr;
  if (memory_on(v) && memory_commutative(v))
    if (auto p = find_merge(ld(c.policy)); p) remembering = *p;
  for (std::uint32_t i : job.chosen) {
    EntryHead& e = v.entry(i);
    // Only what is still this seal's: nothing else frees a spilling entry
    // (a drop_oldest skips them, the reader stops at them), but the check
    // costs nothing and keeps a foreign entry from being freed.
    if (!is_spilling(e)) continue;
    if (remembering != nullptr && ld(e.len) <= v.params.value_bytes)
      remember(v, *remembering, ld(e.key),
               std::span<const std::byte>(reinterpret_cast<const std::byte*>(value_at(v, i)),
                                          ld(e.len)));
    list_unlink(v, i);
    st(c.depth, ld(c.depth) - 1);
    st(c.bytes, ld(c.bytes) - ld(e.len));
    st(c.pending_ops, ld(c.pending_ops) - ld(e.op_count));
    // Free before the flag goes: a kill between the two leaves an entry
    // the repair either frees (still flagged) or finds free, never a pending
    // entry that looks open and would be delivered twice.
    st(e.state, static_cast<std::uint32_t>(EntryState::Free));
    std::atomic_signal_fence(std::memory_order_seq_cst);
    st(e.flags, 0u);
    st(e.next, ld(c.free_head));
    st(c.free_head, i);
  }
  refresh_oldest(v);
  bump(a.counters.entries_spilled, job.page.records());
  bump(a.counters.ops_spilled, job.page.ops());
  bump(a.counters.pages_sealed);
  log_event(c, EventKind::Spilled, job.page_id, job.page.records());
  ::shm::detail::spill_crash_point(CrashPoint::SealCounted);
  clear_seal(a);
  a.seal_mutex.unlock();
  recompute_cold(v);
  return true;
}

void abandon_seal(const View& v) noexcept {
  v.spill->seal_mutex.unlock();
}

bool reap_dead_sealer(const View& v, bool& repaired, std::string& why) {
  SpillArea& a = *v.spill;
  repaired = false;
  if (ld(a.enabled) == 0 || ld(a.seal_state) == 0) return true;
  if (ld(a.seal_state) != 1) {
    why = shm::detail::format("spill seal state {} is neither 0 (none) nor 1 (in flight)",
                              ld(a.seal_state));
    return false;
  }
  const ::shm::detail::LockResult got = a.seal_mutex.try_lock();
  if (got == ::shm::detail::LockResult::Busy) return true;  // the sealer lives: it finishes
  if (got != ::shm::detail::LockResult::Acquired && got != ::shm::detail::LockResult::OwnerDied) {
    why = "the spill seal mutex is unusable";
    return false;
  }
  // The sealer died (or gave up without finishing: abandon_seal). The
  // manifest decides: recorded, forward; not, back (and its file goes).
  const std::uint64_t id = ld(a.seal_page);
  if (const ManifestSlot* s = find_slot(v, id); s != nullptr) {
    seal_forward(v, *s);
  } else {
    if (auto dir = spill::SpillDir::open(spill_dir_of(v), false)) {
      const std::string tmp = shm::detail::format("page-{:016x}.tmp", id);
      (void)::unlinkat(dir->fd(), tmp.c_str(), 0);
      (void)spill::remove_page(*dir, id);
    }
    seal_back(v);
    bump(a.counters.rolled_back);
  }
  clear_seal(a);
  if (got == ::shm::detail::LockResult::OwnerDied) a.seal_mutex.mark_consistent();
  a.seal_mutex.unlock();
  repaired = true;
  if (!rebuild_derived(v, why)) return false;
  recompute_cold(v);
  return true;
}

namespace {

// Repair of an interrupted acknowledgement or expiry: the slot's Acked store
// decided it. Still Sealed: it never happened. Acked or freed: it did; count
// it if the holder did not (finish_acked then removes the file and frees the
// slot).
void repair_release(const View& v, SpillIntent kind) {
  SpillArea& a = *v.spill;
  const std::uint64_t id = ld(a.intent_page);
  const ManifestSlot* s = find_slot(v, id);
  if (s != nullptr && ld(s->state) == static_cast<std::uint32_t>(SlotState::Sealed)) return;
  if (!uncounted(a, kind)) return;
  bump(counter_of(a, kind));
  if (kind == SpillIntent::Expire)  // counted before the slot is freed: the slot is here
    log_event(*v.control, EventKind::PageExpired, id, s != nullptr ? ld(s->ops) : 0);
  else
    log_event(*v.control, EventKind::PageAcked, id, 0);
}

// Repair of an interrupted refusal: always forward (the page was judged
// invalid before the intent opened): moved aside if still in place, counted
// if the holder did not, its slot freed.
void repair_refuse(const View& v, const spill::SpillDir* dir) {
  SpillArea& a = *v.spill;
  const std::uint64_t id = ld(a.intent_page);
  const std::uint64_t code = ld(a.intent_last_order);  // refuse_page: the Errc
  const std::string why(code >= 1 && code <= static_cast<std::uint64_t>(Errc::UnknownPolicy)
                            ? to_string(static_cast<Errc>(code))
                            : std::string_view("Refused"));
  if (dir != nullptr) (void)spill::refuse_file(*dir, spill::page_file_name(id), why);
  ManifestSlot* s = find_slot(v, id);
  if (uncounted(a, SpillIntent::Refuse)) {
    bump(a.counters.pages_refused);
    log_event(*v.control, EventKind::PageRefused, id, s != nullptr ? ld(s->ops) : 0);
  }
  if (s != nullptr) release_slot(v, *s);
}

}  // namespace

void refuse_page(const View& v, const spill::SpillDir& dir, ManifestSlot& s, Errc why,
                 std::string& moved_to) {
  SpillArea& a = *v.spill;
  const std::uint64_t id = ld(s.page_id);
  // intent_last_order carries the reason (the repair names the moved file by it).
  begin_intent(a, SpillIntent::Refuse, id, static_cast<std::uint64_t>(why));
  auto moved = spill::refuse_file(dir, spill::page_file_name(id), to_string(why));
  moved_to = moved ? *moved : std::string("(could not move it: ") + moved.error().message + ")";
  ::shm::detail::spill_crash_point(CrashPoint::RefuseMoved);
  st(s.state, static_cast<std::uint32_t>(SlotState::Acked));
  bump(a.counters.pages_refused);
  log_event(*v.control, EventKind::PageRefused, id, ld(s.ops));
  ::shm::detail::spill_crash_point(CrashPoint::RefuseCounted);
  release_slot(v, s);
  end_intent(a);
}

bool repair_spill(const View& v, std::string& why) {
  SpillArea& a = *v.spill;
  if (ld(a.enabled) == 0) return true;
  const std::uint32_t intent = ld(a.intent_state);
  if (intent > kLastSpillIntent || intent == static_cast<std::uint32_t>(SpillIntent::Seal)) {
    why = shm::detail::format(kIntentProblem, intent);
    return false;
  }
  for (const ManifestSlot& s : a.slots)
    if (ld(s.state) > static_cast<std::uint32_t>(SlotState::Acked)) {
      why = shm::detail::format("manifest slot state {} is not free, sealed or acked", ld(s.state));
      return false;
    }
  // A seal in flight: its sealer may be the holder that died (the seal's
  // first and last steps run under the relay mutex), or alive, writing its
  // page outside it (then it is left alone).
  bool reaped = false;
  if (!reap_dead_sealer(v, reaped, why)) return false;
  auto dir = spill::SpillDir::open(spill_dir_of(v), false);
  switch (static_cast<SpillIntent>(intent)) {
    case SpillIntent::None:
    case SpillIntent::Seal:  // refused above: a seal keeps its own record
      break;
    case SpillIntent::Ack:
    case SpillIntent::Expire:
      repair_release(v, static_cast<SpillIntent>(intent));
      break;
    case SpillIntent::Refuse:
      repair_refuse(v, dir ? &*dir : nullptr);
      break;
  }
  end_intent(a);
  if (dir) finish_acked(v, *dir);
  if (ld(a.cursor_page) != 0) {
    const ManifestSlot* s = find_slot(v, ld(a.cursor_page));
    if (s == nullptr || ld(a.cursor_record) >= ld(s->records)) {
      st(a.cursor_page, 0u);
      st(a.cursor_record, 0u);
    }
  }
  recompute_cold(v);
  return true;
}

bool any_acked(const View& v) noexcept {
  for (const ManifestSlot& s : v.spill->slots)
    if (ld(s.state) == static_cast<std::uint32_t>(SlotState::Acked)) return true;
  return false;
}

void finish_acked(const View& v, const spill::SpillDir& dir) {
  for (ManifestSlot& s : v.spill->slots) {
    if (ld(s.state) != static_cast<std::uint32_t>(SlotState::Acked)) continue;
    if (spill::remove_page(dir, ld(s.page_id))) release_slot(v, s);
  }
}

void expire_pages(const View& v, const spill::SpillDir& dir) {
  SpillArea& a = *v.spill;
  if (static_cast<RetentionKind>(ld(a.retention)) != RetentionKind::Ttl) return;
  const std::uint64_t ttl_ns = ld(a.retention_ttl_ms) * 1'000'000;
  const std::uint64_t now = realtime_ns();
  for (ManifestSlot& s : a.slots) {
    if (ld(s.state) != static_cast<std::uint32_t>(SlotState::Sealed)) continue;
    if (ld(s.sealed_ns) + ttl_ns > now) continue;
    const std::uint64_t id = ld(s.page_id);
    begin_intent(a, SpillIntent::Expire, id);
    st(s.state, static_cast<std::uint32_t>(SlotState::Acked));  // the commit point
    ::shm::detail::spill_crash_point(CrashPoint::ExpireMarked);
    // Counted while the slot still says how many ops were lost (repair too).
    bump(a.counters.pages_expired);
    log_event(*v.control, EventKind::PageExpired, id, ld(s.ops));
    ::shm::detail::spill_crash_point(CrashPoint::ExpireCounted);
    if (spill::remove_page(dir, id)) release_slot(v, s);
    end_intent(a);
  }
}

std::vector<std::string> verify_spill(const View& v) {
  std::vector<std::string> out;
  const SpillArea& a = *v.spill;
  if (ld(a.enabled) == 0) return out;
  if (ld(a.intent_state) > kLastSpillIntent ||
      ld(a.intent_state) == static_cast<std::uint32_t>(SpillIntent::Seal))
    out.push_back(shm::detail::format(kIntentProblem, ld(a.intent_state)));
  if (ld(a.seal_state) > 1)
    out.push_back(shm::detail::format("spill seal state {} is neither 0 (none) nor 1 (in flight)",
                                      ld(a.seal_state)));
  std::uint64_t pages = 0;
  for (const ManifestSlot& s : a.slots) {
    const std::uint32_t state = ld(s.state);
    if (state > static_cast<std::uint32_t>(SlotState::Acked))
      out.push_back(
          shm::detail::format("manifest slot state {} is not free, sealed or acked", state));
    if (state == static_cast<std::uint32_t>(SlotState::Sealed)) {
      ++pages;
      if (ld(s.page_id) == 0 || ld(s.page_id) >= ld(a.next_page_id))
        out.push_back(shm::detail::format("manifest names page {} (next page id {})", ld(s.page_id),
                                          ld(a.next_page_id)));
    }
  }
  if (pages != ld(a.cold_pages))
    out.push_back(shm::detail::format("cold_pages: projection says {}, the manifest holds {}",
                                      ld(a.cold_pages), pages));
  // Every sealed page's file, validated against its slot.
  auto dir = spill::SpillDir::open(spill_dir_of(v), false);
  if (!dir) {
    if (pages > 0) out.push_back("spill directory: " + dir.error().message);
    return out;
  }
  if (dir->relay_id() != ld(a.relay_id))
    out.push_back(
        shm::detail::format("spill directory {} has relay id {:#018x}, the relay "
                            "expects {:#018x}",
                            dir->path(), dir->relay_id(), ld(a.relay_id)));
  for (const ManifestSlot& s : a.slots) {
    if (ld(s.state) != static_cast<std::uint32_t>(SlotState::Sealed)) continue;
    auto page = spill::read_page(*dir, ld(s.page_id));
    if (!page) {
      out.push_back(shm::detail::format("page {}: {}", ld(s.page_id), page.error().what()));
      continue;
    }
    if (page->header.records != ld(s.records) || page->header.content_crc != ld(s.content_crc) ||
        page->header.first_seq != ld(s.first_seq) || page->header.last_seq != ld(s.last_seq))
      out.push_back(
          shm::detail::format("page {}: the file ({} records, crc {:#010x}) does not "
                              "match the manifest ({} records, crc {:#010x})",
                              ld(s.page_id), page->header.records, page->header.content_crc,
                              ld(s.records), ld(s.content_crc)));
  }
  return out;
}

Result<void> retune_spill_view(const View& v, std::string_view path, std::uint64_t page_size,
                               std::uint64_t retention_bytes, std::uint64_t ttl_ms) {
  return retune_spill_view(v, path, [&](SpillLimits& now) {
    now = SpillLimits{page_size, retention_bytes, ttl_ms};
  });
}

Result<void> retune_spill_view(const View& v, std::string_view path, const SpillEdit& edit) {
  SpillArea& a = *v.spill;
  if (ld(a.enabled) == 0)
    return fail(Errc::InvalidArgument,
                shm::detail::format("{}: the relay has no spill store", path));
  Control& c = *v.control;
  if (auto ok = lock(v, path); !ok) return ok;
  Held held(c);
  // Read, edit, validate and store under the mutex: one retune is atomic.
  SpillLimits limits{ld(a.page_bytes), ld(a.retention_bytes), ld(a.retention_ttl_ms)};
  edit(limits);
  const std::uint64_t page_size = limits.page_size;
  const std::uint64_t retention_bytes = limits.retention_bytes;
  const std::uint64_t ttl_ms = limits.ttl_ms;
  if (page_size < spill::kPageHeaderSize + spill::record_stride(v.params.value_bytes) ||
      page_size > spill::kPageHeaderSize + spill::kMaxPageContent)
    return fail(Errc::InvalidArgument,
                shm::detail::format(
                    "{}: page_size {} outside [{}, {}] (header + one record)", path, page_size,
                    spill::kPageHeaderSize + spill::record_stride(v.params.value_bytes),
                    spill::kPageHeaderSize + spill::kMaxPageContent));
  const auto kind = static_cast<RetentionKind>(ld(a.retention));
  if (kind == RetentionKind::BoundedDisk && retention_bytes == 0)
    return fail(Errc::InvalidArgument,
                shm::detail::format("{}: BoundedDisk retention needs a bound > 0", path));
  if (kind == RetentionKind::Ttl && ttl_ms == 0)
    return fail(Errc::InvalidArgument,
                shm::detail::format("{}: Ttl retention needs a ttl > 0", path));
  st(a.page_bytes, page_size);
  st(a.retention_bytes, retention_bytes);
  st(a.retention_ttl_ms, ttl_ms);
  bump(c.counters.retunes);
  log_event(c, EventKind::Retuned, 0, page_size);
  wake_writers(c);  // a writer blocked at the old bound re-checks
  return {};
}

}  // namespace relay::internal
}  // namespace shm
