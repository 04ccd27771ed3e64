// The egress cores the conformance and property tests drive: the in-process
// core (LocalEgress) and the segment-backed one (every call through the Egress
// handle: the robust mutex, the seqlock, the wake-ups).
#pragma once

#include "common/temp_root.hpp"
#include "shm/egress/core.hpp"
#include "shm/egress/egress.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>

namespace shm::test {

enum class SubjectKind { InProcess, Segment };

class EgressSubject {
 public:
  virtual ~EgressSubject() = default;
  [[nodiscard]] virtual egress::EgressCore& core() = 0;
  virtual Result<egress::EnqueueOutcome> enqueue(std::span<const std::byte> payload,
                                                 std::uint64_t now) = 0;
  virtual egress::ClaimOutcome claim(std::uint64_t g) = 0;
  virtual egress::AckOutcome ack(std::uint64_t g, std::uint64_t through) = 0;
  virtual egress::FailOutcome fail(std::uint64_t g, std::uint64_t seq, std::uint64_t now) = 0;
  virtual egress::RetryOutcome retry_now(std::uint64_t g, std::uint64_t seq) = 0;
  virtual egress::RetryOutcome retry_due(std::uint64_t g, std::uint64_t now) = 0;
  virtual egress::ReconnectOutcome reconnect(std::uint64_t g) = 0;
  virtual std::optional<egress::RecordView> pop_dead_letter() = 0;
  virtual egress::Projection project() = 0;
  // The payload of the last Claimed outcome (copied out).
  std::string last_payload;
};

class LocalSubject final : public EgressSubject {
 public:
  explicit LocalSubject(const egress::ParamBlock& params)
      : local_(std::move(*egress::LocalEgress::create(params))) {}
  egress::EgressCore& core() override { return local_.core(); }
  Result<egress::EnqueueOutcome> enqueue(std::span<const std::byte> payload,
                                         std::uint64_t now) override {
    return core().enqueue(payload, now);
  }
  egress::ClaimOutcome claim(std::uint64_t g) override {
    auto out = core().claim(g);
    if (out.status == egress::ClaimStatus::Claimed)
      last_payload.assign(reinterpret_cast<const char*>(out.envelope.payload.data()),
                          out.envelope.payload.size());
    return out;
  }
  egress::AckOutcome ack(std::uint64_t g, std::uint64_t through) override {
    return core().ack(g, through);
  }
  egress::FailOutcome fail(std::uint64_t g, std::uint64_t seq, std::uint64_t now) override {
    return core().fail(g, seq, now);
  }
  egress::RetryOutcome retry_now(std::uint64_t g, std::uint64_t seq) override {
    return core().retry_now(g, seq);
  }
  egress::RetryOutcome retry_due(std::uint64_t g, std::uint64_t now) override {
    return core().retry_due(g, now);
  }
  egress::ReconnectOutcome reconnect(std::uint64_t g) override { return core().reconnect(g); }
  std::optional<egress::RecordView> pop_dead_letter() override {
    return core().pop_dead_letter(nullptr);
  }
  egress::Projection project() override { return core().project(true); }

 private:
  egress::LocalEgress local_;
};

class SegmentSubject final : public EgressSubject {
 public:
  explicit SegmentSubject(const egress::ParamBlock& p) {
    EgressParams params;
    params.max_payloads = p.capacity;
    params.slot_bytes = p.slot_bytes;
    params.inflight_limit = p.inflight_limit;
    params.retry_budget = p.retry_budget;
    params.retry_base = std::chrono::nanoseconds(p.retry_base_ns);
    params.retry_ceiling = std::chrono::nanoseconds(p.retry_ceiling_ns);
    auto e = Egress::create("subject", params);
    if (!e) throw std::runtime_error(e.error().what());
    egress_ = std::move(*e);
    core_ = egress_.core();
  }
  egress::EgressCore& core() override { return core_; }
  Result<egress::EnqueueOutcome> enqueue(std::span<const std::byte> payload,
                                         std::uint64_t now) override {
    return egress_.try_enqueue_at(payload, now);
  }
  egress::ClaimOutcome claim(std::uint64_t g) override {
    std::vector<std::byte> buf;
    auto out = must(egress_.claim(g, buf));
    if (out.status == egress::ClaimStatus::Claimed)
      last_payload.assign(reinterpret_cast<const char*>(buf.data()), buf.size());
    return out;
  }
  egress::AckOutcome ack(std::uint64_t g, std::uint64_t through) override {
    return must(egress_.ack(g, through));
  }
  egress::FailOutcome fail(std::uint64_t g, std::uint64_t seq, std::uint64_t now) override {
    return must(egress_.fail(g, seq, now));
  }
  egress::RetryOutcome retry_now(std::uint64_t g, std::uint64_t seq) override {
    return must(egress_.retry_now(g, seq));
  }
  egress::RetryOutcome retry_due(std::uint64_t g, std::uint64_t now) override {
    return must(egress_.retry_due(g, now));
  }
  egress::ReconnectOutcome reconnect(std::uint64_t g) override {
    return must(egress_.reconnect(g));
  }
  std::optional<egress::RecordView> pop_dead_letter() override {
    return must(egress_.pop_dead_letter(nullptr));
  }
  egress::Projection project() override {
    // Both reads: the locked one and another process's unlocked observation must agree.
    auto locked = must(egress_.projection(true));
    auto seen = egress_.snapshot(true);
    EXPECT_TRUE(seen.consistent);
    if (seen.consistent) {
      EXPECT_EQ(seen.records, locked.records);
    }
    return locked;
  }

 private:
  template <class T>
  static T must(Result<T> r) {
    if (!r) throw std::runtime_error(r.error().what());
    return std::move(*r);
  }
  TempRoot root_;
  Egress egress_;
  egress::EgressCore core_;
};

// Creates a fresh subject (a segment subject creates its segment under the
// current LIBSHM_ROOT, under a unique name).
inline std::unique_ptr<EgressSubject> make_subject(SubjectKind kind,
                                                   const egress::ParamBlock& params) {
  switch (kind) {
    case SubjectKind::InProcess:
      return std::make_unique<LocalSubject>(params);
    case SubjectKind::Segment:
      return std::make_unique<SegmentSubject>(params);
  }
  return nullptr;
}
inline std::string subject_name(SubjectKind kind) {
  return kind == SubjectKind::InProcess ? "InProcess" : "Segment";
}
inline const auto kAllSubjects = ::testing::Values(SubjectKind::InProcess, SubjectKind::Segment);

}  // namespace shm::test
