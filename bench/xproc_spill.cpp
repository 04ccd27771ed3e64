// Spill store benchmarks (issue 14), every case against a plain baseline in
// the same run, cases interleaved round by round (harness Comparison), ratios
// taken inside a round and summarised as median (p10–p90) over rounds. One
// process pinned to one CPU; the spill directory is a fresh directory under
// --dir (default /var/tmp; /dev/shm is refused by the spill store, and a
// tmpfs makes every flush free: the setup line names the filesystem).
//
//  1. Spill write and rehydrate, for 64-byte and 256-byte values (the relay's
//     largest value is 256 B). Contender: a raw_fifo relay with
//     Overflow::Spill whose hot head holds one page of records (high water =
//     records per page, capacity 1.25x that: a seal takes the pending entries,
//     so a page is only as full as the head), page_size 1 MiB, no reader
//     attached. `--pages` x records-per-page + 1 writes seal exactly `--pages`
//     pages (at most 60: a relay keeps at most 64 cold pages). Timed: every
//     write, seals included. A second contender does the same with the
//     writer's pages sealed on its sealer thread (SealMode::Background; the
//     timed writes end when its last seal has ended). Then a RelayReader
//     drains everything (credit 2^20, until empty; a take never spans two
//     pages), checking that every op comes in order with its value, and each
//     page file is acknowledged (retired into removed/, directory fsynced,
//     unlinked by the reader's purger thread) as its last record is
//     committed. Timed: the drain (and, apart, the reader's close, which
//     waits for the last unlinks).
//     Baseline: a plain loop that writes the same bytes into files of the same
//     size in a sibling directory (same filesystem): per page, the records
//     (48-byte record header + value padded to 8) serialised into a buffer,
//     then the seal's flush sequence: pwrite content at 4 KiB, fdatasync,
//     pwrite the 4 KiB header, fdatasync, rename .tmp -> .spill, fsync the
//     directory. No CRC, no statvfs, no posix_fallocate: those are the
//     store's own costs. Then a plain sequential read of the same files: open,
//     pread the whole file, CRC32C of the content (the reader validates it),
//     the same per-record check as the relay side. Then, timed apart, the
//     files are removed the way the reader acknowledges a page (unlink, fsync
//     the directory, per page): the relay's drain includes that, so "read +
//     unlink + fsync dir" is shown beside the plain read (information; the
//     target is against the plain read, as the issue asks).
//     MB/s = file bytes (4 KiB header + content, per page) / time, both sides.
//     Targets: relay / plain >= 0.7 for the write and for the read.
//     Page cache: before each side reads, the cached pages of its files are
//     dropped (posix_fadvise DONTNEED, after the writes' flushes), so both
//     read from the disk, as a reader coming back to pages spilled long ago
//     does. --hot-cache skips that: both read from the page cache, and the
//     plain side becomes a memcpy (information: it measures the reader's CPU
//     and per-page unlink cost, not a disk).
//
//  2. Writer latency while pages seal: two writers (this thread and a second
//     thread pinned to the other CPU) write 64-byte values at --rate/2 each
//     (0: flat out) into a Spill relay with 64 KiB pages (the library's
//     default) and a high water of one page of records (a seal every page's
//     worth of writes), --lat-pages pages sealing along the way, no reader;
//     every write is timed alone (rdtsc around write()). Baseline: the same
//     relay (same capacity, room for every write of the run) with the high
//     water above the run's writes: it never seals. Reported: p50 / p99 /
//     p99.9 / max over both writers, and the writes that started while a seal
//     was in flight (the segment's seal record read without the mutex just
//     before the write: the sealer is then the other writer) with their p50
//     and p99: a seal writes its page with the relay mutex released, so those
//     writes must not wait for the disk. The writer that seals waits for its
//     own page: with one seal per page of writes that puts its write above
//     p99.9 with 64 KiB pages, not at p99 (--lat-page-size moves that).
//     Ratios spill / no-spill (no target: the issue asks that writers not
//     wait for the disk). The latencies are of write() only (no coordinated-
//     omission correction). Afterwards each relay is drained and every op
//     checked (each writer's ops in its order, sequences increasing). A
//     third case seals the same pages on each writer's sealer thread
//     (SealMode::Background): then no write waits for its own page either.
//
//  3. Writer latency while the reader drains cold pages: a relay holding
//     --drain-pages pages of 1 MiB (--page-size) on disk, their page cache
//     dropped; a reader thread pinned to the other CPU drains them (each
//     page read from the disk, validated, delivered, acknowledged: unlink
//     and directory fsync), while this thread writes 64-byte values into
//     the hot head at --rate (no seal: the high water is above the run).
//     Every write timed alone; the writes that started while the reader was
//     draining are reported apart. Baseline: the same relay and writes with
//     the reader idle (it drains afterwards, untimed). The reader reads a
//     page and removes an acknowledged one with the relay unlocked, so the
//     writes must not wait for its disk either.
//
// Usage: xproc_spill --quick   (3 rounds, 24 pages of 1 MiB per throughput run,
//                               16 pages of 64 KiB per latency run; ~10 s)
//        xproc_spill           (5 rounds, 56 and 56 pages)
//        xproc_spill --dir /mnt/ssd/tmp   (the spill directory on another disk)
//        xproc_spill --smoke   (correctness only; ctest bench_smoke_xproc_spill)
// or scripts/bench.sh --only xproc_spill. Timings only mean something on a
// quiet machine and a real disk (not a tmpfs): the flushes dominate.
#include "harness/harness.hpp"
#include "shm/platform/page_crc.hpp"
#include "shm/relay/relay.hpp"
#include "shm/spill/page.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

namespace {

using namespace shm::bench;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr std::string_view kUsage =
    R"(xproc_spill: spill store write, rehydrate and writer latency against plain file I/O, same run

usage: xproc_spill [--quick | --smoke] [options]

