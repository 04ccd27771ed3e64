// Spill pages (kind 8, "spill_page"): the cold, immutable tail of a relay on
// durable storage. docs/spill.md is the user's guide; this note is the format.
//
// A spill directory ($LIBSHM_SPILL_DIR/<relay>, default
// /var/lib/libshm/spill/<relay>; never /dev/shm, which is memory) holds:
//   relay.id                 the directory's identity: a random 64-bit spill
//                            incarnation, written once (tmp, fsync, rename,
//                            fsync dir). Every page carries it; a page with
//                            another id belongs to another relay.
//   page-<16 hex id>.spill   sealed pages, named by page id (ids only grow).
//   page-<16 hex id>.tmp     a page being sealed; never read; removed on open.
//   refused/                 pages that failed validation, moved aside.
//   removed/                 acknowledged pages on their way out (see
//                            retire_page): renamed here, unlinked later by
//                            the reader's background thread. Never read;
//                            anything in it may be unlinked by anyone.
//   relay.owner              the relay bound to the directory: the absolute
//                            path of its segment file (text), rewritten
//                            (tmp, fsync, rename, fsync dir) by every relay
//                            create. One relay per directory: see
//                            read_owner(), lock_binding() and docs/spill.md.
//
// A page file is a 4 KiB header followed by `content_bytes` of records:
//   PageHeader (validated like a segment's handshake header: magic, version,
//   kind, header CRC32C, then relay id, page id, sequence and order ranges,
//   record count, content length and content CRC32C);
//   records: PageRecord (48 bytes) + `len` value bytes, padded to 8.
//
// Seal order (write_page), and why each step is there:
//   1. statvfs preflight, create `page-<id>.tmp` (O_NOFOLLOW): a full disk
//      is NoSpace here, or at the pwrite/fdatasync below if it fills up
//      meanwhile (ENOSPC), the temporary file removed either way; no
//      posix_fallocate (it cost 8% of the write throughput);
//   2. write the content, fdatasync: the records are durable before anything
//      claims they exist;
//   3. write the header (whose CRC covers the content CRC), fdatasync: a
//      header on disk proves the content under it was flushed first;
//   4. rename to `page-<id>.spill`: the final name appears atomically and only
//      over a complete, flushed file;
//   5. fsync the directory: the rename itself survives a power loss;
//   6. (the caller) record the page in the manifest, then free its entries in
//      the hot head. While the relay segment lives the manifest is the commit
//      point; when it is lost (reboot) the directory is, and a page that was
//      renamed but never recorded is adopted on rebuild.
// Pages are written with pwrite, not through a mapping: a mapped write on a
// full filesystem is a SIGBUS, a pwrite is an ENOSPC (docs/spill.md, deviations).
#pragma once

#include "shm/error.hpp"
#include "shm/platform/file.hpp"
#include "shm/segment/kind_ids.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace shm::spill {

inline constexpr std::uint64_t kPageMagic = 0x4C4C'4950'534D'4853ull;  // "SHMSPILL"
inline constexpr std::uint32_t kPageVersion = 1;
inline constexpr std::uint64_t kPageHeaderSize = 4096;
inline constexpr std::uint64_t kMaxPageContent = 64ull << 20;  // 64 MiB

struct PageHeader {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint16_t kind;  // kSpillPageKind
  std::uint16_t flags;
  std::uint64_t relay_id;  // the spill directory's incarnation (relay.id)
  std::uint64_t page_id;
  std::uint64_t first_seq;  // smallest first op sequence of the records
  std::uint64_t last_seq;   // largest last op sequence of the records
  std::uint64_t first_order;
  std::uint64_t last_order;
  std::uint64_t records;
  std::uint64_t ops;  // sum of the records' op counts
  std::uint64_t content_bytes;
  std::uint64_t sealed_ns;  // realtime clock at the seal (Ttl retention)
  std::uint32_t policy;     // the relay's merge policy id
  std::uint32_t content_crc;
  std::uint32_t reserved;
  std::uint32_t header_crc;  // CRC32C of every byte above
};
static_assert(std::is_trivially_copyable_v<PageHeader> && sizeof(PageHeader) == 112);

struct PageRecord {
  std::uint64_t key;
  std::uint64_t first_seq;
  std::uint64_t last_seq;
  std::uint64_t op_count;
  std::uint64_t order;  // the relay's drain-order stamp
  std::uint32_t len;    // value bytes that follow (padded to 8)
  std::uint32_t flags;  // kRecordRedelivered
};
static_assert(std::is_trivially_copyable_v<PageRecord> && sizeof(PageRecord) == 48);
inline constexpr std::uint32_t kRecordRedelivered = 1;

[[nodiscard]] constexpr std::uint64_t record_stride(std::uint32_t len) noexcept {
  return sizeof(PageRecord) + ((std::uint64_t{len} + 7) & ~std::uint64_t{7});
}

