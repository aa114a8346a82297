#include "chat/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "chat/jinja_text.h"

namespace flover::jinja {
namespace {

using K = Value::Kind;


// Argument `index`, or keyword `name`, or `dflt`.
Value Arg(const CallArgs& a, size_t index, absl::string_view name, Value dflt = Value()) {
  if (index < a.positional.size()) return a.positional[index];
  for (const auto& [k, v] : a.keyword) {
    if (k == name) return v;
  }
  return dflt;
}

absl::StatusOr<std::string> StringArg(const CallArgs& a, size_t index, absl::string_view name,
                                      absl::string_view what) {
  Value v = Arg(a, index, name);
  if (!v.is_string()) {
    return TypeError(what, " takes a string as its ", name, ", not ", v.TypeName());
  }
  return v.string();
}

std::string AsciiUpper(std::string s) { return absl::AsciiStrToUpper(s); }
std::string AsciiLower(std::string s) { return absl::AsciiStrToLower(s); }

std::string Capitalize(const std::string& s) {
  std::string out = AsciiLower(s);
  if (!out.empty()) out[0] = absl::ascii_toupper(out[0]);
  return out;
}

// str.title(): a letter after a non-letter is upper case, other letters lower.
std::string PyTitle(const std::string& s) {
  std::string out = s;
  bool prev_letter = false;
  for (char& c : out) {
    const bool letter = absl::ascii_isalpha(c);
    if (letter) c = prev_letter ? absl::ascii_tolower(c) : absl::ascii_toupper(c);
    prev_letter = letter || static_cast<unsigned char>(c) >= 0x80;
  }
  return out;
}

// Jinja's title filter: words begin after runs of "-", white space, and
// opening brackets; each word's first character up, the rest down.
std::string JinjaTitle(const std::string& s) {
  std::string out;
  bool at_word = true;
  for (char c : s) {
    const bool sep = c == '-' || absl::ascii_isspace(c) || c == '(' || c == '{' || c == '[' || c == '<';
    if (sep) {
      out.push_back(c);
      at_word = true;
    } else {
      out.push_back(at_word ? absl::ascii_toupper(c) : absl::ascii_tolower(c));
      at_word = false;
    }
  }
  return out;
}

// str.split(sep, maxsplit) and str.split() (runs of white space).
List Split(const std::string& s, const Value& sep, int64_t maxsplit) {
  List out;
  if (!sep.is_string()) {
    absl::string_view rest = s;
    while (true) {
      rest = LStrip(rest);
      if (rest.empty()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        out.emplace_back(std::string(rest));
        break;
      }
      size_t i = 0, n = 0;
      while (i < rest.size() && !SpaceAt(rest, i, &n)) i += n;
      out.emplace_back(std::string(rest.substr(0, i)));
      rest = rest.substr(i);
    }
    return out;
  }
  const std::string& d = sep.string();
  size_t from = 0;
  while (true) {
    const size_t at = s.find(d, from);
    if (at == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit)) {
      out.emplace_back(s.substr(from));
      break;
    }
    out.emplace_back(s.substr(from, at - from));
    from = at + d.size();
  }
  return out;
}

absl::StatusOr<Value> StripWith(const std::string& s, const CallArgs& a, bool left, bool right) {
  const Value chars = Arg(a, 0, "chars");
  if (chars.is_string()) return Value(std::string(StripChars(s, chars.string(), left, right)));
  if (!chars.is_undefined() && !chars.is_none()) return TypeError("strip arg must be None or str");
  absl::string_view v = s;
  if (left) v = LStrip(v);
  if (right) v = RStrip(v);
  return Value(std::string(v));
}

// A string's method `name`, bound to `s`, or Undefined.
Value StringMethod(const std::string& s, const std::string& name) {
  auto bind = [&](auto fn) {
    return Value::MakeCallable("str." + name, [s, fn](CallArgs& a) -> absl::StatusOr<Value> { return fn(s, a); });
  };
  if (name == "strip") return bind([](const std::string& s, CallArgs& a) { return StripWith(s, a, true, true); });
  if (name == "lstrip") return bind([](const std::string& s, CallArgs& a) { return StripWith(s, a, true, false); });
  if (name == "rstrip") return bind([](const std::string& s, CallArgs& a) { return StripWith(s, a, false, true); });
  if (name == "upper") return bind([](const std::string& s, CallArgs&) -> absl::StatusOr<Value> { return Value(AsciiUpper(s)); });
  if (name == "lower") return bind([](const std::string& s, CallArgs&) -> absl::StatusOr<Value> { return Value(AsciiLower(s)); });
  if (name == "title") return bind([](const std::string& s, CallArgs&) -> absl::StatusOr<Value> { return Value(PyTitle(s)); });
  if (name == "capitalize") {
    return bind([](const std::string& s, CallArgs&) -> absl::StatusOr<Value> { return Value(Capitalize(s)); });
  }
  if (name == "split") {
    return bind([](const std::string& s, CallArgs& a) -> absl::StatusOr<Value> {
      const Value sep = Arg(a, 0, "sep");
      if (sep.is_string() && sep.string().empty()) return TypeError("empty separator");
      const Value max = Arg(a, 1, "maxsplit", Value(int64_t{-1}));
      return Value::MakeList(Split(s, sep, max.kind() == K::kInt ? max.integer() : -1));
    });
  }
  if (name == "startswith" || name == "endswith") {
    const bool start = name == "startswith";
    return bind([start](const std::string& s, CallArgs& a) -> absl::StatusOr<Value> {
      const Value p = Arg(a, 0, "prefix");
      List options = p.is_list() ? p.list() : List{p};
      for (const Value& o : options) {
        if (!o.is_string()) return TypeError(start ? "startswith" : "endswith", " takes strings");
        if (start ? absl::StartsWith(s, o.string()) : absl::EndsWith(s, o.string())) return Value(true);
      }
      return Value(false);
    });
  }
  if (name == "replace") {
    return bind([](const std::string& s, CallArgs& a) -> absl::StatusOr<Value> {
      auto old = StringArg(a, 0, "old", "replace");
      auto now = StringArg(a, 1, "new", "replace");
      if (!old.ok()) return old.status();
      if (!now.ok()) return now.status();
      const Value count = Arg(a, 2, "count", Value(int64_t{-1}));
      std::string out;
      size_t from = 0;
      int64_t left = count.kind() == K::kInt ? count.integer() : -1;
      while (left != 0) {
        const size_t at = old->empty() ? (from <= s.size() ? from : std::string::npos) : s.find(*old, from);
        if (at == std::string::npos) break;
        out += s.substr(from, at - from) + *now;
        if (old->empty()) {
          if (at == s.size()) {
            from = at + 1;
            break;
          }
          out.push_back(s[at]);
          from = at + 1;
        } else {
          from = at + old->size();
        }
        --left;
      }
      if (from <= s.size()) out += s.substr(from);
      return Value(std::move(out));
    });
  }
  if (name == "find" || name == "count") {
    const bool find = name == "find";
    return bind([find](const std::string& s, CallArgs& a) -> absl::StatusOr<Value> {
      auto sub = StringArg(a, 0, "sub", find ? "find" : "count");
      if (!sub.ok()) return sub.status();
      if (find) {
        const size_t at = s.find(*sub);
        return Value(at == std::string::npos ? int64_t{-1}
                                             : static_cast<int64_t>(Characters(s.substr(0, at)).size()));
      }
      int64_t n = 0;
      for (size_t at = s.find(*sub); at != std::string::npos && !sub->empty(); at = s.find(*sub, at + sub->size())) ++n;
      return Value(sub->empty() ? static_cast<int64_t>(Characters(s).size() + 1) : n);
    });
  }
  if (name == "join") {
    return bind([](const std::string& s, CallArgs& a) -> absl::StatusOr<Value> {
      auto items = Iterate(Arg(a, 0, "iterable"));
      if (!items.ok()) return items.status();
      std::vector<std::string> parts;
      for (const Value& v : *items) {
        if (!v.is_string()) return TypeError("sequence item: expected str instance, ", v.TypeName(), " found");
        parts.push_back(v.string());
      }
      return Value(absl::StrJoin(parts, s));
    });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isupper" ||
      name == "islower") {
    return bind([name](const std::string& s, CallArgs&) -> absl::StatusOr<Value> {
      if (s.empty()) return Value(false);
      bool cased = false;
      for (char c : s) {
        if (name == "isdigit" && !absl::ascii_isdigit(c)) return Value(false);
        if (name == "isalpha" && !absl::ascii_isalpha(c)) return Value(false);
        if (name == "isspace" && !absl::ascii_isspace(c)) return Value(false);
        if (name == "isupper" && absl::ascii_islower(c)) return Value(false);
        if (name == "islower" && absl::ascii_isupper(c)) return Value(false);
        cased = cased || absl::ascii_isalpha(c);
      }
      return Value(name == "isupper" || name == "islower" ? cased : true);
    });
  }
  return Value::Undefined(absl::StrCat("'str object' has no attribute '", name, "'"));
}

Value DictMethod(const Value& d, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    return Value::MakeCallable("dict." + name, [d, name](CallArgs&) -> absl::StatusOr<Value> {
      List out;
      for (const auto& [k, v] : d.dict()) {
        if (name == "items") out.push_back(Value::MakeList({Value(k), v}, /*tuple=*/true));
        if (name == "keys") out.emplace_back(k);
        if (name == "values") out.push_back(v);
      }
      return Value::MakeList(std::move(out));
    });
  }
  if (name == "get") {
    return Value::MakeCallable("dict.get", [d](CallArgs& a) -> absl::StatusOr<Value> {
      const Value key = Arg(a, 0, "key");
      const Value* v = key.is_string() ? d.Find(key.string()) : nullptr;
      return v != nullptr ? *v : Arg(a, 1, "default", Value::None());
    });
  }
  return Value();
}

