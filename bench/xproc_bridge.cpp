// shm-bridge against the plain NATS C client (issue 16's benchmark; issue 36
// raised its throughput target from 0.8x to 1.0x): the same
// payloads through the same nats-server, cases interleaved round by round
// (harness Comparison), ratios taken inside a round and summarised as median
// (p10–p90) over rounds.
//
//  bridge   producer process -> SpscRing A (root A) -> `shm-bridge export`
//           -> JetStream -> `shm-bridge import` -> SpscRing B (root B) ->
//           consumer process. The two bridges are the real daemon (the built
//           `shm-bridge` program), with their default window (256) and fetch
//           batch (256) unless --window / --batch say otherwise. Two hosts are
//           two LIBSHM_ROOT directories.
//  plain    publisher process: js_PublishAsync with a message id per message,
//           asynchronous acknowledgements, at most --window (256) in flight
//           (PublishAsync.MaxPending), js_PublishAsyncComplete at the end;
//           consumer process: a durable pull consumer configured like the
//           import bridge's (explicit acks, MaxAckPending 4 x batch),
//           natsSubscription_Fetch of --batch (256) messages, 500 ms, and
//           natsMsg_Ack of each message.
//
// Per payload size (64 B and 1 KiB by default), each case run has two phases
// on its own fresh stream and subject (created before, deleted after the run;
// the bridges and rings are new for every run too):
//  - throughput: N messages (--messages) written as fast as the path takes
//    them; msg/s = N / (last receive - first send), both CLOCK_MONOTONIC.
//  - latency: paced at --rate msg/s (absolute schedule, clock_nanosleep); the
//    send time (CLOCK_MONOTONIC, same host) travels in the payload; one-way
//    latency p50 / p99 over --latency-messages messages, after --batch
//    warm-up messages and followed by 2 x --batch unmeasured ones (no
//    measured message waits in a fetch for a batch that stops filling when
//    the run ends).
//  - CPU time per message of the throughput burst (from the first send to the
//    burst's last receive, /proc/PID/stat of every process, all threads) of
//    the processes outside the server (producer, both bridges and consumer;
//    or publisher and consumer, the NATS client's threads included) and of
//    nats-server. Each run's split per process is printed with the progress
//    lines (stderr). With every process on the same two CPUs, throughput
//    follows the total CPU time per message.
//
// Every message carries its sequence number in its first and last 8 bytes and
// is checked at the receiver (size, order, no gap, no duplicate); with --smoke
// every byte in between is checked too, so a wrong transport cannot win.
//
// Processes and CPUs (2 CPUs; the bridge case has 4 processes plus the
// server, so not everything can have a CPU of its own): host A's processes
// (producer or publisher, and the export bridge) are pinned to the first CPU
// of --cpus, host B's (consumer or pull consumer, and the import bridge) to
// the second, in both cases alike. nats-server (a Go program with its own
// threads) is not pinned: it runs wherever the scheduler finds room. This
// harness process is not pinned either; it only starts, waits and reaps.
// The harness starts its own `nats-server -js` on a free loopback port with a
// store in a fresh /tmp directory, and kills it (SIGKILL, and PR_SET_PDEATHSIG
// if the harness itself dies) and removes the store at exit (or, after the
// harness was killed, at the start of the next run).
//
// The harness process never calls the NATS client itself (its stream
// creation and deletion run in short-lived forked children), so the peers are
// forked from a process without the client's threads.
#include "harness/harness.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"

#include <fmt/format.h>
#include <nats/nats.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

namespace {

using namespace shm::bench;
using namespace std::chrono_literals;

constexpr std::string_view kUsage =
    R"(xproc_bridge: ring -> shm-bridge -> NATS JetStream -> shm-bridge -> ring, against a plain
NATS C client publisher and pull consumer through the same server

usage: xproc_bridge [--quick | --smoke] [options]

  --quick              3 rounds, 50000 messages per throughput run, 2000 latency samples
                       (about 30 s on 2 CPUs)
  (default)            7 rounds, 200000 messages per throughput run, 5000 latency samples
                       (about 27 s a round on 2 CPUs: 3 to 4 minutes)
  --smoke              1 round of tiny runs; every byte checked, asserts nothing about speed
  --reps N             rounds (each round runs every case once, interleaved)
  --messages N         messages per throughput run
  --latency-messages N measured messages per latency run
  --rate R             messages per second of the latency runs (default 5000)
  --sizes LIST         payload sizes in bytes (default 64,1024; each in [24, 4096])
  --window W           publishes in flight: the export bridge's --window and the plain
                       publisher's PublishAsync.MaxPending (default 256, the bridge's)
  --batch B            messages per fetch: the import bridge's --batch and the plain
                       consumer's (default 256, the bridge's)
  --cpus A,B           host A's processes on A, host B's on B (default: first two allowed)
  --bridge PATH        the shm-bridge program (default: $SHM_BRIDGE, else next to this program)
  --nats-server PATH   (default: $NATS_SERVER, else the one found at configure time, else PATH)
  --csv FILE           also write every per-round value to FILE
  --check-targets      exit 3 when a target ratio is missed
)";

constexpr std::uint64_t kRingBytes = 1u << 20;  // rings A and B
constexpr std::size_t kMinSize = 24;            // sequence, send time, sequence
constexpr std::size_t kMaxSize = 4096;          // the bridge's default --max-message
constexpr std::int64_t kFetchTimeoutMs = 500;   // the import bridge's
constexpr auto kStall = 30s;                    // no progress for this long: the run failed

struct Options {
  RunOptions run;
  std::uint64_t messages = 200'000;
  std::uint64_t latency_messages = 5'000;
  double rate = 5'000;
  std::vector<std::size_t> sizes{64, 1024};
  std::uint32_t window = 256;
  std::uint32_t batch = 256;
  CpuPair cpus;
  std::string bridge;
  std::string nats_server;

