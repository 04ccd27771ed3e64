// Private to the library: how every kind builds the KindSpec it hands to
// Segment::create/open, and its param_mismatch (the comparison of the
// segment's parameter block with the caller's expectation).
#pragma once

#include "shm/segment/segment.hpp"

#include "format/format.hpp"

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace shm::detail {

// Collects the first field of a parameter block that differs from the
// caller's expectation: "name: segment has F, caller expects E".
class FieldCheck {
 public:
  // `wanted` false: the caller accepts whatever the segment has.
  template <class T>
  FieldCheck& field_if(bool wanted, std::string_view name, const T& found, const T& expected) {
    if (why_.empty() && wanted && !(found == expected))
      why_ = detail::format("{}: segment has {}, caller expects {}", name, found, expected);
    return *this;
  }
  // An expectation of 0 accepts any value (the usual wildcard).
  template <class T>
  FieldCheck& field(std::string_view name, const T& found, const T& expected) {
    return field_if(expected != T{}, name, found, expected);
  }
  [[nodiscard]] std::string result() && { return std::move(why_); }

 private:
  std::string why_;
};

// A KindSpec over `storage` (the kind's parameter block, kept alive by the
// caller while the spec is used). Its param_mismatch refuses a segment block
// of another size ("parameter block: segment has N bytes, <kind> uses M"),
// then returns problem(found) when that is not empty (the segment's own block
// is invalid: the kind words the message), then the first field that
// fields(found, expected, check) finds different.
template <class Block, class Problem, class Fields>
[[nodiscard]] KindSpec block_kind_spec(KindId kind, std::string_view kind_name,
                                       std::uint64_t fingerprint, const Block& storage,
                                       std::uint64_t data_size, Problem problem, Fields fields) {
  static_assert(std::is_trivially_copyable_v<Block>);
  KindSpec spec;
  spec.kind = kind;
  spec.kind_name = kind_name;
  spec.fingerprint = fingerprint;
  spec.params = std::as_bytes(std::span(&storage, 1));
  spec.data_size = data_size;
  spec.param_mismatch = [kind_name, problem, fields](std::span<const std::byte> found,
                                                     std::span<const std::byte> expected) {
    Block f{}, e{};
    if (found.size() != sizeof f)
      return detail::format("parameter block: segment has {} bytes, {} uses {}", found.size(),
                            kind_name, sizeof f);
    std::memcpy(&f, found.data(), sizeof f);
    std::memcpy(&e, expected.data(), sizeof e);
    if (std::string why = problem(f); !why.empty()) return why;
    FieldCheck check;
    fields(f, e, check);
    return std::move(check).result();
  };
  return spec;
}

}  // namespace shm::detail
