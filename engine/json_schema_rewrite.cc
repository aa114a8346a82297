#include "engine/json_schema_rewrite.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <limits>
#include <map>
#include <optional>
#include <numeric>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/json_schema.h"

namespace flover::schema {
namespace {

bool IsSpecial(char c) { return std::string("\\^$.|?*+()[]{}").find(c) != std::string::npos; }

// Where the pattern's top-level alternation bars and its anchors are: false
// where an anchor sits anywhere but at the very start or end.
struct PatternShape {
  bool starts = false, ends = false, alternation = false, inner_anchor = false;
};
PatternShape ShapeOf(const std::string& p) {
  PatternShape shape;
  int depth = 0;
  ForEachRegexStructure(p, [&](size_t i) {
    const char c = p[i];
    if (c == '(') {
      ++depth;
    } else if (c == ')') {
      --depth;
    } else if (c == '|' && depth == 0) {
      shape.alternation = true;
    } else if (c == '^') {
      (i == 0 ? shape.starts : shape.inner_anchor) = true;
    } else if (c == '$') {
      (i + 1 == p.size() ? shape.ends : shape.inner_anchor) = true;
    }
  });
  return shape;
}

// Where the one character of `p` at i ends (a class, an escape such as
// \d, ".", or a literal, a UTF-8 one whole), or npos where there is none.
size_t AtomEnd(const std::string& p, size_t i) {
  if (i >= p.size()) return std::string::npos;
  if (p[i] == '[') {
    size_t end = i + 1;
    if (end < p.size() && p[end] == '^') ++end;
    if (end < p.size() && p[end] == ']') ++end;
    while (end < p.size() && p[end] != ']') end += p[end] == '\\' ? 2 : 1;
    return end >= p.size() ? std::string::npos : end + 1;
  }
  if (p[i] == '\\') {
    if (i + 1 >= p.size()) return std::string::npos;
    const char e = p[i + 1];
    if (std::isalnum(static_cast<unsigned char>(e)) && std::string("dDwWsS").find(e) == std::string::npos) {
      return std::string::npos;
    }
    return i + 2;
  }
  if (p[i] != '.' && IsSpecial(p[i])) return std::string::npos;
  size_t end = i + 1;
  while (end < p.size() && (static_cast<unsigned char>(p[end]) & 0xC0) == 0x80) ++end;
  return end;
}

// A character and its quantifier: the character and the bounds.
struct Repeated {
  std::string atom;
  int64_t min = 1, max = 1;  // max -1: unbounded
};

// A pattern that is characters in a row, each with its quantifier
// ("[a-z][a-z0-9-]*", "\\d{3}-\\d+"): each with its bounds, or nullopt.
std::optional<std::vector<Repeated>> AtomSequence(const std::string& p) {
  std::vector<Repeated> out;
  size_t i = 0;
  while (i < p.size()) {
    const size_t end = AtomEnd(p, i);
    if (end == std::string::npos || out.size() >= 64) return std::nullopt;
    Repeated r{p.substr(i, end - i)};
    i = end;
    if (i < p.size() && (p[i] == '*' || p[i] == '+' || p[i] == '?')) {
      r.min = p[i] == '+' ? 1 : 0;
      r.max = p[i] == '?' ? 1 : -1;
      ++i;
    } else if (i < p.size() && p[i] == '{') {
      const std::optional<Counted> counted = CountedQuantifier(p, i);
      if (!counted) return std::nullopt;
      r.min = counted->min;
      r.max = counted->max;
      i += counted->length;
    }
    out.push_back(std::move(r));
  }
  return out;
}

// The literal text every match of an anchored pattern starts with (up to
// the first special character; a character a quantifier follows is not
// sure), or nullopt where the pattern is not anchored at its start.
std::optional<std::string> AnchoredPrefix(const std::string& p) {
  if (p.empty() || p[0] != '^' || ShapeOf(p).alternation) return std::nullopt;
  std::string prefix;
  size_t i = 1;
  while (i < p.size() && !IsSpecial(p[i])) prefix += p[i++];
  if (i < p.size() && (p[i] == '?' || p[i] == '*' || p[i] == '{') && !prefix.empty()) prefix.pop_back();
  return prefix;
}

// Whether no string can match both patterns (searched): both anchored at
// the start with literal prefixes that part before either ends.
bool ProvablyDisjoint(const std::string& a, const std::string& b) {
  const std::optional<std::string> pa = AnchoredPrefix(a), pb = AnchoredPrefix(b);
  if (!pa || !pb) return false;
  const size_t n = std::min(pa->size(), pb->size());
  return pa->compare(0, n, *pb, 0, n) != 0;
}

// Whether a group that repeats (*, + or {}) holds a repetition or an
// alternation: a backtracking matcher such as std::regex can take time
// exponential in the text on those ("(a+)+b").
bool NestedRepetition(const std::string& p) {
  std::vector<bool> inner;  // per open group: holds a repetition or |
  bool risky = false;
  ForEachRegexStructure(p, [&](size_t i) {
    const char c = p[i];
    if (c == '(') {
      inner.push_back(false);
    } else if (c == ')') {
      if (inner.empty()) {
        risky = true;
        return;
      }
      const bool holds = inner.back();
      inner.pop_back();
      const char next = i + 1 < p.size() ? p[i + 1] : 0;
      const bool repeats = next == '*' || next == '+' || next == '{';
      risky = risky || (holds && repeats);
      if (!inner.empty() && (holds || repeats)) inner.back() = true;
    } else if ((c == '*' || c == '+' || c == '{' || c == '|') && !inner.empty()) {
      inner.back() = true;
    }
  });
  return risky;
}

// Whether `pattern` finds a match in `text` (ECMA-262, as JSON Schema
// reads it), or nullopt where std::regex cannot tell (a syntax it lacks,
// or input too long to try safely).
std::optional<bool> Searches(const std::string& pattern, const std::string& text) {
  if (pattern.size() > 1024 || text.size() > 256 || NestedRepetition(pattern)) return std::nullopt;
  try {
    return std::regex_search(text, std::regex(pattern, std::regex::ECMAScript));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

const char* const kTypeNames[] = {"null", "boolean", "object", "array", "string"};
const uint8_t kTypeBits[] = {kNull, kBoolean, kObject, kArray, kString};

// The `type` keyword naming exactly `types` (a name, or a list).
Json TypeKeyword(uint8_t types) {
  Json names = Json::array();
  for (size_t i = 0; i < 5; ++i) {
    if (types & kTypeBits[i]) names.push_back(kTypeNames[i]);
  }
  if ((types & kNumber) == kNumber) {
    names.push_back("number");
  } else if (types & kInteger) {
    names.push_back("integer");
  }
  return names.size() == 1 ? names[0] : names;
}

// Keywords that hold subschemas or say where a schema sits, never
// constraints of their own.
bool Holder(const std::string& key) {
  return key == "$defs" || key == "definitions" || key == "$schema" || key == "$id" || key == "$anchor";
}

// A keyword whose meaning does not depend on its siblings, so that two
// schemas' conjunction may hold it from either.
bool SelfContained(const std::string& key) {
  static const std::set<std::string>* const kDependent = new std::set<std::string>{
      "properties", "patternProperties", "additionalProperties", "unevaluatedProperties", "items",
      "prefixItems", "additionalItems", "unevaluatedItems", "$ref", "anyOf", "oneOf", "allOf",
      "if", "then", "else", "minContains", "maxContains", "contains"};
  return kDependent->count(key) == 0;
}

class Rewriter {
 public:
  explicit Rewriter(const Json& root) : root_(root), refs_alone_(RefsAlone(root)) {}

  std::optional<Json> Run() {
    std::optional<Json> out = Flatten(root_, 0);
    if (!out || budget_ <= 0) return std::nullopt;
    ExpandListed(&*out, 0);
    if (!Discriminate(&*out, 0) || budget_ <= 0) return std::nullopt;
    return out;
  }

 private:
  static constexpr int kMaxDepth = 64;
  static constexpr size_t kMaxBranches = 64;
  static constexpr int64_t kBudget = 20000;  // merges, inlined $refs and branches together

  bool Spend(int64_t steps = 1) { return (budget_ -= steps) > 0; }

  // The schema a local $ref names in the original document ("#", or a JSON
  // pointer from "#/" with ~0 and ~1 escapes), or null.
  const Json* Resolve(const Json& ref) const {
    if (!ref.is_string()) return nullptr;
    const std::string& uri = ref.get_ref<const std::string&>();
    if (uri == "#") return &root_;
    if (uri.size() < 2 || uri[0] != '#' || uri[1] != '/') return nullptr;
    try {
      return &root_.at(Json::json_pointer(uri.substr(1)));
    } catch (const std::exception&) {
      return nullptr;
    }
  }

  // The target of `ref`, flattened, to stand in its place beside other
  // keywords; nullopt for a reference it is already inside (a recursive
  // schema cannot be inlined) or one it cannot resolve.
  std::optional<Json> Inline(const Json& ref, int depth) {
    const Json* target = Resolve(ref);
    if (target == nullptr || !Spend()) return std::nullopt;
    const std::string uri = ref.get<std::string>();
    if (!inlining_.insert(uri).second) return std::nullopt;
    std::optional<Json> out = Flatten(*target, depth + 1);
    inlining_.erase(uri);
    if (out && out->is_object()) {
      for (const char* holder : {"$defs", "definitions", "$schema", "$id"}) out->erase(holder);
    }
    return out;
  }

  // `schema` with its subschemas flattened and its own keywords rewritten.
  std::optional<Json> Flatten(const Json& schema, int depth) {
    if (!schema.is_object()) return schema;
    if (depth > kMaxDepth || !Spend()) return std::nullopt;
    static const std::set<std::string>* const kMaps = new std::set<std::string>{
        "properties", "patternProperties", "$defs", "definitions", "dependentSchemas"};
    static const std::set<std::string>* const kOne = new std::set<std::string>{
        "items", "additionalProperties", "additionalItems", "contains", "propertyNames", "not", "if", "then",
        "else", "unevaluatedItems", "unevaluatedProperties"};
    static const std::set<std::string>* const kLists =
        new std::set<std::string>{"prefixItems", "anyOf", "oneOf", "allOf", "items"};
    Json node = Json::object();
    for (const auto& item : schema.items()) {
      const std::string& key = item.key();
      const Json& value = item.value();
      if (kMaps->count(key) && value.is_object()) {
        Json out = Json::object();
        for (const auto& member : value.items()) {
          std::optional<Json> sub = Flatten(member.value(), depth + 1);
          if (!sub) return std::nullopt;
          out[member.key()] = std::move(*sub);
        }
        node[key] = std::move(out);
      } else if (kOne->count(key) && value.is_object()) {
        std::optional<Json> sub = Flatten(value, depth + 1);
        if (!sub) return std::nullopt;
        node[key] = std::move(*sub);
      } else if (kLists->count(key) && value.is_array()) {
        Json out = Json::array();
        for (const Json& element : value) {
          std::optional<Json> sub = Flatten(element, depth + 1);
          if (!sub) return std::nullopt;
          out.push_back(std::move(*sub));
        }
        // A branch no value matches (false, or a rewrite found it so)
        // changes neither an anyOf nor a oneOf; xgrammar refuses one.
        if (key == "anyOf" || key == "oneOf") {
          Json live = Json::array();
          for (Json& b : out) {
            if (!(b.is_boolean() && !b.get<bool>())) live.push_back(std::move(b));
          }
          if (live.empty()) return Json(false);
          out = std::move(live);
        }
        node[key] = std::move(out);
      } else {
        node[key] = value;
      }
    }
    if (!Presence(schema, &node)) return Json(false);
    return Combine(std::move(node), depth);
  }

  // Which members an object holds, as a disjunction of terms; a term maps
  // a member to present (true) or absent (false). No terms: no object.
  using Term = std::map<std::string, bool>;
  using Terms = std::vector<Term>;

  // a and b: each pair of terms joined, those that contradict dropped, and
  // any term holding another's literals dropped (it adds nothing); nullopt
  // past kMaxBranches terms.
  std::optional<Terms> And(const Terms& a, const Terms& b) {
    Terms joined;
    for (const Term& x : a) {
      for (const Term& y : b) {
        if (!Spend()) return std::nullopt;
        Term t = x;
        bool contradicts = false;
        for (const auto& [name, present] : y) {
          auto [it, added] = t.emplace(name, present);
          contradicts = contradicts || (!added && it->second != present);
        }
        if (!contradicts) joined.push_back(std::move(t));
      }
    }
    auto holds = [](const Term& big, const Term& small) {
      return std::all_of(small.begin(), small.end(), [&](const auto& literal) {
        auto it = big.find(literal.first);
        return it != big.end() && it->second == literal.second;
      });
    };
    Terms out;
    for (size_t i = 0; i < joined.size(); ++i) {
      bool redundant = false;
      for (size_t j = 0; j < joined.size() && !redundant; ++j) {
        // j's literals within i's: i adds nothing (of equal terms, the later goes)
        redundant = j != i && holds(joined[i], joined[j]) && (joined[i] != joined[j] || j < i);
      }
      if (!redundant) out.push_back(joined[i]);
    }
    if (out.size() > kMaxBranches) return std::nullopt;
    return out;
  }

  // Not a: each term's literals negated, one of them, for every term.
  std::optional<Terms> Negate(const Terms& a) {
    Terms out = {Term{}};
    for (const Term& t : a) {
      Terms clause;
      for (const auto& [name, present] : t) clause.push_back(Term{{name, !present}});
      std::optional<Terms> next = And(out, clause);
      if (!next) return std::nullopt;
      out = std::move(*next);
    }
    return out;
  }

  // A subschema of an object schema that says only which members the
  // object holds (required, not, annotations, type object), as terms;
  // nullopt for any other.
  std::optional<Terms> PresenceTerms(const Json& s, int depth) {
    static const std::set<std::string>* const kNotes = new std::set<std::string>{
        "description", "title", "$comment", "examples", "default", "deprecated", "readOnly", "writeOnly"};
    if (s.is_boolean()) return s.get<bool>() ? Terms{Term{}} : Terms{};
    if (!s.is_object() || depth > kMaxDepth) return std::nullopt;
    Terms out = {Term{}};
    for (const auto& item : s.items()) {
      const std::string& key = item.key();
      const Json& v = item.value();
      std::optional<Terms> part;
      if (key == "required" && v.is_array()) {
        Term t;
        for (const Json& n : v) {
          if (!n.is_string()) return std::nullopt;
          t[n.get<std::string>()] = true;
        }
        part = Terms{t};
      } else if (key == "not") {
        std::optional<Terms> inner = PresenceTerms(v, depth + 1);
        if (!inner) return std::nullopt;
        part = Negate(*inner);
      } else if (key == "type" && NamedTypes(v) == kObject) {
        continue;  // the object schema it sits in says so too
      } else if (kNotes->count(key)) {
        continue;
      } else if (key == "properties" && v.is_object() &&
                 std::all_of(v.begin(), v.end(), [](const Json& m) { return m == Json(true) || m == Json::object(); })) {
        continue;  // members listed with any value (a required member not in properties is so listed)
      } else {
        return std::nullopt;
      }
      if (!part) return std::nullopt;
      std::optional<Terms> next = And(out, *part);
      if (!next) return std::nullopt;
      out = std::move(*next);
    }
    return out;
  }

  // The terms of an object schema's presence-only oneOf and not (their
  // keywords added to *done); nullopt where there are none, or past the
  // budget.
  std::optional<Terms> PresenceFormula(const Json& schema, std::vector<std::string>* done) {
    const Json* one_of = Member(schema, "oneOf");
    const Json* not_schema = Member(schema, "not");
    Terms formula = {Term{}};
    bool any = false;
    if (one_of != nullptr && one_of->is_array() && one_of->size() >= 2) {
      std::vector<Terms> branches;
      for (const Json& b : *one_of) {
        std::optional<Terms> t = PresenceTerms(b, 0);
        if (!t) break;
        branches.push_back(std::move(*t));
      }
      if (branches.size() == one_of->size()) {
        Terms one;
        for (size_t i = 0; i < branches.size() && one.size() <= kMaxBranches; ++i) {
          std::optional<Terms> only = branches[i];
          for (size_t j = 0; j < branches.size() && only; ++j) {
            if (j == i) continue;
            std::optional<Terms> other = Negate(branches[j]);
            only = other ? And(*only, *other) : std::nullopt;
          }
          if (!only) return std::nullopt;
          one.insert(one.end(), only->begin(), only->end());
        }
        std::optional<Terms> next = And(formula, one);
        if (!next) return std::nullopt;
        formula = std::move(*next);
        any = true;
        done->push_back("oneOf");
      }
    }
    if (not_schema != nullptr) {
      std::optional<Terms> inner = PresenceTerms(*not_schema, 0);
      std::optional<Terms> negated = inner ? Negate(*inner) : std::nullopt;
      std::optional<Terms> next = negated ? And(formula, *negated) : std::nullopt;
      if (next) {
        formula = std::move(*next);
        any = true;
        done->push_back("not");
      }
    }
    if (!any) return std::nullopt;
    return formula;
  }

  // An object schema's oneOf and not that say only which members it holds
  // (oneOf: [{required: [a]}, {required: [b]}]) become an anyOf with one
  // branch per term: its present members required, its absent ones false
  // (which closes the object, as ObjectRewrites says: fewer instances).
  // "Exactly one" is then exact: each term holds one branch's members and,
  // for every other branch, lacks one it requires. They are read as
  // `schema` wrote them (flattened, a branch's lone required is split by
  // type). False where no object is valid.
  bool Presence(const Json& schema, Json* node) {
    if (!node->contains("type") || NamedTypes((*node)["type"]) != kObject) return true;
    // Its own share of the budget, all of it back where nothing changes.
    const int64_t saved = budget_, share = std::min<int64_t>(budget_, 4096);
    budget_ = share;
    std::vector<std::string> done;
    std::optional<Terms> formula = PresenceFormula(schema, &done);
    budget_ = formula ? saved - (share - budget_) : saved;
    if (!formula) return true;
    if (formula->empty()) return false;
    for (const std::string& key : done) node->erase(key);
    if (formula->size() == 1 && (*formula)[0].empty()) return true;
    Json branches = Json::array();
    for (const Term& t : *formula) {
      Json b = Json::object(), required = Json::array(), absent = Json::object();
      for (const auto& [name, present] : t) {
        if (present) {
          required.push_back(name);
        } else {
          absent[name] = false;
        }
      }
      if (!required.empty()) b["required"] = std::move(required);
      if (!absent.empty()) b["properties"] = std::move(absent);
      branches.push_back(std::move(b));
    }
    Json part = branches.size() == 1 ? branches[0] : Json{{"anyOf", std::move(branches)}};
    if (!node->contains("anyOf") && part.contains("anyOf")) {
      (*node)["anyOf"] = std::move(part["anyOf"]);
    } else {
      if (!node->contains("allOf") || !(*node)["allOf"].is_array()) (*node)["allOf"] = Json::array();
      (*node)["allOf"].push_back(std::move(part));
    }
    return true;
  }

  // A node whose subschemas are flattened: its $ref, allOf, anyOf and oneOf
  // merged with the keywords beside them, where there are any.
  std::optional<Json> Combine(Json node, int depth) {
    if (Member(node, "const") != nullptr || Member(node, "enum") != nullptr) {
      if (std::optional<Json> listed = ListedOnly(node)) return listed;
    }
    const Json* ref = Member(node, "$ref");
    const Json* all = Member(node, "allOf");
    const Json* any = Member(node, "anyOf");
    const Json* one = Member(node, "oneOf");
    bool siblings = false;
    for (const auto& item : node.items()) {
      const std::string& key = item.key();
      if (key == "$ref" || key == "allOf" || key == "anyOf" || key == "oneOf") continue;
      siblings = siblings || (KeywordTypes(key, item.value()) != 0 && !Vacuous(key, item.value()));
    }
    const int combinators = (ref != nullptr) + (all != nullptr) + (any != nullptr) + (one != nullptr);
    const bool lone_all = all == nullptr || (all->is_array() && all->size() <= 1);
    if (combinators == 0 || (!siblings && combinators == 1 && lone_all)) return Local(std::move(node));
    if (ref != nullptr && refs_alone_) return node;  // before 2019-09 its siblings mean nothing
    // Malformed combinators are xgrammar's to refuse, with its message.
    for (const Json* list : {all, any, one}) {
      if (list != nullptr && (!list->is_array() || list->empty())) return node;
    }
    Json base = Json::object(), holders = Json::object();
    for (const auto& item : node.items()) {
      const std::string& key = item.key();
      if (key == "$ref" || key == "allOf" || key == "anyOf" || key == "oneOf") continue;
      (Holder(key) ? holders : base)[key] = item.value();
    }
    std::optional<Json> conj = Local(std::move(base));
    if (!conj) return std::nullopt;
    std::vector<Json> parts;
    if (ref != nullptr) {
      std::optional<Json> target = Inline(*ref, depth);
      if (!target) return std::nullopt;
      parts.push_back(std::move(*target));
    }
    if (all != nullptr) parts.insert(parts.end(), all->begin(), all->end());
    if (any != nullptr) parts.push_back(Json{{"anyOf", *any}});
    if (one != nullptr) parts.push_back(Json{{"oneOf", *one}});
    for (const Json& part : parts) {
      conj = Merge(*conj, part, depth);
      if (!conj) return std::nullopt;
    }
    if (conj->is_object()) {
      for (const auto& item : holders.items()) (*conj)[item.key()] = item.value();
    }
    return conj;
  }

  // `node` (with const or enum) as the values it lists that pass all its
  // other keywords, each decided by Validate, and its annotations; false
  // where none passes; nullopt where some value cannot be decided.
  std::optional<Json> ListedOnly(const Json& node) {
    const bool is_const = Member(node, "const") != nullptr;
    const Json values = is_const ? Json::array({node.at("const")}) : node.at("enum");
    if (!values.is_array()) return std::nullopt;
    Json rest = Json::object(), out = Json::object();
    for (const auto& item : node.items()) {
      const std::string& key = item.key();
      if (key == "const" || key == "enum") continue;
      const bool validates = KeywordTypes(key, item.value()) != 0 || key == "if" || key == "prefixItems" ||
                             key == "additionalItems" || key == "dependentSchemas";
      (validates ? rest : out)[key] = item.value();
    }
    if (rest.empty()) return std::nullopt;  // nothing to decide
    Json kept = Json::array();
    for (const Json& v : values) {
      const Verdict r = Validate(v, rest, 0);
      if (r == Verdict::kUnknown) return std::nullopt;
      if (r == Verdict::kYes) kept.push_back(v);
    }
    if (kept.empty()) return Json(false);
    if (is_const) {
      out["const"] = kept[0];
    } else {
      out["enum"] = std::move(kept);
    }
    return out;
  }

  // xgrammar writes a listed object or array compactly ({"a":1}), unlike
  // the rest of its JSON ({"a": 1}): everywhere in `schema`, an enum or
  // const with such values and no other validation keyword becomes schemas
  // of exactly those values (an anyOf, the scalars' enum one branch).
  void ExpandListed(Json* schema, int depth) {
    if (depth > kMaxDepth) return;
    if (schema->is_array()) {
      for (Json& x : *schema) ExpandListed(&x, depth + 1);
      return;
    }
    if (!schema->is_object()) return;
    for (auto& item : schema->items()) {
      if (item.key() != "enum" && item.key() != "const") ExpandListed(&item.value(), depth + 1);
    }
    const bool is_const = schema->contains("const");
    if (!is_const && !schema->contains("enum")) return;
    const Json values = is_const ? Json::array({(*schema)["const"]}) : (*schema)["enum"];
    if (!values.is_array() || std::none_of(values.begin(), values.end(), [](const Json& v) {
          return v.is_structured();
        })) {
      return;
    }
    Json out = Json::object();
    for (const auto& item : schema->items()) {
      if (item.key() == "enum" || item.key() == "const") continue;
      if (KeywordTypes(item.key(), item.value()) != 0) return;  // the walk decides
      out[item.key()] = item.value();
    }
    Json scalars = Json::array(), branches = Json::array();
    for (const Json& v : values) {
      if (v.is_structured()) {
        branches.push_back(SchemaOfValue(v));
      } else {
        scalars.push_back(v);
      }
    }
    if (!scalars.empty()) branches.push_back(Json{{"enum", std::move(scalars)}});
    if (branches.size() == 1) {
      for (const auto& item : branches[0].items()) out[item.key()] = item.value();
    } else {
      out["anyOf"] = std::move(branches);
    }
    *schema = std::move(out);
  }

  // oneOf branches that are objects told apart by a member each holds to
  // listed values no other branch lists (a discriminator such as "kind")
  // but that not every pair requires: the member becomes required in each
  // branch (fewer instances: an object without it matched one branch, or
  // two, which oneOf refuses). xgrammar enforces oneOf as anyOf, exact
  // only where no value matches two branches. False where a branch's $ref
  // to inline goes past what Inline can do.
  bool Discriminate(Json* schema, int depth) {
    if (depth > kMaxDepth || !Spend()) return false;
    if (schema->is_array()) {
      for (Json& x : *schema) {
        if (!Discriminate(&x, depth + 1)) return false;
      }
      return true;
    }
    if (!schema->is_object()) return true;
    for (auto& item : schema->items()) {
      if (item.key() != "enum" && item.key() != "const" && !Discriminate(&item.value(), depth + 1)) return false;
    }
    if (!schema->contains("oneOf") || !(*schema)["oneOf"].is_array() || (*schema)["oneOf"].size() < 2) return true;
    Json& branches = (*schema)["oneOf"];
    // Each branch as it reads (a lone $ref's target), and its listed values
    // of a member.
    std::vector<Json> read;
    for (const Json& b : branches) {
      if (!b.is_object()) return true;
      const Json* ref = Member(b, "$ref");
      if (ref != nullptr && b.size() == 1) {
        const Json* target = Resolve(*ref);
        if (target == nullptr || !target->is_object()) return true;
        read.push_back(*target);
      } else if (ref != nullptr) {
        return true;
      } else {
        read.push_back(b);
      }
    }
    auto listed = [](const Json& branch, const std::string& name) -> std::optional<Json> {
      const Json* properties = Member(branch, "properties");
      const Json* member = properties == nullptr ? nullptr : Member(*properties, name);
      if (member == nullptr) return std::nullopt;
      if (const Json* c = Member(*member, "const")) return Json::array({*c});
      const Json* e = Member(*member, "enum");
      if (e == nullptr || !e->is_array()) return std::nullopt;
      return *e;
    };
    auto requires_member = [](const Json& branch, const std::string& name) {
      const Json* r = Member(branch, "required");
      return r != nullptr && r->is_array() && std::find(r->begin(), r->end(), Json(name)) != r->end();
    };
    const Json* first = Member(read[0], "properties");
    if (first == nullptr || !first->is_object()) return true;
    for (const auto& candidate : first->items()) {
      const std::string& name = candidate.key();
      std::vector<Json> values;
      for (const Json& b : read) {
        std::optional<Json> v = listed(b, name);
        if (!v) break;
        values.push_back(std::move(*v));
      }
      if (values.size() != read.size()) continue;
      bool apart = true, needed = false;
      for (size_t i = 0; i < values.size() && apart; ++i) {
        for (size_t j = i + 1; j < values.size() && apart; ++j) {
          for (const Json& v : values[i]) apart = apart && std::find(values[j].begin(), values[j].end(), v) == values[j].end();
          needed = needed || (!requires_member(read[i], name) && !requires_member(read[j], name));
        }
      }
      if (!apart) continue;
      if (!needed) return true;
      for (size_t i = 0; i < read.size(); ++i) {
        if (requires_member(read[i], name)) continue;
        Json b = branches[i];
        if (b.contains("$ref")) {
          std::optional<Json> target = Inline(b["$ref"], depth);
          if (!target || !target->is_object()) return false;
          b = std::move(*target);
        }
        if (!b.contains("required") || !b["required"].is_array()) b["required"] = Json::array();
        b["required"].push_back(name);
        branches[i] = std::move(b);
      }
      return true;
    }
    return true;
  }

  // The schema whose only valid instance is `v` (JSON equality: members
  // in any order, 1 and 1.0 alike).
  static Json SchemaOfValue(const Json& v) {
    if (v.is_object()) {
      Json properties = Json::object(), required = Json::array();
      for (const auto& member : v.items()) {
        properties[member.key()] = SchemaOfValue(member.value());
        required.push_back(member.key());
      }
      return Json{{"type", "object"}, {"properties", std::move(properties)}, {"required", std::move(required)},
                  {"additionalProperties", false}};
    }
    if (v.is_array()) {
      Json items = Json::array();
      for (const Json& x : v) items.push_back(SchemaOfValue(x));
      const size_t n = items.size();
      return Json{{"type", "array"}, {"prefixItems", std::move(items)}, {"items", false}, {"minItems", n}};
    }
    return Json{{"const", v}};
  }

  static Verdict Not(Verdict v) {
    return v == Verdict::kUnknown ? v : (v == Verdict::kYes ? Verdict::kNo : Verdict::kYes);
  }

  // Whether the instance `v` is valid under `s`, as JSON Schema reads it,
  // where that can be told here (not formats, dynamic references or
  // unevaluated members; patterns by std::regex).
  Verdict Validate(const Json& v, const Json& s, int depth) {
    if (s.is_boolean()) return s.get<bool>() ? Verdict::kYes : Verdict::kNo;
    if (!s.is_object() || depth > kMaxDepth || !Spend()) return Verdict::kUnknown;
    const Json* ref = Member(s, "$ref");
    if (ref != nullptr && refs_alone_) {
      const Json* target = Resolve(*ref);
      return target == nullptr ? Verdict::kUnknown : Validate(v, *target, depth + 1);
    }
    bool unknown = false;
    for (const auto& item : s.items()) {
      const std::string& key = item.key();
      const Verdict r = Keyword(v, s, key, item.value(), depth);
      if (r == Verdict::kNo) return r;
      unknown = unknown || r == Verdict::kUnknown;
    }
    return unknown ? Verdict::kUnknown : Verdict::kYes;
  }

  // All of `verdicts` (kNo if any is, else kUnknown if any is).
  static Verdict All(const std::vector<Verdict>& verdicts) {
    Verdict out = Verdict::kYes;
    for (Verdict r : verdicts) {
      if (r == Verdict::kNo) return r;
      if (r == Verdict::kUnknown) out = r;
    }
    return out;
  }

  Verdict Keyword(const Json& v, const Json& s, const std::string& key, const Json& arg, int depth) {
    auto sub = [&](const Json& x, const Json& schema) { return Validate(x, schema, depth + 1); };
    if (key == "$ref") {
      const Json* target = Resolve(arg);
      return target == nullptr ? Verdict::kUnknown : sub(v, *target);
    }
    if (key == "not") return Not(sub(v, arg));
    if (key == "allOf" || key == "anyOf" || key == "oneOf") {
      if (!arg.is_array()) return Verdict::kUnknown;
      std::vector<Verdict> each;
      for (const Json& b : arg) each.push_back(sub(v, b));
      if (key == "allOf") return All(each);
      const auto yes = std::count(each.begin(), each.end(), Verdict::kYes);
      const auto maybe = std::count(each.begin(), each.end(), Verdict::kUnknown);
      if (key == "anyOf") return yes > 0 ? Verdict::kYes : (maybe > 0 ? Verdict::kUnknown : Verdict::kNo);
      if (yes > 1) return Verdict::kNo;
      if (maybe > 0) return Verdict::kUnknown;
      return yes == 1 ? Verdict::kYes : Verdict::kNo;
    }
    if (key == "if") {
      const Verdict c = sub(v, arg);
      if (c == Verdict::kUnknown) return c;
      const Json* branch = Member(s, c == Verdict::kYes ? "then" : "else");
      return branch == nullptr ? Verdict::kYes : sub(v, *branch);
    }
    if (key == "then" || key == "else") return Verdict::kYes;  // read by "if"
    if (key == "$dynamicRef" || key == "$recursiveRef" || key == "unevaluatedItems" ||
        key == "unevaluatedProperties") {
      return Verdict::kUnknown;
    }
    if (key == "pattern") {
      if (!v.is_string() || !arg.is_string()) return Verdict::kYes;
      const std::optional<bool> m = Searches(arg.get<std::string>(), v.get<std::string>());
      return !m ? Verdict::kUnknown : (*m ? Verdict::kYes : Verdict::kNo);
    }
    if (key == "format") {
      return v.is_string() && KeywordTypes(key, arg) != 0 ? Verdict::kUnknown : Verdict::kYes;
    }
    if (key == "multipleOf" && v.is_number() && TypeOf(v) != kInteger) return Verdict::kUnknown;
    if (v.is_array()) {
      if (key == "items" || key == "prefixItems" || key == "additionalItems") {
        std::vector<Verdict> each;
        const Json* prefix = Member(s, "prefixItems");
        const Json* items = Member(s, "items");
        if (key == "prefixItems" && arg.is_array()) {
          for (size_t i = 0; i < arg.size() && i < v.size(); ++i) each.push_back(sub(v[i], arg[i]));
        } else if (key == "items" && arg.is_array()) {  // before 2020-12: a tuple
          for (size_t i = 0; i < arg.size() && i < v.size(); ++i) each.push_back(sub(v[i], arg[i]));
        } else if (key == "items") {
          const size_t start = prefix != nullptr && prefix->is_array() ? prefix->size() : 0;
          for (size_t i = start; i < v.size(); ++i) each.push_back(sub(v[i], arg));
        } else if (key == "additionalItems" && items != nullptr && items->is_array()) {
          for (size_t i = items->size(); i < v.size(); ++i) each.push_back(sub(v[i], arg));
        }
        return All(each);
      }
      if (key == "contains") {
        int64_t yes = 0, maybe = 0;
        for (const Json& x : v) {
          const Verdict r = sub(x, arg);
          yes += r == Verdict::kYes;
          maybe += r == Verdict::kUnknown;
        }
        const Json* lo = Member(s, "minContains");
        const Json* hi = Member(s, "maxContains");
        const double min = lo != nullptr && lo->is_number() ? lo->get<double>() : 1;
        const double max = hi != nullptr && hi->is_number() ? hi->get<double>() : 1e300;
        if (yes >= min && yes + maybe <= max) return Verdict::kYes;
        if (yes + maybe < min || yes > max) return Verdict::kNo;
        return Verdict::kUnknown;
      }
      if (key == "uniqueItems") {
        if (!arg.is_boolean() || !arg.get<bool>()) return Verdict::kYes;
        for (size_t i = 0; i < v.size(); ++i) {
          for (size_t j = i + 1; j < v.size(); ++j) {
            if (!Spend()) return Verdict::kUnknown;
            if (v[i] == v[j]) return Verdict::kNo;
          }
        }
        return Verdict::kYes;
      }
    }
    if (v.is_object()) {
      if (key == "properties" || key == "patternProperties" || key == "additionalProperties") {
        const Json* properties = Member(s, "properties");
        const Json* patterns = Member(s, "patternProperties");
        std::vector<Verdict> each;
        for (const auto& member : v.items()) {
          const std::string& name = member.key();
          const bool named = properties != nullptr && properties->is_object() && properties->contains(name);
          if (key == "properties") {
            if (named) each.push_back(sub(member.value(), properties->at(name)));
            continue;
          }
          bool matched = false;
          if (patterns != nullptr && patterns->is_object()) {
            for (const auto& p : patterns->items()) {
              const std::optional<bool> m = Searches(p.key(), name);
              if (!m) return Verdict::kUnknown;
              if (!*m) continue;
              matched = true;
              if (key == "patternProperties") each.push_back(sub(member.value(), p.value()));
            }
          }
          if (key == "additionalProperties" && !named && !matched) each.push_back(sub(member.value(), arg));
        }
        return All(each);
      }
      if (key == "propertyNames") {
        std::vector<Verdict> each;
        for (const auto& member : v.items()) each.push_back(sub(Json(member.key()), arg));
        return All(each);
      }
      if (key == "dependencies" || key == "dependentRequired" || key == "dependentSchemas") {
        if (!arg.is_object()) return Verdict::kUnknown;
        std::vector<Verdict> each;
        for (const auto& dep : arg.items()) {
          if (!v.contains(dep.key())) continue;
          each.push_back(dep.value().is_array() ? Satisfies(v, "required", dep.value()) : sub(v, dep.value()));
        }
        return All(each);
      }
    }
    if (key == "minContains" || key == "maxContains") return Verdict::kYes;  // read by "contains"
    return Satisfies(v, key, arg);
  }

  // Whether `schema` is an anyOf or oneOf and nothing else that validates.
  static const char* UnionKind(const Json& schema) {
    const char* kind = nullptr;
    for (const auto& item : schema.items()) {
      const std::string& key = item.key();
      if ((key == "anyOf" || key == "oneOf") && item.value().is_array() && kind == nullptr) {
        kind = key == "anyOf" ? "anyOf" : "oneOf";
      } else if (KeywordTypes(key, item.value()) != 0 && !Vacuous(key, item.value())) {
        return nullptr;
      }
    }
    return kind;
  }

  // The conjunction of two flattened schemas, as one schema.
  std::optional<Json> Merge(const Json& a, const Json& b, int depth) {
    if (depth > kMaxDepth || !Spend()) return std::nullopt;
    if (a.is_boolean()) return a.get<bool>() ? b : a;
    if (b.is_boolean()) return b.get<bool>() ? a : b;
    if (!a.is_object() || !b.is_object()) return std::nullopt;
    // The schema x stands for, merged with y, a's members first (the
    // grammar writes properties in that order, as the client wrote them).
    for (const bool x_is_a : {true, false}) {
      const Json& x = x_is_a ? a : b;
      const Json& y = x_is_a ? b : a;
      auto with_y = [&](const Json& from_x) { return x_is_a ? Merge(from_x, y, depth + 1) : Merge(y, from_x, depth + 1); };
      if (const char* kind = UnionKind(x)) {  // (u1 | u2) & y = (u1 & y) | (u2 & y)
        Json branches = Json::array();
        for (const Json& u : x.at(kind)) {
          std::optional<Json> m = with_y(u);
          if (!m) return std::nullopt;
          if (m->is_boolean() && !m->get<bool>()) continue;  // matches nothing
          branches.push_back(std::move(*m));
        }
        if (branches.size() > kMaxBranches || !Spend(static_cast<int64_t>(branches.size()))) return std::nullopt;
        if (branches.empty()) return Json(false);
        if (branches.size() == 1) return branches[0];
        Json out = Json::object();
        out[kind] = std::move(branches);
        return out;
      }
      if (const Json* ref = Member(x, "$ref")) {
        std::optional<Json> target = Inline(*ref, depth);
        if (!target) return std::nullopt;
        Json rest = x;
        rest.erase("$ref");
        std::optional<Json> with = Merge(*target, rest, depth + 1);
        if (!with) return std::nullopt;
        return with_y(*with);
      }
      if (Member(x, "allOf") != nullptr || Member(x, "anyOf") != nullptr || Member(x, "oneOf") != nullptr) {
        std::optional<Json> combined = Combine(x, depth + 1);
        if (!combined || *combined == x) return std::nullopt;
        return with_y(*combined);
      }
    }
    Json out = a;
    if (!MergeObjects(b, &out, depth)) return std::nullopt;
    if (out.is_boolean()) return out;
    if (!MergeKeywords(a, b, &out, depth)) return std::nullopt;
    if (out.is_boolean()) return out;
    return Local(std::move(out));
  }

  // properties, additionalProperties and patternProperties of `b` into
  // `out` (a copy of `a`): each member held to both sides' schemas for it.
  bool MergeObjects(const Json& b, Json* out, int depth) {
    Json& a = *out;
    auto has_any = [](const Json& s, std::initializer_list<const char*> keys) {
      return std::any_of(keys.begin(), keys.end(), [&](const char* k) { return Member(s, k) != nullptr; });
    };
    const bool a_obj = has_any(a, {"properties", "additionalProperties", "patternProperties"});
    const bool b_obj = has_any(b, {"properties", "additionalProperties", "patternProperties"});
    if (!b_obj) return true;
    if (!a_obj) {
      for (const char* key : {"properties", "additionalProperties", "patternProperties"}) {
        if (const Json* v = Member(b, key)) a[key] = *v;
      }
      return true;
    }
    if (has_any(a, {"patternProperties"}) || has_any(b, {"patternProperties"}) ||
        has_any(a, {"unevaluatedProperties"}) || has_any(b, {"unevaluatedProperties"})) {
      return false;
    }
    static const Json kEmpty = Json::object();
    static const Json kTrue = true;
    const Json* pa = Member(a, "properties");
    const Json* pb = Member(b, "properties");
    if ((pa != nullptr && !pa->is_object()) || (pb != nullptr && !pb->is_object())) return false;
    const Json& props_a = pa != nullptr ? *pa : kEmpty;
    const Json& props_b = pb != nullptr ? *pb : kEmpty;
    const Json* ap_a = Member(a, "additionalProperties");
    const Json* ap_b = Member(b, "additionalProperties");
    std::set<std::string> required;
    for (const Json* s : {static_cast<const Json*>(&a), &b}) {
      if (const Json* r = Member(*s, "required"); r != nullptr && r->is_array()) {
        for (const Json& n : *r) {
          if (n.is_string()) required.insert(n.get<std::string>());
        }
      }
    }
    std::optional<Json> ap = ap_a == nullptr && ap_b == nullptr
                                 ? std::optional<Json>(Json())
                                 : Merge(ap_a != nullptr ? *ap_a : kTrue, ap_b != nullptr ? *ap_b : kTrue, depth + 1);
    if (!ap) return false;
    const bool ap_false = ap->is_boolean() && !ap->get<bool>();
    std::vector<std::string> names;
    for (const auto& item : props_a.items()) names.push_back(item.key());
    for (const auto& item : props_b.items()) {
      if (!props_a.contains(item.key())) names.push_back(item.key());
    }
    Json props = Json::object();
    for (const std::string& name : names) {
      const Json& sa = props_a.contains(name) ? props_a.at(name) : (ap_a != nullptr ? *ap_a : kTrue);
      const Json& sb = props_b.contains(name) ? props_b.at(name) : (ap_b != nullptr ? *ap_b : kTrue);
      std::optional<Json> m = Merge(sa, sb, depth + 1);
      if (!m) return false;
      if (m->is_boolean() && !m->get<bool>()) {
        if (required.count(name)) {
          a = false;  // a member both require and one forbids
          return true;
        }
        if (ap_false) continue;  // forbidden, as any member not listed is
        props[name] = false;     // for ObjectRewrites (Merge ends in Local), which closes the object
        continue;
      }
      props[name] = std::move(*m);
    }
    a["properties"] = std::move(props);
    if (ap->is_null()) {
      a.erase("additionalProperties");
    } else {
      a["additionalProperties"] = std::move(*ap);
    }
    return true;
  }

  // The other keywords of `b` into `out` (a copy of `a`, objects merged).
  bool MergeKeywords(const Json& a, const Json& b, Json* out, int depth) {
    for (const auto& item : b.items()) {
      const std::string& key = item.key();
      const Json& vb = item.value();
      if (key == "properties" || key == "additionalProperties" || key == "patternProperties") continue;
      const Json* va = Member(a, key);
      if (va == nullptr) {
        if (!SelfContained(key) && key != "items" && key != "prefixItems") return false;
        if (key == "items" && Member(a, "prefixItems") != nullptr) return false;
        if (key == "prefixItems" && Member(a, "items") != nullptr) return false;
        (*out)[key] = vb;
        continue;
      }
      if (*va == vb) continue;
      if (KeywordTypes(key, vb) == 0) continue;  // an annotation: a's stays
      if (key == "type") {
        const uint8_t ta = NamedTypes(*va), tb = NamedTypes(vb);
        if (ta == 0 || tb == 0) return false;
        if ((ta & tb) == 0) {
          *out = false;
          return true;
        }
        (*out)[key] = TypeKeyword(ta & tb);
      } else if (key == "required") {
        if (!va->is_array() || !vb.is_array()) return false;
        Json r = *va;
        for (const Json& n : vb) {
          if (std::find(r.begin(), r.end(), n) == r.end()) r.push_back(n);
        }
        (*out)[key] = std::move(r);
      } else if (key == "enum") {
        if (!va->is_array() || !vb.is_array()) return false;
        Json e = Json::array();
        for (const Json& v : *va) {
          if (std::find(vb.begin(), vb.end(), v) != vb.end()) e.push_back(v);
        }
        if (e.empty()) {
          *out = false;
          return true;
        }
        (*out)[key] = std::move(e);
      } else if (key == "const") {
        *out = false;  // two different values
        return true;
      } else if (key == "minimum" || key == "exclusiveMinimum" || key == "minLength" || key == "minItems" ||
                 key == "minProperties") {
        if (!va->is_number() || !vb.is_number()) return false;
        if (Compare(vb, *va) > 0) (*out)[key] = vb;
      } else if (key == "maximum" || key == "exclusiveMaximum" || key == "maxLength" || key == "maxItems" ||
                 key == "maxProperties") {
        if (!va->is_number() || !vb.is_number()) return false;
        if (Compare(vb, *va) < 0) (*out)[key] = vb;
      } else if (key == "uniqueItems") {
        (*out)[key] = va->is_boolean() && vb.is_boolean() && (va->get<bool>() || vb.get<bool>());
      } else if (key == "multipleOf") {
        if (TypeOf(*va) != kInteger || TypeOf(vb) != kInteger || va->get<double>() <= 0 || vb.get<double>() <= 0) {
          return false;
        }
        const int64_t x = va->get<int64_t>(), y = vb.get<int64_t>();
        const int64_t l = x / std::gcd(x, y) * y;
        if (l > (int64_t{1} << 40)) return false;
        (*out)[key] = l;
      } else if (key == "items") {
        if (!va->is_object() && !va->is_boolean()) return false;
        if (!vb.is_object() && !vb.is_boolean()) return false;
        std::optional<Json> m = Merge(*va, vb, depth + 1);
        if (!m) return false;
        (*out)[key] = std::move(*m);
      } else if (key == "dependentRequired") {
        if (!va->is_object() || !vb.is_object()) return false;
        Json d = *va;
        for (const auto& dep : vb.items()) {
          if (!d.contains(dep.key())) {
            d[dep.key()] = dep.value();
            continue;
          }
          if (!d[dep.key()].is_array() || !dep.value().is_array()) return false;
          for (const Json& n : dep.value()) d[dep.key()].push_back(n);
        }
        (*out)[key] = std::move(d);
      } else {
        return false;  // two different patterns, formats, nots, ...: not one keyword
      }
    }
    if (out->is_object()) {
      for (const char* key : {"minLength", "minItems", "minProperties", "minimum"}) {
        const std::string max = std::string("max") + (key + 3);
        const Json* lo = Member(*out, key);
        const Json* hi = Member(*out, max);
        if (lo != nullptr && hi != nullptr && lo->is_number() && hi->is_number() && Compare(*lo, *hi) > 0) {
          *out = false;  // bounds no value meets
          return true;
        }
      }
    }
    return true;
  }

  // The rewrites of one schema object, keywords beside no combinator.
  std::optional<Json> Local(Json node) {
    if (!node.is_object()) return node;
    if (Member(node, "$ref") != nullptr || Member(node, "anyOf") != nullptr || Member(node, "oneOf") != nullptr ||
        Member(node, "allOf") != nullptr) {
      return node;
    }
    // Listed values beside keywords that decide them: keep the values
    // that pass, drop the keywords.
    if (Member(node, "const") != nullptr || Member(node, "enum") != nullptr) {
      if (std::optional<Json> listed = ListedOnly(node)) return listed;
      Json values = Member(node, "const") != nullptr ? Json::array({node.at("const")}) : node.at("enum");
      if (!values.is_array()) return node;
      Json kept = Json::array();
      std::vector<std::string> decided;
      for (const auto& item : node.items()) {
        const std::string& key = item.key();
        if (key == "const" || key == "enum" || KeywordTypes(key, item.value()) == 0) continue;
        bool decides = true;
        for (const Json& v : values) decides = decides && Satisfies(v, key, item.value()) != Verdict::kUnknown;
        if (decides) decided.push_back(key);
      }
      if (decided.empty()) return node;
      for (const Json& v : values) {
        const bool pass = std::all_of(decided.begin(), decided.end(), [&](const std::string& key) {
          return Satisfies(v, key, node.at(key)) == Verdict::kYes;
        });
        if (pass) kept.push_back(v);
      }
      if (kept.empty()) return Json(false);
      for (const std::string& key : decided) node.erase(key);
      if (Member(node, "const") != nullptr && kept.size() == 1) {
        node["const"] = kept[0];
      } else {
        node.erase("const");
        node["enum"] = std::move(kept);
      }
      return node;
    }
    const Json* type = Member(node, "type");
    bool shaped = type != nullptr;
    for (const char* key : {"properties", "additionalProperties", "unevaluatedProperties", "patternProperties",
                            "items", "prefixItems", "unevaluatedItems"}) {
      shaped = shaped || Member(node, key) != nullptr;
    }
    if (!shaped) return SplitByType(std::move(node));
    const uint8_t types = type != nullptr ? NamedTypes(*type) : kAnyType;
    if (types & kString) {
      if (!StringRewrites(&node)) return std::nullopt;
      if (node.is_boolean()) return node;
    }
    if (types & kObject) {
      if (!ObjectRewrites(&node)) return std::nullopt;
      if (node.is_boolean()) return node;
    }
    if (const Json* unique = Member(node, "uniqueItems"); unique != nullptr && unique->is_boolean()) {
      const Json* max = Member(node, "maxItems");
      if (!unique->get<bool>() || (max != nullptr && max->is_number() && max->get<double>() <= 1)) {
        node.erase("uniqueItems");
      }
    }
    return node;
  }

  // A schema with validation keywords and no type: an anyOf of one branch
  // per type its keywords constrain, and one for the types they do not.
  std::optional<Json> SplitByType(Json node) {
    Json annotations = Json::object();
    std::vector<std::pair<std::string, Json>> keywords;
    uint8_t constrained = 0;
    for (const auto& item : node.items()) {
      const uint8_t t = KeywordTypes(item.key(), item.value());
      if (t == 0 || Vacuous(item.key(), item.value())) {
        annotations[item.key()] = item.value();
      } else {
        keywords.push_back({item.key(), item.value()});
        constrained |= t;
      }
    }
    if (keywords.empty()) return node;
    Json branches = Json::array();
    const uint8_t kGroups[] = {kNull, kBoolean, kObject, kArray, kString, kNumber};
    for (uint8_t group : kGroups) {
      if ((constrained & group) == 0) continue;
      Json branch = Json::object();
      branch["type"] = TypeKeyword(group);
      for (const auto& [key, value] : keywords) {
        if (KeywordTypes(key, value) & group) branch[key] = value;
      }
      std::optional<Json> local = Local(std::move(branch));
      if (!local) return std::nullopt;
      if (local->is_boolean() && !local->get<bool>()) continue;
      branches.push_back(std::move(*local));
    }
    const uint8_t rest = kAnyType & ~constrained;
    if (rest != 0) branches.push_back(Json{{"type", TypeKeyword(rest)}});
    if (branches.empty()) return Json(false);
    if (branches.size() == 1) {
      Json only = std::move(branches[0]);
      if (only.is_object()) {
        for (const auto& item : annotations.items()) only[item.key()] = item.value();
      }
      return only;
    }
    annotations["anyOf"] = std::move(branches);
    return annotations;
  }

  // pattern searched, and lengths beside a pattern of one character.
  bool StringRewrites(Json* node) {
    Json& s = *node;
    const Json* pattern = Member(s, "pattern");
    if (pattern == nullptr || !pattern->is_string()) return true;
    const std::string p = pattern->get<std::string>();
    const Json* lo = Member(s, "minLength");
    const Json* hi = Member(s, "maxLength");
    if (lo != nullptr || hi != nullptr) {
      // Characters in a row with at most one count not fixed: that count
      // takes what the lengths leave ("^[a-z][a-z0-9-]*$" with maxLength
      // 63 becomes "^[a-z][a-z0-9-]{0,62}$").
      const PatternShape shape = ShapeOf(p);
      std::optional<std::vector<Repeated>> atoms;
      if (shape.starts && shape.ends && !shape.alternation && !shape.inner_anchor) {
        atoms = AtomSequence(p.substr(1, p.size() - 2));
      }
      const bool whole = (lo == nullptr || TypeOf(*lo) == kInteger) && (hi == nullptr || TypeOf(*hi) == kInteger);
      size_t variable = 0, variables = 0;
      int64_t fixed = 0;
      if (atoms) {
        for (size_t k = 0; k < atoms->size(); ++k) {
          if ((*atoms)[k].min != (*atoms)[k].max) {
            variable = k;
            ++variables;
          } else {
            fixed += (*atoms)[k].min;
          }
        }
      }
      if (!atoms || atoms->empty() || !whole || variables > 1) {
        s["pattern"] = FullMatchPattern(p);
        return true;  // the walk refuses the lengths beside it
      }
      const int64_t want_lo = lo != nullptr ? lo->get<int64_t>() : 0;
      const int64_t want_hi = hi != nullptr ? hi->get<int64_t>() : -1;
      if (variables == 0) {  // one length: in the bounds, or no string is
        if (fixed < want_lo || (want_hi >= 0 && fixed > want_hi)) {
          *node = false;
          return true;
        }
      } else {
        Repeated& r = (*atoms)[variable];
        r.min = std::max<int64_t>(r.min, want_lo - fixed);
        if (want_hi >= 0) r.max = r.max < 0 ? want_hi - fixed : std::min<int64_t>(r.max, want_hi - fixed);
        if (r.max >= 0 && r.min > r.max) {
          *node = false;
          return true;
        }
      }
      std::string rebuilt = "^";
      for (const Repeated& r : *atoms) {
        absl::StrAppend(&rebuilt, r.atom, "{", r.min, ",", r.max < 0 ? "" : absl::StrCat(r.max), "}");
      }
      s["pattern"] = RegexForXgrammar(rebuilt + "$");
      s.erase("minLength");
      s.erase("maxLength");
      return true;
    }
    s["pattern"] = FullMatchPattern(p);
    return true;
  }

  // Members of `node` are copied before it changes: an ordered JSON object
  // is a vector, so adding a member moves the others.
  bool ObjectRewrites(Json* node) {
    Json& s = *node;
    // A member no value is valid for (false): an object with it required
    // is none; else it is left out, and so is any member not listed (fewer
    // instances: xgrammar cannot allow all names but one).
    if (s.contains("properties") && s["properties"].is_object()) {
      const Json names = s.contains("required") ? s["required"] : Json::array();
      Json kept = Json::object();
      bool dropped = false;
      for (const auto& member : s["properties"].items()) {
        if (!(member.value().is_boolean() && !member.value().get<bool>())) {
          kept[member.key()] = member.value();
        } else if (names.is_array() && std::find(names.begin(), names.end(), Json(member.key())) != names.end()) {
          if (!s.contains("type") || NamedTypes(s["type"]) != kObject) return false;  // other types may pass
          *node = false;
          return true;
        } else {
          dropped = true;
        }
      }
      if (dropped) {
        if (s.contains("patternProperties")) return false;
        // A member required but not listed keeps the schema it had.
        const Json had = s.contains("additionalProperties") ? s["additionalProperties"] : Json(true);
        for (const Json& n : names.is_array() ? names : Json::array()) {
          if (n.is_string() && !kept.contains(n.get<std::string>())) kept[n.get<std::string>()] = had;
        }
        s["properties"] = std::move(kept);
        s["additionalProperties"] = false;
      }
    }
    Json patterns_in = s.contains("patternProperties") ? s["patternProperties"] : Json();
    if (!patterns_in.is_object() || patterns_in.empty()) patterns_in = Json();
    const Json ap = s.contains("additionalProperties") ? s["additionalProperties"] : Json();
    const bool ap_false = ap.is_boolean() && !ap.get<bool>();
    // dependentRequired (or dependencies' lists) of a required member.
    for (const char* key : {"dependentRequired", "dependencies"}) {
      if (!s.contains(key) || !s[key].is_object()) continue;
      Json deps = s[key];
      Json names = s.contains("required") && s["required"].is_array() ? s["required"] : Json::array();
      auto listed = [&](const Json& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
      std::vector<std::string> done;
      for (const auto& item : deps.items()) {
        if (!item.value().is_array()) continue;
        const bool trigger_required = listed(Json(item.key()));
        const bool all_required = std::all_of(item.value().begin(), item.value().end(), listed);
        if (trigger_required || all_required) done.push_back(item.key());
        if (trigger_required && !all_required) {
          for (const Json& n : item.value()) {
            if (!listed(n)) names.push_back(n);
          }
        }
      }
      if (done.empty()) continue;
      for (const std::string& d : done) deps.erase(d);
      s["required"] = std::move(names);
      if (deps.empty()) {
        s.erase(key);
      } else {
        s[key] = std::move(deps);
      }
    }
    // A dependency of a member that is not required: an anyOf of the
    // object without the member (closed to members not named: fewer
    // instances where it was open) and the object with it and what it
    // depends on (its list required, or its schema merged).
    for (const char* key : {"dependentRequired", "dependencies", "dependentSchemas"}) {
      if (!s.contains(key) || !s[key].is_object() || s[key].empty()) continue;
      if (patterns_in.is_object()) return false;
      const std::string name = s[key].begin().key();
      const Json depends = s[key].begin().value();
      Json rest = s;
      rest[key].erase(name);
      if (rest[key].empty()) rest.erase(key);
      Json absent = rest;
      if (absent.contains("properties") && absent["properties"].is_object()) absent["properties"].erase(name);
      absent["additionalProperties"] = false;
      Json present = rest;
      if (!present.contains("required") || !present["required"].is_array()) present["required"] = Json::array();
      std::vector<Json> names = {Json(name)};
      if (depends.is_array()) names.insert(names.end(), depends.begin(), depends.end());
      for (const Json& n : names) {
        if (std::find(present["required"].begin(), present["required"].end(), n) == present["required"].end()) {
          present["required"].push_back(n);
        }
      }
      std::optional<Json> with = depends.is_array() ? std::optional<Json>(present) : Merge(present, depends, 0);
      if (!with || !Spend(2)) return false;
      std::optional<Json> a = Local(std::move(absent));
      std::optional<Json> b = Local(std::move(*with));
      if (!a || !b) return false;
      Json branches = Json::array();
      for (Json* branch : {&*a, &*b}) {
        if (!(branch->is_boolean() && !branch->get<bool>())) branches.push_back(std::move(*branch));
      }
      if (branches.empty()) {
        *node = false;
      } else if (branches.size() == 1) {
        *node = std::move(branches[0]);
      } else {
        *node = Json{{"anyOf", std::move(branches)}};
      }
      return true;
    }
    // Required members properties does not list: listed, with the schema
    // of a member not listed.
    const Json required = s.contains("required") ? s["required"] : Json();
    if (required.is_array()) {
      for (const Json& name : required) {
        if (!name.is_string()) continue;
        const std::string& n = name.get_ref<const std::string&>();
        if (s.contains("properties") && (!s["properties"].is_object() || s["properties"].contains(n))) continue;
        bool matched = false;
        if (patterns_in.is_object()) {
          for (const auto& item : patterns_in.items()) {
            const std::optional<bool> m = Searches(item.key(), n);
            if (!m) return false;
            matched = matched || *m;
          }
        }
        if (ap_false && !matched) continue;  // unsatisfiable; the walk says so
        if (!s.contains("properties")) s["properties"] = Json::object();
        s["properties"][n] = matched || ap.is_null() ? Json::object() : ap;
      }
    }
    if (patterns_in.is_object()) {
      // xgrammar skips lookarounds: a key pattern with one is not enforced
      // (the walk refuses the patternProperties as sent).
      for (const auto& item : patterns_in.items()) {
        if (HasLookaround(item.key())) return false;
      }
      // Each key's pattern searched; patterns that may match one key held
      // to each other's schemas; named members matching one held to it.
      std::vector<std::pair<std::string, Json>> patterns;
      for (const auto& item : patterns_in.items()) patterns.push_back({item.key(), item.value()});
      std::vector<Json> schemas;
      for (size_t i = 0; i < patterns.size(); ++i) {
        std::optional<Json> held = patterns[i].second;
        for (size_t j = 0; j < patterns.size() && held; ++j) {
          if (j == i || ProvablyDisjoint(patterns[i].first, patterns[j].first)) continue;
          held = Merge(*held, patterns[j].second, 0);
        }
        if (!held) return false;
        schemas.push_back(std::move(*held));
      }
      // xgrammar may write a named member through a pattern it matches, so
      // such a pattern's schema is held to the member's too (fewer: other
      // names it matches get values both allow; none where they clash).
      if (s.contains("properties") && s["properties"].is_object()) {
        for (auto& member : s["properties"].items()) {
          for (size_t i = 0; i < patterns.size(); ++i) {
            const std::optional<bool> m = Searches(patterns[i].first, member.key());
            if (!m) return false;
            if (!*m) continue;
            std::optional<Json> held = Merge(member.value(), patterns[i].second, 0);
            if (!held) return false;
            member.value() = std::move(*held);
          }
        }
        for (const auto& member : s["properties"].items()) {
          for (size_t i = 0; i < patterns.size(); ++i) {
            if (!Searches(patterns[i].first, member.key()).value_or(true)) continue;
            std::optional<Json> held = Merge(schemas[i], member.value(), 0);
            if (!held) return false;
            schemas[i] = std::move(*held);
          }
        }
      }
      Json rewritten = Json::object();
      for (size_t i = 0; i < patterns.size(); ++i) {
        if (schemas[i].is_boolean() && !schemas[i].get<bool>()) continue;  // no member through it
        const std::string full = FullMatchPattern(patterns[i].first);
        if (rewritten.contains(full)) return false;
        rewritten[full] = std::move(schemas[i]);
      }
      s["patternProperties"] = std::move(rewritten);
      s["additionalProperties"] = false;
    }
    return true;
  }

  const Json& root_;
  bool refs_alone_;  // the schema's $schema is a draft before 2019-09
  int64_t budget_ = kBudget;
  std::set<std::string> inlining_;  // $refs being inlined (a cycle is not)
};

}  // namespace

std::string FullMatchPattern(const std::string& pattern) {
  const PatternShape shape = ShapeOf(pattern);
  if (shape.inner_anchor) return RegexForXgrammar(pattern);
  if (shape.alternation) {
    if (shape.starts || shape.ends) return RegexForXgrammar(pattern);
    return RegexForXgrammar(absl::StrCat("^.*(", pattern, ").*$"));
  }
  // Anchored at both ends, so that a pattern rewritten once is not again.
  std::string core = pattern;
  if (shape.ends) core.pop_back();
  if (shape.starts) core.erase(0, 1);
  return RegexForXgrammar(absl::StrCat("^", shape.starts ? "" : ".*", core, shape.ends ? "" : ".*", "$"));
}

std::optional<Json> RewriteForXgrammar(const Json& root) { return Rewriter(root).Run(); }

}  // namespace flover::schema
