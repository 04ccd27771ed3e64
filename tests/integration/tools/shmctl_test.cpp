// shmctl as a user runs it: the real binary as a subprocess, against segments
// created under a per-test root, in text and --json, with its exit codes and
// every kind of bad input (missing, invalid name, bad usage, corrupt files).
#include "common/spill_config.hpp"
#include "common/subprocess.hpp"
#include "common/temp_dir.hpp"
#include "common/temp_root.hpp"
#include "common/text.hpp"

#include "shm/channel/consumer.hpp"
#include "shm/channel/producer.hpp"
#include "shm/egress/egress.hpp"
#include "shm/ledger/ledger.hpp"
#include "shm/platform/crc32c.hpp"
#include "shm/relay/relay.hpp"
#include "shm/segment/kind.hpp"
#include "shm/spill/page.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"
#include "shm/testing/channel.hpp"
#include "shm/topic/topic.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace shm {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
namespace fs = std::filesystem;

constexpr auto kShmctlDeadline = 30s;

struct CliResult {
  int code = -1;
  std::string out;
  std::string err;

  [[nodiscard]] json parsed() const { return json::parse(out); }
  [[nodiscard]] bool says(const std::string& text) const {
    return out.find(text) != std::string::npos || err.find(text) != std::string::npos;
  }
};

std::ostream& operator<<(std::ostream& os, const CliResult& r) {
  return os << "exit " << r.code << "\n--- stdout ---\n" << r.out << "--- stderr ---\n" << r.err;
}

using test::bytes;

// Writes raw bytes into a segment file, as a buggy or hostile process could.
void patch(const std::string& path, std::size_t offset, const void* data, std::size_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::pwrite(fd, data, size, static_cast<off_t>(offset)), static_cast<ssize_t>(size));
  ::close(fd);
}

template <class T>
void patch_value(const std::string& path, std::size_t offset, T value) {
  patch(path, offset, &value, sizeof value);
}

// Recomputes the header CRC, so a patched field passes the generic checks and
// the kind-level check is what reacts.
void reseal_header(const std::string& path) {
  std::vector<char> head(offsetof(SegmentHeader, header_crc));
  std::ifstream in(path, std::ios::binary);
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  ASSERT_TRUE(in);
  patch_value<std::uint32_t>(path, offsetof(SegmentHeader, header_crc),
                             crc32c(head.data(), head.size()));
}

