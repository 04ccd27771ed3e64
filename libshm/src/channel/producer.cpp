// ChannelProducer: attach, rotation (ADR-0010's algorithm), blocking and finish.
#include "shm/channel/producer.hpp"
#include "shm/platform/clock.hpp"

#include "channel/internal.hpp"
#include "platform/spin_then_park.hpp"
#include "shm/platform/futex.hpp"

#include "format/format.hpp"

namespace shm {

std::string_view to_string(SendStatus a) noexcept {
  switch (a) {
    case SendStatus::Ok:
      return "ok";
    case SendStatus::RingFull:
      return "ring full";
    case SendStatus::PageQuotaExhausted:
      return "page quota exhausted";
  }
  return "unknown";
}

Result<ChannelProducer> ChannelProducer::attach(Segment segment) {
  if (auto ok = channel::check_adopted(segment); !ok) return std::unexpected(ok.error());
  return adopt(std::move(segment));
}

Result<ChannelProducer> ChannelProducer::adopt(Result<Segment> seg) {
  if (!seg) return std::unexpected(seg.error());
  ChannelProducer p;
  if (auto ok = bind(p, std::move(*seg), channel::kProducerRole); !ok)
    return std::unexpected(ok.error());
  if (auto ok = p.resume(); !ok) return std::unexpected(ok.error());
  return p;
}

Result<ChannelProducer> ChannelProducer::create(std::string_view name, const ChannelParams& params,
                                                const CreateOptions& options) {
  return adopt(create_channel(name, params, options));
}

Result<ChannelProducer> ChannelProducer::open(std::string_view name, const ChannelParams& expected,
                                              const OpenOptions& options) {
  return adopt(open_channel(name, expected, options));
}

// Picks up the channel as created. A channel carries one producer lifetime:
// a predecessor that died may have stopped anywhere inside an admission or a
// rotation, and the consumer reports that as ProducerDied rather than have a
// successor paper over it.
Result<void> ChannelProducer::resume() {
  const std::string& path = segment_.path();
  switch (state()) {
    case ChannelState::Open:
      break;
    case ChannelState::Clean:
      return fail(Errc::InvalidArgument,
                  shm::detail::format("{}: channel is finished (CLEAN); create a new one", path));
    case ChannelState::Faulted:
      return already_faulted();
    case ChannelState::Corrupt:
      return fail(Errc::Corrupt,
                  shm::detail::format("{}: terminal word {:#010x} is not OPEN/CLEAN/FAULTED", path,
                                      control().terminal.word.load(std::memory_order_relaxed)));
  }
  if (attachment_.generation() != 1)
    return fail(
        Errc::ProducerDied,
        shm::detail::format("{}: an earlier producer (attachment generation {}) left this channel "
                            "without finishing; a channel carries one producer lifetime, create "
                            "a new one",
                            path, attachment_.generation() - 1));
  // acquire: pairs with the consumer's [chan.C] and [chan.E] (a consumer may have run
  // ahead of us on an empty channel, but it cannot have consumed anything).
  const std::uint64_t head = control().consumer.head.load(std::memory_order_acquire);
  const std::uint64_t released = control().release.released_epoch.load(std::memory_order_acquire);
  // relaxed: nobody but a producer writes these, and none wrote them since READY.
  const std::uint64_t tail = control().producer.tail.load(std::memory_order_relaxed);
  const std::uint64_t active = control().producer.active_epoch.load(std::memory_order_relaxed);
  page_.attach(slot(active), view_.geometry);
  // relaxed: written at create (published by READY); only we write them now.
  const page::SlotHeader* h = page_.header();
  if (page_.epoch() != active ||
      h->binding.generation.load(std::memory_order_relaxed) != static_cast<std::uint32_t>(active) ||
      h->binding.state.load(std::memory_order_relaxed) != page::kOpen ||
      page_.next_sequence() != tail || page_.used() > view_.params.page_bytes ||
      page_.published() > view_.params.descriptors_per_page || head > tail || released > active + 1)
    return fail(Errc::Corrupt,
                shm::detail::format(
                    "{}: channel state is impossible for a fresh producer: active epoch {}, "
                    "slot bound to epoch {} ({} published), tail {}, head {}, released {}",
                    path, active, page_.epoch(), page_.published(), tail, head, released));
  tail_ = tail;
  cached_head_ = head;
  cached_released_ = released;
  return {};
}

std::unexpected<Error> ChannelProducer::not_open() {
  const std::string& path = segment_.path();
  if (reserving_)
    return fail(Errc::InvalidArgument,
                shm::detail::format(
                    "{}: a reservation is outstanding; commit() or abandon() it first", path));
  if (finished_)
    return fail(Errc::InvalidArgument,
                shm::detail::format("{}: channel is finished; nothing more can be sent", path));
  // [chan.T'] acquire: pairs with [chan.T] in the side that changed the word.
  const std::uint32_t word = control().terminal.word.load(std::memory_order_acquire);
  switch (channel::state_of(word)) {
    case ChannelState::Faulted:
      return already_faulted();
    case ChannelState::Clean:
      return fail(
          Errc::InvalidArgument,
          shm::detail::format("{}: channel is finished (CLEAN); nothing more can be sent", path));
    case ChannelState::Open:  // cannot go back to OPEN; treat like corrupt
    case ChannelState::Corrupt:
      break;
  }
  return raise(ChannelFault::CorruptTerminal, page_.epoch(), page_.next_sequence(),
               shm::detail::format("terminal word {:#010x} seen by the producer", word));
}

std::unexpected<Error> ChannelProducer::too_large(std::size_t n) const {
  return fail(Errc::TooLarge,
              shm::detail::format("{}: payload of {} bytes exceeds an empty page ({} bytes)",
                                  segment_.path(), n, view_.params.max_payload));
}

Result<bool> ChannelProducer::refresh_head() {
  // [chan.C'] acquire: pairs with the consumer's [chan.C]; descriptors before head are no longer
  // read.
  const std::uint64_t head = control().consumer.head.load(std::memory_order_acquire);
  if (head < cached_head_ || head > tail_)
    return raise(
        ChannelFault::CorruptState, page_.epoch(), page_.next_sequence(),
        shm::detail::format("consumer head {} is outside [{}, {}] (last seen, published tail)",
                            head, cached_head_, tail_));
  cached_head_ = head;
  return tail_ - head < view_.params.ring_cells;
}

Result<bool> ChannelProducer::quota_allows() {
  const std::uint64_t next = page_.epoch() + 1;
  // released_epoch only grows: a cached value that already frees the slot is enough.
  if (next < cached_released_ + view_.params.pages) return true;
  // [chan.A] acquire: pairs with the consumer's [chan.E]; every read of the epoch that
  // last used slot next mod P happened before our rebind of it.
  const std::uint64_t released = control().release.released_epoch.load(std::memory_order_acquire);
  if (released < cached_released_ || released > next)
    return raise(
        ChannelFault::CorruptState, page_.epoch(), page_.next_sequence(),
        shm::detail::format("released_epoch {} is outside [{}, {}] (last seen, active epoch + 1)",
                            released, cached_released_, next));
  cached_released_ = released;
  return next < released + view_.params.pages;
}

void ChannelProducer::seal_active() noexcept {
  page_.seal();
}

void ChannelProducer::rebind_next() noexcept {
  const std::uint64_t next = page_.epoch() + 1;
  page_.rebind(slot(next), view_.geometry, next, page_.next_sequence());
  // relaxed: for observers; the consumer learns epochs from descriptors.
  control().producer.active_epoch.store(next, std::memory_order_relaxed);
}

Result<bool> ChannelProducer::rotate() {
  auto free = quota_allows();  // before the seal: a refusal leaves the page open
  if (!free) return std::unexpected(std::move(free.error()));
  if (!*free) {
    control().stats.quota_refusals.store(++quota_refusals_, std::memory_order_relaxed);  // stats
    return false;
  }
  seal_active();
  rebind_next();
  control().stats.rotations.store(++rotations_, std::memory_order_relaxed);  // statistics
  return true;
}

std::unexpected<Error> ChannelProducer::reservation_misuse(std::size_t used) const {
  if (!reserving_)
    return fail(Errc::InvalidArgument,
                shm::detail::format("{}: commit() of a reservation that finish() dropped",
                                    segment_.path()));
  return fail(Errc::InvalidArgument,
              shm::detail::format("{}: commit() of {} bytes, but only {} were reserved",
                                  segment_.path(), used, reserved_length_));
}

Result<Reservation> ChannelProducer::reserve(std::size_t n, std::chrono::nanoseconds timeout) {
  // Held while we wait: a second thread entering this producer meanwhile aborts.
  const detail::EndpointGuard::Scope scope(guard_, "a channel endpoint");
  return reserve_waiting(n, timeout);
}

Result<Reservation> ChannelProducer::reserve_waiting(std::size_t n,
                                                     std::chrono::nanoseconds timeout) {
  const auto deadline = ::shm::detail::deadline_after(timeout);
  const auto done = [](const Result<Reservation>& r) { return !r || *r; };
  const auto attempt = [&] { return reserve_once(n); };
  if (auto r = detail::spin(channel::internal::kSpins, attempt, done)) return std::move(*r);
  auto& w = control().waiters;
  std::optional<Result<Reservation>> r;  // every park round sets it before it may end
  (void)detail::park(
      w.space_signal, deadline,
      [&] {
        // [chan.D2'] seq_cst store of the flag, then seq_cst loads of what we wait
        // for (head, released_epoch, the terminal word): pairs with [chan.D2] in
        // give_back(), [chan.E] at the seam and [chan.T] in raise(). Either we see their
        // store here, or they see our flag and wake us; reserve_once() reads
        // these words again afterwards, and coherence keeps those reads at
        // least this new.
        w.producer_parked.store(1, std::memory_order_seq_cst);
        (void)control().consumer.head.load(std::memory_order_seq_cst);
        (void)control().release.released_epoch.load(std::memory_order_seq_cst);
        (void)control().terminal.word.load(std::memory_order_seq_cst);
        r = attempt();
        return done(*r) ? detail::ParkRound::Done : detail::ParkRound::Sleep;
      },
      [](std::uint64_t left_ns) { return left_ns; }, [&] { attachment_.heartbeat(); });
  w.producer_parked.store(0, std::memory_order_relaxed);  // a hint for the consumer
  return std::move(*r);
}

Result<SendOutcome> ChannelProducer::send(std::span<const std::byte> payload,
                                          std::chrono::nanoseconds timeout) {
  const detail::EndpointGuard::Scope scope(guard_, "a channel endpoint");
  auto r = reserve_waiting(payload.size(), timeout);
  if (!r) return std::unexpected(std::move(r.error()));
  if (!*r) return SendOutcome{r->status, 0, 0};
  const std::span<std::byte> to = std::exchange(r->bytes_, {});
  r->owner_ = nullptr;  // published below, not abandoned
  return publish(payload.size(), page::copy_checksum(to.data(), payload.data(), payload.size()));
}

Result<void> ChannelProducer::finish() {
  const detail::EndpointGuard::Scope scope(guard_, "a channel endpoint");
  assert(!reserving_ && "finish() with a reservation outstanding");
  reserving_ = false;  // a later commit() of it is refused (reservation_misuse)
  if (finished_) return {};
  auto& word = control().terminal.word;
  // [chan.T'] acquire: pairs with [chan.T] of a side that changed the word.
  std::uint32_t seen = word.load(std::memory_order_acquire);
  if (seen == channel::kTerminalOpen) {
    page_.seal();  // [chan.S]
    // [chan.T] CLEAN follows every [chan.P]/[chan.R]/[chan.S]; pairs with [chan.T'] in the
    // consumer. seq_cst, with the flag load below: Dekker pairing with [chan.D1'] (see [chan.D1]).
    if (word.compare_exchange_strong(seen, channel::kTerminalClean, std::memory_order_seq_cst)) {
      finished_ = true;
      if (control().waiters.consumer_parked.load(std::memory_order_seq_cst) != 0) wake_consumer();
      return {};
    }
  }
  switch (channel::state_of(seen)) {
    case ChannelState::Faulted:
      return already_faulted();
    case ChannelState::Clean:
      finished_ = true;
      return {};
    case ChannelState::Open:
    case ChannelState::Corrupt:
      break;
  }
  return raise(ChannelFault::CorruptTerminal, page_.epoch(), page_.next_sequence(),
               shm::detail::format("terminal word {:#010x} seen by finish()", seen));
}

}  // namespace shm
