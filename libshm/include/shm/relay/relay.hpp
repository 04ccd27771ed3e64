/// @file
/// RelayCell handles: RelayWriter (any number, any process) and RelayReader
/// (one live reader; a second is RoleTaken). The protocol is in layout.hpp,
/// policies and the validation table in policy.hpp, the user's guide in
/// docs/relay.md.
#pragma once

#include "shm/error.hpp"
#include "shm/platform/clock.hpp"  // shm::forever
#include "shm/platform/fork_generation.hpp"
#include "shm/relay/layout.hpp"
#include "shm/relay/policy.hpp"
#include "shm/segment/segment.hpp"
#include "shm/spill/page.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace shm::spill {
class Purger;  ///< shm/spill/purger.hpp
}
namespace shm::relay::internal {
class Sealer;  ///< libshm/src/relay/sealer.hpp
}

namespace shm {

/// The spill store behind the Spill overflow (docs/spill.md). Stored in the
/// segment; page_size and the retention limits are retunable live
/// (retune_spill, shmctl set).
struct SpillPolicy {
  bool enabled = false;  ///< the relay has a spill store (Overflow::Spill needs it)
  std::string dir;  ///< empty: `$LIBSHM_SPILL_DIR/<relay>`, else `/var/lib/libshm/spill/<relay>`
  std::uint64_t page_size = 64 * 1024;  ///< bytes per page, header included (>= header + 1 record)
  /// CompactOnWrite: a seal writes the entries of one key as one record where
  /// sound (never merging an entry a reader gave back); docs/spill.md.
  relay::SpillMode mode = relay::SpillMode::AppendCompact;
  relay::RetentionKind retention =
      relay::RetentionKind::UnboundedLog;  ///< how cold pages are bounded (see the two limits
                                           ///< below)
  std::uint64_t retention_bytes = 0;       ///< BoundedDisk: cold bytes at most this (then Block)
  std::chrono::milliseconds ttl{0};        ///< Ttl: an unacknowledged page older than this expires
  relay::Rehydrate rehydrate = relay::Rehydrate::Sequential;  ///< how cold pages are read back
};
/// The enumerator's name, for logs and tool output.
[[nodiscard]] std::string_view to_string(relay::SpillMode m) noexcept;
/// The enumerator's name, for logs and tool output.
[[nodiscard]] std::string_view to_string(relay::RetentionKind r) noexcept;

/// What create makes: merge policy, sizes, backpressure, egress order and spill store.
struct RelayConfig {
  PolicyId policy =
      policy::kKeepLatest;           ///< the merge policy (built-in or registered in this process)
  std::uint32_t value_bytes = 8;     ///< largest value, [1, 256]
  std::uint32_t max_entries = 1024;  ///< entries (keys or FIFO ops) the head can hold, [1, 2^22]
  Backpressure backpressure{
      Dimension::Count, 768, 256,
      Overflow::Block};  ///< levels and overflow action (validated against the sizes)
  EgressOrder egress =
      EgressOrder::Arrival;  ///< how the egress is consumed (validate_pair() checks it)
  bool spill_dedup = false;  ///< declared: the reader drops redelivered ops by first_seq
  SpillPolicy spill;         ///< Overflow::Spill needs spill.enabled
  /// Keys whose delivered value the relay remembers (docs/relay.md,
  /// "Delivered-value memory"), [0, 2^22]; 0: no memory. kRememberAsEntries:
  /// max_entries for a keyed, associative, idempotent policy, 0 for the others.
  std::uint32_t remembered_keys = kRememberAsEntries;
  /// The default of remembered_keys (see there).
  static constexpr std::uint32_t kRememberAsEntries = 0xFFFF'FFFFu;
};

/// What a write did. Only Appended, Merged and Displaced change the head (and
/// signal the reader).
enum class WriteStatus : std::uint8_t {
  Appended,   ///< opened a new entry (a new key, or a FIFO op)
  Merged,     ///< merged into the key's open entry and changed its value
  Unchanged,  ///< changed nothing (max at or below, same keep_latest value, sum of 0...)
  Displaced,  ///< DropOldest: the oldest entry was dropped (counted, logged), the op appended
  Dropped,    ///< DropNewest: the op was dropped (counted, logged)
  Full,       ///< no free entry (Conflate past capacity, or every entry is held): nothing written
  TimedOut,   ///< Block: the relay stayed full for the whole timeout, or a live process held
              ///< its mutex through it (try_write: through one lock slice); nothing written
};
/// The enumerator's name, for logs and tool output.
[[nodiscard]] std::string_view to_string(WriteStatus o) noexcept;

/// What a write did, and the sequence it gave the op.
struct WriteOutcome {
  WriteStatus status = WriteStatus::Unchanged;  ///< what the write did
  std::uint64_t seq = 0;  ///< the op's sequence when it was accepted (Appended/Merged/Displaced)
};

/// One drained entry. `value` points into the reader's buffer, valid until the
/// next take()/drain().
struct RelayEntry {
  std::uint64_t key = 0;             ///< the key (raw_fifo: the key the op carried)
  std::span<const std::byte> value;  ///< the merged value (points into the reader's buffer)
  std::uint64_t first_seq = 0;       ///< the sequence of its first op
  std::uint64_t last_seq = 0;        ///< the sequence of its last op
  std::uint64_t op_count = 0;        ///< ops merged into it
  bool redelivered = false;   ///< returned from a reader that died holding it (at-least-once)
  std::uint64_t page_id = 0;  ///< the cold page it came from; 0: the hot head
  /// When its first op was written, CLOCK_MONOTONIC ns as the entry head
  /// records it (read from the coarse clock unless the dimension is Age: up
  /// to one kernel tick, 1-4 ms, early). 0: not known, for an entry read back
  /// from a cold page (page records carry no time; docs/relay.md, "Egress
  /// stages").
  std::uint64_t created_ns = 0;
};

/// One entry of the relay's event log (drops, repairs, retunes...).
struct RelayEvent {
  std::uint64_t number = 0;   ///< the event's number; a gap: events overwritten before the read
  std::uint64_t time_ns = 0;  ///< when it happened, realtime ns
  relay::EventKind kind{};    ///< what happened
  std::uint64_t key = 0;      ///< a key or page id (see relay::EventKind)
  std::uint64_t count = 0;    ///< how many (see relay::EventKind)
};
/// The enumerator's name, for logs and tool output.
[[nodiscard]] std::string_view to_string(relay::EventKind k) noexcept;

/// Projections and counters, readable by any process without the mutex.
struct RelaySnapshot {
  PolicyId policy = 0;        ///< the merge policy's id
  std::string policy_name;    ///< its name ("policy-N" when not registered in this process)
  MergeFlags flags;           ///< its flags
  Backpressure backpressure;  ///< the backpressure policy in force
  EgressOrder egress = EgressOrder::Arrival;  ///< how the egress is consumed
  std::uint32_t value_bytes = 0;              ///< largest value, bytes
  std::uint32_t max_entries = 0;              ///< entries the head can hold
  std::uint64_t depth = 0;                    ///< pending entries
  std::uint64_t bytes = 0;                    ///< value bytes pending
  std::uint64_t pending_keys = 0;             ///< keys with an open entry
  std::uint64_t lag = 0;                      ///< ops accepted and not yet drained
  std::uint64_t in_hand = 0;                  ///< entries the reader took and has not committed
  std::uint64_t oldest_age_ns = 0;            ///< age of the oldest pending op, ns
  std::uint32_t max_remembered = 0;           ///< slots of the delivered-value memory (0: none)
  std::uint64_t remembered = 0;               ///< keys whose delivered value is remembered
  std::uint64_t forgotten = 0;             ///< keys the memory evicted (CLOCK) to remember others
  std::uint64_t remembered_unchanged = 0;  ///< writes the memory found Unchanged (in `unchanged`)
  bool is_full = false;      ///< backpressure: set at high water, cleared at low water
  bool is_spilling = false;  ///< cold pages wait on disk
  bool is_draining = false;  ///< the reader holds a taken batch
  bool faulted = false;      ///< damage was found: every operation fails
  bool consistent = true;    ///< false: no stable seqlock read (a busy or dead holder)
  std::uint64_t writes = 0,  ///< write calls that reached the head
      appended = 0,          ///< ops that opened a new entry
      merged = 0,            ///< ops merged into an open entry
      unchanged = 0,         ///< ops that changed nothing
      dropped = 0,           ///< ops lost to DropNewest / DropOldest
      conflated = 0,         ///< ops folded into another op (== merged)
      blocked = 0,           ///< writes that parked (Block)
      timed_out = 0,         ///< parked writes that gave up
      refused_full = 0,      ///< writes refused: no free entry
      drained = 0,           ///< entries delivered to the reader
      drained_ops = 0,       ///< ops those entries carried
      returned = 0,          ///< entries returned from a dead reader
      repairs = 0,           ///< repairs after a holder died (EOWNERDEAD)
      retunes = 0,           ///< backpressure changes
      reconfigures = 0,      ///< policy swaps
      notifies = 0;          ///< writes that signalled the reader
  /// The spill store (all 0 without one).
  bool spill_enabled = false;
  std::string spill_dir;              ///< the spill directory
  std::uint64_t spill_page_size = 0;  ///< target page size, bytes (header included)
  relay::RetentionKind retention{};   ///< how cold pages are bounded
  std::uint64_t retention_bytes = 0,  ///< BoundedDisk: the cold-byte limit
      retention_ttl_ms = 0;           ///< Ttl: the page age limit, ms
  std::uint64_t cold_pages = 0,       ///< sealed pages not acknowledged yet
      cold_bytes = 0,                 ///< bytes of those pages
      cold_ops = 0;                   ///< ops those pages carry
  std::uint64_t cursor_page = 0,      ///< the page the reader is inside, 0: at a page start
      cursor_record = 0;              ///< records of that page acknowledged
  std::uint64_t catch_up_page = 0;  ///< last page of the conflated summary being delivered, 0: none
  /// A seal writing its page now (its entries wait, closed, in the hot head).
  bool seal_in_flight = false;
  std::uint64_t seal_page = 0,     ///< the page id the seal in flight writes
      spilling_entries = 0;        ///< entries that seal takes from the head
  std::uint64_t pages_sealed = 0,  ///< pages written and recorded
      entries_spilled = 0,         ///< entries those pages took from the head
      ops_spilled = 0,             ///< ops those entries carried
      pages_acked = 0,             ///< pages the reader acknowledged
      pages_refused = 0,           ///< pages that failed validation, moved aside
      pages_expired = 0,           ///< pages expired by Ttl retention
      pages_rebuilt = 0,           ///< pages adopted from the directory at create
      spill_fallbacks = 0,         ///< spills that were impossible: the write blocked instead
      no_space = 0,                ///< seals refused by the free-space preflight or ENOSPC
      seal_errors = 0,             ///< other I/O errors while sealing
      seals_rolled_forward = 0,    ///< repaired seals whose page was recorded
      seals_rolled_back = 0;       ///< repaired seals whose page was not recorded
  /// One sealed page of the manifest.
  struct ColdPage {
    std::uint64_t page_id = 0,  ///< the page's id (its file name)
        first_seq = 0,          ///< the first op sequence it holds
        last_seq = 0,           ///< the last op sequence it holds
        records = 0,            ///< records in the page
        ops = 0,                ///< ops those records carry
        bytes = 0,              ///< bytes of the page
        sealed_ns = 0;          ///< when it was sealed, realtime ns
    bool acked = false;         ///< acknowledged, its file being removed
  };
  std::vector<ColdPage> manifest;  ///< by page id
  std::vector<RelayEvent> events;  ///< oldest first
  /// The backpressure level in its dimension: depth, bytes, pending_keys, or
  /// the oldest op's age in ms.
  [[nodiscard]] std::uint64_t level() const noexcept;
};

/// Library-private classes the relay handles befriend (not part of the API).
namespace relay::internal {
class CatchUpSummary;  ///< relay/catch_up.hpp (private)
}  // namespace relay::internal
namespace detail {
struct WaitSetAccess;  // the WaitSet reads a member's state (shm/waitset/waitset.hpp)
}  // namespace detail

namespace relay::detail {
struct View {
  ParamBlock params{};
  Geometry geometry{};
  Control* control = nullptr;
  SpillArea* spill = nullptr;
  std::byte* entries = nullptr;
  std::atomic<std::uint32_t>* index = nullptr;
  std::byte* memory = nullptr;                         ///< the memory slots
  std::atomic<std::uint32_t>* memory_index = nullptr;  ///< their key index
  [[nodiscard]] MemSlot& slot(std::uint32_t i) const noexcept {
    return *reinterpret_cast<MemSlot*>(memory + memory_stride(params.value_bytes) * i);
  }
  [[nodiscard]] unsigned char* slot_value(std::uint32_t i) const noexcept {
    return reinterpret_cast<unsigned char*>(memory + memory_stride(params.value_bytes) * i +
                                            sizeof(MemSlot));
  }
  [[nodiscard]] EntryHead& entry(std::uint32_t i) const noexcept {
    return *reinterpret_cast<EntryHead*>(entries + entry_stride(params.value_bytes) * i);
  }
  [[nodiscard]] unsigned char* value(std::uint32_t i) const noexcept {
    return reinterpret_cast<unsigned char*>(entries + entry_stride(params.value_bytes) * i +
                                            sizeof(EntryHead));
  }
  /// Value buffer `b` (0 or 1) of entry i (the copy merge of lww and keep_latest).
  [[nodiscard]] unsigned char* buffer(std::uint32_t i, std::uint64_t b) const noexcept {
    return value(i) + 8 + b * buffer_stride(params.value_bytes);
  }
  /// The segment's header and file, to ask the kernel whether a claimer of
  /// a merge word is alive (null / -1 in a view without a segment).
  const SegmentHeader* header = nullptr;
  int fd = -1;
};

/// What both handles hold.
class Handle {
 public:
  Handle() = default;
  Handle(Handle&&) noexcept = default;
  /// Detaches before the old mapping goes away (the attachment writes into
  /// it); a defaulted one would unmap first, in member order.
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      attachment_.detach();
      segment_ = std::move(other.segment_);
      spill_dir_ = std::move(other.spill_dir_);
      attachment_ = std::move(other.attachment_);
      view_ = std::exchange(other.view_, View{});
      policy_ = std::exchange(other.policy_, nullptr);
    }
    return *this;
  }

