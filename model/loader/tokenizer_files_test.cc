// A model directory's tokenizer and stop ids: which file wins, and clear
// errors for files that disagree with the model.
#include "model/loader/tokenizer_files.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "testing/files.h"
#include "testing/golden.h"
#include "util/json.h"

namespace flover {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kLlamaText[] = "tests/golden/llama_text";  // tokenizer.json, 700 tokens

class TokenizerFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/flover_tokfiles_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    testing::WriteFile(dir_ + "/" + name, text);
  }
  void CopyTokenizer() {
    std::filesystem::copy_file(std::string(kLlamaText) + "/tokenizer.json", dir_ + "/tokenizer.json");
  }
  std::string dir_;
};

TEST_F(TokenizerFilesTest, TokenizerJsonWinsAndMustFitTheModel) {
  auto tok = LoadDirectoryTokenizer(kLlamaText, 700, "llama");
  ASSERT_TRUE(tok.ok()) << tok.status();
  ASSERT_NE(*tok, nullptr);
  EXPECT_EQ((*tok)->vocab_size(), 700);
  auto small = LoadDirectoryTokenizer(kLlamaText, 600, "llama");
  ASSERT_FALSE(small.ok());
  EXPECT_THAT(std::string(small.status().message()),
              HasSubstr("the tokenizer has 700 tokens but the model's vocab_size is 600"));
}

TEST_F(TokenizerFilesTest, NoTokenizerFilesMeansIdsOnly) {
  auto tok = LoadDirectoryTokenizer(dir_, 100, "gpt2");
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ(*tok, nullptr);
  Write("vocab.json", "{}");
  auto half = LoadDirectoryTokenizer(dir_, 100, "gpt2");
  ASSERT_FALSE(half.ok());
  EXPECT_THAT(std::string(half.status().message()), HasSubstr("needs both vocab.json and merges.txt"));
}

TEST_F(TokenizerFilesTest, EosFromGenerationConfigThenConfigThenTokenizerConfig) {
  CopyTokenizer();
  auto tok = LoadDirectoryTokenizer(dir_, 700, "llama");
  ASSERT_TRUE(tok.ok() && *tok != nullptr);
  const HfTokenizer* t = tok->get();

  // Nothing but config.json's ids.
  auto eos = ResolveEosIds(dir_, {2}, t, 700);
  ASSERT_TRUE(eos.ok());
  EXPECT_THAT(*eos, ElementsAre(2));
  // tokenizer_config.json's eos_token when config.json has none: a string or
  // an AddedToken object.
  Write("tokenizer_config.json", R"({"eos_token": "</s>"})");
  eos = ResolveEosIds(dir_, {}, t, 700);
  ASSERT_TRUE(eos.ok()) << eos.status();
  EXPECT_THAT(*eos, ElementsAre(2));
  Write("tokenizer_config.json", R"({"eos_token": {"content": "<s>", "special": true}})");
  eos = ResolveEosIds(dir_, {}, t, 700);
  ASSERT_TRUE(eos.ok()) << eos.status();
  EXPECT_THAT(*eos, ElementsAre(1));
  Write("tokenizer_config.json", R"({"eos_token": "<eot>"})");
  eos = ResolveEosIds(dir_, {}, t, 700);
  ASSERT_FALSE(eos.ok());
  EXPECT_THAT(std::string(eos.status().message()),
              HasSubstr("tokenizer_config.json: eos_token '<eot>' is not in the vocabulary"));
  // generation_config.json over both.
  Write("generation_config.json", R"({"eos_token_id": [2, 9]})");
  eos = ResolveEosIds(dir_, {2}, t, 700);
  ASSERT_TRUE(eos.ok()) << eos.status();
  EXPECT_THAT(*eos, ElementsAre(2, 9));
  Write("generation_config.json", R"({"eos_token_id": 700})");
  eos = ResolveEosIds(dir_, {2}, t, 700);
  ASSERT_FALSE(eos.ok());
  EXPECT_THAT(std::string(eos.status().message()), HasSubstr("generation_config.json"));
  EXPECT_THAT(std::string(eos.status().message()), HasSubstr("[0, 699]"));
  // A generation_config.json without the field leaves config.json's.
  Write("generation_config.json", R"({"do_sample": false})");
  eos = ResolveEosIds(dir_, {3}, t, 700);
  ASSERT_TRUE(eos.ok());
  EXPECT_THAT(*eos, ElementsAre(3));
}

}  // namespace
}  // namespace flover