  --quick            3 rounds, 24 pages per throughput run, 16 pages per latency run
  (default)          5 rounds, 56 pages per throughput run, 56 pages per latency run
  --smoke            1 round of tiny runs; checks the data, asserts nothing about speed
  --reps N           rounds (each round runs every case once, interleaved)
  --dir DIR          where the fresh spill directory goes (default /var/tmp; not /dev/shm)
  --pages N          pages per throughput run, [1, 60] (a relay keeps at most 64 cold pages)
  --page-size B      page file bytes for the throughput runs (default 1048576)
  --sizes A,B        value sizes of the throughput runs, each in [8, 256] (default 64,256)
  --lat-pages N      pages sealed per latency run, [1, 60]
  --lat-page-size B  page file bytes for the latency runs (default 65536, the library's)
  --rate N           writes/s in the latency runs (default 50000; 0: flat out)
  --drain-pages N    pages the reader drains in the drain-latency runs, [1, 60]
                     (default 16; --quick 8)
  --only CASE        run one comparison: write (write and rehydrate), latency, drain
  --cpu C            the CPU to pin to (default: the first allowed)
  --hot-cache        read the pages back from the page cache (default: dropped first,
                     posix_fadvise DONTNEED on every file, so both sides read the disk)
  --room F           write runs: the hot head's room above high water, in pages
                     (default 0.25: capacity 1.25 pages; a background seal
                     overlaps the writes only while that room lasts)
  --csv FILE         also write every per-round value to FILE
  --check-targets    exit 3 when a target ratio is missed
)";

constexpr std::uint64_t kMiB = 1ull << 20;
constexpr std::uint32_t kLatencyValue = 64;

struct Options {
  RunOptions run;
  std::string dir = "/var/tmp";
  std::uint64_t pages = 56;
  std::uint64_t page_size = kMiB;
  std::vector<std::size_t> sizes{64, 256};
  std::uint64_t lat_pages = 56;
  std::uint64_t lat_page_size = 64 * 1024;
  std::uint64_t rate = 50'000;
  std::uint64_t drain_pages = 16;
  std::string only;  // empty: every comparison
  int cpu = 0;
  bool hot_cache = false;  // read the pages from the page cache (default: from the disk)
  double room = 0.25;      // hot head room above high water, in pages (case 1)
};

// Records of `value` bytes a page of `page_size` file bytes holds.
std::uint64_t records_per_page(std::uint64_t page_size, std::size_t value) {
  const std::uint64_t stride = shm::spill::record_stride(static_cast<std::uint32_t>(value));
  return page_size > shm::spill::kPageHeaderSize
             ? (page_size - shm::spill::kPageHeaderSize) / stride
             : 0;
}

Options parse_options(int argc, char** argv) {
  Args args(argc, argv);
  Options o;
  o.run = parse_run_options(args, 5, 3);
  if (o.run.quick) {
    o.pages = 24;
    o.lat_pages = 16;
    o.drain_pages = 8;
  }
  if (o.run.smoke) {
    o.pages = 4;
    o.page_size = 64 * 1024;
    o.lat_pages = 4;
    o.lat_page_size = 16 * 1024;
    o.rate = 0;
    o.drain_pages = 2;
  }
  o.dir = args.value("--dir", o.dir);
  o.pages = static_cast<std::uint64_t>(args.int_value("--pages", static_cast<int>(o.pages)));
  o.page_size = static_cast<std::uint64_t>(
      args.double_value("--page-size", static_cast<double>(o.page_size)));
  if (const std::string s = args.value("--sizes", ""); !s.empty()) o.sizes = parse_sizes(s);
  o.lat_pages =
      static_cast<std::uint64_t>(args.int_value("--lat-pages", static_cast<int>(o.lat_pages)));
  o.lat_page_size = static_cast<std::uint64_t>(
      args.double_value("--lat-page-size", static_cast<double>(o.lat_page_size)));
  o.rate = static_cast<std::uint64_t>(args.double_value("--rate", static_cast<double>(o.rate)));
  o.drain_pages =
      static_cast<std::uint64_t>(args.int_value("--drain-pages", static_cast<int>(o.drain_pages)));
  o.only = args.value("--only", "");
  if (!o.only.empty() && o.only != "write" && o.only != "latency" && o.only != "drain")
    throw BenchError("--only: write, latency or drain");
  o.cpu = args.int_value("--cpu", allowed_cpus().front());
  o.hot_cache = args.flag("--hot-cache");
  o.room = args.double_value("--room", o.room);
  args.finish(kUsage);
  if (o.room < 0.01 || o.room > 4) throw BenchError("--room must be in [0.01, 4] pages");
  if (o.pages < 1 || o.pages > 60) throw BenchError("--pages must be in [1, 60]");
  if (o.lat_pages < 1 || o.lat_pages > 60) throw BenchError("--lat-pages must be in [1, 60]");
  if (o.drain_pages < 1 || o.drain_pages > 60) throw BenchError("--drain-pages must be in [1, 60]");
  if (o.sizes.empty()) throw BenchError("--sizes is empty");
  for (const std::size_t s : o.sizes)
    if (s < 8 || s > 256) throw BenchError("--sizes: each value size must be in [8, 256]");
  for (const std::uint64_t p : {o.page_size, o.lat_page_size}) {
    if (p > shm::spill::kPageHeaderSize + shm::spill::kMaxPageContent)
      throw BenchError("a page size is at most 4 KiB + 64 MiB");
    for (const std::size_t s : o.sizes)
      if (records_per_page(p, s) < 16) throw BenchError("a page must hold at least 16 records");
  }
  if (records_per_page(o.lat_page_size, kLatencyValue) < 16)
    throw BenchError("--lat-page-size must hold at least 16 records of 64 B");
  // The latency relays hold every write of the run in their head.
  if (o.lat_pages * records_per_page(o.lat_page_size, kLatencyValue) + 1 > (1u << 22))
    throw BenchError("--lat-pages x records per page must stay under 2^22 writes");
  if (o.rate > 20'000'000) throw BenchError("--rate must be at most 2e7");
  return o;
}

// ---------------------------------------------------------------- files

// A fresh directory under --dir, removed with everything in it at the end.
class BaseDir {
 public:
  explicit BaseDir(const std::string& parent) {
    std::string tmpl = parent + "/xproc-spill-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr)
      throw BenchError(fmt::format("mkdtemp {}: {}", tmpl, std::strerror(errno)));
    path_ = fs::absolute(tmpl).lexically_normal().string();
  }
  BaseDir(const BaseDir&) = delete;
  BaseDir& operator=(const BaseDir&) = delete;
  ~BaseDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

std::string filesystem_of(const std::string& path) {
  struct statfs s {};
  if (::statfs(path.c_str(), &s) != 0) return "unknown filesystem";
  switch (static_cast<unsigned long>(s.f_type)) {
    case EXT4_SUPER_MAGIC:
      return "ext2/3/4";
    case XFS_SUPER_MAGIC:
      return "xfs";
    case BTRFS_SUPER_MAGIC:
      return "btrfs";
    case OVERLAYFS_SUPER_MAGIC:
      return "overlayfs";
    case TMPFS_MAGIC:
      return "tmpfs (RAM: every flush is free, the numbers say nothing of a disk)";
    default:
      return fmt::format("filesystem type {:#x}", static_cast<unsigned long>(s.f_type));
  }
}

class Fd {
 public:
  explicit Fd(int fd) noexcept : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] int get() const noexcept { return fd_; }

