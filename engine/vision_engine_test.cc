// Image requests through the engine (issue 56) on the tiny SmolVLM fixture
// (tests/golden/make_idefics3_golden.py): the engine encodes a request's
// tiles between steps, gives the features to its image tokens and
// generates transformers' greedy tokens, fused beside a text request that
// keeps decoding while the image is encoded; the same image again is
// neither encoded nor computed again (its features and K/V are kept). And
// Qwen3-VL's images on their grids (tests/golden/make_qwen3vl_golden.py),
// and Gemma 3's, attended both ways (make_gemma3vl_golden.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <vector>

#include "engine/engine.h"
#include "model/loader/safetensors.h"
#include "model/model_loader.h"
#include "model/vision/qwen3_vl_vision.h"
#include "model/vision/vision_encoder.h"
#include "testing/golden.h"
#include "nlohmann/json.hpp"
#include "testing/backends.h"
#include "testing/collecting_sink.h"

namespace flover {
namespace {

constexpr char kDir[] = "tests/golden/idefics3_tiny";

// Each request's tokens, and the engine's stats after: the requests
// submitted together, or each waited for before the next goes in.
std::pair<std::vector<std::vector<int32_t>>, EngineStats> RunRequests(CausalLm& model, const Tokenizer* tokenizer,
                                                                      const EngineOptions& o,
                                                                      const std::vector<Request>& requests,
                                                                      bool together) {
  auto e = Engine::Create(model, tokenizer, o);
  EXPECT_TRUE(e.ok()) << e.status();
  std::vector<std::shared_ptr<testing::CollectingSink>> sinks;
  for (const Request& r : requests) {
    sinks.push_back(std::make_shared<testing::CollectingSink>());
    auto id = (*e)->Submit(r, sinks.back());
    EXPECT_TRUE(id.ok()) << id.status();
    if (!together) EXPECT_TRUE(sinks.back()->Wait());
  }
  std::vector<std::vector<int32_t>> out;
  for (auto& sink : sinks) {
    EXPECT_TRUE(sink->Wait());
    out.push_back(sink->tokens());
  }
  return std::make_pair(std::move(out), (*e)->Stats());
}

// The invariance suite's question for image requests: each request's
// tokens on a busy engine (submitted together, fused, chunked at
// `tokens_per_step` rows, preempted in a cache of `kv_bytes`, images and
// blocks hit from the caches, n-gram drafts verified) equal its run alone
// (one at a time, without caches or drafts); each of those mechanisms is
// asserted to have happened. Returns the tokens alone.
std::vector<std::vector<int32_t>> ExpectBusyEqualsAlone(CausalLm& model, const Tokenizer* tokenizer,
                                                        ImageEncoder* vision, const std::vector<Request>& requests,
                                                        int max_seq_len, int tokens_per_step, int64_t kv_bytes) {
  EngineOptions alone;
  alone.max_seq_len = max_seq_len;
  alone.prefix_caching = false;
  alone.vision = vision;
  alone.vision_cache_bytes = 0;
  EngineOptions busy = alone;
  busy.prefix_caching = true;
  busy.vision_cache_bytes = int64_t{1} << 20;
  busy.scheduler.max_batch = 4;
  busy.scheduler.max_tokens_per_step = tokens_per_step;
  busy.kv_cache.bytes = kv_bytes;
  busy.speculative.mode = SpeculativeMode::kNgram;
  busy.speculative.max_tokens = 4;
  busy.speculative.max_step_rows = 16;
  busy.speculative.min_ngram = 1;
  busy.speculative.max_ngram = 3;
  const auto [want, alone_stats] = RunRequests(model, tokenizer, alone, requests, /*together=*/false);
  const auto [got, stats] = RunRequests(model, tokenizer, busy, requests, /*together=*/true);
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(got[i], want[i]) << "request " << i;
  EXPECT_EQ(alone_stats.image_cache_hits, 0);
  EXPECT_GT(stats.image_cache_hits, 0);
  EXPECT_GT(stats.prefix_hit_tokens, 0);
  EXPECT_GT(stats.preemptions, 0);
  EXPECT_GT(stats.draft_tokens, 0);
  EXPECT_LT(stats.steps, stats.generated_tokens - stats.accepted_tokens) << "no step fused two sequences";
  return want;
}

class VisionEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto loaded = LoadModel(kDir);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    loaded_ = std::move(*loaded);
    model_ = testing::ModelOn(*backend_, *loaded_);
    auto vision = VisionEncoder::Load(kDir, *backend_);
    ASSERT_TRUE(vision.ok()) << vision.status();
    vision_ = std::move(*vision);
    auto golden = SafetensorsFile::Open(std::string(kDir) + "/golden.safetensors");
    ASSERT_TRUE(golden.ok()) << golden.status();
    std::ifstream in(std::string(kDir) + "/golden.json");
    meta_ = nlohmann::json::parse(in);
    for (const std::string c : {"gradient", "two_images"}) {
      const TensorInfo* t = golden->Find(c + ".pixel_values");
      ASSERT_NE(t, nullptr);
      auto px = golden->ReadFloat(c + ".pixel_values", t->shape);
      ASSERT_TRUE(px.ok()) << px.status();
      pixels_[c] = std::move(*px);
    }
  }
  void Start(int tiles_per_step) {
    EngineOptions o;
    o.scheduler.max_batch = 4;
    o.max_seq_len = 512;
    o.vision = vision_.get();
    o.vision_tiles_per_step = tiles_per_step;
    auto e = Engine::Create(*model_, loaded_->tokenizer().get(), o);
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = std::move(*e);
  }
  // The case's prompt with its images (tiles cut from its pixels in order:
  // the gradient's 7, then the checker's 10), greedy, 8 tokens.
  Request ImageRequest(const std::string& c, uint64_t first_key = 1) {
    Request r;
    r.prompt = meta_["cases"][c]["input_ids"].get<std::vector<int32_t>>();
    r.sampling.temperature = 0;
    r.stop.max_new_tokens = 8;
    r.stop.ignore_eos = true;
    const size_t per_tile = 3 * 32 * 32;
    const std::vector<int> tiles = c == "gradient" ? std::vector<int>{7} : std::vector<int>{7, 10};
    size_t at = 0;
    for (size_t i = 0; i < tiles.size(); ++i) {
      auto px = std::make_shared<std::vector<float>>(pixels_[c].begin() + at * per_tile,
                                                     pixels_[c].begin() + (at + tiles[i]) * per_tile);
      r.images.push_back({px, tiles[i], first_key + i});
      at += tiles[i];
    }
    return r;
  }
  std::vector<int32_t> Greedy(const std::string& c) { return meta_["cases"][c]["greedy_8"].get<std::vector<int32_t>>(); }

