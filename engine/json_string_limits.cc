#include "engine/json_string_limits.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace flover {
namespace {

// Where JSON text is, byte by byte: in a string (a member name or a value),
// how many characters it holds and where an escape is; outside, in what
// containers and whether a member name comes next. The grammar makes the
// text JSON, so this never has to say what is wrong with it.
// The escape state after byte `c` inside a JSON string, from `escape`
// (0: none; 1: after '\'; 2-5: after "\u" and 0-3 hex digits).
int EscapeAfter(int escape, unsigned char c) {
  if (escape == 1) return c == 'u' ? 2 : 0;
  if (escape >= 2) return escape == 5 ? 0 : escape + 1;
  return c == '\\' ? 1 : 0;
}

struct JsonLexer {
  static constexpr size_t kMaxDepth = 4096;
  static constexpr size_t kMaxTail = 32 * kMaxStringRepeats;

  bool in_string = false, is_key = false, expect_key = false;
  int escape = 0;  // 0: none; 1: after '\'; 2-5: after "\u" and 0-3 hex digits
  int64_t chars = 0;
  std::string stack;  // '{' and '['
  std::string tail;   // the open string's last bytes (kMaxTail at most)
  // With items tracked (max_item_repeats): per open array, its item being
  // written, the last one finished and how many in a row were alike.
  struct Items {
    std::string current, last;
    int alike = 0;
  };
  bool track_items = false;
  std::vector<Items> arrays;  // one per '[' in `stack`

  void Step(unsigned char c) {
    if (track_items) Item(c);
    if (in_string) {
      if (escape == 0 && c == '"') {
        in_string = false;
        if (is_key) expect_key = false;
        return;
      }
      // A character's first byte counts (an escape counts at its '\').
      if (escape == 0 && (c & 0xC0) != 0x80) ++chars;
      escape = EscapeAfter(escape, c);
      tail.push_back(static_cast<char>(c));
      if (tail.size() > 2 * kMaxTail) tail.erase(0, tail.size() - kMaxTail);
      return;
    }
    switch (c) {
      case '"':
        in_string = true;
        is_key = expect_key && !stack.empty() && stack.back() == '{';
        escape = 0;
        chars = 0;
        tail.clear();
        break;
      case '{':
      case '[':
        if (stack.size() < kMaxDepth) stack.push_back(static_cast<char>(c));
        expect_key = c == '{';
        break;
      case '}':
      case ']':
        if (!stack.empty()) stack.pop_back();
        expect_key = false;
        break;
      case ',': expect_key = !stack.empty() && stack.back() == '{'; break;
      case ':': expect_key = false; break;
      default: break;
    }
  }
  bool in_value() const { return in_string && !is_key; }

