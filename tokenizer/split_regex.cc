#include "tokenizer/split_regex.h"

#include <algorithm>
#include <cctype>
#include <limits>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tokenizer/unicode.h"

namespace flover {
namespace {

// Property sets a class may hold.
constexpr uint32_t kPropLetter = 1, kPropNumber = 2, kPropSpace = 4, kPropNotLetter = 8,
                   kPropNotNumber = 16, kPropNotSpace = 32, kPropPunctuation = 64,
                   kPropNotPunctuation = 128, kPropMark = 256, kPropNotMark = 512,
                   // The letters' categories, \p{Lu} ... \p{Lo} (o200k's pattern).
                   kPropUpper = 1024, kPropLower = 2048, kPropTitle = 4096, kPropModifier = 8192,
                   kPropOtherLetter = 16384;

// The longest quantifier range allowed on a group (each iteration of a group
// is one level of recursion while matching).
constexpr int kMaxGroupRepeat = 16;

// Simple case folding for the letters the tokenizers' patterns spell.
char32_t Fold(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + ('a' - 'A');
  if (c == 0x17F) return 's';   // LATIN SMALL LETTER LONG S
  if (c == 0x212A) return 'k';  // KELVIN SIGN
  return c;
}

bool HasProps(uint32_t props, char32_t c) {
  return ((props & kPropLetter) && IsLetter(c)) || ((props & kPropNumber) && IsNumber(c)) ||
         ((props & kPropSpace) && IsSpace(c)) || ((props & kPropNotLetter) && !IsLetter(c)) ||
         ((props & kPropNotNumber) && !IsNumber(c)) || ((props & kPropNotSpace) && !IsSpace(c)) ||
         ((props & kPropPunctuation) && IsPunctuation(c)) ||
         ((props & kPropNotPunctuation) && !IsPunctuation(c)) ||
         ((props & kPropMark) && IsMark(c)) || ((props & kPropNotMark) && !IsMark(c)) ||
         ((props & kPropUpper) && IsLetterOf(LetterCategory::kUpper, c)) ||
         ((props & kPropLower) && IsLetterOf(LetterCategory::kLower, c)) ||
         ((props & kPropTitle) && IsLetterOf(LetterCategory::kTitle, c)) ||
         ((props & kPropModifier) && IsLetterOf(LetterCategory::kModifier, c)) ||
         ((props & kPropOtherLetter) && IsLetterOf(LetterCategory::kOther, c));
}

}  // namespace

// Recursive descent over the pattern's code points.
class SplitRegex::Parser {
 public:
  Parser(const std::vector<Utf8Char>& cps, std::vector<Node>* nodes) : p_(cps), nodes_(*nodes) {}

  absl::StatusOr<int> Parse() {
    auto root = Alternation(false);
    if (!root.ok()) return root;
    if (i_ < p_.size()) return Error("unbalanced ')'");
    return root;
  }

