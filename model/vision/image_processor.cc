#include "model/vision/image_processor.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/loader/gguf.h"
#include "model/vision/gguf_fields.h"
#include "model/vision/gemma3_processor.h"
#include "model/vision/idefics3_processor.h"
#include "model/vision/qwen2_vl_processor.h"
#include "model/vision/qwen3_vl_vision.h"
#include "model/vision/vision_encoder.h"
#include "util/file_util.h"
#include "util/json.h"
#include "util/status_macros.h"

namespace flover {
namespace {

class Idefics3Processor : public ImageProcessor {
 public:
  explicit Idefics3Processor(Idefics3ProcessorConfig c) : c_(std::move(c)) {}
  const std::string& placeholder() const override { return placeholder_; }
  uint64_t settings_key() const override { return c_.split ? 0x5bd1e995u : 0; }
  absl::StatusOr<ProcessedPromptImage> Process(const RgbImage& image) const override {
    ProcessedImage p = ProcessIdefics3Image(image, c_);
    ProcessedPromptImage out;
    out.image.tiles = std::make_shared<const std::vector<float>>(std::move(p.pixels));
    out.image.num_tiles = p.tiles;
    out.text = std::move(p.text);
    return out;
  }
  void LimitRows(int64_t) override {}
  absl::Status Matches(const ImageEncoder& encoder) const override {
    const auto* smol = dynamic_cast<const VisionEncoder*>(&encoder);
    if (smol == nullptr) return absl::InvalidArgumentError("SmolVLM's processor needs SmolVLM's vision tower");
    const VisionInfo& v = smol->info();
    if (c_.rows_per_tile != v.rows_per_tile() || c_.tile != v.tile) {
      return absl::InvalidArgumentError(absl::StrCat("the processor's tiles (", c_.tile, " px, ", c_.rows_per_tile,
                                                     " rows) are not the vision tower's (", v.tile, " px, ",
                                                     v.rows_per_tile(), " rows)"));
    }
    return absl::OkStatus();
  }

 private:
  Idefics3ProcessorConfig c_;
  std::string placeholder_ = "<image>";
};

class Gemma3Processor : public ImageProcessor {
 public:
  explicit Gemma3Processor(Gemma3ProcessorConfig c) : c_(std::move(c)) {}
  const std::string& placeholder() const override { return placeholder_; }
  uint64_t settings_key() const override {
    uint64_t key = 0x6a09e667f3bcc909ull ^ static_cast<uint64_t>(c_.size);
    if (c_.pan_and_scan) {
      key ^= 0xbb67ae8584caa73bull * static_cast<uint64_t>(1 + c_.min_crop_size + 4096 * c_.max_num_crops) ^
             static_cast<uint64_t>(c_.min_ratio * 1e6);
    }
    return key;
  }
  absl::StatusOr<ProcessedPromptImage> Process(const RgbImage& image) const override {
    Gemma3Image p = ProcessGemma3Image(image, c_);
    ProcessedPromptImage out;
    out.image.tiles = std::make_shared<const std::vector<float>>(std::move(p.pixels));
    out.image.num_tiles = p.tiles;
    out.text = std::move(p.text);
    return out;
  }
  void LimitRows(int64_t) override {}  // a fixed image_seq_length an image
  absl::Status Matches(const ImageEncoder& encoder) const override {
    const auto* tower = dynamic_cast<const VisionEncoder*>(&encoder);
    if (tower == nullptr || tower->info().connector != VisionInfo::Connector::kPoolNorm) {
      return absl::InvalidArgumentError("Gemma 3's processor needs Gemma 3's vision tower");
    }
    const VisionInfo& v = tower->info();
    if (c_.size != v.tile || c_.image_seq_length != v.rows_per_tile()) {
      return absl::InvalidArgumentError(absl::StrCat("the processor's images (", c_.size, " px, ", c_.image_seq_length,
                                                     " tokens) are not the vision tower's (", v.tile, " px, ",
                                                     v.rows_per_tile(), " rows)"));
    }
    return absl::OkStatus();
  }