absl::StatusOr<int64_t> Length(const Value& v) {
  switch (v.kind()) {
    case K::kUndefined: return 0;
    case K::kString: return static_cast<int64_t>(Characters(v.string()).size());
    case K::kList: return static_cast<int64_t>(v.list().size());
    case K::kDict: return static_cast<int64_t>(v.dict().size());
    default: return TypeError("object of type '", v.TypeName(), "' has no len()");
  }
}

// Jinja's unique/sort compare strings ignoring case unless asked not to.
Value SortKey(const Value& v, bool case_sensitive) {
  return v.is_string() && !case_sensitive ? Value(AsciiLower(v.string())) : v;
}

// The attribute path "a.b" of `v` (map, selectattr, sort, join, ...).
absl::StatusOr<Value> AttributePath(const Value& v, const std::string& path) {
  Value cur = v;
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    std::string p(part);
    const bool index = !p.empty() && std::all_of(p.begin(), p.end(), ::isdigit);
    auto next = index ? GetItem(cur, Value(static_cast<int64_t>(std::stoll(p)))) : GetItem(cur, Value(p));
    if (!next.ok()) return next;
    cur = std::move(*next);
  }
  return cur;
}

// `item` itself, or its attribute path when the filter was given one (a
// string `attribute` argument).
absl::StatusOr<Value> ItemOrAttribute(const Value& item, const Value& attribute) {
  return attribute.is_string() ? AttributePath(item, attribute.string()) : absl::StatusOr<Value>(item);
}

