// shmctl: parses the command line and runs one command (cmd_*.cpp).
#include "output.hpp"
#include "shmctl.hpp"

#include "shm/platform/truncation_guard.hpp"
#include "shm/segment/segment.hpp"

#include <CLI/CLI.hpp>

#include <exception>
#include <functional>
#include <iostream>
#include <utility>
#include <vector>

namespace {

using shm::shmctl::Context;
using shm::shmctl::Exit;

constexpr const char* kFooter =
    R"(Exit codes: 0 ok, 1 not found, 2 usage error, 3 invalid/corrupt segment or
verify violation, 4 other system error.

Examples:
  shmctl ls
  shmctl ls --json --root /dev/shm/libshm
  shmctl inspect orders
  shmctl verify --all
  shmctl dump orders --limit 5
  shmctl watch --interval 500
  shmctl gc --dry-run
  shmctl reclaim --all --dry-run)";

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shmctl: inspect and administer libshm shared-memory segments"};
  app.set_help_all_flag("--help-all", "Print help for every command");
  app.require_subcommand(1);
  // Global options may also follow the command: `shmctl ls --json`.
  app.fallthrough();

  std::string root;
  bool json = false;
  app.add_option("--root", root,
                 "Directory of the segments (default: $LIBSHM_ROOT or /dev/shm/libshm)");
  app.add_flag("--json", json, "Machine-readable JSON output");

  // Each command's parsed arguments are bound by reference into its runner.
  std::vector<std::pair<CLI::App*, std::function<Exit(const Context&)>>> runners;
  std::string name;
  auto* ls = app.add_subcommand("ls",
                                "List every segment: kind, size, incarnation, creator, "
                                "attachers alive/dead, state");
  ls->footer(
      "Files that fail validation are listed with their error.\n\nExamples:\n"
      "  shmctl ls\n  shmctl ls --json | jq '.segments[].name'");
  runners.emplace_back(ls, [](const Context& c) { return run_ls(c); });

  auto* inspect = app.add_subcommand(
      "inspect", "Show a segment's header, attachers (with pid and command line) and kind state");
  inspect->add_option("name", name, "Segment name")->required();
  inspect->footer("Examples:\n  shmctl inspect orders\n  shmctl inspect orders --json");
  runners.emplace_back(inspect, [&](const Context& c) { return run_inspect(c, name); });

  shm::shmctl::RmOptions rm_options;
  auto* rm = app.add_subcommand("rm",
                                "Remove a segment's name (attached processes keep the old "
                                "incarnation)");
  rm->add_option("name", rm_options.name, "Segment name")->required();
  rm->add_flag("--force", rm_options.force,
               "Also remove a segment that fails validation, if it is a regular file of yours "
               "that starts with the segment magic");
  rm->footer(
      "Only a valid segment is removed. Anything else (a text file, a FIFO, a socket, a\n"
      "link, a directory, another user's file) is refused with the reason (exit 3, or 4\n"
      "for another user's file).\n\nExamples:\n  shmctl rm orders\n  shmctl rm damaged --force");
  runners.emplace_back(rm, [&](const Context& c) { return run_rm(c, rm_options); });

  shm::shmctl::VerifyOptions verify_options;
  std::string verify_name;
  auto* verify = app.add_subcommand(
      "verify",
      "Check a kind's invariants, its stored checksums and terminal faults (exit 3 on any)");
  auto* verify_name_opt = verify->add_option("name", verify_name, "Segment name");
  verify->add_flag("--all", verify_options.all, "Verify every segment in the root")
      ->excludes(verify_name_opt);
  verify->footer("Examples:\n  shmctl verify orders\n  shmctl verify --all --json");
  runners.emplace_back(verify, [&](const Context& c) {
    if (verify_name_opt->count() > 0) verify_options.name = verify_name;
    return run_verify(c, verify_options);
  });

  shm::shmctl::DumpOptions dump_options;
  auto* dump =
      app.add_subcommand("dump", "Show the records a segment holds without consuming them");
  dump->add_option("name", dump_options.name, "Segment name")->required();
  dump->add_option("--limit", dump_options.limit, "Records to show")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 30));
  dump->add_option("--max-bytes", dump_options.max_bytes, "Bytes shown per record (0: all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  dump->footer("Examples:\n  shmctl dump orders\n  shmctl dump orders --limit 3 --max-bytes 64");
  runners.emplace_back(dump, [&](const Context& c) { return run_dump(c, dump_options); });

  std::string assignment;
  auto* set = app.add_subcommand("set", "Retune a live parameter the kind exposes");
  set->add_option("name", name, "Segment name")->required();
  set->add_option("assignment", assignment, "key=value")->required();
  set->footer(
      "Unknown keys are errors listing the valid ones; kinds without settable keys say so.\n"
      "\nExamples:\n  shmctl set budget bucket.api.rate=500\n"
      "  shmctl set budget bucket.api.burst=1000 --json");
  runners.emplace_back(set, [&](const Context& c) { return run_set(c, name, assignment); });

  shm::shmctl::EventsOptions events_options;
  auto* events = app.add_subcommand("events",
                                    "Show a segment's observation ring (attach, detach, "
                                    "takeover, fault, reclaim) and the kind's own events");
  events->add_option("name", events_options.name, "Segment name")->required();
  events->add_option("--type", events_options.types,
                     "Only events of this type (repeatable: --type spilled --type dropped)");
  events->footer(
      "A relay's own events (spilled, spill_fallback, dropped, retuned, ...) and a topic's\n"
      "(publisher_gone, subscriber_gone, repaired) are merged in\n"
      "by time, their SOURCE the kind's name.\n\nExamples:\n  shmctl events orders\n"
      "  shmctl events prices --type spill_fallback --type no_space\n"
      "  shmctl events orders --json");
  runners.emplace_back(events, [&](const Context& c) { return run_events(c, events_options); });

  shm::shmctl::WatchOptions watch_options;
  std::string watch_name;
  auto* watch = app.add_subcommand("watch",
                                   "Refreshing table: gauges (depth), rates per second, "
                                   "attachers");
  auto* watch_name_opt = watch->add_option("name", watch_name, "Only this segment");
  watch->add_option("--interval", watch_options.interval_ms, "Milliseconds between refreshes")
      ->capture_default_str()
      ->check(CLI::Range(10u, 3'600'000u));
  watch->add_option("--count", watch_options.count, "Stop after N refreshes (0: until Ctrl-C)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  watch->add_flag("--wide", watch_options.wide,
                  "Every gauge and rate in full (default: rows fit 120 columns)");
  watch->footer(
      "Rows fit 120 columns: a cell too long ends in '...' (--wide shows all;\n"
      "--json has everything).\n"
      "With --json, one JSON document per refresh (JSON Lines).\n\nExamples:\n"
      "  shmctl watch\n  shmctl watch orders --interval 200 --count 10 --json\n"
      "  shmctl watch orders --wide");
  runners.emplace_back(watch, [&](const Context& c) {
    if (watch_name_opt->count() > 0) watch_options.name = watch_name;
    return run_watch(c, watch_options);
  });

  shm::shmctl::GcOptions gc_options;
  auto* gc = app.add_subcommand("gc",
                                "Remove segments whose creator and attachers are all dead, "
                                "stale temp files, and spill directories of removed relays");
  gc->add_flag("--dry-run", gc_options.dry_run, "Only print what would be removed");
  gc->add_option("--spill-dir", gc_options.spill_dir,
                 "Spill base to collect (default: $LIBSHM_SPILL_DIR, else /var/lib/libshm/spill)");
  gc->footer(
      "A segment with a live attacher or a live creator is never removed; invalid\n"
      "segments are skipped (use rm). Temp files older than 60 s are removed if they are\n"
      "yours and empty or start with the segment magic. A spill directory <base>/<relay>\n"
      "is removed when relay <relay> is gone from the root and everything in it is yours,\n"
      "is a relay's own file (pages with the spill page magic, relay.id, an empty\n"
      "refused/, retired pages in removed/) and is older than 60 s; anything else keeps\n"
      "it, with the reason.\n\n"
      "Examples:\n  shmctl gc --dry-run\n  shmctl gc --json\n"
      "  shmctl gc --spill-dir /var/lib/libshm/spill --dry-run");
  runners.emplace_back(gc, [&](const Context& c) { return run_gc(c, gc_options); });

  shm::shmctl::ReclaimOptions reclaim_options;
  std::string reclaim_name;
  auto* reclaim = app.add_subcommand("reclaim",
                                     "Release what dead attachers held (the kind's reclaim) and "
                                     "free their slots, as shm-sidecar does");
  auto* reclaim_name_opt = reclaim->add_option("name", reclaim_name, "Segment name");
  reclaim->add_flag("--all", reclaim_options.all, "Reclaim in every segment of the root")
      ->excludes(reclaim_name_opt);
  reclaim->add_flag("--dry-run", reclaim_options.dry_run,
                    "Only print which slots would be reclaimed and why");
  reclaim->footer(
      "A slot is reclaimed only when it says attached while its kernel lock is free (its\n"
      "holder is dead, however it died). The lock is then held until the slot is free,\n"
      "so a live holder, stopped or stuck, is never touched. Each kind releases what\n"
      "the holder had (a ledger: exactly its tickets; a channel: FAULTED if its producer\n"
      "died mid-stream) and a Reclaimed event is recorded (shmctl events).\n\n"
      "Examples:\n  shmctl reclaim budget --dry-run\n  shmctl reclaim budget\n"
      "  shmctl reclaim --all --json");
  runners.emplace_back(reclaim, [&](const Context& c) {
    if (reclaim_name_opt->count() > 0) reclaim_options.name = reclaim_name;
    return run_reclaim(c, reclaim_options);
  });

  app.footer(kFooter);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help, or the error and a --help hint
    return code == 0 ? 0 : static_cast<int>(Exit::Usage);
  }

  const Context ctx{root.empty() ? shm::default_root() : root, json, std::cout, std::cerr};
  // The root is checked before any command trusts a file in it (a relative
  // path, a symbolic link, another user's or a world-writable directory).
  if (auto ok = shm::check_root(ctx.root); !ok) {
    std::cerr << "shmctl: " << ok.error().what() << "\n";
    return static_cast<int>(Exit::Invalid);
  }
  // A segment file truncated while a command reads its mapping would kill us
  // with SIGBUS: the reads see zeros instead, and the command is failed here.
  // Without the handler (install failed) there is no hit to see: SIGBUS kills.
  (void)shm::TruncationGuard::install();
  try {
    for (const auto& [command, run] : runners) {
      if (!command->parsed()) continue;
      const shm::TruncationGuard::Scope guard;
      Exit result = run(ctx);
      std::cout.flush();
      if (guard.hit()) {
        std::cerr << "shmctl: " << command->get_name()
                  << ": a segment file shrank while it was being read; what was shown for it "
                     "was read as zeros and is not to be trusted\n";
        result = Exit::Invalid;
      }
      return static_cast<int>(result);
    }
    return static_cast<int>(Exit::Usage);  // unreachable: require_subcommand(1)
  } catch (const std::exception& e) {
    std::cerr << "shmctl: internal error: " << e.what() << '\n';
    return static_cast<int>(Exit::System);
  }
}