 private:
  int fd_;
};

[[noreturn]] void fail_errno(std::string_view what, const std::string& path) {
  throw BenchError(fmt::format("{} {}: {}", what, path, std::strerror(errno)));
}

int open_or_throw(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0600);
  if (fd < 0) fail_errno("open", path);
  return fd;
}

// pread or pwrite of the whole range, resumed after short transfers.
template <class Byte, class Io>
void transfer_all(Io io, const char* what, int fd, Byte* p, std::size_t size, off_t at,
                  const std::string& path) {
  while (size > 0) {
    const ssize_t n = io(fd, p, size, at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail_errno(what, path);
    p += n;
    size -= static_cast<std::size_t>(n);
    at += n;
  }
}

void pwrite_all(int fd, const void* data, std::size_t size, off_t at, const std::string& path) {
  transfer_all(::pwrite, "pwrite", fd, static_cast<const char*>(data), size, at, path);
}

void pread_all(int fd, void* data, std::size_t size, off_t at, const std::string& path) {
  transfer_all(::pread, "pread", fd, static_cast<char*>(data), size, at, path);
}

// ---------------------------------------------------------------- values

// Op i's value: its index, then the byte i & 0xff. Both sides make it the
// same way and check it the same way (the index and the last byte).
void make_value(std::span<std::byte> out, std::uint64_t i) {
  std::memcpy(out.data(), &i, 8);
  std::memset(out.data() + 8, static_cast<int>(i & 0xff), out.size() - 8);
}

bool value_is(std::span<const std::byte> v, std::uint64_t i, std::size_t size) {
  if (v.size() != size) return false;
  std::uint64_t got = 0;
  std::memcpy(&got, v.data(), 8);
  return got == i && v[size - 1] == static_cast<std::byte>(i & 0xff);
}

std::string fresh_name(std::string_view what) {
  static int counter = 0;
  return fmt::format("xproc-spill-{}-{}", what, counter++);
}

const TickClock& tick_clock() {
  static const TickClock clock;
  return clock;
}

double mb_per_s(std::uint64_t bytes, std::uint64_t ns) {
  return static_cast<double>(bytes) / 1e6 / (static_cast<double>(ns) / 1e9);
}

// ---------------------------------------------------------------- 1. write and rehydrate

// The raw_fifo Spill relay of both comparisons. A seal takes the pending
// entries, up to a page's worth: with the high water at a page's records,
// every seal writes one full page (a smaller head would write smaller pages).
// Drops the page cache of every regular file in `dir` (posix_fadvise
// DONTNEED after the writes' flushes): the reads that follow come from the
// disk, as a reader coming back to pages spilled long ago would read them.
// Unless --hot-cache.
// Entries of `dir` (0 when it does not exist).
std::size_t files_under(const std::string& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  return ec ? 0 : static_cast<std::size_t>(std::distance(it, fs::directory_iterator{}));
}

void drop_cache_of(const std::string& dir, bool hot_cache) {
  if (hot_cache) return;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const Fd f(open_or_throw(e.path().string(), O_RDONLY));
    (void)::posix_fadvise(f.get(), 0, 0, POSIX_FADV_DONTNEED);
  }
}

shm::RelayConfig spill_config(std::uint32_t value, std::uint64_t page_size, const std::string& dir,
                              std::uint64_t high, std::uint32_t capacity) {
  shm::RelayConfig cfg;
  cfg.policy = shm::policy::kRawFifo;
  cfg.value_bytes = value;
  cfg.max_entries = capacity;
  cfg.backpressure = {shm::Dimension::Count, high, std::max<std::uint64_t>(1, high / 4),
                      shm::Overflow::Spill};
  cfg.spill_dedup = true;  // raw_fifo is not idempotent (the reader dedups by first_seq)
  cfg.spill.enabled = true;
  cfg.spill.dir = dir;
  cfg.spill.page_size = page_size;
  return cfg;
}

