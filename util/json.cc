#include "util/json.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"

namespace flover {

absl::StatusOr<google::protobuf::Struct> ParseJsonObject(absl::string_view text,
                                                         absl::string_view what) {
  google::protobuf::Struct out;
  const auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(text.data(), text.size()), &out);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": not a valid JSON object: ", std::string(status.message())));
  }
  return out;
}

absl::StatusOr<int64_t> JsonToInt(const google::protobuf::Value& v,
                                  absl::string_view field, int64_t min,
                                  int64_t max) {
  if (v.kind_case() != google::protobuf::Value::kNumberValue) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " must be a number"));
  }
  const double d = v.number_value();
  // Doubles hold integers exactly up to 2^53, far past any bound used here.
  if (!(d >= static_cast<double>(min) && d <= static_cast<double>(max)) ||
      d != std::floor(d)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s must be an integer in [%d, %d], got %g", field, min, max, d));
  }
  return static_cast<int64_t>(d);
}

bool JsonHas(const google::protobuf::Struct& s, absl::string_view key) {
  auto it = s.fields().find(std::string(key));
  return it != s.fields().end() &&
         it->second.kind_case() != google::protobuf::Value::kNullValue;
}

absl::StatusOr<int> JsonIntField(const google::protobuf::Struct& s,
                                 absl::string_view key, int64_t min,
                                 int64_t max, absl::string_view what) {
  auto it = s.fields().find(std::string(key));
  if (it == s.fields().end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": missing field \"", key, "\""));
  }
  auto v = JsonToInt(it->second, key, min, max);
  if (!v.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", v.status().message()));
  }
  return static_cast<int>(*v);
}

absl::StatusOr<int> JsonIntFieldOr(const google::protobuf::Struct& s,
                                   absl::string_view key, int dflt, int64_t min,
                                   int64_t max, absl::string_view what) {
  auto it = s.fields().find(std::string(key));
  if (it == s.fields().end() ||
      it->second.kind_case() == google::protobuf::Value::kNullValue) {
    return dflt;
  }
  return JsonIntField(s, key, min, max, what);
}

absl::StatusOr<double> JsonNumberField(const google::protobuf::Struct& s,
                                       absl::string_view key, double dflt,
                                       absl::string_view what) {
  auto it = s.fields().find(std::string(key));
  if (it == s.fields().end() ||
      it->second.kind_case() == google::protobuf::Value::kNullValue) {
    return dflt;
  }
  if (it->second.kind_case() != google::protobuf::Value::kNumberValue ||
      !std::isfinite(it->second.number_value())) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", key, " must be a number"));
  }
  return it->second.number_value();
}

const google::protobuf::Struct* JsonObjectField(const google::protobuf::Struct& s, absl::string_view key) {
  auto it = s.fields().find(std::string(key));
  return it != s.fields().end() && it->second.kind_case() == google::protobuf::Value::kStructValue
             ? &it->second.struct_value()
             : nullptr;
}

bool JsonBoolField(const google::protobuf::Struct& s, absl::string_view key,
                   bool dflt) {
  auto it = s.fields().find(std::string(key));
  if (it == s.fields().end() ||
      it->second.kind_case() != google::protobuf::Value::kBoolValue) {
    return dflt;
  }
  return it->second.bool_value();
}

absl::Status JsonIntListField(const google::protobuf::Struct& s, absl::string_view key,
                              int64_t min, int64_t max, absl::string_view what,
                              std::vector<int32_t>* out) {
  auto it = s.fields().find(std::string(key));
  if (it == s.fields().end() ||
      it->second.kind_case() == google::protobuf::Value::kNullValue) {
    return absl::OkStatus();
  }
  std::vector<const google::protobuf::Value*> values;
  if (it->second.kind_case() == google::protobuf::Value::kListValue) {
    for (const auto& v : it->second.list_value().values()) values.push_back(&v);
  } else {
    values.push_back(&it->second);
  }
  for (const google::protobuf::Value* v : values) {
    auto id = JsonToInt(*v, key, min, max);
    if (!id.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": ", id.status().message()));
    out->push_back(static_cast<int32_t>(*id));
  }
  return absl::OkStatus();
}

std::string JsonQuote(absl::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

}  // namespace flover