  [[nodiscard]] std::uint64_t warmup_messages() const { return batch; }
  [[nodiscard]] std::uint64_t tail_messages() const { return 2ull * batch; }
  [[nodiscard]] std::uint64_t paced_messages() const {
    return warmup_messages() + latency_messages + tail_messages();
  }
  [[nodiscard]] std::uint64_t total_messages() const { return messages + paced_messages(); }
  // A whole run's bound (the peers also fail after kStall without progress).
  [[nodiscard]] std::chrono::milliseconds run_limit() const {
    const double paced_s = static_cast<double>(paced_messages()) / rate;
    return std::chrono::milliseconds(
        120'000 + static_cast<std::int64_t>(static_cast<double>(messages) / 2.0 + paced_s * 2e3));
  }
};

std::string program_dir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

std::string find_in_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  dirs += ":/usr/sbin:/usr/local/sbin";
  std::stringstream s(dirs);
  for (std::string dir; std::getline(s, dir, ':');) {
    const std::string candidate = dir + "/" + name;
    if (!dir.empty() && ::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

std::string env_or(const char* name, std::string fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : std::move(fallback);
}

Options parse_options(int argc, char** argv) {
  Args args(argc, argv);
  Options o;
  o.run = parse_run_options(args, 7, 3);
  if (o.run.quick) {
    o.messages = 50'000;
    o.latency_messages = 2'000;
  }
  if (o.run.smoke) {
    o.messages = 2'000;
    o.latency_messages = 200;
  }
  o.messages =
      static_cast<std::uint64_t>(args.double_value("--messages", static_cast<double>(o.messages)));
  o.latency_messages = static_cast<std::uint64_t>(
      args.double_value("--latency-messages", static_cast<double>(o.latency_messages)));
  o.rate = args.double_value("--rate", o.rate);
  o.sizes = parse_sizes(args.value("--sizes", "64,1024"));
  o.window = static_cast<std::uint32_t>(args.int_value("--window", static_cast<int>(o.window)));
  o.batch = static_cast<std::uint32_t>(args.int_value("--batch", static_cast<int>(o.batch)));
  o.cpus = choose_cpus(args.value("--cpus", ""));
  o.bridge = args.value("--bridge", env_or("SHM_BRIDGE", program_dir() + "/shm-bridge"));
#ifdef SHM_NATS_SERVER
  const std::string configured = SHM_NATS_SERVER;
#else
  const std::string configured;
#endif
  o.nats_server = args.value(
      "--nats-server",
      env_or("NATS_SERVER", configured.empty() ? find_in_path("nats-server") : configured));
  args.finish(kUsage);
  if (o.messages < 1 || o.messages > (1ull << 40)) throw BenchError("--messages must be positive");
  if (o.latency_messages < 1) throw BenchError("--latency-messages must be positive");
  if (!(o.rate >= 1 && o.rate <= 1e6)) throw BenchError("--rate must be in [1, 1000000]");
  if (o.window < 1 || o.window > 65536) throw BenchError("--window must be in [1, 65536]");
  if (o.batch < 1 || o.batch > 4096) throw BenchError("--batch must be in [1, 4096]");
  for (std::size_t s : o.sizes)
    if (s < kMinSize || s > kMaxSize)
      throw BenchError(fmt::format("payload size {} outside [{}, {}]", s, kMinSize, kMaxSize));
  if (::access(o.bridge.c_str(), X_OK) != 0)
    throw BenchError(
        fmt::format("the shm-bridge program is not at {} (build the shm-bridge "
                    "target, or give its path with --bridge PATH or SHM_BRIDGE)",
                    o.bridge));
  if (o.nats_server.empty() || ::access(o.nats_server.c_str(), X_OK) != 0)
    throw BenchError(
        fmt::format("nats-server not found{} (scripts/setup.sh installs the "
                    "nats-server package; or give --nats-server PATH)",
                    o.nats_server.empty() ? "" : " at " + o.nats_server));
  return o;
}

// ---------------------------------------------------------------- payloads

// [0, 8) sequence, [8, 16) send time (CLOCK_MONOTONIC ns), [size - 8, size)
// sequence; with `full`, every byte in between is a function of the sequence.
void stamp(std::span<std::byte> m, std::uint64_t seq, bool full) noexcept {
  if (m.size() < kMinSize) return;  // refused by parse_options (and tells GCC the bounds)
  std::memcpy(m.data(), &seq, 8);
  std::memcpy(m.data() + m.size() - 8, &seq, 8);
  if (full)
    for (std::size_t i = 16; i < m.size() - 8; ++i) m[i] = static_cast<std::byte>(seq * 131 + i);
  const std::uint64_t sent = now_ns();
  std::memcpy(m.data() + 8, &sent, 8);
}

// Checks a received message; returns its send time.
std::uint64_t check(std::span<const std::byte> m, std::size_t size, std::uint64_t expected,
                    bool full) {
  if (m.size() != size)
    throw BenchError(
        fmt::format("message {} arrived with {} bytes, sent with {}", expected, m.size(), size));
  std::uint64_t first = 0, last = 0, sent = 0;
  std::memcpy(&first, m.data(), 8);
  std::memcpy(&last, m.data() + m.size() - 8, 8);
  std::memcpy(&sent, m.data() + 8, 8);
  bool ok = first == expected && last == expected;
  for (std::size_t i = 16; full && ok && i < m.size() - 8; ++i)
    ok = m[i] == static_cast<std::byte>(expected * 131 + i);
  if (!ok)
    throw BenchError(
        fmt::format("message {} of {} bytes arrived corrupt or out of order (got "
                    "sequence {}, last word {})",
                    expected, m.size(), first, last));
  return sent;
}

// ---------------------------------------------------------------- shared control

// User + system CPU time of a running process (/proc/PID/stat, clock ticks).
std::uint64_t process_cpu_ns(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto paren = stat.rfind(')');
  if (paren == std::string::npos) throw BenchError(fmt::format("/proc/{}/stat unreadable", pid));
  std::stringstream fields(stat.substr(paren + 2));
  std::string field;
  std::uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {  // field 3 is the state
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return (utime + stime) * 1'000'000'000ull / static_cast<std::uint64_t>(::sysconf(_SC_CLK_TCK));
}

// The processes of a path whose CPU time is measured (pid 0: not in the case).
enum Process : std::uint8_t { kSender, kExport, kServer, kImport, kReceiver, kProcesses };

// In a SharedBlock, one per case run. Written by the peers, read by the
// harness after it reaped them (waitpid orders it: relaxed is enough).
struct Control {
  StartGate gate;
  std::atomic<std::uint32_t> failed{0};           // a peer gave up: the other stops too
  std::atomic<std::uint32_t> throughput_done{0};  // the receiver has all N: pacing starts
  std::atomic<std::uint64_t> first_send_ns{0};
  std::atomic<std::uint64_t> last_receive_ns{0};
  std::atomic<std::uint64_t> received{0};
  std::atomic<std::uint64_t> p50_ns{0};
  std::atomic<std::uint64_t> p99_ns{0};
  // CPU time (/proc/PID/stat: all threads) of each process of the path at
  // the first send and when the burst's last message arrived.
  std::array<pid_t, kProcesses> pids{};
  std::array<std::atomic<std::uint64_t>, kProcesses> cpu_start{};
  std::array<std::atomic<std::uint64_t>, kProcesses> cpu_end{};
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

void snapshot_cpu(const Control& ctl, std::array<std::atomic<std::uint64_t>, kProcesses>& into) {
  for (std::size_t i = 0; i < kProcesses; ++i)
    if (ctl.pids[i] != 0) into[i].store(process_cpu_ns(ctl.pids[i]), std::memory_order_relaxed);
}

// CPU µs per message of the burst, of one process.
double cpu_us_per_message(const Control& ctl, Process p, std::uint64_t messages) {
  const auto ns = ctl.cpu_end[p].load(std::memory_order_relaxed) -
                  ctl.cpu_start[p].load(std::memory_order_relaxed);
  return static_cast<double>(ns) / 1e3 / static_cast<double>(messages);
}

// The receiver's side of both phases, whatever the transport: the transport's
// loop calls on_message() with each message received, in order, and on_idle()
// after a poll that brought none, until finished().
class Receiver {
 public:
  Receiver(const Options& o, Control& ctl, std::size_t size)
      : o_(o), ctl_(ctl), size_(size), last_progress_(now_ns()) {
    latencies_.reserve(o.latency_messages);
    ctl.pids[kReceiver] = ::getpid();  // before the start gate, which publishes it
  }

  // Handles one received message.
  void on_message(std::span<const std::byte> m) {
    const std::uint64_t now = now_ns();
    const std::uint64_t sent = check(m, size_, expected_, o_.run.smoke);
    const std::uint64_t paced_index = expected_ - o_.messages;  // wraps while < messages
    if (expected_ >= o_.messages && paced_index >= o_.warmup_messages() &&
        paced_index < o_.warmup_messages() + o_.latency_messages)
      latencies_.push_back(static_cast<double>(now - sent));
    ++expected_;
    last_progress_ = now;
    if (expected_ == o_.messages) {
      ctl_.last_receive_ns.store(now, std::memory_order_relaxed);
      snapshot_cpu(ctl_, ctl_.cpu_end);
      // release: the sender waits for it before pacing.
      ctl_.throughput_done.store(1, std::memory_order_release);
    }
    if ((expected_ & 1023) == 0) ctl_.received.store(expected_, std::memory_order_relaxed);
  }

  // After a poll that brought nothing: throws when the run is stuck.
  void on_idle() const {
    if (ctl_.failed.load(std::memory_order_relaxed) != 0) throw BenchError("the sender failed");
    if (now_ns() - last_progress_ >
        static_cast<std::uint64_t>(std::chrono::nanoseconds(kStall).count()))
      throw BenchError(fmt::format("no message for {} s after {} of {} arrived",
                                   std::chrono::seconds(kStall).count(), expected_,
                                   o_.total_messages()));
  }

  [[nodiscard]] bool finished() const { return expected_ == o_.total_messages(); }

  void publish_results() {
    ctl_.received.store(expected_, std::memory_order_relaxed);
    const Summary s = summarize(std::move(latencies_));
    ctl_.p50_ns.store(static_cast<std::uint64_t>(s.p50), std::memory_order_relaxed);
    ctl_.p99_ns.store(static_cast<std::uint64_t>(s.p99), std::memory_order_relaxed);
  }

 private:
  const Options& o_;
  Control& ctl_;
  std::size_t size_;
  std::uint64_t expected_ = 0;
  std::uint64_t last_progress_;
  std::vector<double> latencies_;
};

// The sender's side of both phases: send(buf) sends one message (throws when
// it cannot), flush() waits until everything sent was accepted.
template <class Send, class Flush>
void send_phases(const Options& o, Control& ctl, std::size_t size, Send&& send, Flush&& flush) {
  std::vector<std::byte> buf(size);
  stamp(buf, 0, true);
  ctl.pids[kSender] = ::getpid();
  if (!ctl.gate.arrive_and_wait(2, kStall)) throw BenchError("start gate timed out");
  snapshot_cpu(ctl, ctl.cpu_start);
  ctl.first_send_ns.store(now_ns(), std::memory_order_relaxed);
  std::uint64_t seq = 0;
  for (; seq < o.messages; ++seq) {
    stamp(buf, seq, o.run.smoke);
    send(std::span<const std::byte>(buf));
  }
  flush();
  // The paced phase starts once the receiver has the whole burst.
  const Deadline deadline(kStall + std::chrono::milliseconds(o.run_limit()));
  // acquire: pairs with the receiver's release store.
  while (ctl.throughput_done.load(std::memory_order_acquire) == 0) {
    if (ctl.failed.load(std::memory_order_relaxed) != 0) throw BenchError("the receiver failed");
    if (deadline.expired()) throw BenchError("the receiver never got the whole burst");
    std::this_thread::sleep_for(1ms);
  }
  const auto period = static_cast<std::uint64_t>(1e9 / o.rate);
  const std::uint64_t start = now_ns() + 1'000'000;
  for (std::uint64_t k = 0; k < o.paced_messages(); ++k, ++seq) {
    const std::uint64_t at = start + k * period;
    timespec ts{static_cast<time_t>(at / 1'000'000'000), static_cast<long>(at % 1'000'000'000)};
    while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
    }
    stamp(buf, seq, o.run.smoke);
    send(std::span<const std::byte>(buf));
  }
  flush();
}

// Runs body() in a peer; flags the run as failed when it throws (the other
// peer then stops waiting at once instead of at its stall limit).
int flagged(Control& ctl, const std::function<void()>& body) {
  try {
    body();
    return 0;
  } catch (...) {
    ctl.failed.store(1, std::memory_order_relaxed);
    throw;
  }
}

// ---------------------------------------------------------------- processes

// Peer::wait(timeout), without its polling (a wake-up every 200 µs costs
// this process 5-10 % of a CPU, taken from the cases): sleeps in poll(2) on a
// pidfd until the peer exits or the timeout passes, then reaps it.
int wait_quietly(Peer& peer, std::chrono::milliseconds timeout) {
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, peer.pid(), 0));
  if (fd < 0) return peer.wait(timeout);
  const Deadline deadline(timeout);
  pollfd p{fd, POLLIN, 0};
  for (;;) {
    const int r = ::poll(&p, 1, 1000);
    if (r > 0 || deadline.expired() || (r < 0 && errno != EINTR)) break;
  }
  ::close(fd);
  return peer.wait(deadline.expired() ? 0ms : 1000ms);  // 0: kills it (timed out)
}

constexpr std::string_view kDirPrefix = "libshm-bench-bridge-";

// A temporary directory, removed with its contents; its name carries the pid
// of the harness, so that a later run can remove what a killed one left.
class TempDir {
 public:
  explicit TempDir(const std::string& base) {
    std::string tmpl = fmt::format("{}/{}{}-XXXXXX", base, kDirPrefix, ::getpid());
    if (::mkdtemp(tmpl.data()) == nullptr)
      throw BenchError(fmt::format("mkdtemp {}: {}", tmpl, std::strerror(errno)));
    path_ = std::move(tmpl);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string tail_of_file(const std::string& path, std::size_t max = 2000) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  std::string all = s.str();
  return all.size() > max ? "..." + all.substr(all.size() - max) : all;
}

// A program run by fork + exec: stdout to a pipe (read for its ready line) or
// to the log, stderr to the log file. Killed (SIGKILL) and reaped on
// destruction if still running, and by the kernel if the harness dies first.
class Daemon {
 public:
  Daemon(std::string what, const std::vector<std::string>& argv, std::string log,
         std::optional<int> cpu, bool pipe_stdout)
      : what_(std::move(what)), log_(std::move(log)) {
    int fds[2] = {-1, -1};
    if (pipe_stdout && ::pipe2(fds, O_CLOEXEC) != 0)
      throw BenchError(fmt::format("pipe: {}", std::strerror(errno)));
    const int log_fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (log_fd < 0) throw BenchError(fmt::format("{}: {}", log_, std::strerror(errno)));
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    std::fflush(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) throw BenchError(fmt::format("fork: {}", std::strerror(errno)));
    if (pid == 0) {
      (void)::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      if (cpu) (void)pin_to_cpu(*cpu);
      ::dup2(pipe_stdout ? fds[1] : log_fd, STDOUT_FILENO);
      ::dup2(log_fd, STDERR_FILENO);
      ::execv(args[0], args.data());
      std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
      ::_exit(127);
    }
    pid_ = pid;
    ::close(log_fd);
    if (pipe_stdout) {
      ::close(fds[1]);
      out_ = fds[0];
    }
  }
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;
  ~Daemon() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      reap(true);
    }
    if (out_ >= 0) ::close(out_);
  }

  // Reads stdout until a line equal to `line`; throws (with the log's tail)
  // when the program exits or the timeout passes first.
  void wait_for_line(std::string_view line, std::chrono::milliseconds timeout) {
    const Deadline deadline(timeout);
    std::string seen;
    char chunk[256];
    while (!deadline.expired()) {
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, 50) > 0) {
        const ssize_t n = ::read(out_, chunk, sizeof chunk);
        if (n > 0) {
          seen.append(chunk, static_cast<std::size_t>(n));
          if (seen.find(std::string(line) + "\n") != std::string::npos) return;
          continue;
        }
        reap(true);
        throw failure(fmt::format("exited before printing '{}' ({})", line, status_));
      }
    }
    throw failure(fmt::format("printed no '{}' within {} ms", line, timeout.count()));
  }

  // Polls the log until it contains `text`.
  void wait_for_log(std::string_view text, std::chrono::milliseconds timeout) {
    const Deadline deadline(timeout);
    while (!deadline.expired()) {
      if (tail_of_file(log_, 1u << 20).find(text) != std::string::npos) return;
      if (!running()) throw failure(fmt::format("exited ({})", status_));
      std::this_thread::sleep_for(20ms);
    }
    throw failure(fmt::format("did not log '{}' within {} ms", text, timeout.count()));
  }

  // SIGTERM, then the exit code (SIGKILL after `timeout`: then a failure).
  void stop_cleanly(std::chrono::milliseconds timeout) {
    if (pid_ <= 0) throw failure(fmt::format("had already exited ({})", status_));
    ::kill(pid_, SIGTERM);
    const Deadline deadline(timeout);
    while (running()) {
      if (deadline.expired()) {
        ::kill(pid_, SIGKILL);
        reap(true);
        throw failure("did not stop within its time after SIGTERM");
      }
      std::this_thread::sleep_for(2ms);
    }
    if (status_ != "exit 0") throw failure(fmt::format("stopped with {}", status_));
  }

  [[nodiscard]] pid_t pid() const { return pid_; }

  [[nodiscard]] bool running() {
    if (pid_ > 0) reap(false);
    return pid_ > 0;
  }

  [[nodiscard]] BenchError failure(const std::string& what) const {
    return BenchError(
        fmt::format("{} {}; its log ({}):\n{}", what_, what, log_, tail_of_file(log_)));
  }

 private:
  void reap(bool block) {
    int status = 0;
    pid_t r = 0;
    do {
      r = ::waitpid(pid_, &status, block ? 0 : WNOHANG);
    } while (r < 0 && errno == EINTR);
    if (r == 0) return;
    pid_ = -1;
    if (r < 0)
      status_ = "lost";
    else if (WIFEXITED(status))
      status_ = fmt::format("exit {}", WEXITSTATUS(status));
    else
      status_ = fmt::format("signal {}", WTERMSIG(status));
  }

  std::string what_;
  std::string log_;
  pid_t pid_ = -1;
  int out_ = -1;
  std::string status_;
};

