// Arbitrary bytes as an image a client sends (PNG, JPEG with its EXIF
// orientation, WebP): the decoders must refuse what
// is malformed, truncated or too large with a status; whatever decodes goes
// through SmolVLM's processor (resizing, tiling, normalising) and Qwen3-VL's
// (smart_resize, bicubic, patches by merge block) and Gemma 3's (bilinear
// to a square) without reading or writing out of bounds; Qwen's refuses
// only aspect ratios past 200.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "model/vision/gemma3_processor.h"
#include "model/vision/idefics3_processor.h"
#include "model/vision/image.h"
#include "model/vision/qwen2_vl_processor.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  flover::ImageLimits limits;
  limits.max_pixels = 1 << 16;  // keeps each run fast; the bound itself is what is checked
  auto image = flover::DecodeImage(absl::string_view(reinterpret_cast<const char*>(data), size), limits);
  if (!image.ok()) return 0;
  if (image->pixels.size() != static_cast<size_t>(image->width) * image->height * 3) __builtin_trap();
  flover::Idefics3ProcessorConfig config;
  config.longest_edge = 48;
  config.tile = 16;
  config.rows_per_tile = 4;
  const flover::ProcessedImage p = flover::ProcessIdefics3Image(*image, config);
  if (p.pixels.size() != static_cast<size_t>(p.tiles) * 3 * 16 * 16) __builtin_trap();
  flover::Gemma3ProcessorConfig gemma;
  gemma.size = 24;
  gemma.image_seq_length = 4;
  gemma.pan_and_scan = true;  // and its crops, down to 4 px
  gemma.min_crop_size = 4;
  const flover::Gemma3Image g = flover::ProcessGemma3Image(*image, gemma);
  if (g.tiles < 1 || g.tiles > 1 + gemma.max_num_crops || g.pixels.size() != static_cast<size_t>(g.tiles) * 3 * 24 * 24) {
    __builtin_trap();
  }
  for (float v : g.pixels) {
    if (!(v >= -1.0f && v <= 1.0f)) __builtin_trap();  // (u8 / 255 - 0.5) / 0.5
  }
  flover::Qwen2VlProcessorConfig qwen;
  qwen.patch = 4;
  qwen.min_pixels = 8 * 8 * 4;
  qwen.max_pixels = 8 * 8 * 64;
  auto q = flover::ProcessQwen2VlImage(*image, qwen);
  const int lo = image->width < image->height ? image->width : image->height;
  const int hi = image->width < image->height ? image->height : image->width;
  if (!q.ok()) {
    if (hi <= 200.0 * lo) __builtin_trap();  // refused only for its aspect ratio
    return 0;
  }
  const int64_t n = int64_t{q->grid_h} * q->grid_w;
  if (q->grid_h % 2 != 0 || q->grid_w % 2 != 0 || n < 4 || n * 16 > qwen.max_pixels * 2 ||
      q->patches.size() != static_cast<size_t>(n) * 3 * 2 * 4 * 4 ||
      q->text.size() != static_cast<size_t>(n / 4) * qwen.image_token.size()) {
    __builtin_trap();
  }
  return 0;
}
