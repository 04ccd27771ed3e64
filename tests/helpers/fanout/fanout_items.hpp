// Items and the shared "seen" table used by the PriorityFanout multi-process
// tests and their helpers (test_fanout_producer, test_fanout_consumer).
#pragma once

#include "shm/error.hpp"
#include "shm/platform/file.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

namespace shm::test {

// A 48-byte job: who made it, in which order, at which priority, and a body
// derived from those so a torn or mixed-up payload is detected.
struct FanoutItem {
  std::uint32_t producer;
  std::uint32_t priority;
  std::uint64_t seq;
  std::uint8_t body[32];
};
static_assert(sizeof(FanoutItem) == 48);

inline std::uint32_t item_priority(std::uint32_t producer, std::uint64_t seq, std::uint32_t k) {
  std::uint64_t x = (seq + 1) * 0x9e3779b97f4a7c15ull ^ (producer + 1) * 0xbf58476d1ce4e5b9ull;
  x ^= x >> 31;
  return static_cast<std::uint32_t>(x % k);
}

inline FanoutItem make_item(std::uint32_t producer, std::uint64_t seq, std::uint32_t priority) {
  FanoutItem it{producer, priority, seq, {}};
  for (std::size_t i = 0; i < sizeof it.body; ++i)
    it.body[i] = static_cast<std::uint8_t>(seq * 31 + producer * 7 + priority * 3 + i);
  return it;
}

inline bool item_intact(const FanoutItem& it) {
  const FanoutItem expect = make_item(it.producer, it.seq, it.priority);
  return std::memcmp(&it, &expect, sizeof it) == 0;
}

// The file every process of a test maps: counters, then one byte per item.
struct SeenHeader {
  std::atomic<std::uint64_t> producers;
  std::atomic<std::uint64_t> per_producer;
  std::atomic<std::uint64_t> delivered;
  std::atomic<std::uint64_t> producers_done;  // set by the test once producers exited
};

class SeenTable {
 public:
  // Creates (create = true) or opens the table file.
  static Result<SeenTable> map(const std::string& path, bool create, std::uint64_t producers = 0,
                               std::uint64_t per_producer = 0) {
    const int flags = O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0);
    FileHandle fd(::open(path.c_str(), flags, 0600));
    if (!fd.valid()) return fail_errno(errno, "open " + path);
    std::uint64_t size = 0;
    if (create) {
      size = sizeof(SeenHeader) + producers * per_producer;
      if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0)
        return fail_errno(errno, "ftruncate");
    } else {
      struct stat st {};
      if (::fstat(fd.get(), &st) != 0) return fail_errno(errno, "fstat");
      size = static_cast<std::uint64_t>(st.st_size);
    }
    auto m = Mapping::map(fd.get(), size, true, path);
    if (!m) return std::unexpected(m.error());
    SeenTable t;
    t.mapping_ = std::move(*m);
    if (create) {
      t.header().producers.store(producers);
      t.header().per_producer.store(per_producer);
    }
    if (size < sizeof(SeenHeader) + t.total())
      return fail(Errc::Truncated, "seen table is smaller than its header says");
    return t;
  }
  SeenHeader& header() const { return *reinterpret_cast<SeenHeader*>(mapping_.data()); }
  std::uint64_t total() const { return header().producers.load() * header().per_producer.load(); }
  std::atomic_ref<std::uint8_t> slot(std::uint64_t i) const {
    return std::atomic_ref<std::uint8_t>(
        *reinterpret_cast<std::uint8_t*>(mapping_.data() + sizeof(SeenHeader) + i));
  }

 private:
  Mapping mapping_;
};

}  // namespace shm::test
