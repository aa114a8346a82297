// Parses untrusted JSON documents (config.json, vocab.json, safetensors
// headers) into google.protobuf.Struct, with errors that name the source, and
// typed accessors that check the value's kind and range.
#ifndef FLOVER_UTIL_JSON_H_
#define FLOVER_UTIL_JSON_H_

#include <cstdint>
#include <string>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "google/protobuf/struct.pb.h"

namespace flover {

// `what` names the document in errors (usually its path).
absl::StatusOr<google::protobuf::Struct> ParseJsonObject(absl::string_view text,
                                                         absl::string_view what);

// A JSON number that must be an integer in [min, max].
absl::StatusOr<int64_t> JsonToInt(const google::protobuf::Value& v,
                                  absl::string_view field, int64_t min,
                                  int64_t max);

// Typed fields of a config object. `what` names the document in errors.
// True when `key` is present and not null.
bool JsonHas(const google::protobuf::Struct& s, absl::string_view key);
// A required integer field in [min, max].
absl::StatusOr<int> JsonIntField(const google::protobuf::Struct& s,
                                 absl::string_view key, int64_t min,
                                 int64_t max, absl::string_view what);
// An optional integer field in [min, max]; `dflt` when absent or null.
absl::StatusOr<int> JsonIntFieldOr(const google::protobuf::Struct& s,
                                   absl::string_view key, int dflt, int64_t min,
                                   int64_t max, absl::string_view what);
// An optional finite number; `dflt` when absent or null.
absl::StatusOr<double> JsonNumberField(const google::protobuf::Struct& s,
                                       absl::string_view key, double dflt,
                                       absl::string_view what);
// An optional object: null when absent or not an object.
const google::protobuf::Struct* JsonObjectField(const google::protobuf::Struct& s, absl::string_view key);

// An optional boolean; `dflt` when absent or not a boolean.
bool JsonBoolField(const google::protobuf::Struct& s, absl::string_view key,
                   bool dflt);

// An optional field holding an integer or a list of integers, each in
// [min, max], appended to *out; nothing when absent or null.
absl::Status JsonIntListField(const google::protobuf::Struct& s, absl::string_view key,
                              int64_t min, int64_t max, absl::string_view what,
                              std::vector<int32_t>* out);

// Quotes and escapes `s` as a JSON string (UTF-8 passes through).
std::string JsonQuote(absl::string_view s);

}  // namespace flover

#endif  // FLOVER_UTIL_JSON_H_
