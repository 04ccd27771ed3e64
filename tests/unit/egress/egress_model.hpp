// A deliberately naive reference model of the egress specification for the
// property tests: records in a std::map, readers computed as whole values, a
// reader's counter moved by comparing its value before and after each call.
// It shares no code with EgressCore beyond the public types.
#pragma once

#include "shm/egress/core.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

namespace shm::test {

struct ModelRecord {
  egress::RecordState state = egress::RecordState::Pending;
  std::uint32_t attempt = 0;
  std::uint64_t generation = 0;
  std::uint64_t due = 0;
};

class EgressModel {
 public:
  explicit EgressModel(const egress::ParamBlock& p) : p_(p) {}

  using Entry = std::tuple<std::uint64_t, std::uint32_t, std::uint64_t>;  // seq, attempt, gen
  struct Readers {
    std::vector<Entry> pending, inflight;
    std::optional<std::uint64_t> acked;
    std::optional<egress::RetryRecord> retry;
  };

  [[nodiscard]] Readers readers() const {
    Readers r;
    for (const auto& [seq, rec] : records_) {
      if (rec.state == egress::RecordState::Pending)
        r.pending.emplace_back(seq, rec.attempt, rec.generation);
      if (rec.state == egress::RecordState::Inflight)
        r.inflight.emplace_back(seq, rec.attempt, rec.generation);
    }
    r.acked = acked_;
    r.retry = retry_;
    return r;
  }

  // Every call goes through here: it moves the counters of the readers whose value changed.
  template <class F>
  auto step(F&& f) {
    const Readers before = readers();
    auto out = f();
    const Readers after = readers();
    if (before.pending != after.pending) ++versions_[0];
    if (before.inflight != after.inflight) ++versions_[1];
    if (before.acked != after.acked) ++versions_[2];
    if (before.retry != after.retry) ++versions_[3];
    return out;
  }