Measurement relay_spill_run(const Options& o, const BaseDir& base, std::size_t value,
                            shm::SealMode seal_mode) {
  const std::string name = fresh_name(fmt::format("w{}", value));
  const std::string dir = base.path() + "/" + name;
  const std::uint64_t records = records_per_page(o.page_size, value);
  const std::uint64_t page_bytes =
      shm::spill::kPageHeaderSize +
      records * shm::spill::record_stride(static_cast<std::uint32_t>(value));
  const std::uint64_t ops = o.pages * records + 1;  // op k x records seals page k
  const auto room = static_cast<std::uint64_t>(static_cast<double>(records) * o.room);
  const auto cfg =
      spill_config(static_cast<std::uint32_t>(value), page_bytes, dir, records,
                   static_cast<std::uint32_t>(records + std::max<std::uint64_t>(1, room)));
  auto w = shm::RelayWriter::create(name, cfg);
  if (!w) throw BenchError(w.error().what());
  prefault(w->segment().data(), true);
  std::vector<std::byte> v(value);
  if (auto ok = w->set_seal_mode(seal_mode); !ok) throw BenchError(ok.error().what());

  // Write: every op, the seals included.
  const std::uint64_t t0 = now_ns();
  for (std::uint64_t i = 0; i < ops; ++i) {
    make_value(v, i);
    auto r = w->write(v, 0ns);  // a fallback to Block would be TimedOut
    if (!r) throw BenchError(r.error().what());
    if (r->status != shm::WriteStatus::Appended)
      throw BenchError(fmt::format("write {}: {}, not appended", i, shm::to_string(r->status)));
  }
  // Background: the last seal may still be under way; back to Inline waits
  // for it (timed: the pages are on disk at the end on both sides).
  if (auto ok = w->set_seal_mode(shm::SealMode::Inline); !ok) throw BenchError(ok.error().what());
  const std::uint64_t write_ns = now_ns() - t0;
  const shm::RelaySnapshot s = w->snapshot();
  if (s.pages_sealed != o.pages || s.cold_pages != o.pages || s.depth != 1 || s.blocked != 0 ||
      s.spill_fallbacks != 0 || s.cold_bytes != o.pages * page_bytes)
    throw BenchError(
        fmt::format("after the writes: {} pages sealed, {} cold ({} bytes), {} hot, "
                    "{} blocked, {} fallbacks; expected {} pages of {} bytes",
                    s.pages_sealed, s.cold_pages, s.cold_bytes, s.depth, s.blocked,
                    s.spill_fallbacks, o.pages, page_bytes));

  // Rehydrate: a reader drains the cold pages (then the one hot op).
  drop_cache_of(dir, o.hot_cache);
  auto r = shm::RelayReader::open(name);
  if (!r) throw BenchError(r.error().what());
  std::uint64_t next = 0;
  const std::uint64_t cold_ops = o.pages * records;
  const std::uint64_t t1 = now_ns();
  for (;;) {
    auto n = r->drain(1u << 20, [&](const shm::RelayEntry& e) {
      if (e.first_seq != next + 1 || !value_is(e.value, next, value) ||
          (e.page_id == 0) != (next >= cold_ops) || e.redelivered)
        throw BenchError(fmt::format("rehydrate: op {} came wrong (first_seq {}, page {})", next,
                                     e.first_seq, e.page_id));
      ++next;
    });
    if (!n) throw BenchError(n.error().what());
    if (*n == 0) break;
  }
  const std::uint64_t read_ns = now_ns() - t1;
  const shm::RelaySnapshot after = r->snapshot();
  if (next != ops || after.pages_acked != o.pages || after.cold_pages != 0 || after.lag != 0)
    throw BenchError(fmt::format("rehydrate: {} of {} ops, {} of {} pages acknowledged", next, ops,
                                 after.pages_acked, o.pages));
  // Every page left the directory at its acknowledgement (renamed into
  // removed/, directory fsynced); the unlinks run on the reader's purger
  // thread. Closing the reader waits for the last of them: that time counts
  // in read_rm_mbs, so it compares with the plain read + unlink + fsync.
  const std::uint64_t t2 = now_ns();
  *r = shm::RelayReader{};
  const std::uint64_t close_ns = now_ns() - t2;
  if (const auto left = files_under(dir + "/removed"); left != 0)
    throw BenchError(fmt::format("rehydrate: {} page files left in removed/", left));
  (void)shm::Segment::unlink(name);
  std::error_code ec;
  fs::remove_all(dir, ec);
  const std::uint64_t bytes = o.pages * page_bytes;
  return Measurement()
      .set("write_mbs", mb_per_s(bytes, write_ns))
      .set("read_mbs", mb_per_s(bytes, read_ns))
      .set("read_rm_mbs", mb_per_s(bytes, read_ns + close_ns))  // every file unlinked
      .set("mib", static_cast<double>(bytes) / static_cast<double>(kMiB));
}

