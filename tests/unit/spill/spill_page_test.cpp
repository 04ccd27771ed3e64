// Spill page files: the seal order, round trip, and every way a bad file is refused.
#include "common/flip_byte.hpp"
#include "common/temp_dir.hpp"
#include "shm/spill/page.hpp"
#include "shm/testing/spill_crash.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace shm::spill {
namespace {

namespace fs = std::filesystem;

std::vector<std::byte> bytes(std::size_t n, unsigned char b) {
  return std::vector<std::byte>(n, static_cast<std::byte>(b));
}

PageBuilder three_records() {
  PageBuilder b;
  b.add(PageRecord{1, 10, 12, 3, 5, 0, 0}, bytes(8, 0x11));
  b.add(PageRecord{2, 11, 11, 1, 6, 0, 0}, bytes(5, 0x22));  // padded to 8
  b.add(PageRecord{3, 13, 20, 2, 9, 0, kRecordRedelivered}, {});
  return b;
}

class SpillPageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = SpillDir::open(tmp_.sub("relay-a"), true);
    ASSERT_TRUE(d) << d.error().what();
    dir_ = std::move(*d);
  }
  std::string file(std::uint64_t id) const { return dir_.path() + "/" + page_file_name(id); }
  void flip(std::uint64_t id, std::uint64_t offset) { test::flip_byte(file(id), offset); }
  test::TempSpillDir tmp_;
  SpillDir dir_;
};

template <class T>
void expect_error(const Result<T>& r, Errc code, const std::string& fragment) {
  ASSERT_FALSE(r) << "expected " << to_string(code);
  EXPECT_EQ(r.error().code, code) << r.error().what();
  EXPECT_NE(r.error().message.find(fragment), std::string::npos) << r.error().what();
}

std::vector<SealStep> g_steps;
void record_step(SealStep s) {
  g_steps.push_back(s);
}

TEST_F(SpillPageTest, ASealedPageReadsBackWithEveryRecordAndHeaderField) {
  g_steps.clear();
  auto sealed = write_page(dir_, 7, 4, three_records(), record_step);
  ASSERT_TRUE(sealed) << sealed.error().what();
  EXPECT_EQ(g_steps, (std::vector<SealStep>{SealStep::ContentWritten, SealStep::HeaderWritten,
                                            SealStep::Renamed, SealStep::DirSynced}));
  auto page = read_page(dir_, 7);
  ASSERT_TRUE(page) << page.error().what();
  const PageHeader& h = page->header;
  EXPECT_EQ(h.page_id, 7u);
  EXPECT_EQ(h.relay_id, dir_.relay_id());
  EXPECT_EQ(h.policy, 4u);
  EXPECT_EQ(h.first_seq, 10u);
  EXPECT_EQ(h.last_seq, 20u);
  EXPECT_EQ(h.first_order, 5u);
  EXPECT_EQ(h.last_order, 9u);
  EXPECT_EQ(h.records, 3u);
  EXPECT_EQ(h.ops, 6u);
  EXPECT_EQ(h.content_crc, sealed->content_crc);
  ASSERT_EQ(page->records(), 3u);
  EXPECT_EQ(page->record(1).head.key, 2u);
  EXPECT_EQ(page->record(1).value.size(), 5u);
  EXPECT_EQ(static_cast<unsigned char>(page->record(1).value[4]), 0x22);
  EXPECT_EQ(page->record(2).head.flags, kRecordRedelivered);
  EXPECT_TRUE(page->record(2).value.empty());
  // Only the final name is left: no temporary file.
  auto listing = list_dir(dir_);
  ASSERT_TRUE(listing);
  EXPECT_EQ(listing->pages, std::vector<std::uint64_t>{7});
  EXPECT_TRUE(listing->temps.empty());
  EXPECT_EQ(fs::file_size(file(7)), kPageHeaderSize + three_records().content().size());
}

std::vector<std::string> g_io;
void record_io(test_hooks::SpillIo io, const char* what) {
  const std::string w(what);
  const std::string base = w.substr(w.rfind('/') + 1);
  switch (io) {
    case test_hooks::SpillIo::DataSync:
      g_io.push_back("datasync " + base);
      break;
    case test_hooks::SpillIo::Sync:
      g_io.push_back("sync " + base);
      break;
    case test_hooks::SpillIo::Rename:
      g_io.push_back("rename " + base);
      break;
  }
}

// The seal's durability order, as the calls are made: the content flushed,
// then the header, both before the rename; the directory after it. A kill -9
// cannot tell a missing flush (the kernel keeps the written pages), a power
// loss can: a page renamed into place before its header or content reached
// the disk is adopted torn at the next start.
TEST_F(SpillPageTest, TheSealFlushesContentAndHeaderBeforeTheRenameAndTheDirectoryAfter) {
  g_io.clear();
  test_hooks::set_spill_io_hook(record_io);
  auto sealed = write_page(dir_, 9, 4, three_records());
  test_hooks::set_spill_io_hook(nullptr);
  ASSERT_TRUE(sealed) << sealed.error().what();
  const std::string tmp = "page-0000000000000009.tmp";
  EXPECT_EQ(g_io, (std::vector<std::string>{"datasync " + tmp, "datasync " + tmp,
                                            "rename " + page_file_name(9), "sync relay-a"}));
}

