// topic_frames: one publisher of 1 MiB frames, three subscribers at
// different speeds, zero copy (docs/topic.md).
//
// The publisher loans a chunk of the topic's pool, writes a frame in place
// and publishes it: each subscriber's queue gets the chunk's index, never a
// copy of the megabyte. Two subscribers are Block (a recorder and an
// analyser: they must see every frame, the publisher waits for them) and one
// is DropOldest (a preview that only wants recent frames: the publisher
// never waits for it; what it loses is counted in missed()).
//
//   topic_frames demo [FRAMES]        runs all four processes and cleans up
//   topic_frames publish NAME FRAMES  creates NAME if needed and publishes FRAMES frames
//   topic_frames subscribe NAME block|drop DELAY_MS FRAMES
//                                     receives until the frame FRAMES-1, sleeping
//                                     DELAY_MS after each, checking every frame
//
// Inspect a running topic with `shmctl inspect NAME`.
#include "shm/topic/topic.hpp"

#include <fmt/format.h>

#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;

constexpr std::size_t kFrameBytes = 1 << 20;
constexpr shm::TopicParams kParams{
    .max_sample_bytes = kFrameBytes, .chunks = 24, .queue_depth = 4, .history = 1, .max_held = 2};

int usage() {
  fmt::print(stderr,
             "usage: topic_frames demo [FRAMES]\n"
             "       topic_frames publish NAME FRAMES\n"
             "       topic_frames subscribe NAME block|drop DELAY_MS FRAMES\n");
  return 64;
}

// A frame: its number in the first 8 bytes, then a pattern derived from it,
// so a subscriber can tell a torn or reused chunk from a good frame.
void draw(std::span<std::byte> frame, std::uint64_t n) {
  std::memcpy(frame.data(), &n, sizeof n);
  for (std::size_t i = sizeof n; i < frame.size(); i += 4096)
    frame[i] = static_cast<std::byte>((n + i / 4096) & 0xff);
}

bool intact(std::span<const std::byte> frame, std::uint64_t n) {
  std::uint64_t got = 0;
  if (frame.size() != kFrameBytes) return false;
  std::memcpy(&got, frame.data(), sizeof got);
  if (got != n) return false;
  for (std::size_t i = sizeof n; i < frame.size(); i += 4096)
    if (frame[i] != static_cast<std::byte>((n + i / 4096) & 0xff)) return false;
  return true;
}

int publish(const std::string& name, std::uint64_t frames) {
  auto pub = shm::TopicPublisher::open(name, kParams);
  if (!pub && pub.error().code == shm::Errc::NotFound)
    pub = shm::TopicPublisher::create(name, kParams);
  if (!pub) {
    fmt::print(stderr, "publisher: {}\n", pub.error().what());
    return 1;
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::uint64_t dropped = 0;
  for (std::uint64_t n = 0; n < frames; ++n) {
    auto frame = pub->loan(kFrameBytes, 5s);
    if (!frame || !*frame) {
      fmt::print(stderr, "publisher: no chunk for frame {}\n", n);
      return 1;
    }
    draw((*frame)->bytes(), pub->snapshot().next_seq);
    auto sent = pub->publish(std::move(**frame), 5s);  // waits for the Block subscribers
    if (!sent || sent->status != shm::PublishStatus::Published) {
      fmt::print(stderr, "publisher: frame {} not published\n", n);
      return 1;
    }
    dropped += sent->dropped;
    std::this_thread::sleep_for(2ms);  // a 500 fps camera
  }
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  fmt::print("publisher: {} frames of 1 MiB in {} ms; {} dropped from DropOldest queues\n", frames,
             ms.count(), dropped);
  return 0;
}

int subscribe(const std::string& name, std::string_view how, std::chrono::milliseconds delay,
              std::uint64_t frames) {
  const auto overflow = how == "drop" ? shm::TopicOverflow::DropOldest : shm::TopicOverflow::Block;
  shm::Result<shm::TopicSubscriber> sub = std::unexpected(shm::Error{shm::Errc::NotFound, name});
  for (int i = 0; i < 500 && !sub; ++i) {  // the publisher may not have created it yet
    sub = shm::TopicSubscriber::open(name, overflow, kParams);
    if (!sub) std::this_thread::sleep_for(10ms);
  }
  if (!sub) {
    fmt::print(stderr, "subscriber: {}\n", sub.error().what());
    return 1;
  }
  std::uint64_t received = 0, last = 0;
  bool any = false;
  while (!any || last + 1 < frames) {
    auto frame = sub->receive(10s);
    if (!frame || !*frame) {
      fmt::print(stderr, "subscriber {}: nothing for 10 s\n", how);
      return 1;
    }
    if (!intact((*frame)->bytes(), (*frame)->seq())) {
      fmt::print(stderr, "subscriber {}: frame {} is damaged\n", how, (*frame)->seq());
      return 1;
    }
    last = (*frame)->seq();
    any = true;
    ++received;
    frame->reset();  // gives the chunk back before the slow work below
    std::this_thread::sleep_for(delay);
  }
  fmt::print("subscriber {} ({} ms per frame): received {}, missed {}\n", how, delay.count(),
             received, sub->missed());
  return overflow == shm::TopicOverflow::Block && sub->missed() != 0 ? 1 : 0;
}

pid_t spawn(const std::vector<std::string>& args) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv("/proc/self/exe", argv.data());
    std::_Exit(127);
  }
  return pid;
}

int demo(std::uint64_t frames) {
  const std::string name = fmt::format("topic-frames-{}", ::getpid());
  auto seg = shm::create_topic(name, kParams);
  if (!seg) {
    fmt::print(stderr, "{}\n", seg.error().what());
    return 1;
  }
  const std::string n = std::to_string(frames);
  std::vector<pid_t> subs = {
      spawn({"topic_frames", "subscribe", name, "block", "0", n}),  // recorder: keeps up
      spawn({"topic_frames", "subscribe", name, "block", "3", n}),  // analyser: slower
      spawn({"topic_frames", "subscribe", name, "drop", "15", n}),  // preview: far behind
  };
  // Let the three attach before the first frame (a late one would get history only).
  while (true) {
    auto probe = shm::open_topic(name);
    std::uint32_t attached = 0;
    if (probe) {
      const auto v = shm::topic::view(*probe);
      for (std::size_t i = 0; v && i < shm::topic::kSubscribers; ++i)
        attached += v->record(i).active.load(std::memory_order_relaxed);
    }
    if (attached == 3) break;
    std::this_thread::sleep_for(5ms);
  }
  int failed = publish(name, frames) != 0 ? 1 : 0;
  for (const pid_t pid : subs) {
    int status = 0;
    if (pid <= 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0)
      failed = 1;
  }
  (void)shm::Segment::unlink(name);
  return failed;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string_view> a(argv + 1, argv + argc);
  if (!a.empty() && a[0] == "demo" && a.size() <= 2)
    return demo(a.size() == 2 ? std::strtoull(argv[2], nullptr, 10) : 200);
  if (a.size() == 3 && a[0] == "publish")
    return publish(argv[2], std::strtoull(argv[3], nullptr, 10));
  if (a.size() == 5 && a[0] == "subscribe")
    return subscribe(argv[2], a[2], std::chrono::milliseconds(std::strtoull(argv[4], nullptr, 10)),
                     std::strtoull(argv[5], nullptr, 10));
  return usage();
}
