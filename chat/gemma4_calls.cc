#include "chat/gemma4_calls.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace flover {
namespace {

using Json = nlohmann::ordered_json;

constexpr int kMaxDepth = 64;

bool IsNameChar(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'; }

// The notation read into JSON, from text[at].
class ArgumentReader {
 public:
  explicit ArgumentReader(absl::string_view text) : s_(text) {}

  // A dictionary and nothing after it but whitespace.
  bool WholeDict(Json* out) {
    if (!Dict(out, 0)) return false;
    Space();
    return at_ == s_.size();
  }

 private:
  void Space() {
    while (at_ < s_.size() && absl::ascii_isspace(static_cast<unsigned char>(s_[at_]))) ++at_;
  }
  bool Eat(char c) {
    Space();
    if (at_ >= s_.size() || s_[at_] != c) return false;
    ++at_;
    return true;
  }
  bool String(std::string* out) {
    if (!absl::StartsWith(s_.substr(at_), kGemma4Quote)) return false;
    const size_t end = s_.find(kGemma4Quote, at_ + kGemma4Quote.size());
    if (end == absl::string_view::npos) return false;
    *out = std::string(s_.substr(at_ + kGemma4Quote.size(), end - at_ - kGemma4Quote.size()));
    at_ = end + kGemma4Quote.size();
    return true;
  }
  bool Key(std::string* out) {
    Space();
    if (String(out)) return true;
    const size_t start = at_;
    while (at_ < s_.size() && s_[at_] != ':' && s_[at_] != '}' && s_[at_] != ',' && s_[at_] != '{') ++at_;
    *out = std::string(absl::StripTrailingAsciiWhitespace(s_.substr(start, at_ - start)));
    return !out->empty();
  }
  bool Dict(Json* out, int depth) {
    if (depth > kMaxDepth || !Eat('{')) return false;
    *out = Json::object();
    if (Eat('}')) return true;
    while (true) {
      std::string key;
      Json value;
      if (!Key(&key) || !Eat(':') || !Value(&value, depth + 1)) return false;
      if (out->contains(key)) return false;  // a key twice: which is meant?
      (*out)[key] = std::move(value);
      if (Eat('}')) return true;
      if (!Eat(',')) return false;
    }
  }
  bool List(Json* out, int depth) {
    if (depth > kMaxDepth || !Eat('[')) return false;
    *out = Json::array();
    if (Eat(']')) return true;
    while (true) {
      Json value;
      if (!Value(&value, depth + 1)) return false;
      out->push_back(std::move(value));
      if (Eat(']')) return true;
      if (!Eat(',')) return false;
    }
  }
  bool Value(Json* out, int depth) {
    Space();
    if (at_ >= s_.size()) return false;
    const char c = s_[at_];
    if (c == '{') return Dict(out, depth);
    if (c == '[') return List(out, depth);
    std::string text;
    if (String(&text)) {
      *out = std::move(text);
      return true;
    }
    for (absl::string_view word : {"true", "false", "null"}) {
      if (absl::StartsWith(s_.substr(at_), word)) {
        at_ += word.size();
        *out = Json::parse(word);
        return true;
      }
    }
    const size_t start = at_;
    while (at_ < s_.size() && (absl::ascii_isdigit(static_cast<unsigned char>(s_[at_])) || s_[at_] == '-' ||
                               s_[at_] == '+' || s_[at_] == '.' || s_[at_] == 'e' || s_[at_] == 'E')) {
      ++at_;
    }
    if (at_ == start) return false;
    *out = Json::parse(s_.substr(start, at_ - start), nullptr, /*allow_exceptions=*/false);
    return out->is_number();
  }

  absl::string_view s_;
  size_t at_ = 0;
};

// "call:NAME" and where the arguments start, or npos.
size_t NameEnd(absl::string_view text, std::string* name) {
  text = absl::StripLeadingAsciiWhitespace(text);
  if (!absl::ConsumePrefix(&text, "call:")) return absl::string_view::npos;
  size_t n = 0;
  while (n < text.size() && IsNameChar(text[n])) ++n;
  if (n == 0 || n >= text.size() || text[n] != '{') return absl::string_view::npos;
  *name = std::string(text.substr(0, n));
  return n;
}

// An EBNF string literal.
std::string Literal(absl::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      absl::StrAppend(&out, "\\x", absl::Hex(u, absl::kZeroPad2));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// A scalar in the notation (an enum's or a const's).
absl::StatusOr<std::string> ScalarText(const Json& v) {
  if (v.is_string()) return absl::StrCat(kGemma4Quote, v.get<std::string>(), kGemma4Quote);
  if (v.is_number() || v.is_boolean() || v.is_null()) return v.dump();
  return absl::InvalidArgumentError("holds an object or a list");
}

// Keywords that describe and do not constrain: left as they are.
bool Annotation(const std::string& key) {
  static const char* const kKeys[] = {"description", "title", "default", "examples", "$schema", "$comment", "$id",
                                      "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "nullable"};
  return std::find(std::begin(kKeys), std::end(kKeys), key) != std::end(kKeys);
}

class GrammarWriter {
 public:
  GrammarWriter(const Json& root, std::string field) : root_(root), field_(std::move(field)) {}

  absl::StatusOr<std::string> Write() {
    auto top = Rule(root_, "");
    if (!top.ok()) return top.status();
    std::string out = absl::StrCat("root ::= ", *top, "\n");
    for (const auto& [name, body] : rules_) absl::StrAppend(&out, name, " ::= ", body, "\n");
    return out;
  }

 private:
  absl::Status Refuse(const std::string& where, absl::string_view why) const {
    return absl::InvalidArgumentError(absl::StrCat(field_, where, ": ", why));
  }
  std::string Add(std::string body) {
    const std::string name = absl::StrCat("r", rules_.size());
    rules_[name] = std::move(body);
    return name;
  }
  // The generic parts, added once each.
  std::string Generic(const std::string& kind) {
    if (!generic_added_) {
      rules_["g_str"] = absl::StrCat(Literal(kGemma4Quote), " g_char* ", Literal(kGemma4Quote));
      // A string's text holds no "<|" and does not end in "<" (so no
      // delimiter starts inside it).
      rules_["g_char"] = "[^<] | \"<\"+ [^<|]";
      rules_["g_int"] = "\"-\"? (\"0\" | [1-9] [0-9]*)";
      rules_["g_num"] = "g_int (\".\" [0-9]+)? ([eE] [+\\-]? [0-9]+)?";
      rules_["g_bool"] = "\"true\" | \"false\"";
      rules_["g_key"] = "[A-Za-z0-9_$.\\-]+";
      rules_["g_dict"] = "\"{\" (g_key \":\" g_value (\",\" g_key \":\" g_value)*)? \"}\"";
      rules_["g_list"] = "\"[\" (g_value (\",\" g_value)*)? \"]\"";
      rules_["g_value"] = "g_str | g_num | g_bool | \"null\" | g_dict | g_list";
      generic_added_ = true;
    }
    return "g_" + kind;
  }

  // The rule (or inline expression) that holds `s`; `where` names it.
  absl::StatusOr<std::string> Rule(const Json& s, const std::string& where) {
    if (++depth_ > kMaxDepth) return Refuse(where, "nests too deep");
    struct Leave {
      int* d;
      ~Leave() { --*d; }
    } leave{&depth_};
    if (s.is_boolean()) {
      if (!s.get<bool>()) return Refuse(where, "false holds nothing");
      return Generic("value");
    }
    if (!s.is_object()) return Refuse(where, "is not a schema (an object)");
    for (auto it = s.begin(); it != s.end(); ++it) {
      static const char* const kHeld[] = {"type", "properties", "required", "items", "enum", "const", "anyOf",
                                          "oneOf", "$ref", "additionalProperties"};
      if (Annotation(it.key()) ||
          std::find(std::begin(kHeld), std::end(kHeld), it.key()) != std::end(kHeld)) {
        continue;
      }
      return Refuse(where, absl::StrCat("Gemma 4's call notation cannot hold '", it.key(),
                                        "' (held: type, properties, required, items, enum, const, anyOf, oneOf, "
                                        "local $ref)"));
    }
    if (s.contains("$ref")) {
      for (auto it = s.begin(); it != s.end(); ++it) {
        if (it.key() != "$ref" && !Annotation(it.key())) {
          return Refuse(where, absl::StrCat("'", it.key(), "' beside $ref is not held"));
        }
      }
      const Json& r = s["$ref"];
      if (!r.is_string() || !absl::StartsWith(r.get<std::string>(), "#")) {
        return Refuse(where + ".$ref", "only a reference inside the schema (#/...) is held");
      }
      const std::string pointer = r.get<std::string>().substr(1);
      auto known = refs_.find(pointer);
      if (known != refs_.end()) return known->second;
      Json::json_pointer p;
      try {
        p = Json::json_pointer(pointer);
      } catch (const std::exception&) {
        return Refuse(where + ".$ref", "is not a JSON pointer");
      }
      if (!root_.contains(p)) return Refuse(where + ".$ref", absl::StrCat("'", r.get<std::string>(), "' is not in the schema"));
      const std::string name = absl::StrCat("ref", refs_.size());
      refs_[pointer] = name;  // before the body: a recursive schema refers to it
      auto body = Rule(root_[p], where + ".$ref");
      if (!body.ok()) return body.status();
      rules_[name] = *body;
      return name;
    }
    if (s.contains("enum") || s.contains("const")) {
      std::vector<std::string> alternatives;
      const Json values = s.contains("const") ? Json::array({s["const"]}) : s["enum"];
      if (!values.is_array() || values.empty()) return Refuse(where + ".enum", "is not a list of values");
      for (const Json& v : values) {
        auto text = ScalarText(v);
        if (!text.ok()) return Refuse(where + ".enum", text.status().message());
        alternatives.push_back(Literal(*text));
      }
      return absl::StrCat("(", absl::StrJoin(alternatives, " | "), ")");
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const Json& branches = s[key];
      if (!branches.is_array() || branches.empty()) return Refuse(absl::StrCat(where, ".", key), "is not a list of schemas");
      std::vector<std::string> alternatives;
      for (size_t i = 0; i < branches.size(); ++i) {
        auto b = Rule(branches[i], absl::StrCat(where, ".", key, "[", i, "]"));
        if (!b.ok()) return b.status();
        alternatives.push_back(*b);
      }
      return Add(absl::StrJoin(alternatives, " | "));
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const Json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array()) {
        for (const Json& one : t) {
          if (!one.is_string()) return Refuse(where + ".type", "is not a type name or a list of them");
          types.push_back(one.get<std::string>());
        }
      } else {
        return Refuse(where + ".type", "is not a type name or a list of them");
      }
    } else if (s.contains("properties")) {
      types.push_back("object");
    } else if (s.contains("items")) {
      types.push_back("array");
    } else {
      return Generic("value");
    }
    std::vector<std::string> alternatives;
    for (const std::string& t : types) {
      if (t == "string") {
        alternatives.push_back(Generic("str"));
      } else if (t == "integer") {
        alternatives.push_back(Generic("int"));
      } else if (t == "number") {
        alternatives.push_back(Generic("num"));
      } else if (t == "boolean") {
        alternatives.push_back(Generic("bool"));
      } else if (t == "null") {
        alternatives.push_back("\"null\"");
      } else if (t == "array") {
        std::string item = Generic("value");
        if (s.contains("items")) {
          auto i = Rule(s["items"], where + ".items");
          if (!i.ok()) return i.status();
          item = *i;
        }
        alternatives.push_back(Add(absl::StrCat("\"[\" (", item, " (\",\" ", item, ")*)? \"]\"")));
      } else if (t == "object") {
        auto o = Object(s, where);
        if (!o.ok()) return o.status();
        alternatives.push_back(*o);
      } else {
        return Refuse(where + ".type", absl::StrCat("'", t, "' is not a JSON Schema type"));
      }
    }
    return alternatives.size() == 1 ? alternatives[0] : Add(absl::StrJoin(alternatives, " | "));
  }

  // An object: its properties in dictsort order (as the template writes
  // them), each required one present; none but them. Without properties,
  // any dictionary.
  absl::StatusOr<std::string> Object(const Json& s, const std::string& where) {
    if (s.contains("additionalProperties") && !s["additionalProperties"].is_boolean()) {
      return Refuse(where + ".additionalProperties", "only true or false is held");
    }
    if (!s.contains("properties")) return Generic("dict");
    const Json& props = s["properties"];
    if (!props.is_object()) return Refuse(where + ".properties", "is not an object");
    std::vector<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return Refuse(where + ".required", "is not a list of names");
      for (const Json& r : s["required"]) {
        if (!r.is_string() || !props.contains(r.get<std::string>())) {
          return Refuse(where + ".required", absl::StrCat(r.dump(), " is not one of the properties"));
        }
        required.push_back(r.get<std::string>());
      }
    }
    std::vector<std::string> keys;
    for (auto it = props.begin(); it != props.end(); ++it) keys.push_back(it.key());
    std::stable_sort(keys.begin(), keys.end(), [](const std::string& a, const std::string& b) {
      return absl::AsciiStrToLower(a) < absl::AsciiStrToLower(b);
    });
    const size_t n = keys.size();
    std::vector<std::string> member(n);
    std::vector<bool> needed(n);
    for (size_t i = 0; i < n; ++i) {
      if (keys[i].empty() || keys[i].find_first_of(":{},[]<\" \n\t") != std::string::npos) {
        return Refuse(absl::StrCat(where, ".properties"),
                      absl::StrCat("'", keys[i], "' cannot be written bare in Gemma 4's call notation"));
      }
      auto v = Rule(props[keys[i]], absl::StrCat(where, ".properties.", keys[i]));
      if (!v.ok()) return v.status();
      member[i] = absl::StrCat(Literal(keys[i] + ":"), " ", *v);
      needed[i] = std::find(required.begin(), required.end(), keys[i]) != required.end();
    }
    // after[i]: the members from i on, some member already written (a comma
    // before each); first[i]: the same with none written yet.
    std::vector<std::string> after(n + 1), first(n + 1);
    after[n] = first[n] = "\"\"";
    for (size_t i = n; i-- > 0;) {
      const std::string with = Add(absl::StrCat("\",\" ", member[i], " ", after[i + 1]));
      after[i] = needed[i] ? with : Add(absl::StrCat(with, " | ", after[i + 1]));
      const std::string lead = Add(absl::StrCat(member[i], " ", after[i + 1]));
      first[i] = needed[i] ? lead : Add(absl::StrCat(lead, " | ", first[i + 1]));
    }
    return Add(absl::StrCat("\"{\" ", first[0], " \"}\""));
  }

  const Json& root_;
  const std::string field_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> refs_;
  bool generic_added_ = false;  // the g_* rules
  int depth_ = 0;
};

}  // namespace

std::optional<Gemma4Call> ReadGemma4Call(absl::string_view text) {
  Gemma4Call call;
  const size_t name_end = NameEnd(text, &call.name);
  if (name_end == absl::string_view::npos) return std::nullopt;
  text = absl::StripLeadingAsciiWhitespace(text);
  Json args;
  if (!ArgumentReader(text.substr(5 + name_end)).WholeDict(&args)) return std::nullopt;
  // Bytes that are no UTF-8 (the notation's strings are raw) become U+FFFD.
  call.arguments = args.dump(-1, ' ', false, Json::error_handler_t::replace);
  return call;
}

std::string Gemma4CallName(absl::string_view text) {
  std::string name;
  return NameEnd(text, &name) == absl::string_view::npos ? "" : name;
}

absl::StatusOr<std::string> Gemma4ArgumentsGrammar(absl::string_view schema_json, const std::string& field) {
  const Json schema = schema_json.empty() ? Json{{"type", "object"}}
                                          : Json::parse(schema_json, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(field, ": not JSON"));
  if (!schema.is_object() || (schema.contains("type") && schema["type"] != "object")) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": a call's arguments are an object"));
  }
  return GrammarWriter(schema, field).Write();
}

}  // namespace flover
