// The shm-sidecar process around a Monitor: the instance lock, the signal
// handling (signalfd: SIGTERM/SIGINT stop, SIGHUP rescans), the HTTP endpoint
// and the poll loop that runs Monitor::do_work() every interval and as soon as
// the root changes. main() only parses the command line and calls run_daemon().
#pragma once

#include "sidecar/log.hpp"
#include "sidecar/monitor.hpp"

#include <chrono>
#include <cstdio>
#include <string>

namespace shm::sidecar {

struct DaemonOptions {
  MonitorOptions monitor;
  std::string listen;  // "127.0.0.1:PORT"; empty: no HTTP endpoint
  std::chrono::milliseconds interval{1000};
  bool once = false;  // one pass, print the status to `out`, exit
  bool json = false;  // --once prints JSON instead of the table
};

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;         // could not start (bad root, cannot bind, ...)
inline constexpr int kExitUsage = 2;           // bad command line
inline constexpr int kExitAlreadyRunning = 3;  // another sidecar holds the root's lock

// Runs until SIGTERM/SIGINT (or one pass with `once`). Prints "listening on
// ADDR" and then "ready" on `out` once serving; log lines go to `log`.
[[nodiscard]] int run_daemon(const DaemonOptions& options, const Logger& log, std::FILE* out);

}  // namespace shm::sidecar
