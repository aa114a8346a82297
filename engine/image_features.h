// What the engine keeps and makes of a vision model's encoded images: the
// features of each image by its content key, within a byte budget, and
// the given rows a prompt's image tokens take from them.
#ifndef FLOVER_ENGINE_IMAGE_FEATURES_H_
#define FLOVER_ENGINE_IMAGE_FEATURES_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/request.h"

namespace flover {

// Encoded images' features (rows of the language model's width) by image
// key; past `budget_bytes` the least recently used go first. Features
// larger than the budget are not kept. Engine thread only.
class ImageFeatureCache {
 public:
  using Rows = std::shared_ptr<const std::vector<float>>;
  explicit ImageFeatureCache(int64_t budget_bytes) : budget_(budget_bytes) {}

  // The image's features (now the most recently used), or null.
  Rows Find(uint64_t key);
  // Keeps `rows` under `key` (in place of what it held).
  void Keep(uint64_t key, Rows rows);
  int64_t bytes() const { return bytes_; }
  size_t size() const { return kept_.size(); }

 private:
  struct Kept {
    Rows rows;
    int64_t last_use = 0;
  };
  static int64_t BytesOf(const Rows& rows) { return static_cast<int64_t>(rows->size() * sizeof(float)); }
  int64_t budget_;
  int64_t bytes_ = 0, uses_ = 0;
  absl::flat_hash_map<uint64_t, Kept> kept_;
};

// The given rows of a prompt whose images' features are `features` (one
// entry per image, its tiles' rows in order, rows_per_tile rows of `width`
// values a tile): the tiles' rows fill the prompt's `image_token`s in
// order, one span per run of image tokens within a tile, each keyed by its
// image's key, its tile and its place there. The prompt holds exactly
// that many image tokens (Engine::Validate checks it).
std::vector<GivenPromptRows> ImageGivenRows(const std::vector<int32_t>& prompt, const std::vector<PromptImage>& images,
                                            const std::vector<ImageFeatureCache::Rows>& features, int32_t image_token,
                                            int rows_per_tile, int width);

}  // namespace flover

#endif  // FLOVER_ENGINE_IMAGE_FEATURES_H_