// The record head at `at` (any alignment). Field by field: one memcpy of
// the whole head compiled to `rep movs` here (g++ 12, -O2), whose start-up
// cost was most of a page's parse.
[[nodiscard]] inline PageRecord load_record(const std::byte* at) noexcept {
  PageRecord r;
  std::memcpy(&r.key, at + offsetof(PageRecord, key), sizeof r.key);
  std::memcpy(&r.first_seq, at + offsetof(PageRecord, first_seq), sizeof r.first_seq);
  std::memcpy(&r.last_seq, at + offsetof(PageRecord, last_seq), sizeof r.last_seq);
  std::memcpy(&r.op_count, at + offsetof(PageRecord, op_count), sizeof r.op_count);
  std::memcpy(&r.order, at + offsetof(PageRecord, order), sizeof r.order);
  std::memcpy(&r.len, at + offsetof(PageRecord, len), sizeof r.len);
  std::memcpy(&r.flags, at + offsetof(PageRecord, flags), sizeof r.flags);
  return r;
}

// Writes a record head at `at` (any alignment), field by field as above.
inline void store_record(std::byte* at, const PageRecord& r) noexcept {
  std::memcpy(at + offsetof(PageRecord, key), &r.key, sizeof r.key);
  std::memcpy(at + offsetof(PageRecord, first_seq), &r.first_seq, sizeof r.first_seq);
  std::memcpy(at + offsetof(PageRecord, last_seq), &r.last_seq, sizeof r.last_seq);
  std::memcpy(at + offsetof(PageRecord, op_count), &r.op_count, sizeof r.op_count);
  std::memcpy(at + offsetof(PageRecord, order), &r.order, sizeof r.order);
  std::memcpy(at + offsetof(PageRecord, len), &r.len, sizeof r.len);
  std::memcpy(at + offsetof(PageRecord, flags), &r.flags, sizeof r.flags);
}

// One record of a page, as read back (value points into the page's buffer).
struct Record {
  PageRecord head{};
  std::span<const std::byte> value;
};

// Appends records to a page's content buffer.
class PageBuilder {
 public:
  void add(const PageRecord& head, std::span<const std::byte> value);
  [[nodiscard]] std::span<const std::byte> content() const noexcept { return bytes_; }
  [[nodiscard]] std::uint64_t records() const noexcept { return records_; }
  [[nodiscard]] std::uint64_t ops() const noexcept { return ops_; }
  [[nodiscard]] std::uint64_t first_seq() const noexcept { return first_seq_; }
  [[nodiscard]] std::uint64_t last_seq() const noexcept { return last_seq_; }
  [[nodiscard]] std::uint64_t first_order() const noexcept { return first_order_; }
  [[nodiscard]] std::uint64_t last_order() const noexcept { return last_order_; }
  void clear();  // keeps the buffer
  void reserve(std::uint64_t content_bytes);

 private:
  std::vector<std::byte> bytes_;
  std::uint64_t records_ = 0, ops_ = 0, first_seq_ = 0, last_seq_ = 0, first_order_ = 0,
                last_order_ = 0;
};

// A spill directory, opened (and created when asked) with its identity.
class SpillDir {
 public:
  SpillDir() = default;
  // Creates the directory (0700, parents too) when `create`; refuses a
  // symbolic link or a directory owned by another user (UnsafeRoot); reads
  // relay.id, or writes a new one when `create` and it is missing.
  [[nodiscard]] static Result<SpillDir> open(const std::string& path, bool create);
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] std::uint64_t relay_id() const noexcept { return relay_id_; }
  [[nodiscard]] int fd() const noexcept { return dir_.get(); }
  [[nodiscard]] bool valid() const noexcept { return dir_.valid(); }

 private:
  std::string path_;
  FileHandle dir_;
  std::uint64_t relay_id_ = 0;
};

[[nodiscard]] std::string page_file_name(std::uint64_t page_id);
// The page id a file name denotes ("page-<16 hex>.spill"), or 0.
[[nodiscard]] std::uint64_t page_id_of(std::string_view file_name) noexcept;
// The directory for relay `relay`: $LIBSHM_SPILL_DIR/<relay>, else
// /var/lib/libshm/spill/<relay>.
[[nodiscard]] std::string default_spill_dir(std::string_view relay);

// Seal steps, reported to the writer's hook (the relay's test-only crash points).
enum class SealStep : std::uint8_t { ContentWritten, HeaderWritten, Renamed, DirSynced };
[[nodiscard]] std::string_view to_string(SealStep v) noexcept;
using SealHook = void (*)(SealStep step);

struct SealInfo {
  std::uint64_t page_id = 0;
  std::uint32_t policy = 0;
  std::uint64_t file_bytes = 0;  // header + content
  std::uint32_t content_crc = 0;
  std::uint64_t sealed_ns = 0;
};

// Writes and seals one page in the documented order. NoSpace (nothing left
// behind) when the filesystem cannot hold it; the temporary file is removed
// on every failure.
[[nodiscard]] Result<SealInfo> write_page(const SpillDir& dir, std::uint64_t page_id,
                                          std::uint32_t policy, const PageBuilder& content,
                                          SealHook hook = nullptr);

