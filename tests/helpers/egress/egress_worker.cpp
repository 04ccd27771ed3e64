// An egress user in its own process, for tests/integration/egress/.
//
//   test_egress_worker crash NAME POINT
//       Runs the operation named by POINT (enqueue, claim, fail, ack,
//       retry-due, reconnect; arguments as egress_crash_test.cpp's history
//       expects) with the test-only crash hook (shm/testing/egress_crash.hpp)
//       installed, which stops it inside the egress mutex: prints "inside" and
//       sleeps until killed.
//   test_egress_worker produce NAME ID COUNT
//       Enqueues COUNT payloads "p<ID>:<i>" (blocking on a full pool), prints "done".
//   test_egress_worker transport NAME SOCKDIR LOSS SEED
//       Attaches as the transport and sends what it claims to SOCKDIR/recv.sock
//       over a lossy link it simulates (drops, duplicates, reordering, at rate
//       LOSS each); acknowledgements from the receiver advance the egress;
//       a record unacknowledged for 5 ms is failed (parked with backoff) and
//       retried. Runs until killed; prints "attached G replayed R" first.
//   test_egress_worker receive SOCKDIR TOTAL PRODUCERS LOSS SEED
//       Receives on SOCKDIR/recv.sock, delivers in sequence order exactly once
//       (duplicates dropped, gaps buffered), acknowledges cumulatively with
//       delayed and lost acks, checks every producer's payloads arrive once
//       and in order, prints "complete delivered=TOTAL duplicates=D" and keeps
//       acknowledging until killed. Any violation: "error: ..." and exit 1.
#include "shm/egress/egress.hpp"
#include "shm/testing/egress_crash.hpp"

#include <fmt/format.h>

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>

namespace {

using namespace shm;
using test_hooks::EgressCrashPoint;

[[noreturn]] void die(const std::string& what) {
  std::printf("error: %s\n", what.c_str());
  std::fflush(stdout);
  std::exit(1);
}

template <class T>
T must(Result<T> r, const char* what) {
  if (!r) die(fmt::format("{}: {}", what, r.error().what()));
  return std::move(*r);
}

std::atomic<EgressCrashPoint> g_stop_at{};

void stop_at(EgressCrashPoint point) {
  if (point != g_stop_at.load()) return;
  std::printf("inside\n");
  std::fflush(stdout);
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

int run_crash(const std::string& name, const std::string& point) {
  Egress e = must(Egress::open(name), "open");
  const std::uint64_t g = must(e.projection(), "projection").generation;
  auto arm = [](EgressCrashPoint at) {
    g_stop_at.store(at);
    test_hooks::set_egress_crash_hook(stop_at);
  };
  std::vector<std::byte> buf;
  const std::byte z[1] = {std::byte{'z'}};
  if (point == "enqueue") {
    arm(EgressCrashPoint::EnqueueAfterRecord);
    (void)e.try_enqueue_at(z, 20);
  } else if (point == "claim") {
    arm(EgressCrashPoint::ClaimMidRecord);
    (void)e.claim(g, buf);
  } else if (point == "fail") {
    arm(EgressCrashPoint::FailMidRecord);
    (void)e.fail(g, 2, 20);
  } else if (point == "ack") {
    arm(EgressCrashPoint::AckMidPrune);
    (void)e.ack(g, 3);
  } else if (point == "retry-due") {
    arm(EgressCrashPoint::RetryDueMidSchedule);
    (void)e.retry_due(g, 1000);
  } else if (point == "reconnect") {
    arm(EgressCrashPoint::ReconnectMidReplay);
    (void)e.reconnect(g + 1);
  } else {
    die("unknown crash point " + point);
  }
  die("the operation returned without reaching crash point " + point);
}

// ---------------------------------------------------------------- the lossy link

sockaddr_un address(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
  return a;
}

int bound_socket(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) die("socket");
  ::unlink(path.c_str());
  const sockaddr_un a = address(path);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) die("bind " + path);
  int size = 1 << 20;
  (void)::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  return fd;
}

int run_produce(const std::string& name, int id, long count) {
  Egress e = must(Egress::open(name), "open");
  for (long i = 0; i < count; ++i) {
    const std::string p = fmt::format("p{}:{}", id, i);
    const auto bytes = std::as_bytes(std::span(p.data(), p.size()));
    for (;;) {
      auto r = must(e.enqueue(bytes, std::chrono::seconds(30)), "enqueue");
      if (r.status == egress::EnqueueStatus::Enqueued) break;
    }
  }
  std::printf("done\n");
  std::fflush(stdout);
  return 0;
}