// select / reject / selectattr / rejectattr.
absl::StatusOr<Value> Select(const Value& subject, CallArgs& a, bool attr, bool keep) {
  auto items = Iterate(subject);
  if (!items.ok()) return items.status();
  size_t next = 0;
  std::string attribute;
  if (attr) {
    auto name = StringArg(a, next++, "attribute", "selectattr");
    if (!name.ok()) return name.status();
    attribute = *name;
  }
  const Value test = Arg(a, next++, "test");
  CallArgs test_args;
  for (size_t i = next; i < a.positional.size(); ++i) test_args.positional.push_back(a.positional[i]);
  List out;
  for (const Value& item : *items) {
    Value v = item;
    if (attr) {
      auto got = AttributePath(item, attribute);
      if (!got.ok()) return got.status();
      v = std::move(*got);
    }
    bool pass = v.Truthy();
    if (test.is_string()) {
      CallArgs copy = test_args;
      auto r = ApplyTest(test.string(), v, copy);
      if (!r.ok()) return r.status();
      pass = *r;
    }
    if (pass == keep) out.push_back(item);
  }
  return Value::MakeList(std::move(out));
}

using FilterFn = absl::StatusOr<Value> (*)(const Value&, CallArgs&);

absl::StatusOr<Value> FilterTojson(const Value& v, CallArgs& a) {
  const Value indent = Arg(a, 1, "indent"), sort = Arg(a, 3, "sort_keys"), seps = Arg(a, 2, "separators");
  std::optional<std::pair<std::string, std::string>> separators;
  if (seps.is_list() && seps.list().size() == 2 && seps.list()[0].is_string() && seps.list()[1].is_string()) {
    separators = std::make_pair(seps.list()[0].string(), seps.list()[1].string());
  }
  auto json = v.ToJson(indent.kind() == K::kInt ? static_cast<int>(indent.integer()) : -1, sort.Truthy(),
                       separators);
  if (!json.ok()) return json.status();
  return Value(std::move(*json));
}

absl::StatusOr<Value> FilterJoin(const Value& v, CallArgs& a) {
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  const Value sep = Arg(a, 0, "d", Value(""));
  const Value attribute = Arg(a, 1, "attribute");
  std::vector<std::string> parts;
  for (const Value& item : *items) {
    if (attribute.is_string()) {
      auto got = AttributePath(item, attribute.string());
      if (!got.ok()) return got.status();
      parts.push_back(got->Str());
    } else {
      parts.push_back(item.Str());
    }
  }
  return Value(absl::StrJoin(parts, sep.Str()));
}

