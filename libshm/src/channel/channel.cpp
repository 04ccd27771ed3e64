// Channel parameters, layout, create/open and the parts of the endpoints that
// both sides share (faults, wake-ups).
#include "shm/channel/layout.hpp"

#include "segment/kind_spec.hpp"
#include "segment/size_check.hpp"
#include "shm/channel/endpoint.hpp"
#include "shm/platform/futex.hpp"
#include "shm/testing/channel.hpp"  // create_channel_for_test (libshm/testing, not installed)

#include "format/format.hpp"

#include <unistd.h>
#include <algorithm>
#include <cassert>
#include <cstring>

namespace shm {

std::string_view to_string(ChannelFault fault) noexcept {
  switch (fault) {
    case ChannelFault::None:
      return "none";
    case ChannelFault::GenerationMismatch:
      return "generation mismatch";
    case ChannelFault::SequenceGap:
      return "sequence gap";
    case ChannelFault::CountShortfall:
      return "count shortfall";
    case ChannelFault::ChecksumMismatch:
      return "checksum mismatch";
    case ChannelFault::DescriptorOutOfBounds:
      return "descriptor out of bounds";
    case ChannelFault::CorruptTerminal:
      return "corrupt terminal word";
    case ChannelFault::CorruptState:
      return "corrupt state";
    case ChannelFault::ProducerDied:
      return "producer died";
  }
  return "unknown fault";
}

Errc errc_for(ChannelFault fault) noexcept {
  return fault == ChannelFault::ProducerDied ? Errc::ProducerDied : Errc::Corrupt;
}

std::string_view to_string(ChannelState state) noexcept {
  switch (state) {
    case ChannelState::Open:
      return "open";
    case ChannelState::Clean:
      return "clean";
    case ChannelState::Faulted:
      return "faulted";
    case ChannelState::Corrupt:
      return "corrupt";
  }
  return "corrupt";
}

namespace channel {

ChannelState state_of(std::uint32_t word) noexcept {
  switch (word) {
    case kTerminalOpen:
      return ChannelState::Open;
    case kTerminalClean:
      return ChannelState::Clean;
    case kTerminalFaulted:
      return ChannelState::Faulted;
    default:
      return ChannelState::Corrupt;
  }
}

ParamBlock param_block(const ChannelParams& p) noexcept {
  ParamBlock b{};
  b.pages = p.pages;
  b.descriptors_per_page = p.descriptors_per_page;
  b.page_bytes = p.page_bytes;
  b.ring_cells = p.ring_cells;
  b.max_payload = p.page_bytes;
  b.slots_offset =
      round_up(kRingOffset + std::uint64_t{p.ring_cells} * sizeof(Descriptor), kFalseSharingRange);
  b.slot_stride = page::geometry(p.descriptors_per_page, p.page_bytes).stride;
  b.data_size = b.slots_offset + std::uint64_t{p.pages} * b.slot_stride;
  return b;
}

namespace {

std::string invalid_params(const ChannelParams& p) {
  if (!is_power_of_two(p.pages) || p.pages < kMinPages || p.pages > kMaxPages)
    return shm::detail::format("pages {} must be a power of two in [{}, {}]", p.pages, kMinPages,
                               kMaxPages);
  if (p.page_bytes < kMinPageBytes || p.page_bytes > kMaxPageBytes ||
      p.page_bytes % page::kPayloadAlign != 0)
    return shm::detail::format("page_bytes {} must be a multiple of {} in [{}, {}]", p.page_bytes,
                               page::kPayloadAlign, kMinPageBytes, kMaxPageBytes);
  if (p.descriptors_per_page < 1 || p.descriptors_per_page > kMaxDescriptorsPerPage)
    return shm::detail::format("descriptors_per_page {} must be in [1, {}]", p.descriptors_per_page,
                               kMaxDescriptorsPerPage);
  if (!is_power_of_two(p.ring_cells) || p.ring_cells < kMinRingCapacity ||
      p.ring_cells > kMaxRingCapacity)
    return shm::detail::format("ring_cells {} must be a power of two in [{}, {}]", p.ring_cells,
                               kMinRingCapacity, kMaxRingCapacity);
  const ParamBlock b = param_block(p);
  if (b.data_size > kMaxDataSize)
    return shm::detail::format("{} pages of {} bytes and {} descriptors need {} bytes, limit {}",
                               p.pages, p.page_bytes, p.descriptors_per_page, b.data_size,
                               kMaxDataSize);
  return {};
}

ChannelParams base_of(const ParamBlock& b) noexcept {
  return ChannelParams{b.pages, b.page_bytes, b.descriptors_per_page, b.ring_cells};
}

// Checks a parameter block read from a segment: base values valid, derived
// values what this build computes from them.
std::string invalid_block(const ParamBlock& b) {
  if (auto why = invalid_params(base_of(b)); !why.empty()) return why;
  const ParamBlock want = param_block(base_of(b));
  if (b.max_payload != want.max_payload)
    return shm::detail::format("max_payload: segment has {}, its page_bytes imply {}",
                               b.max_payload, want.max_payload);
  if (b.slots_offset != want.slots_offset || b.slot_stride != want.slot_stride ||
      b.data_size != want.data_size)
    return shm::detail::format(
        "derived layout: segment has slots at {} stride {} size {}, this build "
        "computes {} / {} / {}",
        b.slots_offset, b.slot_stride, b.data_size, want.slots_offset, want.slot_stride,
        want.data_size);
  return {};
}

View make_view(const ParamBlock& b, std::byte* data) noexcept {
  View v;
  v.params = b;
  v.geometry = page::geometry(b.descriptors_per_page, b.page_bytes);
  v.control = reinterpret_cast<ChannelControl*>(data);
  v.ring = reinterpret_cast<Descriptor*>(data + kRingOffset);
  v.slots = data + b.slots_offset;
  return v;
}

}  // namespace

Result<void> validate(const ChannelParams& params) {
  if (auto why = invalid_params(params); !why.empty())
    return fail(Errc::InvalidArgument, "channel " + why);
  return {};
}

KindSpec kind_spec(const ChannelParams& params, ParamBlock& storage) {
  const bool complete = params.pages != 0 && params.page_bytes != 0 &&
                        params.descriptors_per_page != 0 && params.ring_cells != 0;
  if (complete) {
    storage = param_block(params);
  } else {
    storage = ParamBlock{};
    storage.pages = params.pages;
    storage.page_bytes = params.page_bytes;
    storage.descriptors_per_page = params.descriptors_per_page;
    storage.ring_cells = params.ring_cells;
  }
  return shm::detail::block_kind_spec(
      kChannelKind, "channel", kFingerprint, storage, complete ? storage.data_size : 0,
      [](const ParamBlock& f) {
        std::string why = invalid_block(f);
        return why.empty() ? why : "segment parameters: " + why;
      },
      [](const ParamBlock& f, const ParamBlock& e, shm::detail::FieldCheck& check) {
        check.field("pages", f.pages, e.pages)
            .field("page_bytes", f.page_bytes, e.page_bytes)
            .field("descriptors_per_page", f.descriptors_per_page, e.descriptors_per_page)
            .field("ring_cells", f.ring_cells, e.ring_cells);
      });
}

Result<View> view(const Segment& seg) {
  ParamBlock b{};
  if (seg.params().size() != sizeof b)
    return fail(Errc::ParamMismatch,
                shm::detail::format("{}: parameter block: segment has {} bytes, "
                                    "channel uses {}",
                                    seg.path(), seg.params().size(), sizeof b));
  std::memcpy(&b, seg.params().data(), sizeof b);
  if (auto why = invalid_block(b); !why.empty())
    return fail(Errc::ParamMismatch,
                shm::detail::format("{}: segment parameters: {}", seg.path(), why));
  if (seg.data().size() < b.data_size)
    return fail(Errc::SizeMismatch,
                shm::detail::format("{}: data area has {} bytes, the channel needs {}", seg.path(),
                                    seg.data().size(), b.data_size));
  return make_view(b, seg.data().data());
}

}  // namespace channel

namespace {

Result<Segment> create_with(std::string_view name, const ChannelParams& params,
                            std::uint64_t first_epoch, const CreateOptions& options) {
  if (auto ok = channel::validate(params); !ok) return std::unexpected(ok.error());
  channel::ParamBlock block{};
  const KindSpec spec = channel::kind_spec(params, block);
  return Segment::create(
      name, spec, options, [&block, first_epoch](std::span<std::byte> data) -> Result<void> {
        // The data area comes zero-filled from posix_fallocate: ring positions
        // 0, every slot Unbound. Bind the first epoch's slot and open the lane.
        const channel::View v = channel::make_view(block, data.data());
        page::PageWriter w;
        w.rebind(v.slot(first_epoch & (block.pages - 1)), v.geometry, first_epoch, 0);
        // relaxed: published by the segment's READY release.
        v.control->producer.active_epoch.store(first_epoch, std::memory_order_relaxed);
        v.control->release.released_epoch.store(first_epoch, std::memory_order_relaxed);
        v.control->terminal.word.store(channel::kTerminalOpen, std::memory_order_relaxed);
        return {};
      });
}

}  // namespace

Result<Segment> create_channel(std::string_view name, const ChannelParams& params,
                               const CreateOptions& options) {
  return create_with(name, params, 0, options);
}

namespace detail {
Result<Segment> create_channel_for_test(std::string_view name, const ChannelParams& params,
                                        const ChannelTestOptions& test,
                                        const CreateOptions& options) {
  return create_with(name, params, test.first_epoch, options);
}
}  // namespace detail

Result<Segment> open_channel(std::string_view name, const ChannelParams& expected,
                             const OpenOptions& options) {
  const bool complete = expected.pages != 0 && expected.page_bytes != 0 &&
                        expected.descriptors_per_page != 0 && expected.ring_cells != 0;
  if (complete) {
    if (auto ok = channel::validate(expected); !ok) return std::unexpected(ok.error());
  }
  channel::ParamBlock block{};
  const KindSpec spec = channel::kind_spec(expected, block);
  auto seg = Segment::open(name, spec, options);
  if (!seg) return seg;
  if (auto ok = channel::check_geometry(*seg); !ok) return std::unexpected(std::move(ok.error()));
  return seg;
}

namespace channel {

Result<void> check_geometry(const Segment& seg) {
  auto v = view(seg);
  if (!v) return std::unexpected(v.error());
  return shm::detail::check_total_size(seg, v->params.data_size, "its channel parameters need");
}

Result<void> check_adopted(const Segment& seg) {
  ParamBlock storage{};
  if (auto ok = shm::detail::check_kind(seg, kind_spec(ChannelParams{}, storage)); !ok) return ok;
  return check_geometry(seg);
}

}  // namespace channel

// ---------------------------------------------------------------- endpoints

namespace detail {

Result<void> ChannelEndpoint::bind(ChannelEndpoint& e, Segment segment, const RoleSpec& role) {
  auto v = channel::view(segment);
  if (!v) return std::unexpected(v.error());
  auto attachment = segment.attach(role);
  if (!attachment) return std::unexpected(attachment.error());
  e.segment_ = std::move(segment);
  e.attachment_ = std::move(*attachment);
  // The mapping moved with the Segment object only as a handle: addresses stay.
  e.view_ = *v;
  e.slot_mask_ = v->params.pages - 1;
  e.ring_mask_ = v->params.ring_cells - 1;
  e.role_ = role.id;
  return {};
}

ChannelSnapshot ChannelEndpoint::snapshot() const noexcept {
  ChannelSnapshot s;
  s.pages = view_.params.pages;
  s.page_bytes = view_.params.page_bytes;
  s.descriptors_per_page = view_.params.descriptors_per_page;
  s.ring_cells = view_.params.ring_cells;
  const channel::ChannelControl& c = control();
  // acquire: pair with [chan.C] and [chan.R], the sides' stores of head and tail.
  s.received = c.consumer.head.load(std::memory_order_acquire);
  s.sent = std::max(c.producer.tail.load(std::memory_order_acquire), s.received);
  s.in_flight = s.sent - s.received;
  // relaxed: observed values and counters, nothing is read on their strength.
  s.active_epoch = c.producer.active_epoch.load(std::memory_order_relaxed);
  s.released_epoch = c.release.released_epoch.load(std::memory_order_relaxed);
  s.rotations = c.stats.rotations.load(std::memory_order_relaxed);
  s.quota_refusals = c.stats.quota_refusals.load(std::memory_order_relaxed);
  s.ring_full = c.stats.ring_full.load(std::memory_order_relaxed);
  s.state = state();
  s.fault = fault();
  return s;
}

ChannelState ChannelEndpoint::state() const noexcept {
  // [chan.T'] acquire: pairs with the terminal stores [chan.T] (finish, raise).
  return channel::state_of(control().terminal.word.load(std::memory_order_acquire));
}

ChannelFault ChannelEndpoint::fault() const noexcept {
  if (state() != ChannelState::Faulted) return ChannelFault::None;
  // relaxed: ordered by the acquire of the word in state().
  return static_cast<ChannelFault>(control().terminal.fault.load(std::memory_order_relaxed));
}

std::unexpected<Error> ChannelEndpoint::raise(ChannelFault fault, std::uint64_t epoch,
                                              std::uint64_t sequence, const std::string& detail) {
  auto& t = control().terminal;
  std::uint32_t none = static_cast<std::uint32_t>(ChannelFault::None);
  // The fault field decides who records the cause: the first raiser wins.
  if (t.fault.compare_exchange_strong(none, static_cast<std::uint32_t>(fault),
                                      std::memory_order_acq_rel)) {
    // relaxed: published by the release store of the word below.
    t.fault_epoch.store(epoch, std::memory_order_relaxed);
    t.fault_sequence.store(sequence, std::memory_order_relaxed);
    t.fault_role.store(role_, std::memory_order_relaxed);
    t.fault_pid.store(static_cast<std::int32_t>(::getpid()), std::memory_order_relaxed);
    // [chan.T] pairs with [chan.T'] acquires of the word (state(), on_empty()); seq_cst
    // with the flag loads below: Dekker pairing with [chan.D1'] and [chan.D2'].
    t.word.store(channel::kTerminalFaulted, std::memory_order_seq_cst);
    segment_.mutable_header()->counters.faults.fetch_add(1, std::memory_order_relaxed);
    segment_.record_event(EventType::Fault, static_cast<std::uint32_t>(attachment_.slot()),
                          static_cast<std::uint32_t>(fault));
  }
  if (control().waiters.consumer_parked.load(std::memory_order_seq_cst) != 0) wake_consumer();
  if (control().waiters.producer_parked.load(std::memory_order_seq_cst) != 0) wake_producer();
  return fail(errc_for(fault),
              shm::detail::format("{}: {}: {}", segment_.path(), to_string(fault), detail));
}

std::unexpected<Error> ChannelEndpoint::already_faulted() const {
  const auto& t = control().terminal;
  const auto fault = static_cast<ChannelFault>(t.fault.load(std::memory_order_acquire));
  // relaxed: ordered by the acquire above (the fault CAS precedes these stores
  // only in the raiser's program order; a racing read shows partial details).
  return fail(Errc::Faulted,
              shm::detail::format(
                  "{}: channel is FAULTED ({} at epoch {}, sequence {}, detected by "
                  "role {} pid {})",
                  segment_.path(), to_string(fault), t.fault_epoch.load(std::memory_order_relaxed),
                  t.fault_sequence.load(std::memory_order_relaxed),
                  t.fault_role.load(std::memory_order_relaxed),
                  t.fault_pid.load(std::memory_order_relaxed)));
}

// Called after a seq_cst load saw the flag set; the exchange (relaxed: the
// Dekker edge was the seq_cst pair) only decides who issues the wake.
void ChannelEndpoint::wake_consumer() noexcept {
  auto& w = control().waiters;
  if (w.consumer_parked.exchange(0, std::memory_order_relaxed) != 0) {
    // release: the futex word change follows our publishing stores; pairs with
    // the waiter's acquire load of the signal in detail::park.
    w.data_signal.fetch_add(1, std::memory_order_release);
    (void)futex_wake_all(w.data_signal);
  }
}

void ChannelEndpoint::wake_producer() noexcept {
  auto& w = control().waiters;
  if (w.producer_parked.exchange(0, std::memory_order_relaxed) != 0) {
    // release: the futex word change follows our publishing stores; pairs with
    // the waiter's acquire load of the signal in detail::park.
    w.space_signal.fetch_add(1, std::memory_order_release);
    (void)futex_wake_all(w.space_signal);
  }
}

}  // namespace detail
}  // namespace shm
