#include "shm/segment/segment.hpp"
#include "common/temp_root.hpp"
#include "shm/platform/crc32c.hpp"
#include "shm/segment/layout.hpp"
#include "shm/spill/page.hpp"
#include "shm/spsc/layout.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <vector>

namespace shm {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

// Everything a pipe delivers until its writers are gone.
std::string read_all(int fd) {
  std::string out;
  char buf[512];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      return out;
    }
  }
}

void write_all(int fd, const std::string& s) {
  std::size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

// "key=value" lines (a child's report) as a map.
std::map<std::string, std::string> parse_report(const std::string& text) {
  std::map<std::string, std::string> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    if (const std::size_t eq = line.find('='); eq != std::string::npos)
      out[line.substr(0, eq)] = line.substr(eq + 1);
    pos = end + 1;
  }
  return out;
}

template <class T>
std::string error_report(const Result<T>& r) {
  if (r) return "code=ok\n";
  return fmt::format("code={}\nmessage={}\n", to_string(r.error().code), r.error().message);
}

// Runs `f` in a forked child that first drops every privilege to `uid`/`gid`
// with the supplementary `groups` only (a root parent keeps no capability),
// and returns the child's report: "code" (an Errc name or "ok") and "message",
// or "setup" when the drop itself failed.
std::map<std::string, std::string> run_as(uid_t uid, gid_t gid, std::vector<gid_t> groups,
                                          const std::function<std::string()>& f) {
  int p[2];
  if (::pipe(p) != 0) return {{"setup", std::strerror(errno)}};
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(p[0]);
    if (::setgroups(groups.size(), groups.data()) != 0 || ::setgid(gid) != 0 ||
        ::setuid(uid) != 0 || ::geteuid() != uid || ::getegid() != gid) {
      write_all(p[1], fmt::format("setup=dropping to uid {}: {}\n", uid, std::strerror(errno)));
      ::_exit(0);
    }
    write_all(p[1], f());
    ::_exit(0);
  }
  ::close(p[1]);
  std::string text = read_all(p[0]);
  ::close(p[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    text += fmt::format("setup=child ended with status {:#x}\n", status);
  return parse_report(text);
}

// Nobody: uid/gid 65534, no supplementary groups.
std::map<std::string, std::string> run_as_nobody(const std::function<std::string()>& f) {
  return run_as(65534, 65534, {}, f);
}

class SegmentTest : public ::testing::Test {
 protected:
  test::TempRoot root_;

  static Segment make_ring(const std::string& name, std::uint64_t capacity = 4096) {
    auto s = create_ring(name, {.capacity_bytes = capacity});
    EXPECT_TRUE(s) << s.error().what();
    return std::move(*s);
  }

  // Rewrites part of a published segment file (as a buggy or hostile process could).
  void patch(const std::string& name, std::size_t offset, const void* bytes, std::size_t n) {
    const int fd = ::open(root_.file(name).c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, bytes, n, static_cast<off_t>(offset)), static_cast<ssize_t>(n));
    ::close(fd);
  }
  template <class T>
  void patch_value(const std::string& name, std::size_t offset, T value) {
    patch(name, offset, &value, sizeof value);
  }
  // Re-seals the immutable header part after a patch, so only the patched fact is wrong.
  void reseal(const std::string& name) {
    const int fd = ::open(root_.file(name).c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    std::vector<char> h(offsetof(SegmentHeader, header_crc));
    ASSERT_EQ(::pread(fd, h.data(), h.size(), 0), static_cast<ssize_t>(h.size()));
    const std::uint32_t crc = crc32c(h.data(), h.size());
    ASSERT_EQ(::pwrite(fd, &crc, sizeof crc, offsetof(SegmentHeader, header_crc)), 4);
    ::close(fd);
  }
};

// ---------------------------------------------------------------- names

TEST_F(SegmentTest, NamesOutsideTheAllowedAlphabetAreInvalid) {
  for (const std::string bad :
       {"", ".", "..", "a/b", "../x", "sp ace", "tab\t", "ü", ".libshm-x"}) {
    auto r = validate_name(bad);
    ASSERT_FALSE(r) << "'" << bad << "'";
    EXPECT_EQ(r.error().code, Errc::InvalidName);
  }
  EXPECT_THAT(validate_name("").error().message, HasSubstr("empty"));
  EXPECT_THAT(validate_name("a/b").error().message, HasSubstr("'/'"));
  EXPECT_THAT(validate_name(std::string(201, 'a')).error().message, HasSubstr("201"));
  EXPECT_TRUE(validate_name(std::string(200, 'a')));
  EXPECT_TRUE(validate_name("Ab-9_.x"));
}

// Every command-line tool would read such a name as an option.
TEST_F(SegmentTest, NamesStartingWithADashAreInvalidNamingTheRule) {
  for (const std::string bad : {"-", "-x", "--force", "-rf"}) {
    auto r = validate_name(bad);
    ASSERT_FALSE(r) << "'" << bad << "'";
    EXPECT_EQ(r.error().code, Errc::InvalidName);
    EXPECT_THAT(r.error().message, HasSubstr("'" + bad + "' starts with '-'")) << r.error().what();
  }
  EXPECT_TRUE(validate_name("x-"));
  EXPECT_TRUE(validate_name("a-b"));
  auto c = create_ring("-x", {.capacity_bytes = 1024});
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, Errc::InvalidName);
  EXPECT_FALSE(std::filesystem::exists(root_.file("-x")));
}