  [[nodiscard]] RelaySnapshot snapshot() const;
  /// The value the reader was last given for `key` as the delivered-value
  /// memory holds it (docs/relay.md); nullopt when the key is not remembered
  /// (never delivered, evicted, or a relay without a memory).
  [[nodiscard]] Result<std::optional<std::vector<std::byte>>> delivered(std::uint64_t key);
  /// True while the head is empty (nothing pending, nothing in hand).
  [[nodiscard]] bool can_reconfigure() const;
  /// Swaps the merge policy (and optionally the overflow action); refused
  /// (InvalidArgument) unless the head is empty, PolicyRefused by the
  /// validation table, UnknownPolicy if not registered here.
  [[nodiscard]] Result<void> reconfigure(PolicyId policy);
  [[nodiscard]] Result<void> reconfigure(PolicyId policy, Overflow overflow);
  /// Retunes the backpressure policy live; every attached handle follows it.
  [[nodiscard]] Result<void> retune(const Backpressure& bp);
  /// Retunes the spill store's page size and retention limits live (the kind
  /// stays: BoundedDisk / Ttl / UnboundedLog); InvalidArgument without a store.
  [[nodiscard]] Result<void> retune_spill(std::uint64_t page_size, std::uint64_t retention_bytes,
                                          std::chrono::milliseconds ttl);
  [[nodiscard]] const Segment& segment() const noexcept { return segment_; }
  [[nodiscard]] const View& view() const noexcept { return view_; }