 private:
  bool AtEnd() const { return i_ >= p_.size(); }
  char32_t Peek(size_t ahead = 0) const {
    return i_ + ahead < p_.size() ? p_[i_ + ahead].cp : 0;
  }
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("split pattern: ", what, " at offset ", AtEnd() ? p_.empty() ? 0 : p_.back().end
                                                                      : p_[i_].begin));
  }
  int Add(Node n) {
    nodes_.push_back(std::move(n));
    return static_cast<int>(nodes_.size()) - 1;
  }

  absl::StatusOr<int> Alternation(bool icase) {
    Node alt;
    alt.kind = Node::kAlt;
    while (true) {
      auto branch = Sequence(icase);
      if (!branch.ok()) return branch;
      alt.kids.push_back(*branch);
      if (AtEnd() || Peek() != '|') break;
      ++i_;
    }
    if (alt.kids.size() == 1) return alt.kids[0];
    return Add(std::move(alt));
  }

  absl::StatusOr<int> Sequence(bool icase) {
    Node seq;
    seq.kind = Node::kConcat;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      auto atom = Atom(icase);
      if (!atom.ok()) return atom;
      auto rep = Quantified(*atom);
      if (!rep.ok()) return rep;
      seq.kids.push_back(*rep);
    }
    if (seq.kids.size() == 1) return seq.kids[0];
    if (seq.kids.empty()) return Add(Node{});
    return Add(std::move(seq));
  }

  // Reads a decimal number; false if none.
  bool Number(int* out) {
    if (AtEnd() || Peek() < '0' || Peek() > '9') return false;
    int64_t v = 0;
    while (!AtEnd() && Peek() >= '0' && Peek() <= '9') {
      v = std::min<int64_t>(v * 10 + (Peek() - '0'), std::numeric_limits<int>::max());
      ++i_;
    }
    *out = static_cast<int>(v);
    return true;
  }

  absl::StatusOr<int> Quantified(int atom) {
    if (AtEnd()) return atom;
    int min, max;
    const char32_t q = Peek();
    if (q == '?') {
      min = 0, max = 1;
      ++i_;
    } else if (q == '*') {
      min = 0, max = -1;
      ++i_;
    } else if (q == '+') {
      min = 1, max = -1;
      ++i_;
    } else if (q == '{') {
      // {n} {n,} {n,m} {,m}; anything else is a literal "{", as in Oniguruma.
      const size_t save = i_++;
      const bool has_min = Number(&min);
      if (!has_min) min = 0;
      max = min;
      if (Peek() == ',') {
        ++i_;
        if (!Number(&max)) max = -1;
      }
      if (!has_min && max < 0) {
        i_ = save;
        return atom;
      }
      if (Peek() != '}') {
        i_ = save;
        return atom;
      }
      ++i_;
      if (max >= 0 && max < min) return Error("quantifier {n,m} with m < n");
    } else {
      return atom;
    }
    if (!AtEnd() && (Peek() == '?' || Peek() == '+')) {
      return Error("lazy and possessive quantifiers are not supported");
    }
    const Node::Kind k = nodes_[atom].kind;
    const bool single = k == Node::kChar || k == Node::kClass || k == Node::kAny;
    if (!single && (max < 0 || max > kMaxGroupRepeat)) {
      return Error(absl::StrCat("a quantifier on a group may repeat at most ", kMaxGroupRepeat,
                                " times"));
    }
    Node rep;
    rep.kind = Node::kRepeat;
    rep.kids = {atom};
    rep.min = min;
    rep.max = max;
    return Add(std::move(rep));
  }

  absl::StatusOr<int> Atom(bool icase) {
    const char32_t c = Peek();
    if (c == '(') return Group(icase);
    if (c == '[') return Class(icase);
    if (c == '.') {
      ++i_;
      Node n;
      n.kind = Node::kAny;
      return Add(std::move(n));
    }
    if (c == '^' || c == '$') return Error("anchors are not supported");
    if (c == '*' || c == '+' || c == '?') return Error("quantifier without an operand");
    if (c == '\\') {
      Node n;
      auto st = Escape(&n, /*in_class=*/false);
      if (!st.ok()) return st;
      n.icase = icase;
      return Add(std::move(n));
    }
    ++i_;
    Node n;
    n.kind = Node::kChar;
    n.ch = c;
    n.icase = icase;
    return Add(std::move(n));
  }

  absl::StatusOr<int> Group(bool icase) {
    ++i_;  // '('
    bool look = false, negative = false;
    if (Peek() == '?') {
      const char32_t k = Peek(1);
      if (k == ':') {
        i_ += 2;
      } else if (k == '=' || k == '!') {
        look = true;
        negative = k == '!';
        i_ += 2;
      } else if (k == 'i' && Peek(2) == ':') {
        icase = true;
        i_ += 3;
      } else {
        ++i_;
        return Error("this group kind is not supported (only (?: (?i: (?= (?!)");
      }
    }
    auto inner = Alternation(icase);
    if (!inner.ok()) return inner;
    if (AtEnd() || Peek() != ')') return Error("missing ')'");
    ++i_;
    if (!look) return inner;
    Node n;
    n.kind = Node::kLook;
    n.kids = {*inner};
    n.negative = negative;
    return Add(std::move(n));
  }

  // A class item or atom after '\'; sets n to a kChar or a kClass.
  absl::Status Escape(Node* n, bool in_class) {
    ++i_;  // '\'
    if (AtEnd()) return Error("pattern ends with '\\'");
    const char32_t e = Peek();
    ++i_;
    auto literal = [&](char32_t c) {
      n->kind = Node::kChar;
      n->ch = c;
      return absl::OkStatus();
    };
    auto prop = [&](uint32_t bit) {
      n->kind = Node::kClass;
      n->props |= bit;
      return absl::OkStatus();
    };
    switch (e) {
      case 'r': return literal('\r');
      case 'n': return literal('\n');
      case 't': return literal('\t');
      case 'f': return literal('\f');
      case 'v': return literal('\v');
      case 's': return prop(kPropSpace);
      case 'S': return prop(kPropNotSpace);
      case 'p':
      case 'P': {
        if (Peek() != '{') return Error("\\p needs {Name}");
        ++i_;
        std::string name;
        while (!AtEnd() && Peek() != '}') AppendUtf8(p_[i_++].cp, &name);
        if (AtEnd()) return Error("unterminated \\p{");
        ++i_;
        const bool neg = e == 'P';
        if (name == "L") return prop(neg ? kPropNotLetter : kPropLetter);
        if (name == "N") return prop(neg ? kPropNotNumber : kPropNumber);
        if (name == "P") return prop(neg ? kPropNotPunctuation : kPropPunctuation);
        if (name == "M") return prop(neg ? kPropNotMark : kPropMark);
        for (auto [category, bit] : {std::pair{"Lu", kPropUpper}, std::pair{"Ll", kPropLower},
                                     std::pair{"Lt", kPropTitle}, std::pair{"Lm", kPropModifier},
                                     std::pair{"Lo", kPropOtherLetter}}) {
          if (name != category) continue;
          if (neg) return Error(absl::StrCat("\\P{", name, "} is not supported"));
          return prop(bit);
        }
        return Error(absl::StrCat("Unicode property \\p{", name, "} is not supported"));
      }
      case 'x':
      case 'u': {
        const bool braced = e == 'x' && Peek() == '{';
        if (braced) ++i_;
        const int digits = braced ? 8 : (e == 'x' ? 2 : 4);
        uint32_t v = 0;
        int got = 0;
        while (got < digits && !AtEnd()) {
          const char32_t h = Peek();
          int d = h >= '0' && h <= '9'   ? h - '0'
                  : h >= 'a' && h <= 'f' ? h - 'a' + 10
                  : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                         : -1;
          if (d < 0) break;
          v = v * 16 + d;
          ++got, ++i_;
        }
        if (braced) {
          if (Peek() != '}') return Error("unterminated \\x{");
          ++i_;
        }
        if (got == 0 || (!braced && got != digits) || v > 0x10FFFF) {
          return Error("bad hexadecimal escape");
        }
        return literal(v);
      }
      default:
        break;
    }
    if ((e < 0x80 && (std::isalnum(static_cast<int>(e)) != 0)) || (in_class && e == 'b')) {
      return Error(absl::StrCat("escape \\", std::string(1, static_cast<char>(e)),
                                " is not supported"));
    }
    return literal(e);  // escaped punctuation or a non-ASCII character
  }

  absl::StatusOr<int> Class(bool icase) {
    ++i_;  // '['
    Node n;
    n.kind = Node::kClass;
    n.icase = icase;
    if (Peek() == '^') {
      n.negated = true;
      ++i_;
    }
    bool first = true;
    while (true) {
      if (AtEnd()) return Error("unterminated character class");
      char32_t c = Peek();
      if (c == ']' && !first) {
        ++i_;
        break;
      }
      first = false;
      if (c == '[') return Error("nested classes and class operations are not supported");
      char32_t lo;
      if (c == '\\') {
        Node item;
        auto st = Escape(&item, /*in_class=*/true);
        if (!st.ok()) return st;
        if (item.kind == Node::kClass) {
          n.props |= item.props;
          continue;
        }
        lo = item.ch;
      } else {
        lo = c;
        ++i_;
      }
      char32_t hi = lo;
      if (Peek() == '-' && i_ + 1 < p_.size() && Peek(1) != ']') {
        ++i_;
        if (Peek() == '\\') {
          Node item;
          auto st = Escape(&item, /*in_class=*/true);
          if (!st.ok()) return st;
          if (item.kind != Node::kChar) return Error("a range must end in a character");
          hi = item.ch;
        } else {
          hi = Peek();
          ++i_;
        }
        if (hi < lo) return Error("class range out of order");
      }
      n.ranges.emplace_back(lo, hi);
    }
    return Add(std::move(n));
  }

  const std::vector<Utf8Char>& p_;
  std::vector<Node>& nodes_;
  size_t i_ = 0;
};