// Removes the directories of harness runs that are gone (killed by a signal
// before their destructors ran: the processes died with them through
// PR_SET_PDEATHSIG, the JetStream store and the roots stayed).
void remove_stale_dirs() {
  for (const char* base : {"/tmp", "/dev/shm"}) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(base, ec)) {
      const std::string name = entry.path().filename().string();
      if (!name.starts_with(kDirPrefix)) continue;
      const long pid = std::strtol(name.c_str() + kDirPrefix.size(), nullptr, 10);
      if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
        std::filesystem::remove_all(entry.path(), ec);
    }
  }
}

int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw BenchError(fmt::format("socket: {}", std::strerror(errno)));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(fd);
  if (!ok) throw BenchError("no free loopback port");
  return ntohs(a.sin_port);
}

// `nats-server -js` on a free loopback port with its store in a fresh /tmp
// directory; killed and the directory removed on destruction.
class NatsServer {
 public:
  explicit NatsServer(const std::string& program) : dir_("/tmp") {
    port_ = free_loopback_port();
    server_.emplace("nats-server",
                    std::vector<std::string>{program, "-js", "-a", "127.0.0.1", "-p",
                                             std::to_string(port_), "-sd", dir_.path() + "/store"},
                    dir_.path() + "/nats.log", std::nullopt, false);
    server_->wait_for_log("Server is ready", 20s);
  }
  [[nodiscard]] std::string url() const { return fmt::format("nats://127.0.0.1:{}", port_); }
  [[nodiscard]] const std::string& dir() const { return dir_.path(); }
  [[nodiscard]] pid_t pid() const { return server_->pid(); }

