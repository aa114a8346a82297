// The engine's image features: kept by key within a byte budget, least
// recently used out first (and the same image kept twice counted once);
// a prompt's image tokens given the tiles' rows in order, a span per run,
// keyed by image, tile and place.
#include "engine/image_features.h"

#include <gtest/gtest.h>

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
  const std::vector<PromptImage> images = {{nullptr, 2, 42}};
  const auto spans = ImageGivenRows(prompt, images, {std::make_shared<const std::vector<float>>(rows)}, kImage,
                                    /*rows_per_tile=*/3, /*width=*/2);
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
  const auto again = ImageGivenRows(prompt, images, {std::make_shared<const std::vector<float>>(rows)}, kImage, 3, 2);
  EXPECT_EQ(again[2].key, spans[2].key);
}

}  // namespace
}  // namespace flover
