// Checked arithmetic for logical byte costs (shm/ledger/checked.hpp).
#include "shm/ledger/checked.hpp"

#include "format/format.hpp"

namespace shm::ledger {

namespace {

std::unexpected<Error> negative(std::string_view op, std::int64_t a, std::int64_t b) {
  return fail(Errc::InvalidArgument,
              shm::detail::format("{}({}, {}): operands must not be negative", op, a, b));
}

}  // namespace

Result<std::int64_t> checked_add(std::int64_t a, std::int64_t b) {
  if (a < 0 || b < 0) return negative("checked_add", a, b);
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r))
    return fail(Errc::TooLarge,
                shm::detail::format("checked_add({}, {}): the sum exceeds {}", a, b, INT64_MAX));
  return r;
}

Result<std::int64_t> checked_mul(std::int64_t a, std::int64_t b) {
  if (a < 0 || b < 0) return negative("checked_mul", a, b);
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r))
    return fail(Errc::TooLarge, shm::detail::format("checked_mul({}, {}): the product exceeds {}",
                                                    a, b, INT64_MAX));
  return r;
}

Result<std::int64_t> checked_sum(std::span<const std::int64_t> terms) {
  std::int64_t total = 0;
  for (std::size_t i = 0; i < terms.size(); ++i) {
    if (terms[i] < 0)
      return fail(Errc::InvalidArgument,
                  shm::detail::format("checked_sum: term {} is {}, negative", i, terms[i]));
    if (__builtin_add_overflow(total, terms[i], &total))
      return fail(Errc::TooLarge, shm::detail::format("checked_sum: adding term {} ({}) exceeds {}",
                                                      i, terms[i], INT64_MAX));
  }
  return total;
}

}  // namespace shm::ledger
