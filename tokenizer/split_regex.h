// The regular expressions tokenizer.json files split text with (the GPT-2,
// Llama 3, Qwen 2 and Qwen3.5 pre-tokenizer patterns and others of their
// kind), as a small backtracking matcher over Unicode code points with the
// semantics of Oniguruma, which the `tokenizers` library uses: leftmost-first
// alternation, greedy quantifiers, lookahead.
//
// Supported: literals and escapes (\r \n \t \f \v \x{..} \uXXXX, escaped
// punctuation), ".", classes [...] / [^...] with ranges, \p{L} \p{M} \p{N} \p{P}
// \s and their negations \P{L} \P{M} \P{N} \P{P} \S (inside and outside
// classes; \p{M}, the combining marks, for Qwen3.5's pattern), the letter
// categories \p{Lu} \p{Ll} \p{Lt} \p{Lm} \p{Lo} (o200k's), groups (...)
// (?:...) (?i:...), lookahead (?=...) (?!...), alternation, and the greedy
// quantifiers ? * + {n} {n,} {n,m}. A quantifier on a group is limited to
// {0,1} ... {n,m} with m <= 16. Case-insensitive matching folds ASCII letters
// and the two non-ASCII letters that fold to them (U+017F to s, U+212A to k).
// Anything else (other properties, \d \w, anchors, lazy or possessive
// quantifiers, lookbehind, back-references) is refused when compiled, with
// the offset of the construct, and so is a pattern that can match the empty
// string.
#ifndef FLOVER_TOKENIZER_SPLIT_REGEX_H_
#define FLOVER_TOKENIZER_SPLIT_REGEX_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace flover {

class SplitRegex {
 public:
  static absl::StatusOr<SplitRegex> Compile(absl::string_view pattern);

  // The first non-empty match starting at or after `from` in `text` (code
  // points): true with [*begin, *end), or false when there is none.
  // ResourceExhausted if matching takes more than a budget linear in the
  // text's length (a pattern that backtracks catastrophically on this text).
  absl::StatusOr<bool> Find(absl::Span<const char32_t> text, size_t from, size_t* begin,
                            size_t* end) const;

  const std::string& pattern() const { return pattern_; }

 private:
  class Parser;
  class Matcher;
  bool Nullable(int node) const;

  // One node of the parsed expression; children are indices into nodes_.
  struct Node {
    enum Kind { kEmpty, kChar, kClass, kAny, kConcat, kAlt, kRepeat, kLook };
    Kind kind = kEmpty;
    char32_t ch = 0;     // kChar
    bool icase = false;  // kChar, kClass: fold case
    // kClass: code point ranges and property sets, possibly negated as a whole.
    std::vector<std::pair<char32_t, char32_t>> ranges;
    uint32_t props = 0;  // bits of kProp* in split_regex.cc
    bool negated = false;
    std::vector<int> kids;  // kConcat, kAlt; kRepeat and kLook have one
    int min = 0, max = 0;   // kRepeat; max < 0: unbounded
    bool negative = false;  // kLook: (?!...)
  };

  std::string pattern_;
  std::vector<Node> nodes_;
  int root_ = -1;
};

}  // namespace flover

#endif  // FLOVER_TOKENIZER_SPLIT_REGEX_H_