 protected:
  [[nodiscard]] Result<const MergePolicy*> policy_now();
  /// The spill directory, opened on first use and checked against the relay's id.
  [[nodiscard]] Result<spill::SpillDir*> spill_dir();
  Segment segment_;
  spill::SpillDir spill_dir_;
  Attachment attachment_;
  View view_;
  const MergePolicy* policy_ = nullptr;  ///< cached; refreshed when the segment's id changes
};
}  // namespace relay::detail

/// Who writes a spill page's file (docs/spill.md, "Sealing on a thread").
enum class SealMode : std::uint8_t {
  Inline = 0,  ///< the write that finds the relay full seals the page itself (the default)
  Background,  ///< a thread of this writer's handle seals it; the write appends meanwhile
};
/// The enumerator's name, for logs and tool output.
[[nodiscard]] std::string_view to_string(SealMode v) noexcept;

/// A writer of a relay (any number, any process): merges or appends ops under
/// the relay's mutex. Move-only; detaches on destruction.
class RelayWriter : public relay::detail::Handle {
 public:
  RelayWriter() noexcept;
  /// Takes over the other's attachment and sealer.
  RelayWriter(RelayWriter&&) noexcept;
  /// Stops this handle's sealer (a seal under way finishes) before the old
  /// mapping goes.
  RelayWriter& operator=(RelayWriter&&) noexcept;
  ~RelayWriter();

