// Several worker processes sharing one byte budget and one rate limit.
//
//   ledger_workers [--workers N] [--seconds S] [--budget BYTES] [--rate PER_SEC]
//
// The parent creates a ledger segment with a global byte budget, a category
// "jobs" and a token bucket "requests", then starts N copies of itself as
// workers (fork + exec: independent processes that only share the segment).
// Each worker opens its own pool (half the budget), and in a loop asks the
// shared bucket for one request token, reserves a random amount of memory for a
// job, holds a few jobs at a time and releases the oldest. Rejections (budget
// full, rate exceeded) are ordinary outcomes the worker counts and backs off
// from. At the end the parent prints what the ledger saw and verifies it.
#include "shm/ledger/ledger.hpp"

#include <fmt/format.h>

#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace shm;

int fail(const std::string& what, const Error& e) {
  fmt::print(stderr, "ledger_workers: {}: {}\n", what, e.what());
  return 1;
}

int run_worker(const std::string& name, int id, double seconds) {
  auto ledger = Ledger::open(name);
  if (!ledger) return fail("open", ledger.error());
  auto jobs = ledger->category("jobs");
  auto requests = ledger->bucket("requests");
  if (!jobs || !requests) return fail("lookup", (!jobs ? jobs.error() : requests.error()));
  const std::int64_t budget = ledger->view().params.global_limit;
  auto pool = ledger->open_pool({fmt::format("worker-{}", id), {{"mem", budget / 2, {}}}, 0});
  if (!pool) return fail("open_pool", pool.error());

  std::mt19937 rng(static_cast<unsigned>(id) * 7919u);
  std::deque<Ticket> held;
  std::uint64_t admitted = 0, rate_limited = 0, reserved = 0, over_budget = 0;
  const Constraint one_request[] = {{*requests, 1}};
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    auto admission = ledger->admit(one_request, monotonic_ms());
    if (!admission) return fail("admit", admission.error());
    if (!admission->has_value()) {  // rate limited: back off a little
      ++rate_limited;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    ++admitted;
    const std::int64_t bytes = 1024 + static_cast<std::int64_t>(rng() % (budget / 8 + 1));
    auto r = ledger->reserve(*pool, *jobs, bytes);
    if (!r) return fail("reserve", r.error());
    if (r->has_value()) {
      ++reserved;
      if (auto ok = ledger->commit(**r); !ok) return fail("commit", ok.error());
      held.push_back(**r);
    } else {
      ++over_budget;  // r->error().describe() says which scope refused
    }
    if (held.size() > 4 || (!r->has_value() && !held.empty())) {
      if (auto ok = ledger->release(held.front()); !ok) return fail("release", ok.error());
      held.pop_front();
    }
  }
  for (const Ticket& t : held)
    if (auto ok = ledger->release(t); !ok) return fail("release", ok.error());
  if (auto ok = ledger->close_pool(*pool); !ok) return fail("close_pool", ok.error());
  fmt::print(
      "worker {}: {} requests admitted, {} rate-limited; {} jobs reserved, {} refused by the "
      "budget\n",
      id, admitted, rate_limited, reserved, over_budget);
  return 0;
}

std::string arg_value(std::vector<std::string>& args, const std::string& flag,
                      const std::string& fallback) {
  for (std::size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == flag) {
      std::string v = args[i + 1];
      args.erase(args.begin() + static_cast<std::ptrdiff_t>(i),
                 args.begin() + static_cast<std::ptrdiff_t>(i) + 2);
      return v;
    }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 4 && args[0] == "--worker")
    return run_worker(args[1], std::stoi(args[2]), std::stod(args[3]));
  int workers = 0;
  double seconds = 0;
  std::int64_t budget = 0, rate = 0;
  try {
    workers = std::stoi(arg_value(args, "--workers", "4"));
    seconds = std::stod(arg_value(args, "--seconds", "2"));
    budget = std::stoll(arg_value(args, "--budget", "1048576"));
    rate = std::stoll(arg_value(args, "--rate", "5000"));
  } catch (const std::exception&) {
    args.push_back("?");
  }
  if (!args.empty() || workers < 1 || workers > 16 || seconds <= 0 || budget < 16 || rate < 0) {
    fmt::print(stderr,
               "usage: ledger_workers [--workers 1..16] [--seconds S] [--budget BYTES] [--rate "
               "PER_SEC]\n");
    return 2;
  }

  const std::string name = fmt::format("ledger-demo-{}", ::getpid());
  LedgerConfig config;
  config.params.global_limit = budget;
  config.params.max_tickets = 256;
  config.categories = {{"jobs", budget, Partition::Ordinary}};
  config.buckets = {{"requests", rate, rate / 10 + 1}};
  auto ledger = Ledger::create(name, config);
  if (!ledger) return fail("create", ledger.error());
  fmt::print("ledger {}: {} bytes shared by {} workers, {} requests/s\n", ledger->segment().path(),
             budget, workers, rate);

  std::fflush(stdout);  // the children exec: buffered output would come out late
  std::vector<pid_t> children;
  for (int i = 0; i < workers; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const std::string id = std::to_string(i), secs = std::to_string(seconds);
      ::execl("/proc/self/exe", argv[0], "--worker", name.c_str(), id.c_str(), secs.c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    if (pid > 0) children.push_back(pid);
  }
  int failures = 0;
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
  }

  auto s = ledger->snapshot();
  if (!s) return fail("snapshot", s.error());
  fmt::print("global: used {} of {} bytes; {} reservations, {} releases\n", s->global.used,
             s->global.limit, s->stats.reserves, s->stats.releases);
  for (std::size_t i = 0; i < ledger::kScopes; ++i)
    if (s->stats.rejections[i] != 0)
      fmt::print("  refused by {}: {}\n", to_string(static_cast<LedgerScope>(i)),
                 s->stats.rejections[i]);
  for (const BucketState& b : s->buckets)
    fmt::print("bucket {}: {} admissions, {} rate-limited\n", b.label, b.admits, b.rejections);
  auto problems = ledger->verify();
  if (!problems) return fail("verify", problems.error());
  fmt::print("verify: {}\n", problems->empty() ? "consistent" : (*problems)[0]);
  (void)ledger->segment().unlink();
  return failures == 0 && problems->empty() && s->global.used == 0 ? 0 : 1;
}
