// shmctl dump NAME [--limit N] [--max-bytes N]: the records a kind holds,
// without consuming them (read-only mapping), as hex + printable ASCII.
#include "hexdump.hpp"
#include "output.hpp"
#include "segment_access.hpp"

#include <fmt/format.h>

namespace shm::shmctl {

Exit run_dump(const Context& ctx, const DumpOptions& options) {
  auto opened = open_segment(ctx, options.name, Access::Inspect);
  if (!opened) return report_error(ctx, "dump", opened.error());
  auto kind = require_kind(*opened);
  if (!kind) return report_error(ctx, "dump", kind.error());
  if ((*kind)->dump == nullptr)
    return report_error(ctx, "dump",
                        Error{Errc::InvalidArgument,
                              fmt::format("kind {} does not support dump (it keeps no records "
                                          "that can be listed); try `shmctl inspect {}`",
                                          (*kind)->name, options.name)});

  // A damaged segment is reported, not shown as "no records".
  if (const auto violations = (*kind)->verify(opened->segment); !violations.empty())
    return report_error(
        ctx, "dump",
        Error{Errc::Corrupt,
              fmt::format("{}: the segment violates its invariants ({}{}); `shmctl verify {}` "
                          "lists them",
                          opened->segment.path(), violations.front(),
                          violations.size() > 1 ? fmt::format(" and {} more", violations.size() - 1)
                                                : std::string(),
                          options.name)});

  const auto records = (*kind)->dump(opened->segment, options.limit);
  const std::size_t cap = options.max_bytes == 0 ? SIZE_MAX : options.max_bytes;
  if (ctx.json) {
    Json list = Json::array();
    for (std::size_t i = 0; i < records.size(); ++i) {
      const std::span<const std::byte> shown(records[i].data(), std::min(records[i].size(), cap));
      list.push_back({{"index", i},
                      {"size", records[i].size()},
                      {"hex", hex_string(shown)},
                      {"printable", printable_ascii(shown)},
                      {"truncated", shown.size() < records[i].size()}});
    }
    Json doc = Json::object();
    doc["name"] = options.name;
    doc["kind"] = std::string((*kind)->name);
    doc["limit"] = options.limit;
    doc["records"] = std::move(list);
    print_json(ctx, doc);
    return Exit::Ok;
  }
  ctx.out << fmt::format("{} ({}): {} record(s) shown, limit {}\n", printable(options.name),
                         (*kind)->name, records.size(), options.limit);
  for (std::size_t i = 0; i < records.size(); ++i) {
    const std::span<const std::byte> shown(records[i].data(), std::min(records[i].size(), cap));
    ctx.out << fmt::format("record {}: {} bytes{}\n", i, records[i].size(),
                           shown.size() < records[i].size()
                               ? fmt::format(" (first {} shown)", shown.size())
                               : std::string());
    ctx.out << hex_lines(shown, "  ");
  }
  return Exit::Ok;
}

}  // namespace shm::shmctl