  egress::EnqueueStatus enqueue(std::uint64_t) {
    return step([&] {
      const std::uint64_t lowest = records_.empty() ? next_ : records_.begin()->first;
      if (next_ - lowest >= p_.capacity) return egress::EnqueueStatus::Full;
      records_[next_++] = ModelRecord{egress::RecordState::Pending, 0, gen_, 0};
      return egress::EnqueueStatus::Enqueued;
    });
  }
  std::pair<egress::ClaimStatus, std::uint64_t> claim(std::uint64_t g) {
    return step([&]() -> std::pair<egress::ClaimStatus, std::uint64_t> {
      if (g != gen_) return {egress::ClaimStatus::StaleGeneration, 0};
      if (count(egress::RecordState::Inflight) >= p_.inflight_limit)
        return {egress::ClaimStatus::WindowFull, 0};
      for (auto& [seq, rec] : records_)
        if (rec.state == egress::RecordState::Pending) {
          rec.state = egress::RecordState::Inflight;
          ++rec.attempt;
          return {egress::ClaimStatus::Claimed, seq};
        }
      return {egress::ClaimStatus::Empty, 0};
    });
  }
  egress::AckStatus ack(std::uint64_t g, std::uint64_t through) {
    return step([&] {
      if (g != gen_) return egress::AckStatus::StaleGeneration;
      if (through >= next_) return egress::AckStatus::Refused;
      if (acked_ && *acked_ >= through) return egress::AckStatus::Unchanged;
      acked_ = through;
      for (auto it = records_.begin(); it != records_.end() && it->first <= through;) {
        if (it->second.state == egress::RecordState::Terminal) {
          ++it;
          continue;
        }
        clear_parked_retry(it->first, it->second);
        it = records_.erase(it);
      }
      return egress::AckStatus::Advanced;
    });
  }
  egress::FailStatus fail(std::uint64_t g, std::uint64_t seq, std::uint64_t now) {
    return step([&] {
      if (g != gen_) return egress::FailStatus::StaleGeneration;
      auto it = records_.find(seq);
      if (it == records_.end() || it->second.state != egress::RecordState::Inflight)
        return egress::FailStatus::UnknownSequence;
      ModelRecord& rec = it->second;
      // The specification's backoff(attempt), reported by exhausted records too.
      std::uint64_t b = p_.retry_base_ns;
      for (std::uint32_t i = 1; i < rec.attempt && b < p_.retry_ceiling_ns; ++i) b *= 2;
      b = std::min(b, p_.retry_ceiling_ns);
      if (rec.attempt - 1 < p_.retry_budget) {
        rec.state = egress::RecordState::Parked;
        rec.due = now + b;
        retry_ = egress::RetryRecord{seq, rec.attempt, b, false};
        return egress::FailStatus::Retrying;
      }
      rec.state = egress::RecordState::Terminal;
      retry_ = egress::RetryRecord{seq, rec.attempt, b, true};
      return egress::FailStatus::Exhausted;
    });
  }
  egress::RetryStatus retry_now(std::uint64_t g, std::uint64_t seq) {
    return step([&] {
      if (g != gen_) return egress::RetryStatus::StaleGeneration;
      auto it = records_.find(seq);
      if (it == records_.end() || it->second.state != egress::RecordState::Parked)
        return egress::RetryStatus::UnknownSequence;
      clear_parked_retry(seq, it->second);
      it->second.state = egress::RecordState::Pending;
      return egress::RetryStatus::Scheduled;
    });
  }
  std::pair<egress::RetryStatus, std::uint64_t> retry_due(std::uint64_t g, std::uint64_t now) {
    return step([&]() -> std::pair<egress::RetryStatus, std::uint64_t> {
      if (g != gen_) return {egress::RetryStatus::StaleGeneration, 0};
      std::uint64_t n = 0;
      for (auto& [seq, rec] : records_)
        if (rec.state == egress::RecordState::Parked && rec.due <= now) {
          clear_parked_retry(seq, rec);
          rec.state = egress::RecordState::Pending;
          ++n;
        }
      return {egress::RetryStatus::Scheduled, n};
    });
  }
  std::pair<egress::ReconnectStatus, std::uint64_t> reconnect(std::uint64_t g) {
    return step([&]() -> std::pair<egress::ReconnectStatus, std::uint64_t> {
      if (g <= gen_) return {egress::ReconnectStatus::Refused, 0};
      gen_ = g;
      std::uint64_t moved = 0;
      for (auto& [seq, rec] : records_) {
        if (rec.state == egress::RecordState::Inflight ||
            rec.state == egress::RecordState::Parked) {
          clear_parked_retry(seq, rec);
          rec.state = egress::RecordState::Pending;
          ++moved;
        }
        if (rec.state == egress::RecordState::Pending) rec.generation = g;
      }
      return {egress::ReconnectStatus::Advanced, moved};
    });
  }
  std::optional<std::uint64_t> pop_dead_letter() {
    return step([&]() -> std::optional<std::uint64_t> {
      for (auto it = records_.begin(); it != records_.end(); ++it)
        if (it->second.state == egress::RecordState::Terminal) {
          const std::uint64_t seq = it->first;
          if (retry_ && retry_->exhausted && retry_->sequence == seq) retry_.reset();
          records_.erase(it);
          return seq;
        }
      return std::nullopt;
    });
  }

  [[nodiscard]] std::uint64_t generation() const { return gen_; }
  [[nodiscard]] std::uint64_t next_sequence() const { return next_; }
  [[nodiscard]] std::optional<std::uint64_t> acked() const { return acked_; }
  [[nodiscard]] const std::map<std::uint64_t, ModelRecord>& records() const { return records_; }
  [[nodiscard]] const std::optional<egress::RetryRecord>& retry() const { return retry_; }
  [[nodiscard]] const std::array<std::uint64_t, egress::kReaders>& versions() const {
    return versions_;
  }
  [[nodiscard]] std::uint64_t count(egress::RecordState s) const {
    return static_cast<std::uint64_t>(std::count_if(
        records_.begin(), records_.end(), [&](const auto& kv) { return kv.second.state == s; }));
  }

 private:
  void clear_parked_retry(std::uint64_t seq, const ModelRecord& rec) {
    if (rec.state == egress::RecordState::Parked && retry_ && !retry_->exhausted &&
        retry_->sequence == seq)
      retry_.reset();
  }

  egress::ParamBlock p_;
  std::uint64_t gen_ = 1;
  std::uint64_t next_ = 0;
  std::optional<std::uint64_t> acked_;
  std::map<std::uint64_t, ModelRecord> records_;
  std::optional<egress::RetryRecord> retry_;
  std::array<std::uint64_t, egress::kReaders> versions_{};
};

}  // namespace shm::test
