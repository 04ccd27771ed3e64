// Fuzz target: the consumers' read paths over a mapping of arbitrary bytes.
// The header's kind id picks the consumer: SpscRing (peek, release), Channel
// (receive, checksum, give back), MpmcRing (pop; the rings of a
// PriorityFanout are MPMC rings), the Ledger's view (snapshot and verify) or
// a Topic (a subscriber attaches, receives, holds and drops samples; then a
// publisher takes the role over, loans and publishes).
// Each attaches as a consumer would, taking over whatever the bytes say a
// dead predecessor left, and reads a bounded number of records. Any outcome is
// fine except a crash, a hang or a sanitizer report.
#include "segment_file.hpp"

#include "shm/channel/consumer.hpp"
#include "shm/ledger/ledger.hpp"
#include "shm/mpmc/mpmc_ring.hpp"
#include "shm/segment/kind_ids.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/topic/topic.hpp"

#include <array>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

namespace {

constexpr int kMaxReads = 64;

// Reads every byte of a record, so ASan sees any out-of-bounds span.
std::uint8_t touch(std::span<const std::byte> bytes) {
  std::uint8_t sum = 0;
  for (std::byte b : bytes) sum = static_cast<std::uint8_t>(sum + std::to_integer<std::uint8_t>(b));
  return sum;
}

void read_spsc(const shm::OpenOptions& options) {
  auto consumer = shm::RingConsumer::open(shm::fuzz::kSegmentName, {}, options);
  if (!consumer) return;
  for (int i = 0; i < kMaxReads; ++i) {
    auto record = consumer->try_peek();
    if (!record || !*record) break;
    (void)touch(**record);
    if (i % 4 == 3) consumer->release();
  }
  consumer->release();
}

void read_channel(const shm::OpenOptions& options) {
  auto consumer = shm::ChannelConsumer::open(shm::fuzz::kSegmentName, {}, options);
  if (!consumer) return;
  for (int i = 0; i < kMaxReads; ++i) {
    auto received = consumer->try_receive();
    if (!received || received->status != shm::ReceiveStatus::Received) break;
    (void)touch(received->lease.bytes());
  }
  std::array<std::byte, 4096> out{};
  for (int i = 0; i < kMaxReads; ++i) {
    auto copied = consumer->try_receive_into(out);
    if (!copied || copied->status != shm::ReceiveStatus::Received) break;
  }
}

void read_mpmc(const shm::OpenOptions& options) {
  auto ring = shm::MpmcConsumer::open(shm::fuzz::kSegmentName, {}, options);
  if (!ring) return;
  std::array<std::byte, 4096> out{};
  for (int i = 0; i < kMaxReads; ++i) {
    auto popped = ring->try_pop(out);
    if (!popped || !*popped) break;
  }
}

void read_ledger(const shm::OpenOptions& options) {
  auto segment = shm::Segment::open_any(shm::fuzz::kSegmentName, options);
  if (!segment) return;
  auto view = shm::ledger::make_view(*segment);
  if (!view) return;
  (void)shm::ledger::read_snapshot(*view);
  (void)shm::ledger::verify_unlocked(*view, segment->slots());
}

// Attaching repairs what the bytes say dead holders left (their samples,
// their loans); receive walks the queue and the chunk pool the bytes describe.
void read_topic(const shm::OpenOptions& options) {
  {
    auto subscriber = shm::TopicSubscriber::open(shm::fuzz::kSegmentName,
                                                 shm::TopicOverflow::DropOldest, {}, options);
    if (!subscriber) return;
    std::vector<shm::Sample> held;
    for (int i = 0; i < kMaxReads; ++i) {
      auto sample = subscriber->try_receive();
      if (!sample || !*sample) break;
      (void)touch((*sample)->bytes());
      if (i % 2 == 0) held.push_back(std::move(**sample));  // the others drop at once
    }
    (void)subscriber->snapshot();
  }
  auto publisher = shm::TopicPublisher::open(shm::fuzz::kSegmentName, {}, options);
  if (!publisher) return;
  auto loan = publisher->try_loan(1);
  if (!loan || !*loan) return;
  (*loan)->bytes()[0] = std::byte{0x5a};
  (void)publisher->try_publish(std::move(**loan));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace shm;
  if (!fuzz::write_segment({data, size})) return 0;
  KindId kind = 0;
  {
    auto segment = Segment::open_any(fuzz::kSegmentName, fuzz::open_options(true));
    if (!segment) return 0;
    kind = segment->header().kind;
  }
  switch (kind) {
    case kSpscRingKind:
      read_spsc(fuzz::open_options(false));
      break;
    case kChannelKind:
      read_channel(fuzz::open_options(false));
      break;
    case kMpmcRingKind:
      read_mpmc(fuzz::open_options(false));
      break;
    case kLedgerKind:
      read_ledger(fuzz::open_options(true));
      break;
    case kTopicKind:
      read_topic(fuzz::open_options(false));
      break;
    default:
      break;
  }
  return 0;
}
