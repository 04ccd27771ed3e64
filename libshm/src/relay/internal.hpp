// Private helpers shared by the relay's sources (relay.cpp, head.cpp,
// repair.cpp, kind.cpp).
#pragma once

#include "platform/store_crash.hpp"
#include "shm/relay/relay.hpp"
#include "shm/testing/relay_crash.hpp"  // RelayCrashPoint (libshm/testing, not installed)
#include "shm/testing/spill_crash.hpp"  // SpillCrashPoint (libshm/testing, not installed)

#include "format/format.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);  // the TSan runtime's annotations
extern "C" void __tsan_release(void* addr);
#endif

namespace shm::detail {

// The test-only crash hook; null unless a test installed one. Defined in head.cpp.
extern std::atomic<test_hooks::RelayCrashHook> relay_crash_hook;

[[gnu::always_inline]] inline void relay_crash_point(test_hooks::RelayCrashPoint point) noexcept {
  // relaxed: the hook is installed before the operations it watches start.
  if (const auto hook = relay_crash_hook.load(std::memory_order_relaxed)) [[unlikely]]
    hook(point);
}

// The spill store's test-only crash hook; defined in spill.cpp.
extern std::atomic<test_hooks::SpillCrashHook> spill_crash_hook;

[[gnu::always_inline]] inline void spill_crash_point(test_hooks::SpillCrashPoint point) noexcept {
  // relaxed: the hook is installed before the operations it watches start.
  if (const auto hook = spill_crash_hook.load(std::memory_order_relaxed)) [[unlikely]]
    hook(point);
}

}  // namespace shm::detail

namespace shm::relay::internal {

using detail::View;

// Fields are touched by the mutex holder with relaxed loads and stores (the
// mutex orders them between holders), and by unlocked readers with relaxed
// loads framed by the seqlock ([relay.V1]/[relay.V2] below, [relay.V1']/[relay.V2']
// in read_snapshot and verify_unlocked). Always inlined (one move each): the
// write path is too long for the compiler to inline them by itself, and the
// calls showed in a profile of the write.
template <class T>
[[nodiscard, gnu::always_inline]] inline T ld(const std::atomic<T>& a) noexcept {
  return a.load(std::memory_order_relaxed);  // under the mutex, or seqlock-framed
}
template <class T, class U>
[[gnu::always_inline]] inline void st(std::atomic<T>& a, U v) noexcept {
  ::shm::detail::store_crash_tick();  // test-only kill at the Nth store (platform/store_crash.hpp)
  a.store(static_cast<T>(v), std::memory_order_relaxed);  // under the mutex
}
[[gnu::always_inline]] inline void bump(std::atomic<std::uint64_t>& a,
                                        std::uint64_t by = 1) noexcept {
  st(a, ld(a) + by);
}

[[gnu::always_inline]] inline void begin_write(Control& c) noexcept {
  st(c.version, ld(c.version) | 1u);
  // [relay.V1] release fence: the odd version is visible before any data store
  // below; pairs with the reader's acquire fence [relay.V1'].
  std::atomic_thread_fence(std::memory_order_release);
}
[[gnu::always_inline]] inline void end_write(Control& c) noexcept {
  // [relay.V2] release: every data store above is visible before the even
  // version; pairs with the reader's acquire load [relay.V2'].
  c.version.store(ld(c.version) + 1, std::memory_order_release);
}

// Holds the locked mutex inside a write section; unlocks on destruction.
class Held {
 public:
  explicit Held(Control& c) noexcept : c_(c) { begin_write(c_); }
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;
  ~Held() {
    end_write(c_);
    c_.mutex.unlock();
  }

