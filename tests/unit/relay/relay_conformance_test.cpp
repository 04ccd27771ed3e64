// Replays the relay conformance corpus (tests/conformance/relay/*.json, format
// in its README.md): every step's outcome and the full projected state after
// every step, then the reader's egress fold.
#include "common/temp_root.hpp"
#include "shm/relay/relay.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace shm {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

const std::map<std::string, PolicyId> kPolicies = {
    {"raw_fifo", policy::kRawFifo}, {"keep_latest", policy::kKeepLatest},
    {"lww", policy::kLww},          {"sum", policy::kSum},
    {"max", policy::kMax},          {"min", policy::kMin},
    {"bit_or", policy::kBitOr}};

std::vector<std::byte> encode(const json& v) {
  if (v.is_object())
    return lww_value(v.at("ts").get<std::uint64_t>(), v.at("writer").get<std::uint64_t>(),
                     u64_value(v.at("payload").get<std::uint64_t>()));
  return u64_value(v.get<std::uint64_t>());
}

Backpressure backpressure_of(const json& j) {
  Backpressure bp;
  bp.dimension = parse_dimension(j.at("dimension").get<std::string>()).value();
  bp.high_water = j.at("high_water").get<std::uint64_t>();
  bp.low_water = j.at("low_water").get<std::uint64_t>();
  bp.overflow = parse_overflow(j.at("overflow").get<std::string>()).value();
  return bp;
}

void expect_state(const RelaySnapshot& s, const json& want, const std::string& where) {
  SCOPED_TRACE(where);
  for (const char* field :
       {"depth", "bytes", "pending_keys", "lag", "is_full", "is_draining", "is_spilling"})
    ASSERT_TRUE(want.contains(field)) << "the corpus must give the full state: " << field;
  EXPECT_EQ(s.depth, want["depth"].get<std::uint64_t>());
  EXPECT_EQ(s.bytes, want["bytes"].get<std::uint64_t>());
  EXPECT_EQ(s.pending_keys, want["pending_keys"].get<std::uint64_t>());
  EXPECT_EQ(s.lag, want["lag"].get<std::uint64_t>());
  EXPECT_EQ(s.is_full, want["is_full"].get<bool>());
  EXPECT_EQ(s.is_draining, want["is_draining"].get<bool>());
  EXPECT_EQ(s.is_spilling, want["is_spilling"].get<bool>());
  EXPECT_EQ(s.in_hand, 0u);
  EXPECT_TRUE(s.consistent);
  if (want.contains("counters")) {
    const json& c = want["counters"];
    if (c.contains("dropped")) {
      EXPECT_EQ(s.dropped, c["dropped"].get<std::uint64_t>());
    }
    if (c.contains("conflated")) {
      EXPECT_EQ(s.conflated, c["conflated"].get<std::uint64_t>());
    }
    if (c.contains("unchanged")) {
      EXPECT_EQ(s.unchanged, c["unchanged"].get<std::uint64_t>());
    }
    if (c.contains("timed_out")) {
      EXPECT_EQ(s.timed_out, c["timed_out"].get<std::uint64_t>());
    }
    if (c.contains("remembered")) {
      EXPECT_EQ(s.remembered, c["remembered"].get<std::uint64_t>());
    }
    if (c.contains("forgotten")) {
      EXPECT_EQ(s.forgotten, c["forgotten"].get<std::uint64_t>());
    }
  }
}