// A page read back and validated. Its records are kept as where each
// starts in `content` and decoded on access: a 1 MiB page of 64-byte values
// holds 9,325 records, and copying every head out (64 bytes a record, 600
// KB a page) cost the reader more than the page's read and CRC together.
struct Page {
  PageHeader header{};
  std::vector<std::byte> content;
  std::vector<std::uint32_t> offsets;  // record i starts at content[offsets[i]] (validated)

  [[nodiscard]] std::size_t records() const noexcept { return offsets.size(); }
  [[nodiscard]] Record record(std::size_t i) const noexcept {
    const std::byte* at = content.data() + offsets[i];
    const PageRecord head = load_record(at);
    return Record{head, std::span<const std::byte>(at + sizeof head, head.len)};
  }
};

// Reads `page-<id>.spill` (O_NOFOLLOW|O_NONBLOCK, fstat: a regular file of
// the size its header states) and validates everything. Errors:
//   NotFound; NotRegularFile (a symlink, a FIFO, a directory);
//   Truncated (shorter than its header or than the header says);
//   BadMagic / VersionMismatch / KindMismatch / HeaderCorrupt (header CRC);
//   ForeignHandle (another relay's page: its relay id differs);
//   Corrupt (content CRC, a record out of bounds, counts or ranges that do
//   not match the header, a page id that does not match the name).
[[nodiscard]] Result<Page> read_page(const SpillDir& dir, std::uint64_t page_id);
// Same, for any file name in the directory (gc, verify, rebuild).
[[nodiscard]] Result<Page> read_page_file(const SpillDir& dir, const std::string& file_name,
                                          std::uint64_t expect_page_id);
// The same reads into `page`, reusing its buffers (a reader going through
// many pages): on an error `page` holds nothing valid.
[[nodiscard]] Result<void> read_page_into(const SpillDir& dir, std::uint64_t page_id, Page& page);
[[nodiscard]] Result<void> read_page_file_into(const SpillDir& dir, const std::string& file_name,
                                               std::uint64_t expect_page_id, Page& page);

// Moves a file aside into `refused/` (created 0700) under a name that says
// why; never follows a link. Returns the new path.
[[nodiscard]] Result<std::string> refuse_file(const SpillDir& dir, const std::string& file_name,
                                              std::string_view reason);
// Removes a sealed page (ENOENT is fine: already removed) and fsyncs the directory.
[[nodiscard]] Result<void> remove_page(const SpillDir& dir, std::uint64_t page_id);
// Takes a sealed page out of the directory as remove_page does (durably, by
// the directory fsync; ENOENT is fine), but renames the file into
// `removed/` instead of unlinking it: on ext4 the unlink of a 1 MiB page
// waits about 0.5 ms for the filesystem, against 10 us for the rename (a
// page is read in about 1 ms), so the caller leaves the unlink to
// purge_removed() on a thread of its own. A page in removed/ is never
// listed, read or adopted.
[[nodiscard]] Result<void> retire_page(const SpillDir& dir, std::uint64_t page_id);
// Unlinks every file in `removed/` (regular files only; nothing is
// followed). Returns how many went. A directory without removed/ is 0.
[[nodiscard]] Result<std::size_t> purge_removed(const SpillDir& dir);
// True when removed/ holds anything (a reader killed before its unlinks).
[[nodiscard]] bool has_removed(const SpillDir& dir) noexcept;
// fsync of the directory.
[[nodiscard]] Result<void> sync_dir(const SpillDir& dir);

// The relay segment a spill directory is bound to (relay.owner), nullopt when
// the directory has no binding yet. A relay create refuses a directory bound
// to another relay whose segment still exists and names this directory, and
// takes over a stale binding (the other segment is gone, or no longer a relay
// spilling here); the relay does that check (relay/spill.cpp).
[[nodiscard]] Result<std::optional<std::string>> read_owner(const SpillDir& dir);
// Binds the directory to the relay segment at `segment_path` (absolute).
[[nodiscard]] Result<void> write_owner(const SpillDir& dir, std::string_view segment_path);

// The directory's binding lock: an flock on the directory itself, through its
// own open file description (the kernel drops it when the holder dies). A
// relay create holds it from before it reads relay.owner until its segment is
// published under its name: a segment is created under a temporary name, so
// without the lock a racing create would find the binding naming a path that
// does not exist yet, call it stale and take the directory over. `shmctl gc`
// holds it while it removes a directory. Waits up to `wait` (zero: one try),
// then RoleTaken naming the directory.
[[nodiscard]] Result<FileHandle> lock_binding(const std::string& dir_path,
                                              std::chrono::milliseconds wait);

struct DirListing {
  std::vector<std::uint64_t> pages;  // sorted page ids of page-*.spill
  std::vector<std::string> temps;    // page-*.tmp (torn seals)
  std::vector<std::string> others;   // anything else but relay.id, relay.owner, refused/, removed/
};
[[nodiscard]] Result<DirListing> list_dir(const SpillDir& dir);

}  // namespace shm::spill

// to_string of the enums above is reachable as shm::to_string too.
namespace shm {
using spill::to_string;
}  // namespace shm
