// The delivered-value memory (the protocol note in shm/relay/layout.hpp): per
// key, the value last given to the reader, so that a write that cannot change
// what the reader has is Unchanged even after its key was drained.
#include "internal.hpp"
#include "shm/relay/policy.hpp"

#include "format/format.hpp"

#include <array>
#include <bit>
#include <cstring>

namespace shm::relay::internal {

namespace {

constexpr std::uint32_t kSlotFree = 0;
constexpr std::uint32_t kSlotUsed = 1;

std::uint32_t memory_cells(const View& v) noexcept {
  return memory_index_capacity(v.params.remembered);
}

std::uint32_t memory_home(const View& v, std::uint64_t key) noexcept {
  const int bits = std::countr_zero(memory_cells(v));
  return bits == 0 ? 0
                   : static_cast<std::uint32_t>((key * 0x9E37'79B9'7F4A'7C15ull) >> (64 - bits));
}

void memory_index_insert(const View& v, std::uint64_t key, std::uint32_t s) noexcept {
  const std::uint32_t cells = memory_cells(v);
  const std::uint32_t mask = cells - 1;
  std::uint32_t pos = memory_home(v, key);
  // Never full: at most `remembered` cells are used of 2 x remembered.
  for (std::uint32_t n = 0; n < cells; ++n, pos = (pos + 1) & mask) {
    if (ld(v.memory_index[pos]) == 0) {
      st(v.memory_index[pos], s + 1);
      return;
    }
  }
}

// Backward-shift delete of the cell that names slot `s` (linear probing).
void memory_index_erase(const View& v, std::uint64_t key, std::uint32_t s) noexcept {
  const std::uint32_t cells = memory_cells(v);
  const std::uint32_t mask = cells - 1;
  std::uint32_t pos = memory_home(v, key);
  std::uint32_t n = 0;
  for (; n < cells; ++n, pos = (pos + 1) & mask) {
    const std::uint32_t cell = ld(v.memory_index[pos]);
    if (cell == 0) return;  // not indexed
    if (cell == s + 1) break;
  }
  if (n == cells) return;
  std::uint32_t hole = pos;
  std::uint32_t j = pos;
  for (std::uint32_t m = 0; m < cells; ++m) {
    j = (j + 1) & mask;
    const std::uint32_t cell = ld(v.memory_index[j]);
    if (cell == 0) break;
    const std::uint32_t k =
        cell - 1 < v.params.remembered ? memory_home(v, ld(v.slot(cell - 1).key)) : j;
    // Move the cell back into the hole unless its home lies cyclically in (hole, j].
    const bool stays = hole <= j ? (k > hole && k <= j) : (k > hole || k <= j);
    if (!stays) {
      st(v.memory_index[hole], cell);
      hole = j;
    }
  }
  st(v.memory_index[hole], 0u);
}

// CLOCK (second chance): the first free slot from the hand, or the first used
// one whose reference bit is clear (clearing the bits it passes).
std::uint32_t memory_victim(const View& v) noexcept {
  Control& c = *v.control;
  const std::uint32_t n = v.params.remembered;
  std::uint32_t hand = ld(c.remember_hand) % n;
  for (std::uint32_t step = 0; step < 2 * n; ++step) {
    MemSlot& m = v.slot(hand);
    if (ld(m.state) == kSlotFree || ld(m.ref) == 0) break;
    st(m.ref, 0u);
    hand = hand + 1 == n ? 0 : hand + 1;
  }
  st(c.remember_hand, hand + 1 == n ? 0 : hand + 1);
  return hand;
}

void apply_slot(const View& v, std::uint32_t s, std::uint64_t key, const unsigned char* value,
                std::uint32_t len) noexcept {
  MemSlot& m = v.slot(s);
  st(m.key, key);
  st(m.len, len);
  ::shm::detail::store_crash_tick();  // a value copy counts as one store
  std::memcpy(v.slot_value(s), value, len);
  st(m.ref, 1u);
  st(m.state, kSlotUsed);
}

}  // namespace

bool memory_on(const View& v) noexcept {
  if (v.params.remembered == 0) return false;
  const Control& c = *v.control;
  if (ld(c.policy) == policy::kRawFifo) return false;
  const MergeFlags f = flags_from_bits(ld(c.policy_flags));
  return f.associative && f.idempotent;
}

bool memory_commutative(const View& v) noexcept {
  return flags_from_bits(ld(v.control->policy_flags)).commutative;
}

std::uint32_t memory_find(const View& v, std::uint64_t key) noexcept {
  const std::uint32_t cells = memory_cells(v);
  if (cells == 0) return kNone;
  const std::uint32_t mask = cells - 1;
  std::uint32_t pos = memory_home(v, key);
  for (std::uint32_t n = 0; n < cells; ++n, pos = (pos + 1) & mask) {
    const std::uint32_t cell = ld(v.memory_index[pos]);
    if (cell == 0) return kNone;
    const std::uint32_t s = cell - 1;
    if (s < v.params.remembered && ld(v.slot(s).state) == kSlotUsed && ld(v.slot(s).key) == key)
      return s;
  }
  return kNone;
}

void remember(const View& v, const MergePolicy& p, std::uint64_t key,
              std::span<const std::byte> value) noexcept {
  if (!memory_on(v) || value.size() > v.params.value_bytes) return;
  Control& c = *v.control;
  std::array<std::byte, kMaxValueSize> out;
  std::span<const std::byte> next = value;
  std::uint32_t s = memory_find(v, key);
  if (s != kNone) {
    MemSlot& m = v.slot(s);
    const std::uint32_t len = ld(m.len);
    auto cur = std::span<const std::byte>(reinterpret_cast<const std::byte*>(v.slot_value(s)), len);
    auto n = len <= v.params.value_bytes
                 ? shm::combine(p, cur, value, std::span(out.data(), v.params.value_bytes))
                 : Result<std::size_t>(0);
    if (!n || *n == 0 || len > v.params.value_bytes) {
      forget(v, key);  // forgetting is always safe
      return;
    }
    if (*n == len && std::memcmp(out.data(), cur.data(), len) == 0) {
      if (ld(m.ref) == 0) st(m.ref, 1u);
      return;
    }
    next = std::span<const std::byte>(out.data(), *n);
  } else {
    s = memory_victim(v);
    MemSlot& m = v.slot(s);
    if (ld(m.state) == kSlotUsed) {
      // Evicted: out of the index first (derived: a kill leaves the repair
      // to rebuild it from the slots), then the intent replaces it.
      memory_index_erase(v, ld(m.key), s);
      bump(c.counters.forgotten);
      st(c.remembered, ld(c.remembered) - 1);
    }
  }
  const bool fresh = ld(v.slot(s).state) != kSlotUsed || ld(v.slot(s).key) != key;
  // The intent: the slot's whole new state, valid before it is applied.
  st(c.intent_entry, s);
  st(c.intent_len, next.size());
  ::shm::detail::store_crash_tick();  // a value copy counts as one store
  std::memcpy(c.intent_value, next.data(), next.size());
  st(c.intent_last_seq, key);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  st(c.intent_state, static_cast<std::uint32_t>(HeadIntent::Remember));
  std::atomic_signal_fence(std::memory_order_seq_cst);
  apply_slot(v, s, key, c.intent_value, static_cast<std::uint32_t>(next.size()));
  std::atomic_signal_fence(std::memory_order_seq_cst);
  st(c.intent_state, static_cast<std::uint32_t>(HeadIntent::None));
  if (fresh) {
    memory_index_insert(v, key, s);
    bump(c.remembered);
  }
}

void forget(const View& v, std::uint64_t key) noexcept {
  const std::uint32_t s = memory_find(v, key);
  if (s == kNone) return;
  memory_index_erase(v, key, s);
  st(v.slot(s).state, kSlotFree);
  st(v.control->remembered, ld(v.control->remembered) - 1);
}

void clear_memory(const View& v) noexcept {
  // Slot by slot (each one store): a kill part way leaves fewer keys
  // remembered, which is safe; the index is rebuilt at the end (and by repair).
  for (std::uint32_t s = 0; s < v.params.remembered; ++s)
    if (ld(v.slot(s).state) != kSlotFree) st(v.slot(s).state, kSlotFree);
  for (std::uint32_t k = 0; k < memory_cells(v); ++k)
    if (ld(v.memory_index[k]) != 0) st(v.memory_index[k], 0u);
  st(v.control->remembered, 0u);
}

bool roll_remember_forward(const View& v, std::string& why) {
  const Control& c = *v.control;
  const std::uint32_t s = ld(c.intent_entry);
  const std::uint32_t len = ld(c.intent_len);
  if (s >= v.params.remembered || len > v.params.value_bytes) {
    why = shm::detail::format("remember intent names slot {} (len {}) of a memory of {} slots", s,
                              len, v.params.remembered);
    return false;
  }
  apply_slot(v, s, ld(c.intent_last_seq), c.intent_value, len);
  return true;
}

bool rebuild_memory(const View& v, std::string& why) {
  Control& c = *v.control;
  for (std::uint32_t k = 0; k < memory_cells(v); ++k) st(v.memory_index[k], 0u);
  std::uint64_t used = 0;
  for (std::uint32_t s = 0; s < v.params.remembered; ++s) {
    MemSlot& m = v.slot(s);
    const std::uint32_t state = ld(m.state);
    if (state == kSlotFree) continue;
    if (state != kSlotUsed || ld(m.len) > v.params.value_bytes) {
      why = shm::detail::format("memory slot {}: state {}, len {} (value size {})", s, state,
                                ld(m.len), v.params.value_bytes);
      return false;
    }
    // Two slots for one key cannot come from a crash; if they ever do, the
    // later one is forgotten (forgetting is safe).
    if (memory_find(v, ld(m.key)) != kNone) {
      st(m.state, kSlotFree);
      continue;
    }
    memory_index_insert(v, ld(m.key), s);
    ++used;
  }
  st(c.remembered, used);
  if (v.params.remembered != 0 && ld(c.remember_hand) >= v.params.remembered)
    st(c.remember_hand, 0u);
  return true;
}

void verify_memory(const View& v, std::vector<std::string>& out) {
  std::uint64_t used = 0;
  for (std::uint32_t s = 0; s < v.params.remembered; ++s) {
    const MemSlot& m = v.slot(s);
    const std::uint32_t state = ld(m.state);
    if (state == kSlotFree) continue;
    if (state != kSlotUsed || ld(m.len) > v.params.value_bytes) {
      out.push_back(shm::detail::format("memory slot {}: state {}, len {} (value size {})", s,
                                        state, ld(m.len), v.params.value_bytes));
      continue;
    }
    ++used;
    if (memory_find(v, ld(m.key)) != s)
      out.push_back(shm::detail::format("memory slot {} (key {}) is not indexed", s, ld(m.key)));
  }
  if (ld(v.control->remembered) != used)
    out.push_back(shm::detail::format("remembered keys: projection says {}, the memory holds {}",
                                      ld(v.control->remembered), used));
}

}  // namespace shm::relay::internal