namespace flover {
namespace {

// tokenizer.json without a post-processor beside tokenizer_config.json
// (make_tokenizer_config_golden.py): the ids transformers' AutoTokenizer
// gives, whose Llama tokenizer puts BOS / EOS around text as add_bos_token /
// add_eos_token say, and whose generic one keeps tokenizer.json's (none).
TEST(TokenizerConfigTest, AddBosAndEosTokenAsTransformers) {
  auto cases = ParseJsonObject(testing::ReadFileOrEmpty("tests/golden/tokenizer_config/cases.json"),
                               "cases.json");
  ASSERT_TRUE(cases.ok()) << cases.status();
  ASSERT_EQ(cases->fields_size(), 4);
  for (const auto& [name, c] : cases->fields()) {
    const std::string dir = "tests/golden/tokenizer_config/" + name;
    auto tok = LoadDirectoryTokenizer(dir, 700, "llama");
    ASSERT_TRUE(tok.ok()) << tok.status();
    for (const auto& item : c.struct_value().fields().at("cases").list_value().values()) {
      const auto& f = item.struct_value().fields();
      auto ids = (*tok)->Encode(f.at("text").string_value());
      ASSERT_TRUE(ids.ok());
      EXPECT_EQ(*ids, testing::JsonIds(f.at("ids"))) << name << ": " << f.at("text").string_value();
    }
  }
  // The same tokenizer.json read as another family's keeps its own (no) post-processor.
  auto gpt2 = LoadDirectoryTokenizer("tests/golden/tokenizer_config/model_type_default", 700, "gpt2");
  ASSERT_TRUE(gpt2.ok());
  EXPECT_NE((*gpt2)->Encode("Hello world")->front(), 1);
  // Mistral and Phi-3 directories take Llama's class, as AutoTokenizer gives them.
  auto llama = LoadDirectoryTokenizer("tests/golden/tokenizer_config/model_type_default", 700, "llama");
  ASSERT_TRUE(llama.ok());
  for (const char* type : {"mistral", "phi3"}) {
    auto t = LoadDirectoryTokenizer("tests/golden/tokenizer_config/model_type_default", 700, type);
    ASSERT_TRUE(t.ok()) << type;
    EXPECT_EQ(*(*t)->Encode("Hello world"), *(*llama)->Encode("Hello world")) << type;
    EXPECT_NE(*(*t)->Encode("Hello world"), *(*gpt2)->Encode("Hello world")) << type;
  }
}

TEST(TokenizerConfigTest, ChatTemplateFromEachPlaceTransformersReads) {
  const std::string root = "tests/golden/tokenizer_config/";
  auto plain = LoadDirectoryChatTemplate(root + "llama_add_bos");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_THAT(plain->text, HasSubstr("{% for m in messages %}"));
  EXPECT_THAT(plain->source, HasSubstr("tokenizer_config.json: chat_template"));
  EXPECT_EQ(plain->bos_token, "<s>");
  EXPECT_EQ(plain->eos_token, "</s>");
  auto named = LoadDirectoryChatTemplate(root + "llama_add_eos");  // a list: its "default"
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->text, plain->text);
  EXPECT_EQ(named->bos_token, "<s>");  // an AddedToken object's content
  auto jinja = LoadDirectoryChatTemplate(root + "generic_class");  // chat_template.jinja
  ASSERT_TRUE(jinja.ok()) << jinja.status();
  EXPECT_EQ(jinja->text, plain->text);
  EXPECT_THAT(jinja->source, HasSubstr("chat_template.jinja"));
  auto none = LoadDirectoryChatTemplate(root + "model_type_default");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->text.empty());
}

}  // namespace
}  // namespace flover
