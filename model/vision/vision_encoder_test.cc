// SmolVLM's and Gemma 3's image sides against transformers 5.23 in float64
// (tests/golden/make_idefics3_golden.py and make_gemma3vl_golden.py, tiny
// Idefics3 and Gemma3ForConditionalGeneration checkpoints): the tower's
// rows and the connector's features from the processor's pixels, then the
// language model's logits over a prompt whose image tokens are given those
// features (Gemma 3's attending to each other both ways), and its greedy
// tokens.
#include "model/vision/vision_encoder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "model/loader/safetensors.h"
#include "model/model_loader.h"
#include "nlohmann/json.hpp"
#include "testing/backends.h"
#include "testing/files.h"
#include "testing/golden.h"

namespace flover {
namespace {

// A fixture: its checkpoint, the cases it packs (those the language model
// runs last), and two of them whose first `same` tiles are one image's.
struct Fixture {
  const char* dir;
  std::vector<std::string> cases;
  int lm_cases;  // the last this many of `cases` run the language model
  const char* alone;
  const char* beside;
  int same;
};

const Fixture kIdefics3{"tests/golden/idefics3_tiny", {"gradient_nosplit", "gradient", "two_images"}, 2,
                        "gradient", "two_images", 7};
const Fixture kGemma3{"tests/golden/gemma3vl_tiny", {"gradient", "photo", "pan_and_scan", "two_images"}, 4,
                      "gradient", "two_images", 1};

// max |got - want| over max |want|.
double Off(const std::vector<float>& got, const std::vector<float>& want) {
  return got.size() != want.size() ? 1e30 : testing::ScaledError(got.data(), want.data(), want.size());
}

class VisionEncoderTest : public ::testing::TestWithParam<std::tuple<const char*, const Fixture*>> {
 protected:
  void SetUp() override {
    std::string skip;
    backend_ = testing::BackendForTest(std::get<0>(GetParam()), &skip);
    if (backend_ == nullptr) GTEST_SKIP() << skip;
    FLOVER_SKIP_IF_NOT_CARRIED(std::string(f().dir));
    auto e = VisionEncoder::Load(f().dir, *backend_);
    ASSERT_TRUE(e.ok()) << e.status();
    encoder_ = std::move(*e);
    auto file = SafetensorsFile::Open(std::string(f().dir) + "/golden.safetensors");
    ASSERT_TRUE(file.ok()) << file.status();
    golden_ = std::make_unique<SafetensorsFile>(std::move(*file));
    std::ifstream in(std::string(f().dir) + "/golden.json");
    meta_ = nlohmann::json::parse(in);
  }
  const Fixture& f() const { return *std::get<1>(GetParam()); }
  std::vector<float> Golden(const std::string& name) {
    const TensorInfo* t = golden_->Find(name);
    EXPECT_NE(t, nullptr) << name;
    if (t == nullptr) return {};
    auto v = golden_->ReadFloat(name, t->shape);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : std::vector<float>();
  }
  // Idefics3's pixel values are [1, tiles, 3, S, S]; Gemma 3's [images, 3, S, S].
  int Tiles(const std::string& c) {
    const std::vector<int64_t>& shape = golden_->Find(c + ".pixel_values")->shape;
    return static_cast<int>(shape.size() == 5 ? shape[1] : shape[0]);
  }

  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<VisionEncoder> encoder_;
  std::unique_ptr<SafetensorsFile> golden_;
  nlohmann::json meta_;
};

TEST_P(VisionEncoderTest, TowerAndConnectorMatchTransformers) {
  const VisionInfo& v = encoder_->info();
  EXPECT_EQ(v.rows_per_tile(), meta_["image_seq_len"].get<int>());
  EXPECT_EQ(v.image_token, meta_["image_token_id"].get<int>());
  EXPECT_EQ(encoder_->encoder_info().bidirectional, v.connector == VisionInfo::Connector::kPoolNorm);
  for (const std::string& c : f().cases) {
    const int n = Tiles(c);
    auto rows = encoder_->Tower(Golden(c + ".pixel_values"), n);
    ASSERT_TRUE(rows.ok()) << rows.status();
    EXPECT_LT(Off(*rows, Golden(c + ".vision_last_hidden")), 1e-5) << c;
    auto features = encoder_->Connect(*rows, n);
    ASSERT_TRUE(features.ok()) << features.status();
    EXPECT_LT(Off(*features, Golden(c + ".image_features")), 1e-5) << c;
  }
  // A tile's rows do not depend on the tiles beside it: the two-image
  // prompt's first tiles are the gradient's.
  auto alone = encoder_->Tower(Golden(std::string(f().alone) + ".pixel_values"), f().same);
  auto beside = encoder_->Tower(Golden(std::string(f().beside) + ".pixel_values"), Tiles(f().beside));
  ASSERT_TRUE(alone.ok() && beside.ok());
  EXPECT_TRUE(std::equal(alone->begin(), alone->end(), beside->begin()));
  // Pixels of the wrong size are refused by name.
  EXPECT_FALSE(encoder_->Tower(std::vector<float>(10), 1).ok());
}

// The language model on the prompt, each run of image tokens given the
// encoder's features (and seeing the whole run where the model's image
// rows attend both ways): logits at every position, then 8 greedy tokens.
// Gemma 3's two-image prompt also runs causally, to show that the goldens
// tell the two apart.
TEST_P(VisionEncoderTest, ImagePromptsMatchTransformersLogitsAndGreedyTokens) {
  auto loaded = LoadModel(f().dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto model = testing::ModelOn(*backend_, **loaded);
  const int C = model->info().hidden, V = model->info().vocab_size;
  ASSERT_EQ(C, encoder_->info().out_width);
  const bool both_ways = encoder_->encoder_info().bidirectional;
  for (size_t k = f().cases.size() - f().lm_cases; k < f().cases.size(); ++k) {
    const std::string& c = f().cases[k];
    const auto& cm = meta_["cases"][c];
    std::vector<int32_t> ids = cm["input_ids"].get<std::vector<int32_t>>();
    auto features = encoder_->Encode(Golden(c + ".pixel_values"), Tiles(c));
    ASSERT_TRUE(features.ok()) << features.status();
    const int max_seq = static_cast<int>(ids.size()) + 8;
    auto cache = testing::CacheFor(*model, 1, max_seq);
    ForwardBatch prompt, causal;
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
      if (both_ways) prompt.AttendTo(static_cast<int>(i), static_cast<int>(j - i), static_cast<int32_t>(j - 1));
      used += j - i;
      i = j;
    }
    EXPECT_EQ(used * C, features->size()) << c << ": every feature row lands on an image token";
    if (both_ways && c == "two_images") {
      causal = prompt;
      causal.attend_to.clear();
      auto cache2 = testing::CacheFor(*model, 1, max_seq);
      auto plain = model->Forward(causal, *cache2, LogitsFor::kEveryRow);
      ASSERT_TRUE(plain.ok()) << plain.status();
      const std::vector<float> got(plain->begin(), plain->end());
      EXPECT_LT(Off(got, Golden(c + ".logits_causal")), 1e-4) << c;
      EXPECT_GT(Off(got, Golden(c + ".logits")), 1e-3) << c << ": causal logits should miss the goldens";
    }
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

// Gemma 3's tower runs a layer a unit (its 2 here), the last also the
// final norm and projector: an image's features are the same (bitwise)
// however its units are grouped into calls, and equal Encode's; a unit of
// an image not begun, or of another image, is refused.
TEST(VisionEncoderUnitsTest, Gemma3LayersAsUnitsGiveTheSameFeatures) {
  auto backend = testing::CpuBackend();
  auto e = VisionEncoder::Load(kGemma3.dir, *backend);
  ASSERT_TRUE(e.ok()) << e.status();
  VisionEncoder& v = **e;
  EXPECT_EQ(v.layers_per_unit(), 1);
  auto file = SafetensorsFile::Open(std::string(kGemma3.dir) + "/golden.safetensors");
  ASSERT_TRUE(file.ok());
  auto pixels = file->ReadFloat("gradient.pixel_values", file->Find("gradient.pixel_values")->shape);
  ASSERT_TRUE(pixels.ok());
  PromptImage image{std::make_shared<const std::vector<float>>(*pixels), 1, 7};
  ASSERT_EQ(v.UnitsOf(image), 2);
  auto whole = v.Encode(*pixels, 1);
  ASSERT_TRUE(whole.ok()) << whole.status();
  auto first = v.EncodeUnits(image, 0, 1);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->empty()) << "features come with the last unit";
  PromptImage other = image;
  other.key = 8;
  EXPECT_EQ(v.EncodeUnits(other, 1, 1).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(v.EncodeUnits(image, 0, 1).ok());
  auto last = v.EncodeUnits(image, 1, 1);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(*last, *whole);
  auto both = v.EncodeUnits(image, 0, 2);
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(*both, *whole);
  EXPECT_LT(Off(*whole, *file->ReadFloat("gradient.image_features", {16, 64})), 1e-5);
}

// llama.cpp's mmproj files of the two fixtures (tests/golden/gguf_idefics3,
// gguf_gemma3vl: its converter's output) load as the same tower: the same
// shapes, the tower's rows bitwise the directory's (both f32), and the
// features the goldens' (SmolVLM's bitwise; Gemma 3's projection the
// converter stores in f16, so within its rounding).
TEST(VisionEncoderGgufTest, LlamaCppMmprojIsTheSameTower) {
  auto backend = testing::CpuBackend();
  struct Case {
    const Fixture* fixture;
    const char* mmproj;
    double features_error;
  };
  for (const Case& c : {Case{&kIdefics3, "tests/golden/gguf_idefics3/mmproj.gguf", 0.0},
                        Case{&kGemma3, "tests/golden/gguf_gemma3vl/mmproj.gguf", 2e-3}}) {
    SCOPED_TRACE(c.mmproj);
    auto dir = VisionEncoder::Load(c.fixture->dir, *backend);
    ASSERT_TRUE(dir.ok()) << dir.status();
    const VisionInfo& want = (*dir)->info();
    auto gguf = VisionEncoder::LoadGguf(c.mmproj, want.image_token, *backend);
    ASSERT_TRUE(gguf.ok()) << gguf.status();
    const VisionInfo& got = (*gguf)->info();
    EXPECT_EQ(std::make_tuple(got.tile, got.patch, got.hidden, got.heads, got.layers, got.intermediate, got.scale,
                              got.out_width, got.connector),
              std::make_tuple(want.tile, want.patch, want.hidden, want.heads, want.layers, want.intermediate,
                              want.scale, want.out_width, want.connector));
    EXPECT_EQ((*gguf)->encoder_info().bidirectional, (*dir)->encoder_info().bidirectional);
    auto file = SafetensorsFile::Open(std::string(c.fixture->dir) + "/golden.safetensors");
    ASSERT_TRUE(file.ok());
    const std::string name = c.fixture->cases.back() + ".pixel_values";  // two_images
    const TensorInfo* t = file->Find(name);
    auto pixels = file->ReadFloat(name, t->shape);
    ASSERT_TRUE(pixels.ok());
    const int n = static_cast<int>(pixels->size() / (3 * got.tile * got.tile));
    auto rows = (*gguf)->Tower(*pixels, n);
    auto dir_rows = (*dir)->Tower(*pixels, n);
    ASSERT_TRUE(rows.ok() && dir_rows.ok());
    EXPECT_EQ(*rows, *dir_rows);
    auto features = (*gguf)->Connect(*rows, n);
    ASSERT_TRUE(features.ok()) << features.status();
    const std::string golden = c.fixture->cases.back() + ".image_features";
    auto want_features = file->ReadFloat(golden, file->Find(golden)->shape);
    ASSERT_TRUE(want_features.ok());
    if (c.features_error == 0) {
      auto dir_features = (*dir)->Connect(*dir_rows, n);
      ASSERT_TRUE(dir_features.ok());
      EXPECT_EQ(*features, *dir_features);
    }
    EXPECT_LE(Off(*features, *want_features), std::max(c.features_error, 1e-5));
  }
  // Another projector is NotFound, naming it.
  auto qwen = VisionEncoder::LoadGguf("tests/golden/gguf_qwen3vl/mmproj.gguf", 1, *backend);
  EXPECT_EQ(qwen.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(qwen.status().message().find("clip.projector_type qwen3vl_merger"), std::string::npos) << qwen.status();
}

INSTANTIATE_TEST_SUITE_P(Devices, VisionEncoderTest,
                         ::testing::Combine(::testing::Values("cpu", "cuda"), ::testing::Values(&kIdefics3, &kGemma3)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) == &kGemma3 ? "_gemma3" : "_idefics3");
                         });

}  // namespace
}  // namespace flover
