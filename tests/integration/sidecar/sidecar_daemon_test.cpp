// The shm-sidecar binary as a user runs it: HTTP endpoints scraped with a real
// TCP client on loopback, --once output, the single-instance lock, signals.
#include "common/loopback_http.hpp"
#include "common/promtool.hpp"
#include "common/spill_config.hpp"
#include "common/subprocess.hpp"
#include "common/temp_dir.hpp"
#include "common/temp_root.hpp"

#include "shm/channel/layout.hpp"
#include "shm/egress/egress.hpp"
#include "shm/fanout/priority_fanout.hpp"
#include "shm/ledger/ledger.hpp"
#include "shm/mpmc/layout.hpp"
#include "shm/relay/relay.hpp"
#include "shm/spsc/producer.hpp"
#include "shm/topic/topic.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

namespace shm {
namespace {

using namespace std::chrono_literals;
using test::Subprocess;

// Runs shm-sidecar with stderr merged into the captured stdout.
Subprocess sidecar(const std::string& root, const std::vector<std::string>& args) {
  std::string cmd = fmt::format("exec '{}' --root '{}'", test::bin_path("shm-sidecar"), root);
  for (const auto& a : args) cmd += fmt::format(" '{}'", a);
  cmd += " 2>&1";
  return Subprocess({"/bin/sh", "-c", cmd});
}

// Starts a daemon on an ephemeral port and returns the port.
std::uint16_t start(Subprocess& p) {
  EXPECT_TRUE(p.wait_for_line("ready", 10s)) << p.output();
  const std::string marker = "listening on 127.0.0.1:";
  const auto at = p.output().find(marker);
  if (at == std::string::npos) return 0;
  return static_cast<std::uint16_t>(std::stoi(p.output().substr(at + marker.size())));
}

using test::HttpReply;

std::optional<HttpReply> http(std::uint16_t port, const std::string& request) {
  return test::http_exchange(port, request);
}

std::optional<HttpReply> get(std::uint16_t port, const std::string& path) {
  return test::http_get(port, path);
}

// The Prometheus text format: samples keyed by "name{labels as written}", and
// the declared type of every family.
struct Exposition {
  std::map<std::string, double> samples;
  std::map<std::string, std::string> types;
  std::vector<std::string> errors;
};

Exposition parse_exposition(const std::string& text) {
  Exposition e;
  std::istringstream in(text);
  std::string line;
  std::string family;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.starts_with("# TYPE ")) {
      std::istringstream ls(line.substr(7));
      std::string name, type;
      ls >> name >> type;
      if (e.types.contains(name)) e.errors.push_back("family declared twice: " + name);
      e.types[name] = type;
      family = name;
      continue;
    }
    if (line.starts_with("#")) continue;
    const auto sp = line.rfind(' ');
    const std::string key = line.substr(0, sp);
    const std::string name = key.substr(0, key.find('{'));
    if (name != family) e.errors.push_back("sample outside its family block: " + line);
    try {
      e.samples[key] = std::stod(line.substr(sp + 1));
    } catch (...) {
      e.errors.push_back("bad value: " + line);
    }
  }
  return e;
}

// Scrapes /metrics until `sample` satisfies `done` or a generous deadline
// passes; returns the last value read (nullopt: never scraped or absent) and
// the last body, for the failure message.
struct Polled {
  std::optional<double> value;
  std::string body;
};
template <class Done>
Polled poll_metric(std::uint16_t port, const std::string& sample, Done done) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  Polled last;
  for (;;) {
    if (auto reply = get(port, "/metrics")) {
      last.body = reply->body;
      const Exposition e = parse_exposition(reply->body);
      const auto it = e.samples.find(sample);
      last.value = it == e.samples.end() ? std::nullopt : std::optional<double>(it->second);
      if (last.value && done(*last.value)) return last;
    }
    if (std::chrono::steady_clock::now() >= deadline) return last;
    std::this_thread::sleep_for(10ms);  // a polling pace, not a synchronisation
  }
}

// The daemon's log line with event=EVENT ("" when absent).
std::string log_line(const std::string& output, std::string_view event) {
  std::istringstream in(output);
  std::string line;
  const std::string tag = fmt::format("event={}", event);
  while (std::getline(in, line)) {
    const std::size_t at = line.find(tag);
    const std::size_t end = at + tag.size();
    if (at != std::string::npos && (end == line.size() || line[end] == ' ')) return line;
  }
  return {};
}

class SidecarDaemon : public ::testing::Test {
 protected:
  test::TempRoot root;
};