  std::unique_ptr<kernels::Backend> backend_ = testing::CpuBackend();
  std::unique_ptr<LoadedModel> loaded_;
  std::unique_ptr<CausalLm> model_;
  std::unique_ptr<VisionEncoder> vision_;
  std::unique_ptr<Engine> engine_;
  nlohmann::json meta_;
  std::map<std::string, std::vector<float>> pixels_;
};

TEST_F(VisionEngineTest, ImagesAreEncodedBetweenStepsAndGenerateTransformersTokens) {
  Start(/*tiles_per_step=*/1);
  // A text request decodes while the image's 7 tiles are encoded, one a step.
  Request text;
  text.prompt = {1, 60, 61, 62, 63};
  text.sampling.temperature = 0;
  text.stop.max_new_tokens = 40;
  text.stop.ignore_eos = true;
  auto text_sink = std::make_shared<testing::CollectingSink>();
  auto image_sink = std::make_shared<testing::CollectingSink>();
  std::atomic<int> submitted_at{-1}, text_at_first_image_token{-1};
  text_sink->AtToken(2, [&] {
    submitted_at = 2;
    auto id = engine_->Submit(ImageRequest("gradient"), image_sink);
    EXPECT_TRUE(id.ok()) << id.status();
  });
  image_sink->AtToken(1, [&] { text_at_first_image_token = static_cast<int>(text_sink->tokens().size()); });
  ASSERT_TRUE(engine_->Submit(text, text_sink).ok());
  ASSERT_TRUE(text_sink->Wait() && image_sink->Wait());
  EXPECT_EQ(image_sink->tokens(), Greedy("gradient"));
  EXPECT_EQ(engine_->Stats().image_tiles_encoded, 7);
  // The text request kept decoding: a token a step while the 7 tiles were
  // encoded (the last one's maybe in the image's own first step).
  EXPECT_GE(text_at_first_image_token - submitted_at, 6);

  // The same image again: its features are kept and its K/V reused.
  const int64_t hits = engine_->Stats().prefix_hit_tokens;
  auto again = std::make_shared<testing::CollectingSink>();
  ASSERT_TRUE(engine_->Submit(ImageRequest("gradient"), again).ok());
  ASSERT_TRUE(again->Wait());
  EXPECT_EQ(again->tokens(), Greedy("gradient"));
  EXPECT_EQ(engine_->Stats().image_tiles_encoded, 7);
  EXPECT_EQ(engine_->Stats().image_cache_hits, 1);
  EXPECT_GE(engine_->Stats().prefix_hit_tokens - hits, 128);  // its whole blocks
}

