// A model directory's tokenizer and stop ids: which file wins, and clear
// errors for files that disagree with the model.
#include "model/loader/tokenizer_files.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "testing/files.h"

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
  auto tok = LoadDirectoryTokenizer(kLlamaText, 700);
  ASSERT_TRUE(tok.ok()) << tok.status();
  ASSERT_NE(*tok, nullptr);
  EXPECT_EQ((*tok)->vocab_size(), 700);
  auto small = LoadDirectoryTokenizer(kLlamaText, 600);
  ASSERT_FALSE(small.ok());
  EXPECT_THAT(std::string(small.status().message()),
              HasSubstr("the tokenizer has 700 tokens but the model's vocab_size is 600"));
}

TEST_F(TokenizerFilesTest, NoTokenizerFilesMeansIdsOnly) {
  auto tok = LoadDirectoryTokenizer(dir_, 100);
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ(*tok, nullptr);
  Write("vocab.json", "{}");
  auto half = LoadDirectoryTokenizer(dir_, 100);
  ASSERT_FALSE(half.ok());
  EXPECT_THAT(std::string(half.status().message()), HasSubstr("needs both vocab.json and merges.txt"));
}

TEST_F(TokenizerFilesTest, EosFromGenerationConfigThenConfigThenTokenizerConfig) {
  CopyTokenizer();
  auto tok = LoadDirectoryTokenizer(dir_, 700);
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
