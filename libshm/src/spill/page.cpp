// Spill page files: the seal order, validation on read, moving bad files aside.
// The format and the reasons for each step are in shm/spill/page.hpp.
#include "shm/spill/page.hpp"

#include "shm/platform/clock.hpp"
#include "shm/platform/crc32c.hpp"
#include "shm/platform/page_crc.hpp"
#include "shm/platform/process.hpp"
#include "shm/testing/spill_crash.hpp"  // set_spill_sync (libshm/testing, not installed)

#include "format/format.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>

namespace shm {
namespace {
std::atomic<bool> g_sync{true};                           // test_hooks::set_spill_sync
std::atomic<test_hooks::SpillIoHook> g_io_hook{nullptr};  // test_hooks::set_spill_io_hook
}  // namespace

void test_hooks::set_spill_sync(bool on) noexcept {
  // relaxed: set before the operations it affects start.
  g_sync.store(on, std::memory_order_relaxed);
}

void test_hooks::set_spill_io_hook(SpillIoHook hook) noexcept {
  // relaxed: installed before the operations it watches start.
  g_io_hook.store(hook, std::memory_order_relaxed);
}
}  // namespace shm

namespace shm::spill {
namespace {

bool syncing() noexcept {
  return g_sync.load(std::memory_order_relaxed);  // relaxed: see set_spill_sync
}

void trace(test_hooks::SpillIo io, const std::string& what) noexcept {
  if (auto hook = g_io_hook.load(std::memory_order_relaxed); hook != nullptr) [[unlikely]]
    hook(io, what.c_str());
}

int data_sync(int fd, const std::string& what) noexcept {
  trace(test_hooks::SpillIo::DataSync, what);
  return syncing() ? ::fdatasync(fd) : 0;
}

constexpr const char* kIdFile = "relay.id";
constexpr const char* kOwnerFile = "relay.owner";
constexpr std::string_view kOwnerMagic = "libshm spill owner 1\n";
constexpr std::size_t kOwnerMaxBytes = 4096;
constexpr const char* kRefusedDir = "refused";
constexpr const char* kRemovedDir = "removed";
constexpr std::uint64_t kIdMagic = 0x44'4950'534D'4853ull;  // "SHMSPID"

std::uint32_t header_crc(const PageHeader& h) {
  return crc32c(&h, offsetof(PageHeader, header_crc));
}

Result<void> write_all(int fd, const void* data, std::size_t size, std::uint64_t offset,
                       const std::string& what) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::pwrite(fd, p, size, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail_errno(errno, what);
    }
    p += n;
    size -= static_cast<std::size_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
  return {};
}

Result<void> read_all(int fd, void* data, std::size_t size, std::uint64_t offset,
                      const std::string& what) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail_errno(errno, what);
    }
    if (n == 0) return fail(Errc::Truncated, shm::detail::format("{}: short read", what));
    p += n;
    size -= static_cast<std::size_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
  return {};
}

Result<void> fsync_fd(int fd, const std::string& what) {
  trace(test_hooks::SpillIo::Sync, what);
  if (syncing() && ::fsync(fd) != 0)
    return fail_errno(errno, shm::detail::format("fsync {}", what));
  return {};
}

Result<void> make_dirs(const std::string& path) {
  // mkdir -p, each component 0700; an existing component is fine here (the
  // final directory is checked by open()).
  std::string cur;
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    cur = path.substr(0, pos);
    if (cur.empty()) continue;
    if (::mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST)
      return fail_errno(errno, shm::detail::format("mkdir {}", cur));
  }
  return {};
}