  /// Creates the relay (validating the config against the table) and attaches as a writer.
  [[nodiscard]] static Result<RelayWriter> create(std::string_view name, const RelayConfig& config,
                                                  const CreateOptions& options = {});
  /// Opens an existing relay and attaches as a writer.
  [[nodiscard]] static Result<RelayWriter> open(std::string_view name,
                                                const OpenOptions& options = {});
  /// Adopts a segment opened or created already (open_relay, create_relay)
  /// and attaches as a writer; KindMismatch / SizeMismatch when it is not a relay.
  [[nodiscard]] static Result<RelayWriter> attach(Segment segment);

  /// Keyed policies merge into the key's open entry; raw_fifo appends (the key
  /// is carried along). Block parks up to `timeout` while the relay is full
  /// (shm::forever: until there is room), then answers TimedOut.
  [[nodiscard]] Result<WriteOutcome> write(std::uint64_t key, std::span<const std::byte> value,
                                           std::chrono::nanoseconds timeout);
  /// write() with key 0 (raw_fifo, or a relay of one key).
  [[nodiscard]] Result<WriteOutcome> write(std::span<const std::byte> value,
                                           std::chrono::nanoseconds timeout) {
    return write(0, value, timeout);
  }
  /// Never parks: a full relay under Block answers TimedOut at once (every
  /// other overflow action answers as write() does).
  [[nodiscard]] Result<WriteOutcome> try_write(std::uint64_t key,
                                               std::span<const std::byte> value) {
    return write(key, value, std::chrono::nanoseconds::zero());
  }
  /// try_write() with key 0.
  [[nodiscard]] Result<WriteOutcome> try_write(std::span<const std::byte> value) {
    return write(0, value, std::chrono::nanoseconds::zero());
  }

