// shmctl verify NAME | --all: runs the kind's checks (KindDescriptor::verify,
// the same the sidecar sees): invariants, stored checksums (every live channel
// payload's CRC32C) and terminal states (a FAULTED channel or ledger, with its
// cause), one line each. Read-only and lock-free. A segment that
// fails validation, whose layout differs from this build, or whose kind this
// build does not know cannot be vouched for and counts as a violation.
// Exit 3 on any violation; a single missing NAME is exit 1.
#include "output.hpp"
#include "segment_access.hpp"

#include <fmt/format.h>

namespace shm::shmctl {
namespace {

struct Verdict {
  std::string name;
  std::string kind = "-";
  std::vector<std::string> violations;
  std::optional<Error> error;  // could not open / interpret the segment
  [[nodiscard]] bool ok() const noexcept { return violations.empty() && !error; }
  [[nodiscard]] Exit exit() const noexcept {
    if (error) return exit_for(error->code);
    return violations.empty() ? Exit::Ok : Exit::Invalid;
  }
};

Verdict verify_one(const Context& ctx, const std::string& name) {
  Verdict v{name};
  auto opened = open_segment(ctx, name, Access::Inspect);
  if (!opened) {
    v.error = opened.error();
    return v;
  }
  v.kind = opened->kind_label();
  auto kind = require_kind(*opened);
  if (!kind) {
    v.error = kind.error();
    return v;
  }
  v.violations = (*kind)->verify(opened->segment);
  return v;
}

Json verdict_json(const Verdict& v) {
  Json j = Json::object();
  j["name"] = v.name;
  j["kind"] = v.kind;
  j["ok"] = v.ok();
  j["violations"] = v.violations;
  if (v.error) j["error"] = error_json(*v.error);
  return j;
}

std::string verdict_text(const Verdict& v) {
  if (v.ok()) return fmt::format("{}: ok ({})\n", printable(v.name), v.kind);
  if (v.error)
    return fmt::format("{}: INVALID: {}\n", printable(v.name), printable(v.error->what()));
  std::string out =
      fmt::format("{}: {} violation(s) ({})\n", printable(v.name), v.violations.size(), v.kind);
  for (const std::string& line : v.violations) out += "  - " + printable(line) + '\n';
  return out;
}

}  // namespace

Exit run_verify(const Context& ctx, const VerifyOptions& options) {
  std::vector<std::string> names;
  if (options.all) {
    auto listing = list_root(ctx.root);
    if (!listing) return report_error(ctx, "verify", listing.error());
    names = std::move(listing->segments);
  } else if (options.name) {
    names.push_back(*options.name);
  } else {
    return report_error(ctx, "verify",
                        Error{Errc::InvalidArgument, "give a segment NAME or --all"});
  }

  std::vector<Verdict> verdicts;
  for (const std::string& name : names) {
    Verdict v = verify_one(ctx, name);
    // Under --all, a segment removed between the listing and the open is simply gone.
    if (options.all && v.error && v.error->code == Errc::NotFound) continue;
    verdicts.push_back(std::move(v));
  }
  if (!options.all && verdicts.front().error &&
      exit_for(verdicts.front().error->code) != Exit::Invalid)
    return report_error(ctx, "verify", *verdicts.front().error);  // not found, bad name, I/O

  std::size_t bad = 0;
  Exit worst = Exit::Ok;
  for (const Verdict& v : verdicts) {
    if (v.ok()) continue;
    ++bad;
    Exit e = v.exit();
    // Under --all a file with an impossible name is junk in the root, not a usage error.
    if (options.all && e == Exit::Usage) e = Exit::Invalid;
    if (e == Exit::Invalid || worst == Exit::Ok) worst = e;
  }
  if (ctx.json) {
    Json doc = Json::object();
    doc["ok"] = bad == 0;
    doc["checked"] = verdicts.size();
    doc["failed"] = bad;
    Json list = Json::array();
    for (const Verdict& v : verdicts) list.push_back(verdict_json(v));
    doc["segments"] = std::move(list);
    print_json(ctx, doc);
  } else {
    for (const Verdict& v : verdicts) ctx.out << verdict_text(v);
    if (options.all)
      ctx.out << fmt::format("verified {} segment(s): {} ok, {} with problems\n", verdicts.size(),
                             verdicts.size() - bad, bad);
  }
  if (bad != 0) warn(ctx, "verify", fmt::format("{} segment(s) failed verification", bad));
  return worst;
}

}  // namespace shm::shmctl