 private:
  Gemma3ProcessorConfig c_;
  // What Gemma 3's chat template writes for an image (its boi token): the
  // processor puts the whole sequence in its place.
  std::string placeholder_ = "<start_of_image>";
};

class Qwen2VlProcessor : public ImageProcessor {
 public:
  explicit Qwen2VlProcessor(Qwen2VlProcessorConfig c) : c_(std::move(c)) {}
  const std::string& placeholder() const override { return c_.image_token; }
  uint64_t settings_key() const override {
    return static_cast<uint64_t>(c_.min_pixels) * 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(c_.max_pixels);
  }
  absl::StatusOr<ProcessedPromptImage> Process(const RgbImage& image) const override {
    FLOVER_ASSIGN_OR_RETURN(Qwen2VlImage p, ProcessQwen2VlImage(image, c_));
    ProcessedPromptImage out;
    out.image.tiles = std::make_shared<const std::vector<float>>(std::move(p.patches));
    out.image.num_tiles = 1;
    out.image.grid_h = p.grid_h;
    out.image.grid_w = p.grid_w;
    out.text = std::move(p.text);
    return out;
  }
  void LimitRows(int64_t max_rows) override {
    const int64_t block = int64_t{c_.patch} * c_.merge;  // one row's pixels a side
    c_.max_pixels = std::min(c_.max_pixels, max_rows * block * block);
    c_.min_pixels = std::min(c_.min_pixels, c_.max_pixels);
  }
  absl::Status Matches(const ImageEncoder& encoder) const override {
    const auto* q = dynamic_cast<const Qwen3VlVision*>(&encoder);
    if (q == nullptr) return absl::InvalidArgumentError("Qwen2-VL's processor needs a Qwen3-VL vision tower");
    const Qwen3VlVisionInfo& v = q->info();
    if (c_.patch != v.patch || c_.merge != v.merge || c_.temporal != v.temporal) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the processor's patches (", c_.patch, " px, merged ", c_.merge, " x ", c_.merge, ", ", c_.temporal,
          " frames) are not the vision tower's (", v.patch, " px, merged ", v.merge, " x ", v.merge, ", ", v.temporal,
          " frames)"));
    }
    return absl::OkStatus();
  }

 private:
  Qwen2VlProcessorConfig c_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ImageProcessor>> LoadImageProcessor(const std::string& dir) {
  const std::string what = dir + "/config.json";
  FLOVER_ASSIGN_OR_RETURN(const std::string text, ReadFile(what));
  FLOVER_ASSIGN_OR_RETURN(const google::protobuf::Struct top, ParseJsonObject(text, what));
  auto type = top.fields().find("model_type");
  if (type != top.fields().end() && TakesQwen3VlVision(type->second.string_value())) {
    FLOVER_ASSIGN_OR_RETURN(Qwen2VlProcessorConfig c, LoadQwen2VlProcessorConfig(dir));
    return std::unique_ptr<ImageProcessor>(new Qwen2VlProcessor(std::move(c)));
  }
  if (type != top.fields().end() && type->second.string_value() == "gemma3") {
    FLOVER_ASSIGN_OR_RETURN(Gemma3ProcessorConfig c, LoadGemma3ProcessorConfig(dir));
    return std::unique_ptr<ImageProcessor>(new Gemma3Processor(std::move(c)));
  }
  FLOVER_ASSIGN_OR_RETURN(Idefics3ProcessorConfig c, LoadIdefics3ProcessorConfig(dir));
  return std::unique_ptr<ImageProcessor>(new Idefics3Processor(std::move(c)));
}

namespace {

// An mmproj file's clip.vision.image_mean and image_std into mean and std.
absl::Status ReadGgufNormalization(const GgufFile& f, const std::string& path, float mean[3], float std[3]) {
  for (auto [key, out] : {std::pair{"clip.vision.image_mean", mean}, std::pair{"clip.vision.image_std", std}}) {
    FLOVER_ASSIGN_OR_RETURN(const std::vector<double>* v, f.GetFloats(key));
    if (v->size() != 3) return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, " needs 3 values"));
    for (int i = 0; i < 3; ++i) {
      if (!std::isfinite((*v)[i]) || (out == std && !((*v)[i] > 0))) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, " holds ", (*v)[i]));
      }
      out[i] = static_cast<float>((*v)[i]);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ImageProcessor>> LoadGgufImageProcessor(const std::string& path) {
  FLOVER_ASSIGN_OR_RETURN(GgufFile f, GgufFile::Open(path));
  FLOVER_ASSIGN_OR_RETURN(const std::string projector, f.GetString("clip.projector_type"));
  auto get = [&](const char* key, int64_t absent, int64_t lo, int64_t hi) { return GgufIntIn(f, key, absent, lo, hi); };
  FLOVER_ASSIGN_OR_RETURN(const int patch, get("clip.vision.patch_size", 0, 1, 256));
  if (projector == "gemma3" || projector == "idefics3") {
    // One tile of the tower's size (Gemma 3), or SmolVLM's tiles and
    // global tile with its longest edge from preproc_image_size.
    FLOVER_ASSIGN_OR_RETURN(const int tile, get("clip.vision.image_size", 0, 1, 4096));
    FLOVER_ASSIGN_OR_RETURN(const int scale, get("clip.vision.projector.scale_factor", projector == "gemma3" ? 4 : 2, 1, 64));
    if (tile % (patch * scale) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": image_size ", tile, " is not whole ", patch, " px patches ",
                                                     scale, " to a row a side"));
    }
    const int rows = (tile / patch / scale) * (tile / patch / scale);
    if (projector == "gemma3") {
      Gemma3ProcessorConfig c;
      c.size = tile;
      c.image_seq_length = rows;
      FLOVER_RETURN_IF_ERROR(ReadGgufNormalization(f, path, c.mean, c.std));
      return std::unique_ptr<ImageProcessor>(new Gemma3Processor(std::move(c)));
    }
    Idefics3ProcessorConfig c;
    c.tile = tile;
    c.rows_per_tile = rows;
    FLOVER_ASSIGN_OR_RETURN(c.longest_edge, get("clip.vision.preproc_image_size", 4 * tile, tile, 4096));
    FLOVER_RETURN_IF_ERROR(ReadGgufNormalization(f, path, c.mean, c.std));
    return std::unique_ptr<ImageProcessor>(new Idefics3Processor(std::move(c)));
  }
  if (projector != "qwen3vl_merger") {
    return absl::InvalidArgumentError(absl::StrCat(path, ": clip.projector_type \"", projector,
                                                   "\" is not one Flover runs (qwen3vl_merger, gemma3, idefics3)"));
  }
  Qwen2VlProcessorConfig c;
  FLOVER_ASSIGN_OR_RETURN(const int merge, get("clip.vision.spatial_merge_size", 2, 1, 16));
  c.patch = patch;
  c.merge = merge;
  const int64_t block = int64_t{patch} * merge;
  c.min_pixels = 8 * block * block;
  c.max_pixels = 4096 * block * block;
  FLOVER_RETURN_IF_ERROR(ReadGgufNormalization(f, path, c.mean, c.std));
  return std::unique_ptr<ImageProcessor>(new Qwen2VlProcessor(std::move(c)));
}

}  // namespace flover
