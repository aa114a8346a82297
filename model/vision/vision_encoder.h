// A vision-language model's image side: its vision tower and the connector
// that turns the tower's rows into rows of the language model's input
// embeddings (an image's features, which the engine gives in place of the
// image's placeholder tokens: Request::given_rows).
//
// SmolVLM / SmolVLM2 (transformers' Idefics3 and SmolVLM classes): a SigLIP
// tower (a patch embedding, learned positions, pre-norm encoder layers of
// bidirectional attention and a gelu-tanh MLP, all with biases, a final
// LayerNorm) over tiles of image_size pixels, then the connector: a pixel
// shuffle by scale_factor (each s x s block of patches into one row) and
// one projection without bias. Each tile gives (image_size / patch_size)^2
// / scale_factor^2 rows.
//
// Gemma 3 (Gemma3ForConditionalGeneration): the same SigLIP tower over one
// tile of image_size pixels (896), then Gemma3MultiModalProjector: each s
// x s block of patches averaged (s = patches a side / sqrt(
// mm_tokens_per_image)), an RMSNorm with (1 + w), a projection without
// bias. Its image rows attend to each other both ways in the language
// model (ImageEncoderInfo::bidirectional).
#ifndef FLOVER_MODEL_VISION_VISION_ENCODER_H_
#define FLOVER_MODEL_VISION_VISION_ENCODER_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/backend.h"
#include "model/vision/image_encoder.h"

namespace flover {

struct VisionInfo {
  int tile = 0;        // a tile's side in pixels (vision_config.image_size)
  int patch = 0;       // a patch's side in pixels
  int channels = 3;
  int hidden = 0;      // the tower's width
  int heads = 0;
  int layers = 0;
  int intermediate = 0;
  float norm_eps = 1e-6f;
  int scale = 1;       // the connector's pixel shuffle factor (kPoolNorm: its pooling's side)
  enum class Connector {
    kPixelShuffle,  // SmolVLM's: pixel shuffle, projection
    kPoolNorm,      // Gemma 3's: average pool, RMSNorm (1 + w), projection
  };
  Connector connector = Connector::kPixelShuffle;
  // kPoolNorm: the RMSNorm's weight is stored as 1 + w (llama.cpp's files).
  bool norm_holds_one = false;
  // Where the checkpoint keeps the tower's tensors, and Gemma 3's
  // projector's.
  std::string tower_prefix = "model.vision_model.";
  std::string projector_prefix = "multi_modal_projector.";
  int out_width = 0;   // the language model's hidden size
  int image_token = -1;  // the placeholder token whose rows a tile's features give
  int patches_per_side() const { return tile / patch; }
  int patches() const { return patches_per_side() * patches_per_side(); }
  int rows_per_tile() const { return patches() / (scale * scale); }
};

class VisionEncoder : public ImageEncoder {
 public:
  // The image side of the checkpoint in `dir` (its config.json's
  // vision_config, scale_factor (Gemma 3: mm_tokens_per_image),
  // text_config.hidden_size and image_token_id; tensors under
  // model.vision_model. and model.connector., or Gemma 3's
  // vision_tower.vision_model. (or vision_tower., as transformers 5.23
  // saves it; either under model.) and multi_modal_projector.),
  // on `backend`. A checkpoint without one is NotFound; a config Flover does
  // not run is InvalidArgument, naming the field.
  static absl::StatusOr<std::unique_ptr<VisionEncoder>> Load(const std::string& dir, kernels::Backend& backend);
  // The tower and projector of llama.cpp's mmproj file `path`
  // (clip.projector_type idefics3 or gemma3: the SigLIP tower under v.,
  // the projector under mm.; Gemma 3's pooling from
  // clip.vision.projector.scale_factor, 4 where absent, as llama.cpp
  // reads it), its rows given to `image_token`. Another projector is
  // NotFound; shapes or keys that do not fit are InvalidArgument.
  static absl::StatusOr<std::unique_ptr<VisionEncoder>> LoadGguf(const std::string& path, int image_token,
                                                                 kernels::Backend& backend);
  // A tower of `info`'s shapes with seeded random weights, for benchmarks.
  static absl::StatusOr<std::unique_ptr<VisionEncoder>> Random(const VisionInfo& info, kernels::Backend& backend,
                                                               uint64_t seed);
  ~VisionEncoder();