  // The open arrays' item texts, before Step moves on: each byte is part
  // of the item every enclosing array is writing, except an array's own
  // '[', ',' and ']' (a nested array's are its enclosing items' text), and
  // spaces outside strings.
  void Item(unsigned char c) {
    auto append = [](Items& a, char b) {
      constexpr size_t kMaxItem = 4096;  // longer items are not compared
      if (a.current.size() < kMaxItem) a.current.push_back(b);
    };
    const bool outside = !in_string;
    const bool innermost_array = outside && !stack.empty() && stack.back() == '[';
    if (outside && c == '[') {
      for (Items& a : arrays) append(a, '[');
      arrays.push_back(Items());
      return;
    }
    if (innermost_array && c == ',' && !arrays.empty()) {
      for (size_t k = 0; k + 1 < arrays.size(); ++k) append(arrays[k], ',');
      Items& a = arrays.back();
      if (a.current == a.last) {
        ++a.alike;
      } else {
        a.last = a.current;
        a.alike = 1;
      }
      a.current.clear();
      return;
    }
    if (innermost_array && c == ']' && !arrays.empty()) {
      arrays.pop_back();
      for (Items& a : arrays) append(a, ']');
      return;
    }
    if (outside && (c == ' ' || c == '\n' || c == '\t' || c == '\r')) return;
    for (Items& a : arrays) append(a, static_cast<char>(c));
  }
  // Whether the innermost array's last item has come `repeats` - 1 times
  // in a row and the item being written may still be it again.
  bool MayRepeatItem(int repeats) const {
    if (arrays.empty() || arrays.back().alike < repeats - 1) return false;
    const Items& a = arrays.back();
    return a.last.compare(0, a.current.size(), a.current) == 0;
  }
  // Whether `bytes`, from here, finish the innermost array's item as the
  // last one again and go on past it (its ',').
  bool RepeatsItemWith(const std::string& bytes) const {
    const Items& a = arrays.back();
    std::string item = a.current;
    bool str = in_string;
    int esc = escape, depth = 0;  // depth below the array's own
    for (unsigned char c : bytes) {
      if (str) {
        if (esc == 0 && c == '"') {
          str = false;
        } else {
          esc = EscapeAfter(esc, c);
        }
        item.push_back(static_cast<char>(c));
        continue;
      }
      if (depth == 0 && c == ',') return item == a.last;
      if (depth == 0 && c == ']') return false;
      if (c == '[' || c == '{') ++depth;
      if (c == ']' || c == '}') --depth;
      if (c == '"') str = true;
      if (c != ' ' && c != '\n' && c != '\t' && c != '\r') item.push_back(static_cast<char>(c));
      if (item.size() > a.last.size()) return false;
    }
    return false;
  }
};

// Whether the open string's bytes end with a unit of 1-32 bytes repeated
// `repeats` times in a row, over at least 16 bytes.
bool EndsRepeating(const std::string& tail, int repeats) {
  constexpr size_t kMinRun = 16;
  for (size_t unit = 1; unit <= 32; ++unit) {
    const size_t run = std::max(kMinRun, unit * static_cast<size_t>(repeats));
    if (run > tail.size()) continue;
    const size_t start = tail.size() - run;
    bool periodic = true;
    for (size_t i = start + unit; i < tail.size() && periodic; ++i) periodic = tail[i] == tail[i - unit];
    if (periodic) return true;
  }
  return false;
}

class LimitedState final : public ConstraintState {
 public:
  LimitedState(std::unique_ptr<ConstraintState> inner, const TokenBytes& tokens, const JsonStringTable& table,
               JsonStringLimits limits)
      : inner_(std::move(inner)), tokens_(tokens), table_(table), limits_(limits) {
    lexer_.track_items = limits_.max_item_repeats > 0;
    Refresh();
  }
  const std::vector<uint32_t>& AllowedNext() const override {
    return narrowed_ ? mask_ : inner_->AllowedNext();
  }
  bool Complete() const override { return inner_->Complete(); }
  bool CanContinue() const override { return narrowed_ || inner_->CanContinue(); }
  bool failed() const override { return failed_ || inner_->failed(); }
  absl::Status Accept(int32_t token) override {
    if (failed_ || token < 0 || token >= table_.vocab_size() || !HasToken(AllowedNext(), token)) {
      failed_ = true;
      return absl::InvalidArgumentError(absl::StrCat("token ", token, " breaks the constraint"));
    }
    if (absl::Status s = inner_->Accept(token); !s.ok()) {
      failed_ = true;
      return s;
    }
    for (unsigned char c : tokens_.Of(token)) lexer_.Step(c);
    Refresh();
    return absl::OkStatus();
  }
  std::string ForcedBytes() override { return narrowed_ ? "" : inner_->ForcedBytes(); }

 private:
  // Whether `token`, from where the lexer is, keeps the limits.
  bool Keeps(int32_t token, bool close_now) const {
    if (lexer_.in_string) {
      const JsonStringTable::Effect& e = table_.Of(token, lexer_.escape);
      if (close_now) return e.closes && e.before_close == 0;
      const int64_t cap = limits_.max_length;
      if (!lexer_.is_key && !(lexer_.chars + e.before_close <= cap || (e.closes && e.before_close == 0))) {
        return false;
      }
      return !e.closes || e.later <= cap;
    }
    // Outside a string, with a bound shorter than some token: the token's
    // own strings, as the lexer reads them (its lexical state only: the
    // string's tail and the arrays' items are not this question's).
    JsonLexer copy;
    copy.in_string = lexer_.in_string;
    copy.is_key = lexer_.is_key;
    copy.expect_key = lexer_.expect_key;
    copy.escape = lexer_.escape;
    copy.chars = lexer_.chars;
    copy.stack = lexer_.stack;
    for (unsigned char c : tokens_.Of(token)) {
      copy.Step(c);
      if (copy.in_value() && copy.chars > limits_.max_length) return false;
    }
    return true;
  }

