#include "bridge/nats_link.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>

namespace shm::bridge {

std::string redact_url(const std::string& url) {
  const auto scheme = url.find("://");
  const std::size_t start = scheme == std::string::npos ? 0 : scheme + 3;
  const auto at = url.find('@', start);
  const auto slash = url.find('/', start);
  if (at == std::string::npos || (slash != std::string::npos && slash < at)) return url;
  return url.substr(0, start) + "***" + url.substr(at);
}

std::string describe_servers(const std::vector<std::string>& servers) {
  std::string out;
  for (const auto& s : servers) {
    if (!out.empty()) out += ",";
    out += redact_url(s);
  }
  return out;
}

std::optional<std::string> server_url_problem(const std::string& url) {
  const auto scheme = url.find("://");
  if (scheme == std::string::npos) return "expected nats://HOST:PORT or tls://HOST:PORT";
  const std::string name = url.substr(0, scheme);
  if (name != "nats" && name != "tls")
    return fmt::format("the scheme is {}://; expected nats:// or tls://", name);
  std::string rest = url.substr(scheme + 3);
  if (const auto at = rest.rfind('@'); at != std::string::npos) rest = rest.substr(at + 1);
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  const auto colon = rest.rfind(':');
  const std::string host = colon == std::string::npos ? rest : rest.substr(0, colon);
  if (host.empty() || host.find_first_of("/?#@ ") != std::string::npos)
    return "expected a host after the scheme (nats://HOST:PORT)";
  if (colon == std::string::npos) return "expected a port after the host (nats://HOST:PORT)";
  const std::string port = rest.substr(colon + 1);
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoul(port) == 0 ||
      std::stoul(port) > 65535)
    return fmt::format("the port \"{}\" is not a number in 1-65535", port);
  return std::nullopt;
}

std::string nats_error(natsStatus s) {
  const char* last = nats_GetLastError(nullptr);
  std::string text = natsStatus_GetText(s);
  if (last != nullptr && *last != '\0' && text != last) text += fmt::format(" ({})", last);
  return text;
}

namespace {

// nats_Open once per process (the library's own threads and timers).
void open_library() {
  static std::once_flag once;
  std::call_once(once, [] { (void)nats_Open(-1); });
}

// The client's last error may quote the URL it tried: keep only redacted text.
std::string scrub(std::string text, const ConnectionOptions& o) {
  auto erase = [&text](const std::string& secret) {
    if (secret.empty()) return;
    for (auto pos = text.find(secret); pos != std::string::npos; pos = text.find(secret, pos))
      text.replace(pos, secret.size(), "***");
  };
  erase(o.password);
  erase(o.token);
  for (const auto& s : o.servers) {
    const std::string red = redact_url(s);
    if (red != s) {
      for (auto pos = text.find(s); pos != std::string::npos; pos = text.find(s, pos))
        text.replace(pos, s.size(), red);
    }
  }
  return text;
}

Failure connect_failure(natsStatus s, const ConnectionOptions& o) {
  const std::string where = describe_servers(o.servers);
  switch (s) {
    case NATS_NO_SERVER:
    case NATS_IO_ERROR:
    case NATS_TIMEOUT:
      return {kExitUnreachable,
              fmt::format("cannot reach a NATS server at {}: {}", where, scrub(nats_error(s), o))};
    case NATS_CONNECTION_AUTH_FAILED:
    case NATS_NOT_PERMITTED:
      return {kExitAuth,
              fmt::format("the NATS server at {} refused the credentials ({})", where,
                          o.creds_file.empty()
                              ? (o.token.empty() ? (o.user.empty() ? "none given" : "user/password")
                                                 : "token")
                              : "credentials file")};
    default:
      return {kExitUnreachable,
              fmt::format("cannot connect to {}: {}", where, scrub(nats_error(s), o))};
  }
}

}  // namespace

NatsLink::~NatsLink() {
  if (js_ != nullptr) jsCtx_Destroy(js_);
  if (nc_ != nullptr) {
    natsConnection_Close(nc_);
    natsConnection_Destroy(nc_);
  }
  if (opts_ != nullptr) natsOptions_Destroy(opts_);
}

