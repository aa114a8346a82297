// Verifying a sequence's drafts (speculative decoding), as its own unit: a
// step ran the sequence's last accepted token and the drafts after it (held
// apart from its accepted tokens), with logits for each row. SampleAndAccept
// samples the rows in order exactly as steps of one row each would have
// (the same generator, penalties over the tokens before the row, a
// constraint advanced row by row) and goes on to a draft's row only while
// the token sampled is that draft: the drafts that matched and the token
// after them stand (llama.cpp's common_sampler_sample_and_accept_n; vLLM
// keeps drafts apart in spec_token_ids). A row with no drafts is the plain
// case of one token. What the cache keeps of refused drafts is the cache
// manager's business (CacheManager::SettleDrafts).
#ifndef FLOVER_ENGINE_DRAFT_VERIFIER_H_
#define FLOVER_ENGINE_DRAFT_VERIFIER_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/types/span.h"
#include "engine/constraint.h"
#include "engine/sampler.h"

namespace flover {

// The tokens a sequence's rows gave, before they are emitted: one, or with
// drafts the drafts taken and the token after them.
struct SampledTokens {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<std::vector<std::pair<int32_t, float>>> top_logprobs;
  void Clear() {
    tokens.clear();
    logprobs.clear();
    top_logprobs.clear();
  }
  // Of the drafts verified, those that stood.
  int accepted() const { return static_cast<int>(tokens.size()) - 1; }
};

// One sequence's rows of a step's results: `rows` rows from `first_row`, of
// the step's logits ([rows, V] each, V = vocab) or, for a greedy step, of
// its best tokens.
struct StepRows {
  absl::Span<float> logits;  // empty for a greedy step
  absl::Span<const int32_t> best;
  int vocab = 0;
  int first_row = 0;
  int rows = 1;
};

// What sampling a sequence's rows reads and advances.
struct SequenceSampling {
  Sampler* sampler;
  absl::Span<const int32_t> tokens;  // accepted: the prompt and the output so far
  absl::Span<const int32_t> drafts;  // row j + 1 follows drafts[j] (at least rows - 1 of them)
  ConstraintState* constraint;       // null: none; advanced with every token taken
  bool logprobs;
  int top_logprobs;
  // Whether a token ends the output as EOS does (nothing may follow it).
  absl::FunctionRef<bool(int32_t)> ends_as_eos;
};

// Samples `rows` in order into *out (cleared first), stopping after a row
// whose token is not the draft that follows it, or ends the output (EOS,
// or a constraint that admits nothing more or refused the token).
// `history` is scratch the caller keeps (the tokens and drafts a row's
// penalties see, built only where drafts are verified).
void SampleAndAccept(const SequenceSampling& seq, const StepRows& rows, std::vector<int32_t>* history,
                     SampledTokens* out);

}  // namespace flover

#endif  // FLOVER_ENGINE_DRAFT_VERIFIER_H_
