// Channel: the rotating paged admission channel (ADR-0010) as a segment kind
// shared by one producer process and one consumer process.
//
// Layout of the data area:
//   ChannelControl   producer / consumer / stats / released_epoch / terminal /
//                    waiters, each on its own 128-byte block
//   descriptor ring  ring_cells fixed 16-byte Descriptor cells (SPSC)
//   page slots       P identical published-prefix pages (page.hpp)
//
// Epochs and slots. Page epoch e (u64, from 0) lives in slot e mod P and tags
// its descriptors with generation = e as u32. P is a power of two, so the
// consumer recovers the slot as generation mod P, then requires equality with
// the slot's bound generation and epoch before touching a cell or payload.
// Sequences are continuous across pages: payload n carries sequence n and
// travels in descriptor-ring position n.
//
// Producer (admission). Validate the payload against the active page; only on
// page-full / descriptor-full rotate: acquire-load released_epoch [chan.A], require
// a free successor slot, else PageQuotaExhausted with nothing mutated; seal the
// active page [chan.S]; rebind slot (active+1) mod P with first sequence = the
// sealed page's next sequence; active += 1. Then append + page release [chan.P],
// descriptor write + ring release [chan.R].
//
// Consumer. Descriptors arrive in epoch order. For each: the generation must be
// the current epoch's or the next one's and equal the slot's binding; the
// sequence must be exactly the next one; the cell must be published and in
// bounds; the payload CRC32C must match. On the first descriptor of epoch e+1
// the consumer requires its committed count for e to equal the sealed page's
// published count and then release-stores released_epoch [chan.E]. Every violation
// is terminal: the terminal word becomes FAULTED, never a skip.
//
// released_epoch. Stored as "epochs released so far": every epoch below it has
// been fully consumed (0 = none). The ADR states the slot check with the last
// released epoch L as `active + 1 <= L + P`; with released_epoch = L + 1 that
// is `active + 1 < released_epoch + P`, which also covers the initial state
// where nothing has been released.
//
// Reclamation. The single edge is consumer -> producer: last lease of epoch e
// given back, ring head release [chan.C] -> released_epoch release [chan.E] -> producer
// acquire [chan.A] -> rebind of slot e mod P for epoch e+P. A lease (a view into a
// page) must be given back before the consumer receives again; the consumer
// refuses (and asserts in debug builds) otherwise, so no lease is alive when
// [chan.E] executes. This is the single-consumer argument of the ADR; a second
// reader would need its own design.
//
// Terminal word OPEN / CLEAN / FAULTED. finish() seals the active page and
// stores CLEAN; the consumer ends cleanly when it has committed everything
// that was published. A producer that dies (or detaches without finish) leaves
// OPEN: the consumer drains what was published and reports ProducerDied.
#pragma once

#include "shm/channel/page.hpp"
#include "shm/error.hpp"
#include "shm/segment/kind_ids.hpp"
#include "shm/segment/layout.hpp"
#include "shm/segment/segment.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace shm {

struct ChannelParams {
  std::uint32_t pages = 0;                 // P: a power of two in [2, 65536]
  std::uint64_t page_bytes = 0;            // arena bytes per page: a multiple of 8 in [64, 2^31]
  std::uint32_t descriptors_per_page = 0;  // cells per page: [1, 2^24]
  std::uint32_t ring_cells = 0;            // descriptor ring cells: a power of two in [2, 2^26]
  // On open, a zero field means "accept what the segment has".

  // Parameters for payloads of up to `max_payload` bytes, sized so that the
  // producer can have `in_flight` payloads of that size sent and not yet
  // received before it meets back-pressure (RingFull / PageQuotaExhausted):
  //   pages                P = 4
  //   page_bytes           k = ceil(in_flight / (P - 1)) payloads of
  //                        max_payload rounded up to 8, at least 64
  //                        (P - 1 pages hold in_flight even while the consumer
  //                        is still in the fourth)
  //   descriptors_per_page max(k, page_bytes / 64): payloads of 64 bytes and
  //                        more fill a page by bytes before they run out of cells
  //   ring_cells        P x descriptors_per_page rounded up to a power of two
  // The result passes validate(), so create_channel() accepts it, and a payload
  // of max_payload bytes is never TooLarge (the channel's own limit is
  // page_bytes). Errc::InvalidArgument when max_payload or in_flight is 0 or
  // the sizes exceed the limits below (page_bytes <= 2^31).
  [[nodiscard]] static Result<ChannelParams> for_payload(std::size_t max_payload,
                                                         std::size_t in_flight = 64);
};

