#include "chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace flover::jinja {
namespace {

constexpr int kMaxJsonDepth = 128;

// The next code point of UTF-8 text at `i` (advancing it), or -1 when the
// bytes there are not well-formed.
int32_t NextCodePoint(absl::string_view s, size_t* i) {
  const unsigned char c = s[*i];
  int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || *i + n > s.size()) return -1;
  int32_t cp = n == 1 ? c : c & (0x7F >> n);
  for (int k = 1; k < n; ++k) {
    const unsigned char cc = s[*i + k];
    if ((cc & 0xC0) != 0x80) return -1;
    cp = (cp << 6) | (cc & 0x3F);
  }
  static constexpr int32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
  *i += n;
  return cp;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// What Python's str.isprintable() calls non-printable (approximately: the
// control, format and separator characters a chat template could meet).
bool Unprintable(int32_t cp) {
  return cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
         (cp >= 0x205F && cp <= 0x2064) || cp == 0x3000 || cp == 0xFEFF ||
         (cp >= 0xFFF9 && cp <= 0xFFFB);
}

std::string ReprString(const std::string& s) {
  const bool single = s.find('\'') == std::string::npos || s.find('"') != std::string::npos;
  const char quote = single ? '\'' : '"';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const int32_t cp = NextCodePoint(s, &i);
    if (cp < 0) {  // not UTF-8 (cannot come from a template's inputs)
      absl::StrAppendFormat(&out, "\\x%02x", static_cast<unsigned char>(s[start]));
      i = start + 1;
      continue;
    }
    if (cp == '\\' || cp == quote) {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (Unprintable(cp)) {
      out += cp <= 0xFF ? absl::StrFormat("\\x%02x", cp) : absl::StrFormat("\\u%04x", cp);
    } else {
      out.append(s, start, i - start);
    }
  }
  out.push_back(quote);
  return out;
}

// json.dumps's string: only the quote, the backslash and control characters
// are escaped (ensure_ascii=False).
void JsonString(const std::string& s, std::string* out) {
  out->push_back('"');
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          absl::StrAppendFormat(out, "\\u%04x", c);
        } else {
          out->push_back(ch);
        }
    }
  }
  out->push_back('"');
}

absl::Status JsonOf(const Value& v, int indent, bool sort_keys, const std::string& item_sep,
                    const std::string& key_sep, int level, std::string* out) {
  auto newline = [&](int lvl) {
    if (indent < 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(indent) * lvl, ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kNone: *out += "null"; return absl::OkStatus();
    case Value::Kind::kBool: *out += v.boolean() ? "true" : "false"; return absl::OkStatus();
    case Value::Kind::kInt: absl::StrAppend(out, v.integer()); return absl::OkStatus();
    case Value::Kind::kFloat: {
      const double d = v.number();
      *out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : PythonFloat(d);
      return absl::OkStatus();
    }
    case Value::Kind::kString: JsonString(v.string(), out); return absl::OkStatus();
    case Value::Kind::kList: {
      if (v.list().empty()) {
        *out += "[]";
        return absl::OkStatus();
      }
      out->push_back('[');
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(level + 1);
        if (auto st = JsonOf(v.list()[i], indent, sort_keys, item_sep, key_sep, level + 1, out); !st.ok()) {
          return st;
        }
      }
      newline(level);
      out->push_back(']');
      return absl::OkStatus();
    }
    case Value::Kind::kDict: {
      if (v.dict().empty()) {
        *out += "{}";
        return absl::OkStatus();
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict()) items.push_back(&kv);
      if (sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      out->push_back('{');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(level + 1);
        JsonString(items[i]->first, out);
        *out += key_sep;
        if (auto st = JsonOf(items[i]->second, indent, sort_keys, item_sep, key_sep, level + 1, out);
            !st.ok()) {
          return st;
        }
      }
      newline(level);
      out->push_back('}');
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("Object of type ", v.TypeName(), " is not JSON serializable"));
  }
}

