// HfTokenizer against the Hugging Face `tokenizers` library: the fixtures
// under tests/golden/hf_tokenizers were written by make_tokenizer_golden.py
// (ids and text from the library for each tokenizer.json).
#include "tokenizer/hf_tokenizer.h"

#include <map>
#include <utility>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/files.h"
#include "testing/golden.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/unicode.h"
#include "util/file_util.h"
#include "util/json.h"

namespace flover {
namespace {

using testing::JsonIds;
using ::testing::HasSubstr;

constexpr char kDir[] = "tests/golden/hf_tokenizers/";

std::unique_ptr<HfTokenizer> Load(const std::string& kind) {
  auto t = HfTokenizer::LoadFile(kDir + kind + "/tokenizer.json");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

google::protobuf::Struct Cases(const std::string& kind) {
  auto cases = ParseJsonObject(testing::ReadFileOrEmpty(kDir + kind + "/cases.json"), kind);
  EXPECT_TRUE(cases.ok()) << cases.status();
  return cases.ok() ? *cases : google::protobuf::Struct();
}

const google::protobuf::RepeatedPtrField<google::protobuf::Value>& List(
    const google::protobuf::Struct& s, const std::string& key) {
  return s.fields().at(key).list_value().values();
}

// The text a stream of ids adds, pushed one id at a time.
std::string StreamText(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  auto stream = tok.NewTextStream();
  std::string text;
  for (int32_t id : ids) text += stream->Push(id);
  return text + stream->Finish();
}

// Every case of one fixture: Encode's ids, Decode's text, and the text a
// stream of ids adds after a prompt.
void ExpectMatchesLibrary(const HfTokenizer& tok, const std::string& kind) {
  const google::protobuf::Struct cases = Cases(kind);
  ASSERT_GE(List(cases, "encode").size(), 20) << kind;
  for (const auto& c : List(cases, "encode")) {
    const auto& f = c.struct_value().fields();
    const std::string& text = f.at("text").string_value();
    auto ids = tok.Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, JsonIds(f.at("ids"))) << kind << ": " << text;
    EXPECT_EQ(tok.Decode(*ids), f.at("decoded").string_value()) << kind << ": " << text;
  }
  ASSERT_GE(List(cases, "decode").size(), 40) << kind;
  for (const auto& c : List(cases, "decode")) {
    const auto& f = c.struct_value().fields();
    EXPECT_EQ(tok.Decode(JsonIds(f.at("ids"))), f.at("decoded").string_value()) << kind;
  }
  ASSERT_GE(List(cases, "continue").size(), 8) << kind;
  for (const auto& c : List(cases, "continue")) {
    const auto& f = c.struct_value().fields();
    EXPECT_EQ(StreamText(tok, JsonIds(f.at("ids"))), f.at("text").string_value())
        << kind << ": after " << tok.Decode(JsonIds(f.at("prompt_ids")));
  }
}

// Qwen 2 and 3's normalizer, NFC: encodings equal the library's on texts
// whose NFC differs from them (make_nfc_golden.py); and NfcNormalize equals
// Python's unicodedata on every code point with a canonical decomposition,
// as itself and decomposed, and on random sequences of combining marks.
TEST(HfTokenizerTest, NfcNormalizerAsQwenHasIt) {
  auto tok = Load("qwen_nfc");
  ASSERT_NE(tok, nullptr);
  ExpectMatchesLibrary(*tok, "qwen_nfc");
  auto cases = ParseJsonObject(testing::ReadFileOrEmpty("tests/golden/nfc/cases.json"), "nfc");
  ASSERT_TRUE(cases.ok()) << cases.status();
  const auto& list = List(*cases, "cases");
  ASSERT_GT(list.size(), 4000);
  int changed = 0;
  for (const auto& c : list) {
    const auto& f = c.struct_value().fields();
    const std::string& text = f.at("text").string_value();
    EXPECT_EQ(NfcNormalize(text), f.at("nfc").string_value()) << text;
    changed += text != f.at("nfc").string_value();
  }
  EXPECT_GT(changed, 2000);  // most are decomposed forms NFC composes
  const std::string ascii = "plain ASCII stays as it is";
  EXPECT_EQ(NfcNormalize(ascii), ascii);
}

TEST(HfTokenizerTest, ByteLevelLlama3Style) {
  // Llama 3's split regex, ignore_merges, a BOS template, special tokens and
  // added tokens with lstrip / rstrip / single_word.
  auto tok = Load("llama3");
  ASSERT_NE(tok, nullptr);
  ExpectMatchesLibrary(*tok, "llama3");
  EXPECT_EQ(tok->TokenId("<|eot_id|>"), 902);
  EXPECT_EQ(tok->vocab_size(), 906);
}

TEST(HfTokenizerTest, ByteLevelQwenStyle) { ExpectMatchesLibrary(*Load("qwen"), "qwen"); }

// Qwen3.5's tokenizer.json pipeline (NFC; its split pattern, which keeps
// combining marks \p{M} with letters; ByteLevel; no byte fallback) on text
// with marks: Devanagari, Thai, Vietnamese, Hebrew points, Arabic harakat,
// emoji with variation selectors and keycaps, stray and stacked marks.
TEST(HfTokenizerTest, ByteLevelQwen35StyleKeepsMarksWithLetters) {
  auto tok = Load("qwen35");
  ASSERT_NE(tok, nullptr);
  ExpectMatchesLibrary(*tok, "qwen35");
  EXPECT_EQ(tok->TokenId("<|im_end|>"), 1202);
  // A word with marks is one token of this vocabulary, as the pattern keeps
  // it whole (Qwen 2's would cut it at each mark).
  auto ids = tok->Encode("\u0939\u093f\u0928\u094d\u0926\u0940");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->size(), 1u);
}

// A fixture's tokenizer.json vocabulary as llama.cpp's converter writes it
// into a GGUF file (special added tokens as control tokens, the others user
// defined; BOS <|begin_of_text|> where there is one), under `pre`.
GgufVocab AsGgufVocab(const std::string& kind, const std::string& pre) {
  auto doc = ParseJsonObject(testing::ReadFileOrEmpty(kDir + kind + "/tokenizer.json"), kind);
  EXPECT_TRUE(doc.ok()) << doc.status();
  if (!doc.ok()) return {};
  const auto& model = doc->fields().at("model").struct_value().fields();
  std::map<int, std::pair<std::string, GgufTokenType>> by_id;
  for (const auto& [text, id] : model.at("vocab").struct_value().fields()) {
    by_id[static_cast<int>(id.number_value())] = {text, GgufTokenType::kNormal};
  }
  for (const auto& a : List(*doc, "added_tokens")) {
    const auto& f = a.struct_value().fields();
    by_id[static_cast<int>(f.at("id").number_value())] = {
        f.at("content").string_value(),
        f.at("special").bool_value() ? GgufTokenType::kControl : GgufTokenType::kUserDefined};
  }
  GgufVocab v;
  v.model = "gpt2";
  v.pre = pre;
  for (const auto& [id, token] : by_id) {
    EXPECT_EQ(id, static_cast<int>(v.tokens.size())) << kind << ": ids are not contiguous";
    v.tokens.push_back(token.first);
    v.types.push_back(static_cast<int32_t>(token.second));
    if (token.first == "<|begin_of_text|>") v.bos_id = id;
  }
  for (const auto& m : model.at("merges").list_value().values()) {
    v.merges.push_back(m.has_string_value() ? m.string_value()
                                            : m.list_value().values(0).string_value() + " " +
                                                  m.list_value().values(1).string_value());
  }
  return v;
}

// o200k's pattern (gpt-oss: letter runs split by case, by the letters'
// categories) over a vocabulary trained with it, as the library encodes.
TEST(HfTokenizerTest, O200kPatternMatchesTheLibrary) {
  auto tok = Load("o200k");
  ASSERT_NE(tok, nullptr);
  ExpectMatchesLibrary(*tok, "o200k");
}

// GGUF files of the hybrid families and gpt-oss: llama.cpp's pre-tokenizers
// "qwen35" (Qwen3.5's pattern, without the NFC its tokenizer.json has: two
// cases with decomposed text differ from the qwen35 fixture), "lfm2" (Llama
// 3's, BOS added) and "gpt-4o" (o200k's) give llama.cpp's own ids
// (hf_tokenizers/llama_cpp, from make_tokenizer_golden.py).
TEST(HfTokenizerTest, GgufQwen35Lfm2AndGpt4oTokenizeAsLlamaCppDoes) {
  const google::protobuf::Struct all = Cases("llama_cpp");
  ASSERT_EQ(all.fields_size(), 3);
  for (const auto& [name, entry] : all.fields()) {
    const auto& f = entry.struct_value().fields();
    auto tok = HfTokenizer::FromGgufVocab(
        AsGgufVocab(f.at("vocabulary").string_value(), f.at("pre").string_value()), name);
    ASSERT_TRUE(tok.ok()) << tok.status();
    ASSERT_GE(f.at("cases").list_value().values_size(), 30) << name;
    for (const auto& c : f.at("cases").list_value().values()) {
      const auto& cf = c.struct_value().fields();
      auto ids = (*tok)->Encode(cf.at("text").string_value());
      ASSERT_TRUE(ids.ok()) << ids.status();
      EXPECT_EQ(*ids, JsonIds(cf.at("ids"))) << name << ": " << cf.at("text").string_value();
    }
  }
}

// Gemma 4's GGUF tokenizer model "gemma4" (SentencePiece-style BPE: U+2581
// spaces, merges over raw UTF-8, byte tokens, runs of newlines apart and
// taken whole where they are a token) gives llama.cpp's own ids, and
// decodes back to the text (hf_tokenizers/llama_cpp_gemma4, from
// make_tokenizer_golden.py).
TEST(HfTokenizerTest, GgufGemma4TokenizesAsLlamaCppDoes) {
  auto doc = ParseJsonObject(testing::ReadFileOrEmpty(std::string(kDir) + "llama_cpp_gemma4/cases.json"), "gemma4");
  ASSERT_TRUE(doc.ok()) << doc.status();
  const auto& f = doc->fields();
  GgufVocab v;
  v.model = "gemma4";
  v.pre = "gemma4";
  for (const auto& t : List(*doc, "tokens")) v.tokens.push_back(t.string_value());
  for (const auto& t : List(*doc, "types")) v.types.push_back(static_cast<int32_t>(t.number_value()));
  for (const auto& m : List(*doc, "merges")) v.merges.push_back(m.string_value());
  v.bos_id = static_cast<int32_t>(f.at("bos").number_value());
  v.eos_id = static_cast<int32_t>(f.at("eos").number_value());
  v.add_space_prefix = false;
  auto tok = HfTokenizer::FromGgufVocab(v, "gemma4");
  ASSERT_TRUE(tok.ok()) << tok.status();
  ASSERT_GE(List(*doc, "cases").size(), 30);
  int round_trips = 0;
  for (const auto& c : List(*doc, "cases")) {
    const auto& cf = c.struct_value().fields();
    const std::string& text = cf.at("text").string_value();
    auto ids = (*tok)->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, JsonIds(cf.at("ids"))) << text;
    if (text.find('<') == std::string::npos) {  // no special token's text
      EXPECT_EQ((*tok)->Decode(std::vector<int32_t>(ids->begin() + 1, ids->end())), text);
      ++round_trips;
    }
  }
  EXPECT_GE(round_trips, 20);
  // A model of another name is refused, naming the ones read.
  v.model = "ugm";
  EXPECT_THAT(std::string(HfTokenizer::FromGgufVocab(v, "x").status().message()),
              ::testing::HasSubstr("gemma4: SentencePiece-style BPE"));
}

