// Request bodies of the HTTP API as nlohmann::json values: parsing untrusted
// text into an object (a Status, never an exception, with the byte where it
// broke and a nesting limit), and typed reads of its fields that refuse a
// wrong kind or range naming the field (util/field_error.h).
#ifndef FLOVER_SERVER_JSON_BODY_H_
#define FLOVER_SERVER_JSON_BODY_H_

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "chat/chat_message.h"
#include "nlohmann/json.hpp"

namespace flover::server {

// Objects keep their keys in the order they came or were set: a JSON
// Schema's properties are generated in its order, and answers read as
// OpenAI writes them.
using Json = nlohmann::ordered_json;

// The deepest nesting a body may have.
inline constexpr int kMaxJsonDepth = 64;

// `what` names the document in errors ("request body").
absl::StatusOr<Json> ParseJsonObjectBody(absl::string_view text, absl::string_view what);

// obj[key] when present and not null, else null.
const Json* JsonField(const Json& obj, absl::string_view key);

// An integer in [min, max]: a JSON integer, or a number with no fraction
// (2.0). InvalidArgument "<field>: <message>" otherwise.
absl::StatusOr<int64_t> JsonInteger(const Json& v, absl::string_view field, int64_t min,
                                    int64_t max, absl::string_view message);
// A finite number.
absl::StatusOr<double> JsonNumber(const Json& v, absl::string_view field,
                                  absl::string_view message);
// obj[key], which must be a string: InvalidArgument "<at>.<key>: must be
// a string" otherwise.
absl::StatusOr<std::string> JsonStringField(const Json& obj, absl::string_view key, absl::string_view at);
// Content that is text alone: a string, or a list of parts, each an
// object whose "type" is one of `types` and whose "text" is a string,
// joined by newlines. Refusals name the part ("<at>[1].type").
absl::StatusOr<std::string> JsonTextParts(const Json& content, absl::string_view at,
                                          std::initializer_list<absl::string_view> types);
// A function tool described in `obj` (at `at`): its "name" (required), its
// "description", and its arguments' JSON Schema under `schema_key` (an
// object; required where `schema_required`).
absl::StatusOr<ToolFunction> JsonFunctionTool(const Json& obj, absl::string_view at, const char* schema_key,
                                              bool schema_required);
// obj[key] as a boolean; `dflt` when absent or null.
absl::StatusOr<bool> JsonBool(const Json& obj, absl::string_view key, bool dflt,
                              absl::string_view field);

// The body's "model" (a string) is `served_model`, or NotFound naming what
// is served; absent, it is InvalidArgument where `required`.
absl::Status CheckServedModel(const Json& body, absl::string_view served_model, bool required);
// Every key of `body` is one of `known`; else InvalidArgument naming the
// first other ("is not a WHAT field (known...)").
absl::Status CheckKnownFields(const Json& body, std::initializer_list<absl::string_view> known,
                              absl::string_view what);

// A value as compact JSON text; bytes that are not UTF-8 (a token's partial
// character, a client's malformed string echoed in an error) become U+FFFD,
// so the text is always valid JSON.
std::string JsonText(const Json& value);

}  // namespace flover::server

#endif  // FLOVER_SERVER_JSON_BODY_H_
