// The scaffolding every soak worker process shares (the programs
// scripts/soak.sh starts, kills and restarts): "--key value" options, SIGTERM
// and SIGINT as a stop request, an append-only log, and violations reported
// both to the log (the "V ..." lines the verifiers count) and to stderr.
#pragma once

#include "soak_common.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace soak {

// Set by SIGTERM/SIGINT once stop_on_term_signals() ran: finish and exit 0.
inline volatile std::sig_atomic_t g_stop = 0;

inline void stop_on_term_signals() {
  struct sigaction sa {};
  sa.sa_handler = [](int) { g_stop = 1; };
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
}

// "--key value" pairs, every key one of those the program declares.
class Options {
 public:
  // Prints what is wrong (prefixed by `program`) and returns nullopt on an
  // unknown key or a key without a value.
  static std::optional<Options> parse(int argc, char** argv, std::string_view program,
                                      std::initializer_list<std::string_view> keys) {
    Options o;
    for (int i = 1; i < argc; i += 2) {
      const std::string_view k(argv[i]);
      bool known = false;
      for (std::string_view key : keys) known = known || key == k;
      if (!known || i + 1 >= argc) {
        std::fprintf(stderr, "%.*s: %s option %s\n", static_cast<int>(program.size()),
                     program.data(), known ? "no value for" : "unknown", argv[i]);
        return std::nullopt;
      }
      o.values_[std::string(k)] = argv[i + 1];
    }
    return o;
  }

  [[nodiscard]] std::string str(std::string_view key, std::string fallback = {}) const {
    const auto it = values_.find(key);
    return it == values_.end() ? fallback : it->second;
  }
  [[nodiscard]] std::uint64_t u64(std::string_view key, std::uint64_t fallback) const {
    const auto it = values_.find(key);
    return it == values_.end() ? fallback : std::strtoull(it->second.c_str(), nullptr, 10);
  }
  [[nodiscard]] std::uint32_t u32(std::string_view key, std::uint32_t fallback) const {
    return static_cast<std::uint32_t>(u64(key, fallback));
  }

 private:
  std::map<std::string, std::string, std::less<>> values_;
};

// A usage error: prints it and returns exit status 2.
inline int usage_error(std::string_view program, std::string_view why) {
  std::fprintf(stderr, "%.*s: %.*s\n", static_cast<int>(program.size()), program.data(),
               static_cast<int>(why.size()), why.data());
  return 2;
}

// The process's log (opened for appending; -1 when it could not be) and its
// way of reporting a violation.
class ProcessLog {
 public:
  ProcessLog(const std::string& path, std::string_view program, std::uint32_t id)
      : fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)),
        program_(program),
        id_(id) {}
  ProcessLog(const ProcessLog&) = delete;
  ProcessLog& operator=(const ProcessLog&) = delete;
  ~ProcessLog() {
    if (fd_ >= 0) ::close(fd_);
  }

  [[nodiscard]] bool ok() const noexcept { return fd_ >= 0; }
  [[nodiscard]] int fd() const noexcept { return fd_; }

  // Logs "V <what>" and prints it; returns exit status 1, for
  // `return log.violation(...)`.
  int violation(std::string_view what) const {
    (void)append(fd_, fmt::format("\nV {}\n", what));
    std::fprintf(stderr, "%s %u: %.*s\n", program_.c_str(), id_, static_cast<int>(what.size()),
                 what.data());
    return 1;
  }

 private:
  int fd_;
  std::string program_;
  std::uint32_t id_;
};

}  // namespace soak
