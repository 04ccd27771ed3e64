#include "sidecar/daemon.hpp"

#include "sidecar/http_server.hpp"
#include "sidecar/instance_lock.hpp"
#include "sidecar/metrics.hpp"
#include "sidecar/status.hpp"

#include "shm/platform/clock.hpp"

#include <fmt/format.h>

#include <poll.h>
#include <sys/signalfd.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>

namespace shm::sidecar {
namespace {

// After an inotify wake, wait this long since the previous cycle before the
// next one, so a burst of file events costs one pass, not one per event.
constexpr std::uint64_t kDebounceNs = 20'000'000u;

HttpResponse route(std::string_view path, const Monitor& monitor, const HttpServer& server,
                   std::uint64_t start_ns) {
  if (path == "/metrics")
    return {200, "text/plain; version=0.0.4; charset=utf-8",
            render_metrics(monitor, start_ns, server.connections())};
  if (path == "/status")
    return {200, "application/json", status_json(monitor, start_ns).dump(2) + "\n"};
  if (path == "/healthz") return {200, "text/plain; charset=utf-8", "ok\n"};
  if (path == "/")
    return {200, "text/plain; charset=utf-8",
            "shm-sidecar\n  /metrics  Prometheus text exposition\n  /status   JSON status\n"
            "  /healthz  liveness probe\n"};
  return {404, "text/plain; charset=utf-8", fmt::format("no such endpoint: {}\n", path)};
}

// Blocks the stop signals and returns a signalfd for them (or an invalid
// handle: the default actions then stay in place).
FileHandle block_signals(sigset_t& set) {
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  if (::pthread_sigmask(SIG_BLOCK, &set, nullptr) != 0) return {};
  return FileHandle(::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC));
}

}  // namespace

int run_daemon(const DaemonOptions& options, const Logger& log, std::FILE* out) {
  const std::uint64_t start_ns = realtime_ns();
  MonitorOptions mo = options.monitor;
  if (mo.root.empty()) mo.root = default_root();

  std::signal(SIGPIPE, SIG_IGN);
  sigset_t stop_set;
  FileHandle signals = block_signals(stop_set);
  if (!signals.valid()) {
    log.error("startup_failed")
        .kv("step", "signalfd")
        .kv("error", std::string(std::strerror(errno)));
    return kExitFailure;
  }

  auto lock = InstanceLock::acquire(mo.root);
  if (!lock) {
    const bool taken = lock.error().code == Errc::RoleTaken;
    log.error(taken ? "already_running" : "startup_failed")
        .kv("root", mo.root)
        .kv("error", lock.error().message);
    return taken ? kExitAlreadyRunning : kExitFailure;
  }
  if (lock->identity_error())
    log.warn("lock_identity_not_written")
        .kv("root", mo.root)
        .kv("error", lock->identity_error()->message);

  Monitor monitor(mo, log);
  if (options.once) {
    monitor.do_work();
    const std::string text =
        options.json ? status_json(monitor, start_ns).dump(2) + "\n" : status_text(monitor);
    std::fwrite(text.data(), 1, text.size(), out);
    std::fflush(out);
    return kExitOk;
  }

  HttpServer server;
  if (!options.listen.empty()) {
    auto s = HttpServer::listen(options.listen);
    if (!s) {
      log.error("startup_failed").kv("step", "listen").kv("error", s.error().message);
      return kExitFailure;
    }
    server = std::move(*s);
    if (auto ok = lock->publish(server.address()); !ok)
      log.warn("lock_identity_not_written").kv("error", ok.error().message);
    std::fprintf(out, "listening on %s\n", server.address().c_str());
    std::fflush(out);
  }
  log.info("started")
      .kv("root", mo.root)
      .kv("pid", static_cast<std::int64_t>(::getpid()))
      .kv("listen", server.address().empty() ? std::string("-") : server.address())
      .kv("interval_ms", static_cast<std::int64_t>(options.interval.count()))
      .kv("stuck_after_ms", static_cast<std::int64_t>(mo.stuck_after.count()))
      .kv("rescan_ms", static_cast<std::int64_t>(mo.rescan_every.count()))
      .kv("gc_ephemeral", mo.gc_ephemeral)
      .kv("inotify", monitor.wake_fd() >= 0);

  monitor.do_work();
  std::uint64_t last_cycle = monotonic_ns();
  std::fprintf(out, "ready\n");
  std::fflush(out);

  const auto interval_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(options.interval).count());
  const HttpServer::Handler handler = [&](std::string_view path) {
    return route(path, monitor, server, start_ns);
  };
  bool changed = false;  // the root changed since the last cycle (inotify)
  std::vector<pollfd> fds;
  for (;;) {
    const std::uint64_t now = monotonic_ns();
    std::uint64_t next = last_cycle + interval_ns;
    if (changed) next = std::min(next, last_cycle + kDebounceNs);
    const std::uint64_t wait_ns = next > now ? next - now : 0;
    // Capped so idle HTTP connections are timed out even when nothing happens.
    const int timeout_ms =
        static_cast<int>(std::min<std::uint64_t>((wait_ns + 999'999u) / 1'000'000u, 1000u));

    fds.clear();
    fds.push_back(pollfd{signals.get(), POLLIN, 0});
    const bool watch_inotify = !changed && monitor.wake_fd() >= 0;
    if (watch_inotify) fds.push_back(pollfd{monitor.wake_fd(), POLLIN, 0});
    server.poll_fds(fds);
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
      log.error("poll_failed").kv("error", std::string(std::strerror(errno)));
      return kExitFailure;
    }

    bool stop = false;
    if ((fds[0].revents & POLLIN) != 0) {
      signalfd_siginfo si{};
      while (::read(signals.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
        if (si.ssi_signo == SIGHUP) {
          log.info("rescan_requested").kv("signal", "SIGHUP");
          monitor.request_rescan();
          changed = true;
        } else {
          log.info("stopping").kv("signal", si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT");
          stop = true;
        }
      }
    }
    if (stop) break;
    if (watch_inotify && (fds[1].revents & POLLIN) != 0) changed = true;
    server.service(handler);

    const std::uint64_t t = monotonic_ns();
    if (t >= last_cycle + interval_ns || (changed && t >= last_cycle + kDebounceNs)) {
      monitor.do_work();
      last_cycle = monotonic_ns();
      changed = false;
    }
  }
  const MonitorStats& st = monitor.stats();
  // http_connections: clients still connected, dropped unanswered by the
  // exit (an idle client never delays the shutdown).
  log.info("stopped")
      .kv("cycles", st.cycles)
      .kv("deaths", st.deaths)
      .kv("reclaims", st.reclaims)
      .kv("collected", st.collected)
      .kv("http_connections", server.connections());
  return kExitOk;
}

}  // namespace shm::sidecar