TEST_F(SidecarDaemon, MetricsEndpointReportsRingDepthToARealTcpClient) {
  auto p = RingProducer::create("orders", RingParams{4096});
  ASSERT_TRUE(p) << p.error().what();
  const std::vector<std::byte> rec(24, std::byte{7});
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(p->try_push(rec).value_or(false));

  Subprocess d = sidecar(root.path(), {"--listen", "127.0.0.1:0", "--interval", "50"});
  const std::uint16_t port = start(d);
  ASSERT_NE(port, 0) << d.output();
  auto reply = get(port, "/metrics");
  ASSERT_TRUE(reply) << d.output();
  EXPECT_EQ(reply->status, 200);
  EXPECT_NE(reply->head.find("Content-Type: text/plain; version=0.0.4"), std::string::npos)
      << reply->head;

  const Exposition e = parse_exposition(reply->body);
  EXPECT_TRUE(e.errors.empty()) << e.errors.front();
  EXPECT_EQ(e.types.at("libshm_spsc_ring_depth_records"), "gauge");
  EXPECT_EQ(e.samples.at("libshm_spsc_ring_depth_records{segment=\"orders\"}"), 5.0) << reply->body;
  EXPECT_EQ(e.types.at("libshm_spsc_ring_records_pushed_total"), "counter");
  EXPECT_EQ(e.samples.at("libshm_spsc_ring_records_pushed_total{segment=\"orders\"}"), 5.0);
  EXPECT_EQ(e.samples.at("libshm_segment_up{segment=\"orders\",kind=\"spsc_ring\"}"), 1.0);
  EXPECT_EQ(e.samples.at("libshm_segment_attachers{segment=\"orders\",state=\"alive\"}"), 1.0);
  EXPECT_EQ(e.samples.at("libshm_segment_attachers{segment=\"orders\",state=\"dead\"}"), 0.0);
  EXPECT_GT(e.samples.at("libshm_segment_size_bytes{segment=\"orders\"}"), 4096.0);
  EXPECT_GE(e.samples.at("libshm_sidecar_cycles_total"), 1.0);
  EXPECT_NE(reply->body.find("# HELP libshm_spsc_ring_depth_records "), std::string::npos);

  // The value follows the ring on later scrapes (once a later duty cycle ran).
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(p->try_push(rec).value_or(false));
  const Polled depth = poll_metric(port, "libshm_spsc_ring_depth_records{segment=\"orders\"}",
                                   [](double v) { return v == 7.0; });
  EXPECT_EQ(depth.value, 7.0) << "the depth never followed the ring:\n" << depth.body;

  d.kill(SIGTERM);
  EXPECT_EQ(d.wait(30s), 0) << d.output();
}

// A relay on the age dimension, scraped by the real daemon: the age gauge
// follows real time, the drop and the full flag show, and a drain moves them
// back on later scrapes.
TEST_F(SidecarDaemon, MetricsEndpointFollowsARelaysAgeFlagsAndCounters) {
  RelayConfig cfg;
  cfg.policy = policy::kMax;
  cfg.max_entries = 16;
  cfg.backpressure = {Dimension::Age, 5, 0, Overflow::DropNewest};  // milliseconds
  auto w = RelayWriter::create("ages", cfg);
  ASSERT_TRUE(w) << w.error().what();
  auto r = RelayReader::open("ages");
  ASSERT_TRUE(r) << r.error().what();
  ASSERT_EQ(w->write(1, u64_value(3), 0ns)->status, WriteStatus::Appended);

  Subprocess d = sidecar(root.path(), {"--listen", "127.0.0.1:0", "--interval", "20"});
  const std::uint16_t port = start(d);
  ASSERT_NE(port, 0) << d.output();
  const Polled age = poll_metric(port, "libshm_relay_head_oldest_age_seconds{segment=\"ages\"}",
                                 [](double v) { return v >= 0.006; });
  ASSERT_GE(age.value.value_or(0), 0.006) << "the age never grew past high water:\n" << age.body;
  // The oldest op is older than high water: a new key is dropped (counted).
  EXPECT_EQ(w->write(2, u64_value(3), 0ns)->status, WriteStatus::Dropped);
  const Polled dropped = poll_metric(port, "libshm_relay_counters_dropped_total{segment=\"ages\"}",
                                     [](double v) { return v == 1.0; });
  EXPECT_EQ(dropped.value, 1.0) << dropped.body;
  const Exposition e = parse_exposition(dropped.body);
  EXPECT_TRUE(e.errors.empty()) << e.errors.front();
  EXPECT_EQ(e.types.at("libshm_relay_head_depth"), "gauge");
  EXPECT_EQ(e.types.at("libshm_relay_counters_dropped_total"), "counter");
  EXPECT_EQ(e.samples.at("libshm_relay_flags_is_full{segment=\"ages\"}"), 1.0) << dropped.body;
  EXPECT_EQ(e.samples.at("libshm_relay_head_depth{segment=\"ages\"}"), 1.0) << dropped.body;
  EXPECT_EQ(e.samples.at("libshm_relay_backpressure_high_water{segment=\"ages\"}"), 5.0);
  EXPECT_EQ(e.samples.at("libshm_segment_up{segment=\"ages\",kind=\"relay\"}"), 1.0);
  EXPECT_EQ(e.samples.at("libshm_segment_attachers{segment=\"ages\",state=\"alive\"}"), 2.0);

  // The reader drains: nothing pending, age 0 is at low water, the flag clears.
  std::size_t got = 0;
  ASSERT_TRUE(r->drain(16, [&](const RelayEntry&) { ++got; }));
  EXPECT_EQ(got, 1u);
  // The sidecar reads the relay without its lock, so one scrape may show the
  // flag cleared before the drained counter moved: each is polled.
  const Polled drained = poll_metric(port, "libshm_relay_counters_drained_total{segment=\"ages\"}",
                                     [](double v) { return v == 1.0; });
  EXPECT_EQ(drained.value, 1.0) << drained.body;
  const Polled cleared = poll_metric(port, "libshm_relay_flags_is_full{segment=\"ages\"}",
                                     [](double v) { return v == 0.0; });
  EXPECT_EQ(cleared.value, 0.0) << cleared.body;
  const Exposition after = parse_exposition(cleared.body);
  EXPECT_EQ(after.samples.at("libshm_relay_head_depth{segment=\"ages\"}"), 0.0) << cleared.body;

  d.kill(SIGTERM);
  EXPECT_EQ(d.wait(30s), 0) << d.output();
}

