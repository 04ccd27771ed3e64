// shm-bridge: moves a local SpscRing's or Channel's records to NATS JetStream
// (export) or a JetStream subject's messages into a local SpscRing or Channel
// (import): one route from the command line, or every route of a config file
// (`run --config`), one thread each. Everything but the command line lives in the shm_bridge
// library (routes.hpp, config_file.hpp).
#include "bridge/config_file.hpp"
#include "bridge/routes.hpp"
#include "bridge/status_page.hpp"

#include <CLI/CLI.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

std::atomic<bool> g_stop{false};

extern "C" void on_signal(int /*sig*/) {
  g_stop.store(true, std::memory_order_relaxed);
}

void log_line(std::string_view level, std::string_view event, const std::string& fields) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char ts[32];
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
  std::fprintf(stderr, "ts=%s level=%.*s event=%.*s %s\n", ts, static_cast<int>(level.size()),
               level.data(), static_cast<int>(event.size()), event.data(), fields.c_str());
  std::fflush(stderr);
}

void add_common(CLI::App& app, shm::bridge::CommonOptions& c, std::string& listen) {
  app.add_option("--server", c.connection.servers,
                 "NATS server URL, nats://HOST:PORT or tls://HOST:PORT (repeatable: tried in "
                 "order, then reconnected to)")
      ->required()
      ->check(CLI::Validator(
          [](const std::string& v) {
            auto why = shm::bridge::server_url_problem(v);
            return why ? shm::bridge::redact_url(v) + ": " + *why : std::string();
          },
          "URL"));
  app.add_option("--user", c.connection.user, "user name");
  app.add_option("--password", c.connection.password, "password (never logged)");
  app.add_option("--token", c.connection.token, "authentication token (never logged)");
  app.add_option("--creds", c.connection.creds_file, "NATS credentials file (JWT + NKey seed)");
  app.add_option("--tls-ca", c.connection.tls_ca_file, "CA certificate file: connect with TLS");
  app.add_option("--root", c.root, "segment directory (default: $LIBSHM_ROOT or /dev/shm/libshm)");
  app.add_option("--subject", c.subject, "the JetStream subject")->required();
  app.add_option("--state", c.state,
                 "the bridge's state segment (default: <ring>-bridge-export / -import)");
  auto* ring =
      app.add_option(
             "--create-ring", c.create_ring,
             "create the local ring with this many bytes (a power of two) when it is missing")
          ->check(CLI::Range(std::uint64_t{64}, std::uint64_t{1} << 40))
          ->check(CLI::Validator(
              [](const std::string& v) {
                std::uint64_t n = 0;
                try {
                  n = std::stoull(v);
                } catch (const std::exception&) {
                  return std::string("not a number");
                }
                return n != 0 && (n & (n - 1)) == 0 ? std::string()
                                                    : std::string("not a power of two");
              },
              "a power of two"));
  app.add_option("--create-channel", c.create_channel,
                 "create the local channel for payloads of up to this many bytes when it is "
                 "missing (4 pages holding 256 of them)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 20))
      ->excludes(ring);
  app.add_option("--create-stream", c.create_stream,
                 "create this stream (file storage) when no stream captures the subject");
  app.add_flag("--add-subject", c.add_subject,
               "when the --create-stream stream exists without capturing the subject, add the "
               "subject to it (else exit 5)");
  app.add_option("--stream-replicas", c.stream_replicas,
                 "replicas of the stream --create-stream creates (a JetStream cluster; default 1)")
      ->check(CLI::Range(1u, 5u));
  app.add_option("--stall-after", c.stall_after_s,
                 "seconds of failing publishes or fetches, or of a lost connection, after which "
                 "/status says the route is stalled")
      ->check(CLI::Range(1u, 86400u))
      ->capture_default_str();
  app.add_option("--listen", listen,
                 "serve GET /status (JSON) and /metrics (Prometheus) on this loopback "
                 "HOST:PORT (port 0: any free port, printed in the log)");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace shm::bridge;
  ExportOptions ex;
  ImportOptions im;
  std::string listen;
  CLI::App app{
      "shm-bridge: streams between hosts over NATS JetStream (export: ring or channel -> "
      "egress -> JetStream; import: JetStream durable consumer -> ring or channel)."};
  app.require_subcommand(1);
  app.footer(
      "Examples:\n"
      "  shm-bridge export --server nats://10.0.0.5:4222 --subject orders.a --source orders "
      "--egress orders-out\n"
      "  shm-bridge import --server nats://10.0.0.5:4222 --subject orders.a --durable host-b "
      "--dest orders\n"
      "  shm-bridge run --config /etc/libshm/bridge.json   # several routes, one thread each\n"
      "Exit codes: 0 stopped (SIGTERM/SIGINT), 1 runtime failure, 2 bad usage, 3 server "
      "unreachable,\n"
      "  4 credentials refused, 5 no stream for the subject, 6 local segment missing or of the "
      "wrong kind,\n"
      "  7 another bridge holds the route, 8 messages gone from the stream (import). Details: "
      "docs/bridge.md.");
  CLI::App* exp =
      app.add_subcommand("export", "local ring, channel, relay or topic -> egress -> JetStream");
  add_common(*exp, ex.common, listen);
  exp->add_option("--source", ex.source,
                  "the SpscRing, Channel, relay or topic the application writes (found by its "
                  "kind)")
      ->required();
  exp->add_option("--egress", ex.egress, "the egress segment (created when missing)")->required();
  exp->add_option("--egress-capacity", ex.egress_capacity, "records the egress retains at most")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  exp->add_option("--max-message", ex.max_message, "largest record in bytes (the egress slot)")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  exp->add_option("--window", ex.window, "publishes awaiting their acknowledgement at most")
      ->check(CLI::Range(1u, 65536u))
      ->capture_default_str();
  exp->add_option_function<std::string>(
         "--topic-overflow",
         [&ex](const std::string& v) { ex.topic_drop_oldest = v == "drop_oldest"; },
         "a topic source: block (the publisher waits for the bridge) or drop_oldest (the "
         "bridge misses samples, counted)")
      ->check(CLI::IsMember({"block", "drop_oldest"}))
      ->default_str("block");
  exp->add_option("--publish-timeout", ex.publish_timeout_ms,
                  "milliseconds to wait for a publish acknowledgement")
      ->check(CLI::Range(10u, 600000u))
      ->capture_default_str();
  CLI::App* imp =
      app.add_subcommand("import", "JetStream durable pull consumer -> local ring or channel");
  add_common(*imp, im.common, listen);
  imp->add_option("--dest", im.dest,
                  "the SpscRing or Channel local readers consume (found by its kind)")
      ->required();
  imp->add_option("--durable", im.durable, "the durable consumer's name")->required();
  imp->add_option("--batch", im.batch, "messages per fetch")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  imp->add_option("--ack-wait", im.ack_wait_ms,
                  "milliseconds before JetStream redelivers an unacknowledged message")
      ->check(CLI::Range(100u, 3600000u))
      ->capture_default_str();
  imp->add_option_function<std::string>(
         "--on-gap", [&im](const std::string& v) { im.stop_on_gap = v == "stop"; },
         "messages gone from the stream before the import received them: stop (exit 8, the "
         "default) or continue")
      ->check(CLI::IsMember({"stop", "continue"}));
  CLI::App* run = app.add_subcommand(
      "run", "every route of a JSON config file, one thread each (a failing route stops them all)");
  std::string config_path;
  run->add_option("--config", config_path, "the config file (docs/bridge.md)")->required();
  run->add_option("--listen", listen,
                  "serve GET /status and /metrics on this loopback HOST:PORT (overrides the "
                  "file's \"listen\")");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  std::vector<RouteConfig> routes;
  if (run->parsed()) {
    auto config = load_config(config_path);
    if (!config) {
      std::fprintf(stderr, "shm-bridge: %s\n", config.error().message.c_str());
      return config.error().code;
    }
    if (listen.empty()) listen = config->listen;
    routes = std::move(config->routes);
  } else if (exp->parsed()) {
    routes.push_back(RouteConfig{Route::Export, ex, {}});
  } else {
    routes.push_back(RouteConfig{Route::Import, {}, im});
  }

  std::vector<std::unique_ptr<RouteStatus>> live;
  std::vector<StatusSource> sources;
  for (const RouteConfig& r : routes) {
    live.push_back(std::make_unique<RouteStatus>());
    const bool is_export = r.route == Route::Export;
    const CommonOptions& c = is_export ? r.exported.common : r.imported.common;
    sources.push_back(StatusSource{r.route,
                                   is_export ? state_name(r.exported) : state_name(r.imported),
                                   c.root, c.subject, live.back().get()});
  }
  std::unique_ptr<shm::daemons::HttpEndpoint> endpoint;
  if (!listen.empty()) {
    auto started = shm::daemons::HttpEndpoint::start(
        listen, [&sources](const shm::daemons::HttpRequest& r) { return status_page(sources, r); });
    if (!started) {
      std::fprintf(stderr, "shm-bridge: --listen %s: %s\n", listen.c_str(),
                   started.error().what().c_str());
      return kExitUsage;
    }
    endpoint = std::move(*started);
    log_line("info", "listening", "address=" + endpoint->address());
  }
  auto run_route = [&](std::size_t i) {
    const RouteConfig& r = routes[i];
    return r.route == Route::Export ? run_export(r.exported, g_stop, log_line, *live[i])
                                    : run_import(r.imported, g_stop, log_line, *live[i]);
  };
  int rc = kExitOk;
  if (routes.size() == 1) {
    rc = run_route(0);
  } else {
    // The first route to fail stops the others (one process, one fate: a
    // supervisor restarts the bridge as a whole) and gives the exit code.
    std::atomic<int> first_failure{kExitOk};
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < routes.size(); ++i)
      threads.emplace_back([&, i] {
        const int route_rc = run_route(i);
        if (route_rc == kExitOk) return;
        int expected = kExitOk;
        if (first_failure.compare_exchange_strong(expected, route_rc))
          log_line("error", "stopping",
                   "reason=\"route " + std::to_string(i) + " failed: every route stops\"");
        g_stop.store(true, std::memory_order_relaxed);
      });
    for (auto& t : threads) t.join();
    rc = first_failure.load();
  }
  if (endpoint) endpoint->stop();
  return rc;
}
