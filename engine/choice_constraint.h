// The simplest constraint: the output is exactly one of a list of strings
// (compared as bytes), spelled by any tokens whose bytes concatenate to it.
// TokenBytes is the vocabulary as bytes, built once per tokenizer; a choice
// is compiled against it, and only tokens that leave a remainder some
// tokens can still spell are allowed, so a sequence never reaches a dead
// end.
#ifndef FLOVER_ENGINE_CHOICE_CONSTRAINT_H_
#define FLOVER_ENGINE_CHOICE_CONSTRAINT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/constraint.h"
#include "tokenizer/tokenizer.h"

namespace flover {

// Each token's bytes (tokenizer.DecodeBytes), and the tokens of each byte
// string. Special tokens and tokens with no bytes never spell anything,
// except the special tokens whose text is one of `spelled` (a chat format's
// markers that its grammars hold, as Gemma 4's <|tool_call> and <|"|>): they
// spell their text, beside any ordinary tokens that spell it too.
class TokenBytes {
 public:
  explicit TokenBytes(const Tokenizer& tokenizer, const std::vector<std::string>& spelled = {});
  int vocab_size() const { return static_cast<int>(bytes_.size()); }
  const std::string& Of(int32_t id) const { return bytes_[id]; }
  // The tokens whose bytes are exactly `s` (null: none).
  const std::vector<int32_t>* TokensSpelling(absl::string_view s) const;
  size_t longest() const { return longest_; }

 private:
  std::vector<std::string> bytes_;
  absl::flat_hash_map<std::string, std::vector<int32_t>> by_bytes_;
  size_t longest_ = 0;
};

// Bounds on a request's choices.
inline constexpr int kMaxChoices = 256;
inline constexpr int kMaxChoiceBytes = 4096;

// InvalidArgument naming "choice" for an empty list, an empty or
// duplicated choice, past the bounds, or a choice no tokens spell.
absl::StatusOr<std::shared_ptr<const CompiledConstraint>> CompileChoices(
    const std::vector<std::string>& choices, std::shared_ptr<const TokenBytes> tokens);

}  // namespace flover

#endif  // FLOVER_ENGINE_CHOICE_CONSTRAINT_H_