// The invariance suite's question for image requests: fused with text and
// image requests arriving as others run, prompts chunked (64 rows a step),
// sequences preempted (a cache of 16 blocks), images and blocks hit from
// the caches, n-gram drafts verified: every request's tokens equal its run
// alone (one at a time on an engine without any of that).
TEST_F(VisionEngineTest, ImageRequestsEqualTheirRunsAlone) {
  std::vector<Request> requests;
  for (int i = 0; i < 8; ++i) {
    Request r = ImageRequest(i % 3 == 2 ? "two_images" : "gradient", /*first_key=*/i % 2 == 0 ? 1 : 100 + i);
    r.stop.max_new_tokens = 6 + 3 * i;
    if (i % 2 == 1) {
      r.sampling.temperature = 0.8f;
      r.sampling.seed = 7 + i;
    }
    requests.push_back(std::move(r));
    if (i % 3 == 0) {  // a text request between
      Request text;
      text.prompt = {1, static_cast<int32_t>(40 + i), 61, 62, 63, 64};
      text.sampling.temperature = 0;
      text.stop.max_new_tokens = 20;
      text.stop.ignore_eos = true;
      requests.push_back(std::move(text));
    }
  }
  ExpectBusyEqualsAlone(*model_, loaded_->tokenizer().get(), vision_.get(), requests, /*max_seq_len=*/512,
                        /*tokens_per_step=*/64, 16 * model_->CacheShape(1, 1).bytes_per_block());
}

TEST_F(VisionEngineTest, TwoImagesFusedWithAnotherImageRequestAndRefusals) {
  Start(/*tiles_per_step=*/4);
  auto one = std::make_shared<testing::CollectingSink>();
  auto two = std::make_shared<testing::CollectingSink>();
  ASSERT_TRUE(engine_->Submit(ImageRequest("gradient", 10), one).ok());
  ASSERT_TRUE(engine_->Submit(ImageRequest("two_images", 20), two).ok());
  ASSERT_TRUE(one->Wait() && two->Wait());
  EXPECT_EQ(one->tokens(), Greedy("gradient"));
  EXPECT_EQ(two->tokens(), Greedy("two_images"));
  EXPECT_EQ(engine_->Stats().image_tiles_encoded, 7 + 17);

  auto refusal = [&](const Request& r) {
    auto id = engine_->Submit(r, std::make_shared<testing::CollectingSink>());
    EXPECT_FALSE(id.ok());
    return std::string(id.status().message());
  };
  Request r = ImageRequest("gradient");
  r.images[0].num_tiles = 6;
  EXPECT_NE(refusal(r).find("image 0 needs 6 tiles of 3072 values, got 21504"), std::string::npos);
  r = ImageRequest("gradient");
  r.prompt.erase(std::find(r.prompt.begin(), r.prompt.end(), vision_->info().image_token));
  EXPECT_NE(refusal(r).find("the prompt holds 111 image tokens (id 358) for images of 112 rows"), std::string::npos);
}

