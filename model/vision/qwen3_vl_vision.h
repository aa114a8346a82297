// Qwen3-VL's image side (transformers' Qwen3VLVisionModel; Qwen3.5's is
// the same without deepstack): a
// native-resolution ViT over an image's grid of patches (each patch its
// channels x 2 frames x patch x patch values, one conv as a product),
// learned positions resampled bilinearly (align_corners) from a square
// table to the image's grid, pre-norm blocks (LayerNorm, attention with
// qkv bias whose Q and K turn by a 2-D rotary over the patch's row and
// column, a gelu-tanh MLP) attending the whole image, and a merger: each
// spatial_merge_size^2 block of patches (the processor orders patches
// block by block) LayerNormed, joined into one row and projected by
// fc1 -> gelu (erf) -> fc2 to the language model's width. The deepstack
// mergers (LayerNorm after joining) turn the rows after the blocks
// deepstack_visual_indexes names into additions the language model's
// first layers take (ImageEncoderInfo::given_layers).
#ifndef FLOVER_MODEL_VISION_QWEN3_VL_VISION_H_
#define FLOVER_MODEL_VISION_QWEN3_VL_VISION_H_

#include <cstdint>
#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/backend.h"
#include "model/vision/image_encoder.h"

namespace flover {

struct Qwen3VlVisionInfo {
  int patch = 16;
  int temporal = 2;  // temporal_patch_size: an image is its frame twice
  int merge = 2;     // spatial_merge_size
  int channels = 3;
  int hidden = 0;
  int heads = 0;
  int layers = 0;
  int intermediate = 0;
  int positions_side = 0;  // sqrt(num_position_embeddings)
  int out_width = 0;
  float rope_theta = 10000.0f;
  std::vector<int> deepstack;  // deepstack_visual_indexes: blocks whose rows the deepstack mergers take
  int image_token = -1;
  int patch_values() const { return channels * temporal * patch * patch; }
  int head_dim() const { return hidden / heads; }
};

class Qwen3VlVision : public ImageEncoder {
 public:
  // The image side of the checkpoint in `dir` (config.json's vision_config,
  // text_config.hidden_size and image_token_id; tensors under
  // model.visual.), on `backend`. A config Flover does not run is
  // InvalidArgument, naming the field.
  static absl::StatusOr<std::unique_ptr<Qwen3VlVision>> Load(const std::string& dir, kernels::Backend& backend);
  // The tower in llama.cpp's mmproj file `path` (projector qwen3vl_merger,
  // as its converter writes Qwen3-VL's), whose language model gives
  // `image_token` its rows. A file of another projector is NotFound.
  static absl::StatusOr<std::unique_ptr<Qwen3VlVision>> LoadGguf(const std::string& path, int image_token,
                                                                 kernels::Backend& backend);
  // A tower of `info`'s shapes with seeded random weights, for benchmarks.
  static absl::StatusOr<std::unique_ptr<Qwen3VlVision>> Random(const Qwen3VlVisionInfo& info,
                                                               kernels::Backend& backend, uint64_t seed);
  ~Qwen3VlVision() override;

  const Qwen3VlVisionInfo& info() const { return info_; }

  // The stages of one image of grid_h x grid_w patches (host f32 [grid_h *
  // grid_w, patch_values()], in the processor's block order), for tests.
  struct Stages {
    std::vector<float> positions;  // the resampled learned positions [N, hidden]
    std::vector<float> last;       // the last block's rows [N, hidden]
    std::vector<float> merged;     // the merger's rows [N / merge^2, out_width]
    std::vector<std::vector<float>> deepstack;  // each deepstack merger's rows, as merged
  };
  absl::StatusOr<Stages> Run(absl::Span<const float> patches, int grid_h, int grid_w);

  // ImageEncoder: an image is one unit.
  const ImageEncoderInfo& encoder_info() const override { return encoder_info_; }
  absl::Status CheckImage(const PromptImage& image) const override;
  int RowsOf(const PromptImage& image) const override {
    return image.grid_h * image.grid_w / (info_.merge * info_.merge);
  }
  // An image's units are its blocks, blocks_per_unit() at a time (the last
  // unit also runs the mergers and returns the features; the others return
  // none): the engine spreads a large image over its steps. Units of one
  // image run in order, each once.
  int blocks_per_unit() const { return blocks_per_unit_; }
  void set_blocks_per_unit(int n) { blocks_per_unit_ = std::max(1, n); }
  int UnitsOf(const PromptImage& image) const override;
  absl::StatusOr<std::vector<float>> EncodeUnits(const PromptImage& image, int first, int n) override;

 private:
  struct Layer;
  struct Merger;
  struct Job;
  absl::StatusOr<std::unique_ptr<Job>> Start(absl::Span<const float> patches, int grid_h, int grid_w);
  absl::Status RunBlocks(Job& job, int end);  // blocks up to `end`
  absl::StatusOr<Stages> Finish(Job& job);
  using Reader = std::function<absl::StatusOr<std::vector<float>>(const std::string& name,
                                                                  const std::vector<int64_t>& shape)>;
  Qwen3VlVision(kernels::Backend& backend, Qwen3VlVisionInfo info);
  static absl::StatusOr<std::unique_ptr<Qwen3VlVision>> Build(const Qwen3VlVisionInfo& info,
                                                              kernels::Backend& backend, const Reader& read);
  // The learned positions of each patch of a grid_h x grid_w image, in the
  // processor's block order: [N, hidden].
  std::vector<float> GridPositions(int grid_h, int grid_w) const;
  absl::StatusOr<std::vector<float>> Merge(const Merger& m, const kernels::Tensor& rows, int64_t n);

  kernels::Backend& backend_;
  Qwen3VlVisionInfo info_;
  ImageEncoderInfo encoder_info_;
  std::unique_ptr<kernels::Weight> patch_;
  kernels::Buffer patch_bias_, inv_freq_;
  std::vector<float> position_table_;  // host [positions_side^2, hidden]
  std::vector<Layer> layers_;
  std::vector<Merger> mergers_;  // the merger, then the deepstack ones
  std::unique_ptr<Job> job_;     // the image EncodeUnits is part way through
  int blocks_per_unit_ = 4;      // a 448-px image's 4 blocks: ~0.5 s on 2 CPU cores
};

// Whether checkpoints of `model_type` have Qwen3-VL's vision tower:
// Qwen3-VL's (with deepstack) and Qwen3.5's and Qwen3.5-MoE's (the same
// tower, no deepstack).
bool TakesQwen3VlVision(absl::string_view model_type);

// The vision side of the checkpoint in `dir`, by its model_type: SmolVLM's
// (VisionEncoder) or Qwen3-VL's. A checkpoint without one is NotFound.
absl::StatusOr<std::unique_ptr<ImageEncoder>> LoadImageEncoder(const std::string& dir, kernels::Backend& backend);

}  // namespace flover

#endif  // FLOVER_MODEL_VISION_QWEN3_VL_VISION_H_
