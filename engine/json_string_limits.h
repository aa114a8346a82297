// Limits on the strings and arrays of a JSON constraint's output, enforced
// on top of its mask (engine/constraint.h): a grammar that allows any
// string or any number of items lets a small model repeat "1.1.1.1...",
// "1234567890..." or the same item under greedy decoding until max_tokens,
// and the JSON is never closed. The string limits apply to string values
// (not member names); all are off by default, and a request asks for them:
// - max_length: a string value holds at most this many characters (code
//   points; an escape counts as one); near the bound only tokens that keep
//   it, or close the string in time, are allowed;
// - max_repeats: a string value that ends with a unit of 1 to 32 bytes
//   repeated this many times in a row, over at least 16 bytes, is closed
//   at once ("1.1.1.1.1.1.1.1." with 4 repeats and more than 16 bytes);
// - max_item_repeats: an array whose last items are this many alike (the
//   same text) takes no more ("[1, 1, 1" with 3 may only close, or write
//   the item on into another).
// Where the grammar itself allows no token that would keep a limit (a
// minLength, a pattern or a format asks for more), the grammar's mask
// stands: the limits never leave a sequence without a next token.
#ifndef FLOVER_ENGINE_JSON_STRING_LIMITS_H_
#define FLOVER_ENGINE_JSON_STRING_LIMITS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/choice_constraint.h"
#include "engine/constraint.h"

namespace flover {

struct JsonStringLimits {
  int max_length = 0;   // 0: none
  int max_repeats = 0;       // 0: none
  int max_item_repeats = 0;  // 0: none
  bool any() const { return max_length > 0 || max_repeats > 0 || max_item_repeats > 0; }
};

// Bounds on what a request may ask.
inline constexpr int kMaxStringLengthLimit = 1 << 20;
inline constexpr int kMinStringRepeats = 2;
inline constexpr int kMaxStringRepeats = 64;

// What each token does inside a JSON string, worked out once per
// vocabulary: for each state an escape may leave the string in (none, after
// a backslash, after "\u" and 0-3 hex digits), the characters it adds
// before it closes the string (all of them if it does not), whether it
// closes it, and the longest string it opens and closes or leaves open
// after that.
class JsonStringTable {
 public:
  explicit JsonStringTable(const TokenBytes& tokens);
  static constexpr int kEscapeStates = 6;
  struct Effect {
    uint16_t before_close = 0;  // characters added to the open string
    uint16_t later = 0;         // characters of any string it opens after closing
    bool closes = false;
  };
  const Effect& Of(int32_t token, int escape) const { return effects_[token * kEscapeStates + escape]; }
  int vocab_size() const { return vocab_size_; }
  // The most characters one token adds to a string.
  int longest() const { return longest_; }

 private:
  int vocab_size_;
  int longest_ = 0;
  std::vector<Effect> effects_;
};

// `inner` (a constraint whose output is JSON) with `limits` on its string
// values; `inner` itself where limits.any() is false.
std::shared_ptr<const CompiledConstraint> WithJsonStringLimits(std::shared_ptr<const CompiledConstraint> inner,
                                                               std::shared_ptr<const TokenBytes> tokens,
                                                               std::shared_ptr<const JsonStringTable> table,
                                                               JsonStringLimits limits);

}  // namespace flover

#endif  // FLOVER_ENGINE_JSON_STRING_LIMITS_H_
