// The topic block of scripts/soak.sh (test_soak_topic_publisher,
// test_soak_topic_subscriber, test_soak_topic_verify): one Topic, one
// publisher and N subscribers (Block and DropOldest, some pausing now and
// then: slow subscribers), every one of them killed -9 and restarted at random.
//
// Sample: {pid, counter, check = mix(pid ^ counter), body}, the body's length
// and bytes derived from (pid, counter): a subscriber checks every byte. The
// counter starts at 0 in every publisher incarnation, so (pid, counter) names
// a sample uniquely without a journal.
//
// Logs (one write(2) per line; formats common to every kind in soak_logs.hpp):
//   publisher:  S <pid> <realtime_ns> <incarnation>
//               P <seq> <counter>             published (logged after the publish:
//                                             a kill between the two leaves the
//                                             sample published, not logged)
//               F <realtime_ns>               first publish
//               X <published> <incarnation> <last_seq> <last_publish_realtime_ns>
//                                             clean stop (SIGTERM)
//   subscriber: S <pid> <realtime_ns> <overflow 1 = DropOldest | 2 = Block>
//               I <incarnation> <seq> <pid> <counter> <missed>
//                                             one sample received and checked;
//                                             missed() read just after it
//               C <reason> <incarnation> <seq> a sample failed its checks
//               F <realtime_ns>               first sample
//               X <received> <missed>         drained and stopped (SIGTERM)
//   both:       V <message>
//
// The guarantees checked (docs/topic.md "Crashes"), by test_soak_topic_verify:
// every sample intact; each subscriber receives samples in increasing
// (publisher incarnation, seq); a (incarnation, seq) is the same sample for
// every subscriber (one chunk, zero copy); a Block subscriber misses nothing
// within a publisher incarnation, a DropOldest subscriber no more than its
// missed() count says; a sample the publisher did not log is the one it was
// publishing when killed; a subscriber attached before the last publish ends
// with it; and (the script) `shmctl verify --all` finds the chunk accounting
// exact after the kills, the sidecar's reclaims and the clean stop.
#pragma once

#include "soak_common.hpp"

#include "shm/topic/topic.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <thread>

namespace soak {

inline constexpr std::size_t kTopicSampleMax = 256;

// Chunks for every subscriber's queue and held samples, the loans and the
// history (docs/topic.md "Pool sizing"), for up to 8 subscribers.
[[nodiscard]] inline shm::TopicParams topic_params() {
  shm::TopicParams p;
  p.max_sample_bytes = kTopicSampleMax;
  p.queue_depth = 64;
  p.history = 4;
  p.max_held = 8;
  p.chunks = 8 + p.history + 8 * (p.queue_depth + p.max_held);
  return p;
}

struct TopicSampleHead {
  std::uint64_t pid;
  std::uint64_t counter;
  std::uint64_t check;
};

[[nodiscard]] inline std::size_t topic_sample_size(std::uint64_t pid,
                                                   std::uint64_t counter) noexcept {
  return sizeof(TopicSampleHead) + mix(pid * 31 + counter) % (kTopicSampleMax - 24 + 1);
}

[[nodiscard]] inline std::byte topic_body_byte(std::uint64_t pid, std::uint64_t counter,
                                               std::size_t i) noexcept {
  return static_cast<std::byte>(mix(pid ^ (counter << 16) ^ i) & 0xff);
}

inline void fill_topic_sample(std::span<std::byte> out, std::uint64_t pid,
                              std::uint64_t counter) noexcept {
  const TopicSampleHead head{pid, counter, mix(pid ^ counter)};
  std::memcpy(out.data(), &head, sizeof head);
  for (std::size_t i = sizeof head; i < out.size(); ++i) out[i] = topic_body_byte(pid, counter, i);
}

// The sample's head when every byte checks out; else `why` names the first fault.
[[nodiscard]] inline bool check_topic_sample(std::span<const std::byte> in, TopicSampleHead& head,
                                             std::string_view& why) noexcept {
  if (in.size() < sizeof head) return why = "short", false;
  std::memcpy(&head, in.data(), sizeof head);
  if (head.check != mix(head.pid ^ head.counter)) return why = "check", false;
  if (in.size() != topic_sample_size(head.pid, head.counter)) return why = "size", false;
  for (std::size_t i = sizeof head; i < in.size(); ++i)
    if (in[i] != topic_body_byte(head.pid, head.counter, i)) return why = "body", false;
  return true;
}

// Opens the topic with open(), creating it (ephemeral) when it does not exist
// yet. The publisher's role is exclusive: RoleTaken is retried (about 10 s)
// too, since a killed publisher's slot stays locked until its death is seen.
template <class Open, class Create>
auto attach_topic(Open open, Create create) -> decltype(open()) {
  for (int attempt = 0;; ++attempt) {
    auto h = open_or_create(open, create);
    if (h || h.error().code != shm::Errc::RoleTaken || attempt > 1000) return h;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace soak
