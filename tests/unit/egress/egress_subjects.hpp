// The egress cores the conformance and property tests drive: the in-process
// core (LocalEgress) and the segment-backed one (every call through the Egress
// handle: the robust mutex, the seqlock, the wake-ups).
#pragma once

#include "shm/egress/core.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <span>
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
  virtual std::optional<egress::RecordView> take_dead_letter() = 0;
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
  std::optional<egress::RecordView> take_dead_letter() override {
    return core().take_dead_letter(nullptr);
  }
  egress::Projection project() override { return core().project(true); }

 private:
  egress::LocalEgress local_;
};

// Creates a fresh subject (a segment subject creates its segment under the
// current LIBSHM_ROOT, under a unique name).
inline std::unique_ptr<EgressSubject> make_subject(SubjectKind kind,
                                                   const egress::ParamBlock& params) {
  switch (kind) {
    case SubjectKind::InProcess:
      return std::make_unique<LocalSubject>(params);
    case SubjectKind::Segment:
      break;
  }
  return nullptr;
}
inline std::string subject_name(SubjectKind kind) {
  return kind == SubjectKind::InProcess ? "InProcess" : "Segment";
}
inline const auto kAllSubjects = ::testing::Values(SubjectKind::InProcess);

}  // namespace shm::test