// An egress scraped by the real daemon: the projections (pending, in flight,
// acknowledgement watermark, generation) and the operation counters, followed
// across an acknowledgement and a replacement transport.
TEST_F(SidecarDaemon, MetricsEndpointFollowsAnEgressWindowAndGeneration) {
  auto producer = Egress::create(
      "uplink", EgressParams{.max_payloads = 16, .slot_bytes = 32, .inflight_limit = 8});
  ASSERT_TRUE(producer) << producer.error().what();
  const std::vector<std::byte> payload(20, std::byte{5});
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(producer->try_enqueue(payload)->status, egress::EnqueueStatus::Enqueued);
  std::optional<EgressTransport> t;
  {
    auto attached = EgressTransport::open("uplink");
    ASSERT_TRUE(attached) << attached.error().what();
    t.emplace(std::move(*attached));
  }
  std::vector<std::byte> buf;
  ASSERT_EQ(t->try_claim(buf)->status, egress::ClaimStatus::Claimed);
  ASSERT_EQ(t->try_claim(buf)->status, egress::ClaimStatus::Claimed);

  Subprocess d = sidecar(root.path(), {"--listen", "127.0.0.1:0", "--interval", "20"});
  const std::uint16_t port = start(d);
  ASSERT_NE(port, 0) << d.output();
  auto reply = get(port, "/metrics");
  ASSERT_TRUE(reply) << d.output();
  const Exposition e = parse_exposition(reply->body);
  EXPECT_TRUE(e.errors.empty()) << e.errors.front();
  const auto sample = [](const Exposition& x, const std::string& name) {
    const auto it = x.samples.find(name + "{segment=\"uplink\"}");
    return it == x.samples.end() ? -1.0 : it->second;
  };
  EXPECT_EQ(e.types.at("libshm_egress_pending"), "gauge");
  EXPECT_EQ(sample(e, "libshm_egress_pending"), 1.0) << reply->body;
  EXPECT_EQ(sample(e, "libshm_egress_inflight"), 2.0) << reply->body;
  EXPECT_EQ(sample(e, "libshm_egress_next_sequence"), 3.0) << reply->body;
  EXPECT_EQ(sample(e, "libshm_egress_operations_enqueued_total"), 3.0) << reply->body;
  EXPECT_EQ(sample(e, "libshm_egress_operations_claims_total"), 2.0) << reply->body;
  EXPECT_EQ(e.samples.at("libshm_segment_up{segment=\"uplink\",kind=\"egress\"}"), 1.0);
  const double generation = sample(e, "libshm_egress_generation");

  // An acknowledgement shows on a later scrape.
  const std::uint64_t third = t->try_claim(buf)->envelope.sequence;
  ASSERT_EQ(t->ack(third)->status, egress::AckStatus::Advanced);
  const Polled inflight = poll_metric(port, "libshm_egress_inflight{segment=\"uplink\"}",
                                      [](double v) { return v == 0.0; });
  EXPECT_EQ(inflight.value, 0.0) << inflight.body;
  EXPECT_EQ(sample(parse_exposition(inflight.body), "libshm_egress_acked_through"),
            static_cast<double>(third))
      << inflight.body;

  // A replacement transport advances the generation; the daemon follows.
  t.reset();
  auto next = EgressTransport::open("uplink");
  ASSERT_TRUE(next) << next.error().what();
  const Polled gen = poll_metric(port, "libshm_egress_generation{segment=\"uplink\"}",
                                 [&](double v) { return v == generation + 1; });
  EXPECT_EQ(gen.value, generation + 1) << gen.body;

  d.kill(SIGTERM);
  EXPECT_EQ(d.wait(30s), 0) << d.output();
}

