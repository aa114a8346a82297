// What JSON Schema's keywords mean, as the schema analysis
// (engine/json_schema.cc) and its rewrites (engine/json_schema_rewrite.h)
// both read them: which types a keyword constrains, whether it asks for
// nothing, whether a listed value passes it, and the formats xgrammar
// checks. Schemas are nlohmann's ordered JSON, so a rewritten schema keeps
// its members' order (xgrammar writes properties in that order).
#ifndef FLOVER_ENGINE_JSON_SCHEMA_KEYWORDS_H_
#define FLOVER_ENGINE_JSON_SCHEMA_KEYWORDS_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace flover::schema {

using Json = nlohmann::ordered_json;

// What `schema` has at `key`, or null (never throws, whatever the JSON).
inline const Json* Member(const Json& schema, absl::string_view key) {
  if (!schema.is_object()) return nullptr;
  auto it = schema.find(std::string(key));
  return it == schema.end() ? nullptr : &*it;
}

// Whether the document's $schema is a draft before 2019-09, where a
// $ref's siblings are ignored (as xgrammar ignores them).
bool RefsAlone(const Json& root);

// One reference token of a JSON pointer (RFC 6901: ~ and / escaped).
std::string PointerToken(absl::string_view key);

// JSON types as bit sets. An integer is a number whose value is whole (as
// JSON Schema reads 1.0).
enum : uint8_t {
  kNull = 1,
  kBoolean = 2,
  kObject = 4,
  kArray = 8,
  kString = 16,
  kInteger = 32,
  kFraction = 64,  // a number that is not whole
  kNumber = kInteger | kFraction,
  kAnyType = 127,
  kInProgress = 128,  // SchemaWalk::Types' mark of a schema it is still working on
};

uint8_t TypeOf(const Json& value);
// The types a `type` keyword names (a name or a list), or 0 where it is not
// one xgrammar reads.
uint8_t NamedTypes(const Json& type);

// The formats JSON Schema (2020-12) defines, and those of them xgrammar
// 0.2.8 checks (JSONFormatToRegexPattern). Any other format is an
// annotation, as the standard reads one it does not define.
bool StandardFormat(const std::string& f);
bool CheckedFormat(const std::string& f);
// Patterns for the formats whose xgrammar regex is looser than the standard
// (date, time, date-time, ipv4); "" for any other format. See the .cc.
std::string StrictFormatPattern(const std::string& f);

// The types of instance the validation keyword `key: arg` constrains (it
// passes any other), or 0 for annotations, unknown keywords and holders
// ($defs).
uint8_t KeywordTypes(const std::string& key, const Json& arg);
// Whether `key: arg` constrains nothing (minLength 0, required [], ...).
bool Vacuous(const std::string& key, const Json& arg);
// -1, 0 or 1 as number a is below, equal to or above number b.
int Compare(const Json& a, const Json& b);
double CodePoints(const std::string& s);
// Calls each(i) for each character of the regex `p` that is structure:
// not escaped ("\\x" is passed over) and outside a character class ("[...]",
// with "[^" and a leading "]" inside it, is passed over whole).
template <typename Each>
void ForEachRegexStructure(const std::string& p, Each each) {
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\') {
      ++i;
    } else if (p[i] == '[') {
      if (i + 1 < p.size() && p[i + 1] == '^') ++i;
      if (i + 1 < p.size() && p[i + 1] == ']') ++i;
      while (i + 1 < p.size() && p[i + 1] != ']') i += p[i + 1] == '\\' ? 2 : 1;
      ++i;  // the closing ]
    } else {
      each(i);
    }
  }
}

// A counted quantifier, `{m}`, `{m,}` or `{m,n}`, at p[i] (m and n of at
// most 9 digits, n >= m): its bounds (max -1: none) and its length in p.
struct Counted {
  int64_t min = 0, max = 0;
  size_t length = 0;
};
std::optional<Counted> CountedQuantifier(const std::string& p, size_t i);

// Whether the regex `pattern` holds a lookahead or lookbehind ((?=, (?!,
// (?<=, (?<!) outside a character class: xgrammar's regex automaton skips
// them (logging a warning), matching as if they were not there.
bool HasLookaround(const std::string& pattern);

enum class Verdict { kYes, kNo, kUnknown };
// Whether the instance `value` satisfies `key: arg`, where that is cheap to
// know (types, bounds, lengths, sizes, required; never a pattern or format).
Verdict Satisfies(const Json& value, const std::string& key, const Json& arg);

// Whether `schema` lists its values (const, or enum); if so, whether every
// one passes `pred`.
template <typename Pred>
std::optional<bool> AllListed(const Json& schema, Pred pred) {
  if (const Json* c = Member(schema, "const")) return pred(*c);
  const Json* e = Member(schema, "enum");
  if (e == nullptr || !e->is_array()) return std::nullopt;
  return std::all_of(e->begin(), e->end(), pred);
}

}  // namespace flover::schema

#endif  // FLOVER_ENGINE_JSON_SCHEMA_KEYWORDS_H_
