#include "peers/iceoryx_peer.hpp"

#include "harness/harness.hpp"

#include <fmt/format.h>

// g++ 12 at -O2 and above reports iceoryx's cxx::string(TruncateToCapacity,
// const char*) as reading past a short argument: the copy it flags is on the
// branch taken only when the argument is longer than the capacity.
#pragma GCC diagnostic ignored "-Warray-bounds"
#pragma GCC diagnostic ignored "-Wstringop-overread"
#include <iceoryx_hoofs/log/logmanager.hpp>
#include <iceoryx_posh/mepoo/chunk_header.hpp>
#include <iceoryx_posh/popo/untyped_publisher.hpp>
#include <iceoryx_posh/popo/untyped_subscriber.hpp>
#include <iceoryx_posh/runtime/posh_runtime.hpp>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace shm::bench::iceoryx {
namespace {

constexpr std::string_view kReadyLine = "RouDi is ready for clients";

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Registers this process with RouDi on first use (see the header: never in a
// process that was forked from one that already registered).
void ensure_runtime() {
  static const bool registered = [] {
    // Its debug lines (one per registration) would bury the harness's progress.
    iox::log::LogManager::GetLogManager().SetDefaultLogLevel(iox::log::LogLevel::kWarn);
    const std::string name = fmt::format("libshm-xproc-{}", ::getpid());
    iox::runtime::PoshRuntime::initRuntime(
        iox::RuntimeName_t(iox::cxx::TruncateToCapacity, name.c_str()));
    return true;
  }();
  (void)registered;
}

iox::capro::ServiceDescription service(const std::string& topic) {
  using Id = iox::capro::IdString_t;
  return {Id(iox::cxx::TruncateToCapacity, "libshm-bench"),
          Id(iox::cxx::TruncateToCapacity, topic.c_str()),
          Id(iox::cxx::TruncateToCapacity, "data")};
}

}  // namespace

void write_config(const std::string& path,
                  const std::vector<std::pair<std::size_t, std::size_t>>& pools) {
  std::ofstream out(path, std::ios::trunc);
  out << "[general]\nversion = 1\n\n[[segment]]\n";
  for (const auto& [size, count] : pools)
    out << fmt::format("\n[[segment.mempool]]\nsize = {}\ncount = {}\n", size, count);
  if (!out.flush()) throw BenchError(fmt::format("cannot write the RouDi config {}", path));
}

Roudi::Roudi(const std::string& log_path, std::chrono::seconds timeout,
             const std::string& config_path) {
  std::fflush(nullptr);
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) throw BenchError(fmt::format("fork: {}", std::strerror(errno)));
  if (pid_ == 0) {
    // SIGTERM, not SIGKILL: RouDi removes its shared memory on the way out.
    (void)::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(100);
    const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      (void)::dup2(fd, STDOUT_FILENO);
      (void)::dup2(fd, STDERR_FILENO);
    }
    if (config_path.empty())
      ::execlp("iox-roudi", "iox-roudi", static_cast<char*>(nullptr));
    else
      ::execlp("iox-roudi", "iox-roudi", "-c", config_path.c_str(), static_cast<char*>(nullptr));
    std::fprintf(stderr, "exec iox-roudi: %s\n", std::strerror(errno));
    ::_exit(127);
  }
  const Deadline deadline(timeout);
  for (;;) {
    if (read_file(log_path).find(kReadyLine) != std::string::npos) return;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw BenchError(fmt::format(
          "iox-roudi exited (status {}) before accepting clients (is the iceoryx package "
          "installed? another RouDi running?); its log {}:\n{}",
          status, log_path, read_file(log_path)));
    }
    if (deadline.expired()) {
      (void)::kill(pid_, SIGKILL);
      (void)::waitpid(pid_, nullptr, 0);
      pid_ = -1;
      throw BenchError(fmt::format("iox-roudi not ready after {} s; its log {}:\n{}",
                                   timeout.count(), log_path, read_file(log_path)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Roudi::~Roudi() {
  if (pid_ <= 0) return;
  // The harness's iceoryx processes end with _exit, so they never deregister;
  // RouDi drops a silent process after its keep-alive timeout (1.5 s). Told
  // to stop while one is still registered, it fails an assertion and leaves
  // its shared memory (about 200 MiB of /dev/shm) behind.
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  (void)::kill(pid_, SIGTERM);
  const Deadline deadline(std::chrono::seconds(10));
  while (!deadline.expired()) {
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  (void)::kill(pid_, SIGKILL);
  (void)::waitpid(pid_, nullptr, 0);
}

struct Sender::Impl {
  iox::popo::UntypedPublisher publisher;
  Deadline deadline;
  Impl(const std::string& topic, std::chrono::milliseconds limit)
      : publisher(service(topic),
                  [] {
                    iox::popo::PublisherOptions o;
                    o.historyCapacity = 0;
                    o.subscriberTooSlowPolicy = iox::popo::ConsumerTooSlowPolicy::WAIT_FOR_CONSUMER;
                    return o;
                  }()),
        deadline(limit) {}
};

Sender::Sender(const std::string& topic, std::chrono::milliseconds limit) {
  ensure_runtime();
  impl_ = std::make_unique<Impl>(topic, limit);
  // RouDi connects ports in its discovery loop; a message published before
  // the subscriber is connected would be lost (no history).
  const Deadline connected(limit);
  while (!impl_->publisher.hasSubscribers()) {
    if (connected.expired()) throw BenchError(fmt::format("iceoryx: no subscriber on {}", topic));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}
Sender::Sender(Sender&&) noexcept = default;
Sender::~Sender() = default;

void Sender::send(std::span<const std::byte> message) {
  for (;;) {
    auto loaned = impl_->publisher.loan(static_cast<std::uint32_t>(message.size()));
    if (!loaned.has_error()) {
      std::memcpy(loaned.value(), message.data(), message.size());
      impl_->publisher.publish(loaned.value());
      return;
    }
    // Every chunk of the size class is queued or held: wait for releases.
    spin_pause();
    if (impl_->deadline.expired_every())
      throw BenchError("iceoryx: no chunk to loan past the run limit");
  }
}

std::span<std::byte> Sender::loan(std::size_t bytes) {
  for (;;) {
    auto loaned = impl_->publisher.loan(static_cast<std::uint32_t>(bytes));
    if (!loaned.has_error()) return {static_cast<std::byte*>(loaned.value()), bytes};
    spin_pause();  // as in send()
    if (impl_->deadline.expired_every())
      throw BenchError("iceoryx: no chunk to loan past the run limit");
  }
}

void Sender::publish(std::span<std::byte> loaned) {
  impl_->publisher.publish(loaned.data());
}

struct Receiver::Impl {
  iox::popo::UntypedSubscriber subscriber;
  Deadline deadline;
  Impl(const std::string& topic, std::size_t queue, std::chrono::milliseconds limit)
      : subscriber(service(topic),
                   [queue] {
                     iox::popo::SubscriberOptions o;
                     o.queueCapacity = queue;
                     o.historyRequest = 0;
                     o.queueFullPolicy = iox::popo::QueueFullPolicy::BLOCK_PRODUCER;
                     return o;
                   }()),
        deadline(limit) {}
};

Receiver::Receiver(const std::string& topic, std::size_t queue, std::chrono::milliseconds limit) {
  ensure_runtime();
  impl_ = std::make_unique<Impl>(topic, queue, limit);
}
Receiver::Receiver(Receiver&&) noexcept = default;
Receiver::~Receiver() = default;

void Receiver::recv(std::span<std::byte> out) {
  for (;;) {
    auto taken = impl_->subscriber.take();
    if (!taken.has_error()) {
      const void* payload = taken.value();
      const auto size = iox::mepoo::ChunkHeader::fromUserPayload(payload)->userPayloadSize();
      if (size != out.size()) {
        impl_->subscriber.release(payload);
        throw BenchError(fmt::format("iceoryx: chunk of {} bytes, expected {}", size, out.size()));
      }
      std::memcpy(out.data(), payload, out.size());
      impl_->subscriber.release(payload);
      return;
    }
    spin_pause();
    if (impl_->deadline.expired_every())
      throw BenchError("iceoryx: queue stayed empty past the run limit");
  }
}

void Receiver::wait_subscribed(std::chrono::milliseconds limit) {
  const Deadline deadline(limit);
  while (impl_->subscriber.getSubscriptionState() != iox::SubscribeState::SUBSCRIBED) {
    if (deadline.expired()) throw BenchError("iceoryx: subscriber not connected in time");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

std::optional<std::span<const std::byte>> Receiver::try_take() {
  auto taken = impl_->subscriber.take();
  if (taken.has_error()) return std::nullopt;
  const void* payload = taken.value();
  const auto size = iox::mepoo::ChunkHeader::fromUserPayload(payload)->userPayloadSize();
  return std::span<const std::byte>(static_cast<const std::byte*>(payload), size);
}

void Receiver::release(std::span<const std::byte> taken) {
  impl_->subscriber.release(taken.data());
}

}  // namespace shm::bench::iceoryx
