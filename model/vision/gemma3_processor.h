// Gemma 3's image processor (transformers' Gemma3ImageProcessorPil, the one
// it runs without torchvision) and the text Gemma3Processor puts in an
// image's place: the image resized to the tower's size x size pixels with
// Pillow's bilinear filter, each pixel (u8 / 255 - mean) / std in float32,
// one tile; in the prompt "\n\n<start_of_image>", image_seq_length
// "<image_soft_token>"s and "<end_of_image>\n\n". Pan-and-scan (extra
// crops of a long image) is not built: a checkpoint that turns it on is
// refused.
#ifndef FLOVER_MODEL_VISION_GEMMA3_PROCESSOR_H_
#define FLOVER_MODEL_VISION_GEMMA3_PROCESSOR_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/vision/image.h"

namespace flover {

struct Gemma3ProcessorConfig {
  int size = 896;  // size.height == size.width (the tower's image_size)
  float mean[3] = {0.5f, 0.5f, 0.5f};
  float std[3] = {0.5f, 0.5f, 0.5f};
  int image_seq_length = 256;  // processor_config.json's
};

// The checkpoint's settings: preprocessor_config.json, or
// processor_config.json's "image_processor", and image_seq_length
// (processor_config.json's, else the image settings'); defaults where they
// say nothing. A square size,
// BILINEAR resampling (2), a rescale of 1/255 and RGB are taken, and
// do_pan_and_scan must not be true.
absl::StatusOr<Gemma3ProcessorConfig> LoadGemma3ProcessorConfig(const std::string& dir);

struct Gemma3Image {
  std::vector<float> pixels;  // [3, size, size]
  std::string text;           // what stands for the image in the prompt
};

Gemma3Image ProcessGemma3Image(const RgbImage& image, const Gemma3ProcessorConfig& config);

}  // namespace flover

#endif  // FLOVER_MODEL_VISION_GEMMA3_PROCESSOR_H_