// A recursive-descent JSON reader that keeps what Python keeps.
class JsonReader {
 public:
  JsonReader(absl::string_view s, absl::string_view what) : s_(s), what_(what) {}

  absl::StatusOr<Value> Document() {
    auto v = Parse(0);
    if (!v.ok()) return v;
    Skip();
    if (i_ != s_.size()) return Error("extra data after the value");
    return v;
  }

 private:
  absl::Status Error(absl::string_view why) const {
    return absl::InvalidArgumentError(absl::StrCat(what_, ": invalid JSON at byte ", i_, ": ", why));
  }
  void Skip() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool Eat(absl::string_view word) {
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }

  absl::StatusOr<Value> Parse(int depth) {
    if (depth > kMaxJsonDepth) return Error("nested too deeply");
    Skip();
    if (i_ >= s_.size()) return Error("unexpected end");
    const char c = s_[i_];
    if (c == '{') {
      ++i_;
      Dict d;
      Skip();
      if (i_ < s_.size() && s_[i_] == '}') {
        ++i_;
        return Value::MakeDict(std::move(d));
      }
      while (true) {
        Skip();
        if (i_ >= s_.size() || s_[i_] != '"') return Error("expected a string key");
        auto key = String();
        if (!key.ok()) return key.status();
        Skip();
        if (i_ >= s_.size() || s_[i_] != ':') return Error("expected ':'");
        ++i_;
        auto v = Parse(depth + 1);
        if (!v.ok()) return v;
        // A repeated key keeps its first place and its last value, as a dict.
        auto it = std::find_if(d.begin(), d.end(), [&](const auto& kv) { return kv.first == *key; });
        if (it != d.end()) {
          it->second = std::move(*v);
        } else {
          d.emplace_back(std::move(*key), std::move(*v));
        }
        Skip();
        if (i_ < s_.size() && s_[i_] == ',') {
          ++i_;
          continue;
        }
        if (i_ < s_.size() && s_[i_] == '}') {
          ++i_;
          return Value::MakeDict(std::move(d));
        }
        return Error("expected ',' or '}'");
      }
    }
    if (c == '[') {
      ++i_;
      List l;
      Skip();
      if (i_ < s_.size() && s_[i_] == ']') {
        ++i_;
        return Value::MakeList(std::move(l));
      }
      while (true) {
        auto v = Parse(depth + 1);
        if (!v.ok()) return v;
        l.push_back(std::move(*v));
        Skip();
        if (i_ < s_.size() && s_[i_] == ',') {
          ++i_;
          continue;
        }
        if (i_ < s_.size() && s_[i_] == ']') {
          ++i_;
          return Value::MakeList(std::move(l));
        }
        return Error("expected ',' or ']'");
      }
    }
    if (c == '"') {
      auto s = String();
      if (!s.ok()) return s.status();
      return Value(std::move(*s));
    }
    if (Eat("true")) return Value(true);
    if (Eat("false")) return Value(false);
    if (Eat("null")) return Value::None();
    if (Eat("NaN")) return Value(std::nan(""));
    if (Eat("Infinity")) return Value(HUGE_VAL);
    if (Eat("-Infinity")) return Value(-HUGE_VAL);
    return Number();
  }