absl::StatusOr<SplitRegex> SplitRegex::Compile(absl::string_view pattern) {
  auto cps = DecodeUtf8(pattern);
  if (!cps.ok()) return absl::InvalidArgumentError(absl::StrCat("split pattern: ", cps.status().message()));
  SplitRegex re;
  re.pattern_ = std::string(pattern);
  Parser parser(*cps, &re.nodes_);
  auto root = parser.Parse();
  if (!root.ok()) return root.status();
  re.root_ = *root;
  if (re.Nullable(re.root_)) {
    // Oniguruma would report empty matches, which split text at no
    // character; no tokenizer's pattern has them, so they are refused.
    return absl::InvalidArgumentError(
        absl::StrCat("split pattern ", pattern, " can match the empty string"));
  }
  return re;
}

bool SplitRegex::Nullable(int id) const {
  const Node& n = nodes_[id];
  switch (n.kind) {
    case Node::kEmpty:
    case Node::kLook:
      return true;
    case Node::kChar:
    case Node::kClass:
    case Node::kAny:
      return false;
    case Node::kConcat:
      return std::all_of(n.kids.begin(), n.kids.end(), [&](int k) { return Nullable(k); });
    case Node::kAlt:
      return std::any_of(n.kids.begin(), n.kids.end(), [&](int k) { return Nullable(k); });
    case Node::kRepeat:
      return n.min == 0 || Nullable(n.kids[0]);
  }
  return true;
}

