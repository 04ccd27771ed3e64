// One shm-bridge route between two "hosts" (two LIBSHM_ROOTs) for the long
// fault tests (bridge_kill_loop_test.cpp, bridge_cluster_leader_test.cpp):
// the bridge processes, kept with their command lines so that they can be
// killed -9 and started again, every run's output kept; and the two ends of
// the record stream in threads of the test: a producer writing records into
// host A's ring and a consumer checking each record of host B's ring
// (sequence + CRC32C, common/ring_record.hpp): in order, nothing lost,
// nothing twice, nothing after the end. The consumer's position is readable
// at any time, so a test's deadline can say where the stream stopped.
//
// Every Subprocess is made by the test's own thread (its PR_SET_PDEATHSIG
// follows the thread that forked it); the stream's threads only touch rings.
#pragma once

#include "bridge/nats_link.hpp"
#include "common/ring_record.hpp"
#include "common/subprocess.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"

#include <fmt/format.h>

#include <stdlib.h>
#include <sys/types.h>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace shm::test::bridge_route {

inline constexpr const char* kSubject = "orders.a";
inline constexpr const char* kStream = "ORDERS";
inline constexpr const char* kRing = "orders";
inline constexpr std::uint64_t kMinBytes = 16;
inline constexpr std::uint64_t kMaxBytes = 256;

// A directory under /dev/shm used as one host's LIBSHM_ROOT, removed at the end.
class HostRoot {
 public:
  HostRoot() {
    char tmpl[] = "/dev/shm/libshm-bridge-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  HostRoot(const HostRoot&) = delete;
  HostRoot& operator=(const HostRoot&) = delete;
  ~HostRoot() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Creates the ring `kRing` under `root`; an error message, empty when done.
inline std::string make_ring(const HostRoot& root, std::uint64_t capacity = 64 * 1024) {
  CreateOptions co;
  co.root = root.path();
  auto r = RingProducer::create(kRing, RingParams{capacity}, co);
  return r ? std::string() : r.error().what();
}

// The route's command lines: `servers` are given in order (the bridge tries
// them in order); the stream exists already (the test made it).
inline std::vector<std::string> with_servers(std::vector<std::string> args,
                                             const std::vector<std::string>& servers) {
  for (const std::string& s : servers) {
    args.emplace_back("--server");
    args.push_back(s);
  }
  return args;
}
inline std::vector<std::string> export_args(const std::vector<std::string>& servers,
                                            const HostRoot& root) {
  return with_servers({"export", "--root", root.path(), "--subject", kSubject, "--source", kRing,
                       "--egress", "orders-out", "--egress-capacity", "1024"},
                      servers);
}
inline std::vector<std::string> import_args(const std::vector<std::string>& servers,
                                            const HostRoot& root) {
  return with_servers({"import", "--root", root.path(), "--subject", kSubject, "--durable",
                       "host-b", "--dest", kRing},
                      servers);
}

// Whether process `pid` (a child not reaped yet) has exited: a zombie.
inline bool has_exited(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat;
  if (!std::getline(in, stat)) return true;
  const auto paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] == 'Z';
}

// The last `bytes` of `text`, for failure messages.
inline std::string tail_of(const std::string& text, std::size_t bytes = 6000) {
  return text.size() <= bytes ? text : "..." + text.substr(text.size() - bytes);
}

// One bridge process (`role`: "export" or "import") of the route, started,
// killed -9 and started again with the same command line.
class BridgeProcess {
 public:
  BridgeProcess(std::string role, std::vector<std::string> args)
      : role_(std::move(role)), args_(std::move(args)) {}

