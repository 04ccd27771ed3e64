#include "sidecar/daemon.hpp"

#include "common/http_endpoint.hpp"

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
#include <mutex>

namespace shm::sidecar {
namespace {

// After an inotify wake, wait this long since the previous cycle before the
// next one, so a burst of file events costs one pass, not one per event.
constexpr std::uint64_t kDebounceNs = 20'000'000u;

using daemons::HttpEndpoint;
using daemons::HttpRequest;
using daemons::HttpResponse;

// Runs on the endpoint's worker threads; the caller holds the monitor's mutex.
HttpResponse route(const HttpRequest& req, const Monitor& monitor, std::uint64_t start_ns) {
  if (req.path == "/metrics")
    return {200, "text/plain; version=0.0.4; charset=utf-8",
            render_metrics(monitor, start_ns, req.connections)};
  if (req.path == "/status") return {200, "application/json", status_json_text(monitor, start_ns)};
  if (req.path == "/healthz") return {200, "text/plain; charset=utf-8", "ok\n"};
  if (req.path == "/")
    return {200, "text/plain; charset=utf-8",
            "shm-sidecar\n  /metrics  Prometheus text exposition\n  /status   JSON status\n"
            "  /healthz  liveness probe\n"};
  return {404, "text/plain; charset=utf-8", fmt::format("no such endpoint: {}\n", req.path)};
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
  if (auto ok = check_root(mo.root); !ok) {
    log.error("startup_failed").kv("root", mo.root).kv("error", ok.error().what());
    return kExitFailure;
  }

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
        options.json ? status_json_text(monitor, start_ns) : status_text(monitor);
    std::fwrite(text.data(), 1, text.size(), out);
    std::fflush(out);
    return kExitOk;
  }

  // The HTTP handlers run on the endpoint's threads and read the monitor;
  // the duty cycle below writes it. This mutex serialises the two: a scrape
  // waits for a running cycle and sees its complete result.
  std::mutex monitor_mutex;
  std::unique_lock cycle(monitor_mutex);  // held through the first cycle
  std::unique_ptr<HttpEndpoint> endpoint;
  if (!options.listen.empty()) {
    auto e = HttpEndpoint::start(options.listen, [&](const HttpRequest& req) {
      const std::lock_guard hold(monitor_mutex);
      return route(req, monitor, start_ns);
    });
    if (!e) {
      log.error("startup_failed").kv("step", "listen").kv("error", e.error().message);
      return kExitFailure;
    }
    endpoint = std::move(*e);
    if (auto ok = lock->publish(endpoint->address()); !ok)
      log.warn("lock_identity_not_written").kv("error", ok.error().message);
    std::fprintf(out, "listening on %s\n", endpoint->address().c_str());
    std::fflush(out);
  }
  log.info("started")
      .kv("root", mo.root)
      .kv("pid", static_cast<std::int64_t>(::getpid()))
      .kv("listen", endpoint ? endpoint->address() : std::string("-"))
      .kv("interval_ms", static_cast<std::int64_t>(options.interval.count()))
      .kv("stuck_after_ms", static_cast<std::int64_t>(mo.stuck_after.count()))
      .kv("rescan_ms", static_cast<std::int64_t>(mo.rescan_every.count()))
      .kv("gc_ephemeral", mo.gc_ephemeral)
      .kv("inotify", monitor.wake_fd() >= 0);

  monitor.do_work();
  cycle.unlock();
  std::uint64_t last_cycle = monotonic_ns();
  std::fprintf(out, "ready\n");
  std::fflush(out);

  const auto interval_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(options.interval).count());
  bool changed = false;  // the root changed since the last cycle (inotify)
  std::vector<pollfd> fds;
  for (;;) {
    const std::uint64_t now = monotonic_ns();
    std::uint64_t next = last_cycle + interval_ns;
    if (changed) next = std::min(next, last_cycle + kDebounceNs);
    const std::uint64_t wait_ns = next > now ? next - now : 0;
    // At most --interval (an hour), so it fits an int.
    const int timeout_ms = static_cast<int>((wait_ns + 999'999u) / 1'000'000u);

    fds.clear();
    fds.push_back(pollfd{signals.get(), POLLIN, 0});
    const bool watch_inotify = !changed && monitor.wake_fd() >= 0;
    if (watch_inotify) fds.push_back(pollfd{monitor.wake_fd(), POLLIN, 0});
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
          const std::lock_guard hold(monitor_mutex);
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

    const std::uint64_t t = monotonic_ns();
    if (t >= last_cycle + interval_ns || (changed && t >= last_cycle + kDebounceNs)) {
      {
        const std::lock_guard hold(monitor_mutex);
        monitor.do_work();
      }
      last_cycle = monotonic_ns();
      changed = false;
    }
  }
  // http_connections: clients still connected, cut unanswered by the stop
  // (an idle client never delays the shutdown). After it no thread but this
  // one touches the monitor.
  const std::size_t cut = endpoint ? endpoint->stop() : 0;
  const MonitorStats& st = monitor.stats();
  log.info("stopped")
      .kv("cycles", st.cycles)
      .kv("deaths", st.deaths)
      .kv("reclaims", st.reclaims)
      .kv("collected", st.collected)
      .kv("http_connections", static_cast<std::uint64_t>(cut));
  return kExitOk;
}

}  // namespace shm::sidecar
