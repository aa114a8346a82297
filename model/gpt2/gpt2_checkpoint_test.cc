// Model directories and built-ins: what loads, and the errors for what does not.
#include "model/gpt2/gpt2_checkpoint.h"
#include "model/model_loader.h"
#include "tokenizer/hf_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "testing/files.h"

namespace flover {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

constexpr char kFixture[] = "tests/golden/tiny_f32";

// A copy of the fixture model in a fresh temporary directory.
std::string CopyFixture(const std::string& name) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors", "vocab.json", "merges.txt"}) {
    fs::copy_file(std::string(kFixture) + "/" + f, dir + "/" + f);
  }
  return dir;
}

std::string ErrorOf(const std::string& spec) {
  auto m = LoadModel(spec);
  EXPECT_FALSE(m.ok());
  return std::string(m.status().message());
}

TEST(ModelLoaderTest, BuiltinModels) {
  auto tiny = Gpt2Checkpoint::Load("builtin:tiny");
  ASSERT_TRUE(tiny.ok());
  EXPECT_EQ((*tiny)->config().n_layer, 2);
  EXPECT_EQ((*tiny)->tokenizer(), nullptr);
  auto again = Gpt2Checkpoint::Load("builtin:tiny");
  auto a = LoadGptWeights((*tiny)->source(), (*tiny)->config(), {1, 0});
  auto b = LoadGptWeights((*again)->source(), (*again)->config(), {1, 0});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->layers[1].up.f32, b->layers[1].up.f32);  // seeded
  EXPECT_NE(a->layers[1].up.f32, a->layers[0].up.f32);

  auto small = BuiltinGpt2Config("gpt2-small");
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->n_layer, 12);
  EXPECT_EQ(small->n_head, 12);
  EXPECT_EQ(small->n_embd, 768);
  EXPECT_EQ(small->n_positions, 1024);
  EXPECT_EQ(small->vocab_size, 50257);
  EXPECT_EQ(small->num_parameters(), 124439808);  // GPT-2 small's parameter count
  EXPECT_THAT(ErrorOf("builtin:gpt5"), HasSubstr("unknown built-in model \"gpt5\""));
}

TEST(ModelLoaderTest, Gpt2SmallTakesGpt2sOwnVocabulary) {
  // third_party/gpt2_vocab (tools/setup.sh fetches it) is this test's data.
  auto small = Gpt2Checkpoint::Load("builtin:gpt2-small");
  ASSERT_TRUE(small.ok()) << small.status();
  ASSERT_NE((*small)->tokenizer(), nullptr)
      << "GPT-2's vocabulary is missing: run tools/setup.sh (tools/fetch_gpt2_vocab.py)";
  auto ids = (*small)->tokenizer()->Encode("Hello world");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{15496, 995}));  // GPT-2's ids
  EXPECT_EQ((*small)->info().eos_token_ids, std::vector<int32_t>{50256});  // <|endoftext|>

  // A directory named by the variable must hold the files; the error names it.
  setenv("FLOVER_GPT2_VOCAB_DIR", "/nonexistent", 1);
  EXPECT_THAT(ErrorOf("builtin:gpt2-small"),
              HasSubstr("FLOVER_GPT2_VOCAB_DIR=/nonexistent has no vocab.json and merges.txt"));
  unsetenv("FLOVER_GPT2_VOCAB_DIR");
}

TEST(ModelLoaderTest, DirectoryWithTokenizer) {
  auto m = Gpt2Checkpoint::Load(kFixture);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_NE((*m)->tokenizer(), nullptr);
  EXPECT_EQ((*m)->config().eos_token_id,
            static_cast<const HfTokenizer&>(*(*m)->tokenizer()).TokenId("<|endoftext|>"));
  EXPECT_EQ((*m)->info().architecture, "gpt2");
  EXPECT_EQ((*m)->info().eos_token_ids, std::vector<int32_t>{(*m)->config().eos_token_id});
  EXPECT_FALSE((*m)->source().Has("lm_head.weight"));  // tied to wte
}