Result<std::uint64_t> read_or_make_id(int dir_fd, const std::string& path, bool create) {
  const int fd = ::openat(dir_fd, kIdFile, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd >= 0) {
    FileHandle f(fd);
    struct stat st {};
    if (::fstat(fd, &st) != 0) return fail_errno(errno, path + "/relay.id");
    if (!S_ISREG(st.st_mode))
      return fail(Errc::NotRegularFile,
                  shm::detail::format("{}/{} is not a regular file", path, kIdFile));
    std::array<std::uint64_t, 2> id{};
    if (auto ok = read_all(fd, id.data(), sizeof id, 0, path + "/relay.id"); !ok)
      return std::unexpected(ok.error());
    if (id[0] != kIdMagic || id[1] == 0)
      return fail(Errc::Corrupt, shm::detail::format("{}/{}: not a spill directory identity "
                                                     "(magic {:#x}, id {:#x})",
                                                     path, kIdFile, id[0], id[1]));
    return id[1];
  }
  if (errno != ENOENT) return fail_errno(errno, path + "/relay.id");
  if (!create)
    return fail(Errc::NotFound,
                shm::detail::format("{}: no relay.id: not a spill directory", path));
  std::array<std::uint64_t, 2> id{kIdMagic, random_u64() | 1};
  const std::string tmp = shm::detail::format("relay.id.tmp-{:016x}", random_u64());
  const int t =
      ::openat(dir_fd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (t < 0) return fail_errno(errno, path + "/" + tmp);
  {
    FileHandle tf(t);
    if (auto ok = write_all(t, id.data(), sizeof id, 0, path + "/relay.id"); !ok) {
      (void)::unlinkat(dir_fd, tmp.c_str(), 0);
      return std::unexpected(ok.error());
    }
    if (auto ok = fsync_fd(t, path + "/relay.id"); !ok) {
      (void)::unlinkat(dir_fd, tmp.c_str(), 0);
      return std::unexpected(ok.error());
    }
  }
  // Two creators racing: link() refuses to replace, the loser reads the winner's.
  if (::linkat(dir_fd, tmp.c_str(), dir_fd, kIdFile, 0) != 0) {
    const int err = errno;
    (void)::unlinkat(dir_fd, tmp.c_str(), 0);
    if (err == EEXIST) return read_or_make_id(dir_fd, path, false);
    return fail_errno(err, path + "/relay.id");
  }
  (void)::unlinkat(dir_fd, tmp.c_str(), 0);
  if (auto ok = fsync_fd(dir_fd, path); !ok) return std::unexpected(ok.error());
  return id[1];
}

}  // namespace

void PageBuilder::add(const PageRecord& head, std::span<const std::byte> value) {
  const std::size_t at = bytes_.size();
  PageRecord h = head;
  h.len = static_cast<std::uint32_t>(value.size());
  const std::uint64_t stride = record_stride(h.len);
  // One resize (within the reserved capacity: no reallocation on a seal;
  // it zeroes the padding), then the head and the value over it.
  bytes_.resize(at + stride);
  std::byte* out = bytes_.data() + at;
  store_record(out, h);
  if (!value.empty()) std::memcpy(out + sizeof h, value.data(), value.size());
  if (records_ == 0) {
    first_seq_ = h.first_seq;
    first_order_ = h.order;
  }
  first_seq_ = std::min(first_seq_, h.first_seq);
  last_seq_ = std::max(last_seq_, h.last_seq);
  last_order_ = std::max(last_order_, h.order);
  ops_ += h.op_count;
  ++records_;
}

void PageBuilder::reserve(std::uint64_t content_bytes) {
  bytes_.reserve(content_bytes);
}

void PageBuilder::clear() {
  bytes_.clear();
  records_ = ops_ = first_seq_ = last_seq_ = first_order_ = last_order_ = 0;
}