TEST_F(SpillPageTest, TheDirectoryKeepsItsIdentityAcrossOpens) {
  auto again = SpillDir::open(dir_.path(), false);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->relay_id(), dir_.relay_id());
  auto other = SpillDir::open(tmp_.sub("relay-b"), true);
  ASSERT_TRUE(other);
  EXPECT_NE(other->relay_id(), dir_.relay_id());
  expect_error(SpillDir::open(tmp_.sub("missing"), false), Errc::NotFound, "missing");
  expect_error(SpillDir::open("/dev/shm/libshm-spill", true), Errc::UnsafeRoot, "memory");
  expect_error(SpillDir::open("relative/dir", true), Errc::InvalidArgument, "absolute");
  fs::create_directory_symlink(dir_.path(), tmp_.sub("link"));
  expect_error(SpillDir::open(tmp_.sub("link"), false), Errc::UnsafeRoot, "symbolic link");
}

TEST_F(SpillPageTest, AFlippedContentByteIsABadCrc) {
  ASSERT_TRUE(write_page(dir_, 1, 4, three_records()));
  flip(1, kPageHeaderSize + 60);
  expect_error(read_page(dir_, 1), Errc::Corrupt, "content CRC");
}

TEST_F(SpillPageTest, AFlippedHeaderByteIsAHeaderCrcMismatch) {
  ASSERT_TRUE(write_page(dir_, 1, 4, three_records()));
  flip(1, offsetof(PageHeader, last_seq));
  expect_error(read_page(dir_, 1), Errc::HeaderCorrupt, "header CRC");
  ASSERT_TRUE(write_page(dir_, 2, 4, three_records()));
  flip(2, 0);
  expect_error(read_page(dir_, 2), Errc::BadMagic, "magic");
}

TEST_F(SpillPageTest, ATruncatedPageIsRefused) {
  ASSERT_TRUE(write_page(dir_, 1, 4, three_records()));
  fs::resize_file(file(1), kPageHeaderSize + 10);
  expect_error(read_page(dir_, 1), Errc::Truncated, "its header says");
  fs::resize_file(file(1), 50);
  expect_error(read_page(dir_, 1), Errc::Truncated, "shorter than a page header");
}

TEST_F(SpillPageTest, AnotherRelaysPageIsForeign) {
  auto other = SpillDir::open(tmp_.sub("relay-b"), true);
  ASSERT_TRUE(other);
  ASSERT_TRUE(write_page(*other, 3, 4, three_records()));
  fs::copy_file(other->path() + "/" + page_file_name(3), file(3));
  expect_error(read_page(dir_, 3), Errc::ForeignHandle, "another relay");
  // A page renamed to another id is refused too.
  ASSERT_TRUE(write_page(dir_, 4, 4, three_records()));
  fs::rename(file(4), file(5));
  expect_error(read_page(dir_, 5), Errc::Corrupt, "its name says 5");
}

TEST_F(SpillPageTest, ASymlinkOrAFifoIsRefusedWithoutFollowingOrBlocking) {
  ASSERT_TRUE(write_page(dir_, 1, 4, three_records()));
  fs::create_symlink(file(1), file(2));
  expect_error(read_page(dir_, 2), Errc::NotRegularFile, "symbolic link");
  ASSERT_EQ(::mkfifo(file(3).c_str(), 0600), 0);
  expect_error(read_page(dir_, 3), Errc::NotRegularFile, "not a regular file");
  // Moved aside: the link itself (its target stays), the FIFO itself.
  auto moved = refuse_file(dir_, page_file_name(2), "symlink");
  ASSERT_TRUE(moved) << moved.error().what();
  EXPECT_TRUE(fs::is_symlink(*moved));
  EXPECT_TRUE(fs::exists(file(1)));
  ASSERT_TRUE(refuse_file(dir_, page_file_name(3), "fifo"));
  auto listing = list_dir(dir_);
  ASSERT_TRUE(listing);
  EXPECT_EQ(listing->pages, std::vector<std::uint64_t>{1});
}

TEST_F(SpillPageTest, RemovingAPageTwiceIsFine) {
  ASSERT_TRUE(write_page(dir_, 1, 4, three_records()));
  ASSERT_TRUE(remove_page(dir_, 1));
  ASSERT_TRUE(remove_page(dir_, 1));
  expect_error(read_page(dir_, 1), Errc::NotFound, page_file_name(1));
}

TEST(SpillPageNames, PageIdsRoundTripThroughFileNames) {
  EXPECT_EQ(page_id_of(page_file_name(0x1234abcd)), 0x1234abcdu);
  EXPECT_EQ(page_id_of("page-00000000000000zz.spill"), 0u);
  EXPECT_EQ(page_id_of("page-1.spill"), 0u);
  EXPECT_EQ(page_id_of("relay.id"), 0u);
}

}  // namespace
}  // namespace shm::spill
