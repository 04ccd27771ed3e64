// shmctl set NAME key=value: retunes a live parameter through the kind's
// descriptor. Kinds without settable keys, unknown keys and bad values are
// usage errors (exit 2) carrying the kind's own message (which lists the
// valid keys).
#include "output.hpp"
#include "segment_access.hpp"

#include <fmt/format.h>

namespace shm::shmctl {
namespace {

struct Assignment {
  std::string key;
  std::string value;
};

Result<Assignment> parse_assignment(const std::string& text) {
  const std::size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    return fail(
        Errc::InvalidArgument,
        fmt::format("expected key=value, got '{}' (example: shmctl set NAME bucket.api.rate=500)",
                    text));
  return Assignment{text.substr(0, eq), text.substr(eq + 1)};
}

}  // namespace

Exit run_set(const Context& ctx, const std::string& name, const std::string& assignment) {
  auto parsed = parse_assignment(assignment);
  if (!parsed) return report_error(ctx, "set", parsed.error());
  auto opened = open_segment(ctx, name, Access::Modify);
  if (!opened) return report_error(ctx, "set", opened.error());
  auto kind = require_kind(*opened);
  if (!kind) return report_error(ctx, "set", kind.error());
  if ((*kind)->set == nullptr)
    return report_error(ctx, "set",
                        Error{Errc::InvalidArgument,
                              fmt::format("kind {} has no settable keys (none can be retuned "
                                          "live); '{}' cannot be set",
                                          (*kind)->name, parsed->key)});
  if (auto ok = (*kind)->set(opened->segment, parsed->key, parsed->value); !ok)
    return report_error(ctx, "set", ok.error());

  if (ctx.json) {
    Json doc = Json::object();
    doc["name"] = name;
    doc["kind"] = std::string((*kind)->name);
    doc["key"] = parsed->key;
    doc["value"] = parsed->value;
    doc["ok"] = true;
    print_json(ctx, doc);
  } else {
    ctx.out << fmt::format("{}: {} = {}\n", printable(name), printable(parsed->key),
                           printable(parsed->value));
  }
  return Exit::Ok;
}

}  // namespace shm::shmctl
