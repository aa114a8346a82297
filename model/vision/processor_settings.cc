#include "model/vision/processor_settings.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "util/file_util.h"
#include "util/json.h"
#include "util/status_macros.h"

namespace flover {

using google::protobuf::Struct;
using google::protobuf::Value;

absl::StatusOr<ProcessorSettings> ReadProcessorSettings(const std::string& dir) {
  ProcessorSettings s;
  s.what = dir + "/preprocessor_config.json";
  if (auto text = ReadFile(s.what); text.ok()) {
    FLOVER_ASSIGN_OR_RETURN(s.image, ParseJsonObject(*text, s.what));
    s.has_image = true;
  }
  s.processor_path = dir + "/processor_config.json";
  if (auto text = ReadFile(s.processor_path); text.ok()) {
    FLOVER_ASSIGN_OR_RETURN(s.processor, ParseJsonObject(*text, s.processor_path));
    s.has_processor = true;
    const Struct* image = JsonObjectField(s.processor, "image_processor");
    if (!s.has_image && image != nullptr) {
      s.image = *image;
      s.has_image = true;
      s.what = s.processor_path;
    }
  }
  return s;
}

absl::Status ReadNormalization(const Struct& p, const std::string& what, float mean[3], float std[3]) {
  auto refuse = [&](auto&&... m) { return absl::InvalidArgumentError(absl::StrCat(what, ": ", m...)); };
  FLOVER_ASSIGN_OR_RETURN(const double rescale, JsonNumberField(p, "rescale_factor", 1.0 / 255, what));
  if (std::fabs(rescale - 1.0 / 255) > 1e-12) return refuse("rescale_factor ", rescale, " is not supported (1/255)");
  for (const char* key : {"do_resize", "do_rescale", "do_normalize", "do_convert_rgb"}) {
    if (!JsonBoolField(p, key, true)) return refuse(key, " false is not supported");
  }
  for (auto [key, out] : {std::pair{"image_mean", mean}, std::pair{"image_std", std}}) {
    auto it = p.fields().find(key);
    if (it == p.fields().end()) continue;
    const auto& list = it->second.list_value().values();
    if (it->second.kind_case() != Value::kListValue || list.size() != 3) return refuse(key, " must list 3 numbers");
    for (int i = 0; i < 3; ++i) {
      const double v = list[i].number_value();
      if (!(std::isfinite(v) && (std::string(key) == "image_mean" || v > 0))) return refuse(key, " holds ", v);
      out[i] = static_cast<float>(v);
    }
  }
  return absl::OkStatus();
}

}  // namespace flover