absl::StatusOr<Value> FilterMap(const Value& v, CallArgs& a) {
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  const Value attribute = Arg(a, 99, "attribute");
  const Value dflt = Arg(a, 99, "default");
  List out;
  if (attribute.is_string()) {
    for (const Value& item : *items) {
      auto got = AttributePath(item, attribute.string());
      if (!got.ok()) return got.status();
      out.push_back(got->is_undefined() && !dflt.is_undefined() ? dflt : *got);
    }
    return Value::MakeList(std::move(out));
  }
  const Value filter = Arg(a, 0, "filter");
  if (!filter.is_string()) return TypeError("map needs a filter name or attribute=");
  for (const Value& item : *items) {
    CallArgs rest;
    rest.positional.assign(a.positional.begin() + 1, a.positional.end());
    auto r = ApplyFilter(filter.string(), item, rest);
    if (!r.ok()) return r.status();
    out.push_back(std::move(*r));
  }
  return Value::MakeList(std::move(out));
}

// `keyed`'s items in order of their keys (stable; the greatest first with
// `reverse`), as a list.
absl::StatusOr<Value> SortedByKey(std::vector<std::pair<Value, Value>> keyed, bool reverse) {
  absl::Status error;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    auto lt = reverse ? Less(y.first, x.first) : Less(x.first, y.first);
    if (!lt.ok()) error = lt.status();
    return lt.ok() && *lt;
  });
  if (!error.ok()) return error;
  List out;
  for (auto& [k, item] : keyed) out.push_back(std::move(item));
  return Value::MakeList(std::move(out));
}

absl::StatusOr<Value> FilterSort(const Value& v, CallArgs& a) {
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  const bool reverse = Arg(a, 0, "reverse").Truthy();
  const bool case_sensitive = Arg(a, 1, "case_sensitive").Truthy();
  const Value attribute = Arg(a, 2, "attribute");
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : *items) {
    auto key = ItemOrAttribute(item, attribute);
    if (!key.ok()) return key.status();
    keyed.emplace_back(SortKey(*key, case_sensitive), item);
  }
  return SortedByKey(std::move(keyed), reverse);
}

// jinja2's dictsort: a mapping's (key, value) pairs sorted by key (or by
// value), strings compared lower-cased unless case_sensitive; stable.
absl::StatusOr<Value> FilterDictsort(const Value& v, CallArgs& a) {
  if (!v.is_mapping()) return TypeError("dictsort needs a mapping, not ", v.TypeName());
  const bool case_sensitive = Arg(a, 0, "case_sensitive").Truthy();
  const Value by = Arg(a, 1, "by", Value("key"));
  const bool reverse = Arg(a, 2, "reverse").Truthy();
  if (!by.is_string() || (by.string() != "key" && by.string() != "value")) {
    return absl::InvalidArgumentError("You can only sort by either 'key' or 'value'");
  }
  const bool by_key = by.string() == "key";
  std::vector<std::pair<Value, Value>> keyed;
  for (const auto& [k, x] : v.dict()) {
    keyed.emplace_back(SortKey(by_key ? Value(k) : x, case_sensitive), Value::MakeList({Value(k), x}, true));
  }
  return SortedByKey(std::move(keyed), reverse);
}

absl::StatusOr<Value> FilterRound(const Value& v, CallArgs& a) {
  if (!v.is_number()) return TypeError("round needs a number, not ", v.TypeName());
  const Value precision = Arg(a, 0, "precision", Value(int64_t{0}));
  const Value method = Arg(a, 1, "method", Value("common"));
  const int p = precision.kind() == K::kInt ? static_cast<int>(std::clamp<int64_t>(precision.integer(), 0, 30)) : 0;
  const std::string m = method.is_string() ? method.string() : "common";
  if (m == "ceil" || m == "floor") {
    const double scale = std::pow(10.0, p);
    return Value((m == "ceil" ? std::ceil(v.number() * scale) : std::floor(v.number() * scale)) / scale);
  }
  // Python's round(x, p): the exact value rounded half to even, which is
  // what glibc's printf does too.
  char buf[400];
  std::snprintf(buf, sizeof(buf), "%.*f", p, v.number());
  return Value(std::strtod(buf, nullptr));
}

absl::StatusOr<Value> FilterSum(const Value& v, CallArgs& a) {
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  const Value attribute = Arg(a, 0, "attribute");
  Value total = Arg(a, 1, "start", Value(int64_t{0}));
  for (const Value& item : *items) {
    auto got = ItemOrAttribute(item, attribute);
    if (!got.ok()) return got.status();
    const Value& x = *got;
    if (!x.is_number() && x.kind() != K::kBool) return TypeError("sum() of a '", x.TypeName(), "'");
    if (!total.is_number() && total.kind() != K::kBool) return TypeError("sum() start must be a number");
    total = total.kind() == K::kFloat || x.kind() == K::kFloat ? Value(total.number() + x.number())
                                                               : Value(total.integer() + x.integer());
  }
  return total;
}

