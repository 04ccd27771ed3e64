// shmctl: the inspection / admin CLI. main.cpp parses the command line; each
// command lives in its own cmd_<name>.cpp and receives a Context plus its
// options. Commands see segment kinds only through the kind-descriptor table
// (shm::find_kind / shm::all_kinds), so a new kind needs no change here.
//
// Exit codes (stable, scripts rely on them):
//   0 ok
//   1 not found (no such segment)
//   2 usage error (bad arguments, invalid segment name, a request the kind does
//     not support such as `set` on a kind without settable keys, an unknown key)
//   3 invalid or corrupt segment (failed validation, layout fingerprint differs
//     from this build, kind unknown to this build for verify/dump/set, or for
//     reclaim of a segment with dead attachers, or a `verify` violation)
//   4 any other system error (permissions, I/O)
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace shm::shmctl {

enum class Exit : int { Ok = 0, NotFound = 1, Usage = 2, Invalid = 3, System = 4 };

// What every command needs: where segments live and how to print.
struct Context {
  std::string root;  // resolved: --root, else $LIBSHM_ROOT, else /dev/shm/libshm
  bool json = false;
  std::ostream& out;
  std::ostream& err;
};

struct DumpOptions {
  std::string name;
  std::size_t limit = 16;       // records
  std::size_t max_bytes = 256;  // shown per record; 0 = the whole record
};

struct VerifyOptions {
  std::optional<std::string> name;  // exactly one of name / all
  bool all = false;
};

struct WatchOptions {
  std::optional<std::string> name;  // empty: every segment in the root
  std::uint32_t interval_ms = 1000;
  std::uint64_t count = 0;  // refreshes; 0 = until interrupted
  bool wide = false;        // false: every row fits kWatchColumns
};
inline constexpr std::size_t kWatchColumns = 120;

struct RmOptions {
  std::string name;
  bool force = false;  // also remove a damaged segment file of this user (it has the magic)
};

struct GcOptions {
  bool dry_run = false;
  std::chrono::seconds temp_file_age{60};  // leftover temp files older than this are removed
  std::string spill_dir;  // the spill base; empty: $LIBSHM_SPILL_DIR, else /var/lib/libshm/spill
};

struct ReclaimOptions {
  std::optional<std::string> name;  // exactly one of name / all
  bool all = false;
  bool dry_run = false;
};

[[nodiscard]] Exit run_ls(const Context& ctx);
[[nodiscard]] Exit run_inspect(const Context& ctx, const std::string& name);
[[nodiscard]] Exit run_rm(const Context& ctx, const RmOptions& options);
[[nodiscard]] Exit run_verify(const Context& ctx, const VerifyOptions& options);
[[nodiscard]] Exit run_dump(const Context& ctx, const DumpOptions& options);
[[nodiscard]] Exit run_set(const Context& ctx, const std::string& name,
                           const std::string& assignment);
struct EventsOptions {
  std::string name;
  std::vector<std::string> types;  // empty: every type
};
[[nodiscard]] Exit run_events(const Context& ctx, const EventsOptions& options);
[[nodiscard]] Exit run_watch(const Context& ctx, const WatchOptions& options);
[[nodiscard]] Exit run_gc(const Context& ctx, const GcOptions& options);
[[nodiscard]] Exit run_reclaim(const Context& ctx, const ReclaimOptions& options);

}  // namespace shm::shmctl
