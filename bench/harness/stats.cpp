// Benchmark harness: Statistics: percentiles and summaries of a series.
#include "harness/harness.hpp"

#include <algorithm>
#include <limits>

namespace shm::bench {

// ---------------------------------------------------------------- statistics

template <class T>
double percentile(std::span<T> values, double q) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  q = std::clamp(q, 0.0, 1.0);
  const double pos = q * static_cast<double>(values.size() - 1);
  const auto k = static_cast<std::size_t>(pos);
  const double frac = pos - static_cast<double>(k);
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(k), values.end());
  const auto lo = static_cast<double>(values[k]);
  if (frac == 0.0 || k + 1 >= values.size()) return lo;
  const auto hi = static_cast<double>(
      *std::min_element(values.begin() + static_cast<std::ptrdiff_t>(k) + 1, values.end()));
  return lo + frac * (hi - lo);
}
template double percentile<double>(std::span<double>, double);
template double percentile<std::uint64_t>(std::span<std::uint64_t>, double);

Summary summarize(std::vector<double> values) {
  Summary s;
  s.n = values.size();
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  const auto at = [&](double q) {
    const double pos = q * static_cast<double>(values.size() - 1);
    const auto k = static_cast<std::size_t>(pos);
    const double frac = pos - static_cast<double>(k);
    if (k + 1 >= values.size()) return values[k];
    return values[k] + frac * (values[k + 1] - values[k]);
  };
  s.min = values.front();
  s.max = values.back();
  s.p10 = at(0.10);
  s.p50 = at(0.50);
  s.p90 = at(0.90);
  s.p99 = at(0.99);
  s.p999 = at(0.999);
  return s;
}

}  // namespace shm::bench
