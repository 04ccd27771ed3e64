// The topic's accounting, checked from its source of truth: every chunk's
// references (publisher loans, history, valid subscribers' queues and held
// lists) recomputed and compared with the stored refs, and the free stack
// holding exactly the chunks with none. Run on a quiescent topic (no live
// handle in the middle of a call), after a repair.
#pragma once

#include "shm/topic/layout.hpp"

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace shm::test {

struct TopicAudit {
  std::string error;             // empty: the accounting holds
  std::uint64_t referenced = 0;  // chunks with a reference
  std::uint64_t free = 0;        // chunks in the free stack
};

inline TopicAudit audit_topic(const Segment& seg) {
  TopicAudit a;
  std::string why;
  const auto v = topic::view(seg, &why);
  if (!v) {
    a.error = why;
    return a;
  }
  const auto rl = [](const auto& w) { return w.load(std::memory_order_relaxed); };
  std::vector<std::uint64_t> refs(v->p.chunks, 0);
  auto count = [&](std::uint32_t e, const char* where) {
    if (e == 0 || e > v->p.chunks) {
      a.error = std::string(where) + " names entry " + std::to_string(e);
      return;
    }
    ++refs[e - 1];
  };
  const topic::Control& c = *v->control;
  if (rl(c.publisher.active) == 1)
    for (const auto& l : c.publisher.loans)
      if (rl(l) != 0) count(rl(l), "a loan");
  for (std::uint64_t h = 0; h < v->p.history; ++h)
    if (rl(v->history[h]) != 0) count(rl(v->history[h]), "history");
  for (std::size_t i = 0; i < topic::kSubscribers; ++i) {
    const topic::SubscriberRecord& r = v->record(i);
    if (rl(r.active) != 1) continue;
    for (std::uint64_t pos = rl(r.head); pos < rl(r.tail); ++pos)
      count(rl(v->queue(i)[pos % v->p.queue_depth]), "a queue");
    for (std::uint64_t k = 0; k < v->p.max_held; ++k)
      if (rl(v->held(i)[k]) != 0) count(rl(v->held(i)[k]), "a held list");
  }
  std::set<std::uint32_t> free;
  const std::uint32_t n = rl(c.pool.free_count);
  if (n > v->p.chunks) a.error = "free count " + std::to_string(n);
  for (std::uint32_t k = 0; k < n && k < v->p.chunks; ++k)
    if (!free.insert(rl(v->free_stack[k])).second)
      a.error = "chunk " + std::to_string(rl(v->free_stack[k])) + " twice in the free stack";
  for (std::uint64_t ch = 0; ch < v->p.chunks; ++ch) {
    const std::uint32_t stored = rl(v->meta[ch].refs);
    if (stored != refs[ch])
      a.error = "chunk " + std::to_string(ch) + " stores " + std::to_string(stored) +
                " references, the records make " + std::to_string(refs[ch]);
    const bool in_free = free.count(static_cast<std::uint32_t>(ch)) != 0;
    if ((refs[ch] == 0) != in_free)
      a.error = "chunk " + std::to_string(ch) + " has " + std::to_string(refs[ch]) +
                " references and is " + (in_free ? "" : "not ") + "in the free stack";
    if (refs[ch] != 0) ++a.referenced;
  }
  a.free = free.size();
  return a;
}

}  // namespace shm::test