TEST(HfTokenizerTest, Gpt2TokenizerJsonAndVocabMergesAgree) {
  auto json = Load("gpt2");
  ASSERT_NE(json, nullptr);
  ExpectMatchesLibrary(*json, "gpt2");
  // The same vocabulary from vocab.json + merges.txt gives the same ids.
  auto files = HfTokenizer::LoadGpt2Files("tests/golden/tokenizer/vocab.json",
                                          "tests/golden/tokenizer/merges.txt");
  ASSERT_TRUE(files.ok()) << files.status();
  ExpectMatchesLibrary(**files, "gpt2");
  EXPECT_EQ((*files)->TokenId("<|endoftext|>"), (*files)->vocab_size() - 1);
}

TEST(HfTokenizerTest, Gpt2OwnVocabularyMatchesGpt2Tokenizer) {
  // GPT-2's vocab.json + merges.txt (50,257 tokens), as builtin:gpt2-small
  // uses them; fetched by tools/setup.sh. Cases from transformers' slow
  // GPT2Tokenizer.
  const std::string dir = "third_party/gpt2_vocab/";
  ASSERT_TRUE(FileExists(dir + "vocab.json") && FileExists(dir + "merges.txt"))
      << "GPT-2's vocabulary is missing: run tools/setup.sh (tools/fetch_gpt2_vocab.py)";
  auto tok = HfTokenizer::LoadGpt2Files(dir + "vocab.json", dir + "merges.txt");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->TokenId("<|endoftext|>"), 50256);
  ExpectMatchesLibrary(**tok, "gpt2_openai");
}

