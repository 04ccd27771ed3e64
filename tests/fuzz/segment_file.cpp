#include "segment_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace shm::fuzz {
namespace {

void remove_root(const std::string& dir) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace

const std::string& root() {
  static const std::string dir = [] {
    char pattern[] = "/dev/shm/libshm-fuzz-XXXXXX";
    if (::mkdtemp(pattern) == nullptr) {
      std::perror("fuzz: mkdtemp under /dev/shm");
      std::abort();
    }
    return std::string(pattern);
  }();
  static const bool cleanup_registered = [] {
    std::atexit([] { remove_root(root()); });
    return true;
  }();
  (void)cleanup_registered;
  return dir;
}

bool write_segment(std::span<const std::uint8_t> bytes) {
  const std::string path = root() + "/" + std::string(kSegmentName);
  // A new inode each time: a mapping left by the previous input (a handle
  // that outlived it by mistake) must not see this input's bytes.
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return done == bytes.size();
}

OpenOptions open_options(bool read_only) {
  return OpenOptions{.root = root(),
                     .read_only = read_only,
                     .allow_other_owner = false,
                     .ready_wait = std::chrono::milliseconds(0)};
}

}  // namespace shm::fuzz