void run_case(const json& c, const std::string& file) {
  const std::string name = c.at("name").get<std::string>();
  SCOPED_TRACE(file + ": " + name);
  const json& jc = c.at("config");
  RelayConfig cfg;
  cfg.policy = kPolicies.at(jc.at("policy").get<std::string>());
  cfg.value_bytes = jc.at("value_size").get<std::uint32_t>();
  cfg.max_entries = jc.at("capacity").get<std::uint32_t>();
  cfg.backpressure = backpressure_of(jc);
  if (jc.contains("egress"))
    cfg.egress = jc["egress"] == "reordering" ? EgressOrder::Reordering : EgressOrder::Arrival;
  cfg.spill_dedup = jc.value("spill_dedup", false);
  if (jc.contains("remembered_keys"))
    cfg.remembered_keys = jc["remembered_keys"].get<std::uint32_t>();

  auto w = RelayWriter::create(name, cfg);
  const json& create = c.at("create");
  if (create.is_object()) {
    ASSERT_FALSE(w) << "created, but the corpus expects " << create.dump();
    EXPECT_EQ(std::string(to_string(w.error().code)), create.at("error").get<std::string>())
        << w.error().what();
    EXPECT_NE(w.error().message.find(create.at("message").get<std::string>()), std::string::npos)
        << w.error().what();
    return;
  }
  ASSERT_TRUE(w) << w.error().what();
  auto r = RelayReader::open(name);
  ASSERT_TRUE(r) << r.error().what();
  auto p = find_merge(cfg.policy);
  ASSERT_TRUE(p);

  std::map<std::uint64_t, std::vector<std::byte>> fold;
  std::vector<std::vector<std::byte>> fifo;
  int index = 0;
  for (const json& step : c.at("steps")) {
    const std::string where = "step " + std::to_string(index++) + ": " + step.dump();
    if (step.contains("write")) {
      const json& jw = step["write"];
      auto res = w->write(jw.at("key").get<std::uint64_t>(), encode(jw.at("value")), 0ns);
      ASSERT_TRUE(res) << where << ": " << res.error().what();
      EXPECT_EQ(std::string(to_string(res->status)), step.at("outcome").get<std::string>())
          << where;
    } else if (step.contains("drain")) {
      std::vector<RelayEntry> got;
      std::vector<std::vector<std::byte>> values;
      auto n = r->drain(step["drain"].get<std::size_t>(), [&](const RelayEntry& e) {
        got.push_back(e);
        values.emplace_back(e.value.begin(), e.value.end());
      });
      ASSERT_TRUE(n) << where << ": " << n.error().what();
      const json& want = step.at("entries");
      ASSERT_EQ(got.size(), want.size()) << where;
      for (std::size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].key, want[i].at("key").get<std::uint64_t>()) << where;
        EXPECT_EQ(values[i], encode(want[i].at("value"))) << where << " entry " << i;
        EXPECT_EQ(got[i].op_count, want[i].at("op_count").get<std::uint64_t>()) << where;
        EXPECT_LE(got[i].first_seq, got[i].last_seq) << where;
        if (!(*p)->keyed) {
          fifo.push_back(values[i]);
          continue;
        }
        auto it = fold.find(got[i].key);
        if (it == fold.end()) {
          fold.emplace(got[i].key, values[i]);
          continue;
        }
        std::vector<std::byte> out(cfg.value_bytes);
        auto len = combine(**p, it->second, values[i], out);
        ASSERT_TRUE(len);
        out.resize(*len);
        it->second = out;
      }
    } else if (step.contains("retune")) {
      auto res = w->retune(backpressure_of(step["retune"]));
      const std::string want = step.at("result").get<std::string>();
      if (want == "ok")
        EXPECT_TRUE(res) << where << ": " << res.error().what();
      else
        EXPECT_TRUE(!res && std::string(to_string(res.error().code)) == want) << where;
    } else {
      FAIL() << "unknown step " << where;
    }
    expect_state(w->snapshot(), step.at("state"), where);
    if (step.contains("fold")) {  // the reader's fold so far (the converged value)
      ASSERT_EQ(fold.size(), step["fold"].size()) << where;
      for (const auto& [key, value] : step["fold"].items())
        EXPECT_EQ(fold[std::stoull(key)], encode(value)) << where << ": fold of key " << key;
    }
  }
  const json& want_fold = c.at("egress_fold");
  if (!(*p)->keyed) {
    ASSERT_EQ(fifo.size(), want_fold.size());
    for (std::size_t i = 0; i < fifo.size(); ++i) EXPECT_EQ(fifo[i], encode(want_fold[i]));
    return;
  }
  ASSERT_EQ(fold.size(), want_fold.size());
  for (const auto& [key, value] : want_fold.items())
    EXPECT_EQ(fold[std::stoull(key)], encode(value)) << "fold of key " << key;
}

TEST(RelayConformance, EveryCorpusCaseReplaysWithItsOutcomesStatesAndFold) {
  test::TempRoot root;
  const std::filesystem::path dir =
      std::filesystem::path(SHM_SOURCE_DIR) / "tests/conformance/relay";
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".json") files.push_back(e.path());
  ASSERT_FALSE(ec) << ec.message();
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 7u);
  std::size_t cases = 0;
  for (const auto& f : files) {
    std::ifstream in(f);
    const json doc = json::parse(in);
    for (const json& c : doc.at("cases")) {
      run_case(c, f.filename().string());
      ++cases;
    }
  }
  EXPECT_GE(cases, 20u);
}

}  // namespace
}  // namespace shm