Result<SpillDir> SpillDir::open(const std::string& path, bool create) {
  if (path.empty() || path.front() != '/')
    return fail(Errc::InvalidArgument,
                shm::detail::format("spill directory '{}' is not an absolute path (a relative "
                                    "path would follow each process's working directory)",
                                    path));
  if (path.size() > 255)
    return fail(Errc::InvalidArgument,
                shm::detail::format("spill directory '{}' is longer than 255 bytes", path));
  if (path.starts_with("/dev/shm/") || path == "/dev/shm")
    return fail(Errc::UnsafeRoot, shm::detail::format("spill directory {} is in /dev/shm, which "
                                                      "is memory: spill pages must be durable",
                                                      path));
  if (create) {
    if (auto ok = make_dirs(path); !ok) return std::unexpected(ok.error());
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP || errno == ENOTDIR)
      return fail(
          Errc::UnsafeRoot,
          shm::detail::format("spill directory {} is a symbolic link or not a directory", path));
    return fail_errno(errno, shm::detail::format("spill directory {}", path));
  }
  SpillDir d;
  d.dir_ = FileHandle(fd);
  d.path_ = path;
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fail_errno(errno, path);
  if (st.st_uid != ::geteuid())
    return fail(Errc::UnsafeRoot,
                shm::detail::format("spill directory {} is owned by uid {}, not by this uid {}",
                                    path, st.st_uid, ::geteuid()));
  auto id = read_or_make_id(fd, path, create);
  if (!id) return std::unexpected(id.error());
  d.relay_id_ = *id;
  return d;
}

std::string page_file_name(std::uint64_t page_id) {
  return shm::detail::format("page-{:016x}.spill", page_id);
}

std::uint64_t page_id_of(std::string_view name) noexcept {
  constexpr std::string_view pre = "page-", post = ".spill";
  if (name.size() != pre.size() + 16 + post.size() || !name.starts_with(pre) ||
      !name.ends_with(post))
    return 0;
  std::uint64_t id = 0;
  for (char ch : name.substr(pre.size(), 16)) {
    int d = -1;
    if (ch >= '0' && ch <= '9') d = ch - '0';
    if (ch >= 'a' && ch <= 'f') d = ch - 'a' + 10;
    if (d < 0) return 0;
    id = id * 16 + static_cast<std::uint64_t>(d);
  }
  return id;
}

std::string default_spill_dir(std::string_view relay) {
  const char* env = std::getenv("LIBSHM_SPILL_DIR");
  const std::string root = env != nullptr && *env != '\0' ? env : "/var/lib/libshm/spill";
  return shm::detail::format("{}/{}", root, relay);
}