// A topic scraped by the real daemon: per subscriber (labelled by its
// attachment slot) the queue, the samples it holds and what a DropOldest
// subscriber missed; the publisher's count and the free chunks. A receive
// shows on a later scrape.
TEST_F(SidecarDaemon, MetricsEndpointFollowsATopicsSubscribers) {
  auto publisher = TopicPublisher::create(
      "frames",
      {.max_sample_bytes = 64, .chunks = 8, .queue_depth = 2, .history = 0, .max_held = 2});
  ASSERT_TRUE(publisher) << publisher.error().what();
  auto lossy = TopicSubscriber::open("frames", TopicOverflow::DropOldest);
  ASSERT_TRUE(lossy) << lossy.error().what();
  auto holder = TopicSubscriber::open("frames", TopicOverflow::DropOldest);
  ASSERT_TRUE(holder) << holder.error().what();
  const auto publish = [&] {
    auto loan = publisher->try_loan(16);
    ASSERT_TRUE(loan && *loan);
    ASSERT_TRUE(publisher->try_publish(std::move(**loan)));
  };
  for (int i = 0; i < 3; ++i) publish();  // queue depth 2: each subscriber misses one
  auto held = holder->try_receive();
  ASSERT_TRUE(held && *held);

  Subprocess d = sidecar(root.path(), {"--listen", "127.0.0.1:0", "--interval", "20"});
  const std::uint16_t port = start(d);
  ASSERT_NE(port, 0) << d.output();
  auto reply = get(port, "/metrics");
  ASSERT_TRUE(reply) << d.output();
  const Exposition e = parse_exposition(reply->body);
  EXPECT_TRUE(e.errors.empty()) << e.errors.front();
  const auto of = [](const TopicSubscriber& s, const std::string& name) {
    return fmt::format("libshm_topic_subscribers_{}{{segment=\"frames\",subscribers=\"{}\"}}", name,
                       s.attachment().slot());
  };
  const auto sample = [](const Exposition& x, const std::string& series) {
    const auto it = x.samples.find(series);
    return it == x.samples.end() ? -1.0 : it->second;
  };
  EXPECT_EQ(e.types.at("libshm_topic_subscribers_queue"), "gauge");
  EXPECT_EQ(e.types.at("libshm_topic_subscribers_missed_total"), "counter");
  EXPECT_EQ(sample(e, of(*lossy, "queue")), 2.0) << reply->body;
  EXPECT_EQ(sample(e, of(*lossy, "missed_total")), 1.0) << reply->body;
  EXPECT_EQ(sample(e, of(*lossy, "held")), 0.0) << reply->body;
  EXPECT_EQ(sample(e, of(*holder, "queue")), 1.0) << reply->body;
  EXPECT_EQ(sample(e, of(*holder, "held")), 1.0) << reply->body;
  EXPECT_EQ(sample(e, of(*holder, "received_total")), 1.0) << reply->body;
  EXPECT_EQ(sample(e, "libshm_topic_publisher_published_total{segment=\"frames\"}"), 3.0)
      << reply->body;
  EXPECT_EQ(e.samples.at("libshm_segment_up{segment=\"frames\",kind=\"topic\"}"), 1.0);

  // The lossy subscriber takes both queued samples; the scrape follows.
  for (int i = 0; i < 2; ++i) {
    auto s = lossy->try_receive();
    ASSERT_TRUE(s && *s);
  }
  const Polled queue = poll_metric(port, of(*lossy, "queue"), [](double v) { return v == 0.0; });
  EXPECT_EQ(queue.value, 0.0) << "the queue never followed the subscriber:\n" << queue.body;
  EXPECT_EQ(sample(parse_exposition(queue.body), of(*lossy, "received_total")), 2.0) << queue.body;

  d.kill(SIGTERM);
  EXPECT_EQ(d.wait(30s), 0) << d.output();
}

// The page a Prometheus server scrapes, with a segment of every kind (a
// relay with a spill store, an egress with records in flight), passes
// `promtool check metrics` with no warning: names in base units (seconds,
// bytes), counters ending in _total, one type and help per family.
TEST_F(SidecarDaemon, MetricsOfEveryKindPassPromtoolWithoutAWarning) {
  test::TempSpillDir spill;
  auto ring = RingProducer::create("ring", RingParams{4096});
  ASSERT_TRUE(ring) << ring.error().what();
  auto channel_params = ChannelParams::for_payload(64, 8);
  ASSERT_TRUE(channel_params);
  ASSERT_TRUE(create_channel("channel", *channel_params));
  ASSERT_TRUE(create_mpmc_ring("mpmc", MpmcParams{64, 32}));
  auto fanout = PriorityFanout::create("fanout", FanoutParams{4, 64, 48});
  ASSERT_TRUE(fanout) << fanout.error().what();
  LedgerConfig lc;
  lc.params.global_limit = 1000;
  lc.params.max_tickets = 8;
  lc.params.max_categories = 2;
  lc.params.max_pools = 2;
  lc.params.max_buckets = 2;
  lc.categories = {{"msg", 1000, Partition::Ordinary}};
  lc.buckets = {{"a", 10, 5}};
  auto ledger = Ledger::create("ledger", lc);
  ASSERT_TRUE(ledger) << ledger.error().what();
  auto relay = RelayWriter::create("relay", test::small_spill_fifo(""));
  ASSERT_TRUE(relay) << relay.error().what();
  for (std::uint64_t i = 0; i < 12; ++i) ASSERT_TRUE(relay->write(u64_value(i), 0ns));
  auto egress = Egress::create(
      "egress", EgressParams{.max_payloads = 16, .slot_bytes = 32, .inflight_limit = 8});
  ASSERT_TRUE(egress) << egress.error().what();
  ASSERT_TRUE(egress->try_enqueue(std::vector<std::byte>(20, std::byte{5})));
  auto topic = TopicPublisher::create(
      "topic",
      {.max_sample_bytes = 64, .chunks = 4, .queue_depth = 2, .history = 0, .max_held = 1});
  ASSERT_TRUE(topic) << topic.error().what();
  auto subscriber = TopicSubscriber::open("topic", TopicOverflow::DropOldest);
  ASSERT_TRUE(subscriber) << subscriber.error().what();

  Subprocess d = sidecar(root.path(), {"--listen", "127.0.0.1:0", "--interval", "20"});
  const std::uint16_t port = start(d);
  ASSERT_NE(port, 0) << d.output();
  auto reply = get(port, "/metrics");
  ASSERT_TRUE(reply) << d.output();
  for (const char* kind :
       {"spsc_ring", "channel", "mpmc_ring", "fanout_bitmap", "ledger", "relay", "egress", "topic"})
    EXPECT_NE(reply->body.find(fmt::format("kind=\"{}", kind)), std::string::npos)
        << kind << " is not on the page";
  const std::string page = root.file("metrics.txt");
  std::ofstream(page) << reply->body;
  shm::test::expect_promtool_clean(page, reply->body);
  d.kill(SIGTERM);
  EXPECT_EQ(d.wait(30s), 0) << d.output();
}