// Qwen3-VL (tests/golden/make_qwen3vl_golden.py) and Qwen3.5
// (make_qwen35vl_golden.py): an image is one unit of
// patches on its own grid, its rows take multimodal rotary positions and
// carry deepstack additions. Through the engine, one- and two-image chats
// give transformers' greedy tokens; fused with text and image requests,
// chunked (an image's rows cut across steps), preempted, hit from the
// caches and speculated, every request's tokens equal its run alone.
class Qwen3VlEngineTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    kQwen = GetParam();
    auto loaded = LoadModel(kQwen);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    loaded_ = std::move(*loaded);
    model_ = testing::ModelOn(*backend_, *loaded_);
    auto vision = Qwen3VlVision::Load(kQwen, *backend_);
    ASSERT_TRUE(vision.ok()) << vision.status();
    vision_ = std::move(*vision);
    std::ifstream in(std::string(kQwen) + "/golden.json");
    meta_ = nlohmann::json::parse(in);
  }
  std::string Golden() const { return std::string(kQwen) + "/golden.safetensors"; }
  // The case's chat with its images, greedy, 8 tokens.
  Request ImageRequest(const std::string& c, uint64_t first_key = 1) {
    Request r;
    r.prompt = testing::GoldenInts(Golden(), "case." + c + ".input_ids");
    r.sampling.temperature = 0;
    r.stop.max_new_tokens = 8;
    r.stop.ignore_eos = true;
    auto file = SafetensorsFile::Open(Golden());
    EXPECT_TRUE(file.ok());
    uint64_t key = first_key;
    for (const auto& name : meta_["cases"][c]["images"]) {
      const std::string n = name.get<std::string>();
      const TensorInfo* t = file->Find("img." + n + ".pixel_values");
      auto px = file->ReadFloat("img." + n + ".pixel_values", t->shape);
      EXPECT_TRUE(px.ok());
      const std::vector<int> grid = meta_["images"][n]["image_grid_thw"].get<std::vector<int>>();
      PromptImage im;
      im.tiles = std::make_shared<const std::vector<float>>(std::move(*px));
      im.num_tiles = 1;
      im.key = key++;
      im.grid_h = grid[1];
      im.grid_w = grid[2];
      r.images.push_back(std::move(im));
    }
    return r;
  }
  std::vector<int32_t> Greedy(const std::string& c) { return testing::GoldenInts(Golden(), "case." + c + ".greedy"); }

  std::unique_ptr<kernels::Backend> backend_ = testing::CpuBackend();
  std::unique_ptr<LoadedModel> loaded_;
  std::unique_ptr<CausalLm> model_;
  std::string kQwen;  // the fixture
  std::unique_ptr<Qwen3VlVision> vision_;
  nlohmann::json meta_;
};

