// The bridge_state kind as shmctl and the sidecar see it: describe shows the
// route, the intent and the counters; verify reports impossible states.
#include "common/node_fields.hpp"
#include "common/temp_root.hpp"
#include "shm/bridge/state_layout.hpp"
#include "shm/segment/kind.hpp"

#include <gtest/gtest.h>

#include <string>
#include <variant>

namespace shm {
namespace {

using bridge::Route;
using bridge::StateData;
using bridge::StateParams;

class BridgeStateKindTest : public ::testing::Test {
 protected:
  Segment make(const std::string& name, Route route) {
    const StateParams params{.route = static_cast<std::uint32_t>(route)};
    auto seg = Segment::create(name, bridge::state_spec(params), {.root = root_.path()},
                               bridge::init_state);
    EXPECT_TRUE(seg) << seg.error().what();
    return std::move(*seg);
  }
  static StateData& data(const Segment& seg) {
    return *reinterpret_cast<StateData*>(seg.data().data());
  }
  static std::string text(const Node& n, std::string_view key) {
    const Node* f = n.find(key);
    if (f == nullptr) return "<missing>";
    const auto* s = std::get_if<std::string>(&f->value());
    return s != nullptr ? *s : "<not a string>";
  }
  test::TempRoot root_;
};

TEST_F(BridgeStateKindTest, IsInTheKindTableUnderItsOwnId) {
  const KindDescriptor* kind = find_kind(kBridgeStateKind);
  ASSERT_NE(kind, nullptr) << "shmctl and the sidecar would show the bridge state as unknown(9)";
  EXPECT_EQ(kind->name, "bridge_state");
  EXPECT_EQ(kind->fingerprint, bridge::kStateFingerprint);
}

TEST_F(BridgeStateKindTest, AFreshStateOfEitherRouteDescribesNoIntentAndVerifiesClean) {
  for (const Route route : {Route::Export, Route::Import}) {
    const std::string name = std::string("state-") + std::string(bridge::to_string(route));
    Segment seg = make(name, route);
    Node n;
    kBridgeStateDescriptor.describe(seg, n);
    const Node* params = n.find("params");
    ASSERT_NE(params, nullptr);
    EXPECT_EQ(text(*params, "route"), bridge::to_string(route));
    EXPECT_EQ(text(n, "last_intent"), "none");
    const Node* counters = n.find("counters");
    ASSERT_NE(counters, nullptr);
    EXPECT_EQ(test::u64(*counters, "moved"), 0u);
    EXPECT_TRUE(kBridgeStateDescriptor.verify(seg).empty()) << name;
  }
}

TEST_F(BridgeStateKindTest, DescribeShowsTheImportIntentTheAppliedMessageAndTheCounters) {
  Segment seg = make("import", Route::Import);
  StateData& d = data(seg);
  d.applied_stream_seq = 41;
  d.applied_src_incarnation = 7;
  d.applied_src_seq = 100;
  d.intent_ring_tail = 4096;
  d.intent_src_incarnation = 7;
  d.intent_src_seq = 101;
  d.intent_stream_seq = 42;
  d.moved = 41;
  d.duplicates = 3;
  Node n;
  kBridgeStateDescriptor.describe(seg, n);
  const Node* applied = n.find("applied");
  ASSERT_NE(applied, nullptr);
  EXPECT_EQ(test::u64(*applied, "stream_sequence"), 41u);
  EXPECT_EQ(text(*applied, "message_id"), "7-100");
  const Node* intent = n.find("last_intent");
  ASSERT_NE(intent, nullptr);
  EXPECT_EQ(test::u64(*intent, "stream_sequence"), 42u);
  EXPECT_EQ(test::u64(*intent, "ring_tail"), 4096u);
  EXPECT_EQ(text(*intent, "message_id"), "7-101");
  const Node* done = intent->find("applied");
  ASSERT_NE(done, nullptr);
  EXPECT_EQ(std::get<bool>(done->value()), false);  // 42 is past the applied 41
  const Node* counters = n.find("counters");
  ASSERT_NE(counters, nullptr);
  EXPECT_EQ(test::u64(*counters, "moved"), 41u);
  EXPECT_EQ(test::u64(*counters, "duplicates"), 3u);
  EXPECT_TRUE(kBridgeStateDescriptor.verify(seg).empty());
}

TEST_F(BridgeStateKindTest, DescribeShowsTheExportIntent) {
  Segment seg = make("export", Route::Export);
  data(seg).export_intent_head = 512;
  data(seg).export_intent_seq = 9;
  Node n;
  kBridgeStateDescriptor.describe(seg, n);
  const Node* intent = n.find("last_intent");
  ASSERT_NE(intent, nullptr);
  EXPECT_EQ(test::u64(*intent, "ring_head"), 512u);
  EXPECT_EQ(test::u64(*intent, "egress_sequence"), 9u);
}

TEST_F(BridgeStateKindTest, VerifyReportsAnImportIntentOlderThanTheAppliedSequence) {
  Segment seg = make("import", Route::Import);
  data(seg).applied_stream_seq = 10;
  data(seg).intent_stream_seq = 10;  // a bridge killed after applying: not a problem
  EXPECT_TRUE(kBridgeStateDescriptor.verify(seg).empty());
  data(seg).intent_stream_seq = 9;
  const auto problems = kBridgeStateDescriptor.verify(seg);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("stream sequence 9 is older than the applied sequence 10"),
            std::string::npos)
      << problems[0];
}

TEST_F(BridgeStateKindTest, VerifyReportsTheOtherRoutesWordsInAState) {
  Segment exp = make("export", Route::Export);
  data(exp).applied_stream_seq = 3;
  auto problems = kBridgeStateDescriptor.verify(exp);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("an export route's state holds import sequences"), std::string::npos);
  Segment imp = make("import", Route::Import);
  data(imp).export_intent_seq = 5;
  problems = kBridgeStateDescriptor.verify(imp);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("an import route's state holds an export intent"), std::string::npos);
}

TEST_F(BridgeStateKindTest, VerifyAndDescribeNameAnUnknownRoute) {
  const StateParams params{.route = 7};
  auto seg = Segment::create("odd", bridge::state_spec(params), {.root = root_.path()},
                             bridge::init_state);
  ASSERT_TRUE(seg) << seg.error().what();
  const auto problems = kBridgeStateDescriptor.verify(*seg);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems[0].find("route 7 is neither export (1) nor import (2)"), std::string::npos);
  Node n;
  kBridgeStateDescriptor.describe(*seg, n);
  ASSERT_NE(n.find("params"), nullptr);
  EXPECT_EQ(text(*n.find("params"), "route"), "unknown(7)");
}

TEST_F(BridgeStateKindTest, ReclaimOfADeadBridgeLeavesItsIntentForTheNextOne) {
  Segment seg = make("export", Route::Export);
  data(seg).export_intent_head = 64;
  data(seg).export_intent_seq = 2;
  const SlotInfo dead{.index = 0, .role = bridge::kBridgeRole.id, .pid = 12345};
  auto lines = kBridgeStateDescriptor.reclaim(seg, dead);
  ASSERT_TRUE(lines) << lines.error().what();
  ASSERT_EQ(lines->size(), 1u);
  EXPECT_NE((*lines)[0].find("intent stays for the next bridge"), std::string::npos);
  EXPECT_EQ(data(seg).export_intent_seq.load(), 2u);
  EXPECT_EQ(data(seg).export_intent_head.load(), 64u);
}

}  // namespace
}  // namespace shm
