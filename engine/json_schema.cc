#include "engine/json_schema.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "util/field_error.h"

namespace flover {

// The deepest nesting of `open`/`close` outside strings quoted by one of
// `quotes` and (with `classes`) character classes, or -1 past `limit`.
int NestingDepth(const std::string& text, char open, char close, char also_open, char also_close,
          absl::string_view quotes, bool classes, int limit) {
  int depth = 0, deepest = 0;
  char quote = 0;
  bool in_class = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\\') {
      ++i;  // an escaped character is never structure
      continue;
    }
    if (quote != 0) {
      if (c == quote) quote = 0;
      continue;
    }
    if (in_class) {
      if (c == ']') in_class = false;
      continue;
    }
    if (quotes.find(c) != absl::string_view::npos) {
      quote = c;
    } else if (classes && c == '[') {
      in_class = true;
    } else if (c == open || (also_open != 0 && c == also_open)) {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return -1;
    } else if (c == close || (also_close != 0 && c == also_close)) {
      --depth;
    }
  }
  return deepest;
}

namespace {

using Json = nlohmann::json;

// What `schema` has at `key`, or null (never throws, whatever the JSON).
const Json* Member(const Json& schema, absl::string_view key) {
  if (!schema.is_object()) return nullptr;
  auto it = schema.find(std::string(key));
  return it == schema.end() ? nullptr : &*it;
}

// One reference token of a JSON pointer (RFC 6901: ~ and / escaped).
std::string PointerToken(absl::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

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

uint8_t TypeOf(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null: return kNull;
    case Json::value_t::boolean: return kBoolean;
    case Json::value_t::object: return kObject;
    case Json::value_t::array: return kArray;
    case Json::value_t::string: return kString;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return kInteger;
    case Json::value_t::number_float: {
      const double d = value.get<double>();
      return std::isfinite(d) && std::floor(d) == d ? kInteger : kFraction;
    }
    default: return kAnyType;
  }
}

// The types a `type` keyword names (a name or a list), or 0 where it is not
// one xgrammar reads.
uint8_t NamedTypes(const Json& type) {
  auto one = [](const Json& name) -> uint8_t {
    if (!name.is_string()) return 0;
    const std::string& n = name.get_ref<const std::string&>();
    if (n == "null") return kNull;
    if (n == "boolean") return kBoolean;
    if (n == "object") return kObject;
    if (n == "array") return kArray;
    if (n == "string") return kString;
    if (n == "integer") return kInteger;
    if (n == "number") return kNumber;
    return 0;
  };
  if (!type.is_array()) return one(type);
  uint8_t types = 0;
  for (const Json& name : type) {
    const uint8_t t = one(name);
    if (t == 0) return 0;
    types |= t;
  }
  return types;
}

// The formats JSON Schema (2020-12) defines, and those of them xgrammar
// 0.2.8 checks (JSONFormatToRegexPattern). Any other format is an
// annotation, as the standard reads one it does not define.
bool StandardFormat(const std::string& f) {
  static const char* const kFormats[] = {
      "date-time", "date", "time", "duration", "email", "idn-email", "hostname", "idn-hostname",
      "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid", "uri-template",
      "json-pointer", "relative-json-pointer", "regex"};
  return std::find(std::begin(kFormats), std::end(kFormats), f) != std::end(kFormats);
}
bool CheckedFormat(const std::string& f) {
  static const char* const kFormats[] = {
      "date-time", "date", "time", "duration", "email", "hostname", "ipv4", "ipv6", "uri",
      "uri-reference", "uuid", "uri-template", "json-pointer", "relative-json-pointer"};
  return std::find(std::begin(kFormats), std::end(kFormats), f) != std::end(kFormats);
}

// Patterns for the formats whose xgrammar regex is looser than the
// standard: its `date` (and the date in `date-time`) takes any day up to 31
// in any month ("2024-02-30"); its `time` a leap second at any minute
// ("12:30:60Z"); its `ipv4` leading zeros ("010.1.1.1", which the JSON
// Schema test suite refuses: octal to some readers). These check the day
// against the month and February 29 against the year (RFC 3339's
// full-date), take second 60 only at 23:59:60 UTC (RFC 3339 5.7; a stricter
// reading than a leap second at that minute in any offset), and octets
// without leading zeros. "" for any other format.
std::string StrictFormatPattern(const std::string& f) {
  static const std::string kDate =
      "(\\d{4}-(0[13578]|1[02])-(0[1-9]|[12]\\d|3[01])|\\d{4}-(0[469]|11)-(0[1-9]|[12]\\d|30)|"
      "\\d{4}-02-(0[1-9]|1\\d|2[0-8])|"
      "(\\d\\d(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)-02-29)";
  // The fraction is spelled out in each branch: xgrammar 0.2.8's patterns
  // take "001Z" for [0-5]\d(\.\d+)?Z (an optional group of a character and
  // a repeated class after a digit).
  static const std::string kOffset = "(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)";
  static const std::string kUtc = "(Z|[+-]00:00)";
  static const std::string kTime = "(([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(" + kOffset + "|\\.\\d+" + kOffset +
                                   ")|23:59:60(" + kUtc + "|\\.\\d+" + kUtc + "))";
  static const std::string kOctet = "(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]\\d|\\d)";
  if (f == "date") return "^" + kDate + "$";
  if (f == "time") return "^" + kTime + "$";
  if (f == "date-time") return "^" + kDate + "T" + kTime + "$";
  if (f == "ipv4") return "^(" + kOctet + "\\.){3}" + kOctet + "$";
  return "";
}

// The types of instance the validation keyword `key: arg` constrains (it
// passes any other), or 0 for annotations, unknown keywords and holders
// ($defs).
uint8_t KeywordTypes(const std::string& key, const Json& arg) {
  static const std::map<std::string, uint8_t>* const kKeywords = new std::map<std::string, uint8_t>{
      {"type", kAnyType}, {"enum", kAnyType}, {"const", kAnyType}, {"anyOf", kAnyType},
      {"oneOf", kAnyType}, {"allOf", kAnyType}, {"not", kAnyType}, {"if", kAnyType},
      {"then", kAnyType}, {"else", kAnyType}, {"$ref", kAnyType}, {"$dynamicRef", kAnyType},
      {"$recursiveRef", kAnyType},
      {"minLength", kString}, {"maxLength", kString}, {"pattern", kString}, {"format", kString},
      {"minimum", kNumber}, {"maximum", kNumber}, {"exclusiveMinimum", kNumber},
      {"exclusiveMaximum", kNumber}, {"multipleOf", kNumber},
      {"items", kArray}, {"prefixItems", kArray}, {"minItems", kArray}, {"maxItems", kArray},
      {"uniqueItems", kArray}, {"contains", kArray}, {"minContains", kArray},
      {"maxContains", kArray}, {"unevaluatedItems", kArray},
      {"properties", kObject}, {"required", kObject}, {"additionalProperties", kObject},
      {"patternProperties", kObject}, {"propertyNames", kObject}, {"minProperties", kObject},
      {"maxProperties", kObject}, {"dependentRequired", kObject}, {"dependentSchemas", kObject},
      {"dependencies", kObject}, {"unevaluatedProperties", kObject}};
  auto it = kKeywords->find(key);
  if (it == kKeywords->end()) return 0;
  if (key == "format" && !(arg.is_string() && StandardFormat(arg.get<std::string>()))) return 0;
  return it->second;
}

// Whether `key: arg` constrains nothing (minLength 0, required [], ...).
bool Vacuous(const std::string& key, const Json& arg) {
  if (key == "minLength" || key == "minItems" || key == "minProperties") {
    return arg.is_number() && arg.get<double>() == 0;
  }
  if (key == "required" || key == "prefixItems" || key == "allOf") return arg.is_array() && arg.empty();
  if (key == "uniqueItems") return arg.is_boolean() && !arg.get<bool>();
  if (key == "properties" || key == "patternProperties") return arg.is_object() && arg.empty();
  if (key == "items" || key == "additionalProperties" || key == "unevaluatedItems" ||
      key == "unevaluatedProperties" || key == "propertyNames") {
    return (arg.is_boolean() && arg.get<bool>()) || (arg.is_object() && arg.empty());
  }
  return false;
}

// -1, 0 or 1 as number a is below, equal to or above number b.
int Compare(const Json& a, const Json& b) {
  if (a.is_number_integer() && b.is_number_integer() && !a.is_number_unsigned() && !b.is_number_unsigned()) {
    const int64_t x = a.get<int64_t>(), y = b.get<int64_t>();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  const double x = a.get<double>(), y = b.get<double>();
  return x < y ? -1 : (x > y ? 1 : 0);
}

double CodePoints(const std::string& s) {
  return static_cast<double>(std::count_if(
      s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

// Whether the regex `pattern` holds a lookahead or lookbehind ((?=, (?!,
// (?<=, (?<!) outside a character class: xgrammar's regex automaton skips
// them (logging a warning), matching as if they were not there.
bool HasLookaround(const std::string& pattern) {
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\') {
      ++i;
    } else if (in_class) {
      in_class = c != ']';
    } else if (c == '[') {
      in_class = true;
    } else if (c == '(' && pattern.compare(i, 2, "(?") == 0) {
      const size_t at = pattern[i + 2] == '<' ? i + 3 : i + 2;
      if (at < pattern.size() && (pattern[at] == '=' || pattern[at] == '!')) return true;
    }
  }
  return false;
}

enum class Verdict { kYes, kNo, kUnknown };

// Whether the instance `value` satisfies `key: arg`, where that is cheap to
// know (types, bounds, lengths, sizes, required; never a pattern or format).
Verdict Satisfies(const Json& value, const std::string& key, const Json& arg) {
  const uint8_t applies = KeywordTypes(key, arg);
  if (applies == 0 || Vacuous(key, arg) || (applies & TypeOf(value)) == 0) return Verdict::kYes;
  auto yes = [](bool b) { return b ? Verdict::kYes : Verdict::kNo; };
  if (key == "type") {
    const uint8_t types = NamedTypes(arg);
    return types == 0 ? Verdict::kUnknown : yes((types & TypeOf(value)) != 0);
  }
  if (key == "const") return yes(value == arg);
  if (key == "enum") {
    if (!arg.is_array()) return Verdict::kUnknown;
    return yes(std::find(arg.begin(), arg.end(), value) != arg.end());
  }
  if (key == "minimum" || key == "maximum" || key == "exclusiveMinimum" || key == "exclusiveMaximum") {
    if (!arg.is_number()) return Verdict::kUnknown;
    const int c = Compare(value, arg);
    if (key == "minimum") return yes(c >= 0);
    if (key == "maximum") return yes(c <= 0);
    return yes(key == "exclusiveMinimum" ? c > 0 : c < 0);
  }
  if (key == "multipleOf") {
    // Whole numbers only (nlohmann reads those not negative as unsigned).
    auto whole = [](const Json& n) -> std::optional<int64_t> {
      if (n.is_number_unsigned() && n.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)) return n.get<int64_t>();
      if (n.is_number_integer() && !n.is_number_unsigned()) return n.get<int64_t>();
      return std::nullopt;
    };
    const std::optional<int64_t> v = whole(value), m = whole(arg);
    if (!v || !m || *m <= 0) return Verdict::kUnknown;
    return yes(*v % *m == 0);
  }
  if (key == "required") {
    if (!arg.is_array()) return Verdict::kUnknown;
    for (const Json& name : arg) {
      if (!name.is_string()) return Verdict::kUnknown;
      if (!value.contains(name.get<std::string>())) return Verdict::kNo;
    }
    return Verdict::kYes;
  }
  if (!arg.is_number()) return Verdict::kUnknown;
  const double bound = arg.get<double>();
  if (key == "minLength") return yes(CodePoints(value.get<std::string>()) >= bound);
  if (key == "maxLength") return yes(CodePoints(value.get<std::string>()) <= bound);
  if (key == "minItems" || key == "minProperties") return yes(static_cast<double>(value.size()) >= bound);
  if (key == "maxItems" || key == "maxProperties") return yes(static_cast<double>(value.size()) <= bound);
  return Verdict::kUnknown;
}

// Whether `schema` lists its values (const, or enum); if so, whether every
// one passes `pred`.
template <typename Pred>
std::optional<bool> AllListed(const Json& schema, Pred pred) {
  if (const Json* c = Member(schema, "const")) return pred(*c);
  const Json* e = Member(schema, "enum");
  if (e == nullptr || !e->is_array()) return std::nullopt;
  return std::all_of(e->begin(), e->end(), pred);
}

// A refusal: the keyword (and what of it), the JSON pointer (a URI
// fragment) to the keyword that would go unenforced, and why, if more is
// to be said.
struct Unenforced {
  std::string keyword, pointer, why;
};

// Walks a schema as xgrammar 0.2.8's converter reads it
// (its JSON-schema converter, SchemaParser::Parse), through the subschemas it
// reads (local $refs' targets included, each once), for what it would drop.
// In one schema object it uses only the first of $ref, const, enum, anyOf,
// oneOf, allOf and type (else an object where properties say so, an array
// where items do, and otherwise any JSON value); within a type it drops a
// few combinations. A dropped keyword is fine where what xgrammar keeps
// implies it (a type every enum value has, or every anyOf branch repeats).
class SchemaWalk {
 public:
  explicit SchemaWalk(const Json& root) : root_(root) {
    // Before 2019-09, JSON Schema ignored a $ref's siblings, as xgrammar does.
    if (const Json* dialect = Member(root, "$schema"); dialect != nullptr && dialect->is_string()) {
      const std::string& d = dialect->get_ref<const std::string&>();
      for (const char* draft : {"draft-03/", "draft-04/", "draft-06/", "draft-07/"}) {
        refs_alone_ = refs_alone_ || d.find(draft) != std::string::npos;
      }
    }
  }

  std::optional<Unenforced> Run() {
    Next stack = {{&root_, "#"}};
    std::set<const Json*> seen;
    while (!stack.empty()) {
      auto [schema, at] = std::move(stack.back());
      stack.pop_back();
      if (!seen.insert(schema).second) continue;
      Next next;
      if (auto found = Node(*schema, at, &next)) return found;
      stack.insert(stack.end(), std::make_move_iterator(next.rbegin()), std::make_move_iterator(next.rend()));
    }
    return std::nullopt;
  }
  // Where Run found a string schema with a format StrictFormatPattern
  // tightens: its JSON pointer ("#/properties/when").
  const std::vector<std::string>& strict_formats() const { return strict_formats_; }

 private:
  using Next = std::vector<std::pair<const Json*, std::string>>;
  static constexpr int kMaxProofDepth = 12;
  static constexpr int64_t kBudget = 400000;  // some 20 ms

  // The proofs below share a budget of steps so that no schema makes them
  // slow; past it they give up (and the schema is refused).
  bool Spend(size_t steps = 1) {
    budget_ -= static_cast<int64_t>(std::min<size_t>(steps, kBudget));
    return budget_ > 0;
  }
  // Whether `a` equals `b`, paid for by their size.
  bool Same(const Json& a, const Json& b) {
    return &a == &b || (Spend(a.is_structured() ? a.size() : 1) && a == b);
  }

  // The schema a local $ref names, found as xgrammar finds it ("#", or
  // "#/a/b" split at '/': object members only, nothing unescaped), or null.
  const Json* Resolve(const Json& ref) const {
    if (!ref.is_string()) return nullptr;
    const std::string& uri = ref.get_ref<const std::string&>();
    if (uri == "#") return &root_;
    if (uri.size() < 2 || uri[0] != '#' || uri[1] != '/') return nullptr;
    const Json* at = &root_;
    for (size_t start = 2; start < uri.size();) {
      size_t end = uri.find('/', start);
      if (end == std::string::npos) end = uri.size();
      if (end > start) {
        at = Member(*at, absl::string_view(uri).substr(start, end - start));
        if (at == nullptr) return nullptr;
      }
      start = end + 1;
    }
    return at;
  }

  // `schema` with its $refs followed: a schema it is at least as narrow as.
  const Json& Deref(const Json& schema) const {
    const Json* at = &schema;
    for (int i = 0; i < 32; ++i) {
      const Json* ref = Member(*at, "$ref");
      const Json* target = ref == nullptr ? nullptr : Resolve(*ref);
      if (target == nullptr) break;
      at = target;
    }
    return *at;
  }

  // The types an instance valid under `schema` may have, as JSON Schema
  // reads it (all of them where unsure); with `enforced`, those of an
  // instance xgrammar takes for it, where that is narrower (it reads a
  // schema with properties but no type as an object; the walk refuses what
  // it takes beyond the schema).
  uint8_t Types(const Json& schema, int depth, bool enforced = false) {
    if (schema.is_boolean()) return schema.get<bool>() ? kAnyType : 0;
    if (!schema.is_object() || depth > kMaxProofDepth || !Spend()) return kAnyType;
    auto [known, fresh] = types_.try_emplace({&schema, enforced}, kInProgress);
    if (!fresh) return known->second == kInProgress ? kAnyType : known->second;  // a cycle: unsure
    const uint8_t types = TypesOnce(schema, depth, enforced);
    types_[{&schema, enforced}] = types;
    return types;
  }
  uint8_t TypesOnce(const Json& schema, int depth, bool enforced) {
    if (const Json* target = RefAlone(schema)) return Types(*target, depth + 1, enforced);
    uint8_t types = kAnyType;
    if (enforced) {
      bool shaped = false;
      for (const char* key : {"$ref", "const", "enum", "anyOf", "oneOf", "allOf", "type"}) {
        shaped = shaped || Member(schema, key) != nullptr;
      }
      for (const char* key : {"properties", "additionalProperties", "unevaluatedProperties"}) {
        if (!shaped && Member(schema, key) != nullptr) types = kObject;
      }
      for (const char* key : {"items", "prefixItems", "unevaluatedItems"}) {
        if (!shaped && types == kAnyType && Member(schema, key) != nullptr) types = kArray;
      }
    }
    if (const Json* t = Member(schema, "type"); t != nullptr && NamedTypes(*t) != 0) types &= NamedTypes(*t);
    if (const Json* c = Member(schema, "const")) types &= TypeOf(*c);
    if (const Json* e = Member(schema, "enum"); e != nullptr && e->is_array()) {
      uint8_t of = 0;
      for (const Json& v : *e) of |= TypeOf(v);
      types &= of;
    }
    if (const Json* ref = Member(schema, "$ref")) {
      if (const Json* target = Resolve(*ref)) types &= Types(*target, depth + 1, enforced);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      const Json* branches = Member(schema, key);
      if (branches == nullptr || !branches->is_array() || branches->empty()) continue;
      uint8_t of = 0;
      for (const Json& b : *branches) of |= Types(b, depth + 1, enforced);
      types &= of;
    }
    if (const Json* all = Member(schema, "allOf"); all != nullptr && all->is_array()) {
      for (const Json& b : *all) types &= Types(b, depth + 1, enforced);
    }
    return types;
  }

  // Whether every instance xgrammar takes for `schema` satisfies
  // `key: arg` (false where unsure).
  bool Implies(const Json& schema, const std::string& key, const Json& arg, int depth) {
    if (Vacuous(key, arg) || (schema.is_boolean() && !schema.get<bool>())) return true;
    if (!schema.is_object() || depth > kMaxProofDepth || !Spend()) return false;
    if (const Json* target = RefAlone(schema)) return Implies(*target, key, arg, depth + 1);
    const Json* own = Member(schema, key);
    if (own != nullptr && Same(*own, arg)) return true;
    const uint8_t types = Types(schema, depth + 1, /*enforced=*/true);
    if ((types & KeywordTypes(key, arg)) == 0) return true;  // it constrains nothing valid here
    if (key == "type" && NamedTypes(arg) != 0 && (types & ~NamedTypes(arg)) == 0) return true;
    if (own != nullptr && own->is_number() && arg.is_number()) {  // a bound at least as tight
      const int c = Compare(*own, arg);
      if (c >= 0 && (key == "minimum" || key == "minLength" || key == "minItems" || key == "minProperties")) {
        return true;
      }
      if (c <= 0 && (key == "maximum" || key == "maxLength" || key == "maxItems" || key == "maxProperties")) {
        return true;
      }
    }
    if (key == "required" && own != nullptr && own->is_array() && arg.is_array() &&
        std::all_of(arg.begin(), arg.end(),
                    [&](const Json& name) { return std::find(own->begin(), own->end(), name) != own->end(); })) {
      return true;
    }
    if (AllListed(schema, [&](const Json& v) { return Satisfies(v, key, arg) == Verdict::kYes; }).value_or(false)) {
      return true;
    }
    if (const Json* ref = Member(schema, "$ref")) {
      const Json* target = Resolve(*ref);
      if (target != nullptr && Implies(*target, key, arg, depth + 1)) return true;
    }
    for (const char* union_key : {"anyOf", "oneOf"}) {
      const Json* branches = Member(schema, union_key);
      if (branches == nullptr || !branches->is_array() || branches->empty()) continue;
      if (std::all_of(branches->begin(), branches->end(),
                      [&](const Json& b) { return Implies(b, key, arg, depth + 1); })) {
        return true;
      }
    }
    if (const Json* all = Member(schema, "allOf"); all != nullptr && all->is_array()) {
      for (const Json& b : *all) {
        if (Implies(b, key, arg, depth + 1)) return true;
      }
    }
    return false;
  }

  // Whether `schema` surely refuses the instance `value`.
  bool Excludes(const Json& schema, const Json& value, int depth) {
    if (schema.is_boolean()) return !schema.get<bool>();
    if (!schema.is_object() || depth > kMaxProofDepth || !Spend()) return false;
    if (const Json* target = RefAlone(schema)) return Excludes(*target, value, depth + 1);
    if ((TypeOf(value) & Types(schema, depth + 1)) == 0) return true;
    for (const auto& [key, arg] : schema.items()) {
      if (Satisfies(value, key, arg) == Verdict::kNo) return true;
    }
    if (const Json* ref = Member(schema, "$ref")) {
      const Json* target = Resolve(*ref);
      if (target != nullptr && Excludes(*target, value, depth + 1)) return true;
    }
    for (const char* union_key : {"anyOf", "oneOf"}) {
      const Json* branches = Member(schema, union_key);
      if (branches == nullptr || !branches->is_array() || branches->empty()) continue;
      if (std::all_of(branches->begin(), branches->end(),
                      [&](const Json& b) { return Excludes(b, value, depth + 1); })) {
        return true;
      }
    }
    return false;
  }

  // Whether the object schema `object` allows no member named `name`.
  static bool Forbids(const Json& object, const std::string& name) {
    const Json* additional = Member(object, "additionalProperties");
    if (additional == nullptr || !additional->is_boolean() || additional->get<bool>()) return false;
    if (Member(object, "patternProperties") != nullptr) return false;
    const Json* properties = Member(object, "properties");
    return properties == nullptr || !properties->is_object() || !properties->contains(name);
  }

  // Whether no instance is valid under both `a` and `b` (false where
  // unsure): they differ in type, one lists values the other refuses, or
  // they are objects told apart by a member one requires and the other
  // forbids or holds to other values (a discriminator).
  bool Disjoint(const Json& a_in, const Json& b_in, int depth) {
    if (depth > kMaxProofDepth || !Spend()) return false;
    const Json& a = Deref(a_in);
    const Json& b = Deref(b_in);
    if ((a.is_boolean() && !a.get<bool>()) || (b.is_boolean() && !b.get<bool>())) return true;
    if (!a.is_object() || !b.is_object()) return false;
    // What xgrammar takes for one and JSON Schema allows for the other.
    const uint8_t common = (Types(a, depth + 1, true) & Types(b, depth + 1)) |
                           (Types(a, depth + 1) & Types(b, depth + 1, true));
    if (common == 0) return true;
    for (const auto& pair : {std::pair<const Json*, const Json*>{&a, &b}, {&b, &a}}) {
      // Named, not bound: lambdas capture these (C++17 cannot capture a
      // structured binding; clang refuses what GCC allows).
      const Json* x = pair.first;
      const Json* y = pair.second;
      if (AllListed(*x, [&](const Json& v) { return Excludes(*y, v, depth + 1); }).value_or(false)) return true;
      for (const char* union_key : {"anyOf", "oneOf"}) {
        const Json* branches = Member(*x, union_key);
        if (branches == nullptr || !branches->is_array() || branches->empty()) continue;
        if (std::all_of(branches->begin(), branches->end(),
                        [&](const Json& branch) { return Disjoint(branch, *y, depth + 1); })) {
          return true;
        }
      }
    }
    if (common != kObject) return false;
    for (const auto& pair : {std::pair<const Json*, const Json*>{&a, &b}, {&b, &a}}) {
      // Named, not bound: lambdas capture these (C++17 cannot capture a
      // structured binding; clang refuses what GCC allows).
      const Json* x = pair.first;
      const Json* y = pair.second;
      const Json* required = Member(*x, "required");
      if (required == nullptr || !required->is_array()) continue;
      const Json* x_properties = Member(*x, "properties");
      const Json* y_properties = Member(*y, "properties");
      for (const Json& name : *required) {
        if (!name.is_string()) continue;
        const std::string& n = name.get_ref<const std::string&>();
        if (Forbids(*y, n)) return true;
        const Json* xp = x_properties == nullptr ? nullptr : Member(*x_properties, n);
        const Json* yp = y_properties == nullptr ? nullptr : Member(*y_properties, n);
        if (xp != nullptr && yp != nullptr && Disjoint(*xp, *yp, depth + 1)) return true;
      }
    }
    return false;
  }

  // The refusal for one schema object (at JSON pointer `at`), if any; adds
  // the subschemas xgrammar reads of it to `next`.
  std::optional<Unenforced> Node(const Json& schema, const std::string& at, Next* next) {
    if (!schema.is_object()) return std::nullopt;  // true, false, or not a schema (xgrammar says so)
    auto here = [&](absl::string_view key) { return absl::StrCat(at, "/", PointerToken(key)); };
    static const char* const kIgnored[] = {
        "not", "if", "then", "else", "uniqueItems", "contains", "minContains", "maxContains",
        "dependentRequired", "dependentSchemas", "dependencies", "patternProperties",
        "propertyNames", "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef"};
    for (const char* key : kIgnored) {
      const Json* arg = Member(schema, key);
      if (arg == nullptr) continue;
      // uniqueItems: false asks for nothing.
      if (std::string(key) == "uniqueItems" && arg->is_boolean() && !arg->get<bool>()) continue;
      return Unenforced{key, here(key)};
    }
    if (const Json* all = Member(schema, "allOf"); all != nullptr && all->is_array() && all->size() > 1) {
      return Unenforced{"allOf (with more than one schema)", here("allOf")};
    }
    for (const char* kept : {"$ref", "const", "enum", "anyOf", "oneOf", "allOf"}) {
      if (Member(schema, kept) != nullptr) return Combinator(schema, at, kept, next);
    }
    uint8_t types = 0;
    if (const Json* type = Member(schema, "type")) {
      types = NamedTypes(*type);
      if (types == 0 && !(type->is_array() && type->empty())) return std::nullopt;  // xgrammar refuses it
    }
    if (types == 0) {  // no type (or []): an object, an array, or any JSON value
      for (const char* key : {"properties", "additionalProperties", "unevaluatedProperties"}) {
        if (Member(schema, key) != nullptr) types = kObject;
      }
      for (const char* key : {"items", "prefixItems", "unevaluatedItems"}) {
        if (types == 0 && Member(schema, key) != nullptr) types = kArray;
      }
    }
    if (types != 0) return Typed(schema, at, types, next);
    for (const auto& [key, arg] : schema.items()) {
      if (KeywordTypes(key, arg) == 0 || Vacuous(key, arg)) continue;
      return Unenforced{absl::StrCat(key, " without a type"), here(key),
                        "xgrammar reads a schema with no type, properties or items as any JSON value"};
    }
    return std::nullopt;
  }

  // A schema whose first kept keyword is `kept` ($ref, const, enum, anyOf,
  // oneOf or allOf): its other validation keywords are dropped.
  std::optional<Unenforced> Combinator(const Json& schema, const std::string& at, const std::string& kept,
                                       Next* next) {
    auto here = [&](absl::string_view key) { return absl::StrCat(at, "/", PointerToken(key)); };
    const Json& arg = *Member(schema, kept);
    std::vector<const Json*> branches;
    if (kept == "$ref") {
      if (!arg.is_string()) return std::nullopt;  // xgrammar refuses it
      const std::string& uri = arg.get_ref<const std::string&>();
      if (uri != "#" && uri.compare(0, 2, "#/") != 0) {
        return Unenforced{absl::StrCat("$ref \"", uri, "\""), here("$ref"),
                          "only \"#\" and JSON pointers from \"#/\" are resolved; it would match any JSON value"};
      }
      const Json* target = Resolve(arg);
      if (target == nullptr) return std::nullopt;  // xgrammar refuses it, saying where
      branches.push_back(target);
      next->push_back({target, uri});
    } else if (kept == "anyOf" || kept == "oneOf" || kept == "allOf") {
      if (!arg.is_array()) return std::nullopt;  // xgrammar refuses it
      for (size_t i = 0; i < arg.size(); ++i) {
        branches.push_back(&arg[i]);
        next->push_back({&arg[i], absl::StrCat(here(kept), "/", i)});
      }
    } else if (kept == "enum" && (!arg.is_array() || arg.empty())) {
      return std::nullopt;  // xgrammar refuses it
    }
    const bool listed = kept == "const" || kept == "enum";
    for (const auto& item : schema.items()) {
      const std::string& key = item.key();  // captured below: not a structured binding
      const Json& value = item.value();
      if (key == kept || KeywordTypes(key, value) == 0 || Vacuous(key, value)) continue;
      if (kept == "$ref" && refs_alone_) break;  // the standard ignores them too
      auto implied_by = [&](const Json* b) { return Implies(*b, key, value, 0); };
      bool implied;
      if (listed) {
        implied = AllListed(schema, [&](const Json& v) { return Satisfies(v, key, value) == Verdict::kYes; })
                      .value_or(false);
      } else if (kept == "allOf") {
        implied = std::any_of(branches.begin(), branches.end(), implied_by);
      } else {
        implied = !branches.empty() && std::all_of(branches.begin(), branches.end(), implied_by);
      }
      if (implied) continue;
      std::string why = absl::StrCat("xgrammar enforces only the ", kept, " there");
      if (!listed) {
        absl::StrAppend(&why, "; repeat ", key, kept == "$ref" ? " in the schema it names" : " in each branch");
      } else {
        const Json* failing = nullptr;
        AllListed(schema, [&](const Json& v) {
          if (failing == nullptr && Satisfies(v, key, value) == Verdict::kNo) failing = &v;
          return true;
        });
        std::string shown = failing == nullptr ? "" : failing->dump();
        if (shown.size() > 40) shown = shown.substr(0, 40) + "...";
        absl::StrAppend(&why, failing != nullptr ? absl::StrCat(", and its value ", shown, " fails ", key)
                                                 : absl::StrCat(", and not every value of it is known to pass ", key));
      }
      if (budget_ <= 0) absl::StrAppend(&why, " (or the schema is too large to tell)");
      return Unenforced{absl::StrCat(key, " beside ", kept), here(key), why};
    }
    if (kept == "oneOf") {
      // xgrammar enforces oneOf as anyOf, which is exact only where no
      // value can match two branches.
      for (size_t i = 0; i < branches.size(); ++i) {
        for (size_t j = i + 1; j < branches.size(); ++j) {
          if (Disjoint(*branches[i], *branches[j], 0)) continue;
          return Unenforced{"oneOf (with branches not provably exclusive)", here("oneOf"),
                            budget_ <= 0 ? absl::StrCat("xgrammar enforces it as anyOf, and its ", branches.size(),
                                                        " branches are too many to show that no value matches two")
                                         : absl::StrCat("xgrammar enforces it as anyOf, and a value might match "
                                                        "both branch ", i, " and branch ", j)};
        }
      }
    }
    return std::nullopt;
  }

  // A schema xgrammar reads as an instance of `types`: what it drops there
  // (keywords of other types constrain nothing here).
  std::optional<Unenforced> Typed(const Json& schema, const std::string& at, uint8_t types, Next* next) {
    auto here = [&](absl::string_view key) { return absl::StrCat(at, "/", PointerToken(key)); };
    if (const Json* m = Member(schema, "multipleOf"); m != nullptr && (types & kNumber) != 0) {
      bool bounded = false;
      for (const char* bound : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
        bounded = bounded || Member(schema, bound) != nullptr;
      }
      if ((types & kFraction) != 0) return Unenforced{"multipleOf (other than on an integer)", here("multipleOf")};
      if (bounded) return Unenforced{"multipleOf (with minimum or maximum)", here("multipleOf")};
      if (m->is_number() && !(TypeOf(*m) == kInteger && m->get<double>() <= 1024)) {
        return Unenforced{"multipleOf (other than a whole number up to 1024)", here("multipleOf")};
      }
    }
    if ((types & kString) != 0) {
      const Json* format = Member(schema, "format");
      const std::string f = format != nullptr && format->is_string() ? format->get<std::string>() : "";
      if (StandardFormat(f) && !CheckedFormat(f)) {
        return Unenforced{absl::StrCat("format \"", f, "\""), here("format"), "xgrammar does not check that format"};
      }
      if (!StrictFormatPattern(f).empty()) strict_formats_.push_back(at);
      const char* length = Member(schema, "minLength") != nullptr   ? "minLength"
                           : Member(schema, "maxLength") != nullptr ? "maxLength"
                                                                    : nullptr;
      const bool pattern = Member(schema, "pattern") != nullptr;
      if (length != nullptr && pattern) return Unenforced{"minLength / maxLength with pattern", here(length)};
      if (length != nullptr && CheckedFormat(f)) return Unenforced{"minLength / maxLength with format", here(length)};
      if (pattern && CheckedFormat(f)) {
        return Unenforced{"pattern with format", here("pattern"), "xgrammar enforces only the format"};
      }
      if (const Json* p = Member(schema, "pattern"); p != nullptr && p->is_string() && HasLookaround(*p)) {
        return Unenforced{"pattern (with a lookahead or lookbehind)", here("pattern"),
                          "xgrammar matches as if it were not there"};
      }
    }
    if ((types & kArray) != 0) {
      if (const Json* items = Member(schema, "items"); items != nullptr && items->is_object()) {
        next->push_back({items, here("items")});
      }
      if (const Json* prefix = Member(schema, "prefixItems"); prefix != nullptr && prefix->is_array()) {
        for (size_t i = 0; i < prefix->size(); ++i) {
          next->push_back({&(*prefix)[i], absl::StrCat(here("prefixItems"), "/", i)});
        }
      }
    }
    if ((types & kObject) != 0) {
      const Json* properties = Member(schema, "properties");
      if (const Json* required = Member(schema, "required"); required != nullptr && required->is_array()) {
        for (const Json& name : *required) {
          if (!name.is_string() || (properties != nullptr && Member(*properties, name.get<std::string>()))) continue;
          return Unenforced{absl::StrCat("required (naming \"", name.get<std::string>(), "\", not in properties)"),
                            here("required"), "xgrammar enforces only the required members properties lists"};
        }
      }
      if (properties != nullptr && properties->is_object()) {
        for (const auto& [name, sub] : properties->items()) {
          next->push_back({&sub, absl::StrCat(here("properties"), "/", PointerToken(name))});
        }
      }
      const Json* additional = Member(schema, "additionalProperties");
      if (additional != nullptr && additional->is_object()) next->push_back({additional, here("additionalProperties")});
    }
    return std::nullopt;
  }

  // A schema object with `$ref` that names a schema, when that schema is all
  // it means (its siblings ignored, as before 2019-09), or null.
  const Json* RefAlone(const Json& schema) const {
    const Json* ref = refs_alone_ ? Member(schema, "$ref") : nullptr;
    return ref == nullptr ? nullptr : Resolve(*ref);
  }

  const Json& root_;
  bool refs_alone_ = false;  // the schema's $schema is a draft before 2019-09
  int64_t budget_ = kBudget;
  std::map<std::pair<const Json*, bool>, uint8_t> types_;  // Types' answers (kInProgress while it works)
  std::vector<std::string> strict_formats_;
};

}  // namespace

absl::StatusOr<std::string> EnforcedJsonSchema(const std::string& schema, const std::string& field) {
  if (schema.size() > kMaxSchemaBytes) {
    return FieldError(field, absl::StrCat("at most ", kMaxSchemaBytes, " bytes, got ", schema.size()));
  }
  if (NestingDepth(schema, '{', '}', '[', ']', "\"", /*classes=*/false, kMaxConstraintDepth) < 0) {
    return FieldError(field, absl::StrCat("nested deeper than ", kMaxConstraintDepth, " levels"));
  }
  const nlohmann::json parsed = nlohmann::json::parse(schema, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return FieldError(field, "not valid JSON");
  SchemaWalk walk(parsed);
  if (const std::optional<Unenforced> found = walk.Run()) {
    // A pointer may quote long member names: keep its ends.
    std::string pointer = found->pointer;
    if (pointer.size() > 240) {
      pointer = absl::StrCat(pointer.substr(0, 80), "...", pointer.substr(pointer.size() - 150));
    }
    return FieldError(field, absl::StrCat("the keyword ", found->keyword, " is not supported at ", pointer,
                                          " (it would not be enforced", found->why.empty() ? "" : ": ", found->why,
                                          ")"));
  }
  if (walk.strict_formats().empty()) return schema;
  // The same document in its own member order (the grammar writes
  // properties in the schema's order), each such format now its pattern.
  nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(schema, nullptr, /*allow_exceptions=*/false);
  for (const std::string& at : walk.strict_formats()) {
    try {
      nlohmann::ordered_json& string = ordered.at(nlohmann::ordered_json::json_pointer(at.substr(1)));
      const std::string pattern = StrictFormatPattern(string.at("format").get<std::string>());
      string.erase("format");
      string["pattern"] = pattern;
    } catch (const std::exception&) {
      // A $ref's pointer that xgrammar resolves and RFC 6901 does not (an
      // unescaped ~): that schema keeps xgrammar's own format check.
    }
  }
  return ordered.dump();
}

absl::Status CheckJsonSchema(const std::string& schema, const std::string& field) {
  return EnforcedJsonSchema(schema, field).status();
}


}  // namespace flover
