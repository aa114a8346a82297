#include "engine/json_schema_keywords.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <string>

namespace flover::schema {

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
bool RefsAlone(const Json& root) {
  const Json* dialect = Member(root, "$schema");
  if (dialect == nullptr || !dialect->is_string()) return false;
  const std::string& d = dialect->get_ref<const std::string&>();
  for (const char* draft : {"draft-03/", "draft-04/", "draft-06/", "draft-07/"}) {
    if (d.find(draft) != std::string::npos) return true;
  }
  return false;
}

std::optional<Counted> CountedQuantifier(const std::string& p, size_t i) {
  if (i >= p.size() || p[i] != '{') return std::nullopt;
  const size_t close = p.find('}', i);
  if (close == std::string::npos) return std::nullopt;
  const std::string inner = p.substr(i + 1, close - i - 1);
  const size_t comma = inner.find(',');
  auto number = [](const std::string& t, int64_t* out) {
    if (t.empty() || t.size() > 9 || !std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return false;
    }
    *out = std::stoll(t);
    return true;
  };
  Counted counted;
  counted.length = close - i + 1;
  if (comma == std::string::npos) {
    if (!number(inner, &counted.min)) return std::nullopt;
    counted.max = counted.min;
    return counted;
  }
  if (!number(inner.substr(0, comma), &counted.min)) return std::nullopt;
  if (comma + 1 == inner.size()) {
    counted.max = -1;
  } else if (!number(inner.substr(comma + 1), &counted.max) || counted.max < counted.min) {
    return std::nullopt;
  }
  return counted;
}

bool HasLookaround(const std::string& pattern) {
  bool found = false;
  ForEachRegexStructure(pattern, [&](size_t i) {
    if (pattern.compare(i, 2, "(?") != 0) return;
    const size_t at = i + 2 < pattern.size() && pattern[i + 2] == '<' ? i + 3 : i + 2;
    found = found || (at < pattern.size() && (pattern[at] == '=' || pattern[at] == '!'));
  });
  return found;
}

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

}  // namespace flover::schema