TEST_F(SegmentTest, CreateAndOpenRejectInvalidNames) {
  auto c = create_ring("../escape", {.capacity_bytes = 1024});
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, Errc::InvalidName);
  auto o = open_ring("a/b");
  ASSERT_FALSE(o);
  EXPECT_EQ(o.error().code, Errc::InvalidName);
}

// ---------------------------------------------------------------- create

TEST_F(SegmentTest, CreatePublishesAReadySegmentWithMode0600AndIdentity) {
  Segment s = make_ring("ring");
  struct stat st {};
  ASSERT_EQ(::stat(root_.file("ring").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const SegmentHeader& h = s.header();
  EXPECT_EQ(h.magic, kSegmentMagic);
  EXPECT_EQ(h.kind, kSpscRingKind);
  EXPECT_EQ(h.creator_pid, ::getpid());
  EXPECT_NE(h.incarnation, 0u);
  EXPECT_EQ(h.state.load(), static_cast<std::uint32_t>(SegmentState::Ready));
  EXPECT_EQ(h.total_size, static_cast<std::uint64_t>(st.st_size));
  EXPECT_EQ(s.events().front().type, EventType::Created);
  // No temp file is left behind.
  for (const auto& e : std::filesystem::directory_iterator(root_.path()))
    EXPECT_EQ(e.path().filename(), "ring");
}

TEST_F(SegmentTest, CreateHonoursCallerMode) {
  auto s = create_ring("grp", {.capacity_bytes = 1024}, {.mode = 0660});
  ASSERT_TRUE(s);
  struct stat st {};
  ASSERT_EQ(::stat(root_.file("grp").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
}

TEST_F(SegmentTest, CreateOfExistingNameFailsAndLeavesItIntact) {
  Segment first = make_ring("dup");
  const auto incarnation = first.header().incarnation;
  auto again = create_ring("dup", {.capacity_bytes = 1024});
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, Errc::AlreadyExists);
  EXPECT_THAT(again.error().message, HasSubstr("dup"));
  auto reopened = open_ring("dup");
  ASSERT_TRUE(reopened);
  EXPECT_EQ(reopened->header().incarnation, incarnation);
}

TEST_F(SegmentTest, RecreatedNameIsANewIncarnationAndOldHandleIsStale) {
  Segment old = make_ring("re");
  EXPECT_FALSE(old.stale());
  ASSERT_TRUE(old.unlink());
  EXPECT_TRUE(old.stale());
  Segment fresh = make_ring("re");
  EXPECT_TRUE(old.stale());
  EXPECT_FALSE(fresh.stale());
  EXPECT_NE(old.header().incarnation, fresh.header().incarnation);
}

TEST_F(SegmentTest, RootIsCreated0700WhenMissing) {
  const std::string nested = root_.path() + "/sub/root";
  auto s = create_ring("x", {.capacity_bytes = 1024}, {.root = nested});
  ASSERT_TRUE(s) << s.error().what();
  struct stat st {};
  ASSERT_EQ(::stat(nested.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST_F(SegmentTest, FilesystemTooSmallIsNoSpaceBeforeAnythingIsWritten) {
  const std::string mnt = root_.path() + "/small";
  std::filesystem::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64k") != 0)
    GTEST_SKIP() << "cannot mount a small tmpfs here (" << std::strerror(errno)
                 << "); the NoSpace path needs one";
  auto s = create_ring("big", {.capacity_bytes = 1 << 20}, {.root = mnt});
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, Errc::NoSpace);
  EXPECT_THAT(s.error().message, HasSubstr("needs"));
  EXPECT_TRUE(std::filesystem::is_empty(mnt));
  ::umount(mnt.c_str());
}

// posix_fallocate refusing after the free-space check passed (another process
// filled the filesystem in between). Deterministic without a hook in the
// library: the creator runs under ptrace, and its tracer fills a private tmpfs
// at the creator's fallocate syscall entry, so the check saw room and the
// kernel's allocation finds none. Everything runs in a child with its own mount
// namespace (the tmpfs vanishes with it); the child reports back over a pipe.
TEST_F(SegmentTest, FilesystemFilledAfterTheFreeSpaceCheckIsNoSpaceAndLeavesNothing) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to mount a tmpfs in a private mount namespace";
  const std::string mnt = root_.path() + "/filled";
  std::filesystem::create_directories(mnt);
  const RingParams params{.capacity_bytes = 1 << 16};
  ring::ParamBlock block{};
  const std::uint64_t total =
      kHeaderSize + round_up(ring::kind_spec(params, block).data_size, kPageSize);

  int report[2];
  ASSERT_EQ(::pipe(report), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(report[0]);
    const auto out = [&](const std::string& line) { write_all(report[1], line + "\n"); };
    if (::unshare(CLONE_NEWNS) != 0) {
      out(fmt::format("skip=unshare(CLONE_NEWNS): {}", std::strerror(errno)));
      ::_exit(0);
    }
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=1m") != 0) {
      out(fmt::format("skip=mount a private tmpfs: {}", std::strerror(errno)));
      ::_exit(0);
    }
    int result[2];
    if (::pipe(result) != 0) ::_exit(3);
    const pid_t creator = ::fork();
    if (creator == 0) {
      ::close(result[0]);
      if (::ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) != 0) {
        write_all(result[1],
                  fmt::format("skip=ptrace(PTRACE_TRACEME): {}\n", std::strerror(errno)));
        ::_exit(0);
      }
      ::raise(SIGSTOP);
      write_all(result[1], error_report(create_ring("victim", params, {.root = mnt})));
      ::_exit(0);
    }
    ::close(result[1]);
    // Steps the creator from syscall stop to syscall stop until it enters
    // fallocate; there fills the filesystem and lets it go.
    int status = 0;
    bool filled = false;
    int deliver = 0;
    if (::waitpid(creator, &status, 0) == creator && WIFSTOPPED(status)) {
      // ptrace is variadic: addr and data go as pointer-sized values.
      const auto as_data = [](long v) { return reinterpret_cast<void*>(v); };
      ::ptrace(PTRACE_SETOPTIONS, creator, nullptr,
               as_data(PTRACE_O_TRACESYSGOOD | PTRACE_O_EXITKILL));
      while (::ptrace(PTRACE_SYSCALL, creator, nullptr, as_data(deliver)) == 0 &&
             ::waitpid(creator, &status, 0) == creator && WIFSTOPPED(status)) {
        deliver = 0;
        if (WSTOPSIG(status) != (SIGTRAP | 0x80)) {
          if (WSTOPSIG(status) != SIGSTOP) deliver = WSTOPSIG(status);
          continue;
        }
        __ptrace_syscall_info info{};
        if (::ptrace(PTRACE_GET_SYSCALL_INFO, creator, as_data(static_cast<long>(sizeof info)),
                     &info) <= 0) {
          out(fmt::format("error=PTRACE_GET_SYSCALL_INFO: {}", std::strerror(errno)));
          break;
        }
        if (info.op != PTRACE_SYSCALL_INFO_ENTRY || info.entry.nr != SYS_fallocate) continue;
        struct statvfs st {};
        ::statvfs(mnt.c_str(), &st);
        out(fmt::format("free_before={}", std::uint64_t{st.f_bavail} * st.f_frsize));
        const int fd = ::open((mnt + "/filler").c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
        const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(st.f_bavail * st.f_frsize));
        ::close(fd);
        ::statvfs(mnt.c_str(), &st);
        out(fmt::format("fill_rc={}", rc));
        out(fmt::format("free_after={}", std::uint64_t{st.f_bavail} * st.f_frsize));
        filled = true;
        ::ptrace(PTRACE_DETACH, creator, nullptr, nullptr);
        break;
      }
    }
    out(fmt::format("filled={}", filled));
    if (!filled) ::kill(creator, SIGKILL);  // it may still sit in a ptrace stop
    write_all(report[1], read_all(result[0]));
    ::waitpid(creator, &status, 0);
    std::string left;
    for (const auto& e : std::filesystem::directory_iterator(mnt))
      left += (left.empty() ? "" : ",") + e.path().filename().string();
    out("left=" + left);
    ::_exit(0);
  }
  ::close(report[1]);
  auto r = parse_report(read_all(report[0]));
  ::close(report[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  if (r.contains("skip")) GTEST_SKIP() << r["skip"];
  ASSERT_FALSE(r.contains("error")) << r["error"];
  ASSERT_EQ(r["filled"], "true") << "the creator never entered fallocate";
  // The preflight had room; the filler took all of it.
  EXPECT_GE(std::stoull(r["free_before"]), total);
  EXPECT_EQ(r["fill_rc"], "0");
  EXPECT_EQ(r["free_after"], "0");
  EXPECT_EQ(r["code"], "NoSpace");
  EXPECT_EQ(r["message"],
            fmt::format("filesystem of {} cannot hold segment 'victim' ({} bytes)", mnt, total));
  EXPECT_EQ(r["left"], "filler") << "no temp file, no segment";
}

// ---------------------------------------------------------------- permissions (a real EACCES)

TEST_F(SegmentTest, OpenOfASegmentTheProcessMayNotAccessIsPermissionDeniedNamingThePath) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to drop to uid 65534 in a child";
  make_ring("private");  // root's, mode 0600
  // nobody's own root (another owner's root is refused as unsafe, at open too),
  // holding a file nobody may not read.
  ASSERT_EQ(::chown(root_.path().c_str(), 65534, 65534), 0);
  ASSERT_EQ(::chmod(root_.path().c_str(), 0755), 0);
  for (const bool read_only : {false, true}) {
    auto r = run_as_nobody(
        [&] { return error_report(open_ring("private", {}, {.read_only = read_only})); });
    ASSERT_FALSE(r.contains("setup")) << r["setup"];
    EXPECT_EQ(r["code"], "PermissionDenied") << r["message"];
    EXPECT_EQ(r["message"], "open " + root_.file("private") + ": Permission denied");
  }
}

TEST_F(SegmentTest, CreateInARootTheProcessMayNotWriteIsPermissionDeniedAndLeavesNothing) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to drop to uid 65534 in a child";
  // nobody's own root (another owner's root would be refused as unsafe), but
  // not writable even by its owner.
  ASSERT_EQ(::chown(root_.path().c_str(), 65534, 65534), 0);
  ASSERT_EQ(::chmod(root_.path().c_str(), 0555), 0);
  auto r = run_as_nobody([] { return error_report(create_ring("new", {.capacity_bytes = 4096})); });
  ASSERT_FALSE(r.contains("setup")) << r["setup"];
  EXPECT_EQ(r["code"], "PermissionDenied") << r["message"];
  EXPECT_THAT(r["message"], HasSubstr("create " + root_.path() + "/.libshm-tmp-new-"));
  EXPECT_THAT(r["message"], HasSubstr(": Permission denied"));
  EXPECT_TRUE(std::filesystem::is_empty(root_.path()));
}

// The root's parent is root's, mode 0700: nobody cannot even look up the
// root. The std::filesystem error must come back as a typed error, never as an
// exception that aborts the caller.
TEST_F(SegmentTest, CreateUnderAParentTheProcessMayNotSearchIsPermissionDeniedNotAnException) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to drop to uid 65534 in a child";
  ASSERT_EQ(::chmod(root_.path().c_str(), 0700), 0);
  const std::string sub = root_.path() + "/sub";
  auto r = run_as_nobody([&] {
    try {
      return error_report(create_ring("new", {.capacity_bytes = 4096}, {.root = sub}));
    } catch (const std::exception& e) {
      return fmt::format("code=exception\nmessage={}\n", e.what());
    }
  });
  ASSERT_FALSE(r.contains("setup")) << r["setup"];
  EXPECT_EQ(r["code"], "PermissionDenied") << r["message"];
  EXPECT_THAT(r["message"], HasSubstr(sub));
  EXPECT_THAT(r["message"], HasSubstr("Permission denied"));
  EXPECT_TRUE(std::filesystem::is_empty(root_.path()));
}

// ---------------------------------------------------------------- unsafe roots

// A root another user can redirect or whose files another user can remove or
// replace is refused before anything is created in it.
TEST_F(SegmentTest, RootThatIsASymbolicLinkIsRefusedAsUnsafe) {
  const std::string real = root_.file("real");
  ASSERT_EQ(::mkdir(real.c_str(), 0700), 0);
  const std::string link = root_.file("link");
  ASSERT_EQ(::symlink(real.c_str(), link.c_str()), 0);
  for (const std::string& root : {link, link + "/"}) {
    auto s = create_ring("r", {.capacity_bytes = 4096}, {.root = root});
    ASSERT_FALSE(s) << root;
    EXPECT_EQ(s.error().code, Errc::UnsafeRoot) << s.error().what();
    EXPECT_THAT(s.error().message, HasSubstr("root " + link));
    EXPECT_THAT(s.error().message, HasSubstr("is a symbolic link"));
  }
  EXPECT_TRUE(std::filesystem::is_empty(real));
}

TEST_F(SegmentTest, WorldWritableRootWithoutTheStickyBitIsRefusedAsUnsafe) {
  const std::string open_root = root_.file("open");
  ASSERT_EQ(::mkdir(open_root.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open_root.c_str(), 0777), 0);
  auto s = create_ring("r", {.capacity_bytes = 4096}, {.root = open_root});
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, Errc::UnsafeRoot) << s.error().what();
  EXPECT_THAT(s.error().message, HasSubstr("root " + open_root + " is world-writable (mode 777)"));
  EXPECT_THAT(s.error().message, HasSubstr("sticky bit"));
  EXPECT_TRUE(std::filesystem::is_empty(open_root));
  // With the sticky bit (like /tmp, /dev/shm) only a file's owner may remove it.
  ASSERT_EQ(::chmod(open_root.c_str(), 01777), 0);
  auto sticky = create_ring("r", {.capacity_bytes = 4096}, {.root = open_root});
  EXPECT_TRUE(sticky) << sticky.error().what();
}

