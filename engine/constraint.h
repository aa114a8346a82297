// Constrained decoding: a request may carry a constraint on its output (a
// list of choices, engine/choice_constraint.h; a JSON schema, regular
// expression, grammar or tool-call structure, engine/grammar_constraint.h;
// a special token and then one of those, engine/token_then_constraint.h). The engine asks the sequence's ConstraintState
// which tokens may come next and masks the rest before sampling, greedy or
// not (engine/logits_processors.h: ConstraintMask); each emitted token then
// advances the state (a SequenceObserver). End of sequence is allowed only
// where the output is complete, and a state that admits nothing more ends
// the sequence (finish reason stop). Everything depends on the sequence's
// own tokens only, so a constrained request's tokens equal its run alone.
// With speculative decoding, a step may advance a state by several tokens
// (a draft's rows verified one by one, each masked by the state after the
// rows before it).
#ifndef FLOVER_ENGINE_CONSTRAINT_H_
#define FLOVER_ENGINE_CONSTRAINT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace flover {

// Sets of tokens as bitmasks, the form AllowedNext gives: bit t % 32 of
// word t / 32 (xgrammar's own layout).
inline size_t TokenMaskWords(int vocab_size) { return (static_cast<size_t>(vocab_size) + 31) / 32; }
inline bool HasToken(const std::vector<uint32_t>& mask, int32_t t) {
  return static_cast<size_t>(t / 32) < mask.size() && ((mask[t / 32] >> (t % 32)) & 1) != 0;
}
inline void AddToken(std::vector<uint32_t>& mask, int32_t t) { mask[t / 32] |= 1u << (t % 32); }
inline void RemoveToken(std::vector<uint32_t>& mask, int32_t t) { mask[t / 32] &= ~(1u << (t % 32)); }

// One sequence's place in its constraint. Used on one thread at a time.
// The work (what may come next) is done when the state starts and in
// Accept, which the engine calls for all sequences of a step in parallel;
// the other members only read its result.
class ConstraintState {
 public:
  virtual ~ConstraintState() = default;
  // The tokens that may come next, as bits (bit t % 32 of word t / 32, at
  // least vocab_size bits). End-of-sequence tokens are decided by
  // Complete(), not here.
  virtual const std::vector<uint32_t>& AllowedNext() const = 0;
  // Whether the output so far satisfies the constraint (it may end here).
  virtual bool Complete() const = 0;
  // Whether some token may still follow.
  virtual bool CanContinue() const = 0;
  // Advances by an emitted token, one AllowedNext allowed, and works out
  // what may follow it. An error for a token it did not allow (the state
  // is unchanged, and failed() is true from then on).
  virtual absl::Status Accept(int32_t token) = 0;
  virtual bool failed() const = 0;
  // Bytes that every output allowed from here goes on with (a grammar's
  // fixed text, such as a schema's next key), or "" when there is a choice
  // or the constraint cannot tell: speculative decoding drafts their
  // tokens, which the model then verifies like any draft. Leaves the state
  // as it is.
  virtual std::string ForcedBytes() { return ""; }
};

// A constraint as compiled for a model's vocabulary: immutable, shared by
// every request that names the same one, from any thread.
class CompiledConstraint {
 public:
  virtual ~CompiledConstraint() = default;
  virtual int vocab_size() const = 0;
  virtual std::unique_ptr<ConstraintState> Start() const = 0;
};

}  // namespace flover

#endif  // FLOVER_ENGINE_CONSTRAINT_H_
