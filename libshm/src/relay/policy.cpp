// Merge policies: the built-ins, the process-local registry of
// application-defined merges, the (overflow, policy) validation table and the
// law checker.
#include "shm/relay/policy.hpp"
#include "shm/platform/short_bytes.hpp"

#include "format/format.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include <unistd.h>

namespace shm {
namespace {

MergePolicy builtin(PolicyId id, std::string name, MergeFlags flags, bool keyed,
                    std::uint32_t op_size, std::uint32_t min_size) {
  MergePolicy p;
  p.id = id;
  p.name = std::move(name);
  p.flags = flags;
  p.keyed = keyed;
  p.op_size = op_size;
  p.min_size = min_size;
  return p;
}

struct Registry {
  std::mutex mutex;
  std::map<PolicyId, std::unique_ptr<MergePolicy>> policies;  // entries are never removed

  Registry() {
    auto add = [&](MergePolicy p) {
      const PolicyId id = p.id;
      policies.emplace(id, std::make_unique<MergePolicy>(std::move(p)));
    };
    // associative, commutative, idempotent, conflatable, lossless
    add(builtin(policy::kRawFifo, "raw_fifo", {true, false, false, false, false}, false, 0, 0));
    add(builtin(policy::kKeepLatest, "keep_latest", {true, false, true, true, false}, true, 0, 0));
    add(builtin(policy::kLww, "lww", {true, true, true, true, false}, true, 0, 16));
    add(builtin(policy::kSum, "sum", {true, true, false, true, true}, true, 8, 8));
    add(builtin(policy::kMax, "max", {true, true, true, true, false}, true, 8, 8));
    add(builtin(policy::kMin, "min", {true, true, true, true, false}, true, 8, 8));
    add(builtin(policy::kBitOr, "bit_or", {true, true, true, true, false}, true, 0, 0));
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

bool valid_name(std::string_view s) {
  if (s.empty() || s.size() > 32) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

std::uint64_t load_u64(std::span<const std::byte> v, std::size_t at) noexcept {
  std::uint64_t x = 0;
  std::memcpy(&x, v.data() + at, 8);
  return x;
}

std::string hex(std::span<const std::byte> v) {
  std::string s;
  for (std::byte b : v) s += shm::detail::format("{:02x}", static_cast<unsigned>(b));
  return s.empty() ? "(empty)" : s;
}

}  // namespace

std::uint32_t to_bits(MergeFlags f) noexcept {
  return (f.associative ? 1u : 0u) | (f.commutative ? 2u : 0u) | (f.idempotent ? 4u : 0u) |
         (f.conflatable ? 8u : 0u) | (f.lossless ? 16u : 0u);
}
MergeFlags flags_from_bits(std::uint32_t b) noexcept {
  return {(b & 1u) != 0, (b & 2u) != 0, (b & 4u) != 0, (b & 8u) != 0, (b & 16u) != 0};
}
std::string describe(MergeFlags f) {
  std::string s;
  auto add = [&](bool on, std::string_view n) {
    if (!on) return;
    if (!s.empty()) s += ',';
    s += n;
  };
  add(f.associative, "associative");
  add(f.commutative, "commutative");
  add(f.idempotent, "idempotent");
  add(f.conflatable, "conflatable");
  add(f.lossless, "lossless");
  return s.empty() ? "none" : s;
}

Result<const MergePolicy*> find_merge(PolicyId id) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.policies.find(id);
  if (it == r.policies.end())
    return fail(Errc::UnknownPolicy,
                shm::detail::format("merge policy id {} is not registered in this process (pid "
                                    "{}); register_merge() it before attaching",
                                    id, ::getpid()));
  return it->second.get();
}

Result<void> register_merge(MergePolicy p) {
  if (p.id < policy::kFirstCustomPolicy)
    return fail(Errc::InvalidArgument,
                shm::detail::format("merge policy '{}': id {} is reserved for built-ins (custom "
                                    "ids start at {})",
                                    p.name, p.id, policy::kFirstCustomPolicy));
  if (!valid_name(p.name))
    return fail(Errc::InvalidArgument,
                shm::detail::format("merge policy id {}: name '{}' is not [A-Za-z0-9._-]{{1,32}}",
                                    p.id, p.name));
  if (!p.combine)
    return fail(
        Errc::InvalidArgument,
        shm::detail::format("merge policy '{}' (id {}) has no combine function", p.name, p.id));
  if (p.flags.conflatable && !p.flags.associative)
    return fail(Errc::InvalidArgument,
                shm::detail::format("merge policy '{}' (id {}) declares conflatable but not "
                                    "associative: conflation regroups ops, it needs associativity",
                                    p.name, p.id));
  if (!p.keyed)
    return fail(Errc::InvalidArgument,
                shm::detail::format("merge policy '{}' (id {}): custom policies are keyed merges",
                                    p.name, p.id));
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (auto it = r.policies.find(p.id); it != r.policies.end()) {
    const MergePolicy& old = *it->second;
    if (old.name == p.name && old.flags == p.flags && old.op_size == p.op_size &&
        old.min_size == p.min_size)
      return {};
    return fail(
        Errc::AlreadyExists,
        shm::detail::format("merge policy id {} is already registered as '{}' ({}); "
                            "cannot register '{}' ({})",
                            p.id, old.name, describe(old.flags), p.name, describe(p.flags)));
  }
  const PolicyId id = p.id;
  r.policies.emplace(id, std::make_unique<MergePolicy>(std::move(p)));
  return {};
}

std::string_view to_string(Overflow o) noexcept {
  switch (o) {
    case Overflow::Block:
      return "block";
    case Overflow::DropOldest:
      return "drop_oldest";
    case Overflow::DropNewest:
      return "drop_newest";
    case Overflow::Conflate:
      return "conflate";
    case Overflow::Spill:
      return "spill";
  }
  return "unknown";
}
std::string_view to_string(Dimension d) noexcept {
  switch (d) {
    case Dimension::Count:
      return "count";
    case Dimension::Bytes:
      return "bytes";
    case Dimension::Keys:
      return "keys";
    case Dimension::Age:
      return "age";
  }
  return "unknown";
}
std::string_view to_string(EgressOrder e) noexcept {
  return e == EgressOrder::Arrival      ? "arrival"
         : e == EgressOrder::Reordering ? "reordering"
                                        : "unknown";
}

Result<Overflow> parse_overflow(std::string_view t) {
  for (Overflow o : {Overflow::Block, Overflow::DropOldest, Overflow::DropNewest,
                     Overflow::Conflate, Overflow::Spill})
    if (t == to_string(o)) return o;
  return fail(Errc::InvalidArgument,
              shm::detail::format("overflow '{}': expected block, drop_oldest, drop_newest, "
                                  "conflate or spill",
                                  t));
}
Result<Dimension> parse_dimension(std::string_view t) {
  for (Dimension d : {Dimension::Count, Dimension::Bytes, Dimension::Keys, Dimension::Age})
    if (t == to_string(d)) return d;
  return fail(Errc::InvalidArgument,
              shm::detail::format("dimension '{}': expected count, bytes, keys or age", t));
}

Result<void> validate(const Backpressure& bp) {
  if (static_cast<unsigned>(bp.dimension) > static_cast<unsigned>(Dimension::Age))
    return fail(Errc::InvalidArgument,
                shm::detail::format("unknown dimension {}", static_cast<unsigned>(bp.dimension)));
  if (static_cast<unsigned>(bp.overflow) > static_cast<unsigned>(Overflow::Spill))
    return fail(Errc::InvalidArgument,
                shm::detail::format("unknown overflow {}", static_cast<unsigned>(bp.overflow)));
  if (bp.high_water == 0)
    return fail(Errc::InvalidArgument, "high_water 0: the relay would be full when empty");
  if (bp.low_water >= bp.high_water)
    return fail(Errc::InvalidArgument,
                shm::detail::format("low_water {} must be below high_water {} (hysteresis)",
                                    bp.low_water, bp.high_water));
  return {};
}

Result<void> validate(const Backpressure& bp, std::uint32_t capacity, std::uint32_t value_bytes) {
  if (auto ok = validate(bp); !ok) return ok;
  std::uint64_t reach = 0;
  std::string_view unit;
  switch (bp.dimension) {
    case Dimension::Count:
    case Dimension::Keys:
      reach = capacity;
      unit = "entries (the capacity)";
      break;
    case Dimension::Bytes:
      reach = std::uint64_t{capacity} * value_bytes;
      unit = "bytes (max_entries x value_bytes)";
      break;
    case Dimension::Age:
      return {};
  }
  if (bp.high_water > reach)
    return fail(Errc::InvalidArgument,
                shm::detail::format("high_water {} exceeds the {} {} that dimension {} can reach "
                                    "on this relay: it would never be full",
                                    bp.high_water, reach, unit, to_string(bp.dimension)));
  return {};
}

Result<void> validate_pair(const MergePolicy& p, const OverflowCheck& c) {
  auto refuse = [&](std::string_view why) {
    return fail(Errc::PolicyRefused,
                shm::detail::format("overflow {} with policy {} (id {}, {}) is refused: {}",
                                    to_string(c.overflow), p.name, p.id, describe(p.flags), why));
  };
  if (static_cast<unsigned>(c.overflow) > static_cast<unsigned>(Overflow::Spill) ||
      static_cast<unsigned>(c.egress) > static_cast<unsigned>(EgressOrder::Reordering))
    return fail(Errc::InvalidArgument, "unknown overflow or egress order");
  switch (c.overflow) {
    case Overflow::Block:
      break;
    case Overflow::Conflate:
      if (!p.flags.conflatable || !p.flags.associative)
        return refuse(
            "Conflate needs a conflatable, associative merge (order and multiplicity are the "
            "meaning of a raw FIFO)");
      break;
    case Overflow::DropOldest:
    case Overflow::DropNewest:
      if (p.flags.lossless) return refuse("the policy declares itself lossless: no drop");
      break;
    case Overflow::Spill:
      if (!p.flags.idempotent && !c.spill_dedup)
        return refuse(
            "Spill replays the last unacknowledged page (at-least-once): it needs an idempotent "
            "merge or spill dedup");
      if (!c.has_spill_store) return refuse("Spill needs a spill store and none is configured");
      break;
  }
  if (c.egress == EgressOrder::Reordering && !p.flags.commutative)
    return fail(Errc::PolicyRefused,
                shm::detail::format("egress {} with policy {} (id {}, {}) is refused: a "
                                    "reordering egress needs a commutative merge",
                                    to_string(c.egress), p.name, p.id, describe(p.flags)));
  return {};
}

Result<std::size_t> combine(const MergePolicy& p, std::span<const std::byte> cur,
                            std::span<const std::byte> op, std::span<std::byte> out) {
  switch (p.id) {
    case policy::kRawFifo:
    case policy::kKeepLatest:
      shm::detail::copy_short(out.data(), op.data(), op.size());
      return op.size();
    case policy::kLww: {
      // (timestamp, writer) decides; a tie compares the payload bytes, so the
      // result does not depend on arrival order (commutative).
      const std::uint64_t ct = load_u64(cur, 0), cw = load_u64(cur, 8);
      const std::uint64_t ot = load_u64(op, 0), ow = load_u64(op, 8);
      bool take_op = ot > ct || (ot == ct && ow > cw);
      if (ot == ct && ow == cw)
        take_op = std::lexicographical_compare(cur.begin(), cur.end(), op.begin(), op.end());
      const auto& src = take_op ? op : cur;
      shm::detail::copy_short(out.data(), src.data(), src.size());
      return src.size();
    }
    case policy::kSum: {
      const std::uint64_t r = load_u64(cur, 0) + load_u64(op, 0);
      std::memcpy(out.data(), &r, 8);
      return 8;
    }
    case policy::kMax: {
      const std::uint64_t r = std::max(load_u64(cur, 0), load_u64(op, 0));
      std::memcpy(out.data(), &r, 8);
      return 8;
    }
    case policy::kMin: {
      const std::uint64_t r = std::min(load_u64(cur, 0), load_u64(op, 0));
      std::memcpy(out.data(), &r, 8);
      return 8;
    }
    case policy::kBitOr: {
      const std::size_t n = std::max(cur.size(), op.size());
      for (std::size_t i = 0; i < n; ++i) {
        const std::byte a = i < cur.size() ? cur[i] : std::byte{0};
        const std::byte b = i < op.size() ? op[i] : std::byte{0};
        out[i] = a | b;
      }
      return n;
    }
    default:
      break;
  }
  if (!p.combine)
    return fail(Errc::UnknownPolicy,
                shm::detail::format("merge policy {} (id {}) has no combine", p.name, p.id));
  try {
    const std::size_t n = p.combine(cur, op, out);
    if (n > out.size())
      return fail(Errc::InvalidArgument,
                  shm::detail::format("merge policy {} returned {} bytes, the value size is {}",
                                      p.name, n, out.size()));
    return n;
  } catch (...) {
    return fail(Errc::InvalidArgument,
                shm::detail::format("merge policy {} (id {}) threw; the write changed nothing",
                                    p.name, p.id));
  }
}

bool is_identity(const MergePolicy& p, std::span<const std::byte> op) noexcept {
  auto all = [&](std::byte b) {
    return std::all_of(op.begin(), op.end(), [b](std::byte x) { return x == b; });
  };
  switch (p.id) {
    case policy::kSum:
    case policy::kMax:
    case policy::kBitOr:
      return all(std::byte{0});
    case policy::kMin:
      return all(std::byte{0xFF});
    default:
      return false;
  }
}

LawReport check_merge_laws(const MergePolicy& p, const ValueGenerator& gen, std::size_t trials,
                           std::uint64_t seed, std::size_t value_bytes) {
  LawReport report;
  if (!p.keyed) {
    report.violations.push_back(shm::detail::format(
        "{} has no combine: it keeps every op, there is no merge law to test", p.name));
    return report;
  }
  std::mt19937_64 rng(seed);
  std::vector<std::byte> buf1(value_bytes), buf2(value_bytes);
  auto op = [&](std::span<const std::byte> a, std::span<const std::byte> b,
                std::vector<std::byte>& into) -> std::optional<std::vector<std::byte>> {
    auto n = combine(p, a, b, into);
    if (!n) {
      report.violations.push_back(n.error().message);
      return std::nullopt;
    }
    return std::vector<std::byte>(into.begin(), into.begin() + static_cast<std::ptrdiff_t>(*n));
  };
  constexpr std::size_t kMaxLines = 8;
  for (std::size_t t = 0; t < trials && report.violations.size() < kMaxLines; ++t) {
    const std::vector<std::byte> a = gen(rng), b = gen(rng), c = gen(rng);
    for (const auto* v : {&a, &b, &c})
      if (v->size() > value_bytes || v->size() < p.min_size ||
          (p.op_size != 0 && v->size() != p.op_size)) {
        report.violations.push_back(shm::detail::format(
            "generator produced a {}-byte value; {} takes {}", v->size(), p.name,
            p.op_size != 0 ? shm::detail::format("exactly {}", p.op_size)
                           : shm::detail::format("{} to {}", p.min_size, value_bytes)));
        return report;
      }
    if (p.flags.associative) {
      auto ab = op(a, b, buf1);
      auto bc = op(b, c, buf2);
      if (!ab || !bc) return report;
      auto l = op(*ab, c, buf1);
      auto r = op(a, *bc, buf2);
      if (!l || !r) return report;
      if (*l != *r)
        report.violations.push_back(shm::detail::format(
            "{} declares associative but (a+b)+c != a+(b+c) for a={} b={} c={}: {} vs {}", p.name,
            hex(a), hex(b), hex(c), hex(*l), hex(*r)));
    }
    if (p.flags.commutative) {
      auto ab = op(a, b, buf1);
      auto ba = op(b, a, buf2);
      if (!ab || !ba) return report;
      if (*ab != *ba)
        report.violations.push_back(
            shm::detail::format("{} declares commutative but a+b != b+a for a={} b={}: {} vs {}",
                                p.name, hex(a), hex(b), hex(*ab), hex(*ba)));
    }
    if (p.flags.idempotent) {
      auto aa = op(a, a, buf1);
      if (!aa) return report;
      if (*aa != a)
        report.violations.push_back(shm::detail::format(
            "{} declares idempotent but a+a != a for a={}: {}", p.name, hex(a), hex(*aa)));
    }
  }
  return report;
}

std::vector<std::byte> u64_value(std::uint64_t v) {
  std::vector<std::byte> out(8);
  std::memcpy(out.data(), &v, 8);
  return out;
}
std::uint64_t u64_of(std::span<const std::byte> value) noexcept {
  std::uint64_t v = 0;
  std::memcpy(&v, value.data(), std::min<std::size_t>(8, value.size()));
  return v;
}
std::vector<std::byte> lww_value(std::uint64_t ts, std::uint64_t writer,
                                 std::span<const std::byte> payload) {
  std::vector<std::byte> out(16 + payload.size());
  std::memcpy(out.data(), &ts, 8);
  std::memcpy(out.data() + 8, &writer, 8);
  if (!payload.empty()) std::memcpy(out.data() + 16, payload.data(), payload.size());
  return out;
}

}  // namespace shm
