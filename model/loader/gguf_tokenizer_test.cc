// Tokenizers from GGUF metadata tokenize as llama.cpp does: the ids of
// llama.cpp's llama-tokenize on the same files (tests/golden/gguf, written by
// make_gguf_golden.py, which also checks sentencepiece and the tokenizers
// library agree where they should) for a SentencePiece vocabulary with and
// without add_space_prefix, byte-level BPE under four pre-tokenizers, and
// the real SmolLM2-135M-Instruct file; decoding gives the text back.
#include "model/loader/gguf_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/files.h"
#include "testing/gguf_text.h"
#include "testing/golden.h"
#include "testing/gguf_writer.h"
#include "util/json.h"

namespace flover {
namespace {

using ::testing::HasSubstr;
using testing::GgufWriter;

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<Case> Cases(const google::protobuf::ListValue& list) {
  std::vector<Case> out;
  for (const auto& v : list.values()) {
    const auto& f = v.struct_value().fields();
    out.push_back({f.at("text").string_value(), testing::JsonIds(f.at("ids"))});
  }
  return out;
}

bool HasSpecialToken(const std::string& text) {
  for (const char* t : {"<|", "<s>", "</s>", "<unk>"}) {
    if (text.find(t) != std::string::npos) return true;
  }
  return false;
}

// Every case's ids, and its text back from them (without the BOS the
// tokenizer adds). Text after a special token is not decoded back by a
// SentencePiece vocabulary: it took a prefix space (llama.cpp's and HF's
// legacy Llama tokenizers alike), which decoding keeps; that case is
// checked on its own below.
void ExpectCases(const Tokenizer& tok, const std::vector<Case>& cases, const std::string& what) {
  ASSERT_FALSE(cases.empty()) << what;
  auto empty = tok.Encode("");
  ASSERT_TRUE(empty.ok());
  for (const Case& c : cases) {
    auto ids = tok.Encode(c.text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, c.ids) << what << ": \"" << c.text << "\"";
    if (what.rfind("vocab_spm", 0) == 0 && HasSpecialToken(c.text)) continue;
    const std::vector<int32_t> body(c.ids.begin() + empty->size(), c.ids.end());
    EXPECT_EQ(tok.Decode(body), c.text) << what << ": decode of \"" << c.text << "\"";
  }
}

TEST(GgufTokenizerTest, TokenizesAsLlamaCppDoes) {
  auto all = ParseJsonObject(testing::ReadFileOrEmpty("tests/golden/gguf/vocab_cases.json"), "cases");
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->fields_size(), 6);
  for (const auto& [name, list] : all->fields()) {
    const GgufText t = testing::LoadGgufText("tests/golden/gguf/" + name + ".gguf");
    ASSERT_NE(t.tokenizer, nullptr) << name;
    ExpectCases(*t.tokenizer, Cases(list.list_value()), name);
  }
  // SentencePiece: the prefix space after a special token decodes as a space.
  const GgufText spm = testing::LoadGgufText("tests/golden/gguf/vocab_spm.gguf");
  auto ids = spm.tokenizer->Encode("x<|end|>y");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(spm.tokenizer->Decode(absl::MakeConstSpan(*ids).subspan(1)), "x<|end|> y");
}

TEST(GgufTokenizerTest, SmolLM2TokenizesAsLlamaCppDoes) {
  const std::string path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  ASSERT_TRUE(GgufFile::Open(path).ok()) << "run tools/setup.sh to fetch " << path;
  const GgufText t = testing::LoadGgufText(path);
  ASSERT_NE(t.tokenizer, nullptr);
  auto cases = ParseJsonObject(
      "{\"c\": " + testing::ReadFileOrEmpty("tests/golden/gguf/smollm2_cases.json") + "}", "cases");
  ASSERT_TRUE(cases.ok()) << cases.status();
  ExpectCases(*t.tokenizer, Cases(cases->fields().at("c").list_value()), "smollm2");
  EXPECT_EQ(t.eos_ids, std::vector<int32_t>{2});  // <|im_end|>
  EXPECT_THAT(t.chat_template, HasSubstr("<|im_start|>"));
}

// A vocabulary of a few byte-level tokens under `pre`, and what loading it says.
std::string LoadError(const std::function<void(GgufWriter&)>& keys) {
  GgufWriter w;
  keys(w);
  auto file = GgufFile::Parse(w.Bytes(), "v.gguf");
  if (!file.ok()) return std::string(file.status().message());
  auto text = ReadGgufText(*file, 100);
  return text.ok() ? "loaded" : std::string(text.status().message());
}

TEST(GgufTokenizerTest, RefusesWhatItCannotTokenizeByName) {
  auto bpe = [](const std::string& pre) {
    return [pre](GgufWriter& w) {
      w.String("tokenizer.ggml.model", "gpt2").String("tokenizer.ggml.pre", pre);
      w.Strings("tokenizer.ggml.tokens", {"a", "b", "ab"}).Strings("tokenizer.ggml.merges", {"a b"});
    };
  };
  EXPECT_EQ(LoadError(bpe("gpt2")), "loaded");
  EXPECT_EQ(LoadError(bpe("gpt-2")), "loaded");
  // llama-bpe adds BOS unless the file says not to: it must name one.
  EXPECT_THAT(LoadError(bpe("llama-bpe")),
              HasSubstr("v.gguf: add_bos_token is set but the file names no tokenizer.ggml.bos_token_id"));
  EXPECT_EQ(LoadError([&](GgufWriter& w) {
              bpe("llama-bpe")(w);
              w.U32("tokenizer.ggml.bos_token_id", 0);
            }),
            "loaded");
  EXPECT_THAT(LoadError(bpe("tekken")),
              HasSubstr("v.gguf: tokenizer.ggml.pre \"tekken\" is not supported (known: default, "
                        "llama3"));
  EXPECT_THAT(LoadError([](GgufWriter& w) {
                w.String("tokenizer.ggml.model", "bert").Strings("tokenizer.ggml.tokens", {"a"});
              }),
              HasSubstr("tokenizer.ggml.model \"bert\" is not supported"));
  EXPECT_THAT(LoadError([](GgufWriter& w) {
                w.String("tokenizer.ggml.model", "llama").Strings("tokenizer.ggml.tokens", {"a", "b"});
              }),
              HasSubstr("tokenizer.ggml.scores has 0 entries for 2 tokens"));
  EXPECT_THAT(LoadError([&](GgufWriter& w) {
                bpe("gpt2")(w);
                w.U32("tokenizer.ggml.bos_token_id", 7);
              }),
              HasSubstr("tokenizer.ggml.bos_token_id 7 is outside the 3 tokens"));
  EXPECT_THAT(LoadError([](GgufWriter& w) {
                w.String("tokenizer.ggml.model", "gpt2").Strings("tokenizer.ggml.tokens", {"a", "b"});
                w.Strings("tokenizer.ggml.merges", {"a b"});
              }),
              HasSubstr("tokenizer.ggml.merges[0] makes 'ab', which is not in the vocabulary"));
  EXPECT_THAT(LoadError([](GgufWriter& w) {
                w.String("tokenizer.ggml.model", "gpt2").U32("tokenizer.ggml.tokens", 3);
              }),
              HasSubstr("metadata tokenizer.ggml.tokens must be an array of strings, not u32"));
  EXPECT_THAT(LoadError([&](GgufWriter& w) {
                bpe("gpt2")(w);
                w.Kv("tokenizer.ggml.eos_token_id", GgufWriter::kI64, GgufWriter::Raw<int64_t>(-1));
              }),
              HasSubstr("tokenizer.ggml.eos_token_id -1 is not a token id"));
  // No tokenizer at all: token ids only.
  EXPECT_EQ(LoadError([](GgufWriter& w) { w.String("general.name", "x"); }), "loaded");
}

// gpt-oss's files (<|return|> the EOS): a tool call's <|call|> ends a reply
// too, and <|end|> (between its channels' messages) does not.
TEST(GgufTokenizerTest, HarmonyCallEndsGenerationAsItsReturnDoes) {
  GgufWriter w;
  w.String("tokenizer.ggml.model", "gpt2").String("tokenizer.ggml.pre", "gpt-4o");
  w.Strings("tokenizer.ggml.tokens", {"a", "b", "<|return|>", "<|end|>", "<|call|>"});
  w.Array<int32_t>("tokenizer.ggml.token_type", GgufWriter::kI32, {1, 1, 3, 3, 3});
  w.U32("tokenizer.ggml.eos_token_id", 2);
  auto file = GgufFile::Parse(w.Bytes(), "v.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  auto text = ReadGgufText(*file, 5);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->eos_ids, (std::vector<int32_t>{2, 4}));
  // Another EOS: <|call|> is just a token.
  GgufWriter other;
  other.String("tokenizer.ggml.model", "gpt2").String("tokenizer.ggml.pre", "gpt2");
  other.Strings("tokenizer.ggml.tokens", {"a", "b", "</s>", "<|end|>", "<|call|>"});
  other.Array<int32_t>("tokenizer.ggml.token_type", GgufWriter::kI32, {1, 1, 3, 3, 3});
  other.U32("tokenizer.ggml.eos_token_id", 2);
  auto file2 = GgufFile::Parse(other.Bytes(), "v.gguf");
  ASSERT_TRUE(file2.ok());
  auto text2 = ReadGgufText(*file2, 5);
  ASSERT_TRUE(text2.ok()) << text2.status();
  EXPECT_EQ(text2->eos_ids, (std::vector<int32_t>{2}));
}

// Gemma 4's files (llama.cpp writes <turn|> and <|tool_response> as
// user-defined tokens): a turn ends at <turn|>, a turn of calls at
// <|tool_response>, beside the EOS, as llama.cpp ends them.
TEST(GgufTokenizerTest, Gemma4TurnsEndAtTheirMarkers) {
  GgufWriter w;
  w.String("tokenizer.ggml.model", "gemma4");
  w.Strings("tokenizer.ggml.tokens", {"<pad>", "<eos>", "<bos>", "\xe2\x96\x81a", "<turn|>", "<|tool_response>"});
  w.Array<int32_t>("tokenizer.ggml.token_type", GgufWriter::kI32, {3, 3, 3, 1, 4, 4});
  w.Array<float>("tokenizer.ggml.scores", GgufWriter::kF32, {0, 0, 0, -1, 0, 0});
  w.U32("tokenizer.ggml.eos_token_id", 1).U32("tokenizer.ggml.bos_token_id", 2);
  auto file = GgufFile::Parse(w.Bytes(), "v.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  auto text = ReadGgufText(*file, 6);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->eos_ids, (std::vector<int32_t>{1, 4, 5}));
}

TEST(GgufTokenizerTest, AVocabularyLargerThanTheModelIsRefused) {
  GgufWriter w;
  w.String("tokenizer.ggml.model", "gpt2").String("tokenizer.ggml.pre", "gpt2");
  w.Strings("tokenizer.ggml.tokens", {"a", "b", "ab"});
  auto file = GgufFile::Parse(w.Bytes(), "v.gguf");
  ASSERT_TRUE(file.ok());
  EXPECT_THAT(ReadGgufText(*file, 2).status().message(),
              HasSubstr("tokenizer.ggml.tokens holds 3 tokens, more than the model's 2 embedding rows"));
}

}  // namespace
}  // namespace flover
