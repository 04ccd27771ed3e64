// ChannelConsumer: attach/resume, the epoch seam (ADR-0010's release
// protocol), end of stream, producer death and blocking.
#include "shm/channel/consumer.hpp"

#include "channel/internal.hpp"
#include "platform/spin_then_park.hpp"
#include "shm/platform/clock.hpp"
#include "shm/platform/futex.hpp"

#include "format/format.hpp"

#include <algorithm>

namespace shm {

std::string_view to_string(ReceiveStatus s) noexcept {
  switch (s) {
    case ReceiveStatus::Received:
      return "received";
    case ReceiveStatus::Empty:
      return "empty";
    case ReceiveStatus::End:
      return "end";
  }
  return "unknown";
}

Result<ChannelConsumer> ChannelConsumer::attach(Segment segment) {
  if (auto ok = channel::check_adopted(segment); !ok) return std::unexpected(ok.error());
  return adopt(std::move(segment));
}

Result<ChannelConsumer> ChannelConsumer::adopt(Result<Segment> seg) {
  if (!seg) return std::unexpected(seg.error());
  ChannelConsumer c;
  if (auto ok = bind(c, std::move(*seg), channel::kConsumerRole); !ok)
    return std::unexpected(ok.error());
  if (auto ok = c.resume(); !ok) return std::unexpected(ok.error());
  // A predecessor killed after a store of head ([chan.C]) or released_epoch
  // ([chan.E]) and before its load of producer_parked took the producer's
  // wake with it: issue it now (only to a producer whose flag is set).
  c.wake_producer();
  return c;
}

Result<ChannelConsumer> ChannelConsumer::open(std::string_view name, const ChannelParams& expected,
                                              const OpenOptions& options) {
  return adopt(open_channel(name, expected, options));
}

Result<ChannelConsumer> ChannelConsumer::create(std::string_view name, const ChannelParams& params,
                                                const CreateOptions& options) {
  return adopt(create_channel(name, params, options));
}

void ChannelConsumer::bind_epoch(std::uint64_t epoch) noexcept {
  epoch_ = epoch;
  generation_ = static_cast<std::uint32_t>(epoch);
  page_ = page::PageView::at(slot(epoch), view_.geometry);
  // relaxed: the binding was written before the producer's [chan.R] for the
  // descriptor that brought us here (or before READY), observed through [chan.R'].
  first_sequence_ = page_.header->binding.first_sequence.load(std::memory_order_relaxed);
  committed_ = 0;
  cached_published_ = 0;
  next_offset_ = 0;
}

// Picks up where a predecessor stopped (or at the start): the consumer's
// position is the ring head, its epoch is released_epoch (the consumer always
// works in the first unreleased epoch), and its committed count in that epoch
// is head - first sequence of the epoch's page.
Result<void> ChannelConsumer::resume() {
  // acquire: pairs with [chan.R], [chan.C], [chan.E] and [chan.T] of whoever stored them last.
  const std::uint32_t word = control().terminal.word.load(std::memory_order_acquire);
  const std::uint64_t head = control().consumer.head.load(std::memory_order_acquire);
  const std::uint64_t tail = control().producer.tail.load(std::memory_order_acquire);
  const std::uint64_t released = control().release.released_epoch.load(std::memory_order_acquire);
  // relaxed: ordered by the acquire of the word (CLEAN) or only used for checks.
  const std::uint64_t active = control().producer.active_epoch.load(std::memory_order_relaxed);
  head_ = head;
  cached_tail_ = head;
  seen_tail_ = head;
  if (!channel::internal::ring_positions_possible(head, tail, view_.params.ring_cells) ||
      !channel::internal::epochs_possible(released, active, view_.params.pages))
    return terminal(
        fault_here(ChannelFault::CorruptState,
                   shm::detail::format("positions are impossible: head {}, tail {}, released "
                                       "epoch {}, active epoch {}, {} pages, ring of {}",
                                       head, tail, released, active, view_.params.pages,
                                       view_.params.ring_cells)));
  const ChannelState st = channel::state_of(word);
  if (st == ChannelState::Faulted &&
      fault() != ChannelFault::ProducerDied) {  // only a dead producer's lane still drains
    sticky_ = already_faulted().error();
    return {};
  }
  if (released == active + 1) {  // a predecessor consumed the whole stream
    epoch_ = released;
    if (st == ChannelState::Clean) {
      ended_ = true;
      return {};
    }
    if (st == ChannelState::Faulted) {
      sticky_ = already_faulted().error();
      return {};
    }
    return terminal(
        fault_here(ChannelFault::CorruptState,
                   shm::detail::format("every epoch up to {} is released but the terminal "
                                       "word is {:#010x}",
                                       active, word)));
  }
  bind_epoch(released);
  const page::SlotHeader& h = *page_.header;
  // relaxed: see bind_epoch(); acquire for published pairs with [chan.P].
  const std::uint64_t bound = h.binding.epoch.load(std::memory_order_relaxed);
  const std::uint32_t generation = h.binding.generation.load(std::memory_order_relaxed);
  const std::uint32_t published = h.publication.published.load(std::memory_order_acquire);
  if (bound != released || generation != generation_ || first_sequence_ > head ||
      head - first_sequence_ > published || published > view_.params.descriptors_per_page)
    return terminal(fault_here(
        ChannelFault::CorruptState,
        shm::detail::format(
            "slot of epoch {} is bound to epoch {} (generation {:#x}) with first sequence "
            "{} and {} published; consumer head is {}",
            released, bound, generation, first_sequence_, published, head)));
  committed_ = head - first_sequence_;
  cached_published_ = published;
  if (committed_ > 0) {
    const page::Cell last = page_.cell(static_cast<std::uint32_t>(committed_ - 1));
    const std::uint64_t end = std::uint64_t{last.offset} + page::aligned_length(last.length);
    if (last.offset % page::kPayloadAlign != 0 || end > view_.params.page_bytes)
      return terminal(
          fault_here(ChannelFault::DescriptorOutOfBounds,
                     shm::detail::format("cell {} of epoch {} has offset {} length {} in a "
                                         "{}-byte arena",
                                         committed_ - 1, released, last.offset, last.length,
                                         view_.params.page_bytes)));
    next_offset_ = end;
  }
  return {};
}

std::unexpected<Error> ChannelConsumer::terminal(std::unexpected<Error> e) {
  sticky_ = e.error();
  return e;
}

std::unexpected<Error> ChannelConsumer::fault_here(ChannelFault fault, const std::string& detail) {
  return raise(fault, epoch_, head_, detail);
}

std::unexpected<Error> ChannelConsumer::reject(ChannelFault fault, const channel::Descriptor& d,
                                               const char* what) {
  return terminal(fault_here(
      fault,
      shm::detail::format("{}: descriptor {{sequence {}, generation {:#x}, cell {}}}; consumer "
                          "expects sequence {} in epoch {} (generation {:#x}, page from sequence "
                          "{}, {} published)",
                          what, d.sequence, d.generation, d.cell, head_, epoch_, generation_,
                          first_sequence_, cached_published_)));
}

std::unexpected<Error> ChannelConsumer::lease_misuse() const {
  assert(!lease_held_ && "receive while a lease is held: release the lease first");
  return fail(Errc::InvalidArgument,
              shm::detail::format("{}: the lease of sequence {} is still held; release it before "
                                  "receiving again",
                                  segment_.path(), head_));
}

Result<void> ChannelConsumer::set_coalescing(const Coalescing& c) {
  constexpr std::chrono::nanoseconds kMaxDelay = std::chrono::seconds(1);
  // The most that can ever wait at once: the ring's capacity, and what fits
  // in P - 1 pages (the producer cannot reuse the page the consumer is in).
  const std::uint64_t most =
      std::min<std::uint64_t>(view_.params.ring_cells, std::uint64_t{view_.params.pages - 1} *
                                                           view_.params.descriptors_per_page);
  if (c.descriptors < 1 || c.descriptors > most)
    return fail(
        Errc::InvalidArgument,
        shm::detail::format("{}: coalescing of {} descriptors is outside [1, {}] (no more can "
                            "wait at once: ring of {}, {} pages of {} descriptors)",
                            segment_.path(), c.descriptors, most, view_.params.ring_cells,
                            view_.params.pages, view_.params.descriptors_per_page));
  if (c.max_delay < std::chrono::nanoseconds::zero() || c.max_delay > kMaxDelay)
    return fail(Errc::InvalidArgument,
                shm::detail::format("{}: coalescing delay of {} ns is outside [0, {}]",
                                    segment_.path(), c.max_delay.count(), kMaxDelay.count()));
  coalescing_ = c;
  held_since_ns_ = 0;
  return {};
}

bool ChannelConsumer::holds(std::uint64_t tail) noexcept {
  const std::uint64_t waiting = tail - head_;
  if (waiting == 0 || waiting >= coalescing_.descriptors) return false;
  // relaxed: a hint; a finished or faulted stream is delivered at once, and
  // on_empty() reads the word again with acquire before acting on it.
  if (control().terminal.word.load(std::memory_order_relaxed) != channel::kTerminalOpen)
    return false;
  const std::uint64_t now = monotonic_ns();
  if (held_since_ns_ == 0) held_since_ns_ = now;
  return now - held_since_ns_ < static_cast<std::uint64_t>(coalescing_.max_delay.count());
}

Result<bool> ChannelConsumer::refresh_tail(Batch batch) {
  // [chan.R'] acquire: pairs with the producer's [chan.R]; descriptors before tail (and
  // the cells, payloads and bindings they reference) are complete.
  const std::uint64_t tail = control().producer.tail.load(std::memory_order_acquire);
  if (tail < seen_tail_ || tail - head_ > view_.params.ring_cells)
    return terminal(
        fault_here(ChannelFault::CorruptState,
                   shm::detail::format("producer tail {} is impossible (head {}, last tail {}, "
                                       "ring of {})",
                                       tail, head_, seen_tail_, view_.params.ring_cells)));
  seen_tail_ = tail;
  if (batch == Batch::MayHold && coalescing_.descriptors > 1 && holds(tail)) return false;
  held_since_ns_ = 0;
  cached_tail_ = tail;
  return tail != head_;
}

Result<void> ChannelConsumer::refresh_published(const channel::Descriptor& d) {
  // [chan.P'] acquire: pairs with the producer's [chan.P]; cells below published are complete.
  const std::uint32_t published =
      page_.header->publication.published.load(std::memory_order_acquire);
  if (published > view_.params.descriptors_per_page || published < cached_published_)
    return reject(ChannelFault::CorruptState, d, "page published count is impossible");
  cached_published_ = published;
  if (d.cell >= published)
    return reject(ChannelFault::DescriptorOutOfBounds, d,
                  "descriptor references an unpublished cell");
  return {};
}

Result<void> ChannelConsumer::cross_seam(const channel::Descriptor& d) {
  const std::uint64_t next = epoch_ + 1;
  if (d.generation != static_cast<std::uint32_t>(next))
    return reject(ChannelFault::GenerationMismatch, d,
                  "generation is neither the current epoch's nor the next one's");
  // Identity of the successor slot before anything else of it is used.
  const page::PageView np = page::PageView::at(slot(next), view_.geometry);
  // relaxed: the rebind wrote these before the producer's [chan.R] for this
  // descriptor, which our [chan.R'] observed; a stale or forged descriptor finds
  // another binding here.
  const std::uint64_t bound = np.header->binding.epoch.load(std::memory_order_relaxed);
  const std::uint32_t generation = np.header->binding.generation.load(std::memory_order_relaxed);
  const std::uint32_t state = np.header->binding.state.load(std::memory_order_relaxed);
  if (generation != d.generation || bound != next || state == page::kUnbound)
    return terminal(fault_here(
        ChannelFault::GenerationMismatch,
        shm::detail::format(
            "descriptor {{sequence {}, generation {:#x}}} opens epoch {}, but slot {} is "
            "bound to epoch {} (generation {:#x}, state {})",
            d.sequence, d.generation, next, next & slot_mask_, bound, generation, state)));
  // [chan.S'] acquire: pairs with the producer's seal [chan.S]: the page's count is final.
  if (page_.header->binding.state.load(std::memory_order_acquire) != page::kSealed)
    return terminal(
        fault_here(ChannelFault::CorruptState,
                   shm::detail::format("epoch {} began but the page of epoch {} is not sealed",
                                       next, epoch_)));
  // [chan.P'] acquire: pairs with [chan.P]; after [chan.S'] this is the sealed page's count.
  const std::uint32_t published =
      page_.header->publication.published.load(std::memory_order_acquire);
  if (committed_ != published)
    return terminal(fault_here(
        ChannelFault::CountShortfall,
        shm::detail::format(
            "at the seam to epoch {}: epoch {} committed {} payloads but its sealed page "
            "published {}",
            next, epoch_, committed_, published)));
  const std::uint64_t first = np.header->binding.first_sequence.load(std::memory_order_relaxed);
  if (first != first_sequence_ + published)
    return terminal(fault_here(
        ChannelFault::SequenceGap,
        shm::detail::format("page of epoch {} starts at sequence {}, but epoch {} ended at {}",
                            next, first, epoch_, first_sequence_ + published)));
  // [chan.E] every lease of this epoch was given back (receiving with a lease
  // held is refused), so nothing reads the page any more; pairs with the
  // producer's [chan.A] before it rebinds the slot. seq_cst with the flag load
  // below: a producer parked on the quota sees [chan.E] or we see its flag ([chan.D2]).
  control().release.released_epoch.store(next, std::memory_order_seq_cst);
  if (control().waiters.producer_parked.load(std::memory_order_seq_cst) != 0) wake_producer();
  bind_epoch(next);
  return {};
}

Result<ChannelConsumer::Wait> ChannelConsumer::clean_end() {
  auto more = refresh_tail();  // descriptors published just before CLEAN
  if (!more) return std::unexpected(std::move(more.error()));
  if (*more) return Wait::Ready;
  // relaxed: ordered by the acquire of CLEAN [chan.T'].
  const std::uint64_t active = control().producer.active_epoch.load(std::memory_order_relaxed);
  if (active < epoch_ || active - epoch_ >= view_.params.pages)
    return terminal(
        fault_here(ChannelFault::CorruptState,
                   shm::detail::format("producer finished at epoch {}, consumer is at {} ({} "
                                       "pages)",
                                       active, epoch_, view_.params.pages)));
  // acquire: pairs with [chan.S] (finish seals) and [chan.P].
  if (page_.header->binding.state.load(std::memory_order_acquire) != page::kSealed)
    return terminal(
        fault_here(ChannelFault::CorruptState,
                   shm::detail::format("channel is CLEAN but the page of epoch {} is not "
                                       "sealed",
                                       epoch_)));
  const std::uint32_t published =
      page_.header->publication.published.load(std::memory_order_acquire);
  if (committed_ != published)
    return terminal(
        fault_here(ChannelFault::CountShortfall,
                   shm::detail::format("end of stream: epoch {} committed {} payloads but its "
                                       "page published {}",
                                       epoch_, committed_, published)));
  // Pages rotated to but never described in the ring must be empty.
  for (std::uint64_t e = epoch_ + 1; e <= active; ++e) {
    const page::SlotHeader* h = page::PageView::at(slot(e), view_.geometry).header;
    const std::uint32_t n = h->publication.published.load(std::memory_order_acquire);  // [chan.P']
    if (h->binding.epoch.load(std::memory_order_relaxed) != e || n != 0)
      return terminal(
          fault_here(ChannelFault::CountShortfall,
                     shm::detail::format("end of stream: epoch {} published {} payloads that "
                                         "never reached the ring",
                                         e, n)));
  }
  // [chan.E] release: the final epochs are released (end of stream).
  control().release.released_epoch.store(active + 1, std::memory_order_release);
  ended_ = true;
  return Wait::End;
}

std::unexpected<Error> ChannelConsumer::producer_died() {
  const Liveness live = segment_.liveness(channel::kProducerRole.id);
  // A sidecar (or shmctl reclaim) that found the producer dead marked the
  // channel and freed the slot: the slot reads Free, but the producer died.
  const bool died = live == Liveness::Dead || fault() == ChannelFault::ProducerDied;
  // relaxed: the producer is gone; its stores reached us through the kernel
  // lock probe (or the sidecar's FAULTED word, [chan.T']), like its last tail.
  std::uint64_t active = control().producer.active_epoch.load(std::memory_order_relaxed);
  if (active < epoch_ || active - epoch_ >= view_.params.pages) active = epoch_;  // not trusted
  // Payloads published to pages [chan.P] but never described [chan.R]: in our
  // page beyond what we committed, and in pages rotated to but never described.
  std::uint64_t orphans = 0;
  for (std::uint64_t e = epoch_; e <= active; ++e) {
    const page::SlotHeader* h = page::PageView::at(slot(e), view_.geometry).header;
    // acquire: pairs with [chan.P].
    const std::uint32_t published = h->publication.published.load(std::memory_order_acquire);
    const std::uint64_t done = e == epoch_ ? committed_ : 0;
    if (h->binding.epoch.load(std::memory_order_relaxed) == e && published > done)
      orphans += published - done;
  }
  std::string detail = shm::detail::format(
      "the producer {} without finish(); all {} payloads it described were delivered",
      died ? "died" : "detached", head_);
  if (orphans != 0)
    detail += shm::detail::format(
        "; {} payload(s) published to the page of epoch {} never reached the ring", orphans,
        epoch_);
  auto e = raise(ChannelFault::ProducerDied, epoch_, head_, detail);
  // [chan.E] release: the faulted end of the stream releases the final epoch
  // and every epoch the dead producer rotated to after it (nothing will read
  // or write them again), as the clean end does.
  control().release.released_epoch.store(active + 1, std::memory_order_release);
  return terminal(std::move(e));
}

Result<ChannelConsumer::Wait> ChannelConsumer::on_empty(bool probe_producer) {
  for (;;) {
    // [chan.T'] acquire: pairs with [chan.T] (finish's CLEAN, raise's FAULTED); every
    // descriptor published before it is then visible to refresh_tail().
    const std::uint32_t word = control().terminal.word.load(std::memory_order_acquire);
    switch (channel::state_of(word)) {
      case ChannelState::Open: {
        if (!probe_producer) return Wait::Empty;
        const Liveness live = segment_.liveness(channel::kProducerRole.id);
        // relaxed: a counter; only "ever attached" matters.
        const bool attached_before =
            segment_.header().slots[channel::kProducerRole.id].generation.load(
                std::memory_order_relaxed) != 0;
        if (live == Liveness::Alive || (live == Liveness::Free && !attached_before))
          return Wait::Empty;
        // The producer is gone: its process left the CPU (draining its
        // stores) before the kernel released its lock, and our probe took
        // the kernel's lock after that, so refresh_tail() reads its last tail.
        auto more = refresh_tail();
        if (!more) return std::unexpected(std::move(more.error()));
        if (*more) return Wait::Ready;
        // It may have finished (or faulted) just before it left.
        if (control().terminal.word.load(std::memory_order_acquire) != channel::kTerminalOpen)
          continue;
        return producer_died();
      }
      case ChannelState::Clean:
        return clean_end();
      case ChannelState::Faulted: {
        if (fault() == ChannelFault::ProducerDied) {  // marked by the sidecar: drain first
          auto more = refresh_tail();
          if (!more) return std::unexpected(std::move(more.error()));
          if (*more) return Wait::Ready;
          return producer_died();
        }
        return terminal(already_faulted());
      }
      case ChannelState::Corrupt:
        return terminal(
            fault_here(ChannelFault::CorruptTerminal,
                       shm::detail::format("terminal word is {:#010x}, expected OPEN/CLEAN/"
                                           "FAULTED",
                                           word)));
    }
  }
}

Result<ChannelConsumer::Wait> ChannelConsumer::ready(bool probe_producer, Batch batch) {
  if (ended_) return Wait::End;
  if (head_ != cached_tail_) return Wait::Ready;
  auto more = refresh_tail(batch);
  if (!more) return std::unexpected(std::move(more.error()));
  if (*more) return Wait::Ready;
  return on_empty(probe_producer);
}

Result<ChannelConsumer::Wait> ChannelConsumer::ready_slow() {
  auto w = ready(false, Batch::MayHold);
  // Looks empty: the producer's liveness is probed at most every kProbeInterval.
  if (w && *w == Wait::Empty && probe_due()) w = ready(true, Batch::MayHold);
  return w;
}

bool ChannelConsumer::probe_due() noexcept {
  const std::uint64_t now = monotonic_ns();
  constexpr auto interval =
      static_cast<std::uint64_t>(std::chrono::nanoseconds(kProbeInterval).count());
  if (now - last_probe_ns_ < interval) return false;
  last_probe_ns_ = now;
  return true;
}

std::string ChannelConsumer::too_small_message(std::size_t length, std::size_t room) const {
  return shm::detail::format(
      "{}: payload of {} bytes (sequence {}) does not fit the {}-byte buffer", segment_.path(),
      length, head_, room);
}

template <class T, class Take>
Result<T> ChannelConsumer::receive_with(std::chrono::nanoseconds timeout, Take take) {
  const detail::EndpointGuard::Scope scope(guard_, "a channel endpoint");
  if (auto e = refuse()) return std::unexpected(std::move(*e));
  const auto end_or_empty = [](Wait w) {
    return T{w == Wait::End ? ReceiveStatus::End : ReceiveStatus::Empty};
  };
  const auto deadline = ::shm::detail::deadline_after(timeout);
  const auto done = [](const Result<Wait>& w) { return !w || *w != Wait::Empty; };
  const auto outcome = [&](Result<Wait> w) -> Result<T> {
    if (!w) return std::unexpected(std::move(w.error()));
    if (*w == Wait::Ready) return take();
    return end_or_empty(*w);
  };
  if (auto w = detail::spin(
          channel::internal::kSpins, [&] { return ready(false, Batch::MayHold); }, done))
    return outcome(std::move(*w));
  auto& sig = control().waiters;
  Result<Wait> w = Wait::Empty;
  const bool over = detail::park(
      sig.data_signal, deadline,
      [&] {
        // [chan.D1'] seq_cst store of the flag, then seq_cst loads of tail and the
        // terminal word: pairs with [chan.D1] in publish() and with the terminal
        // stores (finish, raise). Either we see their store here, or they see
        // our flag and wake us; ready() reads these words again afterwards,
        // and coherence keeps those reads at least this new.
        sig.consumer_parked.store(1, std::memory_order_seq_cst);
        (void)control().producer.tail.load(std::memory_order_seq_cst);
        (void)control().terminal.word.load(std::memory_order_seq_cst);
        // Looks empty: the only place a blocking receive pays the liveness
        // probe. Flush: a coalesced batch is taken rather than slept on
        // (nothing would wake us).
        w = ready(true, Batch::Flush);
        return done(w) ? detail::ParkRound::Done : detail::ParkRound::Sleep;
      },
      // A dead producer never wakes us: sleep in slices and probe again.
      [](std::uint64_t left_ns) {
        return std::min<std::uint64_t>(left_ns, std::chrono::nanoseconds(kLivenessSlice).count());
      },
      [&] { attachment_.heartbeat(); });
  sig.consumer_parked.store(0, std::memory_order_relaxed);  // a hint for the producer
  if (!over) return end_or_empty(Wait::Empty);
  return outcome(std::move(w));
}

Result<Received> ChannelConsumer::receive(std::chrono::nanoseconds timeout) {
  return receive_with<Received>(timeout, [this] { return next(); });
}

Result<Copied> ChannelConsumer::receive_into(std::span<std::byte> out,
                                             std::chrono::nanoseconds timeout) {
  return receive_with<Copied>(timeout, [this, out] { return next_into(out); });
}

}  // namespace shm
