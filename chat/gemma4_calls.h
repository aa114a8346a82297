// Gemma 4's tool calls: <|tool_call>call:NAME{ARGS}<tool_call|>, where ARGS
// is the chat template's own notation (its format_argument macro), not JSON:
//   {key:value,...}   keys bare (or <|"|>-quoted), values:
//   <|"|>text<|"|>    a string, its text raw (no escapes);
//   [v,...]  {k:v,...}  12  -1.5e3  true  false  null.
// The template writes keys in dictsort order (case-insensitive) and no
// whitespace; the reader takes whitespace between parts all the same.
#ifndef FLOVER_CHAT_GEMMA4_CALLS_H_
#define FLOVER_CHAT_GEMMA4_CALLS_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace flover {

inline constexpr absl::string_view kGemma4CallOpen = "<|tool_call>";
inline constexpr absl::string_view kGemma4CallClose = "<tool_call|>";
inline constexpr absl::string_view kGemma4Quote = "<|\"|>";

// A call's text between its markers ("call:NAME{...}") as its name and its
// arguments as JSON text; nullopt when it is no call in this notation.
struct Gemma4Call {
  std::string name, arguments;
};
std::optional<Gemma4Call> ReadGemma4Call(absl::string_view text);

// The function's name once "call:NAME{" has been read (to stream a call's
// start), else "".
std::string Gemma4CallName(absl::string_view text);

// The EBNF grammar (xgrammar's, rule `root`) of a call's arguments, "{...}"
// in the notation above, that hold `schema_json` (a JSON Schema): types,
// properties (in dictsort order, required ones present, no others), items,
// enum and const, anyOf / oneOf, type lists and local $refs. A keyword that
// constrains what this grammar cannot hold (pattern, lengths, bounds, ...)
// is InvalidArgument naming it and where it is, under `field`.
absl::StatusOr<std::string> Gemma4ArgumentsGrammar(absl::string_view schema_json, const std::string& field);

}  // namespace flover

#endif  // FLOVER_CHAT_GEMMA4_CALLS_H_
