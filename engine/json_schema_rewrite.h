// Rewrites a JSON Schema into one xgrammar 0.2.8 enforces exactly, where
// its converter would drop what the schema says (engine/json_schema.h walks
// the result and refuses whatever still would be). Each rewrite keeps the
// schema's valid instances; a few, named below, take fewer (never more), so
// an output is still valid:
// - allOf, and keywords beside $ref, anyOf or oneOf: merged into one schema
//   (the $ref's target inlined, the siblings distributed into each branch);
// - enum / const beside other keywords: the values those keywords refuse
//   dropped, and the keywords with them;
// - validation keywords with no type: split by the type each constrains
//   (an anyOf of one branch per type);
// - required members properties does not list: listed, with the schema
//   additionalProperties gives them;
// - dependentRequired / dependentSchemas / dependencies: of a required
//   member, its list required (its schema merged); of another, an anyOf of
//   the object without the member (closed to members not named: fewer)
//   and with it and its dependencies;
// - oneOf of objects with a discriminator no branch requires: required in
//   each branch (fewer: an object without it matched two, or one);
// - pattern: JSON Schema searches, xgrammar matches the whole string, so a
//   pattern not anchored at an end gets ".*" there;
// - pattern beside minLength / maxLength: characters in a row with at most
//   one count not fixed ("^[a-z][a-z0-9-]*$"): that count takes what the
//   lengths leave;
// - patternProperties: each key's pattern searched as above, a named member
//   matching a pattern held to both schemas, patterns that may match the
//   same key held to each other's schemas, and additionalProperties
//   false (fewer: a member matching no pattern and not named is not
//   generated);
// - uniqueItems where at most one item may be.
#ifndef FLOVER_ENGINE_JSON_SCHEMA_REWRITE_H_
#define FLOVER_ENGINE_JSON_SCHEMA_REWRITE_H_

#include <optional>
#include <string>

#include "engine/json_schema_keywords.h"

namespace flover::schema {

// `root` rewritten, or nullopt where a rewrite it needs goes past what
// these can do (the schema is then refused as it is, by its own keyword).
std::optional<Json> RewriteForXgrammar(const Json& root);

// The regex that matches a whole string exactly when `pattern` (JSON
// Schema's, ECMA-262) finds a match in it, as far as that can be written:
// ".*" added at an end that is not anchored, and both ends anchored ("ab"
// becomes "^.*ab.*$", "^ab" "^ab.*$"; a top-level alternation without
// anchors "^.*(a|b).*$"), so that it is its own rewrite; anything else (an
// anchor inside) unchanged, which xgrammar reads as anchored at both ends.
std::string FullMatchPattern(const std::string& pattern);

}  // namespace flover::schema

#endif  // FLOVER_ENGINE_JSON_SCHEMA_REWRITE_H_