TEST_F(SidecarDaemon, StatusEndpointServesJsonPerSegment) {
  auto p = RingProducer::create("ticks", RingParams{4096});
  ASSERT_TRUE(p) << p.error().what();
  { std::ofstream(root.file("junk")) << std::string(5000, 'j'); }
  Subprocess d = sidecar(root.path(), {"--listen", "127.0.0.1:0", "--interval", "50"});
  const std::uint16_t port = start(d);
  auto reply = get(port, "/status");
  ASSERT_TRUE(reply) << d.output();
  EXPECT_EQ(reply->status, 200);
  EXPECT_NE(reply->head.find("Content-Type: application/json"), std::string::npos);
  const auto j = nlohmann::json::parse(reply->body);
  EXPECT_EQ(j["sidecar"]["root"], root.path());
  ASSERT_EQ(j["segments"].size(), 2u) << j.dump(2);
  const auto& junk = j["segments"][0];
  EXPECT_EQ(junk["name"], "junk");
  EXPECT_FALSE(junk["up"].get<bool>());
  EXPECT_NE(junk["error"].get<std::string>().find("BadMagic"), std::string::npos) << junk.dump();
  const auto& ticks = j["segments"][1];
  EXPECT_EQ(ticks["name"], "ticks");
  EXPECT_EQ(ticks["kind"], "spsc_ring");
  EXPECT_EQ(ticks["attachers"]["alive"], 1);
  EXPECT_EQ(ticks["attachers"]["dead"], 0);
  EXPECT_EQ(ticks["attachers"]["slots"][0]["role"], "producer");
  EXPECT_EQ(ticks["detail"]["capacity"], 4096);
  EXPECT_EQ(ticks["detail"]["depth_records"], 0);
  EXPECT_EQ(ticks["header"]["kind"], "spsc_ring");
}

// A path is bytes on Linux, not UTF-8: a relay whose spill directory's name
// holds a Latin-1 byte and an escape sequence. JSON cannot carry the raw bytes
// (nlohmann refused them, and the exception took the daemon down); the status
// shows them escaped and serves the rest as usual.
TEST_F(SidecarDaemon, StatusShowsANonUtf8SpillDirectoryEscaped) {
  const test::TempSpillDir spill;
  const RelayConfig cfg = test::small_spill_fifo(spill.sub("caf\xe9-\x1b[31m"));
  auto w = RelayWriter::create("latin", cfg);
  ASSERT_TRUE(w) << w.error().what();

  Subprocess d = sidecar(root.path(), {"--once", "--json"});
  ASSERT_EQ(d.wait(10s), 0) << d.output();
  const std::string& out = d.output();
  ASSERT_NE(out.find('{'), std::string::npos) << out;
  const auto j = nlohmann::json::parse(out.substr(out.find('{')));
  const nlohmann::json* relay = nullptr;
  for (const auto& s : j["segments"])
    if (s["name"] == "latin") relay = &s;
  ASSERT_NE(relay, nullptr) << j.dump(2);
  EXPECT_EQ((*relay)["detail"]["spill"]["dir"], spill.sub("caf\\xe9-\\x1b[31m")) << relay->dump(2);
}

