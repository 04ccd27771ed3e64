// fanout_jobs: a tiered job queue across processes with PriorityFanout.
//
// One producer process submits jobs of mixed priority (0 = lowest, 3 =
// highest); two worker processes drain them: a general worker that always
// takes the highest-priority job available, and a worker dedicated to the top
// priority (so urgent jobs are served even while the general worker is busy).
//
//   fanout_jobs demo [JOBS]                   runs all three processes and cleans up
//   fanout_jobs create BASE                   creates the fanout (4 priorities)
//   fanout_jobs produce BASE JOBS             submits JOBS jobs, then exits
//   fanout_jobs worker BASE [--dedicated P]   drains until SIGINT/SIGTERM, then
//                                             finishes what is queued and exits
//   fanout_jobs remove BASE                   removes the K+1 files
//
// Inspect a running fanout with `shmctl inspect BASE.bitmap`.
#include "shm/fanout/priority_fanout.hpp"

#include <fmt/format.h>

#include <sys/wait.h>
#include <unistd.h>
#include <array>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace std::chrono_literals;

constexpr std::uint32_t kPriorities = 4;
constexpr shm::FanoutParams kParams{
    .priorities = kPriorities, .ring_cells = 1024, .slot_bytes = 48};

struct Job {
  std::uint32_t id;
  std::uint32_t priority;
  char what[40];
};
static_assert(sizeof(Job) == 48);

std::atomic<bool> g_stop{false};
extern "C" void on_signal(int) {
  g_stop.store(true);
}

int usage() {
  fmt::print(stderr,
             "usage: fanout_jobs demo [JOBS]\n"
             "       fanout_jobs create BASE\n"
             "       fanout_jobs produce BASE JOBS\n"
             "       fanout_jobs worker BASE [--dedicated PRIORITY]\n"
             "       fanout_jobs remove BASE\n");
  return 64;
}

int create(const std::string& base) {
  auto f = shm::PriorityFanout::create(base, kParams);
  if (!f) {
    fmt::print(stderr, "create {}: {}\n", base, f.error().what());
    return 1;
  }
  fmt::print("created {} ({} priorities x {} jobs)\n", base, kPriorities, kParams.ring_cells);
  std::fflush(stdout);
  return 0;
}

int produce(const std::string& base, std::uint32_t jobs) {
  auto f = shm::FanoutProducer::open(base, kParams);
  if (!f) {
    fmt::print(stderr, "open {}: {}\n", base, f.error().what());
    return 1;
  }
  static constexpr std::array<const char*, kPriorities> kinds = {
      "rebuild search index", "send newsletter", "resize image", "page the on-call"};
  std::array<std::uint32_t, kPriorities> sent{};
  for (std::uint32_t id = 0; id < jobs; ++id) {
    // Mostly background work, some urgent jobs.
    const std::uint32_t roll = (id * 2654435761u) >> 24;  // 0..255
    const std::uint32_t priority = roll < 100 ? 0 : roll < 180 ? 1 : roll < 235 ? 2 : 3;
    Job job{id, priority, {}};
    fmt::format_to_n(job.what, sizeof job.what - 1, "{} #{}", kinds[priority], id);
    auto ok = f->submit(priority, std::as_bytes(std::span(&job, 1)), 5s);
    if (!ok) {
      fmt::print(stderr, "submit: {}\n", ok.error().what());
      return 1;
    }
    if (!*ok) {
      fmt::print(stderr, "submit: priority {} stayed full for 5 s; are the workers running?\n",
                 priority);
      return 1;
    }
    ++sent[priority];
  }
  fmt::print("producer: submitted {} jobs (p3 {}, p2 {}, p1 {}, p0 {})\n", jobs, sent[3], sent[2],
             sent[1], sent[0]);
  return 0;
}

