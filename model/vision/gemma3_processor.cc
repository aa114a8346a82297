#include "model/vision/gemma3_processor.h"

#include "absl/strings/str_cat.h"
#include "model/vision/processor_settings.h"
#include "util/json.h"
#include "util/status_macros.h"

namespace flover {

absl::StatusOr<Gemma3ProcessorConfig> LoadGemma3ProcessorConfig(const std::string& dir) {
  Gemma3ProcessorConfig c;
  FLOVER_ASSIGN_OR_RETURN(const ProcessorSettings settings, ReadProcessorSettings(dir));
  if (settings.has_processor) {
    FLOVER_ASSIGN_OR_RETURN(c.image_seq_length, JsonIntFieldOr(settings.processor, "image_seq_length",
                                                               c.image_seq_length, 1, 1 << 16,
                                                               settings.processor_path));
  }
  if (!settings.has_image) return c;
  const google::protobuf::Struct& p = settings.image;
  const std::string& what = settings.what;
  auto refuse = [&](auto&&... m) { return absl::InvalidArgumentError(absl::StrCat(what, ": ", m...)); };
  // The released preprocessor_config.json holds it too.
  if (!settings.has_processor || !JsonHas(settings.processor, "image_seq_length")) {
    FLOVER_ASSIGN_OR_RETURN(c.image_seq_length,
                            JsonIntFieldOr(p, "image_seq_length", c.image_seq_length, 1, 1 << 16, what));
  }
  if (const google::protobuf::Struct* size = JsonObjectField(p, "size"); size != nullptr) {
    FLOVER_ASSIGN_OR_RETURN(const int height, JsonIntField(*size, "height", 1, 4096, what));
    FLOVER_ASSIGN_OR_RETURN(const int width, JsonIntField(*size, "width", 1, 4096, what));
    if (height != width) return refuse("size ", width, " x ", height, " is not square (Gemma 3's tower takes squares)");
    c.size = height;
  }
  FLOVER_ASSIGN_OR_RETURN(const int resample, JsonIntFieldOr(p, "resample", 2, 0, 5, what));
  if (resample != 2) return refuse("resample ", resample, " is not supported (2, BILINEAR)");
  if (JsonBoolField(p, "do_pan_and_scan", false)) {
    return refuse("do_pan_and_scan is true: Flover does not build pan-and-scan crops yet");
  }
  FLOVER_RETURN_IF_ERROR(ReadNormalization(p, what, c.mean, c.std));
  return c;
}

Gemma3Image ProcessGemma3Image(const RgbImage& image, const Gemma3ProcessorConfig& config) {
  const int S = config.size;
  const RgbImage sized = ResizeBilinear(image, S, S);
  Gemma3Image out;
  out.pixels.resize(static_cast<size_t>(3) * S * S);
  float* px = out.pixels.data();
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < S; ++y) {
      for (int x = 0; x < S; ++x) *px++ = NormalizePixel(sized.at(y, x, c), config.mean[c], config.std[c]);
    }
  }
  out.text = "\n\n<start_of_image>";
  for (int i = 0; i < config.image_seq_length; ++i) out.text += "<image_soft_token>";
  out.text += "<end_of_image>\n\n";
  return out;
}

}  // namespace flover