TEST_F(SidecarDaemon, AnswersUnknownPathsAndMethodsWithHttpErrors) {
  Subprocess d = sidecar(root.path(), {"--listen", "127.0.0.1:0"});
  const std::uint16_t port = start(d);
  auto missing = get(port, "/nope");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  auto post = http(port, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
  EXPECT_NE(post->head.find("Allow: GET, HEAD"), std::string::npos);
  auto head = http(port, "HEAD /metrics HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_TRUE(head->body.empty());
  auto bad = http(port, "garbage\r\n\r\n");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
}

// Requests the hand-written parser of the first sidecar answered wrongly or
// not at all get their HTTP error, and the daemon keeps serving.
TEST_F(SidecarDaemon, AnswersMalformedAndOversizedRequestsAndKeepsServing) {
  Subprocess d = sidecar(root.path(), {"--listen", "127.0.0.1:0"});
  const std::uint16_t port = start(d);
  ASSERT_NE(port, 0) << d.output();
  auto version = http(port, "GET /metrics HTTP/2.0junk\r\n\r\n");
  ASSERT_TRUE(version) << d.output();
  EXPECT_EQ(version->status, 400) << version->head;
  std::string many = "GET /metrics HTTP/1.1\r\n";
  for (int i = 0; many.size() <= 9000; ++i) many += fmt::format("X-Pad-{}: abcdefgh\r\n", i);
  auto big = http(port, many + "\r\n");
  ASSERT_TRUE(big) << d.output();
  EXPECT_EQ(big->status, 431) << big->head;
  auto encoded = get(port, "/%6detrics");
  ASSERT_TRUE(encoded) << d.output();
  EXPECT_EQ(encoded->status, 200) << encoded->head;
  auto metrics = get(port, "/metrics");
  ASSERT_TRUE(metrics) << d.output();
  EXPECT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->body.find("libshm_sidecar_cycles_total"), std::string::npos);
  d.kill(SIGTERM);
  EXPECT_EQ(d.wait(30s), 0) << d.output();
}

TEST_F(SidecarDaemon, ATakenPortIsRefusedWithTheReason) {
  Subprocess first = sidecar(root.path(), {"--listen", "127.0.0.1:0"});
  const std::uint16_t port = start(first);
  ASSERT_NE(port, 0) << first.output();
  test::TempRoot other;  // another root: the instance lock does not stop it
  Subprocess second = sidecar(other.path(), {"--listen", fmt::format("127.0.0.1:{}", port)});
  EXPECT_EQ(second.wait(10s), 1) << second.output();
  EXPECT_NE(
      second.output().find(fmt::format(
          "event=startup_failed step=listen error=\"bind 127.0.0.1:{}: Address already in use",
          port)),
      std::string::npos)
      << second.output();
  EXPECT_TRUE(get(port, "/healthz")) << "the first sidecar stopped serving";
}

// The root is checked at the sidecar's start as at every other entry point.
TEST_F(SidecarDaemon, AnUnsafeOrRelativeRootIsRefusedAtStart) {
  const std::string open_root = root.path() + "/open";
  ASSERT_EQ(::mkdir(open_root.c_str(), 0777), 0);
  ASSERT_EQ(::chmod(open_root.c_str(), 0777), 0);
  Subprocess unsafe = sidecar(open_root, {"--listen", "127.0.0.1:0"});
  EXPECT_EQ(unsafe.wait(30s), 1) << unsafe.output();
  EXPECT_NE(unsafe.output().find("event=startup_failed"), std::string::npos) << unsafe.output();
  EXPECT_NE(unsafe.output().find("UnsafeRoot"), std::string::npos) << unsafe.output();
  Subprocess relative = sidecar("relative/root", {"--listen", "127.0.0.1:0"});
  EXPECT_EQ(relative.wait(30s), 1) << relative.output();
  EXPECT_NE(relative.output().find("is not an absolute path"), std::string::npos)
      << relative.output();
}

TEST_F(SidecarDaemon, SigtermStopsPromptlyEvenWithAnIdleClientConnected) {
  Subprocess d = sidecar(root.path(), {"--listen", "127.0.0.1:0", "--interval", "60000"});
  const std::uint16_t port = start(d);
  // A client that connects and never sends a request.
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  // Wait until the daemon holds the idle connection: the gauge then counts it
  // besides the scrape asking. That scrape being answered at all shows the
  // idle client blocks nobody.
  const Polled open =
      poll_metric(port, "libshm_sidecar_http_connections", [](double v) { return v >= 2.0; });
  ASSERT_EQ(open.value, 2.0) << "the idle client was never accepted, or it stalls the server:\n"
                             << open.body;
  d.kill(SIGTERM);
  EXPECT_EQ(d.wait(30s), 0) << d.output();
  EXPECT_NE(d.output().find("event=stopping signal=SIGTERM"), std::string::npos) << d.output();
  // The path, not the time: it stopped with the idle client still connected,
  // so it waited neither for that client nor for its 5 s idle timeout.
  const std::string stopped = log_line(d.output(), "stopped");
  EXPECT_NE(stopped.find("http_connections=1"), std::string::npos) << d.output();
  ::close(fd);
}

TEST_F(SidecarDaemon, SigintStopsCleanlyAndReleasesTheInstanceLock) {
  auto p = RingProducer::create("orders", RingParams{4096});
  ASSERT_TRUE(p) << p.error().what();
  Subprocess d = sidecar(root.path(), {"--listen", "127.0.0.1:0", "--interval", "50"});
  const std::uint16_t port = start(d);
  ASSERT_NE(port, 0) << d.output();
  ASSERT_TRUE(get(port, "/status")) << d.output();
  d.kill(SIGINT);  // Ctrl-C
  EXPECT_EQ(d.wait(30s), 0) << d.output();
  EXPECT_NE(d.output().find("event=stopping signal=SIGINT"), std::string::npos) << d.output();
  EXPECT_NE(d.output().find("event=stopped"), std::string::npos) << d.output();
  // Clean: the port is closed and the next instance starts on the same root.
  EXPECT_FALSE(get(port, "/status")) << "still serving after SIGINT";
  Subprocess next = sidecar(root.path(), {"--once"});
  EXPECT_EQ(next.wait(10s), 0) << next.output();
  // The segments it watched are untouched.
  EXPECT_FALSE(p->segment().stale());
  EXPECT_EQ(p->segment().liveness(0), Liveness::Alive);
}

TEST_F(SidecarDaemon, SecondInstanceOnTheSameRootIsRefusedNamingTheFirst) {
  Subprocess first = sidecar(root.path(), {"--listen", "127.0.0.1:0"});
  const std::uint16_t port = start(first);
  Subprocess second = sidecar(root.path(), {"--once"});
  EXPECT_EQ(second.wait(10s), 3) << second.output();
  EXPECT_NE(second.output().find("event=already_running"), std::string::npos) << second.output();
  EXPECT_NE(second.output().find("another shm-sidecar already monitors"), std::string::npos);
  EXPECT_NE(second.output().find(fmt::format("pid {}", first.pid())), std::string::npos)
      << second.output();
  EXPECT_NE(second.output().find(fmt::format("http://127.0.0.1:{}", port)), std::string::npos)
      << second.output();
}

// Issue 18, defect 6: on a full filesystem the sidecar failed to start
// ("startup_failed ... write .libshm-sidecar.lock: No space left on device").
// A monitor is most needed then: it starts, holds its instance lock (a lock on
// a byte needs no space) and reports the full root as a metric and an event.
// The full filesystem is a 64 KiB tmpfs filled up, mounted in a private mount
// namespace (needs root, as in CI; skipped where mounting is not allowed).
TEST_F(SidecarDaemon, StartsOnAFullFilesystemHoldsItsLockAndReportsTheFullRoot) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to mount a small tmpfs";
  char dir[] = "/tmp/shm-full-fs-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  struct RemoveDir {
    const char* path;
    ~RemoveDir() { ::rmdir(path); }
  } remove_dir{dir};
  const std::string mnt = dir;
  auto tool = [](const char* name) {
    for (const char* bin : {"/usr/bin/", "/bin/"})
      if (::access((std::string(bin) + name).c_str(), X_OK) == 0) return std::string(bin) + name;
    return std::string();
  };
  const std::string unshare = tool("unshare"), nsenter = tool("nsenter");
  if (unshare.empty() || nsenter.empty()) GTEST_SKIP() << "needs unshare and nsenter";
  {
    Subprocess probe({unshare, "-m", "/bin/mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", mnt});
    if (probe.wait(10s) != 0) GTEST_SKIP() << "cannot mount a tmpfs here: " << probe.output();
  }
  // The sidecar runs in the namespace that sees the full tmpfs (exec all the
  // way down: the Subprocess pid is the sidecar's).
  const std::string fill = fmt::format(
      "mount -t tmpfs -o size=64k tmpfs '{0}' && mkdir -m 700 '{0}/root' && "
      "(dd if=/dev/zero of='{0}/fill' bs=4k count=64 2>/dev/null; true) && "
      "exec '{1}' --root '{0}/root' --listen 127.0.0.1:0 --interval 50 2>&1",
      mnt, test::bin_path("shm-sidecar"));
  Subprocess d({unshare, "-m", "/bin/sh", "-c", fill});
  const std::uint16_t port = start(d);
  ASSERT_NE(port, 0) << d.output();
  // Its first cycle (before "ready") saw the full filesystem.
  const std::string event = log_line(d.output(), "root_full");
  EXPECT_NE(event.find("level=warn"), std::string::npos) << event;
  EXPECT_NE(event.find("free_bytes=0"), std::string::npos) << event;
  EXPECT_NE(log_line(d.output(), "lock_identity_not_written").find("No space left on device"),
            std::string::npos)
      << d.output();
  const Polled full =
      poll_metric(port, "libshm_sidecar_root_full", [](double v) { return v == 1; });
  EXPECT_EQ(full.value, 1.0) << full.body;
  const Polled free =
      poll_metric(port, "libshm_sidecar_root_free_bytes", [](double) { return true; });
  EXPECT_EQ(free.value, 0.0) << free.body;
  const Polled events =
      poll_metric(port, "libshm_sidecar_root_full_total", [](double v) { return v == 1; });
  EXPECT_EQ(events.value, 1.0) << events.body;

  // It holds the instance lock: a second sidecar on the same (full) root is refused.
  Subprocess second({"/bin/sh", "-c",
                     fmt::format("exec '{}' -t {} -m '{}' --root '{}/root' --once 2>&1", nsenter,
                                 d.pid(), test::bin_path("shm-sidecar"), mnt)});
  EXPECT_EQ(second.wait(10s), 3) << second.output();
  EXPECT_NE(second.output().find("another shm-sidecar already monitors"), std::string::npos)
      << second.output();

  d.kill(SIGTERM);
  EXPECT_EQ(d.wait(30s), 0) << d.output();
}