int worker(const std::string& base, std::optional<std::uint32_t> dedicated) {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  // `demo` starts us with both blocked, so a signal sent early waits for the handler.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
  auto f = shm::FanoutConsumer::open(base, kParams);
  if (!f) {
    fmt::print(stderr, "open {}: {}\n", base, f.error().what());
    return 1;
  }
  const std::string name = dedicated ? fmt::format("dedicated p{}", *dedicated) : "general";
  std::array<std::uint64_t, kPriorities> done{};
  Job job{};
  auto buf = std::as_writable_bytes(std::span(&job, 1));
  // Until told to stop, wait for jobs (parked on a futex when idle: no CPU
  // burnt); once told, finish what is queued and exit.
  for (bool stopping = false;;) {
    if (g_stop.load()) stopping = true;
    const auto timeout = stopping ? 0ms : 200ms;
    std::uint32_t priority = 0;
    if (dedicated) {
      auto got = f->pop_priority(*dedicated, buf, timeout);
      if (!got) {
        fmt::print(stderr, "drain: {}\n", got.error().what());
        return 1;
      }
      if (!*got) {
        if (stopping) break;
        continue;
      }
      priority = *dedicated;
    } else {
      auto got = f->pop_highest(buf, timeout);
      if (!got) {
        fmt::print(stderr, "drain: {}\n", got.error().what());
        return 1;
      }
      if (!*got) {
        if (stopping) break;
        continue;
      }
      priority = (*got)->priority;
    }
    job.what[sizeof job.what - 1] = '\0';
    ++done[priority];  // a real worker would run job.what here
  }
  std::uint64_t total = 0;
  for (auto n : done) total += n;
  fmt::print("worker {}: {} jobs (p3 {}, p2 {}, p1 {}, p0 {})\n", name, total, done[3], done[2],
             done[1], done[0]);
  return 0;
}

int remove(const std::string& base) {
  auto ok = shm::PriorityFanout::unlink(base);
  if (!ok) {
    fmt::print(stderr, "remove {}: {}\n", base, ok.error().what());
    return 1;
  }
  return 0;
}

pid_t spawn(std::vector<std::string> args) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv("/proc/self/exe", argv.data());
  std::_Exit(127);
}

int wait_for(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) < 0) return 1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int demo(std::uint32_t jobs) {
  const std::string base = fmt::format("fanout-demo-{}", ::getpid());
  if (int rc = create(base); rc != 0) return rc;
  sigset_t set;  // inherited through exec: workers unblock once their handler is set
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  ::sigprocmask(SIG_BLOCK, &set, nullptr);
  const pid_t general = spawn({"fanout_jobs", "worker", base});
  const pid_t urgent = spawn({"fanout_jobs", "worker", base, "--dedicated", "3"});
  const pid_t producer = spawn({"fanout_jobs", "produce", base, std::to_string(jobs)});
  int rc = wait_for(producer);
  // Workers finish what is queued after the signal, then report.
  ::kill(general, SIGTERM);
  ::kill(urgent, SIGTERM);
  rc |= wait_for(general);
  rc |= wait_for(urgent);
  {
    // Every submitted job was drained by one of the workers: nothing is left.
    auto f = shm::PriorityFanout::open(base, kParams);
    std::uint64_t left = 0;
    for (std::uint32_t p = 0; f && p < f->priorities(); ++p) left += f->ring(p).size_hint();
    if (!f || left != 0) {
      fmt::print(stderr, "demo: {} jobs left in the queue\n", left);
      rc |= 1;
    }
  }
  rc |= remove(base);
  fmt::print("demo: {}\n", rc == 0 ? "ok" : "FAILED");
  return rc == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  if (args.empty()) return usage();
  const auto number = [](std::string_view s) {
    return static_cast<std::uint32_t>(std::strtoul(std::string(s).c_str(), nullptr, 10));
  };
  if (args[0] == "demo") return demo(args.size() > 1 ? number(args[1]) : 20000);
  if (args.size() < 2) return usage();
  const std::string base(args[1]);
  if (args[0] == "create") return create(base);
  if (args[0] == "produce" && args.size() == 3) return produce(base, number(args[2]));
  if (args[0] == "worker" && args.size() == 2) return worker(base, std::nullopt);
  if (args[0] == "worker" && args.size() == 4 && args[2] == "--dedicated") {
    const std::uint32_t p = number(args[3]);
    if (p >= kPriorities) {
      fmt::print(stderr, "--dedicated {}: priorities are 0..{}\n", p, kPriorities - 1);
      return 64;
    }
    return worker(base, p);
  }
  if (args[0] == "remove") return remove(base);
  return usage();
}
