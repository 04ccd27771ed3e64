// A process killed -9 inside every egress crash point (the mutex held, an
// operation half done): the next locker repairs, and the state is exactly the
// one before or the one after that operation (computed by replaying the same
// history on an in-process core).
#include "common/subprocess.hpp"
#include "common/temp_root.hpp"
#include "shm/egress/egress.hpp"
#include "shm/segment/kind.hpp"

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <functional>
#include <string>

namespace shm {
namespace {

using namespace std::chrono_literals;

constexpr egress::ParamBlock kBlock{8, 16, 4, 2, 100, 1000};

EgressParams params() {
  EgressParams p;
  p.max_payloads = kBlock.capacity;
  p.slot_bytes = kBlock.slot_bytes;
  p.inflight_limit = kBlock.inflight_limit;
  p.retry_budget = kBlock.retry_budget;
  p.retry_base = std::chrono::nanoseconds(kBlock.retry_base_ns);
  p.retry_ceiling = std::chrono::nanoseconds(kBlock.retry_ceiling_ns);
  return p;
}

const std::byte kPayload[3] = {std::byte{'a'}, std::byte{'b'}, std::byte{'c'}};

// The history before the crash: 5 enqueued, 3 claimed, record 1 failed (parked).
template <class Enqueue, class Claim, class Fail>
void history(Enqueue&& enqueue, Claim&& claim, Fail&& fail) {
  for (int i = 0; i < 5; ++i) enqueue();
  for (int i = 0; i < 3; ++i) claim();
  fail();
}

struct Same {
  std::uint64_t generation, next_sequence;
  std::optional<std::uint64_t> acked;
  std::uint64_t pending, inflight, parked, terminal;
  std::optional<egress::RetryRecord> retry;
  std::optional<std::uint64_t> next_due;
  std::vector<egress::RecordView> records;
  friend bool operator==(const Same&, const Same&) = default;
};
Same same(const egress::Projection& p) {
  return Same{p.generation, p.next_sequence, p.acked_through, p.pending,     p.inflight,
              p.parked,     p.terminal,      p.retry,         p.next_due_ns, p.records};
}

struct EgressCrashCase {
  const char* point;
  bool rolls_forward;  // redo (the state after) rather than undo (before)
  std::function<void(egress::EgressCore&)> op;
};

class EgressCrashTest : public ::testing::TestWithParam<EgressCrashCase> {
 protected:
  test::TempRoot root_;
};

TEST_P(EgressCrashTest, KilledInsideTheLockLeavesTheStateBeforeOrAfterTheOperation) {
  const EgressCrashCase& c = GetParam();
  auto e = Egress::create("crashy", params());
  ASSERT_TRUE(e);
  std::vector<std::byte> buf;
  history([&] { ASSERT_TRUE(e->try_enqueue_at(kPayload, 0)); },
          [&] { ASSERT_EQ(e->claim(1, buf)->status, egress::ClaimStatus::Claimed); },
          [&] { ASSERT_EQ(e->fail(1, 1, 10)->status, egress::FailStatus::Retrying); });
  auto local = egress::LocalEgress::create(kBlock);
  ASSERT_TRUE(local);
  egress::EgressCore& core = local->core();
  history([&] { ASSERT_TRUE(core.enqueue(kPayload, 0)); },
          [&] { ASSERT_EQ(core.claim(1).status, egress::ClaimStatus::Claimed); },
          [&] { ASSERT_EQ(core.fail(1, 1, 10).status, egress::FailStatus::Retrying); });
  const Same before = same(core.project(true));
  ASSERT_EQ(same(*e->projection(true)), before);
  c.op(core);
  const Same after = same(core.project(true));
  ASSERT_NE(before, after);

  test::Subprocess helper({test::helper_path("egress_worker"), "crash", "crashy", c.point});
  ASSERT_TRUE(helper.wait_for_line("inside", 20s)) << helper.output();
  helper.kill(SIGKILL);
  ASSERT_EQ(helper.wait(20s), 128 + SIGKILL) << helper.output();

  // Mid-operation, verify (lock-free) says a holder stopped inside.
  auto any = Segment::open_any("crashy", {});
  ASSERT_TRUE(any);
  const auto lines = kEgressDescriptor.verify(*any);
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines[0].find("stopped inside an operation"), std::string::npos) << lines[0];

  // The next locker repairs.
  auto repaired = e->projection(true);
  ASSERT_TRUE(repaired) << repaired.error().what();
  EXPECT_EQ(same(*repaired), c.rolls_forward ? after : before) << c.point;
  EXPECT_TRUE(e->verify()->empty()) << e->verify()->front();
  EXPECT_TRUE(kEgressDescriptor.verify(*any).empty());
  // And it goes on working.
  EXPECT_TRUE(e->try_enqueue_at(kPayload, 30));
}

INSTANTIATE_TEST_SUITE_P(
    CrashPoints, EgressCrashTest,
    ::testing::Values(
        EgressCrashCase{"enqueue", false,
                        [](egress::EgressCore& c) { (void)c.enqueue(kPayload, 20); }},
        EgressCrashCase{"claim", false, [](egress::EgressCore& c) { (void)c.claim(1); }},
        EgressCrashCase{"fail", false, [](egress::EgressCore& c) { (void)c.fail(1, 2, 20); }},
        EgressCrashCase{"ack", true, [](egress::EgressCore& c) { (void)c.ack(1, 3); }},
        EgressCrashCase{"retry-due", true,
                        [](egress::EgressCore& c) { (void)c.retry_due(1, 1000); }},
        EgressCrashCase{"reconnect", true, [](egress::EgressCore& c) { (void)c.reconnect(2); }}),
    [](const ::testing::TestParamInfo<EgressCrashCase>& p) {
      std::string n = p.param.point;
      for (char& ch : n)
        if (ch == '-') ch = '_';
      return n;
    });

}  // namespace
}  // namespace shm

namespace shm {
namespace {

// shmctl sees the kind through its descriptor: inspect shows the projections,
// verify runs the invariant check.
TEST(EgressShmctlTest, InspectShowsTheProjectionsAndVerifyIsClean) {
  if (!std::filesystem::exists(test::bin_path("shmctl"))) {
#if SHM_EXPECT_TOOLS
    FAIL() << test::bin_path("shmctl") << " is missing although LIBSHM_BUILD_TOOLS is ON";
#else
    GTEST_SKIP() << "LIBSHM_BUILD_TOOLS is OFF";
#endif
  }
  test::TempRoot root;
  auto e = Egress::create("shown", params());
  ASSERT_TRUE(e);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(e->try_enqueue_at(kPayload, 0));
  std::vector<std::byte> buf;
  ASSERT_EQ(e->claim(1, buf)->status, egress::ClaimStatus::Claimed);
  ASSERT_EQ(e->ack(1, 0)->status, egress::AckStatus::Advanced);
  test::Subprocess inspect(
      {test::bin_path("shmctl"), "inspect", "--json", "--root", root.path(), "shown"});
  ASSERT_EQ(inspect.wait(20s), 0) << inspect.output();
  const std::string& out = inspect.output();
  for (const char* key : {"\"kind\": \"egress\"", "\"next_sequence\": 3", "\"acked_through\": 0",
                          "\"pending\": 2", "\"inflight\": 0", "\"transport\""})
    EXPECT_NE(out.find(key), std::string::npos) << key << " not in " << out;
  test::Subprocess verify({test::bin_path("shmctl"), "verify", "--root", root.path(), "shown"});
  EXPECT_EQ(verify.wait(20s), 0) << verify.output();
}

}  // namespace
}  // namespace shm