  /// Background: when a write finds the relay full (overflow Spill), this
  /// handle's sealer thread seals the oldest pending entries while the write
  /// appends into the entries left between high water and capacity; a write
  /// that finds none left waits for that seal (whatever its timeout, as an
  /// inline seal would make it wait). The page, its order and the crash
  /// rules are those of an inline seal. InvalidArgument without a spill
  /// store; an error when no thread or spill directory can be had.
  [[nodiscard]] Result<void> set_seal_mode(SealMode mode);
  /// The mode set_seal_mode() set (Inline until then).
  [[nodiscard]] SealMode seal_mode() const noexcept;

 private:
  friend struct detail::WaitSetAccess;
  /// For a WaitSet (docs/waitset.md): under the mutex, whether a write that
  /// needs a new entry would be appended without the overflow action (not
  /// full, an entry free); when not and `announce`, raises writers_waiting
  /// as a parking write does. nullopt when a live holder kept the mutex
  /// past one lock slice; an error when the relay is faulted.
  [[nodiscard]] Result<std::optional<bool>> room_for_set(bool announce);
  [[nodiscard]] static Result<RelayWriter> adopt(Result<Segment> seg);
  std::unique_ptr<relay::internal::Sealer> sealer_;
};

/// How a reader catches up on cold pages (docs/spill.md, "Conflated catch-up").
enum class CatchUp : std::uint8_t {
  PageByPage = 0,  ///< every record of every page, in order (the default)
  Conflated,       ///< when two or more pages wait: several folded into one summary per key
};
/// The enumerator's name, for logs and tool output.
[[nodiscard]] std::string_view to_string(CatchUp v) noexcept;

