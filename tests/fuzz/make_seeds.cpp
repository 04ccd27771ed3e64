// Writes the fuzz seed corpus: real segments of every kind, small, in the
// states a consumer meets (empty, holding records, a record peeked and not
// released, a dead consumer's attachment), copied into the directory given.
//   build/.../tests/fuzz/fuzz_make_seeds tests/fuzz/corpus
// Rerun it when a layout changes (a seed whose fingerprint no longer matches
// only exercises the header checks), and commit the result.
#include "shm/bridge/state_layout.hpp"
#include "shm/channel/consumer.hpp"
#include "shm/channel/producer.hpp"
#include "shm/egress/egress.hpp"
#include "shm/fanout/priority_fanout.hpp"
#include "shm/ledger/ledger.hpp"
#include "shm/mpmc/mpmc_ring.hpp"
#include "shm/relay/relay.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"
#include "shm/topic/topic.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

namespace {

namespace fs = std::filesystem;

std::span<const std::byte> text(std::string_view s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

[[noreturn]] void die(const std::string& what, const shm::Error& error) {
  std::fprintf(stderr, "make_seeds: %s: %s\n", what.c_str(), error.what().c_str());
  std::exit(1);
}

template <typename T>
T must(shm::Result<T> r, const std::string& what) {
  if (!r) die(what, r.error());
  return std::move(*r);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_seeds OUT_DIR\n");
    return 2;
  }
  const fs::path out = argv[1];
  char pattern[] = "/dev/shm/libshm-seeds-XXXXXX";
  if (::mkdtemp(pattern) == nullptr) return 1;
  const std::string root = pattern;
  const shm::CreateOptions create{.root = root};
  const shm::OpenOptions open{.root = root};

  // The handles stay open while the files are copied: in the copies every
  // attachment belongs to a process that is gone, as a crash leaves them.
  // SpscRing: one empty, one with records and a peek outstanding.
  auto ring_empty =
      must(shm::RingProducer::create("spsc-empty", {.capacity_bytes = 256}, create), "ring");
  auto ring_p =
      must(shm::RingProducer::create("spsc-records", {.capacity_bytes = 256}, create), "ring");
  auto ring_c = must(shm::RingConsumer::open("spsc-records", {}, open), "ring consumer");
  for (auto s : {"alpha", "bravo-bravo", "charlie"}) (void)must(ring_p.try_push(text(s)), "push");
  (void)must(ring_c.try_peek(), "peek");
  // One that has lapped several times: the slot after its records holds the
  // header of the previous lap.
  auto wrap_p =
      must(shm::RingProducer::create("spsc-wrapped", {.capacity_bytes = 256}, create), "ring");
  auto wrap_c = must(shm::RingConsumer::open("spsc-wrapped", {}, open), "ring consumer");
  for (int i = 0; i < 40; ++i) {
    (void)must(wrap_p.try_push(text(i % 3 == 0 ? "delta-delta-delta" : "echo")), "push");
    if (i < 37) {
      (void)must(wrap_c.try_peek(), "peek");
      wrap_c.release();
    }
  }
  // Channel: records sent, one received and held.
  auto params = must(shm::ChannelParams::for_payload(32, 4), "channel params");
  auto chan_p = must(shm::ChannelProducer::create("channel-records", params, create), "channel");
  auto chan_c = must(shm::ChannelConsumer::open("channel-records", {}, open), "channel consumer");
  for (auto s : {"one", "two-two", "three"}) (void)must(chan_p.try_send(text(s)), "send");
  auto held = must(chan_c.try_receive(), "receive");
  auto channel_empty =
      must(shm::ChannelProducer::create("channel-empty", params, create), "channel");
  // MpmcRing and a PriorityFanout (a bitmap segment and one MPMC ring per priority).
  auto mpmc = must(
      shm::MpmcRing::create("mpmc-records", {.ring_cells = 8, .slot_bytes = 16}, create), "mpmc");
  for (auto s : {"x", "yy", "zzz"}) (void)must(mpmc.try_push(text(s)), "mpmc push");
  auto fanout = must(shm::PriorityFanout::create(
                         "fanout", {.priorities = 2, .ring_cells = 4, .slot_bytes = 16}, create),
                     "fanout");
  (void)must(fanout.try_submit(1, text("high")), "submit");
  // Ledger: a category, a bucket, a pool and a reservation.
  shm::LedgerConfig config{.params = {.global_limit = 1 << 20,
                                      .max_tickets = 8,
                                      .max_categories = 2,
                                      .max_pools = 2,
                                      .max_buckets = 1},
                           .categories = {{.label = "data", .limit = 1 << 19}},
                           .buckets = {{.label = "io", .rate_per_sec = 100, .burst = 10}}};
  auto ledger = must(shm::Ledger::create("ledger", config, create), "ledger");
  auto pool =
      must(ledger.open_pool({.label = "p", .accounts = {{.label = "a", .limit = 4096}}}), "pool");
  (void)must(ledger.reserve(pool, shm::CategoryId{.index = 0}, 100), "reserve");
  // RelayCell: a keyed sum with merged entries, one taken by the reader and
  // not committed; a raw_fifo relay with ops queued.
  shm::RelayConfig sum_config{.policy = shm::policy::kSum, .value_bytes = 8, .max_entries = 16};
  sum_config.backpressure = {shm::Dimension::Count, 12, 4, shm::Overflow::Conflate};
  auto relay_w = must(shm::RelayWriter::create("relay-sum", sum_config, create), "relay");
  auto relay_r = must(shm::RelayReader::open("relay-sum", open), "relay reader");
  for (std::uint64_t key : {1, 2, 1, 3}) {
    const std::uint64_t one = 1;
    (void)must(relay_w.write(key, std::as_bytes(std::span(&one, 1)), shm::forever), "relay write");
  }
  (void)must(relay_r.take(1), "relay take");
  shm::RelayConfig fifo_config{
      .policy = shm::policy::kRawFifo, .value_bytes = 16, .max_entries = 8};
  fifo_config.backpressure = {shm::Dimension::Count, 6, 2, shm::Overflow::Block};
  auto fifo_w = must(shm::RelayWriter::create("relay-fifo", fifo_config, create), "relay");
  for (auto s : {"op-1", "op-22", "op-333"})
    (void)must(fifo_w.write(text(s), shm::forever), "relay fifo write");
  // Egress: payloads enqueued, one claimed by a transport, one acknowledged,
  // one failed (parked for its backoff).
  auto egress =
      must(shm::Egress::create("egress", {.max_payloads = 8, .slot_bytes = 32, .inflight_limit = 4},
                               create),
           "egress");
  for (auto s : {"m1", "m22", "m333", "m4444"}) (void)must(egress.try_enqueue(text(s)), "enqueue");
  auto transport = must(shm::EgressTransport::open("egress", open), "egress transport");
  std::vector<std::byte> payload;
  for (int i = 0; i < 3; ++i) (void)must(transport.try_claim(payload), "claim");
  (void)must(transport.ack(1), "ack");
  (void)must(transport.fail(2), "fail");
  // Bridge states: an export route with an intent open, an import route that
  // has applied messages and is in the middle of the next one.
  const shm::bridge::StateParams export_params{
      .route = static_cast<std::uint32_t>(shm::bridge::Route::Export)};
  auto export_state =
      must(shm::Segment::create("bridge-export", shm::bridge::state_spec(export_params), create,
                                shm::bridge::init_state),
           "bridge export state");
  auto& ex = *reinterpret_cast<shm::bridge::StateData*>(export_state.data().data());
  ex.export_intent_head = 192;
  ex.export_intent_seq = 3;
  ex.moved = 3;
  ex.acknowledged = 2;
  const shm::bridge::StateParams import_params{
      .route = static_cast<std::uint32_t>(shm::bridge::Route::Import)};
  auto import_state =
      must(shm::Segment::create("bridge-import", shm::bridge::state_spec(import_params), create,
                                shm::bridge::init_state),
           "bridge import state");
  auto& im = *reinterpret_cast<shm::bridge::StateData*>(import_state.data().data());
  im.applied_stream_seq = 5;
  im.applied_src_incarnation = 0x1234;
  im.applied_src_seq = 4;
  im.intent_ring_tail = 320;
  im.intent_src_incarnation = 0x1234;
  im.intent_src_seq = 5;
  im.intent_stream_seq = 6;
  im.moved = 5;
  im.duplicates = 1;
  // Topic: samples published to a DropOldest subscriber that missed some,
  // one received and held, one in history.
  auto topic_pub =
      must(shm::TopicPublisher::create(
               "topic-samples",
               {.max_sample_bytes = 16, .chunks = 4, .queue_depth = 2, .history = 1, .max_held = 1},
               create),
           "topic");
  auto topic_sub =
      must(shm::TopicSubscriber::open("topic-samples", shm::TopicOverflow::DropOldest, {}, open),
           "topic subscriber");
  for (auto s : {"s0", "s11", "s222"}) {
    auto loan = must(topic_pub.try_loan(std::string_view(s).size()), "topic loan");
    if (!loan) return 1;
    std::memcpy(loan->bytes().data(), s, loan->size());
    (void)must(topic_pub.try_publish(std::move(*loan)), "topic publish");
  }
  auto topic_held = must(topic_sub.try_receive(), "topic receive");

  std::error_code ec;
  fs::create_directories(out, ec);
  int copied = 0;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(".libshm-")) continue;
    fs::copy_file(entry.path(), out / name, fs::copy_options::overwrite_existing, ec);
    if (ec) {
      std::fprintf(stderr, "make_seeds: copy %s: %s\n", name.c_str(), ec.message().c_str());
      return 1;
    }
    ++copied;
  }
  fs::remove_all(root, ec);
  std::printf("make_seeds: %d seeds in %s\n", copied, out.c_str());
  return copied > 0 ? 0 : 1;
}
