#include "model/vision/idefics3_processor.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "model/vision/processor_settings.h"
#include "util/file_util.h"
#include "util/json.h"
#include "util/status_macros.h"

namespace flover {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

constexpr int kMaxSide = 4096;  // the processor's MAX_IMAGE_SIZE

// Resize 1: the longest edge to `longest`, the other side kept in aspect,
// truncated and made even; then below kMaxSide.
void FirstSize(int w, int h, int longest, int* out_w, int* out_h) {
  const double aspect = static_cast<double>(w) / h;
  if (w >= h) {
    w = longest;
    h = static_cast<int>(w / aspect);
    if (h % 2 != 0) ++h;
  } else {
    h = longest;
    w = static_cast<int>(h * aspect);
    if (w % 2 != 0) ++w;
  }
  h = std::max(h, 1);
  w = std::max(w, 1);
  const double aspect2 = static_cast<double>(w) / h;
  if (w >= h && w > kMaxSide) {
    w = kMaxSide;
    h = static_cast<int>(w / aspect2);
  } else if (h > w && h > kMaxSide) {
    h = kMaxSide;
    w = static_cast<int>(h * aspect2);
  }
  *out_w = std::max(w, 1);
  *out_h = std::max(h, 1);
}

// Resize 2: both sides up to whole tiles, the second from the first's aspect.
void TileSize(int w, int h, int tile, int* out_w, int* out_h) {
  const double aspect = static_cast<double>(w) / h;
  auto up = [&](double v) { return static_cast<int>(std::ceil(v / tile)) * tile; };
  if (w >= h) {
    w = up(w);
    h = static_cast<int>(w / aspect);
    h = up(h);
  } else {
    h = up(h);
    w = static_cast<int>(h * aspect);
    w = up(w);
  }
  // A side so thin it rounds to nothing (transformers would fail on it):
  // one tile.
  *out_w = std::max(w, tile);
  *out_h = std::max(h, tile);
}

}  // namespace

absl::StatusOr<Idefics3ProcessorConfig> LoadIdefics3ProcessorConfig(const std::string& dir) {
  Idefics3ProcessorConfig c;
  FLOVER_ASSIGN_OR_RETURN(const ProcessorSettings settings, ReadProcessorSettings(dir));
  if (settings.has_processor) {
    FLOVER_ASSIGN_OR_RETURN(c.rows_per_tile, JsonIntFieldOr(settings.processor, "image_seq_len", c.rows_per_tile, 1,
                                                            1 << 16, settings.processor_path));
  }
  if (!settings.has_image) return c;
  const Struct* p = &settings.image;
  const std::string& what = settings.what;
  auto refuse = [&](auto&&... m) { return absl::InvalidArgumentError(absl::StrCat(what, ": ", m...)); };
  auto edge = [&](const char* key, int dflt) -> absl::StatusOr<int> {
    auto it = p->fields().find(key);
    if (it == p->fields().end()) return dflt;
    if (it->second.kind_case() != Value::kStructValue) return refuse(key, " must be {\"longest_edge\": N}");
    return JsonIntField(it->second.struct_value(), "longest_edge", 1, kMaxSide, what);
  };
  FLOVER_ASSIGN_OR_RETURN(c.longest_edge, edge("size", c.longest_edge));
  FLOVER_ASSIGN_OR_RETURN(c.tile, edge("max_image_size", c.tile));
  c.split = JsonBoolField(*p, "do_image_splitting", true);
  FLOVER_ASSIGN_OR_RETURN(const int resample, JsonIntFieldOr(*p, "resample", 1, 0, 5, what));
  if (resample != 1) return refuse("resample ", resample, " is not supported (1, LANCZOS)");
  FLOVER_RETURN_IF_ERROR(ReadNormalization(*p, what, c.mean, c.std));
  return c;
}

ProcessedImage ProcessIdefics3Image(const RgbImage& image, const Idefics3ProcessorConfig& config) {
  const int M = config.tile;
  int w1 = 0, h1 = 0;
  FirstSize(image.width, image.height, config.longest_edge, &w1, &h1);
  const RgbImage first = ResizeLanczos(image, w1, h1);
  std::vector<RgbImage> frames;
  ProcessedImage out;
  if (config.split) {
    int w2 = 0, h2 = 0;
    TileSize(first.width, first.height, M, &w2, &h2);
    const RgbImage whole = ResizeLanczos(first, w2, h2);
    if (whole.height > M || whole.width > M) {
      out.rows = (whole.height - M) / M + 1;
      out.cols = (whole.width - M) / M + 1;
      for (int r = 0; r < out.rows; ++r) {
        for (int c = 0; c < out.cols; ++c) {
          RgbImage crop;
          crop.width = crop.height = M;
          crop.pixels.resize(static_cast<size_t>(M) * M * 3);
          for (int y = 0; y < M; ++y) {
            std::copy_n(whole.pixels.begin() + ((static_cast<size_t>(r) * M + y) * whole.width + c * M) * 3, M * 3,
                        crop.pixels.begin() + static_cast<size_t>(y) * M * 3);
          }
          frames.push_back(std::move(crop));
        }
      }
      frames.push_back(ResizeLanczos(whole, M, M));
    } else {
      frames.push_back(whole);  // already M x M
    }
  } else {
    frames.push_back(ResizeLanczos(first, M, M));
  }
  out.tiles = static_cast<int>(frames.size());
  out.pixels.resize(static_cast<size_t>(out.tiles) * 3 * M * M);
  float* px = out.pixels.data();
  for (const RgbImage& f : frames) {
    for (int c = 0; c < 3; ++c) {
      for (int y = 0; y < M; ++y) {
        for (int x = 0; x < M; ++x) {
          *px++ = NormalizePixel(f.at(y, x, c), config.mean[c], config.std[c]);
        }
      }
    }
  }
  std::string images;
  for (int i = 0; i < config.rows_per_tile; ++i) images += "<image>";
  if (out.rows == 0) {
    out.text = absl::StrCat("<fake_token_around_image><global-img>", images, "<fake_token_around_image>");
    return out;
  }
  for (int r = 1; r <= out.rows; ++r) {
    for (int c = 1; c <= out.cols; ++c) absl::StrAppend(&out.text, "<fake_token_around_image><row_", r, "_col_", c, ">", images);
    out.text += "\n";
  }
  absl::StrAppend(&out.text, "\n<fake_token_around_image><global-img>", images, "<fake_token_around_image>");
  return out;
}

}  // namespace flover