absl::StatusOr<Value> MinMax(const Value& v, CallArgs& a, bool max) {
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  const bool case_sensitive = Arg(a, 0, "case_sensitive").Truthy();
  const Value attribute = Arg(a, 1, "attribute");
  Value best, best_key;
  for (const Value& item : *items) {
    auto got = ItemOrAttribute(item, attribute);
    if (!got.ok()) return got.status();
    const Value key = SortKey(*got, case_sensitive);
    if (!best.is_undefined()) {
      auto better = max ? Less(best_key, key) : Less(key, best_key);
      if (!better.ok()) return better.status();
      if (!*better) continue;
    }
    best = item;
    best_key = key;
  }
  return best.is_undefined() ? Value::Undefined("No aggregated item, sequence was empty.") : best;
}

absl::StatusOr<Value> FilterIndent(const Value& v, CallArgs& a) {
  const Value width = Arg(a, 0, "width", Value(int64_t{4}));
  const bool first = Arg(a, 1, "first").Truthy(), blank = Arg(a, 2, "blank").Truthy();
  const std::string pad = width.is_string() ? width.string()
                                            : std::string(width.kind() == K::kInt ? width.integer() : 4, ' ');
  const std::string s = v.Str();
  std::vector<std::string> lines = absl::StrSplit(s, '\n');
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out.push_back('\n');
    const bool indent = (i > 0 || first) && (blank || !Strip(lines[i]).empty());
    if (indent) out += pad;
    out += lines[i];
  }
  return Value(std::move(out));
}

absl::StatusOr<Value> Number(const Value& v, bool integer, const Value& dflt) {
  switch (v.kind()) {
    case K::kInt:
    case K::kBool: return integer ? Value(v.integer()) : Value(static_cast<double>(v.integer()));
    case K::kFloat: return integer ? Value(static_cast<int64_t>(std::trunc(v.number()))) : v;
    case K::kString: {
      const std::string s(Strip(v.string()));
      char* end = nullptr;
      if (integer) {
        const long long i = std::strtoll(s.c_str(), &end, 10);
        if (!s.empty() && *end == '\0') return Value(static_cast<int64_t>(i));
        const double d = std::strtod(s.c_str(), &end);  // int("1.5") is 1 in Jinja's int filter
        if (!s.empty() && *end == '\0') return Value(static_cast<int64_t>(std::trunc(d)));
      } else {
        const double d = std::strtod(s.c_str(), &end);
        if (!s.empty() && *end == '\0') return Value(d);
      }
      return dflt;
    }
    default: return dflt;
  }
}