TEST(HfTokenizerTest, Gpt2FilesMatchGpt2Tokenizer) {
  // tests/golden/tokenizer/cases.json: transformers' (slow) GPT2Tokenizer.
  auto tok = HfTokenizer::LoadGpt2Files("tests/golden/tokenizer/vocab.json",
                                        "tests/golden/tokenizer/merges.txt");
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto cases = ParseJsonObject(testing::ReadFileOrEmpty("tests/golden/tokenizer/cases.json"), "cases");
  ASSERT_TRUE(cases.ok()) << cases.status();
  ASSERT_GE(List(*cases, "encode").size(), 15);
  for (const auto& c : List(*cases, "encode")) {
    const auto& f = c.struct_value().fields();
    const std::string& text = f.at("text").string_value();
    auto ids = (*tok)->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, JsonIds(f.at("ids"))) << text;
    EXPECT_EQ((*tok)->Decode(*ids), f.at("decoded").string_value()) << text;
    EXPECT_EQ((*tok)->Decode(*ids), text) << "round trip";
  }
  // Arbitrary ids, including byte tokens that cut UTF-8 characters in half.
  for (const auto& c : List(*cases, "decode")) {
    const auto& f = c.struct_value().fields();
    EXPECT_EQ((*tok)->Decode(JsonIds(f.at("ids"))), f.at("decoded").string_value());
  }
  // Every ASCII byte round-trips; a lone byte >= 0x80 is not UTF-8.
  for (int b = 0; b < 256; ++b) {
    const std::string s(1, static_cast<char>(b));
    auto ids = (*tok)->Encode(s);
    if (b >= 0x80) {
      EXPECT_FALSE(ids.ok());
      continue;
    }
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ((*tok)->DecodeBytes(*ids), s);
  }
}

