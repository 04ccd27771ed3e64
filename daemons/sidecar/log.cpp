#include "sidecar/log.hpp"

#include "shm/platform/clock.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <ctime>

namespace shm::sidecar {
namespace {

// logfmt: bare when the value is a plain token, else double-quoted with
// backslash escapes.
void append_logfmt_string(std::string& out, std::string_view v) {
  bool bare = !v.empty();
  for (char c : v) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || c == '"' || c == '=' || c == '\\' || u == 0x7f) {
      bare = false;
      break;
    }
  }
  if (bare) {
    out += v;
    return;
  }
  out += '"';
  for (char c : v) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
        else
          out += c;
    }
  }
  out += '"';
}

void append_logfmt(std::string& out, const Logger::Value& v) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>)
          append_logfmt_string(out, x);
        else if constexpr (std::is_same_v<T, bool>)
          out += x ? "true" : "false";
        else
          out += fmt::format("{}", x);
      },
      v);
}

nlohmann::ordered_json to_json(const Logger::Value& v) {
  return std::visit(
      [](const auto& x) -> nlohmann::ordered_json {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, double>) {
          if (!std::isfinite(x)) return nullptr;
        }
        return x;
      },
      v);
}

}  // namespace

std::string_view to_string(Level level) noexcept {
  switch (level) {
    case Level::Debug:
      return "debug";
    case Level::Info:
      return "info";
    case Level::Warn:
      return "warn";
    case Level::Error:
      return "error";
  }
  return "unknown";
}

std::string iso8601(std::uint64_t realtime_ns) {
  const auto secs = static_cast<std::time_t>(realtime_ns / 1'000'000'000u);
  const auto ms = (realtime_ns / 1'000'000u) % 1000u;
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

Logger::Logger()
    : Logger(
          [](std::string_view line) {
            std::fwrite(line.data(), 1, line.size(), stderr);
            std::fputc('\n', stderr);
            std::fflush(stderr);
          },
          Format::Logfmt) {}

Logger::Logger(Sink sink, Format format, Level min_level)
    : sink_(std::move(sink)), format_(format), min_level_(min_level) {}

Logger::Line::Line(const Logger* logger, Level level, std::string_view event)
    : logger_(logger != nullptr && level >= logger->min_level_ ? logger : nullptr),
      level_(level),
      event_(event) {}

Logger::Line::~Line() {
  if (logger_ == nullptr) return;
  try {
    logger_->emit(*this);
  } catch (...) {
    // A log line that cannot be formatted (out of memory) is dropped: logging
    // never takes the daemon down.
  }
}

Logger::Line& Logger::Line::put(std::string key, Value value) {
  if (logger_ != nullptr) fields_.emplace_back(std::move(key), std::move(value));
  return *this;
}

Logger::Line& Logger::Line::kv(std::string key, std::string_view value) {
  return put(std::move(key), std::string(value));
}
Logger::Line& Logger::Line::kv(std::string key, bool value) {
  return put(std::move(key), value);
}
Logger::Line& Logger::Line::kv(std::string key, double value) {
  return put(std::move(key), value);
}

void Logger::emit(const Line& line) const {
  const std::string ts = iso8601(realtime_ns());
  std::string out;
  if (format_ == Format::Json) {
    nlohmann::ordered_json j;
    j["ts"] = ts;
    j["level"] = std::string(to_string(line.level_));
    j["event"] = line.event_;
    for (const auto& [k, v] : line.fields_) j[k] = to_json(v);
    out = j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  } else {
    out = fmt::format("ts={} level={} event=", ts, to_string(line.level_));
    append_logfmt_string(out, line.event_);
    for (const auto& [k, v] : line.fields_) {
      out += ' ';
      out += k;
      out += '=';
      append_logfmt(out, v);
    }
  }
  if (sink_) sink_(out);
}

}  // namespace shm::sidecar
