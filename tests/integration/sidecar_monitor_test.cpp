// The sidecar's Monitor driven step by step (do_work()) against real processes:
// deaths (kill -9), stuck processes (SIGSTOP), files that are not segments or
// change under it, discovery, ephemeral collection, the instance lock.
#include "common/subprocess.hpp"
#include "common/temp_root.hpp"

#include "sidecar/instance_lock.hpp"
#include "sidecar/metrics.hpp"
#include "sidecar/monitor.hpp"

#include "shm/kind.hpp"
#include "shm/ring_producer.hpp"
#include "shm/spsc_ring.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

namespace shm::sidecar {
namespace {

using namespace std::chrono_literals;
using test::Subprocess;

class SidecarMonitor : public ::testing::Test {
 protected:
  test::TempRoot root;
  std::vector<std::string> lines;
  Logger log{[this](std::string_view l) { lines.emplace_back(l); }, Logger::Format::Logfmt,
             Level::Debug};

  MonitorOptions options() const {
    MonitorOptions o;
    o.root = root.path();
    o.stuck_after = 150ms;
    o.rescan_every = 1h;  // discovery must come from inotify unless a test says otherwise
    return o;
  }

  // Lines with event=EVENT that contain every one of `parts`.
  std::size_t count(std::string_view event,
                    std::initializer_list<std::string_view> parts = {}) const {
    const std::string tag = fmt::format("event={} ", event);
    return static_cast<std::size_t>(
        std::count_if(lines.begin(), lines.end(), [&](const std::string& l) {
          if (l.find(tag) == std::string::npos) return false;
          return std::all_of(parts.begin(), parts.end(),
                             [&](std::string_view p) { return l.find(p) != std::string::npos; });
        }));
  }
  std::string log_text() const {
    std::string out;
    for (const auto& l : lines) out += l + "\n";
    return out;
  }

  // A helper process holding `role` of ring `name`; waits until attached.
  Subprocess attacher(const std::string& name, const std::string& role,
                      std::vector<std::string> extra = {}) {
    std::vector<std::string> argv{test::helper_path("sidecar_attacher"), name, role};
    argv.insert(argv.end(), extra.begin(), extra.end());
    Subprocess p(argv);
    const std::string line = fmt::format("attached {}", role == "producer" ? 0 : 1);
    EXPECT_TRUE(p.wait_for_line(line, 5s)) << "helper output: " << p.output();
    return p;
  }

  static void write_file(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary);
    f << bytes;
  }
};

Segment make_ring(const std::string& name, std::uint64_t capacity = 4096, bool ephemeral = false) {
  CreateOptions co;
  co.ephemeral = ephemeral;
  auto seg = create_ring(name, RingParams{capacity}, co);
  EXPECT_TRUE(seg.has_value()) << (seg ? "" : seg.error().what());
  return std::move(*seg);
}

TEST_F(SidecarMonitor, DetectsKilledAttacherWithinOneCycleAndReclaimsItsSlot) {
  Segment ring = make_ring("orders");
  Subprocess consumer = attacher("orders", "consumer");
  Monitor m(options(), log);
  m.do_work();
  const SegmentView* v = m.find("orders");
  ASSERT_NE(v, nullptr) << log_text();
  EXPECT_TRUE(v->up);
  EXPECT_EQ(v->alive, 1u);
  EXPECT_EQ(v->dead, 0u);

  consumer.kill(SIGKILL);
  ASSERT_EQ(consumer.wait(5s), 128 + SIGKILL);
  m.do_work();

  EXPECT_EQ(m.stats().deaths, 1u) << log_text();
  EXPECT_EQ(m.stats().reclaims, 1u) << log_text();
  EXPECT_EQ(count("attacher_dead", {"segment=orders", "slot=1", "role=consumer",
                                    fmt::format("pid={}", consumer.pid())}),
            1u)
      << log_text();
  // The kind's reclaim ran (its action line is logged) and the slot is free.
  EXPECT_EQ(count("attacher_reclaimed", {"segment=orders", "ring positions kept"}), 1u)
      << log_text();
  v = m.find("orders");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->alive, 0u);
  EXPECT_EQ(v->dead, 0u);
  EXPECT_EQ(ring.liveness(1), Liveness::Free);
  const auto events = ring.events();
  EXPECT_TRUE(std::any_of(events.begin(), events.end(), [](const EventInfo& e) {
    return e.type == EventType::Reclaimed && e.slot == 1;
  })) << "no Reclaimed event for slot 1 in the segment's observation ring";