TEST(HfTokenizerTest, SentencePieceLegacyPrependNormalizer) {
  // Llama 2 / TinyLlama files: Prepend + Replace normalizer, byte fallback,
  // and Replace / ByteFallback / Fuse / Strip decoding.
  ExpectMatchesLibrary(*Load("spm_legacy"), "spm_legacy");
}

TEST(HfTokenizerTest, SentencePieceMetaspaceFirst) {
  ExpectMatchesLibrary(*Load("spm_metaspace"), "spm_metaspace");
}

TEST(HfTokenizerTest, SentencePieceMetaspaceSplitAndDecoder) {
  ExpectMatchesLibrary(*Load("spm_split"), "spm_split");
}

TEST(HfTokenizerTest, IgnoreMergesUnknownFusionAndRemovedSplits) {
  ExpectMatchesLibrary(*Load("edge"), "edge");
}

TEST(HfTokenizerTest, ByteFallbackCoversCharactersOutsideTheVocabulary) {
  auto tok = Load("spm_legacy");
  ASSERT_NE(tok, nullptr);
  // U+9F98 is not in the trained vocabulary: three byte tokens stand for it.
  auto ids = tok->Encode("\xE9\xBE\x98");
  ASSERT_TRUE(ids.ok());
  ASSERT_GE(ids->size(), 4u);
  const std::vector<int32_t> bytes(ids->end() - 3, ids->end());
  EXPECT_EQ(bytes, (std::vector<int32_t>{tok->TokenId("<0xE9>"), tok->TokenId("<0xBE>"),
                                         tok->TokenId("<0x98>")}));
  EXPECT_EQ(tok->DecodeBytes(bytes), "\xE9\xBE\x98");
  // Cut mid-character, the raw bytes are the bytes, while the library's
  // decode (and so the streamed text) has one U+FFFD per byte.
  EXPECT_EQ(tok->DecodeBytes({bytes[0], bytes[1]}), "\xE9\xBE");
  EXPECT_EQ(tok->Decode({bytes[0], bytes[1]}), "\xEF\xBF\xBD\xEF\xBF\xBD");
  const int32_t x = tok->TokenId("x");
  ASSERT_GE(x, 0);
  EXPECT_EQ(StreamText(*tok, {bytes[0], bytes[1], x}), "\xEF\xBF\xBD\xEF\xBF\xBDx");
  // The stream holds a run of byte tokens until it ends.
  auto stream = tok->NewTextStream();
  EXPECT_EQ(stream->Push(bytes[0]), "");
  EXPECT_EQ(stream->Push(bytes[1]), "");
  EXPECT_EQ(stream->Push(bytes[2]), "");
  EXPECT_EQ(stream->Push(x), "\xE9\xBE\x98x");
  EXPECT_EQ(stream->Finish(), "");
}

