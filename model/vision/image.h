// Images as a vision model's processor reads them: decoded from PNG or JPEG
// bytes (Debian's libpng and libjpeg-turbo) into 8-bit RGB, and resized as
// Pillow resizes them (transformers' image processors run Pillow), so the
// pixels a vision tower sees are the ones transformers' processor gives.
#ifndef FLOVER_MODEL_VISION_IMAGE_H_
#define FLOVER_MODEL_VISION_IMAGE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace flover {

// 8-bit RGB, row-major, 3 bytes a pixel.
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // [height, width, 3]
  uint8_t at(int y, int x, int c) const { return pixels[(static_cast<size_t>(y) * width + x) * 3 + c]; }
};

struct ImageLimits {
  int64_t max_bytes = int64_t{20} << 20;     // the encoded file
  int64_t max_pixels = int64_t{64} << 20;    // width x height, read from the header before decoding
};

// `bytes` as RGB: PNG (any bit depth, palette, grey, alpha), JPEG (grey,
// RGB, YCbCr; turned as its EXIF orientation says, as transformers'
// load_image does with PIL.ImageOps.exif_transpose) or a still WebP (lossy
// or lossless, Debian's libwebp). Alpha is composited onto white, as
// transformers' convert_to_rgb does; 16-bit samples keep their high byte.
// Anything else (another format, an animated WebP, a corrupt or truncated
// file, one past `limits`) is InvalidArgument saying what is wrong.
absl::StatusOr<RgbImage> DecodeImage(absl::string_view bytes, const ImageLimits& limits = {});

// `image` resized to width x height with Pillow's Lanczos filter
// (Image.resize(..., LANCZOS)): separable, the horizontal pass first, 8-bit
// between the passes, 22-bit fixed-point weights, as Pillow computes them.
// A pass whose size is unchanged is skipped.
RgbImage ResizeLanczos(const RgbImage& image, int width, int height);
// The same with Pillow's bicubic filter (Image.resize(..., BICUBIC), a =
// -0.5): Qwen2-VL's and Qwen3-VL's processors.
RgbImage ResizeBicubic(const RgbImage& image, int width, int height);
// The same with Pillow's bilinear filter (Image.resize(..., BILINEAR), a
// triangle scaled to the reduction): Gemma 3's processor.
RgbImage ResizeBilinear(const RgbImage& image, int width, int height);

}  // namespace flover

#endif  // FLOVER_MODEL_VISION_IMAGE_H_
