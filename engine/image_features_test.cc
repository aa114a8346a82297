// The engine's image features: kept by key within a byte budget, least
// recently used out first (and the same image kept twice counted once);
// a prompt's image tokens given the tiles' rows in order, a span per run,
// keyed by image, tile and place; Qwen3-VL's images one span each with
// their deepstack additions and grid, their tokens standing together, and
// their rows' multimodal rotary positions as transformers gives them.
#include "engine/image_features.h"

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "testing/golden.h"

namespace flover {
namespace {

ImageFeatureCache::Rows RowsOf(size_t n, float v) { return std::make_shared<const std::vector<float>>(n, v); }

TEST(ImageFeatureCacheTest, KeepsByKeyWithinTheBudgetLeastRecentlyUsedFirstOut) {
  ImageFeatureCache cache(3 * 10 * sizeof(float));  // three images of 10 values
  cache.Keep(1, RowsOf(10, 1));
  cache.Keep(2, RowsOf(10, 2));
  cache.Keep(3, RowsOf(10, 3));
  EXPECT_EQ(cache.bytes(), 30 * static_cast<int64_t>(sizeof(float)));
  ASSERT_NE(cache.Find(1), nullptr);  // 1 used: 2 is now the oldest
  cache.Keep(4, RowsOf(10, 4));
  EXPECT_EQ(cache.Find(2), nullptr);
  EXPECT_EQ((*cache.Find(1))[0], 1.0f);
  EXPECT_EQ((*cache.Find(4))[0], 4.0f);
  EXPECT_EQ(cache.size(), 3u);
  // The same image encoded twice at once (two requests in flight): counted once.
  cache.Keep(4, RowsOf(10, 4));
  cache.Keep(4, RowsOf(10, 4));
  EXPECT_EQ(cache.bytes(), 30 * static_cast<int64_t>(sizeof(float)));
  EXPECT_EQ(cache.size(), 3u);
  // Features past the whole budget are not kept (and evict nothing).
  cache.Keep(5, RowsOf(40, 5));
  EXPECT_EQ(cache.Find(5), nullptr);
  EXPECT_EQ(cache.size(), 3u);
}

TEST(ImageGivenRowsTest, TilesFillImageTokensInOrderASpanPerRun) {
  constexpr int32_t kImage = 9;
  // Two tiles of 3 rows (width 2): the first tile's run broken by a 5.
  const std::vector<int32_t> prompt = {1, kImage, kImage, 5, kImage, 7, kImage, kImage, kImage, 8};
  std::vector<float> rows;
  for (int r = 0; r < 6; ++r) rows.insert(rows.end(), {float(r), float(r) + 0.5f});
  PromptImage image;
  image.num_tiles = 2;
  image.key = 42;
  const std::vector<PromptImage> images = {image};
  ImageEncoderInfo info;
  info.image_token = kImage;
  info.out_width = 2;
  const auto spans = ImageGivenRows(prompt, images, {std::make_shared<const std::vector<float>>(rows)},
                                    /*rows_of=*/{6}, info);
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(spans[0].position, 1);
  EXPECT_EQ(spans[0].count, 2);
  EXPECT_EQ(*spans[0].values, (std::vector<float>{0, 0.5f, 1, 1.5f}));
  EXPECT_EQ(spans[1].position, 4);
  EXPECT_EQ(spans[1].count, 1);
  EXPECT_EQ(*spans[1].values, (std::vector<float>{2, 2.5f}));
  EXPECT_EQ(spans[2].position, 6);
  EXPECT_EQ(spans[2].count, 3);
  EXPECT_EQ((*spans[2].values)[0], 3.0f);
  // Keys name image, tile and place: all apart, and the same again for the same image.
  EXPECT_NE(spans[0].key, spans[1].key);
  EXPECT_NE(spans[0].key, spans[2].key);
  const auto again = ImageGivenRows(prompt, images, {std::make_shared<const std::vector<float>>(rows)}, {6}, info);
  EXPECT_EQ(again[2].key, spans[2].key);
  EXPECT_EQ(spans[0].layers, 0);
  EXPECT_EQ(spans[0].grid_h, 0);
}

// Qwen3-VL's layout: an image is one unit of rows on a grid, its features
// followed by each layer's additions; its span holds the whole image, its
// rows and then the same rows of each addition, and its merged grid.
TEST(ImageGivenRowsTest, GridImagesAreOneSpanWithTheirAdditionsAndGrid) {
  constexpr int32_t kImage = 9;
  const std::vector<int32_t> prompt = {1, kImage, kImage, kImage, kImage, kImage, kImage, 2};
  std::vector<float> features;  // 6 rows of width 1, then two additions of 6
  for (int l = 0; l < 3; ++l) {
    for (int r = 0; r < 6; ++r) features.push_back(100.0f * l + r);
  }
  PromptImage image;
  image.num_tiles = 1;
  image.grid_h = 4;  // patches: a merged grid of 2 x 3
  image.grid_w = 6;
  image.key = 7;
  ImageEncoderInfo info;
  info.image_token = kImage;
  info.out_width = 1;
  info.given_layers = 2;
  info.grid_positions = true;
  info.merge = 2;
  const auto spans = ImageGivenRows(prompt, {image}, {std::make_shared<const std::vector<float>>(features)}, {6}, info);
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].position, 1);
  EXPECT_EQ(spans[0].count, 6);
  EXPECT_EQ(spans[0].layers, 2);
  EXPECT_EQ(spans[0].grid_h, 2);
  EXPECT_EQ(spans[0].grid_w, 3);
  EXPECT_EQ(*spans[0].values, features);
  // Each image's tokens must stand together: a run split in two, or too
  // short, is refused by name.
  EXPECT_TRUE(CheckImageRuns(prompt, {6}, kImage).ok());
  const std::vector<int32_t> split = {kImage, kImage, kImage, 5, kImage, kImage, kImage};
  const absl::Status st = CheckImageRuns(split, {6}, kImage);
  EXPECT_NE(st.message().find("run of 3 image tokens (id 9) at index 0 is not image 0's 6 rows"), std::string::npos)
      << st;
  EXPECT_FALSE(CheckImageRuns(prompt, {6, 4}, kImage).ok());
}

