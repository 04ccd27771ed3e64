// Pieces of the sidecar that need no process: the Prometheus writer, the log
// line formats (the HTTP endpoint: http_endpoint_test.cpp).
#include "sidecar/log.hpp"
#include "sidecar/metrics.hpp"

#include "shm/segment/describe.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace shm::sidecar {
namespace {

TEST(SidecarMetrics, CountersGetTotalSuffixGaugesDoNotAndEachFamilyIsDeclaredOnce) {
  Node a;
  a.counter("records_pushed", 10);
  a.gauge("depth", 3);
  a.set("capacity", std::uint64_t{4096});                    // not marked: not a metric
  a.set("state", std::string("open"), Node::Metric::Gauge);  // not numeric: skipped
  Node b;
  b.counter("records_pushed", 20);
  b.gauge("depth", 4);
  MetricsWriter w;
  w.tree("libshm_ring", a, {{"segment", "a"}});
  w.tree("libshm_ring", b, {{"segment", "b"}});
  EXPECT_EQ(w.render(),
            "# HELP libshm_ring_records_pushed_total Counter 'records_pushed' of the kind's "
            "describe() tree.\n"
            "# TYPE libshm_ring_records_pushed_total counter\n"
            "libshm_ring_records_pushed_total{segment=\"a\"} 10\n"
            "libshm_ring_records_pushed_total{segment=\"b\"} 20\n"
            "# HELP libshm_ring_depth Gauge 'depth' of the kind's describe() tree.\n"
            "# TYPE libshm_ring_depth gauge\n"
            "libshm_ring_depth{segment=\"a\"} 3\n"
            "libshm_ring_depth{segment=\"b\"} 4\n");
}

TEST(SidecarMetrics, NestedObjectsJoinKeysAndArrayElementsBecomeLabels) {
  Node t;
  Node& pool = t.object("pool");
  pool.gauge("free-pages", 7);
  Node& prios = t.array("priorities");
  prios.push_object().gauge("depth", 1);
  prios.push_object().counter("drops_total", 2);
  Node& pools = t.array("pools");
  pools.push_object().set("label", std::string("workers")).gauge("tickets", 5);
  MetricsWriter w;
  w.tree("libshm_fanout", t, {{"segment", "f"}});
  const std::string out = w.render();
  EXPECT_NE(out.find("libshm_fanout_pool_free_pages{segment=\"f\"} 7\n"), std::string::npos) << out;
  EXPECT_NE(out.find("libshm_fanout_priorities_depth{segment=\"f\",priorities=\"0\"} 1\n"),
            std::string::npos)
      << out;
  // An element with a name of its own is labelled by it.
  EXPECT_NE(out.find("libshm_fanout_pools_tickets{segment=\"f\",pools=\"workers\"} 5\n"),
            std::string::npos)
      << out;
  // Already ends in _total: not doubled.
  EXPECT_NE(out.find("libshm_fanout_priorities_drops_total{segment=\"f\",priorities=\"1\"} 2\n"),
            std::string::npos)
      << out;
}

TEST(SidecarMetrics, LabelValuesAndNamesAreEscaped) {
  EXPECT_EQ(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(metric_fragment("depth.bytes-x"), "depth_bytes_x");
  MetricsWriter w;
  w.sample("m", MetricsWriter::Type::Gauge, "help", {{"segment", "we\"ird"}}, std::uint64_t{1});
  w.sample("m", MetricsWriter::Type::Counter, "help", {{"segment", "other"}}, std::uint64_t{2});
  const std::string out = w.render();
  EXPECT_NE(out.find("m{segment=\"we\\\"ird\"} 1\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("other"), std::string::npos) << "a sample of another type joined the family";
}

// The exposition is UTF-8: a segment name (or any label value) that is not
// must not make it invalid. Bad bytes read as "\xNN" once the label is decoded;
// \, " and newline keep the format's own escapes; valid UTF-8 is unchanged.
TEST(SidecarMetrics, LabelValuesThatAreNotUtf8BecomeEscapesAndTheExpositionStaysValid) {
  EXPECT_EQ(escape_label("ok-\xff\xfe"), "ok-\\\\xff\\\\xfe");
  EXPECT_EQ(escape_label("a\nb\xc3"), "a\\nb\\\\xc3");       // a truncated sequence
  EXPECT_EQ(escape_label("q\"\\\x01"), "q\\\"\\\\\\\\x01");  // a control character too
  EXPECT_EQ(escape_label("caf\xc3\xa9 \xe2\x82\xac"), "caf\xc3\xa9 \xe2\x82\xac");
  MetricsWriter w;
  w.sample("m", MetricsWriter::Type::Gauge, "help", {{"segment", "bad\xff\xc0name"}},
           std::uint64_t{1});
  const std::string out = w.render();
  EXPECT_NE(out.find("m{segment=\"bad\\\\xff\\\\xc0name\"} 1\n"), std::string::npos) << out;
  // nlohmann refuses to serialise invalid UTF-8: the whole text is valid.
  EXPECT_NO_THROW((void)nlohmann::json(out).dump()) << out;
}

TEST(SidecarLog, LogfmtQuotesValuesThatNeedIt) {
  std::vector<std::string> lines;
  Logger log([&](std::string_view l) { lines.emplace_back(l); }, Logger::Format::Logfmt);
  log.warn("attacher_dead")
      .kv("segment", "orders")
      .kv("pid", 42)
      .kv("error", "has \"quotes\" and spaces");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(lines[0].starts_with("ts=")) << lines[0];
  EXPECT_NE(lines[0].find(" level=warn event=attacher_dead segment=orders pid=42 "
                          "error=\"has \\\"quotes\\\" and spaces\""),
            std::string::npos)
      << lines[0];
}

TEST(SidecarLog, JsonLinesParseAndLevelsBelowTheMinimumAreDropped) {
  std::vector<std::string> lines;
  Logger log([&](std::string_view l) { lines.emplace_back(l); }, Logger::Format::Json, Level::Info);
  log.debug("noise").kv("x", 1);
  log.info("segment_discovered")
      .kv("segment", "a")
      .kv("size", std::uint64_t{8192})
      .kv("ephemeral", true);
  ASSERT_EQ(lines.size(), 1u);
  const auto j = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(j["level"], "info");
  EXPECT_EQ(j["event"], "segment_discovered");
  EXPECT_EQ(j["segment"], "a");
  EXPECT_EQ(j["size"], 8192);
  EXPECT_EQ(j["ephemeral"], true);
}

}  // namespace
}  // namespace shm::sidecar