/// The relay's one reader (a second live one is RoleTaken): takes the oldest
/// entries, commits or abandons them, and reads cold pages back. Move-only;
/// detaches on destruction.
class RelayReader : public relay::detail::Handle {
 public:
  RelayReader() noexcept;
  /// Takes over the other's attachment, batch in hand and threads.
  RelayReader(RelayReader&&) noexcept;
  /// Detaches this reader (joining its threads), then takes over the other's.
  RelayReader& operator=(RelayReader&&) noexcept;
  ~RelayReader();

  /// Creates the relay (validating the config against the table) and attaches as its reader.
  [[nodiscard]] static Result<RelayReader> create(std::string_view name, const RelayConfig& config,
                                                  const CreateOptions& options = {});
  /// RoleTaken while another reader lives. Entries a dead reader held are
  /// returned to the head (redelivered) first.
  [[nodiscard]] static Result<RelayReader> open(std::string_view name,
                                                const OpenOptions& options = {});
  /// Adopts a segment opened or created already (open_relay, create_relay)
  /// and attaches as the reader (as open() does).
  [[nodiscard]] static Result<RelayReader> attach(Segment segment);

  /// Takes up to `credit` oldest entries (they stay in the segment, InHand,
  /// until commit()). Calling take() again before commit() or abandon() is
  /// OutOfOrder (every build), and the batch in hand stays as it was.
  [[nodiscard]] Result<std::span<const RelayEntry>> take(std::size_t credit);
  /// Frees the taken entries; wakes parked writers when the relay fell to low water.
  [[nodiscard]] Result<void> commit();
  /// Returns the taken entries to the head (sealed, delivered again).
  [[nodiscard]] Result<void> abandon();
  /// take + fn(entry) for each + commit; if fn throws the entries are abandoned.
  template <class F>
  [[nodiscard]] Result<std::size_t> drain(std::size_t credit, F&& fn) {
    auto got = take(credit);
    if (!got) return std::unexpected(got.error());
    try {
      for (const RelayEntry& e : *got) fn(e);
    } catch (...) {
      (void)abandon();
      throw;
    }
    if (auto ok = commit(); !ok) return std::unexpected(ok.error());
    return got->size();
  }
  /// Waits until an entry is pending or a cold page waits (true), or the timeout passes (false;
  /// also when a live process holds the relay's mutex through it).
  [[nodiscard]] Result<bool> wait(std::chrono::nanoseconds timeout);

