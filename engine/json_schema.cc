#include "engine/json_schema.h"

#include "engine/json_schema_keywords.h"
#include "engine/json_schema_rewrite.h"

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

std::string RegexForXgrammar(const std::string& regex) {
  // xgrammar's converter fails ("per_rule_fsm_hashes") on a count past
  // 128: a longer one is written as counts of at most 128 in a row (the
  // same language: "x{0,100}x{0,100}" is "x{0,200}").
  constexpr int64_t kMaxCount = 128;
  constexpr int64_t kMaxPieces = 64;
  std::string out;
  out.reserve(regex.size() + 8);
  std::vector<size_t> groups;           // where each open group starts in `out`
  size_t atom = std::string::npos;      // where the last atom starts in `out`
  bool in_class = false;
  for (size_t i = 0; i < regex.size(); ++i) {
    const char c = regex[i];
    if (in_class) {
      out += c;
      if (c == '\\' && i + 1 < regex.size()) {
        out += regex[++i];
      } else if (c == ']') {
        in_class = false;
      }
      continue;
    }
    if (c == '\\') {
      atom = out.size();
      out += c;
      if (i + 1 < regex.size()) out += regex[++i];
      continue;
    }
    if (c == '[') {
      atom = out.size();
      in_class = true;
      out += c;
      if (i + 1 < regex.size() && regex[i + 1] == '^') out += regex[++i];
      if (i + 1 < regex.size() && regex[i + 1] == ']') out += regex[++i];  // "[]...]": a member
      continue;
    }
    if (c == '(') {
      groups.push_back(out.size());
      atom = std::string::npos;
      out += c;
      continue;
    }
    if (c == ')') {
      atom = groups.empty() ? std::string::npos : groups.back();
      if (!groups.empty()) groups.pop_back();
      if (i + 1 < regex.size() && regex[i + 1] == '?' && !(i + 2 < regex.size() && regex[i + 2] == '?')) {
        out += "){0,1}";  // an optional group (see the header)
        ++i;
        atom = std::string::npos;
        continue;
      }
      out += c;
      continue;
    }
    if (c == '{' && atom != std::string::npos) {
      if (const std::optional<schema::Counted> counted = schema::CountedQuantifier(regex, i)) {
        const int64_t lo = counted->min, hi = counted->max;
        const int64_t top = hi < 0 ? lo : hi;
        if (top > kMaxCount && top / kMaxCount + 2 <= kMaxPieces) {
          const std::string unit = out.substr(atom);
          out.erase(atom);
          for (int64_t left = lo; left > 0; left -= kMaxCount) {
            out += absl::StrCat(unit, "{", std::min(left, kMaxCount), "}");
          }
          if (hi < 0) {
            out += absl::StrCat(unit, "*");
          } else {
            for (int64_t left = hi - lo; left > 0; left -= kMaxCount) {
              out += absl::StrCat(unit, "{0,", std::min(left, kMaxCount), "}");
            }
          }
          i += counted->length - 1;
          atom = std::string::npos;
          continue;
        }
      }
    }
    if (c == '|' || c == '^' || c == '$' || c == '*' || c == '+' || c == '?' || c == '{' || c == '}') {
      atom = std::string::npos;
    } else {
      atom = out.size();
    }
    out += c;
  }
  return out;
}

