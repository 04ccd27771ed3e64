// The producing end of an SpscRing (move-only; one per ring, enforced by the
// attachment table: a second live producer gets Errc::RoleTaken).
#pragma once

#include "shm/spsc/endpoint.hpp"

#include <chrono>
#include <cstring>
#include <optional>
#include <span>

namespace shm {

class RingProducer : public detail::RingEndpoint {
 public:
  RingProducer() = default;
  RingProducer(RingProducer&&) noexcept = default;
  RingProducer& operator=(RingProducer&&) noexcept = default;

  // Creates the ring segment and attaches as its producer.
  [[nodiscard]] static Result<RingProducer> create(std::string_view name, const RingParams& params,
                                                   const CreateOptions& options = {});
  // Opens an existing ring and attaches as its producer (taking over a dead one).
  [[nodiscard]] static Result<RingProducer> open(std::string_view name,
                                                 const RingParams& expected = {},
                                                 const OpenOptions& options = {});

  // Reserves room for an n-byte record past every earlier reservation; nullopt
  // when the ring is full. Nothing is visible to the consumer until commit().
  [[nodiscard]] Result<std::optional<std::span<std::byte>>> try_reserve(std::size_t n);
  // Blocking reserve: spins, then parks until space appears or `timeout` passes.
  [[nodiscard]] Result<std::optional<std::span<std::byte>>> reserve(
      std::size_t n, std::chrono::nanoseconds timeout);
  // Publishes every record reserved since the last commit (one release store).
  void commit() noexcept;
  // Drops every reservation made since the last commit.
  void abandon() noexcept {
    reserved_ = tail_;
    pending_records_ = 0;
  }

  // Copying conveniences: false when the ring is full (or the timeout passed).
  [[nodiscard]] Result<bool> try_push(std::span<const std::byte> record);
  [[nodiscard]] Result<bool> push(std::span<const std::byte> record,
                                  std::chrono::nanoseconds timeout);
  // Pushes records in order until one does not fit; one commit for all.
  // Returns how many were pushed.
  [[nodiscard]] Result<std::size_t> try_push_batch(
      std::span<const std::span<const std::byte>> records);

  [[nodiscard]] std::uint64_t published_position() const noexcept { return tail_; }

 private:
  [[nodiscard]] Result<bool> refresh_head(std::uint64_t need_end);
  void wake_consumer() noexcept;

  std::uint64_t tail_ = 0;         // published position (mirror of control_->producer.tail)
  std::uint64_t reserved_ = 0;     // end of reservations, >= tail_
  std::uint64_t cached_head_ = 0;  // consumer's head as last read; refreshed when full
  std::uint64_t records_ = 0;      // records published so far (mirror of the counter)
  std::uint64_t pending_records_ = 0;
};

// ---------------------------------------------------------------- inline hot path

inline Result<std::optional<std::span<std::byte>>> RingProducer::try_reserve(std::size_t n) {
  const detail::EndpointGuard::Scope scope(guard_, "an SPSC endpoint");
  if (n > max_payload_) [[unlikely]]
    return fail(Errc::TooLarge, detail::too_large_message(n, max_payload_));
  const std::uint64_t need = ring::record_size(n);
  const std::uint64_t offset = reserved_ & mask_;
  const std::uint64_t contiguous = capacity_ - offset;
  const std::uint64_t padding = need <= contiguous ? 0 : contiguous;
  if (reserved_ + padding + need - cached_head_ > capacity_) [[unlikely]] {
    auto room = refresh_head(reserved_ + padding + need);
    if (!room) return std::unexpected(std::move(room.error()));
    if (!*room) return std::optional<std::span<std::byte>>{};
  }
  if (padding != 0) {
    const ring::RecordHeader pad{static_cast<std::uint32_t>(padding), ring::kRecordPadding};
    std::memcpy(at(reserved_), &pad, sizeof pad);
    reserved_ += padding;
  }
  const ring::RecordHeader rec{static_cast<std::uint32_t>(n), ring::kRecordData};
  std::byte* p = at(reserved_);
  std::memcpy(p, &rec, sizeof rec);
  reserved_ += need;
  ++pending_records_;
  return std::optional<std::span<std::byte>>{std::span<std::byte>(p + ring::kRecordHeader, n)};
}

inline void RingProducer::commit() noexcept {
  const detail::EndpointGuard::Scope scope(guard_, "an SPSC endpoint");
  if (reserved_ == tail_) return;
  tail_ = reserved_;
  records_ += pending_records_;
  pending_records_ = 0;
  control_->producer.records.store(records_, std::memory_order_relaxed);  // statistics only
  // [spsc.P] publishes the records written above (release suffices for that;
  // pairs with [spsc.P'] in the consumer). [spsc.D1] seq_cst, with the seq_cst load of
  // the parked flag below: Dekker pairing with [spsc.D1'] in RingConsumer::peek(),
  // so a parking consumer either sees this tail or we see its flag. On x86 a
  // seq_cst store is one xchg, the price of a fence.
  control_->producer.tail.store(tail_, std::memory_order_seq_cst);
  if (control_->waiters.consumer_parked.load(std::memory_order_seq_cst) != 0) [[unlikely]]
    wake_consumer();
}

inline Result<bool> RingProducer::try_push(std::span<const std::byte> record) {
  auto r = try_reserve(record.size());
  if (!r) return std::unexpected(std::move(r.error()));
  if (!*r) return false;
  if (!record.empty()) std::memcpy((*r)->data(), record.data(), record.size());
  commit();
  return true;
}

}  // namespace shm
