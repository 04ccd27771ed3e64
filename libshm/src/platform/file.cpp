#include "shm/platform/file.hpp"

#include "format/format.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <cerrno>

namespace shm {

FileHandle& FileHandle::operator=(FileHandle&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

FileHandle::~FileHandle() {
  if (fd_ >= 0) ::close(fd_);
}

int FileHandle::release() noexcept {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

Mapping::Mapping(Mapping&& other) noexcept
    : data_(other.data_), size_(other.size_), writable_(other.writable_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

Mapping& Mapping::operator=(Mapping&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, size_);
    data_ = other.data_;
    size_ = other.size_;
    writable_ = other.writable_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

Mapping::~Mapping() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

Result<Mapping> Mapping::map(int fd, std::size_t size, bool writable, std::string_view what) {
  const int prot = writable ? (PROT_READ | PROT_WRITE) : PROT_READ;
  void* p = ::mmap(nullptr, size, prot, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    return fail_errno(errno, shm::detail::format("mmap {} ({} bytes)", what, size));
  Mapping m;
  m.data_ = static_cast<std::byte*>(p);
  m.size_ = size;
  m.writable_ = writable;
  return m;
}

void Mapping::prefault() const noexcept {
  if (data_ == nullptr) return;
  const long page = ::sysconf(_SC_PAGESIZE);
  volatile std::byte sink{};
  for (std::size_t off = 0; off < size_; off += static_cast<std::size_t>(page)) sink = data_[off];
  (void)sink;
}

Result<FileHandle> reopen(int fd, bool writable) {
  const std::string path = shm::detail::format("/proc/self/fd/{}", fd);
  const int flags = (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC;
  const int nfd = ::open(path.c_str(), flags);
  if (nfd < 0) return fail_errno(errno, "reopen " + path);
  return FileHandle(nfd);
}

namespace {
flock byte_lock(short type, std::uint64_t offset) {
  flock fl{};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(offset);
  fl.l_len = 1;
  fl.l_pid = 0;  // required to be 0 for OFD locks
  return fl;
}
}  // namespace

Result<bool> try_lock_byte(int fd, std::uint64_t offset) {
  flock fl = byte_lock(F_WRLCK, offset);
  if (::fcntl(fd, F_OFD_SETLK, &fl) == 0) return true;
  if (errno == EAGAIN || errno == EACCES) return false;
  return fail_errno(errno, shm::detail::format("F_OFD_SETLK byte {}", offset));
}

Result<void> unlock_byte(int fd, std::uint64_t offset) {
  flock fl = byte_lock(F_UNLCK, offset);
  if (::fcntl(fd, F_OFD_SETLK, &fl) == 0) return {};
  return fail_errno(errno, shm::detail::format("F_OFD_SETLK unlock byte {}", offset));
}

Result<LockProbe> probe_byte(int fd, std::uint64_t offset) {
  // A read-lock probe conflicts with the holder's write lock and works on a
  // read-only descriptor (shmctl maps read-only).
  flock fl = byte_lock(F_RDLCK, offset);
  if (::fcntl(fd, F_OFD_GETLK, &fl) != 0)
    return fail_errno(errno, shm::detail::format("F_OFD_GETLK byte {}", offset));
  return fl.l_type == F_UNLCK ? LockProbe::Free : LockProbe::Held;
}

Result<bool> try_lock_range(int fd, std::uint64_t offset, std::uint64_t length) {
  flock fl = byte_lock(F_WRLCK, offset);
  fl.l_len = static_cast<off_t>(length);
  if (::fcntl(fd, F_OFD_SETLK, &fl) == 0) return true;
  if (errno == EAGAIN || errno == EACCES) return false;
  return fail_errno(errno,
                    shm::detail::format("F_OFD_SETLK bytes {}..{}", offset, offset + length));
}

Result<std::optional<LockedRange>> probe_range(int fd, std::uint64_t offset, std::uint64_t length) {
  // A read-lock probe, as in probe_byte().
  flock fl = byte_lock(F_RDLCK, offset);
  fl.l_len = static_cast<off_t>(length);
  if (::fcntl(fd, F_OFD_GETLK, &fl) != 0)
    return fail_errno(errno,
                      shm::detail::format("F_OFD_GETLK bytes {}..{}", offset, offset + length));
  if (fl.l_type == F_UNLCK) return std::optional<LockedRange>{};
  const auto start = static_cast<std::uint64_t>(fl.l_start);
  const std::uint64_t end =
      fl.l_len == 0 ? ~std::uint64_t{0} : start + static_cast<std::uint64_t>(fl.l_len);
  return std::optional<LockedRange>{LockedRange{start, end}};
}

Result<FsSpace> filesystem_space(const std::string& dir) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return fail_errno(errno, "statvfs " + dir);
  return FsSpace{static_cast<std::uint64_t>(st.f_bavail) * st.f_frsize,
                 static_cast<std::uint64_t>(st.f_blocks) * st.f_frsize};
}

}  // namespace shm