  // Starts a run (stderr merged into the captured stdout).
  void start() {
    finish_run();
    std::vector<std::string> argv{"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1",
                                  bin_path("shm-bridge")};
    argv.insert(argv.end(), args_.begin(), args_.end());
    process_ = std::make_unique<Subprocess>(std::move(argv));
    ++runs_;
  }
  // Waits for the run's "READY <role>" line.
  [[nodiscard]] bool wait_ready(std::chrono::milliseconds timeout) {
    return process_ && process_->wait_for_line("READY " + role_, timeout);
  }
  // Whether the current run is still going (a zombie is not).
  [[nodiscard]] bool running() const { return process_ && !has_exited(process_->pid()); }
  // kill -9 of the current run; its exit status (128 + SIGKILL when it was
  // still running, its own exit code when it had stopped by itself).
  int kill9() {
    if (!process_) return -1;
    process_->kill(SIGKILL);
    const int rc = process_->wait(std::chrono::seconds(30));
    finish_run();
    return rc;
  }
  // Waits for the current run to stop by itself; its exit status.
  int wait_exit(std::chrono::milliseconds timeout) {
    if (!process_) return -1;
    const int rc = process_->wait(timeout);
    finish_run();
    return rc;
  }
  // Reads what the run wrote so far (a bridge blocks on a full pipe).
  void drain() {
    if (process_) (void)process_->output();
  }
  // Everything every run wrote, each run under a "--- run N" line.
  [[nodiscard]] std::string all_output() {
    std::string out = history_;
    if (process_) out += fmt::format("--- run {}\n{}", runs_, process_->output());
    return out;
  }
  // How many lines of every run's output contain `text`.
  [[nodiscard]] std::size_t count(const std::string& text) {
    const std::string out = all_output();
    std::size_t n = 0;
    for (auto at = out.find(text); at != std::string::npos; at = out.find(text, at + text.size()))
      ++n;
    return n;
  }
  // The lines of every run's output that contain `text`.
  [[nodiscard]] std::string lines_with(const std::string& text) {
    const std::string out = all_output();
    std::string found;
    std::size_t start = 0;
    while (start < out.size()) {
      std::size_t end = out.find('\n', start);
      if (end == std::string::npos) end = out.size();
      const std::string line = out.substr(start, end - start);
      if (line.find(text) != std::string::npos) found += line + "\n";
      start = end + 1;
    }
    return found;
  }
  [[nodiscard]] std::uint64_t runs() const { return runs_; }
  [[nodiscard]] const std::string& role() const { return role_; }