// The audit found the root checked only at create: a segment planted in a
// root that became world-writable was opened. Every entry point checks it.
TEST_F(SegmentTest, OpenAndUnlinkRefuseARootThatBecameUnsafe) {
  const std::string open_root = root_.file("open");
  ASSERT_EQ(::mkdir(open_root.c_str(), 0700), 0);
  ASSERT_TRUE(create_ring("r", {.capacity_bytes = 4096}, {.root = open_root}));
  ASSERT_EQ(::chmod(open_root.c_str(), 0777), 0);
  auto opened = Segment::open_any("r", {.root = open_root});
  ASSERT_FALSE(opened);
  EXPECT_EQ(opened.error().code, Errc::UnsafeRoot) << opened.error().what();
  EXPECT_THAT(opened.error().message, HasSubstr("is world-writable (mode 777)"));
  auto removed = Segment::unlink("r", open_root);
  ASSERT_FALSE(removed);
  EXPECT_EQ(removed.error().code, Errc::UnsafeRoot) << removed.error().what();
  EXPECT_TRUE(std::filesystem::exists(open_root + "/r"));
  auto checked = check_root(open_root);
  ASSERT_FALSE(checked);
  EXPECT_EQ(checked.error().code, Errc::UnsafeRoot);
  ASSERT_EQ(::chmod(open_root.c_str(), 01777), 0);  // sticky: safe again
  EXPECT_TRUE(Segment::open_any("r", {.root = open_root})) << "a sticky root is safe";
}