int run_transport(const std::string& name, const std::string& dir, double loss, unsigned seed) {
  EgressTransport t = must(EgressTransport::open(name), "attach");
  std::printf("attached %llu replayed %llu\n", static_cast<unsigned long long>(t.generation()),
              static_cast<unsigned long long>(t.replayed()));
  std::fflush(stdout);
  const int fd = bound_socket(fmt::format("{}/t{}.sock", dir, ::getpid()));
  const sockaddr_un to = address(dir + "/recv.sock");
  std::mt19937 rng(seed ^ static_cast<unsigned>(::getpid()));
  std::uniform_real_distribution<double> coin(0, 1);
  std::vector<std::byte> buf;
  std::vector<char> held;  // a packet held back to be sent after the next one (reordering)
  std::map<std::uint64_t, std::uint64_t> sent;  // in flight: sequence -> send time
  auto raw_send = [&](const std::vector<char>& pkt) {
    (void)::sendto(fd, pkt.data(), pkt.size(), 0, reinterpret_cast<const sockaddr*>(&to),
                   sizeof to);
  };
  for (;;) {
    // Acknowledgements (cumulative: the receiver's next expected sequence).
    std::uint64_t next_expected = 0, value = 0;
    while (::recv(fd, &value, sizeof value, MSG_DONTWAIT) == static_cast<ssize_t>(sizeof value))
      next_expected = std::max(next_expected, value);
    if (next_expected > 0) {
      auto a = must(t.ack(next_expected - 1), "ack");
      if (a.status == egress::AckStatus::StaleGeneration) return 3;  // fenced
      sent.erase(sent.begin(), sent.lower_bound(next_expected));
    }
    // Retransmission timeout: fail (park with backoff) what is unacknowledged for 5 ms.
    const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    for (auto it = sent.begin(); it != sent.end();) {
      if (static_cast<std::uint64_t>(now) - it->second < 5'000'000) {
        ++it;
        continue;
      }
      auto f = must(t.fail(it->first), "fail");
      if (f.status == egress::FailStatus::Exhausted) die("a record exhausted its budget");
      if (f.status == egress::FailStatus::StaleGeneration) return 3;
      it = sent.erase(it);
    }
    auto c = must(t.claim(buf, std::chrono::milliseconds(2)), "claim");
    if (c.status == egress::ClaimStatus::StaleGeneration) return 3;
    if (c.status != egress::ClaimStatus::Claimed) {
      if (!held.empty()) {
        raw_send(held);
        held.clear();
      }
      continue;
    }
    sent[c.envelope.sequence] = static_cast<std::uint64_t>(now);
    std::vector<char> pkt(8 + buf.size());
    std::memcpy(pkt.data(), &c.envelope.sequence, 8);
    std::memcpy(pkt.data() + 8, buf.data(), buf.size());
    const double r = coin(rng);
    if (r < loss) continue;  // dropped
    raw_send(pkt);
    if (r < 2 * loss) raw_send(pkt);  // duplicated
    if (r < 3 * loss && held.empty()) {
      held = pkt;  // also sent again later, out of order
    } else if (!held.empty()) {
      raw_send(held);
      held.clear();
    }
  }
}

int run_receive(const std::string& dir, long total, int producers, double loss, unsigned seed) {
  const int fd = bound_socket(dir + "/recv.sock");
  std::printf("listening\n");
  std::fflush(stdout);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> coin(0, 1);
  std::uint64_t expected = 0, duplicates = 0;
  std::map<std::uint64_t, std::string> buffered;
  std::vector<long> last(static_cast<std::size_t>(producers), -1);
  sockaddr_un from{};
  socklen_t from_len = 0;
  bool have_peer = false, complete = false;
  int unacked = 0;
  auto deliver = [&](const std::string& payload) {
    int id = -1;
    long index = -1;
    if (std::sscanf(payload.c_str(), "p%d:%ld", &id, &index) != 2 || id < 0 || id >= producers)
      die("bad payload '" + payload + "'");
    if (index != last[static_cast<std::size_t>(id)] + 1)
      die(fmt::format("producer {}: payload {} after {} (lost, repeated or reordered)", id, index,
                      last[static_cast<std::size_t>(id)]));
    last[static_cast<std::size_t>(id)] = index;
    ++expected;
  };
  auto send_ack = [&] {
    unacked = 0;
    if (!have_peer || coin(rng) < loss) return;  // a lost ack
    (void)::sendto(fd, &expected, sizeof expected, 0, reinterpret_cast<const sockaddr*>(&from),
                   from_len);
  };
  std::vector<char> pkt(4096);
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 2) <= 0) {
      send_ack();  // delayed ack: sent when the link goes idle
      continue;
    }
    sockaddr_un src{};
    socklen_t src_len = sizeof src;
    const ssize_t n =
        ::recvfrom(fd, pkt.data(), pkt.size(), 0, reinterpret_cast<sockaddr*>(&src), &src_len);
    if (n < 8) continue;
    from = src;
    from_len = src_len;
    have_peer = true;
    std::uint64_t seq = 0;
    std::memcpy(&seq, pkt.data(), 8);
    std::string payload(pkt.data() + 8, static_cast<std::size_t>(n - 8));
    if (seq < expected || buffered.count(seq) != 0) {
      ++duplicates;
    } else if (seq > expected) {
      buffered.emplace(seq, std::move(payload));
    } else {
      deliver(payload);
      for (auto it = buffered.begin(); it != buffered.end() && it->first == expected;
           it = buffered.erase(it))
        deliver(it->second);
    }
    if (++unacked >= 4) send_ack();  // delayed ack: one per four packets
    if (!complete && expected == static_cast<std::uint64_t>(total)) {
      complete = true;
      for (int i = 0; i < producers; ++i)
        if (last[static_cast<std::size_t>(i)] + 1 != total / producers)
          die(fmt::format("producer {}: {} payloads delivered, expected {}", i,
                          last[static_cast<std::size_t>(i)] + 1, total / producers));
      std::printf("complete delivered=%ld duplicates=%llu\n", total,
                  static_cast<unsigned long long>(duplicates));
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "crash" && argc == 4) return run_crash(argv[2], argv[3]);
  if (mode == "produce" && argc == 5)
    return run_produce(argv[2], std::atoi(argv[3]), std::atol(argv[4]));
  if (mode == "transport" && argc == 6)
    return run_transport(argv[2], argv[3], std::atof(argv[4]),
                         static_cast<unsigned>(std::atol(argv[5])));
  if (mode == "receive" && argc == 7)
    return run_receive(argv[2], std::atol(argv[3]), std::atoi(argv[4]), std::atof(argv[5]),
                       static_cast<unsigned>(std::atol(argv[6])));
  die("usage: test_egress_worker crash NAME POINT | produce NAME ID COUNT | transport NAME DIR "
      "LOSS SEED | receive DIR TOTAL PRODUCERS LOSS SEED");
}
