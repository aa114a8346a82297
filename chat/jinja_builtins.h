// What a template can do to a value, as jinja2 in transformers' sandboxed
// environment does it: attribute and item access (methods first for dicts,
// then keys; a missing one is Undefined, reaching into Undefined an error),
// iteration, the filters and tests, and the read-only methods of strings
// (strip, split, startswith, replace, ...) and dicts (items, keys, values,
// get). Mutating methods do not exist, as the sandbox forbids them.
#ifndef FLOVER_CHAT_JINJA_BUILTINS_H_
#define FLOVER_CHAT_JINJA_BUILTINS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "chat/jinja_value.h"

namespace flover::jinja {

// A template's type or value error (InvalidArgument), its message from parts.
template <typename... Parts>
absl::Status TypeError(const Parts&... parts) {
  return absl::InvalidArgumentError(absl::StrCat(parts...));
}

// The error of using Undefined: "'x' is undefined", or what made it.
absl::Status UndefinedError(const Value& undefined);

absl::StatusOr<Value> GetAttribute(const Value& obj, const std::string& name);  // obj.name
absl::StatusOr<Value> GetItem(const Value& obj, const Value& key);              // obj[key]
absl::StatusOr<Value> Slice(const Value& obj, const Value& start, const Value& stop,
                            const Value& step);                                 // obj[a:b:c]
// The items a for loop visits: a list's, a dict's keys, a string's
// characters; Undefined visits none.
absl::StatusOr<List> Iterate(const Value& v);

bool HasFilter(absl::string_view name);
bool HasTest(absl::string_view name);
absl::StatusOr<Value> ApplyFilter(absl::string_view name, const Value& subject, CallArgs& args);
absl::StatusOr<bool> ApplyTest(absl::string_view name, const Value& subject, CallArgs& args);

// range(), namespace(), dict(): the globals beside raise_exception.
absl::StatusOr<Value> Range(CallArgs& args, int64_t max_items);
Value MakeNamespaceFrom(CallArgs& args);

}  // namespace flover::jinja

#endif  // FLOVER_CHAT_JINJA_BUILTINS_H_