 private:
  TempDir dir_;  // outlives the server (declared first, destroyed last)
  int port_ = 0;
  std::optional<Daemon> server_;
};

// ---------------------------------------------------------------- NATS (in children only)

void nats_check(natsStatus s, std::string_view what) {
  if (s == NATS_OK) return;
  const char* last = nats_GetLastError(nullptr);
  throw BenchError(fmt::format("{}: {}{}", what, natsStatus_GetText(s),
                               last != nullptr && *last != '\0' ? fmt::format(" ({})", last) : ""));
}

class NatsSession {
 public:
  explicit NatsSession(const std::string& url, jsOptions* jo = nullptr) {
    nats_check(natsOptions_Create(&opts_), "natsOptions_Create");
    nats_check(natsOptions_SetURL(opts_, url.c_str()), "natsOptions_SetURL");
    nats_check(natsOptions_SetAllowReconnect(opts_, false), "natsOptions_SetAllowReconnect");
    nats_check(natsConnection_Connect(&nc_, opts_), fmt::format("connecting to {}", url));
    jsOptions defaults;
    jsOptions_Init(&defaults);
    defaults.Wait = 10'000;
    nats_check(natsConnection_JetStream(&js_, nc_, jo != nullptr ? jo : &defaults),
               "JetStream context");
  }
  NatsSession(const NatsSession&) = delete;
  NatsSession& operator=(const NatsSession&) = delete;
  ~NatsSession() {
    if (js_ != nullptr) jsCtx_Destroy(js_);
    if (nc_ != nullptr) {
      (void)natsConnection_FlushTimeout(nc_, 2000);
      natsConnection_Close(nc_);
      natsConnection_Destroy(nc_);
    }
    if (opts_ != nullptr) natsOptions_Destroy(opts_);
  }
  [[nodiscard]] jsCtx* js() const { return js_; }

