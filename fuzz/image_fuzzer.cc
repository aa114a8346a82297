// Arbitrary bytes as an image a client sends: the decoders must refuse what
// is malformed, truncated or too large with a status; whatever decodes goes
// through SmolVLM's processor (resizing, tiling, normalising) without
// reading or writing out of bounds.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "model/vision/idefics3_processor.h"
#include "model/vision/image.h"

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
  return 0;
}