// A relative root would follow each process's working directory: refused at
// create and open with the same words as a relative spill directory.
TEST_F(SegmentTest, RelativeRootIsRefusedAtEveryEntryPoint) {
  auto made = create_ring("r", {.capacity_bytes = 4096}, {.root = "relative/root"});
  ASSERT_FALSE(made);
  EXPECT_EQ(made.error().code, Errc::InvalidArgument);
  EXPECT_THAT(made.error().message,
              HasSubstr("root directory 'relative/root' is not an absolute path (a relative path "
                        "would follow each process's working directory)"));
  auto opened = Segment::open_any("r", {.root = "relative/root"});
  ASSERT_FALSE(opened);
  EXPECT_EQ(opened.error().code, Errc::InvalidArgument);
  EXPECT_THAT(opened.error().message, HasSubstr("is not an absolute path"));
  ::setenv("LIBSHM_ROOT", "relative", 1);  // TempRoot sets it back... by unsetting it at exit
  auto from_env = Segment::open_any("r", {});
  ::setenv("LIBSHM_ROOT", root_.path().c_str(), 1);
  ASSERT_FALSE(from_env);
  EXPECT_THAT(from_env.error().message, HasSubstr("root directory 'relative' is not an absolute"));
  auto spill = spill::SpillDir::open("relative/spill", true);
  ASSERT_FALSE(spill);
  EXPECT_EQ(spill.error().code, Errc::InvalidArgument);
  EXPECT_THAT(spill.error().message,
              HasSubstr("spill directory 'relative/spill' is not an absolute path (a relative "
                        "path would follow each process's working directory)"));
}

