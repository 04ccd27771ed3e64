// Benchmark harness: Memory shared with forked peers, the start gate, the scratch root, and the
// processes themselves (pinned forks, their reaping, the watchdog).
#include "harness/harness.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace shm::bench {

// ---------------------------------------------------------------- memory

void prefault(std::span<std::byte> memory, bool write) noexcept {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  for (std::size_t off = 0; off < memory.size(); off += page) {
    volatile std::byte* b = memory.data() + off;
    const std::byte v = *b;
    if (write) *b = v;
  }
}

void* map_shared_anonymous(std::size_t size) {
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    throw BenchError(fmt::format("mmap of {} shared bytes: {}", size, std::strerror(errno)));
  prefault({static_cast<std::byte*>(p), size}, true);
  return p;
}

void unmap(void* p, std::size_t size) noexcept {
  ::munmap(p, size);
}

bool StartGate::arrive_and_wait(std::uint32_t parties, std::chrono::milliseconds timeout) noexcept {
  // acq_rel / acquire: every arrival's earlier writes (setup) are visible to all
  // parties once the count is complete.
  arrived.fetch_add(1, std::memory_order_acq_rel);
  Deadline deadline(timeout);
  while (arrived.load(std::memory_order_acquire) < parties) {
    spin_pause();
    if (deadline.expired_every()) return false;
  }
  return true;
}

ScratchRoot::ScratchRoot() {
  for (const char* base : {"/dev/shm", "/tmp"}) {
    std::string tmpl = fmt::format("{}/libshm-bench-XXXXXX", base);
    if (::mkdtemp(tmpl.data()) != nullptr) {
      path_ = std::move(tmpl);
      break;
    }
  }
  if (path_.empty()) throw BenchError(fmt::format("mkdtemp: {}", std::strerror(errno)));
  ::setenv("LIBSHM_ROOT", path_.c_str(), 1);
}

ScratchRoot::~ScratchRoot() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

ScratchRoot& process_scratch_root() {
  static ScratchRoot root;
  return root;
}

// ---------------------------------------------------------------- processes

Peer& Peer::operator=(Peer&& other) noexcept {
  if (this != &other) {
    if (pid_ > 0) (void)wait(std::chrono::milliseconds(0));
    pid_ = std::exchange(other.pid_, -1);
  }
  return *this;
}

Peer::~Peer() {
  if (pid_ > 0) (void)wait(std::chrono::milliseconds(0));
}

Peer Peer::fork_pinned(int cpu, const std::function<int()>& body) {
  std::fflush(nullptr);  // the child must not flush the parent's buffered output again
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw BenchError(fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    // A peer never outlives the harness.
    (void)::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(100);
    (void)pin_to_cpu(cpu);
    int rc = 0;
    try {
      rc = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "peer (pid %d): %s\n", static_cast<int>(::getpid()), e.what());
      rc = 101;
    } catch (...) {
      rc = 102;
    }
    std::fflush(stderr);
    ::_exit(rc);
  }
  return Peer(pid);
}

int Peer::wait(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  const std::uint64_t deadline = now_ns() + static_cast<std::uint64_t>(timeout.count()) * 1'000'000;
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
      return -1;
    }
    if (r < 0 && errno != EINTR) {
      pid_ = -1;
      return -1;
    }
    if (now_ns() >= deadline) {
      ::kill(pid_, SIGKILL);
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      pid_ = -1;
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

namespace {

// What the child of measure_in_child() hands back, in a SharedBlock.
struct ReturnedMeasurement {
  static constexpr std::size_t kMax = 128;
  std::uint32_t count = 0;
  std::array<std::array<char, 32>, kMax> keys{};
  std::array<double, kMax> values{};
};

}  // namespace

Measurement measure_in_child(int cpu, std::chrono::milliseconds limit,
                             const std::function<Measurement()>& run) {
  using Returned = ReturnedMeasurement;
  SharedBlock<Returned> out;
  Peer child = Peer::fork_pinned(cpu, [&]() -> int {
    const Measurement m = run();
    for (const auto& [key, value] : m.values()) {
      if (out->count == Returned::kMax || key.size() >= sizeof(out->keys[0]))
        throw BenchError("measurement too large to return");
      std::memcpy(out->keys[out->count].data(), key.data(), key.size());
      out->values[out->count++] = value;
    }
    return 0;
  });
  const int rc = child.wait(limit);
  if (rc != 0)
    throw BenchError(rc < 0 ? std::string("measuring child timed out and was killed")
                            : fmt::format("measuring child failed with status {} (see its message "
                                          "above)",
                                          rc));
  Measurement m;
  for (std::uint32_t i = 0; i < out->count; ++i) m.set(out->keys[i].data(), out->values[i]);
  return m;
}

Watchdog::Watchdog(std::chrono::seconds limit) noexcept {
  ::alarm(static_cast<unsigned>(std::max<std::chrono::seconds::rep>(1, limit.count())));
}

Watchdog::~Watchdog() {
  ::alarm(0);
}

}  // namespace shm::bench
