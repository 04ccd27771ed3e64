// Structured log lines for the sidecar: one line per event, logfmt
// (`ts=... level=warn event=attacher_dead segment=orders slot=1 pid=4242`) or
// one JSON object per line (--json-log). The first two fields are always the
// time and the level, the third the event name, so `grep event=attacher_dead`
// and `jq 'select(.event=="attacher_dead")'` both work.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace shm::sidecar {

enum class Level : std::uint8_t { Debug, Info, Warn, Error };

[[nodiscard]] std::string_view to_string(Level level) noexcept;

class Logger {
 public:
  // Receives one complete line, without the trailing newline.
  using Sink = std::function<void(std::string_view line)>;
  using Value = std::variant<bool, std::int64_t, std::uint64_t, double, std::string>;

  enum class Format : std::uint8_t { Logfmt, Json };

  // Writes to stderr (the journal under systemd).
  Logger();
  Logger(Sink sink, Format format, Level min_level = Level::Info);

  // A line under construction; emitted when it goes out of scope.
  class Line {
   public:
    Line(const Line&) = delete;
    Line& operator=(const Line&) = delete;
    ~Line();

    // Adds a field; chains on the temporary: `log.warn("x").kv("a", 1).kv("b", s);`
    Line& kv(std::string key, std::string_view value);
    Line& kv(std::string key, const std::string& value) {
      return kv(std::move(key), std::string_view(value));
    }
    Line& kv(std::string key, const char* value) {
      return kv(std::move(key), std::string_view(value));
    }
    Line& kv(std::string key, bool value);
    Line& kv(std::string key, double value);
    template <class T>
    requires(std::is_integral_v<T> && !std::is_same_v<T, bool>) Line& kv(std::string key, T value) {
      if constexpr (std::is_signed_v<T>)
        return put(std::move(key), static_cast<std::int64_t>(value));
      else
        return put(std::move(key), static_cast<std::uint64_t>(value));
    }

   private:
    friend class Logger;
    Line(const Logger* logger, Level level, std::string_view event);
    Line& put(std::string key, Value value);

    const Logger* logger_;  // null when below the minimum level
    Level level_;
    std::string event_;
    std::vector<std::pair<std::string, Value>> fields_;
  };

  [[nodiscard]] Line debug(std::string_view event) const { return {this, Level::Debug, event}; }
  [[nodiscard]] Line info(std::string_view event) const { return {this, Level::Info, event}; }
  [[nodiscard]] Line warn(std::string_view event) const { return {this, Level::Warn, event}; }
  [[nodiscard]] Line error(std::string_view event) const { return {this, Level::Error, event}; }

  [[nodiscard]] Format format() const noexcept { return format_; }

 private:
  void emit(const Line& line) const;

  Sink sink_;
  Format format_ = Format::Logfmt;
  Level min_level_ = Level::Info;
};

// "2025-01-31T12:00:00.123Z" for a CLOCK_REALTIME value in nanoseconds.
[[nodiscard]] std::string iso8601(std::uint64_t realtime_ns);

}  // namespace shm::sidecar
