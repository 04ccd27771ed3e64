// The chain walk over a ring's published records, shared by a new producer
// (to find where its dead predecessor's published records end) and the kind's
// describe/verify/dump. Private to the library.
#pragma once

#include "shm/spsc/layout.hpp"

#include "format/format.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace shm::ring::detail {

struct ChainView {
  const std::byte* buffer = nullptr;
  std::uint64_t capacity = 0;
  unsigned capacity_log2 = 0;
  std::uint64_t max_payload = 0;
};

// acquire: pairs with the producer's [spsc.P] (and its relaxed stores of the
// later headers of a batch, ordered before it). The mapping may be read-only:
// an atomic load writes nothing.
[[nodiscard]] inline std::uint64_t load_header(const std::byte* p) noexcept {
  return std::atomic_ref<std::uint64_t>(
             *reinterpret_cast<std::uint64_t*>(const_cast<std::byte*>(p)))
      .load(std::memory_order_acquire);
}

struct ChainEnd {
  std::uint64_t end = 0;      // the first position whose slot is empty (or where the walk stopped)
  std::uint64_t records = 0;  // data records walked
  std::string problem;        // why the walk stopped early; empty when it reached an empty slot
};

// Walks records from `start` (a record boundary at or after `head`) up to
// head + capacity, calling f(position, payload) for each data record, at most
// `limit` of them.
template <class F>
ChainEnd walk_chain(const ChainView& v, std::uint64_t head, std::uint64_t start, std::size_t limit,
                    F&& f) {
  ChainEnd out;
  out.end = start;
  const std::uint64_t limit_pos = head + v.capacity;
  while (out.end < limit_pos && out.records < limit) {
    const std::uint64_t pos = out.end;
    const std::uint64_t off = pos & (v.capacity - 1);
    const std::uint64_t word = load_header(v.buffer + off);
    const std::uint32_t lap = lap_of(pos, v.capacity_log2);
    const SlotState state = classify_slot(word, lap);
    if (state == SlotState::Empty || state == SlotState::Stale) break;
    if (state == SlotState::Foreign) {
      out.problem =
          shm::detail::format("record header {:#018x} at {} is neither empty nor of lap {} or {}",
                              word, pos, lap, (lap - 1) & kLapMask);
      break;
    }
    const RecordHeader rec = unpack(word);
    switch (check_record(rec, off, limit_pos - pos, v.capacity, v.max_payload)) {
      case RecordCheck::Data:
        break;
      case RecordCheck::Padding:
        out.end += rec.length;
        continue;
      case RecordCheck::BadPadding:
        out.problem = shm::detail::format("padding record at {} has length {}, expected {}", pos,
                                          rec.length, v.capacity - off);
        return out;
      case RecordCheck::BadType:
        out.problem = shm::detail::format("record at {} has type {:#x}, expected data or padding",
                                          pos, rec.type());
        return out;
      case RecordCheck::BadLength:
        out.problem = shm::detail::format(
            "record at {} has length {} (max {}, {} bytes left before head + capacity)", pos,
            rec.length, v.max_payload, limit_pos - pos);
        return out;
    }
    f(pos, std::span<const std::byte>(v.buffer + off + kRecordHeader, rec.length));
    out.end += record_size(rec.length);
    ++out.records;
  }
  return out;
}

}  // namespace shm::ring::detail