  // The death is counted once, not once per cycle.
  m.do_work();
  EXPECT_EQ(m.stats().deaths, 1u);
  // And the role can be taken again by a new consumer.
  Subprocess again = attacher("orders", "consumer");
  m.do_work();
  EXPECT_EQ(m.find("orders")->alive, 1u);
}

TEST_F(SidecarMonitor, StoppedProcessIsReportedStuckButNeverDead) {
  Subprocess producer = attacher("paused", "producer", {"--create", "4096"});
  Monitor m(options(), log);
  m.do_work();
  ASSERT_NE(m.find("paused"), nullptr) << log_text();
  EXPECT_EQ(m.find("paused")->stuck, 0u);

  producer.kill(SIGSTOP);
  std::this_thread::sleep_for(400ms);
  for (int i = 0; i < 3; ++i) m.do_work();
  const SegmentView* v = m.find("paused");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->alive, 1u);
  EXPECT_EQ(v->stuck, 1u);
  EXPECT_EQ(v->dead, 0u);
  EXPECT_EQ(m.stats().deaths, 0u) << log_text();
  EXPECT_EQ(m.stats().reclaims, 0u);
  EXPECT_EQ(count("attacher_stuck", {"segment=paused", fmt::format("pid={}", producer.pid())}), 1u)
      << log_text();
  EXPECT_EQ(count("attacher_dead"), 0u) << log_text();

  producer.kill(SIGCONT);
  std::this_thread::sleep_for(100ms);
  m.do_work();
  EXPECT_EQ(m.find("paused")->stuck, 0u) << log_text();
  EXPECT_EQ(count("attacher_unstuck", {"segment=paused"}), 1u) << log_text();
}

TEST_F(SidecarMonitor, DiscoversSegmentCreatedAfterStartWithinOneCycle) {
  Monitor m(options(), log);
  m.do_work();
  EXPECT_TRUE(m.snapshot().empty());
  ASSERT_GE(m.wake_fd(), 0) << "inotify unavailable";
  Segment late = make_ring("late");
  m.do_work();  // rescan_every is an hour: this is inotify's doing
  ASSERT_NE(m.find("late"), nullptr) << log_text();
  EXPECT_TRUE(m.find("late")->up);
  EXPECT_EQ(m.find("late")->kind, "spsc_ring");
  EXPECT_EQ(count("segment_discovered", {"segment=late", "kind=spsc_ring"}), 1u) << log_text();

  ASSERT_TRUE(late.unlink());
  m.do_work();
  EXPECT_EQ(m.find("late"), nullptr);
  EXPECT_EQ(count("segment_removed", {"segment=late"}), 1u) << log_text();
}

TEST_F(SidecarMonitor, DiscoversNewSegmentByRescanWithoutInotify) {
  MonitorOptions o = options();
  o.use_inotify = false;
  o.rescan_every = 0ms;
  Monitor m(o, log);
  EXPECT_EQ(m.wake_fd(), -1);
  m.do_work();
  Segment late = make_ring("polled");
  m.do_work();
  ASSERT_NE(m.find("polled"), nullptr) << log_text();
}