  /// Conflated: while two or more cold pages wait, a take folds the oldest of
  /// them (up to 64 MiB of page files, each older than every hot entry) into
  /// one entry per key and delivers from that summary, credit by credit; the
  /// pages are acknowledged when its last entry is committed. An entry of a
  /// summary carries the merged value, the smallest first and largest last op
  /// sequence and the summed op count of its key's records, and the first
  /// page folded as page_id. PolicyRefused unless the relay's policy is keyed,
  /// associative and conflatable (a policy swapped since is delivered page by
  /// page). A summary is this reader's own: a reader that dies before its
  /// last commit leaves the pages, delivered again by the next reader.
  [[nodiscard]] Result<void> set_catch_up(CatchUp mode);
  /// The mode set_catch_up() set (PageByPage until then).
  [[nodiscard]] CatchUp catch_up() const noexcept { return catch_up_; }

 private:
  friend struct detail::WaitSetAccess;
  /// For a WaitSet (docs/waitset.md): whether take() would return something
  /// (as wait() decides it, under the mutex); when not and `announce`,
  /// raises reader_waiting as wait() does. nullopt when a live holder kept
  /// the mutex past one lock slice; an error when the relay is faulted.
  [[nodiscard]] Result<std::optional<bool>> ready_for_set(bool announce);
  [[nodiscard]] static Result<RelayReader> adopt(Result<Segment> seg);
  [[nodiscard]] Result<std::span<const RelayEntry>> take_cold(std::size_t credit, bool& taken);
  /// Folds the oldest cold pages into summary_ (false: not this time).
  [[nodiscard]] Result<bool> build_summary(spill::SpillDir& dir);
  [[nodiscard]] std::span<const RelayEntry> take_summary(std::size_t credit);
  [[nodiscard]] Result<void> commit_summary();
  /// Under the mutex: acknowledges the page of slot `s` (inside the Ack intent).
  void acknowledge(relay::ManifestSlot& s, std::uint64_t records);
  /// Unlocked: retires the acknowledged pages' files (out of the directory,
  /// durably; their unlink left to purger_), then frees their slots.
  [[nodiscard]] Result<void> remove_acknowledged(spill::SpillDir& dir,
                                                 std::span<const std::uint64_t> ids);
  void claim_cold(std::uint64_t page_id, std::size_t credit);
  void fill_cold();
  std::vector<RelayEntry> taken_;
  std::vector<std::uint32_t> taken_index_;
  std::vector<std::byte> buffer_;
  /// A cold take: records [cold_from_, cold_end_) of page cold_page_; those
  /// below cold_redelivered_ were delivered before (by a reader that died).
  std::uint64_t cold_page_ = 0, cold_from_ = 0, cold_end_ = 0, cold_redelivered_ = 0, cold_ops_ = 0;
  spill::Page page_;  ///< the cached page (validated once; read with the relay unlocked)
  std::uint64_t page_id_ = 0;
  /// The next cold page, read by a thread while the current one is delivered
  /// and acknowledged; a take checks it like a page it read itself. Held on
  /// the heap with its own directory descriptor: the thread writes into it
  /// while this handle may be moved.
  struct ReadAhead {
    spill::SpillDir dir;
    std::thread thread;
    std::uint64_t page_id = 0;  ///< the page read or being read; 0: none
    spill::Page page;
    std::optional<Error> error;  ///< the read's error (checked by the take that uses it)
    /// True from the thread's start until it has written its last byte
    /// (release; the joiner needs no order from it, the join gives that).
    std::atomic<bool> reading{false};
    std::uint64_t fork_generation = shm::fork_generation();  ///< of the process that made it
    ReadAhead() = default;
    ReadAhead(const ReadAhead&) = delete;
    ReadAhead& operator=(const ReadAhead&) = delete;
    /// Joins the thread; a forked child's copy leaves it (it is the parent's).
    ~ReadAhead();
    void wait() {
      if (thread.joinable()) thread.join();
    }
  };
  /// Starts reading page `page_id` ahead (nothing when it is already read or
  /// being read, or when no thread or descriptor can be had: the take then
  /// reads it itself).
  void read_ahead(std::uint64_t page_id);
  std::unique_ptr<ReadAhead> ahead_;
  /// Unlinks the pages remove_acknowledged() retired into removed/, on a
  /// thread (started on first use; joined, its last purge done, on close).
  void purge_later(spill::SpillDir& dir);
  std::unique_ptr<spill::Purger> purger_;
  CatchUp catch_up_ = CatchUp::PageByPage;
  std::unique_ptr<relay::internal::CatchUpSummary> summary_;
  bool from_summary_ = false;  ///< taken_ holds summary entries
};

