// The specification's five properties over random operation sequences, with
// the core compared to a naive reference model (egress_model.hpp) after every
// step: outcome, every retained record, the counts, the retry reader and the
// four readers' change counters. Runs against the in-process core and the
// segment-backed core (egress_subjects.hpp).
#include "egress_model.hpp"
#include "egress_subjects.hpp"

#include "common/scale.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>

namespace shm {
namespace {

using egress::RecordState;

constexpr egress::ParamBlock kParams{8, 8, 3, 2, 100, 350};

void expect_same(const egress::Projection& p, const test::EgressModel& m, const std::string& at) {
  ASSERT_EQ(p.generation, m.generation()) << at;
  ASSERT_EQ(p.next_sequence, m.next_sequence()) << at;
  ASSERT_EQ(p.acked_through, m.acked()) << at;
  ASSERT_EQ(p.retry, m.retry()) << at;
  ASSERT_EQ(p.pending, m.count(RecordState::Pending)) << at;
  ASSERT_EQ(p.inflight, m.count(RecordState::Inflight)) << at;
  ASSERT_EQ(p.parked, m.count(RecordState::Parked)) << at;
  ASSERT_EQ(p.terminal, m.count(RecordState::Terminal)) << at;
  ASSERT_EQ(p.reader_versions, m.versions()) << at;
  ASSERT_EQ(p.records.size(), m.records().size()) << at;
  std::size_t i = 0;
  for (const auto& [seq, rec] : m.records()) {
    const egress::RecordView want{seq, rec.attempt, rec.generation, rec.state};
    ASSERT_EQ(p.records[i], want) << at << " record " << i;
    ++i;
  }
}

bool same_state(const egress::Projection& a, const egress::Projection& b) {
  return a.generation == b.generation && a.next_sequence == b.next_sequence &&
         a.acked_through == b.acked_through && a.retry == b.retry && a.pending == b.pending &&
         a.inflight == b.inflight && a.parked == b.parked && a.terminal == b.terminal &&
         a.reader_versions == b.reader_versions && a.records == b.records &&
         a.next_due_ns == b.next_due_ns;
}

void run_seed(test::EgressSubject& subject, unsigned seed, int steps) {
  egress::EgressCore& core = subject.core();
  test::EgressModel model(kParams);
  std::mt19937 rng(seed);
  auto pick = [&](std::uint64_t n) { return static_cast<std::uint64_t>(rng() % n); };
  std::uint64_t now = 0;
  const std::byte payload[4] = {std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}};
  egress::Projection before = subject.project();
  std::map<std::uint64_t, std::uint32_t> retries;  // Retrying outcomes per sequence
  for (int i = 0; i < steps; ++i) {
    now += pick(200);
    const std::string at = "seed " + std::to_string(seed) + " step " + std::to_string(i);
    // A generation that is sometimes stale (or from the future).
    const std::uint64_t g = pick(5) == 0 ? model.generation() + pick(3) - 1 : model.generation();
    const bool stale = g != model.generation();
    const std::uint64_t seq = pick(model.next_sequence() + 2);
    bool unchanged = false;  // a stale send-side call or a refused reconnect
    switch (pick(9)) {
      case 0:
      case 1: {
        auto r = subject.enqueue(payload, now);
        ASSERT_TRUE(r) << at;
        ASSERT_EQ(r->status, model.enqueue(now)) << at;
        break;
      }
      case 2:
      case 3: {
        unchanged = stale;
        const auto want = model.claim(g);
        const auto got = subject.claim(g);
        ASSERT_EQ(got.status, want.first) << at;
        if (got.status == egress::ClaimStatus::Claimed) {
          ASSERT_EQ(got.envelope.sequence, want.second) << at;
        }
        break;
      }
      case 4: {
        unchanged = stale;
        const std::uint64_t through = model.acked().value_or(0) + pick(4) - (model.acked() ? 1 : 0);
        ASSERT_EQ(subject.ack(g, through).status, model.ack(g, through)) << at;
        break;
      }
      case 5:
        unchanged = stale;
        {
          const auto got = subject.fail(g, seq, now);
          ASSERT_EQ(got.status, model.fail(g, seq, now)) << at;
          // Property 5: a record is granted at most retry_budget retries; the
          // failure after the last one is terminal. (Attempts also count the
          // re-sends a reconnect replays, which the budget does not limit.)
          if (got.status == egress::FailStatus::Retrying) {
            ASSERT_LE(++retries[seq], kParams.retry_budget) << at;
          }
          if (got.status == egress::FailStatus::Exhausted) {
            ASSERT_LE(retries[seq], std::min(kParams.retry_budget, got.record.attempt - 1)) << at;
            ASSERT_TRUE(got.record.exhausted) << at;
          }
          break;
        }
      case 6: {
        unchanged = stale;
        if (pick(2) == 0) {
          ASSERT_EQ(subject.retry_now(g, seq).status, model.retry_now(g, seq)) << at;
        } else {
          const auto want = model.retry_due(g, now);
          const auto got = subject.retry_due(g, now);
          ASSERT_EQ(got.status, want.first) << at;
          ASSERT_EQ(got.scheduled, want.second) << at;
        }
        break;
      }
      case 7: {
        const std::uint64_t ng = model.generation() + pick(3) - 1;
        const auto want = model.reconnect(ng);
        const auto got = subject.reconnect(ng);
        ASSERT_EQ(got.status, want.first) << at;
        ASSERT_EQ(got.replayed, want.second) << at;
        unchanged = got.status == egress::ReconnectStatus::Refused;
        break;
      }
      default: {
        const auto want = model.pop_dead_letter();
        const auto got = subject.pop_dead_letter();
        ASSERT_EQ(got.has_value(), want.has_value()) << at;
        if (got) {
          ASSERT_EQ(got->sequence, *want) << at;
        }
        break;
      }
    }
    const egress::Projection after = subject.project();
    expect_same(after, model, at);
    ASSERT_TRUE(core.check().empty()) << at << ": " << core.check().front();
    // Property 1: sequence assignment is monotone.
    ASSERT_GE(after.next_sequence, before.next_sequence) << at;
    // Property 2: acknowledgement progress is monotone.
    if (before.acked_through) {
      ASSERT_TRUE(after.acked_through.has_value()) << at;
      ASSERT_GE(*after.acked_through, *before.acked_through) << at;
    }
    // Property 3: a stale send-side call (and a refused reconnect) changes nothing.
    if (unchanged) {
      ASSERT_TRUE(same_state(before, after)) << at;
    }
    // Property 4: reconnect advances the generation and keeps the watermark.
    if (after.generation != before.generation) {
      ASSERT_GT(after.generation, before.generation) << at;
      ASSERT_EQ(after.acked_through, before.acked_through) << at;
      ASSERT_EQ(after.next_sequence, before.next_sequence) << at;
    }
    // Property 5 (state side): a parked record still has budget left.
    for (const egress::RecordView& r : after.records)
      if (r.state == RecordState::Parked) {
        ASSERT_LE(r.attempt, kParams.retry_budget) << at;
      }
    before = after;
  }
}

// Property 3 on its own: every send-side call with a stale generation leaves
// the whole projection (readers' counters included) unchanged.
void run_stale(test::EgressSubject& subject, unsigned seed) {
  std::mt19937 rng(seed);
  const std::byte payload[1] = {std::byte{7}};
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(subject.enqueue(payload, 0));
  const std::uint64_t g = subject.core().generation();
  ASSERT_EQ(subject.claim(g).status, egress::ClaimStatus::Claimed);
  ASSERT_EQ(subject.claim(g).status, egress::ClaimStatus::Claimed);
  ASSERT_EQ(subject.fail(g, 1, 10).status, egress::FailStatus::Retrying);
  ASSERT_EQ(subject.reconnect(g + 1).status, egress::ReconnectStatus::Advanced);
  const std::uint64_t g2 = g + 1;
  ASSERT_EQ(subject.claim(g2).status, egress::ClaimStatus::Claimed);
  const egress::Projection before = subject.project();
  for (int i = 0; i < 40; ++i) {
    const std::uint64_t stale = rng() % 2 == 0 ? g : g2 + 1 + rng() % 3;
    const std::uint64_t seq = rng() % 7;
    switch (rng() % 5) {
      case 0:
        ASSERT_EQ(subject.claim(stale).status, egress::ClaimStatus::StaleGeneration);
        break;
      case 1:
        ASSERT_EQ(subject.ack(stale, seq).status, egress::AckStatus::StaleGeneration);
        break;
      case 2:
        ASSERT_EQ(subject.fail(stale, seq, 5).status, egress::FailStatus::StaleGeneration);
        break;
      case 3:
        ASSERT_EQ(subject.retry_now(stale, seq).status, egress::RetryStatus::StaleGeneration);
        break;
      default:
        ASSERT_EQ(subject.retry_due(stale, 1'000'000).status, egress::RetryStatus::StaleGeneration);
        break;
    }
    ASSERT_TRUE(same_state(before, subject.project())) << "stale call " << i;
  }
}

class EgressPropertyTest : public ::testing::TestWithParam<test::SubjectKind> {};

TEST_P(EgressPropertyTest, RandomSequencesMatchTheReferenceModelAndKeepTheFiveProperties) {
  const int seeds = static_cast<int>(test::scaled(300));
  for (int s = 0; s < seeds; ++s) {
    auto subject = test::make_subject(GetParam(), kParams);
    ASSERT_NO_FATAL_FAILURE(run_seed(*subject, static_cast<unsigned>(s), 120));
  }
}

TEST_P(EgressPropertyTest, StaleGenerationCallsChangeNoStateAndMoveNoReader) {
  for (unsigned s = 0; s < 20; ++s) {
    auto subject = test::make_subject(GetParam(), kParams);
    ASSERT_NO_FATAL_FAILURE(run_stale(*subject, s));
  }
}

INSTANTIATE_TEST_SUITE_P(Subjects, EgressPropertyTest, test::kAllSubjects,
                         [](const ::testing::TestParamInfo<test::SubjectKind>& p) {
                           return test::subject_name(p.param);
                         });

}  // namespace
}  // namespace shm
