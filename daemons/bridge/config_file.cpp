#include "bridge/config_file.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <utility>

namespace shm::bridge {
namespace {

using nlohmann::json;

// What a value should have been, or nothing when it was taken.
using Problem = std::optional<std::string>;

Problem take_string(const json& v, std::string& out) {
  if (!v.is_string() || v.get_ref<const std::string&>().empty()) return "a non-empty string";
  out = v.get<std::string>();
  return std::nullopt;
}

Problem take_bool(const json& v, bool& out) {
  if (!v.is_boolean()) return "true or false";
  out = v.get<bool>();
  return std::nullopt;
}

template <class T>
Problem take_uint(const json& v, std::uint64_t lo, std::uint64_t hi, T& out) {
  const std::string range = fmt::format("an integer in [{}, {}]", lo, hi);
  if (!v.is_number_unsigned()) return range;
  const auto n = v.get<std::uint64_t>();
  if (n < lo || n > hi) return range;
  out = static_cast<T>(n);
  return std::nullopt;
}

Problem take_servers(const json& v, std::vector<std::string>& out) {
  constexpr const char* kWhat = "a server URL or a non-empty list of them";
  std::vector<std::string> servers;
  if (v.is_string()) {
    servers.push_back(v.get<std::string>());
  } else if (v.is_array() && !v.empty()) {
    for (const json& s : v) {
      if (!s.is_string()) return kWhat;
      servers.push_back(s.get<std::string>());
    }
  } else {
    return kWhat;
  }
  for (const auto& s : servers) {
    if (s.empty()) return kWhat;
    if (auto why = server_url_problem(s))
      return fmt::format("a nats:// or tls:// URL with a host and a port ({}: {})", redact_url(s),
                         *why);
  }
  out = std::move(servers);
  return std::nullopt;
}

// The options every route has (the command line's add_common, without
// --listen, which is the file's own key).
using CommonSetter = std::function<Problem(CommonOptions&, const json&)>;
const std::map<std::string, CommonSetter>& common_keys() {
  static const std::map<std::string, CommonSetter> keys{
      {"server",
       [](CommonOptions& c, const json& v) { return take_servers(v, c.connection.servers); }},
      {"user", [](CommonOptions& c, const json& v) { return take_string(v, c.connection.user); }},
      {"password",
       [](CommonOptions& c, const json& v) { return take_string(v, c.connection.password); }},
      {"token", [](CommonOptions& c, const json& v) { return take_string(v, c.connection.token); }},
      {"creds",
       [](CommonOptions& c, const json& v) { return take_string(v, c.connection.creds_file); }},
      {"tls-ca",
       [](CommonOptions& c, const json& v) { return take_string(v, c.connection.tls_ca_file); }},
      {"root", [](CommonOptions& c, const json& v) { return take_string(v, c.root); }},
      {"subject", [](CommonOptions& c, const json& v) { return take_string(v, c.subject); }},
      {"state", [](CommonOptions& c, const json& v) { return take_string(v, c.state); }},
      {"create-ring",
       [](CommonOptions& c, const json& v) -> Problem {
         constexpr const char* kWhat = "a power of two in [64, 1099511627776]";
         std::uint64_t bytes = 0;
         if (take_uint(v, 64, std::uint64_t{1} << 40, bytes) || (bytes & (bytes - 1)) != 0)
           return kWhat;
         c.create_ring = bytes;
         return std::nullopt;
       }},
      {"create-channel",
       [](CommonOptions& c, const json& v) {
         return take_uint(v, 1, std::uint64_t{1} << 20, c.create_channel);
       }},
      {"create-stream",
       [](CommonOptions& c, const json& v) { return take_string(v, c.create_stream); }},
      {"stream-replicas",
       [](CommonOptions& c, const json& v) { return take_uint(v, 1, 5, c.stream_replicas); }},
      {"add-subject", [](CommonOptions& c, const json& v) { return take_bool(v, c.add_subject); }},
      {"stall-after",
       [](CommonOptions& c, const json& v) { return take_uint(v, 1, 86400, c.stall_after_s); }},
  };
  return keys;
}

using ExportSetter = std::function<Problem(ExportOptions&, const json&)>;
const std::map<std::string, ExportSetter>& export_keys() {
  static const std::map<std::string, ExportSetter> keys{
      {"source", [](ExportOptions& o, const json& v) { return take_string(v, o.source); }},
      {"egress", [](ExportOptions& o, const json& v) { return take_string(v, o.egress); }},
      {"egress-capacity",
       [](ExportOptions& o, const json& v) {
         return take_uint(v, 1, 1u << 20, o.egress_capacity);
       }},
      {"max-message",
       [](ExportOptions& o, const json& v) { return take_uint(v, 1, 1u << 20, o.max_message); }},
      {"window", [](ExportOptions& o, const json& v) { return take_uint(v, 1, 65536, o.window); }},
      {"publish-timeout",
       [](ExportOptions& o, const json& v) {
         return take_uint(v, 10, 600000, o.publish_timeout_ms);
       }},
      {"topic-overflow",
       [](ExportOptions& o, const json& v) -> Problem {
         std::string overflow;
         if (take_string(v, overflow) || (overflow != "block" && overflow != "drop_oldest"))
           return "\"block\" or \"drop_oldest\"";
         o.topic_drop_oldest = overflow == "drop_oldest";
         return std::nullopt;
       }},
  };
  return keys;
}

using ImportSetter = std::function<Problem(ImportOptions&, const json&)>;
const std::map<std::string, ImportSetter>& import_keys() {
  static const std::map<std::string, ImportSetter> keys{
      {"dest", [](ImportOptions& o, const json& v) { return take_string(v, o.dest); }},
      {"durable", [](ImportOptions& o, const json& v) { return take_string(v, o.durable); }},
      {"batch", [](ImportOptions& o, const json& v) { return take_uint(v, 1, 4096, o.batch); }},
      {"on-gap",
       [](ImportOptions& o, const json& v) -> Problem {
         if (!v.is_string() || (v != "stop" && v != "continue")) return "\"stop\" or \"continue\"";
         o.stop_on_gap = v == "stop";
         return std::nullopt;
       }},
      {"ack-wait",
       [](ImportOptions& o, const json& v) { return take_uint(v, 100, 3600000, o.ack_wait_ms); }},
  };
  return keys;
}

// A JSON value for a message: short, and never a secret's value.
std::string shown(const std::string& key, const json& v) {
  if (key == "password" || key == "token") return "(hidden)";
  std::string s;
  if (key == "server" && (v.is_string() || v.is_array())) {  // URLs may carry user:password@
    for (const json& one : v.is_array() ? v : json::array({v}))
      s += (s.empty() ? "" : ",") +
           (one.is_string() ? redact_url(one.get<std::string>()) : one.dump());
  } else {
    s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

std::string known(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : ", ") + k;
  return out;
}

template <class Map>
std::vector<std::string> names(const Map& m) {
  std::vector<std::string> out;
  for (const auto& [k, _] : m) out.push_back(k);
  return out;
}

}  // namespace

Outcome<BridgeConfig> parse_config(const std::string& text, const std::string& path) {
  auto bad = [&](const std::string& what) {
    return failure(kExitUsage, fmt::format("config {}: {}", path, what));
  };
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    return bad(fmt::format("not valid JSON ({})", e.what()));
  }
  if (!doc.is_object()) return bad("the top level must be an object with \"routes\"");