/// The setup helpers (docs/idioms.md, "Lifecycle"): create_relay makes the
/// segment (validating the config against the table; with a spill store, its
/// directory), open_relay opens it; neither attaches. RelayWriter /
/// RelayReader::attach(segment) adopts the result; X::create / X::open do both.
[[nodiscard]] Result<Segment> create_relay(std::string_view name, const RelayConfig& config,
                                           const CreateOptions& options = {});
/// Opens a relay segment (no attachment).
[[nodiscard]] Result<Segment> open_relay(std::string_view name, const OpenOptions& options = {});
/// The relay's shared layout (layout.hpp), its setup helpers and checks.
namespace relay {
/// What attach(Segment) checks of a segment it is given: kind, layout,
/// parameters and size.
[[nodiscard]] Result<void> check_adopted(const Segment& seg);
}  // namespace relay

/// Reads a relay's snapshot without attaching (read-only mapping).
[[nodiscard]] Result<RelaySnapshot> read_relay_snapshot(std::string_view name,
                                                        const OpenOptions& options = {});
/// Retunes a relay's backpressure from any process without attaching.
[[nodiscard]] Result<void> retune_relay(std::string_view name, const Backpressure& bp,
                                        const OpenOptions& options = {});

/// Role facades (relaycell-egress-tables.md §6): thin factories over the one relay.
enum class Traffic : std::uint8_t { State, Events };
/// The enumerator's name, for logs and tool output.
[[nodiscard]] std::string_view to_string(Traffic v) noexcept;
/// The application -> transport facade: a config preset and a writer.
struct Outbox {
  /// application -> transport: the local producer feels is_full directly.
  /// Default overflow: Conflate for state, Spill for events. The events preset
  /// enables the spill store (default directory, see SpillPolicy) and, for a
  /// policy that is not idempotent, declares spill_dedup: the reader drops
  /// redelivered ops by first_seq (docs/spill.md, replay and dedup).
  [[nodiscard]] static RelayConfig config(PolicyId policy, Traffic traffic,
                                          std::uint32_t max_entries = 1024,
                                          std::uint32_t value_bytes = 8);
  /// Creates the relay and attaches as a writer.
  [[nodiscard]] static Result<RelayWriter> create(std::string_view name, const RelayConfig& config,
                                                  const CreateOptions& options = {}) {
    return RelayWriter::create(name, config, options);
  }
};
/// The transport -> application facade: a config preset and a reader.
struct Inbox {
  /// transport -> application: backpressure reaches the remote peer only
  /// through withheld credits. Default overflow: Conflate when the policy is
  /// conflatable, otherwise Block (credit metering: the transport writer waits).
  [[nodiscard]] static Result<RelayConfig> config(PolicyId policy, std::uint32_t max_entries = 1024,
                                                  std::uint32_t value_bytes = 8);
  /// Creates the relay (validating the config) and attaches as its reader.
  [[nodiscard]] static Result<RelayReader> create(std::string_view name, const RelayConfig& config,
                                                  const CreateOptions& options = {}) {
    return RelayReader::create(name, config, options);
  }
};

}  // namespace shm