// The same bytes, written and read back with plain file I/O.
Measurement plain_file_run(const Options& o, const BaseDir& base, std::size_t value) {
  const std::string dir = base.path() + "/" + fresh_name(fmt::format("plain{}", value));
  if (::mkdir(dir.c_str(), 0700) != 0) fail_errno("mkdir", dir);
  const Fd dir_fd(open_or_throw(dir, O_RDONLY | O_DIRECTORY));
  const std::uint64_t records = records_per_page(o.page_size, value);
  const std::uint64_t stride = shm::spill::record_stride(static_cast<std::uint32_t>(value));
  const std::uint64_t content_bytes = records * stride;
  const std::uint64_t page_bytes = shm::spill::kPageHeaderSize + content_bytes;
  std::vector<std::byte> content(content_bytes), header(shm::spill::kPageHeaderSize);
  std::vector<std::byte> v(value);
  std::vector<std::uint32_t> crcs;
  auto path_of = [&](std::uint64_t page, std::string_view ext) {
    return fmt::format("{}/page-{:016x}.{}", dir, page, ext);
  };

  // Write: per page, serialise the records, then the seal's flush sequence.
  std::uint64_t write_ns = 0;
  std::uint64_t i = 0;
  for (std::uint64_t page = 1; page <= o.pages; ++page) {
    const std::uint64_t t0 = now_ns();
    std::byte* at = content.data();
    const std::uint64_t first = i;
    for (std::uint64_t k = 0; k < records; ++k, ++i, at += stride) {
      make_value(v, i);
      const shm::spill::PageRecord rec{0, i + 1, i + 1, 1, i + 1, static_cast<std::uint32_t>(value),
                                       0};
      std::memcpy(at, &rec, sizeof rec);
      std::memcpy(at + sizeof rec, v.data(), value);
    }
    shm::spill::PageHeader h{};
    h.magic = shm::spill::kPageMagic;
    h.page_id = page;
    h.first_seq = first + 1;
    h.last_seq = i;
    h.records = records;
    h.ops = records;
    h.content_bytes = content_bytes;
    std::memcpy(header.data(), &h, sizeof h);
    const std::string tmp = path_of(page, "tmp"), final_path = path_of(page, "spill");
    {
      const Fd f(open_or_throw(tmp, O_RDWR | O_CREAT | O_TRUNC));
      pwrite_all(f.get(), content.data(), content.size(),
                 static_cast<off_t>(shm::spill::kPageHeaderSize), tmp);
      if (::fdatasync(f.get()) != 0) fail_errno("fdatasync", tmp);
      pwrite_all(f.get(), header.data(), header.size(), 0, tmp);
      if (::fdatasync(f.get()) != 0) fail_errno("fdatasync", tmp);
    }
    if (::rename(tmp.c_str(), final_path.c_str()) != 0) fail_errno("rename", tmp);
    if (::fsync(dir_fd.get()) != 0) fail_errno("fsync", dir);
    write_ns += now_ns() - t0;
    crcs.push_back(
        shm::page::checksum(content.data(), content.size()));  // untimed: for the read's check
  }

  // Read: every file in order, its CRC and its records checked.
  drop_cache_of(dir, o.hot_cache);
  std::vector<std::byte> file;
  std::uint64_t next = 0;
  const std::uint64_t t1 = now_ns();
  for (std::uint64_t page = 1; page <= o.pages; ++page) {
    const std::string path = path_of(page, "spill");
    const Fd f(open_or_throw(path, O_RDONLY));
    struct stat st {};
    if (::fstat(f.get(), &st) != 0) fail_errno("fstat", path);
    if (static_cast<std::uint64_t>(st.st_size) != page_bytes)
      throw BenchError(fmt::format("{}: {} bytes, expected {}", path, st.st_size, page_bytes));
    file.resize(page_bytes);
    pread_all(f.get(), file.data(), file.size(), 0, path);
    shm::spill::PageHeader h{};
    std::memcpy(&h, file.data(), sizeof h);
    const std::span<const std::byte> body(file.data() + shm::spill::kPageHeaderSize,
                                          h.content_bytes);
    if (h.magic != shm::spill::kPageMagic || h.content_bytes != content_bytes ||
        shm::page::checksum(body.data(), body.size()) != crcs[page - 1])
      throw BenchError(fmt::format("{}: header or content CRC wrong", path));
    for (std::uint64_t k = 0; k < h.records; ++k, ++next) {
      shm::spill::PageRecord rec{};
      std::memcpy(&rec, body.data() + k * stride, sizeof rec);
      if (rec.first_seq != next + 1 ||
          !value_is(body.subspan(k * stride + sizeof rec, rec.len), next, value))
        throw BenchError(fmt::format("plain read: op {} came wrong", next));
    }
  }
  const std::uint64_t read_ns = now_ns() - t1;
  if (next != o.pages * records) throw BenchError("plain read: ops missing");
  // What the relay's reader also does per page, timed apart (information):
  // the acknowledgement's unlink and directory fsync.
  const std::uint64_t t2 = now_ns();
  for (std::uint64_t page = 1; page <= o.pages; ++page) {
    const std::string path = path_of(page, "spill");
    if (::unlink(path.c_str()) != 0) fail_errno("unlink", path);
    if (::fsync(dir_fd.get()) != 0) fail_errno("fsync", dir);
  }
  const std::uint64_t remove_ns = now_ns() - t2;
  std::error_code ec;
  fs::remove_all(dir, ec);
  const std::uint64_t bytes = o.pages * page_bytes;
  return Measurement()
      .set("write_mbs", mb_per_s(bytes, write_ns))
      .set("read_mbs", mb_per_s(bytes, read_ns))
      .set("read_rm_mbs", mb_per_s(bytes, read_ns + remove_ns))
      .set("mib", static_cast<double>(bytes) / static_cast<double>(kMiB));
}

Comparison throughput_comparison(const Options& o, const BaseDir& base) {
  Comparison c(
      fmt::format("Spill write and rehydrate, {} pages of {} KiB per run (CPU {}; reads from "
                  "{})",
                  o.pages, o.page_size / 1024, o.cpu,
                  o.hot_cache ? "the page cache" : "the disk: page cache dropped"),
      {MetricSpec{"write_mbs", "write MB/s", 1.0, 1}, MetricSpec{"read_mbs", "read MB/s", 1.0, 1},
       MetricSpec{"read_rm_mbs", "read + unlink + fsync dir MB/s", 1.0, 1},
       MetricSpec{"mib", "MiB per run", 1.0, 1}});
  for (const std::size_t size : o.sizes) {
    const std::string relay = fmt::format("relay Spill, {} B values", size);
    const std::string plain = fmt::format("plain files, {} B values", size);
    const std::string threaded = fmt::format("relay Spill, sealing on a thread, {} B values", size);
    c.add_case(relay,
               [&o, &base, size] { return relay_spill_run(o, base, size, shm::SealMode::Inline); });
    c.add_case(threaded, [&o, &base, size] {
      return relay_spill_run(o, base, size, shm::SealMode::Background);
    });
    c.add_case(plain, [&o, &base, size] { return plain_file_run(o, base, size); });
    c.add_ratio({fmt::format("spill write, sealing on a thread / plain write, {} B (MB/s)", size),
                 threaded, "write_mbs", plain, "write_mbs", Target{Goal::AtLeast, 0.7}});
    c.add_ratio({fmt::format("spill write / plain write, {} B (MB/s)", size), relay, "write_mbs",
                 plain, "write_mbs", Target{Goal::AtLeast, 0.7}});
    c.add_ratio({fmt::format("rehydrate / plain read, {} B (MB/s)", size), relay, "read_mbs", plain,
                 "read_mbs", Target{Goal::AtLeast, 0.7}});
    c.add_ratio({fmt::format("rehydrate / plain read + unlink + fsync dir, {} B", size), relay,
                 "read_rm_mbs", plain, "read_rm_mbs", std::nullopt});
  }
  return c;
}

// ---------------------------------------------------------------- 2. writer latency