Result<SealInfo> write_page(const SpillDir& dir, std::uint64_t page_id, std::uint32_t policy,
                            const PageBuilder& content, SealHook hook) {
  const std::span<const std::byte> body = content.content();
  if (body.size() > kMaxPageContent)
    return fail(Errc::TooLarge, shm::detail::format("spill page {}: {} bytes of content, the "
                                                    "limit is {}",
                                                    page_id, body.size(), kMaxPageContent));
  const std::string final_name = page_file_name(page_id);
  const std::string tmp_name = shm::detail::format("page-{:016x}.tmp", page_id);
  const std::string what = dir.path() + "/" + tmp_name;
  const std::uint64_t total = kPageHeaderSize + body.size();
  // 1. statvfs preflight: the page and a 1 MiB margin for the filesystem itself.
  struct statvfs vfs {};
  if (::fstatvfs(dir.fd(), &vfs) == 0) {
    const std::uint64_t avail = std::uint64_t{vfs.f_bavail} * vfs.f_frsize;
    if (avail < total + (1u << 20))
      return fail(Errc::NoSpace,
                  shm::detail::format("spill directory {}: {} bytes available, a page needs {} "
                                      "(+1 MiB margin)",
                                      dir.path(), avail, total));
  }
  const int fd = ::openat(dir.fd(), tmp_name.c_str(),
                          O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return fail_errno(errno, what);
  FileHandle file(fd);
  auto undo = [&](Error e) -> Result<SealInfo> {
    (void)::unlinkat(dir.fd(), tmp_name.c_str(), 0);
    return std::unexpected(std::move(e));
  };
  // No posix_fallocate: a filesystem that fills up after the preflight fails
  // the pwrite or the fdatasync with ENOSPC (NoSpace), and the temporary file
  // goes; reserving the extents first cost 8% of the write throughput (ext4
  // converts them again at the flush).
  // 2. content, flushed.
  if (auto ok = write_all(fd, body.data(), body.size(), kPageHeaderSize, what); !ok)
    return undo(ok.error());
  if (data_sync(fd, what) != 0) return undo(fail_errno(errno, "fdatasync " + what).error());
  if (hook != nullptr) hook(SealStep::ContentWritten);
  // 3. header, flushed.
  PageHeader h{};
  h.magic = kPageMagic;
  h.version = kPageVersion;
  h.kind = kSpillPageKind;
  h.relay_id = dir.relay_id();
  h.page_id = page_id;
  h.first_seq = content.first_seq();
  h.last_seq = content.last_seq();
  h.first_order = content.first_order();
  h.last_order = content.last_order();
  h.records = content.records();
  h.ops = content.ops();
  h.content_bytes = body.size();
  h.sealed_ns = realtime_ns();
  h.policy = policy;
  h.content_crc = page::checksum(body.data(), body.size());  // == crc32c, three lanes at a time
  h.header_crc = header_crc(h);
  if (auto ok = write_all(fd, &h, sizeof h, 0, what); !ok) return undo(ok.error());
  if (data_sync(fd, what) != 0) return undo(fail_errno(errno, "fdatasync " + what).error());
  if (hook != nullptr) hook(SealStep::HeaderWritten);
  // 4. rename into place (page ids only grow: nothing is replaced).
  if (::renameat(dir.fd(), tmp_name.c_str(), dir.fd(), final_name.c_str()) != 0)
    return undo(
        fail_errno(errno, shm::detail::format("rename {} to {}", what, final_name)).error());
  trace(test_hooks::SpillIo::Rename, final_name);
  if (hook != nullptr) hook(SealStep::Renamed);
  // 5. the directory entry itself made durable.
  if (auto ok = fsync_fd(dir.fd(), dir.path()); !ok) {
    (void)::unlinkat(dir.fd(), final_name.c_str(), 0);
    return std::unexpected(ok.error());
  }
  if (hook != nullptr) hook(SealStep::DirSynced);
  return SealInfo{page_id, policy, total, h.content_crc, h.sealed_ns};
}

Result<Page> read_page(const SpillDir& dir, std::uint64_t page_id) {
  return read_page_file(dir, page_file_name(page_id), page_id);
}

Result<void> read_page_into(const SpillDir& dir, std::uint64_t page_id, Page& page) {
  return read_page_file_into(dir, page_file_name(page_id), page_id, page);
}

Result<Page> read_page_file(const SpillDir& dir, const std::string& name,
                            std::uint64_t expect_page_id) {
  Page page;
  if (auto ok = read_page_file_into(dir, name, expect_page_id, page); !ok)
    return std::unexpected(ok.error());
  return page;
}

Result<void> read_page_file_into(const SpillDir& dir, const std::string& name,
                                 std::uint64_t expect_page_id, Page& page) {
  const std::string what = dir.path() + "/" + name;
  // O_NONBLOCK: opening a FIFO must not wait for a writer; O_NOFOLLOW: a
  // symbolic link is refused (ELOOP), never followed.
  const int fd = ::openat(dir.fd(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP)
      return fail(Errc::NotRegularFile,
                  shm::detail::format("{} is a symbolic link: refused", what));
    return fail_errno(errno, what);
  }
  FileHandle file(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fail_errno(errno, what);
  if (!S_ISREG(st.st_mode))
    return fail(Errc::NotRegularFile,
                shm::detail::format("{} is not a regular file (mode {:o}): refused", what,
                                    st.st_mode & S_IFMT));
  if (st.st_uid != ::geteuid())
    return fail(Errc::WrongOwner, shm::detail::format("{} is owned by uid {}, not by this uid {}",
                                                      what, st.st_uid, ::geteuid()));
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size < sizeof(PageHeader))
    return fail(Errc::Truncated,
                shm::detail::format("{}: {} bytes, shorter than a page header ({})", what, size,
                                    sizeof(PageHeader)));
  page.offsets.clear();
  PageHeader& h = page.header;
  if (auto ok = read_all(fd, &h, sizeof h, 0, what); !ok) return std::unexpected(ok.error());
  if (h.magic != kPageMagic)
    return fail(Errc::BadMagic, shm::detail::format("{}: magic {:#018x}, a spill page has {:#018x}",
                                                    what, h.magic, kPageMagic));
  if (h.version != kPageVersion)
    return fail(Errc::VersionMismatch, shm::detail::format("{}: version {}, this build reads {}",
                                                           what, h.version, kPageVersion));
  if (h.kind != kSpillPageKind)
    return fail(Errc::KindMismatch, shm::detail::format("{}: kind {}, a spill page is {}", what,
                                                        h.kind, kSpillPageKind));
  if (header_crc(h) != h.header_crc)
    return fail(Errc::HeaderCorrupt,
                shm::detail::format("{}: header CRC {:#010x}, computed {:#010x}", what,
                                    h.header_crc, header_crc(h)));
  if (h.relay_id != dir.relay_id())
    return fail(Errc::ForeignHandle,
                shm::detail::format("{}: a page of relay id {:#018x}, this directory is {:#018x} "
                                    "(another relay's page)",
                                    what, h.relay_id, dir.relay_id()));
  if (expect_page_id != 0 && h.page_id != expect_page_id)
    return fail(Errc::Corrupt, shm::detail::format("{}: holds page id {}, its name says {}", what,
                                                   h.page_id, expect_page_id));
  if (h.content_bytes > kMaxPageContent || size != kPageHeaderSize + h.content_bytes)
    return fail(size < kPageHeaderSize + h.content_bytes ? Errc::Truncated : Errc::SizeMismatch,
                shm::detail::format("{}: {} bytes, its header says {} + {}", what, size,
                                    kPageHeaderSize, h.content_bytes));
  // Resized in place: a reader reusing its Page touches no fresh memory
  // (a fresh 1 MiB buffer per page costs its page faults and a zero fill).
  page.content.resize(h.content_bytes);
  if (auto ok = read_all(fd, page.content.data(), page.content.size(), kPageHeaderSize, what); !ok)
    return std::unexpected(ok.error());
  const std::uint32_t crc = page::checksum(page.content.data(), page.content.size());
  if (crc != h.content_crc)
    return fail(Errc::Corrupt, shm::detail::format("{}: content CRC {:#010x}, the header says "
                                                   "{:#010x}",
                                                   what, crc, h.content_crc));
  // Records: bounds, counts and ranges against the header (a CRC is no
  // defence against a buggy writer).
  std::uint64_t at = 0, ops = 0, last_order = 0, first_order = 0;
  page.offsets.reserve(h.records);
  const std::byte* const content = page.content.data();
  const std::uint64_t content_size = page.content.size();
  while (at < content_size) {
    if (content_size - at < sizeof(PageRecord))
      return fail(Errc::Corrupt, shm::detail::format("{}: record at {} cut short", what, at));
    const PageRecord r = load_record(content + at);
    if (record_stride(r.len) > content_size - at)
      return fail(Errc::Corrupt,
                  shm::detail::format("{}: record at {} claims {} value bytes", what, at, r.len));
    if (r.order <= last_order || r.first_seq > r.last_seq || r.op_count == 0 ||
        r.first_seq < h.first_seq || r.last_seq > h.last_seq)
      return fail(Errc::Corrupt,
                  shm::detail::format("{}: record {} (order {}, seq {}..{}, ops {}) out of the "
                                      "page's ranges",
                                      what, page.offsets.size(), r.order, r.first_seq, r.last_seq,
                                      r.op_count));
    if (page.offsets.empty()) first_order = r.order;
    last_order = r.order;
    ops += r.op_count;
    page.offsets.push_back(static_cast<std::uint32_t>(at));  // below kMaxPageContent
    at += record_stride(r.len);
  }
  if (page.offsets.size() != h.records || ops != h.ops ||
      (h.records > 0 && (first_order != h.first_order || last_order != h.last_order)))
    return fail(Errc::Corrupt,
                shm::detail::format("{}: {} records / {} ops, the header says {} / {}", what,
                                    page.offsets.size(), ops, h.records, h.ops));
  return {};
}

Result<std::string> refuse_file(const SpillDir& dir, const std::string& name,
                                std::string_view reason) {
  if (::mkdirat(dir.fd(), kRefusedDir, 0700) != 0 && errno != EEXIST)
    return fail_errno(errno, dir.path() + "/refused");
  const std::string to = shm::detail::format("{}/{}.{}-{:08x}", kRefusedDir, name, reason,
                                             static_cast<std::uint32_t>(random_u64()));
  // rename() moves a symbolic link or a FIFO itself, never what it points to.
  if (::renameat(dir.fd(), name.c_str(), dir.fd(), to.c_str()) != 0)
    return fail_errno(errno, shm::detail::format("moving {}/{} aside", dir.path(), name));
  (void)fsync_fd(dir.fd(), dir.path());
  return dir.path() + "/" + to;
}

Result<void> remove_page(const SpillDir& dir, std::uint64_t page_id) {
  const std::string name = page_file_name(page_id);
  if (::unlinkat(dir.fd(), name.c_str(), 0) != 0 && errno != ENOENT)
    return fail_errno(errno, dir.path() + "/" + name);
  return sync_dir(dir);
}

Result<void> retire_page(const SpillDir& dir, std::uint64_t page_id) {
  const std::string name = page_file_name(page_id);
  const std::string to = std::string(kRemovedDir) + "/" + name;
  if (::renameat(dir.fd(), name.c_str(), dir.fd(), to.c_str()) != 0) {
    const int err = errno;
    if (err != ENOENT) return fail_errno(err, dir.path() + "/" + name);
    if (::faccessat(dir.fd(), name.c_str(), F_OK, AT_SYMLINK_NOFOLLOW) != 0)
      return sync_dir(dir);  // the page is already gone
    // removed/ is missing (the first retirement here, or a hand removed it).
    if (::mkdirat(dir.fd(), kRemovedDir, 0700) != 0 && errno != EEXIST)
      return fail_errno(errno, dir.path() + "/" + kRemovedDir);
    if (::renameat(dir.fd(), name.c_str(), dir.fd(), to.c_str()) != 0 && errno != ENOENT)
      return fail_errno(errno, dir.path() + "/" + name);
  }
  // One fsync makes the rename durable (ext4 journals both directories'
  // changes in one transaction): after a power loss the page is not back
  // in the directory to be adopted and delivered again.
  return sync_dir(dir);
}

// Up to `limit` names in removed/ (none when it does not exist).
Result<std::vector<std::string>> removed_names(const SpillDir& dir, std::size_t limit) {
  std::vector<std::string> names;
  const int fd = ::openat(dir.fd(), kRemovedDir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return names;
    return fail_errno(errno, dir.path() + "/" + kRemovedDir);
  }
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    const int err = errno;
    ::close(fd);
    return fail_errno(err, dir.path() + "/" + kRemovedDir);
  }
  while (names.size() < limit) {
    const dirent* e = ::readdir(d);
    if (e == nullptr) break;
    const std::string_view n = e->d_name;
    if (n != "." && n != "..") names.emplace_back(n);
  }
  ::closedir(d);
  return names;
}

