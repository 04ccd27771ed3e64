/// @file
/// Published-prefix pages (ADR-0010's page slots): one page slot of a Channel is
/// a binding header, an array of fixed-size descriptor cells and an append-only
/// byte arena, all inside the channel segment.
///
/// Protocol. The producer appends a payload at the end of the arena, fills the
/// next descriptor cell {offset, length, crc32c, sequence} and then publishes
/// the prefix of cells with one release store of `published` [chan.P]. Cells and
/// bytes below `published` are never written again while the page is bound to
/// this epoch. `seal` closes the page with a release store of its state [chan.S];
/// `rebind` reuses a freed slot in place for a new epoch: new epoch and
/// generation, the first sequence of the new page, publication state cleared.
/// A slot is only rebound after the consumer has released its previous epoch
/// (Channel's released_epoch edge), so a reader never sees bytes change under it.
///
/// The binding (epoch, generation, first sequence, state) and the publication
/// counters sit on separate 128-byte blocks: the consumer reads the binding for
/// every descriptor and must not share a line with the per-event counter.
#pragma once

#include "shm/segment/layout.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

namespace shm::page {

/// @name Slot states (binding.state)
///@{
inline constexpr std::uint32_t kUnbound = 0;  ///< never bound (zero-filled at create)
inline constexpr std::uint32_t kOpen = 1;     ///< accepting appends
inline constexpr std::uint32_t kSealed = 2;   ///< closed; published is final
///@}

/// Payload offsets in the arena are multiples of this.
inline constexpr std::size_t kPayloadAlign = 8;

/// One descriptor cell: where a published payload lives in the arena.
struct Cell {
  std::uint32_t offset;       ///< from the start of the arena, kPayloadAlign-aligned
  std::uint32_t length;       ///< payload bytes
  std::uint32_t crc;          ///< crc32c of the payload
  std::uint32_t sequence_lo;  ///< low 32 bits of the payload's sequence
};
static_assert(sizeof(Cell) == 16);
static_assert(std::is_standard_layout_v<Cell> && std::is_trivially_copyable_v<Cell>);

/// The header at the start of every page slot: its binding and its publication counters.
struct SlotHeader {
  /// Written by the producer at rebind and seal only; read by the consumer for
  /// every descriptor (so it stays shared in the consumer's cache).
  struct alignas(kFalseSharingRange) Binding {
    std::atomic<std::uint64_t> epoch;           ///< the page epoch bound to this slot
    std::atomic<std::uint64_t> first_sequence;  ///< sequence of cell 0
    std::atomic<std::uint32_t> generation;      ///< epoch as u32 (the descriptors' tag)
    std::atomic<std::uint32_t> state;           ///< kUnbound / kOpen / kSealed
  } binding;                                    ///< which epoch the slot holds
  /// Producer-owned, written once per appended payload.
  struct alignas(kFalseSharingRange) Publication {
    std::atomic<std::uint32_t> published;   ///< cells published: the prefix [0, published)
    std::atomic<std::uint32_t> used_bytes;  ///< arena bytes used by published payloads
  } publication;                            ///< how much of the page is published
};
static_assert(std::is_standard_layout_v<SlotHeader>);
static_assert(offsetof(SlotHeader, binding) == 0);
static_assert(offsetof(SlotHeader::Binding, epoch) == 0);
static_assert(offsetof(SlotHeader::Binding, first_sequence) == 8);
static_assert(offsetof(SlotHeader::Binding, generation) == 16);
static_assert(offsetof(SlotHeader::Binding, state) == 20);
static_assert(offsetof(SlotHeader, publication) == kFalseSharingRange);
static_assert(offsetof(SlotHeader::Publication, published) == 0);
static_assert(offsetof(SlotHeader::Publication, used_bytes) == 4);
static_assert(sizeof(SlotHeader) == 2 * kFalseSharingRange);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

/// Where the parts of one slot lie, relative to the slot's start.
struct Geometry {
  std::uint32_t cells = 0;         ///< descriptor cells per page
  std::uint64_t arena_bytes = 0;   ///< byte arena per page (a multiple of kPayloadAlign)
  std::uint64_t cells_offset = 0;  ///< where the descriptor cells start (after SlotHeader)
  std::uint64_t arena_offset = 0;  ///< where the byte arena starts (after the cells, 128-aligned)
  std::uint64_t stride = 0;        ///< bytes from one slot to the next
};

/// The Geometry of a slot of `cells` descriptor cells and an `arena_bytes` arena.
[[nodiscard]] constexpr Geometry geometry(std::uint32_t cells, std::uint64_t arena_bytes) noexcept {
  Geometry g;
  g.cells = cells;
  g.arena_bytes = arena_bytes;
  g.cells_offset = sizeof(SlotHeader);
  g.arena_offset =
      g.cells_offset + round_up(std::uint64_t{cells} * sizeof(Cell), kFalseSharingRange);
  g.stride = g.arena_offset + round_up(arena_bytes, kFalseSharingRange);
  return g;
}

/// Arena bytes an `n`-byte payload takes: `n` rounded up to kPayloadAlign.
[[nodiscard]] constexpr std::uint64_t aligned_length(std::uint64_t n) noexcept {
  return round_up(n, kPayloadAlign);
}

/// The producer's handle on the page bound to its active epoch (process-local;
/// it mirrors the shared counters so the hot path reads nothing shared).
class PageWriter {
 public:
  /// Points at no slot; attach() or rebind() before use.
  PageWriter() = default;
  /// Points the writer at slot memory that is already bound (create, or reopen).
  void attach(std::byte* slot, const Geometry& g) noexcept;

