#include "model/vision/gemma3_processor.h"

#include <algorithm>
#include <cmath>

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
  c.pan_and_scan = JsonBoolField(p, "do_pan_and_scan", false);
  // Null where the released files leave pan-and-scan off.
  auto number = [&](const char* key, double dflt) -> absl::StatusOr<double> {
    auto it = p.fields().find(key);
    if (it == p.fields().end() || it->second.kind_case() == google::protobuf::Value::kNullValue) return dflt;
    return JsonNumberField(p, key, dflt, what);
  };
  FLOVER_ASSIGN_OR_RETURN(const double min_crop, number("pan_and_scan_min_crop_size", c.min_crop_size));
  FLOVER_ASSIGN_OR_RETURN(const double max_crops, number("pan_and_scan_max_num_crops", c.max_num_crops));
  FLOVER_ASSIGN_OR_RETURN(c.min_ratio, number("pan_and_scan_min_ratio_to_activate", c.min_ratio));
  if (!(min_crop >= 1 && min_crop <= 4096 && max_crops >= 2 && max_crops <= 64 && c.min_ratio >= 1 &&
        c.min_ratio <= 1e4) ||
      min_crop != static_cast<int>(min_crop) || max_crops != static_cast<int>(max_crops)) {
    return refuse("pan_and_scan_min_crop_size ", min_crop, ", pan_and_scan_max_num_crops ", max_crops,
                  " or pan_and_scan_min_ratio_to_activate ", c.min_ratio, " is out of range");
  }
  c.min_crop_size = static_cast<int>(min_crop);
  c.max_num_crops = static_cast<int>(max_crops);
  FLOVER_RETURN_IF_ERROR(ReadNormalization(p, what, c.mean, c.std));
  return c;
}

std::vector<CropBox> PanAndScanCrops(int width, int height, const Gemma3ProcessorConfig& c) {
  if (!c.pan_and_scan || width < 1 || height < 1) return {};
  // As Gemma3ImageProcessor.pan_and_scan: along the long side, about as
  // many crops as the aspect ratio (rounded half up), at least 2, at most
  // max_num_crops and what min_crop_size allows.
  const bool wide = width >= height;
  const int longer = wide ? width : height, shorter = wide ? height : width;
  if (static_cast<double>(longer) / shorter < c.min_ratio) return {};
  int n = static_cast<int>(std::floor(static_cast<double>(longer) / shorter + 0.5));
  n = std::min(longer / c.min_crop_size, n);
  n = std::min(c.max_num_crops, std::max(2, n));
  const int crops_w = wide ? n : 1, crops_h = wide ? 1 : n;
  const int crop_w = (width + crops_w - 1) / crops_w, crop_h = (height + crops_h - 1) / crops_h;
  if (std::min(crop_w, crop_h) < c.min_crop_size) return {};
  std::vector<CropBox> boxes;
  for (int i = 0; i < crops_h; ++i) {
    for (int j = 0; j < crops_w; ++j) {
      const int x = j * crop_w, y = i * crop_h;  // the last may reach past the edge: cut there, as numpy slices
      boxes.push_back({x, y, std::min(crop_w, width - x), std::min(crop_h, height - y)});
    }
  }
  return boxes;
}

Gemma3Image ProcessGemma3Image(const RgbImage& image, const Gemma3ProcessorConfig& config) {
  const int S = config.size;
  std::vector<RgbImage> frames = {ResizeBilinear(image, S, S)};
  const std::vector<CropBox> crops = PanAndScanCrops(image.width, image.height, config);
  for (const CropBox& b : crops) {
    RgbImage crop;
    crop.width = b.w;
    crop.height = b.h;
    crop.pixels.resize(static_cast<size_t>(b.w) * b.h * 3);
    for (int y = 0; y < b.h; ++y) {
      std::copy_n(image.pixels.begin() + ((static_cast<size_t>(b.y) + y) * image.width + b.x) * 3, b.w * 3,
                  crop.pixels.begin() + static_cast<size_t>(y) * b.w * 3);
    }
    frames.push_back(ResizeBilinear(crop, S, S));
  }
  Gemma3Image out;
  out.tiles = static_cast<int>(frames.size());
  out.pixels.resize(frames.size() * 3 * S * S);
  float* px = out.pixels.data();
  for (const RgbImage& f : frames) {
    for (int c = 0; c < 3; ++c) {
      for (int y = 0; y < S; ++y) {
        for (int x = 0; x < S; ++x) *px++ = NormalizePixel(f.at(y, x, c), config.mean[c], config.std[c]);
      }
    }
  }
  std::string sequence = "\n\n<start_of_image>";
  for (int i = 0; i < config.image_seq_length; ++i) sequence += "<image_soft_token>";
  sequence += "<end_of_image>\n\n";
  if (crops.empty()) {
    out.text = std::move(sequence);
    return out;
  }
  out.text = "Here is the original image " + sequence + " and here are some crops to help you see better ";
  for (size_t i = 0; i < crops.size(); ++i) out.text += (i > 0 ? " " : "") + sequence;
  return out;
}

}  // namespace flover
