#include "shm/channel/page.hpp"

namespace shm::page {

void PageWriter::attach(std::byte* slot, const Geometry& g) noexcept {
  header_ = reinterpret_cast<SlotHeader*>(slot);
  cells_ = reinterpret_cast<Cell*>(slot + g.cells_offset);
  arena_ = slot + g.arena_offset;
  geometry_ = g;
  // relaxed: the writer is the only one that changes these; the caller read
  // the binding through an acquire that ordered it (segment READY or attach).
  epoch_ = header_->binding.epoch.load(std::memory_order_relaxed);
  first_sequence_ = header_->binding.first_sequence.load(std::memory_order_relaxed);
  published_ = header_->publication.published.load(std::memory_order_relaxed);
  used_ = header_->publication.used_bytes.load(std::memory_order_relaxed);
}

void PageWriter::rebind(std::byte* slot, const Geometry& g, std::uint64_t epoch,
                        std::uint64_t first_sequence) noexcept {
  header_ = reinterpret_cast<SlotHeader*>(slot);
  cells_ = reinterpret_cast<Cell*>(slot + g.cells_offset);
  arena_ = slot + g.arena_offset;
  geometry_ = g;
  epoch_ = epoch;
  first_sequence_ = first_sequence;
  published_ = 0;
  used_ = 0;
  // relaxed: the new binding reaches the consumer through the producer's ring
  // release [chan.R] of this epoch's first descriptor (which comes after these
  // stores); observers (shmctl) read it racily and check what they read.
  header_->publication.published.store(0, std::memory_order_relaxed);
  header_->publication.used_bytes.store(0, std::memory_order_relaxed);
  header_->binding.epoch.store(epoch, std::memory_order_relaxed);
  header_->binding.first_sequence.store(first_sequence, std::memory_order_relaxed);
  header_->binding.generation.store(static_cast<std::uint32_t>(epoch), std::memory_order_relaxed);
  // [chan.B] release: a reader that acquire-loads `state` == Open sees the binding
  // above; pairs with [chan.B'] in the verifiers (channel/kind.cpp).
  header_->binding.state.store(kOpen, std::memory_order_release);
}

void PageWriter::seal() noexcept {
  // [chan.S] release: published is final; pairs with [chan.S'] in the consumer's seam check.
  header_->binding.state.store(kSealed, std::memory_order_release);
}

}  // namespace shm::page