  const VisionInfo& info() const { return info_; }

  // The tower's final rows (after its last LayerNorm) for `n` tiles of
  // normalised pixels, host f32 [n, channels, tile, tile]: host f32
  // [n * patches, hidden], each tile's patches in row-major order. A tile's
  // rows do not depend on the other tiles (bitwise).
  absl::StatusOr<std::vector<float>> Tower(absl::Span<const float> tiles, int n);
  // The connector on the tower's rows of n tiles: host f32 [n *
  // rows_per_tile, out_width].
  absl::StatusOr<std::vector<float>> Connect(absl::Span<const float> tower_rows, int n);
  // Both: the tiles' features, as the language model takes them.
  absl::StatusOr<std::vector<float>> Encode(absl::Span<const float> tiles, int n);

  // ImageEncoder: an image's units are its tiles (SmolVLM's: a small tower
  // over tiles of 512 px); or, with layers_per_unit() > 0 (Gemma 3's: a
  // 400M tower over one 896-px tile, ~1 s a layer on 2 CPU cores), its
  // tower's layers that many at a time, the last unit also running the
  // final norm and the connector: a long encode is spread over steps.
  const ImageEncoderInfo& encoder_info() const override { return encoder_info_; }
  absl::Status CheckImage(const PromptImage& image) const override;
  int RowsOf(const PromptImage& image) const override { return image.num_tiles * info_.rows_per_tile(); }
  int UnitsOf(const PromptImage& image) const override;
  absl::StatusOr<std::vector<float>> EncodeUnits(const PromptImage& image, int first, int n) override;
  int layers_per_unit() const { return layers_per_unit_; }
  void set_layers_per_unit(int n) { layers_per_unit_ = std::max(0, n); }

 private:
  struct Layer;
  // A tower run part way: its tiles' residual rows and the buffers its
  // layers use, from the patch embedding to layer next_layer.
  struct Job;
  absl::StatusOr<std::unique_ptr<Job>> Start(absl::Span<const float> tiles, int n);
  absl::Status RunLayers(Job& job, int end);  // layers up to `end`
  absl::StatusOr<std::vector<float>> FinishRows(Job& job);  // the final norm's rows, on the host
  using Reader = std::function<absl::StatusOr<std::vector<float>>(const std::string& name,
                                                                  const std::vector<int64_t>& shape)>;
  VisionEncoder(kernels::Backend& backend, VisionInfo info);
  static absl::StatusOr<std::unique_ptr<VisionEncoder>> Build(const VisionInfo& info, kernels::Backend& backend,
                                                              const Reader& read);

  kernels::Backend& backend_;
  VisionInfo info_;
  ImageEncoderInfo encoder_info_;
  std::unique_ptr<kernels::Weight> patch_, projection_;
  kernels::Buffer patch_bias_, positions_, post_gamma_, post_beta_;
  std::vector<float> pool_norm_;  // kPoolNorm: the RMSNorm's 1 + w, on the host
  std::vector<Layer> layers_;
  int layers_per_unit_ = 0;      // 0: an image's units are its tiles
  std::unique_ptr<Job> job_;     // the image EncodeUnits is part way through
};

// The pixel shuffle of SmolVLM's connector on one tile's rows, host f32
// [n * n, d] (n patches a side) into [(n / s)^2, d * s * s]: out row I *
// (n / s) + J holds the patches (I * s + dy, J * s + dx), dy slower, each
// d values.
std::vector<float> PixelShuffle(absl::Span<const float> rows, int n, int d, int s);

// Gemma 3's connector before its projection, on one tile's rows, host f32
// [n * n, d] (n patches a side) into [(n / s)^2, d]: out row I * (n / s) +
// J the average of patches (I * s + dy, J * s + dx), then RMS-normalised
// (eps) and scaled by `scale` (its 1 + w), summed in double.
std::vector<float> PoolNorm(absl::Span<const float> rows, int n, int d, int s, absl::Span<const float> scale,
                            float eps);

}  // namespace flover

#endif  // FLOVER_MODEL_VISION_VISION_ENCODER_H_
