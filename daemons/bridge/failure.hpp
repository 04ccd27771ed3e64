// How shm-bridge fails: an exit code (documented in docs/bridge.md and the
// --help footer) and a message naming what is wrong. Messages never carry a
// secret (password, token, credentials, the user part of a URL).
#pragma once

#include <expected>
#include <string>

namespace shm::bridge {

enum ExitCode : int {
  kExitOk = 0,           // stopped by SIGTERM / SIGINT
  kExitRuntime = 1,      // a failure while running (library error, oversized record)
  kExitUsage = 2,        // bad command line, unreadable file named by an option
  kExitUnreachable = 3,  // no server of --server accepted a connection
  kExitAuth = 4,         // a server refused the credentials
  kExitNoStream = 5,     // no JetStream stream captures the subject (or no JetStream)
  kExitSegment = 6,      // a local segment is missing or of the wrong kind or size
  kExitBusy = 7,         // another bridge holds the route (a role is taken, or it was fenced)
  kExitGap = 8,          // the import found messages gone from the stream (--on-gap stop)
};

struct Failure {
  int code = kExitRuntime;
  std::string message;
};

template <class T>
using Outcome = std::expected<T, Failure>;

[[nodiscard]] inline std::unexpected<Failure> failure(int code, std::string message) {
  return std::unexpected(Failure{code, std::move(message)});
}

}  // namespace shm::bridge
