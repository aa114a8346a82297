// What the engine keeps and makes of a vision model's encoded images: the
// features of each image by its content key, within a byte budget, and
// the given rows a prompt's image tokens take from them.
#ifndef FLOVER_ENGINE_IMAGE_FEATURES_H_
#define FLOVER_ENGINE_IMAGE_FEATURES_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
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
// entry per image: its rows_of[i] rows of info.out_width values, units
// (tiles) in order, then where info.given_layers > 0 each layer's
// additions for as many rows): each unit's rows fill the prompt's image
// tokens in order, one span per run of image tokens within a unit, each
// keyed by its image's key, its unit and its place there, and carrying
// its additions. Where info.grid_positions, each span is a whole image and
// carries its merged grid; where info.bidirectional, a whole image given
// whole (GivenPromptRows::whole). The prompt holds exactly that many image tokens
// (Engine::Validate checks it, and CheckImageRuns where the rows take grid
// positions).
std::vector<GivenPromptRows> ImageGivenRows(const std::vector<int32_t>& prompt, const std::vector<PromptImage>& images,
                                            const std::vector<ImageFeatureCache::Rows>& features,
                                            const std::vector<int>& rows_of, const ImageEncoderInfo& info);

// Whether the prompt's runs of image tokens are `rows_of` rows each, in
// order (InvalidArgument naming the first that is not): an image whose
// rows take grid positions stands whole (a run an image); one whose rows
// attend to each other both ways is a run a tile.
absl::Status CheckImageRuns(const std::vector<int32_t>& prompt, const std::vector<int>& rows_of, int32_t image_token);

// A row's multimodal rotary positions (temporal, height, width).
struct MropeRow {
  int32_t t = 0, h = 0, w = 0;
};
// Row `index`'s positions in a prompt with the image spans `spans` (those
// with a grid; in order), or of a token after it, as transformers'
// get_rope_index gives them: an image starting at position s puts its
// grid's row r, column c at (s, s + r, s + c) and takes max(grid_h,
// grid_w) positions; text rows take the next position each, all three
// equal. Past the prompt, index + (the positions its images saved).
MropeRow MropePosition(const std::vector<GivenPromptRows>& spans, int64_t index);

}  // namespace flover

#endif  // FLOVER_ENGINE_IMAGE_FEATURES_H_