Result<std::size_t> purge_removed(const SpillDir& dir) {
  auto names = removed_names(dir, std::numeric_limits<std::size_t>::max());
  if (!names) return std::unexpected(names.error());
  std::size_t gone = 0;
  for (const std::string& n : *names) {  // unlinkat without AT_REMOVEDIR: never a directory
    const std::string path = std::string(kRemovedDir) + "/" + n;
    if (::unlinkat(dir.fd(), path.c_str(), 0) == 0) ++gone;
  }
  return gone;
}

bool has_removed(const SpillDir& dir) noexcept {
  const auto names = removed_names(dir, 1);
  return names && !names->empty();
}

Result<void> sync_dir(const SpillDir& dir) {
  return fsync_fd(dir.fd(), dir.path());
}

Result<std::optional<std::string>> read_owner(const SpillDir& dir) {
  const std::string what = dir.path() + "/" + kOwnerFile;
  const int fd = ::openat(dir.fd(), kOwnerFile, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<std::string>{};
    if (errno == ELOOP)
      return fail(Errc::NotRegularFile, shm::detail::format("{} is a symbolic link", what));
    return fail_errno(errno, what);
  }
  FileHandle f(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fail_errno(errno, what);
  if (!S_ISREG(st.st_mode))
    return fail(Errc::NotRegularFile, shm::detail::format("{} is not a regular file", what));
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > kOwnerMaxBytes)
    return fail(Errc::Corrupt,
                shm::detail::format("{}: {} bytes, more than {}", what, size, kOwnerMaxBytes));
  std::string text(size, '\0');
  if (auto ok = read_all(fd, text.data(), text.size(), 0, what); !ok)
    return std::unexpected(ok.error());
  const std::string_view t = text;
  if (!t.starts_with(kOwnerMagic) || !t.ends_with('\n') || t.size() < kOwnerMagic.size() + 3 ||
      t[kOwnerMagic.size()] != '/')
    return fail(Errc::Corrupt,
                shm::detail::format("{}: not a spill directory binding ({} bytes)", what, size));
  return std::optional<std::string>(
      t.substr(kOwnerMagic.size(), t.size() - kOwnerMagic.size() - 1));
}

