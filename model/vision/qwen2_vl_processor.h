// Qwen2-VL's image processor, as Qwen3-VL and Qwen3.5 use it (transformers'
// Qwen2VLImageProcessorPil, the one it runs without torchvision): an image
// resized (Pillow bicubic) to the nearest whole blocks of patch x merge
// pixels a side whose area lies within [min_pixels, max_pixels]
// (smart_resize), each pixel (u8 / 255 - mean) / std in float32, cut into
// patches of its channels x temporal frames (the image repeated) x patch x
// patch values, ordered merge block by merge block. And the prompt text
// that stands for it: one image token per merged block.
#ifndef FLOVER_MODEL_VISION_QWEN2_VL_PROCESSOR_H_
#define FLOVER_MODEL_VISION_QWEN2_VL_PROCESSOR_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/vision/image.h"

namespace flover {

struct Qwen2VlProcessorConfig {
  int64_t min_pixels = 56 * 56;           // size.shortest_edge (or min_pixels)
  int64_t max_pixels = 28 * 28 * 1280;    // size.longest_edge (or max_pixels)
  int patch = 14;
  int merge = 2;
  int temporal = 2;
  float mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};  // OPENAI_CLIP_MEAN
  float std[3] = {0.26862954f, 0.26130258f, 0.27577711f};  // OPENAI_CLIP_STD
  std::string image_token = "<|image_pad|>";
};

// The checkpoint's settings: preprocessor_config.json, or
// processor_config.json's "image_processor"; the processor's defaults where
// neither says. Only BICUBIC resampling (3), a rescale of 1/255 and RGB
// are taken.
absl::StatusOr<Qwen2VlProcessorConfig> LoadQwen2VlProcessorConfig(const std::string& dir);

// smart_resize: the (height, width) an image of `height` x `width` is
// resized to; InvalidArgument for an aspect ratio past 200, as
// transformers refuses it.
absl::StatusOr<std::pair<int, int>> SmartResize(int height, int width, int factor, int64_t min_pixels,
                                                int64_t max_pixels);

struct Qwen2VlImage {
  int grid_h = 0, grid_w = 0;  // patches down and across
  std::vector<float> patches;  // [grid_h * grid_w, 3 * temporal * patch * patch]
  std::string text;            // the image's tokens: grid_h * grid_w / merge^2 of them
  RgbImage resized;            // the pixels after resizing (for tests)
};

absl::StatusOr<Qwen2VlImage> ProcessQwen2VlImage(const RgbImage& image, const Qwen2VlProcessorConfig& config);

}  // namespace flover

#endif  // FLOVER_MODEL_VISION_QWEN2_VL_PROCESSOR_H_