TEST_P(Qwen3VlEngineTest, ChatsGenerateTransformersTokens) {
  vision_->set_blocks_per_unit(1);  // an image in 4 units: one block a step
  EngineOptions o;
  o.max_seq_len = 256;
  o.vision = vision_.get();
  o.scheduler.max_tokens_per_step = 16;  // the images' rows cut across steps
  auto e = Engine::Create(*model_, loaded_->tokenizer().get(), o);
  ASSERT_TRUE(e.ok()) << e.status();
  std::vector<std::shared_ptr<testing::CollectingSink>> sinks;
  for (const std::string c : {"one_image", "two_images", "text_only"}) {
    Request r = c == "text_only" ? Request() : ImageRequest(c, c == "one_image" ? 1 : 10);
    if (c == "text_only") {
      r.prompt = testing::GoldenInts(Golden(), "case.text_only.input_ids");
      r.sampling.temperature = 0;
      r.stop.max_new_tokens = 8;
      r.stop.ignore_eos = true;
    }
    sinks.push_back(std::make_shared<testing::CollectingSink>());
    ASSERT_TRUE((*e)->Submit(r, sinks.back()).ok());
  }
  ASSERT_TRUE(sinks[0]->Wait() && sinks[1]->Wait() && sinks[2]->Wait());
  EXPECT_EQ(sinks[0]->tokens(), Greedy("one_image"));
  EXPECT_EQ(sinks[1]->tokens(), Greedy("two_images"));
  EXPECT_EQ(sinks[2]->tokens(), Greedy("text_only"));
  EXPECT_EQ((*e)->Stats().image_tiles_encoded, 3 * 4);
  // A text request keeps decoding while an image's 4 units are encoded,
  // one a step.
  Request text;
  text.prompt = {385, 60, 61, 62, 63};
  text.sampling.temperature = 0;
  text.stop.max_new_tokens = 30;
  text.stop.ignore_eos = true;
  auto text_sink = std::make_shared<testing::CollectingSink>();
  auto image_sink = std::make_shared<testing::CollectingSink>();
  std::atomic<int> text_at_first_image_token{-1};
  text_sink->AtToken(2, [&] {
    auto id = (*e)->Submit(ImageRequest("one_image", 500), image_sink);
    EXPECT_TRUE(id.ok()) << id.status();
  });
  image_sink->AtToken(1, [&] { text_at_first_image_token = static_cast<int>(text_sink->tokens().size()); });
  ASSERT_TRUE((*e)->Submit(text, text_sink).ok());
  ASSERT_TRUE(text_sink->Wait() && image_sink->Wait());
  EXPECT_EQ(image_sink->tokens(), Greedy("one_image"));
  EXPECT_GE(text_at_first_image_token - 2, 3) << "the text request decoded while the image's units were encoded";
  // Refused by name: an image's tokens split in two, a grid the tower cannot take.
  Request split = ImageRequest("one_image");
  const int32_t pad = meta_["image_token_id"].get<int32_t>();
  split.prompt.insert(std::find(split.prompt.begin(), split.prompt.end(), pad) + 3, 65);
  auto st = (*e)->Submit(split, std::make_shared<testing::CollectingSink>());
  EXPECT_NE(st.status().message().find("run of 3 image tokens (id 389) at index 6 is not image 0's 15 rows"),
            std::string::npos)
      << st.status();
  Request odd = ImageRequest("one_image");
  odd.images[0].grid_w = 5;
  st = (*e)->Submit(odd, std::make_shared<testing::CollectingSink>());
  EXPECT_NE(st.status().message().find("image 0 needs one grid of whole 2 x 2 blocks"), std::string::npos)
      << st.status();
}

TEST_P(Qwen3VlEngineTest, ImageRequestsEqualTheirRunsAlone) {
  vision_->set_blocks_per_unit(3);  // two units an image, the second with one block
  std::vector<Request> requests;
  for (int i = 0; i < 7; ++i) {
    // Keys name the pixels: the same image under one key, apart under others.
    const bool two = i % 3 == 2;
    Request r = ImageRequest(two ? "two_images" : "one_image", /*first_key=*/i % 2 == 0 ? (two ? 10 : 1) : 100 + 10 * i);
    r.stop.max_new_tokens = 16 + 4 * i;
    if (i % 2 == 1) {
      r.sampling.temperature = 0.8f;
      r.sampling.seed = 7 + i;
    }
    requests.push_back(std::move(r));
    if (i % 3 == 0) {
      Request text;
      text.prompt = {385, static_cast<int32_t>(40 + i), 61, 62, 63, 64};
      text.sampling.temperature = 0;
      text.stop.max_new_tokens = 20;
      text.stop.ignore_eos = true;
      requests.push_back(std::move(text));
    }
  }
  const KvCacheShape unit = model_->CacheShape(1, 1);
  const auto want = ExpectBusyEqualsAlone(*model_, loaded_->tokenizer().get(), vision_.get(), requests,
                                          /*max_seq_len=*/256, /*tokens_per_step=*/24,
                                          5 * unit.bytes_per_block() + 8 * unit.bytes_per_state_slot());
  ASSERT_FALSE(want.empty());
  const std::vector<int32_t> greedy = Greedy("one_image");
  EXPECT_EQ(std::vector<int32_t>(want[0].begin(), want[0].begin() + 8), greedy) << "transformers' tokens";
}

// Qwen3-VL, and Qwen3.5 (the same tower without deepstack, beside a hybrid
// of gated delta-net and attention layers whose state the prefix cache
// checkpoints).
INSTANTIATE_TEST_SUITE_P(Models, Qwen3VlEngineTest,
                         ::testing::Values("tests/golden/qwen3vl_tiny", "tests/golden/qwen35vl_tiny"));

