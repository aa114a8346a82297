#include "chat/jinja.h"

#include <cmath>
#include <ctime>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "chat/jinja_builtins.h"
#include "chat/jinja_parse.h"

namespace flover::jinja {
namespace {

using K = Value::Kind;


// raise_exception's error travels as Aborted, so no line is put before its
// message; Render turns it into InvalidArgument.
constexpr absl::StatusCode kRaised = absl::StatusCode::kAborted;

absl::Status AtLine(const absl::Status& st, int line) {
  if (st.ok() || st.code() == kRaised || absl::StartsWith(st.message(), "chat template line")) return st;
  return absl::Status(st.code(), absl::StrCat("chat template line ", line, ": ", st.message()));
}

// Checks every filter and test a template names exists, so a template that
// uses one Flover lacks is refused when loaded rather than when used.
absl::Status CheckNames(const Expr& e) {
  if (e.kind == Expr::kFilter && !HasFilter(e.name)) {
    return TypeError("chat template line ", e.line, ": filter '", e.name, "' is not supported");
  }
  if (e.kind == Expr::kTest && !HasTest(e.name)) {
    return TypeError("chat template line ", e.line, ": test '", e.name, "' is not supported");
  }
  for (const ExprPtr& a : e.args) {
    if (a != nullptr) {
      if (auto st = CheckNames(*a); !st.ok()) return st;
    }
  }
  for (const auto& [k, a] : e.kwargs) {
    if (auto st = CheckNames(*a); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status CheckNames(const Body& body) {
  for (const Node& n : body) {
    for (const Expr* e : {n.expr.get(), n.filter.get()}) {
      if (e != nullptr) {
        if (auto st = CheckNames(*e); !st.ok()) return st;
      }
    }
    for (const auto& [cond, b] : n.branches) {
      if (auto st = CheckNames(*cond); !st.ok()) return st;
      if (auto st = CheckNames(b); !st.ok()) return st;
    }
    for (const auto& [name, dflt] : n.params) {
      if (dflt != nullptr) {
        if (auto st = CheckNames(*dflt); !st.ok()) return st;
      }
    }
    if (auto st = CheckNames(n.body); !st.ok()) return st;
    if (auto st = CheckNames(n.else_body); !st.ok()) return st;
  }
  return absl::OkStatus();
}

class Renderer {
 public:
  Renderer(const Dict& variables, const RenderLimits& limits)
      : variables_(variables), limits_(limits) {
    frames_.emplace_back();
  }
  // Namespaces may refer to themselves; clearing them frees every cycle.
  ~Renderer() {
    for (const Value& ns : namespaces_) ns.ClearAttributes();
  }

  absl::Status Run(const Body& body, std::string* out) {
    auto flow = Exec(body, out);
    return flow.status();
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  absl::Status Step() {
    if (++steps_ > limits_.max_steps) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the chat template ran more than ", limits_.max_steps, " steps"));
    }
    return absl::OkStatus();
  }

  absl::Status CheckSize(size_t bytes) const {
    if (static_cast<int64_t>(bytes) > limits_.max_output_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the chat template's output passed ", limits_.max_output_bytes, " bytes"));
    }
    return absl::OkStatus();
  }

  // ------------------------------------------------------------ scopes

  Value Lookup(const std::string& name) {
    for (size_t i = frames_.size(); i-- > floor_;) {
      for (const auto& [k, v] : frames_[i]) {
        if (k == name) return v;
      }
    }
    if (floor_ > 0) {
      for (const auto& [k, v] : frames_[0]) {
        if (k == name) return v;
      }
    }
    for (const auto& [k, v] : variables_) {
      if (k == name) return v;
    }
    if (Value g = Global(name); !g.is_undefined()) return g;
    return Value::Undefined(absl::StrCat("'", name, "' is undefined"));
  }

  void Assign(const std::string& name, Value v) {
    Dict& frame = frames_.back();
    for (auto& kv : frame) {
      if (kv.first == name) {
        kv.second = std::move(v);
        return;
      }
    }
    frame.emplace_back(name, std::move(v));
  }

  Value Global(const std::string& name) {
    if (name == "raise_exception") {
      return Value::MakeCallable(name, [](CallArgs& a) -> absl::StatusOr<Value> {
        const std::string message = a.positional.empty() ? "" : a.positional[0].Str();
        return absl::Status(kRaised, message);
      });
    }
    if (name == "range") {
      return Value::MakeCallable(name, [this](CallArgs& a) { return Range(a, limits_.max_steps); });
    }
    if (name == "namespace") {
      return Value::MakeCallable(name, [this](CallArgs& a) -> absl::StatusOr<Value> {
        namespaces_.push_back(MakeNamespaceFrom(a));
        return namespaces_.back();
      });
    }
    if (name == "dict") {
      return Value::MakeCallable(name, [](CallArgs& a) -> absl::StatusOr<Value> {
        Dict d;
        for (auto& [k, v] : a.keyword) d.emplace_back(k, v);
        return Value::MakeDict(std::move(d));
      });
    }
    if (name == "strftime_now") {  // newer transformers add it; Llama 3.1+ templates call it
      return Value::MakeCallable(name, [](CallArgs& a) -> absl::StatusOr<Value> {
        const std::string format = a.positional.empty() ? "%Y-%m-%d" : a.positional[0].Str();
        const std::time_t now = std::time(nullptr);
        std::tm tm;
        localtime_r(&now, &tm);
        char buf[256];
        const size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &tm);
        return Value(std::string(buf, n));
      });
    }
    return Value();
  }

  // ------------------------------------------------------- statements

  absl::StatusOr<Flow> Exec(const Body& body, std::string* out) {
    for (const Node& n : body) {
      auto flow = ExecNode(n, out);
      if (!flow.ok()) return AtLine(flow.status(), n.line);
      if (*flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  absl::Status Append(std::string* out, absl::string_view text) {
    out->append(text.data(), text.size());
    return CheckSize(out->size());
  }

  absl::StatusOr<Flow> ExecNode(const Node& n, std::string* out) {
    if (auto st = Step(); !st.ok()) return st;
    switch (n.kind) {
      case Node::kText:
        if (auto st = Append(out, n.text); !st.ok()) return st;
        return Flow::kNormal;
      case Node::kOutput: {
        auto v = Eval(*n.expr);
        if (!v.ok()) return v.status();
        if (auto st = Append(out, v->Str()); !st.ok()) return st;
        return Flow::kNormal;
      }
      case Node::kIf:
        for (const auto& [cond, body] : n.branches) {
          auto c = Eval(*cond);
          if (!c.ok()) return c.status();
          if (c->Truthy()) return Exec(body, out);
        }
        return Exec(n.else_body, out);
      case Node::kFor: return For(n, out);
      case Node::kSet: {
        auto v = Eval(*n.expr);
        if (!v.ok()) return v.status();
        if (!n.attribute.empty()) {
          const Value ns = Lookup(n.targets[0]);
          if (ns.kind() != K::kNamespace) {
            return TypeError("cannot assign attribute on non-namespace object '", n.targets[0], "'");
          }
          ns.SetAttribute(n.attribute, std::move(*v));
        } else if (auto st = Unpack(n.targets, *v); !st.ok()) {
          return st;
        }
        return Flow::kNormal;
      }
      case Node::kSetBlock: {
        std::string text;
        auto flow = Exec(n.body, &text);
        if (!flow.ok()) return flow.status();
        Assign(n.targets[0], Value(std::move(text)));
        return Flow::kNormal;
      }
      case Node::kMacro: {
        const Node* macro = &n;
        Assign(n.targets[0], Value::MakeCallable(n.targets[0], [this, macro](CallArgs& a) {
                 return CallMacro(*macro, a);
               }));
        return Flow::kNormal;
      }
      case Node::kBreak: return Flow::kBreak;
      case Node::kContinue: return Flow::kContinue;
      case Node::kBody: return Exec(n.body, out);
      case Node::kFilterBlock: {
        std::string text;
        auto flow = Exec(n.body, &text);
        if (!flow.ok()) return flow.status();
        auto args = Args(*n.expr, 1);
        if (!args.ok()) return args.status();
        auto v = ApplyFilter(n.expr->name, Value(std::move(text)), *args);
        if (!v.ok()) return v.status();
        if (auto st = Append(out, v->Str()); !st.ok()) return st;
        return Flow::kNormal;
      }
    }
    return Flow::kNormal;
  }

  // Assigns `v` to one name, or unpacks a sequence into several.
  absl::Status Unpack(const std::vector<std::string>& targets, const Value& v) {
    if (targets.size() == 1) {
      Assign(targets[0], v);
      return absl::OkStatus();
    }
    auto items = Iterate(v);
    if (!items.ok()) return items.status();
    if (items->size() != targets.size()) {
      return TypeError(items->size() < targets.size() ? "not enough" : "too many", " values to unpack (expected ",
                       targets.size(), ", got ", items->size(), ")");
    }
    for (size_t i = 0; i < targets.size(); ++i) Assign(targets[i], (*items)[i]);
    return absl::OkStatus();
  }

  absl::StatusOr<Flow> For(const Node& n, std::string* out) {
    auto iterable = Eval(*n.expr);
    if (!iterable.ok()) return iterable.status();
    auto all = Iterate(*iterable);
    if (!all.ok()) return all.status();
    List items;
    if (n.filter != nullptr) {  // the loop's "if": it sees the targets, not `loop`
      for (const Value& item : *all) {
        frames_.emplace_back();
        absl::Status st = Unpack(n.targets, item);
        absl::StatusOr<Value> keep = st.ok() ? Eval(*n.filter) : absl::StatusOr<Value>(st);
        frames_.pop_back();
        if (!keep.ok()) return keep.status();
        if (keep->Truthy()) items.push_back(item);
      }
    } else {
      items = std::move(*all);
    }
    if (items.empty()) return Exec(n.else_body, out);
    const int64_t length = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < length; ++i) {
      if (auto st = Step(); !st.ok()) return st;  // an iteration costs a step, body or not
      Dict loop = {{"index", Value(i + 1)},
                   {"index0", Value(i)},
                   {"revindex", Value(length - i)},
                   {"revindex0", Value(length - i - 1)},
                   {"first", Value(i == 0)},
                   {"last", Value(i == length - 1)},
                   {"length", Value(length)},
                   {"depth", Value(int64_t{1})},
                   {"depth0", Value(int64_t{0})},
                   {"previtem", i > 0 ? items[i - 1] : Value::Undefined("there is no previous item")},
                   {"nextitem", i + 1 < length ? items[i + 1] : Value::Undefined("there is no next item")}};
      loop.emplace_back("cycle", Value::MakeCallable("loop.cycle", [i](CallArgs& a) -> absl::StatusOr<Value> {
                          if (a.positional.empty()) return TypeError("no items for cycling given");
                          return a.positional[i % a.positional.size()];
                        }));
      frames_.emplace_back();
      absl::Status st = Unpack(n.targets, items[i]);
      if (st.ok()) Assign("loop", Value::MakeDict(std::move(loop)));
      absl::StatusOr<Flow> flow = st.ok() ? Exec(n.body, out) : absl::StatusOr<Flow>(st);
      frames_.pop_back();
      if (!flow.ok()) return flow.status();
      if (*flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  absl::StatusOr<Value> CallMacro(const Node& m, CallArgs& a) {
    if (++depth_ > limits_.max_depth) {
      --depth_;
      return absl::ResourceExhaustedError(
          absl::StrCat("macro calls nested deeper than ", limits_.max_depth));
    }
    if (a.positional.size() > m.params.size()) {
      --depth_;
      return TypeError("macro '", m.targets[0], "' takes not more than ", m.params.size(), " argument(s)");
    }
    // The macro sees the template's top level and its own frame.
    const size_t saved_floor = floor_;
    frames_.emplace_back();
    floor_ = frames_.size() - 1;
    absl::Status st;
    for (size_t i = 0; i < m.params.size() && st.ok(); ++i) {
      const auto& [name, dflt] = m.params[i];
      Value v;
      bool given = i < a.positional.size();
      if (given) v = a.positional[i];
      for (const auto& [k, x] : a.keyword) {
        if (k == name) v = x, given = true;
      }
      if (!given && dflt != nullptr) {
        auto d = Eval(*dflt);
        if (!d.ok()) st = d.status();
        else v = std::move(*d);
      } else if (!given) {
        v = Value::Undefined(absl::StrCat("'", name, "' is undefined"));
      }
      Assign(name, std::move(v));
    }
    for (const auto& [k, x] : a.keyword) {
      bool known = false;
      for (const auto& p : m.params) known = known || p.first == k;
      if (!known && st.ok()) st = TypeError("macro '", m.targets[0], "' takes no keyword argument '", k, "'");
    }
    std::string text;
    if (st.ok()) {
      auto flow = Exec(m.body, &text);
      if (!flow.ok()) st = flow.status();
    }
    frames_.pop_back();
    floor_ = saved_floor;
    --depth_;
    if (!st.ok()) return st;
    return Value(std::move(text));
  }

  // ------------------------------------------------------ expressions

  // The call arguments of `e` from args[first].
  absl::StatusOr<CallArgs> Args(const Expr& e, size_t first) {
    CallArgs a;
    for (size_t i = first; i < e.args.size(); ++i) {
      auto v = Eval(*e.args[i]);
      if (!v.ok()) return v.status();
      a.positional.push_back(std::move(*v));
    }
    for (const auto& [k, x] : e.kwargs) {
      auto v = Eval(*x);
      if (!v.ok()) return v.status();
      a.keyword.emplace_back(k, std::move(*v));
    }
    return a;
  }

  absl::StatusOr<Value> Eval(const Expr& e) {
    if (auto st = Step(); !st.ok()) return st;
    if (++depth_ > 4 * limits_.max_depth) {
      --depth_;
      return absl::ResourceExhaustedError("expressions nested too deeply");
    }
    auto v = EvalInner(e);
    --depth_;
    return v;
  }

  absl::StatusOr<Value> EvalInner(const Expr& e) {
    switch (e.kind) {
      case Expr::kLiteral: return e.value;
      case Expr::kName: return Lookup(e.name);
      case Expr::kList:
      case Expr::kTuple: {
        List items;
        for (const ExprPtr& x : e.args) {
          auto v = Eval(*x);
          if (!v.ok()) return v;
          items.push_back(std::move(*v));
        }
        return Value::MakeList(std::move(items), e.kind == Expr::kTuple);
      }
      case Expr::kDict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          auto k = Eval(*e.args[i]);
          if (!k.ok()) return k;
          if (!k->is_string()) return TypeError("dict keys must be strings here, not ", k->TypeName());
          auto v = Eval(*e.args[i + 1]);
          if (!v.ok()) return v;
          bool replaced = false;
          for (auto& kv : d) {
            if (kv.first == k->string()) kv.second = *v, replaced = true;
          }
          if (!replaced) d.emplace_back(k->string(), std::move(*v));
        }
        return Value::MakeDict(std::move(d));
      }
      case Expr::kGetAttr: {
        auto obj = Eval(*e.args[0]);
        if (!obj.ok()) return obj;
        return GetAttribute(*obj, e.name);
      }
      case Expr::kGetItem: {
        auto obj = Eval(*e.args[0]);
        if (!obj.ok()) return obj;
        auto key = Eval(*e.args[1]);
        if (!key.ok()) return key;
        return GetItem(*obj, *key);
      }
      case Expr::kSlice: {
        auto obj = Eval(*e.args[0]);
        if (!obj.ok()) return obj;
        Value parts[3];
        for (int i = 0; i < 3; ++i) {
          if (e.args[i + 1] == nullptr) continue;
          auto v = Eval(*e.args[i + 1]);
          if (!v.ok()) return v;
          parts[i] = std::move(*v);
        }
        return Slice(*obj, parts[0], parts[1], parts[2]);
      }
      case Expr::kCall: {
        auto callee = Eval(*e.args[0]);
        if (!callee.ok()) return callee;
        if (callee->is_undefined()) return UndefinedError(*callee);
        if (callee->kind() != K::kCallable) return TypeError("'", callee->TypeName(), "' object is not callable");
        auto args = Args(e, 1);
        if (!args.ok()) return args.status();
        return callee->Call(*args);
      }
      case Expr::kFilter: {
        auto subject = Eval(*e.args[0]);
        if (!subject.ok()) return subject;
        auto args = Args(e, 1);
        if (!args.ok()) return args.status();
        auto v = ApplyFilter(e.name, *subject, *args);
        if (v.ok() && v->is_string()) {
          if (auto st = CheckSize(v->string().size()); !st.ok()) return st;
        }
        return v;
      }
      case Expr::kTest: {
        auto subject = Eval(*e.args[0]);
        if (!subject.ok()) return subject;
        auto args = Args(e, 1);
        if (!args.ok()) return args.status();
        auto r = ApplyTest(e.name, *subject, *args);
        if (!r.ok()) return r.status();
        return Value(*r != e.negated);
      }
      case Expr::kNeg:
      case Expr::kPos: {
        auto v = Eval(*e.args[0]);
        if (!v.ok()) return v;
        if (v->is_undefined()) return UndefinedError(*v);
        if (!v->is_number() && v->kind() != K::kBool) {
          return TypeError("bad operand type for unary ", e.kind == Expr::kNeg ? "-" : "+", ": '", v->TypeName(), "'");
        }
        if (e.kind == Expr::kPos) return v->kind() == K::kBool ? Value(v->integer()) : *v;
        return v->kind() == K::kFloat ? Value(-v->number()) : Value(-v->integer());
      }
      case Expr::kNot: {
        auto v = Eval(*e.args[0]);
        if (!v.ok()) return v;
        return Value(!v->Truthy());
      }
      case Expr::kBinary: return Binary(e);
      case Expr::kCompare: {
        auto left = Eval(*e.args[0]);
        if (!left.ok()) return left;
        Value a = std::move(*left);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          auto right = Eval(*e.args[i + 1]);
          if (!right.ok()) return right;
          auto r = CompareOp(e.ops[i], a, *right);
          if (!r.ok()) return r.status();
          if (!*r) return Value(false);
          a = std::move(*right);
        }
        return Value(true);
      }
      case Expr::kCondExpr: {
        auto cond = Eval(*e.args[0]);
        if (!cond.ok()) return cond;
        if (cond->Truthy()) return Eval(*e.args[1]);
        if (e.args.size() > 2) return Eval(*e.args[2]);
        return Value::Undefined("the conditional expression's else branch is undefined");
      }
    }
    return absl::InternalError("unknown expression");
  }

  absl::StatusOr<bool> CompareOp(const std::string& op, const Value& a, const Value& b) {
    if (op == "in" || op == "notin") {
      bool found = false;
      if (b.is_string()) {
        if (!a.is_string()) return TypeError("'in <string>' requires string as left operand, not ", a.TypeName());
        found = b.string().find(a.string()) != std::string::npos;
      } else if (b.is_mapping()) {
        found = a.is_string() && b.Find(a.string()) != nullptr;
      } else if (b.is_list()) {
        for (const Value& x : b.list()) found = found || Equal(x, a);
      } else if (!b.is_undefined()) {
        return TypeError("argument of type '", b.TypeName(), "' is not iterable");
      }
      return op == "in" ? found : !found;
    }
    if (op == "==") return Equal(a, b);
    if (op == "!=") return !Equal(a, b);
    if (a.is_undefined()) return UndefinedError(a);
    if (b.is_undefined()) return UndefinedError(b);
    auto lt = Less(a, b);
    if (!lt.ok()) return lt.status();
    if (op == "<") return *lt;
    auto gt = Less(b, a);
    if (!gt.ok()) return gt.status();
    if (op == ">") return *gt;
    if (op == "<=") return !*gt;
    return !*lt;  // >=
  }

  absl::StatusOr<Value> Binary(const Expr& e) {
    const std::string& op = e.name;
    auto left = Eval(*e.args[0]);
    if (!left.ok()) return left;
    if (op == "and") return left->Truthy() ? Eval(*e.args[1]) : *left;
    if (op == "or") return left->Truthy() ? *left : Eval(*e.args[1]);
    auto right = Eval(*e.args[1]);
    if (!right.ok()) return right;
    const Value& a = *left;
    const Value& b = *right;
    if (op == "~") {
      std::string s = a.Str() + b.Str();
      if (auto st = CheckSize(s.size()); !st.ok()) return st;
      return Value(std::move(s));
    }
    if (a.is_undefined()) return UndefinedError(a);
    if (b.is_undefined()) return UndefinedError(b);
    const bool an = a.is_number() || a.kind() == K::kBool, bn = b.is_number() || b.kind() == K::kBool;
    auto unsupported = [&] {
      return TypeError("unsupported operand type(s) for ", op, ": '", a.TypeName(), "' and '", b.TypeName(), "'");
    };
    if (op == "+") {
      if (a.is_string() && b.is_string()) {
        if (auto st = CheckSize(a.string().size() + b.string().size()); !st.ok()) return st;
        return Value(a.string() + b.string());
      }
      if (a.is_list() && b.is_list()) {
        List items = a.list();
        items.insert(items.end(), b.list().begin(), b.list().end());
        return Value::MakeList(std::move(items), a.is_tuple());
      }
      if (a.is_string()) return TypeError("can only concatenate str (not \"", b.TypeName(), "\") to str");
      if (a.is_list()) return TypeError("can only concatenate list (not \"", b.TypeName(), "\") to list");
    }
    if (op == "*" && (a.is_string() || a.is_list() || b.is_string() || b.is_list())) {
      const Value& seq = a.is_string() || a.is_list() ? a : b;
      const Value& n = a.is_string() || a.is_list() ? b : a;
      if (n.kind() != K::kInt && n.kind() != K::kBool) return unsupported();
      const int64_t times = std::max<int64_t>(0, n.integer());
      const size_t unit = seq.is_string() ? seq.string().size() : seq.list().size();
      if (auto st = CheckSize(static_cast<size_t>(std::min<int64_t>(times, INT32_MAX)) * unit); !st.ok()) return st;
      if (seq.is_string()) {
        std::string s;
        for (int64_t i = 0; i < times; ++i) s += seq.string();
        return Value(std::move(s));
      }
      List items;
      for (int64_t i = 0; i < times; ++i) items.insert(items.end(), seq.list().begin(), seq.list().end());
      return Value::MakeList(std::move(items), seq.is_tuple());
    }
    if (!an || !bn) return unsupported();
    const bool real = a.kind() == K::kFloat || b.kind() == K::kFloat;
    if (op == "/") {
      if (b.number() == 0) return TypeError("division by zero");
      return Value(a.number() / b.number());
    }
    if (real) {
      const double x = a.number(), y = b.number();
      if (op == "+") return Value(x + y);
      if (op == "-") return Value(x - y);
      if (op == "*") return Value(x * y);
      if (op == "**") return Value(std::pow(x, y));
      if (y == 0) return TypeError("float division by zero");
      if (op == "//") return Value(std::floor(x / y));
      if (op == "%") {
        double r = std::fmod(x, y);
        if (r != 0 && ((r < 0) != (y < 0))) r += y;
        return Value(r);
      }
      return unsupported();
    }
    const int64_t x = a.integer(), y = b.integer();
    int64_t r = 0;
    if (op == "+" && !__builtin_add_overflow(x, y, &r)) return Value(r);
    if (op == "-" && !__builtin_sub_overflow(x, y, &r)) return Value(r);
    if (op == "*" && !__builtin_mul_overflow(x, y, &r)) return Value(r);
    if (op == "//" || op == "%") {
      if (y == 0) return TypeError("integer division or modulo by zero");
      const int64_t q = x / y - ((x % y != 0) && ((x < 0) != (y < 0)));
      return op == "//" ? Value(q) : Value(x - q * y);
    }
    if (op == "**") {
      if (y < 0) return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
      int64_t p = 1;
      for (int64_t i = 0; i < y; ++i) {
        if (__builtin_mul_overflow(p, x, &p)) return TypeError("integer power too large");
      }
      return Value(p);
    }
    return TypeError("integer ", op, " overflows");
  }

  const Dict& variables_;
  const RenderLimits& limits_;
  std::vector<Dict> frames_;  // frames_[0]: the template's top level
  std::vector<Value> namespaces_;  // every namespace() this render made
  size_t floor_ = 0;          // the lowest frame visible besides frames_[0]
  int64_t steps_ = 0;
  int depth_ = 0;
};

}  // namespace

absl::StatusOr<Template> Template::Parse(absl::string_view source) {
  auto body = ParseTemplate(source);
  if (!body.ok()) return body.status();
  if (auto st = CheckNames(*body); !st.ok()) return st;
  Template t;
  t.body_ = std::make_shared<const Body>(std::move(*body));
  return t;
}

absl::StatusOr<std::string> Template::Render(const Dict& variables, const RenderLimits& limits) const {
  std::string out;
  Renderer r(variables, limits);
  absl::Status st = r.Run(*body_, &out);
  if (st.code() == kRaised) return absl::InvalidArgumentError(st.message());
  if (!st.ok()) return st;
  return out;
}

}  // namespace flover::jinja