void NatsLink::on_reconnected(natsConnection* /*nc*/, void* closure) {
  // [bridge.N] acq_rel (runs on the client's thread): pairs with the acquire
  // in reconnects(); the count is the whole message, nothing else rides on it.
  static_cast<NatsLink*>(closure)->reconnects_.fetch_add(1, std::memory_order_acq_rel);
}

bool NatsLink::connected() const noexcept {
  return nc_ != nullptr && natsConnection_Status(nc_) == NATS_CONN_STATUS_CONNECTED;
}

std::optional<Failure> NatsLink::gave_up(const ConnectionOptions& o) const {
  if (nc_ == nullptr || !natsConnection_IsClosed(nc_)) return std::nullopt;
  const char* text = nullptr;  // not shown: it may quote a URL with credentials
  const natsStatus s = natsConnection_GetLastError(nc_, &text);
  Failure f = connect_failure(s == NATS_OK ? NATS_CONNECTION_CLOSED : s, o);
  f.message = "lost the connection and could not reconnect: " + f.message;
  return f;
}

Failure NatsLink::at_start(Failure f, const ConnectionOptions& o) const {
  if (connected()) return f;
  if (auto given_up = gave_up(o); given_up && given_up->code == kExitAuth) return *given_up;
  return {kExitUnreachable,
          fmt::format("lost the connection to the NATS server at {} while the route started: {}",
                      describe_servers(o.servers), f.message)};
}

void NatsLink::close() noexcept {
  if (nc_ != nullptr) natsConnection_Close(nc_);
}

Outcome<std::unique_ptr<NatsLink>> NatsLink::connect(const ConnectionOptions& o,
                                                     Reconnect reconnect,
                                                     jsPubAckHandler on_publish_ack, void* closure,
                                                     std::int64_t max_pending) {
  open_library();
  auto link = std::make_unique<NatsLink>();
  auto check = [&](natsStatus s, const char* what) -> Outcome<void> {
    if (s == NATS_OK) return {};
    return failure(kExitUsage, fmt::format("{}: {}", what, scrub(nats_error(s), o)));
  };
  if (o.servers.empty()) return failure(kExitUsage, "no --server given");
  if (auto ok = check(natsOptions_Create(&link->opts_), "NATS options"); !ok)
    return std::unexpected(ok.error());
  natsOptions* opts = link->opts_;
  std::vector<const char*> urls;
  for (const auto& s : o.servers) urls.push_back(s.c_str());
  if (auto ok = check(natsOptions_SetServers(opts, urls.data(), static_cast<int>(urls.size())),
                      "--server");
      !ok)
    return std::unexpected(ok.error());
  (void)natsOptions_SetNoRandomize(opts, true);
  (void)natsOptions_SetTimeout(opts, o.connect_timeout_ms);
  if (reconnect == Reconnect::Automatic) {
    (void)natsOptions_SetAllowReconnect(opts, true);
    (void)natsOptions_SetMaxReconnect(opts, -1);
    (void)natsOptions_SetReconnectWait(opts, 200);
  } else {
    (void)natsOptions_SetAllowReconnect(opts, false);
  }
  (void)natsOptions_SetName(opts, "shm-bridge");
  (void)natsOptions_SetReconnectedCB(opts, &NatsLink::on_reconnected, link.get());
  if (!o.user.empty() || !o.password.empty()) {
    if (auto ok = check(natsOptions_SetUserInfo(opts, o.user.c_str(), o.password.c_str()),
                        "--user/--password");
        !ok)
      return std::unexpected(ok.error());
  }
  if (!o.token.empty()) {
    if (auto ok = check(natsOptions_SetToken(opts, o.token.c_str()), "--token"); !ok)
      return std::unexpected(ok.error());
  }
  if (!o.creds_file.empty()) {
    if (std::FILE* f = std::fopen(o.creds_file.c_str(), "r"); f != nullptr)
      std::fclose(f);
    else
      return failure(kExitUsage, fmt::format("--creds {}: cannot read the file", o.creds_file));
    if (auto ok =
            check(natsOptions_SetUserCredentialsFromFiles(opts, o.creds_file.c_str(), nullptr),
                  "--creds");
        !ok)
      return std::unexpected(ok.error());
  }
  if (!o.tls_ca_file.empty()) {
    if (auto ok =
            check(natsOptions_LoadCATrustedCertificates(opts, o.tls_ca_file.c_str()), "--tls-ca");
        !ok)
      return std::unexpected(ok.error());
    if (auto ok = check(natsOptions_SetSecure(opts, true), "--tls-ca"); !ok)
      return std::unexpected(ok.error());
  }
  // libnats before 3.8 drops the nonce's signature from CONNECT when the
  // signature's first byte is zero (its base64 encoder takes the input for a
  // C string), so the server refuses about 1 connection in 256 made with a
  // credentials file ("Signature missing" in its debug log). A new
  // connection signs a new nonce: such a refusal is tried again, up to
  // kSignatureAttempts connections in all (a wrong credential is refused
  // every time, so it still exits 4, a few milliseconds later).
  constexpr int kSignatureAttempts = 4;
  natsStatus s = natsConnection_Connect(&link->nc_, opts);
  for (int attempt = 1;
       s == NATS_CONNECTION_AUTH_FAILED && !o.creds_file.empty() && attempt < kSignatureAttempts;
       ++attempt)
    s = natsConnection_Connect(&link->nc_, opts);
  if (s != NATS_OK) return std::unexpected(connect_failure(s, o));
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = 5000;
  jo.PublishAsync.MaxPending = max_pending;
  jo.PublishAsync.AckHandler = on_publish_ack;
  jo.PublishAsync.AckHandlerClosure = closure;
  if (s = natsConnection_JetStream(&link->js_, link->nc_, &jo); s != NATS_OK)
    return failure(kExitRuntime, fmt::format("JetStream context: {}", nats_error(s)));
  return link;
}