TEST_F(SegmentTest, RootOwnedByAnotherUserIsRefusedAsUnsafe) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown a directory to another uid";
  const std::string theirs = root_.file("theirs");
  ASSERT_EQ(::mkdir(theirs.c_str(), 0700), 0);
  ASSERT_EQ(::chown(theirs.c_str(), 12345, 12345), 0);
  auto s = create_ring("r", {.capacity_bytes = 4096}, {.root = theirs});
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, Errc::UnsafeRoot) << s.error().what();
  EXPECT_THAT(s.error().message,
              HasSubstr("root " + theirs + " is owned by uid 12345, this process runs as uid 0"));
  EXPECT_TRUE(std::filesystem::is_empty(theirs));
}

constexpr gid_t kTeam = 4242;

// A root shared by a group: another user's directory, accepted only when
// LIBSHM_ROOT_GROUP names its group, the caller is a member, and the mode
// keeps members from removing each other's segments and everyone else out.
TEST_F(SegmentTest, GroupRootIsAcceptedOnlyWhenNamedAndItsModesAreRight) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown a directory and drop to other uids";
  ASSERT_EQ(::chmod(root_.path().c_str(), 0711), 0);  // others may search the test root
  const std::string team = root_.file("team");
  ASSERT_EQ(::mkdir(team.c_str(), 0700), 0);
  ASSERT_EQ(::chown(team.c_str(), 12345, kTeam), 0);
  const auto create_as_member = [&](const char* group_env, std::vector<gid_t> groups = {kTeam}) {
    return run_as(23456, 23456, std::move(groups), [&] {
      if (group_env != nullptr) ::setenv("LIBSHM_ROOT_GROUP", group_env, 1);
      auto s = create_ring("seg", {.capacity_bytes = 4096}, {.root = team});
      return error_report(s);
    });
  };
  const auto expect_refused = [&](std::map<std::string, std::string> r, const std::string& code,
                                  const std::string& why) {
    ASSERT_FALSE(r.contains("setup")) << r["setup"];
    EXPECT_EQ(r["code"], code) << r["message"];
    EXPECT_THAT(r["message"], HasSubstr(why));
    EXPECT_TRUE(std::filesystem::is_empty(team));
  };

  ASSERT_EQ(::chmod(team.c_str(), 03770), 0);
  expect_refused(create_as_member(nullptr), "UnsafeRoot",
                 "is owned by uid 12345, this process runs as uid 23456");
  expect_refused(create_as_member("4243"), "UnsafeRoot",
                 "not by the group LIBSHM_ROOT_GROUP names (4243)");
  expect_refused(create_as_member("libshm-no-such-group"), "InvalidArgument",
                 "LIBSHM_ROOT_GROUP=libshm-no-such-group: no such group");
  expect_refused(create_as_member("4242", {}), "UnsafeRoot", "is not a member of it");
  ASSERT_EQ(::chmod(team.c_str(), 02770), 0);
  expect_refused(create_as_member("4242"), "UnsafeRoot", "lacks the sticky bit");
  ASSERT_EQ(::chmod(team.c_str(), 03775), 0);
  expect_refused(create_as_member("4242"), "UnsafeRoot", "gives access to users outside");

  ASSERT_EQ(::chmod(team.c_str(), 03770), 0);
  auto ok = create_as_member("4242");
  ASSERT_FALSE(ok.contains("setup")) << ok["setup"];
  EXPECT_EQ(ok["code"], "ok") << ok["message"];
  EXPECT_TRUE(std::filesystem::exists(team + "/seg"));
}

TEST_F(SegmentTest, PrivateRootsOfTheCallerAreAccepted) {
  // mkdtemp's 0700 directory (every test's root) and a root the library
  // creates itself.
  EXPECT_TRUE(create_ring("in-mkdtemp-root", {.capacity_bytes = 4096}));
  const std::string fresh = root_.file("fresh/nested");
  auto s = create_ring("in-fresh-root", {.capacity_bytes = 4096}, {.root = fresh});
  ASSERT_TRUE(s) << s.error().what();
  struct stat st {};
  ASSERT_EQ(::stat(fresh.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
}

TEST_F(SegmentTest, InvalidRingCapacityIsRejected) {
  auto s = create_ring("bad", {.capacity_bytes = 1000});
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, Errc::InvalidArgument);
  EXPECT_THAT(s.error().message, HasSubstr("1000"));
}

// ---------------------------------------------------------------- open: each mismatch its own
// error

TEST_F(SegmentTest, OpenOfMissingNameIsNotFoundNamingTheRoot) {
  auto o = open_ring("nope");
  ASSERT_FALSE(o);
  EXPECT_EQ(o.error().code, Errc::NotFound);
  EXPECT_THAT(o.error().message, HasSubstr("nope"));
  EXPECT_THAT(o.error().message, HasSubstr(root_.path()));
}

TEST_F(SegmentTest, SymlinkInPlaceOfSegmentIsRefused) {
  make_ring("real");
  ASSERT_EQ(::symlink(root_.file("real").c_str(), root_.file("link").c_str()), 0);
  auto o = open_ring("link");
  ASSERT_FALSE(o);
  EXPECT_EQ(o.error().code, Errc::NotRegularFile);
  EXPECT_THAT(o.error().message, HasSubstr("symbolic link"));
}

TEST_F(SegmentTest, DirectoryInPlaceOfSegmentIsNotARegularFile) {
  std::filesystem::create_directory(root_.file("dir"));
  auto o = Segment::open_any("dir", {.read_only = true});
  ASSERT_FALSE(o);
  EXPECT_EQ(o.error().code, Errc::NotRegularFile);
}

TEST_F(SegmentTest, FifoInPlaceOfSegmentIsRefusedWithoutBlocking) {
  // Opening a FIFO for reading would wait for a writer forever.
  ASSERT_EQ(::mkfifo(root_.file("fifo").c_str(), 0600), 0) << std::strerror(errno);
  for (const bool read_only : {true, false}) {
    auto o = Segment::open_any("fifo", {.read_only = read_only});
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error().code, Errc::NotRegularFile) << o.error().what();
  }
}

