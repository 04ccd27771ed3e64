// Benchmark harness: command lines (the argument parser, size lists).
#include "harness/harness.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>

namespace shm::bench {

// ---------------------------------------------------------------- command lines

Args::Args(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) args_.emplace_back(argv[i]);
  used_.assign(args_.size(), false);
}

bool Args::flag(std::string_view name) {
  bool found = false;
  for (std::size_t i = 0; i < args_.size(); ++i) {
    if (!used_[i] && args_[i] == name) {
      used_[i] = true;
      found = true;
    }
  }
  return found;
}

std::string Args::value(std::string_view name, std::string_view fallback) {
  std::string result(fallback);
  for (std::size_t i = 0; i < args_.size(); ++i) {
    if (used_[i]) continue;
    const std::string& a = args_[i];
    if (a == name) {
      if (i + 1 >= args_.size()) throw BenchError(fmt::format("{} needs a value", name));
      used_[i] = used_[i + 1] = true;
      result = args_[i + 1];
      ++i;
    } else if (a.size() > name.size() && a.compare(0, name.size(), name) == 0 &&
               a[name.size()] == '=') {
      used_[i] = true;
      result = a.substr(name.size() + 1);
    }
  }
  return result;
}

int Args::int_value(std::string_view name, int fallback) {
  const std::string v = value(name, std::to_string(fallback));
  int out = 0;
  const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc{} || ptr != v.data() + v.size())
    throw BenchError(fmt::format("{}: expected an integer, got '{}'", name, v));
  return out;
}

double Args::double_value(std::string_view name, double fallback) {
  const std::string v = value(name, fmt::format("{}", fallback));
  char* end = nullptr;
  const double out = std::strtod(v.c_str(), &end);
  if (end != v.c_str() + v.size() || v.empty())
    throw BenchError(fmt::format("{}: expected a number, got '{}'", name, v));
  return out;
}

void Args::finish(std::string_view usage) {
  if (flag("--help") || flag("-h")) {
    fmt::print("{}", usage);
    std::exit(0);
  }
  for (std::size_t i = 0; i < args_.size(); ++i) {
    if (!used_[i]) {
      fmt::print(stderr, "unknown argument '{}'\n\n{}", args_[i], usage);
      std::exit(2);
    }
  }
}

std::vector<std::size_t> parse_sizes(std::string_view list) {
  std::vector<std::size_t> sizes;
  while (!list.empty()) {
    const auto comma = list.find(',');
    const auto item = list.substr(0, comma);
    std::size_t v = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc{} || ptr != item.data() + item.size() || v == 0)
      throw BenchError(
          fmt::format("expected a list of positive sizes like 8,64,1024, got '{}'", list));
    sizes.push_back(v);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return sizes;
}

}  // namespace shm::bench
