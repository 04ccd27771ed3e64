// Replays every case of the conformance corpus (tests/conformance/egress/*.json,
// format in its README.md) against the in-process core and the segment-backed
// core: after every step the outcome, the full projected state and the set of
// readers whose change counter moved must be the case's.
#include "common/text.hpp"
#include "egress_subjects.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace shm {
namespace {

using json = nlohmann::json;

std::vector<std::filesystem::path> corpus() {
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(
           std::filesystem::path(SHM_SOURCE_DIR) / "tests/conformance/egress", ec))
    if (entry.path().extension() == ".json") out.push_back(entry.path());
  std::sort(out.begin(), out.end());
  return out;
}

json entries(const std::vector<egress::RecordView>& records, egress::RecordState state) {
  json a = json::array();
  for (const auto& r : records)
    if (r.state == state) a.push_back({r.sequence, r.attempt, r.generation});
  return a;
}

json retry_json(const std::optional<egress::RetryRecord>& r) {
  if (!r) return nullptr;
  return {{"sequence", r->sequence},
          {"attempt", r->attempt},
          {"backoff", r->backoff_ns},
          {"exhausted", r->exhausted}};
}

json state_json(const egress::Projection& p) {
  using egress::RecordState;
  return {{"generation", p.generation},
          {"next_sequence", p.next_sequence},
          {"acked_through", p.acked_through ? json(*p.acked_through) : json(nullptr)},
          {"pending", entries(p.records, RecordState::Pending)},
          {"inflight", entries(p.records, RecordState::Inflight)},
          {"parked", entries(p.records, RecordState::Parked)},
          {"terminal", entries(p.records, RecordState::Terminal)},
          {"retry", retry_json(p.retry)}};
}

using test::bytes;

// Runs one step; returns the outcome and its details as JSON.
json run(test::EgressSubject& s, const json& step) {
  const std::string call = step.at("call");
  auto u = [&](const char* k) { return step.at(k).get<std::uint64_t>(); };
  json out;
  if (call == "enqueue") {
    auto r = s.enqueue(bytes(step.at("payload").get<std::string>()), u("now"));
    if (!r) return {{"outcome", "error: " + r.error().what()}};
    out["outcome"] = std::string(egress::to_string(r->status));
    if (r->status == egress::EnqueueStatus::Enqueued) out["sequence"] = r->sequence;
  } else if (call == "claim") {
    const auto r = s.claim(u("generation"));
    out["outcome"] = std::string(egress::to_string(r.status));
    if (r.status == egress::ClaimStatus::Claimed) {
      out["envelope"] = {r.envelope.sequence, r.envelope.attempt, r.envelope.generation};
      out["payload"] = s.last_payload;
    }
    if (r.status == egress::ClaimStatus::StaleGeneration)
      out["current_generation"] = r.current_generation;
  } else if (call == "ack") {
    const auto r = s.ack(u("generation"), u("through"));
    out["outcome"] = std::string(egress::to_string(r.status));
    if (r.status == egress::AckStatus::StaleGeneration)
      out["current_generation"] = r.current_generation;
  } else if (call == "fail") {
    const auto r = s.fail(u("generation"), u("sequence"), u("now"));
    out["outcome"] = std::string(egress::to_string(r.status));
    if (r.status == egress::FailStatus::Retrying || r.status == egress::FailStatus::Exhausted)
      out["record"] = retry_json(r.record);
    if (r.status == egress::FailStatus::StaleGeneration)
      out["current_generation"] = r.current_generation;
  } else if (call == "retry_now" || call == "retry_due") {
    const auto r = call == "retry_now" ? s.retry_now(u("generation"), u("sequence"))
                                       : s.retry_due(u("generation"), u("now"));
    out["outcome"] = std::string(egress::to_string(r.status));
    if (call == "retry_due" && r.status == egress::RetryStatus::Scheduled)
      out["scheduled"] = r.scheduled;
    if (r.status == egress::RetryStatus::StaleGeneration)
      out["current_generation"] = r.current_generation;
  } else if (call == "reconnect") {
    const auto r = s.reconnect(u("generation"));
    out["outcome"] = std::string(egress::to_string(r.status));
    if (r.status == egress::ReconnectStatus::Advanced) out["replayed"] = r.replayed;
    out["generation_after"] = r.generation;
  } else if (call == "take_dead_letter") {
    const auto r = s.pop_dead_letter();
    out["outcome"] = r ? "taken" : "none";
    if (r) out["sequence"] = r->sequence;
  } else {
    out["outcome"] = "unknown call " + call;
  }
  return out;
}

// The keys a step gives as the call's arguments (the rest are expected outcome details).
bool is_input(const std::string& call, std::string_view key) {
  if (key == "payload") return call == "enqueue";
  if (key == "sequence") return call == "fail" || call == "retry_now";
  return false;
}

class EgressConformanceTest : public ::testing::TestWithParam<test::SubjectKind> {};

TEST_P(EgressConformanceTest, EveryCorpusCaseMatchesEveryStep) {
  const auto files = corpus();
  ASSERT_GE(files.size(), 9u) << "the corpus is missing";
  for (const auto& path : files) {
    std::ifstream in(path);
    const json c = json::parse(in);
    const json& p = c.at("params");
    const egress::ParamBlock block{p.at("capacity"),     p.at("slot_bytes"), p.at("inflight_limit"),
                                   p.at("retry_budget"), p.at("retry_base"), p.at("retry_ceiling")};
    auto subject = test::make_subject(GetParam(), block);
    ASSERT_NE(subject, nullptr);
    egress::Projection before = subject->project();
    std::size_t i = 0;
    for (const json& step : c.at("steps")) {
      const std::string at = path.filename().string() + " step " + std::to_string(i++) + " (" +
                             step.at("call").get<std::string>() + ")";
      const json got = run(*subject, step);
      ASSERT_EQ(got.at("outcome"), step.at("outcome")) << at;
      // Every detail the case states must match (and the case need not state all).
      for (const char* key : {"sequence", "envelope", "payload", "record", "scheduled", "replayed",
                              "current_generation", "generation_after"})
        if (step.contains(key) && !is_input(step.at("call"), key)) {
          ASSERT_TRUE(got.contains(key)) << at << ": no " << key;
          ASSERT_EQ(got.at(key), step.at(key)) << at << ": " << key;
        }
      const egress::Projection after = subject->project();
      ASSERT_EQ(state_json(after), step.at("state")) << at;
      json moved = json::array();
      for (std::size_t r = 0; r < egress::kReaders; ++r) {
        ASSERT_LE(after.reader_versions[r], before.reader_versions[r] + 1) << at;
        if (after.reader_versions[r] != before.reader_versions[r])
          moved.push_back(std::string(egress::to_string(static_cast<egress::Reader>(r))));
      }
      json want = step.at("invalidated");
      ASSERT_EQ(moved, want) << at;
      ASSERT_TRUE(subject->core().check().empty()) << at << ": " << subject->core().check()[0];
      before = after;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Subjects, EgressConformanceTest, test::kAllSubjects,
                         [](const ::testing::TestParamInfo<test::SubjectKind>& p) {
                           return test::subject_name(p.param);
                         });

}  // namespace
}  // namespace shm