Outcome<std::optional<std::string>> NatsLink::stream_for(const std::string& subject) {
  const std::string request = nlohmann::json{{"subject", subject}}.dump();
  // A request that times out, or "temporarily unavailable" (a JetStream
  // cluster still electing its metadata leader), is retried for up to 15 s.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  for (;;) {
    const bool last_try = std::chrono::steady_clock::now() >= deadline;
    natsMsg* reply = nullptr;
    const natsStatus s = natsConnection_Request(&reply, nc_, "$JS.API.STREAM.NAMES", request.data(),
                                                static_cast<int>(request.size()), 5000);
    if (s == NATS_NO_RESPONDERS)
      return failure(kExitNoStream, "the NATS server has no JetStream (start it with -js)");
    if (s == NATS_TIMEOUT && !last_try && connected()) continue;  // else: the server is lost
    if (s != NATS_OK)
      return failure(kExitRuntime,
                     fmt::format("listing the streams for subject {}: {}", subject, nats_error(s)));
    const std::string body(natsMsg_GetData(reply),
                           static_cast<std::size_t>(natsMsg_GetDataLength(reply)));
    natsMsg_Destroy(reply);
    const auto j = nlohmann::json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      return failure(kExitRuntime, "the stream list reply is not JSON");
    if (j.contains("error")) {
      const nlohmann::json& e = j["error"];
      if (e.is_object() && e.value("err_code", 0) == JSClusterNotAvailErr && !last_try) {
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
        continue;
      }
      return failure(kExitNoStream,
                     fmt::format("listing the streams for subject {}: {}", subject,
                                 e.is_object() ? e.value("description", "error") : "error"));
    }
    const auto it = j.find("streams");
    if (it == j.end() || !it->is_array() || it->empty()) return std::optional<std::string>{};
    return std::optional<std::string>((*it)[0].get<std::string>());
  }
}

namespace {

// The subjects of a stream's configuration, comma separated.
std::string subjects_of(const jsStreamConfig& c) {
  std::string out;
  for (int i = 0; i < c.SubjectsLen; ++i) {
    if (!out.empty()) out += ",";
    out += c.Subjects[i] != nullptr ? c.Subjects[i] : "";
  }
  return out;
}

}  // namespace

std::mutex& stream_admin_mutex() noexcept {
  static std::mutex m;
  return m;
}

