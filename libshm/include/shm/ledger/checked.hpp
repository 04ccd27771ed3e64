/// @file
/// Checked arithmetic for logical byte costs (the specification's CostV1
/// helpers): operands are nonnegative int64 values, and a negative operand or
/// a result beyond INT64_MAX is refused before anything is added or
/// multiplied. Use these to build the `bytes` of a reservation (topic + payload
/// + 96, a count times a slot size) so that a bad length never becomes a
/// wrapped or negative charge.
#pragma once

#include "shm/error.hpp"

#include <cstdint>
#include <initializer_list>
#include <span>

namespace shm::ledger {

/// a + b. InvalidArgument when an operand is negative, TooLarge on overflow.
[[nodiscard]] Result<std::int64_t> checked_add(std::int64_t a, std::int64_t b);
/// a * b. InvalidArgument when an operand is negative, TooLarge on overflow.
[[nodiscard]] Result<std::int64_t> checked_mul(std::int64_t a, std::int64_t b);
/// The sum of every term, with the rules of checked_add; the message names the
/// index of the first bad term.
[[nodiscard]] Result<std::int64_t> checked_sum(std::span<const std::int64_t> terms);
/// checked_sum() of a braced list of terms.
[[nodiscard]] inline Result<std::int64_t> checked_sum(std::initializer_list<std::int64_t> terms) {
  return checked_sum(std::span<const std::int64_t>(terms.begin(), terms.size()));
}

}  // namespace shm::ledger