// Why a channel became FAULTED. Stored in the segment; every value but None is
// terminal. Integrity violations surface as Errc::Corrupt, ProducerDied as
// Errc::ProducerDied, and a channel already FAULTED as Errc::Faulted; the
// handles' fault() names the cause.
enum class ChannelFault : std::uint32_t {
  None = 0,
  GenerationMismatch = 1,     // descriptor generation != the slot's binding / the epoch order
  SequenceGap = 2,            // sequence != the next expected, or != the cell's
  CountShortfall = 3,         // committed != published at a seam or at the end
  ChecksumMismatch = 4,       // payload CRC32C differs from the cell's
  DescriptorOutOfBounds = 5,  // cell index, offset or length outside the page
  CorruptTerminal = 6,        // the terminal word is not OPEN / CLEAN / FAULTED
  CorruptState = 7,           // impossible positions, epochs or slot states
  ProducerDied = 8,           // the producer is gone and never finished
};
[[nodiscard]] std::string_view to_string(ChannelFault fault) noexcept;
// The Errc a fault is reported with when it is detected.
[[nodiscard]] Errc errc_for(ChannelFault fault) noexcept;

enum class ChannelState : std::uint8_t { Open, Clean, Faulted, Corrupt };
[[nodiscard]] std::string_view to_string(ChannelState state) noexcept;

namespace channel {

// Terminal word values (distinct patterns: a zeroed or scribbled word is corrupt).
inline constexpr std::uint32_t kTerminalOpen = 0x4E45504Fu;     // "OPEN"
inline constexpr std::uint32_t kTerminalClean = 0x4E41454Cu;    // "LEAN"
inline constexpr std::uint32_t kTerminalFaulted = 0x544C5546u;  // "FULT"

inline constexpr std::uint32_t kMinPages = 2;
inline constexpr std::uint32_t kMaxPages = 1u << 16;
inline constexpr std::uint64_t kMinPageBytes = 64;
inline constexpr std::uint64_t kMaxPageBytes = 1ull << 31;
inline constexpr std::uint32_t kMaxDescriptorsPerPage = 1u << 24;
inline constexpr std::uint32_t kMinRingCapacity = 2;
inline constexpr std::uint32_t kMaxRingCapacity = 1u << 26;
inline constexpr std::uint64_t kMaxDataSize = 1ull << 40;

// Role ids in the attachment table (exclusive: slot == id).
inline constexpr RoleSpec kProducerRole{0, true, "producer"};
inline constexpr RoleSpec kConsumerRole{1, true, "consumer"};
inline constexpr RoleSpec kObserverRole{2, false, "observer"};

// One descriptor-ring cell: a reference to a published page cell.
struct Descriptor {
  std::uint64_t sequence;    // == the ring position it travels in
  std::uint32_t generation;  // page epoch as u32
  std::uint32_t cell;        // index of the cell in that page
};
static_assert(sizeof(Descriptor) == 16);
static_assert(std::is_standard_layout_v<Descriptor> && std::is_trivially_copyable_v<Descriptor>);

struct ChannelControl {
  struct alignas(kFalseSharingRange) Producer {
    std::atomic<std::uint64_t> tail;          // descriptors published to the ring [chan.R] (= sent)
    std::atomic<std::uint64_t> active_epoch;  // producer-owned: epoch of the active page
  } producer;
  struct alignas(kFalseSharingRange) Consumer {
    std::atomic<std::uint64_t> head;  // descriptors consumed [chan.C] (= received, leases back)
  } consumer;
  // Producer-written statistics, read only by observers: off the lines the
  // consumer polls, so a producer counting refusals does not slow it down.
  struct alignas(kFalseSharingRange) Stats {
    std::atomic<std::uint64_t> rotations;       // counter: pages rotated
    std::atomic<std::uint64_t> quota_refusals;  // counter: PageQuotaExhausted outcomes
    std::atomic<std::uint64_t> ring_full;       // counter: RingFull outcomes
  } stats;
  // Written once per page lifetime by the consumer, read by the producer only
  // when it rotates: its own line keeps it off the per-event lines.
  struct alignas(kFalseSharingRange) Release {
    std::atomic<std::uint64_t> released_epoch;  // epochs < this are released [chan.E]
  } release;
  struct alignas(kFalseSharingRange) Terminal {
    std::atomic<std::uint32_t> word;         // kTerminalOpen / Clean / Faulted
    std::atomic<std::uint32_t> fault;        // ChannelFault
    std::atomic<std::uint64_t> fault_epoch;  // where the fault was detected
    std::atomic<std::uint64_t> fault_sequence;
    std::atomic<std::uint32_t> fault_role;  // role id of the detecting side (or sidecar: 2)
    std::atomic<std::int32_t> fault_pid;
  } terminal;
  // Written only around a park.
  struct alignas(kFalseSharingRange) Waiters {
    std::atomic<std::uint32_t> data_signal;      // futex: bumped to wake the consumer
    std::atomic<std::uint32_t> consumer_parked;  // set by a consumer about to sleep
    std::atomic<std::uint32_t> space_signal;     // futex: bumped to wake the producer
    std::atomic<std::uint32_t> producer_parked;  // set by a producer about to sleep
  } waiters;
};
static_assert(std::is_standard_layout_v<ChannelControl>);
static_assert(offsetof(ChannelControl, producer) == 0);
static_assert(offsetof(ChannelControl, consumer) == 1 * kFalseSharingRange);
static_assert(offsetof(ChannelControl, stats) == 2 * kFalseSharingRange);
static_assert(offsetof(ChannelControl, release) == 3 * kFalseSharingRange);
static_assert(offsetof(ChannelControl, terminal) == 4 * kFalseSharingRange);
static_assert(offsetof(ChannelControl, waiters) == 5 * kFalseSharingRange);
static_assert(sizeof(ChannelControl) == 6 * kFalseSharingRange);
static_assert(offsetof(ChannelControl::Terminal, fault_epoch) == 8);
static_assert(offsetof(ChannelControl::Terminal, fault_pid) == 28);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(std::atomic<std::int32_t>::is_always_lock_free);

inline constexpr std::uint64_t kRingOffset = sizeof(ChannelControl);

inline constexpr std::uint64_t kFingerprint = layout_fingerprint(
    {kHeaderFingerprint, sizeof(ChannelControl), offsetof(ChannelControl, consumer),
     offsetof(ChannelControl, stats), offsetof(ChannelControl, release),
     offsetof(ChannelControl, terminal), offsetof(ChannelControl, waiters), sizeof(Descriptor),
     sizeof(page::Cell), sizeof(page::SlotHeader), offsetof(page::SlotHeader, publication),
     page::kPayloadAlign, kFalseSharingRange, kTerminalOpen, kTerminalClean, kTerminalFaulted});

// The parameter block stored in the header (derived offsets included so that
// open() can check them against its own arithmetic).
struct ParamBlock {
  std::uint32_t pages;
  std::uint32_t descriptors_per_page;
  std::uint64_t page_bytes;
  std::uint32_t ring_cells;
  std::uint32_t reserved;
  std::uint64_t max_payload;
  std::uint64_t slots_offset;  // from the start of the data area
  std::uint64_t slot_stride;
  std::uint64_t data_size;
};
static_assert(sizeof(ParamBlock) == 56);
static_assert(std::is_trivially_copyable_v<ParamBlock>);

// Computes the block (with derived offsets) for valid parameters.
[[nodiscard]] ParamBlock param_block(const ChannelParams& params) noexcept;
[[nodiscard]] Result<void> validate(const ChannelParams& params);
// The KindSpec for create (params exact) or open (zero fields = any).
[[nodiscard]] KindSpec kind_spec(const ChannelParams& params, ParamBlock& storage);
// The parameter block and the segment's size (Corrupt, SizeMismatch).
[[nodiscard]] Result<void> check_geometry(const Segment& seg);
// What attach(Segment) checks of a segment it is given: kind, layout,
// parameters and size.
[[nodiscard]] Result<void> check_adopted(const Segment& seg);

// Pointers into a mapped channel segment whose parameters were checked.
struct View {
  ParamBlock params{};
  page::Geometry geometry{};
  ChannelControl* control = nullptr;
  Descriptor* ring = nullptr;
  std::byte* slots = nullptr;