  /// Rebinds the slot in place for `epoch`: generation = epoch as u32, cell 0
  /// gets `first_sequence`, publication cleared, state Open. The caller
  /// guarantees the slot's previous epoch was released.
  void rebind(std::byte* slot, const Geometry& g, std::uint64_t epoch,
              std::uint64_t first_sequence) noexcept;

  /// True when an `n`-byte payload fits: a free cell and room in the arena.
  [[nodiscard]] bool fits(std::uint64_t n) const noexcept {
    return published_ < geometry_.cells && used_ + aligned_length(n) <= geometry_.arena_bytes;
  }
  /// Where the next payload is written (valid when fits()).
  [[nodiscard]] std::byte* next_payload() const noexcept { return arena_ + used_; }

  /// Appends the cell of a payload already written at next_payload() and
  /// publishes the prefix [chan.P]. Returns the cell index. Requires fits(length).
  std::uint32_t publish(std::uint32_t length, std::uint32_t crc, std::uint64_t sequence) noexcept {
    const std::uint32_t index = published_;
    const Cell cell{static_cast<std::uint32_t>(used_), length, crc,
                    static_cast<std::uint32_t>(sequence)};
    std::memcpy(cells_ + index, &cell, sizeof cell);
    used_ += aligned_length(length);
    published_ = index + 1;
    header_->publication.used_bytes.store(static_cast<std::uint32_t>(used_),
                                          std::memory_order_relaxed);  // statistics, verify
    // [chan.P] release: publishes the cell and the payload bytes; pairs with [chan.P'] in
    // the consumer's published() acquire.
    header_->publication.published.store(published_, std::memory_order_release);
    return index;
  }

  /// Closes the page [chan.S]: published is final from here on.
  void seal() noexcept;

  /// The epoch the page is bound to.
  [[nodiscard]] std::uint64_t epoch() const noexcept { return epoch_; }
  /// The epoch as u32: the tag of this page's descriptors.
  [[nodiscard]] std::uint32_t generation() const noexcept {
    return static_cast<std::uint32_t>(epoch_);
  }
  /// Cells published so far (this process's copy of the shared count).
  [[nodiscard]] std::uint32_t published() const noexcept { return published_; }
  /// Arena bytes taken by the published payloads.
  [[nodiscard]] std::uint64_t used() const noexcept { return used_; }
  /// Sequence of cell 0.
  [[nodiscard]] std::uint64_t first_sequence() const noexcept { return first_sequence_; }
  /// Sequence of the next payload appended to this page.
  [[nodiscard]] std::uint64_t next_sequence() const noexcept {
    return first_sequence_ + published_;
  }
  /// The slot's shared header.
  [[nodiscard]] SlotHeader* header() const noexcept { return header_; }

 private:
  SlotHeader* header_ = nullptr;
  Cell* cells_ = nullptr;
  std::byte* arena_ = nullptr;
  Geometry geometry_{};
  std::uint64_t epoch_ = 0;
  std::uint64_t first_sequence_ = 0;
  std::uint64_t used_ = 0;
  std::uint32_t published_ = 0;
};

/// Read-side view of one slot (process-local pointers, no state of its own).
struct PageView {
  const SlotHeader* header = nullptr;  ///< the slot's binding and publication
  const Cell* cells = nullptr;         ///< its descriptor cells
  const std::byte* arena = nullptr;    ///< its byte arena

  /// The view of the slot starting at `slot`.
  [[nodiscard]] static PageView at(const std::byte* slot, const Geometry& g) noexcept {
    return {reinterpret_cast<const SlotHeader*>(slot),
            reinterpret_cast<const Cell*>(slot + g.cells_offset), slot + g.arena_offset};
  }
  /// A copy of cell `index` (not checked against `published`: the caller does that).
  [[nodiscard]] Cell cell(std::uint32_t index) const noexcept {
    Cell c;
    std::memcpy(&c, cells + index, sizeof c);
    return c;
  }
};

}  // namespace shm::page
