// egress_transport: an egress segment drained by a transport process over a
// Unix datagram socket to a receiver process, with a lossy link and a
// transport that is killed -9 and replaced.
//
//   egress_transport demo [--count N] [--loss P] [--kill-every K] [--seed S] [--keep]
//
// The parent creates the egress "egress-demo", forks a receiver, a producer
// (N payloads) and a transport; every K acknowledged payloads it kills the
// transport (SIGKILL) and starts another (which reconnects and replays the
// dead one's window). The link drops and duplicates data packets and loses
// acks with probability P each. The receiver delivers each sequence once, in
// order, checks its payload, drops the duplicates and replays, and reports to
// the parent when it has all N. At the end the parent prints what was
// retried, parked and exhausted, and exits 0 when every payload was
// acknowledged and the receiver got every one once, in order, intact. The
// egress is removed at the end unless --keep is given.
#include <shm/egress/egress.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <thread>

namespace {

using namespace std::chrono_literals;
constexpr const char* kName = "egress-demo";

sockaddr_un address(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
  return a;
}

int bound(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ::unlink(path.c_str());
  const sockaddr_un a = address(path);
  if (fd < 0 || ::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) std::_Exit(2);
  return fd;
}

std::string payload_of(std::uint64_t i) {
  return fmt::format("payload {}", i);
}

// What the receiver reports (through a pipe) once it has every payload.
struct Receipt {
  std::uint64_t delivered = 0;   // sequences delivered, each once, in order
  std::uint64_t duplicates = 0;  // packets of a sequence it had already
  std::uint64_t corrupt = 0;     // packets whose payload is not the producer's
};

// Delivers in sequence order, exactly once; acknowledges cumulatively (next
// expected). Writes its Receipt to `report` when all `count` are delivered,
// then keeps acknowledging (acks get lost) until it is killed.
[[noreturn]] void receiver(const std::string& dir, double loss, unsigned seed, std::uint64_t count,
                           int report) {
  const int fd = bound(dir + "/recv.sock");
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> coin(0, 1);
  std::uint64_t expected = 0;
  std::map<std::uint64_t, bool> early;
  Receipt receipt;
  bool reported = false;
  char pkt[256];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    sockaddr_un from{};
    socklen_t len = sizeof from;
    const ssize_t n = ::recvfrom(fd, pkt, sizeof pkt, 0, reinterpret_cast<sockaddr*>(&from), &len);
    if (n < 8) continue;
    std::uint64_t seq = 0;
    std::memcpy(&seq, pkt, 8);
    const std::string expect = payload_of(seq);
    if (static_cast<std::size_t>(n) - 8 != expect.size() ||
        std::memcmp(pkt + 8, expect.data(), expect.size()) != 0) {
      ++receipt.corrupt;
    } else if (seq < expected || early.contains(seq)) {
      ++receipt.duplicates;
    } else {
      if (seq > expected) early[seq] = true;
      if (seq == expected)
        for (++expected; early.erase(expected) == 1;) ++expected;
    }
    if (!reported && expected >= count) {
      receipt.delivered = expected;
      reported = ::write(report, &receipt, sizeof receipt) == static_cast<ssize_t>(sizeof receipt);
    }
    if (coin(rng) >= loss)
      (void)::sendto(fd, &expected, sizeof expected, 0, reinterpret_cast<sockaddr*>(&from), len);
  }
}

[[noreturn]] void producer(std::uint64_t count) {
  auto e = shm::Egress::open(kName);
  if (!e) std::_Exit(2);
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::string p = payload_of(i);
    for (;;) {
      auto r = e->enqueue(std::as_bytes(std::span(p.data(), p.size())), 10s);
      if (!r) std::_Exit(2);
      if (r->status == shm::egress::EnqueueStatus::Enqueued) break;
    }
  }
  std::_Exit(0);
}

[[noreturn]] void transport(const std::string& dir, double loss, unsigned seed) {
  auto t = shm::EgressTransport::open(kName);
  if (!t) std::_Exit(2);
  std::printf("transport %d: generation %llu, replayed %llu\n", ::getpid(),
              static_cast<unsigned long long>(t->generation()),
              static_cast<unsigned long long>(t->replayed()));
  std::fflush(stdout);
  const int fd = bound(fmt::format("{}/t{}.sock", dir, ::getpid()));
  const sockaddr_un to = address(dir + "/recv.sock");
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> coin(0, 1);
  std::map<std::uint64_t, std::chrono::steady_clock::time_point> sent;
  std::vector<std::byte> buf;
  for (;;) {
    std::uint64_t next = 0, v = 0;
    while (::recv(fd, &v, sizeof v, MSG_DONTWAIT) == static_cast<ssize_t>(sizeof v))
      next = std::max(next, v);
    if (next > 0) {
      (void)t->ack(next - 1);
      sent.erase(sent.begin(), sent.lower_bound(next));
    }
    const auto now = std::chrono::steady_clock::now();
    for (auto it = sent.begin(); it != sent.end();)
      if (now - it->second > 5ms) {
        (void)t->fail(it->first);  // parked with backoff, then claimed again
        it = sent.erase(it);
      } else {
        ++it;
      }
    auto c = t->claim(buf, 2ms);
    if (!c || c->status == shm::egress::ClaimStatus::StaleGeneration) std::_Exit(3);
    if (c->status != shm::egress::ClaimStatus::Claimed) continue;
    sent[c->envelope.sequence] = now;
    char pkt[256];
    std::memcpy(pkt, &c->envelope.sequence, 8);
    const std::size_t n = std::min(buf.size(), sizeof pkt - 8);
    std::memcpy(pkt + 8, buf.data(), n);
    const double r = coin(rng);
    if (r < loss) continue;  // dropped
    for (int copies = r < 2 * loss ? 2 : 1; copies > 0; --copies)
      (void)::sendto(fd, pkt, 8 + n, 0, reinterpret_cast<const sockaddr*>(&to), sizeof to);
  }
}

