// The values a chat template computes with, as Python and Jinja2 see them:
// None, booleans, integers, floats, strings, lists (and tuples), dicts that
// keep their keys in insertion order, namespaces (the one mutable kind) and
// callables (macros, builtins). Undefined is a value too, as in Jinja2: it
// renders as nothing, is false, iterates as empty, and fails when a
// template reaches into it.
//
// Printing follows Python's str() and repr() (a list prints its items'
// reprs), JSON follows json.dumps(ensure_ascii=False) as transformers'
// tojson filter calls it, and ParseJsonValue keeps what Python's json
// module keeps: key order, and integers apart from floats.
#ifndef FLOVER_CHAT_JINJA_VALUE_H_
#define FLOVER_CHAT_JINJA_VALUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace flover::jinja {

class Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;

// Arguments of a call: positional, then keyword.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};
using Callable = std::function<absl::StatusOr<Value>(CallArgs&)>;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };

  Value() = default;  // undefined
  static Value Undefined(std::string name);
  static Value None();
  Value(bool b);  // NOLINT: values convert implicitly, as in the template language
  Value(int64_t i);   // NOLINT
  Value(int i) : Value(static_cast<int64_t>(i)) {}  // NOLINT
  Value(double d);    // NOLINT
  Value(std::string s);  // NOLINT
  Value(const char* s) : Value(std::string(s)) {}  // NOLINT
  static Value MakeList(List items, bool tuple = false);
  static Value MakeDict(Dict items);
  static Value MakeNamespace(Dict items);
  static Value MakeCallable(std::string name, Callable fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_mapping() const { return kind_ == Kind::kDict || kind_ == Kind::kNamespace; }

  bool boolean() const { return b_; }
  int64_t integer() const { return i_; }
  double number() const { return kind_ == Kind::kFloat ? d_ : static_cast<double>(i_); }
  const std::string& string() const { return *s_; }
  const List& list() const { return *list_; }
  const Dict& dict() const { return *dict_; }  // dicts and namespaces
  const std::string& undefined_name() const { return *s_; }
  const std::string& callable_name() const { return *s_; }
  absl::StatusOr<Value> Call(CallArgs& args) const { return (*fn_)(args); }

  // A key of a dict or namespace, or nullptr.
  const Value* Find(absl::string_view key) const;
  // Sets a namespace's attribute (the only mutation templates can make).
  void SetAttribute(const std::string& key, Value v) const;
  // Drops a namespace's attributes: a namespace can hold itself (ns.x = ns),
  // a cycle of references, so a render clears every namespace it made.
  void ClearAttributes() const {
    if (kind_ == Kind::kNamespace) dict_->clear();
  }

  // Python's truth value (Undefined is false).
  bool Truthy() const;
  // The name of the Python type, for error messages ("str", "list", ...).
  std::string TypeName() const;
  // Python's str() and repr(); Undefined prints as "".
  std::string Str() const;
  std::string Repr() const;
  // json.dumps(value, ensure_ascii=False, indent=indent, sort_keys=...):
  // indent < 0 is none. Undefined and callables cannot be written.
  absl::StatusOr<std::string> ToJson(int indent = -1, bool sort_keys = false,
                                     std::optional<std::pair<std::string, std::string>>
                                         separators = std::nullopt) const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool tuple_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::shared_ptr<const std::string> s_;  // string, undefined's or callable's name
  std::shared_ptr<const List> list_;
  std::shared_ptr<Dict> dict_;  // mutable for namespaces only
  std::shared_ptr<const Callable> fn_;
};

// Python's == between two values (numbers across int and float; lists and
// dicts item by item).
bool Equal(const Value& a, const Value& b);
// Python's <, or InvalidArgument for types it does not order.
absl::StatusOr<bool> Less(const Value& a, const Value& b);

// A JSON document as Python's json.loads reads it (objects keep key order;
// numbers without '.', 'e' or 'E' are integers). `what` names it in errors.
absl::StatusOr<Value> ParseJsonValue(absl::string_view json, absl::string_view what);

// Python's repr() of a float ("1.0", "0.1", "1e-05", "inf").
std::string PythonFloat(double d);

}  // namespace flover::jinja

#endif  // FLOVER_CHAT_JINJA_VALUE_H_
