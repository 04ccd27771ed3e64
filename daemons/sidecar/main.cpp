// shm-sidecar: watches the segments of a libshm root, reclaims what dead
// processes held, and serves Prometheus metrics and a JSON status on loopback.
// Everything but the command line lives in the shm_sidecar_monitor library.
#include "sidecar/daemon.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <map>

int main(int argc, char** argv) {
  using namespace shm::sidecar;
  DaemonOptions o;
  std::int64_t interval_ms = 1000, stuck_ms = 5000, rescan_ms = 2000;
  bool json_log = false, no_inotify = false;
  std::string level_name = "info";

  CLI::App app{
      "shm-sidecar: watches libshm segments, reclaims what dead processes held, and "
      "serves metrics (Prometheus) and status (JSON) on a loopback port."};
  app.footer(
      "Examples:\n"
      "  shm-sidecar --listen 127.0.0.1:9464             run as a daemon; curl :9464/metrics\n"
      "  shm-sidecar --root /dev/shm/app --once --json   one pass, print the status, exit\n"
      "  shm-sidecar --listen 127.0.0.1:0 --gc-ephemeral pick a free port (printed), collect\n"
      "                                                  ephemeral segments nobody uses\n"
      "Exit codes: 0 ok, 1 could not start, 2 bad usage, 3 another sidecar runs on the root.");
  app.add_option("--root", o.monitor.root,
                 "segment directory (default: $LIBSHM_ROOT or /dev/shm/libshm)");
  app.add_option("--listen", o.listen,
                 "serve /metrics and /status on this loopback HOST:PORT (port 0: pick one)");
  app.add_option("--interval", interval_ms, "duty cycle period in milliseconds")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{3'600'000}))
      ->capture_default_str();
  app.add_option("--stuck-after", stuck_ms,
                 "report a live attacher whose heartbeat is older than this (ms; 0: never)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{86'400'000}))
      ->capture_default_str();
  app.add_option("--rescan", rescan_ms,
                 "directory rescan fallback period in milliseconds (inotify does the rest)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{3'600'000}))
      ->capture_default_str();
  app.add_flag("--gc-ephemeral", o.monitor.gc_ephemeral,
               "unlink segments created ephemeral once every attacher is dead");
  app.add_flag("--once", o.once, "run one pass, print the status, exit");
  app.add_flag("--json", o.json, "with --once: print the status as JSON");
  app.add_flag("--json-log", json_log, "log lines as JSON objects instead of logfmt");
  app.add_flag("--no-inotify", no_inotify, "discover segments by periodic rescan only");
  const std::map<std::string, Level> levels{{"debug", Level::Debug},
                                            {"info", Level::Info},
                                            {"warn", Level::Warn},
                                            {"error", Level::Error}};
  app.add_option("--log-level", level_name, "least severe level logged: debug, info, warn, error")
      ->check(CLI::IsMember(levels))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  o.interval = std::chrono::milliseconds(interval_ms);
  o.monitor.stuck_after = std::chrono::milliseconds(stuck_ms);
  o.monitor.rescan_every = std::chrono::milliseconds(rescan_ms);
  o.monitor.use_inotify = !no_inotify;

  const Logger log(
      [](std::string_view line) {
        std::fwrite(line.data(), 1, line.size(), stderr);
        std::fputc('\n', stderr);
        std::fflush(stderr);
      },
      json_log ? Logger::Format::Json : Logger::Format::Logfmt, levels.at(level_name));
  return run_daemon(o, log, stdout);
}