 private:
  natsOptions* opts_ = nullptr;
  natsConnection* nc_ = nullptr;
  jsCtx* js_ = nullptr;
};

// What the stream of one run is called.
struct StreamNames {
  std::string stream;
  std::string subject;
};

// Runs `body` in a forked child (NATS administration: the harness process
// itself never starts the client's threads).
void in_child(int cpu, std::string_view what, const std::function<void()>& body) {
  Peer child = Peer::fork_pinned(cpu, [&] {
    body();
    return 0;
  });
  const int rc = wait_quietly(child, 60s);
  if (rc != 0) throw BenchError(fmt::format("{} failed (child exit {})", what, rc));
}

// The stream as the bridge's --create-stream makes it: file storage, one replica.
void create_stream(const std::string& url, const StreamNames& n) {
  NatsSession s(url);
  jsStreamConfig cfg;
  jsStreamConfig_Init(&cfg);
  cfg.Name = n.stream.c_str();
  const char* subjects[] = {n.subject.c_str()};
  cfg.Subjects = subjects;
  cfg.SubjectsLen = 1;
  cfg.Storage = js_FileStorage;
  cfg.Replicas = 1;
  jsStreamInfo* info = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  const natsStatus st = js_AddStream(&info, s.js(), &cfg, nullptr, &code);
  if (info != nullptr) jsStreamInfo_Destroy(info);
  nats_check(
      st, fmt::format("creating stream {} (JetStream error {})", n.stream, static_cast<int>(code)));
}

