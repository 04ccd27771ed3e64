#include "output.hpp"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>
#include <ctime>

namespace shm::shmctl {

Exit exit_for(Errc code) noexcept {
  switch (code) {
    case Errc::NotFound:
      return Exit::NotFound;
    case Errc::InvalidName:
    case Errc::InvalidArgument:
      return Exit::Usage;
    case Errc::NotRegularFile:
    case Errc::Truncated:
    case Errc::SizeMismatch:
    case Errc::BadMagic:
    case Errc::VersionMismatch:
    case Errc::KindMismatch:
    case Errc::FingerprintMismatch:
    case Errc::ParamMismatch:
    case Errc::HeaderCorrupt:
    case Errc::NotReady:
    case Errc::Corrupt:
    case Errc::Faulted:
      return Exit::Invalid;
    default:
      // Everything else (permissions, space, roles, I/O, codes added later)
      // is a system error from shmctl's point of view.
      return Exit::System;
  }
}

Json error_json(const Error& error) {
  Json j = Json::object();
  j["code"] = std::string(to_string(error.code));
  j["message"] = error.message;
  j["exit_code"] = static_cast<int>(exit_for(error.code));
  return j;
}

void warn(const Context& ctx, std::string_view command, std::string_view message) {
  ctx.err << "shmctl " << command << ": " << printable(message) << '\n';
}

void warn(const Context& ctx, std::string_view command, const Error& error) {
  warn(ctx, command, error.what());
  if (error.code == Errc::NotFound)
    ctx.err << "hint: `shmctl ls --root " << printable(ctx.root)
            << "` lists the segments that exist\n";
}

Exit report_error(const Context& ctx, std::string_view command, const Error& error) {
  warn(ctx, command, error);
  if (ctx.json) {
    Json j = Json::object();
    j["error"] = error_json(error);
    print_json(ctx, j);
  }
  return exit_for(error.code);
}

void print_json(const Context& ctx, const Json& document) {
  ctx.out << document.dump(2, ' ', false, Json::error_handler_t::replace) << '\n';
}

void print_json_line(const Context& ctx, const Json& document) {
  ctx.out << document.dump(-1, ' ', false, Json::error_handler_t::replace) << '\n' << std::flush;
}

std::string Table::render() const {
  std::vector<std::size_t> width(headers_.size(), 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (std::size_t i = 0; i < row.size() && i < width.size(); ++i)
      width[i] = std::max(width[i], row[i].size());
  };
  measure(headers_);
  for (const auto& row : rows_) measure(row);
  std::string out;
  auto emit = [&](const std::vector<std::string>& row) {
    std::string line;
    for (std::size_t i = 0; i < row.size() && i < width.size(); ++i) {
      if (i + 1 < width.size())
        line += fmt::format("{:<{}}  ", row[i], width[i]);
      else
        line += row[i];
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + '\n';
  };
  emit(headers_);
  for (const auto& row : rows_) emit(row);
  return out;
}

std::string human_size(std::uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  constexpr std::string_view kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes) / 1024.0;
  std::size_t unit = 0;
  while (v >= 1024.0 && unit + 1 < std::size(kUnits)) {
    v /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.1f} {}", v, kUnits[unit]);
}

std::string iso_time(std::uint64_t realtime_ns) {
  if (realtime_ns == 0) return "-";
  const auto seconds = static_cast<std::time_t>(realtime_ns / 1'000'000'000u);
  const std::uint64_t millis = realtime_ns / 1'000'000u % 1000u;
  std::tm utc{};
  if (::gmtime_r(&seconds, &utc) == nullptr) return fmt::format("{}ns", realtime_ns);
  return fmt::format("{:%Y-%m-%dT%H:%M:%S}.{:03}Z", utc, millis);
}

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f)
      out += c;
    else
      out += fmt::format("\\x{:02x}", u);
  }
  return out;
}

}  // namespace shm::shmctl
