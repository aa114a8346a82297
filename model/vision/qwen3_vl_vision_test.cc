// Qwen3-VL's image side against transformers 5.23 in float64
// (tests/golden/make_qwen3vl_golden.py, a tiny Qwen3-VL checkpoint; and
// make_qwen35vl_golden.py, a tiny Qwen3.5: the same tower without
// deepstack beside a hybrid of gated delta-net and attention layers): the
// resampled learned positions, the last block's rows, the merger's and the
// deepstack mergers' features from the processor's patches of four images
// (upscaled, downscaled, odd, a JPEG); then the language model over chats
// whose image tokens are given those features, the deepstack additions
// after its first layers and transformers' multimodal rotary positions:
// logits at every row, and greedy tokens decoded at index + rope_deltas.
#include "model/vision/qwen3_vl_vision.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
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


// max |got - want| over max |want|.
double Off(const std::vector<float>& got, const std::vector<float>& want) {
  return got.size() != want.size() ? 1e30 : testing::ScaledError(got.data(), want.data(), want.size());
}

// (device, fixture directory)
class Qwen3VlVisionTest : public ::testing::TestWithParam<std::tuple<const char*, const char*>> {
 protected:
  void SetUp() override {
    std::string skip;
    backend_ = testing::BackendForTest(std::get<0>(GetParam()), &skip);
    if (backend_ == nullptr) GTEST_SKIP() << skip;
    dir_ = std::get<1>(GetParam());
    FLOVER_SKIP_IF_NOT_CARRIED(std::string(dir_));
    auto e = Qwen3VlVision::Load(dir_, *backend_);
    ASSERT_TRUE(e.ok()) << e.status();
    encoder_ = std::move(*e);
    auto file = SafetensorsFile::Open(std::string(dir_) + "/golden.safetensors");
    ASSERT_TRUE(file.ok()) << file.status();
    golden_ = std::make_unique<SafetensorsFile>(std::move(*file));
    std::ifstream in(std::string(dir_) + "/golden.json");
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
  std::vector<int32_t> GoldenInts(const std::string& name) {
    return testing::GoldenInts(std::string(dir_) + "/golden.safetensors", name);
  }
  PromptImage Image(const std::string& name) {
    const std::vector<int> grid = meta_["images"][name]["image_grid_thw"].get<std::vector<int>>();
    PromptImage im;
    im.tiles = std::make_shared<const std::vector<float>>(Golden("img." + name + ".pixel_values"));
    im.num_tiles = 1;
    im.grid_h = grid[1];
    im.grid_w = grid[2];
    return im;
  }

  int Deepstack() const { return static_cast<int>(meta_["vision"]["deepstack_visual_indexes"].size()); }

  std::string dir_;  // the fixture
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<Qwen3VlVision> encoder_;
  std::unique_ptr<SafetensorsFile> golden_;
  nlohmann::json meta_;
};

TEST_P(Qwen3VlVisionTest, TowerMergerAndDeepstackMatchTransformers) {
  const ImageEncoderInfo& e = encoder_->encoder_info();
  EXPECT_EQ(e.image_token, meta_["image_token_id"].get<int>());
  EXPECT_EQ(e.given_layers, Deepstack());
  EXPECT_TRUE(e.grid_positions);
  for (const std::string name : {"gradient_37x23", "wide_100x61", "tall_9x41", "photo_52x36"}) {
    const PromptImage im = Image(name);
    auto s = encoder_->Run(*im.tiles, im.grid_h, im.grid_w);
    ASSERT_TRUE(s.ok()) << s.status();
    const std::string t = "tower." + name + ".";
    EXPECT_LT(Off(s->positions, Golden(t + "pos_embeds")), 1e-6) << name;
    EXPECT_LT(Off(s->last, Golden(t + "last_hidden")), 1e-5) << name;
    EXPECT_LT(Off(s->merged, Golden(t + "merged")), 1e-5) << name;
    ASSERT_EQ(s->deepstack.size(), static_cast<size_t>(Deepstack()));
    for (int j = 0; j < Deepstack(); ++j) EXPECT_LT(Off(s->deepstack[j], Golden(t + "deepstack." + std::to_string(j))), 1e-5);
    EXPECT_EQ(encoder_->RowsOf(im), meta_["images"][name]["num_image_tokens"].get<int>());
    // EncodeUnits: the merged rows, then each deepstack layer's.
    auto units = encoder_->EncodeUnits(im, 0, 1);
    ASSERT_TRUE(units.ok()) << units.status();
    std::vector<float> want = s->merged;
    for (const auto& d : s->deepstack) want.insert(want.end(), d.begin(), d.end());
    EXPECT_EQ(*units, want) << name << ": the same rows, bitwise";
  }
  // One block a unit: the image's units taken in two calls give the same
  // features, bitwise, only with the last; a unit out of order is refused.
  encoder_->set_blocks_per_unit(1);
  const PromptImage im = Image("wide_100x61");
  ASSERT_EQ(encoder_->UnitsOf(im), 4);
  auto whole = encoder_->EncodeUnits(im, 0, 4);
  auto first = encoder_->EncodeUnits(im, 0, 1);
  ASSERT_TRUE(whole.ok() && first.ok());
  EXPECT_TRUE(first->empty());
  EXPECT_EQ(encoder_->EncodeUnits(im, 2, 1).status().code(), absl::StatusCode::kFailedPrecondition);
  auto rest = encoder_->EncodeUnits(im, 1, 3);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(*rest, *whole);
  // Grids that are not whole merge blocks, and pixels of the wrong size,
  // are refused by name.
  PromptImage odd = Image("gradient_37x23");
  odd.grid_w = 5;
  EXPECT_NE(encoder_->CheckImage(odd).message().find("whole 2 x 2 blocks"), std::string::npos);
  PromptImage short_pixels = Image("gradient_37x23");
  short_pixels.tiles = std::make_shared<const std::vector<float>>(10, 0.0f);
  EXPECT_FALSE(encoder_->CheckImage(short_pixels).ok());
}

// The language model on each chat: its image tokens given the tower's
// features (the deepstack ones added after layers 0 and 1) at transformers'
// rotary positions; every row's logits, then 8 greedy tokens, each decoded
// at its index + rope_deltas.
TEST_P(Qwen3VlVisionTest, ChatsMatchTransformersLogitsAndGreedyTokens) {
  auto loaded = LoadModel(dir_);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto model = testing::ModelOn(*backend_, **loaded);
  const int C = model->info().hidden, V = model->info().vocab_size;
  ASSERT_EQ(C, encoder_->encoder_info().out_width);
  for (const std::string c : {"text_only", "one_image", "two_images"}) {
    const auto& cm = meta_["cases"][c];
    const std::vector<int32_t> ids = GoldenInts("case." + c + ".input_ids");
    const std::vector<int32_t> pos = GoldenInts("case." + c + ".position_ids");  // [3, T]
    const int T = static_cast<int>(ids.size());
    const int delta = GoldenInts("case." + c + ".rope_deltas")[0];
    const int max_seq = T + 8;
    auto cache = testing::CacheFor(*model, 1, max_seq);
    ForwardBatch prompt;
    testing::AddCachedSequence(prompt, *cache, 0, max_seq, 0, ids);
    if (c != "text_only") {
      for (int t = 0; t < T; ++t) prompt.SetRopePositions(t, pos[t], pos[T + t], pos[2 * T + t]);
    }
    // Each image's run of tokens, given its features.
    size_t image = 0;
    const std::vector<std::string> images = cm["images"].get<std::vector<std::string>>();
    for (int i = 0; i < T;) {
      if (ids[i] != encoder_->encoder_info().image_token) {
        ++i;
        continue;
      }
      ASSERT_LT(image, images.size());
      auto f = encoder_->EncodeUnits(Image(images[image++]), 0, 1);
      ASSERT_TRUE(f.ok()) << f.status();
      const int rows = static_cast<int>(f->size() / ((1 + Deepstack()) * C));
      prompt.GiveRows(i, absl::MakeConstSpan(f->data(), size_t(rows) * C), C);
      for (int l = 0; l < Deepstack(); ++l) {
        prompt.AddToGivenRows(l, absl::MakeConstSpan(f->data() + size_t(l + 1) * rows * C, size_t(rows) * C));
      }
      i += rows;
    }
    EXPECT_EQ(image, images.size()) << c;
    auto logits = model->Forward(prompt, *cache, LogitsFor::kEveryRow);
    ASSERT_TRUE(logits.ok()) << logits.status();
    const std::vector<float> got(logits->begin(), logits->end());
    EXPECT_LT(Off(got, Golden("case." + c + ".logits")), 1e-4) << c;
    std::vector<int32_t> greedy;
    int32_t next = static_cast<int32_t>(std::max_element(got.end() - V, got.end()) - (got.end() - V));
    for (int step = 0; step < 8; ++step) {
      greedy.push_back(next);
      if (step == 7) break;
      ForwardBatch decode;
      testing::AddCachedSequence(decode, *cache, 0, max_seq, T + step, std::vector<int32_t>{next});
      const int32_t at = T + step + delta;
      if (delta != 0) decode.SetRopePositions(0, at, at, at);
      auto out = model->Forward(decode, *cache, LogitsFor::kLastRowsOfEachSequence);
      ASSERT_TRUE(out.ok()) << out.status();
      next = static_cast<int32_t>(std::max_element(out->begin(), out->end()) - out->begin());
    }
    EXPECT_EQ(greedy, GoldenInts("case." + c + ".greedy")) << c;
  }
}

// The same model from llama.cpp's files (tests/golden/gguf_qwen3vl: its
// converter's text GGUF and mmproj of the Qwen3-VL fixture): the tower read
// from the mmproj (two 2-D patch kernels, llama.cpp's names, deepstack by
// block) and the language model from the GGUF (rope.dimension_sections,
// n_deepstack_layers) give transformers' features and the one-image chat's
// logits and greedy tokens.
TEST(Qwen3VlGgufTest, GgufAndMmprojMatchTransformers) {
  constexpr char kGguf[] = "tests/golden/gguf_qwen3vl";
  constexpr char kHf[] = "tests/golden/qwen3vl_tiny";
  auto backend = testing::CpuBackend();
  auto tower = Qwen3VlVision::LoadGguf(std::string(kGguf) + "/mmproj.gguf", 389, *backend);
  ASSERT_TRUE(tower.ok()) << tower.status();
  EXPECT_EQ((*tower)->info().deepstack, (std::vector<int>{0, 2}));
  auto hf = Qwen3VlVision::Load(kHf, *backend);
  ASSERT_TRUE(hf.ok()) << hf.status();
  auto golden = SafetensorsFile::Open(std::string(kHf) + "/golden.safetensors");
  ASSERT_TRUE(golden.ok());
  auto read = [&](const std::string& name) {
    auto v = golden->ReadFloat(name, golden->Find(name)->shape);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : std::vector<float>();
  };
  const std::vector<float> pixels = read("img.gradient_37x23.pixel_values");
  auto s = (*tower)->Run(pixels, 6, 10);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_LT(Off(s->merged, read("tower.gradient_37x23.merged")), 1e-5);
  EXPECT_LT(Off(s->deepstack[1], read("tower.gradient_37x23.deepstack.1")), 1e-5);
  auto same = (*hf)->Run(pixels, 6, 10);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(s->merged, same->merged) << "the same weights, bitwise";
  // The language model from the GGUF over the one-image chat.
  auto loaded = LoadModel(std::string(kGguf) + "/model.gguf");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto model = testing::ModelOn(*backend, **loaded);
  const std::string g = std::string(kHf) + "/golden.safetensors";
  const std::vector<int32_t> ids = testing::GoldenInts(g, "case.one_image.input_ids");
  const std::vector<int32_t> pos = testing::GoldenInts(g, "case.one_image.position_ids");
  const int T = static_cast<int>(ids.size()), C = model->info().hidden, V = model->info().vocab_size;
  auto cache = testing::CacheFor(*model, 1, T + 8);
  ForwardBatch prompt;
  testing::AddCachedSequence(prompt, *cache, 0, T + 8, 0, ids);
  for (int t = 0; t < T; ++t) prompt.SetRopePositions(t, pos[t], pos[T + t], pos[2 * T + t]);
  const int first = static_cast<int>(std::find(ids.begin(), ids.end(), 389) - ids.begin()), rows = 15;
  prompt.GiveRows(first, absl::MakeConstSpan(s->merged), C);
  for (int l = 0; l < 2; ++l) prompt.AddToGivenRows(l, absl::MakeConstSpan(s->deepstack[l]));
  auto logits = model->Forward(prompt, *cache, LogitsFor::kEveryRow);
  ASSERT_TRUE(logits.ok()) << logits.status();
  ASSERT_EQ(static_cast<int>(s->merged.size()), rows * C);
  const std::vector<float> got(logits->begin(), logits->end());
  EXPECT_LT(Off(got, read("case.one_image.logits")), 1e-4);
  EXPECT_EQ(static_cast<int32_t>(std::max_element(got.end() - V, got.end()) - (got.end() - V)),
            testing::GoldenInts(g, "case.one_image.greedy")[0]);
}

// Named by device and fixture, so the GPU bundle's --gtest_filter=*cuda*
// finds them.
INSTANTIATE_TEST_SUITE_P(DevicesAndModels, Qwen3VlVisionTest,
                         ::testing::Combine(::testing::Values("cpu", "cuda"),
                                            ::testing::Values("tests/golden/qwen3vl_tiny",
                                                              "tests/golden/qwen35vl_tiny")),
                         [](const auto& info) {
                           const std::string dir = std::get<1>(info.param);
                           return std::string(std::get<0>(info.param)) + "_" + dir.substr(dir.rfind('/') + 1);
                         });

}  // namespace
}  // namespace flover