// One writer thread of a latency run: its share of the writes, paced, each
// timed alone, with whether a seal (by the other writer) was in flight when
// it started.
struct WriterLog {
  std::vector<std::uint64_t> ticks;
  std::vector<bool> started_in_seal;
  std::string error;
};

void latency_writer(shm::RelayWriter& w, int writer, std::uint64_t writes, std::uint64_t rate,
                    std::uint64_t start, int cpu, WriterLog& log) {
  if (cpu >= 0) (void)pin_to_cpu(cpu);
  // The segment's seal record, read without the mutex: was a seal in flight
  // when this write started? This thread is not writing then, so the sealer
  // is the other writer.
  const std::atomic<std::uint32_t>& seal_state = w.view().spill->seal_state;
  log.ticks.resize(writes);
  log.started_in_seal.resize(writes);
  std::array<std::byte, kLatencyValue> v{};
  while (now_ns() < start) spin_pause();
  for (std::uint64_t i = 0; i < writes; ++i) {
    if (rate != 0) {
      const std::uint64_t due = start + i * 1'000'000'000ull / rate;
      while (now_ns() < due) spin_pause();
    }
    make_value(v, 2 * i + static_cast<std::uint64_t>(writer));
    log.started_in_seal[i] = seal_state.load(std::memory_order_relaxed) != 0;
    const std::uint64_t t0 = TickClock::ticks();
    auto r = w.write(v, 0ns);
    const std::uint64_t t1 = TickClock::ticks();
    if (!r || r->status != shm::WriteStatus::Appended) {
      log.error = r ? fmt::format("write {}: {}, not appended", i, shm::to_string(r->status))
                    : r.error().what();
      return;
    }
    log.ticks[i] = t1 - t0;
  }
}

// The latency metrics of a run (µs): p50, p99, p99.9 and max of every write;
// and for the writes in `flagged` (those that overlapped the other side's
// disk work) their count and p50, p99, max as <part>_writes, <part>_p50_us,
// <part>_p99_us, <part>_max_us.
Measurement latency_metrics(std::vector<double> all, std::vector<double> flagged,
                            const std::string& part) {
  const Summary a = summarize(std::move(all));
  Measurement m;
  m.set("p50_us", a.p50)
      .set("p99_us", a.p99)
      .set("p999_us", a.p999)
      .set("max_us", a.max)
      .set(part + "_writes", static_cast<double>(flagged.size()));
  if (!flagged.empty()) {
    const Summary b = summarize(std::move(flagged));
    m.set(part + "_p50_us", b.p50).set(part + "_p99_us", b.p99).set(part + "_max_us", b.max);
  }
  return m;
}

Measurement latency_run(const Options& o, const BaseDir& base, bool spill,
                        shm::SealMode seal_mode = shm::SealMode::Inline) {
  const std::string name = fresh_name(spill ? "lat" : "nolat");
  const std::string dir = base.path() + "/" + name;
  const std::uint64_t records = records_per_page(o.lat_page_size, kLatencyValue);
  const std::uint64_t page_bytes =
      shm::spill::kPageHeaderSize + records * shm::spill::record_stride(kLatencyValue);
  const std::uint64_t per_writer = (o.lat_pages * records) / 2 + 1;
  const std::uint64_t writes = 2 * per_writer;
  // Both relays hold every write in their head; only the high water differs.
  const auto cfg = spill_config(kLatencyValue, page_bytes, dir, spill ? records : writes + 1,
                                static_cast<std::uint32_t>(writes + 1));
  auto w0 = shm::RelayWriter::create(name, cfg);
  if (!w0) throw BenchError(w0.error().what());
  prefault(w0->segment().data(), true);
  auto w1 = shm::RelayWriter::open(name);
  if (!w1) throw BenchError(w1.error().what());
  if (spill)
    for (shm::RelayWriter* w : {&*w0, &*w1})
      if (auto ok = w->set_seal_mode(seal_mode); !ok) throw BenchError(ok.error().what());
  const std::vector<int> cpus = allowed_cpus();
  const int other = cpus.size() > 1 ? (cpus[0] == o.cpu ? cpus[1] : cpus[0]) : -1;
  std::array<WriterLog, 2> logs;
  const std::uint64_t start = now_ns() + 2'000'000;
  const std::uint64_t rate = o.rate / 2;
  std::thread second([&] { latency_writer(*w1, 1, per_writer, rate, start, other, logs[1]); });
  latency_writer(*w0, 0, per_writer, rate, start, -1, logs[0]);
  second.join();
  for (const WriterLog& l : logs)
    if (!l.error.empty()) throw BenchError("latency run: " + l.error);
  for (shm::RelayWriter* w : {&*w0, &*w1})  // a background seal under way ends
    if (auto ok = w->set_seal_mode(shm::SealMode::Inline); !ok) throw BenchError(ok.error().what());
  const shm::RelaySnapshot s = w0->snapshot();
  // How many pages seal depends on the race, in both modes: a write that
  // finds the level full while a seal is in flight (the other writer's, or
  // the sealer thread's) goes on into the head's free entries, which hold
  // every write here. A seal slower than the other writer's remaining writes
  // (a loaded machine, a slow disk) leaves those in the head: as few as one
  // page seals. The count is reported with the latencies.
  if (spill ? s.pages_sealed == 0 : s.pages_sealed != 0)
    throw BenchError(fmt::format("latency run: {} pages sealed (expected {})", s.pages_sealed,
                                 spill ? "at least 1" : "0"));
  if (s.blocked != 0) throw BenchError(fmt::format("latency run: {} writes blocked", s.blocked));
  // Every op back (cold pages first), each writer's in its order, untimed.
  auto r = shm::RelayReader::open(name);
  if (!r) throw BenchError(r.error().what());
  std::array<std::uint64_t, 2> next{0, 0};
  std::uint64_t last_seq = 0, got = 0;
  for (;;) {
    auto n = r->drain(1u << 20, [&](const shm::RelayEntry& e) {
      std::uint64_t k = 0;
      if (e.value.size() == kLatencyValue) std::memcpy(&k, e.value.data(), 8);
      const std::uint64_t writer = k % 2;
      if (e.first_seq <= last_seq || !value_is(e.value, k, kLatencyValue) || k / 2 != next[writer])
        throw BenchError(
            fmt::format("latency run: entry {} (seq {}) came back wrong", got, e.first_seq));
      last_seq = e.first_seq;
      ++next[writer];
      ++got;
    });
    if (!n) throw BenchError(n.error().what());
    if (*n == 0) break;
  }
  if (got != writes) throw BenchError("latency run: ops missing after the drain");
  (void)shm::Segment::unlink(name);
  std::error_code ec;
  fs::remove_all(dir, ec);

  std::vector<double> all, overlapped;
  all.reserve(writes);
  for (const WriterLog& l : logs)
    for (std::uint64_t i = 0; i < per_writer; ++i) {
      const double us = tick_clock().to_ns(l.ticks[i]) / 1e3;
      all.push_back(us);
      if (l.started_in_seal[i]) overlapped.push_back(us);
    }
  return latency_metrics(std::move(all), std::move(overlapped), "seal")
      .set("pages_sealed", static_cast<double>(s.pages_sealed));
}