  void Refresh() {
    narrowed_ = false;
    if (failed()) return;
    const bool close_now = limits_.max_repeats > 0 && lexer_.in_value() && lexer_.escape == 0 &&
                           EndsRepeating(lexer_.tail, limits_.max_repeats);
    bool near = false;
    if (limits_.max_length > 0) {
      near = lexer_.in_string ? (lexer_.in_value() && lexer_.chars + table_.longest() > limits_.max_length)
                              : table_.longest() > limits_.max_length;
    }
    const bool no_more_items = limits_.max_item_repeats > 0 && lexer_.MayRepeatItem(limits_.max_item_repeats);
    if (!close_now && !near && !no_more_items) return;
    const std::vector<uint32_t>& allowed = inner_->AllowedNext();
    mask_.assign(allowed.size(), 0);
    bool any = false;
    for (size_t w = 0; w < allowed.size(); ++w) {
      for (uint32_t bits = allowed[w]; bits != 0; bits &= bits - 1) {
        const int32_t t = static_cast<int32_t>(w * 32 + __builtin_ctz(bits));
        if (t >= table_.vocab_size()) continue;
        if (no_more_items && lexer_.RepeatsItemWith(tokens_.Of(t))) continue;
        if ((close_now || near) && !Keeps(t, close_now)) continue;
        mask_[w] |= 1u << (t % 32);
        any = true;
      }
    }
    narrowed_ = any;  // none kept: the grammar's own mask stands
  }

  std::unique_ptr<ConstraintState> inner_;
  const TokenBytes& tokens_;
  const JsonStringTable& table_;
  JsonStringLimits limits_;
  JsonLexer lexer_;
  std::vector<uint32_t> mask_;
  bool narrowed_ = false, failed_ = false;
};

class LimitedConstraint final : public CompiledConstraint {
 public:
  LimitedConstraint(std::shared_ptr<const CompiledConstraint> inner, std::shared_ptr<const TokenBytes> tokens,
                    std::shared_ptr<const JsonStringTable> table, JsonStringLimits limits)
      : inner_(std::move(inner)), tokens_(std::move(tokens)), table_(std::move(table)), limits_(limits) {}
  int vocab_size() const override { return inner_->vocab_size(); }
  std::unique_ptr<ConstraintState> Start() const override {
    return std::make_unique<LimitedState>(inner_->Start(), *tokens_, *table_, limits_);
  }

 private:
  std::shared_ptr<const CompiledConstraint> inner_;
  std::shared_ptr<const TokenBytes> tokens_;
  std::shared_ptr<const JsonStringTable> table_;
  JsonStringLimits limits_;
};

}  // namespace

JsonStringTable::JsonStringTable(const TokenBytes& tokens)
    : vocab_size_(tokens.vocab_size()), effects_(static_cast<size_t>(tokens.vocab_size()) * kEscapeStates) {
  for (int32_t t = 0; t < vocab_size_; ++t) {
    for (int e = 0; e < kEscapeStates; ++e) {
      JsonLexer lexer;
      lexer.in_string = true;
      lexer.escape = e;
      Effect& effect = effects_[static_cast<size_t>(t) * kEscapeStates + e];
      int64_t later = 0;
      for (unsigned char c : tokens.Of(t)) {
        const bool was_in = lexer.in_string;
        lexer.Step(c);
        if (!effect.closes) {
          if (was_in && !lexer.in_string) {
            effect.closes = true;
          } else {
            effect.before_close = static_cast<uint16_t>(std::min<int64_t>(lexer.chars, UINT16_MAX));
          }
          continue;
        }
        if (lexer.in_string) later = std::max(later, lexer.chars);
      }
      effect.later = static_cast<uint16_t>(std::min<int64_t>(later, UINT16_MAX));
      longest_ = std::max<int>(longest_, std::max(effect.before_close, effect.later));
    }
  }
}

std::shared_ptr<const CompiledConstraint> WithJsonStringLimits(std::shared_ptr<const CompiledConstraint> inner,
                                                               std::shared_ptr<const TokenBytes> tokens,
                                                               std::shared_ptr<const JsonStringTable> table,
                                                               JsonStringLimits limits) {
  if (!limits.any()) return inner;
  return std::make_shared<LimitedConstraint>(std::move(inner), std::move(tokens), std::move(table), limits);
}

}  // namespace flover
