// Every public enum has a to_string in namespace shm (docs/idioms.md,
// "Results"), and every enumerator's name is non-empty, not the fallback
// ("unknown") and distinct from its siblings'. The enums' values are
// contiguous: each is checked over [first, last].
#include "shm/bridge/state_layout.hpp"
#include "shm/platform/file.hpp"
#include "shm/platform/futex.hpp"
#include "shm/shm.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <string_view>
#include <type_traits>

namespace shm::enum_names_test {
namespace {

template <class E>
void check(const char* what, E first, E last) {
  using U = std::underlying_type_t<E>;
  std::set<std::string> seen;
  for (auto u = static_cast<std::uint64_t>(static_cast<U>(first));
       u <= static_cast<std::uint64_t>(static_cast<U>(last)); ++u) {
    const std::string_view name = shm::to_string(static_cast<E>(static_cast<U>(u)));
    EXPECT_FALSE(name.empty()) << what << " value " << u;
    EXPECT_NE(name, "unknown") << what << " value " << u;
    EXPECT_TRUE(seen.insert(std::string(name)).second)
        << what << " value " << u << " repeats the name " << name;
  }
  EXPECT_GT(seen.size(), 1u) << what;
}

TEST(EnumNames, EveryEnumeratorOfEveryPublicEnumHasADistinctName) {
  check("Errc", Errc::InvalidName, Errc::HeldLimit);
  // segment
  check("EventType", EventType::Created, EventType::Reclaimed);
  check("SegmentState", SegmentState::Initializing, SegmentState::Ready);
  check("SegmentFlags", SegmentFlags::None, SegmentFlags::Ephemeral);
  check("SlotState", SlotState::Free, SlotState::Attached);
  check("Liveness", Liveness::Free, Liveness::Dead);
  check("ReclaimStatus", ReclaimStatus::Reclaimed, ReclaimStatus::Changed);
  check("Node::Type", Node::Type::Value, Node::Type::Array);
  check("Node::Metric", Node::Metric::None, Node::Metric::Gauge);
  check("LockProbe", LockProbe::Free, LockProbe::Held);
  check("WaitResult", WaitResult::Woken, WaitResult::Interrupted);
  // waitset
  check("ReadyReason", ReadyReason::Data, ReadyReason::Closed);
  check("WaitStatus", WaitStatus::Ready, WaitStatus::Closed);
  // ring
  check("ring::SlotState", ring::SlotState::Empty, ring::SlotState::Foreign);
  check("ring::RecordCheck", ring::RecordCheck::Data, ring::RecordCheck::BadLength);
  // channel
  check("SendStatus", SendStatus::Ok, SendStatus::PageQuotaExhausted);
  check("ReceiveStatus", ReceiveStatus::Received, ReceiveStatus::End);
  check("ChannelFault", ChannelFault::None, ChannelFault::ProducerDied);
  check("ChannelState", ChannelState::Open, ChannelState::Corrupt);
  // topic
  check("TopicOverflow", TopicOverflow::DropOldest, TopicOverflow::Block);
  check("PublishStatus", PublishStatus::Published, PublishStatus::Full);
  // mpmc
  check("mpmc::Side", mpmc::Side::Push, mpmc::Side::Pop);
  check("mpmc::RepairStatus", mpmc::RepairStatus::NotHeld, mpmc::RepairStatus::Repaired);
  // ledger
  check("Partition", Partition::Ordinary, Partition::Control);
  check("LedgerScope", LedgerScope::Tickets, LedgerScope::Bucket);
  check("AdmitStatus", AdmitStatus::Admitted, AdmitStatus::TableFull);
  check("ledger::PoolStatus", ledger::PoolStatus::Free, ledger::PoolStatus::Open);
  check("ledger::TicketState", ledger::TicketState::Free, ledger::TicketState::Committed);
  check("ledger::JournalOp", ledger::JournalOp::None, ledger::JournalOp::HandOver);
  // relay
  check("WriteStatus", WriteStatus::Appended, WriteStatus::TimedOut);
  check("TakeStatus", TakeStatus::Delivered, TakeStatus::Rate);
  check("Overflow", Overflow::Block, Overflow::Spill);
  check("Dimension", Dimension::Count, Dimension::Age);
  check("EgressOrder", EgressOrder::Arrival, EgressOrder::Reordering);
  check("SealMode", SealMode::Inline, SealMode::Background);
  check("CatchUp", CatchUp::PageByPage, CatchUp::Conflated);
  check("Traffic", Traffic::State, Traffic::Events);
  check("relay::EventKind", relay::EventKind::Dropped, relay::EventKind::PageExpired);
  check("relay::EntryState", relay::EntryState::Free, relay::EntryState::InHand);
  check("relay::HeadIntent", relay::HeadIntent::None, relay::HeadIntent::Remember);
  check("relay::SlotState", relay::SlotState::Free, relay::SlotState::Acked);
  check("relay::SpillIntent", relay::SpillIntent::None, relay::SpillIntent::Refuse);
  check("relay::SpillMode", relay::SpillMode::AppendCompact, relay::SpillMode::CompactOnWrite);
  check("relay::RetentionKind", relay::RetentionKind::UnboundedLog, relay::RetentionKind::Ttl);
  check("relay::Rehydrate", relay::Rehydrate::Sequential, relay::Rehydrate::Parallel);
  check("spill::SealStep", spill::SealStep::ContentWritten, spill::SealStep::DirSynced);
  // egress
  check("egress::EnqueueStatus", egress::EnqueueStatus::Enqueued, egress::EnqueueStatus::Full);
  check("egress::ClaimStatus", egress::ClaimStatus::Claimed, egress::ClaimStatus::StaleGeneration);
  check("egress::AckStatus", egress::AckStatus::Advanced, egress::AckStatus::StaleGeneration);
  check("egress::FailStatus", egress::FailStatus::Retrying, egress::FailStatus::StaleGeneration);
  check("egress::RetryStatus", egress::RetryStatus::Scheduled,
        egress::RetryStatus::StaleGeneration);
  check("egress::ReconnectStatus", egress::ReconnectStatus::Advanced,
        egress::ReconnectStatus::Refused);
  check("egress::RecordState", egress::RecordState::Free, egress::RecordState::Terminal);
  check("egress::Reader", egress::Reader::Pending, egress::Reader::Retry);
  check("egress::JournalOp", egress::JournalOp::None, egress::JournalOp::Reconnect);
  // bridge
  check("bridge::Route", bridge::Route::Export, bridge::Route::Import);
}

}  // namespace
}  // namespace shm::enum_names_test
