#include "model/pooling.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "google/protobuf/struct.pb.h"
#include "util/file_util.h"
#include "util/json.h"

namespace flover {

using google::protobuf::Struct;
using google::protobuf::Value;

absl::StatusOr<Pooling::Kind> PoolingKindNamed(absl::string_view name) {
  if (name == "last") return Pooling::Kind::kLast;
  if (name == "mean") return Pooling::Kind::kMean;
  if (name == "cls") return Pooling::Kind::kCls;
  return absl::InvalidArgumentError(absl::StrCat("unknown pooling '", name, "' (last, mean, cls)"));
}

const char* PoolingKindName(Pooling::Kind kind) {
  switch (kind) {
    case Pooling::Kind::kMean: return "mean";
    case Pooling::Kind::kCls: return "cls";
    case Pooling::Kind::kLast: break;
  }
  return "last";
}

absl::StatusOr<std::optional<Pooling>> ReadDirectoryPooling(const std::string& dir) {
  const std::string modules_path = dir + "/modules.json";
  if (!FileExists(modules_path)) return std::optional<Pooling>();
  auto text = ReadFile(modules_path);
  if (!text.ok()) return text.status();
  // modules.json is a list: parse it inside an object.
  auto doc = ParseJsonObject(absl::StrCat("{\"modules\": ", *text, "}"), modules_path);
  if (!doc.ok()) return doc.status();
  const Value& modules = doc->fields().at("modules");
  if (modules.kind_case() != Value::kListValue) {
    return absl::InvalidArgumentError(absl::StrCat(modules_path, ": not a list of modules"));
  }
  std::optional<Pooling> out;
  bool normalize = false;
  for (const Value& m : modules.list_value().values()) {
    if (m.kind_case() != Value::kStructValue) continue;
    const auto& f = m.struct_value().fields();
    const std::string type = f.count("type") ? f.at("type").string_value() : "";
    const std::string path = f.count("path") ? f.at("path").string_value() : "";
    if (type == "sentence_transformers.models.Normalize") normalize = true;
    if (type != "sentence_transformers.models.Pooling") continue;
    const std::string config_path = absl::StrCat(dir, "/", path, "/config.json");
    auto config_text = ReadFile(config_path);
    if (!config_text.ok()) return config_text.status();
    auto config = ParseJsonObject(*config_text, config_path);
    if (!config.ok()) return config.status();
    for (const char* unsupported : {"pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
                                    "pooling_mode_weightedmean_tokens"}) {
      if (JsonBoolField(*config, unsupported, false)) {
        return absl::InvalidArgumentError(absl::StrCat(config_path, ": ", unsupported, " is not supported (last, mean, cls)"));
      }
    }
    const bool last = JsonBoolField(*config, "pooling_mode_lasttoken", false),
               mean = JsonBoolField(*config, "pooling_mode_mean_tokens", false),
               cls = JsonBoolField(*config, "pooling_mode_cls_token", false);
    if (last + mean + cls != 1) {
      return absl::InvalidArgumentError(absl::StrCat(config_path, ": one of pooling_mode_lasttoken, "
                                                     "pooling_mode_mean_tokens and pooling_mode_cls_token must be set"));
    }
    out.emplace();
    out->kind = last ? Pooling::Kind::kLast : mean ? Pooling::Kind::kMean : Pooling::Kind::kCls;
  }
  if (out.has_value()) out->normalize = normalize;
  return out;
}

std::optional<Pooling> PoolingFromGguf(int64_t pooling_type) {
  Pooling p;
  switch (pooling_type) {
    case 1: p.kind = Pooling::Kind::kMean; return p;
    case 2: p.kind = Pooling::Kind::kCls; return p;
    case 3: p.kind = Pooling::Kind::kLast; return p;
    default: return std::nullopt;
  }
}

void PoolingSum::Add(absl::Span<const float> rows, int position, int n, int T) {
  const size_t C = sum_.size();
  if (pooling_.kind == Pooling::Kind::kMean) {
    for (int t = 0; t < n; ++t) {
      for (size_t c = 0; c < C; ++c) sum_[c] += rows[static_cast<size_t>(t) * C + c];
    }
    rows_ += n;
    return;
  }
  const int keep = pooling_.kind == Pooling::Kind::kLast ? T - 1 : 0;
  if (keep < position || keep >= position + n) return;
  const float* row = rows.data() + static_cast<size_t>(keep - position) * C;
  for (size_t c = 0; c < C; ++c) sum_[c] = row[c];
  rows_ = 1;
}

absl::StatusOr<std::vector<float>> PoolingSum::Finish(int dims) const {
  const int C = static_cast<int>(sum_.size());
  if (rows_ < 1) return absl::InvalidArgumentError("pooling no rows");
  if (dims < 0 || dims > C) {
    return absl::InvalidArgumentError(absl::StrCat("dimensions ", dims, " is outside [1, ", C, "]"));
  }
  std::vector<double> v = sum_;
  if (pooling_.kind == Pooling::Kind::kMean) {
    for (double& x : v) x /= rows_;
  }
  const int D = dims > 0 ? dims : C;
  double norm = 0.0;
  for (int c = 0; c < D; ++c) norm += v[c] * v[c];
  // torch.nn.functional.normalize's eps.
  const double scale = pooling_.normalize ? 1.0 / std::max(std::sqrt(norm), 1e-12) : 1.0;
  std::vector<float> out(D);
  for (int c = 0; c < D; ++c) out[c] = static_cast<float>(v[c] * scale);
  return out;
}

absl::StatusOr<std::vector<float>> Pool(absl::Span<const float> rows, int T, int C, const Pooling& pooling, int dims) {
  if (T < 1 || C < 1 || rows.size() != static_cast<size_t>(T) * C) {
    return absl::InvalidArgumentError(absl::StrCat("pooling ", rows.size(), " values as ", T, " rows of ", C));
  }
  PoolingSum sum(pooling, C);
  sum.Add(rows, 0, T, T);
  return sum.Finish(dims);
}

}  // namespace flover