TEST(HfTokenizerTest, RejectsInvalidUtf8Input) {
  auto tok = Load("llama3");
  ASSERT_NE(tok, nullptr);
  auto ids = tok->Encode("ok \xC3(");
  ASSERT_FALSE(ids.ok());
  EXPECT_THAT(std::string(ids.status().message()), HasSubstr("invalid UTF-8 at byte 3"));
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

TEST(HfTokenizerTest, UnsupportedPartsAndBadFilesAreClearErrors) {
  const std::string base = testing::ReadFileOrEmpty(std::string(kDir) + "edge/tokenizer.json");
  ASSERT_TRUE(HfTokenizer::FromJson(base, "t").ok());
  auto error = [](const std::string& json) {
    auto t = HfTokenizer::FromJson(json, "t.json");
    EXPECT_FALSE(t.ok());
    return t.ok() ? std::string() : std::string(t.status().message());
  };
  EXPECT_THAT(error(Replace(base, "\"normalizer\": null", "\"normalizer\": {\"type\": \"NFKC\"}")),
              HasSubstr("t.json: normalizer: type NFKC is not supported"));
  EXPECT_THAT(error(Replace(base, "\"type\": \"BPE\"", "\"type\": \"Unigram\"")),
              HasSubstr("model: type Unigram is not supported"));
  EXPECT_THAT(error(Replace(base, "\"dropout\": null", "\"dropout\": 0.1")),
              HasSubstr("BPE dropout is not supported"));
  EXPECT_THAT(error(Replace(base, "\"a b\"", "\"a q\"")),
              HasSubstr("model.merges[0] uses 'q', which is not in the vocabulary"));
  EXPECT_THAT(error(Replace(base, "\"c d\"", "\"d c\"")),
              HasSubstr("model.merges[1] makes 'dc', which is not in the vocabulary"));
  EXPECT_THAT(error(Replace(base, "\"a\": 1", "\"a\": 0")), HasSubstr("is used twice"));
  EXPECT_THAT(error(Replace(base, "\"Regex\": \"\\\\s+\"", "\"Regex\": \"\\\\s+\\\\d\"")),
              HasSubstr("escape \\d is not supported"));
  EXPECT_THAT(error(Replace(base, "\"Regex\": \"\\\\s+\"", "\"Regex\": \"\\\\s*\"")),
              HasSubstr("can match the empty string"));
  EXPECT_THAT(error(Replace(base, "\"type\": \"Fuse\"", "\"type\": \"WordPiece\"")),
              HasSubstr("decoder: type WordPiece is not supported"));
  EXPECT_THAT(error(Replace(base, "\"unk_token\": \"<unk>\"", "\"unk_token\": \"<u>\"")),
              HasSubstr("unk_token '<u>' is not in the vocabulary"));
  EXPECT_THAT(error("[1, 2]"), HasSubstr("t.json"));
  EXPECT_THAT(error("{}"), HasSubstr("model: missing"));
}

TEST(HfTokenizerTest, Gpt2FilesBadInputAreClearErrors) {
  auto message = [](absl::string_view vocab, absl::string_view merges) {
    auto t = HfTokenizer::FromGpt2Files(vocab, merges, "tok");
    EXPECT_FALSE(t.ok());
    return t.ok() ? std::string() : std::string(t.status().message());
  };
  EXPECT_THAT(message("{\"a\": 0", ""), HasSubstr("vocab.json: not a valid JSON object"));
  EXPECT_THAT(message("{\"a\": 0}", ""), HasSubstr("lacks the symbol for byte 0"));
  EXPECT_THAT(message("{\"a\": 5}", ""), HasSubstr("must be an integer in [0, 0]"));
  const std::string vocab = testing::ReadFileOrEmpty("tests/golden/tokenizer/vocab.json");
  EXPECT_THAT(message(vocab, "#version: 0.2\na b c\n"),
              HasSubstr("merges.txt line 2 is not two symbols"));
  EXPECT_THAT(message(vocab, "q z\n"), HasSubstr("merges.txt line 1 makes 'qz', which is not in"));
}

TEST(HfTokenizerTest, LongInputsEncodeInOnePass) {
  // A SentencePiece-style tokenizer has no pre-tokenizer: the whole text is
  // one BPE word. 200k characters must still encode (and round-trip).
  auto tok = Load("spm_legacy");
  ASSERT_NE(tok, nullptr);
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "the serve ";
  auto ids = tok->Encode(text);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(tok->Decode(*ids), "<s> " + text);
  // And a run of white space through Llama 3's regex.
  auto l3 = Load("llama3");
  ASSERT_NE(l3, nullptr);
  const std::string spaces(100000, ' ');
  auto sids = l3->Encode(spaces + "x");
  ASSERT_TRUE(sids.ok());
  EXPECT_EQ(l3->Decode(*sids), "<|begin_of_text|>" + spaces + "x");
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
