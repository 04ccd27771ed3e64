// The relay handles: create, open, write (merge, append, overflow), the
// reader's take/commit/abandon/wait, reconfigure and retune, the role facades.
#include "internal.hpp"
#include "relay/catch_up.hpp"
#include "relay/sealer.hpp"
#include "segment/size_check.hpp"
#include "shm/platform/clock.hpp"
#include "shm/platform/futex.hpp"
#include "shm/platform/short_bytes.hpp"
#include "shm/spill/purger.hpp"

#include "format/format.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <algorithm>
#include <bit>
#include <cassert>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <system_error>

namespace shm {

using namespace relay;
using namespace relay::internal;
using CrashPoint = test_hooks::RelayCrashPoint;

std::string_view to_string(WriteStatus o) noexcept {
  switch (o) {
    case WriteStatus::Appended:
      return "appended";
    case WriteStatus::Merged:
      return "merged";
    case WriteStatus::Unchanged:
      return "unchanged";
    case WriteStatus::Displaced:
      return "displaced";
    case WriteStatus::Dropped:
      return "dropped";
    case WriteStatus::Full:
      return "full";
    case WriteStatus::TimedOut:
      return "timed_out";
  }
  return "unknown";
}

std::string_view to_string(EventKind k) noexcept {
  switch (k) {
    case EventKind::Dropped:
      return "dropped";
    case EventKind::DroppedOldest:
      return "dropped_oldest";
    case EventKind::FullSet:
      return "full_set";
    case EventKind::FullCleared:
      return "full_cleared";
    case EventKind::Retuned:
      return "retuned";
    case EventKind::Reconfigured:
      return "reconfigured";
    case EventKind::Repaired:
      return "repaired";
    case EventKind::Returned:
      return "returned";
    case EventKind::Spilled:
      return "spilled";
    case EventKind::PageAcked:
      return "page_acked";
    case EventKind::PageRefused:
      return "page_refused";
    case EventKind::SpillFallback:
      return "spill_fallback";
    case EventKind::NoSpace:
      return "no_space";
    case EventKind::PageExpired:
      return "page_expired";
  }
  return "unknown";
}

std::string_view to_string(SpillMode m) noexcept {
  return m == SpillMode::CompactOnWrite ? "compact_on_write" : "append_compact";
}

std::string_view to_string(RetentionKind r) noexcept {
  switch (r) {
    case RetentionKind::UnboundedLog:
      return "unbounded_log";
    case RetentionKind::BoundedDisk:
      return "bounded_disk";
    case RetentionKind::Ttl:
      return "ttl";
  }
  return "unknown";
}

std::uint64_t RelaySnapshot::level() const noexcept {
  switch (backpressure.dimension) {
    case Dimension::Count:
      return depth;
    case Dimension::Bytes:
      return bytes;
    case Dimension::Keys:
      return pending_keys;
    case Dimension::Age:
      return oldest_age_ns / 1'000'000;
  }
  return 0;
}

namespace {

// How long a relay create waits for another create (or gc) to release the
// spill directory's binding lock: a create holds it while it rebuilds the
// manifest from the directory, which reads every page (bounded: at most
// kManifestSlots pages of at most 64 MiB).
constexpr std::chrono::milliseconds kBindingWait{30'000};

Result<void> validate_config(const RelayConfig& cfg, const MergePolicy& p) {
  if (cfg.value_bytes < 1 || cfg.value_bytes > kMaxValueSize)
    return fail(Errc::InvalidArgument, shm::detail::format("value_bytes {} outside [1, {}]",
                                                           cfg.value_bytes, kMaxValueSize));
  if (cfg.max_entries < kMinCapacity || cfg.max_entries > kMaxCapacity)
    return fail(Errc::InvalidArgument,
                shm::detail::format("max_entries {} outside [{}, {}]", cfg.max_entries,
                                    kMinCapacity, kMaxCapacity));
  const std::uint32_t need = std::max(p.op_size, p.min_size);
  if (cfg.value_bytes < need)
    return fail(Errc::InvalidArgument,
                shm::detail::format("policy {} needs values of {} bytes, value_bytes is {}", p.name,
                                    need, cfg.value_bytes));
  if (cfg.remembered_keys != RelayConfig::kRememberAsEntries && cfg.remembered_keys > kMaxCapacity)
    return fail(Errc::InvalidArgument, shm::detail::format("remembered_keys {} outside [0, {}]",
                                                           cfg.remembered_keys, kMaxCapacity));
  if (auto ok = validate(cfg.backpressure, cfg.max_entries, cfg.value_bytes); !ok) return ok;
  if (cfg.backpressure.dimension == Dimension::Keys && !p.keyed)
    return fail(Errc::InvalidArgument,
                "dimension keys on raw_fifo: a FIFO has no keys (use count or bytes)");
  if (cfg.spill.enabled) {
    const SpillPolicy& sp = cfg.spill;
    const std::uint64_t least = spill::kPageHeaderSize + spill::record_stride(cfg.value_bytes);
    if (sp.page_size < least || sp.page_size > spill::kPageHeaderSize + spill::kMaxPageContent)
      return fail(Errc::InvalidArgument,
                  shm::detail::format("spill page_size {} outside [{}, {}] (header + one record)",
                                      sp.page_size, least,
                                      spill::kPageHeaderSize + spill::kMaxPageContent));
    if (sp.retention == RetentionKind::BoundedDisk && sp.retention_bytes == 0)
      return fail(Errc::InvalidArgument, "spill retention bounded_disk needs retention_bytes > 0");
    if (sp.retention == RetentionKind::Ttl && sp.ttl.count() <= 0)
      return fail(Errc::InvalidArgument, "spill retention ttl needs a ttl > 0");
    if (static_cast<std::uint32_t>(sp.retention) > 2 || static_cast<std::uint32_t>(sp.mode) > 1 ||
        static_cast<std::uint32_t>(sp.rehydrate) > 1)
      return fail(Errc::InvalidArgument, "spill mode, retention or rehydrate out of range");
    if (sp.rehydrate == Rehydrate::Parallel && !p.flags.commutative)
      return fail(Errc::PolicyRefused,
                  shm::detail::format("rehydrate parallel with policy {} (id {}, {}) is refused: "
                                      "parallel rehydrate merges pages out of order and needs a "
                                      "commutative merge",
                                      p.name, p.id, describe(p.flags)));
  }
  return validate_pair(p, {cfg.backpressure.overflow, cfg.egress, cfg.spill_dedup,
                           /*has_spill_store=*/cfg.spill.enabled});
}

// The memory's slots: the declared number, or by default one per entry for
// a policy that uses it (keyed, associative, idempotent) and none otherwise.
std::uint32_t remembered_for(const RelayConfig& cfg, const MergePolicy& p) {
  if (cfg.remembered_keys != RelayConfig::kRememberAsEntries) return cfg.remembered_keys;
  return p.keyed && p.flags.associative && p.flags.idempotent ? cfg.max_entries : 0;
}

ParamBlock block_for(const RelayConfig& cfg, const MergePolicy& p) {
  return ParamBlock{cfg.value_bytes, cfg.max_entries,
                    std::bit_ceil(std::max<std::uint32_t>(2, 2 * cfg.max_entries)),
                    remembered_for(cfg, p)};
}

Result<Segment> create_segment(std::string_view name, const RelayConfig& cfg,
                               const CreateOptions& options) {
  auto p = find_merge(cfg.policy);
  if (!p) return std::unexpected(p.error());
  if (auto ok = validate_config(cfg, **p); !ok)
    return fail(ok.error().code, shm::detail::format("relay {}: {}", name, ok.error().message));
  const ParamBlock block = block_for(cfg, **p);
  ParamBlock storage{};
  const KindSpec spec = kind_spec(block, false, storage);
  const MergeFlags flags = (*p)->flags;
  // Where the segment will live (absolute): the spill directory's binding.
  std::string segment_path;
  spill::SpillDir dir;
  FileHandle binding;  // held until Segment::create has published the name (or failed)
  if (cfg.spill.enabled) {
    std::error_code ec;
    const std::filesystem::path root = options.root.empty() ? default_root() : options.root;
    segment_path = (std::filesystem::absolute(root, ec) / name).lexically_normal().string();
    if (ec)
      return fail(Errc::SystemError,
                  shm::detail::format("relay {}: root {}: {}", name, root.string(), ec.message()));
    const std::string path = cfg.spill.dir.empty() ? spill::default_spill_dir(name) : cfg.spill.dir;
    auto opened = spill::SpillDir::open(path, true);
    if (!opened)
      return fail(opened.error().code,
                  shm::detail::format("relay {}: spill store: {}", name, opened.error().message));
    dir = std::move(*opened);
    auto locked = spill::lock_binding(dir.path(), kBindingWait);
    if (!locked)
      return fail(locked.error().code,
                  shm::detail::format("relay {}: {}", name, locked.error().message));
    binding = std::move(*locked);
  }
  auto init = [&](std::span<std::byte> data) -> Result<void> {
    // Zero-filled and invisible to others until READY: no lock needed.
    const View v = view_over(block, data.data());
    Control& c = *v.control;
    if (auto ok = c.mutex.init(); !ok) return ok;
    if (auto ok = v.spill->seal_mutex.init(); !ok) return ok;
    st(c.policy, cfg.policy);
    st(c.policy_flags, to_bits(flags));
    st(c.overflow, static_cast<std::uint32_t>(cfg.backpressure.overflow));
    st(c.dimension, static_cast<std::uint32_t>(cfg.backpressure.dimension));
    st(c.egress, static_cast<std::uint32_t>(cfg.egress));
    st(c.spill_dedup, cfg.spill_dedup ? 1u : 0u);
    st(c.high_water, cfg.backpressure.high_water);
    st(c.low_water, cfg.backpressure.low_water);
    st(c.head, kNone);
    st(c.tail, kNone);
    st(c.next_seq, 1u);
    st(c.next_order, 1u);
    if (cfg.spill.enabled) {
      // Rebuild the manifest from the directory: the segment is new.
      auto floors = init_spill(v, cfg.spill, dir, name, segment_path);
      if (!floors) return std::unexpected(floors.error());
      st(c.next_seq, floors->next_seq);
      st(c.next_order, floors->next_order);
    }
    for (std::uint32_t i = 0; i < block.capacity; ++i) {
      st(v.entry(i).next, i + 1 < block.capacity ? i + 1 : kNone);
      st(v.entry(i).prev, kNone);
    }
    st(c.free_head, 0u);
    return {};
  };
  return Segment::create(name, spec, options, init);
}

Result<Segment> open_segment(std::string_view name, const OpenOptions& options, View& view) {
  ParamBlock storage{};
  const KindSpec spec = kind_spec(ParamBlock{}, true, storage);
  auto seg = Segment::open(name, spec, options);
  if (!seg) return std::unexpected(seg.error());
  auto v = make_view(*seg);
  if (!v) return std::unexpected(v.error());
  if (auto ok =
          shm::detail::check_total_size(*seg, v->geometry.data_size, "its relay parameters need");
      !ok)
    return std::unexpected(std::move(ok.error()));
  view = *v;
  return seg;
}

// What the lock-free merge path answered: nothing (the mutex path
// decides), or the write's outcome (its sequence beside it). A code, not a
// WriteOutcome: building one in memory and copying it out stalled a store
// forward on every fast write.
enum class Fast : std::uint8_t { No, Unchanged, Merged };

// A fast write that changes nothing: counted (a lifetime counter), no
// sequence answered; one it already took (`seq`, lost to a race) is carried
// out as a gap in the sequence, never a repeat.
[[gnu::always_inline]] inline Fast fast_unchanged(Control& c, std::uint64_t seq,
                                                  std::uint64_t& out_seq,
                                                  std::uint64_t& carried) noexcept {
  c.fast_unchanged.fetch_add(1, std::memory_order_relaxed);
  out_seq = 0;
  carried = seq;
  return Fast::Unchanged;
}

// The write's sequence (taken on the first attempt that needs it and kept in
// `seq` for the next) and the rseq of word `w` after this op, or nullopt
// when the word cannot take one more op (4,095 ops, or the sequence more
// than 2^20 past the base): the mutex path then rebases.
[[gnu::always_inline]] inline std::optional<std::uint64_t> next_rseq(Control& c, const EntryHead& h,
                                                                     const Word& w,
                                                                     std::uint64_t& seq) noexcept {
  if (word_ops(w.ctl) >= kWordOpsMax) return std::nullopt;
  if (seq == 0) {
    ::shm::detail::store_crash_tick();  // test-only kill at the Nth store
    seq = c.next_seq.fetch_add(1, std::memory_order_relaxed);
  }
  const std::uint64_t base = ld(h.last_seq);
  std::uint64_t rseq = word_rseq(w.ctl);
  if (seq > base) {
    if (seq - base > kWordRseqMax) return std::nullopt;
    rseq = std::max(rseq, seq - base);
  }
  return rseq;
}

// The lock-free merge path (docs/relay.md, "Lock-free merge path"): an
// 8-byte op of a word policy into its key's open entry, by one 16-byte
// compare-exchange of the entry's merge word, with its sequence from one
// fetch_add. Returns what it answered (the sequence in `out_seq`), or
// Fast::No when the write takes the mutex path, with `carried` the
// sequence it already took (0: none), which the mutex path uses instead of
// taking another.
[[gnu::always_inline]] inline Fast fast_merge(const View& v, std::uint64_t key,
                                              std::span<const std::byte> op, std::uint64_t& out_seq,
                                              std::uint64_t& carried) noexcept {
  Control& c = *v.control;
  const PolicyId id = ld(c.policy);
  if (op.size() != 8 || !word_policy(id, v.params.value_bytes) || ld(c.faulted) != 0)
    return Fast::No;
  std::uint64_t value = 0;
  std::memcpy(&value, op.data(), 8);
  if (value == (id == policy::kMin ? ~std::uint64_t{0} : 0)) {  // the policy's identity
    c.fast_unchanged.fetch_add(1, std::memory_order_relaxed);   // a lifetime counter
    out_seq = 0;
    return Fast::Unchanged;
  }
  // Index cells change only under the mutex; a probe that races a change
  // may miss (the mutex path then decides), and a hit is validated below.
  const std::uint32_t e = index_find(v, key);
  if (e == kNone) return Fast::No;
  EntryHead& h = v.entry(e);
  std::uint64_t seq = 0;
  for (int attempt = 0; attempt < 16; ++attempt) {
    Word w;
    if (!load_word(v, e, w)) continue;
    // The word first, then the entry: a word at its current generation
    // (the CAS below checks that) shows every close before its bump.
    // acquire: a published entry's fields are visible (pairs with the
    // release store of its state).
    if (h.state.load(std::memory_order_acquire) !=
            static_cast<std::uint32_t>(EntryState::Pending) ||
        ld(h.flags) != 0 || ld(h.key) != key || ld(h.len) != 8 || ld(c.policy) != id)
      break;
    const std::uint32_t gen = word_gen(w.ctl);
    // acquire: the bases of this generation are visible (pairs with the
    // release store of base_gen after them); unequal: a rebase in progress.
    if (h.base_gen.load(std::memory_order_acquire) != gen) break;
    const std::uint64_t merged = word_fold(id, w.value, value);
    if (merged == w.value)  // changes nothing the entry holds
      return fast_unchanged(c, seq, out_seq, carried);
    const std::uint64_t ops = word_ops(w.ctl);
    const std::optional<std::uint64_t> next = next_rseq(c, h, w, seq);
    if (!next) break;  // the mutex path rebases
    const std::uint64_t rseq = *next;
    if (cas_word(v, e, w, Word{word_ctl(gen, ops + 1, rseq), merged})) {
      out_seq = seq;
      return Fast::Merged;
    }
  }
  carried = seq;
  return Fast::No;
}

// The copy merge (docs/relay.md, "Lock-free merge path"): an lww or
// keep_latest op into its key's open entry of the same length, without the
// mutex. The current buffer is read framed by the word (an lww op that
// loses, or a keep_latest op of the same bytes, is Unchanged with no
// locked instruction but the count); the word is claimed in the writer's
// name (`owner`), the value written into the other buffer, and one CAS
// publishes it with the op count and last sequence. Returns as fast_merge.
Fast fast_copy(const View& v, std::uint64_t key, std::span<const std::byte> op, std::uint64_t owner,
               std::uint64_t& out_seq, std::uint64_t& carried) noexcept {
  Control& c = *v.control;
  const PolicyId id = ld(c.policy);
  const bool lww = id == policy::kLww;
  if (!copy_policy(id) || op.size() > v.params.value_bytes || op.size() < (lww ? 16u : 1u) ||
      ld(c.faulted) != 0)
    return Fast::No;
  const std::uint32_t e = index_find(v, key);
  if (e == kNone) return Fast::No;
  EntryHead& h = v.entry(e);
  const std::size_t n = op.size();
  const std::size_t words = (n + 7) / 8;
  std::array<std::uint64_t, kMaxValueSize / 8> mine, had;
  mine[words - 1] = 0;
  std::memcpy(mine.data(), op.data(), n);
  std::uint64_t seq = 0;
  for (int attempt = 0; attempt < 16; ++attempt) {
    Word w;
    if (!load_word(v, e, w)) continue;
    if ((w.value & kCopyClaimed) != 0) continue;  // another writer is publishing
    // acquire: a published entry's fields are visible (as in fast_merge).
    if (h.state.load(std::memory_order_acquire) !=
            static_cast<std::uint32_t>(EntryState::Pending) ||
        ld(h.flags) != 0 || ld(h.key) != key || ld(h.len) != n || ld(c.policy) != id)
      break;
    const std::uint32_t gen = word_gen(w.ctl);
    if (h.base_gen.load(std::memory_order_acquire) != gen) break;  // held or being rebased
    // The current buffer, framed by the word: a buffer is written only
    // while it is not current, and it becomes current only by a CAS that
    // changes ctl, so an unchanged word means an untorn read.
    const std::uint64_t cur = w.value & kCopyBuffer;
    const auto* src = reinterpret_cast<const std::uint64_t*>(v.buffer(e, cur));
    for (std::size_t k = 0; k < words; ++k) had[k] = __atomic_load_n(src + k, __ATOMIC_RELAXED);
    // acquire fence: the buffer is read before the word is read again.
    std::atomic_thread_fence(std::memory_order_acquire);
    if (h.ctl.load(std::memory_order_relaxed) != w.ctl ||
        __atomic_load_n(word_value(v, e), __ATOMIC_RELAXED) != w.value)
      continue;
    bool change = false;
    if (lww) {
      // combine()'s rule: larger (timestamp, writer) wins, a tie compares bytes.
      change =
          mine[0] > had[0] || (mine[0] == had[0] && mine[1] > had[1]) ||
          (mine[0] == had[0] && mine[1] == had[1] && std::memcmp(had.data(), mine.data(), n) < 0);
    } else {
      change = std::memcmp(had.data(), mine.data(), n) != 0;
    }
    if (!change) return fast_unchanged(c, seq, out_seq, carried);
    const std::uint64_t ops = word_ops(w.ctl);
    const std::optional<std::uint64_t> next = next_rseq(c, h, w, seq);
    if (!next) break;  // the mutex path rebases
    const std::uint64_t rseq = *next;
    // The claim: the other buffer is this writer's until it publishes. A
    // kill from here to the publish leaves the current buffer whole; the
    // mutex holder that needs the entry undoes the claim of a dead writer.
    const Word claimed{w.ctl, cur | kCopyClaimed | owner};
    if (!cas_word(v, e, w, claimed)) continue;
    store_value(v.buffer(e, cur ^ 1), mine.data(), n);
    Word at = claimed;
    // Nothing else changes a live writer's claim (read_word's CAS of the
    // word with itself aside), so this lands; were the claim ever undone
    // (its owner judged dead), the op did not land and the mutex path
    // writes it.
    bool published = false;
    while (!(published = cas_word(v, e, at, Word{word_ctl(gen, ops + 1, rseq), cur ^ 1})) &&
           at == claimed) {
    }
    if (!published) break;
    out_seq = seq;
    return Fast::Merged;
  }
  carried = seq;
  return Fast::No;
}

}  // namespace

namespace relay::detail {

Result<const MergePolicy*> Handle::policy_now() {
  const Control& c = *view_.control;
  const PolicyId id = ld(c.policy);
  if (policy_ != nullptr && policy_->id == id) [[likely]]
    return policy_;
  auto p = find_merge(id);
  if (!p)
    return fail(Errc::UnknownPolicy,
                shm::detail::format("{}: {}", segment_.path(), p.error().message));
  const std::uint32_t declared = ld(c.policy_flags);
  if (to_bits((*p)->flags) != declared)
    return fail(Errc::ParamMismatch,
                shm::detail::format("{}: policy {} (id {}) is registered here as {}, the relay "
                                    "declares {}",
                                    segment_.path(), (*p)->name, id, describe((*p)->flags),
                                    describe(flags_from_bits(declared))));
  policy_ = *p;
  return policy_;
}

RelaySnapshot Handle::snapshot() const {
  return read_snapshot(view_);
}

Result<std::optional<std::vector<std::byte>>> Handle::delivered(std::uint64_t key) {
  if (auto ok = lock(view_, segment_.path()); !ok) return std::unexpected(ok.error());
  Held held(*view_.control);
  const std::uint32_t s = memory_find(view_, key);
  if (s == kNone) return std::optional<std::vector<std::byte>>{};
  const std::uint32_t len = std::min(ld(view_.slot(s).len), view_.params.value_bytes);
  const auto* b = reinterpret_cast<const std::byte*>(view_.slot_value(s));
  return std::optional<std::vector<std::byte>>(std::vector<std::byte>(b, b + len));
}

bool Handle::can_reconfigure() const {
  const RelaySnapshot s = snapshot();
  return s.depth == 0 && s.in_hand == 0 && s.cold_pages == 0;
}

Result<spill::SpillDir*> Handle::spill_dir() {
  if (spill_dir_.valid()) [[likely]]
    return &spill_dir_;
  const SpillArea& a = *view_.spill;
  if (ld(a.enabled) == 0)
    return fail(Errc::InvalidArgument,
                shm::detail::format("{}: the relay has no spill store", segment_.path()));
  auto d = spill::SpillDir::open(spill_dir_of(view_), false);
  if (!d) return std::unexpected(d.error());
  if (d->relay_id() != ld(a.relay_id))
    return fail(Errc::ForeignHandle,
                shm::detail::format("{}: spill directory {} has relay id {:#018x}, the relay "
                                    "expects {:#018x} (the directory was replaced)",
                                    segment_.path(), d->path(), d->relay_id(), ld(a.relay_id)));
  spill_dir_ = std::move(*d);
  return &spill_dir_;
}

Result<void> Handle::retune_spill(std::uint64_t page_size, std::uint64_t retention_bytes,
                                  std::chrono::milliseconds ttl) {
  return retune_spill_view(view_, segment_.path(), page_size, retention_bytes,
                           static_cast<std::uint64_t>(std::max<std::int64_t>(0, ttl.count())));
}

Result<void> Handle::reconfigure(PolicyId policy) {
  return reconfigure(policy, static_cast<Overflow>(ld(view_.control->overflow)));
}

Result<void> Handle::reconfigure(PolicyId id, Overflow overflow) {
  auto p = find_merge(id);
  if (!p) return std::unexpected(p.error());
  const MergePolicy& np = **p;
  Control& c = *view_.control;
  if (auto ok = lock(view_, segment_.path()); !ok) return ok;
  Held held(c);
  if (ld(c.depth) != 0 || ld(c.in_hand) != 0 || ld(view_.spill->cold_pages) != 0)
    return fail(Errc::InvalidArgument,
                shm::detail::format("{}: reconfigure needs an empty head (depth {}, in hand {}, "
                                    "cold pages {}): changing the merge mid-stream changes its "
                                    "meaning",
                                    segment_.path(), ld(c.depth), ld(c.in_hand),
                                    ld(view_.spill->cold_pages)));
  const std::uint32_t need = std::max(np.op_size, np.min_size);
  if (view_.params.value_bytes < need)
    return fail(Errc::InvalidArgument,
                shm::detail::format("{}: policy {} needs values of {} bytes, value_bytes is {}",
                                    segment_.path(), np.name, need, view_.params.value_bytes));
  if (static_cast<Dimension>(ld(c.dimension)) == Dimension::Keys && !np.keyed)
    return fail(Errc::InvalidArgument,
                "dimension keys on raw_fifo: a FIFO has no keys (retune to count or bytes first)");
  if (auto ok = validate_pair(np, {overflow, static_cast<EgressOrder>(ld(c.egress)),
                                   ld(c.spill_dedup) != 0, ld(view_.spill->enabled) != 0});
      !ok)
    return ok;
  clear_memory(view_);  // what was delivered under the old merge means nothing under the new
  // Every word starts again empty: its second half means something else
  // under the new merge (a value, or the copy control).
  if (merge_words(id, view_.params.value_bytes) ||
      merge_words(ld(c.policy), view_.params.value_bytes))
    reset_words(view_);
  st(c.policy, id);
  st(c.policy_flags, to_bits(np.flags));
  st(c.overflow, static_cast<std::uint32_t>(overflow));
  bump(c.counters.reconfigures);
  log_event(c, EventKind::Reconfigured, 0, id);
  wake_writers(c);
  return {};
}

Result<void> Handle::retune(const Backpressure& bp) {
  return retune_view(view_, segment_.path(), bp);
}

}  // namespace relay::detail

// ---------------------------------------------------------------- writer

RelayWriter::RelayWriter() noexcept = default;
RelayWriter::RelayWriter(RelayWriter&&) noexcept = default;
RelayWriter::~RelayWriter() = default;  // sealer_ first: it uses the mapping

RelayWriter& RelayWriter::operator=(RelayWriter&& other) noexcept {
  if (this != &other) {
    sealer_.reset();  // its thread uses this handle's mapping, replaced below
    Handle::operator=(std::move(other));
    sealer_ = std::move(other.sealer_);
  }
  return *this;
}

Result<void> RelayWriter::set_seal_mode(SealMode mode) {
  assert(view_.control != nullptr && "use of an empty RelayWriter");
  if (mode == SealMode::Inline) {
    sealer_.reset();  // a seal under way finishes first
    return {};
  }
  if (sealer_ != nullptr) return {};
  if (ld(view_.spill->enabled) == 0)
    return fail(Errc::InvalidArgument,
                shm::detail::format("{}: background sealing needs a spill store (spill.enabled)",
                                    segment_.path()));
  auto own = spill::SpillDir::open(spill_dir_of(view_), false);
  if (!own) return std::unexpected(own.error());
  if (own->relay_id() != ld(view_.spill->relay_id))
    return fail(Errc::ForeignHandle,
                shm::detail::format("{}: the spill directory {} belongs to another relay",
                                    segment_.path(), own->path()));
  try {
    sealer_ = std::make_unique<relay::internal::Sealer>(view_, segment_.path(), std::move(*own));
  } catch (const std::system_error& e) {
    return fail(Errc::SystemError,
                shm::detail::format("{}: no sealer thread: {}", segment_.path(), e.what()));
  }
  return {};
}

SealMode RelayWriter::seal_mode() const noexcept {
  return sealer_ != nullptr ? SealMode::Background : SealMode::Inline;
}

Result<RelayWriter> RelayWriter::adopt(Result<Segment> seg) {
  if (!seg) return std::unexpected(std::move(seg.error()));
  auto v = make_view(*seg);
  if (!v) return std::unexpected(v.error());
  auto att = seg->attach(kWriterRole);
  if (!att) return std::unexpected(att.error());
  RelayWriter w;
  w.segment_ = std::move(*seg);
  w.attachment_ = std::move(*att);
  w.view_ = *v;
  if (auto p = w.policy_now(); !p) return std::unexpected(p.error());
  return w;
}

Result<RelayWriter> RelayWriter::create(std::string_view name, const RelayConfig& config,
                                        const CreateOptions& options) {
  return adopt(create_relay(name, config, options));
}

Result<RelayWriter> RelayWriter::open(std::string_view name, const OpenOptions& options) {
  return adopt(open_relay(name, options));
}

Result<RelayWriter> RelayWriter::attach(Segment segment) {
  if (auto ok = relay::check_adopted(segment); !ok) return std::unexpected(ok.error());
  return adopt(std::move(segment));
}

Result<WriteOutcome> RelayWriter::write(std::uint64_t key, std::span<const std::byte> op,
                                        std::chrono::nanoseconds timeout) {
  assert(view_.control != nullptr && "use of an empty RelayWriter");
  // The lock-free merge path (fast_merge and word_policy inlined: a sum
  // write measured 40% slower with them called); `carried`: a sequence it
  // took and did not use.
  std::uint64_t carried = 0;
  {
    std::uint64_t seq = 0;
    Fast got = fast_merge(view_, key, op, seq, carried);
    if (got == Fast::No && carried == 0)
      got = fast_copy(view_, key, op, copy_owner(attachment_.slot(), attachment_.generation()), seq,
                      carried);
    if (got != Fast::No)
      return WriteOutcome{got == Fast::Merged ? WriteStatus::Merged : WriteStatus::Unchanged, seq};
  }
  Control& c = *view_.control;
  const std::string& path = segment_.path();
  // The clock is read only where the time is used (a read costs tens of ns
  // on a VM, as much as the rest of a merge): `start` when the write first
  // finds the relay full under Block, `now` for a new entry or the age level.
  std::uint64_t start = 0;
  const std::uint64_t budget =
      timeout.count() <= 0 ? 0 : static_cast<std::uint64_t>(timeout.count());
  bool parked_once = false;
  bool counted = false;
  bool fell_back = false;
  bool seal_failed = false;  // the last seal of this write failed: park before another
  bool sealed = false;       // this write sealed a page: it appends now if it can
  // Made only by a write that seals, on the heap (a merge or an append
  // never seals: a job on the stack of every write cost each of them a zero
  // fill of the job and two moves of the thread's page buffer). The
  // thread's page buffer is lent to it and taken back on every return: a
  // fresh buffer per seal would cost its page faults.
  std::unique_ptr<SealJob> job;
  std::array<std::byte, kMaxValueSize> fold;  // a new entry's first value (see `first`)
  thread_local spill::PageBuilder t_seal_page;
  struct GiveBack {
    std::unique_ptr<SealJob>& job;
    ~GiveBack() {
      if (job) t_seal_page = std::move(job->page);
    }
  } give_back{job};
  spill::SpillDir* dir = nullptr;
  if (static_cast<Overflow>(ld(c.overflow)) == Overflow::Spill && ld(view_.spill->enabled) != 0) {
    auto d = spill_dir();  // opened once per handle, outside the mutex
    if (!d) return std::unexpected(d.error());
    dir = *d;
  }
  // A sequence for an op about to be published (the carried one first).
  auto take_seq = [&] {
    if (carried != 0) return std::exchange(carried, 0);
    ::shm::detail::store_crash_tick();                          // test-only kill at the Nth store
    return c.next_seq.fetch_add(1, std::memory_order_relaxed);  // fast writers take them too
  };
  std::uint64_t drop_seq = 0;  // DropOldest: the sequence its intent holds for the append
  // The mutex within what is left of the timeout: a live holder stopped
  // inside it (SIGSTOP, a debugger) makes this write TimedOut, not a wait for
  // ever. (Not counted in counters.timed_out, which only the holder writes.)
  auto lock_in_time = [&]() -> Result<bool> {
    const std::uint64_t spent = start == 0 ? 0 : monotonic_ns() - start;
    return lock_for(view_, path, std::chrono::nanoseconds(budget > spent ? budget - spent : 0));
  };
  for (;;) {
    if (auto got = lock_in_time(); !got || !*got) {
      if (!got) return std::unexpected(got.error());
      return WriteOutcome{WriteStatus::TimedOut, 0};
    }
    std::uint32_t park_word = 0;
    bool park = false;
    bool seal_now = false;
    bool wait_sealer = false;
    {
      Held held(c);
      auto pol = policy_now();
      if (!pol) return std::unexpected(pol.error());
      const MergePolicy& p = **pol;
      if (op.size() > view_.params.value_bytes || op.size() < p.min_size ||
          (p.op_size != 0 && op.size() != p.op_size))
        return fail(Errc::InvalidArgument,
                    shm::detail::format("{}: a {}-byte value for policy {} (value size {}, op "
                                        "size {}, minimum {})",
                                        path, op.size(), p.name, view_.params.value_bytes,
                                        p.op_size, p.min_size));
      if (!counted) {
        bump(c.counters.writes);
        counted = true;
      }
      // What a new entry starts from: the op, or the op folded into the
      // value the reader was last given for the key (the memory).
      std::span<const std::byte> first = op;
      if (p.keyed) {
        if (is_identity(p, op)) {
          bump(c.counters.unchanged);
          return WriteOutcome{WriteStatus::Unchanged, 0};
        }
        const std::uint32_t e = index_find(view_, key);
        if (e == kNone && memory_on(view_)) {
          if (const std::uint32_t s = memory_find(view_, key); s != kNone) {
            const std::uint32_t len = ld(view_.slot(s).len);
            if (len > view_.params.value_bytes)
              return corrupt(
                  path, shm::detail::format("memory slot {} holds a {}-byte value (value size {})",
                                            s, len, view_.params.value_bytes));
            auto had = std::span<const std::byte>(
                reinterpret_cast<const std::byte*>(view_.slot_value(s)), len);
            auto n = shm::combine(p, had, op, std::span(fold.data(), view_.params.value_bytes));
            if (!n) return std::unexpected(n.error());
            if (*n == len && shm::detail::equal_short(fold.data(), had.data(), len)) {
              // The reader has it already: nothing to deliver, nobody to wake.
              bump(c.counters.unchanged);
              bump(c.counters.remembered_unchanged);
              return WriteOutcome{WriteStatus::Unchanged, 0};
            }
            first = std::span<const std::byte>(fold.data(), *n);
          }
        }
        if (e != kNone) {
          EntryHead& h = view_.entry(e);
          const std::uint32_t len = ld(h.len);
          if (len > view_.params.value_bytes)  // read and merged below: never past the slot
            return corrupt(
                path, shm::detail::format("entry {} holds a {}-byte value (value size {})", e, len,
                                          view_.params.value_bytes));
          const bool word = word_policy(p.id, view_.params.value_bytes);
          if (word && len == 8) {
            // Through the merge word, as a fast writer does (they merge
            // meanwhile). A shorter bit_or op is the same op zero padded.
            std::uint64_t value = 0;
            std::memcpy(&value, op.data(), std::min<std::size_t>(op.size(), 8));
            // Inside the rebase record, the word's ops folded into the
            // entry with this op: any sequence distance fits.
            std::uint64_t seq = 0;
            for (;;) {
              const Word w = read_word(view_, e);
              const std::uint64_t merged = word_fold(p.id, w.value, value);
              if (merged == w.value) {
                bump(c.counters.unchanged);  // (a sequence taken by a lost race: a gap)
                return WriteOutcome{WriteStatus::Unchanged, 0};
              }
              if (seq == 0) seq = take_seq();
              if (try_rebase(view_, e, w, merged, seq)) break;
            }
            update_full(view_, static_cast<Dimension>(ld(c.dimension)) == Dimension::Age
                                   ? monotonic_ns()
                                   : 0);  // only the age level reads the time
            notify_reader(c);
            return WriteOutcome{WriteStatus::Merged, seq};
          }
          // lww / keep_latest: the entry is held (fast writers wait out;
          // a live claimer's publish first, a dead one's claim undone), its
          // word folded into the bases and its value in the first buffer,
          // until the merge below is applied and the entry reopened.
          const bool copy = copy_policy(p.id);
          if (copy) (void)rebase_copy(view_, e, false);
          std::array<std::byte, kMaxValueSize> out;
          auto cur = std::span<const std::byte>(
              reinterpret_cast<const std::byte*>(value_at(view_, e)), len);
          auto n = shm::combine(p, cur, op, std::span(out.data(), view_.params.value_bytes));
          if (!n) {
            if (copy) reopen(view_, e);
            return std::unexpected(n.error());
          }
          if (*n == len && shm::detail::equal_short(out.data(), cur.data(), len)) {
            if (copy) reopen(view_, e);
            bump(c.counters.unchanged);
            return WriteOutcome{WriteStatus::Unchanged, 0};
          }
          const std::uint64_t seq = take_seq();
          const std::uint64_t ops = ld(h.op_count) + 1;
          // A fast writer's later sequence may be in the bases already.
          const std::uint64_t last = copy ? std::max(ld(h.last_seq), seq) : seq;
          // The intent: the entry's whole new state, valid before it is applied.
          st(c.intent_entry, e);
          st(c.intent_len, *n);
          ::shm::detail::relay_crash_point(CrashPoint::MergeIntentFilling);
          ::shm::detail::store_crash_tick();  // a value copy counts as one store
          shm::detail::copy_short(c.intent_value, out.data(), *n);
          st(c.intent_last_seq, last);
          st(c.intent_op_count, ops);
          // A SIGKILL lands between instructions: keep the compiler from
          // moving the stores across the commit points.
          std::atomic_signal_fence(std::memory_order_seq_cst);
          st(c.intent_state, static_cast<std::uint32_t>(HeadIntent::Merge));
          std::atomic_signal_fence(std::memory_order_seq_cst);
          ::shm::detail::relay_crash_point(CrashPoint::MergeIntentValid);
          if (word) {
            // bit_or into a shorter value: the value through the word, the
            // length last (from a length of 8 fast writers merge into it).
            set_word_value(view_, e, std::span<const std::byte>(out.data(), *n));
            ::shm::detail::relay_crash_point(CrashPoint::MergeMidValue);
            st(h.last_seq, seq);
            st(h.op_count, ops);
            st(h.len, *n);
          } else if (copy) {
            store_value(view_.buffer(e, 0), out.data(), *n);
            ::shm::detail::relay_crash_point(CrashPoint::MergeMidValue);
            st(h.len, *n);
            st(h.last_seq, last);
            st(h.op_count, ops);
          } else {
            const std::size_t half = *n / 2;
            ::shm::detail::store_crash_tick();  // a value copy counts as one store
            shm::detail::copy_short(view_.value(e), out.data(), half);
            ::shm::detail::relay_crash_point(CrashPoint::MergeMidValue);
            ::shm::detail::store_crash_tick();  // a value copy counts as one store
            shm::detail::copy_short(view_.value(e) + half, out.data() + half, *n - half);
            st(h.len, *n);
            st(h.last_seq, seq);
            st(h.op_count, ops);
          }
          st(c.bytes, ld(c.bytes) - len + *n);
          bump(c.pending_ops);
          ::shm::detail::relay_crash_point(CrashPoint::MergeApplied);
          std::atomic_signal_fence(std::memory_order_seq_cst);
          st(c.intent_state, static_cast<std::uint32_t>(HeadIntent::None));
          if (copy) reopen(view_, e);
          bump(c.counters.merged);
          bump(c.counters.conflated);
          update_full(view_, static_cast<Dimension>(ld(c.dimension)) == Dimension::Age
                                 ? monotonic_ns()
                                 : 0);  // only the age level reads the time
          notify_reader(c);
          return WriteOutcome{WriteStatus::Merged, seq};
        }
      }
      // A new entry is needed. Its creation time: the age level
      // (Dimension::Age, in ms) measures it against the precise clock; for
      // every other dimension it is only shown (the oldest entry's age in a
      // snapshot), so the coarse clock does (up to one kernel tick, 1-4 ms,
      // early). The precise read was a quarter of an append on a kvm-clock
      // VM (bench/RESULTS.md). An entry made before a retune to Age may
      // read up to a tick older than it is.
      const bool by_age = static_cast<Dimension>(ld(c.dimension)) == Dimension::Age;
      const std::uint64_t now = by_age ? monotonic_ns() : coarse_monotonic_ns();
      update_full(view_, by_age ? now : 0);  // only the age level reads the time
      const bool full = ld(c.is_full) != 0;
      const bool hard = ld(c.free_head) == kNone;
      WriteStatus outcome = WriteStatus::Appended;
      if (full || hard) {
        bool block = false;
        switch (static_cast<Overflow>(ld(c.overflow))) {
          case Overflow::Block:
            block = true;
            break;
          case Overflow::DropNewest:
            bump(c.counters.dropped);
            log_event(c, EventKind::Dropped, key, 1);
            return WriteOutcome{WriteStatus::Dropped, 0};
          case Overflow::DropOldest: {
            const std::uint32_t victim = ld(c.head);
            // Every entry in the reader's hands, or the oldest in a seal in
            // flight (overflow retuned from spill meanwhile): nothing to drop.
            if (victim == kNone || head_is_spilling(view_)) {
              bump(c.counters.refused_full);
              return WriteOutcome{WriteStatus::Full, 0};
            }
            EntryHead& vh = view_.entry(victim);
            const bool was_indexed = p.keyed && !closed_to_merges(ld(vh.flags));
            // The intent holds the op before the oldest goes: a writer killed
            // from here until the op is published leaves repair to finish
            // both (the protocol note in layout.hpp), never the drop alone.
            st(c.intent_entry, victim);
            st(c.intent_len, first.size());
            ::shm::detail::store_crash_tick();  // a value copy counts as one store
            shm::detail::copy_short(c.intent_value, first.data(), first.size());
            if (drop_seq == 0) drop_seq = take_seq();
            st(c.intent_last_seq, drop_seq);  // the append below takes this sequence
            st(c.intent_op_count, key);
            std::atomic_signal_fence(std::memory_order_seq_cst);
            st(c.intent_state, static_cast<std::uint32_t>(HeadIntent::DropAppend));
            std::atomic_signal_fence(std::memory_order_seq_cst);
            st(vh.state, static_cast<std::uint32_t>(EntryState::Free));
            ::shm::detail::relay_crash_point(CrashPoint::DropOldestFreed);
            list_unlink(view_, victim);
            if (was_indexed) index_erase(view_, ld(vh.key));
            st(c.depth, ld(c.depth) - 1);
            st(c.bytes, ld(c.bytes) - ld(vh.len));
            st(c.pending_ops, ld(c.pending_ops) - ld(vh.op_count));
            if (was_indexed) st(c.pending_keys, ld(c.pending_keys) - 1);
            // Closed, then bumped: ops merged before go with the drop.
            if (merge_words(p.id, view_.params.value_bytes)) (void)rebase(view_, victim);
            st(vh.next, ld(c.free_head));
            st(c.free_head, victim);
            bump(c.counters.dropped, ld(vh.op_count));
            log_event(c, EventKind::DroppedOldest, ld(vh.key), ld(vh.op_count));
            refresh_oldest(view_);
            outcome = WriteStatus::Displaced;
            break;
          }
          case Overflow::Spill:
            // The oldest entries go to a sealed page: this write starts the
            // seal, writes the page with the relay unlocked, finishes it,
            // then writes its op. While a seal is in flight other writes go
            // on into the free entries (the room between high water and
            // capacity) and park only when none is left. When a seal is
            // impossible (bound, manifest full, no space, all in the
            // reader's hands) the write blocks instead (counted; logged once
            // per write). A damaged manifest or pending list is Corrupt.
            if (dir != nullptr && ld(view_.spill->enabled) != 0) {
              // Only a write that would park needs a seal in flight to end:
              // the others go on into the free entries without touching the
              // seal mutex's line.
              if (hard)
                if (auto ok = reap_sealer(view_, path); !ok) return std::unexpected(ok.error());
              if (sealed && !hard) break;  // one seal per write, as the level allows
              if (sealer_ != nullptr) {
                // Background: the sealer seals while this write appends into
                // the room; with none left, the write waits for its seal.
                if (!hard) {
                  if (ld(view_.spill->seal_state) == 0) sealer_->kick();
                  break;
                }
                if (sealer_->busy()) {
                  wait_sealer = true;
                  break;
                }
              }
              SealStart begun = SealStart::Impossible;
              if (!seal_failed) {
                if (!job) {
                  job = std::make_unique<SealJob>();
                  job->page = std::move(t_seal_page);
                }
                auto b = begin_seal(view_, !fell_back, path, *job);
                if (!b) return std::unexpected(b.error());
                begun = *b;
              }
              seal_failed = false;
              if (begun == SealStart::Started) {
                seal_now = true;
                break;
              }
              if (begun == SealStart::InFlight && !hard) break;
              if (begun == SealStart::Impossible) fell_back = true;
              block = true;
              break;
            }
            [[fallthrough]];
          case Overflow::Conflate:
            // Conflate: keys keep merging; a new key is admitted while an entry is free.
            if (hard) {
              bump(c.counters.refused_full);
              return WriteOutcome{WriteStatus::Full, 0};
            }
            break;
        }
        if (seal_now || wait_sealer) {
          // unlock (Held), seal or wait for the sealer, then try the write again
        } else if (block) {
          if (start == 0) start = monotonic_ns();  // `now` may be the coarse clock
          const std::uint64_t waited = monotonic_ns() - start;
          if (waited >= budget) {
            bump(c.counters.timed_out);
            return WriteOutcome{WriteStatus::TimedOut, 0};
          }
          if (!parked_once) bump(c.counters.blocked);
          parked_once = true;
          st(c.writers_waiting, 1u);
          park_word = ld(c.space_word);
          park = true;  // unlock (Held), then park below
        }
      }
      if (!park && !seal_now && !wait_sealer) {
        // A damaged free list after a DropOldest drop would leave its intent
        // open for a later repair to replay: the relay is faulted instead.
        auto damaged = [&](std::string what) {
          if (outcome == WriteStatus::Displaced) st(c.faulted, 1u);
          return corrupt(path, std::move(what));
        };
        const std::uint32_t i = ld(c.free_head);
        if (i == kNone || i >= view_.params.capacity)
          return damaged(
              shm::detail::format("free list head {} (capacity {})", i, view_.params.capacity));
        EntryHead& h = view_.entry(i);
        if (ld(h.state) != static_cast<std::uint32_t>(EntryState::Free))
          return damaged(
              shm::detail::format("free list names entry {} in state {}", i, ld(h.state)));
        st(c.free_head, ld(h.next));
        const std::uint64_t seq = outcome == WriteStatus::Displaced ? drop_seq : take_seq();
        const std::uint64_t order = ld(c.next_order);
        st(c.next_order, order + 1);
        st(h.key, key);
        st(h.len, first.size());
        if (copy_policy(p.id)) {
          init_copy(view_, i, first);  // a new generation: stale fast writers fail
        } else if (word_policy(p.id, view_.params.value_bytes)) {
          init_word(view_, i, first);  // a new generation: stale fast writers fail
        } else {
          ::shm::detail::store_crash_tick();  // a value copy counts as one store
          shm::detail::copy_short(view_.value(i), first.data(), first.size());
        }
        st(h.first_seq, seq);
        st(h.last_seq, seq);
        st(h.op_count, 1u);
        st(h.order, order);
        st(h.created_ns, now);
        st(h.flags, 0u);
        ::shm::detail::relay_crash_point(CrashPoint::AppendFilled);
        std::atomic_signal_fence(std::memory_order_seq_cst);
        ::shm::detail::store_crash_tick();  // test-only kill at the Nth store
        // release: the fields above are visible to a fast writer that sees
        // the entry published (pairs with its acquire load of the state).
        h.state.store(static_cast<std::uint32_t>(EntryState::Pending), std::memory_order_release);
        ::shm::detail::relay_crash_point(CrashPoint::AppendPublished);
        list_append(view_, i);
        if (p.keyed) {
          index_insert(view_, key, i);
          bump(c.pending_keys);
        }
        bump(c.depth);
        bump(c.bytes, first.size());
        bump(c.pending_ops);
        if (ld(c.head) == i) st(c.oldest_ns, now);
        if (outcome == WriteStatus::Displaced) {
          std::atomic_signal_fence(std::memory_order_seq_cst);
          st(c.intent_state, static_cast<std::uint32_t>(HeadIntent::None));
        }
        bump(c.counters.appended);
        update_full(view_, now);
        notify_reader(c);
        return WriteOutcome{outcome, seq};
      }
    }  // unlocked
    if (wait_sealer) {
      sealer_->wait_idle();
      continue;
    }
    if (seal_now) {
      // The file I/O with the relay unlocked (the seal mutex held).
      const Result<spill::SealInfo> written = write_seal(*dir, *job);
      if (auto got = lock_in_time(); !got || !*got) {
        abandon_seal(view_);  // the next locker rolls it back
        if (!got) return std::unexpected(got.error());
        return WriteOutcome{WriteStatus::TimedOut, 0};
      }
      {
        Held held(c);
        if (finish_seal(view_, *dir, *job, written, !fell_back)) {
          sealed = true;
          wake_writers(c);  // room: writers parked behind the seal look again
        } else {
          // No wake: a failed seal freed nothing, and parked writers woken to
          // fail the same way would take turns at it. They look again at the
          // next drain, acknowledgement or retune (or their park's time slice).
          fell_back = true;
          seal_failed = true;
        }
        update_full(view_, monotonic_ns());
        notify_reader(c);  // the page, or the entries reopened: a waiting reader goes on
      }
      continue;
    }
    // Block: park until a drain, a commit or a retune bumps the word.
    const std::uint64_t waited = monotonic_ns() - start;
    const std::uint64_t left = budget > waited ? budget - waited : 0;
    (void)futex_wait(c.space_word, park_word, std::min<std::uint64_t>(left, 1'000'000'000ull));
  }
}

Result<std::optional<bool>> RelayWriter::room_for_set(bool announce) {
  Control& c = *view_.control;
  // A zero timeout: a live holder is waited out for one lock slice at most.
  auto got = lock_for(view_, segment_.path(), std::chrono::nanoseconds::zero());
  if (!got) return std::unexpected(got.error());
  if (!*got) return std::optional<bool>{};
  Held held(c);
  // As a write re-evaluates the level before it looks at is_full (the age
  // level grows with time; every other level is current already).
  const bool by_age = static_cast<Dimension>(ld(c.dimension)) == Dimension::Age;
  update_full(view_, by_age ? monotonic_ns() : 0);
  const bool room = ld(c.is_full) == 0 && ld(c.free_head) != kNone;
  // Raised under the mutex, as a parking write raises it: whoever makes room
  // reads it under the mutex after bumping space_word (wake_writers).
  if (!room && announce) st(c.writers_waiting, 1u);
  return room;
}

// ---------------------------------------------------------------- reader

Result<RelayReader> RelayReader::create(std::string_view name, const RelayConfig& config,
                                        const CreateOptions& options) {
  return adopt(create_relay(name, config, options));
}

Result<RelayReader> RelayReader::open(std::string_view name, const OpenOptions& options) {
  return adopt(open_relay(name, options));
}

Result<RelayReader> RelayReader::attach(Segment segment) {
  if (auto ok = relay::check_adopted(segment); !ok) return std::unexpected(ok.error());
  return adopt(std::move(segment));
}

Result<RelayReader> RelayReader::adopt(Result<Segment> seg) {
  if (!seg) return std::unexpected(std::move(seg.error()));
  auto v = make_view(*seg);
  if (!v) return std::unexpected(v.error());
  auto att = seg->attach(kReaderRole);
  if (!att) return std::unexpected(att.error());
  RelayReader r;
  r.segment_ = std::move(*seg);
  r.attachment_ = std::move(*att);
  r.view_ = *v;
  if (auto p = r.policy_now(); !p) return std::unexpected(p.error());
  // We hold the only reader slot: entries still InHand belong to a dead
  // predecessor (its reclaim did not run yet). Return them for redelivery.
  if (auto ok = lock(r.view_, r.segment_.path()); !ok) return std::unexpected(ok.error());
  {
    Held held(*r.view_.control);
    (void)return_in_hand(r.view_);
    if (auto ok = reap_sealer(r.view_, r.segment_.path()); !ok) return std::unexpected(ok.error());
    // A predecessor killed between acknowledging a page and removing its
    // file left the slot Acked: finish it (a missing directory is the next
    // take's error to report, not the open's).
    if (ld(r.view_.spill->enabled) != 0 && any_acked(r.view_))
      if (auto d = r.spill_dir(); d) finish_acked(r.view_, **d);
  }
  // A predecessor killed before its purger unlinked what it retired.
  if (ld(r.view_.spill->enabled) != 0)
    if (auto d = r.spill_dir(); d && spill::has_removed(**d)) r.purge_later(**d);
  return r;
}

Result<std::span<const RelayEntry>> RelayReader::take(std::size_t credit) {
  assert(view_.control != nullptr && "use of an empty RelayReader");
  if (!taken_.empty())
    return fail(Errc::OutOfOrder,
                shm::detail::format("{}: take() again while the {} entries of the last take() "
                                    "are in hand: commit() or abandon() them first",
                                    segment_.path(), taken_.size()));
  Control& c = *view_.control;
  const std::size_t n_max = std::min<std::size_t>(credit, view_.params.capacity);
  taken_.clear();
  taken_index_.clear();
  taken_.reserve(n_max);
  taken_index_.reserve(n_max);
  buffer_.resize(n_max * view_.params.value_bytes);
  if (n_max == 0) return std::span<const RelayEntry>{};
  if (summary_ == nullptr && catch_up_ == CatchUp::Conflated && ld(view_.spill->enabled) != 0 &&
      ld(view_.spill->cold_pages) >= 2) {
    auto d = spill_dir();
    if (!d) return std::unexpected(d.error());
    if (auto built = build_summary(**d); !built) return std::unexpected(built.error());
  }
  if (summary_ != nullptr) return take_summary(n_max);
  // Cold pages first (the spill directory is only needed when there are
  // some: a missing directory never stops the hot head). A page sealed after
  // this unlocked look is older than every hot entry: the hot take below
  // stops at it and the next take delivers it.
  if (ld(view_.spill->enabled) != 0 && ld(view_.spill->cold_pages) != 0) {
    bool taken = false;
    auto cold = take_cold(credit, taken);
    if (!cold || taken) return cold;
  }
  if (auto ok = lock(view_, segment_.path()); !ok) return std::unexpected(ok.error());
  Held held(c);
  st(c.reader_waiting, 0u);
  // A page sealed since take_cold looked is older than every hot entry: the
  // next take delivers it (the hot head is taken only up to the oldest page).
  const ManifestSlot* older = ld(view_.spill->enabled) != 0 ? oldest_slot(view_) : nullptr;
  const bool keyed = ld(c.policy) != policy::kRawFifo;
  // The delivered-value memory: every entry handed out is folded into its
  // key's remembered value; a redelivered one of a non-commutative policy
  // (keep_latest) forgets the key instead (a newer value of it may have gone
  // to a page since it was first taken).
  const MergePolicy* remembering = nullptr;
  if (memory_on(view_))
    if (auto pol = policy_now(); pol) remembering = *pol;
  const bool commutative = remembering != nullptr && memory_commutative(view_);
  const bool words = merge_words(ld(c.policy), view_.params.value_bytes);
  while (taken_.size() < n_max) {
    const std::uint32_t i = ld(c.head);
    if (i == kNone) break;
    if (i >= view_.params.capacity)
      return corrupt(segment_.path(), shm::detail::format("pending list head {} (capacity {})", i,
                                                          view_.params.capacity));
    EntryHead& h = view_.entry(i);
    if (older != nullptr && ld(older->first_order) < ld(h.order)) break;
    if ((ld(h.flags) & kSpilling) != 0) {
      // In a seal in flight: its page drains first, when it is recorded. A
      // dead sealer is reaped here (its entries come back, or its page).
      if (taken_.empty())
        if (auto ok = reap_sealer(view_, segment_.path()); !ok) return std::unexpected(ok.error());
      break;
    }
    const std::uint32_t len = ld(h.len);
    if (len > view_.params.value_bytes ||
        ld(h.state) != static_cast<std::uint32_t>(EntryState::Pending))
      return corrupt(segment_.path(), shm::detail::format("pending entry {}: state {}, len {}", i,
                                                          ld(h.state), len));
    const bool sealed = (ld(h.flags) & kSealed) != 0;
    const bool open_entry = !closed_to_merges(ld(h.flags));
    st(h.state, static_cast<std::uint32_t>(EntryState::InHand));
    if (taken_.empty()) ::shm::detail::relay_crash_point(CrashPoint::TakeMidEntries);
    list_unlink(view_, i);
    if (keyed && open_entry) {
      index_erase(view_, ld(h.key));
      st(c.pending_keys, ld(c.pending_keys) - 1);
    }
    st(c.depth, ld(c.depth) - 1);
    st(c.bytes, ld(c.bytes) - len);
    st(c.pending_ops, ld(c.pending_ops) - ld(h.op_count));
    bump(c.in_hand);
    // Closed, then bumped: every op merged into the word before is folded
    // into the entry, and no later one lands.
    if (words) (void)rebase(view_, i);
    std::byte* dst = buffer_.data() + taken_.size() * view_.params.value_bytes;
    std::memcpy(dst, value_at(view_, i), len);
    taken_.push_back(RelayEntry{ld(h.key), std::span<const std::byte>(dst, len), ld(h.first_seq),
                                ld(h.last_seq), ld(h.op_count), sealed, 0, ld(h.created_ns)});
    taken_index_.push_back(i);
    if (remembering != nullptr) {
      if (sealed && !commutative)
        forget(view_, ld(h.key));
      else
        remember(view_, *remembering, ld(h.key), std::span<const std::byte>(dst, len));
    }
  }
  if (!taken_.empty()) st(c.is_draining, 1u);
  refresh_oldest(view_);
  update_full(view_, monotonic_ns());  // wakes writers when the level fell to low water
  return std::span<const RelayEntry>(taken_);
}

RelayReader::RelayReader() noexcept = default;
RelayReader::RelayReader(RelayReader&&) noexcept = default;
RelayReader& RelayReader::operator=(RelayReader&&) noexcept = default;
RelayReader::~RelayReader() = default;

RelayReader::ReadAhead::~ReadAhead() {
  if (fork_generation != shm::fork_generation()) {
    // A forked child's copy: the thread is the parent's (see fork_generation.hpp).
    if (!thread.joinable()) return;
    if (auto* kept = new (std::nothrow) std::thread(std::move(thread)); kept != nullptr)
      keep_forever_erased(kept);
    else
      thread.detach();  // out of memory in a destructor: the lesser harm than terminate
    return;
  }
  wait();
}

Result<void> RelayReader::set_catch_up(CatchUp mode) {
  assert(view_.control != nullptr && "use of an empty RelayReader");
  if (mode == CatchUp::Conflated) {
    auto p = policy_now();
    if (!p) return std::unexpected(p.error());
    if (!conflatable_catch_up(**p))
      return fail(Errc::PolicyRefused,
                  shm::detail::format("{}: a conflated catch-up needs a keyed, associative, "
                                      "conflatable merge; policy '{}' is {}{}",
                                      segment_.path(), (*p)->name, (*p)->keyed ? "" : "not keyed, ",
                                      describe((*p)->flags)));
  }
  catch_up_ = mode;
  return {};
}

namespace {
// The page files one conflated summary may read (their records are held in
// memory while they are folded).
constexpr std::uint64_t kCatchUpBytes = 64ull << 20;

// What a take saw of a slot under the mutex: the page must still match it
// when the summary is published.
struct SlotSeen {
  std::uint64_t id = 0, records = 0, first_seq = 0, last_seq = 0;
  std::uint32_t crc = 0;
  [[nodiscard]] bool matches(const spill::PageHeader& h) const noexcept {
    return h.records == records && h.content_crc == crc && h.first_seq == first_seq &&
           h.last_seq == last_seq;
  }
  [[nodiscard]] bool still(const ManifestSlot& s) const noexcept {
    return ld(s.state) == static_cast<std::uint32_t>(relay::SlotState::Sealed) &&
           ld(s.page_id) == id && ld(s.records) == records && ld(s.content_crc) == crc &&
           ld(s.first_seq) == first_seq && ld(s.last_seq) == last_seq;
  }
};
}  // namespace

// Like take_cold, the pages are chosen under the mutex, read and folded with
// the relay unlocked, and checked under the mutex again: only this reader
// acknowledges, expires or refuses a sealed page and page ids are never
// reused, so slots still Sealed as seen name the files that were read. A page
// that cannot be read or does not match ends the summary before it (page by
// page then reaches it and refuses it with its error); a merge that fails,
// or fewer than two pages, make no summary (page by page goes on).
Result<bool> RelayReader::build_summary(spill::SpillDir& dir) {
  Control& c = *view_.control;
  SpillArea& a = *view_.spill;
  auto p = policy_now();
  if (!p) return std::unexpected(p.error());
  if (!conflatable_catch_up(**p)) return false;
  std::vector<SlotSeen> run;
  std::uint64_t delivered_before = 0;  // of the first page
  bool again = false;                  // the pages of a summary a dead reader was delivering
  if (auto ok = lock(view_, segment_.path()); !ok) return std::unexpected(ok.error());
  {
    Held held(c);
    finish_acked(view_, dir);
    expire_pages(view_, dir);
    const ManifestSlot* s = oldest_slot(view_);
    if (s == nullptr) return false;
    // A page partly committed goes on page by page.
    if (ld(a.cursor_page) == ld(s->page_id) && ld(a.cursor_record) != 0) return false;
    if (ld(a.taken_page) == ld(s->page_id)) delivered_before = ld(a.taken_record);
    auto seen = [](const ManifestSlot& x) {
      return SlotSeen{ld(x.page_id), ld(x.records), ld(x.first_seq), ld(x.last_seq),
                      ld(x.content_crc)};
    };
    // A summary a reader was delivering when it died: the same pages again
    // (those not acknowledged yet), every entry marked redelivered.
    if (const std::uint64_t last = ld(a.catch_up_page); last != 0) {
      const ManifestSlot* end = find_slot(view_, last);
      if (end != nullptr &&
          ld(end->state) == static_cast<std::uint32_t>(relay::SlotState::Sealed)) {
        for (; s != nullptr; s = next_slot(view_, *s)) {
          run.push_back(seen(*s));
          if (s == end) break;
        }
        again = true;
        s = nullptr;
      } else {
        st(a.catch_up_page, 0u);
      }
    }
    // Pages older than the hot head's oldest entry only: that entry drains
    // before every later page.
    const std::uint32_t h = ld(c.head);
    const std::uint64_t hot_order = h != kNone && h < view_.params.capacity
                                        ? ld(view_.entry(h).order)
                                        : std::numeric_limits<std::uint64_t>::max();
    std::uint64_t bytes = 0;
    for (; s != nullptr && run.size() < relay::kManifestSlots; s = next_slot(view_, *s)) {
      if (ld(s->first_order) > hot_order) break;
      if (!run.empty() && bytes + ld(s->file_bytes) > kCatchUpBytes) break;
      bytes += ld(s->file_bytes);
      run.push_back(seen(*s));
    }
  }
  if (run.size() < 2) return false;
  auto summary = std::make_unique<CatchUpSummary>(**p, view_.params.value_bytes);
  spill::Page page;
  std::size_t folded = 0;
  for (const SlotSeen& seen : run) {
    if (!spill::read_page_into(dir, seen.id, page) || !seen.matches(page.header)) break;
    // A merge that fails leaves that page half folded: no summary this time.
    if (!summary->fold(page, seen.id, folded == 0 ? delivered_before : 0)) return false;
    ++folded;
  }
  if (folded < 2) return false;
  run.resize(folded);
  if (again) summary->mark_redelivered();
  summary->finish();
  if (auto ok = lock(view_, segment_.path()); !ok) return std::unexpected(ok.error());
  Held held(c);
  for (const SlotSeen& seen : run) {
    const ManifestSlot* s = find_slot(view_, seen.id);
    if (s == nullptr || !seen.still(*s)) return false;  // went meanwhile: page by page
  }
  st(view_.spill->catch_up_page, run.back().id);
  st(c.is_draining, 1u);
  st(c.reader_waiting, 0u);
  summary_ = std::move(summary);
  return true;
}

std::span<const RelayEntry> RelayReader::take_summary(std::size_t credit) {
  CatchUpSummary& sum = *summary_;
  const std::span<const RelayEntry> all = sum.entries();
  const std::size_t end = std::min(all.size(), sum.committed + credit);
  for (std::size_t i = sum.committed; i < end; ++i) {
    taken_.push_back(all[i]);
    if (i < sum.delivered) taken_.back().redelivered = true;
  }
  sum.delivered = std::max(sum.delivered, end);
  from_summary_ = true;
  return std::span<const RelayEntry>(taken_);
}

// The summary's last entry committed: its pages are acknowledged (each in
// its own Ack intent, oldest first), then their files removed unlocked. A
// reader killed between two acknowledgements leaves the later pages Sealed:
// the next reader delivers them again (their ops are inside the summary's
// sequence ranges, which is how a non-idempotent consumer tells).
Result<void> RelayReader::commit_summary() {
  Control& c = *view_.control;
  CatchUpSummary& sum = *summary_;
  const std::size_t n = taken_.size();
  std::uint64_t ops = 0;
  for (const RelayEntry& e : taken_) ops += e.op_count;
  from_summary_ = false;
  taken_.clear();
  sum.committed += n;
  const bool last = sum.committed == sum.entries().size();
  auto d = spill_dir();
  if (!d) return std::unexpected(d.error());
  std::vector<std::uint64_t> acked;
  if (auto ok = lock(view_, segment_.path()); !ok) return ok;
  {
    Held held(c);
    bump(c.counters.drained, n);
    bump(c.counters.drained_ops, ops);
    if (!last) return {};
    st(c.is_draining, ld(c.in_hand) > 0 ? 1u : 0u);
    for (const std::uint64_t id : sum.pages()) {
      ManifestSlot* s = find_slot(view_, id);
      if (s == nullptr || ld(s->state) != static_cast<std::uint32_t>(relay::SlotState::Sealed))
        continue;  // expired meanwhile
      acknowledge(*s, ld(s->records));
      acked.push_back(id);
    }
    st(view_.spill->catch_up_page, 0u);  // every page of it acknowledged
  }
  for (const std::uint64_t id : acked)
    if (page_id_ == id) page_id_ = 0;
  summary_.reset();
  return remove_acknowledged(**d, acked);
}

Result<std::span<const RelayEntry>> RelayReader::take_cold(std::size_t credit, bool& taken) {
  Control& c = *view_.control;
  auto d = spill_dir();
  if (!d) return std::unexpected(d.error());
  spill::SpillDir& dir = **d;
  // The page file is read with the relay unlocked (a disk read takes
  // milliseconds, and writers must not wait for the reader's disk): the first
  // round finds the oldest page and leaves the lock to read it, the second
  // checks that the page is still the oldest sealed one and matches its slot.
  // Only this reader expires, acknowledges or refuses a sealed page, and page
  // ids are never reused, so a slot still Sealed under the same id names the
  // file that was read. A page read ahead (read_ahead(), started when the
  // page before it began to be delivered) stands in for the read.
  std::uint64_t read_id = 0;
  std::optional<Error> read_error;
  for (int round = 0;; ++round) {
    if (auto ok = lock(view_, segment_.path()); !ok) return std::unexpected(ok.error());
    std::uint64_t to_read = 0, from_ahead = 0, next = 0;
    bool deliver = false;
    {
      Held held(c);
      finish_acked(view_, dir);
      expire_pages(view_, dir);
      ManifestSlot* s = oldest_slot(view_);
      if (s == nullptr) return std::span<const RelayEntry>{};
      const std::uint32_t h = ld(c.head);
      if (h != kNone && h < view_.params.capacity && ld(view_.entry(h).order) < ld(s->first_order))
        return std::span<const RelayEntry>{};  // the hot head's oldest entry goes first
      const std::uint64_t id = ld(s->page_id);
      if (page_id_ != id && read_id != id) {
        if (ahead_ != nullptr && ahead_->page_id == id)
          from_ahead = id;  // read ahead while the last page was delivered
        else
          to_read = id;  // unlocked, below
      } else {
        if (page_id_ != id) {
          std::optional<Error> bad = std::move(read_error);
          if (!bad && (page_.header.records != ld(s->records) ||
                       page_.header.content_crc != ld(s->content_crc) ||
                       page_.header.first_seq != ld(s->first_seq) ||
                       page_.header.last_seq != ld(s->last_seq)))
            bad = Error{
                Errc::Corrupt,
                shm::detail::format("{}/{}: {} records, crc {:#010x}; the manifest recorded {} "
                                    "records, crc {:#010x}",
                                    dir.path(), spill::page_file_name(id), page_.header.records,
                                    page_.header.content_crc, ld(s->records), ld(s->content_crc))};
          if (bad) {
            // Refused, counted, moved aside, never half-applied. The error
            // tells the caller order is broken here; the next take goes on
            // after it.
            const std::uint64_t lost = ld(s->ops);
            std::string moved;
            refuse_page(view_, dir, *s, bad->code, moved);
            return fail(bad->code, shm::detail::format(
                                       "{}: cold page {} refused ({} ops lost), moved to {}: {}",
                                       segment_.path(), id, lost, moved, bad->message));
          }
          page_id_ = id;
        }
        claim_cold(id, credit);
        deliver = true;
        if (const ManifestSlot* n = next_slot(view_, *s); n != nullptr) next = ld(n->page_id);
      }
    }
    if (deliver) {
      if (next != 0) read_ahead(next);
      // The records are copied out of the reader's own page with the relay
      // unlocked (a page holds thousands: their handles' first touch faults).
      fill_cold();
      taken = true;
      return std::span<const RelayEntry>(taken_);
    }
    // A page that went meanwhile (expired by a retune to a shorter ttl, say)
    // makes the next round read the new oldest. A writer may seal a page
    // that becomes the oldest (entries a dead reader returned), so the
    // rounds are bounded.
    if (round > static_cast<int>(relay::kManifestSlots))
      return std::span<const RelayEntry>{};  // nothing cold this time; the next take reads again
    page_id_ = 0;                            // page_ is overwritten below
    read_error.reset();
    if (from_ahead != 0) {
      ahead_->wait();
      std::swap(page_, ahead_->page);  // both buffers reused, in turn
      read_error = std::move(ahead_->error);
      ahead_->error.reset();
      ahead_->page_id = 0;
      read_id = from_ahead;
    } else {
      read_id = to_read;
      if (auto read = spill::read_page_into(dir, to_read, page_); !read)  // page_'s buffers reused
        read_error = std::move(read.error());
    }
    ::shm::detail::spill_crash_point(test_hooks::SpillCrashPoint::ColdPageRead);
  }
}

void RelayReader::read_ahead(std::uint64_t id) {
  if (ahead_ == nullptr) {
    auto d = spill::SpillDir::open(spill_dir_of(view_), false);
    if (!d || d->relay_id() != ld(view_.spill->relay_id)) return;
    ahead_ = std::make_unique<ReadAhead>();
    ahead_->dir = std::move(*d);
  }
  if (ahead_->page_id == id) return;
  // A read still running is of a page no take wanted (acknowledged in a
  // conflated summary, expired, refused): joining it would make this take
  // wait for a disk read it does not use. The take that reaches `id` reads
  // it itself instead.
  if (ahead_->reading.load(std::memory_order_acquire)) return;
  ahead_->wait();
  ahead_->page_id = id;
  ahead_->error.reset();
  ReadAhead* a = ahead_.get();
  a->reading.store(true, std::memory_order_relaxed);
  try {
    // The thread touches nothing but `a` and the page file; the take that
    // uses the page joins it first (the join orders its writes before).
    a->thread = std::thread([a] {
      if (auto read = spill::read_page_into(a->dir, a->page_id, a->page); !read)
        a->error = std::move(read.error());
      a->reading.store(false, std::memory_order_release);
    });
  } catch (const std::system_error&) {
    a->reading.store(false, std::memory_order_relaxed);
    a->page_id = 0;  // no thread to be had: the take reads the page itself
  }
}

// Under the mutex: takes up to `credit` records of the cached page `id`
// (page_) from the egress cursor, and records how far delivery goes.
void RelayReader::claim_cold(std::uint64_t id, std::size_t credit) {
  Control& c = *view_.control;
  SpillArea& a = *view_.spill;
  const std::uint64_t from = ld(a.cursor_page) == id ? ld(a.cursor_record) : 0;
  const std::uint64_t delivered = ld(a.taken_page) == id ? ld(a.taken_record) : 0;
  const std::uint64_t end = std::min<std::uint64_t>(page_.records(), from + credit);
  cold_page_ = id;
  cold_from_ = from;
  cold_end_ = end;
  cold_redelivered_ = delivered;
  st(a.taken_page, id);
  st(a.taken_record, std::max(delivered, end));
  st(c.is_draining, 1u);
  st(c.reader_waiting, 0u);
}

// Unlocked: the claimed records as entries (their values point into page_).
void RelayReader::fill_cold() {
  cold_ops_ = 0;
  for (std::uint64_t r = cold_from_; r < cold_end_; ++r) {
    const spill::Record rec = page_.record(r);
    taken_.push_back(RelayEntry{
        rec.head.key, rec.value, rec.head.first_seq, rec.head.last_seq, rec.head.op_count,
        r < cold_redelivered_ || (rec.head.flags & spill::kRecordRedelivered) != 0, cold_page_});
    cold_ops_ += rec.head.op_count;
  }
}

// The last record of a page committed: the page is acknowledged inside the
// Ack intent (a kill anywhere in it: the repair counts it once; see the spill
// note in shm/relay/layout.hpp). The slot stays Acked until its file is gone.
void RelayReader::acknowledge(ManifestSlot& s, std::uint64_t records) {
  Control& c = *view_.control;
  SpillArea& a = *view_.spill;
  const std::uint64_t id = ld(s.page_id);
  begin_intent(a, relay::SpillIntent::Ack, id);
  st(s.state, static_cast<std::uint32_t>(relay::SlotState::Acked));  // the commit point
  ::shm::detail::spill_crash_point(test_hooks::SpillCrashPoint::PageAcked);
  bump(a.counters.pages_acked);
  log_event(c, EventKind::PageAcked, id, records);
  ::shm::detail::spill_crash_point(test_hooks::SpillCrashPoint::AckCounted);
  end_intent(a);
  recompute_cold(view_);  // an Acked page is not cold any more
}

// The files go with the relay unlocked: writers never wait for the reader's
// rename and directory fsync. Killed in between, the slots stay Acked and
// whoever next finishes acknowledgements (this reader's next take, a
// reader's open, a repair) removes the files and frees them. A retired file
// is out of the directory for good (never listed, read or adopted); only
// its unlink is left, to purger_: on ext4 it waits about 0.5 ms per 1 MiB
// page, half a page read, which the drain no longer pays.
Result<void> RelayReader::remove_acknowledged(spill::SpillDir& dir,
                                              std::span<const std::uint64_t> ids) {
  std::vector<std::uint64_t> removed;
  removed.reserve(ids.size());
  for (const std::uint64_t id : ids) {
    const Result<void> gone = spill::retire_page(dir, id);
    ::shm::detail::spill_crash_point(test_hooks::SpillCrashPoint::FileRemoved);
    if (gone) removed.push_back(id);  // else kept Acked: finished by a later take
  }
  if (removed.empty()) return {};
  {
    Control& c = *view_.control;
    if (auto ok = lock(view_, segment_.path()); !ok) return ok;
    Held held(c);
    for (const std::uint64_t id : removed)
      if (ManifestSlot* s = find_slot(view_, id);
          s != nullptr && ld(s->state) == static_cast<std::uint32_t>(relay::SlotState::Acked))
        release_slot(view_, *s);
    wake_writers(c);  // a writer that fell back to Block may spill again
  }
  purge_later(dir);
  return {};
}

void RelayReader::purge_later(spill::SpillDir& dir) {
  if (purger_ == nullptr) {
    auto own = spill::SpillDir::open(dir.path(), false);
    if (!own || own->relay_id() != dir.relay_id()) {
      (void)spill::purge_removed(dir);  // no descriptor of its own: here and now
      return;
    }
    purger_ = std::make_unique<spill::Purger>(std::move(*own));
  }
  purger_->kick();
}

Result<void> RelayReader::commit() {
  assert(view_.control != nullptr && "use of an empty RelayReader");
  if (from_summary_) return commit_summary();
  if (cold_page_ != 0) {
    Control& c = *view_.control;
    SpillArea& a = *view_.spill;
    const std::uint64_t id = cold_page_;
    const std::uint64_t n = taken_.size();
    cold_page_ = 0;
    taken_.clear();
    auto d = spill_dir();
    if (!d) return std::unexpected(d.error());
    if (auto ok = lock(view_, segment_.path()); !ok) return ok;
    {
      Held held(c);
      st(c.is_draining, ld(c.in_hand) > 0 ? 1u : 0u);
      ManifestSlot* s = find_slot(view_, id);
      if (s == nullptr || ld(s->state) != static_cast<std::uint32_t>(relay::SlotState::Sealed))
        return {};  // expired or refused meanwhile
      bump(c.counters.drained, n);
      bump(c.counters.drained_ops, cold_ops_);
      const std::uint64_t done = cold_from_ + n;
      if (done < ld(s->records)) {
        st(a.cursor_page, id);
        st(a.cursor_record, done);
        return {};
      }
      acknowledge(*s, n);
    }
    if (page_id_ == id) page_id_ = 0;
    const std::uint64_t ids[] = {id};
    return remove_acknowledged(**d, ids);
  }
  if (taken_index_.empty()) {
    taken_.clear();
    return {};
  }
  Control& c = *view_.control;
  if (auto ok = lock(view_, segment_.path()); !ok) return ok;
  Held held(c);
  // All or nothing: a reader killed inside leaves repair to free every InHand
  // entry (they are all this reader's: one reader at a time).
  st(c.intent_state, static_cast<std::uint32_t>(HeadIntent::Commit));
  std::atomic_signal_fence(std::memory_order_seq_cst);
  std::uint64_t ops = 0, freed = 0;
  for (std::uint32_t i : taken_index_) {
    EntryHead& h = view_.entry(i);
    if (ld(h.state) != static_cast<std::uint32_t>(EntryState::InHand)) continue;
    ops += ld(h.op_count);
    st(h.state, static_cast<std::uint32_t>(EntryState::Free));
    if (freed == 0) ::shm::detail::relay_crash_point(CrashPoint::CommitMidEntries);
    st(h.next, ld(c.free_head));
    st(c.free_head, i);
    ++freed;
  }
  st(c.in_hand, ld(c.in_hand) - std::min<std::uint64_t>(freed, ld(c.in_hand)));
  st(c.is_draining, ld(c.in_hand) > 0 ? 1u : 0u);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  st(c.intent_state, static_cast<std::uint32_t>(HeadIntent::None));
  bump(c.counters.drained, freed);
  bump(c.counters.drained_ops, ops);
  taken_.clear();
  taken_index_.clear();
  if (ld(c.is_full) == 0) wake_writers(c);  // room for a writer refused with no free entry
  return {};
}

Result<void> RelayReader::abandon() {
  if (from_summary_) {  // summary_->committed did not move: delivered again (redelivered)
    from_summary_ = false;
    taken_.clear();
    return {};
  }
  if (cold_page_ != 0) {  // the cursor did not move: delivered again (redelivered)
    cold_page_ = 0;
    taken_.clear();
    return {};
  }
  if (taken_index_.empty()) {
    taken_.clear();
    return {};
  }
  Control& c = *view_.control;
  taken_.clear();
  taken_index_.clear();
  if (auto ok = lock(view_, segment_.path()); !ok) return ok;
  Held held(c);
  (void)return_in_hand(view_);
  return {};
}

namespace {

// Under the mutex (inside a write section): whether a take would return
// something, as wait() and a WaitSet decide it. A head in a seal in flight is
// not ready: its page will be (the sealer notifies); a dead sealer is reaped
// here. A cold page is ready unless the seal in flight holds older entries
// (its page, once recorded, goes first).
Result<bool> ready_held(const View& v, std::string_view path) {
  const Control& c = *v.control;
  bool spilling = head_is_spilling(v);
  if (spilling) {
    if (auto ok = reap_sealer(v, path); !ok) return std::unexpected(ok.error());
    spilling = head_is_spilling(v);
  }
  bool cold_ready = ld(v.spill->cold_pages) > 0;
  if (cold_ready && spilling) {
    const ManifestSlot* oldest = oldest_slot(v);
    cold_ready = oldest != nullptr && ld(oldest->first_order) < ld(v.entry(ld(c.head)).order);
  }
  return (ld(c.depth) > 0 && !spilling) || cold_ready;
}

}  // namespace

Result<std::optional<bool>> RelayReader::ready_for_set(bool announce) {
  // A summary being delivered: take() answers from it without the relay.
  if (summary_ != nullptr && taken_.empty()) return true;
  Control& c = *view_.control;
  // A zero timeout: a live holder is waited out for one lock slice at most.
  auto got = lock_for(view_, segment_.path(), std::chrono::nanoseconds::zero());
  if (!got) return std::unexpected(got.error());
  if (!*got) return std::optional<bool>{};
  Held held(c);
  auto ready = ready_held(view_, segment_.path());
  if (!ready) return std::unexpected(ready.error());
  // Raised under the mutex, as wait() raises it: the writer's notify_reader
  // reads it under the mutex after bumping data_word (docs/waitset.md).
  if (!*ready && announce) st(c.reader_waiting, 1u);
  return *ready;
}

Result<bool> RelayReader::wait(std::chrono::nanoseconds timeout) {
  Control& c = *view_.control;
  const std::uint64_t start = monotonic_ns();
  const std::uint64_t budget =
      timeout.count() <= 0 ? 0 : static_cast<std::uint64_t>(timeout.count());
  for (;;) {
    // Within the timeout: a live holder stopped inside the mutex makes this
    // wait false, not a wait for ever.
    const std::uint64_t spent = monotonic_ns() - start;
    auto got = lock_for(view_, segment_.path(),
                        std::chrono::nanoseconds(budget > spent ? budget - spent : 0));
    if (!got) return std::unexpected(got.error());
    if (!*got) return false;
    std::uint32_t word = 0;
    {
      Held held(c);
      auto ready = ready_held(view_, segment_.path());
      if (!ready) return std::unexpected(ready.error());
      if (*ready) {
        st(c.reader_waiting, 0u);
        return true;
      }
      st(c.reader_waiting, 1u);
      word = ld(c.data_word);
    }
    const std::uint64_t waited = monotonic_ns() - start;
    if (waited >= budget) return false;
    (void)futex_wait(c.data_word, word, std::min<std::uint64_t>(budget - waited, 1'000'000'000ull));
  }
}

// ---------------------------------------------------------------- free functions, roles

Result<Segment> create_relay(std::string_view name, const RelayConfig& config,
                             const CreateOptions& options) {
  return create_segment(name, config, options);
}

Result<Segment> open_relay(std::string_view name, const OpenOptions& options) {
  View v;
  return open_segment(name, options, v);
}

Result<void> relay::check_adopted(const Segment& seg) {
  ParamBlock storage{};
  if (auto ok = shm::detail::check_kind(seg, kind_spec(ParamBlock{}, true, storage)); !ok)
    return ok;
  auto v = make_view(seg);
  if (!v) return std::unexpected(v.error());
  return shm::detail::check_total_size(seg, v->geometry.data_size, "its relay parameters need");
}

Result<RelaySnapshot> read_relay_snapshot(std::string_view name, const OpenOptions& options) {
  OpenOptions o = options;
  o.read_only = true;
  View v;
  auto seg = open_segment(name, o, v);
  if (!seg) return std::unexpected(seg.error());
  return read_snapshot(v);
}

Result<void> retune_relay(std::string_view name, const Backpressure& bp,
                          const OpenOptions& options) {
  View v;
  auto seg = open_segment(name, options, v);
  if (!seg) return std::unexpected(seg.error());
  return retune_view(v, seg->path(), bp);
}

RelayConfig Outbox::config(PolicyId policy, Traffic traffic, std::uint32_t max_entries,
                           std::uint32_t value_bytes) {
  RelayConfig cfg;
  cfg.policy = policy;
  cfg.max_entries = max_entries;
  cfg.value_bytes = value_bytes;
  const std::uint64_t high = std::max<std::uint64_t>(1, max_entries - max_entries / 4);
  cfg.backpressure = Backpressure{Dimension::Count, high, high / 3,
                                  traffic == Traffic::State ? Overflow::Conflate : Overflow::Spill};
  if (traffic == Traffic::Events) {
    // Spill needs the store, and (the replay being at-least-once) the reader's
    // dedup by first_seq for a policy that is not idempotent: the preset
    // turns both on, so it creates as it is. An unknown policy is left for
    // create to refuse.
    cfg.spill.enabled = true;
    auto p = find_merge(policy);
    cfg.spill_dedup = p && !(*p)->flags.idempotent;
  }
  return cfg;
}

Result<RelayConfig> Inbox::config(PolicyId policy, std::uint32_t max_entries,
                                  std::uint32_t value_bytes) {
  auto p = find_merge(policy);
  if (!p) return std::unexpected(p.error());
  RelayConfig cfg;
  cfg.policy = policy;
  cfg.max_entries = max_entries;
  cfg.value_bytes = value_bytes;
  const std::uint64_t high = std::max<std::uint64_t>(1, max_entries - max_entries / 4);
  const bool conflate = (*p)->flags.conflatable && (*p)->flags.associative;
  cfg.backpressure = Backpressure{Dimension::Count, high, high / 3,
                                  conflate ? Overflow::Conflate : Overflow::Block};
  return cfg;
}

}  // namespace shm