const std::map<std::string, FilterFn, std::less<>>& Filters() {
  static const auto* filters = new std::map<std::string, FilterFn, std::less<>>{
      {"abs", [](const Value& v, CallArgs&) -> absl::StatusOr<Value> {
         if (v.kind() == K::kFloat) return Value(std::fabs(v.number()));
         if (v.is_number() || v.kind() == K::kBool) return Value(std::abs(v.integer()));
         return TypeError("bad operand type for abs(): '", v.TypeName(), "'");
       }},
      {"capitalize", [](const Value& v, CallArgs&) -> absl::StatusOr<Value> { return Value(Capitalize(v.Str())); }},
      {"count", [](const Value& v, CallArgs&) -> absl::StatusOr<Value> {
         auto n = Length(v);
         if (!n.ok()) return n.status();
         return Value(*n);
       }},
      {"dictsort", FilterDictsort},
      {"default", [](const Value& v, CallArgs& a) -> absl::StatusOr<Value> {
         const bool boolean = Arg(a, 1, "boolean").Truthy();
         if (v.is_undefined() || (boolean && !v.Truthy())) return Arg(a, 0, "default_value", Value(""));
         return v;
       }},
      {"first", [](const Value& v, CallArgs&) -> absl::StatusOr<Value> {
         auto items = Iterate(v);
         if (!items.ok()) return items.status();
         return items->empty() ? Value::Undefined("No first item, sequence was empty.") : items->front();
       }},
      {"float", [](const Value& v, CallArgs& a) { return Number(v, false, Arg(a, 0, "default", Value(0.0))); }},
      {"indent", FilterIndent},
      {"int", [](const Value& v, CallArgs& a) { return Number(v, true, Arg(a, 0, "default", Value(int64_t{0}))); }},
      {"items", [](const Value& v, CallArgs&) -> absl::StatusOr<Value> {
         if (v.is_undefined()) return Value::MakeList({});
         if (!v.is_mapping()) return TypeError("can only get item pairs from a mapping.");
         List out;
         for (const auto& [k, x] : v.dict()) out.push_back(Value::MakeList({Value(k), x}, true));
         return Value::MakeList(std::move(out));
       }},
      {"join", FilterJoin},
      {"last", [](const Value& v, CallArgs&) -> absl::StatusOr<Value> {
         auto items = Iterate(v);
         if (!items.ok()) return items.status();
         return items->empty() ? Value::Undefined("No last item, sequence was empty.") : items->back();
       }},
      {"list", [](const Value& v, CallArgs&) -> absl::StatusOr<Value> {
         auto items = Iterate(v);
         if (!items.ok()) return items.status();
         return Value::MakeList(std::move(*items));
       }},
      {"lower", [](const Value& v, CallArgs&) -> absl::StatusOr<Value> { return Value(AsciiLower(v.Str())); }},
      {"map", FilterMap},
      {"reject", [](const Value& v, CallArgs& a) { return Select(v, a, false, false); }},
      {"rejectattr", [](const Value& v, CallArgs& a) { return Select(v, a, true, false); }},
      {"replace", [](const Value& v, CallArgs& a) -> absl::StatusOr<Value> {
         CallArgs copy = a;
         return StringMethod(v.Str(), "replace").Call(copy);
       }},
      {"reverse", [](const Value& v, CallArgs&) -> absl::StatusOr<Value> {
         if (v.is_string()) {
           std::vector<std::string> cs = Characters(v.string());
           std::reverse(cs.begin(), cs.end());
           return Value(absl::StrJoin(cs, ""));
         }
         auto items = Iterate(v);
         if (!items.ok()) return items.status();
         std::reverse(items->begin(), items->end());
         return Value::MakeList(std::move(*items));
       }},
      {"round", FilterRound},
      {"safe", [](const Value& v, CallArgs&) -> absl::StatusOr<Value> { return v; }},
      {"select", [](const Value& v, CallArgs& a) { return Select(v, a, false, true); }},
      {"selectattr", [](const Value& v, CallArgs& a) { return Select(v, a, true, true); }},
      {"sort", FilterSort},
      {"string", [](const Value& v, CallArgs&) -> absl::StatusOr<Value> { return Value(v.Str()); }},
      {"sum", FilterSum},
      {"min", [](const Value& v, CallArgs& a) { return MinMax(v, a, false); }},
      {"max", [](const Value& v, CallArgs& a) { return MinMax(v, a, true); }},
      {"title", [](const Value& v, CallArgs&) -> absl::StatusOr<Value> { return Value(JinjaTitle(v.Str())); }},
      {"tojson", FilterTojson},
      {"trim", [](const Value& v, CallArgs& a) { return StripWith(v.Str(), a, true, true); }},
      {"unique", [](const Value& v, CallArgs& a) -> absl::StatusOr<Value> {
         auto items = Iterate(v);
         if (!items.ok()) return items.status();
         const bool case_sensitive = Arg(a, 0, "case_sensitive").Truthy();
         List out, seen;
         for (const Value& item : *items) {
           const Value key = SortKey(item, case_sensitive);
           if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return Equal(s, key); })) continue;
           seen.push_back(key);
           out.push_back(item);
         }
         return Value::MakeList(std::move(out));
       }},
      {"upper", [](const Value& v, CallArgs&) -> absl::StatusOr<Value> { return Value(AsciiUpper(v.Str())); }},
  };
  return *filters;
}

// Aliases jinja2 registers.
absl::string_view FilterName(absl::string_view name) {
  if (name == "d") return "default";
  if (name == "length") return "count";
  if (name == "e" || name == "escape") return "";  // HTML escaping: not in chat templates
  return name;
}

using TestFn = absl::StatusOr<bool> (*)(const Value&, CallArgs&);

absl::StatusOr<bool> Compare(const Value& v, CallArgs& a, absl::string_view op) {
  const Value other = Arg(a, 0, "other");
  if (op == "==") return Equal(v, other);
  if (op == "!=") return !Equal(v, other);
  auto lt = Less(v, other), gt = Less(other, v);
  if (!lt.ok()) return lt.status();
  if (!gt.ok()) return gt.status();
  if (op == "<") return *lt;
  if (op == ">") return *gt;
  if (op == "<=") return !*gt;
  return !*lt;  // >=
}