 private:
  Control& c_;
};

// ---- the merge word (the lock-free merge path; protocol in layout.hpp) ----
// {ctl, value}: EntryHead::ctl and the value's first 8 bytes, one 16-byte,
// 16-aligned word, changed only by cas_word (lock cmpxchg16b). Not
// std::atomic<unsigned __int128>: g++ 12 compiles its compare-exchange to a
// call of libatomic, whose fallback is a per-process lock table, and TSan's
// runtime implements its 16-byte atomics with a per-process lock too (no
// cmpxchg16b in libtsan): neither is atomic between processes. The TSan
// build models the instruction as the acquire-release operation it is.
struct Word {
  std::uint64_t ctl = 0;
  std::uint64_t value = 0;
  friend bool operator==(const Word&, const Word&) = default;
};
[[nodiscard, gnu::always_inline]] inline std::uint32_t word_gen(std::uint64_t ctl) noexcept {
  return static_cast<std::uint32_t>(ctl >> kWordGenShift);
}
[[nodiscard, gnu::always_inline]] inline std::uint64_t word_ops(std::uint64_t ctl) noexcept {
  return (ctl >> kWordOpsShift) & kWordOpsMax;
}
[[nodiscard, gnu::always_inline]] inline std::uint64_t word_rseq(std::uint64_t ctl) noexcept {
  return ctl & kWordRseqMax;
}
[[nodiscard, gnu::always_inline]] inline std::uint64_t word_ctl(std::uint32_t gen,
                                                                std::uint64_t ops,
                                                                std::uint64_t rseq) noexcept {
  return (std::uint64_t{gen} << kWordGenShift) | (ops << kWordOpsShift) | rseq;
}
[[nodiscard, gnu::always_inline]] inline std::uint64_t* word_value(const View& v,
                                                                   std::uint32_t i) noexcept {
  return reinterpret_cast<std::uint64_t*>(v.value(i));
}
// Two 8-byte loads framed by ctl: equal ctl before and after means a pair
// the word held at one instant (every CAS changes ctl and ctl never repeats
// within 2^32 generations). False when a CAS landed in between.
[[nodiscard, gnu::always_inline]] inline bool load_word(const View& v, std::uint32_t i,
                                                        Word& w) noexcept {
  EntryHead& h = v.entry(i);
  // acquire (all three): a word loaded after a closer's bump shows the close
  // (pairs with cas_word's release); the value and the second ctl are not
  // read before the first ctl, nor the second ctl before the value.
  w.ctl = h.ctl.load(std::memory_order_acquire);
  w.value = __atomic_load_n(word_value(v, i), __ATOMIC_ACQUIRE);
  return h.ctl.load(std::memory_order_acquire) == w.ctl;
}
// The 16-byte compare-exchange (acquire-release; seq_cst on x86). On
// failure `expected` holds the word found. Counts as one store of the
// store-crash hook.
[[gnu::always_inline]] inline bool cas_word(const View& v, std::uint32_t i, Word& expected,
                                            const Word& desired) noexcept {
  ::shm::detail::store_crash_tick();  // test-only kill at the Nth store
  void* addr = &v.entry(i).ctl;
#if defined(__SANITIZE_THREAD__)
  __tsan_release(addr);
#endif
  struct alignas(16) Pair {
    std::uint64_t ctl, value;
  };
  bool ok = false;
  asm volatile("lock cmpxchg16b %1"
               : "=@ccz"(ok), "+m"(*static_cast<Pair*>(addr)), "+a"(expected.ctl),
                 "+d"(expected.value)
               : "b"(desired.ctl), "c"(desired.value)
               : "memory");
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(addr);
#endif
  return ok;
}
// Under the mutex: the word as it is now (a CAS of the word with itself
// when the framed load keeps failing).
[[nodiscard]] Word read_word(const View& v, std::uint32_t i) noexcept;
// The policies whose ops merge into the word: sum, max, min (8-byte
// values), and bit_or when the relay's values are 8 bytes.
[[nodiscard, gnu::always_inline]] inline bool word_policy(PolicyId id,
                                                          std::uint32_t value_bytes) noexcept {
  return id == policy::kSum || id == policy::kMax || id == policy::kMin ||
         (id == policy::kBitOr && value_bytes == 8);
}
// The fold of a word policy's 8-byte op into an 8-byte value.
[[nodiscard, gnu::always_inline]] inline std::uint64_t word_fold(PolicyId id, std::uint64_t cur,
                                                                 std::uint64_t op) noexcept {
  switch (id) {
    case policy::kSum:
      return cur + op;
    case policy::kMax:
      return cur > op ? cur : op;
    case policy::kMin:
      return cur < op ? cur : op;
    default:  // kBitOr
      return cur | op;
  }
}
// Under the mutex, inside a write section, for a relay with a word policy:
// folds entry i's word into its bases (op_count, last_seq) inside the
// rebase record, and bumps its generation, so no op merged before lands
// after. A closer calls it after the close (state, flags, index); the
// ops it folds are counted (merged, conflated, writes). Returns them.
std::uint64_t rebase(const View& v, std::uint32_t i) noexcept;
// The same with an op of the caller (sequence `seq`, nonzero) folded in:
// from the word `w` read before, the word becomes {value, gen + 1, 0, 0}
// and the bases take the op too (counted merged and conflated; writes
// only for the word's ops). False, with nothing changed, when the word is
// no longer `w` (a fast writer landed: fold again).
[[nodiscard]] bool try_rebase(const View& v, std::uint32_t i, Word w, std::uint64_t value,
                              std::uint64_t seq) noexcept;
// Under the mutex, for a relay with a word policy: entry i (Free, not yet
// published) gets value `value` (len <= 8 bytes, zero padded) under a new
// generation, and its bases' generation.
void init_word(const View& v, std::uint32_t i, std::span<const std::byte> value) noexcept;
// Under the mutex, for a relay with a word policy: the word's value
// becomes `value` (zero padded), its ctl unchanged (a merge of the intent
// path, which fast writers stay out of).
void set_word_value(const View& v, std::uint32_t i, std::span<const std::byte> value) noexcept;
// Repair: the rebase record, and every entry not open to merges folded
// and bumped (a holder may have died between a close and its bump); for a
// copy policy every entry (claims of dead writers undone, values moved
// back to the first buffer).
void repair_words(const View& v) noexcept;

// ---- the copy merge (lww, keep_latest; protocol in layout.hpp) ----
// The policies whose open entries take the copy merge: the word's second
// half is the copy control, the value is in one of two buffers.
[[nodiscard, gnu::always_inline]] inline bool copy_policy(PolicyId id) noexcept {
  return id == policy::kLww || id == policy::kKeepLatest;
}
// The policies with a live merge word (the word or the copy merge).
[[nodiscard]] inline bool merge_words(PolicyId id, std::uint32_t value_bytes) noexcept {
  return word_policy(id, value_bytes) || copy_policy(id);
}
// Entry i's value as the mutex holder reads and writes it: the first
// buffer for a copy policy (a rebase moved it there), else at the word.
[[nodiscard]] inline unsigned char* value_at(const View& v, std::uint32_t i) noexcept {
  return copy_policy(ld(v.control->policy)) ? v.buffer(i, 0) : v.value(i);
}
// Copies n bytes into a value buffer by relaxed 8-byte atomic stores (the
// last word zero padded; the buffer is a multiple of 8): fast writers read
// buffers unlocked. Counts as one store of the store-crash hook.
void store_value(unsigned char* dst, const void* src, std::size_t n) noexcept;
// The copy control naming a writer (its attachment slot and generation) as claimer.
[[nodiscard]] inline std::uint64_t copy_owner(std::size_t slot, std::uint32_t generation) noexcept {
  return (std::uint64_t{generation} << kCopyGenShift) |
         (static_cast<std::uint64_t>(slot) << kCopyOwnerShift);
}
// Whether the claimer a copy control names is alive (its slot's kernel lock
// held, at the same generation).
[[nodiscard]] bool owner_alive(const View& v, std::uint64_t control) noexcept;
// Under the mutex, for a copy policy: waits out a live claimer's claim
// (undoing a dead one's), folds the word into the bases inside the rebase
// record, bumps the generation and moves a value in the second buffer back
// to the first. With `reopen` false the bases' generation stays behind the
// word, so fast writers stay out until reopen(): the mutex path's merge.
std::uint64_t rebase_copy(const View& v, std::uint32_t i, bool reopen) noexcept;
void reopen(const View& v, std::uint32_t i) noexcept;
// Under the mutex, for a copy policy: entry i (Free, not yet published)
// gets `value` in its first buffer under a new generation.
void init_copy(const View& v, std::uint32_t i, std::span<const std::byte> value) noexcept;
// Under the mutex: every entry's word starts a new generation with an
// empty control (a merge swap: the word's second half means something else
// under the new policy).
void reset_words(const View& v) noexcept;
// next_seq = max(next_seq, at_least): a CAS loop (fast writers move it).
void raise_next_seq(Control& c, std::uint64_t at_least) noexcept;
// The ops merged into the words of the pending entries and not yet folded
// into their bases (lag, merged, conflated and writes add them on read).
// Unlocked, seqlock-framed: walks the pending list, at most `depth` steps.
[[nodiscard]] std::uint64_t word_ops_pending(const View& v) noexcept;

[[nodiscard]] std::unexpected<Error> corrupt(std::string_view path, std::string what);

[[nodiscard]] Result<View> make_view(const Segment& seg);
[[nodiscard]] View view_over(const ParamBlock& p, std::byte* base) noexcept;
[[nodiscard]] KindSpec kind_spec(const ParamBlock& p, bool any, ParamBlock& storage);
[[nodiscard]] std::string block_problem(const ParamBlock& p);

// Locks the mutex; on EOWNERDEAD repairs and marks it consistent. Fails
// (mutex released) when the relay is faulted or the mutex unusable.
[[nodiscard]] Result<void> lock(const View& v, std::string_view path);
// lock(), for a timed call: false (nothing locked) when a live holder kept
// the mutex past `timeout` (RobustMutex::lock_for: at most one lock slice
// more; a zero timeout still waits out one slice of a held mutex).
[[nodiscard]] Result<bool> lock_for(const View& v, std::string_view path,
                                    std::chrono::nanoseconds timeout);
// Under the mutex, inside a write section: rolls a valid intent forward and
// rebuilds every derived field from the entry table. False (and `faulted`
// set) when the table holds damage a crash cannot explain; `why` says what.
[[nodiscard]] bool repair_held(const View& v, std::string& why);
// Under the mutex: returns InHand entries to the pending list (sealed).
// Returns how many.
std::uint64_t return_in_hand(const View& v);

// Derived-structure helpers (under the mutex).
void list_append(const View& v, std::uint32_t i) noexcept;
void list_unlink(const View& v, std::uint32_t i) noexcept;
[[nodiscard]] std::uint32_t index_find(const View& v, std::uint64_t key) noexcept;  // kNone
void index_insert(const View& v, std::uint64_t key, std::uint32_t i) noexcept;
void index_erase(const View& v, std::uint64_t key) noexcept;
void refresh_oldest(const View& v) noexcept;

// ---- the delivered-value memory (memory.cpp; the protocol in layout.hpp) ----
// True when the relay has a memory and its policy is keyed, associative and idempotent.
[[nodiscard]] bool memory_on(const View& v) noexcept;
[[nodiscard]] bool memory_commutative(const View& v) noexcept;
// The slot remembering `key`, or kNone.
[[nodiscard]] std::uint32_t memory_find(const View& v, std::uint64_t key) noexcept;
// Under the mutex, inside a write section: folds `value` (given to the
// reader, or recorded in a page it will read) into `key`'s remembered value,
// taking a slot by CLOCK for a new key (inside the Remember intent).
void remember(const View& v, const MergePolicy& p, std::uint64_t key,
              std::span<const std::byte> value) noexcept;
// Under the mutex: forgets `key` (one store; always safe).
void forget(const View& v, std::uint64_t key) noexcept;
// Under the mutex: forgets every key (a merge swap).
void clear_memory(const View& v) noexcept;
// Repair: the Remember intent, and the memory's index and projection.
[[nodiscard]] bool roll_remember_forward(const View& v, std::string& why);
[[nodiscard]] bool rebuild_memory(const View& v, std::string& why);
void verify_memory(const View& v, std::vector<std::string>& out);

// The level of the configured dimension.
[[nodiscard]] std::uint64_t level(const Control& c, std::uint64_t now_ns) noexcept;
// Hysteresis: sets is_full at high water, clears it at low water (logging
// the change); returns true when it cleared, after waking the parked writers.
bool update_full(const View& v, std::uint64_t now_ns) noexcept;
void log_event(Control& c, EventKind kind, std::uint64_t key, std::uint64_t count) noexcept;
// Wakes parked writers if any (after making room).
void wake_writers(Control& c) noexcept;

[[nodiscard]] RelaySnapshot read_snapshot(const View& v);
[[nodiscard]] std::vector<std::string> verify_unlocked(const View& v);

// ---- the spill store (spill.cpp) ----
// At create (inside the segment's init, before READY, with `dir`'s binding
// lock held until the segment is published): binds the directory, removes
// torn temporary files, adopts every valid page into the manifest (refusing
// and moving aside the others) and returns the sequence and order floors the
// hot head must start above.
struct SpillFloors {
  std::uint64_t next_seq = 1;
  std::uint64_t next_order = 1;
};
// `segment_path` (absolute) binds the directory to this relay: a directory
// bound to another relay that still exists and spills there is RoleTaken.
[[nodiscard]] Result<SpillFloors> init_spill(const View& v, const SpillPolicy& policy,
                                             const spill::SpillDir& dir,
                                             std::string_view relay_name,
                                             const std::string& segment_path);
// Under the mutex: the reader found cold page `s` invalid (`why`): moves its
// file aside into refused/, counts it (pages_refused, the PageRefused event)
// and frees its slot, inside the Refuse intent. `moved_to` says where the
// file went (or why it could not be moved).
void refuse_page(const View& v, const spill::SpillDir& dir, ManifestSlot& s, Errc why,
                 std::string& moved_to);
// A seal runs in three steps (the seal protocol in shm/relay/layout.hpp):
// begin_seal under the relay mutex, write_seal with no relay mutex (the file
// I/O: other writers and the reader go on meanwhile), finish_seal under the
// relay mutex again. The sealer holds SpillArea::seal_mutex from begin to
// finish; a sealer that dies is found by reap_dead_sealer.
struct SealJob {
  std::uint64_t page_id = 0;
  std::uint32_t policy = 0;
  std::vector<std::uint32_t> chosen;  // the entries in the page (flagged kSpilling)
  spill::PageBuilder page;
};
enum class SealStart : std::uint8_t {
  Started,     // `job` holds the page; the caller must write_seal then finish_seal
  InFlight,    // another (live) writer is sealing: nothing to do here
  Impossible,  // spill impossible now (counted; logged when `log`): fall back to Block
};
// Under the mutex, inside a write section: chooses the oldest pending
// entries, copies them into `job`, closes them to merges (kSpilling) and
// opens the seal record. A damaged manifest or pending list is Corrupt
// (naming what is wrong), never a fallback.
[[nodiscard]] Result<SealStart> begin_seal(const View& v, bool log, std::string_view path,
                                           SealJob& job);
// No relay mutex: writes and seals the page file (spill::write_page).
[[nodiscard]] Result<spill::SealInfo> write_seal(const spill::SpillDir& dir, const SealJob& job);
// Under the mutex, inside a write section: records the page and frees its
// entries (true), or, when the write failed, reopens them and counts why
// (false: the caller falls back to Block). Releases the seal mutex.
bool finish_seal(const View& v, const spill::SpillDir& dir, const SealJob& job,
                 const Result<spill::SealInfo>& sealed, bool log);
// Releases the seal mutex of a seal whose finish cannot run (the relay
// mutex could not be taken): the next reap_dead_sealer rolls it back.
void abandon_seal(const View& v) noexcept;
// Under the mutex, inside a write section: when a seal is in flight and its
// sealer died, finishes it (the manifest recorded the page) or rolls it
// back (it did not), counts it once, and rebuilds the derived structures;
// `repaired` says whether it did. False (and `why`) on damage.
[[nodiscard]] bool reap_dead_sealer(const View& v, bool& repaired, std::string& why);
// Under the mutex: opens the spill intent of an acknowledgement, a Ttl
// expiry or a refusal of page `page` (the protocol in shm/relay/layout.hpp); the
// change's counter is read here, before its bump. Closed by end_intent after
// the bump.
void begin_intent(SpillArea& a, SpillIntent kind, std::uint64_t page,
                  std::uint64_t last_order = 0) noexcept;
void end_intent(SpillArea& a) noexcept;
// Under the mutex, during a repair: finishes or undoes an interrupted seal,
// acknowledgement or expiry and counts it if its holder did not, finishes
// acknowledged slots, recomputes the cold projections.
[[nodiscard]] bool repair_spill(const View& v, std::string& why);
// Under the mutex: wakes a reader parked in RelayReader::wait.
void notify_reader(Control& c) noexcept;
// Counts and logs a repair made outside the OwnerDied path of lock() (a dead
// sealer found by reap_dead_sealer), like repair_held does.
void note_repair(Control& c) noexcept;
// Under the mutex: reaps a dead sealer (reap_dead_sealer) and counts it; a
// damaged seal record faults the relay (Corrupt).
[[nodiscard]] Result<void> reap_sealer(const View& v, std::string_view path);
// Whether the oldest pending entry is in a seal in flight: the reader waits
// for the page (it drains before every newer entry).
[[nodiscard]] bool head_is_spilling(const View& v) noexcept;
// Rebuilds the pending and free lists, the key index and the projections
// from the entries' states and flags. False (and `why`) on damage.
[[nodiscard]] bool rebuild_derived(const View& v, std::string& why);
// Under the mutex: removes the files of acknowledged slots and frees them
// (slots the reader acknowledged and was killed before removing, or whose
// removal failed).
void finish_acked(const View& v, const spill::SpillDir& dir);
[[nodiscard]] bool any_acked(const View& v) noexcept;
// Under the mutex: expires pages past the Ttl retention.
void expire_pages(const View& v, const spill::SpillDir& dir);
// The oldest Sealed slot, or nullptr.
[[nodiscard]] ManifestSlot* oldest_slot(const View& v) noexcept;
[[nodiscard]] ManifestSlot* find_slot(const View& v, std::uint64_t page_id) noexcept;
// The Sealed slot that drains after `after` (the next first order), or nullptr.
[[nodiscard]] const ManifestSlot* next_slot(const View& v, const ManifestSlot& after) noexcept;
// Frees a slot whose page was acknowledged, expired or refused (projections, cursor).
void release_slot(const View& v, ManifestSlot& s) noexcept;
// Recounts cold_pages, cold_bytes and cold_ops from the Sealed slots.
void recompute_cold(const View& v) noexcept;
[[nodiscard]] std::string spill_dir_of(const View& v);
[[nodiscard]] std::vector<std::string> verify_spill(const View& v);

// Reconfigure and retune, shared by the handles and the kind's set(). Each
// retune is one step under the relay mutex: `edit` turns the limits the
// segment holds at that moment into the new ones, which are validated and
// stored before the mutex is released, so two retunes of different fields
// (shmctl set high_water=... and low_water=...) never lose one another.
using BackpressureEdit = std::function<void(Backpressure&)>;
[[nodiscard]] Result<void> retune_view(const View& v, std::string_view path,
                                       const BackpressureEdit& edit);
[[nodiscard]] Result<void> retune_view(const View& v, std::string_view path,
                                       const Backpressure& bp);
struct SpillLimits {
  std::uint64_t page_size = 0;
  std::uint64_t retention_bytes = 0;
  std::uint64_t ttl_ms = 0;
};
using SpillEdit = std::function<void(SpillLimits&)>;
[[nodiscard]] Result<void> retune_spill_view(const View& v, std::string_view path,
                                             const SpillEdit& edit);
[[nodiscard]] Result<void> retune_spill_view(const View& v, std::string_view path,
                                             std::uint64_t page_size, std::uint64_t retention_bytes,
                                             std::uint64_t ttl_ms);

}  // namespace shm::relay::internal