Comparison latency_comparison(const Options& o, const BaseDir& base) {
  const std::uint64_t records = records_per_page(o.lat_page_size, kLatencyValue);
  Comparison c(
      fmt::format("Writer latency, two writers (threads on two CPUs), {} writes of {} B in "
                  "all at {}, {} pages of {} KiB sealing (one every {} writes), CPU {}",
                  o.lat_pages * records + 2, kLatencyValue,
                  o.rate == 0 ? std::string("full speed") : fmt::format("{} writes/s", o.rate),
                  o.lat_pages, o.lat_page_size / 1024, records, o.cpu),
      {MetricSpec{"p50_us", "p50 µs", 1.0, 2}, MetricSpec{"p99_us", "p99 µs", 1.0, 2},
       MetricSpec{"p999_us", "p99.9 µs", 1.0, 1}, MetricSpec{"max_us", "max µs", 1.0, 0},
       MetricSpec{"seal_writes", "writes started during the other's seal", 1.0, 0},
       MetricSpec{"seal_p50_us", "their p50 µs", 1.0, 2},
       MetricSpec{"seal_p99_us", "their p99 µs", 1.0, 2},
       MetricSpec{"pages_sealed", "pages sealed", 1.0, 0}});
  c.add_case("relay Spill, pages sealing", [&o, &base] { return latency_run(o, base, true); });
  c.add_case("relay Spill, sealing on a thread",
             [&o, &base] { return latency_run(o, base, true, shm::SealMode::Background); });
  c.add_case("relay never spilling", [&o, &base] { return latency_run(o, base, false); });
  const std::string a = "relay Spill, pages sealing", b = "relay never spilling";
  c.add_ratio({"spill / no-spill write latency p99", a, "p99_us", b, "p99_us", std::nullopt});
  c.add_ratio({"spill / no-spill write latency p99.9", a, "p999_us", b, "p999_us", std::nullopt});
  c.add_ratio({"spill / no-spill write latency max", a, "max_us", b, "max_us", std::nullopt});
  const std::string t = "relay Spill, sealing on a thread";
  c.add_ratio({"spill on a thread / no-spill write latency p99.9", t, "p999_us", b, "p999_us",
               std::nullopt});
  c.add_ratio(
      {"spill on a thread / no-spill write latency max", t, "max_us", b, "max_us", std::nullopt});
  return c;
}

// ---------------------------------------------------------------- 3. writes during a drain

