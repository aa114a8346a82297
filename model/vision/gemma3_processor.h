// Gemma 3's image processor (transformers' Gemma3ImageProcessorPil, the one
// it runs without torchvision) and the text Gemma3Processor puts in an
// image's place: the image resized to the tower's size x size pixels with
// Pillow's bilinear filter, each pixel (u8 / 255 - mean) / std in float32,
// one tile; in the prompt "\n\n<start_of_image>", image_seq_length
// "<image_soft_token>"s and "<end_of_image>\n\n". With pan-and-scan (off in
// the released processors), an image whose aspect ratio reaches
// min_ratio is also cut into 2 to max_num_crops crops along its long
// side, each at least min_crop_size pixels, each resized to a tile of its
// own after the whole image's; the prompt then says "Here is the original
// image <the sequence> and here are some crops to help you see better
// <a sequence a crop, space-separated>", as Gemma3Processor does.
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
  bool pan_and_scan = false;  // do_pan_and_scan, with its pan_and_scan_* settings
  int min_crop_size = 256;
  int max_num_crops = 4;
  double min_ratio = 1.2;
};

// The checkpoint's settings: preprocessor_config.json, or
// processor_config.json's "image_processor", and image_seq_length
// (processor_config.json's, else the image settings'); defaults where they
// say nothing. A square size,
// BILINEAR resampling (2), a rescale of 1/255 and RGB are taken;
// do_pan_and_scan with its pan_and_scan_* settings (null: 256, 4, 1.2).
absl::StatusOr<Gemma3ProcessorConfig> LoadGemma3ProcessorConfig(const std::string& dir);

struct Gemma3Image {
  int tiles = 1;              // the image, then its crops
  std::vector<float> pixels;  // [tiles, 3, size, size]
  std::string text;           // what stands for the image in the prompt
};

// Pan-and-scan's crops of a width x height image under `config`: each
// (x, y, w, h), row-major; none where it does not apply.
struct CropBox {
  int x, y, w, h;
};
std::vector<CropBox> PanAndScanCrops(int width, int height, const Gemma3ProcessorConfig& config);

Gemma3Image ProcessGemma3Image(const RgbImage& image, const Gemma3ProcessorConfig& config);

}  // namespace flover

#endif  // FLOVER_MODEL_VISION_GEMMA3_PROCESSOR_H_