const std::map<std::string, TestFn, std::less<>>& Tests() {
  static const auto* tests = new std::map<std::string, TestFn, std::less<>>{
      {"defined", [](const Value& v, CallArgs&) -> absl::StatusOr<bool> { return !v.is_undefined(); }},
      {"undefined", [](const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.is_undefined(); }},
      {"none", [](const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.is_none(); }},
      {"boolean", [](const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.kind() == K::kBool; }},
      {"true", [](const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.kind() == K::kBool && v.boolean(); }},
      {"false", [](const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.kind() == K::kBool && !v.boolean(); }},
      {"integer", [](const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.kind() == K::kInt; }},
      {"float", [](const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.kind() == K::kFloat; }},
      {"number", [](const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.is_number() || v.kind() == K::kBool; }},
      {"string", [](const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.is_string(); }},
      {"mapping", [](const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.is_dict(); }},
      {"sequence", [](const Value& v, CallArgs&) -> absl::StatusOr<bool> {
         return v.is_string() || v.is_list() || v.is_dict();
       }},
      {"iterable", [](const Value& v, CallArgs&) -> absl::StatusOr<bool> {
         return v.is_string() || v.is_list() || v.is_dict();
       }},
      {"callable", [](const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.kind() == K::kCallable; }},
      {"odd", [](const Value& v, CallArgs&) -> absl::StatusOr<bool> {
         if (v.kind() != K::kInt) return TypeError("odd needs an integer");
         return v.integer() % 2 != 0;
       }},
      {"even", [](const Value& v, CallArgs&) -> absl::StatusOr<bool> {
         if (v.kind() != K::kInt) return TypeError("even needs an integer");
         return v.integer() % 2 == 0;
       }},
      {"divisibleby", [](const Value& v, CallArgs& a) -> absl::StatusOr<bool> {
         const Value n = Arg(a, 0, "num");
         if (v.kind() != K::kInt || n.kind() != K::kInt || n.integer() == 0) {
           return TypeError("divisibleby needs non-zero integers");
         }
         return v.integer() % n.integer() == 0;
       }},
      {"eq", [](const Value& v, CallArgs& a) { return Compare(v, a, "=="); }},
      {"ne", [](const Value& v, CallArgs& a) { return Compare(v, a, "!="); }},
      {"lt", [](const Value& v, CallArgs& a) { return Compare(v, a, "<"); }},
      {"le", [](const Value& v, CallArgs& a) { return Compare(v, a, "<="); }},
      {"gt", [](const Value& v, CallArgs& a) { return Compare(v, a, ">"); }},
      {"ge", [](const Value& v, CallArgs& a) { return Compare(v, a, ">="); }},
      {"in", [](const Value& v, CallArgs& a) -> absl::StatusOr<bool> {
         const Value seq = Arg(a, 0, "seq");
         if (seq.is_string()) return v.is_string() && seq.string().find(v.string()) != std::string::npos;
         auto items = Iterate(seq);
         if (!items.ok()) return items.status();
         return std::any_of(items->begin(), items->end(), [&](const Value& x) { return Equal(x, v); });
       }},
      {"sameas", [](const Value& v, CallArgs& a) -> absl::StatusOr<bool> {
         const Value other = Arg(a, 0, "other");
         return (v.is_none() && other.is_none()) ||
                (v.kind() == K::kBool && other.kind() == K::kBool && v.boolean() == other.boolean());
       }},
      {"lower", [](const Value& v, CallArgs&) -> absl::StatusOr<bool> {
         return v.is_string() && AsciiLower(v.string()) == v.string();
       }},
      {"upper", [](const Value& v, CallArgs&) -> absl::StatusOr<bool> {
         return v.is_string() && AsciiUpper(v.string()) == v.string();
       }},
  };
  return *tests;
}

absl::string_view TestName(absl::string_view name) {
  if (name == "==" || name == "equalto") return "eq";
  if (name == "!=") return "ne";
  if (name == "<" || name == "lessthan") return "lt";
  if (name == "<=") return "le";
  if (name == ">" || name == "greaterthan") return "gt";
  if (name == ">=") return "ge";
  return name;
}

}  // namespace

absl::Status UndefinedError(const Value& v) {
  const std::string& hint = v.undefined_name();
  return absl::InvalidArgumentError(hint.empty() ? "a value is undefined" : hint);
}

absl::StatusOr<Value> GetAttribute(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case K::kUndefined: return UndefinedError(obj);
    case K::kDict: {
      // A method first, then the key, as jinja2's getattr.
      Value method = DictMethod(obj, name);
      if (!method.is_undefined()) return method;
      if (const Value* v = obj.Find(name)) return *v;
      return Value::Undefined(absl::StrCat("'dict object' has no attribute '", name, "'"));
    }
    case K::kNamespace:
      if (const Value* v = obj.Find(name)) return *v;
      return Value::Undefined(absl::StrCat("'Namespace' object has no attribute '", name, "'"));
    case K::kString: return StringMethod(obj.string(), name);
    default:
      return Value::Undefined(absl::StrCat("'", obj.TypeName(), " object' has no attribute '", name, "'"));
  }
}

absl::StatusOr<Value> GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (obj.is_mapping() && key.is_string()) {
    if (const Value* v = obj.Find(key.string())) return *v;
    if (obj.is_dict()) {
      Value method = DictMethod(obj, key.string());
      if (!method.is_undefined()) return method;
    }
    return Value::Undefined(absl::StrCat("'dict object' has no attribute '", key.string(), "'"));
  }
  if ((obj.is_list() || obj.is_string()) && (key.kind() == K::kInt || key.kind() == K::kBool)) {
    std::vector<std::string> chars;
    if (obj.is_string()) chars = Characters(obj.string());
    const int64_t n = obj.is_list() ? static_cast<int64_t>(obj.list().size()) : static_cast<int64_t>(chars.size());
    int64_t i = key.integer();
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::Undefined(absl::StrCat("index ", key.integer(), " out of range"));
    return obj.is_list() ? obj.list()[i] : Value(chars[i]);
  }
  if (key.is_string()) return GetAttribute(obj, key.string());
  return Value::Undefined(absl::StrCat("'", obj.TypeName(), " object' has no item ", key.Repr()));
}

