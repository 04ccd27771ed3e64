// The names of the public enums that have no other home for their
// to_string (the layouts' state words, the handles' modes): every public enum
// has one in namespace shm (docs/idioms.md, "Results"), and the ctest
// EnumNames.* checks that every enumerator's name is non-empty and distinct.
#include "shm/egress/layout.hpp"
#include "shm/ledger/keyed_buckets.hpp"
#include "shm/ledger/layout.hpp"
#include "shm/mpmc/layout.hpp"
#include "shm/platform/file.hpp"
#include "shm/platform/futex.hpp"
#include "shm/relay/layout.hpp"
#include "shm/relay/relay.hpp"
#include "shm/segment/describe.hpp"
#include "shm/segment/header.hpp"
#include "shm/spill/page.hpp"
#include "shm/spsc/layout.hpp"

namespace shm {

std::string_view to_string(LockProbe v) noexcept {
  switch (v) {
    case LockProbe::Free:
      return "free";
    case LockProbe::Held:
      return "held";
  }
  return "unknown";
}

std::string_view to_string(WaitResult v) noexcept {
  switch (v) {
    case WaitResult::Woken:
      return "woken";
    case WaitResult::ValueChanged:
      return "value_changed";
    case WaitResult::TimedOut:
      return "timed_out";
    case WaitResult::Interrupted:
      return "interrupted";
  }
  return "unknown";
}

std::string_view to_string(SealMode v) noexcept {
  switch (v) {
    case SealMode::Inline:
      return "inline";
    case SealMode::Background:
      return "background";
  }
  return "unknown";
}

std::string_view to_string(CatchUp v) noexcept {
  switch (v) {
    case CatchUp::PageByPage:
      return "page_by_page";
    case CatchUp::Conflated:
      return "conflated";
  }
  return "unknown";
}

std::string_view to_string(Traffic v) noexcept {
  switch (v) {
    case Traffic::State:
      return "state";
    case Traffic::Events:
      return "events";
  }
  return "unknown";
}

std::string_view to_string(SegmentState v) noexcept {
  switch (v) {
    case SegmentState::Initializing:
      return "initializing";
    case SegmentState::Ready:
      return "ready";
  }
  return "unknown";
}

std::string_view to_string(SegmentFlags v) noexcept {
  switch (v) {
    case SegmentFlags::None:
      return "none";
    case SegmentFlags::Ephemeral:
      return "ephemeral";
  }
  return "unknown";
}

std::string_view to_string(SlotState v) noexcept {
  switch (v) {
    case SlotState::Free:
      return "free";
    case SlotState::Attached:
      return "attached";
  }
  return "unknown";
}

std::string_view to_string(AdmitStatus v) noexcept {
  switch (v) {
    case AdmitStatus::Admitted:
      return "admitted";
    case AdmitStatus::Refused:
      return "refused";
    case AdmitStatus::TableFull:
      return "table_full";
  }
  return "unknown";
}

std::string_view to_string(Node::Type v) noexcept {
  switch (v) {
    case Node::Type::Value:
      return "value";
    case Node::Type::Object:
      return "object";
    case Node::Type::Array:
      return "array";
  }
  return "unknown";
}

std::string_view to_string(Node::Metric v) noexcept {
  switch (v) {
    case Node::Metric::None:
      return "none";
    case Node::Metric::Counter:
      return "counter";
    case Node::Metric::Gauge:
      return "gauge";
  }
  return "unknown";
}

namespace relay {

std::string_view to_string(EntryState v) noexcept {
  switch (v) {
    case EntryState::Free:
      return "free";
    case EntryState::Pending:
      return "pending";
    case EntryState::InHand:
      return "in_hand";
  }
  return "unknown";
}

std::string_view to_string(HeadIntent v) noexcept {
  switch (v) {
    case HeadIntent::None:
      return "none";
    case HeadIntent::Merge:
      return "merge";
    case HeadIntent::Commit:
      return "commit";
    case HeadIntent::DropAppend:
      return "drop_append";
    case HeadIntent::Remember:
      return "remember";
  }
  return "unknown";
}

std::string_view to_string(SlotState v) noexcept {
  switch (v) {
    case SlotState::Free:
      return "free";
    case SlotState::Sealed:
      return "sealed";
    case SlotState::Acked:
      return "acked";
  }
  return "unknown";
}

std::string_view to_string(SpillIntent v) noexcept {
  switch (v) {
    case SpillIntent::None:
      return "none";
    case SpillIntent::Seal:
      return "seal";
    case SpillIntent::Ack:
      return "ack";
    case SpillIntent::Expire:
      return "expire";
    case SpillIntent::Refuse:
      return "refuse";
  }
  return "unknown";
}

std::string_view to_string(Rehydrate v) noexcept {
  switch (v) {
    case Rehydrate::Sequential:
      return "sequential";
    case Rehydrate::Parallel:
      return "parallel";
  }
  return "unknown";
}

}  // namespace relay

namespace ledger {

std::string_view to_string(PoolStatus v) noexcept {
  switch (v) {
    case PoolStatus::Free:
      return "free";
    case PoolStatus::Open:
      return "open";
  }
  return "unknown";
}

std::string_view to_string(TicketState v) noexcept {
  switch (v) {
    case TicketState::Free:
      return "free";
    case TicketState::Reserved:
      return "reserved";
    case TicketState::Committed:
      return "committed";
  }
  return "unknown";
}

std::string_view to_string(JournalOp v) noexcept {
  switch (v) {
    case JournalOp::None:
      return "none";
    case JournalOp::Replace:
      return "replace";
    case JournalOp::Admit:
      return "admit";
    case JournalOp::HandOver:
      return "hand_over";
  }
  return "unknown";
}

}  // namespace ledger

namespace egress {

std::string_view to_string(JournalOp v) noexcept {
  switch (v) {
    case JournalOp::None:
      return "none";
    case JournalOp::Enqueue:
      return "enqueue";
    case JournalOp::Claim:
      return "claim";
    case JournalOp::Fail:
      return "fail";
    case JournalOp::RetryNow:
      return "retry_now";
    case JournalOp::TakeDeadLetter:
      return "take_dead_letter";
    case JournalOp::Ack:
      return "ack";
    case JournalOp::RetryDue:
      return "retry_due";
    case JournalOp::Reconnect:
      return "reconnect";
  }
  return "unknown";
}

}  // namespace egress

namespace spill {

std::string_view to_string(SealStep v) noexcept {
  switch (v) {
    case SealStep::ContentWritten:
      return "content_written";
    case SealStep::HeaderWritten:
      return "header_written";
    case SealStep::Renamed:
      return "renamed";
    case SealStep::DirSynced:
      return "dir_synced";
  }
  return "unknown";
}

}  // namespace spill

namespace mpmc {

std::string_view to_string(Side v) noexcept {
  switch (v) {
    case Side::Push:
      return "push";
    case Side::Pop:
      return "pop";
  }
  return "unknown";
}

}  // namespace mpmc

namespace ring {

std::string_view to_string(SlotState v) noexcept {
  switch (v) {
    case SlotState::Empty:
      return "empty";
    case SlotState::Stale:
      return "stale";
    case SlotState::Current:
      return "current";
    case SlotState::Foreign:
      return "foreign";
  }
  return "unknown";
}

std::string_view to_string(RecordCheck v) noexcept {
  switch (v) {
    case RecordCheck::Data:
      return "data";
    case RecordCheck::Padding:
      return "padding";
    case RecordCheck::BadPadding:
      return "bad_padding";
    case RecordCheck::BadType:
      return "bad_type";
    case RecordCheck::BadLength:
      return "bad_length";
  }
  return "unknown";
}

}  // namespace ring

}  // namespace shm
