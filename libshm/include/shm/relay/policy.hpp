// Merge policies of a relay, their algebraic flags, the overflow actions and
// the validation table that decides which (overflow, policy) pairs are sound.
//
// A merge policy folds an incoming op into the open entry of its key:
// combine(current, op) -> new value. Built-in policies have fixed ids;
// application-defined ones are C++ callables registered under an id >=
// kFirstCustomPolicy in every process that attaches (register_merge); opening
// a relay whose policy id is not registered in this process is
// Errc::UnknownPolicy.
#pragma once

#include "shm/error.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shm {

using PolicyId = std::uint32_t;

namespace policy {
inline constexpr PolicyId kRawFifo = 1;     // keeps every op, in arrival order
inline constexpr PolicyId kKeepLatest = 2;  // plain overwrite
inline constexpr PolicyId kLww = 3;         // last writer wins by (timestamp, writer id)
inline constexpr PolicyId kSum = 4;         // u64 counters (wrapping)
inline constexpr PolicyId kMax = 5;         // u64
inline constexpr PolicyId kMin = 6;         // u64
inline constexpr PolicyId kBitOr = 7;       // byte-wise OR: set union
inline constexpr PolicyId kFirstCustomPolicy = 1024;
}  // namespace policy

// Algebraic flags a policy declares (check_merge_laws tests the first three).
struct MergeFlags {
  bool associative = false;  // (a+b)+c == a+(b+c): any flush schedule gives the same fold
  bool commutative = false;  // a+b == b+a: reordering (priority, shards) is sound
  bool idempotent = false;   // a+a == a: replay (spill, redelivery) is harmless
  bool conflatable = false;  // merging ops into one summary keeps the meaning (Conflate)
  bool lossless = false;     // every op matters (counters): dropping is refused
  friend bool operator==(const MergeFlags&, const MergeFlags&) = default;
};
[[nodiscard]] std::uint32_t to_bits(MergeFlags flags) noexcept;
[[nodiscard]] MergeFlags flags_from_bits(std::uint32_t bits) noexcept;
[[nodiscard]] std::string describe(MergeFlags flags);  // "associative,commutative,..."

// combine(current, op, out) writes the merged value into `out` (value_bytes
// bytes) and returns its length (<= out.size(); larger is an error). It runs
// under the relay's mutex: keep it short, never call the relay from it, never
// throw (a throw is caught and reported as InvalidArgument).
using CombineFn = std::function<std::size_t(
    std::span<const std::byte> current, std::span<const std::byte> op, std::span<std::byte> out)>;

struct MergePolicy {
  PolicyId id = 0;
  std::string name;  // [A-Za-z0-9._-]{1,32}
  MergeFlags flags;
  bool keyed = true;           // false: raw_fifo (no merge, every op an entry)
  std::uint32_t op_size = 0;   // exact op length; 0: any length up to the value size
  std::uint32_t min_size = 0;  // shortest op accepted (lww: 16)
  CombineFn combine;           // empty for built-ins (they are compiled in)
};

// The built-ins (ids 1..7) and the policies registered in this process.
[[nodiscard]] Result<const MergePolicy*> find_merge(PolicyId id);
// Registers an application-defined merge in this process. The id must be >=
// kFirstCustomPolicy; registering the same id again with the same name and
// flags is a no-op, with anything else AlreadyExists.
[[nodiscard]] Result<void> register_merge(MergePolicy policy);

// What happens to a write that would add an entry while the relay is full.
enum class Overflow : std::uint8_t { Block = 0, DropOldest, DropNewest, Conflate, Spill };
// What the backpressure level measures.
enum class Dimension : std::uint8_t { Count = 0, Bytes, Keys, Age };
// How the relay's egress is consumed: in arrival order, or through a stage that
// reorders (priority egress, keyed sharding, parallel rehydrate).
enum class EgressOrder : std::uint8_t { Arrival = 0, Reordering };
[[nodiscard]] std::string_view to_string(Overflow o) noexcept;
[[nodiscard]] std::string_view to_string(Dimension d) noexcept;
[[nodiscard]] std::string_view to_string(EgressOrder e) noexcept;
[[nodiscard]] Result<Overflow> parse_overflow(std::string_view text);
[[nodiscard]] Result<Dimension> parse_dimension(std::string_view text);

// The backpressure policy, stored in the segment and retunable live. Levels:
// Count = pending entries, Bytes = value bytes pending, Keys = open keys,
// Age = milliseconds since the oldest pending op arrived.
struct Backpressure {
  Dimension dimension = Dimension::Count;
  std::uint64_t high_water = 0;  // is_full sets when the level reaches it
  std::uint64_t low_water = 0;   // is_full clears when the level falls to it; < high_water
  Overflow overflow = Overflow::Block;
  friend bool operator==(const Backpressure&, const Backpressure&) = default;
};
// low_water < high_water, high_water > 0.
[[nodiscard]] Result<void> validate(const Backpressure& bp);
// The same, and the high water must be reachable on a relay of `capacity`
// entries of `value_bytes` bytes (count and keys: at most capacity; bytes: at
// most capacity * value_bytes; age has no bound): a relay that can never be
// full would never push back.
[[nodiscard]] Result<void> validate(const Backpressure& bp, std::uint32_t capacity,
                                    std::uint32_t value_bytes);

// The validation table (relaycell-egress-tables.md §3). Refused, each with
// Errc::PolicyRefused naming the pair:
//   Conflate   on a policy that is not conflatable and associative (raw_fifo);
//   DropOldest / DropNewest on a lossless policy (sum);
//   Spill      on a non-idempotent policy without spill dedup;
//   Spill      without a spill store (always, until the SpillStore lands);
//   Reordering egress on a non-commutative policy.
struct OverflowCheck {
  Overflow overflow = Overflow::Block;
  EgressOrder egress = EgressOrder::Arrival;
  bool spill_dedup = false;
  bool has_spill_store = false;
};
[[nodiscard]] Result<void> validate_pair(const MergePolicy& policy, const OverflowCheck& check);

// Runs a policy's combine (built-in or registered) into `out`.
[[nodiscard]] Result<std::size_t> combine(const MergePolicy& policy,
                                          std::span<const std::byte> current,
                                          std::span<const std::byte> op, std::span<std::byte> out);
// True when `op` is the policy's identity (sum 0, max 0, min all-ones,
// bit_or all-zero): merging it changes nothing, even with no open entry.
[[nodiscard]] bool is_identity(const MergePolicy& policy, std::span<const std::byte> op) noexcept;

// Tests the declared associative / commutative / idempotent flags on
// `trials` triples of generated values; every violation is one line naming
// the law and the values. A raw_fifo policy (no combine) yields one line.
using ValueGenerator = std::function<std::vector<std::byte>(std::mt19937_64&)>;
struct LawReport {
  std::vector<std::string> violations;
  [[nodiscard]] bool ok() const noexcept { return violations.empty(); }
};
[[nodiscard]] LawReport check_merge_laws(const MergePolicy& policy, const ValueGenerator& generator,
                                         std::size_t trials = 1000, std::uint64_t seed = 1,
                                         std::size_t value_bytes = 64);

// Helpers for built-in value formats (little-endian).
[[nodiscard]] std::vector<std::byte> u64_value(std::uint64_t v);
[[nodiscard]] std::uint64_t u64_of(std::span<const std::byte> value) noexcept;
// lww: [timestamp u64][writer u64][payload...].
[[nodiscard]] std::vector<std::byte> lww_value(std::uint64_t timestamp, std::uint64_t writer,
                                               std::span<const std::byte> payload = {});

}  // namespace shm