Measurement drain_latency_run(const Options& o, const BaseDir& base, bool draining) {
  const std::string name = fresh_name(draining ? "dlat" : "idlat");
  const std::string dir = base.path() + "/" + name;
  const std::uint64_t records = records_per_page(o.page_size, kLatencyValue);
  const std::uint64_t page_bytes =
      shm::spill::kPageHeaderSize + records * shm::spill::record_stride(kLatencyValue);
  // The timed writes: enough to outlast the drain (the writer goes on until
  // the reader is done), bounded by the head's room.
  const std::uint64_t min_writes = o.run.smoke ? 1000 : 20'000;
  const std::uint64_t max_writes = 100'000;
  const std::uint64_t filled = o.drain_pages * records + 1;
  auto cfg = spill_config(kLatencyValue, page_bytes, dir, records,
                          static_cast<std::uint32_t>(records + 2 + max_writes));
  auto w = shm::RelayWriter::create(name, cfg);
  if (!w) throw BenchError(w.error().what());
  std::array<std::byte, kLatencyValue> v{};
  for (std::uint64_t i = 0; i < filled; ++i) {
    make_value(v, i);
    auto r = w->write(v, 0ns);
    if (!r || r->status != shm::WriteStatus::Appended)
      throw BenchError(r ? fmt::format("fill write {}: {}", i, shm::to_string(r->status))
                         : r.error().what());
  }
  if (w->snapshot().cold_pages != o.drain_pages)
    throw BenchError(fmt::format("drain-latency run: {} cold pages (expected {})",
                                 w->snapshot().cold_pages, o.drain_pages));
  // No seal from here on: the high water at the capacity, above what the head
  // holds in this run (the entries left after the seals and the timed writes).
  if (auto ok = w->retune({shm::Dimension::Count, cfg.max_entries, 1, shm::Overflow::Spill}); !ok)
    throw BenchError(ok.error().what());
  prefault(w->segment().data(), true);
  drop_cache_of(dir, o.hot_cache);
  auto r = shm::RelayReader::open(name);
  if (!r) throw BenchError(r.error().what());

  // Every op comes back once, in order (cold pages first), with its value.
  std::uint64_t next = 0, got = 0, last_seq = 0;
  auto check = [&](const shm::RelayEntry& e) {
    std::uint64_t k = 0;
    if (e.value.size() == kLatencyValue) std::memcpy(&k, e.value.data(), 8);
    if (e.first_seq <= last_seq || k != next || !value_is(e.value, k, kLatencyValue))
      throw BenchError(
          fmt::format("drain-latency run: entry {} (seq {}) came back wrong", got, e.first_seq));
    last_seq = e.first_seq;
    ++next;
    ++got;
  };
  // Drains until a take is empty, or (cold_only) until no cold page is left.
  auto drain = [&](bool cold_only) {
    for (;;) {
      if (cold_only && r->snapshot().cold_pages == 0) return;
      auto n = r->drain(1u << 20, check);
      if (!n) throw BenchError(n.error().what());
      if (*n == 0 && !cold_only) return;
    }
  };
  const std::vector<int> cpus = allowed_cpus();
  const int other = cpus.size() > 1 ? (cpus[0] == o.cpu ? cpus[1] : cpus[0]) : -1;
  std::atomic<int> reader_state{0};  // 0 waiting, 1 draining, 2 done
  std::string reader_error;
  const std::uint64_t start = now_ns() + 2'000'000;
  std::thread reader([&] {
    if (other >= 0) (void)pin_to_cpu(other);
    while (now_ns() < start) spin_pause();
    if (draining) {
      reader_state.store(1, std::memory_order_relaxed);
      try {
        drain(true);  // the cold pages (the hot head fills behind them meanwhile)
      } catch (const std::exception& e) {
        reader_error = e.what();
      }
    }
    reader_state.store(2, std::memory_order_release);
  });
  std::vector<std::uint64_t> ticks;
  std::vector<bool> overlapped;
  ticks.reserve(max_writes);
  overlapped.reserve(max_writes);
  while (now_ns() < start) spin_pause();
  std::string error;
  for (std::uint64_t i = 0; i < max_writes; ++i) {
    if (i >= min_writes && reader_state.load(std::memory_order_acquire) == 2) break;
    if (o.rate != 0) {
      const std::uint64_t due = start + i * 1'000'000'000ull / o.rate;
      while (now_ns() < due) spin_pause();
    }
    make_value(v, filled + i);
    const bool during = reader_state.load(std::memory_order_relaxed) == 1;
    const std::uint64_t t0 = TickClock::ticks();
    auto res = w->write(v, 0ns);
    const std::uint64_t t1 = TickClock::ticks();
    if (!res || res->status != shm::WriteStatus::Appended) {
      error =
          res ? fmt::format("write {}: {}", i, shm::to_string(res->status)) : res.error().what();
      break;
    }
    ticks.push_back(t1 - t0);
    overlapped.push_back(during);
  }
  reader.join();
  if (!reader_error.empty()) throw BenchError(reader_error);
  if (!error.empty()) throw BenchError("drain-latency run: " + error);
  drain(false);
  if (got != filled + ticks.size())
    throw BenchError(
        fmt::format("drain-latency run: {} ops drained, {} written", got, filled + ticks.size()));
  if (r->snapshot().pages_acked != o.drain_pages)
    throw BenchError("drain-latency run: not every page was acknowledged");
  (void)shm::Segment::unlink(name);
  std::error_code ec;
  fs::remove_all(dir, ec);

  std::vector<double> all, during;
  for (std::size_t i = 0; i < ticks.size(); ++i) {
    const double us = tick_clock().to_ns(ticks[i]) / 1e3;
    all.push_back(us);
    if (overlapped[i]) during.push_back(us);
  }
  return latency_metrics(std::move(all), std::move(during), "drain");
}

Comparison drain_latency_comparison(const Options& o, const BaseDir& base) {
  Comparison c(
      fmt::format("Writer latency while the reader drains {} cold pages of {} KiB (read from {}, "
                  "acknowledged), writes of {} B at {}, writer on CPU {}, reader on the other",
                  o.drain_pages, o.page_size / 1024, o.hot_cache ? "the page cache" : "the disk",
                  kLatencyValue,
                  o.rate == 0 ? std::string("full speed") : fmt::format("{} writes/s", o.rate),
                  o.cpu),
      {MetricSpec{"p50_us", "p50 µs", 1.0, 2}, MetricSpec{"p99_us", "p99 µs", 1.0, 2},
       MetricSpec{"p999_us", "p99.9 µs", 1.0, 1}, MetricSpec{"max_us", "max µs", 1.0, 0},
       MetricSpec{"drain_writes", "writes started while the reader drained", 1.0, 0},
       MetricSpec{"drain_p99_us", "their p99 µs", 1.0, 2},
       MetricSpec{"drain_max_us", "their max µs", 1.0, 0}});
  const std::string a = "writes, reader draining", b = "writes, reader idle";
  c.add_case(a, [&o, &base] { return drain_latency_run(o, base, true); });
  c.add_case(b, [&o, &base] { return drain_latency_run(o, base, false); });
  c.add_ratio({"draining / idle write latency p99.9", a, "p999_us", b, "p999_us", std::nullopt});
  c.add_ratio({"draining / idle write latency max", a, "max_us", b, "max_us", std::nullopt});
  return c;
}

int run(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  ScratchRoot root;
  const BaseDir base(o.dir);
  std::vector<std::function<Comparison()>> comparisons;
  if (o.only.empty() || o.only == "write")
    comparisons.emplace_back([&o, &base] { return throughput_comparison(o, base); });
  if (o.only.empty() || o.only == "latency")
    comparisons.emplace_back([&o, &base] { return latency_comparison(o, base); });
  if (o.only.empty() || o.only == "drain")
    comparisons.emplace_back([&o, &base] { return drain_latency_comparison(o, base); });
  return run_report(
      {.program = "xproc_spill",
       .options = o.run,
       .setup = fmt::format("- one process pinned to CPU {}; rounds {}; spill directory {} ({})",
                            o.cpu, o.run.reps, base.path(), filesystem_of(base.path())),
       .pin_cpu = o.cpu,
       .targets_table = true,
       .smoke_ok = "every case checked its data",
       .prepare = [] { (void)tick_clock(); }},
      argc, argv, comparisons);
}

}  // namespace

int main(int argc, char** argv) {
  return guarded_main("xproc_spill", argc, argv, run);
}