TEST_F(SidecarMonitor, SurvivesFilesThatAreNotValidSegmentsAndLogsEachOnce) {
  Segment good = make_ring("good");
  write_file(root.file("garbage"), std::string(8192, 'x'));
  write_file(root.file("short"), std::string(100, '\0'));
  { Segment bad = make_ring("badcrc"); }
  {  // flip one byte of the immutable header: the CRC no longer matches
    const int fd = ::open(root.file("badcrc").c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    const char x = 0x7f;
    ASSERT_EQ(::pwrite(fd, &x, 1, 80), 1);
    ::close(fd);
  }
  write_file(root.file("bad name"), "not a segment");
  std::filesystem::create_directory(root.file("subdir"));
  std::filesystem::create_symlink(root.file("good"), root.file("link"));

  Monitor m(options(), log);
  m.do_work();
  m.do_work();
  ASSERT_NE(m.find("good"), nullptr);
  EXPECT_TRUE(m.find("good")->up);
  const std::map<std::string, std::string> expected{{"garbage", "BadMagic"},
                                                    {"short", "Truncated"},
                                                    {"badcrc", "HeaderCorrupt"},
                                                    {"bad name", "InvalidName"},
                                                    {"link", "NotRegularFile"}};
  for (const auto& [name, code] : expected) {
    const SegmentView* v = m.find(name);
    ASSERT_NE(v, nullptr) << name;
    EXPECT_FALSE(v->up) << name;
    EXPECT_NE(v->error.find(code), std::string::npos) << name << ": " << v->error;
    EXPECT_EQ(count("segment_unreadable", {name}), 1u) << name << " logged once\n" << log_text();
  }
  EXPECT_EQ(m.find("subdir"), nullptr);
}

TEST_F(SidecarMonitor, SurvivesSegmentTruncatedUnderIt) {
  Segment ring = make_ring("shrinks", 1 << 16);
  Monitor m(options(), log);
  m.do_work();
  ASSERT_TRUE(m.find("shrinks")->up);
  ASSERT_EQ(::truncate(root.file("shrinks").c_str(), 100), 0);
  m.do_work();  // must not touch the lost pages (SIGBUS)
  m.do_work();
  EXPECT_EQ(count("segment_truncated", {"segment=shrinks", "file_bytes=100"}), 1u) << log_text();
  const SegmentView* v = m.find("shrinks");
  ASSERT_NE(v, nullptr);
  EXPECT_FALSE(v->up);
  EXPECT_NE(v->error.find("Truncated"), std::string::npos) << v->error;
}

TEST_F(SidecarMonitor, SurvivesSegmentDeletedOrReplacedUnderIt) {
  Segment gone = make_ring("gone");
  Segment swapped = make_ring("swapped");
  const std::uint64_t old_incarnation = swapped.header().incarnation;
  Monitor m(options(), log);
  m.do_work();
  ASSERT_NE(m.find("gone"), nullptr);
  ASSERT_TRUE(gone.unlink());
  ASSERT_TRUE(swapped.unlink());
  Segment replacement = make_ring("swapped");
  m.do_work();
  EXPECT_EQ(m.find("gone"), nullptr);
  EXPECT_EQ(count("segment_removed", {"segment=gone"}), 1u) << log_text();
  const SegmentView* v = m.find("swapped");
  ASSERT_NE(v, nullptr) << log_text();
  EXPECT_TRUE(v->up);
  EXPECT_EQ(v->incarnation, fmt::format("{:016x}", replacement.header().incarnation));
  EXPECT_NE(v->incarnation, fmt::format("{:016x}", old_incarnation));
}

TEST_F(SidecarMonitor, SurvivesHeaderScribbledAfterDiscovery) {
  Segment ring = make_ring("scribbled");
  Monitor m(options(), log);
  m.do_work();
  ASSERT_TRUE(m.find("scribbled")->up);
  const int fd = ::open(root.file("scribbled").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const std::uint64_t junk = 0xdeadbeefdeadbeefull;
  ASSERT_EQ(::pwrite(fd, &junk, sizeof junk, 0), static_cast<ssize_t>(sizeof junk));
  ::close(fd);
  m.do_work();
  EXPECT_EQ(count("segment_corrupt", {"segment=scribbled", "magic"}), 1u) << log_text();
  ASSERT_NE(m.find("scribbled"), nullptr);
  EXPECT_FALSE(m.find("scribbled")->up);
  EXPECT_NE(m.find("scribbled")->error.find("BadMagic"), std::string::npos);
}

TEST_F(SidecarMonitor, UnknownKindIsObservedButItsDeadAreNotReclaimed) {
  KindSpec alien;
  alien.kind = 4242;
  alien.kind_name = "alien";
  alien.fingerprint = 1;
  alien.data_size = 4096;
  // A non-empty parameter block: Segment::create memcpy()s it, and an empty
  // span's null data() is undefined behaviour there (UBSan flags it).
  const std::uint64_t alien_params = 7;
  alien.params = std::as_bytes(std::span(&alien_params, 1));
  auto seg = Segment::create("alien", alien, CreateOptions{}, nullptr);
  ASSERT_TRUE(seg) << seg.error().what();
  // A child attaches and dies without detaching (its kernel lock goes with it).
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto s = Segment::open_any("alien", OpenOptions{});
    if (!s) ::_exit(1);
    auto a = s->attach(RoleSpec{0, true, "pilot"});
    ::_exit(a ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  Monitor m(options(), log);
  m.do_work();
  m.do_work();
  const SegmentView* v = m.find("alien");
  ASSERT_NE(v, nullptr);
  EXPECT_TRUE(v->up);
  EXPECT_EQ(v->kind, "unknown");
  EXPECT_FALSE(v->kind_known);
  EXPECT_EQ(v->dead, 1u);
  EXPECT_EQ(count("unknown_kind", {"segment=alien", "kind_id=4242"}), 1u) << log_text();
  EXPECT_EQ(count("attacher_dead", {"segment=alien"}), 1u) << log_text();
  EXPECT_EQ(count("reclaim_skipped", {"segment=alien", "unknown kind"}), 1u) << log_text();
  EXPECT_EQ(m.stats().reclaims, 0u);
  EXPECT_EQ(seg->liveness(0), Liveness::Dead);
}

TEST_F(SidecarMonitor, CollectsEphemeralSegmentOnceEveryAttacherIsDead) {
  MonitorOptions o = options();
  o.gc_ephemeral = true;
  Subprocess producer = attacher("temp", "producer", {"--create", "4096", "--ephemeral"});
  Subprocess consumer = attacher("temp", "consumer");
  Monitor m(o, log);
  m.do_work();
  ASSERT_NE(m.find("temp"), nullptr);

  consumer.kill(SIGKILL);
  consumer.wait(5s);
  m.do_work();  // one attacher still alive: reclaimed, never collected
  EXPECT_EQ(m.stats().reclaims, 1u) << log_text();
  EXPECT_TRUE(std::filesystem::exists(root.file("temp")));
  EXPECT_EQ(m.stats().collected, 0u);

  producer.kill(SIGKILL);
  producer.wait(5s);
  m.do_work();
  EXPECT_FALSE(std::filesystem::exists(root.file("temp"))) << log_text();
  EXPECT_EQ(m.stats().collected, 1u);
  EXPECT_EQ(count("segment_collected", {"segment=temp"}), 1u) << log_text();
  EXPECT_EQ(m.find("temp"), nullptr);
}

TEST_F(SidecarMonitor, NeverCollectsUnlessAskedOrWithoutTheEphemeralFlag) {
  Segment kept = make_ring("kept", 4096, /*ephemeral=*/false);
  Segment eph = make_ring("eph", 4096, /*ephemeral=*/true);
  {
    Subprocess p = attacher("kept", "producer");
    Subprocess q = attacher("eph", "producer");
  }  // both killed (destructor: SIGKILL)
  MonitorOptions with_gc = options();
  with_gc.gc_ephemeral = true;
  {
    Monitor off(options(), log);
    off.do_work();
    EXPECT_TRUE(std::filesystem::exists(root.file("eph")))
        << "collected although --gc-ephemeral is off";
  }
  Monitor on(with_gc, log);
  on.do_work();
  EXPECT_TRUE(std::filesystem::exists(root.file("kept"))) << log_text();
  EXPECT_FALSE(std::filesystem::exists(root.file("eph"))) << log_text();
}

TEST_F(SidecarMonitor, ExportsTheKindsGaugesAsMetrics) {
  auto p = RingProducer::create("depth", RingParams{4096});
  ASSERT_TRUE(p) << p.error().what();
  const std::vector<std::byte> rec(40, std::byte{1});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(p->try_push(rec).value_or(false));
  Monitor m(options(), log);
  m.do_work();
  const std::string text = render_metrics(m, 0);
  EXPECT_NE(text.find("# TYPE libshm_spsc_ring_depth_records gauge\n"), std::string::npos) << text;
  EXPECT_NE(text.find("libshm_spsc_ring_depth_records{segment=\"depth\"} 3\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("libshm_spsc_ring_records_pushed_total{segment=\"depth\"} 3\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("libshm_segment_attachers{segment=\"depth\",state=\"alive\"} 1\n"),
            std::string::npos)
      << text;
}

TEST_F(SidecarMonitor, SecondInstanceOnTheSameRootIsRefusedWithTheHolderNamed) {
  auto first = InstanceLock::acquire(root.path());
  ASSERT_TRUE(first) << first.error().what();
  auto second = InstanceLock::acquire(root.path());
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, Errc::RoleTaken);
  EXPECT_NE(second.error().message.find("another shm-sidecar already monitors " + root.path()),
            std::string::npos)
      << second.error().message;
  EXPECT_NE(second.error().message.find(fmt::format("pid {}", ::getpid())), std::string::npos)
      << second.error().message;
  EXPECT_NE(second.error().message.find(".libshm-sidecar.lock"), std::string::npos);
  first = InstanceLock{};  // released: the next one gets it
  EXPECT_TRUE(InstanceLock::acquire(root.path()));
}

}  // namespace
}  // namespace shm::sidecar