// Gemma 3 (tests/golden/make_gemma3vl_golden.py): an image is one tile of
// 16 rows that attend to each other both ways, so a step computes an
// image whole. Chats give transformers' greedy tokens with prompts chunked
// around their images (20 rows a step: an image and a little more), and,
// fused with text and image requests, preempted, hit from the caches (a
// cached prefix ending inside an image) and speculated, every request's
// tokens equal its run alone. A budget smaller than an image is refused.
class Gemma3EngineTest : public ::testing::Test {
 protected:
  static constexpr char kGemma[] = "tests/golden/gemma3vl_tiny";
  void SetUp() override {
    auto loaded = LoadModel(kGemma);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    loaded_ = std::move(*loaded);
    model_ = testing::ModelOn(*backend_, *loaded_);
    auto vision = VisionEncoder::Load(kGemma, *backend_);
    ASSERT_TRUE(vision.ok()) << vision.status();
    vision_ = std::move(*vision);
    ASSERT_TRUE(vision_->encoder_info().bidirectional);
    std::ifstream in(std::string(kGemma) + "/golden.json");
    meta_ = nlohmann::json::parse(in);
  }
  // The case's chat with its images (one tile each, or with pan-and-scan the
  // image's and its crops'), greedy, 8 tokens.
  Request ImageRequest(const std::string& c, uint64_t first_key = 1) {
    Request r;
    r.prompt = meta_["cases"][c]["input_ids"].get<std::vector<int32_t>>();
    r.sampling.temperature = 0;
    r.stop.max_new_tokens = 8;
    r.stop.ignore_eos = true;
    auto file = SafetensorsFile::Open(std::string(kGemma) + "/golden.safetensors");
    EXPECT_TRUE(file.ok());
    const TensorInfo* t = file->Find(c + ".pixel_values");
    auto px = file->ReadFloat(c + ".pixel_values", t->shape);
    EXPECT_TRUE(px.ok());
    const size_t per_tile = px->size() / t->shape[0];
    std::vector<int> tiles(t->shape[0], 1);
    if (meta_["cases"][c].contains("num_crops")) {
      tiles.clear();
      for (int crops : meta_["cases"][c]["num_crops"].get<std::vector<int>>()) tiles.push_back(1 + crops);
    }
    size_t at = 0;
    for (size_t i = 0; i < tiles.size(); ++i) {
      auto image = std::make_shared<const std::vector<float>>(px->begin() + at * per_tile,
                                                              px->begin() + (at + tiles[i]) * per_tile);
      r.images.push_back({image, tiles[i], first_key + static_cast<uint64_t>(i)});
      at += tiles[i];
    }
    return r;
  }
  std::vector<int32_t> Greedy(const std::string& c) { return meta_["cases"][c]["greedy_8"].get<std::vector<int32_t>>(); }

  std::unique_ptr<kernels::Backend> backend_ = testing::CpuBackend();
  std::unique_ptr<LoadedModel> loaded_;
  std::unique_ptr<CausalLm> model_;
  std::unique_ptr<VisionEncoder> vision_;
  nlohmann::json meta_;
};