TEST_F(SegmentTest, FileOwnedByAnotherUidIsRefusedUnlessAllowed) {
  make_ring("foreign");
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown a file to another uid";
  ASSERT_EQ(::chown(root_.file("foreign").c_str(), 12345, 12345), 0);
  auto o = open_ring("foreign");
  ASSERT_FALSE(o);
  EXPECT_EQ(o.error().code, Errc::WrongOwner);
  EXPECT_THAT(o.error().message, HasSubstr("uid 12345"));
  auto allowed = open_ring("foreign", {}, {.allow_other_owner = true});
  EXPECT_TRUE(allowed) << allowed.error().what();
}

TEST_F(SegmentTest, FileShorterThanHeaderIsTruncated) {
  std::ofstream(root_.file("short")) << "tiny";
  auto o = open_ring("short");
  ASSERT_FALSE(o);
  EXPECT_EQ(o.error().code, Errc::Truncated);
  EXPECT_THAT(o.error().message, HasSubstr("4 bytes"));
}

TEST_F(SegmentTest, FileCutBelowTheStatedSizeIsTruncated) {
  make_ring("cut", 1 << 16);
  ASSERT_EQ(::truncate(root_.file("cut").c_str(), kHeaderSize + 4096), 0);
  auto o = open_ring("cut");
  ASSERT_FALSE(o);
  EXPECT_EQ(o.error().code, Errc::Truncated);
  EXPECT_THAT(o.error().message, HasSubstr("header states"));
}

TEST_F(SegmentTest, FileGrownBeyondTheStatedSizeIsSizeMismatch) {
  make_ring("grown");
  ASSERT_EQ(::truncate(root_.file("grown").c_str(), 1 << 20), 0);
  auto o = open_ring("grown");
  ASSERT_FALSE(o);
  EXPECT_EQ(o.error().code, Errc::SizeMismatch);
}

TEST_F(SegmentTest, WrongMagicIsBadMagic) {
  make_ring("magic");
  patch_value<std::uint64_t>("magic", offsetof(SegmentHeader, magic), 0x1122334455667788ull);
  auto o = open_ring("magic");
  ASSERT_FALSE(o);
  EXPECT_EQ(o.error().code, Errc::BadMagic);
  EXPECT_THAT(o.error().message, HasSubstr("0x1122334455667788"));
}

TEST_F(SegmentTest, OtherLayoutMajorIsVersionMismatchNamingBoth) {
  make_ring("ver");
  patch_value<std::uint16_t>("ver", offsetof(SegmentHeader, layout_major), 9);
  reseal("ver");
  auto o = open_ring("ver");
  ASSERT_FALSE(o);
  EXPECT_EQ(o.error().code, Errc::VersionMismatch);
  EXPECT_THAT(o.error().message, HasSubstr("segment has 9.0"));
  EXPECT_THAT(o.error().message, HasSubstr("speaks 2.0"));
}

// A segment written by a layout-1 build (a 4 KiB header with 32 slots, then
// its data) is shorter than today's header may be: it is refused as another
// layout version, not as Truncated, and nothing past the version is read.
TEST_F(SegmentTest, LayoutOneSegmentOfOneHeaderPageIsVersionMismatchNotTruncated) {
  for (const std::size_t size : {kHeaderPrefix, 2 * kPageSize}) {
    const std::string name = fmt::format("v1-{}", size);
    std::vector<std::byte> file(size);
    const std::uint64_t magic = kSegmentMagic;
    const std::uint16_t major = 1;
    std::memcpy(file.data() + offsetof(SegmentHeader, magic), &magic, sizeof magic);
    std::memcpy(file.data() + offsetof(SegmentHeader, layout_major), &major, sizeof major);
    {
      std::ofstream out(root_.file(name), std::ios::binary);
      out.write(reinterpret_cast<const char*>(file.data()), static_cast<std::streamsize>(size));
    }
    ::chmod(root_.file(name).c_str(), 0600);
    auto o = Segment::open_any(name, {});
    ASSERT_FALSE(o) << size;
    EXPECT_EQ(o.error().code, Errc::VersionMismatch) << o.error().what();
    EXPECT_THAT(o.error().message, HasSubstr("segment has 1.0, this library speaks 2.0"));
  }
}

// Today's layout cut short of its header is Truncated (after the version matched).
TEST_F(SegmentTest, CurrentLayoutShorterThanTheHeaderIsTruncated) {
  make_ring("short");
  ASSERT_EQ(::truncate(root_.file("short").c_str(), kHeaderSize - kPageSize), 0);
  auto o = Segment::open_any("short", {});
  ASSERT_FALSE(o);
  EXPECT_EQ(o.error().code, Errc::Truncated) << o.error().what();
  EXPECT_THAT(o.error().message,
              HasSubstr(fmt::format("less than the {}-byte header", kHeaderSize)));
}