namespace schema {
namespace {

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
  // `rewritten`: the schema is RewriteForXgrammar's, whose patternProperties
  // xgrammar enforces where additionalProperties is false (it has held
  // named members and overlapping patterns to each other's schemas).
  SchemaWalk(const Json& root, bool rewritten) : root_(root), rewritten_(rewritten), refs_alone_(RefsAlone(root)) {}

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
      if (rewritten_ && std::string(key) == "patternProperties" && arg->is_object()) {
        const Json* additional = Member(schema, "additionalProperties");
        if (additional != nullptr && additional->is_boolean() && !additional->get<bool>()) continue;
      }
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
      if (const Json* patterns = Member(schema, "patternProperties"); patterns != nullptr && patterns->is_object()) {
        for (const auto& [pattern, sub] : patterns->items()) {
          next->push_back({&sub, absl::StrCat(here("patternProperties"), "/", PointerToken(pattern))});
        }
      }
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
  bool rewritten_;
  bool refs_alone_;  // the schema's $schema is a draft before 2019-09
  int64_t budget_ = kBudget;
  std::map<std::pair<const Json*, bool>, uint8_t> types_;  // Types' answers (kInProgress while it works)
  std::vector<std::string> strict_formats_;
};

// Whether `doc` has something at the JSON pointer (a URI fragment, "#/a/b").
bool Holds(const Json& doc, const std::string& pointer) {
  if (pointer.empty() || pointer[0] != '#') return false;
  try {
    doc.at(Json::json_pointer(pointer.substr(1)));
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace
}  // namespace schema

absl::StatusOr<std::string> EnforcedJsonSchema(const std::string& schema, const std::string& field) {
  if (schema.size() > kMaxSchemaBytes) {
    return FieldError(field, absl::StrCat("at most ", kMaxSchemaBytes, " bytes, got ", schema.size()));
  }
  if (NestingDepth(schema, '{', '}', '[', ']', "\"", /*classes=*/false, kMaxConstraintDepth) < 0) {
    return FieldError(field, absl::StrCat("nested deeper than ", kMaxConstraintDepth, " levels"));
  }
  const schema::Json parsed = schema::Json::parse(schema, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return FieldError(field, "not valid JSON");
  // The schema rewritten into forms xgrammar enforces (engine/
  // json_schema_rewrite.h), if the walk finds nothing unenforced in it;
  // else the schema as sent, and the walk's refusal names the keyword
  // where the client wrote it.
  std::optional<schema::Json> rewritten;
  try {
    rewritten = schema::RewriteForXgrammar(parsed);
  } catch (const std::exception&) {
    // A shape the rewrites did not expect (they check what they read, so
    // this is a bug): the schema as sent, refused or not by the walk.
    rewritten.reset();
  }
  if (rewritten && rewritten->is_boolean() && !rewritten->get<bool>()) {
    return FieldError(field, "no value is valid under this schema (its keywords contradict each other)");
  }
  const schema::Json* chosen = nullptr;
  std::vector<std::string> strict_formats;
  std::optional<schema::Unenforced> found;
  if (rewritten) {
    schema::SchemaWalk walk(*rewritten, /*rewritten=*/true);
    found = walk.Run();
    if (!found) {
      chosen = &*rewritten;
      strict_formats = walk.strict_formats();
    }
  }
  if (chosen == nullptr) {
    // What the rewrite could not fix is what to name, where the client's
    // schema has the place it names; else the client's schema's own first
    // refusal (the rewrite moved or merged what it names).
    schema::SchemaWalk walk(parsed, /*rewritten=*/false);
    std::optional<schema::Unenforced> own = walk.Run();
    if (own) {
      if (found && !schema::Holds(parsed, found->pointer)) found = std::move(own);
      if (!found) found = std::move(own);
      // A pointer may quote long member names: keep its ends.
      std::string pointer = found->pointer;
      if (pointer.size() > 240) {
        pointer = absl::StrCat(pointer.substr(0, 80), "...", pointer.substr(pointer.size() - 150));
      }
      return FieldError(field, absl::StrCat("the keyword ", found->keyword, " is not supported at ", pointer,
                                            " (it would not be enforced", found->why.empty() ? "" : ": ",
                                            found->why, ")"));
    }
    chosen = &parsed;
    strict_formats = walk.strict_formats();
  }
  if ((chosen == &parsed || *chosen == parsed) && strict_formats.empty()) return schema;
  // The document in its own member order (the grammar writes properties in
  // the schema's order), each such format now its pattern.
  schema::Json out = *chosen;
  for (const std::string& at : strict_formats) {
    try {
      schema::Json& string = out.at(schema::Json::json_pointer(at.substr(1)));
      const std::string pattern = schema::StrictFormatPattern(string.at("format").get<std::string>());
      string.erase("format");
      string["pattern"] = pattern;
    } catch (const std::exception&) {
      // A $ref's pointer that xgrammar resolves and RFC 6901 does not (an
      // unescaped ~): that schema keeps xgrammar's own format check.
    }
  }
  return out.dump();
}

absl::Status CheckJsonSchema(const std::string& schema, const std::string& field) {
  return EnforcedJsonSchema(schema, field).status();
}


}  // namespace flover
