// A relay writer or reader with a spill store, stopped inside a spill step,
// for tests/integration/relay/spill_crash_test.cpp.
//
//   test_spill_peer seal NAME POINT
//       Installs the test-only spill hook and writes op 1000 into NAME (a
//       full raw_fifo Spill relay: the write seals a page); the hook prints
//       "inside" at crash point POINT (an index of test_hooks::SpillCrashPoint)
//       and sleeps until the process is killed -9.
//   test_spill_peer seal-bg NAME POINT
//       As seal, with the writer's pages sealed on its sealer thread
//       (SealMode::Background): the write returns (appended into the room)
//       and prints "written"; the sealer thread then prints "inside" at
//       POINT and sleeps until the process is killed -9.
//   test_spill_peer ack NAME POINT LOG
//       Drains NAME with credit 4, appending "e FIRST VALUE" to LOG for every
//       entry before the commit; the hook stops at POINT inside the commit
//       that acknowledges a page.
//   test_spill_peer expire NAME POINT
//       Opens a reader of NAME (a Ttl relay whose pages are past the ttl) and
//       takes: the take expires the pages; the hook stops at POINT inside
//       the first expiry.
//   test_spill_peer refuse NAME POINT
//       The same take, over a relay whose oldest page file is damaged: the
//       hook stops at POINT inside the refusal.
//   test_spill_peer seal-pause NAME POINT
//       As seal, but at POINT the hook prints "inside" and stops itself
//       (SIGSTOP); once continued the seal and the write finish and it
//       prints "written" (exit 0).
//   test_spill_peer drain-pause NAME POINT
//       Opens a reader of NAME and drains it (credit 4) until a take comes
//       back empty; at POINT (a point the reader reaches with the relay
//       unlocked: ColdPageRead, FileRemoved) the hook prints "inside" and
//       stops itself (SIGSTOP), once. Then it prints "got V..." (every
//       value, in order) and exits 0.
//   test_spill_peer bind NAME DIR
//       Creates NAME, a small raw_fifo Spill relay spilling into DIR; the
//       hook prints "inside" at DirBound (the directory bound, the segment
//       not yet published) and stops itself (SIGSTOP); once continued it
//       finishes the create and prints "created" (or "error: ...", exit 1).
#include "common/spill_config.hpp"
#include "shm/relay/relay.hpp"
#include "shm/testing/spill_crash.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace shm;
using namespace std::chrono_literals;

[[noreturn]] void die(const std::string& what) {
  std::printf("error: %s\n", what.c_str());
  std::fflush(stdout);
  std::exit(1);
}

std::atomic<int> g_stop_at{-1};

void stop_at(test_hooks::SpillCrashPoint point) {
  if (static_cast<int>(point) != g_stop_at.load()) return;
  std::printf("inside\n");
  std::fflush(stdout);
  for (;;) std::this_thread::sleep_for(1s);
}

int run_seal(const std::string& name, int point) {
  auto w = RelayWriter::open(name);
  if (!w) die(w.error().what());
  g_stop_at = point;
  test_hooks::set_spill_crash_hook(stop_at);
  auto r = w->write(u64_value(1000), 0ns);
  die(r ? fmt::format("the write returned ({}) without reaching the crash point",
                      to_string(r->status))
        : r.error().what());
}

int run_seal_background(const std::string& name, int point) {
  auto w = RelayWriter::open(name);
  if (!w) die(w.error().what());
  if (auto ok = w->set_seal_mode(SealMode::Background); !ok) die(ok.error().what());
  g_stop_at = point;
  test_hooks::set_spill_crash_hook(stop_at);
  auto r = w->write(u64_value(1000), 0ns);
  if (!r) die(r.error().what());
  if (r->status != WriteStatus::Appended) die(fmt::format("outcome {}", to_string(r->status)));
  std::printf("written\n");
  std::fflush(stdout);
  for (;;) std::this_thread::sleep_for(1s);  // the sealer thread stops at POINT
}

