#include "sidecar/instance_lock.hpp"

#include "sidecar/log.hpp"

#include "shm/platform/clock.hpp"
#include "shm/platform/process.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <filesystem>

namespace shm::sidecar {
namespace {

// The holder's self-description: "pid=N start_time=T started=ISO listen=ADDR".
std::string read_holder(int fd) {
  char buf[512];
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return {};
  std::string s(buf, static_cast<std::size_t>(n));
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

std::string field(const std::string& text, std::string_view key) {
  const std::string needle = fmt::format("{}=", key);
  std::size_t pos = 0;
  while ((pos = text.find(needle, pos)) != std::string::npos) {
    if (pos == 0 || text[pos - 1] == ' ') {
      const std::size_t start = pos + needle.size();
      const std::size_t end = text.find(' ', start);
      return text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    }
    pos += needle.size();
  }
  return {};
}

std::string describe_holder(const std::string& text) {
  const std::string pid = field(text, "pid");
  if (pid.empty()) return "another process (it has not written its identity yet)";
  std::string out = fmt::format("pid {}", pid);
  try {
    const std::string cmd = process_cmdline(std::stoi(pid));
    if (!cmd.empty()) out += fmt::format(" ({})", cmd);
  } catch (...) {
  }
  if (const std::string started = field(text, "started"); !started.empty())
    out += fmt::format(", running since {}", started);
  if (const std::string listen = field(text, "listen"); !listen.empty() && listen != "-")
    out += fmt::format(", serving http://{}", listen);
  return out;
}

}  // namespace

Result<InstanceLock> InstanceLock::acquire(const std::string& root) {
  // Like the library, create a missing root private to this user.
  std::error_code ec;
  if (!std::filesystem::is_directory(root, ec)) {
    std::filesystem::create_directories(root, ec);
    if (ec) return fail_errno(ec.value(), fmt::format("create root directory {}", root));
    ::chmod(root.c_str(), 0700);
  }
  InstanceLock lock;
  lock.path_ = fmt::format("{}/{}", root, kLockFileName);
  lock.fd_ = FileHandle(
      ::open(lock.path_.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600));
  if (!lock.fd_.valid()) return fail_errno(errno, "open " + lock.path_);
  auto got = try_lock_byte(lock.fd_.get(), 0);
  if (!got) return std::unexpected(got.error());
  if (!*got)
    return fail(Errc::RoleTaken,
                fmt::format("another shm-sidecar already monitors {}: {}; lock file {}", root,
                            describe_holder(read_holder(lock.fd_.get())), lock.path_));
  lock.started_ = iso8601(realtime_ns());
  // The lock is held: a monitor is most needed on a full filesystem, so an
  // identity that cannot be written (ENOSPC, EDQUOT) does not stop it.
  if (auto ok = lock.publish({}); !ok) lock.identity_error_ = ok.error();
  return lock;
}

Result<void> InstanceLock::publish(std::string_view listen_address) {
  const ProcessId self = self_process();
  const std::string who =
      fmt::format("pid={} start_time={} started={} listen={}\n", self.pid, self.start_time,
                  started_, listen_address.empty() ? "-" : listen_address);
  // Written over the previous identity, then cut to length: rewriting bytes
  // the file already has needs no new block on a full filesystem.
  const ssize_t n = ::pwrite(fd_.get(), who.data(), who.size(), 0);
  if (n != static_cast<ssize_t>(who.size()))
    return fail_errno(n < 0 ? errno : ENOSPC, "write " + path_);
  if (::ftruncate(fd_.get(), static_cast<off_t>(who.size())) != 0)
    return fail_errno(errno, "truncate " + path_);
  return {};
}

}  // namespace shm::sidecar
