// The describe-tree renderers shared by shmctl and shm-sidecar: whatever bytes
// a segment holds, the JSON they make serialises and the text they make
// carries no control character.
#include "node_render.hpp"
#include "display_text.hpp"

#include "shm/segment/describe.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

namespace shm::tools {
namespace {

TEST(DisplayText, PrintableUtf8PassesThroughUnchanged) {
  EXPECT_EQ(displayable("/var/lib/libshm/spill/orders"), "/var/lib/libshm/spill/orders");
  EXPECT_EQ(displayable("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x93\xa6"),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x93\xa6");  // é, €, a 4-byte emoji
  EXPECT_EQ(displayable(""), "");
}

TEST(DisplayText, ControlCharactersAreEscaped) {
  EXPECT_EQ(displayable("a\nb\tc\x1b[31md\x7f"), "a\\x0ab\\x09c\\x1b[31md\\x7f");
  EXPECT_EQ(displayable(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(displayable("\xc2\x85"), "\\xc2\\x85");  // U+0085, a C1 control
}

TEST(DisplayText, BytesOutsideWellFormedUtf8AreEscapedOneByOne) {
  EXPECT_EQ(displayable("caf\xe9"), "caf\\xe9");                             // Latin-1
  EXPECT_EQ(displayable("\xc0\xaf"), "\\xc0\\xaf");                          // overlong '/'
  EXPECT_EQ(displayable("\xe0\x80\xaf"), "\\xe0\\x80\\xaf");                 // overlong, 3 bytes
  EXPECT_EQ(displayable("\xed\xa0\x80"), "\\xed\\xa0\\x80");                 // a surrogate
  EXPECT_EQ(displayable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");        // above U+10FFFF
  EXPECT_EQ(displayable("\xe2\x82"), "\\xe2\\x82");                          // cut short
  EXPECT_EQ(displayable("\x80z"), "\\x80z");                                 // a lone continuation
  EXPECT_EQ(displayable("\xe2\x82\xe2\x82\xac"), "\\xe2\\x82\xe2\x82\xac");  // then a valid €
}

TEST(DisplayText, EveryByteStringBecomesJsonThatSerialises) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  const nlohmann::json j = displayable(all);
  EXPECT_NO_THROW((void)j.dump());
  EXPECT_EQ(displayable(all).find('\x1b'), std::string::npos);
}

Node tree_with(const std::string& raw) {
  Node n;
  n.set("dir", raw);
  Node& spill = n.object("spill");
  spill.set("dir", raw);
  n.array("pages").push_object().set("file", raw);
  return n;
}

TEST(NodeRender, JsonOfStringsThatAreNotUtf8SerialisesWithTheBytesEscaped) {
  const nlohmann::ordered_json j = to_json(tree_with("spill-caf\xe9"));
  std::string dumped;
  ASSERT_NO_THROW(dumped = j.dump());
  EXPECT_EQ(j["dir"], "spill-caf\\xe9");
  EXPECT_EQ(j["spill"]["dir"], "spill-caf\\xe9");
  EXPECT_EQ(j["pages"][0]["file"], "spill-caf\\xe9");
}

TEST(NodeRender, TextCarriesNoControlCharacterFromTheSegment) {
  const std::string text = to_text(tree_with("x\x1b]0;owned\x07y\nz"));
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_EQ(text.find('\x07'), std::string::npos) << text;
  EXPECT_NE(text.find("dir: x\\x1b]0;owned\\x07y\\x0az\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace shm::tools