void delete_stream(const std::string& url, const StreamNames& n) {
  NatsSession s(url);
  jsErrCode code = static_cast<jsErrCode>(0);
  nats_check(
      js_DeleteStream(s.js(), n.stream.c_str(), nullptr, &code),
      fmt::format("deleting stream {} (JetStream error {})", n.stream, static_cast<int>(code)));
}

// ---------------------------------------------------------------- the two cases

struct Bench {
  const Options& o;
  const NatsServer& server;
  int run_counter = 0;

  StreamNames next_stream(std::string_view what, std::size_t size) {
    const int k = run_counter++;
    return {fmt::format("BENCH_{}_{}_{}", what, size, k),
            fmt::format("bench.{}.{}.{}", what, size, k)};
  }

  // Reaps both peers; throws with `context()` when one failed.
  template <class Context>
  void wait_peers(Peer& sender, Peer& receiver, const Control& ctl, Context&& context) {
    const int rs = wait_quietly(receiver, o.run_limit());
    const int ss = wait_quietly(sender, 30s);
    if (rs != 0 || ss != 0)
      throw BenchError(fmt::format(
          "a peer failed (sender exit {}, receiver exit {}, {} of {} "
          "received){}",
          ss, rs, ctl.received.load(std::memory_order_relaxed), o.total_messages(), context()));
  }

  static Measurement measurement(const Options& o, const Control& ctl) {
    const auto first = ctl.first_send_ns.load(std::memory_order_relaxed);
    const auto last = ctl.last_receive_ns.load(std::memory_order_relaxed);
    const double seconds = static_cast<double>(last - first) / 1e9;
    double outside = 0;
    for (Process p : {kSender, kExport, kImport, kReceiver})
      if (ctl.pids[p] != 0) outside += cpu_us_per_message(ctl, p, o.messages);
    return Measurement()
        .set("msg_s", seconds > 0 ? static_cast<double>(o.messages) / seconds : 0.0)
        .set("p50_us", static_cast<double>(ctl.p50_ns.load(std::memory_order_relaxed)) / 1e3)
        .set("p99_us", static_cast<double>(ctl.p99_ns.load(std::memory_order_relaxed)) / 1e3)
        .set("cpu_us", outside)
        .set("server_cpu_us", cpu_us_per_message(ctl, kServer, o.messages));
  }

  // Where the CPU time of the burst went, per process (with the progress
  // lines on stderr, for the analysis; the table has the sums).
  void print_cpu(const Control& ctl, std::string_view what, std::size_t size) const {
    std::string line = fmt::format("      {} {} B, CPU µs per message of the burst:", what, size);
    const bool bridge = ctl.pids[kExport] != 0;
    const char* names[kProcesses] = {bridge ? "producer" : "publisher", "export bridge",
                                     "nats-server", "import bridge", "consumer"};
    for (std::size_t p = 0; p < kProcesses; ++p)
      if (ctl.pids[p] != 0)
        line += fmt::format("{} {} {:.1f}", line.back() == ':' ? "" : ",", names[p],
                            cpu_us_per_message(ctl, static_cast<Process>(p), o.messages));
    fmt::print(stderr, "{}\n", line);
  }