  BridgeConfig config;
  CommonOptions defaults;
  for (const auto& [key, value] : doc.items()) {
    if (key == "listen") {
      if (auto p = take_string(value, config.listen))
        return bad(fmt::format("\"listen\": expected {}, got {}", *p, shown(key, value)));
    } else if (key == "defaults") {
      if (!value.is_object()) return bad("\"defaults\" must be an object");
      for (const auto& [dkey, dvalue] : value.items()) {
        const auto it = common_keys().find(dkey);
        if (it == common_keys().end())
          return bad(fmt::format("defaults: unknown key \"{}\" (defaults take: {})", dkey,
                                 known(names(common_keys()))));
        if (auto p = it->second(defaults, dvalue))
          return bad(
              fmt::format("defaults: \"{}\": expected {}, got {}", dkey, *p, shown(dkey, dvalue)));
      }
    } else if (key != "routes") {
      return bad(
          fmt::format("unknown top-level key \"{}\" (the keys are listen, defaults, routes)", key));
    }
  }
  const auto routes = doc.find("routes");
  if (routes == doc.end() || !routes->is_array() || routes->empty())
    return bad("\"routes\" must be a non-empty list of {\"export\": {...}} or {\"import\": {...}}");

  std::map<std::pair<std::string, std::string>, std::size_t> states;  // (root, state) -> route
  for (std::size_t i = 0; i < routes->size(); ++i) {
    const json& entry = (*routes)[i];
    if (!entry.is_object() || entry.size() != 1 ||
        (!entry.contains("export") && !entry.contains("import")) || !entry.begin()->is_object())
      return bad(
          fmt::format("routes[{}]: expected {{\"export\": {{...}}}} or "
                      "{{\"import\": {{...}}}}",
                      i));
    RouteConfig rc;
    const std::string kind = entry.begin().key();
    rc.route = kind == "export" ? Route::Export : Route::Import;
    CommonOptions& common = rc.route == Route::Export ? rc.exported.common : rc.imported.common;
    common = defaults;
    const std::string where = fmt::format("routes[{}] ({})", i, kind);
    for (const auto& [key, value] : entry.begin()->items()) {
      Problem p;
      if (const auto c = common_keys().find(key); c != common_keys().end()) {
        p = c->second(common, value);
      } else if (const auto e = export_keys().find(key);
                 rc.route == Route::Export && e != export_keys().end()) {
        p = e->second(rc.exported, value);
      } else if (const auto m = import_keys().find(key);
                 rc.route == Route::Import && m != import_keys().end()) {
        p = m->second(rc.imported, value);
      } else {
        std::vector<std::string> all = names(common_keys());
        for (const auto& k :
             rc.route == Route::Export ? names(export_keys()) : names(import_keys()))
          all.push_back(k);
        return bad(fmt::format("{}: unknown key \"{}\" ({} routes take: {})", where, key, kind,
                               known(all)));
      }
      if (p)
        return bad(
            fmt::format("{}: \"{}\": expected {}, got {}", where, key, *p, shown(key, value)));
    }
    auto missing = [&](const char* key) {
      return bad(fmt::format("{}: \"{}\" is required (in the route or in defaults)", where, key));
    };
    if (common.connection.servers.empty()) return missing("server");
    if (common.subject.empty()) return missing("subject");
    // A route's own create-ring / create-channel overrides the other one
    // from defaults; both in the route (or both in defaults) is a mistake.
    const json& own = *entry.begin();
    const bool own_ring = own.contains("create-ring");
    const bool own_channel = own.contains("create-channel");
    if (own_channel && !own_ring) common.create_ring = 0;
    if (own_ring && !own_channel) common.create_channel = 0;
    if (common.create_ring != 0 && common.create_channel != 0)
      return bad(
          fmt::format("{}: \"create-ring\" and \"create-channel\" exclude each other", where));
    std::string state;
    if (rc.route == Route::Export) {
      if (rc.exported.source.empty()) return missing("source");
      if (rc.exported.egress.empty()) return missing("egress");
      state = state_name(rc.exported);
    } else {
      if (rc.imported.dest.empty()) return missing("dest");
      if (rc.imported.durable.empty()) return missing("durable");
      state = state_name(rc.imported);
    }
    if (const auto [it, fresh] = states.emplace(std::pair{common.root, state}, i); !fresh)
      return bad(
          fmt::format("{} and routes[{}] share the state segment {}{}: each route needs its "
                      "own (set \"state\")",
                      where, it->second, state, common.root.empty() ? "" : " in " + common.root));
    config.routes.push_back(std::move(rc));
  }
  return config;
}

Outcome<BridgeConfig> load_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) return failure(kExitUsage, fmt::format("config {}: cannot be read", path));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return failure(kExitUsage, fmt::format("config {}: read error", path));
  return parse_config(text.str(), path);
}

}  // namespace shm::bridge
