// Parses untrusted JSON documents (config.json, vocab.json, safetensors
// headers) into google.protobuf.Struct, with errors that name the source, and
// typed accessors that check the value's kind and range.
#ifndef FLOVER_UTIL_JSON_H_
#define FLOVER_UTIL_JSON_H_

#include <cstdint>
#include <string>
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

// Quotes and escapes `s` as a JSON string (UTF-8 passes through).
std::string JsonQuote(absl::string_view s);

}  // namespace flover

#endif  // FLOVER_UTIL_JSON_H_
