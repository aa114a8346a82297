// What the engine asks of a vision model's image side (VisionEncoder for
// SmolVLM, Qwen3VlVision for Qwen3-VL): an image's pixels, as the model's
// processor made them, in; the rows its image tokens are given out.
#ifndef FLOVER_MODEL_VISION_IMAGE_ENCODER_H_
#define FLOVER_MODEL_VISION_IMAGE_ENCODER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace flover {

// An image in a vision model's prompt, as its processor made it: `units`
// the encoder takes one at a time (SmolVLM's tiles, num_tiles of them; a
// Qwen3-VL image is one unit of grid_h x grid_w patches), their normalised
// pixels in `tiles`. `key` names the image's content (a hash of its bytes
// and the processor's settings): the encoder's cache and the prefix cache
// go by it, so one key must always mean the same pixels.
struct PromptImage {
  std::shared_ptr<const std::vector<float>> tiles;
  int num_tiles = 0;
  uint64_t key = 0;
  // A native-resolution image's patch grid (Qwen3-VL: tiles holds its
  // grid_h * grid_w patches in the processor's order, num_tiles is 1); 0
  // for tiles of the tower's fixed size.
  int grid_h = 0, grid_w = 0;
};

struct ImageEncoderInfo {
  int image_token = -1;  // the placeholder token whose rows an image's features give
  int out_width = 0;     // the language model's hidden size
  // Each image row also carries an addition after each of this many first
  // layers (Qwen3-VL's deepstack; ForwardBatch::given_layers).
  int given_layers = 0;
  // Image rows take multimodal rotary positions (their merged grid's rows
  // and columns; ForwardBatch::rope_positions).
  bool grid_positions = false;
  // The tower's patches per merged row along each side (Qwen3-VL's
  // spatial_merge_size; 1 where rows are not a grid).
  int merge = 1;
  // An image's rows attend to each other both ways in the language model
  // (Gemma 3): each image is one run of image tokens, given whole
  // (GivenPromptRows::whole).
  bool bidirectional = false;
};

class ImageEncoder {
 public:
  virtual ~ImageEncoder() = default;
  virtual const ImageEncoderInfo& encoder_info() const = 0;
  // Whether `image` has pixels this encoder takes (InvalidArgument naming
  // what does not fit).
  virtual absl::Status CheckImage(const PromptImage& image) const = 0;
  // How many of the prompt's image tokens `image` fills.
  virtual int RowsOf(const PromptImage& image) const = 0;
  // The pieces of work `image` takes, one or a few an engine step: its
  // tiles (SmolVLM), or groups of the tower's blocks (Qwen3-VL).
  virtual int UnitsOf(const PromptImage& image) const { return image.num_tiles; }
  // Units [first, first + n) of `image`, in order: the features they make
  // (SmolVLM: each tile's rows; Qwen3-VL: none until the last unit, then
  // the image's rows), [rows, out_width]; where given_layers > 0 followed
  // by each layer's additions for the same rows. Concatenated over the
  // units, an image's features; they do not depend on other images
  // (bitwise) nor on how its units were grouped into calls.
  virtual absl::StatusOr<std::vector<float>> EncodeUnits(const PromptImage& image, int first, int n) = 0;
};

}  // namespace flover

#endif  // FLOVER_MODEL_VISION_IMAGE_ENCODER_H_