TEST_F(SegmentTest, FlippedHeaderByteIsHeaderCorruptNamingBothCrcs) {
  make_ring("crc");
  patch_value<std::uint64_t>("crc", offsetof(SegmentHeader, creation_time_ns), 42);
  auto o = open_ring("crc");
  ASSERT_FALSE(o);
  EXPECT_EQ(o.error().code, Errc::HeaderCorrupt);
  EXPECT_THAT(o.error().message, HasSubstr("header CRC"));
}

TEST_F(SegmentTest, OtherKindIsKindMismatch) {
  make_ring("kind");
  patch_value<KindId>("kind", offsetof(SegmentHeader, kind), 77);
  reseal("kind");
  auto o = open_ring("kind");
  ASSERT_FALSE(o);
  EXPECT_EQ(o.error().code, Errc::KindMismatch);
  EXPECT_THAT(o.error().message, HasSubstr("segment has an unknown kind (77)"));
}

TEST_F(SegmentTest, OtherLayoutFingerprintIsFingerprintMismatch) {
  make_ring("fp");
  patch_value<std::uint64_t>("fp", offsetof(SegmentHeader, fingerprint), 0xdeadull);
  reseal("fp");
  auto o = open_ring("fp");
  ASSERT_FALSE(o);
  EXPECT_EQ(o.error().code, Errc::FingerprintMismatch);
  EXPECT_THAT(o.error().message, HasSubstr("0x000000000000dead"));
}

TEST_F(SegmentTest, OtherCapacityIsParamMismatchNamingBothValues) {
  make_ring("cap", 4096);
  auto o = open_ring("cap", {.capacity_bytes = 1024});
  ASSERT_FALSE(o);
  EXPECT_EQ(o.error().code, Errc::ParamMismatch);
  EXPECT_THAT(o.error().message,
              HasSubstr("capacity_bytes: segment has 4096, caller expects 1024"));
  EXPECT_TRUE(open_ring("cap", {.capacity_bytes = 4096}));
  EXPECT_TRUE(open_ring("cap"));  // 0 = accept what is there
}

TEST_F(SegmentTest, SegmentStillInitializingWaitsBoundedThenNotReady) {
  make_ring("init");
  patch_value<std::uint32_t>("init", offsetof(SegmentHeader, state),
                             static_cast<std::uint32_t>(SegmentState::Initializing));
  const auto t0 = std::chrono::steady_clock::now();
  auto o = open_ring("init", {}, {.ready_wait = 50ms});
  ASSERT_FALSE(o);
  EXPECT_EQ(o.error().code, Errc::NotReady);
  EXPECT_THAT(o.error().message, HasSubstr("INITIALIZING after 50 ms"));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 50ms);
}

TEST_F(SegmentTest, InitializingSegmentThatBecomesReadyOpens) {
  Segment s = make_ring("late");
  s.mutable_header()->state.store(static_cast<std::uint32_t>(SegmentState::Initializing));
  std::thread t([&] {
    // Only makes it likely that the open is already waiting; an open that
    // arrives after the store sees READY at once, the same outcome.
    std::this_thread::sleep_for(20ms);
    s.mutable_header()->state.store(static_cast<std::uint32_t>(SegmentState::Ready),
                                    std::memory_order_release);
  });
  auto o = open_ring("late", {}, {.ready_wait = 5000ms});
  t.join();
  EXPECT_TRUE(o) << o.error().what();
}

// ---------------------------------------------------------------- attachments and liveness

TEST_F(SegmentTest, SecondLiveHolderOfExclusiveRoleGetsRoleTaken) {
  Segment a = make_ring("roles");
  auto b = open_ring("roles");
  ASSERT_TRUE(b);
  auto first = a.attach(ring::kProducerRole);
  ASSERT_TRUE(first) << first.error().what();
  auto second = b->attach(ring::kProducerRole);
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, Errc::RoleTaken);
  EXPECT_THAT(second.error().message, HasSubstr("producer"));
  EXPECT_THAT(second.error().message, HasSubstr(std::to_string(::getpid())));
  // Same handle, same slot: still refused (each attachment has its own lock).
  EXPECT_FALSE(a.attach(ring::kProducerRole));
  // Other exclusive roles are independent.
  EXPECT_TRUE(b->attach(ring::kConsumerRole));
}

TEST_F(SegmentTest, DetachFreesTheRoleForTheNextHolder) {
  Segment a = make_ring("free");
  {
    auto p = a.attach(ring::kProducerRole);
    ASSERT_TRUE(p);
    EXPECT_EQ(a.liveness(0), Liveness::Alive);
  }
  EXPECT_EQ(a.liveness(0), Liveness::Free);
  auto again = a.attach(ring::kProducerRole);
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->took_over());
}

