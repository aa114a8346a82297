#include "chat/jinja_parse.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chat/jinja_text.h"

namespace flover::jinja {
namespace {

struct Token {
  enum Type { kName, kString, kInt, kFloat, kOp } type;
  std::string text;
  Value value;
  int line;
};

// One piece of the template: text, or a tag's tokens.
struct Item {
  enum Type { kText, kVariable, kBlock } type;
  std::string text;
  std::vector<Token> tokens;
  int line;
};

class Lexer {
 public:
  explicit Lexer(std::string source) : s_(std::move(source)) {}

  absl::StatusOr<std::vector<Item>> Run() {
    std::vector<Item> items;
    size_t pos = 0;
    bool line_starting = true;
    while (pos < s_.size()) {
      size_t tag = pos;
      while (tag + 1 < s_.size() &&
             !(s_[tag] == '{' && (s_[tag + 1] == '{' || s_[tag + 1] == '%' || s_[tag + 1] == '#'))) {
        ++tag;
      }
      if (tag + 1 >= s_.size()) {
        Text(&items, absl::string_view(s_).substr(pos), pos);
        break;
      }
      const char kind = s_[tag + 1];
      const char sign = Sign(tag + 2);
      absl::string_view text = absl::string_view(s_).substr(pos, tag - pos);
      if (sign == '-') {
        text = RStrip(text);
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: white space from the line's start to a block or comment.
        const size_t l_pos = text.rfind('\n') + 1;  // npos + 1 == 0
        const absl::string_view tail = text.substr(l_pos);
        if ((l_pos > 0 || line_starting) && !tail.empty() && LeadingSpace(tail) == tail.size()) {
          text = text.substr(0, l_pos);
        }
      }
      Text(&items, text, pos);
      pos = tag + 2 + (sign != 0 ? 1 : 0);
      size_t end = 0;
      if (kind == '#') {
        const size_t close = s_.find("#}", pos);
        if (close == std::string::npos) return Error(tag, "missing end of comment tag");
        end = After(close + 2, close > pos ? Sign(close - 1) : 0, true);
      } else {
        Item item{kind == '{' ? Item::kVariable : Item::kBlock, "", {}, LineAt(tag)};
        auto delim = Tokens(pos, kind == '%', &item.tokens);
        if (!delim.ok()) return delim.status();
        const char end_sign = Sign(*delim);
        end = After(*delim + (end_sign != 0 ? 1 : 0) + 2, end_sign, kind == '%');
        if (kind == '%' && item.tokens.size() == 1 && item.tokens[0].text == "raw") {
          auto raw = Raw(end, &items);
          if (!raw.ok()) return raw.status();
          end = *raw;
        } else {
          items.push_back(std::move(item));
        }
      }
      line_starting = end > 0 && s_[end - 1] == '\n';
      pos = end;
    }
    return items;
  }

 private:
  // The line (from 1) of byte `pos`; positions are asked in order, mostly.
  int LineAt(size_t pos) {
    if (pos < line_pos_) line_pos_ = 0, line_ = 1;
    for (; line_pos_ < pos && line_pos_ < s_.size(); ++line_pos_) {
      if (s_[line_pos_] == '\n') ++line_;
    }
    return line_;
  }

  absl::Status Error(size_t pos, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("chat template line ", LineAt(pos), ": ", why));
  }

  char Sign(size_t at) const {
    return at < s_.size() && (s_[at] == '-' || s_[at] == '+') ? s_[at] : 0;
  }

  void Text(std::vector<Item>* items, absl::string_view text, size_t pos) {
    if (!text.empty()) items->push_back({Item::kText, std::string(text), {}, LineAt(pos)});
  }

  // Where the template goes on after an end delimiter that ends just before
  // `after`, with `sign` before it: "-" eats the white space after it; a
  // block's or comment's plain end eats one newline (trim_blocks).
  size_t After(size_t after, char sign, bool block) const {
    if (sign == '-') return after + LeadingSpace(absl::string_view(s_).substr(after));
    if (block && sign != '+' && after < s_.size() && s_[after] == '\n') return after + 1;
    return after;
  }