absl::StatusOr<Value> Slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (!obj.is_list() && !obj.is_string()) return TypeError("'", obj.TypeName(), "' object is not subscriptable");
  auto bound = [](const Value& v, std::optional<int64_t>* out) -> absl::Status {
    if (v.is_undefined() || v.is_none()) return absl::OkStatus();
    if (v.kind() != K::kInt) return TypeError("slice indices must be integers or None");
    *out = v.integer();
    return absl::OkStatus();
  };
  std::optional<int64_t> a, b, c;
  if (auto st = bound(start, &a); !st.ok()) return st;
  if (auto st = bound(stop, &b); !st.ok()) return st;
  if (auto st = bound(step, &c); !st.ok()) return st;
  const int64_t s = c.value_or(1);
  if (s == 0) return TypeError("slice step cannot be zero");
  const std::vector<std::string> chars = obj.is_string() ? Characters(obj.string()) : std::vector<std::string>();
  const int64_t n = obj.is_list() ? static_cast<int64_t>(obj.list().size()) : static_cast<int64_t>(chars.size());
  // Python's PySlice_AdjustIndices.
  auto adjust = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v.has_value()) return dflt;
    int64_t x = *v;
    if (x < 0) x = std::max<int64_t>(x + n, s < 0 ? -1 : 0);
    return std::min<int64_t>(x, s < 0 ? n - 1 : n);
  };
  const int64_t from = adjust(a, s < 0 ? n - 1 : 0), to = adjust(b, s < 0 ? -1 : n);
  List items;
  std::string text;
  for (int64_t i = from; s > 0 ? i < to : i > to; i += s) {
    if (obj.is_list()) {
      items.push_back(obj.list()[i]);
    } else {
      text += chars[i];
    }
  }
  if (obj.is_string()) return Value(std::move(text));
  return Value::MakeList(std::move(items), obj.is_tuple());
}

absl::StatusOr<List> Iterate(const Value& v) {
  switch (v.kind()) {
    case K::kUndefined: return List();
    case K::kList: return v.list();
    case K::kDict: {
      List keys;
      for (const auto& [k, x] : v.dict()) keys.emplace_back(k);
      return keys;
    }
    case K::kString: {
      List chars;
      for (std::string& c : Characters(v.string())) chars.emplace_back(std::move(c));
      return chars;
    }
    default: return TypeError("'", v.TypeName(), "' object is not iterable");
  }
}

bool HasFilter(absl::string_view name) {
  const absl::string_view n = FilterName(name);
  return !n.empty() && Filters().count(n) != 0;
}

bool HasTest(absl::string_view name) { return Tests().count(TestName(name)) != 0; }

absl::StatusOr<Value> ApplyFilter(absl::string_view name, const Value& subject, CallArgs& args) {
  auto it = Filters().find(FilterName(name));
  if (it == Filters().end()) return TypeError("no filter named '", name, "'");
  return it->second(subject, args);
}

absl::StatusOr<bool> ApplyTest(absl::string_view name, const Value& subject, CallArgs& args) {
  auto it = Tests().find(TestName(name));
  if (it == Tests().end()) return TypeError("no test named '", name, "'");
  return it->second(subject, args);
}

absl::StatusOr<Value> Range(CallArgs& a, int64_t max_items) {
  std::vector<int64_t> n;
  for (const Value& v : a.positional) {
    if (v.kind() != K::kInt) return TypeError("range() takes integers, not ", v.TypeName());
    n.push_back(v.integer());
  }
  if (n.empty() || n.size() > 3) return TypeError("range() takes 1 to 3 arguments");
  const int64_t start = n.size() == 1 ? 0 : n[0], stop = n.size() == 1 ? n[0] : n[1],
                step = n.size() == 3 ? n[2] : 1;
  if (step == 0) return TypeError("range() arg 3 must not be zero");
  List out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(out.size()) >= max_items) {
      return absl::ResourceExhaustedError(absl::StrCat("range() of more than ", max_items, " items"));
    }
    out.emplace_back(i);
  }
  return Value::MakeList(std::move(out));
}

Value MakeNamespaceFrom(CallArgs& a) {
  Dict d;
  for (const Value& v : a.positional) {
    if (v.is_dict()) d.insert(d.end(), v.dict().begin(), v.dict().end());
  }
  for (auto& [k, v] : a.keyword) d.emplace_back(k, v);
  return Value::MakeNamespace(std::move(d));
}

}  // namespace flover::jinja
