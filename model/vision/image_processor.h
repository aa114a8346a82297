// A vision model's image processor, as the server runs it on a decoded
// image: the pixels its ImageEncoder takes, and the prompt text that
// stands for the image where the chat template wrote its placeholder.
// SmolVLM's (Idefics3ImageProcessor), Qwen3-VL's (Qwen2VLImageProcessor) and
// Gemma 3's (Gemma3ImageProcessor).
#ifndef FLOVER_MODEL_VISION_IMAGE_PROCESSOR_H_
#define FLOVER_MODEL_VISION_IMAGE_PROCESSOR_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/vision/image.h"
#include "model/vision/image_encoder.h"

namespace flover {

struct ProcessedPromptImage {
  PromptImage image;  // its key left 0: the caller names the bytes
  std::string text;   // what replaces the template's placeholder
};

class ImageProcessor {
 public:
  virtual ~ImageProcessor() = default;
  // What a chat template writes for an image ("<image>", "<|image_pad|>").
  virtual const std::string& placeholder() const = 0;
  // Mixed into an image's key: the same bytes processed otherwise are
  // other pixels.
  virtual uint64_t settings_key() const = 0;
  // InvalidArgument saying why where the image cannot be taken (an aspect
  // ratio past Qwen's 200, say).
  virtual absl::StatusOr<ProcessedPromptImage> Process(const RgbImage& image) const = 0;
  // Images that would become more than `max_rows` image tokens are
  // resized down to at most that many, where this processor sizes images
  // itself (Qwen2-VL's: its max_pixels lowered); SmolVLM's tiles are
  // bounded by its longest_edge and take no limit.
  virtual void LimitRows(int64_t max_rows) = 0;
  // Whether the encoder takes what this processor makes (its tiles or
  // patches), naming what differs.
  virtual absl::Status Matches(const ImageEncoder& encoder) const = 0;
};

// The processor of the checkpoint in `dir`, by config.json's model_type
// (Qwen3-VL's and Qwen3.5's: Qwen2-VL's; Gemma 3's; else SmolVLM's).
absl::StatusOr<std::unique_ptr<ImageProcessor>> LoadImageProcessor(const std::string& dir);

// The processor for llama.cpp's mmproj file `path`, by its projector:
// for Qwen3-VL's (qwen3vl_merger) Qwen2-VL's, with the file's patch size,
// merge and normalisation, and the sizes llama.cpp gives Qwen3-VL images
// (8 to 4096 tokens an image: min_pixels and max_pixels of that many 32-px
// blocks; its files record none); for Gemma 3's Gemma 3's (image_size,
// scale_factor's pooling); for SmolVLM's (idefics3) SmolVLM's
// (preproc_image_size the longest edge, image_size the tile). Resizing
// stays transformers' (Pillow's bicubic, bilinear and Lanczos): llama.cpp
// resizes otherwise (its own filters, aspect kept with black bars), so its
// pixels differ on images it must resize.
absl::StatusOr<std::unique_ptr<ImageProcessor>> LoadGgufImageProcessor(const std::string& path);

}  // namespace flover

#endif  // FLOVER_MODEL_VISION_IMAGE_PROCESSOR_H_