 private:
  void finish_run() {
    if (!process_) return;
    history_ += fmt::format("--- run {}\n{}", runs_, process_->output());
    process_.reset();  // SIGKILL and reap when still running
  }
  std::string role_;
  std::vector<std::string> args_;
  std::unique_ptr<Subprocess> process_;
  std::string history_;
  std::uint64_t runs_ = 0;
};

// A connection of the test's own, to make the stream and read its info.
inline shm::bridge::Outcome<std::unique_ptr<shm::bridge::NatsLink>> test_link(
    const std::vector<std::string>& servers) {
  shm::bridge::ConnectionOptions o;
  o.servers = servers;
  return shm::bridge::NatsLink::connect(o, shm::bridge::NatsLink::Reconnect::Automatic);
}

// Creates stream kStream capturing kSubject (file storage) with `replicas`
// copies and a duplicate window of `window`; retried for `patience` (a
// cluster that has just elected its metadata leader may not know its peers
// yet). An error message, empty when done.
inline std::string create_stream(shm::bridge::NatsLink& link, std::chrono::milliseconds window,
                                 int replicas = 1,
                                 std::chrono::seconds patience = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  std::string last;
  do {
    jsStreamConfig cfg;
    jsStreamConfig_Init(&cfg);
    cfg.Name = kStream;
    const char* subjects[] = {kSubject};
    cfg.Subjects = subjects;
    cfg.SubjectsLen = 1;
    cfg.Storage = js_FileStorage;
    cfg.Replicas = replicas;
    cfg.Duplicates = std::chrono::duration_cast<std::chrono::nanoseconds>(window).count();
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = 10'000;
    jsStreamInfo* info = nullptr;
    jsErrCode code = static_cast<jsErrCode>(0);
    const natsStatus s = js_AddStream(&info, link.js(), &cfg, &jo, &code);
    if (info != nullptr) jsStreamInfo_Destroy(info);
    if (s == NATS_OK) return {};
    last = fmt::format("creating stream {}: {} (JetStream error {})", kStream,
                       shm::bridge::nats_error(s), static_cast<int>(code));
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  } while (std::chrono::steady_clock::now() < deadline);
  return last;
}

// What stream info says of the stream's placement (a cluster's) and content.
struct StreamPlacement {
  std::string leader;                 // "" when it has none (or no cluster)
  std::vector<std::string> replicas;  // the other peers' names
  bool replicas_current = false;      // every other peer is current
  // How long ago the leader last heard from each other peer (as `replicas`).
  std::vector<std::chrono::nanoseconds> replicas_active;
  std::uint64_t messages = 0;
  std::uint64_t last_sequence = 0;
  std::string error;  // what went wrong reading it ("" when read)
};

inline StreamPlacement stream_placement(shm::bridge::NatsLink& link) {
  StreamPlacement p;
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = 2'000;
  jsStreamInfo* info = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  const natsStatus s = js_GetStreamInfo(&info, link.js(), kStream, &jo, &code);
  if (s != NATS_OK || info == nullptr) {
    p.error = fmt::format("stream info of {}: {} (JetStream error {})", kStream,
                          shm::bridge::nats_error(s), static_cast<int>(code));
  } else {
    p.messages = info->State.Msgs;
    p.last_sequence = info->State.LastSeq;
    if (info->Cluster != nullptr) {
      if (info->Cluster->Leader != nullptr) p.leader = info->Cluster->Leader;
      p.replicas_current = true;
      for (int i = 0; i < info->Cluster->ReplicasLen; ++i) {
        const jsPeerInfo* peer = info->Cluster->Replicas[i];
        if (peer == nullptr) continue;
        if (peer->Name == nullptr) continue;
        p.replicas.emplace_back(peer->Name);
        p.replicas_active.emplace_back(peer->Active);
        p.replicas_current = p.replicas_current && peer->Current && !peer->Offline;
      }
    }
  }
  if (info != nullptr) jsStreamInfo_Destroy(info);
  return p;
}

// The two ends of the stream of records 0, 1, 2, ...: a producer thread
// writing host A's ring, a consumer thread reading host B's and checking
// each record. Stops (and joins) when destroyed.
class RecordStream {
 public:
  RecordStream(const HostRoot& a, const HostRoot& b) : root_a_(a.path()), root_b_(b.path()) {}
  RecordStream(const RecordStream&) = delete;
  RecordStream& operator=(const RecordStream&) = delete;
  ~RecordStream() { stop(); }

  // Starts the consumer: record 0 first, then each next one in order; any
  // record not the next one (lost, repeated, reordered or corrupt) is the
  // failure, and so is one past `end` (the stream's last record + 1).
  void start_consumer(std::uint64_t end) {
    end_ = end;
    consumer_ = std::thread([this] { consume(); });
  }
  // Writes records [from, to) into host A's ring, after any earlier
  // producer's records (joined first). With `max_lead` the producer stays at
  // most that many records ahead of the consumer, so that the whole route
  // keeps moving (without it the export can run far ahead of the import,
  // JetStream holding the difference).
  void produce(std::uint64_t from, std::uint64_t to, std::uint64_t max_lead = 0) {
    if (producer_.joinable()) producer_.join();
    producer_ = std::thread([this, from, to, max_lead] { produce_range(from, to, max_lead); });
  }

  // Records written so far (the next sequence to write).
  [[nodiscard]] std::uint64_t produced() const { return produced_.load(); }
  // Records received in order so far (the next sequence expected).
  [[nodiscard]] std::uint64_t received() const { return received_.load(); }
  [[nodiscard]] std::optional<std::string> failure() const {
    const std::lock_guard lock(mutex_);
    return failure_;
  }
  // "the last record received in order: N" (or none yet), for messages.
  [[nodiscard]] std::string position() const {
    const std::uint64_t r = received();
    return fmt::format(
        "the consumer's last sequence seen in order: {} (records received: {}), "
        "the producer wrote {}",
        r == 0 ? std::string("none") : std::to_string(r - 1), r, produced());
  }
  void stop() {
    stop_.store(true);
    if (producer_.joinable()) producer_.join();
    if (consumer_.joinable()) consumer_.join();
  }