Result<void> write_owner(const SpillDir& dir, std::string_view segment_path) {
  const std::string what = dir.path() + "/" + kOwnerFile;
  const std::string text = shm::detail::format("{}{}\n", kOwnerMagic, segment_path);
  const std::string tmp = shm::detail::format("{}.tmp-{:016x}", kOwnerFile, random_u64());
  const int t =
      ::openat(dir.fd(), tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (t < 0) return fail_errno(errno, dir.path() + "/" + tmp);
  {
    FileHandle tf(t);
    auto ok = write_all(t, text.data(), text.size(), 0, what);
    if (ok) ok = fsync_fd(t, what);
    if (!ok) {
      (void)::unlinkat(dir.fd(), tmp.c_str(), 0);
      return ok;
    }
  }
  if (::renameat(dir.fd(), tmp.c_str(), dir.fd(), kOwnerFile) != 0) {
    const int err = errno;
    (void)::unlinkat(dir.fd(), tmp.c_str(), 0);
    return fail_errno(err, what);
  }
  return fsync_fd(dir.fd(), dir.path());
}

Result<FileHandle> lock_binding(const std::string& dir_path, std::chrono::milliseconds wait) {
  // Its own open file description: the lock is not shared with (nor released
  // by closing) a SpillDir's descriptor.
  FileHandle fd(::open(dir_path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return fail_errno(errno, shm::detail::format("spill directory {}", dir_path));
  const auto deadline = std::chrono::steady_clock::now() + wait;
  auto pause = std::chrono::microseconds(100);
  for (;;) {
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0) return fd;
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK)
      return fail_errno(errno, shm::detail::format("flock spill directory {}", dir_path));
    if (std::chrono::steady_clock::now() >= deadline)
      return fail(Errc::RoleTaken,
                  shm::detail::format("the spill directory {} is being bound by another relay "
                                      "create (or collected by shmctl gc), still after {} ms",
                                      dir_path, wait.count()));
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(10'000));
  }
}

Result<DirListing> list_dir(const SpillDir& dir) {
  const int fd = ::openat(dir.fd(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return fail_errno(errno, dir.path());
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    const int err = errno;
    ::close(fd);
    return fail_errno(err, dir.path());
  }
  DirListing out;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view n = e->d_name;
    if (n == "." || n == ".." || n == kIdFile || n == kOwnerFile || n == kRefusedDir ||
        n == kRemovedDir)
      continue;
    if (const std::uint64_t id = page_id_of(n); id != 0)
      out.pages.push_back(id);
    else if (n.starts_with("page-") && n.ends_with(".tmp"))
      out.temps.emplace_back(n);
    else
      out.others.emplace_back(n);
  }
  ::closedir(d);
  std::sort(out.pages.begin(), out.pages.end());
  return out;
}

}  // namespace shm::spill
