#include "shm/channel/page.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

namespace shm::page {
namespace {

// A slot's memory in process-local storage, 128-byte aligned like in a segment.
class Slot {
 public:
  explicit Slot(const Geometry& g) : g_(g), storage_(g.stride + kFalseSharingRange) {
    auto addr = reinterpret_cast<std::uintptr_t>(storage_.data());
    base_ = storage_.data() + (round_up(addr, kFalseSharingRange) - addr);
  }
  [[nodiscard]] std::byte* base() const { return base_; }
  [[nodiscard]] PageView view() const { return PageView::at(base_, g_); }

 private:
  Geometry g_;
  std::vector<std::byte> storage_;
  std::byte* base_ = nullptr;
};

std::uint32_t append(PageWriter& w, const std::string& s, std::uint64_t sequence) {
  std::memcpy(w.next_payload(), s.data(), s.size());
  return w.publish(static_cast<std::uint32_t>(s.size()), 0xC0FFEEu, sequence);
}

TEST(PublishedPageTest, GeometryKeepsBindingCellsAndArenaOnSeparateLines) {
  const Geometry g = geometry(5, 100);
  EXPECT_EQ(g.cells_offset, sizeof(SlotHeader));
  EXPECT_EQ(g.arena_offset % kFalseSharingRange, 0u);
  EXPECT_GE(g.arena_offset - g.cells_offset, 5 * sizeof(Cell));
  EXPECT_EQ(g.stride % kFalseSharingRange, 0u);
  EXPECT_GE(g.stride - g.arena_offset, 100u);
}

TEST(PublishedPageTest, PublishAppendsCellsAndAdvancesThePublishedPrefix) {
  const Geometry g = geometry(4, 64);
  Slot slot(g);
  PageWriter w;
  w.rebind(slot.base(), g, 7, 100);
  EXPECT_EQ(w.generation(), 7u);
  EXPECT_EQ(w.next_sequence(), 100u);
  EXPECT_EQ(append(w, "hello", 100), 0u);
  EXPECT_EQ(append(w, "world!!!!", 101), 1u);
  const PageView v = slot.view();
  EXPECT_EQ(v.header->publication.published.load(), 2u);
  const Cell c0 = v.cell(0), c1 = v.cell(1);
  EXPECT_EQ(c0.offset, 0u);
  EXPECT_EQ(c0.length, 5u);
  EXPECT_EQ(c1.offset, 8u) << "payload offsets are 8-byte aligned";
  EXPECT_EQ(c1.length, 9u);
  EXPECT_EQ(c1.sequence_lo, 101u);
  EXPECT_EQ(std::memcmp(v.arena + c1.offset, "world!!!!", 9), 0);
  EXPECT_EQ(w.used(), 24u);
  EXPECT_EQ(v.header->publication.used_bytes.load(), 24u);
  EXPECT_EQ(w.next_sequence(), 102u);
}

TEST(PublishedPageTest, FitsRefusesWhenBytesOrCellsRunOut) {
  const Geometry g = geometry(3, 64);
  Slot slot(g);
  PageWriter w;
  w.rebind(slot.base(), g, 0, 0);
  EXPECT_TRUE(w.fits(64));
  EXPECT_FALSE(w.fits(65));
  (void)append(w, std::string(50, 'x'), 0);  // uses 56
  EXPECT_TRUE(w.fits(8));
  EXPECT_FALSE(w.fits(9));
  (void)append(w, "", 1);
  (void)append(w, "a", 2);
  EXPECT_FALSE(w.fits(0)) << "all three cells are used";
}

TEST(PublishedPageTest, SealMarksThePageClosed) {
  const Geometry g = geometry(2, 64);
  Slot slot(g);
  PageWriter w;
  w.rebind(slot.base(), g, 3, 9);
  EXPECT_EQ(slot.view().header->binding.state.load(), kOpen);
  w.seal();
  EXPECT_EQ(slot.view().header->binding.state.load(), kSealed);
}

TEST(PublishedPageTest, RebindResetsTheSlotInPlaceForANewEpoch) {
  const Geometry g = geometry(2, 64);
  Slot slot(g);
  PageWriter w;
  w.rebind(slot.base(), g, 1, 0);
  (void)append(w, "abc", 0);
  (void)append(w, "def", 1);
  w.seal();
  w.rebind(slot.base(), g, 1 + (1ull << 32), 2);
  const PageView v = slot.view();
  EXPECT_EQ(v.header->binding.epoch.load(), 1 + (1ull << 32));
  EXPECT_EQ(v.header->binding.generation.load(), 1u) << "generation is the epoch as u32";
  EXPECT_EQ(v.header->binding.first_sequence.load(), 2u);
  EXPECT_EQ(v.header->binding.state.load(), kOpen);
  EXPECT_EQ(v.header->publication.published.load(), 0u);
  EXPECT_EQ(v.header->publication.used_bytes.load(), 0u);
  EXPECT_EQ(w.published(), 0u);
  EXPECT_EQ(w.next_payload(), v.arena) << "the arena is reused, not reallocated";
  EXPECT_TRUE(w.fits(64));
}

TEST(PublishedPageTest, AttachPicksUpAnExistingBinding) {
  const Geometry g = geometry(4, 128);
  Slot slot(g);
  PageWriter w;
  w.rebind(slot.base(), g, 5, 40);
  (void)append(w, "xyz", 40);
  PageWriter again;
  again.attach(slot.base(), g);
  EXPECT_EQ(again.epoch(), 5u);
  EXPECT_EQ(again.published(), 1u);
  EXPECT_EQ(again.used(), 8u);
  EXPECT_EQ(again.next_sequence(), 41u);
  EXPECT_EQ(again.next_payload(), w.next_payload());
}

}  // namespace
}  // namespace shm::page