TEST(ModelLoaderTest, MissingFiles) {
  EXPECT_THAT(ErrorOf("/nonexistent"), HasSubstr("/nonexistent/config.json: cannot open"));
  const std::string dir = CopyFixture("no_weights");
  fs::remove(dir + "/model.safetensors");
  EXPECT_THAT(ErrorOf(dir), HasSubstr("model.safetensors: cannot open"));
  const std::string half = CopyFixture("half_tokenizer");
  fs::remove(half + "/merges.txt");
  EXPECT_THAT(ErrorOf(half), HasSubstr("needs both vocab.json and merges.txt"));
}

TEST(ModelLoaderTest, ConfigThatDisagreesWithTheWeights) {
  const std::string dir = CopyFixture("wide");
  const std::string config = testing::ReadFileOrEmpty(dir + "/config.json");
  testing::WriteFile(dir + "/config.json",
                     absl::StrReplaceAll(config, {{"\"n_embd\": 36", "\"n_embd\": 48"}}));
  const std::string e = ErrorOf(dir);
  EXPECT_THAT(e, HasSubstr("tensor 'h.0.ln_1.weight' has shape [36] but the config requires [48]"));
}

TEST(ModelLoaderTest, BadConfigValues) {
  const std::string dir = CopyFixture("bad_config");
  const std::string config = testing::ReadFileOrEmpty(dir + "/config.json");
  auto with = [&](const std::string& from, const std::string& to) {
    testing::WriteFile(dir + "/config.json", absl::StrReplaceAll(config, {{from, to}}));
    return ErrorOf(dir);
  };
  EXPECT_THAT(with("\"n_head\": 3", "\"n_head\": 5"), HasSubstr("not divisible by n_head"));
  EXPECT_THAT(with("\"n_layer\": 2", "\"n_layer\": -2"), HasSubstr("n_layer must be an integer"));
  EXPECT_THAT(with("\"n_layer\": 2,", ""), HasSubstr("missing field \"n_layer\""));
  EXPECT_THAT(with("\"gelu_new\"", "\"relu\""), HasSubstr("activation_function \"relu\""));
  EXPECT_THAT(with("{", "["), HasSubstr("config.json: not a valid JSON object"));
}

// GPT-J's config: rotary_dim absent is GPTJConfig's 64, null the whole
// head; one that does not fit the head is refused by name; untied.
TEST(ModelLoaderTest, GptjConfig) {
  auto config = [](const std::string& extra) {
    return ParseGptConfig(absl::StrCat(R"({"model_type": "gptj", "n_layer": 2, "n_head": 4,
        "n_embd": 512, "n_positions": 64, "vocab_size": 301)", extra, "}"), "c");
  };
  auto bare = config("");
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(bare->architecture, "gptj");
  EXPECT_EQ(bare->rotary_dim, 64);
  EXPECT_FALSE(bare->tie_word_embeddings);
  EXPECT_EQ(bare->n_inner, 4 * 512);
  auto whole = config(R"(, "rotary_dim": null)");
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->rotary_dim, 0);
  EXPECT_THAT(std::string(config(R"(, "rotary_dim": 130)").status().message()),
              HasSubstr("rotary_dim 130 must be even and at most the head's 128 dims"));
  EXPECT_THAT(std::string(ParseGptConfig(R"({"model_type": "gpt_neox"})", "c").status().message()),
              HasSubstr("model_type \"gpt_neox\" is not supported (gpt2, gptj)"));
}

TEST(ModelLoaderTest, MissingTensorIsNamed) {
  const std::string dir = CopyFixture("truncated");
  // Keep the header but drop the data section: offsets now run past the end.
  std::string bytes = testing::ReadFileOrEmpty(dir + "/model.safetensors");
  testing::WriteFile(dir + "/model.safetensors", bytes.substr(0, bytes.size() / 2));
  EXPECT_THAT(ErrorOf(dir), HasSubstr("model.safetensors: tensor '"));
}

}  // namespace
}  // namespace flover
