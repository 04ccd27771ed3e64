// Printing for shmctl commands: errors (stderr, plus a JSON document under
// --json), JSON documents, aligned text tables and human-readable values.
#pragma once

#include "shmctl.hpp"

#include "shm/error.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shm::shmctl {

using Json = nlohmann::ordered_json;

// The exit code an error maps to (see shmctl.hpp).
[[nodiscard]] Exit exit_for(Errc code) noexcept;

// {"code": "NotFound", "message": "...", "exit_code": 1}
[[nodiscard]] Json error_json(const Error& error);

// Prints "shmctl <command>: <code>: <message>" on stderr (plus a hint for a
// missing segment) and, under --json, {"error": {...}} on stdout. Returns the
// exit code of the error.
Exit report_error(const Context& ctx, std::string_view command, const Error& error);
// Only the stderr line: for commands that also print a document.
void warn(const Context& ctx, std::string_view command, const Error& error);
void warn(const Context& ctx, std::string_view command, std::string_view message);

// Pretty JSON (indent 2). Invalid UTF-8 (file names, command lines) is
// replaced, never an exception.
void print_json(const Context& ctx, const Json& document);
// One JSON document per line (watch).
void print_json_line(const Context& ctx, const Json& document);

// Left-aligned columns separated by two spaces; the last column is not padded.
class Table {
 public:
  explicit Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  [[nodiscard]] bool empty() const noexcept { return rows_.empty(); }
  [[nodiscard]] std::size_t size() const noexcept { return rows_.size(); }
  [[nodiscard]] std::string render() const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

// "4.0 KiB", "1.5 MiB"; exact bytes below 1 KiB.
[[nodiscard]] std::string human_size(std::uint64_t bytes);
// ISO 8601 UTC with milliseconds ("2024-05-01T12:00:00.123Z"); "-" for 0.
[[nodiscard]] std::string iso_time(std::uint64_t realtime_ns);
// Replaces control and non-ASCII bytes with \xNN so a hostile file name
// cannot drive the terminal.
[[nodiscard]] std::string printable(std::string_view text);

}  // namespace shm::shmctl