std::vector<json> json_lines(const std::string& text) {
  std::vector<json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

class ShmctlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (fs::exists(test::bin_path("shmctl"))) return;
#if SHM_EXPECT_TOOLS
    FAIL() << test::bin_path("shmctl")
           << " is missing although LIBSHM_BUILD_TOOLS is ON (did its output path move?)";
#else
    GTEST_SKIP() << test::bin_path("shmctl") << " is not built: LIBSHM_BUILD_TOOLS is OFF";
#endif
  }

  // Runs shmctl with `args` (plus --root of this test unless `with_root` is
  // false); stdout and stderr are kept apart.
  CliResult run(std::vector<std::string> args, bool with_root = true) {
    char err_path[] = "/tmp/shmctl-test-stderr-XXXXXX";
    const int fd = ::mkstemp(err_path);
    EXPECT_GE(fd, 0);
    ::close(fd);
    std::vector<std::string> argv = {
        "/bin/sh", "-c", std::string("exec \"$0\" \"$@\" 2>") + err_path, test::bin_path("shmctl")};
    argv.insert(argv.end(), args.begin(), args.end());
    if (with_root) {
      argv.push_back("--root");
      argv.push_back(root_.path());
    }
    test::Subprocess p(argv);
    CliResult r;
    r.code = p.wait(kShmctlDeadline);
    r.out = p.output();
    std::ifstream in(err_path);
    r.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    ::unlink(err_path);
    // Sanitizer builds: a report exits 1 (ASan/UBSan) or 66 (TSan), which
    // could pass for an ordinary exit code; the report itself fails the test.
    for (const char* report : {"Sanitizer", "runtime error:"})
      EXPECT_EQ(r.err.find(report), std::string::npos) << r;
    return r;
  }

  RingProducer make_ring(const std::string& name, std::uint64_t capacity = 4096) {
    auto p = RingProducer::create(name, {.capacity_bytes = capacity}, {.root = root_.path()});
    EXPECT_TRUE(p) << p.error().what();
    return std::move(*p);
  }

  RingConsumer open_consumer(const std::string& name) {
    auto c = RingConsumer::open(name, {}, {.root = root_.path()});
    EXPECT_TRUE(c) << c.error().what();
    return std::move(*c);
  }

  // A ring created and abandoned by a helper process that is gone: creator
  // dead, producer and consumer slots still Attached with their holder dead.
  void make_abandoned_ring(const std::string& name, int records = 0) {
    test::Subprocess helper(
        {test::helper_path("shmctl_ring"), root_.path(), name, "abandon", std::to_string(records)});
    ASSERT_EQ(helper.wait(kShmctlDeadline), 0) << helper.output();
  }

  void make_file(const std::string& name, const std::string& content) {
    std::ofstream(root_.file(name), std::ios::binary) << content;
  }

  std::string ring_path(const std::string& name) {
    return root_.file(name);
  }

  // A segment of `kind` with a valid generic header and a zeroed data area,
  // made through the descriptor table only (any kind this build knows).
  void make_segment_of_kind(const std::string& name, const KindDescriptor& kind,
                            std::byte fill = std::byte{0}) {
    // A parameter block of garbage too (never empty: create copies it).
    std::array<std::byte, 64> params{};
    params.fill(fill);
    KindSpec spec;
    spec.kind = kind.kind;
    spec.kind_name = kind.name;
    spec.fingerprint = kind.fingerprint;
    spec.params = params;
    spec.data_size = 4 * kPageSize;
    auto seg = Segment::create(name, spec, {.root = root_.path()},
                               [fill](std::span<std::byte> data) -> Result<void> {
                                 std::ranges::fill(data, fill);
                                 return {};
                               });
    ASSERT_TRUE(seg) << seg.error().what();
  }

  template <class Pred>
  static const KindDescriptor* first_kind(Pred pred) {
    for (const KindDescriptor* kind : all_kinds())
      if (pred(*kind)) return kind;
    return nullptr;
  }

  // A ledger of this process: category "a", bucket "api" (100/s, burst 50),
  // and pool "p" (owned by this process) with two tickets of ours, 100 and 50
  // bytes.
  Ledger make_ledger(const std::string& name) {
    LedgerConfig cfg;
    cfg.params = {100'000, 0, 64, 4, 4, 2};
    cfg.categories = {{"a", 100'000, Partition::Ordinary}};
    cfg.buckets = {{"api", 100, 50}};
    auto l = Ledger::create(name, cfg, {.root = root_.path()});
    EXPECT_TRUE(l) << l.error().what();
    auto pool = l->open_pool({"p", {{"all", 100'000, {}}}, 0});
    EXPECT_TRUE(pool) << pool.error().what();
    for (const std::int64_t bytes : {100, 50}) {
      auto t = l->reserve(*pool, CategoryId{0}, bytes);
      EXPECT_TRUE(t && t->has_value());
    }
    return std::move(*l);
  }

  struct Holder {
    test::Subprocess process;
    Owner owner;
  };
  // A helper process holding `count` tickets of `bytes` in pool "p" of ledger
  // `name` (every other one committed), until it is killed.
  Holder ledger_holder(const std::string& name, int count, std::int64_t bytes) {
    test::Subprocess p({test::helper_path("ledger_worker"), "hold", name, "p",
                        std::to_string(count), std::to_string(bytes)});
    EXPECT_TRUE(p.wait_for_line("ready", kShmctlDeadline)) << p.output();
    unsigned n = 0, slot = 0, generation = 0;
    long long total = 0;
    EXPECT_EQ(std::sscanf(p.output().c_str(), "held %u %lld %u %u", &n, &total, &slot, &generation),
              4)
        << p.output();
    return Holder{std::move(p), Owner{slot, generation}};
  }

  static void kill9(Holder& h) {
    h.process.kill(SIGKILL);
    ASSERT_EQ(h.process.wait(kShmctlDeadline), 128 + SIGKILL);
  }

  // Tickets and bytes of one owner, from the ticket table.
  static std::pair<std::size_t, std::int64_t> owned(const Ledger& l, Owner owner) {
    auto tickets = l.tickets();
    EXPECT_TRUE(tickets) << tickets.error().what();
    std::pair<std::size_t, std::int64_t> sum{0, 0};
    for (const TicketInfo& t : tickets.value_or(std::vector<TicketInfo>{})) {
      if (t.owner != owner) continue;
      ++sum.first;
      sum.second += t.bytes;
    }
    return sum;
  }

  static std::size_t reclaimed_events(const Segment& segment, std::uint32_t slot) {
    const auto events = segment.events();
    return static_cast<std::size_t>(std::count_if(
        events.begin(), events.end(),
        [&](const EventInfo& e) { return e.type == EventType::Reclaimed && e.slot == slot; }));
  }

  std::string file_bytes(const std::string& name) {
    std::ifstream in(root_.file(name), std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  test::TempRoot root_;
};

// ---------------------------------------------------------------- ls

TEST_F(ShmctlTest, LsListsEachSegmentWithKindSizeCreatorAndAttachers) {
  RingProducer producer = make_ring("orders");
  make_abandoned_ring("stale");

  const CliResult text = run({"ls"});
  ASSERT_EQ(text.code, 0) << text;
  EXPECT_TRUE(text.says("NAME")) << text;
  EXPECT_TRUE(text.says("orders")) << text;
  EXPECT_TRUE(text.says("spsc_ring")) << text;
  EXPECT_TRUE(text.says(std::to_string(::getpid()) + " (alive)")) << text;
  EXPECT_TRUE(text.says("ready")) << text;

  const CliResult js = run({"ls", "--json"});
  ASSERT_EQ(js.code, 0) << js;
  const json doc = js.parsed();
  EXPECT_EQ(doc["root"], root_.path());
  ASSERT_EQ(doc["segments"].size(), 2u) << js;
  const json& orders = doc["segments"][0];
  EXPECT_EQ(orders["name"], "orders");
  EXPECT_EQ(orders["kind"], "spsc_ring");
  EXPECT_EQ(orders["valid"], true);
  EXPECT_EQ(orders["state"], "ready");
  EXPECT_EQ(orders["size"], kHeaderSize + 8192);
  EXPECT_EQ(orders["incarnation"].get<std::string>().size(), 16u);
  EXPECT_EQ(orders["creator"]["pid"], ::getpid());
  EXPECT_EQ(orders["creator"]["alive"], true);
  EXPECT_EQ(orders["attachers_alive"], 1);
  EXPECT_EQ(orders["attachers_dead"], 0);
  const json& stale = doc["segments"][1];
  EXPECT_EQ(stale["name"], "stale");
  EXPECT_EQ(stale["creator"]["alive"], false);
  EXPECT_EQ(stale["attachers_alive"], 0);
  EXPECT_EQ(stale["attachers_dead"], 2);
}

TEST_F(ShmctlTest, LsOfEmptyOrMissingRootSaysThereAreNoSegments) {
  const CliResult empty = run({"ls"});
  ASSERT_EQ(empty.code, 0) << empty;
  EXPECT_TRUE(empty.says("no segments")) << empty;

  const std::string missing = root_.path() + "/does-not-exist";
  const CliResult absent = run({"ls", "--root", missing}, false);
  ASSERT_EQ(absent.code, 0) << absent;
  EXPECT_TRUE(absent.says("does not exist yet")) << absent;
  const CliResult js = run({"ls", "--json", "--root", missing}, false);
  ASSERT_EQ(js.code, 0) << js;
  EXPECT_TRUE(js.parsed()["segments"].empty());
}

TEST_F(ShmctlTest, LsListsInvalidFilesWithTheirErrorAndSkipsReservedNames) {
  RingProducer producer = make_ring("good");
  make_file("junk", "not a segment");
  make_file("with space", "a name no segment can have");
  make_file(".libshm-tmp-x-0123456789abcdef", "half-built");
  make_file(".libshm-sidecar.lock", "");
  fs::create_symlink(ring_path("good"), ring_path("link"));

  const CliResult text = run({"ls"});
  ASSERT_EQ(text.code, 0) << text;
  EXPECT_TRUE(text.says("invalid: Truncated")) << text;
  EXPECT_TRUE(text.says("symbolic link")) << text;
  EXPECT_FALSE(text.says(".libshm-")) << text;

  const json doc = run({"ls", "--json"}).parsed();
  ASSERT_EQ(doc["segments"].size(), 4u) << doc.dump(2);
  EXPECT_EQ(doc["segments"][0]["name"], "good");
  EXPECT_EQ(doc["segments"][0]["valid"], true);
  EXPECT_EQ(doc["segments"][1]["name"], "junk");
  EXPECT_EQ(doc["segments"][1]["valid"], false);
  EXPECT_EQ(doc["segments"][1]["error"]["code"], "Truncated");
  EXPECT_EQ(doc["segments"][2]["name"], "link");
  EXPECT_EQ(doc["segments"][2]["error"]["code"], "NotRegularFile");
  EXPECT_EQ(doc["segments"][3]["name"], "with space");
  EXPECT_EQ(doc["segments"][3]["state"], "invalid");
  EXPECT_EQ(doc["segments"][3]["error"]["code"], "InvalidName");
}

// ---------------------------------------------------------------- inspect

TEST_F(ShmctlTest, InspectShowsHeaderKindStateAndWhoHoldsEachRole) {
  RingProducer producer = make_ring("orders");
  RingConsumer consumer = open_consumer("orders");
  ASSERT_TRUE(*producer.try_push(bytes("hello")));

  const CliResult text = run({"inspect", "orders"});
  ASSERT_EQ(text.code, 0) << text;
  EXPECT_TRUE(text.says("kind: spsc_ring")) << text;
  EXPECT_TRUE(text.says("capacity: 4096")) << text;
  EXPECT_TRUE(text.says("role: producer")) << text;
  EXPECT_TRUE(text.says("liveness: alive")) << text;
  EXPECT_TRUE(text.says("created_at: ")) << text;

  const CliResult js = run({"inspect", "orders", "--json"});
  ASSERT_EQ(js.code, 0) << js;
  const json doc = js.parsed();
  EXPECT_EQ(doc["name"], "orders");
  EXPECT_EQ(doc["kind"], "spsc_ring");
  EXPECT_EQ(doc["valid"], true);
  EXPECT_EQ(doc["creator"]["pid"], ::getpid());
  EXPECT_EQ(doc["attachers_alive"], 2);
  ASSERT_EQ(doc["attachers"].size(), 2u);
  // The command line shmctl shows is this test binary's own.
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").filename().string();
  for (const json& a : doc["attachers"]) {
    EXPECT_EQ(a["pid"], ::getpid());
    EXPECT_EQ(a["liveness"], "alive");
    EXPECT_NE(a["cmdline"].get<std::string>().find(self), std::string::npos) << self << ": " << a;
  }
  EXPECT_EQ(doc["attachers"][0]["role"], "producer");
  EXPECT_EQ(doc["attachers"][1]["role"], "consumer");
  EXPECT_EQ(doc["kind_state"]["capacity"], 4096);
  EXPECT_EQ(doc["kind_state"]["records_pushed"], 1);
  EXPECT_EQ(doc["kind_state"]["depth_records"], 1);
}

// Strings that come out of a segment are shown escaped: a spill directory
// whose name holds a Latin-1 byte and a terminal escape sequence reaches
// neither the JSON (it would not be UTF-8) nor the terminal raw.
TEST_F(ShmctlTest, InspectShowsANonUtf8SpillDirectoryEscaped) {
  const test::TempSpillDir spill;
  const RelayConfig cfg = test::small_spill_fifo(spill.sub("caf\xe9-\x1b[31m"));
  auto w = RelayWriter::create("latin", cfg);
  ASSERT_TRUE(w) << w.error().what();
  const std::string shown = spill.sub("caf\\xe9-\\x1b[31m");

  const CliResult text = run({"inspect", "latin"});
  ASSERT_EQ(text.code, 0) << text;
  EXPECT_TRUE(text.says("dir: " + shown)) << text;
  EXPECT_EQ(text.out.find('\x1b'), std::string::npos) << text;

  const CliResult js = run({"inspect", "latin", "--json"});
  ASSERT_EQ(js.code, 0) << js;
  EXPECT_EQ(js.parsed()["kind_state"]["spill"]["dir"], shown) << js;
}

TEST_F(ShmctlTest, InspectShowsDeadHoldersAsDeadWithoutCommandLine) {
  make_abandoned_ring("stale");
  const CliResult js = run({"inspect", "stale", "--json"});
  ASSERT_EQ(js.code, 0) << js;
  const json doc = js.parsed();
  EXPECT_EQ(doc["creator"]["alive"], false);
  EXPECT_EQ(doc["attachers_dead"], 2);
  for (const json& a : doc["attachers"]) {
    EXPECT_EQ(a["liveness"], "dead");
    EXPECT_FALSE(a.contains("cmdline"));
  }
}

// ---------------------------------------------------------------- not found, names, usage

TEST_F(ShmctlTest, MissingSegmentExitsOneWithMessageAndJsonError) {
  for (const char* command : {"inspect", "rm", "verify", "dump", "events", "watch", "reclaim"}) {
    std::vector<std::string> args = {command, "nope"};
    if (std::string(command) == "watch") args.insert(args.end(), {"--count", "1"});
    const CliResult r = run(args);
    EXPECT_EQ(r.code, 1) << command << "\n" << r;
    EXPECT_TRUE(r.says("segment 'nope' not found in " + root_.path())) << r;
    EXPECT_TRUE(r.says("shmctl ls --root")) << r;
  }
  const CliResult set = run({"set", "nope", "k=v"});
  EXPECT_EQ(set.code, 1) << set;

  const CliResult js = run({"inspect", "nope", "--json"});
  ASSERT_EQ(js.code, 1) << js;
  const json doc = js.parsed();
  EXPECT_EQ(doc["error"]["code"], "NotFound");
  EXPECT_EQ(doc["error"]["exit_code"], 1);
  EXPECT_NE(doc["error"]["message"].get<std::string>().find("'nope' not found"), std::string::npos);
}

// Invalid names can never exist, so they are usage errors (exit 2), not "not found".
TEST_F(ShmctlTest, InvalidSegmentNameIsUsageError) {
  for (const std::string& name :
       std::vector<std::string>{"..", "a/b", "with space", std::string(201, 'x'), ".libshm-x"}) {
    const CliResult r = run({"inspect", name});
    EXPECT_EQ(r.code, 2) << name << "\n" << r;
    EXPECT_TRUE(r.says("InvalidName")) << r;
  }
  const CliResult rm = run({"rm", "../etc"});
  EXPECT_EQ(rm.code, 2) << rm;
  EXPECT_TRUE(rm.says("contains '/'")) << rm;
}

// A name starting with '-' would be read as an option by every tool; even
// after "--" it is refused as an invalid name, and such a file in the root is
// listed as invalid.
TEST_F(ShmctlTest, NamesStartingWithADashAreInvalidNames) {
  make_file("-x", "planted");
  for (const char* command : {"inspect", "rm", "verify", "dump", "events"}) {
    const CliResult r = run({command, "--root", root_.path(), "--", "-x"}, false);
    EXPECT_EQ(r.code, 2) << command << "\n" << r;
    EXPECT_TRUE(r.says("InvalidName")) << r;
    EXPECT_TRUE(r.says("starts with '-'")) << r;
  }
  EXPECT_TRUE(fs::exists(root_.file("-x")));
  const json doc = run({"ls", "--json"}).parsed();
  ASSERT_EQ(doc["segments"].size(), 1u) << doc.dump(2);
  EXPECT_EQ(doc["segments"][0]["name"], "-x");
  EXPECT_EQ(doc["segments"][0]["error"]["code"], "InvalidName");
}

TEST_F(ShmctlTest, BadUsageExitsTwo) {
  const std::vector<std::vector<std::string>> cases = {
      {},                               // no command
      {"frobnicate"},                   // unknown command
      {"inspect"},                      // missing NAME
      {"inspect", "a", "b"},            // extra argument
      {"dump", "r", "--limit", "abc"},  // not a number
      {"dump", "r", "--limit", "0"},    // out of range
      {"watch", "--interval", "1"},     // below the minimum
      {"verify"},                       // neither NAME nor --all
      {"verify", "r", "--all"},         // both
      {"set", "r"},                     // missing key=value
      {"reclaim"},                      // neither NAME nor --all
      {"reclaim", "r", "--all"},        // both
      {"ls", "--no-such-flag"},
  };
  for (const auto& args : cases) {
    const CliResult r = run(args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(r.code, 2) << "shmctl " << joined << "\n" << r;
    EXPECT_FALSE(r.err.empty()) << "shmctl " << joined << " printed no error";
  }
  RingProducer producer = make_ring("r");
  for (const std::string bad : {"novalue", "=3"}) {
    const CliResult r = run({"set", "r", bad});
    EXPECT_EQ(r.code, 2) << r;
    EXPECT_TRUE(r.says("expected key=value")) << r;
  }
}

TEST_F(ShmctlTest, HelpDescribesCommandsWithExamples) {
  const CliResult help = run({"--help"}, false);
  ASSERT_EQ(help.code, 0) << help;
  for (const char* word : {"ls", "inspect", "rm", "verify", "dump", "set", "events", "watch", "gc",
                           "reclaim", "--json", "--root", "Examples", "Exit codes"})
    EXPECT_TRUE(help.says(word)) << word << "\n" << help;
  const CliResult dump = run({"dump", "--help"}, false);
  ASSERT_EQ(dump.code, 0) << dump;
  EXPECT_TRUE(dump.says("--limit")) << dump;
  EXPECT_TRUE(dump.says("shmctl dump orders --limit 3")) << dump;
  const CliResult reclaim = run({"reclaim", "--help"}, false);
  ASSERT_EQ(reclaim.code, 0) << reclaim;
  for (const char* word : {"--all", "--dry-run", "kernel lock", "shmctl reclaim budget --dry-run"})
    EXPECT_TRUE(reclaim.says(word)) << word << "\n" << reclaim;
  // The set example names a key a kind really has (the ledger's buckets).
  const CliResult set = run({"set", "--help"}, false);
  ASSERT_EQ(set.code, 0) << set;
  EXPECT_TRUE(set.says("shmctl set budget bucket.api.rate=500")) << set;
}

// ---------------------------------------------------------------- corrupt files

TEST_F(ShmctlTest, CorruptFilesAreReportedAsInvalidWithExitThree) {
  struct Case {
    std::string name;
    std::string code;     // Errc in --json
    std::string message;  // useful part of the message
  };
  const std::vector<Case> cases = {
      {"short", "Truncated", fmt::format("less than the {}-byte header", kHeaderSize)},
      {"cut", "Truncated",
       fmt::format("header states {} bytes, file has only {}", kHeaderSize + 8192,
                   kHeaderSize + 4096)},
      {"magic", "BadMagic", "not a libshm segment"},
      {"crc", "HeaderCorrupt", "header CRC"},
      {"link", "NotRegularFile", "symbolic link"},
      {"dir", "NotRegularFile", "is a directory"},
  };
  make_file("short", std::string(100, 'x'));
  { RingProducer p = make_ring("cut"); }
  fs::resize_file(ring_path("cut"), kHeaderSize + 4096);
  { RingProducer p = make_ring("magic"); }
  patch_value<std::uint64_t>(ring_path("magic"), 0, 0x1122334455667788ull);
  { RingProducer p = make_ring("crc"); }
  patch_value<std::uint64_t>(ring_path("crc"), offsetof(SegmentHeader, params), 1u << 20);
  { RingProducer p = make_ring("target"); }
  fs::create_symlink(ring_path("target"), ring_path("link"));
  fs::create_directory(ring_path("dir"));

  for (const Case& c : cases) {
    const CliResult inspect = run({"inspect", c.name});
    EXPECT_EQ(inspect.code, 3) << c.name << "\n" << inspect;
    EXPECT_TRUE(inspect.says(c.message)) << c.name << "\n" << inspect;
    const CliResult js = run({"inspect", c.name, "--json"});
    EXPECT_EQ(js.code, 3) << js;
    EXPECT_EQ(js.parsed()["error"]["code"], c.code) << js;
    for (const char* command : {"verify", "dump", "events"}) {
      const CliResult r = run({command, c.name});
      EXPECT_EQ(r.code, 3) << command << " " << c.name << "\n" << r;
      EXPECT_TRUE(r.says(c.message)) << command << " " << c.name << "\n" << r;
    }
  }
  const CliResult all = run({"verify", "--all", "--json"});
  EXPECT_EQ(all.code, 3) << all;
  const json doc = all.parsed();
  EXPECT_EQ(doc["ok"], false);
  EXPECT_EQ(doc["failed"], cases.size());
  EXPECT_EQ(doc["checked"], cases.size() + 1);  // + "target", which is fine
}

TEST_F(ShmctlTest, LayoutFingerprintDifferentFromTheDescriptorIsInvalid) {
  { RingProducer p = make_ring("other-build"); }
  patch_value<std::uint64_t>(ring_path("other-build"), offsetof(SegmentHeader, fingerprint),
                             0xdeadbeefdeadbeefull);
  reseal_header(ring_path("other-build"));

  const json ls = run({"ls", "--json"}).parsed();
  EXPECT_EQ(ls["segments"][0]["valid"], false);
  EXPECT_EQ(ls["segments"][0]["state"], "invalid");
  EXPECT_EQ(ls["segments"][0]["error"]["code"], "FingerprintMismatch");

  const CliResult inspect = run({"inspect", "other-build", "--json"});
  EXPECT_EQ(inspect.code, 3) << inspect;
  const json doc = inspect.parsed();
  EXPECT_EQ(doc["valid"], false);
  EXPECT_FALSE(doc.contains("kind_state"));
  EXPECT_TRUE(inspect.says("segment has 0xdeadbeefdeadbeef")) << inspect;
  for (const char* command : {"verify", "dump"}) {
    const CliResult r = run({command, "other-build"});
    EXPECT_EQ(r.code, 3) << command << "\n" << r;
    EXPECT_TRUE(r.says("layout fingerprint")) << r;
  }
}

// A ring written by a build of ring layout version 1 (published through a
// `tail` word): the library refuses it naming both versions; inspect still
// describes it (read-only, from the version-1 control block).
TEST_F(ShmctlTest, RingOfLayoutVersionOneIsRefusedByOpenAndDescribedByInspect) {
  { RingProducer p = make_ring("old"); }
  patch_value<std::uint64_t>(ring_path("old"), offsetof(SegmentHeader, fingerprint),
                             ring::v1::kFingerprint);
  reseal_header(ring_path("old"));
  patch_value<std::uint64_t>(ring_path("old"), kHeaderSize + 0, 48);  // v1 producer.tail
  patch_value<std::uint64_t>(ring_path("old"), kHeaderSize + 8, 3);   // v1 producer.records

  for (int role = 0; role < 2; ++role) {
    const auto error = role == 0 ? RingProducer::open("old", {}, {.root = root_.path()}).error()
                                 : RingConsumer::open("old", {}, {.root = root_.path()}).error();
    EXPECT_EQ(error.code, Errc::VersionMismatch) << error.what();
    EXPECT_NE(error.message.find("spsc_ring layout version: segment has 1, this library speaks 2"),
              std::string::npos)
        << error.message;
  }

  const CliResult inspect = run({"inspect", "old", "--json"});
  EXPECT_EQ(inspect.code, 3) << inspect;
  const json doc = inspect.parsed();
  EXPECT_EQ(doc["valid"], false);
  EXPECT_EQ(doc["error"]["code"], "VersionMismatch");
  EXPECT_TRUE(inspect.says("layout version: segment has 1, this build speaks 2")) << inspect;
  ASSERT_TRUE(doc.contains("kind_state")) << inspect;
  EXPECT_EQ(doc["kind_state"]["ring_layout_version"], 1);
  EXPECT_EQ(doc["kind_state"]["tail"], 48);
  EXPECT_EQ(doc["kind_state"]["records_pushed"], 3);

  // The current layout says so too.
  { RingProducer p = make_ring("new"); }
  const json now = run({"inspect", "new", "--json"}).parsed();
  EXPECT_EQ(now["kind_state"]["ring_layout_version"], 2);
}

TEST_F(ShmctlTest, UnknownKindIdIsShownAsUnknownNeverACrash) {
  { RingProducer p = make_ring("future"); }
  patch_value<std::uint16_t>(ring_path("future"), offsetof(SegmentHeader, kind), 999);
  reseal_header(ring_path("future"));

  const CliResult ls = run({"ls"});
  ASSERT_EQ(ls.code, 0) << ls;
  EXPECT_TRUE(ls.says("unknown(999)")) << ls;
  const json listed = run({"ls", "--json"}).parsed();
  EXPECT_EQ(listed["segments"][0]["kind"], "unknown");
  EXPECT_EQ(listed["segments"][0]["kind_id"], 999);

  const CliResult inspect = run({"inspect", "future", "--json"});
  ASSERT_EQ(inspect.code, 0) << inspect;
  EXPECT_EQ(inspect.parsed()["kind"], "unknown");
  EXPECT_TRUE(inspect.says("kind id 999 is unknown to this build")) << inspect;

  for (const char* command : {"verify", "dump"}) {
    const CliResult r = run({command, "future"});
    EXPECT_EQ(r.code, 3) << command << "\n" << r;
    EXPECT_TRUE(r.says("kind id 999 is unknown to this build")) << r;
  }
  EXPECT_EQ(run({"events", "future"}).code, 0);
}

// Every kind's views read defensively: a segment with a valid header but an
// empty parameter block and a data area of zeros or garbage never crashes a
// command (a crash would be exit >= 128 under a signal or a sanitizer report).
TEST_F(ShmctlTest, EveryCommandSurvivesGarbageDataOfEveryKnownKind) {
  for (const KindDescriptor* kind : all_kinds()) {
    make_segment_of_kind("zero-" + std::string(kind->name), *kind, std::byte{0});
    make_segment_of_kind("junk-" + std::string(kind->name), *kind, std::byte{0xa5});
  }
  const std::vector<std::vector<std::string>> commands = {
      {"ls"},
      {"verify", "--all"},
      {"watch", "--count", "2", "--interval", "10"},
      {"gc", "--dry-run"}};
  for (const auto& args : commands) {
    for (const bool json_output : {false, true}) {
      auto a = args;
      if (json_output) a.push_back("--json");
      const CliResult r = run(a);
      EXPECT_TRUE(r.code == 0 || r.code == 3) << a[0] << "\n" << r;
      if (json_output && a[0] != "watch") {
        EXPECT_NO_THROW((void)r.parsed()) << r;
      }
    }
  }
  for (const KindDescriptor* kind : all_kinds()) {
    for (const std::string prefix : {"zero-", "junk-"}) {
      const std::string name = prefix + std::string(kind->name);
      for (const char* command : {"inspect", "verify", "dump", "events"}) {
        const CliResult r = run({command, name, "--json"});
        EXPECT_GE(r.code, 0) << command << " " << name << "\n" << r;
        EXPECT_LE(r.code, 3) << command << " " << name << "\n" << r;
        EXPECT_NO_THROW((void)r.parsed()) << command << " " << name << "\n" << r;
      }
    }
  }
}

// ---------------------------------------------------------------- verify

TEST_F(ShmctlTest, VerifyPassesHealthyRingAndFailsOneWithGarbageHeadAndTail) {
  RingProducer producer = make_ring("ring");
  for (int i = 0; i < 10; ++i)
    ASSERT_TRUE(*producer.try_push(bytes("record-" + std::to_string(i))));
  RingProducer other = make_ring("fine");

  const CliResult ok = run({"verify", "ring"});
  ASSERT_EQ(ok.code, 0) << ok;
  EXPECT_TRUE(ok.says("ring: ok (spsc_ring)")) << ok;
  const json ok_doc = run({"verify", "ring", "--json"}).parsed();
  EXPECT_EQ(ok_doc["ok"], true);
  EXPECT_TRUE(ok_doc["segments"][0]["violations"].empty());

  const std::size_t control = kHeaderSize;
  patch_value<std::uint64_t>(ring_path("ring"),
                             control + offsetof(ring::RingControl, producer.tail),
                             0x7777777777777777ull);
  patch_value<std::uint64_t>(ring_path("ring"),
                             control + offsetof(ring::RingControl, consumer.head),
                             0x0000000000001235ull);
  const CliResult bad = run({"verify", "ring"});
  EXPECT_EQ(bad.code, 3) << bad;
  EXPECT_TRUE(bad.says("violation")) << bad;
  EXPECT_TRUE(bad.says("head 4661 / tail hint 8608480567731124087 impossible")) << bad;
  const CliResult js = run({"verify", "ring", "--json"});
  EXPECT_EQ(js.code, 3) << js;
  const json doc = js.parsed();
  EXPECT_EQ(doc["ok"], false);
  EXPECT_FALSE(doc["segments"][0]["violations"].empty());

  const CliResult all = run({"verify", "--all"});
  EXPECT_EQ(all.code, 3) << all;
  EXPECT_TRUE(all.says("fine: ok")) << all;
  EXPECT_TRUE(all.says("verified 2 segment(s): 1 ok, 1 with problems")) << all;

  // dump refuses to show a damaged ring as if it were empty; inspect still works.
  const CliResult dump = run({"dump", "ring"});
  EXPECT_EQ(dump.code, 3) << dump;
  EXPECT_TRUE(dump.says("violates its invariants")) << dump;
  EXPECT_EQ(run({"inspect", "ring"}).code, 0);
}

// A channel under this test's root: 4 pages of 64 bytes, 2 payloads a page.
ChannelProducer make_channel(const std::string& root, const std::string& name) {
  auto p = ChannelProducer::create(
      name, {.pages = 4, .page_bytes = 64, .descriptors_per_page = 2, .ring_cells = 16},
      {.root = root});
  EXPECT_TRUE(p) << p.error().what();
  return std::move(*p);
}

void send_all(ChannelProducer& p, std::initializer_list<std::string> payloads) {
  for (const std::string& m : payloads) {
    auto r = p.try_send(bytes(m));
    ASSERT_TRUE(r && r->status == SendStatus::Ok) << m;
  }
}

// Issue 18, defect 3: a channel whose payload bytes no longer match their
// CRC32C verified ok. A healthy channel with live payloads (some consumed,
// one in hand) still verifies ok, alone and under --all.
TEST_F(ShmctlTest, VerifyNamesAChannelPayloadWhoseBytesWereFlippedAndPassesHealthyChannels) {
  ChannelProducer chan = make_channel(root_.path(), "chan");
  ChannelProducer calm = make_channel(root_.path(), "calm");
  send_all(chan, {"alpha", "bravo", "charlie"});  // sequences 0, 1 (epoch 0), 2 (epoch 1)
  send_all(calm, {"one", "two", "three", "four", "five"});
  auto consumer = ChannelConsumer::open("calm", {}, {.root = root_.path()});
  ASSERT_TRUE(consumer) << consumer.error().what();
  for (int i = 0; i < 3; ++i) {  // epoch 0 released; "three" consumed; "four" in hand
    auto r = consumer->try_receive();
    ASSERT_TRUE(r && r->status == ReceiveStatus::Received);
    r->lease.release();
  }
  auto held = consumer->try_receive();
  ASSERT_TRUE(held && held->status == ReceiveStatus::Received);

  for (const char* name : {"chan", "calm"}) {
    const CliResult ok = run({"verify", name});
    EXPECT_EQ(ok.code, 0) << ok;
    EXPECT_TRUE(ok.says(std::string(name) + ": ok (channel)")) << ok;
  }
  EXPECT_EQ(run({"verify", "--all"}).code, 0);

  detail::ChannelTesting::view(chan).arena(0)[8 + 2] ^= std::byte{0x20};  // "bravo" -> "brAvo"
  const CliResult bad = run({"verify", "chan"});
  EXPECT_EQ(bad.code, 3) << bad;
  EXPECT_TRUE(bad.says("chan: 1 violation(s) (channel)")) << bad;
  EXPECT_TRUE(
      bad.says("payload sequence 1 (epoch 0 page slot 0 cell 1, 5 bytes at offset 8): "
               "CRC32C"))
      << bad;
  const CliResult js = run({"verify", "chan", "--json"});
  EXPECT_EQ(js.code, 3) << js;
  const json doc = js.parsed();
  EXPECT_EQ(doc["ok"], false);
  ASSERT_EQ(doc["segments"][0]["violations"].size(), 1u) << js;
  EXPECT_NE(doc["segments"][0]["violations"][0].get<std::string>().find("CRC32C"),
            std::string::npos)
      << js;

  const CliResult all = run({"verify", "--all"});
  EXPECT_EQ(all.code, 3) << all;
  EXPECT_TRUE(all.says("calm: ok (channel)")) << all;
  EXPECT_TRUE(all.says("payload sequence 1 (epoch 0")) << all;
  EXPECT_TRUE(all.says("verified 2 segment(s): 1 ok, 1 with problems")) << all;
}

TEST_F(ShmctlTest, VerifyOfAChannelTheConsumerFaultedForAChecksumMismatchNamesTheCause) {
  ChannelProducer chan = make_channel(root_.path(), "chan");
  send_all(chan, {"alpha", "bravo"});
  detail::ChannelTesting::view(chan).arena(0)[0] ^= std::byte{0x01};
  auto consumer = ChannelConsumer::open("chan", {}, {.root = root_.path()});
  ASSERT_TRUE(consumer) << consumer.error().what();
  ASSERT_FALSE(consumer->try_receive());
  ASSERT_EQ(consumer->fault(), ChannelFault::ChecksumMismatch);
  const CliResult r = run({"verify", "chan"});
  EXPECT_EQ(r.code, 3) << r;
  EXPECT_TRUE(
      r.says("channel is FAULTED: checksum mismatch (fault code 4) at epoch 0, sequence 0, "
             "detected by the consumer (pid " +
             std::to_string(::getpid()) + ")"))
      << r;
  EXPECT_TRUE(r.says("payload sequence 0 (epoch 0 page slot 0 cell 0")) << r;
  const CliResult all = run({"verify", "--all"});
  EXPECT_EQ(all.code, 3) << all;
  EXPECT_TRUE(all.says("checksum mismatch")) << all;
}

// Every terminal FAULTED state a kind can record is a verify failure naming
// its cause: each channel fault code, and the ledger's two (a repair that
// found damage, a mutex made unrecoverable). The other kinds (spsc, mpmc,
// fanout) have no FAULTED state: their damage is found by their invariants.
struct TerminalFault {
  std::string label;
  std::function<void(ShmctlTest&, const std::string& root)> make;  // creates segment "seg"
  std::string says;
  friend void PrintTo(const TerminalFault& f, std::ostream* os) { *os << f.label; }
};

class ShmctlVerifyFaultTest : public ShmctlTest,
                              public ::testing::WithParamInterface<TerminalFault> {};

TEST_P(ShmctlVerifyFaultTest, VerifyReportsTheTerminalFaultWithItsCause) {
  GetParam().make(*this, root_.path());
  if (HasFatalFailure()) return;
  const CliResult r = run({"verify", "seg"});
  EXPECT_EQ(r.code, 3) << r;
  EXPECT_TRUE(r.says(GetParam().says)) << r;
  const CliResult all = run({"verify", "--all", "--json"});
  EXPECT_EQ(all.code, 3) << all;
  EXPECT_EQ(all.parsed()["failed"], 1) << all;
}

std::vector<TerminalFault> terminal_faults() {
  std::vector<TerminalFault> out;
  for (std::uint32_t code = 1; code <= static_cast<std::uint32_t>(ChannelFault::ProducerDied);
       ++code) {
    const auto fault = static_cast<ChannelFault>(code);
    std::string name(to_string(fault));
    std::ranges::replace(name, ' ', '_');
    out.push_back(
        {"channel_" + name,
         [code](ShmctlTest&, const std::string& root) {
           ChannelProducer p = make_channel(root, "seg");
           send_all(p, {"x"});
           auto& t = detail::ChannelTesting::view(p).control->terminal;
           t.fault.store(code);
           t.fault_epoch.store(0);
           t.fault_sequence.store(1);
           t.fault_role.store(channel::kConsumerRole.id);
           t.fault_pid.store(4242);
           t.word.store(channel::kTerminalFaulted);
         },
         fmt::format("channel is FAULTED: {} (fault code {}) at epoch 0, sequence 1, detected by "
                     "the consumer (pid 4242)",
                     to_string(fault), code)});
  }
  auto ledger = [](const std::string& root) {
    LedgerConfig cfg;
    cfg.params = {100'000, 0, 64, 4, 4, 2};
    cfg.categories = {{"a", 100'000, Partition::Ordinary}};
    auto l = Ledger::create("seg", cfg, {.root = root});
    EXPECT_TRUE(l) << l.error().what();
    return std::move(*l);
  };
  out.push_back({"ledger_repair_found_damage",
                 [ledger](ShmctlTest&, const std::string& root) {
                   Ledger l = ledger(root);
                   l.view().control->lock.faulted.store(1);
                 },
                 "the ledger is faulted: a repair found damage"});
  out.push_back({"ledger_mutex_unrecoverable",
                 [ledger](ShmctlTest&, const std::string& root) {
                   Ledger l = ledger(root);
                   auto& mutex = l.view().control->lock.mutex;
                   const pid_t child = ::fork();
                   ASSERT_GE(child, 0);
                   if (child == 0) {  // dies holding the lock
                     (void)mutex.lock();
                     ::_exit(0);
                   }
                   int status = 0;
                   ASSERT_EQ(::waitpid(child, &status, 0), child);
                   ASSERT_EQ(mutex.lock(), detail::LockResult::OwnerDied);
                   mutex.unlock();  // without mark_consistent(): unrecoverable
                   ASSERT_EQ(mutex.lock(), detail::LockResult::Unrecoverable);
                 },
                 "the ledger is FAULTED: its mutex is not recoverable"});
  return out;
}

INSTANTIATE_TEST_SUITE_P(EveryKind, ShmctlVerifyFaultTest, ::testing::ValuesIn(terminal_faults()),
                         [](const ::testing::TestParamInfo<TerminalFault>& param) {
                           return param.param.label;
                         });

// ---------------------------------------------------------------- dump

TEST_F(ShmctlTest, DumpShowsRecordsAsHexAndTextWithoutConsumingThem) {
  RingProducer producer = make_ring("ring");
  RingConsumer consumer = open_consumer("ring");
  ASSERT_TRUE(*producer.try_push(bytes("hello world")));
  ASSERT_TRUE(*producer.try_push(bytes(std::string("bin\x01\x02", 5))));
  ASSERT_TRUE(*producer.try_push(bytes(std::string(40, 'z'))));

  const CliResult text = run({"dump", "ring"});
  ASSERT_EQ(text.code, 0) << text;
  EXPECT_TRUE(text.says("3 record(s) shown")) << text;
  EXPECT_TRUE(text.says("record 0: 11 bytes")) << text;
  EXPECT_TRUE(text.says("68 65 6c 6c 6f 20 77 6f  72 6c 64")) << text;
  EXPECT_TRUE(text.says("|hello world|")) << text;
  EXPECT_TRUE(text.says("|bin..|")) << text;

  const CliResult js = run({"dump", "ring", "--json", "--limit", "2", "--max-bytes", "4"});
  ASSERT_EQ(js.code, 0) << js;
  const json doc = js.parsed();
  ASSERT_EQ(doc["records"].size(), 2u) << js;
  EXPECT_EQ(doc["records"][0]["size"], 11);
  EXPECT_EQ(doc["records"][0]["hex"], "68656c6c");
  EXPECT_EQ(doc["records"][0]["printable"], "hell");
  EXPECT_EQ(doc["records"][0]["truncated"], true);
  EXPECT_EQ(doc["records"][1]["hex"], "62696e01");

  // Nothing was consumed.
  std::vector<std::byte> buf(64);
  auto got = consumer.try_pop(buf);
  ASSERT_TRUE(got && *got);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(buf.data()), **got), "hello world");
}

TEST_F(ShmctlTest, DumpOfEmptyRingShowsNoRecords) {
  RingProducer producer = make_ring("ring");
  const CliResult js = run({"dump", "ring", "--json"});
  ASSERT_EQ(js.code, 0) << js;
  EXPECT_TRUE(js.parsed()["records"].empty());
}

// ---------------------------------------------------------------- set

TEST_F(ShmctlTest, SetOnKindWithoutSettableKeysSaysThereAreNone) {
  // Every kind is always compiled in (all_kinds() is a fixed table): some have no set().
  const KindDescriptor* kind = first_kind([](const KindDescriptor& k) { return k.set == nullptr; });
  ASSERT_NE(kind, nullptr) << "every kind has settable keys now: this test needs another subject";
  make_segment_of_kind("seg", *kind);
  const CliResult r = run({"set", "seg", "capacity=1"});
  EXPECT_EQ(r.code, 2) << r;
  EXPECT_TRUE(r.says("kind " + std::string(kind->name) + " has no settable keys")) << r;
  const CliResult js = run({"set", "seg", "capacity=1", "--json"});
  EXPECT_EQ(js.code, 2) << js;
  EXPECT_EQ(js.parsed()["error"]["code"], "InvalidArgument");
}

// The kind's set() rejects an unknown key before touching its data, with a
// message that names the key and lists the valid ones.
TEST_F(ShmctlTest, SetOfUnknownKeyIsUsageErrorListingTheValidKeys) {
  bool any = false;
  for (const KindDescriptor* kind : all_kinds()) {
    if (kind->set == nullptr) continue;
    any = true;
    const std::string name = "seg-" + std::string(kind->name);
    make_segment_of_kind(name, *kind);
    const CliResult r = run({"set", name, "no_such_key=1"});
    EXPECT_EQ(r.code, 2) << kind->name << "\n" << r;
    EXPECT_TRUE(r.says("InvalidArgument")) << r;
    EXPECT_TRUE(r.says("no_such_key")) << r;
    EXPECT_TRUE(r.says("valid")) << r;
  }
  ASSERT_TRUE(any) << "no kind has settable keys (the ledger had): this test checked nothing";
}

TEST_F(ShmctlTest, DumpOfKindWithoutDumpIsAClearUsageError) {
  const KindDescriptor* kind =
      first_kind([](const KindDescriptor& k) { return k.dump == nullptr; });
  ASSERT_NE(kind, nullptr) << "every kind supports dump now: this test needs another subject";
  make_segment_of_kind("seg", *kind);
  const CliResult r = run({"dump", "seg"});
  EXPECT_EQ(r.code, 2) << r;
  EXPECT_TRUE(r.says("kind " + std::string(kind->name) + " does not support dump")) << r;
}

TEST_F(ShmctlTest, SetRefusesCorruptSegments) {
  make_file("junk", std::string(5000, '\0'));
  const CliResult r = run({"set", "junk", "a=b"});
  EXPECT_EQ(r.code, 3) << r;
  EXPECT_TRUE(r.says("BadMagic")) << r;
}

TEST_F(ShmctlTest, SetRetunesALedgerBucketAndTheSegmentHoldsTheNewValue) {
  Ledger l = make_ledger("budget");
  const CliResult text = run({"set", "budget", "bucket.api.rate=500"});
  ASSERT_EQ(text.code, 0) << text;
  EXPECT_EQ(text.out, "budget: bucket.api.rate = 500\n") << text;
  auto s = l.snapshot();
  ASSERT_TRUE(s) << s.error().what();
  ASSERT_EQ(s->buckets.size(), 1u);
  EXPECT_EQ(s->buckets[0].label, "api");
  EXPECT_EQ(s->buckets[0].rate_per_sec, 500);
  EXPECT_EQ(s->buckets[0].burst, 50);

  const CliResult js = run({"set", "budget", "bucket.api.burst=20", "--json"});
  ASSERT_EQ(js.code, 0) << js;
  const json doc = js.parsed();
  EXPECT_EQ(doc["name"], "budget");
  EXPECT_EQ(doc["kind"], "ledger");
  EXPECT_EQ(doc["key"], "bucket.api.burst");
  EXPECT_EQ(doc["value"], "20");
  EXPECT_EQ(doc["ok"], true);
  s = l.snapshot();
  ASSERT_TRUE(s) << s.error().what();
  EXPECT_EQ(s->buckets[0].rate_per_sec, 500);
  EXPECT_EQ(s->buckets[0].burst, 20);
  EXPECT_LE(s->buckets[0].level.tokens, 20) << "a lowered burst caps the tokens held";

  // Other readers (a fresh mapping) see the new values too.
  const json state = run({"inspect", "budget", "--json"}).parsed()["kind_state"];
  EXPECT_EQ(state["buckets"]["api"]["rate_per_sec"], 500) << state.dump(2);
  EXPECT_EQ(state["buckets"]["api"]["burst"], 20) << state.dump(2);

  const CliResult missing = run({"set", "budget", "bucket.nope.rate=1"});
  EXPECT_EQ(missing.code, 1) << missing;
  EXPECT_TRUE(missing.says("no bucket 'nope'")) << missing;
  const CliResult negative = run({"set", "budget", "bucket.api.rate=-5"});
  EXPECT_EQ(negative.code, 2) << negative;
  EXPECT_TRUE(negative.says("is not an integer")) << negative;
  EXPECT_EQ(l.snapshot()->buckets[0].rate_per_sec, 500);
}

// ---------------------------------------------------------------- events

TEST_F(ShmctlTest, EventsListsTheObservationRingOldestFirst) {
  RingProducer producer = make_ring("ring");
  { RingConsumer consumer = open_consumer("ring"); }

  const CliResult text = run({"events", "ring"});
  ASSERT_EQ(text.code, 0) << text;
  EXPECT_TRUE(text.says("kind spsc_ring")) << text;
  EXPECT_TRUE(text.says("role consumer")) << text;

  const CliResult js = run({"events", "ring", "--json"});
  ASSERT_EQ(js.code, 0) << js;
  const json doc = js.parsed();
  std::vector<std::string> types;
  for (const json& e : doc["events"]) types.push_back(e["type"]);
  EXPECT_EQ(types, (std::vector<std::string>{"created", "attached", "attached", "detached"}));
  EXPECT_EQ(doc["events"][1]["role"], "producer");
  EXPECT_EQ(doc["events"][3]["role"], "consumer");
  EXPECT_EQ(doc["events"][3]["pid"], ::getpid());
  EXPECT_EQ(doc["total_events"], 4);
}

// A relay keeps its own event ring (spills, fallbacks, drops, retunes):
// events merges it with the observation ring by time, names its source, and
// --type keeps only the types asked for.
TEST_F(ShmctlTest, EventsShowARelaysOwnEventsAndFilterByType) {
  test::TempSpillDir spill;
  auto w = RelayWriter::create("spiller", test::small_spill_fifo(""));
  ASSERT_TRUE(w) << w.error().what();
  for (std::uint64_t i = 0; i < 12; ++i) ASSERT_TRUE(w->try_write(u64_value(i)));
  ASSERT_GT(w->snapshot().pages_sealed, 0u);

  const CliResult text = run({"events", "spiller"});
  ASSERT_EQ(text.code, 0) << text;
  EXPECT_TRUE(text.says("attached")) << text;
  EXPECT_TRUE(text.says("spilled")) << text;
  EXPECT_TRUE(text.says("the relay keeps its last")) << text;

  const CliResult only = run({"events", "spiller", "--type", "spilled"});
  ASSERT_EQ(only.code, 0) << only;
  EXPECT_TRUE(only.says("spilled")) << only;
  EXPECT_FALSE(only.says("attached")) << only;

  const CliResult js =
      run({"events", "spiller", "--type", "spilled", "--type", "created", "--json"});
  ASSERT_EQ(js.code, 0) << js;
  const json doc = js.parsed();
  ASSERT_GE(doc["events"].size(), 2u) << doc;
  EXPECT_EQ(doc["events"][0]["type"], "created");  // oldest first, across both rings
  EXPECT_EQ(doc["events"][0]["source"], "segment");
  for (std::size_t i = 1; i < doc["events"].size(); ++i) {
    EXPECT_EQ(doc["events"][i]["type"], "spilled") << doc;
    EXPECT_EQ(doc["events"][i]["source"], "relay") << doc;
    EXPECT_TRUE(doc["events"][i].contains("count")) << doc;
  }
  EXPECT_GT(doc["kind_events"].get<std::uint64_t>(), 0u);
}

// ---------------------------------------------------------------- rm

TEST_F(ShmctlTest, RmRemovesTheNameAndNamesLiveAttachers) {
  RingProducer producer = make_ring("ring");
  const CliResult r = run({"rm", "ring"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_TRUE(r.says("removed 'ring' (spsc_ring")) << r;
  EXPECT_TRUE(r.says("1 live attacher(s) keep using the removed incarnation")) << r;
  EXPECT_TRUE(r.says("pid " + std::to_string(::getpid()) + " (producer)")) << r;
  EXPECT_FALSE(fs::exists(ring_path("ring")));
  EXPECT_TRUE(producer.segment().stale());
  EXPECT_EQ(run({"rm", "ring"}).code, 1);

  RingProducer again = make_ring("ring2");
  const CliResult js = run({"rm", "ring2", "--json"});
  ASSERT_EQ(js.code, 0) << js;
  const json doc = js.parsed();
  EXPECT_EQ(doc["removed"], true);
  EXPECT_EQ(doc["live_attachers"].size(), 1u);
  EXPECT_EQ(doc["live_attachers"][0]["role"], "producer");
}

// rm removes only a valid segment: a text file, a copy of /etc/passwd, a
// FIFO, a socket, a symbolic link, a directory are refused with the reason,
// even with --force (none of them carries the segment magic).
TEST_F(ShmctlTest, RmRefusesEveryFileThatIsNotAValidSegment) {
  make_file("junk", "x");
  fs::copy_file("/etc/passwd", root_.file("passwd"));
  ASSERT_EQ(::mkfifo(root_.file("fifo").c_str(), 0600), 0);
  const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(sock, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string sock_path = root_.file("sock");
  ASSERT_LT(sock_path.size(), sizeof addr.sun_path);
  std::copy(sock_path.begin(), sock_path.end(), addr.sun_path);
  ASSERT_EQ(::bind(sock, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
  ::close(sock);
  { RingProducer p = make_ring("target"); }
  fs::create_symlink(ring_path("target"), ring_path("link"));
  fs::create_directory(ring_path("dir"));

  // What is wrong, without --force (validation) and with it (the magic check).
  const std::map<std::string, std::pair<std::string, std::string>> reasons = {
      {"junk",
       {fmt::format("less than the {}-byte header", kHeaderSize),
        "does not start with the segment magic"}},
      {"passwd",
       {fmt::format("less than the {}-byte header", kHeaderSize),
        "does not start with the segment magic"}},
      {"fifo", {"is a FIFO", "is a FIFO"}},
      {"sock", {"is a socket", "is a socket"}},
      {"link", {"symbolic link", "symbolic link"}},
      {"dir", {"is a directory", "is a directory"}},
  };
  for (const auto& [name, reason] : reasons) {
    for (const bool force : {false, true}) {
      std::vector<std::string> args = {"rm", name};
      if (force) args.push_back("--force");
      const CliResult r = run(args);
      EXPECT_EQ(r.code, 3) << name << "\n" << r;
      EXPECT_TRUE(r.says("refusing to remove '" + name + "'")) << r;
      EXPECT_TRUE(r.says(force ? reason.second : reason.first)) << r;
      EXPECT_TRUE(fs::exists(fs::symlink_status(ring_path(name)))) << name;
    }
  }
  const CliResult js = run({"rm", "passwd", "--force", "--json"});
  EXPECT_EQ(js.code, 3) << js;
  EXPECT_EQ(js.parsed()["error"]["code"], "BadMagic") << js;
  EXPECT_EQ(file_bytes("passwd"), [] {
    std::ifstream in("/etc/passwd", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }());
  EXPECT_TRUE(fs::exists(ring_path("target")));
}

// A damaged segment of the caller (it still starts with the segment magic) is
// refused without --force, naming the option, and removed with it.
TEST_F(ShmctlTest, RmForceRemovesADamagedSegmentOfTheCaller) {
  { RingProducer p = make_ring("cut"); }
  fs::resize_file(ring_path("cut"), 8192);
  { RingProducer p = make_ring("short"); }
  fs::resize_file(ring_path("short"), 100);

  for (const char* name : {"cut", "short"}) {
    const CliResult refused = run({"rm", name});
    EXPECT_EQ(refused.code, 3) << refused;
    EXPECT_TRUE(refused.says("refusing to remove '" + std::string(name) + "'")) << refused;
    EXPECT_TRUE(refused.says("--force")) << refused;
    EXPECT_TRUE(fs::exists(ring_path(name)));

    const CliResult forced = run({"rm", name, "--force"});
    ASSERT_EQ(forced.code, 0) << forced;
    EXPECT_TRUE(forced.says("removed '" + std::string(name) + "' (it was not a valid segment"))
        << forced;
    EXPECT_FALSE(fs::exists(ring_path(name)));
  }
}

// Even with --force, rm never removes a file of another user, segment magic
// or not (a mistyped --root must not turn `shmctl rm` into `rm` as root).
TEST_F(ShmctlTest, RmForceRefusesADamagedSegmentOfAnotherUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown a file to another uid";
  { RingProducer p = make_ring("foreign"); }
  fs::resize_file(ring_path("foreign"), 8192);
  ASSERT_EQ(::chown(ring_path("foreign").c_str(), 12345, 12345), 0);
  const CliResult r = run({"rm", "foreign", "--force"});
  EXPECT_EQ(r.code, 4) << r;
  EXPECT_TRUE(r.says("WrongOwner")) << r;
  EXPECT_TRUE(r.says("owned by uid 12345")) << r;
  EXPECT_TRUE(fs::exists(ring_path("foreign")));
}

// The root is checked before any command trusts a file in it: a segment
// planted in a root that became world-writable is not shown, and a relative
// root is refused, each with exit 3 and the reason.
TEST_F(ShmctlTest, AnUnsafeOrRelativeRootIsRefusedByEveryCommand) {
  RingProducer p = make_ring("planted");
  ASSERT_EQ(::chmod(root_.path().c_str(), 0777), 0);
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"ls"}, {"inspect", "planted"}, {"gc", "--dry-run"}}) {
    const CliResult r = run(args);
    EXPECT_EQ(r.code, 3) << r;
    EXPECT_TRUE(r.says("UnsafeRoot")) << r;
    EXPECT_TRUE(r.says("is world-writable (mode 777) without the sticky bit")) << r;
    EXPECT_FALSE(r.says("planted")) << r;
  }
  ASSERT_EQ(::chmod(root_.path().c_str(), 0700), 0);
  const CliResult relative = run({"ls", "--root", "relative/root"}, false);
  EXPECT_EQ(relative.code, 3) << relative;
  EXPECT_TRUE(relative.says("root directory 'relative/root' is not an absolute path")) << relative;
}

// ---------------------------------------------------------------- gc

// gc removes a segment only when it is provably garbage: created ephemeral,
// its creator dead and no attacher alive. A persistent segment (the default)
// is kept whatever its liveness: docs/segment.md's "create in a setup step, open
// later" leaves exactly a dead creator and no attacher.
TEST_F(ShmctlTest, GcRemovesOnlySegmentsNobodyCanStillUse) {
  const test::TempSpillDir no_spill;  // gc also reads the spill base: an empty one
  auto ring_helper = [&](const std::string& name, const std::string& mode) {
    test::Subprocess helper({test::helper_path("shmctl_ring"), root_.path(), name, mode});
    ASSERT_EQ(helper.wait(kShmctlDeadline), 0) << helper.output();
  };
  ring_helper("abandoned", "abandon-ephemeral");  // creator and both holders dead
  ring_helper("orphan", "create-ephemeral");      // creator dead, never attached
  ring_helper("setup-step", "create");            // persistent: created to be opened later
  make_abandoned_ring("abandoned-persistent");    // persistent, every holder dead
  ring_helper("taken-over", "abandon-ephemeral");
  RingConsumer live_consumer = open_consumer("taken-over");  // a live attacher, creator dead
  auto ephemeral_ring = [&](const std::string& name) {
    auto p = RingProducer::create(name, {.capacity_bytes = 4096},
                                  {.root = root_.path(), .ephemeral = true});
    EXPECT_TRUE(p) << p.error().what();
    return std::move(*p);
  };
  RingProducer mine = ephemeral_ring("mine");        // creator alive
  { RingProducer p = ephemeral_ring("mine-idle"); }  // creator alive, nothing attached
  make_file("junk", "not a segment");
  make_file(".libshm-tmp-old-0000000000000001", "");  // interrupted before it was filled
  make_file(".libshm-tmp-new-0000000000000002", "create in progress");
  make_file(".libshm-sidecar.lock", "");
  fs::last_write_time(root_.file(".libshm-tmp-old-0000000000000001"),
                      fs::file_time_type::clock::now() - 120s);

  const CliResult dry = run({"gc", "--dry-run", "--json"});
  ASSERT_EQ(dry.code, 0) << dry;
  const json plan = dry.parsed();
  EXPECT_EQ(plan["dry_run"], true);
  EXPECT_EQ(plan["would_remove"], 3) << dry;
  std::map<std::string, std::pair<std::string, std::string>> actions;
  for (const json& a : plan["actions"]) actions[a["name"]] = {a["action"], a["reason"]};
  EXPECT_EQ(actions["abandoned"].first, "would_remove");
  EXPECT_NE(actions["abandoned"].second.find("all 2 attacher(s) are dead"), std::string::npos);
  EXPECT_EQ(actions["orphan"].first, "would_remove");
  EXPECT_NE(actions["orphan"].second.find("nothing is attached"), std::string::npos);
  EXPECT_EQ(actions["taken-over"].first, "kept");
  EXPECT_NE(actions["taken-over"].second.find("1 live attacher(s): pid " +
                                              std::to_string(::getpid()) + " (consumer)"),
            std::string::npos)
      << actions["taken-over"].second;
  EXPECT_EQ(actions["mine"].first, "kept");
  EXPECT_NE(actions["mine"].second.find("is alive"), std::string::npos);
  EXPECT_EQ(actions["mine-idle"].first, "kept");
  for (const char* persistent : {"setup-step", "abandoned-persistent"}) {
    EXPECT_EQ(actions[persistent].first, "kept") << persistent;
    EXPECT_NE(actions[persistent].second.find("persistent"), std::string::npos)
        << actions[persistent].second;
    EXPECT_NE(actions[persistent].second.find(std::string("shmctl rm ") + persistent),
              std::string::npos)
        << actions[persistent].second;
  }
  EXPECT_EQ(actions["junk"].first, "skipped");
  EXPECT_NE(actions["junk"].second.find("not a valid segment"), std::string::npos);
  EXPECT_EQ(actions[".libshm-tmp-old-0000000000000001"].first, "would_remove");
  EXPECT_EQ(actions[".libshm-tmp-new-0000000000000002"].first, "kept");
  EXPECT_EQ(actions.count(".libshm-sidecar.lock"), 0u);
  EXPECT_TRUE(fs::exists(ring_path("abandoned")));  // dry run: nothing removed

  const CliResult real = run({"gc"});
  ASSERT_EQ(real.code, 0) << real;
  EXPECT_TRUE(real.says("removed 3 file(s)")) << real;
  EXPECT_TRUE(real.says("creator pid")) << real;
  for (const char* gone : {"abandoned", "orphan", ".libshm-tmp-old-0000000000000001"})
    EXPECT_FALSE(fs::exists(root_.file(gone))) << gone;
  for (const char* kept : {"taken-over", "mine", "mine-idle", "setup-step", "abandoned-persistent",
                           "junk", ".libshm-tmp-new-0000000000000002", ".libshm-sidecar.lock"})
    EXPECT_TRUE(fs::exists(root_.file(kept))) << kept;
  EXPECT_FALSE(live_consumer.segment().stale());
}

// Sets a file's modification time `by` into the past (the entry itself, never
// through a link), so gc sees an old temp file without waiting.
void make_old(const std::string& path, std::chrono::seconds by) {
  timespec now{};
  ASSERT_EQ(::clock_gettime(CLOCK_REALTIME, &now), 0);
  const timespec then{now.tv_sec - static_cast<time_t>(by.count()), now.tv_nsec};
  const std::array<timespec, 2> times{then, then};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times.data(), AT_SYMLINK_NOFOLLOW), 0)
      << path << ": " << std::strerror(errno);
}

// gc removes an old temp file only when it is the caller's and empty or starts
// with the segment magic (what an interrupted create leaves); any other file
// that happens to carry the reserved name is skipped with the reason.
TEST_F(ShmctlTest, GcRemovesOnlyTempFilesThatAreEmptyOrCarryTheSegmentMagic) {
  const test::TempSpillDir no_spill;  // gc also reads the spill base: an empty one
  const std::string empty = ".libshm-tmp-empty-0000000000000001";
  const std::string magic = ".libshm-tmp-magic-0000000000000002";
  const std::string text = ".libshm-tmp-text-0000000000000003";
  const std::string link = ".libshm-tmp-link-0000000000000004";
  make_file(empty, "");
  std::string header(4096, '\0');
  std::memcpy(header.data(), &kSegmentMagic, sizeof kSegmentMagic);
  make_file(magic, header);
  make_file(text, "precious notes");
  make_file("target", "");
  fs::create_symlink(root_.file("target"), root_.file(link));
  for (const std::string& name : {empty, magic, text, link}) make_old(root_.file(name), 600s);

  const CliResult r = run({"gc", "--json"});
  ASSERT_EQ(r.code, 0) << r;
  std::map<std::string, std::pair<std::string, std::string>> actions;
  const json doc = r.parsed();
  for (const json& a : doc["actions"]) actions[a["name"]] = {a["action"], a["reason"]};
  EXPECT_EQ(actions[empty].first, "removed") << r;
  EXPECT_EQ(actions[magic].first, "removed") << r;
  EXPECT_EQ(actions[text].first, "skipped") << r;
  EXPECT_NE(actions[text].second.find("does not start with the segment magic"), std::string::npos)
      << actions[text].second;
  EXPECT_EQ(actions[link].first, "skipped") << r;
  EXPECT_FALSE(fs::exists(root_.file(empty)));
  EXPECT_FALSE(fs::exists(root_.file(magic)));
  EXPECT_EQ(file_bytes(text), "precious notes");
  EXPECT_TRUE(fs::is_symlink(root_.file(link)));
  EXPECT_TRUE(fs::exists(root_.file("target")));
}

TEST_F(ShmctlTest, GcNeverRemovesATempFileOfAnotherUser) {
  const test::TempSpillDir no_spill;  // gc also reads the spill base: an empty one
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown a file to another uid";
  const std::string foreign = ".libshm-tmp-foreign-0000000000000001";
  make_file(foreign, "");
  ASSERT_EQ(::chown(root_.file(foreign).c_str(), 12345, 12345), 0);
  make_old(root_.file(foreign), 600s);

  const CliResult r = run({"gc", "--json"});
  ASSERT_EQ(r.code, 0) << r;
  const json doc = r.parsed();
  ASSERT_EQ(doc["actions"].size(), 1u) << r;
  EXPECT_EQ(doc["actions"][0]["action"], "skipped") << r;
  EXPECT_NE(doc["actions"][0]["reason"].get<std::string>().find("owned by uid 12345"),
            std::string::npos)
      << r;
  EXPECT_TRUE(fs::exists(root_.file(foreign)));
}

// gc and spill directories: <base>/<relay> goes only when relay <relay> is
// gone from the root and everything in the directory is this user's, is a
// file a relay writes (pages with the spill page magic, relay.id, an empty
// refused/, retired pages in removed/) and is older than 60 s, and no relay create holds its
// binding lock. Anything else keeps the whole directory.
TEST_F(ShmctlTest, GcRemovesOnlySpillDirectoriesOfRemovedRelaysThatHoldOnlyTheirPages) {
  const test::TempSpillDir spill;
  auto relay_with_pages = [&](const std::string& name) {
    RelayConfig cfg = test::small_spill_fifo(spill.sub(name));
    cfg.spill.page_size = spill::kPageHeaderSize + 4 * spill::record_stride(8);
    auto w = RelayWriter::create(name, cfg, {.root = root_.path()});
    EXPECT_TRUE(w) << w.error().what();
    for (std::uint64_t i = 0; w && i < 40; ++i) {
      auto r = w->write(u64_value(i), shm::forever);
      EXPECT_TRUE(r && r->status == WriteStatus::Appended) << i;
    }
    return w ? std::optional<RelayWriter>(std::move(*w)) : std::nullopt;
  };
  auto pages_in = [&](const std::string& dir) {
    std::size_t n = 0;
    std::error_code ec;
    for (fs::directory_iterator it(spill.sub(dir), ec); !ec && it != fs::directory_iterator();
         it.increment(ec))
      n += it->path().filename().string().starts_with("page-") ? 1 : 0;
    return n;
  };
  auto age_all = [&](const std::string& dir) {
    for (const auto& e : fs::directory_iterator(spill.sub(dir))) make_old(e.path().string(), 600s);
  };
  // A relay removed with pages on disk (a reader drained its first page: an
  // empty removed/ stays), and one that still exists.
  relay_with_pages("gone").reset();
  {
    auto reader = RelayReader::open("gone", {.root = root_.path()});
    ASSERT_TRUE(reader) << reader.error().what();
    auto n = reader->drain(4, [](const RelayEntry&) {});
    ASSERT_TRUE(n && *n == 4u);
  }
  ASSERT_TRUE(fs::is_directory(spill.sub("gone") + "/removed"));
  ASSERT_GT(pages_in("gone"), 0u);
  ASSERT_TRUE(fs::remove(root_.file("gone")));
  age_all("gone");
  std::optional<RelayWriter> live = relay_with_pages("live");
  ASSERT_GT(pages_in("live"), 0u);
  age_all("live");
  // Directories a relay did not leave as it is.
  const std::string magic_page(spill::kPageHeaderSize, '\0');
  auto fake_dir = [&](const std::string& dir, bool old) {
    fs::create_directories(spill.sub(dir));
    std::string page = magic_page;
    std::memcpy(page.data(), &spill::kPageMagic, sizeof spill::kPageMagic);
    std::ofstream(spill.sub(dir) + "/page-0000000000000001.spill", std::ios::binary) << page;
    std::ofstream(spill.sub(dir) + "/relay.id", std::ios::binary) << "12345678";
    if (old) age_all(dir);
  };
  fake_dir("orphan", true);  // gc removes it: fabricated, but exactly a relay's files
  fake_dir("notes", false);
  std::ofstream(spill.sub("notes") + "/notes.txt") << "precious";
  age_all("notes");
  fake_dir("text-page", false);
  std::ofstream(spill.sub("text-page") + "/page-0000000000000002.spill") << "not a page";
  age_all("text-page");
  fake_dir("young", false);
  fake_dir("refusals", false);
  fs::create_directories(spill.sub("refusals") + "/refused");
  std::ofstream(spill.sub("refusals") + "/refused/page-0000000000000003.spill.bad-crc") << "x";
  age_all("refusals");
  // Pages a reader retired and had not unlinked: they go with the directory.
  fake_dir("retired", false);
  fs::create_directories(spill.sub("retired") + "/removed");
  fs::copy_file(spill.sub("retired") + "/page-0000000000000001.spill",
                spill.sub("retired") + "/removed/page-0000000000000000.spill");
  make_old(spill.sub("retired") + "/removed/page-0000000000000000.spill", 600s);
  age_all("retired");
  fake_dir("retired-junk", false);
  fs::create_directories(spill.sub("retired-junk") + "/removed");
  std::ofstream(spill.sub("retired-junk") + "/removed/notes.txt") << "precious";
  age_all("retired-junk");
  fs::create_directories(spill.sub("elsewhere"));
  fs::create_directory_symlink(spill.sub("elsewhere"), spill.sub("link"));
  fake_dir("fifo", false);
  ASSERT_EQ(::mkfifo((spill.sub("fifo") + "/page-0000000000000004.tmp").c_str(), 0600), 0);
  age_all("fifo");
  // Exactly a relay's files, but a relay create holds its binding lock now.
  fake_dir("binding", true);
  auto binding = spill::lock_binding(spill.sub("binding"), 0ms);
  ASSERT_TRUE(binding) << binding.error().what();
  const bool root_user = ::geteuid() == 0;
  if (root_user) {
    fake_dir("foreign", true);
    ASSERT_EQ(::chown(spill.sub("foreign").c_str(), 12345, 12345), 0);
  }

  const CliResult dry = run({"gc", "--dry-run", "--json", "--spill-dir", spill.path()});
  ASSERT_EQ(dry.code, 0) << dry;
  EXPECT_EQ(dry.parsed()["would_remove"], 3) << dry;
  EXPECT_GT(pages_in("gone"), 0u);

  const CliResult r = run({"gc", "--json", "--spill-dir", spill.path()});
  ASSERT_EQ(r.code, 0) << r;
  std::map<std::string, std::pair<std::string, std::string>> actions;
  const json doc = r.parsed();
  for (const json& a : doc["actions"])
    if (a["type"] == "spill_dir")
      actions[fs::path(a["name"].get<std::string>()).filename().string()] = {a["action"],
                                                                             a["reason"]};
  ASSERT_FALSE(actions.empty()) << r;
  auto expect = [&](const std::string& dir, const std::string& action, const std::string& why) {
    EXPECT_EQ(actions[dir].first, action) << dir << ": " << actions[dir].second;
    EXPECT_NE(actions[dir].second.find(why), std::string::npos)
        << dir << ": " << actions[dir].second;
  };
  expect("gone", "removed", "relay segment gone is gone");
  expect("orphan", "removed", "1 page file(s)");
  expect("live", "kept", "relay segment live exists");
  expect("notes", "skipped", "notes.txt is not a file a relay writes");
  expect("text-page", "skipped", "does not start with the spill page magic");
  expect("young", "kept", "a relay may still use it");
  expect("refusals", "skipped", "holds refused pages");
  expect("retired", "removed", "1 page file(s)");
  expect("retired-junk", "skipped", "notes.txt is not a retired page");
  expect("link", "skipped", "symbolic link");
  expect("fifo", "skipped", "a FIFO, not a spill page file");
  expect("elsewhere", "skipped", "no relay.id");  // an empty directory: not a relay's
  expect("binding", "kept", "a relay create is binding it right now");
  if (root_user) {
    expect("foreign", "skipped", "owned by uid 12345");
  }
  EXPECT_FALSE(fs::exists(spill.sub("gone")));
  EXPECT_FALSE(fs::exists(spill.sub("orphan")));
  EXPECT_FALSE(fs::exists(spill.sub("retired")));
  EXPECT_TRUE(fs::exists(spill.sub("retired-junk") + "/removed/notes.txt"));
  EXPECT_GT(pages_in("live"), 0u);
  EXPECT_TRUE(fs::exists(spill.sub("notes") + "/notes.txt"));
  EXPECT_TRUE(fs::exists(spill.sub("text-page") + "/page-0000000000000001.spill"));
  EXPECT_TRUE(fs::exists(spill.sub("young") + "/relay.id"));
  EXPECT_TRUE(fs::exists(spill.sub("refusals") + "/refused/page-0000000000000003.spill.bad-crc"));
  EXPECT_TRUE(fs::is_symlink(spill.sub("link")));
  EXPECT_TRUE(fs::exists(spill.sub("binding") + "/page-0000000000000001.spill"));
  if (root_user) {
    EXPECT_TRUE(fs::exists(spill.sub("foreign") + "/relay.id"));
  }
}

// ---------------------------------------------------------------- reclaim

TEST_F(ShmctlTest, ReclaimReleasesExactlyTheChargesOfAKilledLedgerHolder) {
  Ledger l = make_ledger("budget");
  Holder a = ledger_holder("budget", 5, 40);
  Holder b = ledger_holder("budget", 3, 70);
  ASSERT_EQ(l.snapshot()->global.used, 150 + 200 + 210);
  kill9(a);
  ASSERT_EQ(l.segment().liveness(a.owner.slot), Liveness::Dead);

  const CliResult r = run({"reclaim", "budget"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_TRUE(
      r.says(fmt::format("budget (ledger): slot {} (member, pid {}, generation {}) "
                         "reclaimed: the slot says attached but its kernel lock is free: "
                         "pid {} has exited",
                         a.owner.slot, a.process.pid(), a.owner.generation, a.process.pid())))
      << r;
  EXPECT_TRUE(r.says("released 5 tickets (200 bytes), closed 0 pools")) << r;
  EXPECT_TRUE(r.says("reclaim: reclaimed 1 slot(s) in 1 segment(s)\n")) << r;

  // Exactly the dead holder's charges went: ours and the live holder's stay.
  auto s = l.snapshot();
  ASSERT_TRUE(s) << s.error().what();
  EXPECT_EQ(s->global.used, 150 + 210);
  EXPECT_EQ(s->categories[0].account.used, 150 + 210);
  EXPECT_EQ(s->live_tickets, 2u + 3u);
  EXPECT_EQ(s->stats.reclaimed_tickets, 5u);
  EXPECT_EQ(owned(l, a.owner), (std::pair<std::size_t, std::int64_t>{0, 0}));
  EXPECT_EQ(owned(l, b.owner), (std::pair<std::size_t, std::int64_t>{3, 210}));
  EXPECT_EQ(owned(l, l.owner()), (std::pair<std::size_t, std::int64_t>{2, 150}));
  auto problems = l.verify();
  ASSERT_TRUE(problems);
  EXPECT_TRUE(problems->empty()) << problems->front();
  // The slot is free and the reclaim is in the observation ring; the live
  // holder's slot is untouched.
  EXPECT_EQ(l.segment().liveness(a.owner.slot), Liveness::Free);
  EXPECT_EQ(l.segment().liveness(b.owner.slot), Liveness::Alive);
  EXPECT_EQ(reclaimed_events(l.segment(), a.owner.slot), 1u);
  EXPECT_EQ(reclaimed_events(l.segment(), b.owner.slot), 0u);

  // Nothing is left to reclaim.
  const CliResult again = run({"reclaim", "budget"});
  ASSERT_EQ(again.code, 0) << again;
  EXPECT_TRUE(again.says("budget (ledger): nothing to reclaim (2 alive, 0 dead)")) << again;
  EXPECT_EQ(l.snapshot()->global.used, 150 + 210);
}

TEST_F(ShmctlTest, ReclaimDryRunPrintsWhatItWouldDoAndChangesNothing) {
  Ledger l = make_ledger("budget");
  Holder a = ledger_holder("budget", 5, 40);
  kill9(a);
  const std::string before = file_bytes("budget");

  const CliResult js = run({"reclaim", "budget", "--dry-run", "--json"});
  ASSERT_EQ(js.code, 0) << js;
  const json doc = js.parsed();
  EXPECT_EQ(doc["dry_run"], true);
  EXPECT_EQ(doc["would_reclaim"], 1);
  EXPECT_FALSE(doc.contains("reclaimed"));
  ASSERT_EQ(doc["segments"].size(), 1u) << js;
  const json& seg = doc["segments"][0];
  EXPECT_EQ(seg["attachers_dead"], 1);
  ASSERT_EQ(seg["slots"].size(), 1u) << js;
  EXPECT_EQ(seg["slots"][0]["action"], "would_reclaim");
  EXPECT_EQ(seg["slots"][0]["pid"], a.process.pid());
  EXPECT_EQ(seg["slots"][0]["slot"], a.owner.slot);
  EXPECT_TRUE(seg["slots"][0]["actions"].empty());
  EXPECT_NE(seg["slots"][0]["reason"].get<std::string>().find(
                "kernel lock is free: pid " + std::to_string(a.process.pid()) + " has exited"),
            std::string::npos)
      << js;

  const CliResult text = run({"reclaim", "budget", "--dry-run"});
  ASSERT_EQ(text.code, 0) << text;
  EXPECT_TRUE(text.says("would be reclaimed")) << text;
  EXPECT_TRUE(text.says("the ledger reclaim would release what it held")) << text;
  EXPECT_TRUE(text.says("reclaim (dry run): would reclaim 1 slot(s) in 1 segment(s)")) << text;

  EXPECT_TRUE(file_bytes("budget") == before) << "a dry run wrote to the segment";
  EXPECT_EQ(l.segment().liveness(a.owner.slot), Liveness::Dead);
  EXPECT_EQ(reclaimed_events(l.segment(), a.owner.slot), 0u);
  EXPECT_EQ(owned(l, a.owner), (std::pair<std::size_t, std::int64_t>{5, 200}));
  EXPECT_EQ(l.snapshot()->global.used, 150 + 200);
}

TEST_F(ShmctlTest, ReclaimAllJsonNamesEverySlotWhatItsKindReleasedAndWhy) {
  Ledger l = make_ledger("budget");
  Holder a = ledger_holder("budget", 5, 40);
  kill9(a);
  make_abandoned_ring("stale");           // producer and consumer slots dead
  RingProducer live = make_ring("live");  // a live holder only

  const CliResult js = run({"reclaim", "--all", "--json"});
  ASSERT_EQ(js.code, 0) << js;
  const json doc = js.parsed();
  EXPECT_EQ(doc["dry_run"], false);
  EXPECT_EQ(doc["reclaimed"], 3);
  EXPECT_EQ(doc["kept"], 0);
  EXPECT_EQ(doc["failed"], 0);
  ASSERT_EQ(doc["segments"].size(), 3u) << js;

  const json& budget = doc["segments"][0];
  EXPECT_EQ(budget["name"], "budget");
  EXPECT_EQ(budget["kind"], "ledger");
  EXPECT_EQ(budget["ok"], true);
  EXPECT_EQ(budget["attachers_alive"], 1);
  EXPECT_EQ(budget["attachers_dead"], 1);
  ASSERT_EQ(budget["slots"].size(), 1u);
  const json& slot = budget["slots"][0];
  EXPECT_EQ(slot["slot"], a.owner.slot);
  EXPECT_EQ(slot["generation"], a.owner.generation);
  EXPECT_EQ(slot["role"], "member");
  EXPECT_EQ(slot["pid"], a.process.pid());
  EXPECT_EQ(slot["action"], "reclaimed");
  EXPECT_NE(slot["reason"].get<std::string>().find("kernel lock is free"), std::string::npos);
  ASSERT_EQ(slot["actions"].size(), 1u);
  EXPECT_NE(slot["actions"][0].get<std::string>().find("released 5 tickets (200 bytes)"),
            std::string::npos)
      << slot;

  const json& live_doc = doc["segments"][1];
  EXPECT_EQ(live_doc["name"], "live");
  EXPECT_EQ(live_doc["attachers_alive"], 1);
  EXPECT_TRUE(live_doc["slots"].empty());

  const json& stale = doc["segments"][2];
  EXPECT_EQ(stale["name"], "stale");
  EXPECT_EQ(stale["kind"], "spsc_ring");
  ASSERT_EQ(stale["slots"].size(), 2u);
  EXPECT_EQ(stale["slots"][0]["role"], "producer");
  EXPECT_EQ(stale["slots"][1]["role"], "consumer");
  for (const json& s : stale["slots"]) {
    EXPECT_EQ(s["action"], "reclaimed");
    EXPECT_NE(s["actions"][0].get<std::string>().find("ring positions kept"), std::string::npos);
  }

  EXPECT_EQ(l.snapshot()->global.used, 150);
  EXPECT_EQ(live.segment().liveness(0), Liveness::Alive);
  // The events command shows the reclaim.
  const json events = run({"events", "budget", "--json"}).parsed();
  const auto& list = events["events"];
  EXPECT_TRUE(std::any_of(list.begin(), list.end(), [&](const json& e) {
    return e["type"] == "reclaimed" && e["slot"] == a.owner.slot && e["role"] == "member";
  })) << events.dump(2);

  const json again = run({"reclaim", "--all", "--json"}).parsed();
  EXPECT_EQ(again["reclaimed"], 0);
}

TEST_F(ShmctlTest, ReclaimNeverTouchesALiveHolderEvenAStoppedOne) {
  Ledger l = make_ledger("budget");
  Holder b = ledger_holder("budget", 3, 70);
  b.process.kill(SIGSTOP);  // alive, not running: its kernel lock is still held
  const std::string before = file_bytes("budget");

  const CliResult r = run({"reclaim", "budget"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_TRUE(r.says("budget (ledger): nothing to reclaim (2 alive, 0 dead)")) << r;
  const CliResult js = run({"reclaim", "--all", "--json"});
  ASSERT_EQ(js.code, 0) << js;
  EXPECT_EQ(js.parsed()["reclaimed"], 0);
  EXPECT_TRUE(js.parsed()["segments"][0]["slots"].empty()) << js;

  EXPECT_TRUE(file_bytes("budget") == before) << "reclaim wrote to a segment with no dead holder";
  EXPECT_EQ(l.segment().liveness(b.owner.slot), Liveness::Alive);
  EXPECT_EQ(owned(l, b.owner), (std::pair<std::size_t, std::int64_t>{3, 210}));
  EXPECT_EQ(reclaimed_events(l.segment(), b.owner.slot), 0u);
  b.process.kill(SIGCONT);
}

TEST_F(ShmctlTest, ReclaimReportsCorruptAndUnknownSegmentsWithExitThree) {
  make_file("junk", std::string(5000, '\0'));
  const CliResult one = run({"reclaim", "junk"});
  EXPECT_EQ(one.code, 3) << one;
  EXPECT_TRUE(one.says("BadMagic")) << one;
  const CliResult js = run({"reclaim", "junk", "--json"});
  EXPECT_EQ(js.code, 3) << js;
  EXPECT_EQ(js.parsed()["error"]["code"], "BadMagic");

  // --all still reclaims the others, and exits 3 for the file it could not read.
  make_abandoned_ring("stale");
  const CliResult all = run({"reclaim", "--all"});
  EXPECT_EQ(all.code, 3) << all;
  EXPECT_TRUE(all.says("junk: not reclaimed: BadMagic")) << all;
  EXPECT_TRUE(all.says("reclaim: reclaimed 2 slot(s) in 2 segment(s)")) << all;
  EXPECT_TRUE(all.says("shmctl reclaim: 1 segment(s) could not be reclaimed")) << all;
  const json doc = run({"reclaim", "--all", "--json"}).parsed();
  EXPECT_EQ(doc["segments"][0]["ok"], false);
  EXPECT_EQ(doc["segments"][0]["error"]["code"], "BadMagic");
  EXPECT_EQ(doc["segments"][1]["ok"], true);
}

// ---------------------------------------------------------------- watch

TEST_F(ShmctlTest, WatchPrintsRatesFromCounterDeltasBetweenRefreshes) {
  RingProducer producer = make_ring("ring");
  RingConsumer consumer = open_consumer("ring");
  std::atomic<bool> stop{false};
  std::thread traffic([&] {
    std::vector<std::byte> buf(64);
    while (!stop.load()) {
      for (int i = 0; i < 10; ++i) (void)producer.try_push(bytes("tick"));
      while (true) {
        auto got = consumer.try_pop(buf);
        if (!got || !*got) break;
      }
      std::this_thread::sleep_for(1ms);
    }
  });
  const CliResult js = run({"watch", "ring", "--interval", "200", "--count", "3", "--json"});
  const CliResult text = run({"watch", "--interval", "50", "--count", "2"});
  stop = true;
  traffic.join();

  ASSERT_EQ(js.code, 0) << js;
  const std::vector<json> lines = json_lines(js.out);
  ASSERT_EQ(lines.size(), 3u) << js;
  EXPECT_EQ(lines[0]["refresh"], 1);
  const json& first = lines[0]["segments"][0];
  EXPECT_EQ(first["name"], "ring");
  EXPECT_EQ(first["attachers_alive"], 2);
  EXPECT_TRUE(first["rates_per_second"]["records_pushed"].is_null());  // no earlier sample
  EXPECT_TRUE(first["gauges"].contains("depth_bytes"));
  const json& last = lines[2]["segments"][0];
  ASSERT_TRUE(last["rates_per_second"]["records_pushed"].is_number()) << last;
  EXPECT_GT(last["rates_per_second"]["records_pushed"].get<double>(), 0.0) << last;
  EXPECT_GT(last["counters"]["records_pushed"].get<std::uint64_t>(),
            first["counters"]["records_pushed"].get<std::uint64_t>());

  ASSERT_EQ(text.code, 0) << text;
  EXPECT_TRUE(text.says("refresh 2/2")) << text;
  EXPECT_TRUE(text.says("records_pushed=")) << text;
  EXPECT_TRUE(text.says("2 alive, 0 dead")) << text;
}

// A relay under traffic: watch shows its projections as gauges (nested
// names), its flags, and rates from the counters' deltas.
TEST_F(ShmctlTest, WatchShowsARelaysProjectionsFlagsAndWriteRates) {
  RelayConfig cfg;
  cfg.policy = policy::kSum;
  cfg.max_entries = 64;
  cfg.backpressure = {Dimension::Keys, 32, 8, Overflow::Block};
  auto w = RelayWriter::create("counts", cfg);
  ASSERT_TRUE(w) << w.error().what();
  auto r = RelayReader::open("counts");
  ASSERT_TRUE(r) << r.error().what();
  std::atomic<bool> stop{false};
  std::thread traffic([&] {
    for (std::uint64_t i = 0; !stop.load(); ++i) {
      (void)w->write(i % 16, u64_value(1), 0ns);
      if (i % 64 == 63) {
        (void)r->drain(8, [](const RelayEntry&) {});
        std::this_thread::sleep_for(1ms);
      }
    }
  });
  const CliResult js = run({"watch", "counts", "--interval", "200", "--count", "3", "--json"});
  const CliResult text = run({"watch", "counts", "--interval", "50", "--count", "2", "--wide"});
  const CliResult narrow = run({"watch", "counts", "--interval", "50", "--count", "1"});
  stop = true;
  traffic.join();

  ASSERT_EQ(js.code, 0) << js;
  const std::vector<json> lines = json_lines(js.out);
  ASSERT_EQ(lines.size(), 3u) << js;
  const json& first = lines[0]["segments"][0];
  EXPECT_EQ(first["name"], "counts");
  EXPECT_EQ(first["kind"], "relay");
  EXPECT_EQ(first["attachers_alive"], 2);
  for (const char* gauge :
       {"head.depth", "head.bytes", "head.pending_keys", "head.lag", "head.oldest_age_ms",
        "flags.is_full", "flags.is_spilling", "flags.is_draining", "backpressure.level",
        "backpressure.high_water", "backpressure.low_water"})
    EXPECT_TRUE(first["gauges"].contains(gauge)) << gauge << "\n" << first;
  EXPECT_EQ(first["gauges"]["backpressure.high_water"], 32);
  EXPECT_LE(first["gauges"]["head.pending_keys"].get<std::uint64_t>(), 16u);
  EXPECT_TRUE(first["rates_per_second"]["counters.writes"].is_null());  // no earlier sample
  const json& last = lines[2]["segments"][0];
  ASSERT_TRUE(last["rates_per_second"]["counters.writes"].is_number()) << last;
  EXPECT_GT(last["rates_per_second"]["counters.writes"].get<double>(), 0.0) << last;
  EXPECT_GT(last["counters"]["counters.drained"].get<std::uint64_t>(),
            first["counters"]["counters.drained"].get<std::uint64_t>())
      << last;

  ASSERT_EQ(text.code, 0) << text;
  EXPECT_TRUE(text.says("refresh 2/2")) << text;
  EXPECT_TRUE(text.says("head.depth=")) << text;
  EXPECT_TRUE(text.says("counters.writes=")) << text;
  EXPECT_TRUE(text.says("backpressure.low_water=")) << text;
  // Without --wide a relay's dozens of gauges and counters still fit 120
  // columns: a cell is cut after a whole item and marked "...".
  ASSERT_EQ(narrow.code, 0) << narrow;
  std::istringstream rows(narrow.out);
  for (std::string row; std::getline(rows, row);)
    EXPECT_LE(row.size(), 120u) << "a row wider than 120 columns:\n" << row;
  EXPECT_TRUE(narrow.says(" ...")) << narrow;
  EXPECT_TRUE(narrow.says("counts")) << narrow;
}

// An egress with a producer and a transport moving records: watch shows the
// projections (pending, in flight, watermark, generation) and the rates.
TEST_F(ShmctlTest, WatchShowsAnEgressWindowAndOperationRates) {
  auto producer = Egress::create("uplink", EgressParams{.max_payloads = 64, .slot_bytes = 16});
  ASSERT_TRUE(producer) << producer.error().what();
  auto transport = EgressTransport::open("uplink");
  ASSERT_TRUE(transport) << transport.error().what();
  std::atomic<bool> stop{false};
  std::thread traffic([&] {
    std::vector<std::byte> buf;
    const std::vector<std::byte> payload(16, std::byte{1});
    while (!stop.load()) {
      for (int i = 0; i < 8; ++i) (void)producer->try_enqueue(payload);
      std::uint64_t last = 0;
      bool claimed = false;
      for (int i = 0; i < 8; ++i) {
        auto c = transport->try_claim(buf);
        if (!c || c->status != egress::ClaimStatus::Claimed) break;
        last = c->envelope.sequence;
        claimed = true;
      }
      if (claimed) (void)transport->ack(last);
      std::this_thread::sleep_for(1ms);
    }
  });
  const CliResult js = run({"watch", "uplink", "--interval", "200", "--count", "3", "--json"});
  const CliResult text = run({"watch", "uplink", "--interval", "50", "--count", "2", "--wide"});
  stop = true;
  traffic.join();

  ASSERT_EQ(js.code, 0) << js;
  const std::vector<json> lines = json_lines(js.out);
  ASSERT_EQ(lines.size(), 3u) << js;
  const json& first = lines[0]["segments"][0];
  EXPECT_EQ(first["kind"], "egress");
  EXPECT_EQ(first["attachers_alive"], 2);
  for (const char* gauge : {"generation", "next_sequence", "pending", "inflight", "parked",
                            "terminal", "retained", "oldest_unacked_age_ms"})
    EXPECT_TRUE(first["gauges"].contains(gauge)) << gauge << "\n" << first;
  EXPECT_EQ(first["gauges"]["generation"], transport->generation());
  const json& last = lines[2]["segments"][0];
  ASSERT_TRUE(last["rates_per_second"]["operations.enqueued"].is_number()) << last;
  EXPECT_GT(last["rates_per_second"]["operations.enqueued"].get<double>(), 0.0) << last;
  EXPECT_GT(last["rates_per_second"]["operations.acked"].get<double>(), 0.0) << last;
  EXPECT_GT(last["gauges"]["next_sequence"].get<std::uint64_t>(),
            first["gauges"]["next_sequence"].get<std::uint64_t>());

  ASSERT_EQ(text.code, 0) << text;
  EXPECT_TRUE(text.says("next_sequence=")) << text;
  EXPECT_TRUE(text.says("operations.enqueued=")) << text;
}

// A topic: watch shows each subscriber's queue, held samples and misses by
// its attachment slot (an array of the description, element by element),
// beside the pool's free chunks and the publisher's loans.
TEST_F(ShmctlTest, WatchShowsATopicsSubscribersBySlot) {
  auto publisher = TopicPublisher::create(
      "frames",
      {.max_sample_bytes = 32, .chunks = 8, .queue_depth = 2, .history = 0, .max_held = 2});
  ASSERT_TRUE(publisher) << publisher.error().what();
  auto lossy = TopicSubscriber::open("frames", TopicOverflow::DropOldest);
  ASSERT_TRUE(lossy) << lossy.error().what();
  auto holder = TopicSubscriber::open("frames", TopicOverflow::DropOldest);
  ASSERT_TRUE(holder) << holder.error().what();
  for (int i = 0; i < 3; ++i) {  // queue depth 2: each subscriber misses one
    auto loan = publisher->try_loan(8);
    ASSERT_TRUE(loan && *loan);
    ASSERT_TRUE(publisher->try_publish(std::move(**loan)));
  }
  auto held = holder->try_receive();
  ASSERT_TRUE(held && *held);

  const CliResult js = run({"watch", "frames", "--interval", "50", "--count", "1", "--json"});
  const CliResult text = run({"watch", "frames", "--interval", "50", "--count", "1", "--wide"});
  ASSERT_EQ(js.code, 0) << js;
  const std::vector<json> lines = json_lines(js.out);
  ASSERT_EQ(lines.size(), 1u) << js;
  const json& seg = lines[0]["segments"][0];
  EXPECT_EQ(seg["kind"], "topic");
  const auto sub = [](const TopicSubscriber& s, const char* field) {
    return fmt::format("subscribers[{}].{}", s.attachment().slot(), field);
  };
  EXPECT_EQ(seg["gauges"][sub(*lossy, "queue")], 2) << seg;
  EXPECT_EQ(seg["gauges"][sub(*lossy, "held")], 0) << seg;
  EXPECT_EQ(seg["counters"][sub(*lossy, "missed")], 1) << seg;
  EXPECT_EQ(seg["gauges"][sub(*holder, "queue")], 1) << seg;
  EXPECT_EQ(seg["gauges"][sub(*holder, "held")], 1) << seg;
  EXPECT_EQ(seg["counters"][sub(*holder, "received")], 1) << seg;
  EXPECT_TRUE(seg["gauges"].contains("free_chunks")) << seg;
  EXPECT_EQ(seg["counters"]["publisher.published"], 3) << seg;
  ASSERT_EQ(text.code, 0) << text;
  EXPECT_TRUE(text.says(sub(*holder, "held") + "=1")) << text;
}

TEST_F(ShmctlTest, WatchWithoutSegmentsKeepsRefreshing) {
  const CliResult r = run({"watch", "--interval", "10", "--count", "2", "--json"});
  ASSERT_EQ(r.code, 0) << r;
  const auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(lines[1]["segments"].empty());
}

}  // namespace
}  // namespace shm