TEST_F(SidecarDaemon, RestartsAfterKill9BecauseTheKernelDropsTheLock) {
  Subprocess first = sidecar(root.path(), {});
  ASSERT_TRUE(first.wait_for_line("ready", 10s)) << first.output();
  first.kill(SIGKILL);
  ASSERT_EQ(first.wait(30s), 128 + SIGKILL);
  Subprocess second = sidecar(root.path(), {"--once"});
  EXPECT_EQ(second.wait(10s), 0) << second.output();
}

TEST_F(SidecarDaemon, OncePrintsOneLinePerSegmentAndExits) {
  auto p = RingProducer::create("alpha", RingParams{4096});
  ASSERT_TRUE(p) << p.error().what();
  { std::ofstream(root.file("beta")) << std::string(5000, 'z'); }
  Subprocess d = sidecar(root.path(), {"--once"});
  ASSERT_EQ(d.wait(10s), 0) << d.output();
  const std::string& out = d.output();
  EXPECT_NE(out.find("1 segment(s), 1 unreadable"), std::string::npos) << out;
  EXPECT_NE(out.find("SEGMENT"), std::string::npos) << out;
  std::istringstream in(out);
  std::string line;
  bool alpha = false, beta = false;
  while (std::getline(in, line)) {
    if (line.starts_with("alpha ")) {
      alpha = true;
      EXPECT_NE(line.find("spsc_ring"), std::string::npos) << line;
      EXPECT_TRUE(line.ends_with("ok")) << line;
    }
    if (line.starts_with("beta ")) {
      beta = true;
      EXPECT_NE(line.find("unreadable: BadMagic"), std::string::npos) << line;
    }
  }
  EXPECT_TRUE(alpha && beta) << out;
}