  absl::StatusOr<Value> Number() {
    const size_t start = i_;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    auto digits = [&] {
      const size_t from = i_;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      return i_ > from;
    };
    if (!digits()) return Error("expected a value");
    bool integral = true;
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      integral = false;
      if (!digits()) return Error("expected digits after '.'");
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      integral = false;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (!digits()) return Error("expected an exponent");
    }
    const absl::string_view text = s_.substr(start, i_ - start);
    if (integral) {
      int64_t v = 0;
      auto r = std::from_chars(text.data(), text.data() + text.size(), v);
      if (r.ec != std::errc()) return Error("an integer too large");
      return Value(v);
    }
    double d = 0;
    auto r = std::from_chars(text.data(), text.data() + text.size(), d);
    if (r.ec != std::errc() && r.ec != std::errc::result_out_of_range) return Error("a bad number");
    return Value(d);
  }

  absl::StatusOr<std::string> String() {
    ++i_;  // the opening quote
    std::string out;
    while (true) {
      if (i_ >= s_.size()) return Error("unterminated string");
      const char c = s_[i_];
      if (c == '"') {
        ++i_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) return Error("a control character in a string");
      if (c != '\\') {
        const size_t start = i_;
        if (NextCodePoint(s_, &i_) < 0) return Error("a string that is not UTF-8");
        out.append(s_.data() + start, i_ - start);
        continue;
      }
      ++i_;
      if (i_ >= s_.size()) return Error("unterminated escape");
      const char e = s_[i_++];
      switch (e) {
        case '"': out.push_back('"'); break;
        case '\\': out.push_back('\\'); break;
        case '/': out.push_back('/'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'u': {
          auto unit = Hex4();
          if (!unit.ok()) return unit.status();
          uint32_t cp = *unit;
          if (cp >= 0xD800 && cp <= 0xDBFF && s_.substr(i_, 2) == "\\u") {
            i_ += 2;
            auto low = Hex4();
            if (!low.ok()) return low.status();
            if (*low < 0xDC00 || *low > 0xDFFF) return Error("a high surrogate without its low half");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (*low - 0xDC00);
          } else if (cp >= 0xD800 && cp <= 0xDFFF) {
            return Error("a lone surrogate (not text)");
          }
          AppendUtf8(cp, &out);
          break;
        }
        default: return Error("an unknown escape");
      }
    }
  }

  absl::StatusOr<uint32_t> Hex4() {
    if (i_ + 4 > s_.size()) return Error("a short \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char h = s_[i_++];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= h - '0';
      else if (h >= 'a' && h <= 'f') v |= h - 'a' + 10;
      else if (h >= 'A' && h <= 'F') v |= h - 'A' + 10;
      else return Error("a bad \\u escape");
    }
    return v;
  }

  absl::string_view s_;
  absl::string_view what_;
  size_t i_ = 0;
};

}  // namespace

std::string PythonFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // The shortest digits that read back as d, then Python's layout: fixed
  // for decimal exponents in (-4, 16], else d.ddde+XX.
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits.push_back(c);
  }
  const int decpt = exp + 1;  // digits are 0.DIGITS x 10^decpt
  std::string out = negative ? "-" : "";
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(-decpt, '0') + digits;
    } else if (decpt >= static_cast<int>(digits.size())) {
      out += digits + std::string(decpt - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  absl::StrAppendFormat(&out, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return out;
}

Value Value::Undefined(std::string name) {
  Value v;
  v.s_ = std::make_shared<const std::string>(std::move(name));
  return v;
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value::Value(bool b) : kind_(Kind::kBool), b_(b), i_(b ? 1 : 0) {}
Value::Value(int64_t i) : kind_(Kind::kInt), i_(i) {}
Value::Value(double d) : kind_(Kind::kFloat), d_(d) {}
Value::Value(std::string s) : kind_(Kind::kString), s_(std::make_shared<const std::string>(std::move(s))) {}

Value Value::MakeList(List items, bool tuple) {
  Value v;
  v.kind_ = Kind::kList;
  v.tuple_ = tuple;
  v.list_ = std::make_shared<const List>(std::move(items));
  return v;
}

Value Value::MakeDict(Dict items) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<Dict>(std::move(items));
  return v;
}

Value Value::MakeNamespace(Dict items) {
  Value v = MakeDict(std::move(items));
  v.kind_ = Kind::kNamespace;
  return v;
}

Value Value::MakeCallable(std::string name, Callable fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.s_ = std::make_shared<const std::string>(std::move(name));
  v.fn_ = std::make_shared<const Callable>(std::move(fn));
  return v;
}

const Value* Value::Find(absl::string_view key) const {
  if (!is_mapping()) return nullptr;
  for (const auto& [k, v] : *dict_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Value::SetAttribute(const std::string& key, Value v) const {
  for (auto& kv : *dict_) {
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  }
  dict_->emplace_back(key, std::move(v));
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return b_;
    case Kind::kInt: return i_ != 0;
    case Kind::kFloat: return d_ != 0;
    case Kind::kString: return !s_->empty();
    case Kind::kList: return !list_->empty();
    case Kind::kDict: return !dict_->empty();
    case Kind::kNamespace:
    case Kind::kCallable: return true;
  }
  return false;
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return tuple_ ? "tuple" : "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    case Kind::kCallable: return "function";
  }
  return "?";
}

std::string Value::Str() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kString: return *s_;
    default: return Repr();
  }
}

