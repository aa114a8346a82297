// SmolVLM's image side against transformers 5.23 in float64
// (tests/golden/make_idefics3_golden.py, a tiny Idefics3 checkpoint): the
// tower's rows and the connector's features from the processor's pixels,
// then the language model's logits over a prompt whose image tokens are
// given those features, and its greedy tokens.
#include "model/vision/vision_encoder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <vector>

#include "model/loader/safetensors.h"
#include "model/model_loader.h"
#include "nlohmann/json.hpp"
#include "testing/backends.h"
#include "testing/golden.h"

namespace flover {
namespace {

constexpr char kDir[] = "tests/golden/idefics3_tiny";

// max |got - want| over max |want|.
double Off(const std::vector<float>& got, const std::vector<float>& want) {
  return got.size() != want.size() ? 1e30 : testing::ScaledError(got.data(), want.data(), want.size());
}

class VisionEncoderTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    std::string skip;
    backend_ = testing::BackendForTest(GetParam(), &skip);
    if (backend_ == nullptr) GTEST_SKIP() << skip;
    auto e = VisionEncoder::Load(kDir, *backend_);
    ASSERT_TRUE(e.ok()) << e.status();
    encoder_ = std::move(*e);
    auto file = SafetensorsFile::Open(std::string(kDir) + "/golden.safetensors");
    ASSERT_TRUE(file.ok()) << file.status();
    golden_ = std::make_unique<SafetensorsFile>(std::move(*file));
    std::ifstream in(std::string(kDir) + "/golden.json");
    meta_ = nlohmann::json::parse(in);
  }
  std::vector<float> Golden(const std::string& name) {
    const TensorInfo* t = golden_->Find(name);
    EXPECT_NE(t, nullptr) << name;
    if (t == nullptr) return {};
    auto v = golden_->ReadFloat(name, t->shape);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : std::vector<float>();
  }
  int Tiles(const std::string& c) { return static_cast<int>(golden_->Find(c + ".pixel_values")->shape[1]); }

  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<VisionEncoder> encoder_;
  std::unique_ptr<SafetensorsFile> golden_;
  nlohmann::json meta_;
};

TEST_P(VisionEncoderTest, TowerAndConnectorMatchTransformers) {
  const VisionInfo& v = encoder_->info();
  EXPECT_EQ(v.rows_per_tile(), meta_["image_seq_len"].get<int>());
  EXPECT_EQ(v.image_token, meta_["image_token_id"].get<int>());
  for (const std::string c : {"gradient", "gradient_nosplit", "two_images"}) {
    const int n = Tiles(c);
    auto rows = encoder_->Tower(Golden(c + ".pixel_values"), n);
    ASSERT_TRUE(rows.ok()) << rows.status();
    EXPECT_LT(Off(*rows, Golden(c + ".vision_last_hidden")), 1e-5) << c;
    auto features = encoder_->Connect(*rows, n);
    ASSERT_TRUE(features.ok()) << features.status();
    EXPECT_LT(Off(*features, Golden(c + ".image_features")), 1e-5) << c;
  }
  // A tile's rows do not depend on the tiles beside it: the two-image
  // prompt's first 7 tiles are the gradient's.
  auto alone = encoder_->Tower(Golden("gradient.pixel_values"), 7);
  auto beside = encoder_->Tower(Golden("two_images.pixel_values"), 17);
  ASSERT_TRUE(alone.ok() && beside.ok());
  EXPECT_TRUE(std::equal(alone->begin(), alone->end(), beside->begin()));
  // Pixels of the wrong size are refused by name.
  EXPECT_FALSE(encoder_->Tower(std::vector<float>(10), 1).ok());
}

// The language model on the prompt, each run of image tokens given the
// encoder's features: logits at every position, then 8 greedy tokens.
TEST_P(VisionEncoderTest, ImagePromptsMatchTransformersLogitsAndGreedyTokens) {
  auto loaded = LoadModel(kDir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto model = testing::ModelOn(*backend_, **loaded);
  const int C = model->info().hidden, V = model->info().vocab_size;
  ASSERT_EQ(C, encoder_->info().out_width);
  for (const std::string c : {"gradient", "two_images"}) {
    const auto& cm = meta_["cases"][c];
    std::vector<int32_t> ids = cm["input_ids"].get<std::vector<int32_t>>();
    auto features = encoder_->Encode(Golden(c + ".pixel_values"), Tiles(c));
    ASSERT_TRUE(features.ok()) << features.status();
    const int max_seq = static_cast<int>(ids.size()) + 8;
    auto cache = testing::CacheFor(*model, 1, max_seq);
    ForwardBatch prompt;
    prompt.AddSequence(testing::SeqBlocks(0, max_seq), 0, ids);
    size_t used = 0;
    for (size_t i = 0; i < ids.size();) {
      if (ids[i] != encoder_->info().image_token) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < ids.size() && ids[j] == ids[i]) ++j;
      ASSERT_LE((used + (j - i)) * C, features->size());
      prompt.GiveRows(static_cast<int32_t>(i), absl::MakeConstSpan(features->data() + used * C, (j - i) * C), C);
      used += j - i;
      i = j;
    }
    EXPECT_EQ(used * C, features->size()) << c << ": every feature row lands on an image token";
    auto logits = model->Forward(prompt, *cache, LogitsFor::kEveryRow);
    ASSERT_TRUE(logits.ok()) << logits.status();
    const std::vector<float> got(logits->begin(), logits->end());
    EXPECT_LT(Off(got, Golden(c + ".logits")), 1e-4) << c;
    std::vector<int32_t> greedy;
    int32_t next = static_cast<int32_t>(std::max_element(got.end() - V, got.end()) - (got.end() - V));
    for (int step = 0; step < 8; ++step) {
      greedy.push_back(next);
      if (step == 7) break;
      ForwardBatch decode;
      decode.AddSequence(testing::SeqBlocks(0, max_seq), static_cast<int32_t>(ids.size()) + step,
                         std::vector<int32_t>{next});
      auto out = model->Forward(decode, *cache, LogitsFor::kLastRowsOfEachSequence);
      ASSERT_TRUE(out.ok()) << out.status();
      next = static_cast<int32_t>(std::max_element(out->begin(), out->end()) - out->begin());
    }
    EXPECT_EQ(greedy, cm["greedy_8"].get<std::vector<int32_t>>()) << c;
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, VisionEncoderTest, ::testing::Values("cpu", "cuda"));

}  // namespace
}  // namespace flover