  Measurement bridge_run(std::size_t size) {
    const StreamNames names = next_stream("BRIDGE", size);
    in_child(o.cpus.self, "creating the stream", [&] { create_stream(server.url(), names); });
    Measurement m;
    {
      TempDir a("/dev/shm"), b("/dev/shm"), logs("/tmp");
      for (const TempDir* root : {&a, &b}) {
        auto r = shm::RingProducer::create("bench", shm::RingParams{kRingBytes},
                                           shm::CreateOptions{.root = root->path()});
        if (!r) throw BenchError(fmt::format("ring in {}: {}", root->path(), r.error().what()));
      }
      Daemon exporter("shm-bridge export",
                      {o.bridge, "export", "--server", server.url(), "--root", a.path(),
                       "--subject", names.subject, "--source", "bench", "--egress", "bench-out",
                       "--window", std::to_string(o.window)},
                      logs.path() + "/export.log", o.cpus.self, true);
      Daemon importer("shm-bridge import",
                      {o.bridge, "import", "--server", server.url(), "--root", b.path(),
                       "--subject", names.subject, "--durable", "bench", "--dest", "bench",
                       "--batch", std::to_string(o.batch)},
                      logs.path() + "/import.log", o.cpus.peer, true);
      exporter.wait_for_line("READY export", 30s);
      importer.wait_for_line("READY import", 30s);

      SharedBlock<Control> ctl;
      ctl->pids[kExport] = exporter.pid();
      ctl->pids[kImport] = importer.pid();
      ctl->pids[kServer] = server.pid();
      Peer receiver = Peer::fork_pinned(o.cpus.peer, [&] {
        return flagged(*ctl, [&] {
          auto c = shm::RingConsumer::open("bench", {}, shm::OpenOptions{.root = b.path()});
          if (!c) throw BenchError(fmt::format("ring B: {}", c.error().what()));
          Receiver rx(o, *ctl, size);
          if (!ctl->gate.arrive_and_wait(2, kStall)) throw BenchError("start gate timed out");
          while (!rx.finished()) {
            auto rec = c->peek(100ms);
            if (!rec) throw BenchError(fmt::format("ring B: {}", rec.error().what()));
            if (!*rec) {
              rx.on_idle();
              continue;
            }
            rx.on_message(**rec);
            c->release();
          }
          rx.publish_results();
        });
      });
      Peer sender = Peer::fork_pinned(o.cpus.self, [&] {
        return flagged(*ctl, [&] {
          auto p = shm::RingProducer::open("bench", {}, shm::OpenOptions{.root = a.path()});
          if (!p) throw BenchError(fmt::format("ring A: {}", p.error().what()));
          send_phases(
              o, *ctl, size,
              [&](std::span<const std::byte> buf) {
                const Deadline stalled(kStall);
                for (;;) {
                  auto pushed = p->push(buf, 100ms);
                  if (!pushed) throw BenchError(fmt::format("ring A: {}", pushed.error().what()));
                  if (*pushed) return;
                  if (ctl->failed.load(std::memory_order_relaxed) != 0)
                    throw BenchError("the receiver failed");
                  if (stalled.expired())
                    throw BenchError(
                        fmt::format("ring A stayed full for {} s (the export bridge "
                                    "stopped draining it)",
                                    std::chrono::seconds(kStall).count()));
                }
              },
              [] {});
        });
      });
      wait_peers(sender, receiver, *ctl, [&] {
        return fmt::format("\nexport bridge log:\n{}\nimport bridge log:\n{}",
                           tail_of_file(logs.path() + "/export.log"),
                           tail_of_file(logs.path() + "/import.log"));
      });
      m = measurement(o, *ctl);
      print_cpu(*ctl, "bridge", size);
      exporter.stop_cleanly(10s);
      importer.stop_cleanly(10s);
    }
    in_child(o.cpus.self, "deleting the stream", [&] { delete_stream(server.url(), names); });
    return m;
  }

  Measurement plain_run(std::size_t size) {
    const StreamNames names = next_stream("PLAIN", size);
    in_child(o.cpus.self, "creating the stream", [&] { create_stream(server.url(), names); });
    SharedBlock<Control> ctl;
    ctl->pids[kServer] = server.pid();
    const std::string url = server.url();
    Peer receiver = Peer::fork_pinned(o.cpus.peer, [&] {
      return flagged(*ctl, [&] { plain_consumer(url, names, size, *ctl); });
    });
    Peer sender = Peer::fork_pinned(o.cpus.self, [&] {
      return flagged(*ctl, [&] { plain_publisher(url, names, size, *ctl); });
    });
    wait_peers(sender, receiver, *ctl, [] { return std::string(); });
    Measurement m = measurement(o, *ctl);
    print_cpu(*ctl, "plain", size);
    in_child(o.cpus.self, "deleting the stream", [&] { delete_stream(server.url(), names); });
    return m;
  }

  // The pull consumer: a durable consumer configured like the import
  // bridge's, fetches of o.batch, an ack per message.
  void plain_consumer(const std::string& url, const StreamNames& n, std::size_t size,
                      Control& ctl) const {
    NatsSession s(url);
    jsConsumerConfig cc;
    jsConsumerConfig_Init(&cc);
    cc.Durable = "bench";
    cc.DeliverPolicy = js_DeliverAll;
    cc.AckPolicy = js_AckExplicit;
    cc.AckWait = 30'000'000'000;  // the bridge's default --ack-wait
    cc.FilterSubject = n.subject.c_str();
    cc.MaxAckPending = static_cast<std::int64_t>(o.batch) * 4;
    jsConsumerInfo* ci = nullptr;
    jsErrCode code = static_cast<jsErrCode>(0);
    const natsStatus added = js_AddConsumer(&ci, s.js(), n.stream.c_str(), &cc, nullptr, &code);
    if (ci != nullptr) jsConsumerInfo_Destroy(ci);
    nats_check(added, fmt::format("durable consumer (JetStream error {})", static_cast<int>(code)));
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = n.stream.c_str();
    so.Consumer = "bench";
    natsSubscription* sub = nullptr;
    nats_check(js_PullSubscribe(&sub, s.js(), n.subject.c_str(), "bench", nullptr, &so, &code),
               "pull subscription");
    const std::unique_ptr<natsSubscription, void (*)(natsSubscription*)> owned(
        sub, natsSubscription_Destroy);
    Receiver rx(o, ctl, size);
    if (!ctl.gate.arrive_and_wait(2, kStall)) throw BenchError("start gate timed out");
    while (!rx.finished()) {
      natsMsgList list{};
      const natsStatus st =
          natsSubscription_Fetch(&list, sub, static_cast<int>(o.batch), kFetchTimeoutMs, &code);
      if (st == NATS_TIMEOUT) {
        rx.on_idle();
        continue;
      }
      nats_check(st, "fetch");
      const std::unique_ptr<natsMsgList, void (*)(natsMsgList*)> msgs(&list, natsMsgList_Destroy);
      for (int i = 0; i < list.Count; ++i) {
        natsMsg* msg = list.Msgs[i];
        rx.on_message(
            std::span<const std::byte>(reinterpret_cast<const std::byte*>(natsMsg_GetData(msg)),
                                       static_cast<std::size_t>(natsMsg_GetDataLength(msg))));
        (void)natsMsg_Ack(msg, nullptr);  // as the import bridge does, after "applying" it
      }
    }
    rx.publish_results();
  }

