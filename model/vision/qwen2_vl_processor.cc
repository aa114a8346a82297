#include "model/vision/qwen2_vl_processor.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "model/vision/processor_settings.h"
#include "util/json.h"
#include "util/status_macros.h"

namespace flover {

using google::protobuf::Struct;
using google::protobuf::Value;

absl::StatusOr<Qwen2VlProcessorConfig> LoadQwen2VlProcessorConfig(const std::string& dir) {
  Qwen2VlProcessorConfig c;
  FLOVER_ASSIGN_OR_RETURN(const ProcessorSettings settings, ReadProcessorSettings(dir));
  if (!settings.has_image) return c;
  const Struct* p = &settings.image;
  const std::string& what = settings.what;
  auto refuse = [&](auto&&... m) { return absl::InvalidArgumentError(absl::StrCat(what, ": ", m...)); };
  constexpr int64_t kMaxArea = int64_t{1} << 30;
  // size {shortest_edge, longest_edge} (transformers 5), or the older
  // min_pixels / max_pixels, which win where both are given.
  if (auto it = p->fields().find("size"); it != p->fields().end()) {
    if (it->second.kind_case() != Value::kStructValue) return refuse("size must be an object");
    const Struct& size = it->second.struct_value();
    if (JsonHas(size, "shortest_edge")) {
      FLOVER_ASSIGN_OR_RETURN(c.min_pixels, JsonIntField(size, "shortest_edge", 1, kMaxArea, what));
    }
    if (JsonHas(size, "longest_edge")) {
      FLOVER_ASSIGN_OR_RETURN(c.max_pixels, JsonIntField(size, "longest_edge", 1, kMaxArea, what));
    }
  }
  if (JsonHas(*p, "min_pixels")) {
    FLOVER_ASSIGN_OR_RETURN(c.min_pixels, JsonIntField(*p, "min_pixels", 1, kMaxArea, what));
  }
  if (JsonHas(*p, "max_pixels")) {
    FLOVER_ASSIGN_OR_RETURN(c.max_pixels, JsonIntField(*p, "max_pixels", 1, kMaxArea, what));
  }
  if (c.min_pixels > c.max_pixels) return refuse("min_pixels ", c.min_pixels, " exceeds max_pixels ", c.max_pixels);
  FLOVER_ASSIGN_OR_RETURN(c.patch, JsonIntFieldOr(*p, "patch_size", c.patch, 1, 256, what));
  FLOVER_ASSIGN_OR_RETURN(c.merge, JsonIntFieldOr(*p, "merge_size", c.merge, 1, 16, what));
  FLOVER_ASSIGN_OR_RETURN(c.temporal, JsonIntFieldOr(*p, "temporal_patch_size", c.temporal, 1, 16, what));
  FLOVER_ASSIGN_OR_RETURN(const int resample, JsonIntFieldOr(*p, "resample", 3, 0, 5, what));
  if (resample != 3) return refuse("resample ", resample, " is not supported (3, BICUBIC)");
  FLOVER_RETURN_IF_ERROR(ReadNormalization(*p, what, c.mean, c.std));
  return c;
}

absl::StatusOr<std::pair<int, int>> SmartResize(int height, int width, int factor, int64_t min_pixels,
                                                int64_t max_pixels) {
  if (height < 1 || width < 1) return absl::InvalidArgumentError("the image is empty");
  const double aspect = static_cast<double>(std::max(height, width)) / std::min(height, width);
  if (aspect > 200) {
    return absl::InvalidArgumentError(
        absl::StrCat("the image's aspect ratio is ", aspect, " (", width, " x ", height, "); at most 200 is taken"));
  }
  // Python's round(): halves to even, as nearbyint rounds by default.
  int64_t h = static_cast<int64_t>(std::nearbyint(static_cast<double>(height) / factor)) * factor;
  int64_t w = static_cast<int64_t>(std::nearbyint(static_cast<double>(width) / factor)) * factor;
  const double area = static_cast<double>(height) * width;
  if (h * w > max_pixels) {
    const double beta = std::sqrt(area / static_cast<double>(max_pixels));
    h = std::max<int64_t>(factor, static_cast<int64_t>(std::floor(height / beta / factor)) * factor);
    w = std::max<int64_t>(factor, static_cast<int64_t>(std::floor(width / beta / factor)) * factor);
  } else if (h * w < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / area);
    h = static_cast<int64_t>(std::ceil(height * beta / factor)) * factor;
    w = static_cast<int64_t>(std::ceil(width * beta / factor)) * factor;
  }
  return std::pair<int, int>(static_cast<int>(h), static_cast<int>(w));
}

absl::StatusOr<Qwen2VlImage> ProcessQwen2VlImage(const RgbImage& image, const Qwen2VlProcessorConfig& config) {
  const int P = config.patch, m = config.merge, T = config.temporal;
  FLOVER_ASSIGN_OR_RETURN(const auto size,
                          SmartResize(image.height, image.width, P * m, config.min_pixels, config.max_pixels));
  Qwen2VlImage out;
  out.resized = ResizeBicubic(image, size.second, size.first);
  const RgbImage& r = out.resized;
  out.grid_h = r.height / P;
  out.grid_w = r.width / P;
  const int64_t K = int64_t{3} * T * P * P, N = int64_t{out.grid_h} * out.grid_w;
  out.patches.resize(N * K);
  // Patches merge block by merge block (row-major), row-major within one;
  // each patch's values (channel, frame, y, x), every frame the image.
  float* dst = out.patches.data();
  for (int bh = 0; bh < out.grid_h / m; ++bh) {
    for (int bw = 0; bw < out.grid_w / m; ++bw) {
      for (int dy = 0; dy < m; ++dy) {
        for (int dx = 0; dx < m; ++dx) {
          const int py = (bh * m + dy) * P, px = (bw * m + dx) * P;
          for (int c = 0; c < 3; ++c) {
            for (int t = 0; t < T; ++t) {
              for (int y = 0; y < P; ++y) {
                for (int x = 0; x < P; ++x) *dst++ = NormalizePixel(r.at(py + y, px + x, c), config.mean[c], config.std[c]);
              }
            }
          }
        }
      }
    }
  }
  const int64_t tokens = N / (int64_t{m} * m);
  out.text.reserve(tokens * config.image_token.size());
  for (int64_t i = 0; i < tokens; ++i) out.text += config.image_token;
  return out;
}

}  // namespace flover
