#include "server/json_body.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/field_error.h"

namespace flover::server {

absl::StatusOr<Json> ParseJsonObjectBody(absl::string_view text, absl::string_view what) {
  bool too_deep = false;
  // Deeper than the limit: the value is dropped as it is read (nothing deep
  // is ever built), and the body refused.
  const Json::parser_callback_t limit = [&too_deep](int depth, Json::parse_event_t, Json&) {
    if (depth > kMaxJsonDepth) too_deep = true;
    return !too_deep;
  };
  Json parsed;
  try {
    parsed = Json::parse(text.begin(), text.end(), limit);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not a valid JSON object: ", e.what()));
  }
  if (too_deep) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": nested deeper than ", kMaxJsonDepth, " levels"));
  }
  if (!parsed.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not a valid JSON object"));
  }
  return parsed;
}

const Json* JsonField(const Json& obj, absl::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(std::string(key));
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<int64_t> JsonInteger(const Json& v, absl::string_view field, int64_t min,
                                    int64_t max, absl::string_view message) {
  if (v.is_number_integer() && !v.is_number_unsigned()) {
    const int64_t i = v.get<int64_t>();
    if (i >= min && i <= max) return i;
  } else if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (max >= 0 && u <= static_cast<uint64_t>(max) && static_cast<int64_t>(u) >= min) {
      return static_cast<int64_t>(u);
    }
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    // Doubles hold integers exactly up to 2^53, far past any bound used here.
    if (d >= static_cast<double>(min) && d <= static_cast<double>(max) && d == std::floor(d)) {
      return static_cast<int64_t>(d);
    }
  }
  return FieldError(field, message);
}

absl::StatusOr<double> JsonNumber(const Json& v, absl::string_view field,
                                  absl::string_view message) {
  if (!v.is_number()) return FieldError(field, message);
  const double d = v.get<double>();
  if (!std::isfinite(d)) return FieldError(field, message);
  return d;
}

absl::StatusOr<bool> JsonBool(const Json& obj, absl::string_view key, bool dflt,
                              absl::string_view field) {
  const Json* v = JsonField(obj, key);
  if (v == nullptr) return dflt;
  if (!v->is_boolean()) return FieldError(field, "must be true or false");
  return v->get<bool>();
}

std::string JsonText(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

absl::StatusOr<std::string> JsonTextParts(const Json& content, absl::string_view at,
                                          std::initializer_list<absl::string_view> types) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return FieldError(at, "must be a string or a list of text parts");
  std::string out;
  for (size_t j = 0; j < content.size(); ++j) {
    const std::string part = absl::StrCat(at, "[", j, "]");
    if (!content[j].is_object()) return FieldError(part, "must be an object");
    auto type = JsonStringField(content[j], "type", part);
    if (!type.ok()) return type.status();
    if (std::find(types.begin(), types.end(), *type) == types.end()) {
      return FieldError(part + ".type",
                        absl::StrCat("\"", *type, "\" is not supported here (text only: ", absl::StrJoin(types, ", "), ")"));
    }
    auto text = JsonStringField(content[j], "text", part);
    if (!text.ok()) return text.status();
    absl::StrAppend(&out, j > 0 ? "\n" : "", *text);
  }
  return out;
}

absl::StatusOr<ToolFunction> JsonFunctionTool(const Json& obj, absl::string_view at, const char* schema_key,
                                              bool schema_required) {
  ToolFunction f;
  auto name = JsonStringField(obj, "name", at);
  if (!name.ok()) return name.status();
  f.name = *std::move(name);
  if (const Json* d = JsonField(obj, "description")) {
    if (!d->is_string()) return FieldError(absl::StrCat(at, ".description"), "must be a string");
    f.description = d->get<std::string>();
  }
  const Json* schema = JsonField(obj, schema_key);
  if (schema != nullptr ? !schema->is_object() : schema_required) {
    return FieldError(absl::StrCat(at, ".", schema_key), "must be a JSON Schema (an object)");
  }
  if (schema != nullptr) f.parameters = JsonText(*schema);
  return f;
}

absl::Status CheckServedModel(const Json& body, absl::string_view served_model, bool required) {
  const Json* m = JsonField(body, "model");
  if (m == nullptr && !required) return absl::OkStatus();
  if (m == nullptr || !m->is_string()) {
    return FieldError("model", required ? "is required (a string)" : "must be a string");
  }
  if (m->get<std::string>() != served_model) {
    return FieldError("model",
                      absl::StrCat("\"", m->get<std::string>(), "\" is not served here (this server serves \"",
                                   served_model, "\")"),
                      absl::StatusCode::kNotFound);
  }
  return absl::OkStatus();
}

absl::Status CheckKnownFields(const Json& body, std::initializer_list<absl::string_view> known,
                              absl::string_view what) {
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (std::find(known.begin(), known.end(), it.key()) == known.end()) {
      return FieldError(it.key(), absl::StrCat("is not ", what, " field (", absl::StrJoin(known, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> JsonStringField(const Json& obj, absl::string_view key, absl::string_view at) {
  const Json* v = JsonField(obj, key);
  if (v == nullptr || !v->is_string()) return FieldError(absl::StrCat(at, ".", key), "must be a string");
  return v->get<std::string>();
}

}  // namespace flover::server