// Continuation-passing backtracking: Match(node, i, k) is true when `node`
// matches text[i, j) for some j, tried in the pattern's preference order,
// with k(j) true.
class SplitRegex::Matcher {
 public:
  using Cont = absl::FunctionRef<bool(size_t)>;

  Matcher(const std::vector<Node>& nodes, absl::Span<const char32_t> text, int64_t budget)
      : nodes_(nodes), t_(text), budget_(budget) {}

  bool exhausted() const { return budget_ < 0; }

  bool Match(int id, size_t i, Cont k) {
    if (--budget_ < 0) return false;
    const Node& n = nodes_[id];
    switch (n.kind) {
      case Node::kEmpty:
        return k(i);
      case Node::kChar:
      case Node::kClass:
      case Node::kAny:
        return i < t_.size() && One(n, t_[i]) && k(i + 1);
      case Node::kConcat:
        return Seq(n, 0, i, k);
      case Node::kAlt:
        for (int kid : n.kids) {
          if (Match(kid, i, k)) return true;
          if (budget_ < 0) return false;
        }
        return false;
      case Node::kRepeat:
        return Repeat(n, i, k);
      case Node::kLook: {
        const bool found = Match(n.kids[0], i, [](size_t) { return true; });
        if (budget_ < 0) return false;
        return found != n.negative && k(i);
      }
    }
    return false;
  }

 private:
  bool One(const Node& n, char32_t c) const {
    if (n.kind == Node::kAny) return c != '\n';
    if (n.kind == Node::kChar) return n.icase ? Fold(c) == Fold(n.ch) : c == n.ch;
    bool in = HasProps(n.props, c);
    const char32_t f = n.icase ? Fold(c) : c;
    for (size_t r = 0; !in && r < n.ranges.size(); ++r) {
      const auto& [lo, hi] = n.ranges[r];
      in = (c >= lo && c <= hi) || (n.icase && f >= Fold(lo) && f <= Fold(hi));
    }
    return in != n.negated;
  }

  bool Seq(const Node& n, size_t from, size_t i, Cont k) {
    if (from == n.kids.size()) return k(i);
    return Match(n.kids[from], i, [&](size_t j) { return Seq(n, from + 1, j, k); });
  }

  bool Repeat(const Node& n, size_t i, Cont k) {
    const Node& kid = nodes_[n.kids[0]];
    const size_t max = n.max < 0 ? t_.size() - i : static_cast<size_t>(n.max);
    if (kid.kind == Node::kChar || kid.kind == Node::kClass || kid.kind == Node::kAny) {
      // Greedy over single characters: the longest run, then give back.
      size_t run = 0;
      while (run < max && i + run < t_.size() && One(kid, t_[i + run])) ++run;
      budget_ -= static_cast<int64_t>(run);
      for (size_t c = run + 1; c-- > static_cast<size_t>(n.min);) {
        if (k(i + c)) return true;
        if (--budget_ < 0) return false;
      }
      return false;
    }
    return Iterate(n, 0, max, i, k);
  }

  // A group repeated (bounded by the parser to kMaxGroupRepeat levels).
  bool Iterate(const Node& n, size_t count, size_t max, size_t i, Cont k) {
    if (count < max && Match(n.kids[0], i, [&](size_t j) {
          // Once the minimum is met, an iteration that matched nothing ends
          // the loop (Oniguruma's empty-loop check).
          if (j == i && count >= static_cast<size_t>(n.min)) return false;
          return Iterate(n, count + 1, max, j, k);
        })) {
      return true;
    }
    return count >= static_cast<size_t>(n.min) && k(i);
  }

  const std::vector<Node>& nodes_;
  absl::Span<const char32_t> t_;
  int64_t budget_;
};

absl::StatusOr<bool> SplitRegex::Find(absl::Span<const char32_t> text, size_t from,
                                      size_t* begin, size_t* end) const {
  // Linear patterns (all the tokenizers' ones) take a few steps per code
  // point; the budget allows far more, and stops catastrophic backtracking.
  const int64_t budget = 4096 + 64 * static_cast<int64_t>(text.size() - std::min(from, text.size())) *
                                    static_cast<int64_t>(nodes_.size());
  Matcher m(nodes_, text, budget);
  for (size_t s = from; s < text.size(); ++s) {
    size_t match_end = s;
    const bool found = m.Match(root_, s, [&](size_t j) {
      if (j == s) return false;  // empty matches are not splits
      match_end = j;
      return true;
    });
    if (m.exhausted()) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "split pattern %s backtracks too much on this text (%d code points)", pattern_,
          text.size()));
    }
    if (found) {
      *begin = s;
      *end = match_end;
      return true;
    }
  }
  return false;
}

}  // namespace flover
