// SplitRegex on the tokenizers' patterns and the constructs they use. The expected splits were printed by
// the `tokenizers` library (pre_tokenizers.Split(Regex(p), "isolated")), so
// these pin Oniguruma's behaviour that the fixtures may not reach.
#include "tokenizer/split_regex.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tokenizer/unicode.h"

namespace flover {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kLlama3[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen3.5's: Qwen 2's with combining marks (\p{M}) kept in letter runs and
// out of punctuation runs.
constexpr char kQwen35[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// o200k's (gpt-oss, GPT-4o): upper-case runs before lower-case ones, by the
// letters' categories.
constexpr char kO200k[] =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr char kGpt2[] = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Isolated split: matches and the gaps between them, in order.
std::vector<std::string> Split(const char* pattern, absl::string_view text) {
  auto re = SplitRegex::Compile(pattern);
  EXPECT_TRUE(re.ok()) << re.status();
  auto cs = DecodeUtf8(text);
  EXPECT_TRUE(cs.ok());
  std::vector<char32_t> cps;
  std::vector<size_t> at;
  for (const Utf8Char& c : *cs) cps.push_back(c.cp), at.push_back(c.begin);
  at.push_back(text.size());
  std::vector<std::string> out;
  size_t prev = 0, b = 0, e = 0;
  while (true) {
    auto found = re->Find(cps, prev, &b, &e);
    EXPECT_TRUE(found.ok());
    if (!found.ok() || !*found) break;
    if (b > prev) out.emplace_back(text.substr(at[prev], at[b] - at[prev]));
    out.emplace_back(text.substr(at[b], at[e] - at[b]));
    prev = e;
  }
  if (prev < cps.size()) out.emplace_back(text.substr(at[prev]));
  return out;
}

TEST(SplitRegexTest, Llama3Pattern) {
  EXPECT_THAT(Split(kLlama3, "1234567 a"), ElementsAre("123", "456", "7", " a"));
  EXPECT_THAT(Split(kLlama3, "a\u00a0\u00a0b"), ElementsAre("a", "\u00a0", "\u00a0b"));
  EXPECT_THAT(Split(kLlama3, "  \n\n  x"), ElementsAre("  \n\n", " ", " x"));
  EXPECT_THAT(Split(kLlama3, "x \r\n y"), ElementsAre("x", " \r\n", " y"));
  // (?i:...) folds case, and U+017F LONG S folds to s.
  EXPECT_THAT(Split(kLlama3, "it'Sx"), ElementsAre("it", "'S", "x"));
  EXPECT_THAT(Split(kLlama3, "we'REx"), ElementsAre("we", "'RE", "x"));
  EXPECT_THAT(Split(kLlama3, "it'\u017fx"), ElementsAre("it", "'\u017f", "x"));
  EXPECT_THAT(Split(kLlama3, "\u0130'S"), ElementsAre("\u0130", "'S"));
}

TEST(SplitRegexTest, Qwen35PatternKeepsMarksWithLetters) {
  // Devanagari's vowel signs and virama, Thai's tone marks, a decomposed
  // accent, Hebrew points: one word each (Qwen 2's pattern cuts them apart).
  EXPECT_THAT(Split(kQwen35, "\u0939\u093f\u0928\u094d\u0926\u0940 \u092d\u093e\u0937\u093e"),
              ElementsAre("\u0939\u093f\u0928\u094d\u0926\u0940", " \u092d\u093e\u0937\u093e"));
  EXPECT_THAT(Split(kQwen35, "\u0e17\u0e35\u0e48\u0e19\u0e35\u0e48 12"),
              ElementsAre("\u0e17\u0e35\u0e48\u0e19\u0e35\u0e48", " ", "1", "2"));
  EXPECT_THAT(Split(kQwen35, "e\u0301t\u00e9!\u0301"), ElementsAre("e\u0301t\u00e9", "!\u0301"));
  EXPECT_THAT(Split(kQwen35, "\u05e9\u05c1\u05b8\u05dc\u05d5\u05b9\u05dd"),
              ElementsAre("\u05e9\u05c1\u05b8\u05dc\u05d5\u05b9\u05dd"));
  // Variation selectors are marks: they join the symbol before them.
  EXPECT_THAT(Split(kQwen35, "\u2764\ufe0f\ufe0f?"), ElementsAre("\u2764\ufe0f\ufe0f", "?"));
  EXPECT_THAT(Split(kQwen35, "x\u20dd\n\n \u0300"), ElementsAre("x\u20dd", "\n\n", " \u0300"));
  EXPECT_THAT(Split(kQwen35, "x12'S"), ElementsAre("x", "1", "2", "'S"));
  EXPECT_THAT(Split("\\P{M}+", "ab\u0301\u0302cd"), ElementsAre("ab", "\u0301\u0302", "cd"));
  EXPECT_THAT(Split("[\\p{M}x]+", "ab\u0301x\u0302cd"), ElementsAre("ab", "\u0301x\u0302", "cd"));
  EXPECT_TRUE(IsMark(0x0301) && IsMark(0x093F) && IsMark(0xFE0F) && IsMark(0x20DD));
  EXPECT_FALSE(IsMark('a') || IsMark(0x0939) || IsMark(' '));
}

TEST(SplitRegexTest, O200kPatternSplitsByLetterCategory) {
  EXPECT_THAT(Split(kO200k, "HelloWorld iPhone ABCdef"), ElementsAre("Hello", "World", " i", "Phone", " ABCdef"));
  EXPECT_THAT(Split(kO200k, "McDonald's I'M DON'T"), ElementsAre("Mc", "Donald's", " I'M", " DON'T"));
  EXPECT_THAT(Split(kO200k, "\u00c9COLE \u00e9t\u00e9"), ElementsAre("\u00c9COLE", " \u00e9t\u00e9"));
  // Title case (Lt), modifier letters (Lm), other letters (Lo), marks.
  EXPECT_THAT(Split(kO200k, "\u01c5ungla \u01c4UNGLA"), ElementsAre("\u01c5ungla", " \u01c4UNGLA"));
  EXPECT_THAT(Split(kO200k, "\u02b0ello x\u02b0"), ElementsAre("\u02b0ello", " x\u02b0"));
  EXPECT_THAT(Split(kO200k, "\u4e2d\u6587\u5b57\u7b26abc"), ElementsAre("\u4e2d\u6587\u5b57\u7b26abc"));
  EXPECT_THAT(Split(kO200k, "e\u0301t\u00e9!"), ElementsAre("e\u0301t\u00e9", "!"));
  EXPECT_THAT(Split(kO200k, "1234567 a"), ElementsAre("123", "456", "7", " a"));
  EXPECT_THAT(Split(kO200k, "x \r\n\n y  "), ElementsAre("x", " \r\n\n", " y", "  "));
  EXPECT_THAT(Split(kO200k, "<|end|>{\"a\": 1}"), ElementsAre("<|", "end", "|>{\"", "a", "\":", " ", "1", "}"));
  EXPECT_TRUE(IsLetterOf(LetterCategory::kUpper, 'A') && IsLetterOf(LetterCategory::kLower, 'a'));
  EXPECT_TRUE(IsLetterOf(LetterCategory::kTitle, 0x01C5) && IsLetterOf(LetterCategory::kModifier, 0x02B0));
  EXPECT_TRUE(IsLetterOf(LetterCategory::kOther, 0x4E2D));
  EXPECT_FALSE(IsLetterOf(LetterCategory::kUpper, 'a') || IsLetterOf(LetterCategory::kLower, 0x4E2D));
  EXPECT_FALSE(SplitRegex::Compile("\\P{Lu}").ok());
}

TEST(SplitRegexTest, Gpt2Pattern) {
  EXPECT_THAT(Split(kGpt2, "Hello world"), ElementsAre("Hello", " world"));
  EXPECT_THAT(Split(kGpt2, "a  b"), ElementsAre("a", " ", " b"));
  EXPECT_THAT(Split(kGpt2, "a   "), ElementsAre("a", "   "));
  EXPECT_THAT(Split(kGpt2, "x\n\ny"), ElementsAre("x", "\n", "\n", "y"));
  EXPECT_THAT(Split(kGpt2, "x\n\n y"), ElementsAre("x", "\n\n", " y"));
  EXPECT_THAT(Split(kGpt2, "it's I'LL"), ElementsAre("it", "'s", " I", "'", "LL"));
  EXPECT_THAT(Split(kGpt2, "we're 42x"), ElementsAre("we", "'re", " 42", "x"));
  EXPECT_THAT(Split(kGpt2, " !?a"), ElementsAre(" !?", "a"));
  EXPECT_THAT(Split(kGpt2, "\xC3\xA9t\xC3\xA9 \xE2\x82\xAC" "5"),
              ElementsAre("\xC3\xA9t\xC3\xA9", " \xE2\x82\xAC", "5"));
  EXPECT_THAT(Split(kGpt2, ""), ElementsAre());
}

TEST(SplitRegexTest, ClassesQuantifiersAndGroups) {
  EXPECT_THAT(Split("[a-c]{2}", "abcab"), ElementsAre("ab", "ca", "b"));
  EXPECT_THAT(Split("x{2,}", "xxxyxx"), ElementsAre("xxx", "y", "xx"));
  EXPECT_THAT(Split("(?:ab){1,2}", "abababa"), ElementsAre("abab", "ab", "a"));
  EXPECT_THAT(Split("(?:a?){2}b", "b"), ElementsAre("b"));
  EXPECT_THAT(Split("(?:a?){2}b", "aaab"), ElementsAre("a", "aab"));
  EXPECT_THAT(Split("a(?=b)", "acab"), ElementsAre("ac", "a", "b"));
  EXPECT_THAT(Split("[^\\s]+", "a b"), ElementsAre("a", " ", "b"));
  EXPECT_THAT(Split("\\x{41}|\\u0042", "xAyB"), ElementsAre("x", "A", "y", "B"));
  EXPECT_THAT(Split("[\\p{N}x]+", "a1x2b"), ElementsAre("a", "1x2", "b"));
  EXPECT_THAT(Split("\\P{L}+", "ab12cd"), ElementsAre("ab", "12", "cd"));
  // \p{P}: punctuation as the regex module classes it (guillemets, the
  // ideographic full stop; not $ + < = > ^ | ~, which are symbols).
  EXPECT_THAT(Split("\\p{P}+", "a,b.\u00ab\u3002$"), ElementsAre("a", ",", "b", ".\u00ab\u3002", "$"));
  EXPECT_THAT(Split("[\\p{P}\\$\\+<=>\\^~\\|]+", "x+=!y"), ElementsAre("x", "+=!", "y"));
  EXPECT_THAT(Split("\\P{P}+", "ab,cd"), ElementsAre("ab", ",", "cd"));
  EXPECT_THAT(Split("a{,2}b", "aaab"), ElementsAre("a", "aab"));
  EXPECT_THAT(Split("x{y", "ax{yb"), ElementsAre("a", "x{y", "b"));  // not a quantifier
  EXPECT_THAT(Split("x{2", "x{2x"), ElementsAre("x{2", "x"));
}

TEST(SplitRegexTest, UnsupportedConstructsNameThemselves) {
  auto message = [](const char* p) {
    auto re = SplitRegex::Compile(p);
    EXPECT_FALSE(re.ok()) << p;
    return re.ok() ? std::string() : std::string(re.status().message());
  };
  EXPECT_THAT(message("\\p{Sc}+"), HasSubstr("\\p{Sc} is not supported"));
  EXPECT_THAT(message("a+?"), HasSubstr("lazy and possessive"));
  EXPECT_THAT(message("(?<=a)b"), HasSubstr("group kind is not supported"));
  EXPECT_THAT(message("^a"), HasSubstr("anchors"));
  EXPECT_THAT(message("(ab)+"), HasSubstr("at most 16 times"));
  EXPECT_THAT(message("a|"), HasSubstr("can match the empty string"));
  EXPECT_THAT(message("(a"), HasSubstr("missing ')'"));
  EXPECT_THAT(message("a)"), HasSubstr("unbalanced ')'"));
  EXPECT_THAT(message("[a"), HasSubstr("unterminated character class"));
  EXPECT_THAT(message("\\w"), HasSubstr("escape \\w is not supported at offset 2"));
}

TEST(SplitRegexTest, CatastrophicBacktrackingIsAnErrorNotAHang) {
  // (x?){16}x{16} on 16 x's and a y: exponential without a budget.
  auto re = SplitRegex::Compile("(?:x?){16}x{16}y|z");
  ASSERT_TRUE(re.ok()) << re.status();
  std::vector<char32_t> text(40, 'x');
  size_t b, e;
  auto found = re->Find(text, 0, &b, &e);
  ASSERT_FALSE(found.ok());
  EXPECT_THAT(std::string(found.status().message()), HasSubstr("backtracks too much"));
}

}  // namespace
}  // namespace flover