std::string Value::Repr() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return b_ ? "True" : "False";
    case Kind::kInt: return absl::StrCat(i_);
    case Kind::kFloat: return PythonFloat(d_);
    case Kind::kString: return ReprString(*s_);
    case Kind::kList: {
      std::vector<std::string> parts;
      for (const Value& v : *list_) parts.push_back(v.Repr());
      if (tuple_) {
        return absl::StrCat("(", absl::StrJoin(parts, ", "), parts.size() == 1 ? ",)" : ")");
      }
      return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
    }
    case Kind::kDict: {
      std::vector<std::string> parts;
      for (const auto& [k, v] : *dict_) parts.push_back(absl::StrCat(ReprString(k), ": ", v.Repr()));
      return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
    }
    case Kind::kNamespace: return "<Namespace>";
    case Kind::kCallable: return absl::StrCat("<function ", *s_, ">");
  }
  return "";
}

absl::StatusOr<std::string> Value::ToJson(
    int indent, bool sort_keys, std::optional<std::pair<std::string, std::string>> separators) const {
  std::string item_sep = indent >= 0 ? "," : ", ", key_sep = ": ";
  if (separators.has_value()) item_sep = separators->first, key_sep = separators->second;
  std::string out;
  if (auto st = JsonOf(*this, indent, sort_keys, item_sep, key_sep, 0, &out); !st.ok()) return st;
  return out;
}

bool Equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  const bool an = a.is_number() || a.kind() == K::kBool, bn = b.is_number() || b.kind() == K::kBool;
  if (an && bn) {
    if (a.kind() == K::kFloat || b.kind() == K::kFloat) return a.number() == b.number();
    return a.integer() == b.integer();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone: return true;
    case K::kString: return a.string() == b.string();
    case K::kList:
      if (a.is_tuple() != b.is_tuple() || a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i) {
        if (!Equal(a.list()[i], b.list()[i])) return false;
      }
      return true;
    case K::kDict:
      if (a.dict().size() != b.dict().size()) return false;
      for (const auto& [k, v] : a.dict()) {
        const Value* other = b.Find(k);
        if (other == nullptr || !Equal(v, *other)) return false;
      }
      return true;
    case K::kNamespace: return &a.dict() == &b.dict();  // identity
    default: return a.callable_name() == b.callable_name();
  }
}

absl::StatusOr<bool> Less(const Value& a, const Value& b) {
  using K = Value::Kind;
  const bool an = a.is_number() || a.kind() == K::kBool, bn = b.is_number() || b.kind() == K::kBool;
  if (an && bn) {
    if (a.kind() == K::kFloat || b.kind() == K::kFloat) return a.number() < b.number();
    return a.integer() < b.integer();
  }
  if (a.is_string() && b.is_string()) return a.string() < b.string();
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const size_t n = std::min(a.list().size(), b.list().size());
    for (size_t i = 0; i < n; ++i) {
      if (Equal(a.list()[i], b.list()[i])) continue;
      return Less(a.list()[i], b.list()[i]);
    }
    return a.list().size() < b.list().size();
  }
  return absl::InvalidArgumentError(absl::StrCat("'<' not supported between instances of '",
                                                 a.TypeName(), "' and '", b.TypeName(), "'"));
}

absl::StatusOr<Value> ParseJsonValue(absl::string_view json, absl::string_view what) {
  return JsonReader(json, what).Document();
}

}  // namespace flover::jinja