  [[nodiscard]] std::byte* slot(std::uint64_t index) const noexcept {
    return slots + index * params.slot_stride;
  }
  [[nodiscard]] page::SlotHeader* slot_header(std::uint64_t index) const noexcept {
    return reinterpret_cast<page::SlotHeader*>(slot(index));
  }
  [[nodiscard]] page::Cell* cells(std::uint64_t index) const noexcept {
    return reinterpret_cast<page::Cell*>(slot(index) + geometry.cells_offset);
  }
  [[nodiscard]] std::byte* arena(std::uint64_t index) const noexcept {
    return slot(index) + geometry.arena_offset;
  }
};
// Validates the segment's parameter block and size; the View is only as
// trustworthy as the shared values read through it (callers check those).
[[nodiscard]] Result<View> view(const Segment& segment);

// Decodes a terminal word.
[[nodiscard]] ChannelState state_of(std::uint32_t terminal_word) noexcept;

}  // namespace channel

// The setup helpers (docs/idioms.md, "Lifecycle"): create_channel makes the
// segment and open_channel opens it, neither attaches;
// ChannelProducer/ChannelConsumer::attach(segment) adopts the result.
// X::create / X::open do both in one step.
[[nodiscard]] Result<Segment> create_channel(std::string_view name, const ChannelParams& params,
                                             const CreateOptions& options = {});
[[nodiscard]] Result<Segment> open_channel(std::string_view name,
                                           const ChannelParams& expected = {},
                                           const OpenOptions& options = {});

}  // namespace shm