// Multimodal rotary positions against transformers' get_rope_index, as the
// Qwen3-VL fixture recorded them for its one- and two-image chats (prompt
// and the 8 generated tokens): text at the next position, an image's rows
// at (s, s + row, s + col), the text after it from s + max(rows, cols).
TEST(MropePositionTest, MatchesTransformersRopeIndex) {
  constexpr char kGolden[] = "tests/golden/qwen3vl_tiny/golden.safetensors";
  constexpr int32_t kImagePad = 389;
  struct Case {
    const char* name;
    std::vector<std::pair<int, int>> grids;  // merged grid of each image (rows, cols)
  };
  for (const Case& c : {Case{"one_image", {{3, 5}}}, Case{"two_images", {{5, 8}, {6, 2}}}}) {
    const std::vector<int32_t> ids = testing::GoldenInts(kGolden, absl::StrCat("case.", c.name, ".input_ids"));
    const std::vector<int32_t> want = testing::GoldenInts(kGolden, absl::StrCat("case.", c.name, ".full_position_ids"));
    const int64_t N = static_cast<int64_t>(want.size()) / 3;
    ASSERT_EQ(N, static_cast<int64_t>(ids.size()) + 8);
    std::vector<GivenPromptRows> spans;
    size_t image = 0;
    for (size_t i = 0; i < ids.size();) {
      if (ids[i] != kImagePad) {
        ++i;
        continue;
      }
      size_t end = i;
      while (end < ids.size() && ids[end] == kImagePad) ++end;
      GivenPromptRows g;
      g.position = static_cast<int32_t>(i);
      g.count = static_cast<int32_t>(end - i);
      g.grid_h = c.grids[image].first;
      g.grid_w = c.grids[image].second;
      ASSERT_EQ(g.count, g.grid_h * g.grid_w);
      spans.push_back(g);
      ++image;
      i = end;
    }
    ASSERT_EQ(image, c.grids.size());
    for (int64_t i = 0; i < N; ++i) {
      const MropeRow m = MropePosition(spans, i);
      EXPECT_EQ(m.t, want[i]) << c.name << " row " << i;
      EXPECT_EQ(m.h, want[N + i]) << c.name << " row " << i;
      EXPECT_EQ(m.w, want[2 * N + i]) << c.name << " row " << i;
    }
  }
}

}  // namespace
}  // namespace flover
