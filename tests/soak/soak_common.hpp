// Shared by the soak helpers (soak_producer, soak_consumer, soak_verify): the
// record format, the producer's journal, and the log line formats.
//
// Record (payload of one ring record), little-endian:
//   u32 magic 'SOAK' | u32 producer id | u64 sequence | u32 length | u32 crc32c
//   then length-24 body bytes, a pure function of (producer, sequence).
// The crc covers the 24-byte header (crc field zero) and the body, so a torn,
// partial or misplaced record is always detected.
//
// Producer journal (exact-once publication across kill -9). Before each commit
// the producer writes {counter, tail_before, first, last} (CRC-protected) into
// slot counter % 2 of a small file, then commits. Only the producer moves the
// ring's tail, so on restart, with T = the ring's published tail and E = the
// newest valid journal entry: T == E.tail_before means E's batch was never
// published (next = E.first), T > E.tail_before means it was (next = E.last+1).
// A torn entry is the one being written when the producer died, so its commit
// never happened and the older entry decides. Hence a restarted producer
// neither skips nor repeats a sequence number.
//
// Logs (text, appended; one write(2) per line group, so a kill never leaves
// half a group; a torn last line is terminated by the next incarnation's "\n"):
//   producer:  S <pid> <realtime_ns> <next_seq> fresh|published|unpublished
//                                                 incarnation start; how the journal
//                                                 left the last batch
//              F <realtime_ns>                    first batch published
//              X <next_seq>                       clean stop (SIGTERM)
//              V <message>                        violation seen by the producer
//   consumer:  S <pid> <realtime_ns>
//              B <first_seq> <last_seq>           a run of consecutive records,
//                                                 logged BEFORE release()
//              F <realtime_ns>                    first batch of this incarnation
//              C <seq> <reason>                   a record failed its checks
//              X <records_this_incarnation>       drained and stopped (SIGTERM)
//              V <message>                        violation (ring error)
#pragma once

#include "shm/platform/crc32c.hpp"
#include "shm/segment/segment.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>

namespace soak {

inline constexpr std::uint32_t kMagic = 0x4b414f53;  // "SOAK"
inline constexpr std::size_t kHeaderBytes = 24;
inline constexpr std::size_t kMaxBody = 232;

struct RecordHeader {
  std::uint32_t magic;
  std::uint32_t producer;
  std::uint64_t seq;
  std::uint32_t length;
  std::uint32_t crc;
};
static_assert(sizeof(RecordHeader) == kHeaderBytes);

[[nodiscard]] inline std::uint64_t mix(std::uint64_t x) noexcept {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

[[nodiscard]] inline std::size_t record_length(std::uint32_t producer, std::uint64_t seq) noexcept {
  return kHeaderBytes +
         static_cast<std::size_t>(mix(seq * 1315423911u + producer) % (kMaxBody + 1));
}

inline std::byte body_byte(std::uint32_t producer, std::uint64_t seq, std::size_t i) noexcept {
  return static_cast<std::byte>((seq * 131u + i * 7u + producer) & 0xffu);
}

// Fills `out` (record_length(producer, seq) bytes) with the record.
inline void fill_record(std::span<std::byte> out, std::uint32_t producer,
                        std::uint64_t seq) noexcept {
  RecordHeader h{kMagic, producer, seq, static_cast<std::uint32_t>(out.size()), 0};
  std::memcpy(out.data(), &h, sizeof h);
  for (std::size_t i = kHeaderBytes; i < out.size(); ++i) out[i] = body_byte(producer, seq, i);
  h.crc = shm::crc32c(out.data(), out.size());
  std::memcpy(out.data() + offsetof(RecordHeader, crc), &h.crc, sizeof h.crc);
}

// Checks a record; returns its sequence number, or a reason in `why`.
inline std::optional<std::uint64_t> check_record(std::span<const std::byte> in,
                                                 std::uint32_t producer, std::string& why) {
  if (in.size() < kHeaderBytes) {
    why = "short";
    return std::nullopt;
  }
  RecordHeader h;
  std::memcpy(&h, in.data(), sizeof h);
  if (h.magic != kMagic) {
    why = "magic";
    return std::nullopt;
  }
  if (h.length != in.size() || h.length != record_length(h.producer, h.seq)) {
    why = "length";
    return std::nullopt;
  }
  std::uint32_t zero = 0;
  std::uint32_t crc = shm::crc32c(in.data(), offsetof(RecordHeader, crc));
  crc = shm::crc32c(&zero, sizeof zero, crc);
  crc = shm::crc32c(in.data() + kHeaderBytes, in.size() - kHeaderBytes, crc);
  if (crc != h.crc) {
    why = "crc";
    return std::nullopt;
  }
  if (h.producer != producer) {
    why = "producer";
    return std::nullopt;
  }
  return h.seq;
}

[[nodiscard]] inline std::uint64_t realtime_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

// Appends `text` with one write(2).
inline bool append(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    text.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

struct JournalEntry {
  std::uint64_t counter;
  std::uint64_t tail_before;
  std::uint64_t first;
  std::uint64_t last;
  std::uint32_t crc;
  std::uint32_t pad;
};
inline constexpr std::size_t kJournalSlot = 64;

inline std::uint32_t journal_crc(const JournalEntry& e) {
  return shm::crc32c(&e, offsetof(JournalEntry, crc));
}

// The newest entry whose CRC holds, if any.
inline std::optional<JournalEntry> read_journal(int fd) {
  std::optional<JournalEntry> best;
  for (int i = 0; i < 2; ++i) {
    JournalEntry e{};
    if (::pread(fd, &e, sizeof e, static_cast<off_t>(i * kJournalSlot)) !=
        static_cast<ssize_t>(sizeof e))
      continue;
    if (e.crc != journal_crc(e)) continue;
    if (!best || e.counter > best->counter) best = e;
  }
  return best;
}

inline bool write_journal(int fd, JournalEntry e) {
  e.pad = 0;
  e.crc = journal_crc(e);
  return ::pwrite(fd, &e, sizeof e, static_cast<off_t>((e.counter % 2) * kJournalSlot)) ==
         static_cast<ssize_t>(sizeof e);
}

// Opens a segment object with open(), creating it (ephemeral) with create(co)
// when it does not exist yet; retries (10 ms apart, about 10 s) while another
// process is creating it or attachment slots of dead processes wait for reclaim.
template <class Open, class Create>
auto open_or_create(Open open, Create create) -> decltype(open()) {
  for (int attempt = 0;; ++attempt) {
    auto opened = open();
    if (opened) return opened;
    shm::Errc code = opened.error().code;
    if (code == shm::Errc::NotFound) {
      shm::CreateOptions co;
      co.ephemeral = true;
      auto created = create(co);
      if (created) return created;
      code = created.error().code;
      if (code != shm::Errc::AlreadyExists) return created;
    } else if (code != shm::Errc::NoFreeSlot && code != shm::Errc::NotReady) {
      return opened;
    }
    if (attempt > 1000) return opened;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace soak
