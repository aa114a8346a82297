// JSON Schemas as xgrammar is to enforce them. xgrammar 0.2.8's converter
// drops some keywords and combinations silently: a schema is first
// rewritten into forms it enforces exactly (engine/json_schema_rewrite.h),
// then the analysis here walks it as that converter reads it and refuses,
// naming the keyword and its JSON pointer, whatever would still go
// unenforced, and hands xgrammar strict patterns for the formats whose own
// patterns are looser than the standard.
// engine/grammar_constraint.h compiles what EnforcedJsonSchema returns.
#ifndef FLOVER_ENGINE_JSON_SCHEMA_H_
#define FLOVER_ENGINE_JSON_SCHEMA_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace flover {

// Bounds on what a request may send.
inline constexpr size_t kMaxSchemaBytes = 64 << 10;

// The deepest nesting a schema ({ and [), a grammar or a regex (parentheses)
// may have: xgrammar recurses on it (deep inputs overflow a thread's stack)
// and converts schemas in time about cubic in it (44 ms at depth 100, 2.5 s
// at 400), with no way to cancel a compile.
inline constexpr int kMaxConstraintDepth = 64;

// What JsonSchema refuses before compiling: size, depth, not JSON, no
// value valid, and keywords that no rewrite makes xgrammar enforce (each
// named, with the JSON pointer of where it sits in the schema as sent,
// "#/properties/a/required", under `field`).
absl::Status CheckJsonSchema(const std::string& schema, const std::string& field);
// CheckJsonSchema's checks, and the schema as xgrammar is to compile it:
// rewritten (engine/json_schema_rewrite.h), its patterns written around
// xgrammar's regex bugs (RegexForXgrammar), and its `date`, `time`,
// `date-time` and `ipv4` formats as patterns that hold them to the
// standard where xgrammar's own are looser (the day against the month, a
// leap second only at 23:59:60 UTC, octets without leading zeros). The
// schema's text unchanged where none of that changes it.
absl::StatusOr<std::string> EnforcedJsonSchema(const std::string& schema, const std::string& field);

// `regex` as xgrammar 0.2.8 is to be given it, the same language written
// around two of its bugs: an optional group, "(...)?", is written
// "(...){0,1}" (its converter drops the start of an optional group that
// ends in a repetition: it took "abc" for "^ab(-c+)?$" and "001Z" for
// "[0-5]\d(\.\d+)?Z"); a count past 128 ("[a-z]{1,255}", which it fails to
// compile) as counts of at most 128 in a row ("x{1}x{0,128}x{0,126}"). Escapes
// and character classes are left as they are.
std::string RegexForXgrammar(const std::string& regex);

// The deepest nesting of `open`/`close` outside strings quoted by one of
// `quotes` and (with `classes`) character classes, or -1 past `limit`.
int NestingDepth(const std::string& text, char open, char close, char also_open, char also_close,
                 absl::string_view quotes, bool classes, int limit);

}  // namespace flover

#endif  // FLOVER_ENGINE_JSON_SCHEMA_H_