Outcome<void> NatsLink::add_subject_to(const std::string& name, const std::string& subject,
                                       bool add) {
  jsStreamInfo* si = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = js_GetStreamInfo(&si, js_, name.c_str(), nullptr, &code);
  if (s != NATS_OK || si == nullptr || si->Config == nullptr) {
    if (si != nullptr) jsStreamInfo_Destroy(si);
    return failure(kExitNoStream,
                   fmt::format("stream {}: reading its configuration: {} (JetStream error {})",
                               name, nats_error(s), static_cast<int>(code)));
  }
  const std::string subjects = subjects_of(*si->Config);
  if (!add) {
    jsStreamInfo_Destroy(si);
    return failure(kExitNoStream,
                   fmt::format("stream {} exists but does not capture subject {} (its subjects: "
                               "{}): pass --add-subject (\"add-subject\": true in a config file) "
                               "to add it, or name a stream that captures it",
                               name, subject, subjects.empty() ? "none" : subjects));
  }
  std::vector<const char*> list;
  for (int i = 0; i < si->Config->SubjectsLen; ++i) list.push_back(si->Config->Subjects[i]);
  list.push_back(subject.c_str());
  jsStreamConfig cfg = *si->Config;  // shallow: `si` owns the strings until destroyed below
  cfg.Subjects = list.data();
  cfg.SubjectsLen = static_cast<int>(list.size());
  jsStreamInfo* updated = nullptr;
  code = static_cast<jsErrCode>(0);
  s = js_UpdateStream(&updated, js_, &cfg, nullptr, &code);
  if (updated != nullptr) jsStreamInfo_Destroy(updated);
  jsStreamInfo_Destroy(si);
  if (s != NATS_OK)
    return failure(kExitNoStream,
                   fmt::format("stream {}: adding subject {} to its subjects ({}): {} (JetStream "
                               "error {})",
                               name, subject, subjects, nats_error(s), static_cast<int>(code)));
  return {};
}

Outcome<void> NatsLink::create_stream(const std::string& name, const std::string& subject,
                                      std::uint32_t replicas, bool add_subject) {
  const std::lock_guard lock(stream_admin_mutex());  // see its declaration
  jsStreamConfig cfg;
  jsStreamConfig_Init(&cfg);
  cfg.Replicas = static_cast<int64_t>(replicas);
  cfg.Name = name.c_str();
  const char* subjects[] = {subject.c_str()};
  cfg.Subjects = subjects;
  cfg.SubjectsLen = 1;
  cfg.Storage = js_FileStorage;
  // A JetStream cluster that has just elected its metadata leader may not
  // know its peers yet: "temporarily unavailable", "no suitable peers" and
  // "insufficient resources" (replicas on peers it has not heard from) pass
  // within seconds, and are retried for up to 15 s.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = NATS_OK;
  for (;;) {
    code = static_cast<jsErrCode>(0);
    jsStreamInfo* info = nullptr;
    s = js_AddStream(&info, js_, &cfg, nullptr, &code);
    if (info != nullptr) jsStreamInfo_Destroy(info);
    if (s == NATS_OK) return {};
    // The stream that now captures the subject decides: ours is success,
    // another one is a real conflict; nullopt when none captures it.
    auto decided_by_capture = [&]() -> std::optional<Outcome<void>> {
      auto existing = stream_for(subject);
      if (!existing) return Outcome<void>{std::unexpected(existing.error())};
      if (*existing == name) return Outcome<void>{};
      if (existing->has_value())
        return Outcome<void>{
            failure(kExitNoStream,
                    fmt::format("creating stream {}: subject {} is already captured by stream {}",
                                name, subject, **existing))};
      return std::nullopt;
    };
    // The stream exists: it must capture the subject (another route or
    // bridge may have just made or extended it), or be given it.
    if (code == JSStreamNameExistErr) {
      if (auto decided = decided_by_capture()) return std::move(*decided);
      return add_subject_to(name, subject, add_subject);
    }
    // Two routes of one bridge (or two bridges) creating the same stream at
    // once: the server may refuse the later create as overlapping the stream
    // the earlier one is registering.
    if (code == JSStreamSubjectOverlapErr) {
      if (auto decided = decided_by_capture()) return std::move(*decided);
    }
    const bool transient = code == JSStreamSubjectOverlapErr || s == NATS_TIMEOUT ||
                           code == JSClusterNotAvailErr || code == JSClusterNoPeersErr ||
                           code == JSInsufficientResourcesErr;
    if (!transient || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return failure(kExitNoStream, fmt::format("creating stream {} for subject {}: {} (JetStream "
                                            "error {})",
                                            name, subject, nats_error(s), static_cast<int>(code)));
}

}  // namespace shm::bridge