template <class F>
pid_t spawn(F&& f) {
  const pid_t pid = ::fork();
  if (pid == 0) f();
  return pid;
}

int demo(std::uint64_t count, double loss, std::uint64_t kill_every, unsigned seed, bool keep) {
  shm::EgressParams params;
  params.max_payloads = 1024;
  params.slot_bytes = 64;
  params.inflight_limit = 64;
  params.retry_budget = 1000;
  params.retry_base = 1ms;
  params.retry_ceiling = 20ms;
  (void)shm::Segment::unlink(kName);
  auto e = shm::Egress::create(kName, params);
  if (!e) return std::fprintf(stderr, "%s\n", e.error().what().c_str()), 1;
  char tmpl[] = "/tmp/egress-demo-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  int report[2];
  if (::pipe2(report, O_CLOEXEC | O_NONBLOCK) != 0) return std::perror("pipe2"), 1;
  const pid_t recv = spawn([&] { receiver(dir, loss, seed, count, report[1]); });
  ::close(report[1]);
  const pid_t prod = spawn([&] { producer(count); });
  unsigned incarnation = 0;
  pid_t tr = spawn([&] { transport(dir, loss, seed + ++incarnation); });
  std::uint64_t next_kill = kill_every, kills = 0;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  bool done = false;
  while (!done && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(2ms);
    const auto p = e->snapshot();
    if (!p.consistent || !p.acked_through) continue;
    const std::uint64_t acked = *p.acked_through + 1;
    done = acked == count;
    if (!done && kill_every != 0 && acked >= next_kill) {
      ::kill(tr, SIGKILL);
      ::waitpid(tr, nullptr, 0);
      std::printf("killed transport %d (SIGKILL) at %llu of %llu acknowledged\n", tr,
                  static_cast<unsigned long long>(acked), static_cast<unsigned long long>(count));
      std::fflush(stdout);
      ++kills;
      next_kill += kill_every;
      ++incarnation;
      tr = spawn([&] { transport(dir, loss, seed + incarnation); });
    }
  }
  // The receiver reported before it acknowledged the last payload; wait a
  // little for its report all the same.
  Receipt receipt;
  bool have_receipt = false;
  if (done) {
    pollfd p{report[0], POLLIN, 0};
    have_receipt = ::poll(&p, 1, 5000) == 1 && ::read(report[0], &receipt, sizeof receipt) ==
                                                   static_cast<ssize_t>(sizeof receipt);
  }
  ::close(report[0]);
  for (pid_t pid : {tr, recv}) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  int status = 0;
  ::waitpid(prod, &status, 0);
  const auto& s = e->state().control->stats;
  auto rd = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  const auto p = e->projection();
  std::printf(
      "%s: %llu payloads, %llu acknowledged; transport killed %llu times, %llu reconnects\n"
      "failed and parked %llu, retried %llu, exhausted %llu, stale calls %llu\n",
      done ? "complete" : "INCOMPLETE", static_cast<unsigned long long>(count),
      static_cast<unsigned long long>(p && p->acked_through ? *p->acked_through + 1 : 0),
      static_cast<unsigned long long>(kills), static_cast<unsigned long long>(rd(s.reconnects)),
      static_cast<unsigned long long>(rd(s.failures)),
      static_cast<unsigned long long>(rd(s.retries)),
      static_cast<unsigned long long>(rd(s.exhausted)),
      static_cast<unsigned long long>(rd(s.stale)));
  const bool received = have_receipt && receipt.delivered == count && receipt.corrupt == 0;
  if (have_receipt)
    std::printf(
        "receiver: %llu of %llu payloads delivered, each once and in order, %llu corrupt; "
        "%llu duplicate packets dropped\n",
        static_cast<unsigned long long>(receipt.delivered), static_cast<unsigned long long>(count),
        static_cast<unsigned long long>(receipt.corrupt),
        static_cast<unsigned long long>(receipt.duplicates));
  else
    std::printf("receiver: no report (it did not get all %llu payloads)\n",
                static_cast<unsigned long long>(count));
  if (!keep) (void)e->segment().unlink();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return done && received && p && p->terminal == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0
             ? 0
             : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"An egress drained over a lossy Unix datagram link by a transport that dies"};
  auto* d = app.add_subcommand("demo", "producer, transport (killed -9 and replaced), receiver");
  std::uint64_t count = 10'000, kill_every = 2'000;
  double loss = 0.02;
  unsigned seed = 1;
  d->add_option("--count", count, "payloads");
  d->add_option("--loss", loss, "drop / duplicate / lost-ack rate of the link")
      ->check(CLI::Range(0.0, 0.3));
  d->add_option("--kill-every", kill_every, "kill the transport every K acknowledged (0: never)");
  d->add_option("--seed", seed, "random seed");
  bool keep = false;
  d->add_flag("--keep", keep, "leave the egress in place at the end (for shmctl inspect)");
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  return demo(count, loss, kill_every, seed, keep);
}