TEST_F(SegmentTest, DeadHoldersSlotIsSeenDeadAndTakenOver) {
  Segment a = make_ring("dead");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    auto seg = open_ring("dead");
    if (!seg) ::_exit(2);
    auto att = seg->attach(ring::kProducerRole);
    if (!att) ::_exit(3);
    char c = 'x';
    (void)!::write(ready[1], &c, 1);
    ::pause();
    ::_exit(0);
  }
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  EXPECT_EQ(a.liveness(0), Liveness::Alive);
  auto taken = a.attach(ring::kProducerRole);
  ASSERT_FALSE(taken);
  EXPECT_EQ(taken.error().code, Errc::RoleTaken);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  // The kernel dropped the dead process's lock: the slot reads dead until taken over.
  EXPECT_EQ(a.liveness(0), Liveness::Dead);
  const auto slots = a.slots();
  ASSERT_EQ(slots.size(), 1u);
  EXPECT_EQ(slots[0].pid, child);
  auto over = a.attach(ring::kProducerRole);
  ASSERT_TRUE(over) << over.error().what();
  EXPECT_TRUE(over->took_over());
  EXPECT_EQ(a.header().counters.takeovers.load(), 1u);
  EXPECT_EQ(a.events().back().type, EventType::Takeover);
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST_F(SegmentTest, SharedRolesTakeDistinctSlotsAndGenerationsGrow) {
  Segment a = make_ring("shared");
  auto x = a.attach(ring::kObserverRole);
  auto y = a.attach(ring::kObserverRole);
  ASSERT_TRUE(x && y);
  EXPECT_NE(x->slot(), y->slot());
  EXPECT_GE(x->slot(), kExclusiveSlots);
  const std::size_t slot = x->slot();
  const std::uint32_t gen = x->generation();
  x->detach();
  auto z = a.attach(ring::kObserverRole);
  ASSERT_TRUE(z);
  EXPECT_EQ(z->slot(), slot);
  EXPECT_EQ(z->generation(), gen + 1);
}

TEST_F(SegmentTest, AllSharedSlotsHeldIsNoFreeSlot) {
  static_assert(kMaxAttachments - kExclusiveSlots == 256, "256 shared handles per segment");
  Segment a = make_ring("full");
  std::vector<Attachment> held;
  for (std::size_t i = kExclusiveSlots; i < kMaxAttachments; ++i) {
    auto att = a.attach(ring::kObserverRole);
    ASSERT_TRUE(att) << i << ": " << att.error().what();
    EXPECT_EQ(att->slot(), i);
    held.push_back(std::move(*att));
  }
  EXPECT_EQ(held.size(), 256u);
  auto one_more = a.attach(ring::kObserverRole);
  ASSERT_FALSE(one_more);
  EXPECT_EQ(one_more.error().code, Errc::NoFreeSlot);
  EXPECT_THAT(one_more.error().message, HasSubstr("all 256 shared attachment slots"));
}

// slots() finds the held locks with range probes: every held slot, whatever
// its position, reads Alive; a released one with its record left reads Dead.
TEST_F(SegmentTest, SlotsReportsEveryHeldSlotOfTheWholeTable) {
  Segment a = make_ring("table");
  std::vector<Attachment> held;
  for (std::size_t i = kExclusiveSlots; i < kMaxAttachments; ++i) {
    auto att = a.attach(ring::kObserverRole);
    ASSERT_TRUE(att) << att.error().what();
    held.push_back(std::move(*att));
  }
  // Keep a scattered subset attached: the first, the last, both sides of 64-slot words.
  const std::vector<std::size_t> keep = {8, 9, 63, 64, 65, 127, 128, 200, 255, 256, 262, 263};
  std::vector<Attachment> kept;
  for (Attachment& att : held)
    if (std::find(keep.begin(), keep.end(), att.slot()) != keep.end())
      kept.push_back(std::move(att));
  held.clear();  // detaches the others: Free
  std::vector<std::size_t> alive;
  for (const SlotInfo& s : a.slots()) {
    EXPECT_EQ(s.liveness, Liveness::Alive) << s.index;
    EXPECT_EQ(s.liveness, a.liveness(s.index)) << s.index;
    alive.push_back(s.index);
  }
  EXPECT_EQ(alive, keep);
  // A record left Attached without its lock (a holder that crashed) reads Dead.
  constexpr std::size_t kDead = 130;
  patch_value<std::uint32_t>("table", slot_lock_offset(kDead) + offsetof(AttachmentSlot, state),
                             static_cast<std::uint32_t>(SlotState::Attached));
  std::size_t dead = 0;
  for (const SlotInfo& s : a.slots())
    if (s.index == kDead) {
      EXPECT_EQ(s.liveness, Liveness::Dead);
      ++dead;
    }
  EXPECT_EQ(dead, 1u);
}

TEST_F(SegmentTest, HeartbeatAdvancesTheSlotTimestamp) {
  Segment a = make_ring("hb");
  auto att = a.attach(ring::kConsumerRole);
  ASSERT_TRUE(att);
  const auto before = a.header().slots[att->slot()].heartbeat_ns.load();
  std::this_thread::sleep_for(2ms);
  att->heartbeat();
  EXPECT_GT(a.header().slots[att->slot()].heartbeat_ns.load(), before);
}

TEST_F(SegmentTest, ReadOnlyOpenCannotAttach) {
  make_ring("ro");
  auto ro = Segment::open_any("ro", {.read_only = true});
  ASSERT_TRUE(ro);
  auto att = ro->attach(ring::kObserverRole);
  ASSERT_FALSE(att);
  EXPECT_EQ(att.error().code, Errc::InvalidArgument);
}

TEST_F(SegmentTest, ObservationRingKeepsTheLastEventsInOrder) {
  Segment a = make_ring("events");
  for (int i = 0; i < 40; ++i) {
    auto att = a.attach(ring::kConsumerRole);
    ASSERT_TRUE(att);
  }
  const auto ev = a.events();
  ASSERT_EQ(ev.size(), kEventRingSize);
  for (std::size_t i = 1; i < ev.size(); ++i) EXPECT_EQ(ev[i].number, ev[i - 1].number + 1);
  EXPECT_EQ(ev.back().number, 80u);  // created + 40 x (attached, detached)
  EXPECT_EQ(ev.back().type, EventType::Detached);
}

TEST_F(SegmentTest, UnlinkOfMissingNameIsNotFound) {
  auto r = Segment::unlink("ghost");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::NotFound);
}

}  // namespace
}  // namespace shm