TEST_F(SidecarDaemon, OnceJsonIsMachineReadable) {
  auto p = RingProducer::create("alpha", RingParams{4096});
  ASSERT_TRUE(p) << p.error().what();
  Subprocess d =
      Subprocess({test::bin_path("shm-sidecar"), "--root", root.path(), "--once", "--json"});
  ASSERT_EQ(d.wait(10s), 0) << d.output();
  const auto j = nlohmann::json::parse(d.output());
  ASSERT_EQ(j["segments"].size(), 1u);
  EXPECT_EQ(j["segments"][0]["name"], "alpha");
  EXPECT_EQ(j["segments"][0]["attachers"]["alive"], 1);
  EXPECT_EQ(j["sidecar"]["cycles"], 1);
}

TEST_F(SidecarDaemon, ReportsADeathEndToEnd) {
  Subprocess c({test::helper_path("sidecar_attacher"), "victim", "consumer", "--create", "4096"});
  ASSERT_TRUE(c.wait_for_line("attached 1", 30s)) << c.output();
  Subprocess d = sidecar(root.path(), {"--listen", "127.0.0.1:0", "--interval", "20"});
  const std::uint16_t port = start(d);
  c.kill(SIGKILL);
  c.wait(30s);
  const Polled reclaims =
      poll_metric(port, "libshm_sidecar_reclaims_total", [](double v) { return v >= 1.0; });
  EXPECT_EQ(reclaims.value, 1.0) << reclaims.body;
  const Exposition e = parse_exposition(reclaims.body);
  EXPECT_EQ(e.samples.at("libshm_sidecar_attacher_deaths_total"), 1.0) << reclaims.body;
  d.kill(SIGTERM);
  ASSERT_EQ(d.wait(30s), 0);
  EXPECT_NE(d.output().find(fmt::format(
                "event=attacher_dead segment=victim slot=1 role=consumer pid={}", c.pid())),
            std::string::npos)
      << d.output();
}

TEST_F(SidecarDaemon, RefusesANonLoopbackListenAddress) {
  Subprocess d = sidecar(root.path(), {"--listen", "0.0.0.0:9464"});
  EXPECT_EQ(d.wait(10s), 1) << d.output();
  EXPECT_NE(d.output().find("not a loopback address"), std::string::npos) << d.output();
}

TEST_F(SidecarDaemon, BadCommandLineExitsWithUsageCode) {
  Subprocess d = sidecar(root.path(), {"--interval", "0"});
  EXPECT_EQ(d.wait(10s), 2) << d.output();
  Subprocess help = sidecar(root.path(), {"--help"});
  EXPECT_EQ(help.wait(10s), 0);
  EXPECT_NE(help.output().find("--gc-ephemeral"), std::string::npos) << help.output();
}

}  // namespace
}  // namespace shm