  struct AckCounts {
    std::atomic<std::uint64_t> stored{0};
    std::atomic<std::uint64_t> failed{0};
  };

  static void on_ack(jsCtx* /*js*/, natsMsg* msg, jsPubAck* pa, jsPubAckErr* pae, void* closure) {
    auto* counts = static_cast<AckCounts*>(closure);
    if (pa != nullptr && pae == nullptr)
      counts->stored.fetch_add(1, std::memory_order_relaxed);
    else
      counts->failed.fetch_add(1, std::memory_order_relaxed);
    natsMsg_Destroy(msg);
  }

  // The publisher: js_PublishAsync with a message id, at most o.window in
  // flight (the client blocks the publish call while the window is full).
  void plain_publisher(const std::string& url, const StreamNames& n, std::size_t size,
                       Control& ctl) const {
    AckCounts acks;
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = 10'000;
    jo.PublishAsync.MaxPending = o.window;
    jo.PublishAsync.StallWait = std::chrono::milliseconds(kStall).count();
    jo.PublishAsync.AckHandler = &on_ack;
    jo.PublishAsync.AckHandlerClosure = &acks;
    NatsSession s(url, &jo);
    const std::uint64_t id_prefix = (static_cast<std::uint64_t>(::getpid()) << 20) | 1;
    char id[48];
    std::uint64_t seq = 0;
    send_phases(
        o, ctl, size,
        [&](std::span<const std::byte> buf) {
          *fmt::format_to_n(id, sizeof id - 1, "{}-{}", id_prefix, seq++).out = '\0';
          jsPubOptions po;
          jsPubOptions_Init(&po);
          po.MsgId = id;
          nats_check(js_PublishAsync(s.js(), n.subject.c_str(), buf.data(),
                                     static_cast<int>(buf.size()), &po),
                     "js_PublishAsync");
        },
        [&] {
          jsPubOptions po;
          jsPubOptions_Init(&po);
          po.MaxWait = std::chrono::milliseconds(kStall).count();
          nats_check(js_PublishAsyncComplete(s.js(), &po), "js_PublishAsyncComplete");
          if (const auto f = acks.failed.load(std::memory_order_relaxed); f != 0)
            throw BenchError(fmt::format("{} publishes were not stored", f));
        });
    if (acks.stored.load(std::memory_order_relaxed) != o.total_messages())
      throw BenchError(fmt::format("{} of {} publishes acknowledged",
                                   acks.stored.load(std::memory_order_relaxed),
                                   o.total_messages()));
  }
};

Comparison size_comparison(Bench& bench, std::size_t size) {
  const Options& o = bench.o;
  Comparison c(
      fmt::format("{} B payloads, bridge vs plain C client ({} messages per throughput run, "
                  "latency over {} at {} msg/s)",
                  size, o.messages, o.latency_messages, o.rate),
      {MetricSpec{"msg_s", "kmsg/s", 1e-3, 1}, MetricSpec{"p50_us", "latency p50 µs", 1.0, 0},
       MetricSpec{"p99_us", "latency p99 µs", 1.0, 0},
       MetricSpec{"cpu_us", "CPU µs/msg outside the server (burst)", 1.0, 1},
       MetricSpec{"server_cpu_us", "nats-server CPU µs/msg (burst)", 1.0, 1}});
  c.add_case("bridge", [&bench, size] { return bench.bridge_run(size); });
  c.add_case("plain C client", [&bench, size] { return bench.plain_run(size); });
  c.add_ratio({fmt::format("bridge / plain throughput, {} B", size), "bridge", "msg_s",
               "plain C client", "msg_s", Target{Goal::AtLeast, 1.0}});
  c.add_ratio({fmt::format("bridge / plain latency p50, {} B", size), "bridge", "p50_us",
               "plain C client", "p50_us", std::nullopt});
  c.add_ratio({fmt::format("bridge / plain latency p99, {} B", size), "bridge", "p99_us",
               "plain C client", "p99_us", std::nullopt});
  c.add_ratio({fmt::format("bridge / plain CPU per message outside the server, {} B", size),
               "bridge", "cpu_us", "plain C client", "cpu_us", std::nullopt});
  return c;
}

int run(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  std::signal(SIGPIPE, SIG_IGN);
  remove_stale_dirs();
  NatsServer server(o.nats_server);
  Bench bench{o, server};
  std::vector<std::function<Comparison()>> comparisons;
  for (std::size_t size : o.sizes)
    comparisons.emplace_back([&bench, size] { return size_comparison(bench, size); });
  return run_report(
      {.program = "xproc_bridge",
       .options = o.run,
       .setup = fmt::format(
           "- bridge: producer → ring A → shm-bridge export → JetStream → shm-bridge import → "
           "ring B → consumer; plain C client: js_PublishAsync publisher → JetStream → pull "
           "consumer (Fetch + Ack)\n"
           "- host A (producer or publisher, export bridge) pinned to CPU {}, host B (consumer or "
           "pull consumer, import bridge) to CPU {}; nats-server {} (JetStream, file store in {}) "
           "and this process unpinned; window {}, fetch batch {}; rounds {}",
           o.cpus.self, o.cpus.peer, server.url(), server.dir(), o.window, o.batch, o.run.reps),
       .pin_cpu = std::nullopt,
       .targets_table = true,
       .smoke_ok = "every message of every case arrived once, in order, every byte checked"},
      argc, argv, comparisons);
}

}  // namespace

int main(int argc, char** argv) {
  return guarded_main("xproc_bridge", argc, argv, run);
}
