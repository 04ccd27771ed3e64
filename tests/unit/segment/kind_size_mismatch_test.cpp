// Every kind's SizeMismatch: a segment whose header and file agree with each
// other (so Segment's own checks pass) but whose size is not what the kind's
// parameters need. One case per check that returns Errc::SizeMismatch: the
// generic one in Segment::open (the caller names every parameter) and each
// kind's own (the caller accepts any geometry, the kind checks the segment's).
#include "common/temp_root.hpp"
#include "shm/channel/layout.hpp"
#include "shm/fanout/priority_fanout.hpp"
#include "shm/ledger/ledger.hpp"
#include "shm/mpmc/mpmc_ring.hpp"
#include "shm/segment/layout.hpp"
#include "shm/segment/segment.hpp"
#include "shm/spsc/layout.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>

namespace shm {
namespace {

// The forged segment's sizes next to what its parameters need.
struct Forged {
  std::string path;
  std::uint64_t file_total = 0;  // header.total_size == the file's size
  std::uint64_t file_data = 0;   // bytes after the header
  std::uint64_t need_total = 0;  // kHeaderSize + the data size rounded to pages
  std::uint64_t need_data = 0;   // the data size the parameters need
};

enum class Delta : std::uint8_t { PageMore, PageLess };

// Creates `name` with `spec`'s identity and parameters but a data area one
// page larger or smaller than they need; the header is sealed and READY.
Forged forge(const std::string& name, const KindSpec& spec, Delta delta) {
  const std::uint64_t need = round_up(spec.data_size, kPageSize);
  KindSpec wrong = spec;
  wrong.data_size = delta == Delta::PageMore ? need + kPageSize : need - kPageSize;
  auto seg = Segment::create(name, wrong, {}, nullptr);
  EXPECT_TRUE(seg) << seg.error().what();
  if (!seg) return {};
  return Forged{seg->path(), seg->header().total_size, seg->data().size(), kHeaderSize + need,
                spec.data_size};
}

const RingParams kRing{.capacity_bytes = 4096};
const MpmcParams kMpmc{.ring_cells = 64, .slot_bytes = 48};
const ChannelParams kChannel{
    .pages = 4, .page_bytes = 4096, .descriptors_per_page = 8, .ring_cells = 16};
const LedgerParams kLedger{.global_limit = 1000};
const FanoutParams kFanout{.priorities = 2, .ring_cells = 64, .slot_bytes = 48};

Forged forge_ring(const std::string& name, Delta d) {
  ring::ParamBlock b{};
  return forge(name, ring::kind_spec(kRing, b), d);
}
Forged forge_mpmc(const std::string& name, Delta d) {
  mpmc::ParamBlock b{};
  return forge(name, mpmc::kind_spec(kMpmc, b), d);
}
Forged forge_channel(const std::string& name, Delta d) {
  channel::ParamBlock b{};
  return forge(name, channel::kind_spec(kChannel, b), d);
}
Forged forge_ledger(const std::string& name, Delta d) {
  ledger::ParamBlock b{};
  return forge(name, ledger::kind_spec(kLedger, false, b), d);
}
Forged forge_bitmap(const std::string& name, Delta d) {
  fanout::ParamBlock b{};
  return forge(fanout::bitmap_name(name), fanout::kind_spec(kFanout, b), d);
}
// A whole fanout whose priority-1 ring file is replaced by a forged one.
Forged forge_fanout_ring(const std::string& name, Delta d) {
  {
    auto f = PriorityFanout::create(name, kFanout);
    EXPECT_TRUE(f) << f.error().what();
  }
  EXPECT_TRUE(Segment::unlink(fanout::ring_name(name, 1)));
  mpmc::ParamBlock b{};
  return forge(fanout::ring_name(name, 1),
               mpmc::kind_spec({kFanout.ring_cells, kFanout.slot_bytes}, b), d);
}

template <class T>
std::optional<Error> error_of(const Result<T>& r) {
  if (r) return std::nullopt;
  return r.error();
}

// What the generic check in Segment::open says.
std::string generic(const Forged& f, std::string_view kind) {
  return fmt::format("{}: size: segment has {} bytes, its {} parameters need {}", f.path,
                     f.file_total, kind, f.need_total);
}

struct SizeCase {
  std::string label;
  Forged (*forge)(const std::string& name, Delta delta);
  Delta delta;
  std::function<std::optional<Error>(const std::string& name)> open;
  std::function<std::string(const Forged&)> message;  // the whole expected message
};

std::ostream& operator<<(std::ostream& os, const SizeCase& c) {
  return os << c.label;
}

const SizeCase kCases[] = {
    // spsc ring
    {"SpscRingExactExpectationLarger", forge_ring, Delta::PageMore,
     [](const std::string& n) { return error_of(open_ring(n, kRing)); },
     [](const Forged& f) { return generic(f, "spsc_ring"); }},
    {"SpscRingAnyGeometryLarger", forge_ring, Delta::PageMore,
     [](const std::string& n) { return error_of(open_ring(n)); },
     [](const Forged& f) {
       return fmt::format("{}: size: segment has {} bytes, capacity 4096 needs {}", f.path,
                          f.file_total, f.need_total);
     }},
    {"SpscRingAnyGeometrySmaller", forge_ring, Delta::PageLess,
     [](const std::string& n) { return error_of(open_ring(n)); },
     [](const Forged& f) {
       return fmt::format("{}: size: segment has {} bytes, capacity 4096 needs {}", f.path,
                          f.file_total, f.need_total);
     }},
    // mpmc ring
    {"MpmcRingExactExpectationSmaller", forge_mpmc, Delta::PageLess,
     [](const std::string& n) { return error_of(open_mpmc_ring(n, kMpmc)); },
     [](const Forged& f) { return generic(f, "mpmc_ring"); }},
    {"MpmcRingAnyGeometryLarger", forge_mpmc, Delta::PageMore,
     [](const std::string& n) { return error_of(MpmcRing::open(n)); },
     [](const Forged& f) {
       return fmt::format("{}: size: segment has {} bytes, capacity 64 x slot size 48 needs {}",
                          f.path, f.file_total, f.need_total);
     }},
    {"MpmcRingAnyGeometrySmaller", forge_mpmc, Delta::PageLess,
     [](const std::string& n) { return error_of(open_mpmc_ring(n)); },
     [](const Forged& f) {
       return fmt::format("{}: size: segment has {} bytes, capacity 64 x slot size 48 needs {}",
                          f.path, f.file_total, f.need_total);
     }},
    // channel
    {"ChannelExactExpectationLarger", forge_channel, Delta::PageMore,
     [](const std::string& n) { return error_of(open_channel(n, kChannel)); },
     [](const Forged& f) { return generic(f, "channel"); }},
    {"ChannelAnyGeometryLarger", forge_channel, Delta::PageMore,
     [](const std::string& n) { return error_of(open_channel(n)); },
     [](const Forged& f) { return generic(f, "channel"); }},
    {"ChannelAnyGeometrySmaller", forge_channel, Delta::PageLess,
     [](const std::string& n) { return error_of(open_channel(n)); },
     [](const Forged& f) {
       return fmt::format("{}: data area has {} bytes, the channel needs {}", f.path, f.file_data,
                          f.need_data);
     }},
    // ledger
    {"LedgerExactExpectationLarger", forge_ledger, Delta::PageMore,
     [](const std::string& n) { return error_of(Ledger::open(n, kLedger)); },
     [](const Forged& f) { return generic(f, "ledger"); }},
    {"LedgerAnyGeometryLarger", forge_ledger, Delta::PageMore,
     [](const std::string& n) { return error_of(Ledger::open(n)); },
     [](const Forged& f) { return generic(f, "ledger"); }},
    {"LedgerAnyGeometrySmaller", forge_ledger, Delta::PageLess,
     [](const std::string& n) { return error_of(Ledger::open(n)); },
     [](const Forged& f) {
       return fmt::format("{}: size: data area has {} bytes, its ledger parameters need {}", f.path,
                          f.file_data, f.need_data);
     }},
    // priority fanout: the bitmap file and a ring file
    {"FanoutBitmapLarger", forge_bitmap, Delta::PageMore,
     [](const std::string& n) { return error_of(PriorityFanout::open(n, {})); },
     [](const Forged& f) { return generic(f, "fanout_bitmap"); }},
    {"FanoutBitmapSmaller", forge_bitmap, Delta::PageLess,
     [](const std::string& n) { return error_of(PriorityFanout::open(n, {})); },
     [](const Forged& f) { return generic(f, "fanout_bitmap"); }},
    {"FanoutRingLarger", forge_fanout_ring, Delta::PageMore,
     [](const std::string& n) { return error_of(PriorityFanout::open(n, {})); },
     [](const Forged& f) { return generic(f, "mpmc_ring"); }},
};

class KindSizeMismatchTest : public ::testing::TestWithParam<SizeCase> {
 protected:
  test::TempRoot root_;
};

TEST_P(KindSizeMismatchTest, IsSizeMismatchNamingTheFileSizeAndTheNeededSize) {
  const SizeCase& c = GetParam();
  const Forged f = c.forge("seg", c.delta);
  ASSERT_FALSE(f.path.empty());
  ASSERT_NE(f.file_total, f.need_total);  // the forgery is what the case says
  const std::optional<Error> e = c.open("seg");
  ASSERT_TRUE(e) << c.label << ": the open succeeded";
  EXPECT_EQ(to_string(e->code), to_string(Errc::SizeMismatch)) << e->what();
  EXPECT_EQ(e->message, c.message(f));
}

INSTANTIATE_TEST_SUITE_P(AllKinds, KindSizeMismatchTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<SizeCase>& i) { return i.param.label; });

}  // namespace
}  // namespace shm