  // Lexes a tag's tokens from *pos to its end delimiter (at bracket depth
  // 0); returns where the delimiter starts (its sign included).
  absl::StatusOr<size_t> Tokens(size_t pos, bool block, std::vector<Token>* out) {
    int depth = 0;
    size_t i = pos;
    while (true) {
      size_t n = 0;
      while (i < s_.size() && SpaceAt(s_, i, &n)) i += n;
      if (i >= s_.size()) return Error(pos, block ? "missing end of block tag '%}'" : "missing end of '}}'");
      const absl::string_view rest = absl::string_view(s_).substr(i);
      if (depth == 0) {
        if (block && (absl::StartsWith(rest, "-%}") || absl::StartsWith(rest, "+%}") ||
                      absl::StartsWith(rest, "%}"))) {
          return i;
        }
        if (!block && (absl::StartsWith(rest, "-}}") || absl::StartsWith(rest, "}}"))) return i;
      }
      Token t{Token::kOp, "", Value(), LineAt(i)};
      const char c = s_[i];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t j = i;
        while (j < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[j])) || s_[j] == '_')) ++j;
        t.type = Token::kName;
        t.text = s_.substr(i, j - i);
        i = j;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t j = i;
        auto digits = [&] {
          while (j < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[j])) || s_[j] == '_')) ++j;
        };
        digits();
        bool real = false;
        if (j + 1 < s_.size() && s_[j] == '.' && std::isdigit(static_cast<unsigned char>(s_[j + 1]))) {
          ++j;
          digits();
          real = true;
        }
        if (j < s_.size() && (s_[j] == 'e' || s_[j] == 'E')) {
          size_t k = j + 1;
          if (k < s_.size() && (s_[k] == '+' || s_[k] == '-')) ++k;
          if (k < s_.size() && std::isdigit(static_cast<unsigned char>(s_[k]))) {
            j = k;
            digits();
            real = true;
          }
        }
        std::string text;
        for (size_t k = i; k < j; ++k) {
          if (s_[k] != '_') text.push_back(s_[k]);
        }
        t.text = s_.substr(i, j - i);
        if (real) {
          t.type = Token::kFloat;
          t.value = Value(std::strtod(text.c_str(), nullptr));
        } else {
          t.type = Token::kInt;
          errno = 0;
          const long long v = std::strtoll(text.c_str(), nullptr, 10);
          if (errno == ERANGE) return Error(i, absl::StrCat("integer ", text, " is too large"));
          t.value = Value(static_cast<int64_t>(v));
        }
        i = j;
      } else if (c == '\'' || c == '"') {
        auto s = String(&i);
        if (!s.ok()) return s.status();
        t.type = Token::kString;
        t.value = Value(std::move(*s));
      } else {
        static const char* kOps[] = {"**", "//", "==", "!=", ">=", "<=", "+", "-", "*", "/", "%",
                                     "~",  "<",  ">",  "=",  "(",  ")",  "[", "]", "{", "}", ",",
                                     ".",  ":",  "|",  ";"};
        for (const char* op : kOps) {
          if (absl::StartsWith(rest, op)) {
            t.text = op;
            break;
          }
        }
        if (t.text.empty()) return Error(i, absl::StrCat("unexpected character '", std::string(1, c), "'"));
        if (t.text == "(" || t.text == "[" || t.text == "{") ++depth;
        if (t.text == ")" || t.text == "]" || t.text == "}") {
          if (depth == 0) return Error(i, absl::StrCat("unexpected '", t.text, "'"));
          --depth;
        }
        i += t.text.size();
      }
      out->push_back(std::move(t));
    }
  }

  // A quoted string literal at *i, its escapes decoded as Python's
  // "unicode-escape" codec does (an unknown escape keeps its backslash).
  absl::StatusOr<std::string> String(size_t* i) {
    const char quote = s_[*i];
    const size_t start = *i;
    std::string out;
    size_t j = *i + 1;
    while (true) {
      if (j >= s_.size()) return Error(start, "unterminated string");
      const char c = s_[j];
      if (c == quote) break;
      if (c != '\\' || j + 1 >= s_.size()) {
        out.push_back(c);
        ++j;
        continue;
      }
      const char e = s_[j + 1];
      j += 2;
      auto hex = [&](int digits) -> absl::StatusOr<uint32_t> {
        uint32_t v = 0;
        for (int k = 0; k < digits; ++k, ++j) {
          if (j >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[j]))) {
            return Error(start, "truncated escape in a string");
          }
          const char h = s_[j];
          v = v * 16 + (std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        return v;
      };
      switch (e) {
        case 'n': out.push_back('\n'); break;
        case 't': out.push_back('\t'); break;
        case 'r': out.push_back('\r'); break;
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'v': out.push_back('\v'); break;
        case '\n': break;  // a line continuation
        case 'x':
        case 'u':
        case 'U': {
          auto v = hex(e == 'x' ? 2 : e == 'u' ? 4 : 8);
          if (!v.ok()) return v.status();
          if (*v > 0x10FFFF || (*v >= 0xD800 && *v <= 0xDFFF)) {
            return Error(start, "escape is not a character");
          }
          std::string utf8;
          const uint32_t cp = *v;
          if (cp < 0x80) {
            utf8.push_back(static_cast<char>(cp));
          } else if (cp < 0x800) {
            utf8 = {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
          } else if (cp < 0x10000) {
            utf8 = {static_cast<char>(0xE0 | (cp >> 12)), static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
                    static_cast<char>(0x80 | (cp & 0x3F))};
          } else {
            utf8 = {static_cast<char>(0xF0 | (cp >> 18)), static_cast<char>(0x80 | ((cp >> 12) & 0x3F)),
                    static_cast<char>(0x80 | ((cp >> 6) & 0x3F)), static_cast<char>(0x80 | (cp & 0x3F))};
          }
          out += utf8;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {  // octal, up to three digits
            int v = e - '0', k = 1;
            while (k < 3 && j < s_.size() && s_[j] >= '0' && s_[j] <= '7') v = v * 8 + (s_[j++] - '0'), ++k;
            out.push_back(static_cast<char>(v));
          } else {
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    *i = j + 1;
    return out;
  }

  // After {% raw %}: the text up to {% endraw %}, then where to go on.
  absl::StatusOr<size_t> Raw(size_t from, std::vector<Item>* items) {
    for (size_t at = s_.find("{%", from); at != std::string::npos; at = s_.find("{%", at + 2)) {
      size_t k = at + 2;
      const char sign = Sign(k);
      if (sign != 0) ++k;
      k += LeadingSpace(absl::string_view(s_).substr(k));
      if (s_.compare(k, 6, "endraw") != 0) continue;
      k += 6;
      k += LeadingSpace(absl::string_view(s_).substr(k));
      const char end_sign = Sign(k);
      if (end_sign != 0) ++k;
      if (s_.compare(k, 2, "%}") != 0) continue;
      absl::string_view text = absl::string_view(s_).substr(from, at - from);
      if (sign == '-') text = RStrip(text);
      Text(items, text, from);
      return After(k + 2, end_sign, true);
    }
    return Error(from, "missing end of raw directive");
  }

  std::string s_;
  size_t line_pos_ = 0;  // LineAt's cursor
  int line_ = 1;
};

// ------------------------------------------------------------------ parser

class Parser {
 public:
  explicit Parser(std::vector<Item> items) : items_(std::move(items)) {}

  absl::StatusOr<Body> Run() {
    std::string end;
    auto body = ParseBody({}, &end);
    if (!body.ok()) return body.status();
    return body;
  }

 private:
  template <typename... Parts>
  absl::Status Error(int line, const Parts&... parts) const {
    return absl::InvalidArgumentError(absl::StrCat("chat template line ", line, ": ", parts...));
  }

  // Statements until a block tag whose first word is in `ends` (its name in
  // *end, its tokens left in tokens_); an end of input where one was wanted
  // is an error.
  absl::StatusOr<Body> ParseBody(const std::set<std::string>& ends, std::string* end) {
    Body body;
    while (at_ < items_.size()) {
      Item& item = items_[at_];
      if (item.type == Item::kText) {
        body.push_back(Node{Node::kText, item.line, std::move(item.text)});
        ++at_;
        continue;
      }
      tokens_ = std::move(item.tokens);
      pos_ = 0;
      line_ = item.line;
      ++at_;
      if (item.type == Item::kVariable) {
        Node n{Node::kOutput, line_};
        auto e = Tuple(true);
        if (!e.ok()) return e.status();
        n.expr = std::move(*e);
        if (auto st = ExpectEnd(); !st.ok()) return st;
        body.push_back(std::move(n));
        continue;
      }
      if (tokens_.empty() || tokens_[0].type != Token::kName) return Error(line_, "expected a statement");
      const std::string word = tokens_[0].text;
      if (ends.count(word) != 0) {
        *end = word;
        return body;
      }
      pos_ = 1;
      auto node = Statement(word);
      if (!node.ok()) return node.status();
      body.push_back(std::move(*node));
    }
    if (!ends.empty()) {
      return Error(line_, "unexpected end of template, expected ",
                   absl::StrJoin(std::vector<std::string>(ends.begin(), ends.end()), " or "));
    }
    return body;
  }

  // A block's body up to one of `ends` (its name in *end), then that end
  // tag's own end ("%}").
  absl::Status BlockBody(const std::set<std::string>& ends, Body* out, std::string* end) {
    auto body = ParseBody(ends, end);
    if (!body.ok()) return body.status();
    *out = std::move(*body);
    pos_ = 1;
    return ExpectEnd();
  }

  absl::StatusOr<Node> Statement(const std::string& word) {
    const int line = line_;
    Node n{Node::kText, line};
    std::string end;
    if (word == "if") {
      n.kind = Node::kIf;
      auto cond = Expression();
      if (!cond.ok()) return cond.status();
      if (auto st = ExpectEnd(); !st.ok()) return st;
      ExprPtr c = std::move(*cond);
      while (true) {
        auto body = ParseBody({"elif", "else", "endif"}, &end);
        if (!body.ok()) return body.status();
        n.branches.emplace_back(std::move(c), std::move(*body));
        pos_ = 1;
        if (end == "elif") {
          auto next = Expression();
          if (!next.ok()) return next.status();
          c = std::move(*next);
          if (auto st = ExpectEnd(); !st.ok()) return st;
          continue;
        }
        if (auto st = ExpectEnd(); !st.ok()) return st;
        if (end == "else") {
          if (auto st = BlockBody({"endif"}, &n.else_body, &end); !st.ok()) return st;
        }
        return n;
      }
    }
    if (word == "for") {
      n.kind = Node::kFor;
      do {
        auto name = ExpectName();
        if (!name.ok()) return name.status();
        n.targets.push_back(*name);
      } while (SkipOp(","));
      if (!SkipName("in")) return Error(line, "expected 'in' in a for loop");
      auto iter = Tuple(false);
      if (!iter.ok()) return iter.status();
      n.expr = std::move(*iter);
      if (SkipName("if")) {
        auto filter = Expression();
        if (!filter.ok()) return filter.status();
        n.filter = std::move(*filter);
      }
      if (PeekName("recursive")) return Error(line, "recursive loops are not supported");
      if (auto st = ExpectEnd(); !st.ok()) return st;
      if (auto st = BlockBody({"else", "endfor"}, &n.body, &end); !st.ok()) return st;
      if (end == "else") {
        if (auto st = BlockBody({"endfor"}, &n.else_body, &end); !st.ok()) return st;
      }
      return n;
    }
    if (word == "set") {
      auto name = ExpectName();
      if (!name.ok()) return name.status();
      n.targets.push_back(*name);
      if (SkipOp(".")) {
        auto attr = ExpectName();
        if (!attr.ok()) return attr.status();
        n.attribute = *attr;
      } else {
        while (SkipOp(",")) {
          auto more = ExpectName();
          if (!more.ok()) return more.status();
          n.targets.push_back(*more);
        }
      }
      if (SkipOp("=")) {
        n.kind = Node::kSet;
        auto value = Tuple(true);
        if (!value.ok()) return value.status();
        n.expr = std::move(*value);
        if (auto st = ExpectEnd(); !st.ok()) return st;
        return n;
      }
      if (n.targets.size() != 1 || !n.attribute.empty()) return Error(line, "expected '=' in set");
      n.kind = Node::kSetBlock;
      if (auto st = ExpectEnd(); !st.ok()) return st;
      if (auto st = BlockBody({"endset"}, &n.body, &end); !st.ok()) return st;
      return n;
    }
    if (word == "macro") {
      n.kind = Node::kMacro;
      auto name = ExpectName();
      if (!name.ok()) return name.status();
      n.targets.push_back(*name);
      if (!SkipOp("(")) return Error(line, "expected '(' after the macro's name");
      while (!SkipOp(")")) {
        if (!n.params.empty() && !SkipOp(",")) return Error(line, "expected ',' between parameters");
        auto param = ExpectName();
        if (!param.ok()) return param.status();
        ExprPtr dflt;
        if (SkipOp("=")) {
          auto e = Expression();
          if (!e.ok()) return e.status();
          dflt = std::move(*e);
        }
        n.params.emplace_back(*param, std::move(dflt));
      }
      if (auto st = ExpectEnd(); !st.ok()) return st;
      if (auto st = BlockBody({"endmacro"}, &n.body, &end); !st.ok()) return st;
      return n;
    }
    if (word == "break" || word == "continue") {
      n.kind = word == "break" ? Node::kBreak : Node::kContinue;
      if (auto st = ExpectEnd(); !st.ok()) return st;
      return n;
    }
    if (word == "generation") {  // transformers' assistant-mask extension
      n.kind = Node::kBody;
      if (auto st = ExpectEnd(); !st.ok()) return st;
      if (auto st = BlockBody({"endgeneration"}, &n.body, &end); !st.ok()) return st;
      return n;
    }
    if (word == "filter") {
      n.kind = Node::kFilterBlock;
      auto filter = FilterCall(nullptr);
      if (!filter.ok()) return filter.status();
      n.expr = std::move(*filter);
      if (auto st = ExpectEnd(); !st.ok()) return st;
      if (auto st = BlockBody({"endfilter"}, &n.body, &end); !st.ok()) return st;
      return n;
    }
    return Error(line, "unknown or misplaced tag '", word, "'");
  }

  // ------------------------------------------------------------ tokens

  bool AtEnd() const { return pos_ >= tokens_.size(); }
  const Token* Peek(size_t ahead = 0) const {
    return pos_ + ahead < tokens_.size() ? &tokens_[pos_ + ahead] : nullptr;
  }
  bool PeekOp(absl::string_view op, size_t ahead = 0) const {
    const Token* t = Peek(ahead);
    return t != nullptr && t->type == Token::kOp && t->text == op;
  }
  bool PeekName(absl::string_view name, size_t ahead = 0) const {
    const Token* t = Peek(ahead);
    return t != nullptr && t->type == Token::kName && t->text == name;
  }
  bool SkipOp(absl::string_view op) {
    if (!PeekOp(op)) return false;
    ++pos_;
    return true;
  }
  bool SkipName(absl::string_view name) {
    if (!PeekName(name)) return false;
    ++pos_;
    return true;
  }
  absl::StatusOr<std::string> ExpectName() {
    const Token* t = Peek();
    if (t == nullptr || t->type != Token::kName) return Error(line_, "expected a name, got ", Describe(t));
    ++pos_;
    return t->text;
  }
  absl::Status ExpectEnd() const {
    if (!AtEnd()) return Error(line_, "unexpected ", Describe(Peek()));
    return absl::OkStatus();
  }
  static std::string Describe(const Token* t) {
    if (t == nullptr) return "end of tag";
    if (t->type == Token::kString) return "string";
    return absl::StrCat("'", t->text, "'");
  }

  // ------------------------------------------------------- expressions

  ExprPtr Make(Expr::Kind kind, std::vector<ExprPtr> args = {}) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line_;
    e->args = std::move(args);
    return e;
  }

  // A tuple of expressions separated by commas, or one expression.
  absl::StatusOr<ExprPtr> Tuple(bool with_condexpr) {
    std::vector<ExprPtr> items;
    bool comma = false;
    while (true) {
      if (!items.empty() && (AtEnd() || PeekOp(")") || PeekName("if"))) break;
      auto e = with_condexpr ? Expression() : Or();
      if (!e.ok()) return e;
      items.push_back(std::move(*e));
      if (!SkipOp(",")) break;
      comma = true;
    }
    if (!comma) return std::move(items[0]);
    return Make(Expr::kTuple, std::move(items));
  }

  absl::StatusOr<ExprPtr> Expression() {
    auto e = Or();
    if (!e.ok()) return e;
    ExprPtr expr = std::move(*e);
    while (SkipName("if")) {
      auto cond = Or();
      if (!cond.ok()) return cond;
      std::vector<ExprPtr> args;
      args.push_back(std::move(*cond));
      args.push_back(std::move(expr));
      if (SkipName("else")) {
        auto other = Expression();
        if (!other.ok()) return other;
        args.push_back(std::move(*other));
      }
      expr = Make(Expr::kCondExpr, std::move(args));
    }
    return expr;
  }

  template <typename Next>
  absl::StatusOr<ExprPtr> LeftAssoc(const std::vector<const char*>& ops, bool names, Next next) {
    auto left = next();
    if (!left.ok()) return left;
    ExprPtr e = std::move(*left);
    while (true) {
      const char* op = nullptr;
      for (const char* o : ops) {
        if (names ? PeekName(o) : PeekOp(o)) op = o;
      }
      if (op == nullptr) return e;
      ++pos_;
      auto right = next();
      if (!right.ok()) return right;
      std::vector<ExprPtr> args;
      args.push_back(std::move(e));
      args.push_back(std::move(*right));
      e = Make(Expr::kBinary, std::move(args));
      e->name = op;
    }
  }

  absl::StatusOr<ExprPtr> Or() { return LeftAssoc({"or"}, true, [&] { return And(); }); }
  absl::StatusOr<ExprPtr> And() { return LeftAssoc({"and"}, true, [&] { return Not(); }); }
  absl::StatusOr<ExprPtr> Not() {
    if (SkipName("not")) {
      auto e = Not();
      if (!e.ok()) return e;
      std::vector<ExprPtr> args;
      args.push_back(std::move(*e));
      return Make(Expr::kNot, std::move(args));
    }
    return Compare();
  }
  absl::StatusOr<ExprPtr> Compare() {
    auto first = Math1();
    if (!first.ok()) return first;
    std::vector<ExprPtr> args;
    args.push_back(std::move(*first));
    std::vector<std::string> ops;
    while (true) {
      std::string op;
      for (const char* o : {"==", "!=", "<", "<=", ">", ">="}) {
        if (PeekOp(o)) op = o;
      }
      if (!op.empty()) {
        ++pos_;
      } else if (SkipName("in")) {
        op = "in";
      } else if (PeekName("not") && PeekName("in", 1)) {
        pos_ += 2;
        op = "notin";
      } else {
        break;
      }
      auto next = Math1();
      if (!next.ok()) return next;
      args.push_back(std::move(*next));
      ops.push_back(op);
    }
    if (ops.empty()) return std::move(args[0]);
    ExprPtr e = Make(Expr::kCompare, std::move(args));
    e->ops = std::move(ops);
    return e;
  }
  absl::StatusOr<ExprPtr> Math1() { return LeftAssoc({"+", "-"}, false, [&] { return Concat(); }); }
  absl::StatusOr<ExprPtr> Concat() { return LeftAssoc({"~"}, false, [&] { return Math2(); }); }
  absl::StatusOr<ExprPtr> Math2() {
    return LeftAssoc({"*", "/", "//", "%"}, false, [&] { return Pow(); });
  }
  absl::StatusOr<ExprPtr> Pow() { return LeftAssoc({"**"}, false, [&] { return Unary(true); }); }

  absl::StatusOr<ExprPtr> Unary(bool with_filter) {
    ExprPtr node;
    if (PeekOp("-") || PeekOp("+")) {
      const bool neg = PeekOp("-");
      ++pos_;
      auto inner = Unary(false);
      if (!inner.ok()) return inner;
      std::vector<ExprPtr> args;
      args.push_back(std::move(*inner));
      node = Make(neg ? Expr::kNeg : Expr::kPos, std::move(args));
    } else {
      auto p = Primary();
      if (!p.ok()) return p;
      node = std::move(*p);
    }
    auto post = Postfix(std::move(node));
    if (!post.ok() || !with_filter) return post;
    return FilterExpr(std::move(*post));
  }

  absl::StatusOr<ExprPtr> Primary() {
    const Token* t = Peek();
    if (t == nullptr) return Error(line_, "unexpected end of expression");
    ++pos_;
    switch (t->type) {
      case Token::kName: {
        if (t->text == "true" || t->text == "True" || t->text == "false" || t->text == "False") {
          auto e = Make(Expr::kLiteral);
          e->value = Value(t->text == "true" || t->text == "True");
          return e;
        }
        if (t->text == "none" || t->text == "None") {
          auto e = Make(Expr::kLiteral);
          e->value = Value::None();
          return e;
        }
        auto e = Make(Expr::kName);
        e->name = t->text;
        return e;
      }
      case Token::kString: {
        std::string s = t->value.string();
        while (Peek() != nullptr && Peek()->type == Token::kString) s += tokens_[pos_++].value.string();
        auto e = Make(Expr::kLiteral);
        e->value = Value(std::move(s));
        return e;
      }
      case Token::kInt:
      case Token::kFloat: {
        auto e = Make(Expr::kLiteral);
        e->value = t->value;
        return e;
      }
      case Token::kOp:
        if (t->text == "(") {
          if (SkipOp(")")) return Make(Expr::kTuple);
          auto inner = Tuple(true);
          if (!inner.ok()) return inner;
          if (!SkipOp(")")) return Error(line_, "expected ')'");
          return inner;
        }
        if (t->text == "[") {
          std::vector<ExprPtr> items;
          while (!SkipOp("]")) {
            if (!items.empty() && !SkipOp(",")) return Error(line_, "expected ',' or ']'");
            if (SkipOp("]")) break;  // a trailing comma
            auto e = Expression();
            if (!e.ok()) return e;
            items.push_back(std::move(*e));
          }
          return Make(Expr::kList, std::move(items));
        }
        if (t->text == "{") {
          std::vector<ExprPtr> items;  // key, value, key, value, ...
          while (!SkipOp("}")) {
            if (!items.empty() && !SkipOp(",")) return Error(line_, "expected ',' or '}'");
            if (SkipOp("}")) break;
            auto k = Expression();
            if (!k.ok()) return k;
            if (!SkipOp(":")) return Error(line_, "expected ':' in a dict");
            auto v = Expression();
            if (!v.ok()) return v;
            items.push_back(std::move(*k));
            items.push_back(std::move(*v));
          }
          return Make(Expr::kDict, std::move(items));
        }
        return Error(line_, "unexpected '", t->text, "'");
    }
    return Error(line_, "unexpected token");
  }

  absl::StatusOr<ExprPtr> Postfix(ExprPtr node) {
    while (true) {
      if (SkipOp(".")) {
        const Token* t = Peek();
        if (t != nullptr && t->type == Token::kInt) {  // x.0 is x[0]
          ++pos_;
          auto index = Make(Expr::kLiteral);
          index->value = t->value;
          std::vector<ExprPtr> args;
          args.push_back(std::move(node));
          args.push_back(std::move(index));
          node = Make(Expr::kGetItem, std::move(args));
          continue;
        }
        auto name = ExpectName();
        if (!name.ok()) return name.status();
        std::vector<ExprPtr> args;
        args.push_back(std::move(node));
        node = Make(Expr::kGetAttr, std::move(args));
        node->name = *name;
      } else if (SkipOp("[")) {
        auto sub = Subscript(std::move(node));
        if (!sub.ok()) return sub;
        node = std::move(*sub);
      } else if (PeekOp("(")) {
        auto call = Call(std::move(node));
        if (!call.ok()) return call;
        node = std::move(*call);
      } else {
        return node;
      }
    }
  }

  // After "[": an index or a slice, then "]".
  absl::StatusOr<ExprPtr> Subscript(ExprPtr target) {
    std::vector<ExprPtr> parts;  // start, stop, step of a slice
    bool slice = false;
    ExprPtr current;
    while (true) {
      if (PeekOp(":")) {
        ++pos_;
        parts.push_back(std::move(current));
        slice = true;
        continue;
      }
      if (PeekOp("]")) {
        ++pos_;
        break;
      }
      if (current != nullptr) return Error(line_, "expected ':' or ']'");
      auto e = Expression();
      if (!e.ok()) return e;
      current = std::move(*e);
    }
    std::vector<ExprPtr> args;
    args.push_back(std::move(target));
    if (!slice) {
      if (current == nullptr) return Error(line_, "empty subscript");
      args.push_back(std::move(current));
      return Make(Expr::kGetItem, std::move(args));
    }
    parts.push_back(std::move(current));
    if (parts.size() > 3) return Error(line_, "a slice has at most three parts");
    parts.resize(3);
    for (ExprPtr& p : parts) args.push_back(std::move(p));
    return Make(Expr::kSlice, std::move(args));
  }

  // Call arguments "( a, b, k=v )" into `e` (after its existing args).
  absl::Status CallArgs(Expr* e) {
    if (!SkipOp("(")) return Error(line_, "expected '('");
    bool first = true;
    while (!SkipOp(")")) {
      if (!first && !SkipOp(",")) return Error(line_, "expected ',' or ')' in a call");
      first = false;
      if (SkipOp(")")) break;
      if (PeekOp("*") || PeekOp("**")) return Error(line_, "*args and **kwargs are not supported");
      if (Peek() != nullptr && Peek()->type == Token::kName && PeekOp("=", 1)) {
        const std::string key = Peek()->text;
        pos_ += 2;
        auto v = Expression();
        if (!v.ok()) return v.status();
        e->kwargs.emplace_back(key, std::move(*v));
        continue;
      }
      if (!e->kwargs.empty()) return Error(line_, "a positional argument after keyword arguments");
      auto v = Expression();
      if (!v.ok()) return v.status();
      e->args.push_back(std::move(*v));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<ExprPtr> Call(ExprPtr callee) {
    std::vector<ExprPtr> args;
    args.push_back(std::move(callee));
    ExprPtr e = Make(Expr::kCall, std::move(args));
    if (auto st = CallArgs(e.get()); !st.ok()) return st;
    return e;
  }

  // "name" or "name(args)" applied to `subject` (null in a filter block).
  absl::StatusOr<ExprPtr> FilterCall(ExprPtr subject) {
    auto name = ExpectName();
    if (!name.ok()) return name.status();
    std::vector<ExprPtr> args;
    args.push_back(std::move(subject));
    ExprPtr e = Make(Expr::kFilter, std::move(args));
    e->name = *name;
    if (PeekOp("(")) {
      if (auto st = CallArgs(e.get()); !st.ok()) return st;
    }
    return e;
  }

  absl::StatusOr<ExprPtr> FilterExpr(ExprPtr node) {
    while (true) {
      if (SkipOp("|")) {
        auto f = FilterCall(std::move(node));
        if (!f.ok()) return f;
        node = std::move(*f);
      } else if (SkipName("is")) {
        const bool negated = SkipName("not");
        auto name = ExpectName();
        if (!name.ok()) return name.status();
        std::vector<ExprPtr> args;
        args.push_back(std::move(node));
        ExprPtr test = Make(Expr::kTest, std::move(args));
        test->name = *name;
        test->negated = negated;
        const Token* t = Peek();
        if (PeekOp("(")) {
          if (auto st = CallArgs(test.get()); !st.ok()) return st;
        } else if (t != nullptr &&
                   (t->type == Token::kName || t->type == Token::kString || t->type == Token::kInt ||
                    t->type == Token::kFloat || PeekOp("[") || PeekOp("{")) &&
                   !PeekName("else") && !PeekName("or") && !PeekName("and") && !PeekName("if")) {
          if (PeekName("is")) return Error(line_, "tests cannot be chained with 'is'");
          auto arg = Primary();
          if (!arg.ok()) return arg;
          auto post = Postfix(std::move(*arg));
          if (!post.ok()) return post;
          test->args.push_back(std::move(*post));
        }
        node = std::move(test);
      } else if (PeekOp("(")) {
        auto call = Call(std::move(node));
        if (!call.ok()) return call;
        node = std::move(*call);
      } else {
        return node;
      }
    }
  }

  std::vector<Item> items_;
  size_t at_ = 0;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int line_ = 1;
};

}  // namespace

absl::StatusOr<Body> ParseTemplate(absl::string_view source) {
  // Newlines as "\n"; one trailing newline dropped (keep_trailing_newline).
  std::string s;
  s.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      s.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      s.push_back(source[i]);
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  auto items = Lexer(std::move(s)).Run();
  if (!items.ok()) return items.status();
  return Parser(std::move(*items)).Run();
}

}  // namespace flover::jinja