int run_ack(const std::string& name, int point, const std::string& log) {
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) die("open log");
  auto r = RelayReader::open(name);
  if (!r) die(r.error().what());
  g_stop_at = point;
  test_hooks::set_spill_crash_hook(stop_at);
  for (int i = 0; i < 100; ++i) {
    auto n = r->drain(4, [&](const RelayEntry& e) {
      const std::string line = fmt::format("e {} {}\n", e.first_seq, u64_of(e.value));
      if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
        die("log write");
    });
    if (!n) die(n.error().what());
  }
  die("the reader returned without reaching the crash point");
}

int run_take(const std::string& name, int point) {
  auto r = RelayReader::open(name);
  if (!r) die(r.error().what());
  g_stop_at = point;
  test_hooks::set_spill_crash_hook(stop_at);
  auto got = r->take(4);
  die(got ? fmt::format("the take returned {} entries without reaching the crash point",
                        got->size())
          : got.error().what());
}

void pause_when_bound(test_hooks::SpillCrashPoint point) {
  if (point != test_hooks::SpillCrashPoint::DirBound) return;
  std::printf("inside\n");
  std::fflush(stdout);
  ::raise(SIGSTOP);
}

void pause_at(test_hooks::SpillCrashPoint point) {
  if (static_cast<int>(point) != g_stop_at.load()) return;
  std::printf("inside\n");
  std::fflush(stdout);
  ::raise(SIGSTOP);
}

int run_seal_pause(const std::string& name, int point) {
  auto w = RelayWriter::open(name);
  if (!w) die(w.error().what());
  g_stop_at = point;
  test_hooks::set_spill_crash_hook(pause_at);
  auto r = w->write(u64_value(1000), 0ns);
  if (!r) die(r.error().what());
  if (r->status != WriteStatus::Appended) die(fmt::format("outcome {}", to_string(r->status)));
  std::printf("written\n");
  std::fflush(stdout);
  return 0;
}

void pause_once_at(test_hooks::SpillCrashPoint point) {
  if (static_cast<int>(point) != g_stop_at.load()) return;
  g_stop_at = -1;
  std::printf("inside\n");
  std::fflush(stdout);
  ::raise(SIGSTOP);
}

int run_drain_pause(const std::string& name, int point) {
  auto r = RelayReader::open(name);
  if (!r) die(r.error().what());
  g_stop_at = point;
  test_hooks::set_spill_crash_hook(pause_once_at);
  std::string got = "got";
  for (int i = 0; i < 1000; ++i) {
    auto n = r->drain(4, [&](const RelayEntry& e) { got += fmt::format(" {}", u64_of(e.value)); });
    if (!n) die(n.error().what());
    if (*n == 0) {
      std::printf("%s\n", got.c_str());
      std::fflush(stdout);
      return 0;
    }
  }
  die("the relay never emptied");
}

int run_bind(const std::string& name, const std::string& dir) {
  test_hooks::set_spill_crash_hook(pause_when_bound);
  auto w = RelayWriter::create(name, test::small_spill_fifo(dir));
  if (!w) die(w.error().what());
  std::printf("created\n");
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> a(argv + 1, argv + argc);
  if (a.size() == 3 && a[0] == "seal") return run_seal(a[1], std::stoi(a[2]));
  if (a.size() == 3 && a[0] == "seal-bg") return run_seal_background(a[1], std::stoi(a[2]));
  if (a.size() == 4 && a[0] == "ack") return run_ack(a[1], std::stoi(a[2]), a[3]);
  if (a.size() == 3 && (a[0] == "expire" || a[0] == "refuse"))
    return run_take(a[1], std::stoi(a[2]));
  if (a.size() == 3 && a[0] == "bind") return run_bind(a[1], a[2]);
  if (a.size() == 3 && a[0] == "seal-pause") return run_seal_pause(a[1], std::stoi(a[2]));
  if (a.size() == 3 && a[0] == "drain-pause") return run_drain_pause(a[1], std::stoi(a[2]));
  die("usage: see the comment at the top of spill_peer.cpp");
}
