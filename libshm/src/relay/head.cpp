// The relay's hot head: the view over a mapping, the derived structures
// (pending list, free list, key index), locking with repair, hysteresis,
// the event ring, snapshots and verification.
#include "internal.hpp"
#include "segment/kind_spec.hpp"
#include "shm/platform/clock.hpp"
#include "shm/platform/file.hpp"
#include "shm/platform/futex.hpp"

#include "format/format.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <thread>

namespace shm {

namespace detail {
std::atomic<test_hooks::RelayCrashHook> relay_crash_hook{nullptr};
}  // namespace detail

void test_hooks::set_relay_crash_hook(RelayCrashHook hook) noexcept {
  // relaxed: installed before the operations it watches start (see the header).
  detail::relay_crash_hook.store(hook, std::memory_order_relaxed);
}

namespace relay::internal {

std::unexpected<Error> corrupt(std::string_view path, std::string what) {
  return fail(Errc::Corrupt, shm::detail::format("{}: {}", path, what));
}

std::string block_problem(const ParamBlock& p) {
  if (p.value_bytes < 1 || p.value_bytes > kMaxValueSize)
    return shm::detail::format("value_size {} outside [1, {}]", p.value_bytes, kMaxValueSize);
  if (p.capacity < kMinCapacity || p.capacity > kMaxCapacity)
    return shm::detail::format("capacity {} outside [{}, {}]", p.capacity, kMinCapacity,
                               kMaxCapacity);
  const std::uint32_t want = std::bit_ceil(std::max<std::uint32_t>(2, 2 * p.capacity));
  if (p.index_capacity != want)
    return shm::detail::format("index_capacity {} is not {} (2 x capacity {}, a power of two)",
                               p.index_capacity, want, p.capacity);
  if (p.remembered > kMaxCapacity)
    return shm::detail::format("remembered keys {} outside [0, {}]", p.remembered, kMaxCapacity);
  return {};
}

KindSpec kind_spec(const ParamBlock& p, bool any, ParamBlock& storage) {
  storage = any ? ParamBlock{} : p;
  return shm::detail::block_kind_spec(
      kRelayKind, "relay", kFingerprint, storage, any ? 0 : geometry(storage).data_size,
      [](const ParamBlock& f) {
        std::string why = block_problem(f);
        return why.empty() ? why : "segment parameters: " + why;
      },
      [](const ParamBlock& f, const ParamBlock& e, shm::detail::FieldCheck& check) {
        check.field("value_size", f.value_bytes, e.value_bytes)
            .field("capacity", f.capacity, e.capacity)
            .field("remembered_keys", f.remembered, e.remembered);
      });
}

View view_over(const ParamBlock& p, std::byte* base) noexcept {
  View v;
  v.params = p;
  v.geometry = geometry(p);
  v.control = reinterpret_cast<Control*>(base);
  v.entries = base + v.geometry.entries;
  v.index = reinterpret_cast<std::atomic<std::uint32_t>*>(base + v.geometry.index);
  v.memory = base + v.geometry.memory;
  v.memory_index = reinterpret_cast<std::atomic<std::uint32_t>*>(base + v.geometry.memory_index);
  v.spill = reinterpret_cast<SpillArea*>(base + v.geometry.spill);
  return v;
}

Result<View> make_view(const Segment& seg) {
  if (seg.header().kind != kRelayKind)
    return fail(Errc::KindMismatch,
                shm::detail::format("{}: kind: segment has {}, expected {} (relay)", seg.path(),
                                    seg.header().kind, kRelayKind));
  if (seg.header().fingerprint != kFingerprint)
    return fail(Errc::FingerprintMismatch,
                shm::detail::format(
                    "{}: relay layout fingerprint: segment has {:#018x}, this build has {:#018x}",
                    seg.path(), seg.header().fingerprint, kFingerprint));
  ParamBlock p{};
  if (seg.params().size() != sizeof p)
    return fail(Errc::ParamMismatch,
                shm::detail::format("{}: parameter block: segment has {} bytes, relay uses {}",
                                    seg.path(), seg.params().size(), sizeof p));
  std::memcpy(&p, seg.params().data(), sizeof p);
  if (std::string why = block_problem(p); !why.empty())
    return fail(Errc::ParamMismatch,
                shm::detail::format("{}: segment parameters: {}", seg.path(), why));
  if (seg.data().size() < geometry(p).data_size)
    return fail(Errc::SizeMismatch,
                shm::detail::format("{}: size: data area has {} bytes, its relay parameters "
                                    "need {}",
                                    seg.path(), seg.data().size(), geometry(p).data_size));
  View v = view_over(p, seg.data().data());
  v.header = &seg.header();
  v.fd = seg.fd();
  return v;
}

// ---------------------------------------------------------------- derived structures

namespace {

bool keyed_policy(const Control& c) noexcept {
  return ld(c.policy) != policy::kRawFifo;
}

std::uint32_t home(const View& v, std::uint64_t key) noexcept {
  const int bits = std::countr_zero(v.params.index_capacity);
  return bits == 0 ? 0
                   : static_cast<std::uint32_t>((key * 0x9E37'79B9'7F4A'7C15ull) >> (64 - bits));
}

// The rebase record (docs/relay.md, "The rebase record"): its fields, then
// rebase_state = 1, each kill-ordered before the next (the fences keep the
// compiler from reordering the stores a crash point counts).
void record_rebase(Control& c, std::uint32_t i, std::uint32_t gen, std::uint64_t count,
                   std::uint64_t last) noexcept {
  st(c.rebase_entry, i);
  st(c.rebase_gen, gen);
  st(c.rebase_op_count, count);
  st(c.rebase_last_seq, last);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  st(c.rebase_state, 1u);
  std::atomic_signal_fence(std::memory_order_seq_cst);
}

bool indexed(const Control& c, const EntryHead& e) noexcept {
  return keyed_policy(c) && ld(e.state) == static_cast<std::uint32_t>(EntryState::Pending) &&
         !closed_to_merges(ld(e.flags));
}

}  // namespace

void list_append(const View& v, std::uint32_t i) noexcept {
  Control& c = *v.control;
  EntryHead& e = v.entry(i);
  const std::uint32_t t = ld(c.tail);
  st(e.prev, t);
  st(e.next, kNone);
  if (t == kNone)
    st(c.head, i);
  else
    st(v.entry(t).next, i);
  st(c.tail, i);
}

void list_unlink(const View& v, std::uint32_t i) noexcept {
  Control& c = *v.control;
  EntryHead& e = v.entry(i);
  const std::uint32_t p = ld(e.prev), n = ld(e.next);
  if (p == kNone)
    st(c.head, n);
  else
    st(v.entry(p).next, n);
  if (n == kNone)
    st(c.tail, p);
  else
    st(v.entry(n).prev, p);
  st(e.prev, kNone);
  st(e.next, kNone);
}

std::uint32_t index_find(const View& v, std::uint64_t key) noexcept {
  const std::uint32_t mask = v.params.index_capacity - 1;
  std::uint32_t pos = home(v, key);
  for (std::uint32_t n = 0; n < v.params.index_capacity; ++n, pos = (pos + 1) & mask) {
    const std::uint32_t cell = ld(v.index[pos]);
    if (cell == 0) return kNone;
    const std::uint32_t i = cell - 1;
    if (i < v.params.capacity && ld(v.entry(i).key) == key) return i;
  }
  return kNone;
}

void index_insert(const View& v, std::uint64_t key, std::uint32_t i) noexcept {
  const std::uint32_t mask = v.params.index_capacity - 1;
  std::uint32_t pos = home(v, key);
  // Never full: at most `capacity` cells are used of 2 x capacity.
  for (std::uint32_t n = 0; n < v.params.index_capacity; ++n, pos = (pos + 1) & mask) {
    if (ld(v.index[pos]) == 0) {
      st(v.index[pos], i + 1);
      return;
    }
  }
}

// Backward-shift delete of the cell that names entry `i` (linear probing).
static void index_erase_entry(const View& v, std::uint64_t key, std::uint32_t i) noexcept {
  const std::uint32_t mask = v.params.index_capacity - 1;
  std::uint32_t pos = home(v, key);
  std::uint32_t n = 0;
  for (; n < v.params.index_capacity; ++n, pos = (pos + 1) & mask) {
    const std::uint32_t cell = ld(v.index[pos]);
    if (cell == 0) return;  // not indexed
    if (cell == i + 1) break;
  }
  if (n == v.params.index_capacity) return;
  std::uint32_t hole = pos;
  std::uint32_t j = pos;
  for (std::uint32_t m = 0; m < v.params.index_capacity; ++m) {
    j = (j + 1) & mask;
    const std::uint32_t cell = ld(v.index[j]);
    if (cell == 0) break;
    const std::uint32_t k = cell - 1 < v.params.capacity ? home(v, ld(v.entry(cell - 1).key)) : j;
    // Move the cell back into the hole unless its home lies cyclically in (hole, j].
    const bool stays = hole <= j ? (k > hole && k <= j) : (k > hole || k <= j);
    if (!stays) {
      st(v.index[hole], cell);
      hole = j;
    }
  }
  st(v.index[hole], 0u);
}

void index_erase(const View& v, std::uint64_t key) noexcept {
  const std::uint32_t i = index_find(v, key);
  if (i != kNone) index_erase_entry(v, key, i);
}

void refresh_oldest(const View& v) noexcept {
  Control& c = *v.control;
  const std::uint32_t h = ld(c.head);
  st(c.oldest_ns, h == kNone ? 0 : ld(v.entry(h).created_ns));
}

std::uint64_t level(const Control& c, std::uint64_t now_ns) noexcept {
  switch (static_cast<Dimension>(ld(c.dimension))) {
    case Dimension::Count:
      return ld(c.depth);
    case Dimension::Bytes:
      return ld(c.bytes);
    case Dimension::Keys:
      return ld(c.pending_keys);
    case Dimension::Age: {
      const std::uint64_t o = ld(c.oldest_ns);
      return o == 0 || o > now_ns ? 0 : (now_ns - o) / 1'000'000;
    }
  }
  return 0;
}

void log_event(Control& c, EventKind kind, std::uint64_t key, std::uint64_t count) noexcept {
  const std::uint64_t n = ld(c.counters.events);
  Event& e = c.events[n % kEventRing];
  st(e.time_ns, realtime_ns());
  st(e.key, key);
  st(e.count, count);
  st(e.kind, static_cast<std::uint32_t>(kind));
  st(e.number, n + 1);
  st(c.counters.events, n + 1);
}

bool update_full(const View& v, std::uint64_t now_ns) noexcept {
  Control& c = *v.control;
  const std::uint64_t l = level(c, now_ns);
  if (ld(c.is_full) == 0) {
    if (l >= ld(c.high_water)) {
      st(c.is_full, 1u);
      log_event(c, EventKind::FullSet, 0, l);
    }
    return false;
  }
  if (l <= ld(c.low_water)) {
    st(c.is_full, 0u);
    log_event(c, EventKind::FullCleared, 0, l);
    // Whatever brought the level down (a drain, a merge that shrank a value,
    // a retune, a repair), the writers parked by Block are woken here, so no
    // path that clears `is_full` can forget them.
    wake_writers(c);
    return true;
  }
  return false;
}

void notify_reader(Control& c) noexcept {
  bump(c.counters.notifies);
  st(c.data_word, ld(c.data_word) + 1);
  if (ld(c.reader_waiting) != 0) {
    st(c.reader_waiting, 0u);
    futex_wake(c.data_word, 1);
  }
}

void wake_writers(Control& c) noexcept {
  st(c.space_word, ld(c.space_word) + 1);
  if (ld(c.writers_waiting) != 0) {
    st(c.writers_waiting, 0u);
    futex_wake_all(c.space_word);
  }
}

// ---------------------------------------------------------------- merge word

Word read_word(const View& v, std::uint32_t i) noexcept {
  Word w;
  for (int attempt = 0; attempt < 64; ++attempt)
    if (load_word(v, i, w)) return w;
  // Fast writers keep landing: a compare-exchange of the word with a guess
  // returns it as it is (and changes nothing when the guess was right).
  Word same = w;
  (void)cas_word(v, i, w, same);
  return w;
}

bool try_rebase(const View& v, std::uint32_t i, Word w, std::uint64_t value,
                std::uint64_t seq) noexcept {
  Control& c = *v.control;
  EntryHead& h = v.entry(i);
  const std::uint32_t gen = word_gen(w.ctl) + 1;
  const std::uint64_t ops = word_ops(w.ctl);
  const std::uint64_t op = seq != 0 ? 1 : 0;  // the caller's op, folded into `value`
  const Word next{word_ctl(gen, 0, 0), value};
  if (ops == 0 && word_rseq(w.ctl) == 0 && op == 0) {
    // Nothing to fold: the bump alone. A kill before base_gen follows
    // leaves fast writers to the mutex path, and repair to set it.
    if (!cas_word(v, i, w, next)) return false;
    ::shm::detail::store_crash_tick();
    h.base_gen.store(gen, std::memory_order_release);  // pairs with the fast writer's acquire
    return true;
  }
  const std::uint64_t count = ld(h.op_count) + ops + op;
  const std::uint64_t last = std::max(ld(h.last_seq) + word_rseq(w.ctl), seq);
  record_rebase(c, i, gen, count, last);
  if (!cas_word(v, i, w, next)) {  // a fast writer landed: the caller folds again
    st(c.rebase_state, 0u);
    return false;
  }
  std::atomic_signal_fence(std::memory_order_seq_cst);
  st(h.op_count, count);
  st(h.last_seq, last);
  ::shm::detail::store_crash_tick();
  // release: the bases are visible before their generation (pairs with the
  // fast writer's acquire load of base_gen).
  h.base_gen.store(gen, std::memory_order_release);
  // A pending entry's ops are in pending_ops from now (the sum of bases).
  if (ld(h.state) == static_cast<std::uint32_t>(EntryState::Pending)) bump(c.pending_ops, ops + op);
  bump(c.counters.merged, ops + op);
  bump(c.counters.conflated, ops + op);
  bump(c.counters.writes, ops);  // the caller's write counted itself
  std::atomic_signal_fence(std::memory_order_seq_cst);
  st(c.rebase_state, 0u);
  return true;
}

std::uint64_t rebase(const View& v, std::uint32_t i) noexcept {
  if (copy_policy(ld(v.control->policy))) return rebase_copy(v, i, true);
  for (;;) {
    const Word w = read_word(v, i);
    if (try_rebase(v, i, w, w.value, 0)) return word_ops(w.ctl);
  }
}

void init_word(const View& v, std::uint32_t i, std::span<const std::byte> value) noexcept {
  std::uint64_t packed = 0;
  std::memcpy(&packed, value.data(), std::min<std::size_t>(value.size(), 8));
  Word w = read_word(v, i);
  std::uint32_t gen = word_gen(w.ctl) + 1;
  while (!cas_word(v, i, w, Word{word_ctl(gen, 0, 0), packed})) gen = word_gen(w.ctl) + 1;
  ::shm::detail::store_crash_tick();
  v.entry(i).base_gen.store(gen, std::memory_order_release);
}

void set_word_value(const View& v, std::uint32_t i, std::span<const std::byte> value) noexcept {
  std::uint64_t packed = 0;
  std::memcpy(&packed, value.data(), std::min<std::size_t>(value.size(), 8));
  Word w = read_word(v, i);
  while (!cas_word(v, i, w, Word{w.ctl, packed})) {
  }
}

void store_value(unsigned char* dst, const void* src, std::size_t n) noexcept {
  ::shm::detail::store_crash_tick();  // a value copy counts as one store
  auto* to = reinterpret_cast<std::uint64_t*>(dst);
  const auto* from = static_cast<const unsigned char*>(src);
  for (std::size_t k = 0; k * 8 < n; ++k) {
    std::uint64_t w = 0;
    std::memcpy(&w, from + k * 8, std::min<std::size_t>(8, n - k * 8));
    __atomic_store_n(to + k, w, __ATOMIC_RELAXED);  // fast writers read it framed by the word
  }
}

bool owner_alive(const View& v, std::uint64_t control) noexcept {
  const std::size_t slot = (control >> kCopyOwnerShift) & 0xFFFF;
  const auto generation = static_cast<std::uint32_t>(control >> kCopyGenShift);
  if (v.header == nullptr || v.fd < 0 || slot >= kMaxAttachments) return false;
  // [seg.A'] acquire: pairs with attach()'s release [seg.A].
  if (v.header->slots[slot].generation.load(std::memory_order_acquire) != generation) return false;
  auto probe = probe_byte(v.fd, slot_lock_offset(slot));
  return !probe || *probe == LockProbe::Held;  // a failed probe: wait and ask again
}

std::uint64_t rebase_copy(const View& v, std::uint32_t i, bool reopen_it) noexcept {
  Control& c = *v.control;
  EntryHead& h = v.entry(i);
  for (unsigned spins = 0;; ++spins) {
    Word w = read_word(v, i);
    if ((w.value & kCopyClaimed) != 0) {
      // A writer is filling the other buffer (a few hundred ns): wait for
      // its publish, unless the kernel says it died (its claim is undone
      // below: the current buffer was never touched).
      if (spins < 64) continue;
      if (owner_alive(v, w.value)) {
        std::this_thread::yield();
        continue;
      }
    }
    const std::uint64_t cur = w.value & kCopyBuffer;
    const std::uint32_t gen = word_gen(w.ctl) + 1;
    const std::uint64_t ops = word_ops(w.ctl);
    const bool fold = ops != 0 || word_rseq(w.ctl) != 0;
    const std::uint64_t count = ld(h.op_count) + ops;
    const std::uint64_t last = ld(h.last_seq) + word_rseq(w.ctl);
    if (fold) record_rebase(c, i, gen, count, last);
    const Word next{word_ctl(gen, 0, 0), cur};
    if (!cas_word(v, i, w, next)) {
      if (fold) st(c.rebase_state, 0u);
      continue;
    }
    if (cur != 0) {
      // The value is in the second buffer: back to the first. Fast writers
      // stay out meanwhile (the bases' generation is behind the word's).
      store_value(v.buffer(i, 0), v.buffer(i, 1), buffer_stride(v.params.value_bytes));
      Word at = next;
      while (!cas_word(v, i, at, Word{next.ctl, 0})) {
      }
    }
    if (fold) {
      st(h.op_count, count);
      st(h.last_seq, last);
    }
    if (reopen_it) {
      ::shm::detail::store_crash_tick();
      // release: the bases and the first buffer are visible before their
      // generation (pairs with the fast writer's acquire load of base_gen).
      h.base_gen.store(gen, std::memory_order_release);
    }
    if (fold) {
      if (ld(h.state) == static_cast<std::uint32_t>(EntryState::Pending)) bump(c.pending_ops, ops);
      bump(c.counters.merged, ops);
      bump(c.counters.conflated, ops);
      bump(c.counters.writes, ops);
      std::atomic_signal_fence(std::memory_order_seq_cst);
      st(c.rebase_state, 0u);
    }
    return ops;
  }
}

void reopen(const View& v, std::uint32_t i) noexcept {
  ::shm::detail::store_crash_tick();
  v.entry(i).base_gen.store(word_gen(read_word(v, i).ctl), std::memory_order_release);
}

namespace {

// Entry i's word moves to a new generation with no ops and value 0, then
// base_gen names it (release: what was stored before is visible to a fast
// writer that acquires base_gen).
void fresh_word(const View& v, std::uint32_t i) noexcept {
  Word w = read_word(v, i);
  std::uint32_t gen = word_gen(w.ctl) + 1;
  while (!cas_word(v, i, w, Word{word_ctl(gen, 0, 0), 0})) gen = word_gen(w.ctl) + 1;
  ::shm::detail::store_crash_tick();
  v.entry(i).base_gen.store(gen, std::memory_order_release);
}

}  // namespace

void init_copy(const View& v, std::uint32_t i, std::span<const std::byte> value) noexcept {
  store_value(v.buffer(i, 0), value.data(), value.size());
  fresh_word(v, i);
}

void reset_words(const View& v) noexcept {
  for (std::uint32_t i = 0; i < v.params.capacity; ++i) fresh_word(v, i);
}

void repair_words(const View& v) noexcept {
  Control& c = *v.control;
  if (ld(c.rebase_state) != 0) {
    // The rebase landed when the word has its generation: the bases follow.
    const std::uint32_t i = ld(c.rebase_entry);
    if (i < v.params.capacity &&
        word_gen(read_word(v, i).ctl) == static_cast<std::uint32_t>(ld(c.rebase_gen))) {
      EntryHead& h = v.entry(i);
      st(h.op_count, ld(c.rebase_op_count));
      st(h.last_seq, ld(c.rebase_last_seq));
      ::shm::detail::store_crash_tick();
      h.base_gen.store(static_cast<std::uint32_t>(ld(c.rebase_gen)), std::memory_order_release);
    }
    st(c.rebase_state, 0u);
  }
  if (copy_policy(ld(c.policy))) {
    // Every entry: a dead writer's claim undone, a value in the second
    // buffer moved back to the first, the word folded (an open entry's
    // too: the bases then hold its ops), the bases' generation set.
    for (std::uint32_t i = 0; i < v.params.capacity; ++i) (void)rebase_copy(v, i, true);
    return;
  }
  if (!word_policy(ld(c.policy), v.params.value_bytes)) return;
  for (std::uint32_t i = 0; i < v.params.capacity; ++i) {
    EntryHead& h = v.entry(i);
    const bool open = ld(h.state) == static_cast<std::uint32_t>(EntryState::Pending) &&
                      !closed_to_merges(ld(h.flags));
    if (!open) {
      // A holder may have died between a close and its bump: ops a stale
      // writer landed since are folded, and no other can land.
      (void)rebase(v, i);
    } else if (const std::uint32_t gen = word_gen(read_word(v, i).ctl);
               h.base_gen.load(std::memory_order_relaxed) != gen) {
      // A bump whose base_gen store was lost: nothing merged since (fast
      // writers need the two equal), so the bases are the word's.
      ::shm::detail::store_crash_tick();
      h.base_gen.store(gen, std::memory_order_release);
    }
  }
}

void raise_next_seq(Control& c, std::uint64_t at_least) noexcept {
  std::uint64_t cur = c.next_seq.load(std::memory_order_relaxed);
  while (cur < at_least) {
    ::shm::detail::store_crash_tick();
    if (c.next_seq.compare_exchange_weak(cur, at_least, std::memory_order_relaxed)) return;
  }
}

std::uint64_t word_ops_pending(const View& v) noexcept {
  const Control& c = *v.control;
  std::uint64_t ops = 0;
  std::uint32_t i = ld(c.head);
  const std::uint64_t depth = std::min<std::uint64_t>(ld(c.depth), v.params.capacity);
  for (std::uint64_t n = 0; n < depth && i < v.params.capacity; ++n) {
    const EntryHead& e = v.entry(i);
    ops += word_ops(e.ctl.load(std::memory_order_relaxed));
    i = ld(e.next);
  }
  return ops;
}

// ---------------------------------------------------------------- repair

bool rebuild_derived(const View& v, std::string& why) {
  Control& c = *v.control;
  const std::uint32_t cap = v.params.capacity;
  for (std::uint32_t k = 0; k < v.params.index_capacity; ++k) st(v.index[k], 0u);
  std::vector<std::uint32_t> pending;
  std::uint32_t free_head = kNone;
  std::uint64_t in_hand = 0;
  for (std::uint32_t i = cap; i-- > 0;) {
    EntryHead& e = v.entry(i);
    const std::uint32_t s = ld(e.state);
    if (s > static_cast<std::uint32_t>(EntryState::InHand) || ld(e.len) > v.params.value_bytes ||
        (ld(e.flags) & ~kEntryFlags) != 0) {
      why = shm::detail::format("entry {}: state {}, len {}, flags {} (value size {})", i, s,
                                ld(e.len), ld(e.flags), v.params.value_bytes);
      return false;
    }
    if (s == static_cast<std::uint32_t>(EntryState::Free)) {
      st(e.next, free_head);
      st(e.prev, kNone);
      free_head = i;
    } else if (s == static_cast<std::uint32_t>(EntryState::Pending)) {
      pending.push_back(i);
    } else {
      ++in_hand;
      st(e.prev, kNone);
      st(e.next, kNone);
    }
  }
  std::sort(pending.begin(), pending.end(), [&](std::uint32_t a, std::uint32_t b) {
    return ld(v.entry(a).order) < ld(v.entry(b).order);
  });
  st(c.head, kNone);
  st(c.tail, kNone);
  st(c.free_head, free_head);
  std::uint64_t bytes = 0, ops = 0, keys = 0;
  for (std::uint32_t i : pending) {
    EntryHead& e = v.entry(i);
    list_append(v, i);
    bytes += ld(e.len);
    ops += ld(e.op_count);
    if (indexed(c, e)) {
      // Two open entries for one key cannot come from a crash; if they ever
      // do, the older one is sealed (delivered as is) and the newer stays open.
      const std::uint32_t older = index_find(v, ld(e.key));
      if (older != kNone) {
        index_erase_entry(v, ld(e.key), older);
        st(v.entry(older).flags, ld(v.entry(older).flags) | kClosed);
        --keys;
      }
      index_insert(v, ld(e.key), i);
      ++keys;
    }
  }
  st(c.depth, pending.size());
  st(c.bytes, bytes);
  st(c.pending_ops, ops);
  st(c.pending_keys, keys);
  st(c.in_hand, in_hand);
  st(c.is_draining, in_hand > 0 ? 1u : 0u);
  refresh_oldest(v);
  return rebuild_memory(v, why);
}

void note_repair(Control& c) noexcept {
  bump(c.counters.repairs);
  log_event(c, EventKind::Repaired, 0, 0);
}

Result<void> reap_sealer(const View& v, std::string_view path) {
  bool reaped = false;
  std::string why;
  if (!reap_dead_sealer(v, reaped, why)) {
    st(v.control->faulted, 1u);
    return corrupt(path, "repair of a dead sealer found damage: " + why);
  }
  if (reaped) {
    note_repair(*v.control);
    update_full(v, monotonic_ns());
    wake_writers(*v.control);
    notify_reader(*v.control);  // the entries reopened, or the page recorded
  }
  return {};
}

bool head_is_spilling(const View& v) noexcept {
  const std::uint32_t h = ld(v.control->head);
  return h != kNone && h < v.params.capacity && (ld(v.entry(h).flags) & kSpilling) != 0;
}

namespace {

// HeadIntent::Merge: the intent holds the whole new state of the entry.
bool roll_merge_forward(const View& v, std::string& why) {
  Control& c = *v.control;
  const std::uint32_t i = ld(c.intent_entry);
  const std::uint32_t len = ld(c.intent_len);
  if (i >= v.params.capacity || len > v.params.value_bytes ||
      ld(v.entry(i).state) != static_cast<std::uint32_t>(EntryState::Pending)) {
    why = shm::detail::format("merge intent names entry {} (len {}), not a pending entry of {}", i,
                              len, v.params.capacity);
    return false;
  }
  EntryHead& e = v.entry(i);
  if (copy_policy(ld(c.policy))) {
    // The mutex path's merge holds the entry (its bases' generation behind
    // the word: no fast writer lands) from before the intent until after
    // it is cleared, and the repair rolls it forward before reopening.
    store_value(v.buffer(i, 0), c.intent_value, len);
    st(e.len, len);
    st(e.last_seq, ld(c.intent_last_seq));
    st(e.op_count, ld(c.intent_op_count));
    return true;
  }
  if (word_policy(ld(c.policy), v.params.value_bytes)) {
    // bit_or into a shorter value (the only merge of a word relay that takes
    // the intent): its length is stored last, and from a length of 8 fast
    // writers merge into the word; a length of 8 therefore means applied.
    if (len == 8 && ld(e.len) == 8) return true;
    set_word_value(
        v, i, std::span<const std::byte>(reinterpret_cast<const std::byte*>(c.intent_value), len));
    st(e.last_seq, ld(c.intent_last_seq));
    st(e.op_count, ld(c.intent_op_count));
    st(e.len, len);
    return true;
  }
  std::memcpy(v.value(i), c.intent_value, len);
  st(e.len, len);
  st(e.last_seq, ld(c.intent_last_seq));
  st(e.op_count, ld(c.intent_op_count));
  return true;
}

// HeadIntent::Commit: the dead reader had committed everything it held.
void roll_commit_forward(const View& v) {
  for (std::uint32_t i = 0; i < v.params.capacity; ++i)
    if (ld(v.entry(i).state) == static_cast<std::uint32_t>(EntryState::InHand))
      st(v.entry(i).state, static_cast<std::uint32_t>(EntryState::Free));
}

// HeadIntent::DropAppend: drops the oldest if it is still there, appends the
// op if it is not yet published (its sequence names it). The lists, index and
// counts are rebuilt afterwards from the entry table.
bool roll_drop_append_forward(const View& v, std::string& why) {
  Control& c = *v.control;
  const std::uint32_t victim = ld(c.intent_entry);
  const std::uint32_t len = ld(c.intent_len);
  const std::uint64_t seq = ld(c.intent_last_seq);
  if (victim >= v.params.capacity || len > v.params.value_bytes || seq == 0) {
    why = shm::detail::format(
        "drop-oldest intent names entry {} (len {}, sequence {}) in a "
        "relay of {} entries",
        victim, len, seq, v.params.capacity);
    return false;
  }
  constexpr auto kPending = static_cast<std::uint32_t>(EntryState::Pending);
  constexpr auto kFree = static_cast<std::uint32_t>(EntryState::Free);
  std::uint32_t published = kNone;
  for (std::uint32_t i = 0; i < v.params.capacity; ++i)
    if (ld(v.entry(i).state) == kPending && ld(v.entry(i).first_seq) == seq) published = i;
  EntryHead& old = v.entry(victim);
  if (victim != published && ld(old.state) == kPending) {
    st(old.state, kFree);
    // Closed, then bumped: ops a stale writer landed go with the drop.
    if (merge_words(ld(c.policy), v.params.value_bytes)) (void)rebase(v, victim);
  }
  if (published == kNone) {
    std::uint32_t i = 0;
    while (i < v.params.capacity && ld(v.entry(i).state) != kFree) ++i;
    if (i == v.params.capacity) {
      why = "drop-oldest intent: no free entry for its op after the drop";
      return false;
    }
    EntryHead& e = v.entry(i);
    const std::uint64_t order = ld(c.next_order);
    st(c.next_order, order + 1);
    st(e.key, ld(c.intent_op_count));
    st(e.len, len);
    if (copy_policy(ld(c.policy)))
      init_copy(
          v, i,
          std::span<const std::byte>(reinterpret_cast<const std::byte*>(c.intent_value), len));
    else if (word_policy(ld(c.policy), v.params.value_bytes))
      init_word(
          v, i,
          std::span<const std::byte>(reinterpret_cast<const std::byte*>(c.intent_value), len));
    else
      std::memcpy(v.value(i), c.intent_value, len);
    st(e.first_seq, seq);
    st(e.last_seq, seq);
    st(e.op_count, 1u);
    st(e.order, order);
    st(e.created_ns, coarse_monotonic_ns());
    st(e.flags, 0u);
    st(e.state, kPending);
  }
  raise_next_seq(c, seq + 1);
  return true;
}

}  // namespace

bool repair_held(const View& v, std::string& why) {
  Control& c = *v.control;
  // The merge words first: the rebase record, and every closed entry's
  // word folded and bumped before anything reads its bases. For a copy
  // policy the intents go first: a Merge intent's entry is held (no fast
  // writer lands) until its value is rolled forward, and repair_words
  // reopens it.
  const bool copy = copy_policy(ld(c.policy));
  if (copy) {
    // The rebase record only (the entries are rebased after the intents).
    if (ld(c.rebase_state) != 0) {
      const std::uint32_t i = ld(c.rebase_entry);
      if (i < v.params.capacity &&
          word_gen(read_word(v, i).ctl) == static_cast<std::uint32_t>(ld(c.rebase_gen))) {
        st(v.entry(i).op_count, ld(c.rebase_op_count));
        st(v.entry(i).last_seq, ld(c.rebase_last_seq));
      }
      st(c.rebase_state, 0u);
    }
  } else {
    repair_words(v);
  }
  const std::uint32_t intent = ld(c.intent_state);
  bool ok = true;
  switch (static_cast<HeadIntent>(intent)) {
    case HeadIntent::None:
      break;
    case HeadIntent::Merge:
      ok = roll_merge_forward(v, why);
      break;
    case HeadIntent::Commit:
      roll_commit_forward(v);
      break;
    case HeadIntent::DropAppend:
      ok = roll_drop_append_forward(v, why);
      break;
    case HeadIntent::Remember:
      ok = roll_remember_forward(v, why);
      break;
    default:
      why = shm::detail::format("intent state {} is not a head intent (0 to {})", intent,
                                kLastHeadIntent);
      return false;
  }
  if (!ok) return false;
  if (copy) repair_words(v);
  const bool rolled = intent != 0;
  st(c.intent_state, static_cast<std::uint32_t>(HeadIntent::None));
  if (!repair_spill(v, why)) return false;
  if (!rebuild_derived(v, why)) return false;
  bump(c.counters.repairs);
  log_event(c, EventKind::Repaired, 0, rolled ? 1 : 0);
  update_full(v, monotonic_ns());
  wake_writers(c);  // a parked writer may have lost its waker with the dead holder
  return true;
}

std::uint64_t return_in_hand(const View& v) {
  Control& c = *v.control;
  std::uint64_t n = 0;
  for (std::uint32_t i = 0; i < v.params.capacity; ++i) {
    EntryHead& e = v.entry(i);
    if (ld(e.state) != static_cast<std::uint32_t>(EntryState::InHand)) continue;
    st(e.flags, kSealed);
    st(e.state, static_cast<std::uint32_t>(EntryState::Pending));
    ++n;
  }
  if (n == 0) return 0;
  std::string why;
  if (!rebuild_derived(v, why)) {
    st(c.faulted, 1u);
    return n;
  }
  bump(c.counters.returned, n);
  log_event(c, EventKind::Returned, 0, n);
  update_full(v, monotonic_ns());
  return n;
}

namespace {

// What lock() and lock_for() do once the mutex answered `r`.
Result<void> locked(const View& v, std::string_view path, ::shm::detail::LockResult r) {
  Control& c = *v.control;
  if (r == ::shm::detail::LockResult::Acquired) [[likely]] {
    if (ld(c.faulted) == 0) [[likely]]
      return {};
    c.mutex.unlock();
    return fail(Errc::Faulted,
                shm::detail::format("{}: the relay is faulted (damage found by a repair); "
                                    "re-create it",
                                    path));
  }
  if (r == ::shm::detail::LockResult::OwnerDied) {
    begin_write(c);
    std::string why;
    const bool ok = ld(c.faulted) == 0 && repair_held(v, why);
    if (!ok) st(c.faulted, 1u);
    end_write(c);
    c.mutex.mark_consistent();
    if (!ok) {
      c.mutex.unlock();
      return corrupt(path, "repair after a holder died found damage: " + why);
    }
    return {};
  }
  if (r == ::shm::detail::LockResult::Unrecoverable)
    return fail(Errc::Faulted,
                shm::detail::format("{}: the relay mutex is not recoverable; re-create it", path));
  if (r == ::shm::detail::LockResult::DeadOwnerUnregistered)
    return ::shm::detail::fail_dead_owner(path, "relay", c.mutex);
  return fail(Errc::SystemError, shm::detail::format("{}: locking the relay mutex failed", path));
}

}  // namespace

Result<void> lock(const View& v, std::string_view path) {
  return locked(v, path, v.control->mutex.lock());
}

Result<bool> lock_for(const View& v, std::string_view path, std::chrono::nanoseconds timeout) {
  const ::shm::detail::LockResult r = v.control->mutex.lock_for(timeout);
  if (r == ::shm::detail::LockResult::TimedOut) return false;
  if (auto ok = locked(v, path, r); !ok) return std::unexpected(ok.error());
  return true;
}

// ---------------------------------------------------------------- observers

RelaySnapshot read_snapshot(const View& v) {
  const Control& c = *v.control;
  RelaySnapshot s;
  s.value_bytes = v.params.value_bytes;
  s.max_entries = v.params.capacity;
  for (int attempt = 0; attempt < 64; ++attempt) {
    // [relay.V2'] acquire: pairs with end_write's release [relay.V2].
    const std::uint32_t v1 = c.version.load(std::memory_order_acquire);
    s.policy = ld(c.policy);
    s.flags = flags_from_bits(ld(c.policy_flags));
    s.backpressure.dimension = static_cast<Dimension>(ld(c.dimension));
    s.backpressure.high_water = ld(c.high_water);
    s.backpressure.low_water = ld(c.low_water);
    s.backpressure.overflow = static_cast<Overflow>(ld(c.overflow));
    s.egress = static_cast<EgressOrder>(ld(c.egress));
    s.depth = ld(c.depth);
    s.bytes = ld(c.bytes);
    s.pending_keys = ld(c.pending_keys);
    s.lag = ld(c.pending_ops);
    s.in_hand = ld(c.in_hand);
    s.max_remembered = v.params.remembered;
    s.remembered = ld(c.remembered);
    const std::uint64_t oldest = ld(c.oldest_ns);
    const std::uint64_t now = monotonic_ns();
    s.oldest_age_ns = oldest == 0 || oldest > now ? 0 : now - oldest;
    s.is_full = ld(c.is_full) != 0;
    s.is_draining = ld(c.is_draining) != 0;
    s.faulted = ld(c.faulted) != 0;
    const Counters& k = c.counters;
    s.writes = ld(k.writes);
    s.appended = ld(k.appended);
    s.merged = ld(k.merged);
    s.unchanged = ld(k.unchanged);
    s.dropped = ld(k.dropped);
    s.conflated = ld(k.conflated);
    s.blocked = ld(k.blocked);
    s.timed_out = ld(k.timed_out);
    s.refused_full = ld(k.refused_full);
    s.drained = ld(k.drained);
    s.drained_ops = ld(k.drained_ops);
    s.returned = ld(k.returned);
    s.repairs = ld(k.repairs);
    s.retunes = ld(k.retunes);
    s.reconfigures = ld(k.reconfigures);
    s.notifies = ld(k.notifies);
    s.forgotten = ld(k.forgotten);
    s.remembered_unchanged = ld(k.remembered_unchanged);
    // The lock-free merge path's counts: Unchanged writes it judged, and the
    // ops in the pending entries' merge words (counted when folded).
    const std::uint64_t fast_unchanged = ld(c.fast_unchanged);
    s.writes += fast_unchanged;
    s.unchanged += fast_unchanged;
    if (merge_words(s.policy, v.params.value_bytes)) {
      const std::uint64_t in_words = word_ops_pending(v);
      s.lag += in_words;
      s.writes += in_words;
      s.merged += in_words;
      s.conflated += in_words;
    }
    const SpillArea& a = *v.spill;
    s.spill_enabled = ld(a.enabled) != 0;
    s.spill_page_size = ld(a.page_bytes);
    s.retention = static_cast<RetentionKind>(ld(a.retention));
    s.retention_bytes = ld(a.retention_bytes);
    s.retention_ttl_ms = ld(a.retention_ttl_ms);
    s.cold_pages = ld(a.cold_pages);
    s.cold_bytes = ld(a.cold_bytes);
    s.cold_ops = ld(a.cold_ops);
    s.lag += s.cold_ops;
    s.is_spilling = s.cold_pages > 0;
    s.cursor_page = ld(a.cursor_page);
    s.cursor_record = ld(a.cursor_record);
    s.catch_up_page = ld(a.catch_up_page);
    s.seal_in_flight = ld(a.seal_state) != 0;
    s.seal_page = s.seal_in_flight ? ld(a.seal_page) : 0;
    s.spilling_entries = 0;
    if (s.seal_in_flight)  // a scan of the entries only while a seal is writing its page
      for (std::uint32_t i = 0; i < v.params.capacity; ++i)
        if (ld(v.entry(i).state) == static_cast<std::uint32_t>(EntryState::Pending) &&
            (ld(v.entry(i).flags) & kSpilling) != 0)
          ++s.spilling_entries;
    const SpillCounters& sk = a.counters;
    s.pages_sealed = ld(sk.pages_sealed);
    s.entries_spilled = ld(sk.entries_spilled);
    s.ops_spilled = ld(sk.ops_spilled);
    s.pages_acked = ld(sk.pages_acked);
    s.pages_refused = ld(sk.pages_refused);
    s.pages_expired = ld(sk.pages_expired);
    s.pages_rebuilt = ld(sk.pages_rebuilt);
    s.spill_fallbacks = ld(sk.fallbacks);
    s.no_space = ld(sk.no_space);
    s.seal_errors = ld(sk.seal_errors);
    s.seals_rolled_forward = ld(sk.rolled_forward);
    s.seals_rolled_back = ld(sk.rolled_back);
    s.manifest.clear();
    for (const ManifestSlot& m : a.slots) {
      const std::uint32_t state = ld(m.state);
      if (state == static_cast<std::uint32_t>(SlotState::Free)) continue;
      s.manifest.push_back(
          RelaySnapshot::ColdPage{ld(m.page_id), ld(m.first_seq), ld(m.last_seq), ld(m.records),
                                  ld(m.ops), ld(m.file_bytes), ld(m.sealed_ns),
                                  state == static_cast<std::uint32_t>(SlotState::Acked)});
    }
    s.events.clear();
    for (const Event& e : c.events) {
      const std::uint64_t n = ld(e.number);
      if (n == 0) continue;
      s.events.push_back(RelayEvent{n - 1, ld(e.time_ns), static_cast<EventKind>(ld(e.kind)),
                                    ld(e.key), ld(e.count)});
    }
    // [relay.V1'] acquire fence: orders the loads above before the re-check;
    // pairs with begin_write's release fence [relay.V1].
    std::atomic_thread_fence(std::memory_order_acquire);
    // relaxed: ordered by the fence just above.
    s.consistent = (v1 & 1u) == 0 && c.version.load(std::memory_order_relaxed) == v1;
    if (s.consistent) break;
    if (attempt % 8 == 7) std::this_thread::yield();
  }
  std::sort(s.events.begin(), s.events.end(),
            [](const RelayEvent& a, const RelayEvent& b) { return a.number < b.number; });
  std::sort(s.manifest.begin(), s.manifest.end(),
            [](const RelaySnapshot::ColdPage& a, const RelaySnapshot::ColdPage& b) {
              return a.page_id < b.page_id;
            });
  if (s.spill_enabled) s.spill_dir = spill_dir_of(v);
  auto p = find_merge(s.policy);
  s.policy_name = p ? (*p)->name : shm::detail::format("policy-{}", s.policy);
  return s;
}

namespace {

std::vector<std::string> verify_tables(const View& v) {
  std::vector<std::string> out;
  const Control& c = *v.control;
  if (ld(c.faulted) != 0) out.push_back("the relay is FAULTED: a repair found damage");
  std::uint64_t pending = 0, in_hand = 0, bytes = 0, ops = 0, keys = 0;
  const bool words = merge_words(ld(c.policy), v.params.value_bytes);
  for (std::uint32_t i = 0; i < v.params.capacity; ++i) {
    const EntryHead& e = v.entry(i);
    const std::uint32_t s = ld(e.state);
    // The merge word: its bases belong to its generation (a rebase, a
    // close or a creation stores base_gen after the bump, in one section).
    if (words) {
      const std::uint64_t ctl = e.ctl.load(std::memory_order_relaxed);
      if (ld(e.base_gen) != word_gen(ctl))
        out.push_back(shm::detail::format("entry {}: merge word generation {}, bases of {}", i,
                                          word_gen(ctl), ld(e.base_gen)));
    }
    if (s > static_cast<std::uint32_t>(EntryState::InHand)) {
      out.push_back(
          shm::detail::format("entry {}: state {} is not free, pending or in hand", i, s));
      continue;
    }
    if (ld(e.len) > v.params.value_bytes)
      out.push_back(shm::detail::format("entry {}: length {} exceeds the value size {}", i,
                                        ld(e.len), v.params.value_bytes));
    if (s == static_cast<std::uint32_t>(EntryState::Pending)) {
      ++pending;
      bytes += ld(e.len);
      ops += ld(e.op_count);
      if (indexed(c, e)) {
        ++keys;
        if (index_find(v, ld(e.key)) != i)
          out.push_back(
              shm::detail::format("entry {} (key {}) is open but not indexed", i, ld(e.key)));
      }
      if (ld(e.op_count) == 0 || ld(e.first_seq) > ld(e.last_seq))
        out.push_back(shm::detail::format("entry {}: op count {}, sequences {}..{}", i,
                                          ld(e.op_count), ld(e.first_seq), ld(e.last_seq)));
    } else if (s == static_cast<std::uint32_t>(EntryState::InHand)) {
      ++in_hand;
    }
  }
  auto check = [&](std::string_view what, std::uint64_t stored, std::uint64_t counted) {
    if (stored != counted)
      out.push_back(shm::detail::format("{}: projection says {}, the entry table holds {}", what,
                                        stored, counted));
  };
  check("depth", ld(c.depth), pending);
  check("bytes", ld(c.bytes), bytes);
  check("lag (pending ops)", ld(c.pending_ops), ops);
  check("pending_keys", ld(c.pending_keys), keys);
  check("in_hand", ld(c.in_hand), in_hand);
  std::uint64_t walked = 0;
  std::uint64_t last_order = 0;
  for (std::uint32_t i = ld(c.head); i != kNone && walked <= v.params.capacity;
       i = ld(v.entry(i).next)) {
    if (i >= v.params.capacity) {
      out.push_back(shm::detail::format("pending list links to entry {} (capacity {})", i,
                                        v.params.capacity));
      break;
    }
    if (ld(v.entry(i).order) <= last_order && walked > 0)
      out.push_back(shm::detail::format("pending list out of order at entry {}", i));
    last_order = ld(v.entry(i).order);
    ++walked;
  }
  check("pending list length", walked, pending);
  if (ld(c.intent_state) > kLastHeadIntent)
    out.push_back(shm::detail::format("intent state {} is not a head intent (0 to {})",
                                      ld(c.intent_state), kLastHeadIntent));
  verify_memory(v, out);
  if (ld(c.low_water) >= ld(c.high_water))
    out.push_back(shm::detail::format("low_water {} is not below high_water {}", ld(c.low_water),
                                      ld(c.high_water)));
  return out;
}

}  // namespace

std::vector<std::string> verify_unlocked(const View& v) {
  using namespace std::chrono;
  const Control& c = *v.control;
  if (c.mutex.unrecoverable())
    return {"the relay is FAULTED: its mutex is not recoverable; re-create it"};
  if (c.mutex.owner_missing()) return {::shm::detail::dead_owner_note("relay", c.mutex)};
  const auto start = steady_clock::now();
  constexpr int kAttempts = 200;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    // [relay.V2'] acquire: pairs with end_write's release [relay.V2].
    const std::uint32_t v1 = c.version.load(std::memory_order_acquire);
    if ((v1 & 1u) != 0) {
      std::this_thread::sleep_for(microseconds(200));
      continue;
    }
    std::vector<std::string> out = verify_tables(v);
    // [relay.V1'] acquire fence: pairs with begin_write's release fence [relay.V1].
    std::atomic_thread_fence(std::memory_order_acquire);
    // relaxed: ordered by the fence just above.
    if (c.version.load(std::memory_order_relaxed) == v1) return out;
  }
  const auto ms = duration_cast<milliseconds>(steady_clock::now() - start).count();
  // [relay.V2'] acquire, as above.
  const std::uint32_t now = c.version.load(std::memory_order_acquire);
  if ((now & 1u) != 0)
    return {shm::detail::format(
        "a relay mutation has been in progress for at least {} ms (version {} is odd): its "
        "holder may have died inside the lock; the next locker repairs it",
        ms, now)};
  return {shm::detail::format(
      "no stable snapshot in {} attempts over {} ms: writers are too busy; retry", kAttempts, ms)};
}

Result<void> retune_view(const View& v, std::string_view path, const Backpressure& bp) {
  return retune_view(v, path, [&bp](Backpressure& now) { now = bp; });
}

Result<void> retune_view(const View& v, std::string_view path, const BackpressureEdit& edit) {
  Control& c = *v.control;
  if (auto ok = lock(v, path); !ok) return ok;
  Held held(c);
  // Read, edit, validate and store under the mutex: one retune is atomic.
  Backpressure bp{static_cast<Dimension>(ld(c.dimension)), ld(c.high_water), ld(c.low_water),
                  static_cast<Overflow>(ld(c.overflow))};
  edit(bp);
  if (auto ok = validate(bp, v.params.capacity, v.params.value_bytes); !ok) return ok;
  // The segment's declared flags decide, so a process without the policy
  // registered (shmctl) validates the same way.
  MergePolicy declared;
  declared.id = ld(c.policy);
  auto local = find_merge(declared.id);
  declared.name = local ? (*local)->name : shm::detail::format("policy-{}", declared.id);
  declared.flags = flags_from_bits(ld(c.policy_flags));
  if (bp.dimension == Dimension::Keys && declared.id == policy::kRawFifo)
    return fail(Errc::InvalidArgument,
                "dimension keys on raw_fifo: a FIFO has no keys (use count or bytes)");
  if (auto ok = validate_pair(declared, {bp.overflow, static_cast<EgressOrder>(ld(c.egress)),
                                         ld(c.spill_dedup) != 0, ld(v.spill->enabled) != 0});
      !ok)
    return ok;
  st(c.dimension, static_cast<std::uint32_t>(bp.dimension));
  st(c.high_water, bp.high_water);
  st(c.low_water, bp.low_water);
  st(c.overflow, static_cast<std::uint32_t>(bp.overflow));
  bump(c.counters.retunes);
  log_event(c, EventKind::Retuned, 0, bp.high_water);
  update_full(v, monotonic_ns());
  wake_writers(c);  // parked writers re-check against the new limits
  return {};
}

}  // namespace relay::internal
}  // namespace shm