TEST_F(Gemma3EngineTest, ChatsGenerateTransformersTokensWithImagesComputedWhole) {
  EngineOptions o;
  o.max_seq_len = 256;
  o.vision = vision_.get();
  o.scheduler.max_tokens_per_step = 20;  // prompts cut around their 16-row images
  auto e = Engine::Create(*model_, loaded_->tokenizer().get(), o);
  ASSERT_TRUE(e.ok()) << e.status();
  std::vector<std::shared_ptr<testing::CollectingSink>> sinks;
  const std::vector<std::string> cases = {"gradient", "photo", "two_images", "pan_and_scan"};
  for (size_t i = 0; i < cases.size(); ++i) {
    sinks.push_back(std::make_shared<testing::CollectingSink>());
    ASSERT_TRUE((*e)->Submit(ImageRequest(cases[i], 10 * (i + 1)), sinks.back()).ok());
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_TRUE(sinks[i]->Wait());
    EXPECT_EQ(sinks[i]->tokens(), Greedy(cases[i])) << cases[i];
  }
  EXPECT_EQ((*e)->Stats().image_tiles_encoded, 5 * 2);  // a unit a layer (of all an image's tiles)
  // A text request keeps decoding while an image's 2 units (its tower's
  // layers) are encoded, one a step.
  Request text;
  text.prompt = {2, 60, 61, 62, 63};
  text.sampling.temperature = 0;
  text.stop.max_new_tokens = 30;
  text.stop.ignore_eos = true;
  auto text_sink = std::make_shared<testing::CollectingSink>();
  auto image_sink = std::make_shared<testing::CollectingSink>();
  std::atomic<int> text_at_first_image_token{-1};
  text_sink->AtToken(2, [&] {
    auto id = (*e)->Submit(ImageRequest("photo", 500), image_sink);
    EXPECT_TRUE(id.ok()) << id.status();
  });
  image_sink->AtToken(1, [&] { text_at_first_image_token = static_cast<int>(text_sink->tokens().size()); });
  ASSERT_TRUE((*e)->Submit(text, text_sink).ok());
  ASSERT_TRUE(text_sink->Wait() && image_sink->Wait());
  EXPECT_EQ(image_sink->tokens(), Greedy("photo"));
  EXPECT_GE(text_at_first_image_token - 2, 2) << "the text request decoded while the image's units were encoded";

  // A step budget below an image's 16 rows cannot compute it whole: refused
  // by name.
  o.scheduler.max_tokens_per_step = 12;
  auto small = Engine::Create(*model_, loaded_->tokenizer().get(), o);
  ASSERT_TRUE(small.ok()) << small.status();
  auto st = (*small)->Submit(ImageRequest("gradient"), std::make_shared<testing::CollectingSink>());
  EXPECT_NE(st.status().message().find("image 0 takes 16 rows, which attend to each other both ways and run in one "
                                       "step, but a step takes at most 12"),
            std::string::npos)
      << st.status();
  // An image's tokens split in two runs.
  Request split = ImageRequest("gradient");
  const int32_t soft = meta_["image_token_id"].get<int32_t>();
  split.prompt.insert(std::find(split.prompt.begin(), split.prompt.end(), soft) + 3, 65);
  st = (*e)->Submit(split, std::make_shared<testing::CollectingSink>());
  EXPECT_NE(st.status().message().find("is not image 0's 16 rows"), std::string::npos) << st.status();
}

TEST_F(Gemma3EngineTest, ImageRequestsEqualTheirRunsAlone) {
  std::vector<Request> requests;
  for (int i = 0; i < 7; ++i) {
    const std::string c = i % 3 == 2 ? "two_images" : (i % 2 == 0 ? "gradient" : "photo");
    Request r = ImageRequest(c, /*first_key=*/i % 2 == 0 ? (c == "two_images" ? 10 : 1) : 100 + 10 * i);
    if (c == "gradient") {
      // 20 more tokens before the image put it at [26, 42), across the
      // first KV block's end: a cached prefix of one block ends inside it.
      for (int k = 0; k < 20; ++k) r.prompt.insert(r.prompt.begin() + 1, 61 + k);
    }
    r.stop.max_new_tokens = 12 + 4 * i;
    if (i % 2 == 1) {
      r.sampling.temperature = 0.8f;
      r.sampling.seed = 7 + i;
    }
    requests.push_back(std::move(r));
    if (i % 3 == 0) {
      Request text;
      text.prompt = {2, static_cast<int32_t>(40 + i), 61, 62, 63, 64};
      text.sampling.temperature = 0;
      text.stop.max_new_tokens = 20;
      text.stop.ignore_eos = true;
      requests.push_back(std::move(text));
    }
  }
  const auto want = ExpectBusyEqualsAlone(*model_, loaded_->tokenizer().get(), vision_.get(), requests,
                                          /*max_seq_len=*/256, /*tokens_per_step=*/20,
                                          8 * model_->CacheShape(1, 1).bytes_per_block());
  ASSERT_FALSE(want.empty());
  const std::vector<int32_t> greedy = Greedy("two_images");  // request 3: i = 2, after a text request
  EXPECT_EQ(std::vector<int32_t>(want[3].begin(), want[3].begin() + 8), greedy) << "transformers' tokens";
}

}  // namespace
}  // namespace flover
