// The tokenizer against Hugging Face's GPT2Tokenizer on the fixture vocab
// (tests/golden/tokenizer/cases.json was written by make_golden.py).
#include "tokenizer/bpe_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "util/json.h"
#include "testing/files.h"
#include "testing/golden.h"
#include "tokenizer/unicode.h"

namespace flover {
namespace {

using testing::JsonIds;

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kDir[] = "tests/golden/tokenizer/";

BpeTokenizer LoadFixture() {
  auto t = BpeTokenizer::Load(std::string(kDir) + "vocab.json", std::string(kDir) + "merges.txt");
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(*t);
}

TEST(BpeTokenizerTest, MatchesHuggingFaceIdsAndText) {
  const BpeTokenizer tok = LoadFixture();
  auto cases = ParseJsonObject(testing::ReadFileOrEmpty(std::string(kDir) + "cases.json"), "cases");
  ASSERT_TRUE(cases.ok()) << cases.status();
  const auto& encode = cases->fields().at("encode").list_value().values();
  ASSERT_GE(encode.size(), 15);
  for (const auto& c : encode) {
    const auto& f = c.struct_value().fields();
    const std::string& text = f.at("text").string_value();
    auto ids = tok.Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, JsonIds(f.at("ids"))) << text;
    EXPECT_EQ(tok.Decode(*ids), f.at("decoded").string_value()) << text;
    EXPECT_EQ(tok.Decode(*ids), text) << "round trip";
  }
  // Arbitrary ids, including byte tokens that cut UTF-8 characters in half.
  for (const auto& c : cases->fields().at("decode").list_value().values()) {
    const auto& f = c.struct_value().fields();
    EXPECT_EQ(tok.Decode(JsonIds(f.at("ids"))), f.at("decoded").string_value());
  }
}

TEST(BpeTokenizerTest, PreTokenizerFollowsTheGpt2Pattern) {
  auto split = [](absl::string_view s) {
    auto p = PreTokenize(s);
    EXPECT_TRUE(p.ok());
    return std::vector<std::string>(p->begin(), p->end());
  };
  EXPECT_THAT(split("Hello world"), ElementsAre("Hello", " world"));
  EXPECT_THAT(split("a  b"), ElementsAre("a", " ", " b"));
  EXPECT_THAT(split("a   "), ElementsAre("a", "   "));
  EXPECT_THAT(split("x\n\ny"), ElementsAre("x", "\n", "\n", "y"));
  EXPECT_THAT(split("x\n\n y"), ElementsAre("x", "\n\n", " y"));
  EXPECT_THAT(split("it's I'LL"), ElementsAre("it", "'s", " I", "'", "LL"));
  EXPECT_THAT(split("we're 42x"), ElementsAre("we", "'re", " 42", "x"));
  EXPECT_THAT(split(" !?a"), ElementsAre(" !?", "a"));
  EXPECT_THAT(split("\xC3\xA9t\xC3\xA9 \xE2\x82\xAC" "5"),
              ElementsAre("\xC3\xA9t\xC3\xA9", " \xE2\x82\xAC", "5"));
  EXPECT_THAT(split(""), ElementsAre());
}

TEST(BpeTokenizerTest, RejectsInvalidUtf8Input) {
  const BpeTokenizer tok = LoadFixture();
  auto ids = tok.Encode("ok \xC3(");
  ASSERT_FALSE(ids.ok());
  EXPECT_THAT(std::string(ids.status().message()), HasSubstr("invalid UTF-8 at byte 3"));
}

TEST(BpeTokenizerTest, EveryByteRoundTrips) {
  const BpeTokenizer tok = LoadFixture();
  for (int b = 0; b < 256; ++b) {
    const std::string s(1, static_cast<char>(b));
    auto ids = tok.Encode(s);
    if (b >= 0x80) {
      EXPECT_FALSE(ids.ok());  // a lone non-ASCII byte is not UTF-8
      continue;
    }
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(tok.DecodeBytes(*ids), s);
  }
  EXPECT_EQ(tok.end_of_text_id(), tok.vocab_size() - 1);
}

TEST(BpeTokenizerTest, BadFilesAreClearErrors) {
  auto t1 = BpeTokenizer::FromStrings("{\"a\": 0", "", "tok");
  EXPECT_THAT(std::string(t1.status().message()), HasSubstr("vocab.json: not a valid JSON object"));
  auto t2 = BpeTokenizer::FromStrings("{\"a\": 0}", "", "tok");
  EXPECT_THAT(std::string(t2.status().message()), HasSubstr("lacks the symbol for byte 0"));
  auto t3 = BpeTokenizer::FromStrings("{\"a\": 5}", "", "tok");
  EXPECT_THAT(std::string(t3.status().message()), HasSubstr("must be an integer in [0, 0]"));

  const std::string vocab = testing::ReadFileOrEmpty(std::string(kDir) + "vocab.json");
  auto t4 = BpeTokenizer::FromStrings(vocab, "#version: 0.2\na b c\n", "tok");
  EXPECT_THAT(std::string(t4.status().message()), HasSubstr("merges.txt line 2 is not two symbols"));
  auto t5 = BpeTokenizer::FromStrings(vocab, "q z\n", "tok");
  EXPECT_THAT(std::string(t5.status().message()), HasSubstr("makes 'qz', which is not in vocab.json"));
}

TEST(Utf8Test, CompletePrefixHoldsBackAnUnfinishedCharacter) {
  EXPECT_EQ(CompleteUtf8Prefix("ab"), 2u);
  EXPECT_EQ(CompleteUtf8Prefix("a\xE2\x82"), 1u);
  EXPECT_EQ(CompleteUtf8Prefix("a\xE2\x82\xAC"), 4u);
  EXPECT_EQ(CompleteUtf8Prefix("\xF0\x9F\x99"), 0u);
  EXPECT_EQ(CompleteUtf8Prefix("a\xC3"), 1u);
  EXPECT_EQ(SanitizeUtf8("a\xE2\x82z\xFF"), "a\xEF\xBF\xBDz\xEF\xBF\xBD");
}

}  // namespace
}  // namespace flover
