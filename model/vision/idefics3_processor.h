// SmolVLM's image processor (transformers' Idefics3ImageProcessorPil, the
// one it runs without torchvision): an image resized so its longest edge is
// `longest_edge`, then to whole tiles of `tile` pixels a side, cut into
// rows x cols tiles (row-major) and a global tile of the whole image last;
// each pixel (u8 / 255 - mean) / std in float32. And the prompt text that
// stands for the image: per tile a fake token, its <row_r_col_c> and
// rows_per_tile <image> tokens, each row ending in a newline, then the
// global tile's.
#ifndef FLOVER_MODEL_VISION_IDEFICS3_PROCESSOR_H_
#define FLOVER_MODEL_VISION_IDEFICS3_PROCESSOR_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/vision/image.h"

namespace flover {

struct Idefics3ProcessorConfig {
  int longest_edge = 4 * 364;  // size.longest_edge
  int tile = 364;              // max_image_size.longest_edge (the tower's image_size)
  bool split = true;           // do_image_splitting
  float mean[3] = {0.5f, 0.5f, 0.5f};
  float std[3] = {0.5f, 0.5f, 0.5f};
  int rows_per_tile = 169;     // image_seq_len
};

// The checkpoint's processor settings: preprocessor_config.json, or
// processor_config.json's "image_processor" (and its image_seq_len);
// defaults where neither says. Only LANCZOS resampling, a rescale of 1/255
// and RGB are taken.
absl::StatusOr<Idefics3ProcessorConfig> LoadIdefics3ProcessorConfig(const std::string& dir);

struct ProcessedImage {
  int rows = 0, cols = 0;  // the tile grid (0 x 0: the global tile alone)
  int tiles = 0;
  std::vector<float> pixels;  // [tiles, 3, tile, tile]
  std::string text;           // what stands for the image in the prompt
};

ProcessedImage ProcessIdefics3Image(const RgbImage& image, const Idefics3ProcessorConfig& config);

}  // namespace flover

#endif  // FLOVER_MODEL_VISION_IDEFICS3_PROCESSOR_H_