 private:
  void fail(std::string why) {
    const std::lock_guard lock(mutex_);
    if (!failure_) failure_ = std::move(why);
  }

  void produce_range(std::uint64_t from, std::uint64_t to, std::uint64_t max_lead) {
    auto p = RingProducer::open(kRing, RingParams{}, OpenOptions{.root = root_a_});
    if (!p) return fail("producer: opening ring A: " + p.error().what());
    for (std::uint64_t seq = from; seq < to && !stop_.load(); ++seq) {
      while (max_lead != 0 && seq >= received_.load() + max_lead && !stop_.load())
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      const std::size_t n = ring_record::size_for(seq, kMinBytes, kMaxBytes);
      for (;;) {
        auto r = p->reserve(n, std::chrono::milliseconds(100));
        if (!r)
          return fail(fmt::format("producer: reserve of record {}: {}", seq, r.error().what()));
        if (*r) {
          ring_record::fill(seq, **r);
          p->commit();
          break;
        }
        if (stop_.load()) return;  // ring A full (the route is held back): wait on
      }
      produced_.store(seq + 1);
    }
  }

  void consume() {
    auto c = RingConsumer::open(kRing, RingParams{}, OpenOptions{.root = root_b_});
    if (!c) return fail("consumer: opening ring B: " + c.error().what());
    while (!stop_.load()) {
      auto r = c->peek(std::chrono::milliseconds(100));
      if (!r) return fail("consumer: peek: " + r.error().what());
      if (!*r) continue;
      const std::uint64_t expected = received_.load();
      const auto seq = ring_record::check(**r, kMinBytes, kMaxBytes, expected);
      if (!seq)
        return fail(fmt::format("consumer: the record after sequence {} failed its check: {}",
                                expected == 0 ? std::string("none") : std::to_string(expected - 1),
                                seq.error()));
      if (*seq != expected)
        return fail(fmt::format("consumer: got sequence {}, expected {} ({})", *seq, expected,
                                *seq < expected ? "a duplicate or a reordering" : "records lost"));
      if (*seq >= end_)
        return fail(fmt::format("consumer: record {} arrived after the stream's last one ({})",
                                *seq, end_ - 1));
      c->release();
      received_.store(expected + 1);
    }
  }

  std::string root_a_, root_b_;
  std::uint64_t end_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> produced_{0}, received_{0};
  mutable std::mutex mutex_;
  std::optional<std::string> failure_;
  std::thread producer_, consumer_;
};

// Polls until `done` while watching the rest: the stream's checks, bridges
// that stopped by themselves, `deadline`, and a consumer that received
// nothing for `stall`. "" when done, else what went wrong (without the
// context a test adds: where the stream stood, the processes' output).
inline std::string wait_for(const std::string& what, RecordStream& stream,
                            const std::vector<BridgeProcess*>& bridges,
                            std::chrono::steady_clock::time_point deadline,
                            const std::function<bool()>& done,
                            std::chrono::seconds stall = std::chrono::seconds(60)) {
  std::uint64_t last_received = stream.received();
  auto last_progress = std::chrono::steady_clock::now();
  for (;;) {
    if (auto f = stream.failure()) return *f;
    for (BridgeProcess* b : bridges) {
      if (b->running()) continue;
      const int rc = b->wait_exit(std::chrono::seconds(5));
      return fmt::format("the {} bridge stopped by itself (exit status {}) while waiting for {}",
                         b->role(), rc, what);
    }
    for (BridgeProcess* b : bridges) b->drain();
    if (done()) return {};
    const auto now = std::chrono::steady_clock::now();
    if (stream.received() != last_received) {
      last_received = stream.received();
      last_progress = now;
    } else if (now - last_progress >= stall) {
      return fmt::format("no record arrived for {} s while waiting for {}", stall.count(), what);
    }
    if (now >= deadline)
      return fmt::format("the test's deadline passed while waiting for {}", what);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace shm::test::bridge_route
